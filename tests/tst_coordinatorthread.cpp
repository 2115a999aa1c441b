// The coordinator's thread at shutdown: a result queued just before shutdown() that completes
// an epoch starts an evaluation on the evaluation pool after shutdown() began. The pool's
// model must outlive that evaluation (it was freed under it before), and the job resumes
// from the store with nothing lost.
#include "FakeClock.h"
#include "TestSupport.h"
#include "engine/coordination/CoordinatorThread.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

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
                    SubtaskResult r;
                    r.leaseId = a->leaseId;
                    r.weights = a->weights + 0.001f;
                    r.covered = a->end - a->begin;
                    r.sampleSteps = r.covered;
                    r.meanLoss = 0.5;
                    r.seconds = 1.0;
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
};

QTEST_GUILESS_MAIN(TestCoordinatorThread)
#include "tst_coordinatorthread.moc"
