#include "app/GuiTours.h"

#include "agent/WorkerAgent.h"
#include "common/Clock.h"
#include "desktop/AgentDesk.h"
#include "job/EventKind.h"
#include "machine/WorkPolicy.h"
#include "machine/WorkerSettings.h"
#include "net/TrustStore.h"
#include "ui/Comparison.h"
#include "ui/Dashboard.h"
#include "ui/JobWizard.h"
#include "ui/MainWindow.h"
#include "ui/RunsView.h"
#include "ui/Views.h"
#include "ui/WorkerDesk.h"
#include "ui/WorkerSettingsDialog.h"

#include <QApplication>
#include <QDir>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace flotilla {

QElapsedTimer &sinceMain()
{
    static QElapsedTimer clock;
    return clock;
}

namespace {

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
            std::printf("first window painted %.0f ms after main() started\n", double(sinceMain().nsecsElapsed()) / 1e6);
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

// --screenshots: the control center's own job, a remote worker that joins it as a lab
// machine would, and a picture of every view once the charts have something to show.
struct GuiTours::Tour
{
    SystemClock clock;
    std::unique_ptr<WorkerAgent> remote;
    std::unique_ptr<WorkPolicy> policy;
    std::unique_ptr<AgentDesk> desk;
    std::unique_ptr<ui::WorkerWindow> workerWindow;
    int step = 0;

    void joinWorker(DesktopSession &session, const QDir &dir)
    {
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

    // One turn of the tour; true when it is done.
    bool turn(ui::MainWindow &window, DesktopSession &session, const QDir &dir)
    {
        // A remote worker joins once the endpoint is up.
        if (!remote && !session.endpoint().isEmpty())
            joinWorker(session, dir);
        if (step == 0 && window.dashboard()->everyChartHasData() && session.state() == JobState::Running) {
            int evaluations = 0;
            for (int i = 0; i < window.events()->table()->rowCount(); ++i)
                evaluations += window.events()->table()->item(i, 1)->text() == eventName(EventKind::Evaluation) ? 1 : 0;
            if (evaluations < 2)
                return false;
            step = 1;
            window.tabs()->setCurrentIndex(0);
            grab(&window, dir.filePath(QStringLiteral("dashboard.png")));
            window.tabs()->setCurrentWidget(window.workers());
            grab(&window, dir.filePath(QStringLiteral("workers.png")));
            window.tabs()->setCurrentWidget(window.subtasks());
            session.refreshSubtasks();
            return false;
        }
        if (step != 1)
            return false;
        step = 2; // the pictures below turn the event loop: no second round of them
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
        return true;
    }
};

QList<QCommandLineOption> GuiTours::options()
{
    return {
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
        {QStringLiteral("connect-screenshot"),
         QStringLiteral("With --connect: once the job's charts are drawn, save a picture of the window here and quit."),
         QStringLiteral("file")},
    };
}

GuiTours::GuiTours(const QCommandLineParser &parser) : m_parser(parser) { }

GuiTours::~GuiTours() = default;

bool GuiTours::runsItsOwnJob() const
{
    return m_parser.isSet(QStringLiteral("screenshots")) || m_parser.isSet(QStringLiteral("measure-ui-stalls"));
}

void GuiTours::prepare(JobSpec &job, DesktopSession::Options &options) const
{
    if (!m_parser.isSet(QStringLiteral("screenshots")))
        return;
    // A short job, so that every chart has something to show within a minute.
    job.dataset.trainLimit = 12000;
    job.dataset.testLimit = 2000;
    job.training.epochs = 6;
    job.training.shards = 12;
    job.fleet.preemption.meanIntervalSeconds = 4;
    job.fleet.preemption.rejoinDelaySeconds = 1;
    options.identityDir = QDir(m_parser.value(QStringLiteral("screenshots"))).filePath(QStringLiteral(".identity"));
}

void GuiTours::watchWindow(ui::MainWindow &window)
{
    if (m_parser.isSet(QStringLiteral("exit-after-runs-listed"))) {
        window.showRuns();
        QObject::connect(window.runs(), &ui::RunsView::listed, qApp, [](int count) {
            std::printf("runs view listed %d runs %.0f ms after main() started\n", count,
                        double(sinceMain().nsecsElapsed()) / 1e6);
            std::fflush(stdout);
            QTimer::singleShot(0, qApp, &QApplication::quit);
        });
    }
    if (m_parser.isSet(QStringLiteral("runs-screenshots")))
        tourRuns(window, QDir(m_parser.value(QStringLiteral("runs-screenshots"))));
    m_firstPaint = std::make_unique<FirstPaint>(m_parser.isSet(QStringLiteral("exit-after-paint")));
    window.installEventFilter(m_firstPaint.get());
}

void GuiTours::watchAttached(ui::MainWindow *attached)
{
    if (m_parser.isSet(QStringLiteral("connect-screenshot"))) {
        const QString path = m_parser.value(QStringLiteral("connect-screenshot"));
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
    // Attached to a coordinator elsewhere: how long the stream and the charts hold the UI.
    measureStalls();
}

bool GuiTours::watchJob(ui::MainWindow &window, DesktopSession &session)
{
    if (m_parser.isSet(QStringLiteral("measure-ui-stalls"))) {
        window.startJob();
        measureStalls();
        return true;
    }
    if (!m_parser.isSet(QStringLiteral("screenshots")))
        return false;
    const QDir dir(m_parser.value(QStringLiteral("screenshots")));
    QDir().mkpath(dir.path());
    window.startJob();
    m_tour = std::make_unique<Tour>();
    auto *tour = new QTimer(&window);
    tour->setInterval(500);
    QObject::connect(tour, &QTimer::timeout, &window, [this, &window, &session, dir, tour] {
        if (m_tour->turn(window, session, dir)) {
            tour->stop();
            QApplication::quit();
        }
    });
    tour->start();
    QTimer::singleShot(300000, qApp, [] {
        std::fprintf(stderr, "flotilla gui: the screenshot tour did not finish in 5 minutes\n");
        QApplication::exit(1);
    });
    return true;
}

void GuiTours::measureStalls()
{
    if (!m_parser.isSet(QStringLiteral("measure-ui-stalls")))
        return;
    const int seconds = std::max(5, m_parser.value(QStringLiteral("measure-ui-stalls")).toInt());
    auto stalls = std::make_unique<StallMeter>();
    StallMeter *meter = stalls.get();
    m_stalls = std::move(stalls);
    QTimer::singleShot(seconds * 1000, qApp, [meter] {
        meter->report();
        QApplication::quit();
    });
}

void GuiTours::finish()
{
    if (m_tour && m_tour->remote)
        m_tour->remote->preemptionNotice();
    m_tour.reset(); // its worker goes before the session it worked for
}

} // namespace flotilla
