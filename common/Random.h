#pragma once
// Deterministic randomness that gives the same numbers on every platform and compiler
// (std::shuffle and std::uniform_int_distribution do not), so that a shard, its order in an
// epoch and a subtask's batches are the same on the coordinator and on every worker.

#include <cstdint>
#include <utility>
#include <vector>

namespace flotilla {

// SplitMix64: a tiny, well-mixed generator; also used to derive seeds from seeds.
class SplitMix64
{
public:
    explicit SplitMix64(std::uint64_t seed) : m_state(seed) {}

    std::uint64_t next()
    {
        std::uint64_t z = (m_state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

    // Uniform in [0, bound), bound > 0, without modulo bias (rejection of the short tail).
    std::uint64_t below(std::uint64_t bound)
    {
        const std::uint64_t threshold = (0 - bound) % bound;
        for (;;) {
            const std::uint64_t r = next();
            if (r >= threshold)
                return r % bound;
        }
    }

    // Uniform in [0, 1).
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
    std::uint64_t m_state;
};

inline std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b)
{
    SplitMix64 g(a ^ (b * 0xD1B54A32D192ED03ULL));
    g.next();
    return g.next();
}

template <typename T>
void deterministicShuffle(std::vector<T> &v, std::uint64_t seed)
{
    SplitMix64 g(seed);
    for (std::size_t i = v.size(); i > 1; --i) {
        const std::size_t j = static_cast<std::size_t>(g.below(i));
        std::swap(v[i - 1], v[j]);
    }
}

} // namespace flotilla
