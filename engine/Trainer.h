#pragma once
// The local trainer: runs one subtask on the calling thread. It starts from the given
// weights, visits the subtask's samples for a number of local epochs (or steps), and returns
// the new weights with its metrics. A cancel flag set from another thread (a preemption
// notice) makes it stop after the current batch and return a partial result.

#include "common/Result.h"
#include "engine/Dataset.h"
#include "engine/Model.h"
#include "job/JobSpec.h"

#include <atomic>
#include <functional>

namespace flotilla {

struct TrainConfig
{
    QString optimizer = QStringLiteral("sgd");
    double learningRate = 0.01; // already scheduled for the subtask's epoch
    double momentum = 0.9;
    double weightDecay = 0.0;
    int batchSize = 32;
    int localEpochs = 1;
    int localSteps = 0; // > 0: train this many steps instead of localEpochs passes
    quint64 seed = 1;
    int threads = 1;
};

struct TrainOutcome
{
    torch::Tensor weights;         // flat, CPU, float32
    double meanLoss = 0.0;         // mean training loss over the batches run
    std::int64_t sampleSteps = 0;  // samples processed, counting repeats across local epochs
    std::int64_t plannedSampleSteps = 0;
    std::int64_t covered = 0;      // leading samples of the order trained at least once
    double seconds = 0.0;
    bool partial = false;          // stopped early by the cancel flag
};

using TrainProgress = std::function<void(std::int64_t sampleSteps, std::int64_t planned)>;

// The learning rate a job's schedule gives an epoch (0-based).
double scheduledLearningRate(const TrainingSpec &training, int epoch);

// samples: the subtask's samples in visiting order, as stored; every batch is normalized
// (and augmented, when the data set asks for it, with draws seeded from config.seed) on
// `device` by an InputPipeline. model must already be on `device`; start weights are loaded
// into it first.
Result<TrainOutcome> trainSubtask(Model &model, const torch::Tensor &startWeights, const Dataset &samples,
                                  const TrainConfig &config, torch::Device device,
                                  const std::atomic<bool> *cancel = nullptr, const TrainProgress &progress = {});

// Accuracy and mean loss of flat weights on a data set, in batches made by the same
// InputPipeline as training's (never augmented), under NoGradGuard. batchSize 0: a size that
// suits the device (see evaluationBatchSize).
struct Evaluation
{
    double accuracy = 0.0;
    double loss = 0.0;
    std::int64_t samples = 0;
};
Result<Evaluation> evaluate(Model &model, const torch::Tensor &weights, const Dataset &data, torch::Device device,
                            int batchSize = 0);
// On a CPU, small batches: the activations and the convolutions' unfolded inputs of a batch of
// 1,000 images run to hundreds of MB, freshly mapped (and page-faulted) for every batch, and
// evaluating the default job's test set took several times longer than in batches of 64.
// A GPU wants large ones.
int evaluationBatchSize(torch::Device device);

} // namespace flotilla
