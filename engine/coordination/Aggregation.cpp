#include "engine/coordination/Aggregation.h"
#include "common/LogCategories.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace flotilla {

namespace {

// W ← W + m·(W_c − W) in one pass over memory: a plain loop the compiler vectorizes, which
// on a 47 MB model is ~2× faster than LibTorch's lerp_ (that goes through TensorIterator).
void mixInPlace(torch::Tensor &weights, const torch::Tensor &result, double m)
{
    if (weights.is_contiguous() && result.is_contiguous() && weights.device().is_cpu() && result.device().is_cpu()
        && weights.scalar_type() == torch::kFloat32 && result.scalar_type() == torch::kFloat32
        && weights.numel() == result.numel()) {
        float *__restrict w = weights.data_ptr<float>();
        const float *__restrict c = result.data_ptr<float>();
        const float mf = static_cast<float>(m);
        const std::int64_t n = weights.numel();
        // Blocks of a fixed size, which the compiler turns into vector instructions even at -O2.
        constexpr std::int64_t kBlock = 16;
        std::int64_t i = 0;
        for (; i + kBlock <= n; i += kBlock)
            for (std::int64_t j = 0; j < kBlock; ++j)
                w[i + j] += mf * (c[i + j] - w[i + j]);
        for (; i < n; ++i)
            w[i] += mf * (c[i] - w[i]);
        return;
    }
    weights.lerp_(result, m);
}

// The ranges of a flat buffer that hold parameters, buffers and counters.
struct Ranges
{
    explicit Ranges(const WeightSegments &s) : m_segments(s) {}

    bool onlyParameters() const { return m_segments.onlyParameters(); }
    torch::Tensor parameters(const torch::Tensor &flat) const
    {
        return onlyParameters() ? flat : flat.narrow(0, 0, m_segments.parameterEnd);
    }
    torch::Tensor buffers(const torch::Tensor &flat) const
    {
        return flat.narrow(0, m_segments.parameterEnd, m_segments.bufferEnd - m_segments.parameterEnd);
    }
    // Parameters and buffers together: what convex rules treat alike.
    torch::Tensor floating(const torch::Tensor &flat) const
    {
        return onlyParameters() ? flat : flat.narrow(0, 0, m_segments.bufferEnd);
    }
    torch::Tensor counters(const torch::Tensor &flat) const
    {
        return flat.narrow(0, m_segments.bufferEnd, m_segments.total - m_segments.bufferEnd);
    }
    bool hasBuffers() const { return !onlyParameters() && m_segments.bufferEnd > m_segments.parameterEnd; }
    bool hasCounters() const { return !onlyParameters() && m_segments.total > m_segments.bufferEnd; }

