#include "app/GuiCommand.h"

#include "agent/WorkerAgent.h"
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "desktop/AgentDesk.h"
#include "desktop/DesktopSession.h"
#include "desktop/RemoteSession.h"
#include "desktop/RunLibrary.h"
#include "machine/WorkPolicy.h"

#include "ui/AppIcon.h"
#include "ui/Comparison.h"
#include "ui/Dashboard.h"
#include "ui/JobWizard.h"
#include "ui/JoinDialog.h"
#include "ui/MainWindow.h"
#include "ui/RunsView.h"
#include "ui/Views.h"
#include "ui/WorkerDesk.h"
#include "ui/WorkerSettingsDialog.h"

#include <QApplication>
#include <QChartView>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QHostInfo>
#include <QInputDialog>
#include <QMessageBox>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QThread>
#include <QTimer>

#include <cstdio>
#include <cstring>

namespace flotilla {

namespace {

// Milliseconds since main() began, for the start-up measurement.
QElapsedTimer g_sinceMain;

// A worker started from the desktop: the agent, the policy that says when it may run, and
// its window. Members are destroyed bottom up: the window before the desk before the agent.
struct DesktopWorker
{
    SystemClock clock;
    std::unique_ptr<IdleSource> idle = systemIdleSource();
    std::unique_ptr<PowerSource> power = systemPowerSource();
    std::unique_ptr<WorkerAgent> agent;
    std::unique_ptr<WorkPolicy> policy;
    std::unique_ptr<AgentDesk> desk;
    std::unique_ptr<ui::WorkerWindow> window;
};

// Each fleet's worker keeps its identity and shard cache in a folder of its own, named after
// the fleet's CA, so that joining a second fleet does not end the first one's enrollment.
QString fleetStateDir(const net::JoinToken &token)
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/fleets/")
           + QString::fromLatin1(token.caFingerprint.left(8).toHex());
}

// Starts this machine's worker in stateDir: joining with the token, or, without one, for
// the fleet it joined before. threads/device: from the worker settings unless given.
Result<std::unique_ptr<DesktopWorker>> startDesktopWorker(const std::optional<net::JoinToken> &token,
                                                          const QString &stateDir, int threads = 0)
{
    const WorkerSettings settings = WorkerSettings::load();
    auto w = std::make_unique<DesktopWorker>();
    WorkerAgent::Options options;
    options.stateDir = stateDir;
    options.name = QHostInfo::localHostName();
    options.threads = threads > 0 ? threads : std::max(1, settings.threads);
    options.device = settings.device;
    w->agent = std::make_unique<WorkerAgent>(options);
    w->policy = std::make_unique<WorkPolicy>(settings, w->idle.get(), &w->clock, w->power.get());
    if (auto started = w->agent->start(token); !started)
        return started.takeError();
    if (token)
        rememberFleet({QStringLiteral("%1:%2").arg(token->host).arg(token->port), stateDir,
                           QDateTime::currentDateTime()});
    w->desk = std::make_unique<AgentDesk>(w->agent.get(), w->policy.get(), stateDir);
    w->policy->start();
    w->window = std::make_unique<ui::WorkerWindow>(w->desk.get());
    w->window->show();
    return w;
}

// Asks for a join token or a fleet joined before and starts the worker for it; nothing when
// the user cancels.
Result<std::unique_ptr<DesktopWorker>> joinFromDialog(QWidget *parent)
{
    ui::JoinDialog dialog([](const QString &text) { return describeJoinToken(text, QDateTime::currentMSecsSinceEpoch()); },
                          rememberedFleets(), parent);
    if (dialog.exec() != QDialog::Accepted)
        return std::unique_ptr<DesktopWorker>();
    if (const auto fleet = dialog.fleet())
        return startDesktopWorker(std::nullopt, fleet->stateDir);
    auto token = net::JoinToken::decode(dialog.token());
    if (!token)
        return token.takeError();
    return startDesktopWorker(*token, fleetStateDir(*token));
}

// An operator's identity for each coordinator it attached to, in a folder of its own named
// after the coordinator's CA; the settings remember which folder belongs to which address.
QString operatorStateDir(const net::JoinToken &token)
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinators/")
           + QString::fromLatin1(token.caFingerprint.left(8).toHex());
}

