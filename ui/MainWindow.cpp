#include "ui/MainWindow.h"

#include "job/Tasks.h"
#include "machine/WorkerSettings.h"

#include "ui/AppIcon.h"
#include "ui/Dashboard.h"
#include "ui/Dialogs.h"
#include "ui/JobWizard.h"
#include "ui/JobsView.h"
#include "ui/RunsView.h"
#include "ui/TokenDialog.h"
#include "ui/Views.h"
#include "ui/WelcomePanel.h"
#include "ui/WorkerSettingsDialog.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QStyle>
#include <QSystemTrayIcon>
#include <QTabWidget>
#include <QThread>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

// The desktop theme's icon where it has one, else the style's own.
QIcon themedIcon(const QWidget *w, const char *name, QStyle::StandardPixmap fallback)
{
    return QIcon::fromTheme(QString::fromLatin1(name), w->style()->standardIcon(fallback));
}

// A toolbar button's tooltip names its shortcut, so the keyboard is discoverable.
void showShortcut(QAction *action)
{
    QString text = action->text();
    text.remove(QStringLiteral("…"));
    action->setToolTip(QStringLiteral("%1 (%2)").arg(text, action->shortcut().toString(QKeySequence::NativeText)));
}

} // namespace

MainWindow::MainWindow(ControlSession *session, const JobSpec &job, const QString &runDir, RunCatalog *runs,
                       QWidget *parent)
    : QMainWindow(parent), m_session(session), m_job(job), m_runDir(runDir), m_catalog(runs)
{
    setWindowTitle(tr("Flotilla — control center"));
    buildActions();
    buildTray();

    m_dashboard = new Dashboard;
    m_dashboard->setScore(m_job.training.task);
    m_welcome = new WelcomePanel({m_start, m_edit, m_connect});
    m_dashboardPages = new QStackedWidget;
    m_dashboardPages->addWidget(m_welcome);
    m_dashboardPages->addWidget(m_dashboard);
    m_workers = new WorkersView;
    m_subtasks = new SubtasksView;
    m_events = new EventsView;
    m_tabs = new QTabWidget;
    m_tabs->addTab(m_dashboardPages, tr("Dashboard"));
    m_tabs->addTab(m_workers, tr("Workers"));
    m_tabs->addTab(m_subtasks, tr("Subtasks"));
    m_tabs->addTab(m_events, tr("Events"));
    if (m_session->hasQueue()) {
        m_jobs = new JobsView(m_session);
        m_tabs->addTab(m_jobs, tr("Jobs"));
    }
    if (m_catalog) {
        m_runs = new RunsView(m_catalog);
        m_tabs->addTab(m_runs, tr("Runs"));
        connect(m_runs, &RunsView::currentRunRequested, this, [this] { m_tabs->setCurrentWidget(m_dashboardPages); });
        // Listed at once (the stores are read on pool threads), and again whenever the tab
        // comes into view.
        connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
            if (m_tabs->currentWidget() == m_runs)
                m_runs->refresh();
        });
        m_runs->refresh();
    }

    auto *central = new QWidget;
    auto *layout = new QHBoxLayout(central);
    layout->addWidget(m_tabs, 1);
    layout->addWidget(buildMachinePanel());
    setCentralWidget(central);
    m_status = new QLabel;
    // A long status line is cut, not allowed to widen the window.
    m_status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    statusBar()->addWidget(m_status, 1);

    connect(m_session, &ControlSession::stateChanged, this, &MainWindow::onState);
    connect(m_session, &ControlSession::historyLoaded, this, [this](const History &h) {
        m_dashboard->loadHistory(h);
        m_events->clear();
        m_events->addEvents(h.events);
        updateWelcome();
    });
    connect(m_session, &ControlSession::snapshot, this, &MainWindow::onSnapshot);
    connect(m_session, &ControlSession::assimilated, m_dashboard, &Dashboard::addAssimilation);
    connect(m_session, &ControlSession::evaluated, m_dashboard, &Dashboard::addEvaluation);
    connect(m_session, &ControlSession::costUpdated, m_dashboard, &Dashboard::addCost);
    connect(m_session, &ControlSession::eventAdded, this, [this](const EventRecord &e) {
        m_dashboard->addEvent(e);
        m_events->addEvent(e);
        // Things that need the user's attention also show in the status bar; the events
        // view keeps them all.
        if (e.is(EventKind::EvaluationFailed))
            statusBar()->showMessage(tr("Evaluation failed: %1").arg(e.detail), 30000);
        else if (e.is(EventKind::WorkerQuarantined))
            statusBar()->showMessage(tr("Worker quarantined: %1").arg(e.detail), 30000);
        else if (e.is(EventKind::JobStalled))
            statusBar()->showMessage(tr("The job cannot go on: %1").arg(e.detail), 60000);
    });
    connect(m_session, &ControlSession::subtasksLoaded, m_subtasks, &SubtasksView::setSubtasks);
    connect(m_session, &ControlSession::commandAnswered, this, [this](const QString &done, const QString &error) {
        statusBar()->showMessage(error.isEmpty() ? done : error, 8000);
    });
    connect(m_workers, &WorkersView::revokeRequested, this, [this](const QString &name) {
        if (dialogs::confirm(this, tr("Revoke worker '%1'? Its certificate will be refused from now on.").arg(name)))
            revokeWorker(name);
    });
    connect(m_workers, &WorkersView::releaseRequested, m_session, &ControlSession::release);
    connect(m_workers, &WorkersView::tokenRequested, this, &MainWindow::showTokenDialog);
    connect(m_subtasks, &SubtasksView::refreshRequested, m_session, &ControlSession::refreshSubtasks);
    // The subtasks table is read from the store: at once when it comes into view, then every
    // few seconds while it is in view.
    connect(m_tabs, &QTabWidget::currentChanged, this, &MainWindow::refreshSubtasksIfShown);
    m_subtaskTimer = new QTimer(this);
    m_subtaskTimer->setInterval(3000);
    connect(m_subtaskTimer, &QTimer::timeout, this, &MainWindow::refreshSubtasksIfShown);
    m_subtaskTimer->start();
    connect(m_contribute, &QCheckBox::toggled, this, &MainWindow::updateWelcome);
    connect(m_threads, &QSpinBox::valueChanged, this, &MainWindow::updateWelcome);

    if (m_session->remote())
        enterRemoteMode();
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    m_lastState = m_session->state();
    onState(m_session->state(), QString());
}

