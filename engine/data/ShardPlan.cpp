#include "engine/data/ShardPlan.h"

#include "common/Random.h"

#include <algorithm>
#include <numeric>

namespace flotilla {

std::int64_t subtaskSteps(std::int64_t shardSamples, int batchSize, int localEpochs, int localSteps)
{
    if (localSteps > 0)
        return localSteps;
    const std::int64_t batch = std::max(1, batchSize);
    return std::int64_t(std::max(1, localEpochs)) * ((shardSamples + batch - 1) / batch);
}

int shardCount(int requested, std::int64_t trainSamples, int batchSize, int localEpochs, int localSteps)
{
    if (requested > 0)
        return requested;
    if (localSteps > 0) // every subtask takes that many steps, whatever its shard's size
        return int(std::clamp<std::int64_t>(trainSamples / std::max(1, batchSize), 1, kMaxAutoShards));
    // Steps of one pass over the data set, over the steps a subtask should have at least.
    const std::int64_t steps = std::int64_t(std::max(1, localEpochs)) * (trainSamples / std::max(1, batchSize));
    return int(std::clamp<std::int64_t>(steps / kMinSubtaskSteps, 1, kMaxAutoShards));
}

ShardPlan::ShardPlan(std::int64_t numSamples, int numShards, std::uint64_t seed)
    : m_seed(seed)
{
    m_permutation.resize(static_cast<std::size_t>(numSamples));
    std::iota(m_permutation.begin(), m_permutation.end(), std::int64_t{0});
    deterministicShuffle(m_permutation, mixSeed(seed, 0x5A4D));

    // Sizes differ by at most one: the first (numSamples % numShards) shards get one extra.
    m_offsets.assign(static_cast<std::size_t>(numShards) + 1, 0);
    const std::int64_t base = numSamples / numShards;
    const std::int64_t extra = numSamples % numShards;
    for (int s = 0; s < numShards; ++s)
        m_offsets[s + 1] = m_offsets[s] + base + (s < extra ? 1 : 0);
}

std::vector<std::int64_t> ShardPlan::shard(int s) const
{
    return {m_permutation.begin() + m_offsets[s], m_permutation.begin() + m_offsets[s + 1]};
}

std::vector<std::int64_t> ShardPlan::epochPermutation(std::int64_t shardSize, std::uint64_t seed, int shard, int epoch)
{
    std::vector<std::int64_t> positions(static_cast<std::size_t>(shardSize));
    std::iota(positions.begin(), positions.end(), std::int64_t{0});
    deterministicShuffle(positions, mixSeed(mixSeed(seed, static_cast<std::uint64_t>(epoch) + 1),
                                            static_cast<std::uint64_t>(shard) + 1));
    return positions;
}

std::vector<std::int64_t> ShardPlan::epochOrder(int s, int epoch) const
{
    const std::vector<std::int64_t> samples = shard(s);
    std::vector<std::int64_t> order;
    order.reserve(samples.size());
    for (const auto position : epochPermutation(shardSize(s), m_seed, s, epoch))
        order.push_back(samples[static_cast<std::size_t>(position)]);
    return order;
}

} // namespace flotilla
