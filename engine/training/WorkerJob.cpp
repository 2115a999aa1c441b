#include "engine/training/WorkerJob.h"

#include "engine/data/JobData.h"
#include "engine/data/ShardPlan.h"
#include "engine/training/Device.h"

#include <QElapsedTimer>
#include <QThread>

#include <ATen/Parallel.h>

namespace flotilla {

Result<std::unique_ptr<WorkerJob>> WorkerJob::create(const ModelSpec &model,
                                                             const std::vector<std::int64_t> &inputShape,
                                                             int numClasses, const QString &device,
                                                             const QString &layoutDigest)
{
    auto selected = selectDevice(device);
    if (!selected)
        return selected.takeError();
    auto built = createModel(model, inputShape, numClasses);
    if (!built)
        return built.takeError();
    std::unique_ptr<WorkerJob> s(new WorkerJob);
    s->m_model = std::move(built).value();
    s->m_layout = s->m_model->layout();
    if (!layoutDigest.isEmpty() && s->m_layout.digest() != layoutDigest)
        return fail(QStringLiteral("this worker builds the %1 model with weight layout %2, but the coordinator's is %3; "
                                   "are both running the same Flotilla version and model file?")
                        .arg(model.kind, s->m_layout.digest(), layoutDigest));
    s->m_device = *selected;
    s->m_model->to(s->m_device);
    s->m_inputShape = inputShape;
    s->m_numClasses = numClasses;
    return s;
}

Result<TrainOutcome> WorkerJob::train(const Dataset &shard, const SubtaskWork &work, const torch::Tensor &weights,
                                          const std::atomic<bool> *cancel, const TrainProgress &progress)
{
    const qint64 size = shard.size();
    if (work.begin < 0 || work.end > size || work.begin >= work.end)
        return fail(QStringLiteral("positions %1-%2 are outside shard %3 of %4 samples")
                        .arg(work.begin).arg(work.end).arg(work.shard).arg(size));
    const std::vector<std::int64_t> order = ShardPlan::epochPermutation(size, work.jobSeed, work.shard, work.epoch);
    const Dataset visit = shard.select(std::vector<std::int64_t>(order.begin() + work.begin, order.begin() + work.end));
    if (m_slowdown <= 1.0)
        return trainSubtask(*m_model, weights, visit, work.config, m_device, cancel, progress, &m_optimizer);
    QElapsedTimer batch;
    batch.start();
    const auto slowed = [&](std::int64_t done, std::int64_t planned) {
        const qint64 pauseMs = qint64(double(batch.nsecsElapsed()) / 1e6 * (m_slowdown - 1.0));
        QElapsedTimer paused;
        paused.start();
        while (paused.elapsed() < pauseMs && !(cancel && cancel->load()))
            QThread::msleep(std::clamp<qint64>(pauseMs - paused.elapsed(), 1, 20));
        if (progress)
            progress(done, planned);
        batch.restart();
    };
    return trainSubtask(*m_model, weights, visit, work.config, m_device, cancel, slowed, &m_optimizer);
}

double WorkerJob::measureThroughput(int batchSize, int threads, double seconds, const QString &precision,
                                   const QString &task)
{
    batchSize = std::clamp(batchSize, 1, 4096);
    std::vector<std::int64_t> shape{batchSize};
    shape.insert(shape.end(), m_inputShape.begin(), m_inputShape.end());
    const auto named = taskFromName(task);
    const Task kind = named ? *named : Task::Classification;
    Dataset probe;
    std::vector<std::int64_t> targetShape;
    if (kind == Task::NextToken) {
        probe.features = torch::randint(0, std::max(1, m_numClasses), shape, torch::kInt64);
        targetShape = m_inputShape;
    } else {
        probe.features = torch::randn(shape);
        if (kind != Task::Classification)
            targetShape = {m_numClasses};
    }
    probe.labels = randomTargets(kind, batchSize, targetShape, m_numClasses);
    TrainConfig config;
    config.task = taskName(kind);
    config.batchSize = batchSize;
    config.threads = threads;
    config.localSteps = 4; // four batches a round: the weights' round trip is not all it times
    config.precision = precision;
    const torch::Tensor start = m_model->flatWeights();
    // Untimed rounds first: a GPU's first batches pick kernels and fill its allocator, and a
    // TorchScript model is optimized on its second run; a built-in model on a CPU is at speed
    // after one. Every round is start-up time the fleet waits for: on a machine of a quarter
    // core two warm rounds and three timed ones took 2.6 s of a 30 s job, so the timed part is
    // one round or `seconds`, whichever is longer.
    const bool warmsTwice = !m_device.is_cpu() || m_model->kind() == QLatin1String("torchscript");
    for (int warm = 0; warm < (warmsTwice ? 2 : 1); ++warm)
        if (!trainSubtask(*m_model, start, probe, config, m_device))
            return 0.0;
    QElapsedTimer timer;
    timer.start();
    std::int64_t samples = 0;
    int rounds = 0;
    // Each round ends by reading the weights back, so a GPU has finished its work when timed.
    while (rounds < 1 || timer.elapsed() < qint64(seconds * 1000.0)) {
        auto out = trainSubtask(*m_model, start, probe, config, m_device);
        if (!out)
            return 0.0;
        samples += out->sampleSteps;
        ++rounds;
    }
    // The probe's updates are not the job's: the model goes back to where it was.
    (void)m_model->loadFlatWeights(start);
    return double(samples) / (double(timer.nsecsElapsed()) / 1e9);
}

} // namespace flotilla
