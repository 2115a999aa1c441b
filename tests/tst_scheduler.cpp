// Subtasks and leases with a fake clock: expiry and reassignment, late and duplicate
// results, partial results and their remainders, epoch opening, exactly-once coverage.
#include "FakeClock.h"
#include "engine/coordination/Scheduler.h"

#include <QtTest>

#include <map>

using namespace flotilla;
using flotilla::test::FakeClock;


namespace {

Scheduler make(FakeClock &clock, int epochs, std::vector<qint64> shards, bool sync = false)
{
    return Scheduler(Scheduler::Config{epochs, std::move(shards), sync}, &clock);
}

} // namespace

class TestScheduler : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void leasesFollowTheWorkersSpeed()
    {
        // Unknown speed: no split, the lease timeout.
        LeaseSizing l = sizeLease(0, 60, 600, 32, 1, false, 2001);
        QCOMPARE(l.maxPositions, qint64(0));
        QCOMPARE(l.durationMs, qint64(600'000));
        // 10 samples/s, 60 s wanted: 600 positions, 3 × 60 s + 10 s.
        l = sizeLease(10, 60, 600, 32, 1, false, 2001);
        QCOMPARE(l.maxPositions, qint64(600));
        QCOMPARE(l.durationMs, qint64(190'000));
        // Two local passes halve the positions; the deadline stays; a short timeout caps it.
        l = sizeLease(10, 60, 120, 32, 2, false, 2001);
        QCOMPARE(l.maxPositions, qint64(300));
        QCOMPARE(l.durationMs, qint64(120'000));
        // Never less than a batch; no split for jobs counted in local steps.
        QCOMPARE(sizeLease(0.1, 60, 600, 32, 1, false, 2001).maxPositions, qint64(32));
        l = sizeLease(10, 60, 600, 32, 1, true, 2001);
        QCOMPARE(l.maxPositions, qint64(0));
        QCOMPARE(l.durationMs, qint64(600'000)); // 2001 positions at 10/s: 3 × 200 s + 10 s > 600 s
    }

    // A round's bound of 8 steps on a shard of 600 positions at batch 32 (19 steps, the last
    // a part): 7 + 6 + 6 steps, not 8 + 8 + 3 (the old cut, whose 3-step piece left its worker
    // idle for most of a round).
    void splitsAreBalancedInWholeSteps()
    {
        QCOMPARE(balancedCut(600, 256, 32), qint64(224));
        QCOMPARE(balancedCut(376, 256, 32), qint64(192));
        QCOMPARE(balancedCut(184, 256, 32), qint64(184));
        QCOMPARE(balancedCut(512, 256, 32), qint64(256)); // two whole pieces: the bound itself
        QCOMPARE(balancedCut(600, 256, 0), qint64(256));  // no step: at the bound
        QCOMPARE(balancedCut(600, 20, 32), qint64(20));   // a bound under one step: at the bound

        FakeClock clock;
        Scheduler s = make(clock, 1, {600});
        std::vector<qint64> sizes;
        while (auto g = s.grant(1, 0, 0, 1000, 256, 32))
            sizes.push_back(g->subtask.size());
        QCOMPARE(sizes, (std::vector<qint64>{224, 192, 184}));
    }

    void creditCountsOnlyWhatTheSubtaskStillNames()
    {
        QCOMPARE(resultCredit(40, 40, 40, 40), 1.0);
        QCOMPARE(resultCredit(10, 10, 10, 40), 0.25);
        // Trained 40 positions, but the subtask was cut to 10 after its lease expired.
        QCOMPARE(resultCredit(40, 10, 40, 40), 0.25);
        // Three local passes over 10 positions of a 40-sample shard.
        QCOMPARE(resultCredit(30, 10, 10, 120), 0.25);
        QCOMPARE(resultCredit(0, 0, 0, 40), 1e-6);
        QCOMPARE(resultCredit(80, 40, 40, 40), 1.0);
    }

    void grantsOneSubtaskPerShardInOrder()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10, 10});
        std::vector<int> shards;
        while (auto g = s.grant(1, 0, 0, 1000))
            shards.push_back(g->subtask.shard);
        QCOMPARE(shards, (std::vector<int>{0, 1, 2}));
        QCOMPARE(s.activeLeaseCount(), 3);
        QVERIFY(!s.grant(1, 0, 0, 1000)); // nothing left
    }

    void expiredLeaseIsReassigned()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10});
        auto first = s.grant(1, 0, 0, 5000);
        QVERIFY(first);
        QCOMPARE(first->lease.deadlineMs, clock.nowMs() + 5000);
        clock.advance(4999);
        QVERIFY(s.expire().leases.empty());
        QVERIFY(!s.grant(2, 0, 0, 5000));
        clock.advance(1);
        const SchedulerChanges expired = s.expire();
        QCOMPARE(expired.leases.size(), std::size_t(1));
        QVERIFY(expired.leases[0].state == LeaseState::Expired);
        QVERIFY(expired.subtasks[0].state == SubtaskState::Queued);
        auto second = s.grant(2, 0, 0, 5000);
        QVERIFY(second);
        QCOMPARE(second->subtask.id, first->subtask.id);
        QCOMPARE(second->subtask.attempts, 2);
        QCOMPARE(second->lease.workerId, qint64(2));
    }

    void handedBackSubtaskIsReassigned()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10});
        auto g = s.grant(1, 0, 0, 5000);
        const SchedulerChanges back = s.handBack(g->lease.id);
        QVERIFY(back.leases[0].state == LeaseState::HandedBack);
        auto again = s.grant(2, 0, 0, 5000);
        QVERIFY(again);
        QCOMPARE(again->subtask.id, g->subtask.id);
    }

    void replicaLeasesShareTheSubtaskUntilItIsDone()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10});
        auto a = s.grant(1, 0, 0, 5000);
        QVERIFY(a);
        auto replica = s.grantReplica(a->subtask.id, 2, 0, 0, 5000);
        QVERIFY(replica);
        QCOMPARE(replica->subtask.id, a->subtask.id);
        QCOMPARE(s.activeLeasesOn(a->subtask.id), 2);
        // A queued subtask gets no replica: it must be granted first.
        auto queued = s.grantReplica(a->subtask.id + 1, 3, 0, 0, 5000);
        QVERIFY(!queued);
        // One replica lost: the other still trains it, so it is not queued again.
        s.workerLost(2);
        QVERIFY(s.subtask(a->subtask.id)->state == SubtaskState::Leased);
        QCOMPARE(s.queuedCount(), 1);
        // A held result: the lease delivered, the subtask stays leased with nobody on it
        // until released, and a resend is a duplicate.
        s.hold(a->lease.id);
        QCOMPARE(s.check(a->lease.id).verdict, Scheduler::Verdict::Duplicate);
        QVERIFY(s.subtask(a->subtask.id)->state == SubtaskState::Leased);
        QCOMPARE(s.activeLeasesOn(a->subtask.id), 0);
        s.release(a->subtask.id);
        QVERIFY(s.subtask(a->subtask.id)->state == SubtaskState::Queued);
        QCOMPARE(s.queuedCount(), 2);
        // complete() takes a held lease later (the comparison agreed).
        auto b = s.grant(4, 0, 0, 5000);
        auto r = s.grantReplica(b->subtask.id, 5, 0, 0, 5000);
        s.hold(b->lease.id);
        const SchedulerChanges done = s.complete(b->lease.id, b->subtask.size(), 1);
        QVERIFY(s.subtask(b->subtask.id)->state == SubtaskState::Done);
        bool superseded = false;
        for (const auto &l : done.leases)
            superseded = superseded || (l.id == r->lease.id && l.state == LeaseState::Superseded);
        QVERIFY(superseded);
    }

    void lostWorkerLeasesAreReassigned()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10});
        auto a = s.grant(1, 0, 0, 5000);
        auto b = s.grant(2, 0, 0, 5000);
        const SchedulerChanges lost = s.workerLost(1);
        QCOMPARE(lost.leases.size(), std::size_t(1));
        QCOMPARE(lost.leases[0].id, a->lease.id);
        QVERIFY(lost.leases[0].state == LeaseState::Lost);
        auto c = s.grant(3, 0, 0, 5000);
        QCOMPARE(c->subtask.id, a->subtask.id);
        QCOMPARE(s.check(b->lease.id).verdict, Scheduler::Verdict::Accept);
    }

    void lateResultIsAcceptedWhileTheSubtaskIsOpen()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10});
        auto a = s.grant(1, 0, 0, 1000);
        clock.advance(1000);
        s.expire();
        auto b = s.grant(2, 0, 0, 1000); // reassigned to worker 2
        // Worker 1's result arrives late, before worker 2's: it is folded in...
        const Scheduler::Check late = s.check(a->lease.id);
        QCOMPARE(late.verdict, Scheduler::Verdict::Accept);
        QVERIFY(late.late);
        const SchedulerChanges done = s.complete(a->lease.id, 10, 1);
        // ...and worker 2's lease is superseded: its result will be a duplicate.
        bool superseded = false;
        for (const auto &l : done.leases)
            superseded = superseded || (l.id == b->lease.id && l.state == LeaseState::Superseded);
        QVERIFY(superseded);
        QCOMPARE(s.check(b->lease.id).verdict, Scheduler::Verdict::Duplicate);
        QVERIFY(s.finished());
    }

    void lateResultAfterTheSubtaskIsDoneIsADuplicate()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10}); // two shards: the epoch stays open
        auto a = s.grant(1, 0, 0, 1000);
        clock.advance(1000);
        s.expire();
        auto b = s.grant(2, 0, 0, 1000);
        s.complete(b->lease.id, 10, 1);
        const Scheduler::Check late = s.check(a->lease.id);
        QCOMPARE(late.verdict, Scheduler::Verdict::Duplicate);
        QVERIFY(late.reason.contains(QStringLiteral("already assimilated")));
    }

    void sameResultTwiceIsADuplicate()
    {
        FakeClock clock;
        Scheduler s = make(clock, 2, {10, 10});
        auto a = s.grant(1, 0, 0, 1000);
        QCOMPARE(s.check(a->lease.id).verdict, Scheduler::Verdict::Accept);
        s.complete(a->lease.id, 10, 1);
        const Scheduler::Check again = s.check(a->lease.id);
        QCOMPARE(again.verdict, Scheduler::Verdict::Duplicate);
        QVERIFY(again.reason.contains(QStringLiteral("already delivered")));
        QCOMPARE(s.check(999).verdict, Scheduler::Verdict::Unknown);
    }

    // A late result whose subtask was split after its lease expired (a slower worker got the
    // first part): the positions past the split that are still owed are taken with it, so no
    // sample is trained twice in the epoch.
    void lateResultTakesTheOwedPiecesPastASplit()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {100, 100});
        auto a = s.grant(1, 0, 0, 1000);
        clock.advance(1000);
        s.expire();
        auto b = s.grant(2, 0, 0, 1000, 40); // the first 40; [40, 100) queued
        QCOMPARE(b->subtask.id, a->subtask.id);
        QCOMPARE(b->subtask.end, qint64(40));
        const Scheduler::Check late = s.check(a->lease.id);
        QCOMPARE(late.verdict, Scheduler::Verdict::Accept);
        const Scheduler::Reach reach = s.reach(late.subtask, 100);
        QCOMPARE(reach.covered, qint64(100));
        QVERIFY(!reach.overlapsDone);
        const SchedulerChanges c = s.complete(a->lease.id, 100, 1);
        int done = 0;
        for (const auto &st : c.subtasks)
            done += st.state == SubtaskState::Done && st.shard == 0 ? 1 : 0;
        QCOMPARE(done, 2);
        QCOMPARE(s.queuedCount(), 1); // shard 1 only
        QCOMPARE(s.check(b->lease.id).verdict, Scheduler::Verdict::Duplicate); // superseded
        QVERIFY2(s.checkIntegrity().isEmpty(), qPrintable(s.checkIntegrity()));
        // Without the fix the remainder stayed queued: shard 0 would be trained twice.
        auto next = s.grant(3, 1, 1, 1000);
        QCOMPARE(next->subtask.shard, 1);
    }

    void lateResultSplitsALeasedPieceItPartlyCovers()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {100, 100});
        auto a = s.grant(1, 0, 0, 1000);
        clock.advance(1000);
        s.expire();
        auto b = s.grant(2, 0, 0, 1000, 40);
        QCOMPARE(s.grant(9, 0, 0, 1000)->subtask.shard, 1); // shard 1 was queued first
        auto rest = s.grant(3, 0, 0, 1000); // [40, 100), leased
        QCOMPARE(rest->subtask.begin, qint64(40));
        // A partial late result: the first 70 positions.
        QCOMPARE(s.reach(s.check(a->lease.id).subtask, 70).covered, qint64(70));
        s.complete(a->lease.id, 70, 1);
        QCOMPARE(s.check(rest->lease.id).verdict, Scheduler::Verdict::Duplicate);
        QCOMPARE(s.check(b->lease.id).verdict, Scheduler::Verdict::Duplicate);
        // [70, 100) is owed, as a subtask of its own.
        auto owed = s.grant(4, 1, 1, 1000);
        QCOMPARE(owed->subtask.shard, 0);
        QCOMPARE(owed->subtask.begin, qint64(70));
        QCOMPARE(owed->subtask.end, qint64(100));
        QVERIFY2(s.checkIntegrity().isEmpty(), qPrintable(s.checkIntegrity()));
    }

    void lateResultOverAnAssimilatedPieceIsRefused()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {100, 100});
        auto a = s.grant(1, 0, 0, 1000);
        clock.advance(1000);
        s.expire();
        s.grant(2, 0, 0, 1000, 40);
        s.grant(9, 0, 0, 1000); // shard 1
        auto rest = s.grant(3, 0, 0, 1000);
        s.complete(rest->lease.id, 60, 1); // [40, 100) assimilated
        const Scheduler::Check late = s.check(a->lease.id);
        QCOMPARE(late.verdict, Scheduler::Verdict::Accept); // its own subtask is still open...
        const Scheduler::Reach reach = s.reach(late.subtask, 100);
        QVERIFY(reach.overlapsDone); // ...but it trained [40, 100) again
        QCOMPARE(reach.doneBegin, qint64(40));
        // A result that stayed within the subtask is fine.
        QVERIFY(!s.reach(late.subtask, 40).overlapsDone);
        QCOMPARE(s.reach(late.subtask, 25).covered, qint64(25));
    }

    void finishedEpochsLeaveMemory()
    {
        FakeClock clock;
        Scheduler s = make(clock, 3, {10, 10});
        std::vector<qint64> epochZeroLeases;
        qint64 firstSubtask = 0;
        qint64 seq = 0;
        while (s.epochsDone() < 1) {
            auto g = s.grant(1, seq, seq, 1000);
            QVERIFY(g);
            if (g->subtask.epoch == 0)
                epochZeroLeases.push_back(g->lease.id);
            if (!firstSubtask)
                firstSubtask = g->subtask.id;
            s.complete(g->lease.id, g->subtask.size(), ++seq);
        }
        QVERIFY(s.subtask(firstSubtask) == nullptr);
        for (const qint64 id : epochZeroLeases) {
            const Scheduler::Check c = s.check(id);
            QCOMPARE(c.verdict, Scheduler::Verdict::Duplicate);
            QVERIFY(c.forgotten);
        }
        QCOMPARE(s.check(10'000).verdict, Scheduler::Verdict::Unknown); // never issued
        QVERIFY2(s.checkIntegrity().isEmpty(), qPrintable(s.checkIntegrity()));
        // Kept when asked (the simulator checks every epoch at the end).
        Scheduler kept(Scheduler::Config{3, {10, 10}, false, true}, &clock);
        auto g = kept.grant(1, 0, 0, 1000);
        kept.complete(g->lease.id, 10, 1);
        auto h = kept.grant(1, 0, 0, 1000);
        kept.complete(h->lease.id, 10, 2);
        QCOMPARE(kept.epochsDone(), 1);
        QVERIFY(kept.subtask(g->subtask.id) != nullptr);
        QVERIFY(!kept.check(g->lease.id).forgotten);
    }

    void partialResultOpensTheRemainder()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {100});
        auto a = s.grant(1, 0, 0, 1000);
        const SchedulerChanges c = s.complete(a->lease.id, 37, 1);
        // The partial subtask is done for positions [0, 37); [37, 100) is new.
        QCOMPARE(c.subtasks.size(), std::size_t(2));
        QVERIFY(c.subtasks[0].state == SubtaskState::Done);
        QCOMPARE(c.subtasks[0].coveredEnd, qint64(37));
        QCOMPARE(c.subtasks[1].begin, qint64(37));
        QCOMPARE(c.subtasks[1].end, qint64(100));
        QCOMPARE(c.subtasks[1].parentId, a->subtask.id);
        QVERIFY(!s.finished());
        auto b = s.grant(2, 1, 1, 1000);
        QCOMPARE(b->subtask.begin, qint64(37));
        s.complete(b->lease.id, 63, 2);
        QVERIFY(s.finished());
    }

    void asynchronousJobsRunOneEpochAhead()
    {
        FakeClock clock;
        Scheduler s = make(clock, 3, {10, 10});
        auto a = s.grant(1, 0, 0, 1000); // epoch 0 shard 0
        auto b = s.grant(2, 0, 0, 1000); // epoch 0 shard 1; epoch 1 opens
        QCOMPARE(s.openedEpochs(), 2);
        auto c = s.grant(3, 0, 0, 1000);
        QCOMPARE(c->subtask.epoch, 1);
        auto d = s.grant(4, 0, 0, 1000);
        QCOMPARE(d->subtask.epoch, 1);
        QVERIFY(!s.grant(5, 0, 0, 1000)); // epoch 2 waits for epoch 0 to finish
        s.complete(a->lease.id, 10, 1);
        s.complete(b->lease.id, 10, 2);
        QCOMPARE(s.epochsDone(), 1);
        auto e = s.grant(5, 2, 2, 1000);
        QVERIFY(e);
        QCOMPARE(e->subtask.epoch, 2);
    }

    void synchronousJobsWaitForTheRound()
    {
        FakeClock clock;
        Scheduler s = make(clock, 2, {10, 10}, true);
        auto a = s.grant(1, 0, 0, 1000);
        auto b = s.grant(2, 0, 0, 1000);
        QVERIFY(!s.grant(3, 0, 0, 1000));
        s.complete(a->lease.id, 10, 1);
        QVERIFY(!s.grant(3, 0, 0, 1000));
        s.complete(b->lease.id, 10, 2);
        auto c = s.grant(3, 2, 1, 1000);
        QVERIFY(c);
        QCOMPARE(c->subtask.epoch, 1);
    }

    void everyShardOfEveryEpochIsCoveredExactlyOnce()
    {
        // Random churn: grants, expiries, hand-backs, partial and late results. At the end
        // the done pieces of each (epoch, shard) tile [0, size) exactly.
        FakeClock clock;
        const std::vector<qint64> sizes{17, 23, 9, 31};
        Scheduler s = make(clock, 4, sizes);
        std::mt19937 rng(42);
        std::vector<Lease> held;
        std::map<qint64, Subtask> done;
        qint64 seq = 0;
        for (int step = 0; step < 5000 && !s.finished(); ++step) {
            const int action = int(rng() % 6);
            if (action <= 1) {
                if (auto g = s.grant(qint64(rng() % 5) + 1, seq, seq, 1000))
                    held.push_back(g->lease);
            } else if (action == 2 && !held.empty()) {
                clock.advance(400);
                s.expire();
            } else if (!held.empty()) {
                const std::size_t i = rng() % held.size();
                const Lease lease = held[i];
                held.erase(held.begin() + std::ptrdiff_t(i));
                const Scheduler::Check c = s.check(lease.id);
                if (c.verdict != Scheduler::Verdict::Accept)
                    continue;
                if (action == 3) {
                    s.handBack(lease.id);
                    continue;
                }
                const qint64 covered = action == 4 ? qint64(rng() % c.subtask.size()) + 1 : c.subtask.size();
                for (const auto &st : s.complete(lease.id, covered, ++seq).subtasks)
                    if (st.state == SubtaskState::Done)
                        done[st.id] = st;
            }
        }
        QVERIFY2(s.finished(), "the random walk should finish the job");
        std::map<std::pair<int, int>, std::vector<std::pair<qint64, qint64>>> pieces;
        for (const auto &[id, st] : done)
            pieces[{st.epoch, st.shard}].push_back({st.begin, st.coveredEnd});
        QCOMPARE(int(pieces.size()), 4 * 4);
        for (auto &[key, ranges] : pieces) {
            std::sort(ranges.begin(), ranges.end());
            qint64 at = 0;
            for (const auto &[b, e] : ranges) {
                QCOMPARE(b, at); // no gap, no overlap
                QVERIFY(e > b);
                at = e;
            }
            QCOMPARE(at, sizes[std::size_t(key.second)]);
        }
    }

    void restoreRequeuesOrphanedSubtasks()
    {
        FakeClock clock;
        Scheduler s = make(clock, 2, {10, 10});
        auto a = s.grant(1, 0, 0, 1000);
        Subtask leased = *s.subtask(a->subtask.id);
        Subtask queued = *s.subtask(a->subtask.id + 1);
        Lease ended = a->lease;
        ended.state = LeaseState::Lost;
        Scheduler restored = make(clock, 2, {10, 10});
        restored.restore({leased, queued}, {ended});
        QCOMPARE(restored.queuedCount(), 2);
        auto g = restored.grant(2, 0, 0, 1000);
        QVERIFY(g);
        QVERIFY(g->lease.id > a->lease.id); // ids keep growing across restarts
    }

    void stateNamesRoundTrip()
    {
        for (auto st : {SubtaskState::Queued, SubtaskState::Leased, SubtaskState::Done})
            QVERIFY(subtaskStateFromString(toString(st)).value() == st);
        for (auto st : {LeaseState::Active, LeaseState::Completed, LeaseState::Expired, LeaseState::HandedBack,
                        LeaseState::Lost, LeaseState::Superseded})
            QVERIFY(leaseStateFromString(toString(st)).value() == st);
        QVERIFY(!leaseStateFromString(QStringLiteral("bogus")));
    }

    void slowWorkersGetPartOfAShard()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {100});
        auto slow = s.grant(1, 0, 0, 1000, 30);
        QVERIFY(slow);
        QCOMPARE(slow->subtask.begin, qint64(0));
        QCOMPARE(slow->subtask.end, qint64(30));
        auto fast = s.grant(2, 0, 0, 1000);
        QVERIFY(fast);
        QCOMPARE(fast->subtask.begin, qint64(30));
        QCOMPARE(fast->subtask.end, qint64(100));
        QCOMPARE(fast->subtask.parentId, slow->subtask.id);
        QVERIFY(s.checkIntegrity().isEmpty());
        s.complete(fast->lease.id, 70, 1);
        s.complete(slow->lease.id, 30, 2);
        QVERIFY(s.finished());
        QVERIFY(s.checkIntegrity().isEmpty());
        // A split never makes a piece smaller than asked, and small subtasks are not split.
        Scheduler t = make(clock, 1, {20});
        auto whole = t.grant(1, 0, 0, 1000, 30);
        QCOMPARE(whole->subtask.size(), qint64(20));
    }

    void integrityCheckFindsMissingAndOverlappingPieces()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10});
        auto a = s.grant(1, 0, 0, 1000, 4);
        std::vector<Subtask> all;
        for (qint64 id = 1; id <= 3; ++id)
            all.push_back(*s.subtask(id));
        Scheduler missing = make(clock, 1, {10, 10});
        missing.restore({all[0], all[1]}, {a->lease}); // the split-off rest of shard 0 is lost
        QVERIFY2(missing.checkIntegrity().contains(QStringLiteral("positions 4-10 belong to no subtask")),
                 qPrintable(missing.checkIntegrity()));
        Subtask overlap = all[2];
        overlap.id = 99;
        overlap.begin = 2;
        Scheduler twice = make(clock, 1, {10, 10});
        twice.restore({all[0], all[1], all[2], overlap}, {a->lease});
        QVERIFY2(twice.checkIntegrity().contains(QStringLiteral("belong to two subtasks")), qPrintable(twice.checkIntegrity()));
        Scheduler whole = make(clock, 1, {10, 10});
        whole.restore(all, {a->lease});
        QVERIFY(whole.checkIntegrity().isEmpty());
    }

    void moreEpochsOpenWhenAllowed()
    {
        FakeClock clock;
        Scheduler::Config config{4, {10}, false};
        config.epochsAhead = 2;
        Scheduler s(config, &clock);
        // Epoch 1 leased but not done: epochs 2 and 3 may open, epoch 4 waits for epoch 1.
        auto a = s.grant(1, 0, 0, 1000);
        auto b = s.grant(2, 0, 0, 1000);
        auto c = s.grant(3, 0, 0, 1000);
        QVERIFY(a && b && c);
        QCOMPARE(c->subtask.epoch, 2);
        QVERIFY(!s.grant(4, 0, 0, 1000));
        QCOMPARE(s.openedEpochs(), 3);
        s.complete(a->lease.id, 10, 1);
        QCOMPARE(s.openedEpochs(), 4);
    }

    void aHeldLateResultTakesItsSubtaskBack()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10});
        auto a = s.grant(1, 0, 0, 1000);
        auto b = s.grant(2, 0, 0, 1000);
        clock.advance(2000);
        s.expire(); // both back in the queue
        QCOMPARE(s.queuedCount(), 2);
        auto c = s.grant(3, 0, 0, 1000); // a's subtask, to another worker
        QCOMPARE(c->subtask.id, a->subtask.id);
        // Late results of a and b are held (buffered): neither subtask is trained again.
        s.hold(a->lease.id, true);
        s.hold(b->lease.id, true);
        QCOMPARE(s.queuedCount(), 0);
        QCOMPARE(s.activeLeaseCount(), 0); // c superseded
        QVERIFY(s.subtask(b->subtask.id)->state == SubtaskState::Leased);
        // And they complete at the fold.
        s.complete(a->lease.id, 10, 1);
        s.complete(b->lease.id, 10, 2);
        QVERIFY(s.finished());
        QVERIFY2(s.checkIntegrity().isEmpty(), qPrintable(s.checkIntegrity()));
    }

    void speculationPicksTheLeaseNearestItsDeadlineWithoutACopy()
    {
        FakeClock clock;
        Scheduler s = make(clock, 1, {10, 10, 10});
        QVERIFY(!s.speculationCandidate());
        auto a = s.grant(1, 0, 0, 5000);
        auto b = s.grant(2, 0, 0, 2000);
        auto c = s.grant(3, 0, 0, 9000);
        QCOMPARE(*s.speculationCandidate(), b->subtask.id);
        // b has a copy now: a is next; then c; then none.
        QVERIFY(s.grantReplica(b->subtask.id, 4, 0, 0, 1000));
        QCOMPARE(*s.speculationCandidate(), a->subtask.id);
        QVERIFY(s.grantReplica(a->subtask.id, 5, 0, 0, 1000));
        QCOMPARE(*s.speculationCandidate(), c->subtask.id);
        QVERIFY(s.grantReplica(c->subtask.id, 6, 0, 0, 1000));
        QVERIFY(!s.speculationCandidate());
        // b's first worker is lost: its copy is alone again, and a candidate.
        s.workerLost(2);
        QCOMPARE(*s.speculationCandidate(), b->subtask.id);
        // Completing it supersedes nothing left and leaves no candidate.
        auto check = s.check(s.activeLeaseOf(4)->id);
        s.complete(check.lease.id, 10, 1);
        QVERIFY(!s.speculationCandidate());
    }
};

QTEST_GUILESS_MAIN(TestScheduler)
#include "tst_scheduler.moc"
