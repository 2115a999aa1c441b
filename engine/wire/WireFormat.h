#pragma once
// Tensors as bytes for the network layer, which knows nothing of tensors: weights as a
// manifest (names, shapes, dtype) plus one raw little-endian float32 buffer; a shard as a
// manifest (samples, sample shape, dtype, augmentation) plus its features as stored (uint8
// for images, float32 for tables: images never travel as float32), int64 labels and the
// float32 normalization its batches need. Decoding checks everything against what the
// receiver expects before a tensor is made; bytes from the network never reach torch::load.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "engine/training/Model.h"

#include <QByteArray>
#include <QCborMap>

namespace flotilla {

QCborMap weightManifest(const WeightLayout &layout);
// Refuses a manifest that does not describe exactly this layout, naming the first difference.
Result<void> checkWeightManifest(const QCborMap &manifest, const WeightLayout &layout);
QByteArray weightsToBytes(const torch::Tensor &flat);
Result<torch::Tensor> weightsFromBytes(const QByteArray &bytes, const WeightLayout &layout);

QCborMap shardManifest(const Dataset &shard);
QByteArray shardToBytes(const Dataset &shard);
// The samples of a shard, in the shard's fixed order, with their normalization and
// augmentation. Keys of `manifest` other than the shard's own are ignored.
Result<Dataset> shardFromBytes(const QByteArray &bytes, const QCborMap &manifest);
// SHA-256 of what a shard is: the manifest's keys of the shard (in a fixed order) and the
// bytes. A worker names and caches shards by it, so a cached shard whose normalization or
// augmentation differs from the job's is a different shard, never a stale hit.
QByteArray shardDigest(const QCborMap &manifest, QByteArrayView bytes);

} // namespace flotilla
