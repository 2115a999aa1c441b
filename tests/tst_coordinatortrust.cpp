// The coordinator's trust in results: quarantine and release, screening (on and off, per
// synchronous round), redundancy and a third opinion, held and buffered results across a
// restart, speculative copies, dismissing idle workers, a coordinator that stalled, refused
// subtasks trained again with other draws (tests/testsupport/CoordinatorFixture.h).
#include "CoordinatorFixture.h"
#include "engine/coordination/ResultScreen.h"

class TestCoordinatorTrust : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void repeatedlyRejectedWorkerIsQuarantinedAndReleased()
    {
        // A worker that keeps returning its base scaled by 50 is refused each time (the update
        // is far larger than the model) and quarantined after the third; an honest worker
        // beside it is never refused. An operator's request (as `flotilla release` writes it)
        // lifts the quarantine, and the record survives a restart of the coordinator.
        Fixture f;
        f.spec.training.epochs = 4;
        auto c = f.open();
        QVERIFY(c);
        const qint64 honest = c->workerJoined(test::spotWorker(QStringLiteral("honest"))).value();
        const qint64 bad = c->workerJoined(test::spotWorker(QStringLiteral("attacker"))).value();
        for (int i = 0; i < 3; ++i) {
            auto h = c->requestSubtask(honest);
            QVERIFY(h);
            QCOMPARE(c->submitResult(honest, fakeResult(*h)).status, SubmitStatus::Assimilated);
            auto a = c->requestSubtask(bad);
            QVERIFY2(a, qPrintable(QStringLiteral("round %1").arg(i)));
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights * 50.0f;
            const SubmitReply reply = c->submitResult(bad, r);
            QCOMPARE(reply.status, SubmitStatus::Rejected);
            QVERIFY2(reply.reason.startsWith(QStringLiteral("screened out")), qPrintable(reply.reason));
        }
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 1);
        QVERIFY(!lastEventDetail(*c, QStringLiteral("worker-quarantined")).contains(QStringLiteral("No other worker")));
        QVERIFY(!c->requestSubtask(bad)); // no more work for it
        QVERIFY(c->requestSubtask(honest));
        std::map<qint64, WorkerStatus> statuses;
        for (const auto &w : c->workerStatuses())
            statuses[w.id] = w;
        QVERIFY(statuses[bad].quarantined);
        QCOMPARE(statuses[bad].rejected, 3);
        QVERIFY(statuses[bad].trust < 0.2);
        QVERIFY2(statuses[bad].quarantineReason.contains(QStringLiteral("3 of its last 3")),
                 qPrintable(statuses[bad].quarantineReason));
        QVERIFY(!statuses[honest].quarantined);
        QCOMPARE(statuses[honest].rejected, 0);
        QCOMPARE(c->progress().quarantined, 1);

        // The quarantine is in the store: a restarted coordinator keeps it.
        c.reset();
        c = f.open();
        QVERIFY(c);
        QVERIFY(c->workerJoined(test::spotWorker(QStringLiteral("attacker")), bad));
        QVERIFY(!c->requestSubtask(bad));

        // `flotilla release attacker --run-dir ...` writes a request; the next tick applies it.
        QVERIFY(c->store().addOperatorRequest(1, QStringLiteral("release"), QStringLiteral("attacker"), f.clock.nowMs()));
        f.clock.advance(3000);
        c->tick();
        QCOMPARE(countEvents(*c, QStringLiteral("worker-released")), 1);
        QVERIFY(c->requestSubtask(bad));
        auto pending = c->store().pendingOperatorRequests(1);
        QVERIFY(pending && pending->empty());
    }

    void aResultThatMovedOnlyUnsampledParametersWasTrained()
    {
        // The screen looks at a sample of 16,384 parameters. A network that collapsed (its
        // ReLUs dead, only an output bias still learning) or one with frozen layers moves only
        // parameters the sample may not hold: honest results whose sample did not move were
        // refused as "nothing was trained", and a whole honest fleet was quarantined (bench
        // scaling, the image folder at lr x 4 on 4 machines). The whole weights decide now.
        Fixture f;
        f.spec.model.hidden = {256, 64}; // 18,500 parameters: more than the sample
        auto c = f.open();
        QVERIFY(c);
        const WeightSegments segments = c->layout().segments();
        const std::int64_t parameters = segments.onlyParameters() ? segments.total : segments.parameterEnd;
        QVERIFY(parameters > ResultScreen::Config().sampleSize);
        // The coordinates the coordinator's screen samples: the same layout and seed.
        const ResultScreen screen(segments, f.spec.training.seed);
        const torch::Tensor sampled = screen.sample(torch::arange(parameters, torch::kFloat)).to(torch::kLong);
        std::set<std::int64_t> inSample;
        for (std::int64_t i = 0; i < sampled.numel(); ++i)
            inSample.insert(sampled[i].item<std::int64_t>());
        std::int64_t unsampled = parameters - 1; // the last parameters are the output layer's bias
        while (inSample.count(unsampled))
            --unsampled;

        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("remote"))).value();
        for (int i = 0; i < 4; ++i) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights.clone();
            r.weights[unsampled] += 0.01f;
            const SubmitReply reply = c->submitResult(w, r);
            QVERIFY2(reply.status == SubmitStatus::Assimilated, qPrintable(reply.reason));
        }
        // The base sent back unchanged is still refused, by its whole weights.
        auto idle = c->requestSubtask(w);
        QVERIFY(idle);
        SubtaskResult r = fakeResult(*idle);
        r.weights = idle->weights.clone();
        const SubmitReply refused = c->submitResult(w, r);
        QCOMPARE(refused.status, SubmitStatus::Rejected);
        QVERIFY2(refused.reason.contains(QStringLiteral("nothing was trained")), qPrintable(refused.reason));
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 0);
    }

    void aCollapsedModelsResultsAreNotJudgedByTheirDirection()
    {
        // A network that collapsed (it predicts one class for every test sample) trains little
        // but each shard's label mix, and honest workers that keep their shards point against
        // each other: two of four honest machines were quarantined that way on the image folder
        // at lr x 4. While the coordinator's latest evaluation shows such a model, directions
        // are not judged; once an evaluation shows more than one class predicted, they are again.
        Fixture f;
        f.spec.training.epochs = 6;
        auto c = f.open();
        QVERIFY(c);
        std::vector<EvaluationRequest> asked;
        keepEvaluationRequests(*c, asked);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("honest"))).value();
        const auto submit = [&](float step) {
            auto a = c->requestSubtask(w);
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights + step; // every weight the same way: one clear direction
            return c->submitResult(w, r);
        };
        for (int i = 0; i < 10; ++i)
            QCOMPARE(submit(0.01f).status, SubmitStatus::Assimilated);
        const SubmitReply reversed = submit(-0.01f);
        QCOMPARE(reversed.status, SubmitStatus::Rejected);
        QVERIFY2(reversed.reason.contains(QStringLiteral("against the fleet's recent direction")),
                 qPrintable(reversed.reason));
        QVERIFY(!asked.empty());

        // The evaluation of epoch 1: class 2 for all 40 test samples.
        Evaluation collapsed;
        collapsed.accuracy = 0.25;
        collapsed.loss = 1.39;
        collapsed.samples = 40;
        collapsed.classes = 4;
        collapsed.confusion = {0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10, 0};
        c->recordEvaluation(asked.front(), collapsed);
        QVERIFY2(lastEventDetail(*c, QStringLiteral("evaluation")).contains(QStringLiteral("for every test sample")),
                 qPrintable(lastEventDetail(*c, QStringLiteral("evaluation"))));
        for (int i = 0; i < 3; ++i) {
            const SubmitReply r = submit(-0.01f);
            QVERIFY2(r.status == SubmitStatus::Assimilated, qPrintable(r.reason));
        }
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 0);

        // A later evaluation predicts every class: directions count again.
        while (asked.size() < 2)
            QCOMPARE(submit(0.01f).status, SubmitStatus::Assimilated);
        Evaluation learning = collapsed;
        learning.accuracy = 0.75;
        learning.confusion = {8, 2, 0, 0, 0, 8, 2, 0, 0, 0, 8, 2, 2, 0, 0, 8};
        c->recordEvaluation(asked.back(), learning);
        QVERIFY2(lastEventDetail(*c, QStringLiteral("evaluation")).contains(QStringLiteral("judged again")),
                 qPrintable(lastEventDetail(*c, QStringLiteral("evaluation"))));
        for (int i = 0; i < 4; ++i)
            QCOMPARE(submit(0.01f).status, SubmitStatus::Assimilated);
        QCOMPARE(submit(-0.01f).status, SubmitStatus::Rejected);
    }

    void aFleetWhoseEveryResultIsRefusedIsNotQuarantined()
    {
        // A learning rate at which every honest worker's training blows up: each result comes
        // back far larger than the model and is refused. Quarantining them would keep four
        // honest machines from every job of the fleet (bench scaling, the image folder at
        // lr x 4 on 4 machines: all four were). While every other worker's last result was
        // refused too, none is quarantined and the job says no worker can train it. A worker
        // whose results are refused while another's are folded is quarantined as before.
        Fixture f;
        f.spec.training.epochs = 6;
        auto c = f.open();
        QVERIFY(c);
        const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 b = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        const auto blowUp = [&](qint64 w) {
            auto lease = c->requestSubtask(w);
            SubtaskResult r = fakeResult(*lease);
            r.weights = lease->weights * 50.0f;
            return c->submitResult(w, r).status;
        };
        for (int i = 0; i < 4; ++i) {
            QCOMPARE(blowUp(a), SubmitStatus::Rejected);
            QCOMPARE(blowUp(b), SubmitStatus::Rejected);
        }
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 0);
        c->tick();
        QVERIFY2(c->progress().stalled.contains(QStringLiteral("no connected worker can train this job")),
                 qPrintable(c->progress().stalled));
        // A worker whose results are folded joins; the one still refused is now the odd one out.
        const qint64 honest = c->workerJoined(test::spotWorker(QStringLiteral("honest"))).value();
        auto h = c->requestSubtask(honest);
        QVERIFY(h);
        QCOMPARE(c->submitResult(honest, fakeResult(*h)).status, SubmitStatus::Assimilated);
        QCOMPARE(blowUp(a), SubmitStatus::Rejected);
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 1);
        QVERIFY(lastEventDetail(*c, QStringLiteral("worker-quarantined")).startsWith(QStringLiteral("a:")));
    }

    void quarantiningTheLastWorkerSaysTheJobWaits()
    {
        // A fleet whose only worker is quarantined cannot progress; the event says so instead
        // of leaving the operator to wonder why nothing happens.
        Fixture f;
        auto c = f.open();
        QVERIFY(c);
        const qint64 bad = c->workerJoined(test::spotWorker(QStringLiteral("attacker"))).value();
        for (int i = 0; i < 3; ++i) {
            auto a = c->requestSubtask(bad);
            QVERIFY(a);
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights * 50.0f;
            QCOMPARE(c->submitResult(bad, r).status, SubmitStatus::Rejected);
        }
        const QString detail = lastEventDetail(*c, QStringLiteral("worker-quarantined"));
        QVERIFY2(detail.contains(QStringLiteral("No other worker is connected: the job waits")), qPrintable(detail));
        QVERIFY(!c->requestSubtask(bad));
        QVERIFY(!c->progress().finished);
    }

    void syncRoundsAreScreenedAgainstTheirOwnRound()
    {
        // Under sync-average every result of a round starts from the same model, and the next
        // round's updates can be several times smaller (after the first epoch of the BatchNorm
        // CNN, a fifth). Judged against the last round's sizes they looked "barely trained",
        // and since a retried subtask gives the same result, honest workers were quarantined
        // and the job waited for ever. Each round is screened against itself.
        Fixture f;
        f.data = test::blobs(240, 4, 12); // 12 results a round: more than the screen's warm-up
        f.spec = test::blobsJob(12, 2);
        f.spec.aggregation.rule = QStringLiteral("sync-average");
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        int assimilated = 0;
        for (int guard = 0; guard < 100 && !c->finished(); ++guard) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights + (a->epoch == 0 ? 0.01f : 0.001f);
            const SubmitReply reply = c->submitResult(w, r);
            QVERIFY2(reply.status == SubmitStatus::Assimilated,
                     qPrintable(QStringLiteral("epoch %1: %2").arg(a->epoch + 1).arg(reply.reason)));
            ++assimilated;
        }
        QVERIFY(c->finished());
        QCOMPARE(assimilated, 24);
        QCOMPARE(countEvents(*c, QStringLiteral("result-rejected")), 0);
    }

    void screeningCanBeTurnedOff()
    {
        Fixture f;
        f.spec.fleet.screenResults = false;
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        SubtaskResult r = fakeResult(*a);
        r.weights = a->weights * 50.0f; // within validate()'s 1000× bound
        QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Assimilated);
    }

    void redundantSubtasksAreComparedAndFoldedOnce()
    {
        // Every subtask goes to two workers from the same base; the first result is held, the
        // second confirms it, and only then is one of them folded in. The whole job still
        // assimilates each shard once per epoch.
        Fixture f;
        f.spec.fleet.redundancy = 1.0;
        auto c = f.open();
        QVERIFY(c);
        const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 b = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto first = c->requestSubtask(a);
        auto second = c->requestSubtask(b);
        QVERIFY(first && second);
        QCOMPARE(second->subtaskId, first->subtaskId);
        QCOMPARE(second->baseSeq, first->baseSeq);
        QVERIFY(second->leaseId != first->leaseId);
        QVERIFY(torch::equal(second->weights, first->weights));
        QCOMPARE(c->submitResult(a, fakeResult(*first)).status, SubmitStatus::Held);
        QCOMPARE(c->progress().seq, 0); // nothing folded yet
        // A resend of a held result is a duplicate, not a second vote.
        QCOMPARE(c->submitResult(a, fakeResult(*first)).status, SubmitStatus::Duplicate);
        QCOMPARE(c->submitResult(b, fakeResult(*second)).status, SubmitStatus::Held);
        QCOMPARE(c->progress().seq, 1);
        QCOMPARE(c->progress().verified, 1);
        QCOMPARE(countEvents(*c, QStringLiteral("result-verified")), 1);

        runToEnd(*c, {a, b});
        QVERIFY(c->finished());
        auto rows = c->store().assimilations(1);
        QVERIFY(rows);
        QCOMPARE(int(rows->size()), 12); // 2 epochs × 6 shards, each once
        std::set<std::pair<int, int>> seen;
        for (const auto &r : *rows)
            QVERIFY(seen.insert({r.epoch, r.shard}).second);
        QCOMPARE(c->progress().verified, 12);
        QCOMPARE(c->progress().rejected, 0);
    }

    void disagreementGoesToAThirdWorkerAndTheOddOneIsRejected()
    {
        Fixture f;
        f.spec.fleet.redundancy = 1.0;
        auto c = f.open();
        QVERIFY(c);
        const qint64 honest = c->workerJoined(test::spotWorker(QStringLiteral("honest"))).value();
        const qint64 liar = c->workerJoined(test::spotWorker(QStringLiteral("liar"))).value();
        const qint64 judge = c->workerJoined(test::spotWorker(QStringLiteral("judge"))).value();
        auto h = c->requestSubtask(honest);
        auto l = c->requestSubtask(liar);
        QVERIFY(h && l);
        QCOMPARE(l->subtaskId, h->subtaskId);
        QCOMPARE(c->submitResult(honest, fakeResult(*h)).status, SubmitStatus::Held);
        SubtaskResult lie = fakeResult(*l);
        lie.weights = l->weights - 0.01f; // as large as an honest update, the other way
        QCOMPARE(c->submitResult(liar, lie).status, SubmitStatus::Held);
        QCOMPARE(countEvents(*c, QStringLiteral("results-disagree")), 1);
        QCOMPARE(c->progress().seq, 0);
        // The liar gets no second say on this subtask; the third worker does.
        auto again = c->requestSubtask(liar);
        QVERIFY(!again || again->subtaskId != h->subtaskId);
        auto j = c->requestSubtask(judge);
        QVERIFY(j);
        QCOMPARE(j->subtaskId, h->subtaskId);
        QCOMPARE(j->baseSeq, h->baseSeq);
        c->submitResult(judge, fakeResult(*j));
        QCOMPARE(c->progress().seq, 1);
        QCOMPARE(countEvents(*c, QStringLiteral("result-rejected")), 1);
        QVERIFY2(lastEventDetail(*c, QStringLiteral("result-rejected")).contains(QStringLiteral("disagreed")),
                 qPrintable(lastEventDetail(*c, QStringLiteral("result-rejected"))));
        std::map<qint64, WorkerStatus> statuses;
        for (const auto &w : c->workerStatuses())
            statuses[w.id] = w;
        QCOMPARE(statuses[liar].rejected, 1);
        QCOMPARE(statuses[honest].rejected, 0);
        QCOMPARE(statuses[judge].rejected, 0);
        // What was folded is the honest result: every weight moved up, none down.
        QVERIFY((c->globalWeights() - h->weights).min().item<double>() > 0);
    }

    void heldResultNobodyChecksIsFoldedAfterTheLeaseTimeout()
    {
        Fixture f;
        f.spec.fleet.redundancy = 1.0;
        auto c = f.open();
        QVERIFY(c);
        const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        c->workerJoined(test::spotWorker(QStringLiteral("b"))).value(); // online, but never asks for work
        auto first = c->requestSubtask(a);
        QVERIFY(first);
        QCOMPARE(c->submitResult(a, fakeResult(*first)).status, SubmitStatus::Held);
        f.clock.advance(30000);
        c->tick();
        QCOMPARE(c->progress().seq, 0);
        f.clock.advance(31000); // past the lease timeout (60 s)
        c->tick();
        QCOMPARE(c->progress().seq, 1);
        QCOMPARE(countEvents(*c, QStringLiteral("result-unverified")), 1);
    }

    void heldResultsLostInARestartAreTrainedAgain()
    {
        Fixture f;
        f.spec.fleet.redundancy = 1.0;
        auto c = f.open();
        QVERIFY(c);
        const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 b = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto first = c->requestSubtask(a);
        QVERIFY(first);
        QCOMPARE(c->submitResult(a, fakeResult(*first)).status, SubmitStatus::Held);
        // The coordinator dies with the held result in memory only.
        c.reset();
        c = f.open();
        QVERIFY(c);
        QVERIFY(c->workerJoined(test::spotWorker(QStringLiteral("a")), a));
        QVERIFY(c->workerJoined(test::spotWorker(QStringLiteral("b")), b));
        runToEnd(*c, {a, b});
        QVERIFY(c->finished());
        auto rows = c->store().assimilations(1);
        QVERIFY(rows);
        QCOMPARE(int(rows->size()), 12);
    }

    void bufferedJobFoldsKResultsAsOneVersion()
    {
        // 12 results with a buffer of 5: folds at 5 and 10, and the last 2 are flushed when
        // nothing else can come (the job's end). Every result keeps its own seq.
        Fixture f;
        f.spec.aggregation.buffer = 5;
        auto c = f.open();
        QVERIFY(c);
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        int held = 0;
        int assimilated = 0;
        for (int guard = 0; guard < 1000 && !c->finished(); ++guard)
            for (const qint64 w : {w1, w2})
                if (auto a = c->requestSubtask(w)) {
                    const SubmitReply reply = c->submitResult(w, fakeResult(*a));
                    held += reply.status == SubmitStatus::Held;
                    assimilated += reply.status == SubmitStatus::Assimilated;
                    if (reply.status == SubmitStatus::Held)
                        QVERIFY2(reply.reason.contains(QStringLiteral("aggregation buffer")), qPrintable(reply.reason));
                }
        QVERIFY(c->finished());
        QCOMPARE(held, 10);       // 4 + 4 waited for a fold, 2 were flushed at the end
        QCOMPARE(assimilated, 2); // the 5th and the 10th made their folds
        const JobProgress p = c->progress();
        QCOMPARE(p.seq, qint64(12));
        QCOMPARE(p.version, qint64(3));
        QCOMPARE(p.bufferedResults, 0);
        auto rows = c->store().assimilations(1);
        QVERIFY(rows);
        QCOMPARE(int(rows->size()), 12);
        for (int i = 0; i < 12; ++i) {
            const AssimilationRecord &a = (*rows)[std::size_t(i)];
            QCOMPARE(a.seq, qint64(i + 1));
            QCOMPARE(a.version, qint64(i < 5 ? 1 : i < 10 ? 2 : 3));
        }
        const QString once = eachShardOnce(*rows, 12);
        QVERIFY2(once.isEmpty(), qPrintable(once));
        // One state per fold, none in between.
        for (qint64 seq = 1; seq <= 12; ++seq) {
            auto st = c->store().state(1, seq);
            QVERIFY(st);
            QCOMPARE(st->has_value(), seq == 5 || seq == 10 || seq == 12);
        }
        QCOMPARE(countEvents(*c, QStringLiteral("result-buffered")), 10);
        QCOMPARE(countEvents(*c, QStringLiteral("result-assimilated")), 12);
        QCOMPARE(countEvents(*c, QStringLiteral("epoch-completed")), 2);
        QCOMPARE(countEvents(*c, QStringLiteral("evaluation")), 2);
    }

    void aBufferedResultSentAgainIsADuplicate()
    {
        // A worker that resends its result (a reconnect, a hostile replay) while the first copy
        // waits in the buffer: the second is dropped, and the buffer holds one.
        Fixture f;
        f.spec.aggregation.buffer = 3;
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        QVERIFY(a);
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Held);
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Duplicate);
        QCOMPARE(c->progress().bufferedResults, 1);
        // Nor may another worker hand in that lease.
        const qint64 other = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        QCOMPARE(c->submitResult(other, fakeResult(*a)).status, SubmitStatus::Rejected);
        QCOMPARE(c->progress().bufferedResults, 1);
    }

    void bufferedResultsLostInARestartAreTrainedAgain()
    {
        Fixture f;
        f.spec.aggregation.buffer = 4;
        qint64 w = 0;
        std::set<qint64> bufferedSubtasks;
        {
            auto c = f.open();
            QVERIFY(c);
            w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
            for (int i = 0; i < 3; ++i) {
                auto a = c->requestSubtask(w);
                QVERIFY(a);
                QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Held);
                bufferedSubtasks.insert(a->subtaskId);
            }
            QCOMPARE(c->progress().bufferedResults, 3);
            QCOMPARE(c->progress().seq, qint64(0));
        } // the coordinator dies with three results in its buffer
        auto c = f.open();
        QVERIFY(c);
        QVERIFY(c->resumed());
        QCOMPARE(c->progress().seq, qint64(0));
        QCOMPARE(c->progress().bufferedResults, 0);
        // Their subtasks are owed again, and the job still assimilates every shard once.
        const qint64 back = c->workerJoined(test::spotWorker(QStringLiteral("a")), w).value();
        std::set<qint64> retrained;
        for (int guard = 0; guard < 1000 && !c->finished(); ++guard)
            if (auto a = c->requestSubtask(back)) {
                retrained.insert(a->subtaskId);
                c->submitResult(back, fakeResult(*a));
            }
        QVERIFY(c->finished());
        for (const qint64 id : bufferedSubtasks)
            QVERIFY2(retrained.count(id), qPrintable(QStringLiteral("subtask %1 was not trained again").arg(id)));
        auto rows = c->store().assimilations(1);
        QVERIFY(rows);
        QCOMPARE(int(rows->size()), 12);
        const QString once = eachShardOnce(*rows, 12);
        QVERIFY2(once.isEmpty(), qPrintable(once));
    }

    void bufferedFoldThatWouldOverflowIsRefusedAndItsSubtasksQueued()
    {
        // As foldThatWouldOverflowIsRefusedAndTheModelKept, with the fold of a buffer of two:
        // both results are refused, the model stays, and both subtasks are trained again.
        Fixture f;
        makeOverflowing(f);
        f.spec.aggregation.buffer = 2;
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const torch::Tensor before = c->globalWeights().clone();
        std::set<qint64> subtasks;
        SubmitReply reply;
        for (int i = 0; i < 2; ++i) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            subtasks.insert(a->subtaskId);
            SubtaskResult r = fakeResult(*a);
            r.weights = a->weights * 100.0f;
            reply = c->submitResult(w, r);
            QCOMPARE(reply.status, i == 0 ? SubmitStatus::Held : SubmitStatus::Rejected);
        }
        QVERIFY2(reply.reason.contains(QStringLiteral("non-finite")), qPrintable(reply.reason));
        QVERIFY(torch::equal(before, c->globalWeights()));
        QCOMPARE(c->progress().seq, qint64(0));
        QCOMPARE(c->progress().bufferedResults, 0);
        QVERIFY(c->fatalError().isEmpty());
        QCOMPARE(countEvents(*c, QStringLiteral("result-rejected")), 2);
        std::set<qint64> again;
        for (int i = 0; i < 2; ++i) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            again.insert(a->subtaskId);
            c->submitResult(w, fakeResult(*a));
        }
        QCOMPARE(again, subtasks);
        QCOMPARE(c->progress().seq, qint64(2));
        QVERIFY(torch::isfinite(c->globalWeights()).all().item<bool>());
    }

    void autoBufferFollowsTheWorkersOnline()
    {
        Fixture f;
        f.spec.aggregation.buffer = 0;
        auto c = f.open();
        QVERIFY(c);
        QCOMPARE(c->progress().bufferSize, 1);
        std::vector<qint64> workers;
        for (int i = 0; i < 5; ++i)
            workers.push_back(c->workerJoined(test::spotWorker(QStringLiteral("w%1").arg(i))).value());
        QCOMPARE(c->progress().bufferSize, 3); // ⌈√5⌉
        c->workerLeft(workers[0], QStringLiteral("test"));
        QCOMPARE(c->progress().bufferSize, 2); // ⌈√4⌉
    }

    void speculativeCopyOfTheMostOverdueSubtaskWins()
    {
        // One epoch of two shards: a, the slow worker, holds shard 0 while b finishes shard 1.
        // With speculation b gets a copy of a's subtask; b's result wins and a's is a duplicate.
        for (const bool speculate : {false, true}) {
            Fixture f;
            f.data = test::blobs(240, 4, 2);
            f.spec = test::blobsJob(2, 1);
            f.spec.fleet.speculate = speculate;
            auto c = f.open();
            QVERIFY(c);
            const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
            const qint64 b = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
            auto slow = c->requestSubtask(a);
            auto fast = c->requestSubtask(b);
            QVERIFY(slow && fast);
            QCOMPARE(c->submitResult(b, fakeResult(*fast)).status, SubmitStatus::Assimilated);
            auto copy = c->requestSubtask(b);
            QCOMPARE(copy.has_value(), speculate);
            if (!speculate)
                continue;
            QCOMPARE(copy->subtaskId, slow->subtaskId);
            QVERIFY2(lastEventDetail(*c, QStringLiteral("lease-granted")).contains(QStringLiteral("speculative copy")),
                     qPrintable(lastEventDetail(*c, QStringLiteral("lease-granted"))));
            QCOMPARE(countEvents(*c, QStringLiteral("subtask-reassigned")), 0);
            QCOMPARE(c->submitResult(b, fakeResult(*copy)).status, SubmitStatus::Assimilated);
            QCOMPARE(c->submitResult(a, fakeResult(*slow)).status, SubmitStatus::Duplicate);
            auto rows = c->store().assimilations(1);
            QVERIFY(rows);
            QCOMPARE(int(rows->size()), 2);
            QCOMPARE((*rows)[1].leaseId, copy->leaseId);
        }
    }

    void idleWorkerIsDismissedAtTheTailOnlyWithTheKey()
    {
        // One epoch of two shards: a holds shard 0 while b finishes shard 1 and asks again.
        // Nothing is queued and no epoch is left to open: with fleet.dismiss_idle, b is
        // dismissed (once in the events, however often it asks); without it, it waits.
        for (const bool dismiss : {false, true}) {
            Fixture f;
            f.data = test::blobs(240, 4, 2);
            f.spec = test::blobsJob(2, 1);
            f.spec.fleet.dismissIdle = dismiss;
            auto c = f.open();
            QVERIFY(c);
            const qint64 a = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
            const qint64 b = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
            auto first = c->requestSubtask(a);
            QVERIFY(first);
            QVERIFY(!c->dismissesIdle()); // a shard is still queued
            auto second = c->requestSubtask(b);
            QVERIFY(second);
            QCOMPARE(c->submitResult(b, fakeResult(*second)).status, SubmitStatus::Assimilated);
            QVERIFY(!c->requestSubtask(b));
            QVERIFY(!c->requestSubtask(b));
            QCOMPARE(c->dismissesIdle(), dismiss);
            QCOMPARE(countEvents(*c, QStringLiteral("worker-dismissed")), dismiss ? 1 : 0);
            // The job still finishes with the worker that holds the last subtask.
            QCOMPARE(c->submitResult(a, fakeResult(*first)).status, SubmitStatus::Assimilated);
            QVERIFY(c->finished());
            QVERIFY(!c->dismissesIdle());
        }
    }

    void preemptionAfterTheEndIsNotCounted()
    {
        // A local fleet's preemption timer can fire after the job's last assimilation: the
        // job's figures, final when it finished, must agree with its events.
        Fixture f;
        auto c = f.open();
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        c->recordEvent(EventKind::WorkerPreempted, w, QStringLiteral("during the job"));
        runToEnd(*c, {w});
        QVERIFY(c->finished());
        c->recordEvent(EventKind::WorkerPreempted, w, QStringLiteral("after the end"));
        QCOMPARE(c->progress().preemptions, qint64(1));
        QCOMPARE(countEvents(*c, QStringLiteral("worker-preempted")), 1);
    }

    // A worker declared gone that is heard from again is alive: it is online at once, told
    // nothing it has to act on, and the subtask it lost went to someone else meanwhile.
    void aWorkerDeclaredGoneComesBackWhenHeardFrom()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        QVERIFY(c->requestSubtask(w));
        f.clock.advance(31'000);
        c->tick();
        QVERIFY(!c->isOnline(w));
        auto again = c->requestSubtask(w);
        QVERIFY(c->isOnline(w));
        QVERIFY2(again, "a worker that asks for work after being declared gone gets work");
        const QString back = lastEventDetail(*c, QStringLiteral("worker-joined"));
        QVERIFY2(back.contains(QStringLiteral("is back")) && back.contains(QStringLiteral("missed heartbeats")),
                 qPrintable(back));
        // A heartbeat does it too.
        f.clock.advance(31'000);
        c->tick();
        QVERIFY(!c->isOnline(w));
        c->heartbeat(w, 0, 0, 0);
        QVERIFY(c->isOnline(w));
        QCOMPARE(countEvents(*c, QStringLiteral("worker-joined")), 3);
    }

    // The coordinator itself did not run (its process stopped, its machine suspended): the
    // gap is not held against the workers, and the leases' deadlines move by it.
    void aStalledCoordinatorDoesNotBlameItsWorkers()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 other = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto a = c->requestSubtask(w);
        QVERIFY(a);
        f.clock.advance(200'000); // past the heartbeat timeout and the 60 s lease
        c->absorbStall(200'000);
        c->tick();
        QVERIFY(c->isOnline(w));
        QVERIFY(c->isOnline(other));
        QCOMPARE(countEvents(*c, QStringLiteral("lease-expired")), 0);
        QCOMPARE(countEvents(*c, QStringLiteral("worker-left")), 0);
        QCOMPARE(countEvents(*c, QStringLiteral("coordinator-stalled")), 1);
        QVERIFY(lastEventDetail(*c, QStringLiteral("coordinator-stalled")).contains(QStringLiteral("200.0 s")));
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Assimilated);
        // The moved deadline still holds: silence after the stall counts as before.
        f.clock.advance(31'000);
        c->tick();
        QVERIFY(!c->isOnline(w));
    }

    // A result refused is trained again with other draws: never the same way twice.
    void aRefusedSubtaskIsTrainedAgainWithOtherDraws()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        std::set<quint64> seeds;
        qint64 subtask = 0;
        for (int i = 0; i < 3; ++i) {
            auto a = c->requestSubtask(w);
            QVERIFY(a);
            if (i == 0)
                subtask = a->subtaskId;
            QCOMPARE(a->subtaskId, subtask);
            seeds.insert(a->config.seed);
            SubtaskResult r = fakeResult(*a);
            r.weights[0] = std::numeric_limits<float>::quiet_NaN();
            QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Rejected);
        }
        QCOMPARE(seeds.size(), std::size_t(3));
    }

    // The coordinator's own workers: screened results are not held against them, and no run
    // of rejections quarantines them; when they can no longer train, the progress says why.
    void trustedWorkersAreNeverQuarantinedAndAStallSaysWhy()
    {
        Fixture f;
        auto c = f.open();
        QVERIFY(c->progress().stalled.isEmpty()); // a job starting: workers are on their way
        f.clock.advance(11'000);
        QCOMPARE(c->progress().stalled, QStringLiteral("no worker has joined yet; the job waits for one"));
        QVERIFY(!c->progress().stalledForGood);
        WorkerInfo local = test::spotWorker(QStringLiteral("local-1"));
        local.trusted = true;
        const qint64 w = c->workerJoined(local).value();
        QVERIFY(c->progress().stalled.isEmpty());
        for (int i = 0; i < 4; ++i) {
            auto a = c->requestSubtask(w);
            QVERIFY2(a, qPrintable(QStringLiteral("attempt %1").arg(i + 1)));
            SubtaskResult r = fakeResult(*a);
            r.weights[0] = std::numeric_limits<float>::infinity();
            QCOMPARE(c->submitResult(w, r).status, SubmitStatus::Rejected);
        }
        QCOMPARE(countEvents(*c, QStringLiteral("worker-quarantined")), 0);
        const JobProgress p = c->progress();
        QVERIFY(p.stalledForGood);
        QVERIFY2(p.stalled.contains(QStringLiteral("no connected worker can train this job"))
                     && p.stalled.contains(QStringLiteral("NaN or infinite")),
                 qPrintable(p.stalled));
        c->tick();
        QCOMPARE(countEvents(*c, QStringLiteral("job-stalled")), 1);
        // One good result and it trains again.
        auto a = c->requestSubtask(w);
        QCOMPARE(c->submitResult(w, fakeResult(*a)).status, SubmitStatus::Assimilated);
        QVERIFY(c->progress().stalled.isEmpty());
        // Hand-backs that say the worker failed count as well; other hand-backs do not.
        for (int i = 0; i < 3; ++i) {
            auto b = c->requestSubtask(w);
            c->handBack(w, b->leaseId, QStringLiteral("the worker is shutting down"));
        }
        QVERIFY(c->progress().stalled.isEmpty());
        for (int i = 0; i < 3; ++i) {
            auto b = c->requestSubtask(w);
            c->handBack(w, b->leaseId, QStringLiteral("training diverged: the loss became NaN"), true);
        }
        QVERIFY2(c->progress().stalled.contains(QStringLiteral("training diverged")), qPrintable(c->progress().stalled));
        // Every connected worker quarantined (an untrusted one).
        Fixture g;
        auto d = g.open();
        const qint64 bad = d->workerJoined(test::spotWorker(QStringLiteral("attacker"))).value();
        for (int i = 0; i < 3; ++i) {
            auto b = d->requestSubtask(bad);
            SubtaskResult r = fakeResult(*b);
            r.weights = b->weights * 50.0f;
            d->submitResult(bad, r);
        }
        QVERIFY(d->progress().stalledForGood);
        QVERIFY2(d->progress().stalled.contains(QStringLiteral("quarantined")), qPrintable(d->progress().stalled));
    }

    // Every lease carries the job's schedule per step and where its subtask's first step
    // falls: after the shards before it in the epoch.
    void assignmentsCarryTheScheduleAndTheirFirstStep()
    {
        Fixture f;
        f.spec.training.lrSchedule = QStringLiteral("cosine");
        f.spec.training.lrWarmupSteps = 3;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        // 240 samples in 6 shards of 40, batch 16: 3 steps a shard, 18 an epoch, 36 in all.
        auto a = c->requestSubtask(w);
        QVERIFY(a->config.schedule.active());
        QCOMPARE(a->config.schedule.totalSteps, qint64(36));
        QCOMPARE(a->config.schedule.warmupSteps, qint64(3));
        QCOMPARE(a->config.firstStep, qint64(3 * a->shard));
        QCOMPARE(a->config.learningRate, a->config.schedule.at(a->config.firstStep));
        QVERIFY(!a->config.freshOptimizer);
        c->submitResult(w, fakeResult(*a));
        auto b = c->requestSubtask(w);
        QCOMPARE(b->config.firstStep, qint64(18 * b->epoch + 3 * b->shard));
        QVERIFY(b->config.firstStep != a->config.firstStep);
    }

    void absurdNormIsRejected()
    {
        Fixture f;
        auto c = f.open();
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        auto a = c->requestSubtask(w);
        const torch::Tensor before = c->globalWeights().clone();
        SubtaskResult r = fakeResult(*a);
        r.weights = a->weights * 1e6f;
        const SubmitReply reply = c->submitResult(w, r);
        QCOMPARE(reply.status, SubmitStatus::Rejected);
        QVERIFY2(reply.reason.contains(QStringLiteral("absurd")), qPrintable(reply.reason));
        QVERIFY(torch::equal(before, c->globalWeights()));
    }
};

QTEST_GUILESS_MAIN(TestCoordinatorTrust)
#include "tst_coordinatortrust.moc"