MainWindow::~MainWindow()
{
    // A window never shown (the local one, while only an attached window is open) has no
    // size or choices worth keeping.
    if (m_shown)
        saveSettings();
}

void MainWindow::showEvent(QShowEvent *event)
{
    m_shown = true;
    QMainWindow::showEvent(event);
}

void MainWindow::enterRemoteMode()
{
    // The job runs on the coordinator's machine: no job starts here, and this machine's
    // worker is not this window's business (Join a fleet… is).
    setWindowTitle(tr("Flotilla — coordinator %1").arg(m_session->endpoint()));
    for (QAction *a : {m_start, m_connect})
        a->setVisible(false);
    // New job… submits to the coordinator's fleet, with the job's model and data.
    m_edit->setText(tr("Submit a job…"));
    m_edit->setToolTip(tr("Queue a job on the fleet of %1; its model and data are sent with it")
                           .arg(m_session->endpoint()));
    m_machinePanel->hide();
    m_welcome->setText(tr("Connecting"), tr("This window watches the coordinator at %1.").arg(m_session->endpoint()),
                       QString());
}

void MainWindow::saveSettings() const
{
    if (m_session->remote())
        return; // the settings are the local control center's
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("machine/contribute"), m_contribute->isChecked());
    settings.setValue(QStringLiteral("machine/threads"), m_threads->value());
    settings.setValue(QStringLiteral("job/runDir"), m_runDir);
}

