#include "engine/coordination/ResultScreen.h"

#include "common/Random.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flotilla {

namespace {

// The consistency constant that makes the MAD estimate a normal distribution's deviation.
constexpr double kMadToSigma = 1.4826;

void push(std::deque<double> &window, double value, int size)
{
    window.push_back(value);
    while (int(window.size()) > size)
        window.pop_front();
}

} // namespace

ResultScreen::ResultScreen(const WeightSegments &segments, quint64 seed, Config config) : m_config(config)
{
    const std::int64_t parameters = segments.onlyParameters() ? segments.total : segments.parameterEnd;
    m_parameterCount = parameters;
    if (parameters < 0) {
        // Unknown layout: every value, whatever the buffer's size.
        m_all = true;
        m_parameters = -1;
        return;
    }
    if (parameters <= m_config.sampleSize) {
        m_all = true;
        m_parameters = parameters;
        return;
    }
    // A fixed sample of coordinates, drawn once from the job's seed, sorted so that gathering
    // them walks memory forward.
    std::vector<std::int64_t> all(static_cast<std::size_t>(parameters));
    std::iota(all.begin(), all.end(), std::int64_t{0});
    deterministicShuffle(all, mixSeed(seed, 0x5C4EE7));
    all.resize(static_cast<std::size_t>(m_config.sampleSize));
    std::sort(all.begin(), all.end());
    m_indices = torch::from_blob(all.data(), {std::int64_t(all.size())}, torch::kInt64).clone();
    m_all = false;
    m_config.sampleSize = std::int64_t(all.size());
}

torch::Tensor ResultScreen::sample(const torch::Tensor &flat) const
{
    if (m_all)
        return (m_parameters < 0 ? flat : flat.narrow(0, 0, std::min(flat.numel(), m_parameters))).clone();
    return flat.index_select(0, m_indices);
}

double ResultScreen::medianCosine() const
{
    return median(std::vector<double>(m_cosines.begin(), m_cosines.end()));
}

double ResultScreen::cosineSpread() const
{
    const std::vector<double> values(m_cosines.begin(), m_cosines.end());
    return std::max(m_config.minCosineSpread, kMadToSigma * medianAbsoluteDeviation(values, median(values)));
}

