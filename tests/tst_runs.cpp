// The Runs tab against real run folders: three short jobs trained by `flotilla train` with
// different rules, listed with what their stores and metrics.csv say, one opened from its
// store, all three compared on one chart (one series per run, named by what differs) and
// exported; renaming, deleting, adding a folder from elsewhere, and the refusals (the run
// this window trains, a name that is taken, a folder that is not a run, a damaged store).
#include "TestSupport.h"
#include "desktop/RunLibrary.h"
#include "ui/Comparison.h"
#include "ui/Dashboard.h"
#include "ui/Dialogs.h"
#include "ui/RunsView.h"
#include "ui/Views.h"

#include <QChart>
#include <QImage>
#include <QLegendMarker>
#include <QLineSeries>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>

using namespace flotilla;

namespace {

// The best test accuracy metrics.csv recorded: an account of the run kept apart from the store.
double bestAccuracyInMetrics(const QString &runDir)
{
    const QList<double> all = test::testAccuracies(runDir);
    return all.isEmpty() ? -1 : *std::max_element(all.begin(), all.end());
}

bool copyFolder(const QString &from, const QString &to)
{
    QDir().mkpath(to);
    for (const QFileInfo &f : QDir(from).entryInfoList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString target = QDir(to).filePath(f.fileName());
        if (f.isDir() ? !copyFolder(f.filePath(), target) : !QFile::copy(f.filePath(), target))
            return false;
    }
    return true;
}

int rowNamed(QTableWidget *t, const QString &name)
{
    for (int r = 0; r < t->rowCount(); ++r)
        if (t->item(r, 0)->text() == name)
            return r;
    return -1;
}

} // namespace

class TestRuns : public QObject
{
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_root;
    const QStringList m_names{QStringLiteral("vc-asgd"), QStringLiteral("async-delta"), QStringLiteral("vc-asgd-a07")};

