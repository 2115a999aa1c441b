#pragma once
// Checkpoint files of the global model and the aggregation rule's buffers: a small CBOR
// header (sequence number, version, layout digest, tensor names and sizes) followed by the
// raw little-endian float32 buffers. Written atomically (temporary file, fsync, rename);
// the store records each file's SHA-256 before the assimilation that made it is committed.

#include "common/Result.h"
#include "engine/coordination/Aggregation.h"

#include <QString>

namespace flotilla {

struct Checkpoint
{
    qint64 seq = 0;     // assimilations so far
    qint64 version = 0; // global model versions so far
    QString layoutDigest;
    AggregationState state;
};

// Writes the checkpoint and returns the hex SHA-256 of the file's bytes.
Result<QString> writeCheckpoint(const QString &path, const Checkpoint &checkpoint);

// Reads a checkpoint; when expectedSha256 is given, a file whose hash differs is refused.
Result<Checkpoint> readCheckpoint(const QString &path, const QString &expectedSha256 = {});

} // namespace flotilla
