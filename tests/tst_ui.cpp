// The control center's window against a fake ControlSession: what the user presses reaches
// the session, and what the session reports (states, events, points, snapshots) shows where
// it should. No engine, no network, no LibTorch: this is the UI alone. tst_gui keeps the
// end-to-end cases with a real job behind the window.
#include "testsupport/Records.h"
#include "job/EventKind.h"
#include "ui/ControlSession.h"
#include "ui/Dashboard.h"
#include "ui/MainWindow.h"
#include "ui/RunCatalog.h"
#include "ui/RunsView.h"
#include "ui/Views.h"
#include "ui/WelcomePanel.h"

#include <QAction>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QGraphicsItemGroup>
#include <QGraphicsTextItem>
#include <QLabel>
#include <QLineSeries>
#include <QMenuBar>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QSystemTrayIcon>
#include <QTableWidget>
#include <QToolBar>
#include <QToolButton>
#include <QValueAxis>
#include <QtTest>

#include <tuple>

using namespace flotilla;
using namespace flotilla::ui;

namespace {

// Records what the window asks of it; tests play the coordinator's part through report*().
class FakeSession : public ControlSession
{
public:
    using ControlSession::ControlSession;

    JobState state() const override { return m_state; }
    JobSpec job() const override { return m_job; }
    QString runDir() const override { return m_runDir; }
    QString endpoint() const override { return {}; }

    void start(const JobSpec &job, const QString &runDir) override
    {
        calls << QStringLiteral("start");
        m_job = job;
        m_runDir = runDir.isEmpty() ? QStringLiteral("/runs/new") : runDir;
        report(JobState::Loading);
    }
    void setPaused(bool paused) override { calls << (paused ? QStringLiteral("pause") : QStringLiteral("resume")); }
    void stop() override { calls << QStringLiteral("stop"); }
    void setContributing(bool on, int threads) override
    {
        calls << QStringLiteral("contribute %1 %2").arg(on ? QStringLiteral("on") : QStringLiteral("off")).arg(threads);
        m_contributing = on;
    }
    bool contributing() const override { return m_contributing; }
    void issueToken(int, qint64) override { Q_EMIT tokenIssued(QStringLiteral("token"), {}); }
    Result<QList<JoinTokenRow>> joinTokens(bool) override { return QList<JoinTokenRow> {}; }
    void revokeToken(const QString &) override { }
    void revoke(const QString &name) override
    {
        calls << QStringLiteral("revoke ") + name;
        Q_EMIT commandAnswered({}, QStringLiteral("no worker is called '%1'").arg(name));
    }
    void release(qint64 workerId) override { calls << QStringLiteral("release %1").arg(workerId); }
    void refreshSubtasks() override
    {
        ++refreshes;
        Q_EMIT subtasksLoaded(subtasks);
    }
    Result<void> exportMetrics(const QString &) override { return {}; }
    Result<void> exportModel(const QString &) override { return {}; }

    void report(JobState s, const QString &message = {})
    {
        m_state = s;
        Q_EMIT stateChanged(s, message);
    }