void MainWindow::buildActions()
{
    QToolBar *bar = addToolBar(tr("Job"));
    bar->setObjectName(QStringLiteral("jobToolBar"));
    bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    m_edit = bar->addAction(themedIcon(this, "document-new", QStyle::SP_FileIcon), tr("New job…"), this,
                            &MainWindow::editJob);
    m_edit->setShortcut(QKeySequence::New);
    m_start = bar->addAction(themedIcon(this, "media-playback-start", QStyle::SP_MediaPlay), tr("Start"), this,
                             &MainWindow::startJob);
    m_start->setShortcut(Qt::CTRL | Qt::Key_R);
    m_pause = bar->addAction(themedIcon(this, "media-playback-pause", QStyle::SP_MediaPause), tr("Pause"), this,
                             &MainWindow::togglePause);
    m_pause->setShortcut(Qt::CTRL | Qt::Key_P);
    m_stop = bar->addAction(themedIcon(this, "media-playback-stop", QStyle::SP_MediaStop), tr("Stop"), this,
                            &MainWindow::stopJob);
    m_stop->setShortcut(Qt::CTRL | Qt::Key_Period);
    bar->addSeparator();
    m_token = bar->addAction(themedIcon(this, "network-workgroup", QStyle::SP_DriveNetIcon), tr("Join token…"), this,
                             &MainWindow::showTokenDialog);
    m_token->setShortcut(Qt::CTRL | Qt::Key_T);
    m_joinFleet = bar->addAction(themedIcon(this, "network-connect", QStyle::SP_ArrowRight), tr("Join a fleet…"), this,
                                 &MainWindow::joinFleetRequested);
    m_joinFleet->setShortcut(Qt::CTRL | Qt::Key_J);
    m_connect = new QAction(themedIcon(this, "network-server", QStyle::SP_ComputerIcon), tr("Connect to coordinator…"),
                            this);
    m_connect->setShortcut(Qt::CTRL | Qt::Key_K);
    m_connect->setToolTip(tr("Watch and command a coordinator that runs elsewhere (flotilla serve), with an "
                             "operator token"));
    connect(m_connect, &QAction::triggered, this, &MainWindow::connectRequested);
    auto *exportMenu = new QMenu(this);
    exportMenu->addAction(tr("Chart as PNG…"), this, &MainWindow::exportChart);
    exportMenu->addAction(tr("Metrics as CSV…"), this, &MainWindow::exportMetrics);
    exportMenu->addAction(tr("Trained model…"), this, &MainWindow::exportModel);
    m_export = bar->addAction(themedIcon(this, "document-save-as", QStyle::SP_DialogSaveButton), tr("Export"));
    m_export->setMenu(exportMenu);
    m_export->setShortcut(Qt::CTRL | Qt::Key_E);
    connect(m_export, &QAction::triggered, this, &MainWindow::exportChart);
    for (QAction *a : {m_edit, m_start, m_pause, m_stop, m_token, m_joinFleet, m_export})
        showShortcut(a);
    buildMenus(exportMenu);
}

void MainWindow::buildMenus(QMenu *exportMenu)
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    file->addAction(m_edit);
    QAction *openRun = file->addAction(themedIcon(this, "document-open", QStyle::SP_DirOpenIcon), tr("Open run folder…"),
                                       this, &MainWindow::openRunFolder);
    openRun->setShortcut(QKeySequence::Open);
    openRun->setEnabled(m_catalog != nullptr);
    file->addAction(m_connect);
    file->addAction(m_joinFleet);
    QMenu *exports = file->addMenu(tr("Export"));
    exports->addActions(exportMenu->actions());
    file->addSeparator();
    QAction *quit = file->addAction(tr("Quit"), qApp, &QApplication::quit);
    quit->setShortcut(QKeySequence::Quit);

    QMenu *jobMenu = menuBar()->addMenu(tr("&Job"));
    jobMenu->addActions({m_start, m_pause, m_stop});
    jobMenu->addSeparator();
    jobMenu->addAction(m_token);

    QMenu *runs = menuBar()->addMenu(tr("&Runs"));
    QAction *show = runs->addAction(tr("Show runs"), this, &MainWindow::showRuns);
    show->setShortcut(Qt::CTRL | Qt::SHIFT | Qt::Key_R);
    QAction *compare = runs->addAction(tr("Compare selected runs"), this, [this] {
        showRuns();
        m_runs->compare(m_runs->selectedDirs());
    });
    compare->setShortcut(Qt::CTRL | Qt::SHIFT | Qt::Key_C);
    for (QAction *a : {show, compare})
        a->setEnabled(m_catalog != nullptr);

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("About Flotilla"), this, [this] {
        QMessageBox::about(this, tr("About Flotilla"),
                           tr("<b>Flotilla %1</b><p>Trains deep-learning models on fleets of machines that can vanish "
                              "at any moment, with VC-ASGD and the rules beside it.</p>")
                               .arg(QApplication::applicationVersion()));
    });
}