    // Lists the root through a fresh view and waits for the answer.
    QList<ui::RunSummary> list(ui::RunsView &view)
    {
        QSignalSpy listed(&view, &ui::RunsView::listed);
        view.refresh();
        if (!listed.wait(30000))
            return {};
        return view.runs();
    }

private Q_SLOTS:
    // A test's answers to the windows' dialogs end with it (they may hold its locals).
    void cleanup()
    {
        ui::dialogs::answerConfirmations({});
        ui::dialogs::answerSavePaths({});
    }

    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        QSettings().clear();
        QVERIFY(m_dir.isValid());
        m_root = m_dir.filePath(QStringLiteral("runs"));
        const QList<QStringList> flags{{QStringLiteral("--rule"), QStringLiteral("vc-asgd")},
                                       {QStringLiteral("--rule"), QStringLiteral("async-delta")},
                                       {QStringLiteral("--rule"), QStringLiteral("vc-asgd"), QStringLiteral("--alpha"),
                                        QStringLiteral("0.7"), QStringLiteral("--lr"), QStringLiteral("0.05")}};
        for (int i = 0; i < 3; ++i) {
            QStringList args{QStringLiteral("train"), QStringLiteral("--train-limit"), QStringLiteral("1200"),
                             QStringLiteral("--test-limit"), QStringLiteral("300"), QStringLiteral("--epochs"), QStringLiteral("2"),
                             QStringLiteral("--shards"), QStringLiteral("4"), QStringLiteral("--workers"), QStringLiteral("1"),
                             QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--quiet"),
                             QStringLiteral("--run-dir"), QDir(m_root).filePath(m_names[i])};
            const test::ProcessRun run = test::runFlotilla(args + flags[i], 120000);
            QVERIFY2(run.finished && run.exitCode == 0, qPrintable(run.err));
        }
        // Not runs: a folder without a store is not listed; a damaged store is listed as such.
        QDir().mkpath(QDir(m_root).filePath(QStringLiteral("notes")));
        QDir().mkpath(QDir(m_root).filePath(QStringLiteral("damaged")));
        QFile damaged(QDir(m_root).filePath(QStringLiteral("damaged/flotilla.db")));
        QVERIFY(damaged.open(QIODevice::WriteOnly));
        damaged.write(QByteArray(4096, 'x'));
    }

    void listsRealRunFoldersWithWhatTheirStoresSay()
    {
        RunLibrary library(m_root);
        ui::RunsView view(&library);
        const QList<ui::RunSummary> runs = list(view);
        QCOMPARE(runs.size(), 4); // three runs and the damaged one; not "notes"
        QCOMPARE(view.table()->rowCount(), 4);
        for (const QString &name : m_names) {
            const auto it = std::find_if(runs.begin(), runs.end(), [&name](const ui::RunSummary &r) { return r.name == name; });
            QVERIFY2(it != runs.end(), qPrintable(name));
            QCOMPARE(it->state, QStringLiteral("finished"));
            QCOMPARE(it->epochsDone, 2);
            const double best = bestAccuracyInMetrics(it->dir);
            QVERIFY(best > 0.2);
            QVERIFY2(std::abs(it->bestAccuracy - best) < 1e-5, // metrics.csv keeps five decimals
                      qPrintable(QStringLiteral("%1 vs %2").arg(it->bestAccuracy).arg(best)));
            QVERIFY(it->wallMs > 0);
            QVERIFY(it->cost > 0);
            QVERIFY(it->savingsPercent > 0 && it->savingsPercent < 100);
            const int row = rowNamed(view.table(), name);
            QVERIFY(row >= 0);
            QCOMPARE(view.table()->item(row, 1)->text(), QStringLiteral("finished"));
            QCOMPARE(view.table()->item(row, 5)->text(), QStringLiteral("%1%").arg(100.0 * best, 0, 'f', 2));
        }
        const int rule = rowNamed(view.table(), QStringLiteral("vc-asgd-a07"));
        QCOMPARE(view.table()->item(rule, 2)->text(), QStringLiteral("vc-asgd (α 0.7)"));
        QCOMPARE(view.table()->item(rowNamed(view.table(), QStringLiteral("async-delta")), 2)->text(), QStringLiteral("async-delta"));
        const auto damaged = std::find_if(runs.begin(), runs.end(), [](const ui::RunSummary &r) { return r.name == QLatin1String("damaged"); });
        QCOMPARE(damaged->state, QStringLiteral("unreadable"));
        QVERIFY2(damaged->error.contains(QStringLiteral("flotilla.db")), qPrintable(damaged->error));
        // A damaged run cannot be opened, and says why.
        view.select({damaged->dir});
        QCOMPARE(view.open(damaged->dir), nullptr);
        QVERIFY2(view.statusText().contains(QStringLiteral("4 runs")), qPrintable(view.statusText()));
    }

    void opensARunsDashboardFromItsStore()
    {
        RunLibrary library(m_root);
        ui::RunsView view(&library);
        const QList<ui::RunSummary> runs = list(view);
        const QString dir = QFileInfo(QDir(m_root).filePath(QStringLiteral("vc-asgd"))).canonicalFilePath();
        ui::RunWindow *window = view.open(dir);
        QVERIFY(window);
        QSignalSpy loaded(window, &ui::RunWindow::loadedOnce);
        QVERIFY(window->loaded() || loaded.wait(30000));
        QVERIFY(!window->dashboard()->isEmpty());
        auto store = Store::open(QDir(dir).filePath(QStringLiteral("flotilla.db")));
        QVERIFY(store);
        const auto job = (*store)->latestJob();
        QVERIFY(job && job->has_value());
        QCOMPARE(window->events()->table()->rowCount(), int((*store)->events((*job)->id)->size()));
        QVERIFY(window->headline().contains(QStringLiteral("vc-asgd (α 0.5)")));
        // The last evaluation's metrics above the loss chart; each class's in its tooltip.
        QVERIFY2(window->dashboard()->lastEvaluationText().contains(QStringLiteral("test accuracy"))
                     && window->dashboard()->lastEvaluationText().contains(QStringLiteral("top5_accuracy")),
                 qPrintable(window->dashboard()->lastEvaluationText()));
        QVERIFY2(window->dashboard()->lastEvaluationDetails().contains(QStringLiteral("class_accuracy/")),
                 qPrintable(window->dashboard()->lastEvaluationDetails()));
        // Opening it again raises the same window.
        QCOMPARE(view.open(dir), window);
    }

    void comparesRunsOnOneChartNamedByWhatDiffers()
    {
        RunLibrary library(m_root);
        ui::RunsView view(&library);
        QList<ui::RunSummary> runs = list(view);
        QStringList dirs;
        for (const QString &name : m_names)
            dirs << QFileInfo(QDir(m_root).filePath(name)).canonicalFilePath();
        ui::ComparisonWindow *comparison = view.compare(dirs);
        QVERIFY(comparison);
        QSignalSpy all(comparison, &ui::ComparisonWindow::allLoaded);
        QVERIFY(comparison->loaded() || all.wait(30000));
        QCOMPARE(comparison->series().size(), 3);
        QStringList names;
        for (QLineSeries *s : comparison->series()) {
            QCOMPARE(s->count(), 2); // one point per evaluation
            names << s->name();
        }
        QCOMPARE(names[0], QStringLiteral("vc-asgd: vc-asgd, α 0.5, lr 0.03"));
        QCOMPARE(names[1], QStringLiteral("async-delta: async-delta, α 0.5, lr 0.03"));
        QCOMPARE(names[2], QStringLiteral("vc-asgd-a07: vc-asgd, α 0.7, lr 0.05"));
        // Against version: the points sit at the versions the evaluations were made at.
        comparison->setAxis(ui::ComparisonWindow::Axis::Version);
        auto store = Store::open(QDir(dirs[1]).filePath(QStringLiteral("flotilla.db")));
        const auto job = (*store)->latestJob();
        const auto evaluations = (*store)->evaluations((*job)->id);
        QCOMPARE(comparison->series()[1]->at(1).x(), double(evaluations->back().version));
        QCOMPARE(comparison->series()[1]->at(1).y(), 100.0 * evaluations->back().accuracy);
        // Training loss: one curve per run as well.
        comparison->setMetric(ui::ComparisonWindow::Metric::TrainingLoss);
        QCOMPARE(comparison->series().size(), 3);
        QVERIFY(comparison->series()[0]->count() >= 4);
        // Any metric the evaluations kept: here, of ten classes, the top-5 accuracy.
        QVERIFY2(comparison->namedMetrics().contains(QStringLiteral("top5_accuracy")),
                 qPrintable(comparison->namedMetrics().join(u',')));
        QVERIFY(!comparison->setNamedMetric(QStringLiteral("perplexity")));
        QVERIFY(comparison->setNamedMetric(QStringLiteral("top5_accuracy")));
        const auto details = (*store)->evaluationDetails((*job)->id);
        QCOMPARE(comparison->series()[1]->count(), 2);
        QCOMPARE(comparison->series()[1]->at(1).y(), details->back().top5Accuracy);
        QVERIFY(comparison->chart()->axes(Qt::Vertical).first()->titleText().contains(QStringLiteral("top5_accuracy")));

        const QString png = m_dir.filePath(QStringLiteral("comparison.png"));
        QVERIFY(comparison->exportPng(png));
        QImage image(png);
        QVERIFY(!image.isNull() && image.width() >= 600);
        const QString csv = m_dir.filePath(QStringLiteral("comparison.csv"));
        QVERIFY(comparison->exportCsv(csv));
        QFile file(csv);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = file.readAll().trimmed().split('\n');
        QCOMPARE(lines.first(), QByteArray("run,settings,series,version,seconds,value"));
        qsizetype expected = 0;
        for (const QString &dir : dirs) {
            auto s = Store::open(QDir(dir).filePath(QStringLiteral("flotilla.db")));
            const qint64 id = (*(*s)->latestJob())->id;
            // Each evaluation's accuracy and loss and its named metrics (top-5 accuracy, each
            // class's accuracy); each assimilation's loss.
            expected += 2 * qsizetype((*s)->evaluations(id)->size()) + qsizetype((*s)->evaluationMetrics(id)->size())
                        + qsizetype((*s)->assimilations(id)->size());
        }
        QCOMPARE(lines.size() - 1, expected);
        QVERIFY(lines[1].startsWith("\"vc-asgd\",\"vc-asgd; α 0.5; lr 0.03\",test_accuracy,"));
        // A comparison needs two runs.
        QCOMPARE(view.compare({dirs[0]}), nullptr);
    }

    void differencesNameOnlyWhatDiffers()
    {
        JobSpec a = JobSpec::defaultJob();
        JobSpec b = a;
        QCOMPARE(ui::differences({a, b}), (QList<QStringList>{{}, {}}));
        b.fleet.workers = 8;
        b.training.learningRate = 0.05;
        b.aggregation.rule = QStringLiteral("staleness-aware");
        b.name = QStringLiteral("another name");
        QCOMPARE(ui::differences({a, b}),
                 (QList<QStringList>{{QStringLiteral("async-delta"), QStringLiteral("lr 0.03"), QStringLiteral("4 workers")},
                                     {QStringLiteral("staleness-aware"), QStringLiteral("lr 0.05"), QStringLiteral("8 workers")}}));
    }

    void renamesDeletesAndAddsRunFolders()
    {
        // Work on copies, so the other tests keep their runs.
        const QString root = m_dir.filePath(QStringLiteral("copies"));
        QVERIFY(copyFolder(QDir(m_root).filePath(QStringLiteral("vc-asgd")), QDir(root).filePath(QStringLiteral("first"))));
        QVERIFY(copyFolder(QDir(m_root).filePath(QStringLiteral("async-delta")), QDir(root).filePath(QStringLiteral("second"))));
        const QString elsewhere = m_dir.filePath(QStringLiteral("elsewhere/from-a-colleague"));
        QVERIFY(copyFolder(QDir(m_root).filePath(QStringLiteral("vc-asgd-a07")), elsewhere));

        RunLibrary library(root);
        ui::RunsView view(&library);
        QCOMPARE(list(view).size(), 2);
        const QString first = QFileInfo(QDir(root).filePath(QStringLiteral("first"))).canonicalFilePath();
        const QString second = QFileInfo(QDir(root).filePath(QStringLiteral("second"))).canonicalFilePath();

        // Rename: bad names and taken names are refused with the reason; a good one moves the folder.
        QString answer = QStringLiteral("a/b");
        view.askText = [&answer](const QString &, const QString &, const QString &) { return answer; };
        auto r = view.renameRun(first);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("'/'")), qPrintable(r.error()));
        answer = QStringLiteral("second");
        r = view.renameRun(first);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("already there")), qPrintable(r.error()));
        answer = QStringLiteral("baseline");
        QSignalSpy listed(&view, &ui::RunsView::listed);
        QVERIFY(view.renameRun(first));
        QVERIFY(listed.wait(30000));
        QVERIFY(!QFileInfo::exists(first));
        QVERIFY(QFileInfo::exists(QDir(root).filePath(QStringLiteral("baseline/flotilla.db"))));
        QVERIFY(rowNamed(view.table(), QStringLiteral("baseline")) >= 0);
        QCOMPARE(rowNamed(view.table(), QStringLiteral("first")), -1);

        // The run this window trains is neither renamed nor deleted.
        library.setCurrentRun(second);
        ui::dialogs::answerConfirmations([](const QString &) { return true; });
        r = view.deleteRun(second);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("stop it first")), qPrintable(r.error()));
        QVERIFY(QFileInfo::exists(second));
        library.setCurrentRun({});

        // Delete: nothing happens unless confirmed.
        ui::dialogs::answerConfirmations([](const QString &) { return false; });
        QVERIFY(view.deleteRun(second));
        QVERIFY(QFileInfo::exists(second));
        ui::dialogs::answerConfirmations([](const QString &) { return true; });
        QVERIFY(view.deleteRun(second));
        QVERIFY(listed.wait(30000));
        QVERIFY(!QFileInfo::exists(second));
        QCOMPARE(view.runs().size(), 1);

        // A folder from elsewhere is listed and remembered; a folder that is not a run is refused.
        r = view.addFolder(m_dir.filePath(QStringLiteral("elsewhere")));
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("holds no job store")), qPrintable(r.error()));
        QVERIFY(view.addFolder(elsewhere));
        QVERIFY(listed.wait(30000));
        QCOMPARE(view.runs().size(), 2);
        const int row = rowNamed(view.table(), QStringLiteral("from-a-colleague"));
        QVERIFY(row >= 0);
        QCOMPARE(view.table()->item(row, 2)->text(), QStringLiteral("vc-asgd (α 0.7)"));
        RunLibrary again(root); // the app restarted
        ui::RunsView reopened(&again);
        QCOMPARE(list(reopened).size(), 2);
    }

    void aRunAnotherProcessTrainsIsRunningUntilItIsKilled()
    {
        // A real `flotilla train` in its own process, long enough to be caught mid-job.
        QSettings().remove(QStringLiteral("runs/opened")); // the folder another test opened from elsewhere
        const QString root = m_dir.filePath(QStringLiteral("live"));
        const QString dir = QDir(root).filePath(QStringLiteral("training"));
        QProcess train;
        train.start(test::flotillaBinary(),
                    {QStringLiteral("train"), QStringLiteral("--train-limit"), QStringLiteral("1200"), QStringLiteral("--test-limit"),
                     QStringLiteral("300"), QStringLiteral("--epochs"), QStringLiteral("500"), QStringLiteral("--shards"),
                     QStringLiteral("4"), QStringLiteral("--workers"), QStringLiteral("1"), QStringLiteral("--preempt-mean"),
                     QStringLiteral("0"), QStringLiteral("--quiet"), QStringLiteral("--run-dir"), dir});
        QVERIFY(train.waitForStarted());
        const auto stopTraining = qScopeGuard([&train] {
            train.kill();
            train.waitForFinished(10000);
        });
        QTRY_VERIFY_WITH_TIMEOUT(test::assimilations(QDir(dir).filePath(QStringLiteral("flotilla.db"))) > 0, 60000);
        RunLibrary library(root);
        ui::RunsView view(&library);
        QList<ui::RunSummary> runs = list(view);
        QCOMPARE(runs.size(), 1);
        QCOMPARE(runs[0].state, QStringLiteral("running"));
        view.askText = [](const QString &, const QString &, const QString &) { return QStringLiteral("renamed"); };
        ui::dialogs::answerConfirmations([](const QString &) { return true; });
        auto r = view.renameRun(runs[0].dir);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("another Flotilla process is training it")), qPrintable(r.error()));
        QVERIFY(!view.deleteRun(runs[0].dir));
        QVERIFY(QFileInfo::exists(QDir(dir).filePath(QStringLiteral("flotilla.db"))));
        // A second coordinator in the same folder is refused, naming the first one's process.
        const test::ProcessRun second = test::runFlotilla({QStringLiteral("train"), QStringLiteral("--quiet"), QStringLiteral("--run-dir"), dir}, 60000);
        QVERIFY(second.finished && second.exitCode != 0);
        QVERIFY2(second.err.contains(QStringLiteral("in use by another Flotilla process (pid %1").arg(train.processId())),
                 qPrintable(second.err));

        // Killed: the run is stopped (resumable), and may be renamed.
        ::kill(pid_t(train.processId()), SIGKILL);
        QVERIFY(train.waitForFinished(10000));
        runs = list(view);
        QCOMPARE(runs[0].state, QStringLiteral("stopped"));
        QVERIFY(view.renameRun(runs[0].dir));
        QVERIFY(QFileInfo::exists(QDir(root).filePath(QStringLiteral("renamed/flotilla.db"))));
    }

    void listsFiftyRuns()
    {
        // The runs view's cold start is measured with `flotilla gui --exit-after-runs-listed`
        // (docs/control-center.md); here, that fifty real run folders are all listed.
        QSettings().remove(QStringLiteral("runs/opened")); // the folder another test opened from elsewhere
        const QString root = m_dir.filePath(QStringLiteral("fifty"));
        for (int i = 0; i < 50; ++i)
            QVERIFY(copyFolder(QDir(m_root).filePath(m_names[i % 3]), QDir(root).filePath(QStringLiteral("run-%1").arg(i, 2, 10, QLatin1Char('0')))));
        RunLibrary library(root);
        ui::RunsView view(&library);
        const QList<ui::RunSummary> runs = list(view);
        QCOMPARE(runs.size(), 50);
        QVERIFY(std::all_of(runs.begin(), runs.end(), [](const ui::RunSummary &r) { return r.state == QLatin1String("finished"); }));
        QCOMPARE(view.table()->rowCount(), 50);
    }
};

QTEST_MAIN(TestRuns)
#include "tst_runs.moc"