    // A counter counts what the longest line of training behind the global model has seen.
    void foldCounters(torch::Tensor &weights, const torch::Tensor &result) const
    {
        if (!hasCounters())
            return;
        torch::Tensor global = counters(weights);
        global.copy_(torch::maximum(global, counters(result)));
    }

private:
    WeightSegments m_segments;
};

class VcAsgd : public AggregationRule
{
public:
    VcAsgd(double alpha, const WeightSegments &segments) : m_alpha(alpha), m_ranges(segments) {}
    QString name() const override { return QStringLiteral("vc-asgd"); }
    bool assimilate(AggregationState &state, const Contribution &c) override
    {
        // W ← W + m·(W_c − W) = (1−m)·W + m·W_c, one fused pass over parameters and buffers:
        // a convex combination keeps running statistics valid too.
        torch::Tensor floating = m_ranges.floating(state.weights);
        mixInPlace(floating, m_ranges.floating(c.result), mixingWeight(c));
        m_ranges.foldCounters(state.weights, c.result);
        return true;
    }
    // The mean of K updates W + m_i·(W_i − W) is W + M·(T − W) with M = Σm_i / K and
    // T = Σ m_i·W_i / Σ m_i: one mix toward the m-weighted mean of the results.
    void gather(AggregationState &state, const Contribution &c) override
    {
        const double m = mixingWeight(c);
        if (m_gathered == 0) {
            m_sum = torch::zeros_like(state.weights);
            m_mixSum = 0.0;
            if (m_ranges.hasCounters())
                m_ranges.counters(m_sum).copy_(m_ranges.counters(c.result));
        }
        m_ranges.floating(m_sum).add_(m_ranges.floating(c.result), m);
        m_ranges.foldCounters(m_sum, c.result);
        m_mixSum += m;
        ++m_gathered;
    }
    bool foldGathered(AggregationState &state) override
    {
        if (m_gathered == 0)
            return false;
        const double mean = m_mixSum / double(m_gathered);
        if (m_mixSum > 0) {
            torch::Tensor target = m_ranges.floating(m_sum);
            target.div_(m_mixSum);
            torch::Tensor floating = m_ranges.floating(state.weights);
            mixInPlace(floating, target, mean);
        }
        m_ranges.foldCounters(state.weights, m_sum);
        m_gathered = 0;
        return true;
    }

protected:
    virtual double mixingWeight(const Contribution &c) const { return (1.0 - m_alpha) * c.credit; }
    double m_alpha;
    Ranges m_ranges;
    torch::Tensor m_sum; // gathered: Σ m_i·W_i (parameters, buffers), the largest counters
    double m_mixSum = 0.0;
};

class StalenessAwareVcAsgd final : public VcAsgd
{
public:
    StalenessAwareVcAsgd(double alpha, double exponent, const WeightSegments &segments)
        : VcAsgd(alpha, segments), m_exponent(exponent)
    {
    }
    QString name() const override { return QStringLiteral("staleness-aware"); }

protected:
    double mixingWeight(const Contribution &c) const override
    {
        const double s = double(std::max<std::int64_t>(0, c.staleness));
        return (1.0 - m_alpha) * c.credit / std::pow(1.0 + s, m_exponent);
    }

private:
    double m_exponent;
};

class AsyncDelta final : public AggregationRule
{
public:
    AsyncDelta(const AggregationSpec &spec, const WeightSegments &segments)
        : m_lr(spec.outerLearningRate), m_momentum(spec.outerMomentum), m_nesterov(spec.nesterov),
          m_period(spec.momentumPeriod), m_damping(spec.stalenessDamping), m_scaled(spec.outerScaledByFleet), m_largestStep(spec.largestFleetStep),
          m_adaptive(spec.adaptiveFleetStep && spec.usesRounds()), m_normalize(spec.normalizeStaleness), m_rounds(spec.usesRounds()), m_ranges(segments)
    {
    }
    void setFleetSize(int workers) override { m_fleet = std::max(1, workers); }
    void setEpochSize(int shards) override { m_epochSize = std::max(1, shards); }
    QString name() const override { return QStringLiteral("async-delta"); }
    bool needsBase() const override { return true; }
    void initialize(AggregationState &state) const override
    {
        if (momentum() > 0 && (!state.momentum.defined() || state.momentum.numel() != state.weights.numel()))
            state.momentum = torch::zeros_like(state.weights);
        if (momentum() > 0 && period() > 1
            && (!state.periodSum.defined() || state.periodSum.numel() != state.weights.numel())) {
            state.periodSum = torch::zeros_like(state.weights);
            state.periodResults = 0;
        }
    }
    bool assimilate(AggregationState &state, const Contribution &c) override
    {
        foldParameters(state, c);
        // Running statistics are estimates, not descent directions: adding their deltas (or
        // momentum) can drive a variance below zero. They move toward the result's values
        // instead, by the share of the result its parameters take: damped as they are, so
        // that the statistics stay those of the weights they normalize.
        if (m_ranges.hasBuffers()) {
            torch::Tensor buffers = m_ranges.buffers(state.weights);
            // A round's statistics are those of the worker's model whatever the outer rate: the
            // outer step carries the parameters on, not the estimates of their activations.
            mixInPlace(buffers, m_ranges.buffers(c.result),
                       m_rounds ? std::min(1.0, m_weight)
                                : std::min(1.0, std::min(1.0, rate(state)) * c.credit * m_weight));
        }
        m_ranges.foldCounters(state.weights, c.result);
        return true;
    }
    // K results: Δ = (1/K)·Σ c_i·d_i·(W_i − W_base,i), one outer step; buffers move toward the
    // mean of the results' buffers weighted by c_i·d_i, by min(1, η)·Σ c_i·d_i / K.
    void gather(AggregationState &state, const Contribution &c) override
    {
        if (m_gathered == 0) {
            m_sum = torch::zeros_like(state.weights);
            m_creditSum = 0.0;
            m_plainCredit = 0.0;
            if (m_ranges.hasCounters())
                m_ranges.counters(m_sum).copy_(m_ranges.counters(c.result));
        }
        torch::Tensor delta = m_ranges.parameters(m_sum);
        const double weight = c.credit * weightOf(c);
        if (m_adaptive) {
            if (m_gathered == 0)
                m_squareSum = 0.0;
            const torch::Tensor own = m_ranges.parameters(c.result) - m_ranges.parameters(c.base);
            m_squareSum += c.credit * own.dot(own).item<double>();
        }
        m_plainCredit += c.credit;
        delta.add_(m_ranges.parameters(c.result), weight).sub_(m_ranges.parameters(c.base), weight);
        if (m_ranges.hasBuffers())
            m_ranges.buffers(m_sum).add_(m_ranges.buffers(c.result), weight);
        m_ranges.foldCounters(m_sum, c.result);
        m_creditSum += weight;
        ++m_gathered;
    }
    bool foldGathered(AggregationState &state) override
    {
        if (m_gathered == 0)
            return false;
        // A buffer's mean is over its K results; a round's is weighted by credit, since its
        // results are pieces of one step of the fleet's, however the subtasks were cut.
        const double k = m_rounds ? std::max(1e-12, m_plainCredit) : double(m_gathered);
        m_delta = m_ranges.parameters(m_sum).div_(k);
        if (m_adaptive && m_gathered >= 2)
            updateGain(m_squareSum / k, m_delta.dot(m_delta).item<double>());
        const double rateOfThisFold = rate(state);
        step(state, m_plainCredit);
        if (m_ranges.hasBuffers() && m_creditSum > 0) {
            torch::Tensor buffers = m_ranges.buffers(state.weights);
            torch::Tensor target = m_ranges.buffers(m_sum);
            target.div_(m_creditSum);
            // A round: the statistics become the mean of its workers' (less, for stale late
            // results), whatever the outer rate.
            mixInPlace(buffers, target,
                       m_rounds ? std::min(1.0, m_creditSum / k)
                                : std::min(1.0, std::min(1.0, rateOfThisFold) * m_creditSum / k));
        }
        m_ranges.foldCounters(state.weights, m_sum);
        m_delta = torch::Tensor();
        m_gathered = 0;
        return true;
    }

private:
    void foldParameters(AggregationState &state, const Contribution &c)
    {
        const torch::Tensor result = m_ranges.parameters(c.result);
        // Δ = c·(W_c − W_base): the client's progress, a descent direction already.
        if (!m_delta.defined() || m_delta.numel() != result.numel())
            m_delta = torch::empty_like(result);
        torch::sub_out(m_delta, result, m_ranges.parameters(c.base));
        m_weight = weightOf(c);
        // A round of one (a worker alone) is a step of its own whatever piece of a shard it
        // trained: the plain loop, however the subtasks are cut.
        if (const double weight = (m_rounds ? 1.0 : c.credit) * m_weight; weight != 1.0)
            m_delta.mul_(weight);
        step(state, c.credit);
    }