void MainWindow::showRuns()
{
    if (m_runs)
        m_tabs->setCurrentWidget(m_runs);
}

void MainWindow::openRunFolder()
{
    if (!m_runs)
        return;
    const QString dir = m_runs->askFolder();
    if (dir.isEmpty())
        return;
    showRuns();
    if (auto added = m_runs->addFolder(dir); !added) {
        statusBar()->showMessage(added.error(), 15000);
        return;
    }
    // Opened once the listing that includes it arrives.
    const QString wanted = QFileInfo(dir).canonicalFilePath();
    auto *once = new QObject(this);
    connect(m_runs, &RunsView::listed, once, [this, once, wanted] {
        once->deleteLater();
        m_runs->select({wanted});
        m_runs->open(wanted);
    });
}

void MainWindow::buildTray()
{
    notify = [this](const QString &title, const QString &text, bool failed) {
        if (m_tray)
            m_tray->showMessage(title, text, failed ? QSystemTrayIcon::Critical : QSystemTrayIcon::Information, 15000);
    };
    // Offscreen and on desktops without a tray there is none, and no message.
    if (!QSystemTrayIcon::isSystemTrayAvailable())
        return;
    m_tray = new QSystemTrayIcon(appIcon(), this);
    auto *menu = new QMenu(this);
    const auto showWindow = [this] {
        showNormal();
        raise();
        activateWindow();
    };
    menu->addAction(tr("Show the control center"), this, showWindow);
    menu->addAction(tr("Quit"), qApp, &QApplication::quit);
    m_tray->setContextMenu(menu);
    connect(m_tray, &QSystemTrayIcon::activated, this, [showWindow](QSystemTrayIcon::ActivationReason reason) {
        if (reason == QSystemTrayIcon::Trigger)
            showWindow();
    });
    connect(m_tray, &QSystemTrayIcon::messageClicked, this, showWindow);
    m_tray->setToolTip(windowTitle());
    m_tray->show();
}

bool MainWindow::showsWelcome() const
{
    return m_dashboardPages->currentWidget() == m_welcome;
}

void MainWindow::updateWelcome()
{
    const JobState state = m_session->state();
    if (m_session->remote()) {
        const bool waiting = m_dashboard->isEmpty() && state != JobState::Running && state != JobState::Paused;
        m_dashboardPages->setCurrentWidget(waiting ? static_cast<QWidget *>(m_welcome) : m_dashboard);
        if (waiting && state == JobState::NoJob && m_session->hasQueue())
            m_welcome->setText(tr("No job runs on this fleet now"),
                               tr("This window watches the fleet at %1: the next job it runs appears here.")
                                   .arg(m_session->endpoint()),
                               tr("Submit a job… queues one, with its model and data; the Jobs tab lists the queue."));
        else if (waiting)
            m_welcome->setText(state == JobState::Failed ? tr("Cannot watch this coordinator") : tr("Connecting"),
                               tr("This window watches the coordinator at %1.").arg(m_session->endpoint()),
                               state == JobState::Failed ? m_failure : m_status->text());
        return;
    }
    const bool welcome = (state == JobState::NoJob || state == JobState::Failed) && m_dashboard->isEmpty();
    m_dashboardPages->setCurrentWidget(welcome ? static_cast<QWidget *>(m_welcome) : m_dashboard);
    if (!welcome)
        return;
    QString what = tr("Start trains %1.").arg(describeJob(m_job));
    if (!m_runDir.isEmpty())
        what += QLatin1Char(' ') + tr("The run goes to %1; a job left unfinished there resumes where it stopped.").arg(m_runDir);
    what += QLatin1Char(' ') + tr("New job… changes the data set, model, rule or fleet.");
    QString note = m_contribute->isChecked()
                       ? tr("This machine trains too, with %1 (This machine, on the right); other machines join "
                            "with a join token once the job runs.")
                             .arg(m_threads->value() == 1 ? tr("1 CPU thread") : tr("%1 CPU threads").arg(m_threads->value()))
                       : tr("This machine is set not to train: once the job runs, give other machines a join token, "
                            "or tick Contribute this machine.");
    if (state == JobState::Failed && !m_failure.isEmpty())
        note = tr("The last attempt failed: %1").arg(m_failure) + QStringLiteral("\n\n") + note;
    m_welcome->setText(state == JobState::Failed ? tr("The job failed") : tr("No job is running"), what, note);
}

