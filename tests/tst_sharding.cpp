// Shard plans and the deterministic randomness under them: coverage, balance, determinism,
// per-epoch orders, and outputs pinned so that a change of the generator (or a platform
// that computes it differently) is caught.
#include "common/Random.h"
#include "engine/data/ShardPlan.h"

#include <QtTest>

#include <algorithm>
#include <numeric>
#include <set>

using namespace flotilla;

namespace {

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v)
{
    std::sort(v.begin(), v.end());
    return v;
}

std::vector<std::int64_t> iota(std::int64_t n)
{
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    std::iota(v.begin(), v.end(), std::int64_t{0});
    return v;
}

std::vector<std::vector<std::int64_t>> allShards(const ShardPlan &plan)
{
    std::vector<std::vector<std::int64_t>> out;
    for (int s = 0; s < plan.numShards(); ++s)
        out.push_back(plan.shard(s));
    return out;
}

} // namespace

class TestSharding : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void coversEverySampleOnce_data()
    {
        QTest::addColumn<qint64>("samples");
        QTest::addColumn<int>("shards");
        QTest::addColumn<quint64>("seed");
        QTest::newRow("10/3") << qint64(10) << 3 << quint64(1);
        QTest::newRow("1000/7") << qint64(1000) << 7 << quint64(99);
        QTest::newRow("60000/30") << qint64(60000) << 30 << quint64(1);
        QTest::newRow("5/5") << qint64(5) << 5 << quint64(3);
        QTest::newRow("7/1") << qint64(7) << 1 << quint64(0);
        QTest::newRow("101/10") << qint64(101) << 10 << quint64(~0ULL);
    }
    void coversEverySampleOnce()
    {
        QFETCH(qint64, samples);
        QFETCH(int, shards);
        QFETCH(quint64, seed);
        const ShardPlan plan(samples, shards, seed);
        QCOMPARE(plan.numShards(), shards);
        QCOMPARE(plan.numSamples(), std::int64_t(samples));

        std::vector<std::int64_t> all;
        std::int64_t smallest = samples;
        std::int64_t largest = 0;
        for (int s = 0; s < shards; ++s) {
            const auto shard = plan.shard(s);
            QCOMPARE(std::int64_t(shard.size()), plan.shardSize(s));
            smallest = std::min(smallest, plan.shardSize(s));
            largest = std::max(largest, plan.shardSize(s));
            all.insert(all.end(), shard.begin(), shard.end());
        }
        QCOMPARE(std::int64_t(all.size()), std::int64_t(samples));
        QVERIFY(sorted(all) == iota(samples)); // every index exactly once
        QVERIFY2(largest - smallest <= 1, qPrintable(QStringLiteral("sizes %1..%2").arg(smallest).arg(largest)));
        QCOMPARE(smallest, std::int64_t(samples / shards));
    }

    void shardsAreShuffledNotContiguous()
    {
        const ShardPlan plan(1000, 4, 5);
        const auto first = plan.shard(0);
        QVERIFY(first != iota(250));
        // Not even a contiguous block in another order.
        QVERIFY(sorted(first) != iota(250));
    }

    void sameSeedGivesTheSamePlan()
    {
        const ShardPlan a(500, 6, 42);
        const ShardPlan b(500, 6, 42);
        QVERIFY(allShards(a) == allShards(b));
        for (int s = 0; s < 6; ++s)
            for (int e = 0; e < 3; ++e)
                QVERIFY(a.epochOrder(s, e) == b.epochOrder(s, e));
    }

    void differentSeedGivesADifferentPlan()
    {
        const ShardPlan a(500, 6, 42);
        const ShardPlan b(500, 6, 43);
        QVERIFY(allShards(a) != allShards(b));
        for (int s = 0; s < 6; ++s)
            QVERIFY(a.shard(s) != b.shard(s));
        QVERIFY(a.epochOrder(0, 0) != b.epochOrder(0, 0));
    }

    void epochOrderIsAPermutationOfTheShard()
    {
        const ShardPlan plan(300, 3, 11);
        for (int s = 0; s < 3; ++s) {
            const auto shard = plan.shard(s);
            std::set<std::vector<std::int64_t>> orders;
            for (int e = 0; e < 5; ++e) {
                const auto order = plan.epochOrder(s, e);
                QCOMPARE(order.size(), shard.size());
                QVERIFY(sorted(order) == sorted(shard));
                QVERIFY(order != shard);
                orders.insert(order);
            }
            QCOMPARE(int(orders.size()), 5); // each epoch visits the shard in its own order
            // Same epoch, same order, every time it is asked.
            QVERIFY(plan.epochOrder(s, 2) == plan.epochOrder(s, 2));
        }
        // Two shards in the same epoch are not shuffled with the same stream: the orders of
        // equal-sized shards differ in their position pattern.
        const ShardPlan even(200, 2, 11);
        auto rank = [&](int s) {
            const auto base = even.shard(s);
            const auto order = even.epochOrder(s, 0);
            std::vector<std::int64_t> positions;
            for (const auto v : order)
                positions.push_back(std::find(base.begin(), base.end(), v) - base.begin());
            return positions;
        };
        QVERIFY(rank(0) != rank(1));
    }

    void deterministicAcrossInstances()
    {
        // As a coordinator and a worker would: built separately, from the same inputs.
        auto make = [] { return std::make_unique<ShardPlan>(60000, 30, 1); };
        const auto coordinator = make();
        const auto worker = make();
        for (const int s : {0, 7, 29})
            for (const int e : {0, 1, 9})
                QVERIFY(coordinator->epochOrder(s, e) == worker->epochOrder(s, e));
    }

    void smallPlanIsPinned()
    {
        // Computed once with this implementation; a change here changes every shard of every
        // existing run, which then cannot be resumed.
        const ShardPlan plan(10, 3, 1);
        QVERIFY(plan.shard(0) == (std::vector<std::int64_t>{3, 2, 4, 7}));
        QVERIFY(plan.shard(1) == (std::vector<std::int64_t>{6, 1, 5}));
        QVERIFY(plan.shard(2) == (std::vector<std::int64_t>{8, 9, 0}));
        QVERIFY(plan.epochOrder(0, 0) == (std::vector<std::int64_t>{7, 3, 2, 4}));
        QVERIFY(plan.epochOrder(0, 1) == (std::vector<std::int64_t>{2, 7, 3, 4}));
    }

    void splitMix64IsPinned()
    {
        // Seed 0 gives the reference SplitMix64 sequence (Vigna's splitmix64.c).
        SplitMix64 zero(0);
        QCOMPARE(zero.next(), std::uint64_t(0xE220A8397B1DCDAFULL));
        QCOMPARE(zero.next(), std::uint64_t(0x6E789E6AA1B965F4ULL));
        QCOMPARE(zero.next(), std::uint64_t(0x06C45D188009454FULL));

        SplitMix64 g(1234567);
        QCOMPARE(g.next(), std::uint64_t(0x599ED017FB08FC85ULL));
        QCOMPARE(g.next(), std::uint64_t(0x2C73F08458540FA5ULL));
        QCOMPARE(g.next(), std::uint64_t(0x883EBCE5A3F27C77ULL));

        SplitMix64 b(42);
        QList<quint64> draws;
        for (int i = 0; i < 5; ++i)
            draws << b.below(10);
        QCOMPARE(draws, (QList<quint64>{3, 1, 8, 4, 0}));

        SplitMix64 u(42);
        QCOMPARE(u.uniform(), 0.74156487877182331);

        QCOMPARE(mixSeed(1, 2), std::uint64_t(0xF977A0EAB49FFB2FULL));
        QVERIFY(mixSeed(1, 2) != mixSeed(2, 1));
    }

    void deterministicShuffleIsPinned()
    {
        std::vector<int> v(10);
        std::iota(v.begin(), v.end(), 0);
        deterministicShuffle(v, 7);
        QVERIFY(v == (std::vector<int>{8, 1, 5, 9, 0, 4, 3, 2, 6, 7}));

        std::vector<int> again(10);
        std::iota(again.begin(), again.end(), 0);
        deterministicShuffle(again, 7);
        QVERIFY(again == v);
        deterministicShuffle(again, 8);
        QVERIFY(again != v);

        std::vector<int> empty;
        deterministicShuffle(empty, 7);
        QVERIFY(empty.empty());
        std::vector<int> one{5};
        deterministicShuffle(one, 7);
        QCOMPARE(one.front(), 5);
    }

    void belowAndUniformStayInRange()
    {
        SplitMix64 g(2024);
        std::vector<int> counts(3, 0);
        for (int i = 0; i < 30000; ++i) {
            const std::uint64_t r = g.below(3);
            QVERIFY(r < 3);
            ++counts[static_cast<std::size_t>(r)];
        }
        for (const int c : counts)
            QVERIFY2(c > 9500 && c < 10500, qPrintable(QString::number(c)));
        QCOMPARE(g.below(1), std::uint64_t(0));
        // A bound just above 2^63 rejects almost half the draws and still stays below it.
        const std::uint64_t big = (std::uint64_t(1) << 63) + 12345;
        for (int i = 0; i < 100; ++i)
            QVERIFY(g.below(big) < big);
        for (int i = 0; i < 1000; ++i) {
            const double x = g.uniform();
            QVERIFY(x >= 0.0 && x < 1.0);
        }
    }
};

QTEST_GUILESS_MAIN(TestSharding)
#include "tst_sharding.moc"