const QString kCoordinatorsKey = QStringLiteral("operator/coordinators"); // "address\tstate folder" each

QStringList rememberedCoordinators()
{
    return QSettings().value(kCoordinatorsKey).toStringList();
}

void rememberCoordinator(const QString &address, const QString &stateDir)
{
    QStringList list = rememberedCoordinators();
    const QString entry = address + QLatin1Char('\t') + stateDir;
    list.removeAll(entry);
    list.prepend(entry);
    QSettings().setValue(kCoordinatorsKey, list.mid(0, 20));
}

// Opens a control-center window attached to a coordinator elsewhere: with an operator token
// the first time, then from the state folder alone. The window owns its session.
Result<ui::MainWindow *> openRemoteWindow(const std::optional<net::JoinToken> &token, const QString &stateDir)
{
    auto session = std::make_unique<RemoteSession>(
        RemoteSession::Options{stateDir, QHostInfo::localHostName() + QStringLiteral("-operator")});
    if (auto attached = session->attach(token); !attached)
        return attached.takeError();
    rememberCoordinator(session->endpoint(), stateDir);
    auto *window = new ui::MainWindow(session.get(), JobSpec::defaultJob(), QString());
    window->setAttribute(Qt::WA_DeleteOnClose);
    QObject::connect(window, &QObject::destroyed, session.release(), &QObject::deleteLater);
    window->resize(1500, 900);
    window->show();
    return window;
}

// Connect to coordinator…: a coordinator attached to before, or a new operator token.
Result<ui::MainWindow *> connectFromDialog(QWidget *parent)
{
    const QStringList remembered = rememberedCoordinators();
    const QString pasteNew = QObject::tr("A new operator token…");
    QStringList items;
    for (const QString &entry : remembered)
        items << entry.section(QLatin1Char('\t'), 0, 0);
    items << pasteNew;
    bool ok = true;
    const QString choice = remembered.isEmpty()
                               ? pasteNew
                               : QInputDialog::getItem(parent, QObject::tr("Connect to coordinator"),
                                                       QObject::tr("Coordinator"), items, 0, false, &ok);
    if (!ok)
        return static_cast<ui::MainWindow *>(nullptr);
    if (const qsizetype i = items.indexOf(choice); choice != pasteNew && i >= 0)
        return openRemoteWindow(std::nullopt, remembered.at(i).section(QLatin1Char('\t'), 1));
    const QString text = QInputDialog::getMultiLineText(
        parent, QObject::tr("Connect to coordinator"),
        QObject::tr("Paste an operator token. On the coordinator's machine, flotilla token --operator prints one."),
        QString(), &ok);
    if (!ok || text.trimmed().isEmpty())
        return static_cast<ui::MainWindow *>(nullptr);
    auto token = net::JoinToken::decode(text);
    if (!token)
        return token.takeError();
    return openRemoteWindow(*token, operatorStateDir(*token));
}

// Tells, once, how long it took from main() to the first painted frame of a window.
class FirstPaint : public QObject
{
public:
    explicit FirstPaint(bool quitAfter) : m_quitAfter(quitAfter) {}

protected:
    bool eventFilter(QObject *watched, QEvent *event) override
    {
        if (event->type() == QEvent::Paint && !m_seen) {
            m_seen = true;
            std::printf("first window painted %.0f ms after main() started\n", double(g_sinceMain.nsecsElapsed()) / 1e6);
            std::fflush(stdout);
            if (m_quitAfter)
                QTimer::singleShot(0, qApp, &QApplication::quit);
        }
        return QObject::eventFilter(watched, event);
    }

private:
    bool m_quitAfter;
    bool m_seen = false;
};