void MainWindow::refreshSubtasksIfShown()
{
    if (m_tabs->currentWidget() == m_subtasks && m_session->state() != JobState::NoJob)
        m_session->refreshSubtasks();
}

QWidget *MainWindow::buildMachinePanel()
{
    auto *box = new QGroupBox(tr("This machine"));
    auto *form = new QVBoxLayout(box);
    QSettings settings;
    m_contribute = new QCheckBox(tr("Contribute this machine"));
    m_contribute->setChecked(settings.value(QStringLiteral("machine/contribute"), true).toBool());
    m_threads = new QSpinBox;
    m_threads->setRange(1, std::max(1, QThread::idealThreadCount()));
    m_threads->setValue(std::clamp(settings.value(QStringLiteral("machine/threads"), 1).toInt(), 1, m_threads->maximum()));
    // When it may train is the work policy's to say (machine/WorkPolicy), as for the worker
    // window: battery, idle time, hours, programs, with the control center's own rules.
    auto *rules = new QPushButton(tr("When to train…"));
    rules->setToolTip(tr("Pause on battery, while you use the machine, outside hours or while programs run"));
    connect(rules, &QPushButton::clicked, this, &MainWindow::editWorkRules);
    m_machineStatus = new QLabel(tr("idle"));
    m_machineStatus->setWordWrap(true);
    auto *threadsRow = new QHBoxLayout;
    threadsRow->addWidget(new QLabel(tr("CPU threads")));
    threadsRow->addWidget(m_threads);
    form->addWidget(m_contribute);
    form->addLayout(threadsRow);
    form->addWidget(rules);
    form->addWidget(m_machineStatus);
    form->addStretch();
    // A fixed width: the status line below changes with every snapshot, and the panel
    // (with the dashboard beside it) must not move each time.
    box->setFixedWidth(std::max(box->minimumSizeHint().width(), box->fontMetrics().averageCharWidth() * 36));
    m_machinePanel = box;
    connect(m_contribute, &QCheckBox::toggled, this, &MainWindow::applyContribution);
    connect(m_threads, &QSpinBox::valueChanged, this, &MainWindow::applyContribution);
    // The machine's own sources until the application or a test gives another policy.
    m_idleSource = systemIdleSource();
    m_powerSource = systemPowerSource();
    m_ownPolicy = std::make_unique<WorkPolicy>(WorkerSettings::load(WorkerSettings::Role::ControlCenter),
                                               m_idleSource.get(), &m_clock, m_powerSource.get());
    setWorkPolicy(m_ownPolicy.get());
    m_ownPolicy->start();
    return box;
}

void MainWindow::setWorkPolicy(WorkPolicy *policy)
{
    if (m_policy)
        disconnect(m_policy, nullptr, this, nullptr);
    m_policy = policy;
    if (policy != m_ownPolicy.get() && m_ownPolicy)
        m_ownPolicy.reset();
    if (policy) {
        policy->evaluate();
        connect(policy, &WorkPolicy::decisionChanged, this, &MainWindow::applyContribution);
    }
    // A job under way follows the new policy at once; otherwise Start applies it.
    const JobState state = m_session->state();
    if (state == JobState::Running || state == JobState::Paused)
        applyContribution();
    else
        updatePolicyStatus();
}

void MainWindow::updatePolicyStatus()
{
    const WorkPolicy::Decision d = m_policy ? m_policy->decision() : WorkPolicy::Decision{};
    m_pausedByPolicy = m_contribute->isChecked() && !d.run;
    m_pauseReason = d.reason;
    updateMachineStatus();
}

void MainWindow::applyContribution()
{
    updatePolicyStatus();
    m_session->setContributing(m_contribute->isChecked() && !m_pausedByPolicy, m_threads->value());
}

void MainWindow::editWorkRules()
{
    if (!m_policy)
        return;
    WorkerSettingsDialog dialog(m_policy->settings(), {}, this);
    dialog.showWhenOnly();
    if (dialog.exec() != QDialog::Accepted)
        return;
    const WorkerSettings chosen = dialog.settings();
    chosen.save(WorkerSettings::Role::ControlCenter);
    m_policy->setSettings(chosen);
    m_policy->evaluate();
    applyContribution();
}