    // FedBuff's staleness weight: (1 + s)^-d.
    double damping(const Contribution &c) const
    {
        return m_damping > 0 ? std::pow(1.0 + double(std::max<std::int64_t>(0, c.staleness)), -m_damping) : 1.0;
    }
    // The weight a result's change gets besides its credit: its damping, and with
    // normalize_staleness that divided by the running mean of the dampings (an exponential
    // average over about ten results), reached gradually over the first epoch of credits. One
    // result at a time (a worker alone) always weighs 1.
    double weightOf(const Contribution &c)
    {
        const double d = damping(c);
        if (!m_normalize)
            return d;
        m_meanDamping = m_seen == 0 ? d : 0.9 * m_meanDamping + 0.1 * d;
        ++m_seen;
        const double progress = std::min(1.0, m_credits / double(m_epochSize));
        m_credits += c.credit;
        return d * (1.0 + (1.0 / std::max(1e-6, m_meanDamping) - 1.0) * progress);
    }
    // AdaScale's gain ratio from a round's K changes: their mean square E|Δ_i|² estimates
    // |G|² + σ², the square of their mean |G|² + σ²/K, so the ratio is (σ² + |G|²)/(σ²/K + |G|²),
    // in [1, K]. Both are running means over about ten rounds (one round's ratio is noisy),
    // started at the fixed factor's ratio, min(N, L). The factor used weighs that ratio
    // against min(N, L) as n rounds measured against kGainPriorRounds: a job of a few dozen
    // rounds (a small data set, where the linear scaling rule reached its target soonest)
    // keeps most of the fixed factor, a long one goes by what its rounds measure.
    static constexpr double kGainPriorRounds = 32;
    void updateGain(double meanSquare, double squareOfMean)
    {
        if (!std::isfinite(meanSquare) || !std::isfinite(squareOfMean))
            return;
        if (m_gainRounds == 0) {
            m_squareOfMean = squareOfMean;
            m_meanSquare = double(std::min(m_fleet, m_largestStep)) * squareOfMean;
        }
        const double a = 0.1;
        m_meanSquare += a * (meanSquare - m_meanSquare);
        m_squareOfMean += a * (squareOfMean - m_squareOfMean);
        ++m_gainRounds;
        const double measured =
            m_squareOfMean > 0 ? std::clamp(m_meanSquare / m_squareOfMean, 1.0, double(m_gathered)) : 1.0;
        const double n = double(m_gainRounds);
        m_gain = (kGainPriorRounds * double(std::min(m_fleet, m_largestStep)) + n * measured) / (kGainPriorRounds + n);
        qCDebug(lcEngine, "round of %d: gain %.3f (measured %.3f, this round %.3f)", m_gathered, m_gain, measured,
                squareOfMean > 0 ? meanSquare / squareOfMean : 0.0);
    }
    int period() const { return m_period > 0 ? m_period : m_fleet; }
    // The outer settings in force: the job's, or with outer_scaled_by_fleet those the workers
    // online call for (the plain sum of one worker's changes when it is alone).
    double momentum() const { return !m_scaled ? m_momentum : (m_fleet >= 2 ? m_momentum : 0.0); }
    // With N ≥ 2 a round's mean change is carried c·min(N, L) as far (L: largest_fleet_step,
    // 4): the linear scaling rule up to a step of L, reached over the first epoch of folded credit from 1
    // (the mean of the workers' changes, FedAvg's step), as its warmup does. Past about four
    // a fleet's step stops paying and diverges on a small job (docs/algorithms.md, "Choosing
    // the default": c·8 with 8 workers on the image folder); a larger batch of gradients
    // has a critical size past which it is worth no more steps.
    double rate(const AggregationState &state) const
    {
        if (!m_scaled)
            return m_lr;
        if (m_fleet < 2)
            return 1.0;
        const double warm = std::clamp(state.foldedCredit / double(m_epochSize), 0.0, 1.0);
        const double largest = double(std::min(m_fleet, m_largestStep));
        const double factor = m_lr * (m_adaptive ? std::clamp(m_gain, 1.0, largest) : largest);
        return (1.0 + (factor - 1.0) * warm) * (1.0 - m_momentum);
    }

