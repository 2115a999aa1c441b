#pragma once
// Checks of a run folder's store after the fact, for the fleet's chaos runs (`flotilla demo
// --fleet`) and the tests: that a finished job assimilated every position of every shard of
// every epoch exactly once (no piece lost, none twice, assimilations and versions in order),
// and that SQLite finds its file intact. Each returns what is wrong, or an empty string.
//
// Threads: plain functions; each opens what it reads.

#include "engine/coordination/Store.h"

#include <QString>

#include <vector>

namespace flotilla {

// shardSizes: the job's shards' sample counts (ShardPlan::shardSize), epochs its epochs.
QString auditExactlyOnce(Store &store, const std::vector<qint64> &shardSizes, int epochs);
// SQLite's `PRAGMA integrity_check` of a database file, opened read-only.
QString auditSqliteIntegrity(const QString &path);
// The assimilations a job's store holds so far, read-only (a live run's too, in WAL mode without
// waiting for its writer); -1 where the file does not exist or cannot be read.
qint64 countAssimilations(const QString &path);

} // namespace flotilla
