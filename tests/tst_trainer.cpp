// The local trainer: it learns, stops on a preemption notice with a partial result, refuses
// to return poisoned weights, honours local steps, and the learning-rate schedules.
#include "TestSupport.h"
#include "common/ProcessSetup.h"
#include "engine/training/Trainer.h"
#include "protocol/TrainingFields.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

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
    // Every setting of a subtask reaches a remote worker as the coordinator had it: through
    // the Assign message's header and back (a setting left out of the list would arrive as
    // the worker's default).
    void everySettingTravelsInTheAssignMessage()
    {
        TrainConfig c;
        c.optimizer = QStringLiteral("adamw");
        c.learningRate = 0.0031;
        c.schedule.kind = QStringLiteral("cosine");
        c.schedule.base = 0.004;
        c.schedule.totalSteps = 9000;
        c.schedule.warmupSteps = 120;
        c.schedule.floor = 0.02;
        c.schedule.stepEvery = 450;
        c.schedule.gamma = 0.7;
        c.firstStep = 1234;
        c.freshOptimizer = true;
        c.momentum = 0.8;
        c.nesterov = true;
        c.weightDecay = 0.05;
        c.beta1 = 0.85;
        c.beta2 = 0.95;
        c.eps = 1e-6;
        c.clipGradNorm = 2.5;
        c.labelSmoothing = 0.1;
        c.task = QStringLiteral("multilabel");
        c.regressionLoss = QStringLiteral("l1");
        c.precision = QStringLiteral("bf16");
        c.batchSize = 48;
        c.localEpochs = 3;
        c.localSteps = 17;
        c.seed = 0xfedcba9876543210ull;
        c.threads = 6;
        net::AssignMsg assign;
        assign.lease = 1;
        writeTraining(c, assign);
        const auto decoded = net::AssignMsg::decode(assign.encode());
        QVERIFY2(decoded, qPrintable(decoded.error()));
        const TrainConfig back = readTraining(*decoded);
        QCOMPARE(back.optimizer, c.optimizer);
        QCOMPARE(back.learningRate, c.learningRate);
        QCOMPARE(back.schedule.kind, c.schedule.kind);
        QCOMPARE(back.schedule.base, c.schedule.base);
        QCOMPARE(back.schedule.totalSteps, c.schedule.totalSteps);
        QCOMPARE(back.schedule.warmupSteps, c.schedule.warmupSteps);
        QCOMPARE(back.schedule.floor, c.schedule.floor);
        QCOMPARE(back.schedule.stepEvery, c.schedule.stepEvery);
        QCOMPARE(back.schedule.gamma, c.schedule.gamma);
        QCOMPARE(back.firstStep, c.firstStep);
        QCOMPARE(back.freshOptimizer, c.freshOptimizer);
        QCOMPARE(back.momentum, c.momentum);
        QCOMPARE(back.nesterov, c.nesterov);
        QCOMPARE(back.weightDecay, c.weightDecay);
        QCOMPARE(back.beta1, c.beta1);
        QCOMPARE(back.beta2, c.beta2);
        QCOMPARE(back.eps, c.eps);
        QCOMPARE(back.clipGradNorm, c.clipGradNorm);
        QCOMPARE(back.labelSmoothing, c.labelSmoothing);
        QCOMPARE(back.task, c.task);
        QCOMPARE(back.regressionLoss, c.regressionLoss);
        QCOMPARE(back.precision, c.precision);
        QCOMPARE(back.batchSize, c.batchSize);
        QCOMPARE(back.localEpochs, c.localEpochs);
        QCOMPARE(back.localSteps, c.localSteps);
        QCOMPARE(back.seed, c.seed);
        QCOMPARE(back.threads, TrainConfig{}.threads); // the worker's own to say

        // Without a schedule, none of it travels, and the worker keeps its schedule's defaults.
        TrainConfig plain;
        net::AssignMsg plainAssign;
        writeTraining(plain, plainAssign);
        QVERIFY(!plainAssign.encode().contains(QStringLiteral("lr_schedule")));
        const TrainConfig plainBack = readTraining(*net::AssignMsg::decode(plainAssign.encode()));
        QVERIFY(!plainBack.schedule.active());
        QCOMPARE(plainBack.schedule.floor, LearningRateSchedule{}.floor);
    }

    void learnsAndReportsMetrics()
    {
        Setup s;
        const torch::Tensor start = s.model->flatWeights();
        auto before = evaluate(*s.model, start, s.data->test, torch::kCPU, TaskLoss{});
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
        auto after = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, TaskLoss{});
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
        auto whole = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, TaskLoss{}, 100000);
        QVERIFY(whole);
        QCOMPARE(whole->samples, s.data->test.size());
        for (const int batch : {0, 1, 7, 64}) {
            auto ev = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, TaskLoss{}, batch);
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

    // Top-5 accuracy and the confusion matrix, against counts made here from the model's own
    // outputs on eight classes.
    void evaluationCountsTopFiveAndConfusion()
    {
        torch::manual_seed(11);
        Dataset d;
        d.features = torch::randn({300, 4});
        d.labels = torch::randint(0, 8, {300}, torch::kInt64);
        d.numClasses = 8;
        ModelSpec spec;
        spec.kind = QStringLiteral("mlp");
        spec.hidden = {16};
        auto model = createModel(spec, {4}, 8).value();
        const torch::Tensor weights = model->flatWeights();
        auto ev = evaluate(*model, weights, d, torch::kCPU, TaskLoss{}, 64);
        QVERIFY(ev);
        QCOMPARE(ev->classes, 8);
        QCOMPARE(int(ev->confusion.size()), 64);
        torch::Tensor logits;
        {
            torch::NoGradGuard noGrad;
            model->setTraining(false);
            logits = model->forward(InputPipeline(d, torch::kCPU).rows(0, 300));
        }
        const torch::Tensor predicted = logits.argmax(1);
        std::int64_t inTop5 = 0;
        std::vector<std::int64_t> expected(64, 0);
        for (int i = 0; i < 300; ++i) {
            const auto t = d.labels[i].item<std::int64_t>();
            const auto p = predicted[i].item<std::int64_t>();
            ++expected[std::size_t(t * 8 + p)];
            const torch::Tensor row = logits[i];
            // In the top five: fewer than five outputs beat the true class's.
            inTop5 += row.gt(row[t]).sum().item<std::int64_t>() < 5 ? 1 : 0;
        }
        QCOMPARE(ev->confusion, expected);
        QCOMPARE(ev->top5Accuracy, double(inTop5) / 300.0);
        std::int64_t diagonal = 0;
        for (int c = 0; c < 8; ++c)
            diagonal += expected[std::size_t(c * 9)];
        QCOMPARE(ev->accuracy, double(diagonal) / 300.0);
        // Two classes: no top-5.
        Setup s;
        auto two = evaluate(*s.model, s.model->flatWeights(), s.data->test, torch::kCPU, TaskLoss{});
        QCOMPARE(two->top5Accuracy, -1.0);
        QCOMPARE(int(two->confusion.size()), 4);
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
        auto ev = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, TaskLoss{});
        QVERIFY(ev->accuracy > 0.9);
    }

    // What a remote worker is sent is checked before it trains: each broken field is named,
    // and every schedule a valid job makes passes.
    void aScheduleThatCannotBeTrainedSaysWhy()
    {
        for (const char *kind : {"constant", "step", "cosine"}) {
            TrainingSpec spec;
            spec.lrSchedule = QString::fromLatin1(kind);
            spec.lrWarmupSteps = 1000000; // longer than the job: cut to its length
            QVERIFY2(learningRateSchedule(spec, 10).problem().isEmpty(), kind);
        }
        const LearningRateSchedule good = learningRateSchedule(TrainingSpec{}, 10);
        const auto expect = [&](void (*spoil)(LearningRateSchedule &), const char *word) {
            LearningRateSchedule s = good;
            spoil(s);
            const QString problem = s.problem();
            QVERIFY2(problem.contains(QLatin1String(word)), qPrintable(problem));
        };
        expect([](LearningRateSchedule &s) { s.kind = QStringLiteral("linear"); }, "'linear'");
        expect([](LearningRateSchedule &s) { s.base = std::nan(""); }, "learning rate");
        expect([](LearningRateSchedule &s) { s.base = -0.1; }, "learning rate");
        expect([](LearningRateSchedule &s) { s.warmupSteps = s.totalSteps + 1; }, "warmup");
        expect([](LearningRateSchedule &s) { s.floor = 1.5; }, "floor");
        expect([](LearningRateSchedule &s) { s.kind = QStringLiteral("step"); s.gamma = 0; }, "gamma");
        LearningRateSchedule none;
        none.kind = QStringLiteral("anything"); // no schedule at all: nothing to check
        QVERIFY(none.problem().isEmpty());
    }

    // Per step, over the whole job, with the numbers worked out by hand.
    void learningRateSchedules()
    {
        LearningRateSchedule c;
        c.base = 0.1;
        QVERIFY(!c.active());
        QCOMPARE(c.at(12345), 0.1); // no schedule: the subtask's rate throughout
        c.totalSteps = 101;
        c.kind = QStringLiteral("constant");
        QCOMPARE(c.at(0), 0.1);
        QCOMPARE(c.at(100), 0.1);
        c.warmupSteps = 10; // 0.01, 0.02, ... 0.1 over the first ten steps
        QVERIFY(qAbs(c.at(0) - 0.01) < 1e-12);
        QVERIFY(qAbs(c.at(4) - 0.05) < 1e-12);
        QVERIFY(qAbs(c.at(9) - 0.1) < 1e-12);
        QCOMPARE(c.at(10), 0.1);
        c.kind = QStringLiteral("step");
        c.warmupSteps = 0;
        c.stepEvery = 30;
        c.gamma = 0.5;
        QCOMPARE(c.at(29), 0.1);
        QCOMPARE(c.at(30), 0.05);
        QCOMPARE(c.at(95), 0.0125);
        c.kind = QStringLiteral("cosine");
        c.floor = 0.05;
        QCOMPARE(c.at(0), 0.1);
        QVERIFY(qAbs(c.at(50) - 0.1 * (0.05 + 0.95 * 0.5)) < 1e-12); // halfway
        QVERIFY(qAbs(c.at(100) - 0.005) < 1e-12);                    // the last step: the floor
        QVERIFY(qAbs(c.at(1000) - 0.005) < 1e-12);                   // past the end: the floor still
        c.warmupSteps = 21; // cosine over steps 21..100: halfway at 60.5
        QVERIFY(qAbs(c.at(20) - 0.1) < 1e-12);
        QCOMPARE(c.at(21), 0.1);
        QVERIFY(qAbs(c.at(100) - 0.005) < 1e-12);
        const double t = (60.0 - 21.0) / 79.0;
        QVERIFY(qAbs(c.at(60) - 0.1 * (0.05 + 0.95 * 0.5 * (1 + std::cos(3.14159265358979323846 * t)))) < 1e-12);

        // From a job's settings: total steps are epochs × steps per epoch.
        TrainingSpec spec;
        spec.learningRate = 0.2;
        spec.epochs = 4;
        spec.lrSchedule = QStringLiteral("step");
        spec.lrStepEpochs = 2;
        spec.lrWarmupSteps = 5;
        const LearningRateSchedule j = learningRateSchedule(spec, 25);
        QCOMPARE(j.totalSteps, qint64(100));
        QCOMPARE(j.stepEvery, qint64(50));
        QCOMPARE(j.warmupSteps, qint64(5));
        QCOMPARE(j.at(49), 0.2);
        QCOMPARE(j.at(50), 0.1);
    }

    // Where a subtask's first step falls: after the shards before it in its epoch, and the
    // batches before its first position.
    void stepPlanPlacesSubtasks()
    {
        const StepPlan plan({100, 100, 99}, 32, 1, 0); // 4 + 4 + 4 steps an epoch
        QCOMPARE(plan.stepsPerEpoch(), qint64(12));
        QCOMPARE(plan.firstStep(0, 0, 0), qint64(0));
        QCOMPARE(plan.firstStep(0, 1, 0), qint64(4));
        QCOMPARE(plan.firstStep(0, 2, 64), qint64(10));
        QCOMPARE(plan.firstStep(3, 1, 40), qint64(3 * 12 + 4 + 1));
        const StepPlan twice({100, 100}, 32, 2, 0); // two local passes: 8 steps a shard
        QCOMPARE(twice.stepsPerEpoch(), qint64(16));
        QCOMPARE(twice.firstStep(1, 1, 64), qint64(16 + 8 + 4));
        const StepPlan steps({100, 50}, 32, 1, 10); // local steps: 10 a shard, whatever its size
        QCOMPARE(steps.stepsPerEpoch(), qint64(20));
        QCOMPARE(steps.firstStep(0, 1, 25), qint64(10 + 5));
    }

    // Each batch gets the rate of its own step: a subtask whose schedule jumps to a tiny rate
    // after its first batch moves the weights less than one trained at the base rate.
    void batchesFollowTheSchedule()
    {
        Setup s;
        const torch::Tensor start = s.model->flatWeights();
        TrainConfig flat = s.config;
        flat.momentum = 0;
        TrainConfig scheduled = flat;
        scheduled.schedule.kind = QStringLiteral("step");
        scheduled.schedule.base = flat.learningRate;
        scheduled.schedule.totalSteps = 1000;
        scheduled.schedule.stepEvery = 1;
        scheduled.schedule.gamma = 1e-6;
        auto a = trainSubtask(*s.model, start, s.data->train, flat, torch::kCPU);
        auto b = trainSubtask(*s.model, start, s.data->train, scheduled, torch::kCPU);
        QVERIFY(a && b);
        const double moved = (a->weights - start).norm().item<double>();
        const double movedScheduled = (b->weights - start).norm().item<double>();
        QVERIFY2(movedScheduled < 0.5 * moved, qPrintable(QStringLiteral("%1 vs %2").arg(movedScheduled).arg(moved)));
        // The first batch alone at the base rate: the same as a one-step subtask.
        TrainConfig one = flat;
        one.localSteps = 1;
        auto c = trainSubtask(*s.model, start, s.data->train, one, torch::kCPU);
        QVERIFY(c);
        QVERIFY((b->weights - c->weights).abs().max().item<double>() < 1e-4);
    }

    // The optimizer a worker keeps: two subtasks in a row, the second starting from the
    // first's weights, train exactly as one subtask over both halves does (momentum and
    // Adam's moments and step count go on); without the carried state they do not.
    void carriedOptimizerStateEqualsOneLongSubtask_data()
    {
        QTest::addColumn<QString>("optimizer");
        QTest::newRow("sgd momentum") << QStringLiteral("sgd");
        QTest::newRow("adam") << QStringLiteral("adam");
    }
    void carriedOptimizerStateEqualsOneLongSubtask()
    {
        QFETCH(QString, optimizer);
        Setup s;
        s.config.optimizer = optimizer;
        s.config.learningRate = optimizer == QLatin1String("adam") ? 0.01 : 0.05;
        s.config.momentum = 0.9;
        s.config.threads = 1;
        const torch::Tensor start = s.model->flatWeights();
        const Dataset &all = s.data->train; // 256 samples: 16 batches of 16
        std::vector<std::int64_t> first(128), second(128);
        std::iota(first.begin(), first.end(), std::int64_t{0});
        std::iota(second.begin(), second.end(), std::int64_t{128});

        auto whole = trainSubtask(*s.model, start, all, s.config, torch::kCPU);
        QVERIFY(whole);

        OptimizerSlot slot;
        auto a = trainSubtask(*s.model, start, all.select(first), s.config, torch::kCPU, nullptr, {}, &slot);
        QVERIFY(a);
        QCOMPARE(slot.subtasks, qint64(1));
        auto b = trainSubtask(*s.model, a->weights, all.select(second), s.config, torch::kCPU, nullptr, {}, &slot);
        QVERIFY(b);
        QCOMPARE(slot.subtasks, qint64(2));
        const double carried = (b->weights - whole->weights).abs().max().item<double>();
        QVERIFY2(carried < 1e-6, qPrintable(QStringLiteral("carried state differs by %1").arg(carried)));

        // Dropped state (a fresh optimizer for the second half): visibly another result.
        auto c = trainSubtask(*s.model, a->weights, all.select(second), s.config, torch::kCPU);
        QVERIFY(c);
        const double dropped = (c->weights - whole->weights).abs().max().item<double>();
        QVERIFY2(dropped > 1e-3, qPrintable(QStringLiteral("a fresh optimizer differs by only %1").arg(dropped)));

        // freshOptimizer asks the slot for a new one, which it keeps from then on.
        TrainConfig fresh = s.config;
        fresh.freshOptimizer = true;
        auto d = trainSubtask(*s.model, a->weights, all.select(second), fresh, torch::kCPU, nullptr, {}, &slot);
        QVERIFY(d);
        QCOMPARE(slot.subtasks, qint64(1));
        QVERIFY(torch::equal(d->weights, c->weights));
    }

    // A subtask that fails leaves no state behind for the next (its moments may be poisoned).
    void aFailedSubtaskDropsTheCarriedState()
    {
        Setup s;
        OptimizerSlot slot;
        auto a = trainSubtask(*s.model, s.model->flatWeights(), s.data->train, s.config, torch::kCPU, nullptr, {}, &slot);
        QVERIFY(a && slot.optimizer);
        Dataset poisoned = s.data->train;
        poisoned.features = poisoned.features.clone();
        poisoned.features[0].fill_(std::numeric_limits<float>::quiet_NaN());
        auto b = trainSubtask(*s.model, a->weights, poisoned, s.config, torch::kCPU, nullptr, {}, &slot);
        QVERIFY(!b);
        QVERIFY(!slot.optimizer);
        QCOMPARE(slot.subtasks, qint64(0));
    }
};

QTEST_GUILESS_MAIN(TestTrainer)
#include "tst_trainer.moc"