    // The outer step with m_delta, for results worth `credit` shards.
    void step(AggregationState &state, double credit)
    {
        torch::Tensor weights = m_ranges.parameters(state.weights);
        const double lr = rate(state);
        state.foldedCredit += credit;
        const double mu = momentum();
        if (mu <= 0) {
            weights.add_(m_delta, lr);
            return;
        }
        initialize(state);
        const int n = period();
        if (n > 1) {
            // Delayed Nesterov: every change is applied at once at η/N, as one of the N of a
            // period; the momentum takes in their mean once the period is full, and only then
            // adds its look-ahead step η·μ·m (with the momentum before the update when not
            // Nesterov). With N = 1 these are the two forms below.
            torch::Tensor pending = m_ranges.parameters(state.periodSum);
            weights.add_(m_delta, lr / double(n));
            pending.add_(m_delta);
            if (++state.periodResults < n)
                return;
            torch::Tensor momentum = m_ranges.parameters(state.momentum);
            if (!m_nesterov)
                weights.add_(momentum, lr * mu);
            momentum.mul_(mu).add_(pending, 1.0 / double(state.periodResults));
            if (m_nesterov)
                weights.add_(momentum, lr * mu);
            pending.zero_();
            state.periodResults = 0;
            return;
        }
        // m ← μ·m + Δ;  W ← W + η·(μ·m + Δ) with Nesterov, W ← W + η·m without. The momentum
        // buffer's entries past the parameters stay zero.
        torch::Tensor momentum = m_ranges.parameters(state.momentum);
        momentum.mul_(mu).add_(m_delta);
        const double eta = lr * warmStart(state, mu);
        if (m_nesterov)
            weights.add_(m_delta, eta).add_(momentum, eta * mu);
        else
            weights.add_(momentum, eta);
    }

    // With the outer settings following the fleet, the momentum starts warm: a steady change Δ
    // is carried c·N·Δ from the first round on, not from the tenth. After t steps a steady Δ
    // has gained (1 − μ^(t+1))/(1 − μ) with Nesterov ((1 − μ^t)/(1 − μ) without), against
    // 1/(1 − μ) in the long run; the rate is divided by that share (Adam's bias correction of
    // its first moment). A job of few rounds (a small data set, many workers) otherwise spends
    // them at a tenth of its step.
    double warmStart(AggregationState &state, double mu) const
    {
        if (!m_scaled)
            return 1.0;
        state.outerSteps = std::min<qint64>(state.outerSteps + 1, qint64(1) << 40);
        const double share = 1.0 - std::pow(mu, double(state.outerSteps + (m_nesterov ? 1 : 0)));
        return share > 1e-12 ? 1.0 / share : 1.0;
    }

