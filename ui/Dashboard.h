#pragma once
// The live dashboard: loss and test accuracy (against time or version), the staleness of
// every assimilation and its histogram, workers online with joins, preemptions and
// departures marked, cumulative cost at spot and on-demand prices, and throughput.
//
// Threads: UI thread only; fed by the session's signals.

#include "job/SessionTypes.h"

#include "common/Result.h"

#include <QHash>
#include <QMap>
#include <QWidget>

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QLineSeries;
class QScatterSeries;
class QBarSet;
class QBarCategoryAxis;
class QValueAxis;
class QXYSeries;

namespace flotilla::ui {

class Dashboard : public QWidget
{
    Q_OBJECT

public:
    explicit Dashboard(QWidget *parent = nullptr);

    void reset();
    void loadHistory(const History &history);
    void addAssimilation(const AssimilationRecord &p);
    void addEvaluation(const EvaluationRecord &p);
    // The job's score as its task names it (job/Tasks.h): "accuracy" is drawn in percent,
    // any other (R², mean F1) × 100 on the same axis.
    void setScore(const QString &task);
    // The last evaluation as the line above the loss chart shows it: its epoch, score, loss and
    // the task's metrics (each label's or class's in its tooltip).
    QString lastEvaluationText() const;
    QString lastEvaluationDetails() const;
    void addCost(const CostPoint &p);
    void addEvent(const EventRecord &e);
    void addSnapshot(const Snapshot &s);

    // Whether nothing has been drawn yet (no point on any chart).
    bool isEmpty() const;
    QStringList chartNames() const;
    QChartView *chartView(int index) const;
    // Whether every chart has at least one point (for tests and screenshots).
    bool everyChartHasData() const;
    Result<void> exportChart(int index, const QString &path) const;

private:
    QChartView *makeView(QChart *chart);
    void rebuildLossChart();
    // The loss line's point for an assimilation (rebuilding the loss chart adds only these).
    void addLossPoint(const AssimilationRecord &p);
    // A point on a series: at once, or, while a history loads, queued for its end.
    void plot(QXYSeries *series, double x, double y);
    // Draws the assimilations' and costs' points queued since the last time.
    void flushAssimilations();
    void extend(QValueAxis *axis, double value, bool integer = false);
    // Where a moment goes on the time axes, in their unit (seconds, minutes or hours since
    // the job started, whichever reads best for the time the job has run so far).
    double timeX(qint64 atMs);
    void fitTimeUnit(double seconds);
    QString timeTitle() const;
    QList<QValueAxis *> timeAxes() const;

    // Milliseconds per unit of the time axes: 1000 (seconds), 60000 (minutes) or 3600000
    // (hours); it only grows during a job, and the points drawn so far are rescaled with it.
    double m_msPerUnit = 1000.0;

    qint64 m_originMs = 0;
    bool m_replaying = false;
    bool m_haveSnapshot = false;
    QMap<QValueAxis *, double> m_axisMax;
    QList<QChartView *> m_views;
    QComboBox *m_lossAxis = nullptr;

    // Loss and accuracy, kept raw so the x axis can switch between time and version.
    QList<AssimilationRecord> m_assimilations;
    QList<EvaluationRecord> m_evaluations;
    QLineSeries *m_loss = nullptr;
    QLineSeries *m_accuracy = nullptr;
    QValueAxis *m_lossX = nullptr;
    QValueAxis *m_lossY = nullptr;
    QValueAxis *m_accuracyY = nullptr;
    QChart *m_lossChart = nullptr;
    QLabel *m_lastEvaluation = nullptr;
    QString m_scoreName = QStringLiteral("accuracy");
    bool m_scorePercent = true;
    double m_lossEma = -1.0;

    QScatterSeries *m_staleness = nullptr;
    QValueAxis *m_stalenessX = nullptr;
    QValueAxis *m_stalenessY = nullptr;
    QBarSet *m_histogram = nullptr;
    QValueAxis *m_histogramY = nullptr;
    QList<int> m_histogramCounts;
    // A large fleet assimilates tens of times a second, and Qt Charts lays a whole series out
    // again for every point appended: those points are queued and drawn a few times a second.
    QList<QPointF> m_pendingLoss;
    QList<QPointF> m_pendingStaleness;
    QList<QPointF> m_pendingSpot;
    QList<QPointF> m_pendingOnDemand;
    QList<QPointF> m_pendingPaid;
    bool m_histogramDirty = false;
    bool m_loading = false;
    QHash<QXYSeries *, QList<QPointF>> m_loadQueue;
    class QTimer *m_flushTimer = nullptr;

    QLineSeries *m_online = nullptr;
    QScatterSeries *m_joins = nullptr;
    QScatterSeries *m_preemptions = nullptr;
    QScatterSeries *m_departures = nullptr;
    QValueAxis *m_churnX = nullptr;
    QValueAxis *m_churnY = nullptr;
    int m_lastOnline = 0;

    QLineSeries *m_spot = nullptr;
    QLineSeries *m_onDemand = nullptr;
    QLineSeries *m_paid = nullptr;
    QValueAxis *m_costX = nullptr;
    QValueAxis *m_costY = nullptr;
    QChart *m_costChart = nullptr;

    QLineSeries *m_fleetThroughput = nullptr;
    QMap<qint64, QLineSeries *> m_workerThroughput;
    QChart *m_throughputChart = nullptr;
    QValueAxis *m_throughputX = nullptr;
    QValueAxis *m_throughputY = nullptr;
};

} // namespace flotilla::ui
