#pragma once
// The runs view: every run this control center knows, with its state, rule, model, data set,
// best accuracy, wall time, cost and savings. Open one to see its dashboard from its store;
// select two or more to compare them; rename, delete, or add a run folder from elsewhere.
// Also the window a run opens in (RunWindow).
//
// Threads: UI thread; the catalog reads the stores on pool threads.

#include "ui/RunCatalog.h"

#include <QElapsedTimer>
#include <QPointer>
#include <QWidget>

#include <functional>
#include <map>

class QLabel;
class QPushButton;
class QTableWidget;
class QTimer;

namespace flotilla::ui {

class ComparisonWindow;
class Dashboard;
class EventsView;

// One run's dashboard and events, read from its store; reread every few seconds while the
// run is being trained by another process.
class RunWindow : public QWidget
{
    Q_OBJECT

public:
    RunWindow(RunCatalog *catalog, const RunSummary &run, QWidget *parent = nullptr);
    Dashboard *dashboard() const { return m_dashboard; }
    EventsView *events() const { return m_events; }
    const RunSummary &run() const { return m_run; }
    // Whether the run's history has been drawn at least once.
    bool loaded() const { return m_loaded; }
    QString headline() const;

Q_SIGNALS:
    void loadedOnce();

private:
    void onHistory(const QString &dir, const History &history);

    RunCatalog *m_catalog;
    RunSummary m_run;
    Dashboard *m_dashboard = nullptr;
    EventsView *m_events = nullptr;
    QLabel *m_headline = nullptr;
    QTimer *m_reload = nullptr;
    bool m_loaded = false;
};

class RunsView : public QWidget
{
    Q_OBJECT

public:
    explicit RunsView(RunCatalog *catalog, QWidget *parent = nullptr);

    QTableWidget *table() const { return m_table; }
    QList<RunSummary> runs() const { return m_runs; }
    QStringList selectedDirs() const;
    // Every listed run's folder, in the order the table shows them.
    QStringList shownDirs() const;
    void select(const QStringList &dirs);
    // How long the last listing took, from asking to drawing, in milliseconds (-1 before one).
    qint64 lastListingMs() const { return m_lastListingMs; }
    QString statusText() const;

    // Opens the run's window (or raises it); the job this control center runs goes to the
    // Dashboard tab instead (currentRunRequested) and nullptr is returned.
    RunWindow *open(const QString &dir);
    ComparisonWindow *compare(const QStringList &dirs);
    Result<void> addFolder(const QString &dir);
    Result<void> renameRun(const QString &dir);
    Result<void> deleteRun(const QString &dir);

    // Seams for tests: what a dialog would answer (its questions: ui/Dialogs.h).
    std::function<QString(const QString &title, const QString &label, const QString &initial)> askText;
    std::function<QString()> askFolder;

public Q_SLOTS:
    void refresh();

Q_SIGNALS:
    void listed(int count);
    void currentRunRequested();

private:
    void onListed(const QList<RunSummary> &runs);
    void updateButtons();
    void report(const Result<void> &r);
    const RunSummary *find(const QString &dir) const;

    RunCatalog *m_catalog;
    QTableWidget *m_table = nullptr;
    QLabel *m_status = nullptr;
    QPushButton *m_open = nullptr;
    QPushButton *m_compare = nullptr;
    QPushButton *m_rename = nullptr;
    QPushButton *m_delete = nullptr;
    QList<RunSummary> m_runs;
    std::map<QString, QPointer<RunWindow>> m_windows;
    QElapsedTimer m_listing;
    qint64 m_lastListingMs = -1;
    QString m_message;
};

// How the runs view names a run's rule: "vc-asgd (α 0.5)", "async-delta, buffer 4".
QString describeRule(const JobSpec &job);

} // namespace flotilla::ui
