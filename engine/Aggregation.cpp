#include "Aggregation.h"

#include <torch/torch.h>

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

class VcAsgd : public AggregationRule
{
public:
    explicit VcAsgd(double alpha) : m_alpha(alpha) {}
    QString name() const override { return QStringLiteral("vc-asgd"); }
    bool assimilate(AggregationState &state, const Contribution &c) override
    {
        // W ← W + m·(W_c − W) = (1−m)·W + m·W_c, one fused pass.
        mixInPlace(state.weights, c.result, mixingWeight(c));
        return true;
    }

protected:
    virtual double mixingWeight(const Contribution &c) const { return (1.0 - m_alpha) * c.credit; }
    double m_alpha;
};

class StalenessAwareVcAsgd final : public VcAsgd
{
public:
    StalenessAwareVcAsgd(double alpha, double exponent) : VcAsgd(alpha), m_exponent(exponent) {}
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
    AsyncDelta(double learningRate, double momentum, bool nesterov)
        : m_lr(learningRate), m_momentum(momentum), m_nesterov(nesterov)
    {
    }
    QString name() const override { return QStringLiteral("async-delta"); }
    bool needsBase() const override { return true; }
    void initialize(AggregationState &state) const override
    {
        if (m_momentum > 0 && (!state.momentum.defined() || state.momentum.numel() != state.weights.numel()))
            state.momentum = torch::zeros_like(state.weights);
    }
    bool assimilate(AggregationState &state, const Contribution &c) override
    {
        // Δ = c·(W_c − W_base): the client's progress, a descent direction already.
        if (!m_delta.defined() || m_delta.numel() != c.result.numel())
            m_delta = torch::empty_like(c.result);
        torch::sub_out(m_delta, c.result, c.base);
        if (c.credit != 1.0)
            m_delta.mul_(c.credit);
        if (m_momentum <= 0) {
            state.weights.add_(m_delta, m_lr);
            return true;
        }
        initialize(state);
        // m ← μ·m + Δ;  W ← W + η·(μ·m + Δ) with Nesterov, W ← W + η·m without.
        state.momentum.mul_(m_momentum).add_(m_delta);
        if (m_nesterov)
            state.weights.add_(m_delta, m_lr).add_(state.momentum, m_lr * m_momentum);
        else
            state.weights.add_(state.momentum, m_lr);
        return true;
    }

private:
    double m_lr;
    double m_momentum;
    bool m_nesterov;
    torch::Tensor m_delta; // scratch, reused between assimilations
};

class SyncAverage final : public AggregationRule
{
public:
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
        state.roundSum.add_(c.result, c.credit);
        state.roundCredit += c.credit;
        ++state.roundResults;
        return false;
    }
    bool closeRound(AggregationState &state) override
    {
        if (state.roundCredit <= 0.0)
            return false;
        state.weights.copy_(state.roundSum).div_(state.roundCredit);
        state.roundSum.zero_();
        state.roundCredit = 0.0;
        state.roundResults = 0;
        return true;
    }
};

} // namespace

Result<std::unique_ptr<AggregationRule>> createAggregationRule(const AggregationSpec &spec)
{
    if (spec.rule == QLatin1String("vc-asgd"))
        return std::unique_ptr<AggregationRule>(std::make_unique<VcAsgd>(spec.alpha));
    if (spec.rule == QLatin1String("staleness-aware"))
        return std::unique_ptr<AggregationRule>(std::make_unique<StalenessAwareVcAsgd>(spec.alpha, spec.stalenessExponent));
    if (spec.rule == QLatin1String("async-delta"))
        return std::unique_ptr<AggregationRule>(
            std::make_unique<AsyncDelta>(spec.outerLearningRate, spec.outerMomentum, spec.nesterov));
    if (spec.rule == QLatin1String("sync-average"))
        return std::unique_ptr<AggregationRule>(std::make_unique<SyncAverage>());
    return fail(QStringLiteral("unknown aggregation rule '%1' (vc-asgd, staleness-aware, async-delta, sync-average)")
                    .arg(spec.rule));
}

} // namespace flotilla
