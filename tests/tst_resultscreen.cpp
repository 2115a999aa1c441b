// Result screening on its own: synthetic honest updates (a shared direction plus per-shard
// noise, as data-parallel training gives) against each attack, with the thresholds the
// coordinator uses. No clock, no disk, no coordinator.
#include "engine/coordination/ResultScreen.h"

#include <QtTest>

#include <set>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

constexpr std::int64_t kParameters = 5000;

WeightSegments parametersOnly(std::int64_t n)
{
    WeightSegments s;
    s.parameterEnd = s.bufferEnd = s.total = n;
    return s;
}

// A stream of honest updates: each is the fleet's common descent direction plus noise of
// the same size (a signal-to-noise ratio of one), so honest cosines against the consensus
// spread widely around a modest mean, as they do late in real training.
struct Fleet
{
    torch::Generator generator = at::detail::createCPUGenerator(42);
    torch::Tensor direction;
    torch::Tensor model;

    Fleet()
    {
        direction = torch::randn({kParameters}, generator);
        direction /= direction.norm();
        model = torch::randn({kParameters}, generator);
    }
    torch::Tensor honestUpdate(double scale = 1.0)
    {
        torch::Tensor noise = torch::randn({kParameters}, generator);
        noise *= 1.0 / noise.norm().item<double>();
        return (direction + noise) * (0.05 * scale);
    }
};

// Feeds n honest results through the screen; returns how many it rejected.
int warmUp(ResultScreen &screen, Fleet &fleet, int n)
{
    int rejected = 0;
    for (int i = 0; i < n; ++i) {
        const torch::Tensor base = screen.sample(fleet.model);
        const torch::Tensor result = screen.sample(fleet.model + fleet.honestUpdate());
        const auto v = screen.judge(result, base, 0.1, 1.0);
        if (v.reject) {
            ++rejected;
            continue;
        }
        screen.accepted(result, base, v);
    }
    return rejected;
}

} // namespace

