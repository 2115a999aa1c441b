// The coordinator's thread at shutdown: a result queued just before shutdown() that completes
// an epoch starts an evaluation on the evaluation pool after shutdown() began. The pool's
// model must outlive that evaluation (it was freed under it before), and the job resumes
// from the store with nothing lost. And a job's end is heard of by whoever waits for it, also
// by one that subscribes after it ended.
#include "FakeClock.h"
#include "TestSupport.h"
#include "engine/coordination/CoordinatorThread.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

// A result for a lease, as if its subtask had been trained.
SubtaskResult trainedOn(const Assignment &a)
{
    SubtaskResult r;
    r.leaseId = a.leaseId;
    r.weights = a.weights + 0.001f;
    r.covered = a.end - a.begin;
    r.sampleSteps = r.covered;
    r.meanLoss = 0.5;
    r.seconds = 1.0;
    return r;
}

} // namespace

class TestCoordinatorThread : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void anEvaluationStartedAtShutdownFinishesWithItsModel()
    {
        // A large test set makes the evaluation long enough to overlap the shutdown.
        const auto data = test::blobs(64, 32, 2, 7, 60000);
        JobSpec spec = test::blobsJob(2, 1);
        spec.fleet.screenResults = false;
        spec.model.hidden = {256, 256};
        int finished = 0;
        for (int round = 0; round < 4; ++round) {
            QTemporaryDir dir;
            test::FakeClock clock;
            {
                auto opened = Coordinator::open(spec, dir.path(), &clock, data);
                QVERIFY2(opened, qPrintable(opened ? QString() : opened.error()));
                auto thread = std::make_unique<CoordinatorThread>(std::move(opened).value());
                const qint64 w = thread->callJoin(test::spotWorker(QStringLiteral("a"))).value();
                for (int shard = 0; shard < 2; ++shard) {
                    auto a = thread->callRequest(w);
                    QVERIFY(a);
                    const SubtaskResult r = trainedOn(*a);
                    if (shard == 0) {
                        QCOMPARE(thread->callSubmit(w, r).status, SubmitStatus::Assimilated);
                    } else {
                        thread->submit(w, r); // completes the epoch: an evaluation starts...
                        thread.reset();       // ...while the thread shuts down
                    }
                }
            }
            // Either the evaluation finished before the coordinator closed (the job is done,
            // with its accuracy), or it was dropped and the job resumes with both results.
            auto again = Coordinator::open(spec, dir.path(), &clock, data);
            if (!again) {
                QVERIFY2(again.error().contains(QStringLiteral("already finished")), qPrintable(again.error()));
                QVERIFY(test::finalTestAccuracy(dir.path()) > 0);
                ++finished;
            } else {
                auto rows = (*again)->store().assimilations(1);
                QVERIFY(rows);
                QCOMPARE(int(rows->size()), 2);
            }
        }
        qInfo() << finished << "of 4 shutdowns waited for the evaluation's result";
    }

    // A job can end before everyone who waits for its end has subscribed (a resumed job whose
    // epochs were all trained ends with its final evaluation, while its fleet service is still
    // setting it up). whenEnded() tells a subscriber that came too late, and one that came in
    // time hears of it once.
    void aJobThatEndedIsHeardOfBySubscribersThatComeLate()
    {
        const auto data = test::blobs(64, 32, 2, 7, 200);
        JobSpec spec = test::blobsJob(2, 1);
        spec.fleet.screenResults = false;
        QTemporaryDir dir;
        test::FakeClock clock;
        auto opened = Coordinator::open(spec, dir.path(), &clock, data);
        QVERIFY2(opened, qPrintable(opened ? QString() : opened.error()));
        CoordinatorThread thread(std::move(opened).value());
        QObject context;
        int early = 0, late = 0;
        bool lateOk = false;
        thread.whenEnded(&context, [&](bool ok, const QString &) { early += ok ? 1 : 100; });
        const qint64 w = thread.callJoin(test::spotWorker(QStringLiteral("a"))).value();
        for (int shard = 0; shard < 2; ++shard) {
            auto a = thread.callRequest(w);
            QVERIFY(a);
            const SubtaskResult r = trainedOn(*a);
            QCOMPARE(thread.callSubmit(w, r).status, SubmitStatus::Assimilated);
        }
        QTRY_COMPARE_WITH_TIMEOUT(early, 1, 30000); // the final evaluation, then the end
        // Subscribed after the end: a plain connect would never fire.
        thread.whenEnded(&context, [&](bool ok, const QString &) {
            ++late;
            lateOk = ok;
        });
        QTRY_COMPARE_WITH_TIMEOUT(late, 1, 5000);
        QVERIFY(lateOk);
        QTest::qWait(300);
        QCOMPARE(early, 1);
        QCOMPARE(late, 1);
    }
};

QTEST_GUILESS_MAIN(TestCoordinatorThread)
#include "tst_coordinatorthread.moc"
