// Checkpoint files (round trip, SHA-256, and every way a file can be broken) and the SQLite
// job store (WAL, each kind of record, transactions, reopening, files that are not stores).
#include "common/AtomicFile.h"
#include "engine/coordination/Checkpoint.h"
#include "engine/coordination/Store.h"

#include <QCborArray>
#include <QCborMap>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtEndian>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <sqlite3.h>

#include <cstring>

using namespace flotilla;

namespace {

constexpr std::int64_t kParams = 1000;

Checkpoint sampleCheckpoint()
{
    torch::manual_seed(3);
    Checkpoint c;
    c.seq = 17;
    c.version = 12;
    c.layoutDigest = QStringLiteral("cnn:1x28x28:0f3a9c");
    c.state.weights = torch::randn({kParams});
    c.state.momentum = torch::randn({kParams});
    c.state.roundSum = torch::randn({kParams});
    c.state.roundCredit = 2.5;
    c.state.roundResults = 3;
    c.state.outerSteps = 42;
    c.state.foldedCredit = 7.25;
    return c;
}

QByteArray readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void overwrite(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(bytes), qint64(bytes.size()));
}

void expectError(const QString &error, const QStringList &parts)
{
    QVERIFY2(!error.isEmpty(), "an error was expected");
    for (const QString &part : parts)
        QVERIFY2(error.contains(part), qPrintable(QStringLiteral("'%1' missing from: %2").arg(part, error)));
}

