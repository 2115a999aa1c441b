// One fleet, many jobs, with real processes on loopback and real TLS: a fleet service
// (`flotilla serve` without a job), jobs queued with `flotilla submit`, managed with
// `flotilla jobs`, and workers (`flotilla worker`) that stay connected from one job to the
// next. Worker ids are the fleet's (one per certificate, the same in every job's store); a
// worker restarted from its state folder needs no --name; a TorchScript job's model reaches
// the workers that do not hold it, and a worker that accepts no models says so; a SIGKILLed
// fleet service resumes its running jobs and runs its queue, every shard of every epoch of
// every job assimilated exactly once.
#include "TestSupport.h"
#include "bench/FleetChaos.h"
#include "engine/coordination/FleetQueue.h"
#include "net/TrustStore.h"

#include <sqlite3.h>

#include <QtTest>

#include <map>

using namespace flotilla;

namespace {

constexpr int kTrainLimit = 2000;
constexpr int kShards = 4;

struct Lab
{
    QTemporaryDir dir;
    quint16 port = test::freeLoopbackPort();

    // A failed test shows what the service and the workers said last: a QVERIFY's message is
    // cut to a few hundred characters, and the folder is gone with the test.
    ~Lab()
    {
        if (!QTest::currentTestFailed())
            return;
        for (const QString &name : QDir(dir.path()).entryList({QStringLiteral("*.out")}, QDir::Files, QDir::Name)) {
            const QString said = log(name.chopped(4));
            qWarning().noquote() << "---" << name << "(last 4000 characters) ---\n" << said.right(4000);
        }
        const QString fleetLog = QDir(identity()).filePath(QStringLiteral("fleet.log"));
        if (QFile f(fleetLog); f.open(QIODevice::ReadOnly))
            qWarning().noquote() << "--- fleet.log (last 6000 characters) ---\n" << QString::fromUtf8(f.readAll()).right(6000);
    }

    QString path(const QString &name) const { return dir.filePath(name); }
    QString identity() const { return path(QStringLiteral("identity")); }
    QString token() const
    {
        QFile f(path(QStringLiteral("token")));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()).trimmed() : QString();
    }

    std::unique_ptr<QProcess> serve(int concurrentJobs)
    {
        auto p = std::make_unique<QProcess>();
        p->setProcessChannelMode(QProcess::MergedChannels);
        p->setStandardOutputFile(path(QStringLiteral("serve.out")), QIODevice::Append);
        p->start(test::flotillaBinary(),
                 {QStringLiteral("serve"), QStringLiteral("--identity-dir"), identity(), QStringLiteral("--listen"),
                  QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                  QStringLiteral("--port"), QString::number(port), QStringLiteral("--token-file"),
                  path(QStringLiteral("token")), QStringLiteral("--concurrent-jobs"), QString::number(concurrentJobs)});
        return p;
    }

    // joinAs: the name to join with a token; empty: back from the state folder alone, with no
    // --name (the certificate says who it is).
    std::unique_ptr<QProcess> worker(const QString &state, const QString &joinAs, const QStringList &extra = {})
    {
        auto p = std::make_unique<QProcess>();
        p->setProcessChannelMode(QProcess::MergedChannels);
        p->setStandardOutputFile(path(state + QStringLiteral(".out")), QIODevice::Append);
        // Each Request it sends is logged with its time: the tests count them.
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        environment.insert(QStringLiteral("QT_LOGGING_RULES"), QStringLiteral("flotilla.agent.debug=true"));
        p->setProcessEnvironment(environment);
        QStringList args{QStringLiteral("worker"), QStringLiteral("--state-dir"), path(QStringLiteral("workers/") + state),
                         QStringLiteral("--grace"), QStringLiteral("5")};
        if (!joinAs.isEmpty())
            args << QStringLiteral("--join") << token() << QStringLiteral("--name") << joinAs;
        p->start(test::flotillaBinary(), args + extra);
        return p;
    }

    QString log(const QString &name) const
    {
        QFile f(path(name + QStringLiteral(".out")));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    }

