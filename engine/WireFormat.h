#pragma once
// Tensors as bytes for the network layer, which knows nothing of tensors: weights as a
// manifest (names, shapes, dtype) plus one raw little-endian float32 buffer, shard data as a
// manifest (samples, sample shape) plus float32 features and int64 labels. Decoding checks
// everything against what the receiver expects before a tensor is made; bytes from the
// network never reach torch::load.

#include "Dataset.h"
#include "Model.h"
#include "Result.h"

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
// The samples of a shard, in the shard's fixed order.
Result<Dataset> shardFromBytes(const QByteArray &bytes, const QCborMap &manifest);

} // namespace flotilla
