#pragma once
// The worker's side of a job, whatever carries it to the coordinator: a model built from
// the job's spec, on the worker's device, trained on the samples of one shard at a time.
// Local workers (threads) and remote workers (processes) both train through it.
//
// Threads: one session belongs to one training thread.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "engine/training/Model.h"
#include "engine/training/Trainer.h"
#include "job/JobSpec.h"

#include <atomic>
#include <memory>

namespace flotilla {

// What a subtask asks of a worker, without the weights and the samples.
struct SubtaskWork
{
    int shard = 0;
    int epoch = 0;
    qint64 begin = 0;
    qint64 end = 0;
    quint64 jobSeed = 0;
    TrainConfig config;
};

class WorkerJob
{
public:
    // Builds the model; refuses to work for a job whose weight layout differs from the one
    // the coordinator announced (layoutDigest empty: no check).
    static Result<std::unique_ptr<WorkerJob>> create(const ModelSpec &model,
                                                         const std::vector<std::int64_t> &inputShape, int numClasses,
                                                         const QString &device, const QString &layoutDigest = {});

    const WeightLayout &layout() const { return m_layout; }
    torch::Device device() const { return m_device; }

    // shard: the shard's samples in its fixed order. Trains positions [begin, end) of the
    // epoch's visiting order, with the optimizer this session keeps from one subtask to the
    // next (unless work.config.freshOptimizer: then a new one, kept from then on).
    Result<TrainOutcome> train(const Dataset &shard, const SubtaskWork &work, const torch::Tensor &weights,
                               const std::atomic<bool> *cancel = nullptr, const TrainProgress &progress = {});

    // Samples per second this machine trains the model at, in the job's batch size and
    // precision on the session's device, measured on random inputs for about `seconds` (at
    // least three rounds of four batches) after two untimed rounds of warm-up.
    // The task (job/Tasks.h) decides the probe's inputs and targets.
    double measureThroughput(int batchSize, int threads, double seconds, const QString &precision = QStringLiteral("fp32"),
                             const QString &task = QStringLiteral("classification"));

    // Benchmarks: the machine made `factor` times slower (1: as it is), by pausing after each
    // batch for factor − 1 times what the batch took; a cancel ends the pause at once.
    void setSlowdown(double factor) { m_slowdown = std::max(1.0, factor); }

    // The optimizer state carried between subtasks is dropped (a simulated restart, or
    // another job of the fleet with the same model: its momentum is not this job's).
    void forgetOptimizer() { m_optimizer.reset(); }
    // Subtasks trained with the optimizer as it is now (0: none yet, or just dropped).
    qint64 optimizerAge() const { return m_optimizer.subtasks; }

private:
    WorkerJob() = default;

    std::unique_ptr<Model> m_model;
    WeightLayout m_layout;
    torch::Device m_device{torch::kCPU};
    std::vector<std::int64_t> m_inputShape;
    int m_numClasses = 0;
    OptimizerSlot m_optimizer;
    double m_slowdown = 1.0;
};

} // namespace flotilla
