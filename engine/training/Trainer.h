#pragma once
// The local trainer: runs one subtask on the calling thread. It starts from the given
// weights, visits the subtask's samples for a number of local epochs (or steps), and returns
// the new weights with its metrics. A cancel flag set from another thread (a preemption
// notice) makes it stop after the current batch and return a partial result.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "engine/training/Model.h"
#include "engine/training/Task.h"
#include "job/JobSpec.h"

#include <atomic>
#include <functional>

namespace flotilla {

// The job's learning rate as a function of the optimizer step, over the whole job (see
// TrainingSpec): what the coordinator tells every lease, so that each batch of a subtask gets
// the rate of its own step wherever it is trained.
struct LearningRateSchedule
{
    QString kind = QStringLiteral("constant"); // constant | step | cosine
    double base = 0.01;
    qint64 totalSteps = 0; // of the job; 0: no schedule, the subtask's learningRate throughout
    qint64 warmupSteps = 0; // linear from base / warmupSteps up to base
    double floor = 0.05;   // cosine ends at floor × base
    qint64 stepEvery = 0;  // step: × gamma every this many steps
    double gamma = 0.5;

    bool active() const { return totalSteps > 0; }
    double at(qint64 step) const;
    // Empty when the schedule can be trained; else what is wrong with it (a remote worker
    // hands such a lease back rather than guess).
    QString problem() const;
};

// The optimizer steps an epoch of the job takes, and where each shard's first step falls in
// it: what a subtask's first step is follows from its epoch, shard and first position.
class StepPlan
{
public:
    StepPlan() = default;
    StepPlan(const std::vector<qint64> &shardSizes, int batchSize, int localEpochs, int localSteps);
    qint64 stepsPerEpoch() const { return m_perEpoch; }
    qint64 firstStep(int epoch, int shard, qint64 begin) const;

private:
    std::vector<qint64> m_offsets; // per shard: its first step within an epoch
    std::vector<qint64> m_sizes;
    qint64 m_perEpoch = 0;
    int m_batch = 1;
    int m_localEpochs = 1;
    int m_localSteps = 0;
};

LearningRateSchedule learningRateSchedule(const TrainingSpec &training, qint64 stepsPerEpoch);

struct TrainConfig
{
    QString optimizer = QStringLiteral("sgd");
    double learningRate = 0.01; // the rate at the subtask's first step
    LearningRateSchedule schedule; // when active: each batch's rate, from firstStep on
    qint64 firstStep = 0;
    // Start this subtask with a fresh optimizer state, even where the worker keeps one
    // (replicas that must agree start alike; the job may ask for it throughout).
    bool freshOptimizer = false;
    double momentum = 0.9;
    bool nesterov = false;
    double weightDecay = 0.0;   // sgd, adam: L2 in the gradient; adamw: decoupled
    double beta1 = 0.9;         // adam, adamw
    double beta2 = 0.999;
    double eps = 1e-8;
    double clipGradNorm = 0.0;  // > 0: the gradients' global norm is clipped to this
    double labelSmoothing = 0.0;
    QString task = QStringLiteral("classification"); // job/Tasks.h
    QString regressionLoss = QStringLiteral("mse");  // mse | l1
    QString precision = QStringLiteral("fp32"); // fp32 | bf16 | fp16 (Precision.h)
    int batchSize = 32;
    int localEpochs = 1;
    int localSteps = 0; // > 0: train this many steps instead of localEpochs passes
    quint64 seed = 1;
    int threads = 1;

    // Empty when a worker can train with these settings; else what is wrong with them (a
    // remote worker hands such a lease back rather than guess: an optimizer it does not know
    // must not quietly become another).
    QString problem() const;
};

// On a GPU the loss is read back every this many batches, not every batch: each read makes
// the host wait for the GPU to drain its queue.
constexpr int kGpuLossReadEvery = 32;

struct TrainOutcome
{
    torch::Tensor weights;         // flat, CPU, float32
    double meanLoss = 0.0;         // mean training loss over the batches run
    std::int64_t sampleSteps = 0;  // samples processed, counting repeats across local epochs
    std::int64_t plannedSampleSteps = 0;
    std::int64_t covered = 0;      // leading samples of the order trained at least once
    double seconds = 0.0;
    bool partial = false;          // stopped early by the cancel flag
    std::int64_t skippedSteps = 0; // fp16: steps skipped for an overflow of the loss scale
};

using TrainProgress = std::function<void(std::int64_t sampleSteps, std::int64_t planned)>;

// The optimizer a worker keeps between the subtasks of one job, with what it was made for:
// its momentum buffers or Adam's moments carry over as they would in one process's loop.
struct OptimizerSlot
{
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    QString settings; // the kind, momentum and weight decay it was made with
    qint64 subtasks = 0; // trained with it since it was made
    void reset()
    {
        optimizer.reset();
        settings.clear();
        subtasks = 0;
    }
};

// samples: the subtask's samples in visiting order, as stored; every batch is normalized
// (and augmented, when the data set asks for it, with draws seeded from config.seed) on
// `device` by an InputPipeline. model must already be on `device`; start weights are loaded
// into it first. With a slot, the optimizer in it is used and kept (made when it is empty,
// made for other settings, or config.freshOptimizer asks); without one, a fresh optimizer.
Result<TrainOutcome> trainSubtask(Model &model, const torch::Tensor &startWeights, const Dataset &samples,
                                  const TrainConfig &config, torch::Device device,
                                  const std::atomic<bool> *cancel = nullptr, const TrainProgress &progress = {},
                                  OptimizerSlot *slot = nullptr);

// The task's loss of a configuration (its task, regression loss and label smoothing).
Result<TaskLoss> taskLoss(const TrainConfig &config);
// A validated job's (classification where its task is unknown).
TaskLoss taskLoss(const TrainingSpec &training);

// The score, loss and metrics of the task (Task.h) for flat weights on a data set, in batches
// made by the same InputPipeline as training's (never augmented), under NoGradGuard.
// batchSize 0: a size that suits the device (see evaluationBatchSize).
Result<Evaluation> evaluate(Model &model, const torch::Tensor &weights, const Dataset &data, torch::Device device,
                            const TaskLoss &task, int batchSize = 0);
// On a CPU, small batches: the activations and the convolutions' unfolded inputs of a batch of
// 1,000 images run to hundreds of MB, freshly mapped (and page-faulted) for every batch, and
// evaluating the default job's test set took several times longer than in batches of 64.
// A GPU wants large ones.
int evaluationBatchSize(torch::Device device);

} // namespace flotilla
