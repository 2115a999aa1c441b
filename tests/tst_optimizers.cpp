// The optimizers and training settings a job may choose, each against a step computed by
// hand from the same gradient: SGD with Nesterov momentum, Adam and AdamW (betas, eps,
// coupled and decoupled weight decay), clipping by global norm, label smoothing; mixed
// precision (bf16 trains on a CPU, fp16 is refused there, the loss scale of fp16); the checks
// a worker makes of what it is sent; and local workers' devices.
#include "TestSupport.h"
#include "engine/data/JobData.h"
#include "engine/training/Device.h"
#include "engine/training/GpuInfo.h"
#include "engine/training/Precision.h"
#include "engine/training/Trainer.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <cmath>
#include <limits>

using namespace flotilla;

namespace {

struct Setup
{
    std::shared_ptr<const JobData> data = test::blobs(64, 4, 1);
    std::unique_ptr<Model> model;
    TrainConfig config;
    torch::Tensor start;
    std::int64_t parameterCount = 0;

    Setup()
    {
        ModelSpec spec;
        spec.kind = QStringLiteral("mlp");
        spec.hidden = {8};
        torch::manual_seed(5);
        model = createModel(spec, data->inputShape, 2).value();
        start = model->flatWeights();
        for (const auto &p : model->parameters())
            parameterCount += p.numel();
        // One step over every sample: the batch is the whole set, so its order does not matter.
        config.batchSize = int(data->train.size());
        config.localSteps = 1;
        config.learningRate = 0.1;
        config.momentum = 0.9;
    }

    torch::Tensor inputs() const { return InputPipeline(data->train, torch::kCPU).rows(0, data->train.size()); }

    // The loss at the start weights and its gradient, flat in the layout's parameter order.
    std::pair<double, torch::Tensor> gradient(double labelSmoothing = 0.0)
    {
        (void)model->loadFlatWeights(start);
        model->setTraining(true);
        for (auto &p : model->parameters())
            if (p.grad().defined())
                p.grad().zero_();
        const auto options = torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(labelSmoothing);
        const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(inputs()), data->train.labels,
                                                                        options);
        loss.backward();
        std::vector<torch::Tensor> grads;
        for (const auto &p : model->parameters())
            grads.push_back(p.grad().detach().flatten().clone());
        return {loss.item<double>(), torch::cat(grads)};
    }

    torch::Tensor parameters() const { return start.narrow(0, 0, parameterCount); }

    torch::Tensor trainedParameters(const TrainConfig &c)
    {
        auto out = trainSubtask(*model, start, data->train, c, torch::kCPU);
        if (!out)
            qFatal("%s", qPrintable(out.error()));
        return out->weights.narrow(0, 0, parameterCount);
    }
};

double maxDifference(const torch::Tensor &a, const torch::Tensor &b)
{
    return (a - b).abs().max().item<double>();
}

} // namespace

