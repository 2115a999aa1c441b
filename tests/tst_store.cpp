// The SQLite job store on real files: every kind of record reads back field by field and
// survives closing and reopening, transactions keep or discard what they wrote, and a file
// or path that cannot hold a store is refused with a message that names it.
#include "StoreFiles.h"
#include "TestFiles.h"
#include "engine/coordination/Store.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

#include <random>

using namespace flotilla;
using namespace flotilla::test;

namespace {

WorkerRecord sampleWorker(const QString &name)
{
    WorkerRecord w;
    w.name = name;
    w.instanceType = QStringLiteral("gcp/n2-standard-8");
    w.priceClass = QStringLiteral("spot");
    w.device = QStringLiteral("cuda:1");
    w.threads = 6;
    w.joinedMs = 1'700'000'000'123;
    w.lastSeenMs = 1'700'000'000'456;
    w.state = QStringLiteral("online");
    return w;
}

// A subtask and a lease with every field set to a value of its own, so that a column read
// into the wrong field shows.
Subtask sampleSubtask(qint64 id)
{
    Subtask s;
    s.id = id;
    s.epoch = 3;
    s.shard = 11;
    s.begin = 4096;
    s.end = 8192;
    s.parentId = id - 1;
    s.state = SubtaskState::Leased;
    s.coveredEnd = 6000;
    s.assimilatedSeq = 42;
    return s;
}

Lease sampleLease(qint64 id, qint64 subtaskId)
{
    Lease l;
    l.id = id;
    l.subtaskId = subtaskId;
    l.workerId = 9;
    l.baseSeq = 17;
    l.baseVersion = 15;
    l.issuedMs = 5'000'000'000'001;
    l.deadlineMs = 5'000'000'060'001;
    l.state = LeaseState::Active;
    l.endedMs = 0;
    return l;
}

void compareSubtask(const Subtask &a, const Subtask &e)
{
    QCOMPARE(a.id, e.id);
    QCOMPARE(a.epoch, e.epoch);
    QCOMPARE(a.shard, e.shard);
    QCOMPARE(a.begin, e.begin);
    QCOMPARE(a.end, e.end);
    QCOMPARE(a.parentId, e.parentId);
    QCOMPARE(toString(a.state), toString(e.state));
    QCOMPARE(a.coveredEnd, e.coveredEnd);
    QCOMPARE(a.assimilatedSeq, e.assimilatedSeq);
}

void compareLease(const Lease &a, const Lease &e)
{
    QCOMPARE(a.id, e.id);
    QCOMPARE(a.subtaskId, e.subtaskId);
    QCOMPARE(a.workerId, e.workerId);
    QCOMPARE(a.baseSeq, e.baseSeq);
    QCOMPARE(a.baseVersion, e.baseVersion);
    QCOMPARE(a.issuedMs, e.issuedMs);
    QCOMPARE(a.deadlineMs, e.deadlineMs);
    QCOMPARE(toString(a.state), toString(e.state));
    QCOMPARE(a.endedMs, e.endedMs);
}

// A job with one record of each kind; returns what failed, or an empty string.
QString recordOneOfEach(Store &store, const QString &name, const QString &spec, qint64 &job, qint64 &worker)
{
    auto j = store.createJob(name, spec, 10);
    if (!j)
        return j.error();
    job = *j;
    auto w = store.addWorker(job, sampleWorker(QStringLiteral("w1")));
    if (!w)
        return w.error();
    worker = *w;
    SchedulerChanges changes;
    changes.add(sampleSubtask(1));
    changes.add(sampleLease(1, 1));
    if (auto r = store.saveChanges(job, changes); !r)
        return r.error();
    if (auto r = store.addState(job, StateRecord{4, 3, QStringLiteral("c/4.ckpt"), QStringLiteral("ab12"), 77}); !r)
        return r.error();
    if (auto r = store.addEvent(job, EventRecord{0, 88, QStringLiteral("joined"), worker, 0, 0, {}}); !r)
        return r.error();
    if (auto r = store.addLedger(job, LedgerRecord{worker, 1, 90, QStringLiteral("useful"), 2.5, 0.5, 1.0, 0.5}); !r)
        return r.error();
    if (auto r = store.setWorkerTrust(job, WorkerTrust{worker, 0.5, 3, 1, false, {}}); !r)
        return r.error();
    return {};
}

} // namespace

