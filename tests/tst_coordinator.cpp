// The coordinator with a fake clock and a real store in a temporary run directory: whole
// jobs, bad results (NaN, wrong shape, unknown or foreign leases, duplicates), late and
// partial results, resuming from the store, corrupt and orphan checkpoints, cost.
#include "CoordinatorFixture.h"

class TestCoordinator : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void wholeJobAssimilatesEachShardOnce()
    {
        Fixture f;
        auto c = f.open();
        QVERIFY(c);
        QVERIFY(!c->resumed());
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        const int n = runToEnd(*c, {w1, w2});
        QCOMPARE(n, 2 * 6);
        QVERIFY(c->finished());
        const JobProgress p = c->progress();
        QCOMPARE(p.seq, qint64(12));
        QCOMPARE(p.version, qint64(12));
        QCOMPARE(p.epochsDone, 2);
        // The figure reported is the final global model's own, evaluated again here.
        QCOMPARE(p.evaluatedEpoch, 1);
        auto model = createModel(f.spec.model, f.data->inputShape, f.data->numClasses);
        QVERIFY(model);
        auto again = evaluate(**model, c->globalWeights(), f.data->test, torch::Device(torch::kCPU), TaskLoss{});
        QVERIFY(again);
        QCOMPARE(p.testAccuracy, again->accuracy);
        QVERIFY(p.testAccuracy > 0.0 && p.testAccuracy <= 1.0);

        auto rows = c->store().assimilations(1);
        QVERIFY(rows);
        std::map<std::pair<int, int>, int> perShard;
        qint64 expectSeq = 1;
        for (const auto &a : *rows) {
            QCOMPARE(a.seq, expectSeq++);
            ++perShard[{a.epoch, a.shard}];
        }
        QCOMPARE(int(perShard.size()), 12);
        for (const auto &[key, count] : perShard)
            QCOMPARE(count, 1);
        QVERIFY(QFileInfo::exists(f.dir.filePath(QStringLiteral("model.pt"))));
        QFile csv(f.dir.filePath(QStringLiteral("metrics.csv")));
        QVERIFY(csv.open(QIODevice::ReadOnly));
        QCOMPARE(csv.readAll().count('\n'), qsizetype(13)); // header + 12 assimilations
        QCOMPARE(countEvents(*c, QStringLiteral("evaluation")), 2);
        QCOMPARE(countEvents(*c, QStringLiteral("job-finished")), 1);
    }

    void nanWeightsAreRejectedAndTheModelIsUntouched()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        const torch::Tensor before = c->globalWeights().clone();
        SubtaskResult r = fakeResult(*a);
        r.weights[3] = std::numeric_limits<float>::quiet_NaN();
        const SubmitReply reply = c->submitResult(w, r);
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY2(reply.reason.contains(QStringLiteral("NaN")), qPrintable(reply.reason));
        QVERIFY(torch::equal(before, c->globalWeights()));
        QCOMPARE(c->progress().seq, qint64(0));
        QCOMPARE(countEvents(*c, QStringLiteral("result-rejected")), 1);
        // The shard is handed out again.
        auto again = c->requestSubtask(w);
        QVERIFY(again);
        QCOMPARE(again->subtaskId, a->subtaskId);

        SubtaskResult inf = fakeResult(*again);
        inf.weights[0] = std::numeric_limits<float>::infinity();
        QCOMPARE(c->submitResult(w, inf).status, SubmitStatus::Rejected);
        QVERIFY(torch::equal(before, c->globalWeights()));
    }

    void wrongShapeIsRejected()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        SubtaskResult r = fakeResult(*a);
        r.weights = torch::zeros({a->weights.numel() - 1});
        const SubmitReply reply = c->submitResult(w, r);
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY2(reply.reason.contains(QStringLiteral("values")), qPrintable(reply.reason));
        r.weights = torch::zeros({2, a->weights.numel() / 2});
        QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Rejected);
        r.weights = torch::zeros({a->weights.numel()}, torch::kFloat64);
        QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Rejected);
        QCOMPARE(c->progress().seq, qint64(0));
    }

    void unknownAndForeignLeasesAreRejected()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto a = c->requestSubtask(w1);
        SubtaskResult r = fakeResult(*a);
        r.leaseId = 4242;
        SubmitReply reply = c->submitResult(w1, r);
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY(reply.reason.contains(QStringLiteral("4242")));
        reply = c->submitResult(w2, fakeResult(*a)); // w2 never held this lease
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY(reply.reason.contains(QStringLiteral("another worker")));
        QCOMPARE(c->submitResult(w1, fakeResult(*a)).status, SubmitStatus::Assimilated);
    }

    void sameResultTwiceIsDroppedAsDuplicate()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Assimilated);
        const torch::Tensor after = c->globalWeights().clone();
        const SubmitReply again = c->submitResult(w, fakeResult(*a));
        QCOMPARE(again.status, SubmitStatus::Duplicate);
        QVERIFY(torch::equal(after, c->globalWeights()));
        QCOMPARE(c->progress().seq, qint64(1));
        QCOMPARE(countEvents(*c, QStringLiteral("result-duplicate")), 1);
    }

    void lateResultIsFoldedInAndTheReplacementDropped()
    {
        Fixture f;
        f.spec.fleet.leaseTimeoutSeconds = 10;
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("slow"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("fast"))).value();
        auto a = c->requestSubtask(w1);
        f.clock.advance(10'000);
        c->tick(); // w1's lease expires
        QCOMPARE(countEvents(*c, QStringLiteral("lease-expired")), 1);
        auto b = c->requestSubtask(w2);
        QCOMPARE(b->subtaskId, a->subtaskId);
        QCOMPARE(countEvents(*c, QStringLiteral("subtask-reassigned")), 1);
        const SubmitReply late = c->submitResult(w1, fakeResult(*a));
        QCOMPARE(late.status, SubmitStatus::Assimilated);
        QCOMPARE(late.staleness, qint64(0));
        QCOMPARE(c->submitResult(w2, fakeResult(*b)).status, SubmitStatus::Duplicate);
        // The expired lease's time was first counted as wasted, then reversed.
        auto totals = c->store().ledgerTotals(1);
        QVERIFY(totals);
        QCOMPARE(totals->usefulSeconds, 10.0);
        QCOMPARE(totals->wastedSeconds, 0.0);
    }

    void lateResultOfASplitSubtaskTakesThePositionsStillOwed()
    {
        // w1's lease expires; the subtask is split for slow w2 (it gets a piece of it, the rest
        // is queued); w1's late result trained the whole range. The rest is still owed, so
        // the late result takes all of it: no sample of the shard is trained twice.
        Fixture f;
        f.spec.fleet.leaseTimeoutSeconds = 10;
        f.spec.fleet.targetSubtaskSeconds = 1;
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("first"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("slow"))).value();
        auto a = c->requestSubtask(w1);
        const qint64 size = a->end - a->begin;
        f.clock.advance(10'000);
        c->tick();
        c->reportSpeed(w2, 5.0);
        auto b = c->requestSubtask(w2);
        QCOMPARE(b->subtaskId, a->subtaskId);
        const qint64 piece = b->end - b->begin;
        QVERIFY2(piece < size, qPrintable(QStringLiteral("not split: %1 of %2").arg(piece).arg(size)));
        const int queuedBefore = c->progress().queuedSubtasks;
        QCOMPARE(c->submitResult(w1, fakeResult(*a)).status, SubmitStatus::Assimilated);
        auto rows = c->store().assimilations(1);
        QCOMPARE(rows->size(), std::size_t(1));
        QCOMPARE(rows->front().coveredEnd, a->end);
        QCOMPARE(rows->front().credit, 1.0);
        QCOMPARE(c->progress().queuedSubtasks, queuedBefore - 1); // the split-off rest is done
        QCOMPARE(c->submitResult(w2, fakeResult(*b)).status, SubmitStatus::Duplicate); // superseded
    }

    void lateResultOverAPieceAssimilatedMeanwhileIsADuplicate()
    {
        Fixture f;
        f.spec.fleet.leaseTimeoutSeconds = 10;
        f.spec.fleet.targetSubtaskSeconds = 1;
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("first"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("slow"))).value();
        const qint64 w3 = c->workerJoined(test::spotWorker(QStringLiteral("third"))).value();
        auto a = c->requestSubtask(w1);
        f.clock.advance(10'000);
        c->tick();
        c->reportSpeed(w2, 5.0);
        auto b = c->requestSubtask(w2);
        // w3 trains the queued subtasks in order until it holds the split-off rest of a's
        // shard.
        std::optional<Assignment> rest = c->requestSubtask(w3);
        for (int i = 0; i < 20 && rest && !(rest->shard == a->shard && rest->begin == b->end); ++i) {
            QCOMPARE(c->submitResult(w3, fakeResult(*rest)).status, SubmitStatus::Assimilated);
            rest = c->requestSubtask(w3);
        }
        QVERIFY(rest);
        QCOMPARE(rest->shard, a->shard);
        QCOMPARE(rest->begin, b->end);
        QCOMPARE(c->submitResult(w3, fakeResult(*rest)).status, SubmitStatus::Assimilated);
        const SubmitReply late = c->submitResult(w1, fakeResult(*a));
        QCOMPARE(late.status, SubmitStatus::Duplicate);
        QVERIFY2(late.reason.contains(QStringLiteral("assimilated from another result")), qPrintable(late.reason));
        // w2's piece is still owed and w2 can deliver it.
        QCOMPARE(c->submitResult(w2, fakeResult(*b)).status, SubmitStatus::Assimilated);
    }

    void partialResultIsCreditedAndTheRemainderReassigned()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        const qint64 size = a->end - a->begin;
        const SubmitReply reply = c->submitResult(w, fakeResult(*a, 10));
        QCOMPARE(reply.status, SubmitStatus::Assimilated);
        auto rows = c->store().assimilations(1);
        QCOMPARE(rows->size(), std::size_t(1));
        QCOMPARE(rows->front().credit, 10.0 / double(size));
        QCOMPARE(rows->front().coveredEnd, qint64(10));
        QCOMPARE(countEvents(*c, QStringLiteral("result-partial")), 1);
        // The rest of the shard comes before the next epoch's work.
        std::optional<Assignment> rest;
        for (int i = 0; i < 20 && !rest; ++i) {
            auto next = c->requestSubtask(w);
            if (next->shard == a->shard && next->epoch == a->epoch)
                rest = next;
            else
                c->submitResult(w, fakeResult(*next));
        }
        QVERIFY(rest);
        QCOMPARE(rest->begin, qint64(10));
        QCOMPARE(rest->end, a->end);
    }

    void returningWorkerLosesItsLease()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        f.clock.advance(2000);
        QCOMPARE(c->workerJoined(test::spotWorker(QStringLiteral("a")), w).value(), w);
        QCOMPARE(countEvents(*c, QStringLiteral("lease-lost")), 1);
        auto again = c->requestSubtask(w);
        QCOMPARE(again->subtaskId, a->subtaskId);
        auto totals = c->store().ledgerTotals(1);
        QCOMPARE(totals->wastedSeconds, 2.0);
    }

    void costIsRecordedAtSpotAndOnDemandPrices()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        f.clock.advance(3600'000); // one hour of aws/c5.large
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Assimilated);
        auto t = c->store().ledgerTotals(1);
        QCOMPARE(t->usefulSeconds, 3600.0);
        QVERIFY(qFuzzyCompare(t->costSpot, 0.032));
        QVERIFY(qFuzzyCompare(t->costOnDemand, 0.085));
        QVERIFY(qFuzzyCompare(t->costActual, 0.032));
        QVERIFY(qAbs(t->savingsPercent() - 100.0 * (1.0 - 0.032 / 0.085)) < 1e-9);
    }

    void unknownInstanceTypeIsAClearError()
    {
        Fixture f;
        auto c = f.open();
        WorkerInfo w = test::spotWorker(QStringLiteral("a"));
        w.instanceType = QStringLiteral("aws/x99.mega");
        auto joined = c->workerJoined(w);
        QVERIFY(!joined);
        QVERIFY(joined.error().contains(QStringLiteral("x99.mega")));
    }

    void resumesFromTheStoreWithNothingLost()
    {
        Fixture f;
        qint64 w = 0;
        torch::Tensor weightsAtKill;
        {
            auto c = f.open();
            w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
            for (int i = 0; i < 5; ++i) {
                auto a = c->requestSubtask(w);
                c->submitResult(w, fakeResult(*a));
            }
            c->requestSubtask(w); // held when the process "dies"
            weightsAtKill = c->globalWeights().clone();
        } // the coordinator is gone without any goodbye
        // An assimilation that wrote its checkpoint but never committed leaves an orphan.
        test::writeFile(f.dir.filePath(QStringLiteral("checkpoints/state-000000006.ckpt")), "not committed");
        f.clock.advance(3600'000); // the job stays down for an hour

        auto c = f.open();
        QVERIFY(c);
        QVERIFY(c->resumed());
        QCOMPARE(c->progress().seq, qint64(5));
        QVERIFY(torch::equal(weightsAtKill, c->globalWeights()));
        QVERIFY(!QFileInfo::exists(f.dir.filePath(QStringLiteral("checkpoints/state-000000006.ckpt"))));
        QCOMPARE(countEvents(*c, QStringLiteral("lease-lost")), 1);
        QCOMPARE(countEvents(*c, QStringLiteral("job-resumed")), 1);
        // The lost lease's time ends when the old coordinator was last heard of, not after
        // the hour the job was down.
        QCOMPARE(c->store().ledgerTotals(1)->wastedSeconds, 0.0);
        const qint64 back = c->workerJoined(test::spotWorker(QStringLiteral("a")), w).value();
        runToEnd(*c, {back});
        QVERIFY(c->finished());
        auto rows = c->store().assimilations(1);
        QCOMPARE(rows->size(), std::size_t(12));
        std::map<std::pair<int, int>, int> perShard;
        for (std::size_t i = 0; i < rows->size(); ++i) {
            QCOMPARE((*rows)[i].seq, qint64(i) + 1);
            ++perShard[{(*rows)[i].epoch, (*rows)[i].shard}];
        }
        for (const auto &[key, count] : perShard)
            QCOMPARE(count, 1);

        auto reopened = Coordinator::open(f.spec, f.dir.path(), &f.clock, f.data);
        QVERIFY(!reopened);
        QVERIFY(reopened.error().contains(QStringLiteral("already finished")));
    }

    void aSecondCoordinatorInTheSameRunFolderIsRefused()
    {
        Fixture f;
        auto first = f.open();
        QVERIFY(first);
        auto second = Coordinator::open(f.spec, f.dir.path(), &f.clock, f.data);
        QVERIFY(!second);
        QVERIFY2(second.error().contains(QStringLiteral("in use by another Flotilla process (pid %1").arg(QCoreApplication::applicationPid())),
                 qPrintable(second.error()));
        // The first one is untouched and keeps working.
        const qint64 w = first->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        QVERIFY(first->requestSubtask(w).has_value());
        first.reset();
        QVERIFY(f.open()); // the folder is free again
    }

    void corruptCheckpointIsRefusedOnResume()
    {
        Fixture f;
        {
            auto c = f.open();
            const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
            auto a = c->requestSubtask(w);
            c->submitResult(w, fakeResult(*a));
        }
        QFile file(f.dir.filePath(QStringLiteral("checkpoints/state-000000001.ckpt")));
        QVERIFY(file.open(QIODevice::ReadWrite));
        file.seek(file.size() - 8);
        file.write("garbage!");
        file.close();
        auto c = Coordinator::open(f.spec, f.dir.path(), &f.clock, f.data);
        QVERIFY(!c);
        QVERIFY2(c.error().contains(QStringLiteral("corrupt")), qPrintable(c.error()));
    }

    void synchronousAveragingMakesOneVersionPerRound()
    {
        Fixture f;
        f.spec.aggregation.rule = QStringLiteral("sync-average");
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        runToEnd(*c, {w1, w2});
        QVERIFY(c->finished());
        QCOMPARE(c->progress().seq, qint64(12));
        QCOMPARE(c->progress().version, qint64(2)); // one per epoch
        auto rows = c->store().assimilations(1);
        for (const auto &a : *rows)
            QCOMPARE(a.staleness, qint64(0));
    }

    // Rounds (aggregation.rounds) through the coordinator: one subtask per worker online from
    // the same version, a worker that delivered waits for the round, pieces of round_steps
    // steps; the whole job assimilates every position of every shard exactly once.
    void roundsAssimilateEveryShardExactlyOnce()
    {
        Fixture f;
        f.spec.aggregation.rule = QStringLiteral("async-delta");
        f.spec.aggregation.rounds = true;
        f.spec.aggregation.roundSteps = 1;
        f.spec.aggregation.outerScaledByFleet = true;
        f.spec.aggregation.outerMomentum = 0.9;
        f.spec.aggregation.outerLearningRate = 1.25;
        auto c = f.open();
        QVERIFY(c);
        std::vector<qint64> workers;
        for (const char *name : {"a", "b", "c"})
            workers.push_back(c->workerJoined(test::spotWorker(QString::fromLatin1(name))).value());
        // Round one: three leases from version 0, then nothing until they are in.
        auto a = c->requestSubtask(workers[0]);
        auto b = c->requestSubtask(workers[1]);
        auto d = c->requestSubtask(workers[2]);
        QVERIFY(a && b && d);
        QCOMPARE(a->end - a->begin, qint64(f.spec.training.batchSize));
        QVERIFY(c->roundFull());
        QCOMPARE(c->submitResult(workers[0], fakeResult(*a)).status, SubmitStatus::Held);
        QVERIFY(!c->requestSubtask(workers[0]));
        QCOMPARE(c->submitResult(workers[1], fakeResult(*b)).status, SubmitStatus::Held);
        QCOMPARE(c->progress().version, qint64(0));
        QCOMPARE(c->submitResult(workers[2], fakeResult(*d)).status, SubmitStatus::Assimilated);
        QCOMPARE(c->progress().version, qint64(1));
        QVERIFY(!c->roundFull());
        for (int guard = 0; guard < 100000 && !c->finished(); ++guard)
            for (const qint64 w : workers)
                if (auto next = c->requestSubtask(w))
                    c->submitResult(w, fakeResult(*next));
        QVERIFY(c->finished());
        std::vector<qint64> sizes;
        for (int s = 0; s < f.data->plan.numShards(); ++s)
            sizes.push_back(f.data->plan.shardSize(s));
        const QString wrong = test::verifyExactlyOnce(c->store(), sizes, f.spec.training.epochs);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
    }

    // aggregation.worker_momentum_scaled_by_fleet: a lease's momentum is 1 − N·(1 − μ) for N
    // workers online, the job's own for one.
    void workersMomentumFallsWithTheFleet()
    {
        Fixture f;
        f.spec.aggregation.workerMomentumScaledByFleet = true;
        f.spec.training.momentum = 0.9;
        auto c = f.open();
        QVERIFY(c);
        const qint64 first = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto alone = c->requestSubtask(first);
        QVERIFY(alone);
        QCOMPARE(alone->config.momentum, 0.9);
        qint64 last = 0;
        for (const char *name : {"b", "c", "d"})
            last = c->workerJoined(test::spotWorker(QString::fromLatin1(name))).value();
        auto four = c->requestSubtask(last);
        QVERIFY(four);
        QVERIFY(std::abs(four->config.momentum - 0.6) < 1e-12);
    }

    void asyncDeltaUsesTheBaseOfStaleResults()
    {
        Fixture f;
        f.spec.aggregation.rule = QStringLiteral("async-delta");
        f.spec.aggregation.stalenessDamping = 0;
        auto c = f.open();
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto stale = c->requestSubtask(w1); // starts at version 0
        auto fresh = c->requestSubtask(w2);
        QCOMPARE(c->submitResult(w2, fakeResult(*fresh)).status, SubmitStatus::Assimilated);
        const torch::Tensor before = c->globalWeights().clone();
        const SubmitReply r = c->submitResult(w1, fakeResult(*stale));
        QCOMPARE(r.status, SubmitStatus::Assimilated);
        QCOMPARE(r.staleness, qint64(1));
        // W_c − W_base = +0.01 everywhere, applied to the current W.
        QVERIFY(torch::allclose(c->globalWeights(), before + 0.01f, 1e-5, 1e-6));
        runToEnd(*c, {w1, w2});
        QVERIFY(c->finished());
    }

    void workersTrainForReal()
    {
        // The real trainer on the blobs data learns the problem.
        Fixture f;
        f.spec.training.epochs = 3;
        auto c = f.open();
        auto model = createModel(f.spec.model, f.data->inputShape, f.data->numClasses).value();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        while (!c->finished()) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            const auto order = f.data->plan.epochOrder(a->shard, a->epoch);
            const Dataset visit = f.data->train.select(std::vector<std::int64_t>(order.begin() + a->begin, order.begin() + a->end));
            auto out = trainSubtask(*model, a->weights, visit, a->config, torch::kCPU);
            QVERIFY(out);
            QCOMPARE(c->submitResult(w, SubtaskResult::fromOutcome(a->leaseId, *out)).status, SubmitStatus::Assimilated);
        }
        QVERIFY2(c->progress().testAccuracy > 0.95, qPrintable(QString::number(c->progress().testAccuracy)));
    }

    void slowWorkerGetsLessWorkAndAShorterLease()
    {
        Fixture f;
        f.spec.fleet.targetSubtaskSeconds = 5;
        auto c = f.open();
        WorkerInfo slow = test::spotWorker(QStringLiteral("slow"));
        slow.samplesPerSecond = 2; // 5 s of work: 10 samples, raised to one batch of 16
        const qint64 w = c->workerJoined(slow).value();
        auto a = c->requestSubtask(w);
        QCOMPARE(a->end - a->begin, qint64(16));
        // Three times the expected 8 s, plus 10 s.
        QCOMPARE(a->deadlineMs, f.clock.nowMs() + 34'000);
        const qint64 unknown = c->workerJoined(test::spotWorker(QStringLiteral("new"))).value();
        auto b = c->requestSubtask(unknown);
        // A worker of unknown speed gets a whole shard on the longest lease; the rest of the
        // slow worker's shard waits in the queue.
        QCOMPARE(b->end - b->begin, qint64(40));
        QCOMPARE(b->deadlineMs, f.clock.nowMs() + 60'000);
        // Measured speed replaces the reported one once a result is in.
        f.clock.advance(1000);
        SubtaskResult r = fakeResult(*a);
        r.seconds = 0.5;
        QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Assimilated);
        QCOMPARE(c->workerSpeed(w), 0.7 * 2 + 0.3 * 32);
    }

    // Rounds pace a slow machine from the speeds the workers report when they join: its piece
    // is its share of the fastest's (round(2 × 100/300) = 1 batch of 16), so that the round
    // does not wait three times as long for it; the round's pieces stay whole batches.
    void aRoundPacesASlowWorker()
    {
        Fixture f;
        f.spec.aggregation.rounds = true;
        f.spec.aggregation.roundSteps = 2; // pieces of at most 2 batches of 16
        auto c = f.open();
        WorkerInfo fast = test::spotWorker(QStringLiteral("fast"));
        fast.samplesPerSecond = 300;
        WorkerInfo slow = test::spotWorker(QStringLiteral("slow"));
        slow.samplesPerSecond = 100;
        const qint64 wf = c->workerJoined(fast).value();
        const qint64 ws = c->workerJoined(slow).value();
        auto a = c->requestSubtask(wf);
        auto b = c->requestSubtask(ws);
        QVERIFY(a && b);
        QCOMPARE(a->end - a->begin, qint64(32)); // a shard of 40 positions: 2 batches, then the rest
        QCOMPARE(b->end - b->begin, qint64(16));
        QCOMPARE(c->submitResult(wf, fakeResult(*a)).status, SubmitStatus::Held); // waits for the round
        QCOMPARE(c->submitResult(ws, fakeResult(*b)).status, SubmitStatus::Assimilated);
        QVERIFY(c->requestSubtask(ws));
    }

    void silentWorkerIsDeclaredGone()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 other = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto a = c->requestSubtask(w);
        f.clock.advance(20'000);
        c->heartbeat(other, 0, 0, 0);
        f.clock.advance(11'000); // w: 31 s of silence; other: 11 s
        c->tick();
        QVERIFY(!c->isOnline(w));
        QVERIFY(c->isOnline(other));
        auto left = c->store().events(1, QStringLiteral("worker-left"));
        QCOMPARE(left->size(), std::size_t(1));
        QVERIFY2(left->front().detail.contains(QStringLiteral("missed heartbeats")), qPrintable(left->front().detail));
        auto b = c->requestSubtask(other);
        QCOMPARE(b->subtaskId, a->subtaskId);
    }

    void foldThatWouldOverflowIsRefusedAndTheModelKept()
    {
        // The guard refuses a fold that would overflow (see makeOverflowing).
        Fixture f;
        makeOverflowing(f);
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        const torch::Tensor before = c->globalWeights().clone();
        SubtaskResult r = fakeResult(*a);
        r.weights = a->weights * 100.0f;
        QVERIFY(torch::isfinite(r.weights).all().item<bool>());
        const SubmitReply reply = c->submitResult(w, r);
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY2(reply.reason.contains(QStringLiteral("non-finite")), qPrintable(reply.reason));
        QVERIFY(torch::equal(before, c->globalWeights()));
        QCOMPARE(c->progress().seq, qint64(0));
        QVERIFY(c->fatalError().isEmpty());
        QCOMPARE(countEvents(*c, QStringLiteral("result-rejected")), 1);
        // The job goes on: the shard is handed out again and an honest result lands.
        auto again = c->requestSubtask(w);
        QVERIFY(again);
        QCOMPARE(again->subtaskId, a->subtaskId);
        QCOMPARE(c->submitResult(w, fakeResult(*again)).status, SubmitStatus::Assimilated);
        QVERIFY(torch::isfinite(c->globalWeights()).all().item<bool>());
    }

    // A model that stops getting better: the best evaluation is kept as model-best.pt, and
    // with early_stop_after 2 the job ends two evaluations later, saying why, with the
    // results still on their way answered and not folded.
    void earlyStoppingKeepsTheBestModelAndEndsTheJob()
    {
        Fixture f;
        f.spec.training.epochs = 8;
        f.spec.training.earlyStopAfter = 2;
        f.spec.fleet.screenResults = false; // the results below change nothing
        f.spec.fleet.epochsAhead = 2; // epoch 4 opens before epoch 3 is done: b holds one of it
        auto c = f.open();
        QVERIFY(c);
        // Three workers train; a fourth asks after them and keeps the first lease of the
        // fourth epoch it is given (six shards among four: it gets one while the third
        // epoch's last subtasks are still out), open when the job ends.
        std::vector<qint64> workers;
        for (const char *name : {"a", "b", "c", "d"})
            workers.push_back(c->workerJoined(test::spotWorker(QString::fromLatin1(name))).value());
        const auto trainNothing = [&](qint64 w, const Assignment &x) {
            SubtaskResult r = fakeResult(x);
            r.weights = x.weights.clone(); // the accuracy stays as it was
            c->submitResult(w, r);
        };
        std::optional<Assignment> held;
        torch::Tensor first;
        for (int guard = 0; guard < 10000 && !c->finished(); ++guard) {
            std::vector<std::optional<Assignment>> out;
            for (int i = 0; i < 3; ++i)
                out.push_back(c->requestSubtask(workers[std::size_t(i)]));
            if (out[0] && !first.defined())
                first = out[0]->weights.clone();
            if (!held) {
                if (auto z = c->requestSubtask(workers[3]); z && z->epoch >= 3)
                    held = z;
                else if (z)
                    trainNothing(workers[3], *z);
            }
            for (int i = 0; i < 3; ++i)
                if (out[std::size_t(i)] && !c->finished())
                    trainNothing(workers[std::size_t(i)], *out[std::size_t(i)]);
        }
        QVERIFY(c->finished());
        QVERIFY(c->fatalError().isEmpty());
        QCOMPARE(c->progress().evaluatedEpoch, 2); // epochs 1, 2 and 3 evaluated, of 8
        const QString finished = lastEventDetail(*c, QStringLiteral("job-finished"));
        QVERIFY2(finished.contains(QStringLiteral("stopped early after epoch 3 of 8")), qPrintable(finished));
        QVERIFY2(finished.contains(QStringLiteral("at epoch 1")), qPrintable(finished));
        QVERIFY(QFileInfo::exists(f.dir.filePath(QStringLiteral("model.pt"))));
        QVERIFY(QFileInfo::exists(f.dir.filePath(QStringLiteral("model-best.pt"))));
        QVERIFY(!QFileInfo::exists(f.dir.filePath(QStringLiteral("model-best.pt.part"))));
        // model-best.pt is the model of the first evaluation (no later one was better), as
        // TorchScript that loads back with the same weights.
        ModelSpec saved;
        saved.kind = QStringLiteral("torchscript");
        saved.path = f.dir.filePath(QStringLiteral("model-best.pt"));
        auto best = createModel(saved, f.data->inputShape, f.data->numClasses);
        QVERIFY2(best, qPrintable(best ? QString() : best.error()));
        QVERIFY(torch::equal((*best)->flatWeights(), first));
        // The lease b still holds is answered, not folded into the saved model.
        QVERIFY(held);
        const qint64 seq = c->progress().seq;
        const SubmitReply late = c->submitResult(workers[3], fakeResult(*held));
        QCOMPARE(late.status, SubmitStatus::Duplicate);
        QCOMPARE(c->progress().seq, seq);
        // The run folder says it has finished: it is not resumed.
        c.reset();
        QVERIFY(!Coordinator::open(f.spec, f.dir.path(), &f.clock, f.data));
    }

    // By loss, without early stopping: every improvement replaces model-best.pt, and the job
    // runs all its epochs.
    void theBestModelByLossIsKept()
    {
        Fixture f;
        f.spec.training.epochs = 2;
        f.spec.training.bestMetric = QStringLiteral("loss");
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        runToEnd(*c, {w});
        QVERIFY(c->finished());
        QVERIFY(lastEventDetail(*c, QStringLiteral("job-finished")).startsWith(QStringLiteral("2 epochs")));
        QVERIFY(QFileInfo::exists(f.dir.filePath(QStringLiteral("model-best.pt"))));
    }

    // A finished run exports what each evaluation found: the store keeps the confusion matrix
    // per evaluation, confusion.csv holds the last with each class's accuracy, metrics.csv has
    // a top-5 column, and the TensorBoard log has the training and test scalars.
    void evaluationsAreStoredAndExported()
    {
        Fixture f;
        f.spec.training.epochs = 2;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        runToEnd(*c, {w});
        QVERIFY(c->finished());
        auto details = c->store().evaluationDetails(1);
        QVERIFY(details);
        QCOMPARE(int(details->size()), 2);
        QCOMPARE(details->back().classes, 2);
        qint64 counted = 0;
        for (const qint64 n : details->back().confusion)
            counted += n;
        QCOMPARE(counted, f.data->test.size());
        QFile confusion(f.dir.filePath(QStringLiteral("confusion.csv")));
        QVERIFY(confusion.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = confusion.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 3);
        QCOMPARE(lines[0], QByteArray("true\\predicted,0,1,accuracy"));
        QFile metrics(f.dir.filePath(QStringLiteral("metrics.csv")));
        QVERIFY(metrics.open(QIODevice::ReadOnly));
        QVERIFY(metrics.readLine().trimmed().endsWith("test_loss,test_top5_accuracy"));
        const QStringList boards = QDir(f.dir.filePath(QStringLiteral("tensorboard"))).entryList(QDir::Files);
        QCOMPARE(boards.size(), 1);
        auto events = readTensorBoardEvents(f.dir.filePath(QStringLiteral("tensorboard/")) + boards.front());
        QVERIFY2(events, qPrintable(events ? QString() : events.error()));
        QSet<QString> tags;
        for (const auto &e : *events)
            for (const auto &v : e.values)
                tags.insert(v.tag);
        for (const char *tag : {"job/settings", "train/loss", "train/staleness", "train/learning_rate",
                                "fleet/workers_online", "cost/savings_percent", "test/accuracy", "test/loss",
                                "test/class_accuracy/0", "test/class_accuracy/1"})
            QVERIFY2(tags.contains(QString::fromLatin1(tag)), tag);
    }

    void failedEvaluationIsRetriedThenTheJobEnds()
    {
        // Evaluation batches (64 of the 200 test samples at once on a CPU) make the model throw
        // (as a GPU out of memory would); training batches (16) do not. Evaluated inline, each failure is retried at once, three in all,
        // and the job ends without an accuracy instead of waiting for one forever.
        Fixture f;
        f.spec.training.epochs = 1;
        f.spec.model.kind = QStringLiteral("torchscript");
        f.spec.model.path = scriptModel(f.dir.path(), 0.1f,
                                        "    if x.size(0) > 32:\n"
                                        "        y = y.view(-1, 7)\n");
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        runToEnd(*c, {w});
        QVERIFY(c->finished());
        QVERIFY(c->fatalError().isEmpty());
        QCOMPARE(countEvents(*c, QStringLiteral("evaluation-failed")), 3);
        QVERIFY2(lastEventDetail(*c, QStringLiteral("evaluation-failed")).contains(QStringLiteral("is invalid for input")),
                 qPrintable(lastEventDetail(*c, QStringLiteral("evaluation-failed"))));
        QVERIFY2(lastEventDetail(*c, QStringLiteral("job-finished")).contains(QStringLiteral("accuracy unknown")),
                 qPrintable(lastEventDetail(*c, QStringLiteral("job-finished"))));
        QVERIFY(QFileInfo::exists(f.dir.filePath(QStringLiteral("model.pt"))));
    }

    void evaluationRetriesAreDeferredAndTheLastRunsOnTheCpu()
    {
        // With an evaluator elsewhere (the service's pool), retries wait 2 s, then 4 s, on the
        // coordinator's clock; the last asks for the CPU when the job's device is not "cpu".
        Fixture f;
        f.spec.training.epochs = 1;
        f.spec.training.device = QStringLiteral("auto");
        auto c = f.open();
        QVERIFY(c);
        std::vector<EvaluationRequest> asked;
        keepEvaluationRequests(*c, asked);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        runToEnd(*c, {w});
        QCOMPARE(int(asked.size()), 1);
        QVERIFY(!c->finished());
        c->evaluationFailed(asked.back(), QStringLiteral("CUDA error: an illegal memory access"));
        c->tick();
        QCOMPARE(int(asked.size()), 1); // not yet: 2 s later
        f.clock.advance(2000);
        c->tick();
        QCOMPARE(int(asked.size()), 2);
        QCOMPARE(asked.back().attempt, 2);
        QVERIFY(!asked.back().onCpu);
        c->evaluationFailed(asked.back(), QStringLiteral("CUDA error: an illegal memory access"));
        f.clock.advance(4000);
        c->tick();
        QCOMPARE(int(asked.size()), 3);
        QVERIFY(asked.back().onCpu);
        Evaluation onCpu;
        onCpu.accuracy = 0.9;
        onCpu.loss = 0.3;
        onCpu.samples = 200;
        c->recordEvaluation(asked.back(), onCpu);
        QVERIFY(c->finished());
        QCOMPARE(c->progress().testAccuracy, 0.9);
        QCOMPARE(countEvents(*c, QStringLiteral("evaluation-failed")), 2);
    }

    void nonFiniteTestLossReadsAsAnExplanation()
    {
        // The model's outputs on evaluation batches are NaN. Users used to see a SQL
        // constraint here; now it is an evaluation failure that says why, and the job ends.
        Fixture f;
        f.spec.training.epochs = 1;
        f.spec.model.kind = QStringLiteral("torchscript");
        f.spec.model.path = scriptModel(f.dir.path(), 0.1f,
                                        "    if x.size(0) > 32:\n"
                                        "        y = y * float('nan')\n");
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        runToEnd(*c, {w});
        QVERIFY(c->finished());
        QVERIFY2(c->fatalError().isEmpty(), qPrintable(c->fatalError()));
        const QString detail = lastEventDetail(*c, QStringLiteral("evaluation-failed"));
        QVERIFY2(detail.contains(QStringLiteral("not finite")), qPrintable(detail));
        QVERIFY(!detail.contains(QStringLiteral("constraint")));
    }

};

QTEST_GUILESS_MAIN(TestCoordinator)
#include "tst_coordinator.moc"