class TestOptimizers : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    // torch.optim.SGD's first step: the buffer is the gradient plus L2; Nesterov steps by
    // d + momentum × buffer, plain momentum by the buffer alone.
    void sgdNesterovStep()
    {
        Setup s;
        [[maybe_unused]] const auto [loss, g] = s.gradient();
        const torch::Tensor w = s.parameters();
        TrainConfig c = s.config;
        c.weightDecay = 0.01;
        const torch::Tensor d = g + 0.01 * w;
        c.nesterov = true;
        QVERIFY(maxDifference(s.trainedParameters(c), w - 0.1 * (d + 0.9 * d)) < 1e-6);
        c.nesterov = false;
        QVERIFY(maxDifference(s.trainedParameters(c), w - 0.1 * d) < 1e-6);
    }

    // Adam's first step is lr × m̂ / (√v̂ + eps) = lr × g / (|g| + eps) whatever the betas;
    // AdamW first shrinks the weights by lr × weight decay, Adam adds the decay to g.
    void adamAndAdamWSteps()
    {
        Setup s;
        [[maybe_unused]] const auto [loss, g] = s.gradient();
        const torch::Tensor w = s.parameters();
        const double lr = 0.1, wd = 0.2, eps = 1e-3;
        TrainConfig c = s.config;
        c.learningRate = lr;
        c.weightDecay = wd;
        c.eps = eps;
        c.beta1 = 0.8;
        c.beta2 = 0.95;

        c.optimizer = QStringLiteral("adamw");
        const torch::Tensor adamw = (w * (1.0 - lr * wd)) - lr * g / (g.abs() + eps);
        QVERIFY2(maxDifference(s.trainedParameters(c), adamw) < 1e-6,
                 qPrintable(QString::number(maxDifference(s.trainedParameters(c), adamw))));

        c.optimizer = QStringLiteral("adam");
        const torch::Tensor coupled = g + wd * w;
        const torch::Tensor adam = w - lr * coupled / (coupled.abs() + eps);
        QVERIFY(maxDifference(s.trainedParameters(c), adam) < 1e-6);
        QVERIFY(maxDifference(adam, adamw) > 1e-3); // the two decays really differ here
    }

    // The betas matter from the second step: two steps of AdamW against the formulas.
    void adamWSecondStepUsesTheBetas()
    {
        Setup s;
        const double lr = 0.05, b1 = 0.5, b2 = 0.75, eps = 1e-8;
        TrainConfig c = s.config;
        c.optimizer = QStringLiteral("adamw");
        c.learningRate = lr;
        c.beta1 = b1;
        c.beta2 = b2;
        c.eps = eps;
        c.localSteps = 2;
        [[maybe_unused]] auto [loss1, g1] = s.gradient();
        const torch::Tensor w0 = s.parameters();
        const torch::Tensor w1 = w0 - lr * g1 / (g1.abs() + eps);
        // The second gradient, at w1 (the buffers after the parameters are unchanged).
        torch::Tensor start1 = s.start.clone();
        start1.narrow(0, 0, s.parameterCount).copy_(w1);
        const torch::Tensor keep = s.start;
        s.start = start1;
        [[maybe_unused]] auto [loss2, g2] = s.gradient();
        s.start = keep;
        const torch::Tensor m = b1 * (1 - b1) * g1 + (1 - b1) * g2;
        const torch::Tensor v = b2 * (1 - b2) * g1 * g1 + (1 - b2) * g2 * g2;
        const torch::Tensor w2 = w1 - lr * (m / (1 - b1 * b1)) / ((v / (1 - b2 * b2)).sqrt() + eps);
        const double diff = maxDifference(s.trainedParameters(c), w2);
        QVERIFY2(diff < 1e-5, qPrintable(QString::number(diff)));
    }

    // Clipping by global norm: the step is lr × g × max_norm / (‖g‖ + 1e-6) when ‖g‖ exceeds
    // it, and the plain step when it does not.
    void clippingByGlobalNorm()
    {
        Setup s;
        [[maybe_unused]] const auto [loss, g] = s.gradient();
        const torch::Tensor w = s.parameters();
        TrainConfig c = s.config;
        c.momentum = 0;
        const double norm = g.norm().item<double>();
        QVERIFY(norm > 0.02);
        c.clipGradNorm = 0.01;
        QVERIFY(maxDifference(s.trainedParameters(c), w - 0.1 * g * (0.01 / (norm + 1e-6))) < 1e-7);
        c.clipGradNorm = norm * 10;
        QVERIFY(maxDifference(s.trainedParameters(c), w - 0.1 * g) < 1e-7);
    }

    // Label smoothing ε: the loss is (1 − ε) × cross-entropy + ε × the mean over classes of
    // −log p, computed here from the logits; and the step follows its gradient.
    void labelSmoothing()
    {
        Setup s;
        TrainConfig c = s.config;
        c.labelSmoothing = 0.2;
        (void)s.model->loadFlatWeights(s.start);
        torch::Tensor logp;
        {
            torch::NoGradGuard noGrad;
            logp = torch::log_softmax(s.model->forward(s.inputs()), 1);
        }
        const torch::Tensor nll = -logp.gather(1, s.data->train.labels.unsqueeze(1)).squeeze(1);
        const double expected = ((1 - 0.2) * nll - 0.2 * logp.mean(1)).mean().item<double>();
        auto out = trainSubtask(*s.model, s.start, s.data->train, c, torch::kCPU);
        QVERIFY(out);
        QVERIFY2(std::abs(out->meanLoss - expected) < 1e-5,
                 qPrintable(QStringLiteral("%1 vs %2").arg(out->meanLoss).arg(expected)));
        [[maybe_unused]] const auto [loss, g] = s.gradient(0.2);
        QVERIFY(maxDifference(out->weights.narrow(0, 0, s.parameterCount), s.parameters() - 0.1 * g) < 1e-6);
    }

    // bf16 autocast trains on a CPU: it learns the blobs, its weights stay float32, and the
    // thread's autocast state is as it was afterwards.
    void bf16TrainsOnTheCpu()
    {
        Setup s;
        TrainConfig c = s.config;
        c.precision = QStringLiteral("bf16");
        c.batchSize = 16;
        c.localSteps = 0;
        c.localEpochs = 4;
        c.learningRate = 0.05;
        auto out = trainSubtask(*s.model, s.start, s.data->train, c, torch::kCPU);
        QVERIFY2(out, qPrintable(out ? QString() : out.error()));
        QCOMPARE(out->weights.scalar_type(), torch::kFloat);
        auto ev = evaluate(*s.model, out->weights, s.data->test, torch::kCPU, TaskLoss{});
        QVERIFY2(ev->accuracy > 0.9, qPrintable(QString::number(ev->accuracy)));
        // Inside the scope, a matmul runs in bfloat16; outside, in float32 again.
        const torch::Tensor a = torch::ones({2, 2});
        {
            const AutocastScope scope(Precision::Bf16, torch::kCPU);
            QCOMPARE(torch::mm(a, a).scalar_type(), torch::kBFloat16);
        }
        QCOMPARE(torch::mm(a, a).scalar_type(), torch::kFloat);
    }

    void fp16IsRefusedOnTheCpu()
    {
        Setup s;
        TrainConfig c = s.config;
        c.precision = QStringLiteral("fp16");
        auto out = trainSubtask(*s.model, s.start, s.data->train, c, torch::kCPU);
        QVERIFY(!out);
        QVERIFY2(out.error().contains(QStringLiteral("fp16 needs a CUDA GPU")), qPrintable(out.error()));
        QVERIFY(!precisionOn(QStringLiteral("fp8"), torch::kCPU));
        QVERIFY(precisionOn(QStringLiteral("bf16"), torch::kCPU));
        QVERIFY(precisionOn(QStringLiteral("fp32"), torch::kCPU));
    }

    // fp16's loss scale: gradients are divided by it; an overflow skips the step and halves
    // it; enough good steps in a row double it.
    void lossScaler()
    {
        LossScaler scaler(true, 8.0, 2);
        torch::Tensor p = torch::zeros({3}, torch::requires_grad());
        p.mutable_grad() = torch::full({3}, 16.0);
        QVERIFY(scaler.unscale({p}));
        QVERIFY(torch::allclose(p.grad(), torch::full({3}, 2.0)));
        QCOMPARE(scaler.scale(), 8.0);
        p.mutable_grad() = torch::full({3}, 16.0);
        QVERIFY(scaler.unscale({p}));
        QCOMPARE(scaler.scale(), 16.0); // two good steps in a row
        p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f});
        QVERIFY(!scaler.unscale({p}));
        QCOMPARE(scaler.scale(), 8.0);
        QCOMPARE(scaler.skippedInARow(), 1);
        QCOMPARE(scaler.scaled(torch::tensor(2.0f)).item<double>(), 16.0);
        LossScaler off(false);
        QCOMPARE(off.scaled(torch::tensor(2.0f)).item<double>(), 2.0);
    }

    // What a remote worker is sent is checked before it trains: an optimizer it does not
    // know is named, never quietly trained as another.
    void aWorkerRefusesSettingsItCannotTrain()
    {
        TrainConfig c;
        QVERIFY(c.problem().isEmpty());
        c.optimizer = QStringLiteral("lamb");
        QVERIFY(c.problem().contains(QStringLiteral("'lamb'")));
        c.optimizer = QStringLiteral("adam");
        c.nesterov = true;
        QVERIFY(c.problem().contains(QStringLiteral("Nesterov")));
        c.nesterov = false;
        c.eps = 0;
        QVERIFY(!c.problem().isEmpty());
        c.eps = 1e-8;
        c.precision = QStringLiteral("int4");
        QVERIFY(c.problem().contains(QStringLiteral("int4")));
    }

    // The job file's checks: each bad combination names its field.
    void jobSettingsAreChecked()
    {
        const auto problem = [](auto change) {
            JobSpec job = JobSpec::defaultJob();
            change(job);
            auto r = job.validate();
            return r ? QString() : r.error();
        };
        QVERIFY(problem([](JobSpec &j) { j.training.optimizer = QStringLiteral("adamw"); }).isEmpty());
        QVERIFY(problem([](JobSpec &j) { j.training.optimizer = QStringLiteral("lamb"); })
                    .contains(QStringLiteral("training.optimizer")));
        QVERIFY(problem([](JobSpec &j) {
                    j.training.optimizer = QStringLiteral("adam");
                    j.training.nesterov = true;
                }).contains(QStringLiteral("training.nesterov")));
        QVERIFY(problem([](JobSpec &j) { j.training.beta2 = 1.0; }).contains(QStringLiteral("training.beta2")));
        QVERIFY(problem([](JobSpec &j) { j.training.eps = 0; }).contains(QStringLiteral("training.eps")));
        QVERIFY(problem([](JobSpec &j) { j.training.clipGradNorm = -1; }).contains(QStringLiteral("clip_grad_norm")));
        QVERIFY(problem([](JobSpec &j) { j.training.labelSmoothing = 1.0; }).contains(QStringLiteral("label_smoothing")));
        QVERIFY(problem([](JobSpec &j) { j.training.precision = QStringLiteral("fp8"); })
                    .contains(QStringLiteral("training.precision")));
        QVERIFY(problem([](JobSpec &j) {
                    j.training.precision = QStringLiteral("fp16");
                    j.training.device = QStringLiteral("cpu");
                }).contains(QStringLiteral("needs a CUDA GPU")));
        QVERIFY(problem([](JobSpec &j) { j.training.device = QStringLiteral("cuda:0,cuda:1"); }).isEmpty());
        QVERIFY(problem([](JobSpec &j) { j.training.device = QStringLiteral("cpu,cuda:0"); })
                    .contains(QStringLiteral("training.device")));
        // Every new field goes through the job file and back.
        JobSpec job = JobSpec::defaultJob();
        job.training.optimizer = QStringLiteral("adamw");
        job.training.beta1 = 0.85;
        job.training.beta2 = 0.98;
        job.training.eps = 1e-6;
        job.training.clipGradNorm = 1.5;
        job.training.labelSmoothing = 0.1;
        job.training.precision = QStringLiteral("bf16");
        auto back = JobSpec::fromJson(job.toJson());
        QVERIFY(back);
        QCOMPARE(back->training.optimizer, QStringLiteral("adamw"));
        QCOMPARE(back->training.beta1, 0.85);
        QCOMPARE(back->training.beta2, 0.98);
        QCOMPARE(back->training.eps, 1e-6);
        QCOMPARE(back->training.clipGradNorm, 1.5);
        QCOMPARE(back->training.labelSmoothing, 0.1);
        QCOMPARE(back->training.precision, QStringLiteral("bf16"));
    }

    // Local workers take a list's devices in turn; on a machine without a GPU, auto stays
    // auto (the CPU) and a CPU is described as itself.
    void localWorkersTakeDevicesInTurn()
    {
        QCOMPARE(localWorkerDevice(QStringLiteral("cuda:0,cuda:1"), 0), QStringLiteral("cuda:0"));
        QCOMPARE(localWorkerDevice(QStringLiteral("cuda:0,cuda:1"), 1), QStringLiteral("cuda:1"));
        QCOMPARE(localWorkerDevice(QStringLiteral("cuda:0,cuda:1"), 2), QStringLiteral("cuda:0"));
        QCOMPARE(localWorkerDevice(QStringLiteral("cpu"), 3), QStringLiteral("cpu"));
        QCOMPARE(localWorkerDevice(QStringLiteral("cuda:1"), 3), QStringLiteral("cuda:1"));
        QCOMPARE(deviceDescription(torch::Device(torch::kCPU)), QStringLiteral("cpu"));
        if (visibleGpus() == 0) {
            QCOMPARE(localWorkerDevice(QStringLiteral("auto"), 2), QStringLiteral("auto"));
            QVERIFY(!selectDevice(QStringLiteral("cuda:0,cuda:1")));
        } else {
            QCOMPARE(localWorkerDevice(QStringLiteral("auto"), visibleGpus()), QStringLiteral("cuda:0"));
            QVERIFY(gpuInfo(0).has_value());
            QVERIFY(deviceDescription(torch::Device(torch::kCUDA, 0)).contains(QStringLiteral("compute")));
        }
        GpuInfo info{QStringLiteral("NVIDIA H200"), qint64(140) << 30, 9, 0};
        QCOMPARE(info.summary(), QStringLiteral("NVIDIA H200, 140 GiB, compute 9.0"));
    }
};

QTEST_GUILESS_MAIN(TestOptimizers)
#include "tst_optimizers.moc"
