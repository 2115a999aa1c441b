#pragma once
// Global weights on their way to a worker (Assign) in fewer bytes. When the job compresses
// (Compression.h), a worker that holds an *anchor* — float32 weights it once received whole,
// named by a random id — is sent the change from its anchor to the lease's parameters in the
// job's form (fp16, or int8 with a scale per block) instead of the float32 weights. Every
// change is from weights the worker holds exactly, so rounding never adds up from one
// assignment to the next, and what the worker trains from differs from the global weights
// by one rounding of the parameters only. Buffers (BatchNorm's running statistics) and
// counters follow the parameters as float32 values, exact: they are not additive, and a
// counter's change would set the int8 scale of the statistics sharing its block.
//
// The coordinator keeps the two newest anchors (so memory does not grow with the fleet) and
// makes a new one from the lease's weights when the newest is `refresh` assimilations old, so
// that changes stay small enough for int8 to round finely. A worker whose anchor is gone (or
// that has none) is sent the newest anchor whole followed by the change from it — once per
// anchor — unless the lease's weights are that anchor, which then travel alone. A job with
// redundancy sends whole weights (server/FleetServer.cpp): replicas that are compared must
// start from the same weights bit for bit.
//
// Threads: a DownlinkEncoder belongs to the network thread that sends Assigns; a
// DownlinkDecoder to the worker's.

#include "common/Result.h"
#include "engine/training/Model.h"
#include "engine/wire/Compression.h"

#include <QByteArray>

#include <deque>

namespace flotilla {

// How an Assign's payload carries the weights.
struct WeightsForm
{
    // None: the float32 weights. Otherwise the change from the anchor, in this form.
    Compression change = Compression::None;
    // With the weights whole: the id to keep them under as an anchor (0: do not keep them).
    // With a change: the anchor it is a change from.
    qint64 anchor = 0;
    // A change only: the payload begins with the anchor's float32 weights.
    bool anchorIncluded = false;
};

class DownlinkEncoder
{
public:
    DownlinkEncoder(Compression kind, const WeightLayout &layout);

    struct Encoded
    {
        WeightsForm form;
        QByteArray payload;
    };

    // The weights of assimilation `seq` for a worker holding `workerAnchor` (0: none), which
    // takes changes only if `takesChanges` (an older worker does not).
    Encoded encode(qint64 seq, const torch::Tensor &weights, qint64 workerAnchor, bool takesChanges, qint64 refresh);

    int anchorsKept() const { return int(m_anchors.size()); }
    static constexpr int kAnchors = 2;

private:
    struct Anchor
    {
        qint64 id = 0;
        qint64 seq = 0;
        QByteArray bytes; // its float32 weights: sent whole as they are, and the base of changes
        // The latest change from it, which the next holder asking at the same version reuses.
        qint64 changeSeq = -1;
        QByteArray change;
    };
    const QByteArray &whole(qint64 seq, const torch::Tensor &weights);

    Compression m_kind;
    qint64 m_quantized = 0; // values rounded in a change: the parameters, which come first
    std::deque<Anchor> m_anchors; // oldest first
    qint64 m_wholeSeq = -1;
    QByteArray m_wholeBytes;
};

// Bytes of a change of `layout`'s weights in `kind`: its parameters rounded, the rest float32.
qint64 changeBytes(Compression kind, const WeightLayout &layout);

class DownlinkDecoder
{
public:
    // The weights an Assign carries. Refuses a change from an anchor this worker does not hold,
    // bytes of the wrong size and weights that are not all finite, naming what was wrong; the
    // anchor held is replaced only by weights that decoded.
    Result<torch::Tensor> decode(const WeightsForm &form, const QByteArray &payload, const WeightLayout &layout);
    qint64 anchor() const { return m_anchor; }
    void reset();

private:
    Result<torch::Tensor> decodeWeights(const WeightsForm &form, const QByteArray &payload, const WeightLayout &layout);

    qint64 m_anchor = 0;
    torch::Tensor m_weights;
    torch::Tensor m_included; // an anchor that came with the weights, kept once they decoded
};

} // namespace flotilla
