#pragma once
// Results in fewer bytes: a worker sends the change it made to its base parameters (the
// delta) in float16, or in int8 with one float32 scale per block of 256 values, instead of the
// new weights in float32; the coordinator adds the decoded delta to the base it kept. What
// rounding drops is not lost: the worker's UpdateEncoder carries it into its next delta
// (error feedback), so the sum of what reaches the coordinator follows the sum trained.
//
// Only the parameters are rounded: `rounded` values at the start of the flat weights
// (WeightSegments::parameterEnd). Buffers and counters after them (BatchNorm's running
// statistics and batch counts) follow as float32 values, exact: they are not additive (a
// result replaces them), and a counter's change of thousands of batches would set the int8
// scale of the statistics sharing its block. rounded = -1: every value is a parameter.
// Threads: plain functions; an UpdateEncoder belongs to the worker thread that trains.

#include "common/Result.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <optional>

namespace flotilla {

enum class Compression { None, Fp16, Int8 };

// "none", "fp16", "int8": job/JobSpec.h's compressionNames(), in the enum's order; the names the
// job file, the command line and the protocol use.
QString compressionName(Compression kind);
std::optional<Compression> compressionFromName(const QString &name);

constexpr qint64 kInt8Block = 256;

// Bytes an update of `numel` values takes in this form (None: the float32 weights), of which
// the first `rounded` are rounded (-1: all).
qint64 encodedBytes(Compression kind, qint64 numel, qint64 rounded = -1);

// The worker's side: keeps the rounding residual between results of one job.
class UpdateEncoder
{
public:
    // The delta weights − base (plus the residual) in `kind`, which must not be None.
    QByteArray encode(Compression kind, const torch::Tensor &weights, const torch::Tensor &base, qint64 rounded = -1);
    // A new job, or a coordinator that restarted from older weights: the residual belongs to
    // the old trajectory.
    void reset() { m_residual = torch::Tensor(); }
    const torch::Tensor &residual() const { return m_residual; }

private:
    torch::Tensor m_residual;
};

// weights − base in `kind` (not None), without error feedback: for a change from weights the
// receiver holds exactly, whose rounding is never added to another's (engine/wire/Downlink.h).
QByteArray encodeChange(Compression kind, const torch::Tensor &weights, const torch::Tensor &base, qint64 rounded = -1);

// The receiver's side: base + the decoded delta, as a new float32 tensor. Refuses bytes of
// the wrong size for the model, non-finite or negative scales and non-finite values, naming
// what was wrong.
Result<torch::Tensor> decodeUpdate(Compression kind, QByteArrayView bytes, const torch::Tensor &base,
                                   qint64 rounded = -1);

} // namespace flotilla