// The longest gap between ticks of a 10 ms timer on the UI thread: how long it stalled.
class StallMeter : public QObject
{
public:
    StallMeter()
    {
        m_timer.setInterval(10);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            const qint64 now = m_clock.nsecsElapsed();
            if (m_last > 0)
                m_gaps.push_back(double(now - m_last) / 1e6);
            m_last = now;
        });
        m_clock.start();
        m_timer.start();
    }
    void report() const
    {
        std::vector<double> gaps = m_gaps;
        std::sort(gaps.begin(), gaps.end());
        if (gaps.empty())
            return;
        std::printf("UI thread over %.0f s: longest stall %.1f ms (timer interval 10 ms), p99 gap %.1f ms, "
                    "median %.1f ms, %zu ticks\n",
                    double(m_clock.elapsed()) / 1000.0, gaps.back(), gaps[gaps.size() * 99 / 100], gaps[gaps.size() / 2],
                    gaps.size());
    }

private:
    QTimer m_timer;
    QElapsedTimer m_clock;
    qint64 m_last = 0;
    std::vector<double> m_gaps;
};

QString identityDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinator");
}

bool grab(QWidget *w, const QString &path)
{
    w->repaint();
    QApplication::processEvents();
    const bool ok = w->grab().save(path, "PNG");
    std::printf("%s %s\n", ok ? "saved" : "could not save", path.toUtf8().constData());
    return ok;
}

// The pictures of docs/screenshots that show runs: the list, one run's window and a
// comparison of the first three, then quits.
void tourRuns(ui::MainWindow &window, const QDir &dir)
{
    QDir().mkpath(dir.path());
    window.showRuns();
    auto *once = new QObject(&window);
    QObject::connect(window.runs(), &ui::RunsView::listed, once, [&window, dir, once] {
        once->deleteLater();
        ui::RunsView *view = window.runs();
        QStringList dirs;
        for (const QString &d : view->shownDirs())
            for (const ui::RunSummary &r : view->runs())
                if (r.dir == d && r.error.isEmpty() && dirs.size() < 3)
                    dirs << r.dir;
        view->select(dirs);
        grab(&window, dir.filePath(QStringLiteral("runs.png")));
        if (dirs.size() < 2) {
            std::fprintf(stderr, "flotilla gui: the runs tour needs two readable runs, found %d\n", int(dirs.size()));
            QApplication::exit(1);
            return;
        }
        ui::RunWindow *run = view->open(dirs.first());
        ui::ComparisonWindow *comparison = view->compare(dirs);
        auto *check = new QTimer(comparison);
        check->setInterval(200);
        QObject::connect(check, &QTimer::timeout, comparison, [run, comparison, dir, check] {
            if (!comparison->loaded() || (run && !run->loaded()))
                return;
            check->stop();
            if (run)
                grab(run, dir.filePath(QStringLiteral("run-window.png")));
            grab(comparison, dir.filePath(QStringLiteral("comparison.png")));
            QApplication::quit();
        });
        check->start();
    });
}

} // namespace

bool displayAvailable()
{
#if defined(Q_OS_WIN) || defined(Q_OS_MACOS)
    return true;
#else
    return !qEnvironmentVariableIsEmpty("DISPLAY") || !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")
           || !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
#endif
}

StartupMode startupMode(int argc, char **argv)
{
    g_sinceMain.start();
    if (argc < 2)
        return displayAvailable() ? StartupMode::ControlCenter : StartupMode::HeadlessDefault;
    if (std::strcmp(argv[1], "gui") == 0)
        return StartupMode::ControlCenter;
    if (std::strcmp(argv[1], "--join") == 0)
        return StartupMode::WorkerWindow;
    if (std::strcmp(argv[1], "simulate") == 0)
        for (int i = 2; i < argc; ++i)
            if (std::strncmp(argv[i], "--charts", 8) == 0)
                return StartupMode::CommandLineDrawing;
    return StartupMode::CommandLine;
}