    QStringList calls;
    int refreshes = 0;
    QList<SubtaskRow> subtasks; // what the store would answer

private:
    JobState m_state = JobState::NoJob;
    JobSpec m_job;
    QString m_runDir;
    bool m_contributing = false;
};

EventRecord eventOf(EventKind kind, qint64 atMs, const QString &detail = {})
{
    return records::eventAt(atMs, eventName(kind), 1, 2, 3, detail);
}

QAction *toolbarAction(const MainWindow &w, const QString &text)
{
    for (QToolBar *bar : w.findChildren<QToolBar *>()) {
        for (QAction *a : bar->actions()) {
            if (a->text() == text)
                return a;
        }
    }
    return nullptr;
}

QLineSeries *seriesNamed(const Dashboard &d, const QString &name)
{
    for (int i = 0; i < d.chartNames().size(); ++i) {
        for (QAbstractSeries *s : d.chartView(i)->chart()->series()) {
            if (s->name() == name)
                return qobject_cast<QLineSeries *>(s);
        }
    }
    return nullptr;
}

// The tick labels a chart view has drawn, one list per axis, read from its scene: each axis
// keeps its labels as text items in a group of their own.
QList<QStringList> drawnTickLabels(QChartView *view)
{
    QMap<QGraphicsItem *, QStringList> groups;
    const QList<QGraphicsItem *> items = view->scene()->items(Qt::AscendingOrder);
    for (QGraphicsItem *item : items) {
        auto *text = qgraphicsitem_cast<QGraphicsTextItem *>(item);
        if (!text || !text->isVisible() || !text->parentItem()
            || text->parentItem()->type() != QGraphicsItemGroup::Type)
            continue;
        groups[text->parentItem()] << text->toPlainText();
    }
    return groups.values();
}

QString repeated(const QStringList &labels)
{
    QStringList seen;
    for (const QString &l : labels) {
        if (seen.contains(l))
            return l;
        seen << l;
    }
    return {};
}

QValueAxis *xAxis(const Dashboard &d, int chart)
{
    return qobject_cast<QValueAxis *>(d.chartView(chart)->chart()->axes(Qt::Horizontal).value(0));
}

QXYSeries *firstSeries(const Dashboard &d, int chart)
{
    return qobject_cast<QXYSeries *>(d.chartView(chart)->chart()->series().value(0));
}

Snapshot snapshotAt(qint64 atMs, int online, double samplesPerSecond, const QString &mine = {})
{
    Snapshot s;
    s.job = QStringLiteral("fashion-mnist-cnn");
    s.atMs = atMs;
    s.workersOnline = online;
    WorkerRow w;
    w.id = 1;
    w.name = QStringLiteral("local-1");
    w.address = QStringLiteral("this machine");
    w.online = online > 0;
    w.samplesPerSecond = samplesPerSecond;
    w.subtask = mine;
    w.progress = mine.isEmpty() ? -1.0 : 0.45;
    s.workers = {w};
    return s;
}

} // namespace

// Two runs in memory; the current one is whichever the window says it runs.
class FakeCatalog : public RunCatalog
{
public:
    void refresh() override
    {
        ++refreshes;
        QList<RunSummary> runs;
        for (const QString &dir : {QStringLiteral("/runs/new"), QStringLiteral("/runs/old")}) {
            RunSummary r;
            r.dir = dir;
            r.name = dir.section(u'/', -1);
            r.state = dir == current ? QStringLiteral("running") : QStringLiteral("finished");
            r.current = dir == current;
            r.createdMs = dir == current ? 2000 : 1000;
            r.bestAccuracy = 0.9;
            runs << r;
        }
        Q_EMIT runsListed(runs);
    }
    void loadHistory(const QString &dir) override
    {
        History h;
        h.evaluations << records::evaluationAt(1000, 0, 10, 0.8, 0.5);
        Q_EMIT historyLoaded(dir, h);
    }
    Result<void> addFolder(const QString &) override { return {}; }
    Result<QString> rename(const QString &dir, const QString &) override { return dir; }
    Result<void> remove(const QString &) override { return {}; }
    void setCurrentRun(const QString &dir) override { current = dir; }

    QString current;
    int refreshes = 0;
};

