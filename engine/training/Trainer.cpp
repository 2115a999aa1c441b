#include "engine/training/Trainer.h"

#include "common/Random.h"
#include "engine/training/Precision.h"

#include <QElapsedTimer>

#include <ATen/Parallel.h>

#include <cmath>
#include <numeric>

namespace flotilla {

namespace {
constexpr double kPi = 3.14159265358979323846; // M_PI is not standard C++ (MSVC lacks it by default)
} // namespace

double LearningRateSchedule::at(qint64 step) const
{
    if (!active())
        return base;
    step = std::clamp<qint64>(step, 0, totalSteps - 1);
    if (step < warmupSteps)
        return base * double(step + 1) / double(warmupSteps);
    if (kind == QLatin1String("step"))
        return stepEvery > 0 ? base * std::pow(gamma, double(step / stepEvery)) : base;
    if (kind == QLatin1String("cosine")) {
        const qint64 span = totalSteps - warmupSteps - 1;
        const double t = span > 0 ? double(step - warmupSteps) / double(span) : 1.0;
        return base * (floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(kPi * std::min(1.0, t))));
    }
    return base;
}

QString LearningRateSchedule::problem() const
{
    if (!active())
        return {};
    if (kind != QLatin1String("constant") && kind != QLatin1String("step") && kind != QLatin1String("cosine"))
        return QStringLiteral("the learning-rate schedule '%1' is not constant, step or cosine").arg(kind.left(40));
    if (!std::isfinite(base) || base <= 0)
        return QStringLiteral("the schedule's learning rate %1 is not a positive number").arg(base);
    if (warmupSteps < 0 || warmupSteps > totalSteps)
        return QStringLiteral("the schedule's warmup of %1 steps does not fit its %2 steps").arg(warmupSteps).arg(totalSteps);
    if (!std::isfinite(floor) || floor < 0 || floor > 1)
        return QStringLiteral("the schedule's floor %1 is not between 0 and 1").arg(floor);
    if (kind == QLatin1String("step") && (stepEvery < 0 || !std::isfinite(gamma) || gamma <= 0 || gamma > 1))
        return QStringLiteral("the step schedule's gamma %1 is not in (0, 1] or its interval %2 is negative")
            .arg(gamma)
            .arg(stepEvery);
    return {};
}

QString TrainConfig::problem() const
{
    if (optimizer != QLatin1String("sgd") && optimizer != QLatin1String("adam") && optimizer != QLatin1String("adamw"))
        return QStringLiteral("the optimizer '%1' is not sgd, adam or adamw").arg(optimizer.left(40));
    if (nesterov && (optimizer != QLatin1String("sgd") || momentum <= 0))
        return QStringLiteral("Nesterov momentum needs sgd with a momentum above 0");
    const auto within = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
    if (!within(momentum, 0, 0.999) || !within(weightDecay, 0, 1) || !within(beta1, 0, 0.9999)
        || !within(beta2, 0, 0.99999) || !within(eps, 1e-12, 1) || !within(clipGradNorm, 0, 1e6)
        || !within(labelSmoothing, 0, 0.99))
        return QStringLiteral("an optimizer setting is out of range (momentum %1, weight decay %2, betas %3 %4, eps "
                              "%5, clipping %6, label smoothing %7)")
            .arg(momentum)
            .arg(weightDecay)
            .arg(beta1)
            .arg(beta2)
            .arg(eps)
            .arg(clipGradNorm)
            .arg(labelSmoothing);
    if (precision != QLatin1String("fp32") && precision != QLatin1String("bf16") && precision != QLatin1String("fp16"))
        return QStringLiteral("the precision '%1' is not fp32, bf16 or fp16").arg(precision.left(40));
    if (auto loss = taskLoss(*this); !loss)
        return loss.error();
    return schedule.problem();
}

Result<TaskLoss> taskLoss(const TrainConfig &config)
{
    auto task = taskFromName(config.task);
    if (!task)
        return task.takeError();
    if (config.regressionLoss != QLatin1String("mse") && config.regressionLoss != QLatin1String("l1"))
        return fail(QStringLiteral("the regression loss '%1' is not mse or l1").arg(config.regressionLoss.left(40)));
    return TaskLoss{*task, config.regressionLoss == QLatin1String("l1"), config.labelSmoothing};
}