class TestStore : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString path(const QString &name) const { return m_dir.filePath(name); }

    // A fresh store with one job in it.
    std::unique_ptr<Store> storeWithJob(const QString &name, qint64 &job)
    {
        auto store = openStore(path(name));
        if (!store)
            return nullptr;
        auto id = store->createJob(QStringLiteral("job"), QStringLiteral("{}"), 1);
        if (!id)
            return nullptr;
        job = *id;
        return store;
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void openCreatesTheSchema()
    {
        const QString db = path(QStringLiteral("schema.db"));
        QVERIFY(!QFileInfo::exists(db));
        auto store = openStore(db);
        QVERIFY(store);
        QCOMPARE(store->path(), db);
        QVERIFY(QFileInfo(db).isFile());
        const QStringList tables =
            queryFile(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
        const QStringList expected{QStringLiteral("assimilations"), QStringLiteral("evaluation_details"),
                                   QStringLiteral("evaluation_metrics"), QStringLiteral("evaluations"),
                                   QStringLiteral("events"),        QStringLiteral("jobs"),
                                   QStringLiteral("leases"),        QStringLiteral("ledger"),
                                   QStringLiteral("meta"),          QStringLiteral("operator_requests"),
                                   QStringLiteral("states"),        QStringLiteral("subtasks"),
                                   QStringLiteral("worker_trust"),  QStringLiteral("workers")};
        QCOMPARE(tables, expected);
        QCOMPARE(queryFile(db, "SELECT value FROM meta WHERE key = 'schema'"), QStringList{QStringLiteral("2")});
        QCOMPARE(queryFile(db, "PRAGMA journal_mode"), QStringList{QStringLiteral("wal")});
        // A new store has nothing in it.
        auto job = store->latestJob();
        QVERIFY2(job.ok(), qPrintable(job.error()));
        QVERIFY(!job->has_value());
    }

    void reopeningKeepsEverything()
    {
        const QString db = path(QStringLiteral("reopen.db"));
        QString name = QStringLiteral("persisted");
        QString spec = QStringLiteral("{\"epochs\":3}");
        qint64 job = 0;
        qint64 worker = 0;
        {
            auto store = openStore(db);
            QVERIFY(store);
            const QString error = recordOneOfEach(*store, name, spec, job, worker);
            QVERIFY2(error.isEmpty(), qPrintable(error));
        }
        // Opened twice more: opening an existing store again must not reset it either.
        for (int round = 0; round < 2; ++round) {
            auto store = openStore(db);
            QVERIFY(store);
            auto latest = store->latestJob();
            QVERIFY2(latest.ok() && latest->has_value(), qPrintable(latest.error()));
            QCOMPARE((*latest)->id, job);
            QCOMPARE((*latest)->name, name);
            QCOMPARE((*latest)->spec, spec);
            QCOMPARE(store->workers(job)->size(), size_t(1));
            QCOMPARE(store->workers(job)->front().id, worker);
            QCOMPARE(store->subtasks(job)->size(), size_t(1));
            QCOMPARE(store->leases(job)->size(), size_t(1));
            QCOMPARE((*store->latestState(job))->sha256, QStringLiteral("ab12"));
            QCOMPARE(*store->lastEventMs(job), qint64(88));
            QCOMPARE(store->ledgerTotals(job)->usefulSeconds, 2.5);
            QCOMPARE(store->workerTrust(job)->front().workerId, worker);
            // New rows continue after the old ones rather than over them.
            const qint64 previousJob = job;
            const qint64 previousWorker = worker;
            name = QStringLiteral("round %1").arg(round);
            spec = QStringLiteral("{\"round\":%1}").arg(round);
            const QString error = recordOneOfEach(*store, name, spec, job, worker);
            QVERIFY2(error.isEmpty(), qPrintable(error));
            QVERIFY(job > previousJob);
            QVERIFY(worker > previousWorker);
        }
        QCOMPARE(queryFile(db, "SELECT COUNT(*) FROM jobs"), QStringList{QStringLiteral("3")});
    }

    void jobsRoundTrip()
    {
        auto store = openStore(path(QStringLiteral("jobs.db")));
        QVERIFY(store);
        // Quotes, newlines and characters outside Latin-1 come back as they went in.
        const QString name = QStringLiteral("ré'sumé \"δοκιμή\" 試験");
        const QString spec = QStringLiteral("{\n  \"name\": \"a'b\",\n  \"alpha\": 0.5\n}");
        auto first = store->createJob(name, spec, 1'700'000'000'000);
        QVERIFY2(first.ok(), qPrintable(first.error()));
        auto latest = store->latestJob();
        QVERIFY2(latest.ok() && latest->has_value(), qPrintable(latest.error()));
        QCOMPARE((*latest)->id, *first);
        QCOMPARE((*latest)->name, name);
        QCOMPARE((*latest)->spec, spec);
        QCOMPARE((*latest)->state, QStringLiteral("running"));
        QCOMPARE((*latest)->createdMs, qint64(1'700'000'000'000));
        QCOMPARE((*latest)->finishedMs, qint64(0));

        auto second = store->createJob(QStringLiteral("second"), QStringLiteral("{}"), 5);
        QVERIFY(second.ok());
        QVERIFY(*second > *first);
        QCOMPARE((*store->latestJob())->id, *second);
        QCOMPARE((*store->latestJob())->name, QStringLiteral("second"));

        QVERIFY(store->setJobState(*first, QStringLiteral("failed"), 99).ok());
        QCOMPARE((*store->latestJob())->state, QStringLiteral("running")); // the other job
        QCOMPARE(queryFile(store->path(), "SELECT state || ' ' || finished_ms FROM jobs ORDER BY id"),
                 (QStringList{QStringLiteral("failed 99"), QStringLiteral("running 0")}));
    }

    void workersAddUpdateAndList()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("workers.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();

        WorkerRecord a = sampleWorker(QStringLiteral("alpha"));
        WorkerRecord b = sampleWorker(QStringLiteral("beta"));
        b.priceClass = QStringLiteral("on-demand");
        b.device = QStringLiteral("cpu");
        b.threads = 1;
        auto ida = store->addWorker(job, a);
        auto idb = store->addWorker(job, b);
        QVERIFY2(ida.ok() && idb.ok(), qPrintable(ida.ok() ? idb.error() : ida.error()));
        QVERIFY(*ida != *idb);
        a.id = *ida;
        b.id = *idb;
        QVERIFY(store->addWorker(other, sampleWorker(QStringLiteral("gamma"))).ok());

        a.instanceType = QStringLiteral("aws/c7g.xlarge");
        a.priceClass = QStringLiteral("volunteer");
        a.device = QStringLiteral("mps");
        a.threads = 12;
        a.joinedMs = 7;
        a.lastSeenMs = 8;
        a.state = QStringLiteral("offline");
        QVERIFY(store->updateWorker(job, a).ok());

        auto all = store->workers(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(all->size(), size_t(2));
        const WorkerRecord expected[] = {a, b}; // by id
        for (size_t i = 0; i < 2; ++i) {
            const WorkerRecord &got = all->at(i);
            const WorkerRecord &e = expected[i];
            QCOMPARE(got.id, e.id);
            QCOMPARE(got.name, e.name);
            QCOMPARE(got.instanceType, e.instanceType);
            QCOMPARE(got.priceClass, e.priceClass);
            QCOMPARE(got.device, e.device);
            QCOMPARE(got.threads, e.threads);
            QCOMPARE(got.joinedMs, e.joinedMs);
            QCOMPARE(got.lastSeenMs, e.lastSeenMs);
            QCOMPARE(got.state, e.state);
        }
        // The update touched one row of one job.
        QCOMPARE(store->workers(other)->size(), size_t(1));
        QCOMPARE(store->workers(other)->front().state, QStringLiteral("online"));
        QCOMPARE(store->workers(other)->front().threads, 6);
        // Updating a worker under the wrong job changes nothing, and says so.
        WorkerRecord wrongJob = b;
        wrongJob.state = QStringLiteral("offline");
        auto wrong = store->updateWorker(other, wrongJob);
        QVERIFY(!wrong.ok());
        expectErrorNaming(wrong.error(), {QStringLiteral("no worker %1 in job %2").arg(b.id).arg(other)});
        QCOMPARE(store->workers(job)->at(1).state, QStringLiteral("online"));
    }

    // An update that matches no row is an error naming what it looked for, not a silent
    // success: a caller with a wrong id learns it at once.
    void updatesOfUnknownRowsAreErrors()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("unknown-ids.db"), job);
        QVERIFY(store);
        auto state = store->setJobState(job + 41, QStringLiteral("finished"), 5);
        QVERIFY(!state.ok());
        expectErrorNaming(state.error(), {QStringLiteral("no job %1").arg(job + 41)});
        WorkerRecord ghost = sampleWorker(QStringLiteral("ghost"));
        ghost.id = 777;
        auto worker = store->updateWorker(job, ghost);
        QVERIFY(!worker.ok());
        expectErrorNaming(worker.error(), {QStringLiteral("no worker 777 in job %1").arg(job)});
        auto request = store->markOperatorRequestDone(12345);
        QVERIFY(!request.ok());
        expectErrorNaming(request.error(), {QStringLiteral("no operator request 12345")});
        // The real ones still succeed.
        QVERIFY(store->setJobState(job, QStringLiteral("finished"), 5).ok());
        QCOMPARE((*store->latestJob())->state, QStringLiteral("finished"));
    }

    // A state name this version does not know (a damaged file, a newer writer that did not
    // bump the schema) is refused with the row and the value, never read as another state.
    void unknownStateNamesAreRefused()
    {
        qint64 job = 0;
        const QString db = path(QStringLiteral("states-damaged.db"));
        {
            auto store = storeWithJob(QStringLiteral("states-damaged.db"), job);
            QVERIFY(store);
        }
        QVERIFY(execFile(db, qPrintable(QStringLiteral(
                                 "INSERT INTO subtasks VALUES(7, %1, 0, 0, 0, 100, 0, 'queued', 0, 0);"
                                 "INSERT INTO subtasks VALUES(8, %1, 0, 1, 0, 100, 0, 'half-done', 0, 0);"
                                 "INSERT INTO leases VALUES(3, %1, 7, 1, 0, 0, 10, 20, 'misplaced', 0);")
                                                     .arg(job))));
        auto store = Store::open(db);
        QVERIFY2(store.ok(), qPrintable(store.error()));
        auto subtasks = (*store)->subtasks(job);
        QVERIFY(!subtasks.ok());
        expectErrorNaming(subtasks.error(), {db, QStringLiteral("subtask 8"), QStringLiteral("'half-done'")});
        auto leases = (*store)->leases(job);
        QVERIFY(!leases.ok());
        expectErrorNaming(leases.error(), {db, QStringLiteral("lease 3"), QStringLiteral("'misplaced'")});
    }

    // Another program's SQLite database is refused before anything is written to it.
    void anotherProgramsDatabaseIsRefused()
    {
        const QString db = path(QStringLiteral("photos.sqlite"));
        QVERIFY(execFile(db, "CREATE TABLE photos(id INTEGER PRIMARY KEY, path TEXT);"
                             "CREATE TABLE albums(id INTEGER PRIMARY KEY, title TEXT);"
                             "INSERT INTO photos(path) VALUES('beach.jpg');"));
        const QByteArray before = readFile(db);
        auto r = Store::open(db);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("cannot open job store '%1'").arg(db),
                                      QStringLiteral("another program's SQLite database"),
                                      QStringLiteral("albums, photos")});
        QCOMPARE(readFile(db), before);
        QVERIFY(!QFile::exists(db + QStringLiteral("-wal")));
        QCOMPARE(queryFile(db, "PRAGMA journal_mode"), QStringList{QStringLiteral("delete")});
    }

    void storeRunsInWalMode()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("wal.db"), job);
        QVERIFY(store);
        QCOMPARE(queryFile(store->path(), "PRAGMA journal_mode"), QStringList{QStringLiteral("wal")});
    }

    void saveChangesWritesEveryField()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("changes.db"), job);
        QVERIFY(store);
        // One subtask and one lease per state, saved out of order.
        const std::vector<SubtaskState> subtaskStates{SubtaskState::Queued, SubtaskState::Leased, SubtaskState::Done};
        const std::vector<LeaseState> leaseStates{LeaseState::Active,     LeaseState::Completed, LeaseState::Expired,
                                                  LeaseState::HandedBack, LeaseState::Lost,      LeaseState::Superseded};
        std::vector<Subtask> subtasks;
        std::vector<Lease> leases;
        for (size_t i = 0; i < subtaskStates.size(); ++i) {
            Subtask s = sampleSubtask(qint64(10 + i));
            s.epoch += int(i);
            s.shard += 2 * int(i);
            s.begin += qint64(i) * 3;
            s.end += qint64(i) * 5;
            s.coveredEnd += qint64(i) * 7;
            s.assimilatedSeq += qint64(i) * 11;
            s.state = subtaskStates[i];
            subtasks.push_back(s);
        }
        for (size_t i = 0; i < leaseStates.size(); ++i) {
            Lease l = sampleLease(qint64(100 + i), 10 + qint64(i % 3));
            l.workerId += qint64(i);
            l.baseSeq += qint64(i) * 2;
            l.baseVersion += qint64(i) * 3;
            l.issuedMs += qint64(i) * 1000;
            l.deadlineMs += qint64(i) * 2000;
            l.endedMs = i == 0 ? 0 : l.issuedMs + qint64(i) * 100;
            l.state = leaseStates[i];
            leases.push_back(l);
        }
        SchedulerChanges changes;
        for (auto it = subtasks.rbegin(); it != subtasks.rend(); ++it)
            changes.add(*it);
        for (auto it = leases.rbegin(); it != leases.rend(); ++it)
            changes.add(*it);
        auto saved = store->saveChanges(job, changes);
        QVERIFY2(saved.ok(), qPrintable(saved.error()));

        auto readSubtasks = store->subtasks(job);
        QVERIFY2(readSubtasks.ok(), qPrintable(readSubtasks.error()));
        QCOMPARE(readSubtasks->size(), subtasks.size());
        for (size_t i = 0; i < subtasks.size(); ++i)
            compareSubtask(readSubtasks->at(i), subtasks[i]);
        auto readLeases = store->leases(job);
        QVERIFY2(readLeases.ok(), qPrintable(readLeases.error()));
        QCOMPARE(readLeases->size(), leases.size());
        for (size_t i = 0; i < leases.size(); ++i)
            compareLease(readLeases->at(i), leases[i]);
        // The states are stored as their names, which other readers of the file rely on.
        QCOMPARE(queryFile(store->path(), "SELECT state FROM leases ORDER BY id"),
                 (QStringList{QStringLiteral("active"), QStringLiteral("completed"), QStringLiteral("expired"),
                              QStringLiteral("handed-back"), QStringLiteral("lost"), QStringLiteral("superseded")}));
    }

    void saveChangesKeepsTheLatestStateOfEachId()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("upsert.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();

        Subtask s = sampleSubtask(5);
        s.state = SubtaskState::Queued;
        s.coveredEnd = 0;
        Lease l = sampleLease(7, 5);
        SchedulerChanges first;
        first.add(s);
        first.add(l);
        QVERIFY(store->saveChanges(job, first).ok());
        // The same ids in another job are other records.
        QVERIFY(store->saveChanges(other, first).ok());

        s.state = SubtaskState::Done;
        s.coveredEnd = s.end;
        s.assimilatedSeq = 99;
        l.state = LeaseState::Completed;
        l.endedMs = l.issuedMs + 1234;
        SchedulerChanges second;
        second.add(s);
        second.add(l);
        QVERIFY(store->saveChanges(job, second).ok());
        // Twice in one batch: the later entry wins.
        Subtask again = s;
        again.coveredEnd = s.end - 1;
        Subtask last = s;
        SchedulerChanges third;
        third.add(again);
        third.add(last);
        QVERIFY(store->saveChanges(job, third).ok());

        auto subtasks = store->subtasks(job);
        QVERIFY2(subtasks.ok(), qPrintable(subtasks.error()));
        QCOMPARE(subtasks->size(), size_t(1));
        compareSubtask(subtasks->front(), s);
        auto leases = store->leases(job);
        QVERIFY2(leases.ok(), qPrintable(leases.error()));
        QCOMPARE(leases->size(), size_t(1));
        compareLease(leases->front(), l);

        QCOMPARE(store->subtasks(other)->size(), size_t(1));
        QCOMPARE(toString(store->subtasks(other)->front().state), QStringLiteral("queued"));
        QCOMPARE(toString(store->leases(other)->front().state), QStringLiteral("active"));
    }

    void saveChangesFailingInsideATransactionKeepsTheRest()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("savepoint.db"), job);
        QVERIFY(store);
        QVERIFY(store->begin().ok());
        QVERIFY(store->addEvent(job, EventRecord{0, 1, QStringLiteral("before"), 0, 0, 0, {}}).ok());
        // A job that does not exist: the foreign key refuses the rows.
        SchedulerChanges changes;
        changes.add(sampleSubtask(1));
        changes.add(sampleLease(1, 1));
        auto r = store->saveChanges(job + 1000, changes);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("FOREIGN KEY")});
        // The enclosing transaction is still open and still commits what came before.
        QVERIFY(store->addEvent(job, EventRecord{0, 2, QStringLiteral("after"), 0, 0, 0, {}}).ok());
        QVERIFY(store->commit().ok());
        QCOMPARE(queryFile(store->path(), "SELECT kind FROM events ORDER BY id"),
                 (QStringList{QStringLiteral("before"), QStringLiteral("after")}));
        QCOMPARE(queryFile(store->path(), "SELECT COUNT(*) FROM subtasks"), QStringList{QStringLiteral("0")});
        QCOMPARE(queryFile(store->path(), "SELECT COUNT(*) FROM leases"), QStringList{QStringLiteral("0")});
    }

    void statesLatestAndBySeq()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("states.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        auto none = store->latestState(job);
        QVERIFY2(none.ok(), qPrintable(none.error()));
        QVERIFY(!none->has_value());

        const StateRecord s1{1, 1, QStringLiteral("checkpoints/1.ckpt"), QStringLiteral("11aa"), 100};
        const StateRecord s9{9, 8, QStringLiteral("checkpoints/9.ckpt"), QStringLiteral("99ff"), 900};
        const StateRecord s4{4, 4, QStringLiteral("checkpoints/4.ckpt"), QStringLiteral("44cc"), 400};
        for (const StateRecord &s : {s1, s9, s4})
            QVERIFY(store->addState(job, s).ok());
        QVERIFY(store->addState(other, StateRecord{50, 50, QStringLiteral("x"), QStringLiteral("y"), 5}).ok());

        // The latest is the highest seq, not the last written.
        auto latest = store->latestState(job);
        QVERIFY2(latest.ok() && latest->has_value(), qPrintable(latest.error()));
        QCOMPARE((*latest)->seq, qint64(9));
        QCOMPARE((*latest)->version, qint64(8));
        QCOMPARE((*latest)->path, s9.path);
        QCOMPARE((*latest)->sha256, s9.sha256);
        QCOMPARE((*latest)->atMs, qint64(900));

        auto four = store->state(job, 4);
        QVERIFY2(four.ok() && four->has_value(), qPrintable(four.error()));
        QCOMPARE((*four)->seq, qint64(4));
        QCOMPARE((*four)->version, qint64(4));
        QCOMPARE((*four)->path, s4.path);
        QCOMPARE((*four)->sha256, s4.sha256);
        QCOMPARE((*four)->atMs, qint64(400));
        QVERIFY(!store->state(job, 5)->has_value());
        QVERIFY(!store->state(job, 50)->has_value()); // another job's
        // A seq is written once.
        QVERIFY(!store->addState(job, StateRecord{4, 7, QStringLiteral("z"), QStringLiteral("z"), 1}).ok());
        QCOMPARE((*store->state(job, 4))->sha256, s4.sha256);
    }

    void assimilationsReadBackEveryField()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("assimilations.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        const AssimilationRecord a{2, 3, 4, 5, 6, 7, 8, 9, 0.625, 6400, 128, 1152, 0.3125, 12.75, 1'700'000'000'001};
        const AssimilationRecord b{1, 2, 0, 1, 60, 70, 80, 0, 1.0, 640000, 0, 9999, 2.5, 0.125, 1'700'000'000'002};
        QVERIFY(store->addAssimilation(job, a).ok());
        QVERIFY(store->addAssimilation(job, b).ok());
        QVERIFY(store->addAssimilation(other, a).ok());
        QVERIFY(!store->addAssimilation(job, a).ok()); // seq is the key

        auto all = store->assimilations(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(all->size(), size_t(2));
        const AssimilationRecord *expected[] = {&b, &a}; // by seq
        for (int i = 0; i < 2; ++i) {
            const AssimilationRecord &got = all->at(i);
            const AssimilationRecord &e = *expected[i];
            QCOMPARE(got.seq, e.seq);
            QCOMPARE(got.version, e.version);
            QCOMPARE(got.epoch, e.epoch);
            QCOMPARE(got.shard, e.shard);
            QCOMPARE(got.subtaskId, e.subtaskId);
            QCOMPARE(got.leaseId, e.leaseId);
            QCOMPARE(got.workerId, e.workerId);
            QCOMPARE(got.staleness, e.staleness);
            QCOMPARE(got.credit, e.credit);
            QCOMPARE(got.samples, e.samples);
            QCOMPARE(got.begin, e.begin);
            QCOMPARE(got.coveredEnd, e.coveredEnd);
            QCOMPARE(got.loss, e.loss);
            QCOMPARE(got.trainSeconds, e.trainSeconds);
            QCOMPARE(got.atMs, e.atMs);
        }
        QCOMPARE(store->assimilations(other)->size(), size_t(1));
    }

    void evaluationsReadBack()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("evaluations.db"), job);
        QVERIFY(store);
        QVERIFY(store->addEvaluation(job, EvaluationRecord{2, 30, 31, 0.9375, 0.1875, 3000}).ok());
        QVERIFY(store->addEvaluation(job, EvaluationRecord{1, 20, 21, 0.875, 0.375, 2000}).ok());
        auto all = store->evaluations(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(all->size(), size_t(2));
        const EvaluationRecord &e = all->front(); // by seq
        QCOMPARE(e.epoch, 1);
        QCOMPARE(e.version, qint64(20));
        QCOMPARE(e.seq, qint64(21));
        QCOMPARE(e.accuracy, 0.875);
        QCOMPARE(e.loss, 0.375);
        QCOMPARE(e.atMs, qint64(2000));
        QCOMPARE(all->back().seq, qint64(31));
    }

    void eventsByKindAndLastEventMs()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("events.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        auto never = store->lastEventMs(job);
        QVERIFY2(never.ok(), qPrintable(never.error()));
        QCOMPARE(*never, qint64(0));

        // Times out of order: lastEventMs is the latest time, not the last row.
        const EventRecord joined{0, 500, QStringLiteral("joined"), 3, 0, 0, QStringLiteral("worker w3 joined")};
        const EventRecord preempted{0, 900, QStringLiteral("preempted"), 3, 4, 5, QStringLiteral("SIGTERM")};
        const EventRecord assimilated{0, 700, QStringLiteral("assimilated"), 3, 4, 5, QStringLiteral("seq 1")};
        std::vector<qint64> ids;
        for (const EventRecord &e : {joined, preempted, assimilated}) {
            auto id = store->addEvent(job, e);
            QVERIFY2(id.ok(), qPrintable(id.error()));
            ids.push_back(*id);
        }
        QVERIFY(ids[0] < ids[1] && ids[1] < ids[2]);
        QVERIFY(store->addEvent(other, EventRecord{0, 5000, QStringLiteral("preempted"), 1, 1, 1, {}}).ok());

        auto all = store->events(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(all->size(), size_t(3));
        const EventRecord *expected[] = {&joined, &preempted, &assimilated};
        for (int i = 0; i < 3; ++i) {
            const EventRecord &got = all->at(i);
            QCOMPARE(got.id, ids[i]);
            QCOMPARE(got.atMs, expected[i]->atMs);
            QCOMPARE(got.kind, expected[i]->kind);
            QCOMPARE(got.workerId, expected[i]->workerId);
            QCOMPARE(got.subtaskId, expected[i]->subtaskId);
            QCOMPARE(got.leaseId, expected[i]->leaseId);
            QCOMPARE(got.detail, expected[i]->detail);
        }
        auto onlyPreempted = store->events(job, QStringLiteral("preempted"));
        QVERIFY2(onlyPreempted.ok(), qPrintable(onlyPreempted.error()));
        QCOMPARE(onlyPreempted->size(), size_t(1));
        QCOMPARE(onlyPreempted->front().id, ids[1]);
        QCOMPARE(onlyPreempted->front().detail, QStringLiteral("SIGTERM"));
        QVERIFY(store->events(job, QStringLiteral("no-such-kind"))->empty());
        QCOMPARE(*store->lastEventMs(job), qint64(900));
        QCOMPARE(*store->lastEventMs(other), qint64(5000));
    }

    void ledgerSumsPerJobAndPerWorker()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("ledger.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        auto empty = store->ledgerByWorker(job);
        QVERIFY2(empty.ok(), qPrintable(empty.error()));
        QVERIFY(empty->empty());

        // worker, lease, at, kind, seconds, spot, on-demand, actual (binary fractions, so the
        // sums are exact)
        const std::vector<LedgerRecord> entries{
            {1, 10, 100, QStringLiteral("useful"), 8.0, 0.5, 2.0, 0.5},
            {2, 11, 110, QStringLiteral("useful"), 4.0, 0.25, 1.0, 1.0},
            {1, 12, 120, QStringLiteral("wasted"), 2.0, 0.125, 0.5, 0.125},
            {2, 13, 130, QStringLiteral("wasted"), 1.0, 0.0625, 0.25, 0.25},
            {1, 14, 140, QStringLiteral("useful"), 0.5, 0.03125, 0.125, 0.03125},
        };
        for (const LedgerRecord &l : entries)
            QVERIFY(store->addLedger(job, l).ok());
        QVERIFY(store->addLedger(other, LedgerRecord{1, 1, 1, QStringLiteral("wasted"), 1000, 10, 10, 10}).ok());

        auto t = store->ledgerTotals(job);
        QVERIFY2(t.ok(), qPrintable(t.error()));
        QCOMPARE(t->usefulSeconds, 12.5);
        QCOMPARE(t->wastedSeconds, 3.0);
        QCOMPARE(t->costSpot, 0.96875);
        QCOMPARE(t->costOnDemand, 3.875);
        QCOMPARE(t->costActual, 1.90625);
        QCOMPARE(t->wastedCostActual, 0.375);
        QCOMPARE(t->savingsPercent(), 100.0 * (1.0 - 1.90625 / 3.875));

        auto byWorker = store->ledgerByWorker(job);
        QVERIFY2(byWorker.ok(), qPrintable(byWorker.error()));
        QCOMPARE(byWorker->size(), size_t(2));
        const LedgerTotals &w1 = byWorker->at(1);
        QCOMPARE(w1.usefulSeconds, 8.5);
        QCOMPARE(w1.wastedSeconds, 2.0);
        QCOMPARE(w1.costSpot, 0.65625);
        QCOMPARE(w1.costOnDemand, 2.625);
        QCOMPARE(w1.costActual, 0.65625);
        QCOMPARE(w1.wastedCostActual, 0.125);
        const LedgerTotals &w2 = byWorker->at(2);
        QCOMPARE(w2.usefulSeconds, 4.0);
        QCOMPARE(w2.wastedSeconds, 1.0);
        QCOMPARE(w2.costSpot, 0.3125);
        QCOMPARE(w2.costOnDemand, 1.25);
        QCOMPARE(w2.costActual, 1.25);
        QCOMPARE(w2.wastedCostActual, 0.25);
        // The workers' sums add up to the job's.
        QCOMPARE(w1.costActual + w2.costActual, t->costActual);

        auto rows = store->ledger(job);
        QVERIFY2(rows.ok(), qPrintable(rows.error()));
        QCOMPARE(rows->size(), entries.size());
        for (size_t i = 0; i < entries.size(); ++i) {
            QCOMPARE(rows->at(i).workerId, entries[i].workerId);
            QCOMPARE(rows->at(i).leaseId, entries[i].leaseId);
            QCOMPARE(rows->at(i).atMs, entries[i].atMs);
            QCOMPARE(rows->at(i).kind, entries[i].kind);
            QCOMPARE(rows->at(i).seconds, entries[i].seconds);
            QCOMPARE(rows->at(i).costSpot, entries[i].costSpot);
            QCOMPARE(rows->at(i).costOnDemand, entries[i].costOnDemand);
            QCOMPARE(rows->at(i).costActual, entries[i].costActual);
        }
        QCOMPARE(store->ledgerTotals(other)->wastedSeconds, 1000.0);
        QCOMPARE(store->ledgerTotals(other)->usefulSeconds, 0.0);
    }

    void rollbackDiscardsAndCommitKeeps()
    {
        const QString db = path(QStringLiteral("transactions.db"));
        auto store = openStore(db);
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("job"), QStringLiteral("{}"), 1).value();
        // A second connection, as the dashboard has: it sees committed work only.
        auto reader = openStore(db);
        QVERIFY(reader);

        QVERIFY(store->begin().ok());
        QVERIFY(store->addEvent(job, EventRecord{0, 10, QStringLiteral("discarded"), 0, 0, 0, {}}).ok());
        QVERIFY(store->addState(job, StateRecord{1, 1, QStringLiteral("p"), QStringLiteral("s"), 10}).ok());
        QVERIFY(store->addLedger(job, LedgerRecord{1, 1, 10, QStringLiteral("useful"), 5, 1, 1, 1}).ok());
        // Inside the transaction the writer sees its own writes, the reader does not.
        QCOMPARE(store->events(job)->size(), size_t(1));
        QVERIFY(reader->events(job)->empty());
        QVERIFY(!store->begin().ok()); // no nesting
        store->rollback();
        QVERIFY(store->events(job)->empty());
        QVERIFY(!store->latestState(job)->has_value());
        QCOMPARE(store->ledgerTotals(job)->usefulSeconds, 0.0);

        QVERIFY(store->begin().ok());
        QVERIFY(store->addEvent(job, EventRecord{0, 20, QStringLiteral("kept"), 0, 0, 0, {}}).ok());
        QVERIFY(store->addState(job, StateRecord{2, 2, QStringLiteral("p2"), QStringLiteral("s2"), 20}).ok());
        QVERIFY(reader->events(job)->empty());
        QVERIFY(store->commit().ok());
        QCOMPARE(reader->events(job)->size(), size_t(1));
        QCOMPARE(reader->events(job)->front().kind, QStringLiteral("kept"));
        QCOMPARE((*reader->latestState(job))->seq, qint64(2));
        QVERIFY(!store->commit().ok()); // nothing left to commit

        // And it is on disk: a fresh connection after both are closed reads it.
        store.reset();
        reader.reset();
        QCOMPARE(queryFile(db, "SELECT kind FROM events"), QStringList{QStringLiteral("kept")});
        QCOMPARE(queryFile(db, "SELECT COUNT(*) FROM ledger"), QStringList{QStringLiteral("0")});
    }

    void workerTrustUpserts()
    {
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("trust.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        QVERIFY(store->workerTrust(job)->empty());

        QVERIFY(store->setWorkerTrust(job, WorkerTrust{7, 1.0, 4, 0, false, {}}).ok());
        QVERIFY(store->setWorkerTrust(job, WorkerTrust{3, 0.5, 1, 1, false, {}}).ok());
        QVERIFY(store->setWorkerTrust(other, WorkerTrust{7, 0.125, 0, 3, true, QStringLiteral("other job")}).ok());
        // The same worker again replaces its row.
        const WorkerTrust quarantined{7, 0.25, 4, 2, true, QStringLiteral("2 results rejected: non-finite weights")};
        QVERIFY(store->setWorkerTrust(job, quarantined).ok());

        auto all = store->workerTrust(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(all->size(), size_t(2));
        QCOMPARE(all->at(0).workerId, qint64(3)); // by worker id
        QCOMPARE(all->at(0).trust, 0.5);
        QCOMPARE(all->at(0).accepted, 1);
        QCOMPARE(all->at(0).rejected, 1);
        QVERIFY(!all->at(0).quarantined);
        QVERIFY(all->at(0).reason.isEmpty());
        const WorkerTrust &got = all->at(1);
        QCOMPARE(got.workerId, quarantined.workerId);
        QCOMPARE(got.trust, quarantined.trust);
        QCOMPARE(got.accepted, quarantined.accepted);
        QCOMPARE(got.rejected, quarantined.rejected);
        QVERIFY(got.quarantined);
        QCOMPARE(got.reason, quarantined.reason);

        // Released: the flag goes back down.
        QVERIFY(store->setWorkerTrust(job, WorkerTrust{7, 0.25, 4, 2, false, {}}).ok());
        QVERIFY(!store->workerTrust(job)->at(1).quarantined);
        QCOMPARE(store->workerTrust(other)->size(), size_t(1));
        QVERIFY(store->workerTrust(other)->front().quarantined);
    }

    void operatorRequestsPendingUntilDone()
    {
        const QString db = path(QStringLiteral("requests.db"));
        qint64 job = 0;
        auto store = storeWithJob(QStringLiteral("requests.db"), job);
        QVERIFY(store);
        const qint64 other = store->createJob(QStringLiteral("other"), QStringLiteral("{}"), 2).value();
        QVERIFY(store->pendingOperatorRequests(job)->empty());

        auto first = store->addOperatorRequest(job, QStringLiteral("release"), QStringLiteral("worker-a"), 1000);
        auto second = store->addOperatorRequest(job, QStringLiteral("release"), QStringLiteral("worker-b"), 2000);
        auto elsewhere = store->addOperatorRequest(other, QStringLiteral("release"), QStringLiteral("worker-c"), 3000);
        QVERIFY2(first.ok() && second.ok() && elsewhere.ok(), qPrintable(first.error()));
        QVERIFY(*first < *second);

        auto pending = store->pendingOperatorRequests(job);
        QVERIFY2(pending.ok(), qPrintable(pending.error()));
        QCOMPARE(pending->size(), size_t(2));
        QCOMPARE(pending->at(0).id, *first);
        QCOMPARE(pending->at(0).atMs, qint64(1000));
        QCOMPARE(pending->at(0).kind, QStringLiteral("release"));
        QCOMPARE(pending->at(0).worker, QStringLiteral("worker-a"));
        QCOMPARE(pending->at(1).id, *second);
        QCOMPARE(pending->at(1).worker, QStringLiteral("worker-b"));

        QVERIFY(store->markOperatorRequestDone(*first).ok());
        pending = store->pendingOperatorRequests(job);
        QCOMPARE(pending->size(), size_t(1));
        QCOMPARE(pending->front().id, *second);
        QCOMPARE(store->pendingOperatorRequests(other)->size(), size_t(1));

        // A request written by another process (`flotilla release`) is seen, and done stays done.
        store.reset();
        {
            auto cli = openStore(db);
            QVERIFY(cli);
            QVERIFY(cli->addOperatorRequest(job, QStringLiteral("release"), QStringLiteral("worker-d"), 4000).ok());
        }
        store = openStore(db);
        QVERIFY(store);
        pending = store->pendingOperatorRequests(job);
        QVERIFY2(pending.ok(), qPrintable(pending.error()));
        QCOMPARE(pending->size(), size_t(2));
        QCOMPARE(pending->at(0).worker, QStringLiteral("worker-b"));
        QCOMPARE(pending->at(1).worker, QStringLiteral("worker-d"));
    }

};

QTEST_GUILESS_MAIN(TestStore)
#include "tst_store.moc"
