// Each aggregation rule against numbers worked out by hand.
#include "engine/coordination/Aggregation.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace flotilla;

namespace {

torch::Tensor vec(std::initializer_list<float> values)
{
    return torch::tensor(std::vector<float>(values), torch::kFloat32);
}

void expectEqual(const torch::Tensor &actual, std::initializer_list<float> expected)
{
    const torch::Tensor e = vec(expected);
    if (!torch::allclose(actual, e, 1e-5, 1e-6)) {
        std::ostringstream s;
        s << "got " << actual << " expected " << e;
        QFAIL(s.str().c_str());
    }
}

// async-delta as it was before rounds and outer settings that follow the fleet: every test of
// the older formulas starts from it, whatever the job's defaults are.
AggregationSpec plainDelta()
{
    AggregationSpec spec;
    spec.rule = QStringLiteral("async-delta");
    spec.rounds = false;
    spec.roundSteps = 0;
    spec.outerScaledByFleet = false;
    spec.normalizeStaleness = false;
    spec.workerMomentumScaledByFleet = false;
    spec.outerLearningRate = 1.0;
    spec.outerMomentum = 0.0;
    spec.stalenessDamping = 1.0;
    return spec;
}

// A round's fold (aggregation.rounds) with the outer settings following the fleet.
// The rule for four workers online and an epoch of one shard, its state at W = (0, 0).
std::unique_ptr<AggregationRule> fourWorkerRule(const AggregationSpec &spec, AggregationState &state)
{
    auto rule = createAggregationRule(spec).value();
    rule->setFleetSize(4);
    rule->setEpochSize(1);
    state.weights = vec({0, 0});
    rule->initialize(state);
    return rule;
}

// A round of four changes (1, ±spread) from the weights as they are, folded.
bool foldSpreadRound(AggregationRule &rule, AggregationState &state, float spread)
{
    const torch::Tensor base = state.weights.clone();
    for (int i = 0; i < 4; ++i)
        rule.gather(state, Contribution{base + vec({1, i % 2 ? spread : -spread}), base, 1.0, 0});
    return rule.foldGathered(state);
}

AggregationSpec roundsSpec(double perWorkerRate, double momentum)
{
    AggregationSpec spec = plainDelta();
    spec.rounds = true;
    spec.outerScaledByFleet = true;
    spec.outerLearningRate = perWorkerRate;
    spec.outerMomentum = momentum;
    spec.nesterov = true;
    spec.adaptiveFleetStep = false; // the fixed factor min(N, L); the gain's own test turns it on
    return spec;
}

std::unique_ptr<AggregationRule> rule(const QString &name, double alpha = 0.5, double exponent = 0.5,
                                      double outerLr = 1.0, double outerMomentum = 0.0, bool nesterov = true,
                                      const WeightSegments &segments = {})
{
    AggregationSpec spec = plainDelta();
    spec.rule = name;
    spec.alpha = alpha;
    spec.stalenessExponent = exponent;
    spec.outerLearningRate = outerLr;
    spec.stalenessDamping = 0; // the formulas of the undamped delta (damping has a test of its own)
    spec.outerMomentum = outerMomentum;
    spec.nesterov = nesterov;
    auto r = createAggregationRule(spec, segments);
    return std::move(r).value();
}

// Five values: two parameters, two buffers (running statistics), one counter.
WeightSegments modelWithBuffers()
{
    WeightSegments s;
    s.parameterEnd = 2;
    s.bufferEnd = 4;
    s.total = 5;
    return s;
}

// The blocked blend (16 values at a time, then a scalar tail) is reached through three rules
// and two kinds of range: the whole buffer, parameters and buffers together, and buffers
// alone (async-delta), which start at an offset inside the flat weights.
const char *const kBlendWholeBuffer = "vc-asgd";
const char *const kBlendStaleness = "staleness-aware";
const char *const kBlendWithCounters = "vc-asgd with counters";
const char *const kBlendDeltaBuffers = "async-delta buffers";

// Float rounding of w + m·(c − w) costs at most a few units in the last place of the inputs:
// about 4·2^-24·(|w| + |c|) ≈ 2.4e-7·(|w| + |c|). An element left out, or read from its
// neighbour, is off by at least m·0.25 here (the inputs differ by at least 0.25).
constexpr double kBlendTolerance = 1e-6;

double blendError(float got, double expected, double w, double c)
{
    return std::abs(double(got) - expected) / (std::abs(w) + std::abs(c));
}

} // namespace