// Runs one statement on a second, independent SQLite connection and returns the first
// column of the first row.
QString queryOnSecondConnection(const QString &path, const char *sql)
{
    sqlite3 *db = nullptr;
    QString value;
    if (sqlite3_open_v2(QFile::encodeName(path).constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt *stmt = nullptr;
        if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
            value = QString::fromUtf8(reinterpret_cast<const char *>(sqlite3_column_text(stmt, 0)));
        else
            value = QStringLiteral("error: ") + QString::fromUtf8(sqlite3_errmsg(db));
        sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
    return value;
}

std::unique_ptr<Store> openStore(const QString &path)
{
    auto s = Store::open(path);
    if (!s) {
        qWarning().noquote() << s.error();
        return nullptr;
    }
    return std::move(s).value();
}

} // namespace

class TestCheckpoint : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString path(const char *name) const { return m_dir.filePath(QString::fromLatin1(name)); }

    // A valid checkpoint file's bytes.
    QByteArray validBytes()
    {
        const QString p = path("valid.ckpt");
        if (!writeCheckpoint(p, sampleCheckpoint()).ok())
            return {};
        return readAll(p);
    }

    // Writes bytes to a file and returns the error of reading it (empty if it was read).
    QString readError(const char *name, const QByteArray &bytes, const QString &sha = {})
    {
        const QString p = path(name);
        QFile f(p);
        if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(bytes) != bytes.size())
            return QStringLiteral("cannot write test file");
        f.close();
        auto r = readCheckpoint(p, sha);
        return r.ok() ? QString() : r.error();
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // ---- checkpoint files ----

    void roundTrip()
    {
        const Checkpoint c = sampleCheckpoint();
        const QString p = path("round.ckpt");
        auto sha = writeCheckpoint(p, c);
        QVERIFY2(sha.ok(), qPrintable(sha.error()));
        QCOMPARE(int(sha->size()), 64);
        QVERIFY(QRegularExpression(QStringLiteral("^[0-9a-f]{64}$")).match(*sha).hasMatch());
        auto fileSha = sha256OfFile(p);
        QVERIFY2(fileSha.ok(), qPrintable(fileSha.error()));
        QCOMPARE(*sha, *fileSha);
        // Magic, a header, then three tensors of float32.
        const QByteArray bytes = readAll(p);
        QVERIFY(bytes.startsWith("FLTCKPT1"));
        QVERIFY(bytes.size() > 3 * kParams * 4);

        auto back = readCheckpoint(p, *sha);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->seq, qint64(17));
        QCOMPARE(back->version, qint64(12));
        QCOMPARE(back->layoutDigest, c.layoutDigest);
        QCOMPARE(back->state.roundCredit, 2.5);
        QCOMPARE(back->state.roundResults, 3);
        QCOMPARE(back->state.outerSteps, qint64(42));
        QCOMPARE(back->state.foldedCredit, 7.25);
        QVERIFY(back->state.weights.scalar_type() == torch::kFloat32);
        QCOMPARE(back->state.weights.numel(), kParams);
        QVERIFY(torch::equal(back->state.weights, c.state.weights));
        QVERIFY(torch::equal(back->state.momentum, c.state.momentum));
        QVERIFY(torch::equal(back->state.roundSum, c.state.roundSum));
        // The three buffers are not mixed up.
        QVERIFY(!torch::equal(back->state.momentum, c.state.weights));

        // Without an expected hash the file is read as well.
        auto unchecked = readCheckpoint(p);
        QVERIFY2(unchecked.ok(), qPrintable(unchecked.error()));
        QVERIFY(torch::equal(unchecked->state.roundSum, c.state.roundSum));
    }

    void onlyWeights()
    {
        Checkpoint c;
        c.seq = 1;
        c.version = 1;
        c.layoutDigest = QStringLiteral("mlp");
        c.state.weights = torch::arange(5, torch::kFloat32);
        const QString p = path("weights-only.ckpt");
        auto sha = writeCheckpoint(p, c);
        QVERIFY2(sha.ok(), qPrintable(sha.error()));
        QCOMPARE(*sha, sha256OfFile(p).value());
        auto back = readCheckpoint(p, *sha);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QVERIFY(torch::equal(back->state.weights, c.state.weights));
        QVERIFY(!back->state.momentum.defined());
        QVERIFY(!back->state.roundSum.defined());
        QCOMPARE(back->state.roundCredit, 0.0);
        QCOMPARE(back->state.roundResults, 0);
        QCOMPARE(back->state.outerSteps, qint64(0));
    }

    // A checkpoint written before outer steps were counted has a momentum buffer that is long
    // warm: a resumed job must not start it again (that would multiply its step).
    void aCheckpointWithoutOuterStepsIsWarm()
    {
        const QByteArray header = QCborMap{{QStringLiteral("seq"), 3},
                                           {QStringLiteral("version"), 3},
                                           {QStringLiteral("layout"), QStringLiteral("mlp")},
                                           {QStringLiteral("tensors"),
                                            QCborArray{QCborMap{{QStringLiteral("name"), QStringLiteral("weights")},
                                                                {QStringLiteral("numel"), 2}},
                                                       QCborMap{{QStringLiteral("name"), QStringLiteral("momentum")},
                                                                {QStringLiteral("numel"), 2}}}}}
                                      .toCborValue()
                                      .toCbor();
        QByteArray bytes("FLTCKPT1", 8);
        const quint32 size = qToLittleEndian(quint32(header.size()));
        bytes.append(reinterpret_cast<const char *>(&size), 4);
        bytes.append(header);
        const float values[4] = {1, 2, 3, 4};
        bytes.append(reinterpret_cast<const char *>(values), sizeof values);
        const QString p = path("before-outer-steps.ckpt");
        overwrite(p, bytes);
        auto back = readCheckpoint(p);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QVERIFY(torch::equal(back->state.momentum, torch::tensor({3.0f, 4.0f})));
        QVERIFY(back->state.outerSteps >= 1000);
        QVERIFY(back->state.foldedCredit >= 1000.0);
    }

    void rewriteReplacesTheFile()
    {
        const QString p = path("rewrite.ckpt");
        Checkpoint c = sampleCheckpoint();
        auto first = writeCheckpoint(p, c);
        QVERIFY(first.ok());
        c.seq = 18;
        c.state.weights = c.state.weights + 1;
        auto second = writeCheckpoint(p, c);
        QVERIFY(second.ok());
        QVERIFY(*first != *second);
        auto back = readCheckpoint(p, *second);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->seq, qint64(18));
        // No temporary files left beside it.
        const QStringList left = QDir(m_dir.path()).entryList({QStringLiteral("rewrite*")}, QDir::Files);
        QCOMPARE(left, QStringList{QStringLiteral("rewrite.ckpt")});
    }

    void wrongShaIsCorrupt()
    {
        const QString p = path("sha.ckpt");
        auto sha = writeCheckpoint(p, sampleCheckpoint());
        QVERIFY(sha.ok());
        const QString wrong = sha256Hex("something else");
        auto r = readCheckpoint(p, wrong);
        QVERIFY(!r.ok());
        expectError(r.error(), {p, QStringLiteral("corrupt"), QStringLiteral("SHA-256")});

        // One flipped bit in the weights: the recorded hash catches it.
        QByteArray bytes = readAll(p);
        bytes[bytes.size() - 100] = char(bytes[bytes.size() - 100] ^ 0x01);
        expectError(readError("flipped.ckpt", bytes, *sha), {QStringLiteral("corrupt")});
    }

    void missingFile()
    {
        const QString p = path("nothing-here.ckpt");
        auto r = readCheckpoint(p);
        QVERIFY(!r.ok());
        expectError(r.error(), {QStringLiteral("cannot open checkpoint '%1'").arg(p)});
    }

    void truncatedFilesAreRefused()
    {
        const QByteArray bytes = validBytes();
        QVERIFY(!bytes.isEmpty());
        // In the last tensor's buffer.
        expectError(readError("cut-payload.ckpt", bytes.chopped(10)),
                    {path("cut-payload.ckpt"), QStringLiteral("truncated"), QStringLiteral("'round_sum'"),
                     QStringLiteral("1000 values")});
        // All buffers gone.
        const quint32 headerSize = qFromLittleEndian<quint32>(bytes.constData() + 8);
        expectError(readError("cut-after-header.ckpt", bytes.left(12 + int(headerSize))),
                    {QStringLiteral("truncated"), QStringLiteral("'weights'")});
        // In the header.
        expectError(readError("cut-header.ckpt", bytes.left(20)),
                    {path("cut-header.ckpt"), QStringLiteral("truncated or corrupt"),
                     QStringLiteral("header of %1 bytes").arg(headerSize)});
        // Shorter than magic and length.
        expectError(readError("cut-magic.ckpt", bytes.left(6)), {QStringLiteral("not a Flotilla checkpoint")});
        expectError(readError("empty.ckpt", QByteArray()), {QStringLiteral("not a Flotilla checkpoint")});
    }

    void wrongMagicIsRefused()
    {
        QByteArray bytes = validBytes();
        bytes[7] = '2'; // FLTCKPT2: a future format
        expectError(readError("magic.ckpt", bytes), {path("magic.ckpt"), QStringLiteral("is not a Flotilla checkpoint")});
        expectError(readError("zip.ckpt", QByteArray("PK\x03\x04", 4) + QByteArray(100, 'x')),
                    {QStringLiteral("is not a Flotilla checkpoint")});
    }

    void hugeHeaderLengthIsRefused()
    {
        QByteArray bytes = validBytes();
        const quint32 huge = qToLittleEndian<quint32>(0xFFFFFFF0u);
        std::memcpy(bytes.data() + 8, &huge, 4);
        expectError(readError("huge.ckpt", bytes),
                    {path("huge.ckpt"), QStringLiteral("truncated or corrupt"), QStringLiteral("header of 4294967280 bytes")});
        // Over the 1 MiB cap even if the file were that long.
        const quint32 overCap = qToLittleEndian<quint32>((1u << 20) + 1);
        std::memcpy(bytes.data() + 8, &overCap, 4);
        bytes.append(QByteArray((1 << 20) + 16, '\0'));
        expectError(readError("overcap.ckpt", bytes), {QStringLiteral("header of 1048577 bytes")});
    }

    void corruptHeaderIsRefused()
    {
        QByteArray bytes = validBytes();
        const quint32 headerSize = qFromLittleEndian<quint32>(bytes.constData() + 8);
        bytes.replace(12, int(headerSize), QByteArray(int(headerSize), char(0xFF)));
        expectError(readError("garbled.ckpt", bytes), {path("garbled.ckpt"), QStringLiteral("corrupt header")});
    }

    void trailingBytesAreRefused()
    {
        expectError(readError("long.ckpt", validBytes() + QByteArray("abc")),
                    {path("long.ckpt"), QStringLiteral("3 unexpected bytes at its end")});
    }

    void unwritablePath()
    {
        const QString p = path("no/such/dir/x.ckpt");
        auto r = writeCheckpoint(p, sampleCheckpoint());
        QVERIFY(!r.ok());
        expectError(r.error(), {p});
    }

    // ---- the job store ----

    void freshStoreUsesWal()
    {
        const QString db = path("wal.db");
        auto store = openStore(db);
        QVERIFY(store);
        QCOMPARE(store->path(), db);
        auto job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1000);
        QVERIFY2(job.ok(), qPrintable(job.error()));
        // WAL is a property of the file: a second connection sees it, and the log file exists
        // beside the database while the store is open.
        QCOMPARE(queryOnSecondConnection(db, "PRAGMA journal_mode"), QStringLiteral("wal"));
        QVERIFY(QFileInfo::exists(db + QStringLiteral("-wal")));
        // The second connection reads the committed job while the first is still open.
        QCOMPARE(queryOnSecondConnection(db, "SELECT name FROM jobs WHERE id = 1"), QStringLiteral("j"));
        QCOMPARE(queryOnSecondConnection(db, "SELECT value FROM meta WHERE key = 'schema'"), QStringLiteral("2"));
    }

    void storeOfTheFirstSchemaGainsWhatItLacks()
    {
        // A run directory from before worker trust existed: schema 1 without its tables.
        const QString db = path("schema1.db");
        {
            auto store = openStore(db);
            QVERIFY(store);
            QVERIFY(store->createJob(QStringLiteral("old"), QStringLiteral("{}"), 1000));
        }
        {
            sqlite3 *raw = nullptr;
            QCOMPARE(sqlite3_open(db.toUtf8().constData(), &raw), SQLITE_OK);
            QCOMPARE(sqlite3_exec(raw, "DROP TABLE worker_trust; DROP TABLE operator_requests; "
                                       "UPDATE meta SET value = '1' WHERE key = 'schema'",
                                  nullptr, nullptr, nullptr),
                     SQLITE_OK);
            sqlite3_close(raw);
        }
        auto store = openStore(db);
        QVERIFY(store);
        QCOMPARE(queryOnSecondConnection(db, "SELECT value FROM meta WHERE key = 'schema'"), QStringLiteral("2"));
        QVERIFY(store->setWorkerTrust(1, WorkerTrust{7, 0.25, 3, 2, true, QStringLiteral("screened out")}));
        auto trust = store->workerTrust(1);
        QVERIFY(trust && trust->size() == 1);
        QCOMPARE(trust->front().trust, 0.25);
        QVERIFY(trust->front().quarantined);
        QCOMPARE(trust->front().reason, QStringLiteral("screened out"));
        QCOMPARE(store->latestJob().value()->name, QStringLiteral("old")); // nothing else was touched
    }

    void jobsRoundTrip()
    {
        auto store = openStore(path("jobs.db"));
        QVERIFY(store);
        auto none = store->latestJob();
        QVERIFY2(none.ok(), qPrintable(none.error()));
        QVERIFY(!none->has_value());

        auto first = store->createJob(QStringLiteral("first"), QStringLiteral("{\"a\":1}"), 1000);
        auto second = store->createJob(QStringLiteral("second"), QStringLiteral("{\"b\":2}"), 2000);
        QVERIFY(first.ok() && second.ok());
        QVERIFY(*second > *first);
        auto latest = store->latestJob();
        QVERIFY2(latest.ok(), qPrintable(latest.error()));
        QVERIFY(latest->has_value());
        const JobRecord &j = **latest;
        QCOMPARE(j.id, *second);
        QCOMPARE(j.name, QStringLiteral("second"));
        QCOMPARE(j.spec, QStringLiteral("{\"b\":2}"));
        QCOMPARE(j.state, QStringLiteral("running"));
        QCOMPARE(j.createdMs, qint64(2000));
        QCOMPARE(j.finishedMs, qint64(0));

        QVERIFY(store->setJobState(*second, QStringLiteral("finished"), 5000).ok());
        QCOMPARE((*store->latestJob())->state, QStringLiteral("finished"));
        QCOMPARE((*store->latestJob())->finishedMs, qint64(5000));
        QVERIFY(store->setJobState(*second, QStringLiteral("running"), 6000).ok());
        QCOMPARE((*store->latestJob())->finishedMs, qint64(0));
    }

    void workersRoundTrip()
    {
        auto store = openStore(path("workers.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();
        WorkerRecord w;
        w.name = QStringLiteral("worker-1");
        w.instanceType = QStringLiteral("aws/c5.large");
        w.priceClass = QStringLiteral("spot");
        w.device = QStringLiteral("cpu");
        w.threads = 2;
        w.joinedMs = 100;
        w.lastSeenMs = 150;
        w.state = QStringLiteral("online");
        auto id = store->addWorker(job, w);
        QVERIFY2(id.ok(), qPrintable(id.error()));
        w.id = *id;
        WorkerRecord v = w;
        v.name = QStringLiteral("worker-2");
        v.priceClass = QStringLiteral("volunteer");
        // Under an id of its own: a fleet's worker keeps its certificate's, and one id is one
        // worker, so a second row under it is refused.
        QVERIFY(!store->addWorker(job, v).ok());
        v.id = 0;
        v.id = store->addWorker(job, v).value();
        QVERIFY(v.id >= kLocalWorkerIds);

        w.lastSeenMs = 900;
        w.state = QStringLiteral("offline");
        QVERIFY(store->updateWorker(job, w).ok());

        auto all = store->workers(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(int(all->size()), 2);
        const WorkerRecord &a = all->at(0);
        QCOMPARE(a.id, w.id);
        QCOMPARE(a.name, QStringLiteral("worker-1"));
        QCOMPARE(a.instanceType, QStringLiteral("aws/c5.large"));
        QCOMPARE(a.priceClass, QStringLiteral("spot"));
        QCOMPARE(a.device, QStringLiteral("cpu"));
        QCOMPARE(a.threads, 2);
        QCOMPARE(a.joinedMs, qint64(100));
        QCOMPARE(a.lastSeenMs, qint64(900));
        QCOMPARE(a.state, QStringLiteral("offline"));
        QCOMPARE(all->at(1).name, QStringLiteral("worker-2"));
        QCOMPARE(all->at(1).priceClass, QStringLiteral("volunteer"));
        QCOMPARE(all->at(1).state, QStringLiteral("online"));

        // Foreign keys are on: a worker of a job that does not exist is refused.
        WorkerRecord stray = w;
        stray.id = 0;
        auto orphan = store->addWorker(job + 100, stray);
        QVERIFY(!orphan.ok());
        expectError(orphan.error(), {QStringLiteral("job store error"), QStringLiteral("FOREIGN KEY")});
    }

    void subtasksAndLeasesRoundTrip()
    {
        auto store = openStore(path("sched.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();

        Subtask s1;
        s1.id = 1; s1.epoch = 0; s1.shard = 3; s1.begin = 0; s1.end = 100;
        s1.state = SubtaskState::Leased;
        Subtask s2;
        s2.id = 2; s2.epoch = 1; s2.shard = 4; s2.begin = 40; s2.end = 90; s2.parentId = 1;
        s2.state = SubtaskState::Done; s2.coveredEnd = 90; s2.assimilatedSeq = 7;
        Lease l1;
        l1.id = 5; l1.subtaskId = 1; l1.workerId = 2; l1.baseSeq = 3; l1.baseVersion = 4;
        l1.issuedMs = 1000; l1.deadlineMs = 61000; l1.state = LeaseState::HandedBack; l1.endedMs = 2000;
        Lease l2 = l1;
        l2.id = 6; l2.state = LeaseState::Active; l2.endedMs = 0;
        SchedulerChanges changes;
        changes.add(s2);
        changes.add(s1);
        changes.add(l1);
        changes.add(l2);
        auto saved = store->saveChanges(job, changes);
        QVERIFY2(saved.ok(), qPrintable(saved.error()));

        auto subtasks = store->subtasks(job);
        QVERIFY2(subtasks.ok(), qPrintable(subtasks.error()));
        QCOMPARE(int(subtasks->size()), 2);
        const Subtask &a = subtasks->at(0); // ordered by id
        QCOMPARE(a.id, qint64(1));
        QCOMPARE(a.shard, 3);
        QCOMPARE(a.end, qint64(100));
        QVERIFY(a.state == SubtaskState::Leased);
        const Subtask &b = subtasks->at(1);
        QCOMPARE(b.epoch, 1);
        QCOMPARE(b.shard, 4);
        QCOMPARE(b.begin, qint64(40));
        QCOMPARE(b.end, qint64(90));
        QCOMPARE(b.parentId, qint64(1));
        QVERIFY(b.state == SubtaskState::Done);
        QCOMPARE(b.coveredEnd, qint64(90));
        QCOMPARE(b.assimilatedSeq, qint64(7));

        auto leases = store->leases(job);
        QVERIFY2(leases.ok(), qPrintable(leases.error()));
        QCOMPARE(int(leases->size()), 2);
        const Lease &x = leases->at(0);
        QCOMPARE(x.id, qint64(5));
        QCOMPARE(x.subtaskId, qint64(1));
        QCOMPARE(x.workerId, qint64(2));
        QCOMPARE(x.baseSeq, qint64(3));
        QCOMPARE(x.baseVersion, qint64(4));
        QCOMPARE(x.issuedMs, qint64(1000));
        QCOMPARE(x.deadlineMs, qint64(61000));
        QVERIFY(x.state == LeaseState::HandedBack);
        QCOMPARE(x.endedMs, qint64(2000));
        QVERIFY(leases->at(1).state == LeaseState::Active);

        // Saving a changed record replaces it.
        s1.state = SubtaskState::Done;
        s1.coveredEnd = 100;
        l2.state = LeaseState::Completed;
        SchedulerChanges update;
        update.add(s1);
        update.add(l2);
        QVERIFY(store->saveChanges(job, update).ok());
        subtasks = store->subtasks(job);
        QCOMPARE(int(subtasks->size()), 2);
        QVERIFY(subtasks->at(0).state == SubtaskState::Done);
        QCOMPARE(subtasks->at(0).coveredEnd, qint64(100));
        leases = store->leases(job);
        QCOMPARE(int(leases->size()), 2);
        QVERIFY(leases->at(1).state == LeaseState::Completed);

        // Another job's records are separate.
        const qint64 other = store->createJob(QStringLiteral("k"), QStringLiteral("{}"), 2).value();
        QVERIFY(store->subtasks(other)->empty());
        QVERIFY(store->leases(other)->empty());
    }

    void statesAssimilationsAndEvaluations()
    {
        auto store = openStore(path("states.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();
        QVERIFY(!store->latestState(job)->has_value());
        QVERIFY(store->addState(job, StateRecord{0, 0, QStringLiteral("checkpoints/0.ckpt"), QStringLiteral("aa"), 10}).ok());
        QVERIFY(store->addState(job, StateRecord{5, 4, QStringLiteral("checkpoints/5.ckpt"), QStringLiteral("bb"), 20}).ok());
        QVERIFY(store->addState(job, StateRecord{2, 2, QStringLiteral("checkpoints/2.ckpt"), QStringLiteral("cc"), 30}).ok());
        // The same seq twice is refused (primary key).
        QVERIFY(!store->addState(job, StateRecord{5, 9, QStringLiteral("x"), QStringLiteral("x"), 40}).ok());
        auto latest = store->latestState(job);
        QVERIFY2(latest.ok(), qPrintable(latest.error()));
        QVERIFY(latest->has_value());
        QCOMPARE((*latest)->seq, qint64(5));
        QCOMPARE((*latest)->version, qint64(4));
        QCOMPARE((*latest)->path, QStringLiteral("checkpoints/5.ckpt"));
        QCOMPARE((*latest)->sha256, QStringLiteral("bb"));
        QCOMPARE((*latest)->atMs, qint64(20));
        auto two = store->state(job, 2);
        QVERIFY(two.ok() && two->has_value());
        QCOMPARE((*two)->sha256, QStringLiteral("cc"));
        QVERIFY(!store->state(job, 3)->has_value());

        AssimilationRecord a{1, 1, 2, 3, 4, 5, 6, 7, 0.5, 640, 10, 70, 0.25, 1.75, 99};
        QVERIFY(store->addAssimilation(job, a).ok());
        AssimilationRecord b = a;
        b.seq = 2;
        b.staleness = 0;
        QVERIFY(store->addAssimilation(job, b).ok());
        auto as = store->assimilations(job);
        QVERIFY2(as.ok(), qPrintable(as.error()));
        QCOMPARE(int(as->size()), 2);
        const AssimilationRecord &r = as->at(0);
        QCOMPARE(r.seq, qint64(1));
        QCOMPARE(r.version, qint64(1));
        QCOMPARE(r.epoch, 2);
        QCOMPARE(r.shard, 3);
        QCOMPARE(r.subtaskId, qint64(4));
        QCOMPARE(r.leaseId, qint64(5));
        QCOMPARE(r.workerId, qint64(6));
        QCOMPARE(r.staleness, qint64(7));
        QCOMPARE(r.credit, 0.5);
        QCOMPARE(r.samples, qint64(640));
        QCOMPARE(r.begin, qint64(10));
        QCOMPARE(r.coveredEnd, qint64(70));
        QCOMPARE(r.loss, 0.25);
        QCOMPARE(r.trainSeconds, 1.75);
        QCOMPARE(r.atMs, qint64(99));
        QCOMPARE(as->at(1).seq, qint64(2));
        QCOMPARE(as->at(1).staleness, qint64(0));

        QVERIFY(store->addEvaluation(job, EvaluationRecord{1, 20, 20, 0.875, 0.4, 300}).ok());
        QVERIFY(store->addEvaluation(job, EvaluationRecord{0, 10, 10, 0.75, 0.6, 200}).ok());
        auto ev = store->evaluations(job);
        QVERIFY2(ev.ok(), qPrintable(ev.error()));
        QCOMPARE(int(ev->size()), 2);
        QCOMPARE(ev->at(0).epoch, 0); // ordered by seq
        QCOMPARE(ev->at(0).accuracy, 0.75);
        QCOMPARE(ev->at(1).version, qint64(20));
        QCOMPARE(ev->at(1).seq, qint64(20));
        QCOMPARE(ev->at(1).loss, 0.4);
        QCOMPARE(ev->at(1).atMs, qint64(300));
    }

    void eventsFilteredByKind()
    {
        auto store = openStore(path("events.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();
        const qint64 other = store->createJob(QStringLiteral("k"), QStringLiteral("{}"), 1).value();
        const auto add = [&](qint64 j, const char *kind, qint64 at) {
            return store->addEvent(j, EventRecord{0, at, QString::fromLatin1(kind), 1, 2, 3,
                                                  QStringLiteral("detail %1").arg(at)});
        };
        auto id1 = add(job, "joined", 10);
        QVERIFY2(id1.ok(), qPrintable(id1.error()));
        QVERIFY(add(job, "preempted", 20).ok());
        QVERIFY(add(other, "preempted", 25).ok());
        QVERIFY(add(job, "preempted", 30).ok());
        QVERIFY(add(job, "assimilated", 40).ok());

        auto all = store->events(job);
        QVERIFY2(all.ok(), qPrintable(all.error()));
        QCOMPARE(int(all->size()), 4);
        QCOMPARE(all->front().id, *id1);
        QCOMPARE(all->front().kind, QStringLiteral("joined"));
        QCOMPARE(all->front().workerId, qint64(1));
        QCOMPARE(all->front().subtaskId, qint64(2));
        QCOMPARE(all->front().leaseId, qint64(3));
        QCOMPARE(all->front().detail, QStringLiteral("detail 10"));

        auto preempted = store->events(job, QStringLiteral("preempted"));
        QVERIFY2(preempted.ok(), qPrintable(preempted.error()));
        QCOMPARE(int(preempted->size()), 2);
        QCOMPARE(preempted->at(0).atMs, qint64(20));
        QCOMPARE(preempted->at(1).atMs, qint64(30));
        QCOMPARE(int(store->events(other, QStringLiteral("preempted"))->size()), 1);
        QVERIFY(store->events(job, QStringLiteral("no-such-kind"))->empty());
    }

    void ledgerTotals()
    {
        auto store = openStore(path("ledger.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();
        auto empty = store->ledgerTotals(job);
        QVERIFY2(empty.ok(), qPrintable(empty.error()));
        QCOMPARE(empty->usefulSeconds, 0.0);
        QCOMPARE(empty->costOnDemand, 0.0);
        QCOMPARE(empty->savingsPercent(), 0.0);

        // worker, lease, at, kind, seconds, spot, on-demand, actual
        QVERIFY(store->addLedger(job, LedgerRecord{1, 1, 10, QStringLiteral("useful"), 10.0, 0.25, 1.0, 0.25}).ok());
        QVERIFY(store->addLedger(job, LedgerRecord{2, 2, 20, QStringLiteral("useful"), 6.0, 0.125, 0.5, 0.0}).ok());
        QVERIFY(store->addLedger(job, LedgerRecord{1, 3, 30, QStringLiteral("wasted"), 4.0, 0.125, 0.5, 0.125}).ok());
        const qint64 other = store->createJob(QStringLiteral("k"), QStringLiteral("{}"), 1).value();
        QVERIFY(store->addLedger(other, LedgerRecord{1, 1, 10, QStringLiteral("useful"), 100.0, 1, 1, 1}).ok());

        auto t = store->ledgerTotals(job);
        QVERIFY2(t.ok(), qPrintable(t.error()));
        QCOMPARE(t->usefulSeconds, 16.0);
        QCOMPARE(t->wastedSeconds, 4.0);
        QCOMPARE(t->costSpot, 0.5);
        QCOMPARE(t->costOnDemand, 2.0);
        QCOMPARE(t->costActual, 0.375);
        QCOMPARE(t->wastedCostActual, 0.125);
        // 1 - 0.375 / 2 = 81.25 % saved
        QCOMPARE(t->savingsPercent(), 81.25);
    }

    void transactions()
    {
        auto store = openStore(path("tx.db"));
        QVERIFY(store);
        const qint64 job = store->createJob(QStringLiteral("j"), QStringLiteral("{}"), 1).value();
        QVERIFY(store->begin().ok());
        QVERIFY(store->addEvent(job, EventRecord{0, 1, QStringLiteral("dropped"), 0, 0, 0, {}}).ok());
        store->rollback();
        QVERIFY(store->events(job)->empty());

        QVERIFY(store->begin().ok());
        QVERIFY(store->addEvent(job, EventRecord{0, 2, QStringLiteral("kept"), 0, 0, 0, {}}).ok());
        QVERIFY(store->commit().ok());
        QCOMPARE(int(store->events(job)->size()), 1);
        // A commit without a transaction is an error, not silence.
        QVERIFY(!store->commit().ok());
    }

    void reopenKeepsEverything()
    {
        const QString db = path("reopen.db");
        qint64 job = 0;
        {
            auto store = openStore(db);
            QVERIFY(store);
            job = store->createJob(QStringLiteral("persisted"), QStringLiteral("{}"), 1).value();
            QVERIFY(store->addState(job, StateRecord{3, 3, QStringLiteral("c/3.ckpt"), QStringLiteral("ff"), 5}).ok());
        }
        auto store = openStore(db);
        QVERIFY(store);
        QCOMPARE((*store->latestJob())->name, QStringLiteral("persisted"));
        QCOMPARE((*store->latestState(job))->sha256, QStringLiteral("ff"));
    }

    void notASqliteFile()
    {
        const QString p = path("not-a-db.db");
        QByteArray text;
        for (int i = 0; i < 200; ++i)
            text += "this is a plain text file, not a database\n";
        overwrite(p, text);
        auto r = Store::open(p);
        QVERIFY(!r.ok());
        expectError(r.error(), {QStringLiteral("cannot open job store '%1'").arg(p), QStringLiteral("not a database")});
        // The file was left alone.
        QCOMPARE(readAll(p), text);

        const QString nowhere = path("no/such/dir/flotilla.db");
        auto n = Store::open(nowhere);
        QVERIFY(!n.ok());
        expectError(n.error(), {nowhere});
    }
};

QTEST_GUILESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