    // A small job: kShards shards of a Fashion-MNIST subset, no simulated preemptions.
    QString jobFile(const QString &name, int epochs, const QString &modelFile = {})
    {
        JobSpec job = JobSpec::defaultJob();
        job.name = name;
        job.dataset.trainLimit = kTrainLimit;
        job.dataset.testLimit = 300;
        job.training.epochs = epochs;
        job.training.shards = kShards;
        job.fleet.workers = 0;
        job.fleet.preemption.meanIntervalSeconds = 0;
        job.fleet.heartbeatTimeoutSeconds = 6;
        if (!modelFile.isEmpty()) {
            job.model.kind = QStringLiteral("torchscript");
            job.model.path = modelFile;
        }
        const QString file = path(name + QStringLiteral(".json"));
        if (!job.save(file))
            return {};
        return file;
    }

    test::ProcessRun flotilla(const QStringList &args) const
    {
        return test::runFlotilla(args + QStringList{QStringLiteral("--identity-dir"), identity()}, 60000);
    }

    // Submits a job; returns its id in the queue, 0 when refused.
    qint64 submit(const QString &name, int epochs, const QString &as, const QString &modelFile = {})
    {
        const test::ProcessRun run = flotilla({QStringLiteral("submit"), jobFile(name, epochs, modelFile),
                                               QStringLiteral("--as"), as});
        if (run.exitCode != 0) {
            qWarning("submit refused: %s %s", qPrintable(run.out), qPrintable(run.err));
            return 0;
        }
        const auto match = QRegularExpression(QStringLiteral("^Job (\\d+) ")).match(run.out);
        return match.hasMatch() ? match.captured(1).toLongLong() : 0;
    }

    std::map<qint64, QueuedJob> queue() const
    {
        std::map<qint64, QueuedJob> out;
        auto q = FleetQueue::open(QDir(identity()).filePath(QStringLiteral("fleet.db")));
        if (!q)
            return out;
        auto jobs = (*q)->jobs();
        if (jobs)
            for (const QueuedJob &j : *jobs)
                out[j.id] = j;
        return out;
    }

    QString stateOf(qint64 id) const
    {
        const auto jobs = queue();
        const auto it = jobs.find(id);
        return it == jobs.end() ? QString() : it->second.state;
    }

    bool allFinished(const std::vector<qint64> &ids) const
    {
        const auto jobs = queue();
        for (const qint64 id : ids) {
            const auto it = jobs.find(id);
            if (it == jobs.end() || it->second.state != QLatin1String("finished"))
                return false;
        }
        return true;
    }

    QString runDb(qint64 id) const
    {
        const auto jobs = queue();
        const auto it = jobs.find(id);
        return it == jobs.end() ? QString() : QDir(it->second.runDir).filePath(QStringLiteral("flotilla.db"));
    }

    // The job's workers, by name, with the ids its store keeps them under.
    std::map<QString, qint64> workersOf(qint64 id) const
    {
        std::map<QString, qint64> out;
        auto store = Store::open(runDb(id));
        if (!store)
            return out;
        auto workers = (*store)->workers(1);
        if (workers)
            for (const WorkerRecord &w : *workers)
                out[w.name] = w.id;
        return out;
    }

    QString queueText() const { return flotilla({QStringLiteral("jobs")}).out; }

    // An honest fleet's workers pace their Requests, and the coordinator's budgets never
    // catch them: empty when so, else what went wrong.
    QString honestFleetProblems(const QStringList &workers) const
    {
        QStringList problems;
        for (const QString &name : workers) {
            const RequestTally t = tallyRequests(log(name));
            qInfo("%s sent %d Requests, at most %d in a second", qPrintable(name), t.total, t.peakPerSecond);
            if (t.total == 0)
                problems << QStringLiteral("%1 logged no Request").arg(name);
            if (t.peakPerSecond > kHonestRequestPeak)
                problems << QStringLiteral("%1 sent %2 Requests in one second").arg(name).arg(t.peakPerSecond);
        }
        const QString serve = log(QStringLiteral("serve"));
        if (serve.contains(QLatin1String("went over its budget")))
            problems << QStringLiteral("the service closed an honest worker for its budgets");
        if (serve.contains(QLatin1String("announces a payload")))
            problems << QStringLiteral("the service closed an honest worker for a payload it did not take");
        if (serve.contains(QLatin1String("is quarantined in the fleet")))
            problems << QStringLiteral("the service quarantined an honest worker");
        return problems.join(QStringLiteral("; "));
    }
};

