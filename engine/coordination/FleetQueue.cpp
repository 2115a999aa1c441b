#include "engine/coordination/FleetQueue.h"

#include "engine/coordination/SqlStatement.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>

#include <cmath>
#include <map>
#include <set>

namespace flotilla {

namespace {

const char *const kWhat = "fleet queue";

const char *const kQueueSchema = R"SQL(
CREATE TABLE IF NOT EXISTS queue(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, submitter TEXT NOT NULL, spec TEXT NOT NULL,
    run_dir TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, weight REAL NOT NULL DEFAULT 1,
    state TEXT NOT NULL, submitted_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL DEFAULT 0,
    ended_ms INTEGER NOT NULL DEFAULT 0, worker_seconds REAL NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '', wanted TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT 'local');
)SQL";

const char *const kColumns = "id, name, submitter, spec, run_dir, priority, weight, state, submitted_ms, started_ms, "
                             "ended_ms, worker_seconds, message, wanted, origin";

QueuedJob rowOf(Statement &q)
{
    QueuedJob j;
    j.id = q.i64(0);
    j.name = q.text(1);
    j.submitter = q.text(2);
    j.spec = q.text(3);
    j.runDir = q.text(4);
    j.priority = q.i32(5);
    j.weight = q.f64(6);
    j.state = q.text(7);
    j.submittedMs = q.i64(8);
    j.startedMs = q.i64(9);
    j.endedMs = q.i64(10);
    j.workerSeconds = q.f64(11);
    j.message = q.text(12);
    j.wanted = q.text(13);
    j.origin = q.text(14);
    return j;
}

const std::set<QString> &states()
{
    static const std::set<QString> s{QStringLiteral("queued"),   QStringLiteral("running"),
                                     QStringLiteral("paused"),   QStringLiteral("finished"),
                                     QStringLiteral("failed"),   QStringLiteral("cancelled")};
    return s;
}

} // namespace

bool QueuedJob::ended() const
{
    return state == QLatin1String("finished") || state == QLatin1String("failed")
           || state == QLatin1String("cancelled");
}

Result<std::unique_ptr<FleetQueue>> FleetQueue::open(const QString &path)
{
    if (!QDir().mkpath(QFileInfo(path).absolutePath()))
        return fail(QStringLiteral("cannot create the folder of the fleet queue '%1'").arg(path));
    sqlite3 *db = nullptr;
    const int rc = sqlite3_open_v2(QFile::encodeName(path).constData(), &db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    std::unique_ptr<FleetQueue> queue(new FleetQueue(db));
    if (rc != SQLITE_OK)
        return fail(QStringLiteral("cannot open the fleet queue '%1': %2")
                        .arg(path, QString::fromUtf8(db ? sqlite3_errmsg(db) : sqlite3_errstr(rc))));
    sqlite3_busy_timeout(db, 10000);
    if (auto r = queue->exec("PRAGMA journal_mode=WAL"); !r)
        return fail(QStringLiteral("the fleet queue '%1': %2").arg(path, r.error()));
    if (auto r = queue->exec(kQueueSchema); !r)
        return fail(QStringLiteral("the fleet queue '%1' cannot be read: %2").arg(path, r.error()));
    // A queue written before jobs came from elsewhere: every job in it is a local user's.
    bool hasOrigin = false;
    {
        Statement columns(db, "PRAGMA table_info(queue)", kWhat);
        while (columns.next())
            hasOrigin = hasOrigin || columns.text(1) == QLatin1String("origin");
    }
    if (!hasOrigin)
        if (auto r = queue->exec("ALTER TABLE queue ADD COLUMN origin TEXT NOT NULL DEFAULT 'local'"); !r)
            return fail(QStringLiteral("the fleet queue '%1' cannot be updated: %2").arg(path, r.error()));
    return queue;
}

FleetQueue::~FleetQueue()
{
    sqlite3_close_v2(m_db);
}

Result<void> FleetQueue::exec(const char *sql)
{
    char *message = nullptr;
    if (sqlite3_exec(m_db, sql, nullptr, nullptr, &message) == SQLITE_OK)
        return {};
    const QString text = QString::fromUtf8(message ? message : sqlite3_errmsg(m_db));
    sqlite3_free(message);
    return fail(text);
}

Result<qint64> FleetQueue::submit(QueuedJob job, const QString &runsDir, qint64 nowMs)
{
    if (job.name.isEmpty())
        return fail(QStringLiteral("a job needs a name"));
    if (!(job.weight > 0) || !std::isfinite(job.weight))
        return fail(QStringLiteral("a job's weight must be a positive number, not %1").arg(job.weight));
    if (auto r = exec("BEGIN IMMEDIATE"); !r)
        return r.takeError();
    Statement q(m_db,
                "INSERT INTO queue(name, submitter, spec, run_dir, priority, weight, state, submitted_ms, origin) "
                "VALUES(?, ?, ?, '', ?, ?, 'queued', ?, ?)",
                kWhat);
    if (auto r = q.bind(job.name).bind(job.submitter).bind(job.spec).bind(job.priority).bind(job.weight).bind(nowMs)
                     .bind(job.origin)
                     .run();
        !r) {
        (void)exec("ROLLBACK");
        return r.takeError();
    }
    const qint64 id = sqlite3_last_insert_rowid(m_db);
    // The folder is named after the job, in characters every file system takes.
    QString safe = job.name;
    safe.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("_"));
    const QString runDir = QDir(runsDir).absoluteFilePath(QStringLiteral("%1-%2").arg(id).arg(safe.left(60)));
    Statement dir(m_db, "UPDATE queue SET run_dir = ? WHERE id = ?", kWhat);
    if (auto r = dir.bind(runDir).bind(id).run(); !r) {
        (void)exec("ROLLBACK");
        return r.takeError();
    }
    if (auto r = exec("COMMIT"); !r)
        return r.takeError();
    return id;
}