class TestResultScreen : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void honestResultsAreNeverRejected()
    {
        // 2,000 honest results of varying size, credit and learning rate: zero rejections.
        ResultScreen screen(parametersOnly(kParameters), 7);
        Fleet fleet;
        QCOMPARE(warmUp(screen, fleet, 16), 0);
        int rejected = 0;
        QString why;
        for (int i = 0; i < 2000; ++i) {
            const double credit = i % 5 == 0 ? 0.3 : 1.0;       // partial results train less
            const double lr = i % 7 == 0 ? 0.05 : 0.1;          // a schedule lowers the rate
            const double scale = lr / 0.1 * std::sqrt(credit) * (0.6 + 0.8 * (i % 11) / 10.0);
            const torch::Tensor base = screen.sample(fleet.model);
            const torch::Tensor result = screen.sample(fleet.model + fleet.honestUpdate(scale));
            const auto v = screen.judge(result, base, lr, credit);
            if (v.reject) {
                ++rejected;
                why = v.reason;
                continue;
            }
            screen.accepted(result, base, v);
        }
        QVERIFY2(rejected == 0, qPrintable(QStringLiteral("%1 honest results rejected, e.g. %2").arg(rejected).arg(why)));
    }

    // A model that converges: every worker's update shrinks to a tenth within a few results.
    // The accepted window still remembers the large ones, but what the fleet sends now is
    // small too, so the honest results pass (before, each was refused as "barely trained",
    // the window never moved, and every worker ended in quarantine); a free rider among them,
    // small against both, is still refused.
    void aConvergingFleetIsNotAFreeRider()
    {
        ResultScreen screen(parametersOnly(kParameters), 7);
        Fleet fleet;
        QCOMPARE(warmUp(screen, fleet, 32), 0);
        int rejected = 0;
        QString why;
        for (int i = 0; i < 200; ++i) {
            const torch::Tensor base = screen.sample(fleet.model);
            const torch::Tensor result = screen.sample(fleet.model + fleet.honestUpdate(0.0002));
            const auto v = screen.judge(result, base, 0.1, 1.0);
            screen.observed(v);
            if (v.reject) {
                ++rejected;
                why = v.reason;
                continue;
            }
            screen.accepted(result, base, v);
        }
        // The first few, before the screen has seen the fleet's new size, may be refused.
        QVERIFY2(rejected <= screen.config().seenWarmup,
                 qPrintable(QStringLiteral("%1 of 200 honest results refused, e.g. %2").arg(rejected).arg(why)));

        // Among honest results of the usual size, a lone tiny one is still a free rider.
        ResultScreen fresh(parametersOnly(kParameters), 9);
        QCOMPARE(warmUp(fresh, fleet, 32), 0);
        for (int i = 0; i < 8; ++i) {
            const torch::Tensor base = fresh.sample(fleet.model);
            const torch::Tensor result = fresh.sample(fleet.model + fleet.honestUpdate());
            const auto v = fresh.judge(result, base, 0.1, 1.0);
            fresh.observed(v);
            QVERIFY(!v.reject);
            fresh.accepted(result, base, v);
        }
        const torch::Tensor base = fresh.sample(fleet.model);
        const auto rider = fresh.judge(fresh.sample(fleet.model + fleet.direction * 1e-4f), base, 0.1, 1.0);
        QVERIFY(rider.reject);
        QVERIFY2(rider.reason.contains(QStringLiteral("barely trained")), qPrintable(rider.reason));
    }

    void absoluteChecksNeedNoHistory()
    {
        ResultScreen screen(parametersOnly(kParameters), 7);
        Fleet fleet;
        const torch::Tensor base = screen.sample(fleet.model);
        QVERIFY(!screen.warmedUp());
        // The global model scaled by 50: an update 49 times the model.
        auto scaled = screen.judge(screen.sample(fleet.model * 50.0f), base, 0.1, 1.0);
        QVERIFY(scaled.reject);
        QVERIFY2(scaled.reason.contains(QStringLiteral("times the size of the model")), qPrintable(scaled.reason));
        // The base sent back unchanged while claiming a whole subtask.
        auto idle = screen.judge(base.clone(), base, 0.1, 1.0);
        QVERIFY(idle.reject);
        QVERIFY2(idle.reason.contains(QStringLiteral("nothing was trained")), qPrintable(idle.reason));
        // ... but a result that trained almost nothing because it was preempted at once is fine.
        QVERIFY(!screen.judge(base.clone(), base, 0.1, 0.01).reject);
    }

    // A screen that samples some of the parameters cannot tell from its sample alone that
    // nothing was trained: it refuses nothing and says the sample did not move, and the whole
    // weights decide (their parameters only: buffers move without training).
    void anUnmovedSampleOfSomeParametersIsLeftToTheWholeWeights()
    {
        constexpr std::int64_t kMany = 40000;
        WeightSegments segments;
        segments.parameterEnd = kMany;
        segments.bufferEnd = segments.total = kMany + 10; // 10 running statistics after them
        ResultScreen screen(segments, 7);
        const torch::Tensor model = torch::randn({kMany + 10});
        const torch::Tensor sampled = screen.sample(torch::arange(kMany + 10, torch::kFloat)).to(torch::kLong);
        QCOMPARE(sampled.numel(), ResultScreen::Config().sampleSize);
        QVERIFY(sampled.max().item<std::int64_t>() < kMany); // parameters only
        std::set<std::int64_t> inSample;
        for (std::int64_t i = 0; i < sampled.numel(); ++i)
            inSample.insert(sampled[i].item<std::int64_t>());
        std::int64_t unsampled = kMany - 1;
        while (inSample.count(unsampled))
            --unsampled;
        torch::Tensor trained = model.clone();
        trained[unsampled] += 0.5f;
        const auto v = screen.judge(screen.sample(trained), screen.sample(model), 0.1, 1.0);
        QVERIFY(v.unchangedSample);
        QVERIFY2(!v.reject, qPrintable(v.reason));
        QVERIFY(!screen.sameParameters(trained, model));
        QVERIFY(screen.sameParameters(model.clone(), model));
        torch::Tensor statistics = model.clone();
        statistics[kMany + 3] += 1.0f; // only a running statistic moved
        QVERIFY(screen.sameParameters(statistics, model));
        QVERIFY(screen.unchangedWork(1.0).contains(QStringLiteral("nothing was trained")));
        QVERIFY(screen.unchangedWork(0.01).isEmpty()); // preempted at once: fine
        // A screen whose sample is every parameter still decides on its own.
        ResultScreen small(parametersOnly(kParameters), 7);
        const torch::Tensor base = small.sample(torch::randn({kParameters}));
        const auto idle = small.judge(base.clone(), base, 0.1, 1.0);
        QVERIFY(idle.unchangedSample && idle.reject);
    }

    void eachAttackIsRejectedOnceWarmedUp()
    {
        ResultScreen screen(parametersOnly(kParameters), 7);
        Fleet fleet;
        QCOMPARE(warmUp(screen, fleet, 64), 0);
        QVERIFY(screen.warmedUp());
        const torch::Tensor base = screen.sample(fleet.model);
        const torch::Tensor honest = fleet.honestUpdate();

        // sign-flip: the honest update reversed. Its size is honest; its direction is not.
        auto flipped = screen.judge(screen.sample(fleet.model - fleet.direction * 0.1f), base, 0.1, 1.0);
        QVERIFY2(flipped.reject, qPrintable(QStringLiteral("cosine %1").arg(flipped.cosine)));
        QVERIFY2(flipped.reason.contains(QStringLiteral("against the fleet")), qPrintable(flipped.reason));

        // noise: Gaussian noise of σ = 0.1 on every value, far larger than an update.
        const torch::Tensor noisy = fleet.model + honest + torch::randn({kParameters}, fleet.generator) * 0.1f;
        auto noise = screen.judge(screen.sample(noisy), base, 0.1, 1.0);
        QVERIFY(noise.reject);
        QVERIFY2(noise.reason.contains(QStringLiteral("size of recent accepted updates")), qPrintable(noise.reason));

        // free-rider with a fig leaf: a tiny random change instead of training.
        const torch::Tensor lazy = fleet.model + torch::randn({kParameters}, fleet.generator) * 1e-5f;
        auto rider = screen.judge(screen.sample(lazy), base, 0.1, 1.0);
        // (Its random change has no direction either, which is what catches it first.)
        QVERIFY(rider.reject);
        QVERIFY2(rider.reason.contains(QStringLiteral("barely trained"))
                     || rider.reason.contains(QStringLiteral("against the fleet")),
                 qPrintable(rider.reason));
        // A lazy result that keeps the fleet's direction is caught by its size alone.
        const torch::Tensor timid = fleet.model + fleet.direction * 1e-4f;
        auto shy = screen.judge(screen.sample(timid), base, 0.1, 1.0);
        QVERIFY(shy.reject);
        QVERIFY2(shy.reason.contains(QStringLiteral("barely trained")), qPrintable(shy.reason));

        // stale-replay: an old model returned as new, i.e. the fleet's progress undone.
        const torch::Tensor old = fleet.model - fleet.direction * 0.4f;
        auto stale = screen.judge(screen.sample(old), base, 0.1, 1.0);
        QVERIFY(stale.reject);

        // And an honest result at the same moment passes.
        QVERIFY(!screen.judge(screen.sample(fleet.model + honest), base, 0.1, 1.0).reject);
        // So does a large one in the fleet's direction (the model was set back and is
        // recovering), up to the hard limit.
        auto recovering = screen.judge(screen.sample(fleet.model + fleet.direction * 1.0f), base, 0.1, 1.0);
        QVERIFY2(!recovering.reject, qPrintable(recovering.reason));
        auto absurd = screen.judge(screen.sample(fleet.model + fleet.direction * 20.0f), base, 0.1, 1.0);
        QVERIFY(absurd.reject);
    }

    void reversedUpdatesAreCaughtEarly()
    {
        // Directions are judged as soon as one cosine is known (the third result), long before
        // sizes are: the first updates of a job are the most aligned, and a reversed one then
        // does the most harm.
        ResultScreen screen(parametersOnly(kParameters), 7);
        Fleet fleet;
        QCOMPARE(warmUp(screen, fleet, 4), 0);
        QVERIFY(!screen.warmedUp());
        QVERIFY(screen.directionsKnown());
        const torch::Tensor base = screen.sample(fleet.model);
        auto flipped = screen.judge(screen.sample(fleet.model - fleet.honestUpdate()), base, 0.1, 1.0);
        QVERIFY2(flipped.reject, qPrintable(QStringLiteral("cosine %1").arg(flipped.cosine)));
    }

    void onlyParametersAreSampled()
    {
        // 100 parameters, then 40 buffer values and 10 counters: the sample is the parameters.
        WeightSegments s;
        s.parameterEnd = 100;
        s.bufferEnd = 140;
        s.total = 150;
        ResultScreen small(s, 1);
        const torch::Tensor flat = torch::arange(150, torch::kFloat32);
        QVERIFY(torch::equal(small.sample(flat), torch::arange(100, torch::kFloat32)));

        // A large model: a fixed sample of the configured size, the same for the same seed,
        // drawn from the parameters only.
        ResultScreen::Config config;
        config.sampleSize = 64;
        s.parameterEnd = 1000;
        s.bufferEnd = 1500;
        s.total = 1600;
        ResultScreen a(s, 5, config);
        ResultScreen b(s, 5, config);
        ResultScreen c(s, 6, config);
        const torch::Tensor big = torch::arange(1600, torch::kFloat32);
        QCOMPARE(a.sample(big).numel(), std::int64_t(64));
        QVERIFY(torch::equal(a.sample(big), b.sample(big)));
        QVERIFY(!torch::equal(a.sample(big), c.sample(big)));
        QVERIFY(a.sample(big).max().item<float>() < 1000.0f);
    }

    void medianAndDeviation()
    {
        QCOMPARE(median({3, 1, 2}), 2.0);
        QCOMPARE(median({4, 1, 3, 2}), 2.5);
        QCOMPARE(median({}), 0.0);
        QCOMPARE(medianAbsoluteDeviation({1, 2, 3, 4, 100}, 3.0), 1.0);
    }
};

QTEST_GUILESS_MAIN(TestResultScreen)
#include "tst_resultscreen.moc"