void MainWindow::startJob()
{
    const JobState s = m_session->state();
    if (s == JobState::Running || s == JobState::Paused || s == JobState::Loading)
        return;
    if (s == JobState::Finished || m_runDir.isEmpty())
        m_runDir.clear(); // a new run
    m_dashboard->reset();
    m_events->clear();
    m_lastAccuracy = -1;
    m_dashboard->setScore(m_job.training.task);
    m_session->start(m_job, m_runDir);
    applyContribution();
    m_runDir = m_session->runDir();
    saveSettings();
}

void MainWindow::editJob()
{
    JobWizard wizard(m_job, m_job.fleet.workers, this);
    if (wizard.exec() != QDialog::Accepted)
        return;
    m_job = wizard.job();
    m_runDir.clear();
    if (m_session->remote()) {
        // Queued on the coordinator's fleet: the Jobs tab shows it; this window watches the
        // fleet's jobs as they run.
        m_session->submitJob(m_job, 0, 1.0);
        statusBar()->showMessage(tr("Sending '%1' to %2…").arg(m_job.name, m_session->endpoint()), 8000);
        if (m_jobs)
            m_tabs->setCurrentWidget(m_jobs);
        return;
    }
    startJob();
}

void MainWindow::togglePause()
{
    m_session->setPaused(m_session->state() == JobState::Running);
}

void MainWindow::stopJob()
{
    if (m_session->remote()
        && !dialogs::confirm(this, tr("Stop the job on %1? Its coordinator stops; started again there, it resumes where it "
                               "stopped.")
                                .arg(m_session->endpoint())))
        return;
    m_session->stop();
}

void MainWindow::revokeWorker(const QString &name)
{
    m_session->revoke(name); // answered with commandAnswered, shown in the status bar
}

void MainWindow::showTokenDialog()
{
    TokenDialog dialog(m_session, this);
    dialog.exec();
}

void MainWindow::exportChart()
{
    bool ok = false;
    const QString name = QInputDialog::getItem(this, tr("Export a chart"), tr("Chart"), m_dashboard->chartNames(), 0,
                                               false, &ok);
    if (!ok)
        return;
    const QString path = dialogs::savePath(this, tr("Save chart"), name + QStringLiteral(".png"), tr("PNG image (*.png)"));
    if (path.isEmpty())
        return;
    auto r = m_dashboard->exportChart(int(m_dashboard->chartNames().indexOf(name)), path);
    statusBar()->showMessage(r ? tr("Saved %1").arg(path) : r.error(), 8000);
}

void MainWindow::exportMetrics()
{
    const QString path = dialogs::savePath(this, tr("Save metrics"), QStringLiteral("metrics.csv"), tr("CSV (*.csv)"));
    if (path.isEmpty())
        return;
    auto r = m_session->exportMetrics(path);
    statusBar()->showMessage(r ? tr("Saved %1").arg(path) : r.error(), 8000);
}

void MainWindow::exportModel()
{
    const QString path = dialogs::savePath(this, tr("Save the trained model"), QStringLiteral("model.pt"), tr("Model (*.pt)"));
    if (path.isEmpty())
        return;
    auto r = m_session->exportModel(path);
    // From an attached window the model is downloaded: commandAnswered says when it is saved.
    statusBar()->showMessage(r ? (m_session->remote() ? tr("Downloading the trained model to %1…") : tr("Saved %1")).arg(path)
                               : r.error(),
                             8000);
}