Result<std::vector<QueuedJob>> FleetQueue::jobs()
{
    const QByteArray sql = QByteArray("SELECT ") + kColumns + " FROM queue ORDER BY id";
    Statement q(m_db, sql.constData(), kWhat);
    return collect<QueuedJob>(q, rowOf);
}

Result<std::optional<QueuedJob>> FleetQueue::job(qint64 id)
{
    const QByteArray sql = QByteArray("SELECT ") + kColumns + " FROM queue WHERE id = ?";
    Statement q(m_db, sql.constData(), kWhat);
    q.bind(id);
    auto rows = collect<QueuedJob>(q, rowOf);
    if (!rows)
        return rows.takeError();
    if (rows->empty())
        return std::optional<QueuedJob>();
    return std::optional<QueuedJob>(rows->front());
}

Result<void> FleetQueue::setState(qint64 id, const QString &state, const QString &message, qint64 nowMs)
{
    if (!states().count(state))
        return fail(QStringLiteral("'%1' is not a state of a job").arg(state));
    // A start is remembered (a job that ran resumes first); an end is stamped.
    Statement q(m_db,
                "UPDATE queue SET state = ?1, message = ?2, wanted = '', "
                "started_ms = CASE WHEN ?1 = 'running' AND started_ms = 0 THEN ?3 ELSE started_ms END, "
                "ended_ms = CASE WHEN ?1 IN ('finished', 'failed', 'cancelled') THEN ?3 ELSE 0 END WHERE id = ?4",
                kWhat);
    return q.bind(state).bind(message).bind(nowMs).bind(id).runOne(QStringLiteral("job %1 in the queue").arg(id));
}

Result<void> FleetQueue::setWanted(qint64 id, const QString &wanted, const QString &message)
{
    Statement q(m_db, "UPDATE queue SET wanted = ?, message = ? WHERE id = ?", kWhat);
    return q.bind(wanted).bind(message).bind(id).runOne(QStringLiteral("job %1 in the queue").arg(id));
}

Result<void> FleetQueue::setMessage(qint64 id, const QString &message)
{
    Statement q(m_db, "UPDATE queue SET message = ? WHERE id = ?", kWhat);
    return q.bind(message).bind(id).runOne(QStringLiteral("job %1 in the queue").arg(id));
}

Result<void> FleetQueue::setPriority(qint64 id, int priority)
{
    Statement q(m_db, "UPDATE queue SET priority = ? WHERE id = ?", kWhat);
    return q.bind(priority).bind(id).runOne(QStringLiteral("job %1 in the queue").arg(id));
}

Result<void> FleetQueue::setWeight(qint64 id, double weight)
{
    if (!(weight > 0) || !std::isfinite(weight))
        return fail(QStringLiteral("a job's weight must be a positive number, not %1").arg(weight));
    Statement q(m_db, "UPDATE queue SET weight = ? WHERE id = ?", kWhat);
    return q.bind(weight).bind(id).runOne(QStringLiteral("job %1 in the queue").arg(id));
}

Result<void> FleetQueue::addWorkerSeconds(qint64 id, double seconds)
{
    Statement q(m_db, "UPDATE queue SET worker_seconds = worker_seconds + ? WHERE id = ?", kWhat);
    return q.bind(seconds).bind(id).run();
}

Result<std::vector<std::pair<QString, double>>> FleetQueue::fairShare(qint64 nowMs, qint64 halfLifeMs)
{
    auto all = jobs();
    if (!all)
        return all.takeError();
    // Usage: worker-seconds, halved every half-life since the job last held workers.
    std::map<QString, double> usage;
    std::set<QString> active;
    double total = 0;
    for (const QueuedJob &j : *all) {
        const qint64 last = j.endedMs > 0 ? j.endedMs : nowMs;
        const double decayed = j.workerSeconds * std::exp2(-double(std::max<qint64>(0, nowMs - last))
                                                           / double(std::max<qint64>(1, halfLifeMs)));
        usage[j.submitter] += decayed;
        total += decayed;
        if (j.state == QLatin1String("queued") || j.state == QLatin1String("running"))
            active.insert(j.submitter);
    }
    std::vector<std::pair<QString, double>> out;
    const double share = active.empty() ? 1.0 : 1.0 / double(active.size());
    for (const QString &s : active) {
        const double u = total > 0 ? usage[s] / total : 0.0;
        out.emplace_back(s, std::exp2(-u / share));
    }
    return out;
}

Result<std::vector<QueuedJob>> FleetQueue::startOrder(qint64 nowMs, qint64 halfLifeMs)
{
    auto all = jobs();
    if (!all)
        return all.takeError();
    auto factors = fairShare(nowMs, halfLifeMs);
    if (!factors)
        return factors.takeError();
    std::map<QString, double> factor(factors->begin(), factors->end());
    std::vector<QueuedJob> queued;
    for (const QueuedJob &j : *all)
        if (j.state == QLatin1String("queued"))
            queued.push_back(j);
    std::stable_sort(queued.begin(), queued.end(), [&](const QueuedJob &a, const QueuedJob &b) {
        const bool aResumes = a.startedMs > 0, bResumes = b.startedMs > 0;
        if (aResumes != bResumes)
            return aResumes;
        if (a.priority != b.priority)
            return a.priority > b.priority;
        const double fa = factor[a.submitter], fb = factor[b.submitter];
        if (std::abs(fa - fb) > 1e-9)
            return fa > fb;
        return a.id < b.id;
    });
    return queued;
}

} // namespace flotilla