int runControlCenter(const QStringList &arguments)
{
    QApplication::setApplicationName(QStringLiteral("flotilla"));
    QApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QApplication::setApplicationVersion(QStringLiteral(FLOTILLA_VERSION));
    QApplication::setWindowIcon(appIcon());
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "The control center: start and watch jobs, hand out join tokens, contribute this machine."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("job"), QStringLiteral("Job file the Start button starts (default: the default job)."),
         QStringLiteral("file")},
        {QStringLiteral("run-dir"), QStringLiteral("Run directory (an unfinished job there resumes)."), QStringLiteral("dir")},
        {QStringLiteral("identity-dir"), QStringLiteral("The coordinator's CA and trust list."), QStringLiteral("dir"),
         identityDir()},
        {QStringLiteral("port"), QStringLiteral("Port remote workers connect to (busy: any free one)."),
         QStringLiteral("port"), QStringLiteral("7441")},
        {QStringLiteral("host"), QStringLiteral("Name remote workers reach this machine by (repeatable)."),
         QStringLiteral("name")},
        {QStringLiteral("start"), QStringLiteral("Start the job at once.")},
        {QStringLiteral("runs"),
         QStringLiteral("Folder whose run folders the Runs tab lists (default: the data location's runs folder)."),
         QStringLiteral("dir")},
        {QStringLiteral("exit-after-paint"), QStringLiteral("Print the start-up time to the first painted window and quit.")},
        {QStringLiteral("runs-screenshots"),
         QStringLiteral("Save pictures of the Runs tab, of the first run's window and of a comparison of the first "
                        "three runs into this folder, and quit."),
         QStringLiteral("dir")},
        {QStringLiteral("exit-after-runs-listed"),
         QStringLiteral("Print how long after main() the Runs tab had listed every run, and quit.")},
        {QStringLiteral("measure-ui-stalls"),
         QStringLiteral("Start the job, measure the UI thread's longest stall for this many seconds, print it and quit."),
         QStringLiteral("seconds")},
        {QStringLiteral("screenshots"), QStringLiteral("Run a short job and save screenshots of every view into this folder."),
         QStringLiteral("dir")},
        {QStringLiteral("connect"),
         QStringLiteral("Watch and command a coordinator that runs elsewhere: an operator token (flotilla token "
                        "--operator), or a file holding one."),
         QStringLiteral("token")},
        {QStringLiteral("operator-state"),
         QStringLiteral("With --connect: the operator's identity folder (default: one per coordinator); without a "
                        "token, attach again from it."),
         QStringLiteral("dir")},
        {QStringLiteral("connect-screenshot"),
         QStringLiteral("With --connect: once the job's charts are drawn, save a picture of the window here and quit."),
         QStringLiteral("file")},
    });
    if (const auto stop = parseOrExit(parser, arguments.mid(1).isEmpty() ? QStringList{QStringLiteral("gui")}
                                                                          : arguments.mid(arguments.value(1) == QLatin1String("gui") ? 1 : 0),
                                      QStringLiteral("gui")))
        return *stop;
    installLogSink(false);

    JobSpec job = JobSpec::defaultJob();
    if (parser.isSet(QStringLiteral("job"))) {
        auto loaded = JobSpec::load(parser.value(QStringLiteral("job")));
        if (!loaded) {
            std::fprintf(stderr, "flotilla gui: %s\n", loaded.error().toUtf8().constData());
            return ExitUsage;
        }
        job = *loaded;
    }
    const bool screenshots = parser.isSet(QStringLiteral("screenshots"));
    if (screenshots) {
        // A short job, so that every chart has something to show within a minute.
        job.dataset.trainLimit = 12000;
        job.dataset.testLimit = 2000;
        job.training.epochs = 6;
        job.training.shards = 12;
        job.fleet.preemption.meanIntervalSeconds = 4;
        job.fleet.preemption.rejoinDelaySeconds = 1;
    }
    QSettings settings;
    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty() && !screenshots && !parser.isSet(QStringLiteral("measure-ui-stalls"))) {
        // The last job, if it did not finish, resumes with its charts.
        const QString last = settings.value(QStringLiteral("job/runDir")).toString();
        if (!last.isEmpty() && QFile::exists(last + QStringLiteral("/flotilla.db"))
            && !QFile::exists(last + QStringLiteral("/model.pt")))
            runDir = last;
    }
    QStringList hosts = parser.values(QStringLiteral("host"));
    if (hosts.isEmpty())
        hosts = {QHostInfo::localHostName(), QStringLiteral("localhost"), QStringLiteral("127.0.0.1")};
    DesktopSession::Options options{parser.value(QStringLiteral("identity-dir")),
                                    quint16(parser.value(QStringLiteral("port")).toUInt()), hosts};
    if (screenshots)
        options.identityDir = QDir(parser.value(QStringLiteral("screenshots"))).filePath(QStringLiteral(".identity"));
    DesktopSession session(options);
    RunLibrary runs(parser.isSet(QStringLiteral("runs"))
                        ? parser.value(QStringLiteral("runs"))
                        : QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs"));
    ui::MainWindow window(&session, job, runDir, &runs);
    if (parser.isSet(QStringLiteral("exit-after-runs-listed"))) {
        window.showRuns();
        QObject::connect(window.runs(), &ui::RunsView::listed, qApp, [](int count) {
            std::printf("runs view listed %d runs %.0f ms after main() started\n", count,
                        double(g_sinceMain.nsecsElapsed()) / 1e6);
            std::fflush(stdout);
            QTimer::singleShot(0, qApp, &QApplication::quit);
        });
    }
    if (parser.isSet(QStringLiteral("runs-screenshots")))
        tourRuns(window, QDir(parser.value(QStringLiteral("runs-screenshots"))));
    FirstPaint firstPaint(parser.isSet(QStringLiteral("exit-after-paint")));
    window.installEventFilter(&firstPaint);
    window.resize(1500, 900);
    QObject::connect(&window, &ui::MainWindow::connectRequested, &window, [&window] {
        if (auto opened = connectFromDialog(&window); !opened)
            QMessageBox::warning(&window, QObject::tr("Connect to coordinator"), opened.error());
    });

    const bool attach = parser.isSet(QStringLiteral("connect")) || parser.isSet(QStringLiteral("operator-state"));
    ui::MainWindow *attached = nullptr;
    if (attach) {
        // Only the attached window: the local control center stays closed.
        std::optional<net::JoinToken> token;
        if (parser.isSet(QStringLiteral("connect"))) {
            auto decoded = tokenArgument(parser.value(QStringLiteral("connect")));
            if (!decoded) {
                std::fprintf(stderr, "flotilla gui: --connect: %s\n", decoded.error().toUtf8().constData());
                return ExitUsage;
            }
            token = *decoded;
        }
        const QString stateDir = parser.isSet(QStringLiteral("operator-state"))
                                     ? parser.value(QStringLiteral("operator-state"))
                                     : operatorStateDir(*token);
        auto opened = openRemoteWindow(token, stateDir);
        if (!opened) {
            std::fprintf(stderr, "flotilla gui: %s\n", opened.error().toUtf8().constData());
            return ExitFailure;
        }
        attached = *opened;
        if (parser.isSet(QStringLiteral("connect-screenshot"))) {
            const QString path = parser.value(QStringLiteral("connect-screenshot"));
            auto *check = new QTimer(attached);
            check->setInterval(500);
            QObject::connect(check, &QTimer::timeout, attached, [attached, path, check] {
                if (!attached->dashboard()->everyChartHasData())
                    return;
                check->stop();
                attached->tabs()->setCurrentIndex(0);
                grab(attached, path);
                QApplication::quit();
            });
            check->start();
        }
    } else {
        window.show();
    }

    std::unique_ptr<StallMeter> stalls;
    if (attach && parser.isSet(QStringLiteral("measure-ui-stalls"))) {
        // Attached to a coordinator elsewhere: how long the stream and the charts hold the UI.
        const int seconds = std::max(5, parser.value(QStringLiteral("measure-ui-stalls")).toInt());
        stalls = std::make_unique<StallMeter>();
        QTimer::singleShot(seconds * 1000, qApp, [&] {
            stalls->report();
            QApplication::quit();
        });
    } else if (parser.isSet(QStringLiteral("measure-ui-stalls"))) {
        const int seconds = std::max(5, parser.value(QStringLiteral("measure-ui-stalls")).toInt());
        window.startJob();
        stalls = std::make_unique<StallMeter>();
        QTimer::singleShot(seconds * 1000, qApp, [&] {
            stalls->report();
            QApplication::quit();
        });
    } else if (parser.isSet(QStringLiteral("start")) && !attach) {
        window.startJob();
    }

    // Join a fleet…: this machine's worker for someone else's coordinator, in its own window.
    std::unique_ptr<DesktopWorker> joined;
    QObject::connect(&window, &ui::MainWindow::joinFleetRequested, &window, [&] {
        const QString state = joined ? joined->agent->status().state : QString();
        if (joined && state != QLatin1String("finished") && state != QLatin1String("failed")) {
            joined->window->show();
            joined->window->raise();
            return;
        }
        auto started = joinFromDialog(&window);
        if (!started)
            QMessageBox::warning(&window, QObject::tr("Join a fleet"), started.error());
        else if (*started)
            joined = std::move(started).value();
    });

    std::unique_ptr<WorkerAgent> remote;
    SystemClock clock;
    std::unique_ptr<WorkPolicy> policy;
    std::unique_ptr<AgentDesk> desk;
    std::unique_ptr<ui::WorkerWindow> workerWindow;
    if (screenshots && !attach) {
        const QDir dir(parser.value(QStringLiteral("screenshots")));
        QDir().mkpath(dir.path());
        window.startJob();
        auto *tour = new QTimer(&window);
        tour->setInterval(500);
        int step = 0;
        QObject::connect(tour, &QTimer::timeout, &window, [&, tour, dir, step]() mutable {
            // A remote worker joins once the endpoint is up, as a lab machine would.
            if (!remote && !session.endpoint().isEmpty()) {
                auto token = session.issueTokenNow(1, 3600);
                WorkerAgent::Options w;
                w.stateDir = dir.filePath(QStringLiteral(".worker"));
                w.name = QStringLiteral("lab-desktop-7");
                w.instanceType = QStringLiteral("local");
                w.priceClass = QStringLiteral("volunteer");
                remote = std::make_unique<WorkerAgent>(w);
                if (token)
                    (void)remote->start(net::JoinToken::decode(*token).value());
                WorkerSettings always; // the tour's worker runs whatever the machine is doing
                always.pauseWhenActive = false;
                policy = std::make_unique<WorkPolicy>(always, nullptr, &clock);
                desk = std::make_unique<AgentDesk>(remote.get(), policy.get(), w.stateDir);
                workerWindow = std::make_unique<ui::WorkerWindow>(desk.get());
                workerWindow->resize(480, 300);
                workerWindow->show();
            }
            if (step == 0 && window.dashboard()->everyChartHasData() && session.state() == JobState::Running) {
                int evaluations = 0;
                for (int i = 0; i < window.events()->table()->rowCount(); ++i)
                    evaluations += window.events()->table()->item(i, 1)->text() == eventName(EventKind::Evaluation) ? 1 : 0;
                if (evaluations < 2)
                    return;
                step = 1;
                window.tabs()->setCurrentIndex(0);
                grab(&window, dir.filePath(QStringLiteral("dashboard.png")));
                window.tabs()->setCurrentWidget(window.workers());
                grab(&window, dir.filePath(QStringLiteral("workers.png")));
                window.tabs()->setCurrentWidget(window.subtasks());
                session.refreshSubtasks();
                return;
            }
            if (step == 1) {
                step = 2;
                grab(&window, dir.filePath(QStringLiteral("subtasks.png")));
                window.tabs()->setCurrentWidget(window.events());
                grab(&window, dir.filePath(QStringLiteral("events.png")));
                if (workerWindow) {
                    grab(workerWindow.get(), dir.filePath(QStringLiteral("worker-window.png")));
                    // The settings of a lab desktop that gives its nights and its idle minutes.
                    WorkerSettings example;
                    example.idleMinutes = 10;
                    example.useWindow = true;
                    example.exclusivePrograms = {QStringLiteral("blender"), QStringLiteral("steam")};
                    example.threads = std::min(4, QThread::idealThreadCount());
                    example.startAtLogin = true;
                    ui::WorkerSettingsDialog settingsDialog(example, desk->deviceChoices(), workerWindow.get());
                    settingsDialog.show();
                    grab(&settingsDialog, dir.filePath(QStringLiteral("worker-settings.png")));
                }
                ui::JobWizard wizard(JobSpec::defaultJob(), 1, &window);
                wizard.show();
                qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("training.epochs")))->setValue(0);
                wizard.findChild<QTabWidget *>()->setCurrentIndex(2); // Training, where the problem is
                grab(&wizard, dir.filePath(QStringLiteral("wizard.png")));
                tour->stop();
                QApplication::quit();
            }
        });
        tour->start();
        QTimer::singleShot(300000, qApp, [] {
            std::fprintf(stderr, "flotilla gui: the screenshot tour did not finish in 5 minutes\n");
            QApplication::exit(1);
        });
    }
    const int code = QApplication::exec();
    if (remote)
        remote->preemptionNotice();
    if (joined)
        joined->agent->preemptionNotice();
    return code;
}