std::vector<qint64> shardSizes()
{
    return std::vector<qint64>(kShards, kTrainLimit / kShards);
}

QString exactlyOnce(const QString &db, int epochs)
{
    auto store = Store::open(db);
    if (!store)
        return store.error();
    return test::verifyExactlyOnce(**store, shardSizes(), epochs);
}

void stop(QProcess &p)
{
    if (p.state() == QProcess::NotRunning)
        return;
    p.terminate();
    if (!p.waitForFinished(20000)) {
        p.kill();
        p.waitForFinished(5000);
    }
}

} // namespace

class TestFleetJobs : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
    }

    // The lab of the issue: job A with w1 then w2 joining with a token; both workers
    // restarted from their state folders, w2 first and without --name; then a queue of three
    // jobs run by the same two processes. Every job's store knows two workers, under the ids
    // their certificates were given, and nobody was disconnected for somebody else.
    void workersBelongToTheFleet()
    {
        Lab lab;
        auto serve = lab.serve(1);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.token().isEmpty(), 60000);
        // --verbose: each says in its log when it waits, connected, for a job.
        auto w1 = lab.worker(QStringLiteral("w1"), QStringLiteral("w1"), {QStringLiteral("--verbose")});
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(lab.path(QStringLiteral("workers/w1/cert.pem"))), 30000);
        auto w2 = lab.worker(QStringLiteral("w2"), QStringLiteral("w2"), {QStringLiteral("--verbose")});
        // Both wait, connected, before job A comes: a job of one epoch can end within the
        // second a worker takes to enrol, and each must be placed in it when it starts.
        for (const QString &name : {QStringLiteral("w1"), QStringLiteral("w2")})
            QTRY_VERIFY2_WITH_TIMEOUT(lab.log(name).contains(QLatin1String("waiting for one")),
                                      qPrintable(lab.log(name)), 30000);
        const qint64 a = lab.submit(QStringLiteral("a"), 1, QStringLiteral("alice"));
        QVERIFY(a > 0);
        QTRY_VERIFY2_WITH_TIMEOUT(lab.allFinished({a}), qPrintable(lab.queueText() + lab.log(QStringLiteral("serve"))),
                                  120000);
        // With no job to run, the workers wait, connected, instead of exiting.
        QTest::qWait(2000);
        QCOMPARE(w1->state(), QProcess::Running);
        QCOMPARE(w2->state(), QProcess::Running);
        const std::map<QString, qint64> idsA = lab.workersOf(a);
        QCOMPARE(int(idsA.size()), 2);
        QVERIFY(idsA.at(QStringLiteral("w1")) != idsA.at(QStringLiteral("w2")));

        // Both restart from their state folders, w2 first, without --name.
        stop(*w1);
        stop(*w2);
        QCOMPARE(w1->exitCode(), 0);
        QCOMPARE(w2->exitCode(), 0);
        w2 = lab.worker(QStringLiteral("w2"), {});
        QTRY_VERIFY_WITH_TIMEOUT(lab.log(QStringLiteral("w2")).contains(QLatin1String("Worker 'w2' connecting")),
                                 20000);
        QTest::qWait(1500);
        w1 = lab.worker(QStringLiteral("w1"), {});
        QTRY_VERIFY_WITH_TIMEOUT(lab.log(QStringLiteral("w1")).contains(QLatin1String("Worker 'w1' connecting")),
                                 20000);
        // A queue of three, by two submitters.
        const qint64 b = lab.submit(QStringLiteral("b"), 1, QStringLiteral("bob"));
        const qint64 c = lab.submit(QStringLiteral("c"), 2, QStringLiteral("alice"));
        const qint64 d = lab.submit(QStringLiteral("d"), 1, QStringLiteral("bob"));
        QVERIFY(b > 0 && c > 0 && d > 0);
        QTRY_VERIFY2_WITH_TIMEOUT(lab.allFinished({b, c, d}),
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 240000);
        QTest::qWait(1000);
        QCOMPARE(w1->state(), QProcess::Running);
        QCOMPARE(w2->state(), QProcess::Running);
        for (const qint64 id : {b, c, d}) {
            const auto ids = lab.workersOf(id);
            QVERIFY2(ids == idsA, qPrintable(QStringLiteral("job %1 keeps %2 worker(s), w1 as %3, w2 as %4")
                                                 .arg(id)
                                                 .arg(ids.size())
                                                 .arg(ids.count(QStringLiteral("w1")) ? ids.at(QStringLiteral("w1")) : -1)
                                                 .arg(ids.count(QStringLiteral("w2")) ? ids.at(QStringLiteral("w2")) : -1)));
            const QString wrong = exactlyOnce(lab.runDb(id), id == c ? 2 : 1);
            QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        }
        for (const QString &name : {QStringLiteral("w1"), QStringLiteral("w2")})
            QVERIFY2(!lab.log(name).contains(QLatin1String("connected again")), qPrintable(lab.log(name).right(2000)));
        stop(*w1);
        stop(*w2);
        QCOMPARE(w1->exitCode(), 0);
        QCOMPARE(w2->exitCode(), 0);
        stop(*serve);
        QCOMPARE(serve->exitCode(), 0);
    }

    // A submitter manages its own jobs; another is refused, and the job is untouched.
    void aSubmitterManagesItsOwnJobs()
    {
        Lab lab;
        const qint64 id = lab.submit(QStringLiteral("mine"), 1, QStringLiteral("alice"));
        QVERIFY(id > 0);
        test::ProcessRun refused = lab.flotilla({QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(id),
                                                 QStringLiteral("--as"), QStringLiteral("bob")});
        QCOMPARE(refused.exitCode, 1);
        QVERIFY2(refused.err.contains(QLatin1String("submitted by alice, not bob")), qPrintable(refused.err));
        QCOMPARE(lab.stateOf(id), QStringLiteral("queued"));
        QCOMPARE(lab.flotilla({QStringLiteral("jobs"), QStringLiteral("weight"), QString::number(id),
                               QStringLiteral("2.5"), QStringLiteral("--as"), QStringLiteral("alice")})
                     .exitCode,
                 0);
        QCOMPARE(lab.queue().at(id).weight, 2.5);
        const test::ProcessRun badWeight = lab.flotilla({QStringLiteral("jobs"), QStringLiteral("weight"),
                                                         QString::number(id), QStringLiteral("0"),
                                                         QStringLiteral("--as"), QStringLiteral("alice")});
        QCOMPARE(badWeight.exitCode, 1);
        QVERIFY2(badWeight.err.contains(QLatin1String("positive")), qPrintable(badWeight.err));
        QCOMPARE(lab.flotilla({QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(id),
                               QStringLiteral("--admin"), QStringLiteral("--as"), QStringLiteral("root")})
                     .exitCode,
                 0);
        QCOMPARE(lab.stateOf(id), QStringLiteral("cancelled"));
        QCOMPARE(lab.queue().at(id).message, QStringLiteral("cancelled by root"));
        const test::ProcessRun again = lab.flotilla({QStringLiteral("jobs"), QStringLiteral("resume"),
                                                     QString::number(id), QStringLiteral("--as"),
                                                     QStringLiteral("alice")});
        QCOMPARE(again.exitCode, 1);
        QVERIFY2(again.err.contains(QLatin1String("cancelled already")), qPrintable(again.err));
        const test::ProcessRun unknown = lab.flotilla({QStringLiteral("jobs"), QStringLiteral("pause"),
                                                       QStringLiteral("99")});
        QCOMPARE(unknown.exitCode, 1);
        QVERIFY2(unknown.err.contains(QLatin1String("the queue has no job 99")), qPrintable(unknown.err));
        // Data that is not there is refused at submission, not when its turn comes.
        const test::ProcessRun noData = lab.flotilla({QStringLiteral("submit"), QStringLiteral("--dataset"),
                                                      QStringLiteral("csv"), QStringLiteral("--data"),
                                                      lab.path(QStringLiteral("missing.csv"))});
        QCOMPARE(noData.exitCode, 2);
        QVERIFY2(noData.err.contains(QLatin1String("missing.csv")), qPrintable(noData.err));
    }

    // Two jobs at once share three workers; the service is SIGKILLed while two run and three
    // are queued; started again, it resumes the two and runs the rest, with the same worker
    // processes. Every job keeps every shard of every epoch assimilated exactly once.
    void survivesASigkillWithJobsRunningAndQueued()
    {
        Lab lab;
        auto serve = lab.serve(2);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.token().isEmpty(), 60000);
        // The two that start first are twice as long: at 3 epochs the first finished 5 s after
        // its workers joined, before the check below saw both under way on a busy machine.
        const auto epochsOf = [](std::size_t i) { return i < 2 ? 6 : 3; };
        std::vector<qint64> ids;
        for (int i = 0; i < 5; ++i)
            ids.push_back(lab.submit(QStringLiteral("job%1").arg(i), epochsOf(std::size_t(i)),
                                     i % 2 ? QStringLiteral("bob") : QStringLiteral("alice")));
        for (const qint64 id : ids)
            QVERIFY(id > 0);
        // The three join together (one after the other, the first job had a worker to itself
        // for ten seconds on a busy machine).
        std::vector<std::unique_ptr<QProcess>> workers;
        for (const char *name : {"w1", "w2", "w3"})
            workers.push_back(lab.worker(QString::fromLatin1(name), QString::fromLatin1(name)));
        for (const char *name : {"w1", "w2", "w3"})
            QTRY_VERIFY_WITH_TIMEOUT(
                QFileInfo::exists(lab.path(QStringLiteral("workers/%1/cert.pem").arg(QLatin1String(name)))), 30000);
        // Two run at once, each with workers of its own.
        QTRY_VERIFY2_WITH_TIMEOUT(test::assimilations(lab.runDb(ids[0])) >= 2
                                      && test::assimilations(lab.runDb(ids[1])) >= 2,
                                  qPrintable(lab.queueText()), 120000);
        const auto running = lab.queue();
        QCOMPARE(running.at(ids[0]).state, QStringLiteral("running"));
        QCOMPARE(running.at(ids[1]).state, QStringLiteral("running"));
        for (std::size_t i = 2; i < ids.size(); ++i)
            QCOMPARE(running.at(ids[i]).state, QStringLiteral("queued"));
        serve->kill();
        QVERIFY(serve->waitForFinished(10000));
        serve = lab.serve(2);
        // Killed again once the resumed jobs and the next ones are under way: the honest
        // workers reconnect, are moved between jobs and see jobs resume and end, and none of
        // it makes them send Requests in a loop.
        QTRY_VERIFY2_WITH_TIMEOUT(test::assimilations(lab.runDb(ids[2])) >= 2,
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 150000);
        serve->kill();
        QVERIFY(serve->waitForFinished(10000));
        serve = lab.serve(2);
        QTRY_VERIFY2_WITH_TIMEOUT(lab.allFinished(ids),
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 240000);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const QString wrong = exactlyOnce(lab.runDb(ids[i]), epochsOf(i));
            QVERIFY2(wrong.isEmpty(), qPrintable(QStringLiteral("job %1: %2").arg(ids[i]).arg(wrong)));
        }
        // The two that ran resumed from their run folders.
        for (const qint64 id : {ids[0], ids[1]}) {
            auto store = Store::open(lab.runDb(id));
            QVERIFY(store);
            QCOMPARE(int((*store)->events(1, EventKind::JobResumed)->size()), 1);
        }
        for (auto &w : workers)
            QCOMPARE(w->state(), QProcess::Running);
        const QString problems = lab.honestFleetProblems({QStringLiteral("w1"), QStringLiteral("w2"), QStringLiteral("w3")});
        QVERIFY2(problems.isEmpty(), qPrintable(problems));
        for (auto &w : workers)
            stop(*w);
        stop(*serve);
    }

    // The service is SIGKILLed in the window between a job's last fold and the queue's note
    // of it: the test holds the queue's file locked for writing, so the service cannot write
    // that the job finished while the job's own store says so. Started again, the service
    // finds the job finished in its run folder: finished in the queue, not started again,
    // never failed.
    void aJobThatFinishedJustBeforeAKillStaysFinished()
    {
        Lab lab;
        auto serve = lab.serve(1);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.token().isEmpty(), 60000);
        // Six epochs: the lock below must be taken before the last fold, which came within
        // two seconds of the first on a busy machine when the job had two.
        const qint64 id = lab.submit(QStringLiteral("last"), 6, QStringLiteral("alice"));
        QVERIFY(id > 0);
        auto w1 = lab.worker(QStringLiteral("w1"), QStringLiteral("w1"));
        QTRY_VERIFY2_WITH_TIMEOUT(test::assimilations(lab.runDb(id)) >= 1, qPrintable(lab.queueText()), 90000);
        sqlite3 *db = nullptr;
        QCOMPARE(sqlite3_open(QDir(lab.identity()).filePath(QStringLiteral("fleet.db")).toUtf8().constData(), &db),
                 SQLITE_OK);
        const auto closeDb = qScopeGuard([db] { sqlite3_close(db); });
        sqlite3_busy_timeout(db, 20000);
        QCOMPARE(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
        const QString store = lab.runDb(id);
        const auto finishedInStore = [&] {
            auto s = Store::open(store);
            auto job = s ? (*s)->latestJob() : Result<std::optional<JobRecord>>(fail(QString()));
            return job && job->has_value() && (*job)->state == QLatin1String("finished");
        };
        QTRY_VERIFY2_WITH_TIMEOUT(finishedInStore(), qPrintable(lab.log(QStringLiteral("serve")).right(3000)), 120000);
        // The service tried to write it, and could not.
        QTRY_VERIFY2_WITH_TIMEOUT(lab.log(QStringLiteral("serve")).contains(QLatin1String("cannot write that job")),
                                  qPrintable(lab.log(QStringLiteral("serve")).right(3000)), 60000);
        serve->kill();
        QVERIFY(serve->waitForFinished(10000));
        QCOMPARE(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
        QCOMPARE(lab.stateOf(id), QStringLiteral("running"));
        serve = lab.serve(1);
        QTRY_VERIFY2_WITH_TIMEOUT(lab.stateOf(id) == QLatin1String("finished"),
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 60000);
        QVERIFY2(lab.queue().at(id).message.contains(QLatin1String("its run folder says so")),
                 qPrintable(lab.queue().at(id).message));
        // Not started again: no resumption in its store, no refusal in the service's log.
        auto s = Store::open(store);
        QVERIFY(s);
        QCOMPARE(int((*s)->events(1, EventKind::JobResumed)->size()), 0);
        QVERIFY(!lab.log(QStringLiteral("serve")).contains(QLatin1String("has already finished")));
        const QString wrong = exactlyOnce(store, 6);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        // And it stays finished.
        QTest::qWait(1500);
        QCOMPARE(lab.stateOf(id), QStringLiteral("finished"));
        stop(*w1);
        stop(*serve);
    }

    // A running job whose every worker the fleet holds back says why, and what to do, in
    // `flotilla jobs` and in the service's output; released, its worker trains it to the end.
    // The worker is quarantined before the job comes: a small job would otherwise finish
    // before the service rereads its trust database (every 2 s) on an idle machine.
    void aJobHeldBackByTheFleetSaysWhy()
    {
        Lab lab;
        auto serve = lab.serve(1);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.token().isEmpty(), 60000);
        auto w1 = lab.worker(QStringLiteral("w1"), QStringLiteral("w1"));
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(lab.path(QStringLiteral("workers/w1/cert.pem"))), 30000);
        // Quarantined in the fleet as an operator's tools write it.
        net::TrustStore trust(lab.identity());
        auto certificates = trust.certificates();
        QVERIFY(certificates);
        qint64 workerId = 0;
        for (const auto &c : *certificates)
            if (c.workerName == QLatin1String("w1"))
                workerId = c.workerId;
        QVERIFY(workerId > 0);
        QVERIFY(trust.quarantine(workerId, QStringLiteral("held back by the test"), QDateTime::currentMSecsSinceEpoch()));
        QTRY_VERIFY2_WITH_TIMEOUT(lab.log(QStringLiteral("serve")).contains(QLatin1String("is quarantined in the fleet")),
                                  qPrintable(lab.log(QStringLiteral("serve")).right(3000)), 30000);
        const qint64 id = lab.submit(QStringLiteral("held"), 2, QStringLiteral("alice"));
        QVERIFY(id > 0);
        const auto says = [&](const QString &text) {
            return text.contains(QLatin1String("every worker is held back by the fleet"))
                   && text.contains(QLatin1String("w1 is quarantined")) && text.contains(QLatin1String("flotilla release"));
        };
        // Each look runs `flotilla jobs`: waited for by the clock, not by QTRY's count of steps.
        QVERIFY2(test::waitUntil(60000, [&] { return says(lab.queueText()); }), qPrintable(lab.queueText()));
        QVERIFY2(says(lab.log(QStringLiteral("serve"))), qPrintable(lab.log(QStringLiteral("serve")).right(3000)));
        QCOMPARE(lab.stateOf(id), QStringLiteral("running"));
        QCOMPARE(test::assimilations(lab.runDb(id)), qint64(0));
        const test::ProcessRun released = lab.flotilla({QStringLiteral("release"), QStringLiteral("w1")});
        QVERIFY2(released.exitCode == 0, qPrintable(released.out + released.err));
        QTRY_VERIFY2_WITH_TIMEOUT(lab.allFinished({id}),
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 120000);
        const QString wrong = exactlyOnce(lab.runDb(id), 2);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        stop(*w1);
        stop(*serve);
    }

    // A TorchScript job's model travels to the workers: one without --model-file is sent it
    // (and keeps it, by its SHA-256); one that accepts no models says why and stops.
    void theModelTravelsWithTheJob()
    {
        Lab lab;
        const QString model = lab.path(QStringLiteral("net.pt"));
        const test::ProcessRun made = test::runPython(QStringLiteral(R"PY(
import sys, torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 32)
        self.fc2 = torch.nn.Linear(32, 10)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))
