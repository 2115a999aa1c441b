#pragma once
// Several runs on one chart: test accuracy, test loss or training loss against time or
// version, one series per run, each named by the settings in which it differs from the
// others (rule, α, learning rate, workers…). Exports the chart as PNG and the curves as CSV.
//
// Threads: UI thread. The runs' histories come from the RunCatalog, read on pool threads.

#include "ui/RunCatalog.h"

#include <QWidget>

#include <functional>
#include <map>

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QLineSeries;
class QValueAxis;

namespace flotilla::ui {

class ComparisonWindow : public QWidget
{
    Q_OBJECT

public:
    // The test score (accuracy, or the runs' task's: R², mean F1…), the test loss, the training
    // loss; then, as the runs' histories arrive, every named metric they hold (metric(name)).
    enum class Metric { TestAccuracy, TestLoss, TrainingLoss, Named };
    enum class Axis { Time, Version };

    ComparisonWindow(RunCatalog *catalog, const QList<RunSummary> &runs, QWidget *parent = nullptr);

    void setMetric(Metric metric);
    // A named metric of the evaluations ("rmse", "top5_accuracy", "f1/cat"); false when no
    // run has it.
    bool setNamedMetric(const QString &name);
    QStringList namedMetrics() const { return m_named; }
    void setAxis(Axis axis);
    // Whether every run's history has arrived (or failed to).
    bool loaded() const { return m_pending == 0; }
    QChart *chart() const { return m_chart; }
    QChartView *chartView() const { return m_view; }
    // The series drawn, one per run whose history could be read, in the order of the runs.
    QList<QLineSeries *> series() const { return m_series; }
    QString note() const;

    Result<void> exportPng(const QString &path) const;
    // Long format: run, settings, series, version, seconds, value; one row per point of every
    // run's evaluations and assimilations (the raw training loss, not its average).
    Result<void> exportCsv(const QString &path) const;


Q_SIGNALS:
    void allLoaded();

private:
    void onHistory(const QString &dir, const History &history);
    void onFailure(const QString &dir, const QString &message);
    void rebuild();

    RunCatalog *m_catalog;
    QList<RunSummary> m_runs;
    QList<QStringList> m_differences;
    std::map<QString, History> m_histories;
    QStringList m_failures;
    int m_pending = 0;
    Metric m_metric = Metric::TestAccuracy;
    QStringList m_named;   // the named metrics the loaded runs hold, in the order first seen
    QString m_namedMetric; // with Metric::Named
    Axis m_axis = Axis::Time;
    QChart *m_chart = nullptr;
    QChartView *m_view = nullptr;
    QValueAxis *m_x = nullptr;
    QValueAxis *m_y = nullptr;
    QComboBox *m_metricBox = nullptr;
    QComboBox *m_axisBox = nullptr;
    QLabel *m_note = nullptr;
    QList<QLineSeries *> m_series;
};

} // namespace flotilla::ui