int runWorkerWindow(const QStringList &arguments)
{
    QApplication::setApplicationName(QStringLiteral("flotilla"));
    QApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QApplication::setWindowIcon(appIcon());
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Contribute this machine to a coordinator, in a window. --join without a token asks for one (or for a fleet "
        "joined before); with --state-dir and no token, the worker starts again for the fleet it joined there."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("join"), QStringLiteral("Join token."), QStringLiteral("token")},
        {QStringLiteral("state-dir"),
         QStringLiteral("This worker's identity and shard cache (default: a folder per fleet)."), QStringLiteral("dir")},
        {QStringLiteral("threads"), QStringLiteral("CPU threads to give (default: as the worker settings say)."),
         QStringLiteral("n")},
    });
    // `flotilla --join` alone (the desktop entry's action, the login entry): no token to parse.
    QStringList args = arguments;
    for (int i = 1; i < args.size(); ++i) {
        if (args[i] == QLatin1String("--join") && (i + 1 == args.size() || args[i + 1].startsWith(QLatin1String("--")))) {
            args.removeAt(i);
            break;
        }
    }
    if (const auto stop = parseOrExit(parser, args, QStringLiteral("--join")))
        return *stop;
    installLogSink(false);
    const int threads = parser.isSet(QStringLiteral("threads")) ? std::max(1, parser.value(QStringLiteral("threads")).toInt()) : 0;
    QString stateDir = parser.value(QStringLiteral("state-dir"));
    Result<std::unique_ptr<DesktopWorker>> worker = std::unique_ptr<DesktopWorker>();
    if (parser.isSet(QStringLiteral("join"))) {
        auto decoded = net::JoinToken::decode(parser.value(QStringLiteral("join")));
        if (!decoded) {
            std::fprintf(stderr, "flotilla: %s\n", decoded.error().toUtf8().constData());
            return ExitUsage;
        }
        worker = startDesktopWorker(*decoded, stateDir.isEmpty() ? fleetStateDir(*decoded) : stateDir, threads);
    } else if (!stateDir.isEmpty()) {
        worker = startDesktopWorker(std::nullopt, stateDir, threads);
    } else {
        worker = joinFromDialog(nullptr);
        if (worker && !*worker)
            return 0; // cancelled
    }
    if (!worker) {
        std::fprintf(stderr, "flotilla: %s\n", worker.error().toUtf8().constData());
        return ExitUsage;
    }
    const int code = QApplication::exec();
    (*worker)->agent->preemptionNotice();
    return code;
}

} // namespace flotilla