TaskLoss taskLoss(const TrainingSpec &training)
{
    const auto task = taskFromName(training.task);
    return TaskLoss{task ? *task : Task::Classification, training.regressionLoss == QLatin1String("l1"),
                    training.labelSmoothing};
}

StepPlan::StepPlan(const std::vector<qint64> &shardSizes, int batchSize, int localEpochs, int localSteps)
    : m_sizes(shardSizes), m_batch(std::max(1, batchSize)), m_localEpochs(std::max(1, localEpochs)),
      m_localSteps(std::max(0, localSteps))
{
    for (const qint64 size : shardSizes) {
        m_offsets.push_back(m_perEpoch);
        m_perEpoch += m_localSteps > 0 ? m_localSteps : m_localEpochs * ((size + m_batch - 1) / m_batch);
    }
}

qint64 StepPlan::firstStep(int epoch, int shard, qint64 begin) const
{
    if (shard < 0 || std::size_t(shard) >= m_offsets.size())
        return 0;
    const qint64 within = m_localSteps > 0
                              ? (m_sizes[std::size_t(shard)] > 0 ? m_localSteps * begin / m_sizes[std::size_t(shard)] : 0)
                              : m_localEpochs * (begin / m_batch);
    return qint64(epoch) * m_perEpoch + m_offsets[std::size_t(shard)] + within;
}

LearningRateSchedule learningRateSchedule(const TrainingSpec &training, qint64 stepsPerEpoch)
{
    LearningRateSchedule s;
    s.kind = training.lrSchedule;
    s.base = training.learningRate;
    s.totalSteps = std::max<qint64>(1, qint64(training.epochs) * std::max<qint64>(1, stepsPerEpoch));
    s.warmupSteps = std::min<qint64>(training.lrWarmupSteps, s.totalSteps);
    s.floor = training.lrFloor;
    s.stepEvery = qint64(training.lrStepEpochs) * std::max<qint64>(1, stepsPerEpoch);
    s.gamma = training.lrGamma;
    return s;
}