void MainWindow::onState(JobState state, const QString &message)
{
    const bool active = state == JobState::Running || state == JobState::Paused;
    m_start->setEnabled(state != JobState::Loading && !active);
    m_start->setText(state == JobState::Stopped ? tr("Resume job") : tr("Start"));
    m_pause->setEnabled(active);
    m_pause->setText(state == JobState::Paused ? tr("Resume") : tr("Pause"));
    m_pause->setIcon(state == JobState::Paused ? themedIcon(this, "media-playback-start", QStyle::SP_MediaPlay)
                                               : themedIcon(this, "media-playback-pause", QStyle::SP_MediaPause));
    showShortcut(m_start);
    showShortcut(m_pause);
    m_stop->setEnabled(active);
    m_edit->setEnabled(m_session->remote() || (state != JobState::Loading && !active));
    QString text = describe(state) + (m_session->job().name.isEmpty() ? QString() : QStringLiteral(" — ") + m_session->job().name);
    if (!message.isEmpty())
        text += QStringLiteral(": ") + message;
    m_status->setText(text);
    m_status->setToolTip(text);
    if (m_tray)
        m_tray->setToolTip(tr("Flotilla: %1").arg(text));
    if (state == JobState::Failed)
        statusBar()->showMessage(message, 30000);
    if (state == JobState::Failed)
        m_failure = message;
    else if (state == JobState::Loading || state == JobState::Running)
        m_failure.clear();

    // The end of a job is worth a notification: the user may be looking at something else.
    if (state != m_lastState) {
        const QString name = m_session->job().name;
        if (state == JobState::Finished)
            notify(tr("Job finished"),
                   m_lastAccuracy < 0 ? tr("%1 finished.").arg(name)
                   : m_session->job().training.task == QLatin1String("classification")
                       ? tr("%1 finished with %2% test accuracy.").arg(name).arg(100 * m_lastAccuracy, 0, 'f', 2)
                       : tr("%1 finished with test %2.").arg(name, scoreText(m_session->job().training.task, m_lastAccuracy)),
                   false);
        else if (state == JobState::Failed)
            notify(tr("Job failed"), message.isEmpty() ? tr("%1 failed.").arg(name) : tr("%1 failed: %2").arg(name, message),
                   true);
    }
    if (m_catalog && state != m_lastState) {
        const bool current = state == JobState::Loading || active;
        m_catalog->setCurrentRun(current ? m_session->runDir() : QString());
        if (m_tabs && m_tabs->currentWidget() == m_runs)
            m_runs->refresh();
    }
    m_lastState = state;
    updateWelcome();
    refreshSubtasksIfShown();
}

void MainWindow::onSnapshot(const Snapshot &s)
{
    m_dashboard->addSnapshot(s);
    m_workers->setWorkers(s.workers);
    const QString task = m_session->job().training.task;
    const QString score = s.testAccuracy < 0 && s.epochsDone == 0
                              ? taskInfo(task).score + QStringLiteral(" –")
                              : scoreText(task, s.testAccuracy);
    m_lastLine = tr("epoch %1/%2 · version %3 · loss %4 · test %5 · %6 worker(s) online · staleness %7 · "
                    "savings %8%")
                     .arg(s.epochsDone).arg(s.epochs).arg(s.version)
                     .arg(s.lossEma < 0 ? QStringLiteral("–") : QString::number(s.lossEma, 'f', 3))
                     .arg(score)
                     .arg(s.workersOnline).arg(s.staleness, 0, 'f', 1).arg(s.savingsPercent, 0, 'f', 0);
    // A job no worker can train says so where the user looks first, for as long as it lasts.
    if (!s.stalled.isEmpty())
        m_lastLine = tr("stalled: %1 · epoch %2/%3 · test %4").arg(s.stalled).arg(s.epochsDone).arg(s.epochs).arg(score);
    m_status->setText(describe(m_session->state()) + QStringLiteral(" — ") + s.job + QStringLiteral(" · ") + m_lastLine);
    m_status->setToolTip(m_status->text());
    if (s.testAccuracy >= 0)
        m_lastAccuracy = s.testAccuracy;
    m_mine.clear();
    for (const auto &w : s.workers)
        if (w.address == QLatin1String("this machine") && w.online)
            m_mine = w.subtask.isEmpty() ? tr("%1: idle").arg(w.name)
                                         : tr("%1: %2 — %3%").arg(w.name, w.subtask).arg(int(100 * std::max(0.0, w.progress)));
    updateMachineStatus();
}

void MainWindow::updateMachineStatus()
{
    if (!m_machineStatus)
        return;
    QString mine = m_contribute->isChecked() ? tr("contributing") : tr("not contributing");
    if (m_pausedByPolicy)
        mine = tr("paused: %1").arg(m_pauseReason);
    else if (m_contribute->isChecked() && !m_mine.isEmpty())
        mine = m_mine;
    m_machineStatus->setText(mine);
}

QString MainWindow::machineStatusText() const
{
    return m_machineStatus ? m_machineStatus->text() : QString();
}

QString MainWindow::statusText() const
{
    return m_status->text();
}

} // namespace flotilla::ui
