#include "engine/coordination/Store.h"

#include "engine/coordination/SqlStatement.h"

#include <QFile>
#include <QFileInfo>

#include <cstring>
#include <type_traits>

#include <sqlite3.h>

namespace flotilla {

namespace {

constexpr int kSchemaVersion = 2;

const char *const kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    created_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS workers(
    id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id), name TEXT NOT NULL,
    instance_type TEXT NOT NULL, price_class TEXT NOT NULL, device TEXT NOT NULL, threads INTEGER NOT NULL,
    joined_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS subtasks(
    id INTEGER NOT NULL, job_id INTEGER NOT NULL REFERENCES jobs(id), epoch INTEGER NOT NULL,
    shard INTEGER NOT NULL, begin_pos INTEGER NOT NULL, end_pos INTEGER NOT NULL, parent_id INTEGER NOT NULL,
    state TEXT NOT NULL, covered_end INTEGER NOT NULL, assimilated_seq INTEGER NOT NULL,
    PRIMARY KEY(job_id, id));
CREATE TABLE IF NOT EXISTS leases(
    id INTEGER NOT NULL, job_id INTEGER NOT NULL REFERENCES jobs(id), subtask_id INTEGER NOT NULL,
    worker_id INTEGER NOT NULL, base_seq INTEGER NOT NULL, base_version INTEGER NOT NULL,
    issued_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL, state TEXT NOT NULL, ended_ms INTEGER NOT NULL,
    PRIMARY KEY(job_id, id));
CREATE TABLE IF NOT EXISTS states(
    job_id INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, version INTEGER NOT NULL,
    path TEXT NOT NULL, sha256 TEXT NOT NULL, at_ms INTEGER NOT NULL, PRIMARY KEY(job_id, seq));
CREATE TABLE IF NOT EXISTS assimilations(
    job_id INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, version INTEGER NOT NULL,
    epoch INTEGER NOT NULL, shard INTEGER NOT NULL, subtask_id INTEGER NOT NULL, lease_id INTEGER NOT NULL,
    worker_id INTEGER NOT NULL, staleness INTEGER NOT NULL, credit REAL NOT NULL, samples INTEGER NOT NULL,
    begin_pos INTEGER NOT NULL, covered_end INTEGER NOT NULL, loss REAL NOT NULL, train_seconds REAL NOT NULL,
    at_ms INTEGER NOT NULL, PRIMARY KEY(job_id, seq));
CREATE TABLE IF NOT EXISTS evaluations(
    job_id INTEGER NOT NULL REFERENCES jobs(id), epoch INTEGER NOT NULL, version INTEGER NOT NULL,
    seq INTEGER NOT NULL, accuracy REAL NOT NULL, loss REAL NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS evaluation_details(
    job_id INTEGER NOT NULL REFERENCES jobs(id), epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    top5_accuracy REAL NOT NULL, classes INTEGER NOT NULL, confusion TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluation_metrics(
    job_id INTEGER NOT NULL REFERENCES jobs(id), epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    name TEXT NOT NULL, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id), at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL, worker_id INTEGER NOT NULL, subtask_id INTEGER NOT NULL, lease_id INTEGER NOT NULL,
    detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ledger(
    id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id), worker_id INTEGER NOT NULL,
    lease_id INTEGER NOT NULL, at_ms INTEGER NOT NULL, kind TEXT NOT NULL, seconds REAL NOT NULL,
    cost_spot REAL NOT NULL, cost_on_demand REAL NOT NULL, cost_actual REAL NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_kind ON events(job_id, kind);
)SQL";

// Schema 2: what the coordinator thinks of each worker's results, and requests from
// operators (`flotilla release`) that a running coordinator picks up.
const char *const kSchema2 = R"SQL(
CREATE TABLE IF NOT EXISTS worker_trust(
    job_id INTEGER NOT NULL REFERENCES jobs(id), worker_id INTEGER NOT NULL, trust REAL NOT NULL,
    accepted INTEGER NOT NULL, rejected INTEGER NOT NULL, quarantined INTEGER NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY(job_id, worker_id));
CREATE TABLE IF NOT EXISTS operator_requests(
    id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id), at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL, worker TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0);
)SQL";


// Refuses another program's SQLite database before anything is written to it (not even the
// journal mode): a file with tables, none of them a store's.
Result<void> refuseForeignDatabase(sqlite3 *db)
{
    Statement t(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    QStringList tables;
    while (t.next())
        tables << t.text(0);
    if (!t.ok())
        return t.error();
    if (!tables.isEmpty() && !tables.contains(QLatin1String("meta")) && !tables.contains(QLatin1String("jobs")))
        return fail(QStringLiteral("the file is another program's SQLite database (tables: %1), not a job store; "
                                   "choose another run folder")
                        .arg(tables.mid(0, 5).join(QStringLiteral(", "))));
    return {};
}

// The error for a row whose state this version does not know.
Error damaged(const QString &path, const QString &what, const QString &state)
{
    return fail(QStringLiteral("job store '%1' is damaged: %2 has the state '%3', which this version does not know")
                    .arg(path, what, state));
}

} // namespace

Store::~Store()
{
    if (m_db)
        sqlite3_close(m_db);
}

Result<std::unique_ptr<Store>> Store::open(const QString &path)
{
    std::unique_ptr<Store> store(new Store);
    store->m_path = path;
    const int rc = sqlite3_open_v2(QFile::encodeName(path).constData(), &store->m_db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        // SQLite says "unable to open database file"; the system's reason says why.
        const int sys = store->m_db ? sqlite3_system_errno(store->m_db) : 0;
        return fail(QStringLiteral("cannot open job store '%1': %2%3; check that its folder exists and is writable")
                        .arg(path, QString::fromUtf8(store->m_db ? sqlite3_errmsg(store->m_db) : sqlite3_errstr(rc)),
                             sys ? QStringLiteral(" (%1)").arg(QString::fromLocal8Bit(std::strerror(sys))) : QString()));
    }
    // A file SQLite can only read opens "successfully" and fails at the first write, with a
    // message that names neither the file nor the cure.
    if (sqlite3_db_readonly(store->m_db, "main") == 1)
        return fail(QStringLiteral("cannot open job store '%1': the file is read-only; the job needs to write it "
                                   "(check its permissions and its owner)")
                        .arg(path));
    sqlite3_busy_timeout(store->m_db, 10000);
    if (auto r = refuseForeignDatabase(store->m_db); !r)
        return fail(QStringLiteral("cannot open job store '%1': %2").arg(path, r.error()));
    // WAL: readers (the dashboard, a status command) never block the coordinator's writes.
    // synchronous=FULL: a committed assimilation survives a power loss, not just a crash.
    // SQLite keeps the old journal mode where WAL cannot work (some network file systems)
    // and says so only in the pragma's answer.
    {
        Statement wal(store->m_db, "PRAGMA journal_mode=WAL");
        const QString mode = wal.next() ? wal.text(0) : QString();
        if (!wal.ok())
            return fail(QStringLiteral("cannot open job store '%1': %2").arg(path, wal.error().message));
        if (mode.compare(QLatin1String("wal"), Qt::CaseInsensitive) != 0)
            return fail(QStringLiteral("cannot open job store '%1': its file system does not support write-ahead "
                                       "logging (journal mode stays '%2'); put the run folder on a local disk")
                            .arg(path, mode));
    }
    for (const char *pragma : {"PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"})
        if (auto r = store->exec(pragma); !r)
            return fail(QStringLiteral("cannot open job store '%1': %2").arg(path, r.error()));
    if (auto r = store->migrate(); !r)
        return fail(QStringLiteral("cannot open job store '%1': %2").arg(path, r.error()));
    return store;
}

Result<void> Store::exec(const char *sql)
{
    char *message = nullptr;
    if (sqlite3_exec(m_db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
        const QString text = QString::fromUtf8(message ? message : "unknown error");
        sqlite3_free(message);
        return fail(QStringLiteral("job store error: %1").arg(text));
    }
    return {};
}

Result<void> Store::migrate()
{
    int version = 0;
    {
        Statement q(m_db, "SELECT value FROM meta WHERE key = 'schema'");
        if (q.ok() && q.next())
            version = q.text(0).toInt();
    }
    if (version > kSchemaVersion)
        return fail(QStringLiteral("the store was written by a newer Flotilla (schema %1, this one reads up to %2)")
                        .arg(version).arg(kSchemaVersion));
    if (version == kSchemaVersion)
        return {};
    if (auto r = exec("BEGIN IMMEDIATE"); !r)
        return r;
    // Every step is idempotent (CREATE ... IF NOT EXISTS), so a store of any older schema
    // gets what it lacks.
    for (const char *sql : {kSchema, kSchema2})
        if (auto r = exec(sql); !r) {
            rollback();
            return r;
        }
    Statement insert(m_db, "INSERT OR REPLACE INTO meta(key, value) VALUES('schema', ?)");
    if (auto r = insert.bind(QString::number(kSchemaVersion)).run(); !r) {
        rollback();
        return r;
    }
    return commit();
}

Result<void> Store::begin()
{
    return exec("BEGIN IMMEDIATE");
}

Result<void> Store::commit()
{
    return exec("COMMIT");
}

Result<void> Store::copyTo(const QString &path)
{
    QFile::remove(path);
    Statement q(m_db, "VACUUM INTO ?");
    q.bind(path);
    if (auto r = q.run(); !r)
        return fail(QStringLiteral("cannot copy the job store '%1' to '%2': %3").arg(m_path, path, r.error()));
    return {};
}

void Store::rollback()
{
    (void)exec("ROLLBACK");
}

Result<qint64> Store::createJob(const QString &name, const QString &spec, qint64 nowMs)
{
    Statement q(m_db, "INSERT INTO jobs(name, spec, state, created_ms) VALUES(?, ?, 'running', ?)");
    if (auto r = q.bind(name).bind(spec).bind(nowMs).run(); !r)
        return r.takeError();
    return static_cast<qint64>(sqlite3_last_insert_rowid(m_db));
}

Result<std::optional<JobRecord>> Store::latestJob()
{
    Statement q(m_db, "SELECT id, name, spec, state, created_ms, finished_ms FROM jobs ORDER BY id DESC LIMIT 1");
    auto rows = collect<JobRecord>(q, [](Statement &s) {
        return JobRecord{s.i64(0), s.text(1), s.text(2), s.text(3), s.i64(4), s.i64(5)};
    });
    if (!rows)
        return rows.takeError();
    if (rows->empty())
        return std::optional<JobRecord>{};
    return std::optional<JobRecord>{rows->front()};
}

Result<void> Store::setJobState(qint64 jobId, const QString &state, qint64 nowMs)
{
    Statement q(m_db, "UPDATE jobs SET state = ?, finished_ms = ? WHERE id = ?");
    return q.bind(state).bind(state == QLatin1String("running") ? qint64(0) : nowMs).bind(jobId)
        .runOne(QStringLiteral("job %1").arg(jobId));
}

Result<qint64> Store::addWorker(qint64 jobId, const WorkerRecord &w)
{
    // A fleet's worker keeps its fleet id (w.id); one without (a worker thread of this process)
    // gets the next id of its own range, so that it never takes one a certificate holds.
    Statement q(m_db, "INSERT INTO workers(id, job_id, name, instance_type, price_class, device, threads, joined_ms, "
                      "last_seen_ms, state) VALUES(CASE WHEN ?1 > 0 THEN ?1 ELSE (SELECT MAX(?2, COALESCE(MAX(id), 0) "
                      "+ 1) FROM workers WHERE id >= ?2) END, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    if (auto r = q.bind(w.id).bind(kLocalWorkerIds).bind(jobId).bind(w.name).bind(w.instanceType).bind(w.priceClass)
                     .bind(w.device).bind(w.threads).bind(w.joinedMs).bind(w.lastSeenMs).bind(w.state).run();
        !r)
        return r.takeError();
    return static_cast<qint64>(sqlite3_last_insert_rowid(m_db));
}

Result<void> Store::updateWorker(qint64 jobId, const WorkerRecord &w)
{
    Statement q(m_db, "UPDATE workers SET name = ?, instance_type = ?, price_class = ?, device = ?, threads = ?, "
                      "joined_ms = ?, last_seen_ms = ?, state = ? WHERE job_id = ? AND id = ?");
    return q.bind(w.name).bind(w.instanceType).bind(w.priceClass).bind(w.device).bind(w.threads)
        .bind(w.joinedMs).bind(w.lastSeenMs).bind(w.state).bind(jobId).bind(w.id)
        .runOne(QStringLiteral("worker %1 in job %2").arg(w.id).arg(jobId));
}

Result<std::vector<WorkerRecord>> Store::workers(qint64 jobId)
{
    Statement q(m_db, "SELECT id, name, instance_type, price_class, device, threads, joined_ms, last_seen_ms, state "
                      "FROM workers WHERE job_id = ? ORDER BY id");
    q.bind(jobId);
    return collect<WorkerRecord>(q, [](Statement &s) {
        return WorkerRecord{s.i64(0), s.text(1), s.text(2), s.text(3), s.text(4), s.i32(5), s.i64(6), s.i64(7), s.text(8)};
    });
}

Result<void> Store::saveChanges(qint64 jobId, const SchedulerChanges &changes)
{
    // All or nothing, inside or outside an enclosing transaction: an epoch whose subtasks
    // were only partly written would look finished once those few are done.
    if (auto r = exec("SAVEPOINT changes"); !r)
        return r;
    auto rows = saveChangeRows(jobId, changes);
    if (!rows) {
        (void)exec("ROLLBACK TO changes");
        (void)exec("RELEASE changes");
        return rows;
    }
    return exec("RELEASE changes");
}

Result<void> Store::saveChangeRows(qint64 jobId, const SchedulerChanges &changes)
{
    for (const auto &s : changes.subtasks) {
        Statement q(m_db, "INSERT OR REPLACE INTO subtasks(id, job_id, epoch, shard, begin_pos, end_pos, parent_id, "
                          "state, covered_end, assimilated_seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        if (auto r = q.bind(s.id).bind(jobId).bind(s.epoch).bind(s.shard).bind(s.begin).bind(s.end)
                         .bind(s.parentId).bind(toString(s.state)).bind(s.coveredEnd).bind(s.assimilatedSeq).run();
            !r)
            return r;
    }
    for (const auto &l : changes.leases) {
        Statement q(m_db, "INSERT OR REPLACE INTO leases(id, job_id, subtask_id, worker_id, base_seq, base_version, "
                          "issued_ms, deadline_ms, state, ended_ms) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        if (auto r = q.bind(l.id).bind(jobId).bind(l.subtaskId).bind(l.workerId).bind(l.baseSeq).bind(l.baseVersion)
                         .bind(l.issuedMs).bind(l.deadlineMs).bind(toString(l.state)).bind(l.endedMs).run();
            !r)
            return r;
    }
    return {};
}

Result<std::vector<Subtask>> Store::subtasks(qint64 jobId)
{
    Statement q(m_db, "SELECT id, epoch, shard, begin_pos, end_pos, parent_id, state, covered_end, assimilated_seq "
                      "FROM subtasks WHERE job_id = ? ORDER BY id");
    q.bind(jobId);
    return collect<Subtask>(q, [this](Statement &s) -> Result<Subtask> {
        Subtask t;
        t.id = s.i64(0);
        t.epoch = s.i32(1);
        t.shard = s.i32(2);
        t.begin = s.i64(3);
        t.end = s.i64(4);
        t.parentId = s.i64(5);
        const auto state = subtaskStateFromString(s.text(6));
        if (!state)
            return damaged(m_path, QStringLiteral("subtask %1").arg(t.id), s.text(6));
        t.state = *state;
        t.coveredEnd = s.i64(7);
        t.assimilatedSeq = s.i64(8);
        return t;
    });
}

Result<std::vector<Lease>> Store::leases(qint64 jobId)
{
    Statement q(m_db, "SELECT id, subtask_id, worker_id, base_seq, base_version, issued_ms, deadline_ms, state, "
                      "ended_ms FROM leases WHERE job_id = ? ORDER BY id");
    q.bind(jobId);
    return collect<Lease>(q, [this](Statement &s) -> Result<Lease> {
        Lease l;
        l.id = s.i64(0);
        l.subtaskId = s.i64(1);
        l.workerId = s.i64(2);
        l.baseSeq = s.i64(3);
        l.baseVersion = s.i64(4);
        l.issuedMs = s.i64(5);
        l.deadlineMs = s.i64(6);
        const auto state = leaseStateFromString(s.text(7));
        if (!state)
            return damaged(m_path, QStringLiteral("lease %1").arg(l.id), s.text(7));
        l.state = *state;
        l.endedMs = s.i64(8);
        return l;
    });
}

Result<void> Store::addState(qint64 jobId, const StateRecord &st)
{
    Statement q(m_db, "INSERT INTO states(job_id, seq, version, path, sha256, at_ms) VALUES(?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(st.seq).bind(st.version).bind(st.path).bind(st.sha256).bind(st.atMs).run();
}

namespace {

Result<std::optional<StateRecord>> firstState(Statement &q)
{
    auto rows = collect<StateRecord>(q, [](Statement &s) {
        return StateRecord{s.i64(0), s.i64(1), s.text(2), s.text(3), s.i64(4)};
    });
    if (!rows)
        return rows.takeError();
    return rows->empty() ? std::optional<StateRecord>{} : std::optional<StateRecord>{rows->front()};
}

} // namespace

Result<std::optional<StateRecord>> Store::latestState(qint64 jobId)
{
    Statement q(m_db, "SELECT seq, version, path, sha256, at_ms FROM states WHERE job_id = ? ORDER BY seq DESC LIMIT 1");
    q.bind(jobId);
    return firstState(q);
}

Result<std::optional<StateRecord>> Store::state(qint64 jobId, qint64 seq)
{
    Statement q(m_db, "SELECT seq, version, path, sha256, at_ms FROM states WHERE job_id = ? AND seq = ?");
    q.bind(jobId).bind(seq);
    return firstState(q);
}

Result<void> Store::addAssimilation(qint64 jobId, const AssimilationRecord &a)
{
    Statement q(m_db, "INSERT INTO assimilations(job_id, seq, version, epoch, shard, subtask_id, lease_id, worker_id, "
                      "staleness, credit, samples, begin_pos, covered_end, loss, train_seconds, at_ms) "
                      "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(a.seq).bind(a.version).bind(a.epoch).bind(a.shard).bind(a.subtaskId).bind(a.leaseId)
        .bind(a.workerId).bind(a.staleness).bind(a.credit).bind(a.samples).bind(a.begin).bind(a.coveredEnd)
        .bind(a.loss).bind(a.trainSeconds).bind(a.atMs).run();
}

Result<std::vector<AssimilationRecord>> Store::assimilations(qint64 jobId, qint64 afterSeq, int limit)
{
    Statement q(m_db, "SELECT seq, version, epoch, shard, subtask_id, lease_id, worker_id, staleness, credit, samples, "
                      "begin_pos, covered_end, loss, train_seconds, at_ms FROM assimilations WHERE job_id = ? "
                      "AND seq > ? ORDER BY seq LIMIT ?");
    q.bind(jobId).bind(afterSeq).bind(qint64(limit));
    return collect<AssimilationRecord>(q, [](Statement &s) {
        return AssimilationRecord{s.i64(0), s.i64(1), s.i32(2), s.i32(3), s.i64(4), s.i64(5), s.i64(6), s.i64(7),
                                  s.f64(8), s.i64(9), s.i64(10), s.i64(11), s.f64(12), s.f64(13), s.i64(14)};
    });
}

Result<void> Store::addEvaluation(qint64 jobId, const EvaluationRecord &e)
{
    Statement q(m_db, "INSERT INTO evaluations(job_id, epoch, version, seq, accuracy, loss, at_ms) "
                      "VALUES(?, ?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(e.epoch).bind(e.version).bind(e.seq).bind(e.accuracy).bind(e.loss).bind(e.atMs).run();
}

Result<void> Store::addEvaluationDetail(qint64 jobId, const EvaluationDetail &d)
{
    QStringList counts;
    for (const qint64 c : d.confusion)
        counts << QString::number(c);
    Statement q(m_db, "INSERT INTO evaluation_details(job_id, epoch, seq, top5_accuracy, classes, confusion) "
                      "VALUES(?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(d.epoch).bind(d.seq).bind(d.top5Accuracy).bind(qint64(d.classes))
        .bind(counts.join(u' ')).run();
}

Result<void> Store::addEvaluationMetrics(qint64 jobId, int epoch, qint64 seq,
                                        const std::vector<std::pair<QString, double>> &metrics)
{
    for (const auto &[name, value] : metrics) {
        Statement q(m_db, "INSERT INTO evaluation_metrics(job_id, epoch, seq, name, value) VALUES(?, ?, ?, ?, ?)");
        if (auto r = q.bind(jobId).bind(epoch).bind(seq).bind(name).bind(value).run(); !r)
            return r;
    }
    return {};
}

Result<std::vector<EvaluationMetric>> Store::evaluationMetrics(qint64 jobId)
{
    Statement q(m_db, "SELECT epoch, seq, name, value FROM evaluation_metrics WHERE job_id = ? ORDER BY rowid");
    q.bind(jobId);
    return collect<EvaluationMetric>(q, [](Statement &s) {
        return EvaluationMetric{s.i32(0), s.i64(1), s.text(2), s.f64(3)};
    });
}

Result<std::vector<EvaluationDetail>> Store::evaluationDetails(qint64 jobId)
{
    Statement q(m_db, "SELECT epoch, seq, top5_accuracy, classes, confusion FROM evaluation_details WHERE job_id = ? "
                      "ORDER BY seq, epoch");
    q.bind(jobId);
    return collect<EvaluationDetail>(q, [](Statement &s) {
        EvaluationDetail d{s.i32(0), s.i64(1), s.f64(2), s.i32(3), {}};
        for (const QString &c : s.text(4).split(u' ', Qt::SkipEmptyParts))
            d.confusion.push_back(c.toLongLong());
        return d;
    });
}

Result<std::vector<EvaluationRecord>> Store::evaluations(qint64 jobId)
{
    Statement q(m_db, "SELECT epoch, version, seq, accuracy, loss, at_ms FROM evaluations WHERE job_id = ? "
                      "ORDER BY seq, epoch");
    q.bind(jobId);
    return collect<EvaluationRecord>(q, [](Statement &s) {
        return EvaluationRecord{s.i32(0), s.i64(1), s.i64(2), s.f64(3), s.f64(4), s.i64(5)};
    });
}

Result<std::vector<EvaluationRecord>> Store::evaluationsAfter(qint64 jobId, qint64 afterRowId, int limit)
{
    Statement q(m_db, "SELECT epoch, version, seq, accuracy, loss, at_ms, rowid FROM evaluations WHERE job_id = ? "
                      "AND rowid > ? ORDER BY rowid LIMIT ?");
    q.bind(jobId).bind(afterRowId).bind(qint64(limit));
    return collect<EvaluationRecord>(q, [](Statement &s) {
        return EvaluationRecord{s.i32(0), s.i64(1), s.i64(2), s.f64(3), s.f64(4), s.i64(5), s.i64(6)};
    });
}

Result<qint64> Store::addEvent(qint64 jobId, const EventRecord &e)
{
    Statement q(m_db, "INSERT INTO events(job_id, at_ms, kind, worker_id, subtask_id, lease_id, detail) "
                      "VALUES(?, ?, ?, ?, ?, ?, ?)");
    if (auto r = q.bind(jobId).bind(e.atMs).bind(e.kind).bind(e.workerId).bind(e.subtaskId).bind(e.leaseId)
                     .bind(e.detail).run();
        !r)
        return r.takeError();
    return static_cast<qint64>(sqlite3_last_insert_rowid(m_db));
}

Result<std::vector<EventRecord>> Store::events(qint64 jobId, const QString &kind)
{
    Statement q(m_db, kind.isEmpty()
                          ? "SELECT id, at_ms, kind, worker_id, subtask_id, lease_id, detail FROM events "
                            "WHERE job_id = ? ORDER BY id"
                          : "SELECT id, at_ms, kind, worker_id, subtask_id, lease_id, detail FROM events "
                            "WHERE job_id = ? AND kind = ? ORDER BY id");
    q.bind(jobId);
    if (!kind.isEmpty())
        q.bind(kind);
    return collect<EventRecord>(q, [](Statement &s) {
        return EventRecord{s.i64(0), s.i64(1), s.text(2), s.i64(3), s.i64(4), s.i64(5), s.text(6)};
    });
}

Result<std::vector<EventRecord>> Store::eventsAfter(qint64 jobId, qint64 afterId, int limit)
{
    Statement q(m_db, "SELECT id, at_ms, kind, worker_id, subtask_id, lease_id, detail FROM events "
                      "WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?");
    q.bind(jobId).bind(afterId).bind(qint64(limit));
    return collect<EventRecord>(q, [](Statement &s) {
        return EventRecord{s.i64(0), s.i64(1), s.text(2), s.i64(3), s.i64(4), s.i64(5), s.text(6)};
    });
}

Result<qint64> Store::lastEventMs(qint64 jobId)
{
    Statement q(m_db, "SELECT COALESCE(MAX(at_ms), 0) FROM events WHERE job_id = ?");
    q.bind(jobId);
    const qint64 at = q.next() ? q.i64(0) : 0;
    if (!q.ok())
        return q.error();
    return at;
}

Result<void> Store::addLedger(qint64 jobId, const LedgerRecord &l)
{
    Statement q(m_db, "INSERT INTO ledger(job_id, worker_id, lease_id, at_ms, kind, seconds, cost_spot, "
                      "cost_on_demand, cost_actual) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(l.workerId).bind(l.leaseId).bind(l.atMs).bind(l.kind).bind(l.seconds)
        .bind(l.costSpot).bind(l.costOnDemand).bind(l.costActual).run();
}

Result<std::map<qint64, LedgerTotals>> Store::ledgerByWorker(qint64 jobId)
{
    Statement q(m_db, "SELECT worker_id, "
                      "COALESCE(SUM(CASE WHEN kind = 'useful' THEN seconds END), 0), "
                      "COALESCE(SUM(CASE WHEN kind = 'wasted' THEN seconds END), 0), "
                      "SUM(cost_spot), SUM(cost_on_demand), SUM(cost_actual), "
                      "COALESCE(SUM(CASE WHEN kind = 'wasted' THEN cost_actual END), 0) "
                      "FROM ledger WHERE job_id = ? GROUP BY worker_id");
    q.bind(jobId);
    std::map<qint64, LedgerTotals> out;
    while (q.next())
        out[q.i64(0)] = LedgerTotals{q.f64(1), q.f64(2), q.f64(3), q.f64(4), q.f64(5), q.f64(6)};
    if (!q.ok())
        return q.error();
    return out;
}

Result<std::vector<LedgerRecord>> Store::ledger(qint64 jobId, qint64 afterId, int limit)
{
    Statement q(m_db, "SELECT worker_id, lease_id, at_ms, kind, seconds, cost_spot, cost_on_demand, cost_actual, id "
                      "FROM ledger WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?");
    q.bind(jobId).bind(afterId).bind(qint64(limit));
    return collect<LedgerRecord>(q, [](Statement &s) {
        return LedgerRecord{s.i64(0), s.i64(1), s.i64(2), s.text(3), s.f64(4), s.f64(5), s.f64(6), s.f64(7), s.i64(8)};
    });
}

Result<LedgerTotals> Store::ledgerTotals(qint64 jobId)
{
    Statement q(m_db, "SELECT "
                      "COALESCE(SUM(CASE WHEN kind = 'useful' THEN seconds END), 0), "
                      "COALESCE(SUM(CASE WHEN kind = 'wasted' THEN seconds END), 0), "
                      "COALESCE(SUM(cost_spot), 0), COALESCE(SUM(cost_on_demand), 0), COALESCE(SUM(cost_actual), 0), "
                      "COALESCE(SUM(CASE WHEN kind = 'wasted' THEN cost_actual END), 0) "
                      "FROM ledger WHERE job_id = ?");
    q.bind(jobId);
    LedgerTotals t;
    if (q.next()) {
        t.usefulSeconds = q.f64(0);
        t.wastedSeconds = q.f64(1);
        t.costSpot = q.f64(2);
        t.costOnDemand = q.f64(3);
        t.costActual = q.f64(4);
        t.wastedCostActual = q.f64(5);
    }
    if (!q.ok())
        return q.error();
    return t;
}

Result<void> Store::setWorkerTrust(qint64 jobId, const WorkerTrust &t)
{
    Statement q(m_db, "INSERT OR REPLACE INTO worker_trust(job_id, worker_id, trust, accepted, rejected, quarantined, "
                      "reason) VALUES(?, ?, ?, ?, ?, ?, ?)");
    return q.bind(jobId).bind(t.workerId).bind(t.trust).bind(t.accepted).bind(t.rejected).bind(t.quarantined ? 1 : 0)
        .bind(t.reason).run();
}

Result<std::vector<WorkerTrust>> Store::workerTrust(qint64 jobId)
{
    Statement q(m_db, "SELECT worker_id, trust, accepted, rejected, quarantined, reason FROM worker_trust "
                      "WHERE job_id = ? ORDER BY worker_id");
    q.bind(jobId);
    return collect<WorkerTrust>(q, [](Statement &s) {
        return WorkerTrust{s.i64(0), s.f64(1), s.i32(2), s.i32(3), s.i32(4) != 0, s.text(5)};
    });
}

Result<qint64> Store::addOperatorRequest(qint64 jobId, const QString &kind, const QString &worker, qint64 nowMs)
{
    Statement q(m_db, "INSERT INTO operator_requests(job_id, at_ms, kind, worker) VALUES(?, ?, ?, ?)");
    if (auto r = q.bind(jobId).bind(nowMs).bind(kind).bind(worker).run(); !r)
        return r.takeError();
    return static_cast<qint64>(sqlite3_last_insert_rowid(m_db));
}

Result<std::vector<OperatorRequest>> Store::pendingOperatorRequests(qint64 jobId)
{
    Statement q(m_db, "SELECT id, at_ms, kind, worker FROM operator_requests WHERE job_id = ? AND done = 0 ORDER BY id");
    q.bind(jobId);
    return collect<OperatorRequest>(q, [](Statement &s) { return OperatorRequest{s.i64(0), s.i64(1), s.text(2), s.text(3)}; });
}

Result<void> Store::markOperatorRequestDone(qint64 id)
{
    Statement q(m_db, "UPDATE operator_requests SET done = 1 WHERE id = ?");
    return q.bind(id).runOne(QStringLiteral("operator request %1").arg(id));
}

} // namespace flotilla
