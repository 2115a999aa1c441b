// The local trainer: it learns, stops on a preemption notice with a partial result, refuses
// to return poisoned weights, honours local steps, and the learning-rate schedules.
#include "TestSupport.h"
#include "common/ProcessSetup.h"
#include "engine/Trainer.h"

#include <QtTest>

#include <thread>

#include <torch/torch.h>

#ifdef Q_OS_LINUX
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

using namespace flotilla;

namespace {

struct Setup
{
    std::shared_ptr<const JobData> data = test::blobs(256, 4, 1);
    std::unique_ptr<Model> model;
    TrainConfig config;

    Setup()
    {
        ModelSpec spec;
        spec.kind = QStringLiteral("mlp");
        spec.hidden = {8};
        torch::manual_seed(3);
        model = createModel(spec, data->inputShape, 2).value();
        config.batchSize = 16;
        config.learningRate = 0.05;
    }
};

} // namespace

class TestTrainer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void learnsAndReportsMetrics()
    {
        Setup s;
        const torch::Tensor start = s.model->flatWeights();
        auto before = evaluate(*s.model, start, s.data->test, torch::kCPU);
        s.config.localEpochs = 3;
        auto out = trainSubtask(*s.model, start, s.data->train, s.config, torch::kCPU);
        QVERIFY2(out, qPrintable(out.error()));
        QVERIFY(!out->partial);
        QCOMPARE(out->sampleSteps, qint64(3 * 256));
        QCOMPARE(out->plannedSampleSteps, qint64(3 * 256));
        QCOMPARE(out->covered, qint64(256));
        QVERIFY(out->seconds > 0);
        QVERIFY(out->meanLoss > 0 && std::isfinite(out->meanLoss));
        QCOMPARE(out->weights.numel(), start.numel());
        auto after = evaluate(*s.model, out->weights, s.data->test, torch::kCPU);
        QVERIFY(after->accuracy > 0.95);
        QVERIFY(after->loss < before->loss);
        QVERIFY(torch::equal(start, s.model->flatWeights()) == false);
    }

    // The batch only changes how the test set is cut: a last short batch is counted like the
    // others, and the CPU's default is small (large batches were page-faulted into existence).
    void evaluationDoesNotDependOnTheBatch()
    {
        Setup s;
        s.config.localEpochs = 1;
        auto out = trainSubtask(*s.model, s.model->flatWeights(), s.data->train, s.config, torch::kCPU);
        QVERIFY(out);
        auto whole = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, 100000);
        QVERIFY(whole);
        QCOMPARE(whole->samples, s.data->test.size());
        for (const int batch : {0, 1, 7, 64}) {
            auto ev = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, batch);
            QVERIFY(ev);
            QCOMPARE(ev->samples, whole->samples);
            QCOMPARE(ev->accuracy, whole->accuracy);
            QVERIFY2(std::abs(ev->loss - whole->loss) < 1e-5, qPrintable(QString::number(batch)));
        }
        QVERIFY(evaluationBatchSize(torch::kCPU) <= 128);
    }

    // The coordinator's evaluation thread gives way to training on the same machine.
    void backgroundWorkYieldsTheCpu()
    {
#ifdef Q_OS_LINUX
        const int before = getpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)));
        int nice = -100;
        std::thread thread([&nice] {
            yieldCpuToOtherWork();
            nice = getpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)));
        });
        thread.join();
        QCOMPARE(nice, std::max(10, before));
        QCOMPARE(getpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid))), before); // only that thread
#else
        QSKIP("thread niceness is read back on Linux only");