class TestUi : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void buttonsReachTheSessionAndFollowItsState()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        QAction *start = toolbarAction(window, QStringLiteral("Start"));
        QAction *pause = toolbarAction(window, QStringLiteral("Pause"));
        QAction *stop = toolbarAction(window, QStringLiteral("Stop"));
        QVERIFY(start && pause && stop);
        QVERIFY(start->isEnabled());
        QVERIFY(!pause->isEnabled());
        QVERIFY(!stop->isEnabled());

        start->trigger();
        QCOMPARE(session.calls.value(0), QStringLiteral("start"));
        QVERIFY(session.calls.value(1).startsWith(QLatin1String("contribute ")));
        QVERIFY(!start->isEnabled()); // Loading

        session.report(JobState::Running);
        QVERIFY(!start->isEnabled());
        QVERIFY(pause->isEnabled());
        QVERIFY(stop->isEnabled());
        QVERIFY(window.statusText().startsWith(describe(JobState::Running)));

        pause->trigger();
        QCOMPARE(session.calls.last(), QStringLiteral("pause"));
        session.report(JobState::Paused);
        QCOMPARE(pause->text(), QStringLiteral("Resume"));
        pause->trigger();
        QCOMPARE(session.calls.last(), QStringLiteral("resume"));

        stop->trigger();
        QCOMPARE(session.calls.last(), QStringLiteral("stop"));
        session.report(JobState::Stopped);
        QVERIFY(start->isEnabled());
        QCOMPARE(start->text(), QStringLiteral("Resume job"));
        QVERIFY(!stop->isEnabled());

        // A second Start while running does nothing.
        session.report(JobState::Running);
        const qsizetype before = session.calls.size();
        window.startJob();
        QCOMPARE(session.calls.size(), before);
    }

    void runsTabFollowsTheJobThisWindowRuns()
    {
        FakeSession session;
        FakeCatalog catalog;
        MainWindow window(&session, JobSpec::defaultJob(), QString(), &catalog);
        QVERIFY(window.runs());
        QCOMPARE(catalog.refreshes, 1); // listed at once, for the cold start
        QStringList menus;
        for (QAction *a : window.menuBar()->actions())
            menus << a->text();
        QCOMPARE(menus, (QStringList{QStringLiteral("&File"), QStringLiteral("&Job"), QStringLiteral("&Runs"), QStringLiteral("&Help")}));

        window.startJob(); // the fake session runs it in /runs/new
        QCOMPARE(catalog.current, QStringLiteral("/runs/new"));
        window.showRuns();
        QCOMPARE(window.tabs()->currentWidget(), window.runs());
        QVERIFY(catalog.refreshes >= 2); // listed again when the tab came into view
        QCOMPARE(window.runs()->table()->rowCount(), 2);
        QVERIFY(window.runs()->table()->item(0, 0)->font().bold()); // the newest first: this window's job
        // Opening the job this window runs shows its live dashboard, not a copy from the store.
        QCOMPARE(window.runs()->open(QStringLiteral("/runs/new")), nullptr);
        QCOMPARE(window.tabs()->currentIndex(), 0);
        // Another run opens in a window of its own, drawn from its history.
        RunWindow *other = window.runs()->open(QStringLiteral("/runs/old"));
        QVERIFY(other && other->loaded());
        QVERIFY(!other->dashboard()->isEmpty());

        session.report(JobState::Finished);
        QVERIFY(catalog.current.isEmpty());
    }

    void failureAndRefusalsAreShown()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        session.report(JobState::Failed, QStringLiteral("cannot read 'train-images-idx3-ubyte'"));
        QVERIFY(window.statusText().contains(QLatin1String("cannot read 'train-images-idx3-ubyte'")));
        QCOMPARE(window.statusBar()->currentMessage(), QStringLiteral("cannot read 'train-images-idx3-ubyte'"));

        window.revokeWorker(QStringLiteral("laptop-7"));
        QCOMPARE(session.calls.last(), QStringLiteral("revoke laptop-7"));
        QVERIFY(window.statusBar()->currentMessage().contains(QLatin1String("no worker is called 'laptop-7'")));
    }

    // The events view: one filter entry per kind a job records (the table in
    // job/EventKind.h), filtering by kind and text, trouble in red, attention in the status bar.
    void eventsAreFilteredAndTroubleStandsOut()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        EventsView *events = window.events();
        auto *kinds = events->findChild<QComboBox *>();
        QVERIFY(kinds);
        QCOMPARE(kinds->count(), jobEventKinds().size() + 1);
        for (int i = 1; i < kinds->count(); ++i) {
            const auto kind = eventKindNamed(kinds->itemText(i));
            QVERIFY2(kind, qPrintable(kinds->itemText(i)));
            QVERIFY(eventInfo(*kind).recordedBy != EventSource::Sim);
            QCOMPARE(kinds->itemData(i, Qt::ToolTipRole).toString(), eventInfo(*kind).meaning);
        }

        session.report(JobState::Running);
        Q_EMIT session.eventAdded(eventOf(EventKind::WorkerJoined, 1000, QStringLiteral("desk-1 joined")));
        Q_EMIT session.eventAdded(eventOf(EventKind::LeaseGranted, 1100, QStringLiteral("epoch 1, shard 3")));
        Q_EMIT session.eventAdded(eventOf(EventKind::LeaseGranted, 1200, QStringLiteral("epoch 1, shard 4")));
        Q_EMIT session.eventAdded(eventOf(EventKind::ResultRejected, 1300, QStringLiteral("non-finite weights")));
        Q_EMIT session.eventAdded(eventOf(EventKind::WorkerLeft, 1400, QStringLiteral("desk-1 left")));
        QCOMPARE(events->table()->rowCount(), 5);
        QCOMPARE(events->visibleRows(), 5);

        events->setFilter(eventName(EventKind::LeaseGranted), QString());
        QCOMPARE(events->visibleRows(), 2);
        events->setFilter(eventName(EventKind::LeaseGranted), QStringLiteral("shard 4"));
        QCOMPARE(events->visibleRows(), 1);
        events->setFilter(QString(), QStringLiteral("desk-1"));
        QCOMPARE(events->visibleRows(), 2);
        events->setFilter(QString(), QString());
        QCOMPARE(events->visibleRows(), 5);

        const QColor normal = events->table()->item(1, 1)->foreground().color();
        const QColor rejected = events->table()->item(3, 1)->foreground().color();
        QVERIFY(rejected != normal);
        QCOMPARE(events->table()->item(0, 1)->foreground().color(), normal); // worker-joined: a notice

        Q_EMIT session.eventAdded(eventOf(EventKind::EvaluationFailed, 1500, QStringLiteral("out of memory")));
        QVERIFY(window.statusBar()->currentMessage().contains(QLatin1String("out of memory")));
        QCOMPARE(events->table()->item(5, 1)->foreground().color(), rejected);
    }

    // The charts take the session's points as they come: the loss line is the running
    // average, accuracy in percent, workers online from joins and snapshots.
    void chartsTakeTheSessionsPoints()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        session.report(JobState::Running);
        Dashboard *d = window.dashboard();
        QVERIFY(!d->everyChartHasData());

        Q_EMIT session.assimilated(records::assimilationAt(1000, 1, 1, 0, 2.0, 500, 1.0, 1));
        Q_EMIT session.assimilated(records::assimilationAt(2000, 2, 2, 1, 1.0, 500, 1.0, 1));
        QLineSeries *loss = seriesNamed(*d, QStringLiteral("training loss (average)"));
        QVERIFY(loss);
        // Assimilations are drawn in batches, a few times a second.
        QTRY_COMPARE_WITH_TIMEOUT(loss->count(), 2, 2000);
        QCOMPARE(loss->at(0).y(), 2.0);
        QCOMPARE(loss->at(1).y(), 0.9 * 2.0 + 0.1 * 1.0);

        Q_EMIT session.evaluated(records::evaluationAt(2500, 0, 2, 0.815, 0.52));
        QLineSeries *accuracy = seriesNamed(*d, QStringLiteral("test accuracy"));
        QVERIFY(accuracy);
        QCOMPARE(accuracy->count(), 1);
        QCOMPARE(accuracy->at(0).y(), 81.5);

        Q_EMIT session.costUpdated(CostPoint { 3000, 0.01, 0.03, 0.01, 2.0, 0.0 });
        Snapshot s;
        s.job = QStringLiteral("fashion-cnn");
        s.atMs = 3000;
        s.workersOnline = 2;
        s.epochs = 5;
        WorkerRow w;
        w.id = 1;
        w.name = QStringLiteral("desk-1");
        w.online = true;
        w.samplesPerSecond = 900;
        s.workers = { w };
        Q_EMIT session.snapshot(s);
        QTRY_VERIFY_WITH_TIMEOUT(d->everyChartHasData(), 2000);
        QLineSeries *online = seriesNamed(*d, QStringLiteral("online"));
        QVERIFY(online);
        QCOMPARE(online->at(online->count() - 1).y(), 2.0);
        QVERIFY(window.statusText().contains(QLatin1String("fashion-cnn")));
        QCOMPARE(window.workers()->findChild<QTableWidget *>()->rowCount(), 1);

        // A new Start clears the old run's charts and events.
        session.report(JobState::Finished);
        window.startJob();
        QVERIFY(!d->everyChartHasData());
        QCOMPARE(window.events()->table()->rowCount(), 0);
    }

    // A large fleet's assimilations arrive by the hundred: all are drawn (in batches), and
    // switching the loss chart between time and version redraws the loss line alone; the
    // staleness charts keep each assimilation once.
    void manyAssimilationsAreDrawnOnce()
    {
        Dashboard d;
        for (int i = 1; i <= 600; ++i)
            d.addAssimilation(records::assimilationAt(1000 + i * 50, i, i, i % 3, 1.0, 32, 0.5, i % 100));
        QVERIFY(!d.isEmpty()); // queued points count
        QLineSeries *loss = seriesNamed(d, QStringLiteral("training loss (average)"));
        auto *staleness = qobject_cast<QXYSeries *>(d.chartView(1)->chart()->series().at(0));
        QVERIFY(loss && staleness);
        QTRY_COMPARE_WITH_TIMEOUT(loss->count(), 600, 2000);
        QCOMPARE(staleness->count(), 600);
        auto *against = d.findChild<QComboBox *>();
        against->setCurrentIndex(1);
        QCOMPARE(loss->count(), 600);
        QCOMPARE(loss->at(599).x(), 600.0); // versions
        against->setCurrentIndex(0);
        QCOMPARE(loss->count(), 600);
        QCOMPARE(staleness->count(), 600);
        QCOMPARE(staleness->at(599), QPointF(600, 0));
    }

    // Before anything is drawn the dashboard says what Start will do, and offers Start and
    // New job…; once a job loads, the charts take its place.
    void emptyDashboardSaysWhatStartDoes()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        window.resize(1400, 900);
        window.show();
        QVERIFY(window.showsWelcome());
        const QString text = window.welcome()->text();
        QVERIFY2(text.contains(QStringLiteral("Start trains a small CNN on Fashion-MNIST for %1 epochs of shards of at "
                                             "least 16 steps")
                                   .arg(JobSpec::defaultJob().training.epochs)),
                 qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("rounds: the workers' changes from one version averaged and carried as "
                                             "far as the workers online, with outer momentum 0.9")),
                 qPrintable(text));
        QVERIFY2(text.contains(QLatin1String("preemption about every 20 s")), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("New job…")), qPrintable(text));
        QToolButton *start = nullptr;
        QToolButton *newJob = nullptr;
        for (QToolButton *b : window.welcome()->findChildren<QToolButton *>()) {
            if (b->defaultAction() == toolbarAction(window, QStringLiteral("Start")))
                start = b;
            if (b->defaultAction() == toolbarAction(window, QStringLiteral("New job…")))
                newJob = b;
        }
        QVERIFY(start && newJob);
        QVERIFY(start->isVisible() && start->isEnabled());
        QVERIFY(newJob->isVisible() && newJob->isEnabled());

        // The sentence follows the job and this machine's settings.
        QCheckBox *contribute = nullptr;
        for (QCheckBox *box : window.machinePanel()->findChildren<QCheckBox *>())
            if (box->text() == QLatin1String("Contribute this machine"))
                contribute = box;
        QVERIFY(contribute);
        contribute->setChecked(false);
        QVERIFY2(window.welcome()->text().contains(QLatin1String("not to train")), qPrintable(window.welcome()->text()));
        contribute->setChecked(true);
        QVERIFY2(window.welcome()->text().contains(QLatin1String("This machine trains too")),
                 qPrintable(window.welcome()->text()));
        JobSpec mlp = JobSpec::defaultJob();
        mlp.model.kind = QStringLiteral("mlp");
        mlp.training.epochs = 1;
        mlp.training.shards = 30;
        mlp.aggregation.rule = QStringLiteral("sync-average");
        mlp.fleet.preemption.meanIntervalSeconds = 0;
        QCOMPARE(describeJob(mlp), QStringLiteral("an MLP (hidden layers 256, 128) on Fashion-MNIST for 1 epoch of 30 "
                                                  "shards, folded into the global model with synchronous averaging "
                                                  "per round"));
        JobSpec buffered = JobSpec::defaultJob();
        buffered.aggregation.rule = QStringLiteral("vc-asgd");
        buffered.aggregation.buffer = 4;
        QVERIFY2(describeJob(buffered).contains(QStringLiteral("VC-ASGD (α = 0.5), 4 results at a time")),
                 qPrintable(describeJob(buffered)));

        session.calls.clear();
        start->click();
        QCOMPARE(session.calls.value(0), QStringLiteral("start"));
        QVERIFY(!window.showsWelcome()); // Loading: the charts, empty, with their axes

        // A start that fails before anything was drawn: the welcome again, with the reason.
        session.report(JobState::Failed, QStringLiteral("cannot read 'train-images-idx3-ubyte'"));
        QVERIFY(window.showsWelcome());
        QVERIFY2(window.welcome()->text().contains(QLatin1String("cannot read 'train-images-idx3-ubyte'")),
                 qPrintable(window.welcome()->text()));

        // A failure after the charts have points leaves them in view.
        window.startJob();
        session.report(JobState::Running);
        Q_EMIT session.snapshot(snapshotAt(1000, 1, 100));
        session.report(JobState::Failed, QStringLiteral("disk full"));
        QVERIFY(!window.showsWelcome());
    }

    // Counts and versions: whole numbers on their axes, never "0 0 0 0 1"; every other axis
    // with enough decimals that no two ticks read the same.
    void axesNeverRepeatALabel()
    {
        Dashboard d;
        d.resize(1400, 800);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        // The first axis that draws too few labels or one label twice, or nothing.
        const auto problem = [&](const char *when) {
            for (int i = 0; i < d.chartNames().size(); ++i) {
                const QList<QStringList> axes = drawnTickLabels(d.chartView(i));
                if (axes.size() < 2)
                    return QStringLiteral("%1, %2: %3 axes").arg(QLatin1String(when), d.chartNames()[i]).arg(axes.size());
                for (const QStringList &labels : axes)
                    if (labels.size() < 2 || !repeated(labels).isEmpty())
                        return QStringLiteral("%1, %2: %3").arg(QLatin1String(when), d.chartNames()[i],
                                                                 labels.join(QLatin1Char(' ')));
            }
            return QString();
        };
        QTRY_VERIFY(!drawnTickLabels(d.chartView(0)).isEmpty());
        QTRY_COMPARE(problem("empty"), QString());

        // One worker, one version, a trickle of samples, a sliver of a cent.
        d.addAssimilation(records::assimilationAt(1000, 1, 1, 0, 2.3, 32, 1.0, 1));
        d.addSnapshot(snapshotAt(1000, 1, 0.4));
        d.addSnapshot(snapshotAt(4000, 1, 0.7));
        d.addCost(CostPoint{4000, 0.000012, 0.00004, 0.000012, 3.0, 0.0});
        // Each chart lays its axes out again on a later turn of the event loop: wait until the
        // changed ones show their new tops (workers 0 to 2, cost to 0.00005, throughput 0.8).
        const auto drawn = [&](int chart, const QString &label) {
            for (const QStringList &labels : drawnTickLabels(d.chartView(chart)))
                if (labels.contains(label))
                    return true;
            return false;
        };
        QTRY_VERIFY(drawn(3, QStringLiteral("2")) && drawn(4, QStringLiteral("0.00005")) && drawn(5, QStringLiteral("0.8")));
        QTRY_COMPARE(problem("one point"), QString());

        d.addSnapshot(snapshotAt(30000, 7, 1234.5));
        QTRY_VERIFY(drawn(3, QStringLiteral("8")) && drawn(5, QStringLiteral("1500")));
        QTRY_COMPARE(problem("more points"), QString());
    }

    // Time axes read in seconds for a short run, hours for a long one; what was drawn in a
    // smaller unit moves with the axis.
    void timeAxesPickTheirUnit()
    {
        Dashboard shortRun;
        shortRun.addSnapshot(snapshotAt(1000, 1, 10));
        shortRun.addSnapshot(snapshotAt(6000, 1, 10));
        for (int chart : {0, 3, 4, 5})
            QVERIFY2(xAxis(shortRun, chart)->titleText().startsWith(QLatin1String("seconds")),
                     qPrintable(xAxis(shortRun, chart)->titleText()));
        QCOMPARE(firstSeries(shortRun, 3)->at(1).x(), 5.0);
        QVERIFY(xAxis(shortRun, 3)->max() >= 5.0 && xAxis(shortRun, 3)->max() <= 10.0);

        Dashboard longRun;
        longRun.addSnapshot(snapshotAt(1000, 1, 10));
        longRun.addSnapshot(snapshotAt(1000 + 600 * 1000, 2, 10));
        QVERIFY(xAxis(longRun, 3)->titleText().startsWith(QLatin1String("minutes")));
        QCOMPARE(firstSeries(longRun, 3)->at(1).x(), 10.0);
        longRun.addSnapshot(snapshotAt(1000 + 3 * 3600 * 1000, 2, 10));
        for (int chart : {0, 3, 4, 5})
            QVERIFY2(xAxis(longRun, chart)->titleText().startsWith(QLatin1String("hours")),
                     qPrintable(xAxis(longRun, chart)->titleText()));
        QLineSeries *online = seriesNamed(longRun, QStringLiteral("online"));
        QCOMPARE(online->at(1).x(), 600.0 / 3600.0);
        QCOMPARE(online->at(2).x(), 3.0);
        QVERIFY(xAxis(longRun, 3)->max() >= 3.0 && xAxis(longRun, 3)->max() <= 4.0);

        // Against version the loss chart counts versions; back against time it takes the unit.
        auto *against = longRun.findChild<QComboBox *>();
        against->setCurrentIndex(1);
        QCOMPARE(xAxis(longRun, 0)->titleText(), QStringLiteral("global model version"));
        against->setCurrentIndex(0);
        QVERIFY(xAxis(longRun, 0)->titleText().startsWith(QLatin1String("hours")));

        longRun.reset();
        QVERIFY(xAxis(longRun, 3)->titleText().startsWith(QLatin1String("seconds")));
        QVERIFY(longRun.isEmpty());
    }

    // The subtasks table fills when it comes into view and keeps up while it is in view,
    // without the Refresh button.
    void subtasksFillWithoutRefresh()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        session.subtasks = {SubtaskRow{1, 0, 0, 0, 2000, QStringLiteral("leased"), 1, 0, {}},
                            SubtaskRow{2, 0, 1, 2000, 4000, QStringLiteral("queued"), 0, 0, {}}};
        window.tabs()->setCurrentWidget(window.subtasks());
        QCOMPARE(session.refreshes, 0); // no job: nothing to read
        window.tabs()->setCurrentIndex(0);
        session.report(JobState::Running);
        window.tabs()->setCurrentWidget(window.subtasks());
        QCOMPARE(window.subtasks()->table()->rowCount(), 2);
        session.subtasks << SubtaskRow{3, 0, 2, 4000, 6000, QStringLiteral("queued"), 0, 0, {}};
        QTRY_COMPARE_WITH_TIMEOUT(window.subtasks()->table()->rowCount(), 3, 5000);
        session.subtasks[0].state = QStringLiteral("done");
        session.report(JobState::Finished); // the final states, at once
        QCOMPARE(window.subtasks()->table()->item(0, 4)->text(), QStringLiteral("done"));
    }

    // The "This machine" panel, the dashboard beside it and the window keep their width as
    // the panel's status line changes.
    void panelsKeepTheirWidth()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        window.resize(1700, 900); // room for the panel to be as wide as it asks
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        const int panel = window.machinePanel()->width();
        const int charts = window.tabs()->width();
        const int whole = window.width();
        session.report(JobState::Running);
        const QStringList subtasks{QString(), QStringLiteral("epoch 1, shard 2, 0–2000"),
                                   QStringLiteral("epoch 12, shard 27, positions 54000–56000 of a long shard name")};
        for (const QString &subtask : subtasks) {
            for (const int online : {0, 1}) {
                Q_EMIT session.snapshot(snapshotAt(1000, online, 100, subtask));
                QTest::qWait(20); // the layout settles on the next turn of the event loop
                const QString when = QStringLiteral("online %1, '%2'").arg(online).arg(subtask);
                QVERIFY2(window.machinePanel()->width() == panel, qPrintable(when));
                QVERIFY2(window.tabs()->width() == charts, qPrintable(when));
                QVERIFY2(window.width() == whole, qPrintable(when));
            }
        }
    }

    void toolbarActionsHaveIconsAndShortcuts()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        QStringList shortcuts;
        int actions = 0;
        for (QAction *a : window.findChild<QToolBar *>()->actions()) {
            if (a->isSeparator())
                continue;
            ++actions;
            QVERIFY2(!a->icon().isNull(), qPrintable(a->text()));
            QVERIFY2(!a->shortcut().isEmpty(), qPrintable(a->text()));
            const QString key = a->shortcut().toString(QKeySequence::NativeText);
            QVERIFY2(a->toolTip().contains(key), qPrintable(a->toolTip()));
            QVERIFY2(!shortcuts.contains(key), qPrintable(key));
            shortcuts << key;
        }
        QCOMPARE(actions, 7);
        QCOMPARE(toolbarAction(window, QStringLiteral("Start"))->shortcut(), QKeySequence(Qt::CTRL | Qt::Key_R));
        QCOMPARE(toolbarAction(window, QStringLiteral("New job…"))->shortcut(), QKeySequence(QKeySequence::New));
        // Join a fleet… is the application's to answer (a dialog, then a worker window).
        QSignalSpy join(&window, &MainWindow::joinFleetRequested);
        toolbarAction(window, QStringLiteral("Join a fleet…"))->trigger();
        QCOMPARE(join.size(), 1);
        QCOMPARE(window.joinFleetAction(), toolbarAction(window, QStringLiteral("Join a fleet…")));
    }

    // A job's end is announced (a tray message where there is a tray); offscreen there is
    // none, and nothing breaks.
    void endOfAJobIsNotified()
    {
        FakeSession session;
        MainWindow window(&session, JobSpec::defaultJob(), QString());
        if (!QSystemTrayIcon::isSystemTrayAvailable())
            QVERIFY(!window.findChild<QSystemTrayIcon *>());
        session.report(JobState::Running);
        session.report(JobState::Finished); // the default: no tray, no message, no crash
        QList<std::tuple<QString, QString, bool>> sent;
        window.notify = [&](const QString &title, const QString &text, bool failed) { sent.append({title, text, failed}); };
        window.startJob();
        session.report(JobState::Running);
        Snapshot s = snapshotAt(1000, 1, 100);
        s.testAccuracy = 0.9123;
        Q_EMIT session.snapshot(s);
        session.report(JobState::Paused);
        QVERIFY(sent.isEmpty());
        session.report(JobState::Finished);
        QCOMPARE(sent.size(), 1);
        QCOMPARE(std::get<0>(sent[0]), QStringLiteral("Job finished"));
        QVERIFY2(std::get<1>(sent[0]).contains(QLatin1String("fashion-mnist-cnn finished with 91.23% test accuracy")),
                 qPrintable(std::get<1>(sent[0])));
        QVERIFY(!std::get<2>(sent[0]));
        session.report(JobState::Finished);
        QCOMPARE(sent.size(), 1);

        window.startJob();
        session.report(JobState::Failed, QStringLiteral("no space left on /runs"));
        QCOMPARE(sent.size(), 2);
        QCOMPARE(std::get<0>(sent[1]), QStringLiteral("Job failed"));
        QVERIFY2(std::get<1>(sent[1]).contains(QLatin1String("no space left on /runs")), qPrintable(std::get<1>(sent[1])));
        QVERIFY(std::get<2>(sent[1]));
    }
};

QTEST_MAIN(TestUi)
#include "tst_ui.moc"