class TestAggregation : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void vcAsgdMixesWithAlpha()
    {
        auto r = rule(QStringLiteral("vc-asgd"), 0.75);
        AggregationState s;
        s.weights = vec({1, 2, 3, 4});
        const void *before = s.weights.data_ptr();
        // W = 0.75·[1,2,3,4] + 0.25·[5,6,7,8] = [2,3,4,5]
        QVERIFY(r->assimilate(s, Contribution{vec({5, 6, 7, 8}), {}, 1.0, 0}));
        expectEqual(s.weights, {2, 3, 4, 5});
        QCOMPARE(s.weights.data_ptr(), before); // in place
    }

    void vcAsgdScalesPartialResultsByCredit()
    {
        auto r = rule(QStringLiteral("vc-asgd"), 0.75);
        AggregationState s;
        s.weights = vec({1, 2, 3, 4});
        // m = 0.25·0.5 = 0.125: W = 0.875·W + 0.125·W_c = [1.5, 2.5, 3.5, 4.5]
        r->assimilate(s, Contribution{vec({5, 6, 7, 8}), {}, 0.5, 0});
        expectEqual(s.weights, {1.5, 2.5, 3.5, 4.5});
    }

    void vcAsgdIgnoresStaleness()
    {
        auto r = rule(QStringLiteral("vc-asgd"), 0.5);
        AggregationState s;
        s.weights = vec({0, 0});
        r->assimilate(s, Contribution{vec({2, 4}), {}, 1.0, 9});
        expectEqual(s.weights, {1, 2});
    }

    void stalenessAwareDiscountsStaleResults()
    {
        // α = 0.5, p = 1: fresh m = 0.5; staleness 3 gives m = 0.5 / 4 = 0.125.
        auto r = rule(QStringLiteral("staleness-aware"), 0.5, 1.0);
        AggregationState fresh;
        fresh.weights = vec({1, 2, 3, 4});
        r->assimilate(fresh, Contribution{vec({5, 6, 7, 8}), {}, 1.0, 0});
        expectEqual(fresh.weights, {3, 4, 5, 6});

        AggregationState stale;
        stale.weights = vec({1, 2, 3, 4});
        r->assimilate(stale, Contribution{vec({5, 6, 7, 8}), {}, 1.0, 3});
        expectEqual(stale.weights, {1.5, 2.5, 3.5, 4.5});
    }

    void stalenessAwareSquareRootByDefault()
    {
        // p = 0.5, staleness 8: m = 0.5 / sqrt(9) = 1/6; W = 0 + (6 - 0)/6 = 1.
        auto r = rule(QStringLiteral("staleness-aware"), 0.5, 0.5);
        AggregationState s;
        s.weights = vec({0});
        r->assimilate(s, Contribution{vec({6}), {}, 1.0, 8});
        expectEqual(s.weights, {1});
    }

    void asyncDeltaAppliesProgressToCurrentWeights()
    {
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 1.0, 0.0);
        QVERIFY(r->needsBase());
        AggregationState s;
        s.weights = vec({1, 2, 3, 4});
        // The worker started from [0,0,0,0] and reached [1,1,1,1]; W moved meanwhile.
        r->assimilate(s, Contribution{vec({1, 1, 1, 1}), vec({0, 0, 0, 0}), 1.0, 2});
        expectEqual(s.weights, {2, 3, 4, 5});
        r->assimilate(s, Contribution{vec({1, 1, 1, 1}), vec({0, 0, 0, 0}), 0.5, 0});
        expectEqual(s.weights, {2.5, 3.5, 4.5, 5.5});
    }

    void asyncDeltaWithNesterovMomentum()
    {
        // η = 0.5, μ = 0.9, Δ = 1 each time.
        // 1st: m = 1;   W += 0.5·(1 + 0.9·1)   = 0.95
        // 2nd: m = 1.9; W += 0.5·(1 + 0.9·1.9) = 1.355
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.9, true);
        AggregationState s;
        s.weights = vec({1, 2});
        r->initialize(s);
        r->assimilate(s, Contribution{vec({1, 1}), vec({0, 0}), 1.0, 0});
        expectEqual(s.weights, {1.95f, 2.95f});
        expectEqual(s.momentum, {1, 1});
        r->assimilate(s, Contribution{vec({1, 1}), vec({0, 0}), 1.0, 0});
        expectEqual(s.weights, {3.305f, 4.305f});
        expectEqual(s.momentum, {1.9f, 1.9f});
    }

    void asyncDeltaWithPlainMomentum()
    {
        // η = 0.5, μ = 0.9: W += 0.5·1 = 0.5, then W += 0.5·1.9 = 0.95.
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.9, false);
        AggregationState s;
        s.weights = vec({0});
        r->assimilate(s, Contribution{vec({1}), vec({0}), 1.0, 0});
        expectEqual(s.weights, {0.5});
        r->assimilate(s, Contribution{vec({1}), vec({0}), 1.0, 0});
        expectEqual(s.weights, {1.45f});
    }

    // Delayed Nesterov (momentum period N = 2), η = 0.5, μ = 0.9, Δ = 1 each time:
    // 1st: W += 0.5/2·1 = 0.25 (pending 1);
    // 2nd: W += 0.25 → 0.5; the period is full: m = 0.9·0 + (1 + 1)/2 = 1; W += 0.5·0.9·1 → 0.95;
    // 3rd: W += 0.25 → 1.2;
    // 4th: W += 0.25 → 1.45; m = 0.9·1 + 1 = 1.9; W += 0.45·1.9 = 0.855 → 2.305.
    // Period 1 is the Nesterov form above (1st: 0.95, 2nd: 2.305 too, in half the results).
    void asyncDeltaDelayedNesterov()
    {
        AggregationSpec spec = plainDelta();
        spec.outerLearningRate = 0.5;
        spec.outerMomentum = 0.9;
        spec.momentumPeriod = 2;
        auto r = createAggregationRule(spec).value();
        AggregationState s;
        s.weights = vec({0});
        r->initialize(s);
        const float expected[] = {0.25f, 0.95f, 1.2f, 2.305f};
        for (const float e : expected) {
            r->assimilate(s, Contribution{vec({1}), vec({0}), 1.0, 0});
            expectEqual(s.weights, {e});
        }
        expectEqual(s.momentum, {1.9f});
        QCOMPARE(s.periodResults, 0);
        // Halfway through a period the pending changes are part of the state (a checkpoint).
        r->assimilate(s, Contribution{vec({3}), vec({1}), 1.0, 0});
        expectEqual(s.periodSum, {2});
        QCOMPARE(s.periodResults, 1);

        // Period 0 follows the fleet: with 3 workers online, a period of 3.
        spec.momentumPeriod = 0;
        auto fleet = createAggregationRule(spec).value();
        fleet->setFleetSize(3);
        AggregationState f;
        f.weights = vec({0});
        fleet->initialize(f);
        for (int i = 0; i < 3; ++i)
            fleet->assimilate(f, Contribution{vec({3}), vec({0}), 1.0, 0});
        // 3 × 0.5/3·3 = 1.5; m = (3+3+3)/3 = 3; W += 0.45·3 = 1.35 → 2.85.
        expectEqual(f.weights, {2.85f});
        expectEqual(f.momentum, {3});
    }

    // FedBuff's staleness weight on the change: (1 + s)^-d.
    void asyncDeltaDampsStaleChanges()
    {
        AggregationSpec spec = plainDelta();
        spec.stalenessDamping = 0.5;
        auto r = createAggregationRule(spec).value();
        AggregationState s;
        s.weights = vec({10});
        r->assimilate(s, Contribution{vec({4}), vec({2}), 1.0, 0}); // fresh: all of Δ = 2
        expectEqual(s.weights, {12});
        r->assimilate(s, Contribution{vec({4}), vec({2}), 1.0, 3}); // 3 stale: 2/√4 = 1
        expectEqual(s.weights, {13});
        r->assimilate(s, Contribution{vec({4}), vec({2}), 0.5, 8}); // credit too: 0.5·2/3
        expectEqual(s.weights, {13.0f + 1.0f / 3.0f});
    }

    void asyncDeltaDampsRunningStatisticsAsItsParameters()
    {
        // Damping 1, staleness 1: the result counts 1/2, its statistics too.
        // Parameters: [1, 2] + 0.5·([5, 6] − [1, 2]) = [3, 4].
        // Buffers: [1, 1] + 0.5·([3, 5] − [1, 1]) = [2, 3] (not the result's [3, 5]).
        AggregationSpec spec;
        spec.rule = QStringLiteral("async-delta");
        spec.stalenessDamping = 1.0;
        auto r = createAggregationRule(spec, modelWithBuffers()).value();
        AggregationState s;
        s.weights = vec({1, 2, 1, 1, 3});
        r->initialize(s);
        r->assimilate(s, Contribution{vec({5, 6, 3, 5, 7}), vec({1, 2, 9, 9, 3}), 1.0, 1});
        expectEqual(s.weights, {3, 4, 2, 3, 7});

        // Buffered, two results of staleness 0 and 1 (weights 1 and 1/2): the statistics move
        // toward (1·[3, 5] + 0.5·[6, 8]) / 1.5 = [4, 6] by (1 + 0.5) / 2 = 0.75 from [1, 1]:
        // [3.25, 4.75]. Parameters: Δ = (1·[2, 2] + 0.5·[4, 4]) / 2 = [2, 2].
        auto b = createAggregationRule(spec, modelWithBuffers()).value();
        AggregationState t;
        t.weights = vec({1, 2, 1, 1, 3});
        b->initialize(t);
        b->gather(t, Contribution{vec({3, 4, 3, 5, 4}), vec({1, 2, 9, 9, 3}), 1.0, 0});
        b->gather(t, Contribution{vec({5, 6, 6, 8, 6}), vec({1, 2, 9, 9, 3}), 1.0, 1});
        QVERIFY(b->foldGathered(t));
        expectEqual(t.weights, {3, 4, 3.25f, 4.75f, 6});
    }

    void syncAverageWaitsForTheRound()
    {
        auto r = rule(QStringLiteral("sync-average"));
        QVERIFY(r->synchronous());
        AggregationState s;
        s.weights = vec({1, 1});
        r->initialize(s);
        QVERIFY(!r->assimilate(s, Contribution{vec({3, 5}), {}, 1.0, 0}));
        QVERIFY(!r->assimilate(s, Contribution{vec({6, 8}), {}, 0.5, 0}));
        expectEqual(s.weights, {1, 1}); // untouched until the round closes
        QCOMPARE(s.roundResults, 2);
        // (1·[3,5] + 0.5·[6,8]) / 1.5 = [4, 6]
        QVERIFY(r->closeRound(s));
        expectEqual(s.weights, {4, 6});
        expectEqual(s.roundSum, {0, 0});
        QCOMPARE(s.roundCredit, 0.0);
        QVERIFY(!r->closeRound(s)); // an empty round changes nothing
        expectEqual(s.weights, {4, 6});
    }

    void vcAsgdMixesBuffersAndKeepsTheLargestCounter()
    {
        auto r = rule(QStringLiteral("vc-asgd"), 0.5, 0.5, 1.0, 0.0, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({1, 2, 1, 1, 3});
        // Parameters and buffers: 0.5·W + 0.5·W_c. Counter: max(3, 7).
        r->assimilate(s, Contribution{vec({3, 4, 3, 5, 7}), {}, 1.0, 0});
        expectEqual(s.weights, {2, 3, 2, 3, 7});
        // A result that has counted less does not lower the global counter.
        r->assimilate(s, Contribution{vec({2, 3, 2, 3, 5}), {}, 1.0, 0});
        expectEqual(s.weights, {2, 3, 2, 3, 7});
    }

    void stalenessAwareTreatsBuffersLikeParameters()
    {
        // α = 0.5, p = 1, staleness 1: m = 0.25 for parameters and buffers alike.
        auto r = rule(QStringLiteral("staleness-aware"), 0.5, 1.0, 1.0, 0.0, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({0, 0, 4, 4, 10});
        r->assimilate(s, Contribution{vec({4, 8, 8, 0, 12}), {}, 1.0, 1});
        expectEqual(s.weights, {1, 2, 5, 3, 12});
    }

    void asyncDeltaMovesBuffersTowardTheResultNeverByDelta()
    {
        // η = 0.5, μ = 0.9, Nesterov. Parameters: Δ = [2, 2], m = [2, 2],
        // W = [1, 2] + 0.5·[2, 2] + 0.45·[2, 2] = [2.9, 3.9].
        // Buffers: W_b + min(1, η)·c·(R_b − W_b) = [1, 1] + 0.5·([3, 5] − [1, 1]) = [2, 3].
        // Counter: max(3, 7). The momentum buffer past the parameters stays zero.
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.9, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({1, 2, 1, 1, 3});
        r->initialize(s);
        r->assimilate(s, Contribution{vec({3, 4, 3, 5, 7}), vec({1, 2, 9, 9, 3}), 1.0, 0});
        expectEqual(s.weights, {2.9f, 3.9f, 2, 3, 7});
        expectEqual(s.momentum, {2, 2, 0, 0, 0});
    }

    void asyncDeltaKeepsRunningVariancesPositive()
    {
        // The failure users met: a variance pushed by deltas and momentum goes below zero.
        // Here the result's variance is small while its base's was large, over and over.
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 1.0, 0.9, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({0, 0, 1, 1, 0});
        r->initialize(s);
        for (int i = 0; i < 100; ++i) {
            const float small = 0.01f * float(i % 7 + 1);
            r->assimilate(s, Contribution{vec({0.1f, -0.1f, small, small, float(i)}), vec({0, 0, 4, 4, 0}), 1.0, 3});
            QVERIFY2(s.weights[2].item<float>() > 0 && s.weights[3].item<float>() > 0,
                     qPrintable(QStringLiteral("variance went to %1 after %2 folds").arg(s.weights[2].item<float>()).arg(i + 1)));
        }
        QCOMPARE(s.weights[4].item<float>(), 99.0f);
    }

    void syncAverageAveragesBuffersAndKeepsTheLargestCounter()
    {
        auto r = rule(QStringLiteral("sync-average"), 0.5, 0.5, 1.0, 0.0, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({1, 1, 1, 1, 4});
        r->initialize(s);
        r->assimilate(s, Contribution{vec({3, 5, 2, 4, 6}), {}, 1.0, 0});
        r->assimilate(s, Contribution{vec({6, 8, 8, 1, 9}), {}, 0.5, 0});
        expectEqual(s.weights, {1, 1, 1, 1, 4});
        // (1·R1 + 0.5·R2) / 1.5 for parameters and buffers; max(4, 6, 9) for the counter.
        QVERIFY(r->closeRound(s));
        expectEqual(s.weights, {4, 6, 4, 3, 9});
        expectEqual(s.roundSum, {0, 0, 0, 0, 0});
    }

    void blendLoopMatchesLerpOnBlocksAndTails()
    {
        // The vc-asgd fold runs 16 values at a time with a scalar tail: sizes around the block
        // size and a large odd one, against LibTorch's lerp.
        auto r = rule(QStringLiteral("vc-asgd"), 0.3);
        for (const std::int64_t n : {1, 15, 16, 17, 31, 32, 33, 1000003}) {
            torch::manual_seed(n);
            const torch::Tensor w = torch::randn({n});
            const torch::Tensor c = torch::randn({n});
            AggregationState s;
            s.weights = w.clone();
            r->assimilate(s, Contribution{c, {}, 1.0, 0});
            const torch::Tensor expected = w.lerp(c, 0.7);
            QVERIFY2(torch::allclose(s.weights, expected, 1e-5, 1e-6), qPrintable(QStringLiteral("size %1").arg(n)));
        }
    }

    void blendMatchesDoubleReference_data()
    {
        QTest::addColumn<QString>("kernel");
        QTest::addColumn<qint64>("size");
        const std::int64_t sizes[] = {1, 15, 16, 17, 31, 32, 33, 1000, 1023, 1024 + 7, 100003};
        static_assert(100003 % 16 != 0);
        for (const char *kernel : {kBlendWholeBuffer, kBlendStaleness, kBlendWithCounters, kBlendDeltaBuffers})
            for (const std::int64_t n : sizes)
                QTest::addRow("%s n=%lld", kernel, static_cast<long long>(n)) << QString::fromLatin1(kernel) << qint64(n);
    }

    void blendMatchesDoubleReference()
    {
        QFETCH(QString, kernel);
        QFETCH(qint64, size);
        const std::int64_t n = size;
        const bool delta = kernel == QLatin1String(kBlendDeltaBuffers);
        const bool counters = delta || kernel == QLatin1String(kBlendWithCounters);

        // Layout of the flat weights: [head | n blended values | 2 counters].
        const std::int64_t head = delta ? 3 : 0; // async-delta's parameters, not blended
        const std::int64_t total = head + n + (counters ? 2 : 0);
        WeightSegments segments;
        if (counters) {
            segments.parameterEnd = delta ? head : n / 2;
            segments.bufferEnd = head + n;
            segments.total = total;
        }

        // The mixing weight each rule should use, worked out here independently.
        std::unique_ptr<AggregationRule> r;
        Contribution contribution;
        double m = 0.0;
        if (kernel == QLatin1String(kBlendWholeBuffer)) {
            r = rule(QStringLiteral("vc-asgd"), 0.3);
            contribution.credit = 0.8;
            m = 0.7 * 0.8;
        } else if (kernel == QLatin1String(kBlendStaleness)) {
            r = rule(QStringLiteral("staleness-aware"), 0.3, 0.5);
            contribution.credit = 0.9;
            contribution.staleness = 3;
            m = 0.7 * 0.9 / std::sqrt(4.0);
        } else if (kernel == QLatin1String(kBlendWithCounters)) {
            r = rule(QStringLiteral("vc-asgd"), 0.6, 0.5, 1.0, 0.0, true, segments);
            m = 0.4;
        } else {
            r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.0, true, segments);
            contribution.credit = 0.75;
            m = 0.5 * 0.75; // min(1, η)·c for buffers
        }
        QVERIFY(r);

        // Random inputs; each result value differs from its weight by at least 0.25, so a
        // value the kernel skipped or took from the wrong place cannot pass for right.
        std::mt19937 random(quint32(n * 7919 + kernel.size()));
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::uniform_real_distribution<float> step(0.25f, 1.0f);
        const size_t count = static_cast<size_t>(total);
        std::vector<float> w(count), c(count), base(count);
        for (std::int64_t i = 0; i < total; ++i) {
            w[size_t(i)] = value(random);
            c[size_t(i)] = w[size_t(i)] + ((random() & 1) ? step(random) : -step(random));
            base[size_t(i)] = value(random);
        }
        if (counters) {
            // Global counters larger than the result's in one place, smaller in the other.
            w[size_t(total - 2)] = 1000;
            c[size_t(total - 2)] = 10;
            w[size_t(total - 1)] = 5;
            c[size_t(total - 1)] = 50;
        }

        // The buffers sit inside larger ones at odd offsets, with guards on both sides: the
        // kernel must start and stop exactly at the ends of its range.
        constexpr float kGuard = 1234.5f;
        torch::Tensor wStorage = torch::full({total + 2}, kGuard);
        torch::Tensor cStorage = torch::full({total + 5}, kGuard);
        AggregationState s;
        s.weights = wStorage.narrow(0, 1, total);
        contribution.result = cStorage.narrow(0, 3, total);
        QVERIFY(s.weights.is_contiguous() && contribution.result.is_contiguous());
        std::memcpy(s.weights.data_ptr<float>(), w.data(), sizeof(float) * size_t(total));
        std::memcpy(contribution.result.data_ptr<float>(), c.data(), sizeof(float) * size_t(total));
        if (delta)
            contribution.base = torch::from_blob(base.data(), {total}, torch::kFloat32).clone();
        const void *before = s.weights.data_ptr();

        r->initialize(s);
        QVERIFY(r->assimilate(s, contribution));
        QCOMPARE(s.weights.data_ptr(), before);
        const float *got = s.weights.data_ptr<float>();
        QCOMPARE(wStorage[0].item<float>(), kGuard);
        QCOMPARE(wStorage[total + 1].item<float>(), kGuard);

        const auto expected = [&](std::int64_t i) {
            return double(w[size_t(i)]) + m * (double(c[size_t(i)]) - double(w[size_t(i)]));
        };
        double worst = 0.0;
        std::int64_t worstAt = 0;
        for (std::int64_t i = head; i < head + n; ++i) {
            const double e = blendError(got[i], expected(i), w[size_t(i)], c[size_t(i)]);
            if (e > worst) {
                worst = e;
                worstAt = i - head;
            }
        }
        QVERIFY2(worst < kBlendTolerance,
                 qPrintable(QStringLiteral("relative error %1 at element %2 of %3").arg(worst).arg(worstAt).arg(n)));

        // By name: the first and last of the first block, the first of the second, the last
        // full block's end, the first of the tail and the very last element.
        const std::int64_t tailStart = n / 16 * 16;
        for (const std::int64_t k : {std::int64_t(0), std::int64_t(15), std::int64_t(16), std::int64_t(17),
                                     tailStart - 1, tailStart, n - 1}) {
            if (k < 0 || k >= n)
                continue;
            const std::int64_t i = head + k;
            QVERIFY2(blendError(got[i], expected(i), w[size_t(i)], c[size_t(i)]) < kBlendTolerance,
                     qPrintable(QStringLiteral("element %1 of %2: got %3, expected %4, was %5")
                                    .arg(k).arg(n).arg(double(got[i]), 0, 'g', 9).arg(expected(i), 0, 'g', 9)
                                    .arg(double(w[size_t(i)]), 0, 'g', 9)));
        }

        // What lies outside the blended range follows its own rule.
        for (std::int64_t i = 0; i < head; ++i) {
            // async-delta parameters: W + η·c·(W_c − W_base)
            const double e = double(w[size_t(i)]) + 0.5 * 0.75 * (double(c[size_t(i)]) - double(base[size_t(i)]));
            const double scale = std::abs(w[size_t(i)]) + std::abs(c[size_t(i)]) + std::abs(base[size_t(i)]);
            QVERIFY2(std::abs(double(got[i]) - e) < kBlendTolerance * scale,
                     qPrintable(QStringLiteral("parameter %1: got %2, expected %3").arg(i).arg(got[i]).arg(e)));
        }
        if (counters) {
            QCOMPARE(got[total - 2], 1000.0f);
            QCOMPARE(got[total - 1], 50.0f);
        }
    }

    void vcAsgdBufferFoldsTheMeanOfTheUpdates()
    {
        // α = 0.5: m_1 = 0.5 (credit 1), m_2 = 0.25 (credit 0.5). From W = [2, 2]:
        // W + ½·(0.5·([2,4] − W) + 0.25·([4,0] − W)) = [2,2] + ½·([0,1] + [0.5,−0.5]) = [2.25, 2.25].
        // (One after the other they would give [2.5, 2.25]; the plain mean mixed by 0.5, [2.5, 2].)
        auto r = rule(QStringLiteral("vc-asgd"), 0.5);
        AggregationState s;
        s.weights = vec({2, 2});
        r->gather(s, Contribution{vec({2, 4}), {}, 1.0, 0});
        r->gather(s, Contribution{vec({4, 0}), {}, 0.5, 7});
        QCOMPARE(r->gathered(), 2);
        expectEqual(s.weights, {2, 2}); // nothing folded yet
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {2.25f, 2.25f});
        QCOMPARE(r->gathered(), 0);
        QVERIFY(!r->foldGathered(s)); // an empty buffer changes nothing
        expectEqual(s.weights, {2.25f, 2.25f});
        // The sum starts again from zero: one more result alone is a plain fold.
        r->gather(s, Contribution{vec({4.25f, 0.25f}), {}, 1.0, 0});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {3.25f, 1.25f});
    }

    void stalenessAwareBufferWeighsEachResultByItsStaleness()
    {
        // α = 0.5, p = 1: fresh m = 0.5, staleness 3 m = 0.125. W = 0 + ½·(0.5·8 + 0.125·8) = 2.5.
        auto r = rule(QStringLiteral("staleness-aware"), 0.5, 1.0);
        AggregationState s;
        s.weights = vec({0});
        r->gather(s, Contribution{vec({8}), {}, 1.0, 0});
        r->gather(s, Contribution{vec({8}), {}, 1.0, 3});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {2.5f});
    }

    void asyncDeltaBufferTakesOneOuterStepWithTheMeanDelta()
    {
        // η = 0.5, μ = 0.9, Nesterov. Δ_1 = [1, 1], Δ_2 = 0.5·([3,1] − [1,1]) = [1, 0];
        // Δ = [1, 0.5]; m = Δ; W = [1, 2] + 0.5·(Δ + 0.9·m) = [1.95, 2.475].
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.9, true);
        AggregationState s;
        s.weights = vec({1, 2});
        r->initialize(s);
        r->gather(s, Contribution{vec({1, 1}), vec({0, 0}), 1.0, 0});
        r->gather(s, Contribution{vec({3, 1}), vec({1, 1}), 0.5, 4});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {1.95f, 2.475f});
        expectEqual(s.momentum, {1, 0.5f});
    }

    void asyncDeltaBufferMovesBuffersTowardTheirMean()
    {
        // η = 0.5, no momentum. Parameters: Δ = mean([2, 2], [0, 0]) = [1, 1] → W_p = [1.5, 2.5].
        // Buffers: toward the mean [4, 3] by min(1, η)·Σc/K = 0.5 → [2.5, 2]. Counter: max(3, 7, 4).
        auto r = rule(QStringLiteral("async-delta"), 0.5, 0.5, 0.5, 0.0, true, modelWithBuffers());
        AggregationState s;
        s.weights = vec({1, 2, 1, 1, 3});
        r->initialize(s);
        r->gather(s, Contribution{vec({3, 4, 3, 5, 7}), vec({1, 2, 9, 9, 3}), 1.0, 0});
        r->gather(s, Contribution{vec({1, 2, 5, 1, 4}), vec({1, 2, 0, 0, 0}), 1.0, 0});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {1.5f, 2.5f, 2.5f, 2, 7});
    }

    void aBufferOfOneIsAPlainFold()
    {
        // Every asynchronous rule: gather + fold of one result equals assimilate().
        torch::manual_seed(3);
        for (const char *name : {"vc-asgd", "staleness-aware", "async-delta"}) {
            auto a = rule(QString::fromLatin1(name), 0.4, 0.5, 0.7, 0.9, true, modelWithBuffers());
            auto b = rule(QString::fromLatin1(name), 0.4, 0.5, 0.7, 0.9, true, modelWithBuffers());
            AggregationState one, buffered;
            one.weights = torch::rand({5});
            buffered.weights = one.weights.clone();
            a->initialize(one);
            b->initialize(buffered);
            for (int i = 0; i < 3; ++i) {
                const Contribution c{torch::rand({5}), torch::rand({5}), 0.75, i * 2};
                a->assimilate(one, c);
                b->gather(buffered, c);
                b->foldGathered(buffered);
            }
            QVERIFY2(torch::allclose(one.weights, buffered.weights, 1e-5, 1e-6), name);
        }
    }

    // A round of two workers, outer settings following the fleet (rate 1.25 per worker,
    // momentum 0.9, Nesterov): η = F·(1 − 0.9), where the fleet's factor F goes from 1 to
    // 1.25·min(N, 4) = 2.5 over the first epoch of folded credit (an epoch of one shard here), and the
    // momentum starts warm: after t steps η is divided by 1 − 0.9^(t+1). The round's changes
    // are averaged by credit, not scaled by it: Δ_1 = [2, 0] (credit 0.5), Δ_2 = [0, 4]
    // (credit 1.5) → Δ = (0.5·[2, 0] + 1.5·[0, 4]) / 2 = [0.5, 3]. Round one (nothing folded
    // yet: the step is the plain mean): m = Δ; W += 0.1/0.19·(Δ + 0.9·m) = Δ = [0.5, 3]. Round
    // two (a whole epoch folded, the factor c·N = 2.5), Δ = [1, 1]: m = 0.9·[0.5, 3] + [1, 1] = [1.45, 3.7];
    // W += 0.25/0.271·([1, 1] + 0.9·[1.45, 3.7]) = [2.126384, 3.994465].
    void aRoundTakesOneOuterStepWithTheMeanChangeScaledByTheFleet()
    {
        auto r = createAggregationRule(roundsSpec(1.25, 0.9)).value();
        r->setFleetSize(2);
        AggregationState s;
        s.weights = vec({10, 20});
        r->initialize(s);
        r->gather(s, Contribution{vec({3, 1}), vec({1, 1}), 0.5, 0});
        r->gather(s, Contribution{vec({1, 6}), vec({1, 2}), 1.5, 0});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {10.5f, 23});
        expectEqual(s.momentum, {0.5f, 3});
        QCOMPARE(s.outerSteps, qint64(1));
        QCOMPARE(s.foldedCredit, 2.0);
        r->gather(s, Contribution{vec({2, 2}), vec({1, 1}), 1.0, 0});
        r->gather(s, Contribution{vec({2, 2}), vec({1, 1}), 1.0, 0});
        QVERIFY(r->foldGathered(s));
        expectEqual(s.weights, {12.626384f, 26.994465f});
        expectEqual(s.momentum, {1.45f, 3.7f});

        // The damped rule as it was the default, each result its own version (the second one
        // overtaken, staleness 1): W = [10, 20] + 0.5·[2, 0] + 1.5·[0, 4]/2 = [11, 23], not the
        // round's numbers: these fail against it.
        auto old = createAggregationRule(plainDelta()).value();
        old->setFleetSize(2);
        AggregationState o;
        o.weights = vec({10, 20});
        old->initialize(o);
        old->assimilate(o, Contribution{vec({3, 1}), vec({1, 1}), 0.5, 0});
        old->assimilate(o, Contribution{vec({1, 6}), vec({1, 2}), 1.5, 1});
        expectEqual(o.weights, {11, 23});
        QVERIFY(!torch::allclose(o.weights, vec({10.5f, 23})));
    }

    // A round's running statistics become the mean of its workers' (weighted by credit),
    // whatever the outer rate and momentum do with the parameters (Δ here): they are
    // estimates of the activations, not a direction to carry on. Counters take the largest.
    void aRoundsStatisticsAreTheMeanOfItsWorkers()
    {
        auto r = createAggregationRule(roundsSpec(1.25, 0.9), modelWithBuffers()).value();
        r->setFleetSize(2);
        AggregationState s;
        s.weights = vec({0, 0, 1, 1, 3});
        r->initialize(s);
        r->gather(s, Contribution{vec({1, 1, 3, 5, 7}), vec({0, 0, 1, 1, 3}), 1.0, 0});
        r->gather(s, Contribution{vec({1, 1, 5, 1, 4}), vec({0, 0, 1, 1, 3}), 1.0, 0});
        QVERIFY(r->foldGathered(s));
        // Parameters: Δ = [1, 1], the first round (the plain mean): W += 0.1/0.19·(Δ + 0.9·Δ) = Δ;
        // buffers: the mean [4, 3]; counter 7.
        expectEqual(s.weights, {1, 1, 4, 3, 7});
    }

    // One worker alone: rate 1, no momentum, its change whatever piece of a shard it trained
    // (credit 0.25 here): the global model is the worker's own weights, W + (W_c − W), bit for
    // bit, as the async-delta rule always made it for one worker.
    void aRoundOfOneIsTheWorkersOwnStep()
    {
        torch::manual_seed(5);
        auto r = createAggregationRule(roundsSpec(1.25, 0.9)).value();
        r->setFleetSize(1);
        AggregationState s;
        s.weights = torch::rand({64});
        r->initialize(s);
        for (int i = 0; i < 5; ++i) {
            const torch::Tensor trained = s.weights + 0.01 * torch::randn({64});
            const torch::Tensor expected = s.weights + (trained - s.weights);
            r->assimilate(s, Contribution{trained, s.weights.clone(), 0.25, 0});
            QVERIFY(torch::equal(s.weights, expected));
        }
        QVERIFY(!s.momentum.defined() || s.momentum.abs().sum().item<double>() == 0.0);
    }

    // The rate and momentum follow the fleet: 1 and none for one worker, c·min(N, L)·(1 − μ)
    // and μ for N, started warm: with an epoch of 4 shards, a steady change Δ = 1 (each of the
    // N results worth a shard) moves W by F in each round, F going from 1 (the plain mean) to
    // c·min(N, L) over the first 4 shards' worth of credit (1.25·min(N, L) from then on), the
    // momentum's bias corrected away. L is largest_fleet_step (4 by default).
    void theOuterSettingsFollowTheFleet_data()
    {
        QTest::addColumn<int>("workers");
        QTest::addColumn<int>("largest"); // largest_fleet_step
        QTest::addColumn<double>("step"); // what one round of Δ = 1 moves W
        QTest::newRow("1") << 1 << 4 << 1.0;
        QTest::newRow("2") << 2 << 4 << 1.25 * 2;
        QTest::newRow("4") << 4 << 4 << 1.25 * 4;
        QTest::newRow("8") << 8 << 4 << 1.25 * 4;
        QTest::newRow("8, up to 8") << 8 << 8 << 1.25 * 8;
        QTest::newRow("8, up to 2") << 8 << 2 << 1.25 * 2;
        QTest::newRow("1, up to 1") << 1 << 1 << 1.0;
    }
    void theOuterSettingsFollowTheFleet()
    {
        QFETCH(int, workers);
        QFETCH(int, largest);
        QFETCH(double, step);
        AggregationSpec spec = roundsSpec(1.25, 0.9);
        spec.largestFleetStep = largest;
        auto r = createAggregationRule(spec).value();
        r->setFleetSize(workers);
        r->setEpochSize(4);
        AggregationState s;
        s.weights = vec({0});
        r->initialize(s);
        for (int round = 1; round <= 60; ++round) {
            const double folded = double((round - 1) * workers);
            const double expected = workers == 1 ? step : 1.0 + (step - 1.0) * std::min(1.0, folded / 4.0);
            const float before = s.weights.item<float>();
            for (int i = 0; i < workers; ++i)
                r->gather(s, Contribution{vec({before + 1}), vec({before}), 1.0, 0});
            QVERIFY(r->foldGathered(s));
            QVERIFY2(std::abs(s.weights.item<float>() - before - expected) < 1e-3 * expected,
                     qPrintable(QStringLiteral("round %1 moved W by %2").arg(round).arg(s.weights.item<float>() - before)));
        }
    }

    // adaptive_fleet_step: the gain ratio E|Δ_i|² / |mean Δ|², both running means (0.9 old,
    // 0.1 new) started at the fixed factor's ratio min(N, L) = 4 and the ratio within [1, K];
    // the factor weighs it against 4 as n rounds against 32: (32·4 + n·r)/(32 + n). Four
    // workers, rate 1, no momentum, an epoch of one shard (the warmup over once a round is in):
    // round 1: Δ_i = (1, ±1): E = 2, mean² = 1; E starts at 4 → 3.8, r 3.8; warmup 0 → W = (1, 0)
    // round 2: the same: E = 3.62, F = (128 + 2·3.62)/34 = 3.97765 → W = (4.97765, 0)
    // round 3: Δ_i = (1, 0), all agree: E = 3.358, F = (128 + 3·3.358)/35 → W = (8.92262, 0)
    // round 4: Δ_i = (1, ±7): E = 8.0222, r within 4, F = 4 → W = (12.92262, 0)
    // then agreeing rounds: r = min(4, 1 + 7.0222·0.9^k), and F = (128 + (4 + k)·r)/(36 + k).
    // The fixed factor (the default before) moves W by 4 a round from round 2 on.
    void anAdaptiveFleetStepFollowsTheGainRatio()
    {
        AggregationSpec spec = roundsSpec(1.0, 0.0);
        spec.adaptiveFleetStep = true;
        AggregationState s;
        auto r = fourWorkerRule(spec, s);
        const auto round = [&](float spread) { QVERIFY(foldSpreadRound(*r, s, spread)); };
        round(1);
        expectEqual(s.weights, {1, 0});
        round(1);
        expectEqual(s.weights, {4.97765f, 0});
        round(0);
        expectEqual(s.weights, {8.92262f, 0});
        round(7);
        expectEqual(s.weights, {12.92262f, 0});
        for (const int k : {1, 40, 400}) {
            float before = 0;
            for (int done = 0; done < (k == 1 ? 1 : k == 40 ? 39 : 360); ++done) {
                before = s.weights[0].item<float>();
                round(0);
            }
            const double r = std::min(4.0, 1.0 + 7.0222 * std::pow(0.9, k)); // within [1, K]
            const double expected = (32.0 * 4 + (4 + k) * r) / (36 + k);
            const double last = s.weights[0].item<float>() - before;
            QVERIFY2(std::abs(last - expected) < 2e-3,
                     qPrintable(QStringLiteral("agreeing round %1 moved W by %2, not %3").arg(k).arg(last).arg(expected)));
        }
        // Off, the same rounds move W by 1, then 4 each.
        spec.adaptiveFleetStep = false;
        AggregationState f;
        auto fixed = fourWorkerRule(spec, f);
        for (const float spread : {1.0f, 1.0f, 0.0f, 7.0f})
            QVERIFY(foldSpreadRound(*fixed, f, spread));
        expectEqual(f.weights, {13, 0});
    }

    // normalize_staleness: weights (1+s)^-1 divided by their running mean (an exponential
    // average, 0.9 old, 0.1 new, from the first), reached over the first epoch of credits
    // (4 shards here). Results of staleness 1, credit 1, Δ = 1, rate 1, no momentum:
    // 1st: d = 0.5, mean 0.5, progress 0   → weight 0.5;            W = 0.5
    // 2nd: d = 0.5, mean 0.5, progress 1/4 → 0.5·(1 + 1·0.25) = 0.625; W = 1.125
    // 3rd: progress 2/4 → 0.75;  W = 1.875.   5th on: progress 1 → weight 1.
    void normalizedStalenessWeighsAboutOneAfterTheFirstEpoch()
    {
        AggregationSpec spec = plainDelta();
        spec.normalizeStaleness = true;
        auto r = createAggregationRule(spec).value();
        r->setEpochSize(4);
        AggregationState s;
        s.weights = vec({0});
        const float expected[] = {0.5f, 1.125f, 1.875f, 2.75f, 3.75f, 4.75f};
        for (const float e : expected) {
            r->assimilate(s, Contribution{vec({1}), vec({0}), 1.0, 1});
            expectEqual(s.weights, {e});
        }
        // A fresher result among stale ones weighs more than 1: d = 1 against a mean of
        // 0.9·0.5 + 0.1·1 = 0.55 → 1/0.55.
        r->assimilate(s, Contribution{vec({1}), vec({0}), 1.0, 0});
        expectEqual(s.weights, {4.75f + 1.0f / 0.55f});
    }

    void unknownRuleIsAnError()
    {
        AggregationSpec spec;
        spec.rule = QStringLiteral("fedprox");
        auto r = createAggregationRule(spec);
        QVERIFY(!r);
        QVERIFY(r.error().contains(QStringLiteral("fedprox")));
    }
};

QTEST_GUILESS_MAIN(TestAggregation)
#include "tst_aggregation.moc"
