#pragma once
// The control center's window: the job's controls, the dashboard, workers, subtasks and
// events, and this machine's own worker. Everything it shows comes from a ControlSession.
//
// Threads: UI thread. Its questions and save dialogs go through ui/Dialogs.h, and the desktop
// notification when a job ends through a seam (notify), which tests answer or replace.

#include "common/Clock.h"
#include "machine/WorkPolicy.h"
#include "ui/ControlSession.h"

#include <QMainWindow>

#include <functional>
#include <optional>

class QAction;
class QMenu;
class QCheckBox;
class QLabel;
class QSpinBox;
class QStackedWidget;
class QSystemTrayIcon;
class QTabWidget;
class QTimer;

namespace flotilla::ui {

class Dashboard;
class EventsView;
class JobsView;
class RunCatalog;
class RunsView;
class SubtasksView;
class WelcomePanel;
class WorkersView;

class MainWindow : public QMainWindow
{
    Q_OBJECT

public:
    // job: the job the Start button starts; runDir: where (an unfinished job there resumes);
    // runs: the runs this control center knows (no Runs tab without one).
    MainWindow(ControlSession *session, const JobSpec &job, const QString &runDir, RunCatalog *runs = nullptr,
               QWidget *parent = nullptr);
    ~MainWindow() override;

    Dashboard *dashboard() const { return m_dashboard; }
    WorkersView *workers() const { return m_workers; }
    SubtasksView *subtasks() const { return m_subtasks; }
    EventsView *events() const { return m_events; }
    RunsView *runs() const { return m_runs; }
    JobsView *jobs() const { return m_jobs; } // a window attached to a fleet service; null otherwise
    QTabWidget *tabs() const { return m_tabs; }
    // What the Dashboard tab shows while no job has drawn anything.
    WelcomePanel *welcome() const { return m_welcome; }
    bool showsWelcome() const;
    QWidget *machinePanel() const { return m_machinePanel; }
    // What the machine panel says of this machine's worker ("paused: on battery", …).
    QString machineStatusText() const;
    // The policy that says when this machine's own worker may train (it must outlive the
    // window); by default the window's own, over this machine's idle time and battery, with
    // the control center's rules (WorkerSettings::Role::ControlCenter). Null: no rules.
    void setWorkPolicy(WorkPolicy *policy);
    QString statusText() const;
    // Join a fleet…: emitted for the application to ask for a token and start a worker.
    QAction *joinFleetAction() const { return m_joinFleet; }
    QAction *connectAction() const { return m_connect; }

    // Its questions and save dialogs go through ui/Dialogs.h, which tests answer.
    // A job finished or failed: by default a tray message, where the desktop has a tray.
    std::function<void(const QString &title, const QString &text, bool failed)> notify;

Q_SIGNALS:
    // Join a fleet… was chosen: contribute this machine to someone else's coordinator.
    void joinFleetRequested();
    // Connect to coordinator… was chosen: attach a window to a coordinator elsewhere.
    void connectRequested();

public Q_SLOTS:
    void startJob();
    void editJob();
    void togglePause();
    void stopJob();
    void revokeWorker(const QString &name);
    void showTokenDialog();
    void exportChart();
    void exportMetrics();
    void exportModel();
    // Lists a run folder from elsewhere in the Runs tab and opens it.
    void openRunFolder();
    void showRuns();

protected:
    void showEvent(QShowEvent *event) override;

private:
    void buildActions();
    void buildMenus(QMenu *exportMenu);
    QWidget *buildMachinePanel();
    void buildTray();
    void enterRemoteMode();
    void updateWelcome();
    void refreshSubtasksIfShown();
    void onState(JobState state, const QString &message);
    void onSnapshot(const Snapshot &s);
    // Contributes this machine when it is checked and the work policy lets it train.
    void applyContribution();
    // What the policy says, in the machine panel, without telling the session.
    void updatePolicyStatus();
    void editWorkRules();
    void updateMachineStatus();
    void saveSettings() const;

    ControlSession *m_session;
    JobSpec m_job;
    QString m_runDir;
    Dashboard *m_dashboard = nullptr;
    WorkersView *m_workers = nullptr;
    SubtasksView *m_subtasks = nullptr;
    EventsView *m_events = nullptr;
    RunCatalog *m_catalog = nullptr;
    RunsView *m_runs = nullptr;
    JobsView *m_jobs = nullptr;
    QTabWidget *m_tabs = nullptr;
    QStackedWidget *m_dashboardPages = nullptr;
    WelcomePanel *m_welcome = nullptr;
    QWidget *m_machinePanel = nullptr;
    QSystemTrayIcon *m_tray = nullptr;
    QLabel *m_status = nullptr;
    QLabel *m_machineStatus = nullptr;
    QCheckBox *m_contribute = nullptr;
    QSpinBox *m_threads = nullptr;
    QAction *m_start = nullptr;
    QAction *m_pause = nullptr;
    QAction *m_stop = nullptr;
    QAction *m_edit = nullptr;
    QAction *m_token = nullptr;
    QAction *m_export = nullptr;
    QAction *m_joinFleet = nullptr;
    QAction *m_connect = nullptr;
    QTimer *m_subtaskTimer = nullptr;
    // When this machine's own worker may train (machine/WorkPolicy): the window's own, over the
    // machine's idle time and battery, unless setWorkPolicy gave another.
    SystemClock m_clock;
    std::unique_ptr<IdleSource> m_idleSource;
    std::unique_ptr<PowerSource> m_powerSource;
    std::unique_ptr<WorkPolicy> m_ownPolicy;
    WorkPolicy *m_policy = nullptr;
    bool m_pausedByPolicy = false;
    QString m_pauseReason;
    QString m_mine; // this machine's worker in the latest snapshot
    QString m_lastLine;
    JobState m_lastState = JobState::NoJob;
    QString m_failure;         // why the last start failed, for the welcome panel
    double m_lastAccuracy = -1; // from the latest snapshot, for the notification
    bool m_shown = false;
};

} // namespace flotilla::ui
