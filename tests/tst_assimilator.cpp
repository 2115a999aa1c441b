// The assimilation core on its own: no store, no network, a fake clock. What the coordinator
// and the simulator both rely on: seq and version, staleness, credit, the lease policy by
// measured speed and for idle workers at the tail, the speed and loss averages, round closing,
// and a fold that would make the model non-finite being undone.
#include "FakeClock.h"
#include "engine/coordination/Assimilator.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace flotilla;
using flotilla::test::FakeClock;

namespace {

constexpr int kParameters = 8;

std::unique_ptr<Assimilator> make(FakeClock &clock, const QString &rule, int epochs, std::vector<qint64> shards,
                                  AssimilatorConfig config = {})
{
    AggregationSpec spec;
    spec.rule = rule;
    spec.alpha = 0.5;
    // The rule's plain form (the rounds' own settings have tests of their own below).
    spec.rounds = config.rounds;
    spec.outerScaledByFleet = false;
    spec.normalizeStaleness = false;
    spec.outerMomentum = 0.0;
    spec.outerLearningRate = 1.0;
    spec.stalenessDamping = 1.0;
    auto created = createAggregationRule(spec);
    if (!created)
        qFatal("%s", qPrintable(created.error()));
    config.schedule.epochs = epochs;
    config.schedule.shardSizes = std::move(shards);
    auto core = std::make_unique<Assimilator>(config, std::move(created).value(), &clock);
    AggregationState initial;
    initial.weights = torch::zeros({kParameters});
    core->start(std::move(initial), 0, 0);
    return core;
}

torch::Tensor filled(float value)
{
    return torch::full({kParameters}, value);
}

} // namespace