torch.manual_seed(0)
torch.jit.script(Net()).save(sys.argv[1])
)PY"),
                                                      {model});
        QVERIFY2(made.exitCode == 0, qPrintable(made.err));
        auto serve = lab.serve(1);
        QTRY_VERIFY_WITH_TIMEOUT(!lab.token().isEmpty(), 60000);
        const qint64 id = lab.submit(QStringLiteral("scripted"), 1, QStringLiteral("alice"), model);
        QVERIFY(id > 0);
        // The job trains the fleet's copy: the file it was submitted from may go.
        QVERIFY(QFile::remove(model));
        auto refusing = lab.worker(QStringLiteral("careful"), QStringLiteral("careful"),
                                   {QStringLiteral("--accept-models"), QStringLiteral("none")});
        QVERIFY(refusing->waitForFinished(60000));
        QCOMPARE(refusing->exitCode(), 1);
        QVERIFY2(lab.log(QStringLiteral("careful")).contains(QLatin1String("accepts no models")),
                 qPrintable(lab.log(QStringLiteral("careful"))));
        auto w1 = lab.worker(QStringLiteral("w1"), QStringLiteral("w1"));
        QTRY_VERIFY2_WITH_TIMEOUT(lab.allFinished({id}),
                                  qPrintable(lab.queueText() + lab.log(QStringLiteral("serve")).right(3000)), 120000);
        const QString wrong = exactlyOnce(lab.runDb(id), 1);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        const QStringList kept = QDir(lab.path(QStringLiteral("workers/w1/models"))).entryList({QStringLiteral("*.pt")});
        QCOMPARE(kept.size(), 1);
        QCOMPARE(kept.first().size(), 64 + 3);
        stop(*w1);
        stop(*serve);
    }
};

QTEST_GUILESS_MAIN(TestFleetJobs)
#include "tst_fleetjobs.moc"
