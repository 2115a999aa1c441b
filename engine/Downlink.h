#pragma once
// Global weights on their way to a worker (Assign) in fewer bytes. When the job compresses
// (Compression.h), a worker that holds an *anchor* — float32 weights it once received whole,
// named by a random id — is sent the change from its anchor to the lease's weights in the
// job's form (fp16, or int8 with a scale per block) instead of the float32 weights. Every
// change is from weights the worker holds exactly, so rounding never adds up from one
// assignment to the next, and what the worker trains from differs from the global weights
// by one rounding only; its result is a change too, which the coordinator adds to its exact
// base, so that rounding never reaches the global model either.
//
// The coordinator keeps the two newest anchors (so memory does not grow with the fleet) and
// makes a new one from the lease's weights when the newest is `refresh` assimilations old, so
// that changes stay small enough for int8 to round finely. A worker whose anchor is gone (or
// that has none) is sent the newest anchor whole followed by the change from it — once per
// anchor — unless the lease's weights are that anchor, which then travel alone.
//
// Threads: a DownlinkEncoder belongs to the network thread that sends Assigns; a
// DownlinkDecoder to the worker's.

#include "common/Result.h"
#include "engine/Compression.h"
#include "engine/Model.h"

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
    explicit DownlinkEncoder(Compression kind) : m_kind(kind) {}

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
    };
    const QByteArray &whole(qint64 seq, const torch::Tensor &weights);

    Compression m_kind;
    std::deque<Anchor> m_anchors; // oldest first
    // The latest encodings, which the next worker asking at the same version reuses.
    qint64 m_wholeSeq = -1;
    QByteArray m_wholeBytes;
    qint64 m_changeSeq = -1;
    qint64 m_changeAnchor = 0;
    QByteArray m_changeBytes;
};

class DownlinkDecoder
{
public:
    // The weights an Assign carries. Refuses a change from an anchor this worker does not hold,
    // bytes of the wrong size and non-finite values, naming what was wrong; the anchor held is
    // replaced only by weights that decoded.
    Result<torch::Tensor> decode(const WeightsForm &form, const QByteArray &payload, const WeightLayout &layout);
    qint64 anchor() const { return m_anchor; }
    void reset();

private:
    qint64 m_anchor = 0;
    torch::Tensor m_weights;
};

} // namespace flotilla