namespace {

QString optimizerSettings(const TrainConfig &c)
{
    return QStringLiteral("%1 momentum %2 nesterov %3 weight decay %4 betas %5 %6 eps %7")
        .arg(c.optimizer)
        .arg(c.momentum)
        .arg(c.nesterov)
        .arg(c.weightDecay)
        .arg(c.beta1)
        .arg(c.beta2)
        .arg(c.eps);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(Model &model, const TrainConfig &c)
{
    if (c.optimizer == QLatin1String("adam"))
        return std::make_unique<torch::optim::Adam>(model.parameters(), torch::optim::AdamOptions(c.learningRate)
                                                                            .betas({c.beta1, c.beta2})
                                                                            .eps(c.eps)
                                                                            .weight_decay(c.weightDecay));
    if (c.optimizer == QLatin1String("adamw"))
        return std::make_unique<torch::optim::AdamW>(model.parameters(), torch::optim::AdamWOptions(c.learningRate)
                                                                             .betas({c.beta1, c.beta2})
                                                                             .eps(c.eps)
                                                                             .weight_decay(c.weightDecay));
    return std::make_unique<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(c.learningRate)
                                                                       .momentum(c.momentum)
                                                                       .nesterov(c.nesterov)
                                                                       .weight_decay(c.weightDecay));
}

// As torch.nn.utils.clip_grad_norm_: every gradient scaled by max / (global norm + 1e-6)
// where that is below 1. Without reading the norm back, so a GPU does not wait for it.
void clipGradients(const std::vector<torch::Tensor> &parameters, double maxNorm)
{
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> norms;
    std::vector<torch::Tensor> grads;
    for (const auto &p : parameters)
        if (p.grad().defined()) {
            grads.push_back(p.grad());
            norms.push_back(p.grad().norm(2));
        }
    if (grads.empty())
        return;
    const torch::Tensor total = torch::stack(norms).norm(2);
    const torch::Tensor factor = (maxNorm / (total + 1e-6)).clamp_max(1.0);
    for (auto &g : grads)
        g.mul_(factor);
}

void setLearningRate(torch::optim::Optimizer &optimizer, double lr)
{
    for (auto &group : optimizer.param_groups())
        group.options().set_lr(lr);
}

Result<TrainOutcome> runSubtask(Model &model, const torch::Tensor &startWeights, const Dataset &samples,
                                const TrainConfig &config, torch::Device device, const std::atomic<bool> *cancel,
                                const TrainProgress &progress, OptimizerSlot *slot)
{
    QElapsedTimer timer;
    timer.start();
    const torch::Tensor &y = samples.labels;
    const std::int64_t n = samples.features.defined() ? samples.features.size(0) : 0;
    if (n == 0 || samples.size() != n)
        return fail(QStringLiteral("a subtask needs samples and as many labels (got %1 and %2)").arg(n).arg(samples.size()));
    at::set_num_threads(config.threads);

    TrainOutcome out;
    const std::int64_t batch = config.batchSize;
    out.plannedSampleSteps = config.localSteps > 0 ? std::int64_t(config.localSteps) * std::min(batch, n)
                                                   : std::int64_t(config.localEpochs) * n;
    try {
        if (auto loaded = model.loadFlatWeights(startWeights); !loaded)
            return loaded.takeError();
        model.setTraining(true);
        // A kept optimizer holds the model's own parameter tensors, which loading weights
        // overwrites in place: its state goes on from the last subtask.
        std::unique_ptr<torch::optim::Optimizer> own;
        torch::optim::Optimizer *optimizer = nullptr;
        if (slot) {
            const QString settings = optimizerSettings(config);
            if (!slot->optimizer || slot->settings != settings || config.freshOptimizer) {
                slot->optimizer = makeOptimizer(model, config);
                slot->settings = settings;
                slot->subtasks = 0;
            }
            ++slot->subtasks;
            optimizer = slot->optimizer.get();
        } else {
            own = makeOptimizer(model, config);
            optimizer = own.get();
        }
        const InputPipeline inputs(samples, device);
        auto precisionOk = precisionOn(config.precision, device);
        if (!precisionOk)
            return precisionOk.takeError();
        const Precision precision = *precisionOk;
        LossScaler scaler(precision == Precision::Fp16);
        const std::vector<torch::Tensor> parameters = model.parameters();
        auto lossOk = taskLoss(config);
        if (!lossOk)
            return lossOk.takeError();
        const TaskLoss lossOf = *lossOk;
        const int readEvery = device.is_cpu() ? 1 : kGpuLossReadEvery;
        torch::Tensor pending; // the losses × batch sizes since the last read, on the device
        std::int64_t pendingFrom = 1; // the first step they cover
        double lossSum = 0.0;
        std::int64_t batches = 0;
        double lr = config.learningRate;
        // Adds the losses summed since the last read, of steps [pendingFrom, lastStep].
        const auto readPending = [&](std::int64_t lastStep) -> Result<void> {
            if (!pending.defined())
                return {};
            const double value = pending.item<double>();
            pending = torch::Tensor();
            const std::int64_t from = pendingFrom;
            pendingFrom = lastStep + 1;
            if (!std::isfinite(value))
                return fail(QStringLiteral("training diverged: the loss became %1 %2 (learning rate %3); lower the "
                                           "learning rate or check the data for extreme values")
                                .arg(std::isnan(value) ? QStringLiteral("NaN") : QStringLiteral("infinite"))
                                .arg(from >= lastStep ? QStringLiteral("at step %1").arg(lastStep)
                                                      : QStringLiteral("between steps %1 and %2").arg(from).arg(lastStep))
                                .arg(lr));
            lossSum += value;
            return {};
        };
        // A stream of its own, apart from the seeds of the later passes' orders.
        const std::uint64_t augmentSeeds = mixSeed(config.seed, 0xA7A7A7A7ULL);

        std::vector<std::int64_t> order(static_cast<std::size_t>(n));
        std::iota(order.begin(), order.end(), std::int64_t{0});
        std::int64_t pass = 0;
        std::int64_t position = 0; // within the current pass
        torch::Tensor orderTensor = torch::arange(n, torch::kInt64);

        while (out.sampleSteps < out.plannedSampleSteps) {
            if (cancel && cancel->load(std::memory_order_relaxed)) {
                out.partial = true;
                break;
            }
            if (position >= n) {
                // Each further pass visits the samples in a new order; the first pass keeps the
                // given one so that a partial result covers a prefix the coordinator can name.
                ++pass;
                position = 0;
                deterministicShuffle(order, mixSeed(config.seed, static_cast<std::uint64_t>(pass)));
                orderTensor = torch::from_blob(order.data(), {n}, torch::kInt64).clone();
            }
            const std::int64_t take = std::min({batch, n - position, out.plannedSampleSteps - out.sampleSteps});
            const torch::Tensor idx = orderTensor.narrow(0, position, take);
            // Each batch draws its own crops, from the subtask's seed: a rerun is the same run.
            const torch::Tensor xb = inputs.trainingRows(idx, mixSeed(augmentSeeds, static_cast<std::uint64_t>(batches)));
            const torch::Tensor yb = y.index_select(0, idx).to(device);
            lr = config.schedule.active() ? config.schedule.at(config.firstStep + batches) : config.learningRate;
            setLearningRate(*optimizer, lr);

            optimizer->zero_grad();
            torch::Tensor loss;
            {
                const AutocastScope autocast(precision, device);
                loss = lossOf(model.forward(xb), yb);
            }
            loss = loss.to(torch::kFloat);
            // On a CPU each batch's loss is read at once (it costs nothing there); a GPU's is
            // summed where it is and read every kGpuLossReadEvery batches.
            const torch::Tensor weighted = loss.detach() * double(take);
            pending = pending.defined() ? pending + weighted : weighted;
            if (readEvery == 1 || (batches + 1) % readEvery == 0) {
                if (auto read = readPending(batches + 1); !read)
                    return read.takeError();
            }
            scaler.scaled(loss).backward();
            if (scaler.unscale(parameters)) {
                if (config.clipGradNorm > 0)
                    clipGradients(parameters, config.clipGradNorm);
                optimizer->step();
            } else {
                ++out.skippedSteps;
                if (scaler.skippedInARow() > 40)
                    return fail(QStringLiteral("training diverged: the fp16 gradients overflowed in %1 steps in a row "
                                               "(loss scale down to %2); use bf16 or fp32, or a lower learning rate")
                                    .arg(scaler.skippedInARow())
                                    .arg(scaler.scale()));
            }

            ++batches;
            position += take;
            out.sampleSteps += take;
            if (pass == 0)
                out.covered = position;
            if (progress)
                progress(out.sampleSteps, out.plannedSampleSteps);
        }
        if (auto read = readPending(batches); !read)
            return read.takeError();
        if (pass > 0)
            out.covered = n;
        out.meanLoss = out.sampleSteps > 0 ? lossSum / double(out.sampleSteps) : 0.0;
        out.weights = model.flatWeights();
        if (!torch::isfinite(out.weights).all().item<bool>())
            return fail(QStringLiteral("training produced non-finite weights (NaN or infinity); lower the learning rate"));
    } catch (const std::exception &e) {
        return fail(QStringLiteral("training failed: %1").arg(torchErrorSummary(e)));
    }
    out.seconds = double(timer.nsecsElapsed()) / 1e9;
    return out;
}

} // namespace