class TestAssimilator : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void foldCountsSeqVersionAndStaleness()
    {
        FakeClock clock;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {10, 10, 10});
        auto a = core->grant(1);
        auto b = core->grant(2);
        QVERIFY(a && b);
        QCOMPARE(a->lease.baseVersion, qint64(0));
        const auto admitA = core->admit(a->subtask, 10, 10);
        QCOMPARE(admitA.covered, qint64(10));
        QCOMPARE(admitA.credit, 1.0);
        FoldOutcome f = core->fold(a->lease, a->subtask, admitA, filled(2.0f), {}, 0.8, false);
        QVERIFY(f.folded);
        QCOMPARE(f.seq, qint64(1));
        QCOMPARE(f.version, qint64(1));
        QCOMPARE(f.staleness, qint64(0));
        // vc-asgd with α = 0.5 and full credit: W = 0.5·0 + 0.5·2.
        QCOMPARE(core->state().weights[0].item<float>(), 1.0f);
        // b started from version 0 and arrives after a: staleness 1.
        f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), filled(3.0f), {}, 0.4, false);
        QCOMPARE(f.staleness, qint64(1));
        QCOMPARE(f.version, qint64(2));
        QCOMPARE(core->state().weights[0].item<float>(), 2.0f);
        QCOMPARE(core->maxStaleness(), qint64(1));
        QCOMPARE(core->recentStaleness(), 0.5);
        // The loss average: the first result, then 0.9 old + 0.1 new.
        QVERIFY(std::abs(core->lossEma() - (0.9 * 0.8 + 0.1 * 0.4)) < 1e-12);
        // A grant after the folds starts from the new version, with a fresh snapshot.
        auto c = core->grant(3);
        QCOMPARE(c->lease.baseVersion, qint64(2));
        QCOMPARE(core->snapshot()[0].item<float>(), 2.0f);
    }

    void theLastResultOfAnEpochClosesIt()
    {
        FakeClock clock;
        auto core = make(clock, QStringLiteral("vc-asgd"), 2, {10, 10});
        auto a = core->grant(1);
        auto b = core->grant(1);
        QVERIFY(a && b);
        QVERIFY(!core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), filled(1), {}, 1, false).epochClosed);
        const FoldOutcome f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), filled(1), {}, 1, false);
        QVERIFY(f.epochClosed);
        QVERIFY(!f.roundClosed); // an asynchronous rule has no rounds
        QCOMPARE(core->scheduler().epochsDone(), 1);
    }

    void synchronousRoundsCloseWithTheEpoch()
    {
        FakeClock clock;
        auto core = make(clock, QStringLiteral("sync-average"), 2, {10, 10});
        auto a = core->grant(1);
        auto b = core->grant(2);
        QVERIFY(a && b);
        QVERIFY(!core->grant(3)); // the next round waits for this one
        FoldOutcome f = core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), filled(2), {}, 1, false);
        QVERIFY(!f.roundClosed);
        QCOMPARE(f.version, qint64(0)); // results of an open round leave W alone
        f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), filled(4), {}, 1, false);
        QVERIFY(f.epochClosed);
        QVERIFY(f.roundClosed);
        QCOMPARE(f.version, qint64(1));
        QCOMPARE(core->state().weights[0].item<float>(), 3.0f); // the round's mean
        auto next = core->grant(3);
        QVERIFY(next);
        QCOMPARE(next->subtask.epoch, 1);
    }

    void aNonFiniteFoldIsUndone()
    {
        FakeClock clock;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {10, 10});
        auto a = core->grant(1);
        const float huge = std::numeric_limits<float>::max();
        // Half of the largest float is still finite.
        FoldOutcome first = core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), filled(huge), {}, 1, false);
        QVERIFY(first.folded);
        auto b = core->grant(2);
        // With an undo copy the core puts the state back itself...
        torch::Tensor inf = filled(huge) * 2; // inf as float
        QVERIFY(!std::isfinite(inf[0].item<float>()));
        const FoldOutcome undone = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), inf, {}, 1, true);
        QVERIFY(!undone.folded);
        QVERIFY(!undone.restoreNeeded);
        QVERIFY(undone.refusal.contains(QStringLiteral("non-finite")));
        QCOMPARE(core->seq(), qint64(1));
        QCOMPARE(core->version(), qint64(1));
        QVERIFY(std::isfinite(core->state().weights[0].item<float>()));
        // ...and the subtask stays open for another result.
        QCOMPARE(core->scheduler().check(b->lease.id).verdict, Scheduler::Verdict::Accept);
        // Without one, the caller must restore it.
        const FoldOutcome broken = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), inf, {}, 1, false);
        QVERIFY(broken.restoreNeeded);
        AggregationState good;
        good.weights = filled(1.0f);
        core->restore(good);
        QCOMPARE(core->state().weights[0].item<float>(), 1.0f);
        QCOMPARE(core->seq(), qint64(1));
    }

    void speedsAreReportedThenMeasured()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.targetSubtaskSeconds = 10;
        config.leaseTimeoutSeconds = 600;
        config.batchSize = 4;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {1000}, config);
        QCOMPARE(core->speed(7), 0.0);
        core->reportSpeed(7, 20);
        QCOMPARE(core->speed(7), 20.0);
        core->reportSpeed(7, 50); // a report never overrides a known speed
        QCOMPARE(core->speed(7), 20.0);
        core->reportSpeed(8, std::numeric_limits<double>::quiet_NaN());
        QCOMPARE(core->speed(8), 0.0);
        // Measured: 0.7 of the old and 0.3 of the new.
        core->measureSpeed(7, 100, 1.0);
        QVERIFY(std::abs(core->speed(7) - (0.7 * 20 + 0.3 * 100)) < 1e-9);
        core->measureSpeed(7, 100, 0.0); // no time: nothing learned
        QVERIFY(std::abs(core->speed(7) - 44.0) < 1e-9);
        // The lease follows it: 44 samples/s × 10 s = 440 positions.
        auto g = core->grant(7);
        QCOMPARE(g->subtask.size(), qint64(440));
        // An unknown worker gets the rest of the shard whole.
        auto h = core->grant(9);
        QCOMPARE(h->subtask.size(), qint64(560));
    }

    void creditIsTheShareOfAShardsWork()
    {
        FakeClock clock;
        AssimilatorConfig steps;
        steps.localSteps = 5;
        steps.batchSize = 4;
        auto byEpochs = make(clock, QStringLiteral("vc-asgd"), 1, {40, 40});
        auto g = byEpochs->grant(1);
        QCOMPARE(byEpochs->admit(g->subtask, 10, 10).credit, 0.25);
        // Counted in local steps: a shard's work is 5 steps of 4 samples.
        auto bySteps = make(clock, QStringLiteral("vc-asgd"), 1, {40, 40}, steps);
        auto h = bySteps->grant(1);
        QCOMPARE(bySteps->admit(h->subtask, 10, 40).credit, 0.5);
    }

    void aLateResultPastASplitIsAdmittedOrRefused()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.leaseTimeoutSeconds = 1;
        config.targetSubtaskSeconds = 1;
        config.batchSize = 1;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {100, 100}, config);
        auto a = core->grant(1);
        clock.advance(2000);
        core->scheduler().expire();
        core->reportSpeed(2, 40); // slow: 40 positions
        auto b = core->grant(2);
        QCOMPARE(b->subtask.size(), qint64(40));
        const Scheduler::Check late = core->scheduler().check(a->lease.id);
        const auto admission = core->admit(late.subtask, 100, 100);
        QVERIFY(admission.duplicate.isEmpty());
        QCOMPARE(admission.covered, qint64(100));
        QCOMPARE(admission.credit, 1.0);
        const FoldOutcome f = core->fold(late.lease, late.subtask, admission, filled(1), {}, 1, false);
        QCOMPARE(f.covered, qint64(100));
        QVERIFY(core->scheduler().checkIntegrity().isEmpty());
        // The other shard is all that is left.
        QCOMPARE(core->scheduler().queuedCount(), 1);
    }

    void aBufferFoldsItsResultsAsOneVersion()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.buffer = 2;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {10, 10, 10}, config);
        QCOMPARE(core->bufferSize(), 2);
        auto a = core->grant(1);
        auto b = core->grant(2);
        auto c = core->grant(3);
        QVERIFY(a && b && c);
        FoldOutcome f = core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), filled(2), {}, 1, false);
        // Buffered: nothing assimilated, the subtask still leased, the model unchanged.
        QVERIFY(f.buffered);
        QVERIFY(!f.folded);
        QVERIFY(f.results.empty());
        QCOMPARE(core->seq(), qint64(0));
        QCOMPARE(core->version(), qint64(0));
        QCOMPARE(core->buffered(), 1);
        QVERIFY(core->scheduler().subtask(a->subtask.id)->state == SubtaskState::Leased);
        QCOMPARE(core->state().weights[0].item<float>(), 0.0f);
        QVERIFY(!core->flushDue()); // c is still out
        // The second fills the buffer: W = 0 + ½·(0.5·2 + 0.5·4) = 1.5, one version, two seqs.
        f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), filled(4), {}, 1, false);
        QVERIFY(f.folded);
        QCOMPARE(int(f.results.size()), 2);
        QCOMPARE(f.results[0].seq, qint64(1));
        QCOMPARE(f.results[1].seq, qint64(2));
        QCOMPARE(f.results[0].staleness, qint64(0));
        QCOMPARE(f.version, qint64(1));
        QCOMPARE(core->state().weights[0].item<float>(), 1.5f);
        QVERIFY(core->scheduler().subtask(a->subtask.id)->state == SubtaskState::Done);
        QCOMPARE(core->scheduler().subtask(a->subtask.id)->assimilatedSeq, qint64(1));
        // c started from version 0: staleness 1. Alone in the buffer with nothing else out,
        // it is due; the flush folds it (W = 1.5 + 0.5·(6 − 1.5)) and closes the epoch.
        f = core->fold(c->lease, c->subtask, core->admit(c->subtask, 10, 10), filled(6), {}, 1, false);
        QVERIFY(f.buffered && !f.folded);
        QCOMPARE(f.staleness, qint64(1));
        QVERIFY(core->flushDue());
        f = core->flush(false);
        QVERIFY(f.folded);
        QVERIFY(f.epochClosed);
        QCOMPARE(int(f.results.size()), 1);
        QCOMPARE(f.results[0].staleness, qint64(1));
        QCOMPARE(core->version(), qint64(2));
        QCOMPARE(core->seq(), qint64(3));
        QCOMPARE(core->state().weights[0].item<float>(), 3.75f);
        QVERIFY(core->scheduler().finished());
        QVERIFY(core->scheduler().checkIntegrity().isEmpty());
    }

    // A round's pieces are balanced in whole batches: shards of 600 positions at batch 32 under
    // rounds of 8 steps are trained as 7 + 6 + 6 steps, so that two workers' leases of a round
    // take about as long (the cut at the bound, 8 + 8 + 3, left one idle for most of a round).
    // Rounds of pieces of at most `steps` batches of `batch`.
    static AssimilatorConfig roundsOf(int batch, int steps)
    {
        AssimilatorConfig config;
        config.rounds = true;
        config.batchSize = batch;
        config.roundSteps = steps;
        return config;
    }

    void aRoundsPiecesAreBalanced()
    {
        FakeClock clock;
        const AssimilatorConfig config = roundsOf(32, 8);
        auto core = make(clock, QStringLiteral("async-delta"), 1, {600, 600}, config);
        core->setBufferSize(2);
        auto a = core->grant(1);
        auto b = core->grant(2);
        QVERIFY(a && b);
        QCOMPARE(a->subtask.size(), qint64(224));
        QCOMPARE(b->subtask.size(), qint64(224)); // shard 1's first piece
        QVERIFY(core->fold(a->lease, a->subtask, core->admit(a->subtask, 224, 224), filled(1), filled(0), 1, false).buffered);
        QVERIFY(core->fold(b->lease, b->subtask, core->admit(b->subtask, 224, 224), filled(1), filled(0), 1, false).folded);
        auto c = core->grant(1);
        auto d = core->grant(2);
        QVERIFY(c && d);
        QCOMPARE(c->subtask.size(), qint64(192)); // the rest of shard 0, 12 steps: 6 + 6
        QCOMPARE(d->subtask.size(), qint64(192));
        QVERIFY(core->scheduler().checkIntegrity().isEmpty());
    }

    // A machine three times slower than the round's pace (the members' median speed) trains a
    // third of a piece (whole batches), so that the round does not wait three times as long
    // for it; one within kRoundPaceTolerance of the pace trains a whole piece. A member that
    // claims an absurd speed (a hostile worker) does not move the median.
    void aSlowWorkersRoundPieceIsItsShare()
    {
        FakeClock clock;
        const AssimilatorConfig config = roundsOf(32, 8);
        auto core = make(clock, QStringLiteral("async-delta"), 1, {600, 600, 600}, config);
        core->setBufferSize(4);
        core->reportSpeed(1, 300.0);
        core->reportSpeed(2, 100.0);
        core->reportSpeed(3, 270.0);
        core->reportSpeed(4, 1e12);
        core->setRoundMembers({1, 2, 3, 4});
        auto a = core->grant(1);
        auto b = core->grant(2);
        auto c = core->grant(3);
        QVERIFY(a && b && c);
        QCOMPARE(a->subtask.size(), qint64(224)); // 8 steps cut 7 + 6 + 6 of shard 0
        QCOMPARE(b->subtask.size(), qint64(96));  // 8 / 3 → 3 steps of shard 1
        QCOMPARE(c->subtask.size(), qint64(224)); // 0.9 of the pace: a whole piece of shard 2
        QVERIFY(core->scheduler().checkIntegrity().isEmpty());
        // Without members (today's local simulator, one worker) nothing is cut.
        auto plain = make(clock, QStringLiteral("async-delta"), 1, {600, 600}, config);
        plain->setBufferSize(2);
        plain->reportSpeed(1, 300.0);
        plain->reportSpeed(2, 100.0);
        QVERIFY(plain->grant(1));
        auto slow = plain->grant(2);
        QVERIFY(slow);
        QCOMPARE(slow->subtask.size(), qint64(224));
    }

    // Version-synchronous rounds: a round holds one subtask per worker online (the buffer
    // size), all from the same version; the next grant waits for the fold, which comes when the
    // round's last lease ends, delivered or not.
    void aRoundGrantsFromOneVersionAndFoldsWhenItsLeasesEnd()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.rounds = true;
        config.batchSize = 2;
        config.roundSteps = 2; // pieces of 2 steps of 2: 4 positions
        auto core = make(clock, QStringLiteral("async-delta"), 2, {10, 10}, config);
        core->setBufferSize(2);
        auto a = core->grant(1);
        auto b = core->grant(2);
        QVERIFY(a && b);
        QCOMPARE(a->subtask.size(), qint64(4));
        QCOMPARE(b->lease.baseVersion, qint64(0));
        QVERIFY(core->roundFull());
        QVERIFY(!core->grant(3)); // a third worker waits for the round
        FoldOutcome f = core->fold(a->lease, a->subtask, core->admit(a->subtask, 4, 4), filled(2), filled(0), 1, false);
        QVERIFY(f.buffered && !f.folded);
        QVERIFY(core->roundFull());
        QVERIFY(!core->grant(1)); // nor does the one that delivered get another of this round
        QVERIFY(!core->flushDue());
        // The second result folds the round: the mean change, one version, both seqs.
        f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 4, 4), filled(4), filled(0), 1, false);
        QVERIFY(f.folded);
        QCOMPARE(int(f.results.size()), 2);
        QCOMPARE(core->version(), qint64(1));
        QCOMPARE(core->state().weights[0].item<float>(), 3.0f);
        QVERIFY(!core->roundFull());
        // A lease that ends without a result frees its place: another worker takes one from the
        // same version, and the round folds when its leases are done.
        auto c = core->grant(1);
        auto d = core->grant(2);
        QVERIFY(c && d && core->roundFull());
        core->scheduler().handBack(d->lease.id);
        QVERIFY(!core->roundFull());
        auto e = core->grant(3);
        QVERIFY(e);
        QCOMPARE(e->lease.baseVersion, qint64(1));
        f = core->fold(c->lease, c->subtask, core->admit(c->subtask, 4, 4), filled(5), filled(3), 1, false);
        QVERIFY(f.buffered);
        // e's worker is lost: the round folds with the one result it has.
        core->scheduler().workerLost(3);
        QVERIFY(core->flushDue());
        f = core->flush(false);
        QVERIFY(f.folded);
        QCOMPARE(int(f.results.size()), 1);
        QCOMPARE(core->version(), qint64(2));
        QCOMPARE(core->state().weights[0].item<float>(), 5.0f);
        QVERIFY(!core->roundFull());
        QVERIFY(core->scheduler().checkIntegrity().isEmpty());
    }

    void aBufferedSubtaskIsNotTrainedOrQueuedAgain()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.buffer = 4;
        auto core = make(clock, QStringLiteral("staleness-aware"), 1, {10, 10}, config);
        auto a = core->grant(1);
        QVERIFY(a);
        auto copy = core->scheduler().grantReplica(a->subtask.id, 2, 0, 0, 60000);
        QVERIFY(copy);
        const FoldOutcome f
            = core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), filled(2), {}, 1, false);
        QVERIFY(f.buffered);
        // The copy is superseded at once: its worker can stop.
        bool superseded = false;
        for (const Lease &l : f.changes.leases)
            superseded = superseded || (l.id == copy->lease.id && l.state == LeaseState::Superseded);
        QVERIFY(superseded);
        // Its result, arriving anyway, trained positions that wait in the buffer.
        const auto again = core->admit(copy->subtask, 10, 10);
        QVERIFY2(again.duplicate.contains(QStringLiteral("aggregation buffer")), qPrintable(again.duplicate));
        // Dropping it does not send the buffered subtask back to the queue.
        core->scheduler().drop(copy->lease.id, LeaseState::Lost);
        QCOMPARE(core->scheduler().queuedCount(), 1); // only the other shard
        QVERIFY(core->scheduler().subtask(a->subtask.id)->state == SubtaskState::Leased);
    }

    void aNonFiniteResultNeverEntersTheBuffer()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.buffer = 2;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {10, 10}, config);
        auto a = core->grant(1);
        auto b = core->grant(2);
        torch::Tensor nan = filled(1);
        nan[3] = std::numeric_limits<float>::quiet_NaN();
        FoldOutcome f = core->fold(a->lease, a->subtask, core->admit(a->subtask, 10, 10), nan, {}, 1, false);
        QVERIFY(!f.folded && !f.buffered);
        QVERIFY2(f.refusal.contains(QStringLiteral("not finite")), qPrintable(f.refusal));
        QCOMPARE(core->buffered(), 0);
        // The next finite result fills no buffer with the NaN: folded alone at the flush,
        // W = 0.5·4 = 2 everywhere.
        core->scheduler().drop(a->lease.id, LeaseState::Lost);
        f = core->fold(b->lease, b->subtask, core->admit(b->subtask, 10, 10), filled(4), {}, 1, false);
        QVERIFY(f.buffered);
        f = core->flush(false);
        QVERIFY(f.folded);
        QCOMPARE(int(f.results.size()), 1);
        QVERIFY(torch::equal(core->state().weights, filled(2)));
    }

    void aSynchronousRuleIgnoresTheBuffer()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.buffer = 8;
        auto core = make(clock, QStringLiteral("sync-average"), 1, {10, 10}, config);
        QCOMPARE(core->bufferSize(), 1);
    }

    void theTailIsSharedOverTheFleet()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.shareTail = true;
        config.batchSize = 2;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {30, 30}, config);
        // 60 positions queued, nobody leased: a first grant may take a whole shard.
        auto a = core->grant(1);
        QCOMPARE(a->subtask.size(), qint64(30));
        // 30 queued, one lease out: a share of ⌈30 / 2⌉ = 15.
        auto b = core->grant(2);
        QCOMPARE(b->subtask.size(), qint64(15));
        // 15 queued, two leases out: ⌈15 / 3⌉ = 5.
        auto c = core->grant(3);
        QCOMPARE(c->subtask.size(), qint64(5));
        // Never less than a batch: 10 queued, 3 out, ⌈10 / 4⌉ = 3; then 7 / 5 → the batch, 2.
        QCOMPARE(core->grant(4)->subtask.size(), qint64(3));
        QCOMPARE(core->grant(5)->subtask.size(), qint64(2));
        QCOMPARE(core->scheduler().queuedPositions(), qint64(5));
    }

    void theIdlePolicyCopiesAtTheTailElseLetsGo()
    {
        // Hand-built situations: the one decision that the coordinator and the simulator share.
        IdleSituation tail;
        tail.speculate = true;
        tail.dismissIdle = true;
        tail.tailReached = true;
        tail.queueEmpty = true;
        tail.candidate = 7;

        IdleDecision d = decideIdle(tail);
        QCOMPARE(d.copyOf, std::optional<qint64>(7));
        QVERIFY(!d.dismiss && !d.firstDismissal);

        // Before the tail an epoch is still to open: no copy, nobody let go.
        IdleSituation before = tail;
        before.tailReached = false;
        d = decideIdle(before);
        QVERIFY(!d.copyOf && !d.dismiss);

        // A job that hands out nothing decides nothing.
        IdleSituation halted = tail;
        halted.halted = true;
        d = decideIdle(halted);
        QVERIFY(!d.copyOf && !d.dismiss);

        // No candidate, or no speculation: the worker is let go, recorded the first time only.
        for (const bool speculate : {true, false}) {
            IdleSituation none = tail;
            none.speculate = speculate;
            if (speculate)
                none.candidate.reset();
            d = decideIdle(none);
            QVERIFY(!d.copyOf);
            QVERIFY(d.dismiss && d.firstDismissal);
            none.dismissed = true;
            d = decideIdle(none);
            QVERIFY(d.dismiss && !d.firstDismissal);
        }

        // Something still queued (work handed back): the worker waits for it.
        IdleSituation queued = tail;
        queued.candidate.reset();
        queued.queueEmpty = false;
        d = decideIdle(queued);
        QVERIFY(!d.copyOf && !d.dismiss);

        // Without fleet.dismiss_idle, an idle worker is kept.
        IdleSituation kept = tail;
        kept.candidate.reset();
        kept.dismissIdle = false;
        d = decideIdle(kept);
        QVERIFY(!d.copyOf && !d.dismiss && !d.firstDismissal);
    }

    void anIdleWorkerGetsACopyOfTheMostOverdueSubtaskThenIsLetGo()
    {
        FakeClock clock;
        AssimilatorConfig config;
        config.speculate = true;
        config.dismissIdle = true;
        config.leaseTimeoutSeconds = 120.0;
        auto core = make(clock, QStringLiteral("vc-asgd"), 1, {10, 10}, config);
        const Assimilator::Offer a = core->offer(1, {});
        const Assimilator::Offer b = core->offer(2, {});
        QVERIFY(a.grant && b.grant && !a.speculative && !b.speculative);
        QVERIFY(core->fold(b.grant->lease, b.grant->subtask, core->admit(b.grant->subtask, 10, 10), filled(1), {}, 1,
                           false)
                    .folded);

        // The caller may forbid the copy (the coordinator's quorums): then the worker is let go.
        Assimilator::IdleConditions noCopy;
        noCopy.mayCopy = [](qint64) { return false; };
        const Assimilator::Offer forbidden = core->offer(2, noCopy);
        QVERIFY(!forbidden.grant && forbidden.idle.dismiss);

        // Nothing queued and the only epoch open: a copy of a's subtask, due at the lease timeout.
        clock.advance(1000);
        const Assimilator::Offer copy = core->offer(2, {});
        QVERIFY(copy.grant && copy.speculative);
        QCOMPARE(copy.grant->subtask.id, a.grant->subtask.id);
        QCOMPARE(copy.grant->lease.deadlineMs - clock.nowMs(), qint64(120'000));
        QCOMPARE(core->scheduler().activeLeaseCount(), 2);

        // That subtask has two leases now: no copy is left to make, and a third worker is let go.
        const Assimilator::Offer idle = core->offer(3, {});
        QVERIFY(!idle.grant && !idle.speculative);
        QVERIFY(idle.idle.dismiss && idle.idle.firstDismissal);
        Assimilator::IdleConditions again;
        again.dismissed = true;
        QVERIFY(!core->offer(3, again).idle.firstDismissal);
        Assimilator::IdleConditions paused;
        paused.halted = true;
        QVERIFY(!core->offer(3, paused).idle.dismiss);
        QCOMPARE(core->scheduler().activeLeaseCount(), 2);
    }

    void anIdleWorkerWaitsBeforeTheTail()
    {
        // Three epochs of one shard, one epoch ahead: the third opens only once the first is
        // done, so a worker that finds nothing to take waits, with a lease alone to copy.
        FakeClock clock;
        AssimilatorConfig config;
        config.speculate = true;
        config.dismissIdle = true;
        auto core = make(clock, QStringLiteral("vc-asgd"), 3, {10}, config);
        QVERIFY(core->offer(1, {}).grant);
        QVERIFY(core->offer(2, {}).grant);
        QVERIFY(!core->idleSituation({}).tailReached);
        const Assimilator::Offer idle = core->offer(3, {});
        QVERIFY(!idle.grant && !idle.speculative && !idle.idle.dismiss);
    }
};

QTEST_GUILESS_MAIN(TestAssimilator)
#include "tst_assimilator.moc"
