#include "app/GuiCommand.h"

#include "app/AppLog.h"
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bridge/DesktopSession.h"
#include "bridge/RunLibrary.h"
#include "bridge/WorkerAgent.h"

#include "ui/AppIcon.h"
#include "ui/Comparison.h"
#include "ui/Dashboard.h"
#include "ui/JobWizard.h"
#include "ui/MainWindow.h"
#include "ui/RunsView.h"
#include "ui/Views.h"
#include "ui/WorkerDesk.h"

#include <QApplication>
#include <QChartView>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QHostInfo>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>

#include <cstdio>
#include <cstring>

namespace flotilla {

namespace {

// Milliseconds since main() began, for the start-up measurement.
QElapsedTimer g_sinceMain;

// The worker window's view of a WorkerAgent, with hours contributed kept across runs.
class AgentDesk : public ui::WorkerDesk
{
public:
    explicit AgentDesk(WorkerAgent *agent) : m_agent(agent)
    {
        QSettings settings;
        m_hoursBefore = settings.value(QStringLiteral("worker/hoursContributed"), 0.0).toDouble();
        connect(agent, &WorkerAgent::statusChanged, this, [this] {
            QSettings().setValue(QStringLiteral("worker/hoursContributed"),
                                 m_hoursBefore + m_agent->status().secondsTrained / 3600.0);
            Q_EMIT statusChanged();
        });
    }
    ui::WorkerDeskStatus status() const override
    {
        const WorkerAgent::Status s = m_agent->status();
        return ui::WorkerDeskStatus{s.state, s.coordinator, s.subtask, s.progress,
                                    m_hoursBefore + s.secondsTrained / 3600.0, s.subtasksDone, s.message};
    }
    void setSuspended(bool suspended) override { m_agent->setSuspended(suspended); }
    bool suspended() const override { return m_agent->suspended(); }

private:
    WorkerAgent *m_agent;
    double m_hoursBefore = 0.0;
};

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
    window.show();

    std::unique_ptr<StallMeter> stalls;
    if (parser.isSet(QStringLiteral("measure-ui-stalls"))) {
        const int seconds = std::max(5, parser.value(QStringLiteral("measure-ui-stalls")).toInt());
        window.startJob();
        stalls = std::make_unique<StallMeter>();
        QTimer::singleShot(seconds * 1000, qApp, [&] {
            stalls->report();
            QApplication::quit();
        });
    } else if (parser.isSet(QStringLiteral("start"))) {
        window.startJob();
    }

    std::unique_ptr<WorkerAgent> remote;
    std::unique_ptr<AgentDesk> desk;
    std::unique_ptr<ui::WorkerWindow> workerWindow;
    if (screenshots) {
        const QDir dir(parser.value(QStringLiteral("screenshots")));
        QDir().mkpath(dir.path());
        window.startJob();
        auto *tour = new QTimer(&window);
        tour->setInterval(500);
        int step = 0;
        QObject::connect(tour, &QTimer::timeout, &window, [&, tour, dir, step]() mutable {
            // A remote worker joins once the endpoint is up, as a lab machine would.
            if (!remote && !session.endpoint().isEmpty()) {
                auto token = session.issueToken(1, 3600);
                WorkerAgent::Options w;
                w.stateDir = dir.filePath(QStringLiteral(".worker"));
                w.name = QStringLiteral("lab-desktop-7");
                w.instanceType = QStringLiteral("local");
                w.priceClass = QStringLiteral("volunteer");
                remote = std::make_unique<WorkerAgent>(w);
                if (token)
                    (void)remote->start(net::JoinToken::decode(*token).value());
                desk = std::make_unique<AgentDesk>(remote.get());
                workerWindow = std::make_unique<ui::WorkerWindow>(desk.get());
                workerWindow->resize(480, 300);
                workerWindow->show();
            }
            if (step == 0 && window.dashboard()->everyChartHasData() && session.state() == ui::JobState::Running) {
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
                if (workerWindow)
                    grab(workerWindow.get(), dir.filePath(QStringLiteral("worker-window.png")));
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
    return code;
}

int runWorkerWindow(const QStringList &arguments)
{
    QApplication::setApplicationName(QStringLiteral("flotilla"));
    QApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QApplication::setWindowIcon(appIcon());
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Contribute this machine to a coordinator, in a window."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("join"), QStringLiteral("Join token."), QStringLiteral("token")},
        {QStringLiteral("state-dir"), QStringLiteral("This worker's identity and shard cache."), QStringLiteral("dir"),
         QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/worker")},
        {QStringLiteral("threads"), QStringLiteral("CPU threads to give."), QStringLiteral("n"), QStringLiteral("1")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("--join")))
        return *stop;
    installLogSink(false);
    std::optional<net::JoinToken> token;
    if (parser.isSet(QStringLiteral("join"))) {
        auto decoded = net::JoinToken::decode(parser.value(QStringLiteral("join")));
        if (!decoded) {
            std::fprintf(stderr, "flotilla: %s\n", decoded.error().toUtf8().constData());
            return ExitUsage;
        }
        token = *decoded;
    }
    WorkerAgent::Options options;
    options.stateDir = parser.value(QStringLiteral("state-dir"));
    options.name = QHostInfo::localHostName();
    options.threads = std::max(1, parser.value(QStringLiteral("threads")).toInt());
    WorkerAgent agent(options);
    AgentDesk desk(&agent);
    ui::WorkerWindow window(&desk);
    window.show();
    if (auto started = agent.start(token); !started) {
        std::fprintf(stderr, "flotilla: %s\n", started.error().toUtf8().constData());
        return ExitUsage;
    }
    const int code = QApplication::exec();
    agent.preemptionNotice();
    return code;
}

} // namespace flotilla