Result<TrainOutcome> trainSubtask(Model &model, const torch::Tensor &startWeights, const Dataset &samples,
                                  const TrainConfig &config, torch::Device device,
                                  const std::atomic<bool> *cancel, const TrainProgress &progress, OptimizerSlot *slot)
{
    auto out = runSubtask(model, startWeights, samples, config, device, cancel, progress, slot);
    // A failed subtask may have left non-finite moments behind: the next starts afresh.
    if (!out && slot)
        slot->reset();
    return out;
}

int evaluationBatchSize(torch::Device device)
{
    return device.is_cpu() ? 64 : 1000;
}

Result<Evaluation> evaluate(Model &model, const torch::Tensor &weights, const Dataset &data, torch::Device device,
                            const TaskLoss &task, int batchSize)
{
    if (batchSize <= 0)
        batchSize = evaluationBatchSize(device);
    const torch::Tensor &y = data.labels;
    try {
        // The evaluation model may have been built on another device than the batches go to.
        model.to(device);
        if (auto loaded = model.loadFlatWeights(weights); !loaded)
            return loaded.takeError();
        torch::NoGradGuard noGrad;
        model.setTraining(false);
        const InputPipeline inputs(data, device);
        const std::int64_t n = data.size();
        TaskMetrics metrics(task.task, task.l1);
        for (std::int64_t i = 0; i < n; i += batchSize) {
            const std::int64_t take = std::min<std::int64_t>(batchSize, n - i);
            const torch::Tensor outputs = model.forward(inputs.rows(i, take));
            metrics.add(outputs, y.narrow(0, i, take).to(device));
        }
        model.setTraining(true);
        return metrics.finish(n);
    } catch (const std::exception &e) {
        return fail(QStringLiteral("evaluation failed: %1").arg(torchErrorSummary(e)));
    }
}

} // namespace flotilla