ResultScreen::Verdict ResultScreen::judge(const torch::Tensor &result, const torch::Tensor &base,
                                          double learningRate, double credit) const
{
    Verdict v;
    const torch::Tensor update = result - base;
    const double updateNorm = update.norm().item<double>();
    const double baseNorm = base.norm().item<double>();
    const double floor = 1e-6 * std::sqrt(double(std::max<std::int64_t>(1, base.numel())));
    v.size = updateNorm / (std::max(learningRate, 1e-12) * std::sqrt(std::max(credit, 1e-3)));
    if (m_consensus.defined() && updateNorm > 0) {
        const double consensusNorm = m_consensus.norm().item<double>();
        if (consensusNorm > 0)
            v.cosine = update.dot(m_consensus).item<double>() / (updateNorm * consensusNorm);
    }

    // Absolute checks, which need no history.
    if (updateNorm > m_config.maxRelative * std::max(baseNorm, floor)) {
        v.reject = true;
        v.reason = QStringLiteral("its update is %1 times the size of the model it started from (at most %2 is "
                                  "plausible for one subtask)")
                       .arg(updateNorm / std::max(baseNorm, floor), 0, 'g', 3)
                       .arg(m_config.maxRelative);
        return v;
    }
    if (updateNorm == 0.0) {
        // A sample that did not move says nothing of the update's size or direction.
        v.unchangedSample = true;
        if (m_all)
            v.reason = unchangedWork(credit);
        v.reject = !v.reason.isEmpty();
        return v;
    }
    // Direction against the consensus of recent accepted updates: early, since the first
    // updates of a job are the most aligned and a reversed one is plainest then. Only a
    // clearly reversed update is refused, once three cosines are known: early in a job the
    // honest cosines cluster tightly (0.4 to 0.7), so their spread is small, yet an honest
    // update now and then comes out near orthogonal (-0.06 was measured next to a typical
    // 0.51), which a z-score alone would refuse.
    // Later, as the model converges, honest updates are mostly noise (cosines from -0.45 to
    // 0.7 around a typical 0.15 were measured): directions are judged only while the fleet
    // has a clear one.
    constexpr double kReversedCosine = -0.25;
    constexpr double kClearDirection = 0.3;
    constexpr std::size_t kDirectionEvidence = 3;
    double cosineCenter = 0.0;
    double cosineSpreadNow = 0.0;
    if (m_judgeDirections && directionsKnown()) {
        cosineCenter = medianCosine();
        cosineSpreadNow = cosineSpread();
        v.directionScore = (v.cosine - cosineCenter) / cosineSpreadNow;
        if (v.cosine < kReversedCosine && m_cosines.size() >= kDirectionEvidence && cosineCenter >= kClearDirection
            && v.directionScore < -m_config.directionSpread) {
            v.reject = true;
            v.reason = QStringLiteral("its update points against the fleet's recent direction (cosine %1, typical "
                                      "%2, robust z-score %3)")
                           .arg(v.cosine, 0, 'f', 2)
                           .arg(cosineCenter, 0, 'f', 2)
                           .arg(v.directionScore, 0, 'f', 1);
            return v;
        }
    }
    if (!warmedUp())
        return v;

    // Size against recent accepted updates, in log space (sizes spread multiplicatively).
    const std::vector<double> sizes(m_sizes.begin(), m_sizes.end());
    const double sizeCenter = median(sizes);
    const double sizeSpread = std::max(m_config.minLogSpread, kMadToSigma * medianAbsoluteDeviation(sizes, sizeCenter));
    v.sizeScore = (std::log(std::max(v.size, 1e-30)) - sizeCenter) / sizeSpread;
    const double ratio = v.size / std::exp(sizeCenter);
    // A large update that points where the fleet is going is what honest workers send after
    // the model was set back (a bad result got in, the learning rate rose): it is kept.
    // Large and pointing elsewhere (noise), or beyond any plausible size, it is not.
    const bool aligned = m_judgeDirections && directionsKnown()
                         && v.cosine >= cosineCenter - m_config.alignedSpread * cosineSpreadNow;
    if ((v.sizeScore > m_config.sizeSpread && !aligned) || ratio > m_config.maxSizeRatio) {
        v.reject = true;
        v.reason = QStringLiteral("its update is %1 times the size of recent accepted updates (robust z-score %2, "
                                  "cosine %3 with the fleet's direction)")
                       .arg(ratio, 0, 'g', 3)
                       .arg(v.sizeScore, 0, 'f', 1)
                       .arg(v.cosine, 0, 'f', 2);
        return v;
    }
    // Small against what was accepted, and against what the fleet sends now: the second is
    // what tells a free rider from a model whose every update shrinks as it converges.
    bool smallNow = true;
    if (int(m_seen.size()) >= m_config.seenWarmup) {
        const std::vector<double> seen(m_seen.begin(), m_seen.end());
        smallNow = std::log(std::max(v.size, 1e-30)) - median(seen) < -m_config.sizeSpread * sizeSpread;
    }
    if (v.sizeScore < -m_config.sizeSpread && credit >= m_config.smallFraction && smallNow) {
        v.reject = true;
        v.reason = QStringLiteral("its update is only %1 of the size of recent accepted updates for the work it "
                                  "claims (robust z-score %2): it barely trained")
                       .arg(ratio, 0, 'g', 3)
                       .arg(v.sizeScore, 0, 'f', 1);
        return v;
    }
    return v;
}

QString ResultScreen::unchangedWork(double credit) const
{
    return credit >= m_config.smallFraction
               ? QStringLiteral("its weights are exactly the ones its subtask started from: nothing was trained")
               : QString();
}

bool ResultScreen::sameParameters(const torch::Tensor &result, const torch::Tensor &base) const
{
    if (result.numel() != base.numel())
        return false;
    const std::int64_t n = m_parameterCount < 0 ? result.numel() : std::min(result.numel(), m_parameterCount);
    return torch::equal(result.narrow(0, 0, n), base.narrow(0, 0, n));
}

void ResultScreen::observed(const Verdict &verdict)
{
    if (verdict.size > 0)
        push(m_seen, std::log(verdict.size), m_config.seenWindow);
}

void ResultScreen::accepted(const torch::Tensor &result, const torch::Tensor &base, const Verdict &verdict)
{
    const torch::Tensor update = result - base;
    const double norm = update.norm().item<double>();
    if (norm <= 0)
        return;
    if (m_consensus.defined())
        push(m_cosines, verdict.cosine, m_config.window);
    push(m_sizes, std::log(std::max(verdict.size, 1e-30)), m_config.window);
    const torch::Tensor direction = update / norm;
    if (!m_consensus.defined())
        m_consensus = direction.clone();
    else
        m_consensus.mul_(m_config.consensusDecay).add_(direction, 1.0 - m_config.consensusDecay);
}

} // namespace flotilla