#endif
    }

    void sameSeedSameResult()
    {
        Setup a;
        Setup b;
        a.config.localEpochs = b.config.localEpochs = 2;
        const torch::Tensor start = a.model->flatWeights();
        auto ra = trainSubtask(*a.model, start, a.data->train, a.config, torch::kCPU);
        auto rb = trainSubtask(*b.model, start, b.data->train, b.config, torch::kCPU);
        QVERIFY(torch::equal(ra->weights, rb->weights));
    }

    void cancelReturnsAPartialResult()
    {
        Setup s;
        std::atomic<bool> cancel{false};
        // A preemption notice arrives after 48 samples (three batches).
        auto out = trainSubtask(*s.model, s.model->flatWeights(), s.data->train,
                                s.config, torch::kCPU, &cancel, [&](std::int64_t done, std::int64_t) {
                                    if (done >= 48)
                                        cancel = true;
                                });
        QVERIFY(out);
        QVERIFY(out->partial);
        QCOMPARE(out->sampleSteps, qint64(48));
        QCOMPARE(out->covered, qint64(48));
        QVERIFY(torch::isfinite(out->weights).all().item<bool>());
    }

    void cancelInALaterLocalEpochCoversTheWholeRange()
    {
        Setup s;
        s.config.localEpochs = 2;
        std::atomic<bool> cancel{false};
        auto out = trainSubtask(*s.model, s.model->flatWeights(), s.data->train,
                                s.config, torch::kCPU, &cancel, [&](std::int64_t done, std::int64_t) {
                                    if (done >= 256 + 32)
                                        cancel = true;
                                });
        QVERIFY(out->partial);
        QCOMPARE(out->sampleSteps, qint64(256 + 32));
        QCOMPARE(out->covered, qint64(256));
    }

    void cancelBeforeTheFirstBatchTrainsNothing()
    {
        Setup s;
        std::atomic<bool> cancel{true};
        const torch::Tensor start = s.model->flatWeights();
        auto out = trainSubtask(*s.model, start, s.data->train, s.config, torch::kCPU,
                                &cancel);
        QVERIFY(out->partial);
        QCOMPARE(out->sampleSteps, qint64(0));
        QCOMPARE(out->covered, qint64(0));
        QVERIFY(torch::equal(out->weights, start));
    }

    void nanLossStopsTheSubtask()
    {
        Setup s;
        Dataset poisoned = s.data->train;
        poisoned.features = s.data->train.features.clone();
        poisoned.features[5][1] = std::numeric_limits<float>::quiet_NaN();
        auto out = trainSubtask(*s.model, s.model->flatWeights(), poisoned, s.config, torch::kCPU);
        QVERIFY(!out);
        QVERIFY2(out.error().contains(QStringLiteral("NaN")), qPrintable(out.error()));
        QVERIFY(out.error().contains(QStringLiteral("step 1")));
    }

    void divergenceStopsTheSubtask()
    {
        Setup s;
        Dataset huge = s.data->train;
        huge.features = s.data->train.features * 1e30f; // overflows to inf in the first layer
        auto out = trainSubtask(*s.model, s.model->flatWeights(), huge, s.config, torch::kCPU);
        QVERIFY(!out);
        QVERIFY2(out.error().contains(QStringLiteral("learning rate")), qPrintable(out.error()));
    }

    void localStepsBoundTheWork()
    {
        Setup s;
        s.config.localSteps = 5;
        auto out = trainSubtask(*s.model, s.model->flatWeights(), s.data->train,
                                s.config, torch::kCPU);
        QCOMPARE(out->sampleSteps, qint64(5 * 16));
        QCOMPARE(out->covered, qint64(5 * 16));
        QVERIFY(!out->partial);
    }

    void adamOptimizerTrains()
    {
        Setup s;
        s.config.optimizer = QStringLiteral("adam");
        s.config.learningRate = 0.01;
        s.config.localEpochs = 2;
        auto out = trainSubtask(*s.model, s.model->flatWeights(), s.data->train,
                                s.config, torch::kCPU);
        QVERIFY(out);
        auto ev = evaluate(*s.model, out->weights, s.data->test, torch::kCPU);
        QVERIFY(ev->accuracy > 0.9);
    }

    void learningRateSchedules()
    {
        TrainingSpec t;
        t.learningRate = 0.1;
        t.epochs = 11;
        t.lrSchedule = QStringLiteral("constant");
        QCOMPARE(scheduledLearningRate(t, 7), 0.1);
        t.lrSchedule = QStringLiteral("step");
        t.lrStepEpochs = 3;
        t.lrGamma = 0.5;
        QCOMPARE(scheduledLearningRate(t, 2), 0.1);
        QCOMPARE(scheduledLearningRate(t, 3), 0.05);
        QCOMPARE(scheduledLearningRate(t, 7), 0.025);
        t.lrSchedule = QStringLiteral("cosine");
        QCOMPARE(scheduledLearningRate(t, 0), 0.1);
        QVERIFY(qAbs(scheduledLearningRate(t, 5) - 0.1 * (0.05 + 0.95 * 0.5)) < 1e-12);
        QVERIFY(qAbs(scheduledLearningRate(t, 10) - 0.005) < 1e-12);
    }
};

QTEST_GUILESS_MAIN(TestTrainer)
#include "tst_trainer.moc"
