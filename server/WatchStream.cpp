#include "server/WatchStream.h"

#include "common/Cbor.h"
#include "engine/coordination/Coordinator.h"
#include "engine/coordination/Store.h"

#include <QCborArray>
#include <QCborMap>
#include <QCborValue>
#include <QCoreApplication>
#include <QDateTime>

#include <map>
#include <tuple>

namespace flotilla {

namespace {

QString key(const char *k)
{
    return QString::fromLatin1(k);
}

// Reads one row (a CBOR array) of a batch; the first column of the wrong type fails it.
class Row
{
public:
    Row(const QCborValue &value, qsizetype columns, const char *what) : m_what(what)
    {
        m_ok = value.isArray() && value.toArray().size() == columns;
        if (m_ok)
            m_row = value.toArray();
    }
    void read(qsizetype i, qint64 &out)
    {
        const QCborValue v = m_row.at(i);
        m_ok = m_ok && v.isInteger();
        out = cborInteger(v);
    }
    void read(qsizetype i, int &out)
    {
        qint64 value = 0;
        read(i, value);
        out = int(std::clamp<qint64>(value, INT_MIN, INT_MAX));
    }
    void read(qsizetype i, double &out)
    {
        const QCborValue v = m_row.at(i);
        m_ok = m_ok && (v.isDouble() || v.isInteger());
        out = v.isDouble() ? v.toDouble() : double(cborInteger(v));
    }
    void read(qsizetype i, bool &out)
    {
        const QCborValue v = m_row.at(i);
        m_ok = m_ok && v.isBool();
        out = v.toBool();
    }
    void read(qsizetype i, QString &out)
    {
        const QCborValue v = m_row.at(i);
        m_ok = m_ok && v.isString();
        out = v.toString();
    }
    bool ok() const { return m_ok; }
    Error error() const { return Error{QStringLiteral("a malformed %1 row in the coordinator's update").arg(QLatin1String(m_what))}; }

private:
    QCborArray m_row;
    const char *m_what;
    bool m_ok = false;
};

// Each row's columns, in the order they travel: the one list that encode and decode share.
auto columns(EventRecord &e)
{
    return std::tie(e.atMs, e.kind, e.workerId, e.subtaskId, e.leaseId, e.detail);
}

auto columns(AssimilationRecord &a)
{
    return std::tie(a.atMs, a.seq, a.version, a.staleness, a.loss, a.samples, a.trainSeconds, a.workerId);
}

auto columns(EvaluationRecord &e)
{
    return std::tie(e.atMs, e.epoch, e.version, e.accuracy, e.loss);
}

auto columns(CostPoint &c)
{
    return std::tie(c.atMs, c.spot, c.onDemand, c.actual, c.usefulSeconds, c.wastedSeconds);
}

auto columns(WorkerRow &w)
{
    return std::tie(w.id, w.name, w.address, w.device, w.threads, w.online, w.samplesPerSecond, w.subtask, w.progress,
                    w.leasesCompleted, w.leasesLost, w.preemptions, w.instanceType, w.priceClass, w.cost,
                    w.costOnDemand, w.trust, w.rejected, w.quarantined, w.quarantineReason);
}

auto columns(SubtaskRow &s)
{
    return std::tie(s.id, s.epoch, s.shard, s.begin, s.end, s.state, s.attempts, s.assimilatedSeq, s.history);
}

auto columns(JoinTokenRow &t)
{
    return std::tie(t.id, t.state, t.live, t.usesLeft, t.usesTotal, t.createdMs, t.expiresMs, t.note, t.operatorRole);
}

template<typename T> QCborArray toRow(T row)
{
    QCborArray out;
    std::apply([&out](const auto &...column) { (out.append(QCborValue(column)), ...); }, columns(row));
    return out;
}

template<typename T> QCborArray toRows(const QList<T> &rows)
{
    QCborArray out;
    for (const T &row : rows)
        out.append(toRow(row));
    return out;
}

template<typename T> Result<T> fromRow(const QCborValue &value, const char *what)
{
    T row;
    auto list = columns(row);
    Row r(value, qsizetype(std::tuple_size_v<decltype(list)>), what);
    qsizetype i = 0;
    std::apply([&r, &i](auto &...column) { (r.read(i++, column), ...); }, list);
    if (!r.ok())
        return r.error();
    return row;
}

// Every item of a list field through read, which returns false for a malformed one.
template <typename Read>
Result<void> eachRow(const QCborMap &map, const char *field, Read read)
{
    const QCborValue list = map.value(key(field));
    if (list.isUndefined())
        return {};
    if (!list.isArray())
        return fail(QStringLiteral("the coordinator's update has '%1' that is not a list").arg(QLatin1String(field)));
    for (const QCborValue &item : list.toArray())
        if (auto r = read(item); !r)
            return r;
    return {};
}

// Every row of a list field, of one kind, appended to out.
template<typename T> Result<void> readRows(const QCborMap &map, const char *field, const char *what, QList<T> &out)
{
    return eachRow(map, field, [&out, what](const QCborValue &v) -> Result<void> {
        auto row = fromRow<T>(v, what);
        if (!row)
            return row.takeError();
        out << *row;
        return {};
    });
}

QCborMap encodeSnapshot(const Snapshot &s)
{
    return QCborMap{{key("job"), s.job},
                    {key("epochs_done"), s.epochsDone},
                    {key("epochs"), s.epochs},
                    {key("version"), s.version},
                    {key("loss_ema"), s.lossEma},
                    {key("test_accuracy"), s.testAccuracy},
                    {key("workers_online"), s.workersOnline},
                    {key("staleness"), s.staleness},
                    {key("savings_percent"), s.savingsPercent},
                    {key("elapsed_ms"), s.elapsedMs},
                    {key("paused"), s.paused},
                    {key("finished"), s.finished},
                    {key("stalled"), s.stalled},
                    {key("at_ms"), s.atMs},
                    {key("workers"), toRows(s.workers)}};
}

Result<Snapshot> decodeSnapshot(const QCborValue &value)
{
    if (!value.isMap())
        return fail(QStringLiteral("the coordinator's update has a snapshot that is not a map"));
    const QCborMap m = value.toMap();
    Snapshot s;
    s.job = m.value(key("job")).toString();
    s.epochsDone = int(cborInteger(m.value(key("epochs_done"))));
    s.epochs = int(cborInteger(m.value(key("epochs"))));
    s.version = cborInteger(m.value(key("version")));
    s.lossEma = m.value(key("loss_ema")).toDouble(-1.0);
    s.testAccuracy = m.value(key("test_accuracy")).toDouble(-1.0);
    s.workersOnline = int(cborInteger(m.value(key("workers_online"))));
    s.staleness = m.value(key("staleness")).toDouble();
    s.savingsPercent = m.value(key("savings_percent")).toDouble();
    s.elapsedMs = cborInteger(m.value(key("elapsed_ms")));
    s.paused = m.value(key("paused")).toBool();
    s.finished = m.value(key("finished")).toBool();
    s.stalled = m.value(key("stalled")).toString().left(2000);
    s.atMs = cborInteger(m.value(key("at_ms")));
    auto workers = readRows(m, "workers", "worker", s.workers);
    if (!workers)
        return workers.takeError();
    return s;
}

} // namespace

Snapshot toSnapshot(const JobProgress &p, const std::vector<WorkerStatus> &workers,
                        const std::function<QString(const WorkerStatus &)> &address)
{
    Snapshot s;
    s.job = p.name;
    s.epochsDone = p.epochsDone;
    s.epochs = p.epochs;
    s.version = p.version;
    s.lossEma = p.lossEma;
    s.testAccuracy = p.testAccuracy;
    s.workersOnline = p.workersOnline;
    s.staleness = p.recentStaleness;
    s.savingsPercent = p.cost.savingsPercent();
    s.elapsedMs = p.elapsedMs;
    s.paused = p.paused;
    s.finished = p.finished;
    s.stalled = p.stalled;
    s.atMs = QDateTime::currentMSecsSinceEpoch();
    for (const auto &w : workers) {
        WorkerRow r;
        r.id = w.id;
        r.name = w.name;
        r.address = address(w);
        r.device = w.device;
        r.threads = w.threads;
        r.online = w.online;
        r.samplesPerSecond = w.samplesPerSecond;
        if (w.leaseId != 0) {
            r.subtask = QCoreApplication::translate("flotilla", "epoch %1, shard %2, %3–%4")
                            .arg(w.epoch + 1)
                            .arg(w.shard)
                            .arg(w.begin)
                            .arg(w.end);
            r.progress = w.planned > 0 ? double(w.done) / double(w.planned) : 0.0;
        }
        r.leasesCompleted = w.leasesCompleted;
        r.leasesLost = w.leasesLost;
        r.preemptions = w.preemptions;
        r.instanceType = w.instanceType;
        r.priceClass = w.priceClass;
        r.cost = w.costActual;
        r.costOnDemand = w.costOnDemand;
        r.trust = w.trust;
        r.rejected = w.rejected;
        r.quarantined = w.quarantined;
        r.quarantineReason = w.quarantineReason;
        s.workers << r;
    }
    return s;
}

QByteArray encodeBatch(const WatchBatch &batch)
{
    QCborMap m;
    if (!batch.spec.isEmpty())
        m.insert(key("spec"), batch.spec);
    m.insert(key("events"), toRows(batch.rows.events));
    m.insert(key("assimilations"), toRows(batch.rows.assimilations));
    m.insert(key("evaluations"), toRows(batch.rows.evaluations));
    m.insert(key("costs"), toRows(batch.rows.costs));
    if (batch.snapshot)
        m.insert(key("snapshot"), encodeSnapshot(*batch.snapshot));
    if (batch.tokens)
        m.insert(key("tokens"), toRows(*batch.tokens));
    return m.toCborValue().toCbor();
}

Result<WatchBatch> decodeBatch(const QByteArray &payload)
{
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(payload, &error);
    if (error.error != QCborError::NoError || !value.isMap())
        return fail(QStringLiteral("the coordinator's update is not a CBOR map (%1)").arg(error.errorString()));
    const QCborMap m = value.toMap();
    WatchBatch b;
    b.spec = m.value(key("spec")).toString();
    History &h = b.rows;
    const Result<void> rows[] = {
        readRows(m, "events", "event", h.events),
        readRows(m, "assimilations", "assimilation", h.assimilations),
        readRows(m, "evaluations", "evaluation", h.evaluations),
        readRows(m, "costs", "cost", h.costs),
    };
    for (const auto &r : rows)
        if (!r)
            return r.takeError();
    if (m.contains(key("snapshot"))) {
        auto s = decodeSnapshot(m.value(key("snapshot")));
        if (!s)
            return s.takeError();
        b.snapshot = *s;
    }
    if (m.contains(key("tokens"))) {
        QList<JoinTokenRow> tokens;
        auto read = readRows(m, "tokens", "token", tokens);
        if (!read)
            return read.takeError();
        b.tokens = tokens;
    }
    return b;
}

QByteArray encodeSubtasks(const QList<SubtaskRow> &rows)
{
    return QCborMap{{key("subtasks"), toRows(rows)}}.toCborValue().toCbor();
}

Result<QList<SubtaskRow>> decodeSubtasks(const QByteArray &payload)
{
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(payload, &error);
    if (error.error != QCborError::NoError || !value.isMap())
        return fail(QStringLiteral("the coordinator's subtask list is not a CBOR map (%1)").arg(error.errorString()));
    QList<SubtaskRow> out;
    auto read = readRows(value.toMap(), "subtasks", "subtask", out);
    if (!read)
        return read.takeError();
    return out;
}

QList<SubtaskRow> readSubtasks(const QString &dbPath)
{
    QList<SubtaskRow> out;
    auto store = Store::open(dbPath);
    if (!store)
        return out;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return out;
    auto subtasks = (*store)->subtasks((*job)->id);
    auto leases = (*store)->leases((*job)->id);
    if (!subtasks || !leases)
        return out;
    std::map<qint64, QString> names;
    if (auto workers = (*store)->workers((*job)->id))
        for (const auto &w : *workers)
            names[w.id] = w.name;
    std::map<qint64, QStringList> history;
    std::map<qint64, int> attempts;
    for (const auto &l : *leases) {
        history[l.subtaskId] << QStringLiteral("lease %1 (%2): %3").arg(l.id).arg(names[l.workerId]).arg(toString(l.state));
        ++attempts[l.subtaskId];
    }
    for (const auto &s : *subtasks)
        out << SubtaskRow{s.id, s.epoch, s.shard, s.begin, s.end, toString(s.state), attempts[s.id],
                              s.assimilatedSeq, history[s.id].join(QStringLiteral("; "))};
    return out;
}

QString jobKey(const JobRecord &job)
{
    return QStringLiteral("%1.%2").arg(job.createdMs).arg(job.id);
}

Result<WatchRead> readAfter(Store &store, const net::WatchCursor &from, int limit)
{
    auto job = store.latestJob();
    if (!job)
        return job.takeError();
    if (!job->has_value())
        return fail(QStringLiteral("the coordinator's store holds no job yet"));
    const JobRecord &record = **job;
    WatchRead out;
    out.cursor = from;
    out.cursor.job = jobKey(record);
    if (from.job != out.cursor.job) {
        out.reset = true;
        out.cursor = net::WatchCursor{out.cursor.job, 0, 0, 0, 0};
        out.batch.spec = record.spec;
    }
    const qint64 id = record.id;
    auto events = store.eventsAfter(id, out.cursor.eventId, limit);
    auto assimilations = store.assimilations(id, out.cursor.assimilationSeq, limit);
    auto evaluations = store.evaluationsAfter(id, out.cursor.evaluationId, limit);
    auto ledger = store.ledger(id, out.cursor.ledgerId, limit);
    for (const QString &error : {events.error(), assimilations.error(), evaluations.error(), ledger.error()})
        if (!error.isEmpty())
            return fail(QStringLiteral("cannot read the job's store: %1").arg(error));
    History &h = out.batch.rows;
    for (const auto &e : *events) {
        h.events << e;
        out.cursor.eventId = e.id;
    }
    for (const auto &a : *assimilations) {
        h.assimilations << a;
        out.cursor.assimilationSeq = a.seq;
    }
    for (const auto &e : *evaluations) {
        h.evaluations << e;
        out.cursor.evaluationId = e.rowId;
    }
    for (const auto &l : *ledger) {
        const bool wasted = l.kind == QLatin1String("wasted");
        h.costs << CostPoint{l.atMs, l.costSpot, l.costOnDemand, l.costActual, wasted ? 0.0 : l.seconds,
                                 wasted ? l.seconds : 0.0};
        out.cursor.ledgerId = l.id;
    }
    out.more = int(events->size()) == limit || int(assimilations->size()) == limit
               || int(evaluations->size()) == limit || int(ledger->size()) == limit;
    return out;
}

QList<JoinTokenRow> tokenRows(const QList<net::TokenRecord> &tokens, qint64 nowMs, bool includeSpent)
{
    QList<JoinTokenRow> rows;
    for (const net::TokenRecord &t : tokens)
        if (includeSpent || t.live(nowMs))
            rows << JoinTokenRow{t.idHex(),   net::describe(t.state(nowMs)), t.live(nowMs), t.usesLeft,
                                     t.usesTotal, t.createdMs,                  t.expiresMs,   t.note,
                                     net::isPerson(t.role)};
    return rows;
}

QByteArray metricsCsv(const History &h)
{
    QByteArray csv = "seq,version,at_ms,staleness,train_loss,samples,train_seconds,worker\n";
    for (const auto &a : h.assimilations)
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8\n")
                   .arg(a.seq).arg(a.version).arg(a.atMs).arg(a.staleness).arg(a.loss, 0, 'f', 5).arg(a.samples)
                   .arg(a.trainSeconds, 0, 'f', 3).arg(a.workerId)
                   .toUtf8();
    csv += "\nepoch,version,at_ms,test_accuracy,test_loss\n";
    for (const auto &e : h.evaluations)
        csv += QStringLiteral("%1,%2,%3,%4,%5\n").arg(e.epoch + 1).arg(e.version).arg(e.atMs)
                   .arg(e.accuracy, 0, 'f', 5).arg(e.loss, 0, 'f', 5).toUtf8();
    return csv;
}

} // namespace flotilla
