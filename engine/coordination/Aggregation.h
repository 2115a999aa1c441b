#pragma once
// Aggregation rules: how a returned subtask result is folded into the global model.
// One interface, four rules, all working in place on flat contiguous float32 buffers:
//   vc-asgd          W ← α·W + (1−α)·c·W_c                       (the seed's rule)
//   staleness-aware  as vc-asgd with α_s = 1 − (1−α)/(1+s)^p     (stale results count less)
//   async-delta      W ← W + η·c·(W_c − W_base)/(1+s)^d, optionally through outer (Nesterov)
//                    momentum, updated every result or once every N (Delayed Nesterov)
//   sync-average     results of a round are summed, W ← Σ c_i·W_i / Σ c_i when it closes
// where c ∈ (0, 1] is the credit of a result (the fraction of a full shard's work it did;
// for vc-asgd and staleness-aware the mixing weight is scaled by it: (1−α)·c) and s its
// staleness. Those formulas are for parameters. A model's buffers (running statistics) are
// never pushed by deltas or momentum: every rule folds them as a convex combination of the
// global and the returned values (so a running variance stays positive), and counters
// (integer buffers) take the larger of the two. docs/algorithms.md says why. Used only by
// the coordinator's thread.

#include "common/Result.h"
#include "engine/training/Model.h"
#include "job/JobSpec.h"

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

#include <memory>

namespace flotilla {

// Everything an aggregation rule keeps between assimilations; checkpointed as a whole.
struct AggregationState
{
    torch::Tensor weights;  // the global model W
    torch::Tensor momentum; // async-delta with momentum: the outer momentum buffer
    torch::Tensor roundSum; // sync-average: Σ c_i·W_i of the open round
    double roundCredit = 0.0;
    int roundResults = 0;
    // async-delta with a momentum period N > 1 (Delayed Nesterov): the changes since the
    // momentum was last updated, and how many.
    torch::Tensor periodSum;
    int periodResults = 0;
    // async-delta with outer settings following the fleet: the outer steps taken with the
    // momentum buffer, for its warm start, and the credit folded so far (shards' worth), for
    // the warmup of the fleet's factor over the first epoch. A checkpoint from before they
    // were counted reads as warm.
    qint64 outerSteps = 0;
    double foldedCredit = 0.0;
};

struct Contribution
{
    torch::Tensor result; // W_c
    torch::Tensor base;   // W_base, the weights the subtask started from (async-delta only)
    double credit = 1.0;
    std::int64_t staleness = 0;
};

class AggregationRule
{
public:
    virtual ~AggregationRule() = default;
    virtual QString name() const = 0;
    // Whether assimilate() needs Contribution::base.
    virtual bool needsBase() const { return false; }
    // Whether the rule works in rounds: the next epoch starts only when this one is closed.
    virtual bool synchronous() const { return false; }
    // Prepares rule-specific buffers for weights of the given size.
    virtual void initialize(AggregationState &state) const { Q_UNUSED(state); }
    // Folds one result in. Returns true if W changed (a new version).
    virtual bool assimilate(AggregationState &state, const Contribution &c) = 0;
    // Synchronous rules: closes the round. Returns true if W changed.
    virtual bool closeRound(AggregationState &state) { Q_UNUSED(state); return false; }

    // Buffered aggregation (asynchronous rules): gather() adds a result to a pending sum
    // (its staleness measured against the current W, which does not change until the fold),
    // foldGathered() folds the mean of the K gathered results' updates as one assimilation
    // and empties the sum; it returns true if W changed. With K = 1 the fold equals
    // assimilate(). The sum is one buffer the size of W, whatever K. docs/algorithms.md has
    // each rule's formula.
    virtual void gather(AggregationState &state, const Contribution &c) = 0;
    virtual bool foldGathered(AggregationState &state) = 0;
    int gathered() const { return m_gathered; }
    void discardGathered() { m_gathered = 0; }
    // Workers online now, for the settings that follow the fleet's size (a momentum period
    // of 0, outer settings scaled by the fleet); called whenever it changes.
    virtual void setFleetSize(int workers) { Q_UNUSED(workers); }
    // Shards in an epoch: a result's credit is its share of one, so the credits folded so far
    // over this are the epochs of work assimilated (normalize_staleness's warmup).
    virtual void setEpochSize(int shards) { Q_UNUSED(shards); }

protected:
    int m_gathered = 0;
};

// segments: where the model's parameters, buffers and counters lie in the flat buffer (the
// default: all parameters).
Result<std::unique_ptr<AggregationRule>> createAggregationRule(const AggregationSpec &spec,
                                                               const WeightSegments &segments = {});

} // namespace flotilla