    double m_lr;
    double m_momentum;
    bool m_nesterov;
    int m_period;     // 0: the fleet's size
    double m_damping; // d
    bool m_scaled;    // outer_scaled_by_fleet
    int m_largestStep; // largest_fleet_step: L of the fleet's factor
    bool m_adaptive;  // adaptive_fleet_step (rounds only)
    bool m_normalize; // normalize_staleness
    bool m_rounds;    // rounds: a round's results are averaged by credit, not scaled by it
    int m_fleet = 1;
    int m_epochSize = 1;
    double m_weight = 1.0;      // the last weightOf() of assimilate()
    double m_meanDamping = 1.0; // normalize_staleness: the running mean of the dampings
    qint64 m_seen = 0;
    double m_credits = 0.0;     // credits weighed so far
    Ranges m_ranges;
    torch::Tensor m_delta; // scratch, reused between assimilations
    torch::Tensor m_sum;   // gathered: Σ c_i·Δ_i (parameters), Σ c_i·B_i (buffers), the largest counters
    double m_creditSum = 0.0;
    double m_plainCredit = 0.0; // gathered: Σ c_i
    double m_squareSum = 0.0;   // gathered, adaptive_fleet_step: Σ c_i·|Δ_i|²
    double m_meanSquare = 0.0;  // adaptive_fleet_step: running means of E|Δ_i|² and |mean Δ|²
    double m_squareOfMean = 0.0;
    qint64 m_gainRounds = 0;
    double m_gain = 1.0;        // their ratio, within [1, K]
};

class SyncAverage final : public AggregationRule
{
public:
    explicit SyncAverage(const WeightSegments &segments) : m_ranges(segments) {}
    QString name() const override { return QStringLiteral("sync-average"); }
    bool synchronous() const override { return true; }
    void initialize(AggregationState &state) const override
    {
        if (!state.roundSum.defined() || state.roundSum.numel() != state.weights.numel())
            state.roundSum = torch::zeros_like(state.weights);
    }
    bool assimilate(AggregationState &state, const Contribution &c) override
    {
        initialize(state);
        // Parameters and buffers: a credit-weighted mean. Counters: the round's largest,
        // kept in the round sum's counter range.
        m_ranges.floating(state.roundSum).add_(m_ranges.floating(c.result), c.credit);
        m_ranges.foldCounters(state.roundSum, c.result);
        state.roundCredit += c.credit;
        ++state.roundResults;
        return false;
    }
    // A round is its own buffer: gathering is assimilating, and the round's close folds.
    void gather(AggregationState &state, const Contribution &c) override
    {
        assimilate(state, c);
    }
    bool foldGathered(AggregationState &state) override
    {
        Q_UNUSED(state);
        m_gathered = 0;
        return false;
    }
    bool closeRound(AggregationState &state) override
    {
        if (state.roundCredit <= 0.0)
            return false;
        m_ranges.floating(state.weights).copy_(m_ranges.floating(state.roundSum)).div_(state.roundCredit);
        m_ranges.foldCounters(state.weights, state.roundSum);
        state.roundSum.zero_();
        state.roundCredit = 0.0;
        state.roundResults = 0;
        return true;
    }

private:
    Ranges m_ranges;
};

} // namespace

Result<std::unique_ptr<AggregationRule>> createAggregationRule(const AggregationSpec &spec,
                                                               const WeightSegments &segments)
{
    if (spec.rule == QLatin1String("vc-asgd"))
        return std::unique_ptr<AggregationRule>(std::make_unique<VcAsgd>(spec.alpha, segments));
    if (spec.rule == QLatin1String("staleness-aware"))
        return std::unique_ptr<AggregationRule>(
            std::make_unique<StalenessAwareVcAsgd>(spec.alpha, spec.stalenessExponent, segments));
    if (spec.rule == QLatin1String("async-delta"))
        return std::unique_ptr<AggregationRule>(std::make_unique<AsyncDelta>(spec, segments));
    if (spec.rule == QLatin1String("sync-average"))
        return std::unique_ptr<AggregationRule>(std::make_unique<SyncAverage>(segments));
    return fail(QStringLiteral("unknown aggregation rule '%1' (vc-asgd, staleness-aware, async-delta, sync-average)")
                    .arg(spec.rule));
}

} // namespace flotilla
