#pragma once
// Deterministic split of a training set into shards. A shard is a fixed set of sample
// indices for the whole job; in each epoch its samples are visited in an order derived from
// (seed, epoch, shard), so a subtask can name "positions [begin, end) of shard s in epoch e"
// and every machine computes the same samples. Pure and thread-safe after construction.

#include <cstdint>
#include <vector>

namespace flotilla {

// training.shards 0 (auto): as many shards as give each subtask at least kMinSubtaskSteps
// optimizer steps, at most kMaxAutoShards, at least one. A subtask's fixed costs (its lease,
// the weights both ways, an assimilation and its commit) are paid per subtask, and a shorter
// one gains no accuracy once the optimizer's state lives on the worker (docs/algorithms.md,
// "Subtask size", has the measurements behind the numbers).
constexpr int kMinSubtaskSteps = 16;
constexpr int kMaxAutoShards = 30;

// The shard count a job trains with: `requested` when it is not 0, else the rule above.
int shardCount(int requested, std::int64_t trainSamples, int batchSize, int localEpochs, int localSteps);
// Optimizer steps a subtask over a whole shard of this many samples takes.
std::int64_t subtaskSteps(std::int64_t shardSamples, int batchSize, int localEpochs, int localSteps);

class ShardPlan
{
public:
    ShardPlan() = default;
    ShardPlan(std::int64_t numSamples, int numShards, std::uint64_t seed);

    int numShards() const { return static_cast<int>(m_offsets.size()) - 1; }
    std::int64_t numSamples() const { return static_cast<std::int64_t>(m_permutation.size()); }
    std::int64_t shardSize(int shard) const { return m_offsets[shard + 1] - m_offsets[shard]; }

    // The sample indices of a shard, in their fixed order.
    std::vector<std::int64_t> shard(int shard) const;

    // The shard's samples in the order they are visited in an epoch.
    std::vector<std::int64_t> epochOrder(int shard, int epoch) const;

    // The same order as positions within the shard: epochOrder(s, e)[i] ==
    // shard(s)[epochPermutation(size, seed, s, e)[i]]. A remote worker that holds only the
    // shard's samples computes its visiting order with this.
    static std::vector<std::int64_t> epochPermutation(std::int64_t shardSize, std::uint64_t seed, int shard, int epoch);

private:
    std::uint64_t m_seed = 0;
    std::vector<std::int64_t> m_permutation;
    std::vector<std::int64_t> m_offsets{0};
};

} // namespace flotilla
