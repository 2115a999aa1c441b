#pragma once
// The operator's stream as the application fills it: what a coordinator sends a control
// center attached from elsewhere (the job's recorded rows after a cursor, the latest
// snapshot, the join tokens), written as CBOR and read back into the control center's plain
// values. The network layer carries it as an Update's payload without reading it
// (docs/protocol.md, "Operators").
//
// Reading is defensive: the payload came over the network, and a row of the wrong shape
// fails the whole batch with an error that names it.
//
// Threads: plain functions. readAfter and readSubtasks touch the disk: pool threads only.

#include "common/Result.h"
#include "job/SessionTypes.h"
#include "net/Messages.h"
#include "net/TrustStore.h"

#include <QByteArray>

#include <functional>
#include <optional>
#include <vector>

namespace flotilla {

class Store;
struct JobProgress;
struct JobRecord;
struct WorkerStatus;

// A coordinator's snapshot as the control center shows it; address: where a worker
// connects from.
Snapshot toSnapshot(const JobProgress &p, const std::vector<WorkerStatus> &workers,
                        const std::function<QString(const WorkerStatus &)> &address);

// One batch of the stream.
struct WatchBatch
{
    QString spec;     // the job's settings (JSON), sent with a reset
    History rows; // costs: each cost ledger row's own amounts, not the running sum
    std::optional<Snapshot> snapshot;
    std::optional<QList<JoinTokenRow>> tokens;
};

QByteArray encodeBatch(const WatchBatch &batch);
Result<WatchBatch> decodeBatch(const QByteArray &payload);

QByteArray encodeSubtasks(const QList<SubtaskRow> &rows);
Result<QList<SubtaskRow>> decodeSubtasks(const QByteArray &payload);

// The subtasks of the store's latest job, each with its leases in one line (the Subtasks
// tab); empty when the store cannot be read yet.
QList<SubtaskRow> readSubtasks(const QString &dbPath);

// Which job of which store a cursor belongs to: a coordinator started on another run folder
// has another key, and an operator's cursor then starts from the beginning.
QString jobKey(const JobRecord &job);

struct WatchRead
{
    WatchBatch batch;
    net::WatchCursor cursor; // where the batch's rows end
    bool reset = false;      // from's job was not this one: the rows start from the beginning
    bool more = false;       // some kind of row had more than the limit
};

// The rows of the store's latest job after `from`, at most `limit` of each kind.
Result<WatchRead> readAfter(Store &store, const net::WatchCursor &from, int limit);

// The join tokens as the token dialog lists them.
QList<JoinTokenRow> tokenRows(const QList<net::TokenRecord> &tokens, qint64 nowMs, bool includeSpent);

// The metrics export: assimilations, then evaluations, as CSV.
QByteArray metricsCsv(const History &history);

} // namespace flotilla
