#pragma once
// What a job trains on, loaded once and shared read-only by the coordinator and the local
// workers: the normalized training and test sets and the shard plan.

#include "common/Result.h"
#include "engine/Dataset.h"
#include "engine/ShardPlan.h"
#include "job/JobSpec.h"

#include <torch/types.h>

#include <memory>

namespace flotilla {

struct JobData
{
    Dataset train;
    Dataset test;
    Normalization normalization;
    ShardPlan plan;
    std::vector<std::int64_t> inputShape;
    std::vector<std::int64_t> targetShape; // one sample's targets: empty for a class index
    int numClasses = 0; // the model's outputs: classes, targets, labels or the vocabulary
};

// Where Fashion-MNIST is looked for when a job names no folder: $FLOTILLA_FASHION_MNIST,
// else Debian's dataset-fashion-mnist package.
QString defaultFashionMnistDir();

Result<std::shared_ptr<const JobData>> loadJobData(const JobSpec &spec);

// "auto" picks the first CUDA GPU when LibTorch was built with CUDA and a GPU is present;
// "cuda:N" the N-th. The error says why a GPU asked for cannot be used.
Result<torch::Device> selectDevice(const QString &device);
// "cpu" or "cuda:N".
QString deviceName(const torch::Device &device);
// deviceName() plus, for a GPU, its model, memory and compute capability as the CUDA driver
// reports them ("cuda:0 (NVIDIA H200, 140 GiB, compute 9.0)"); what workers tell the
// coordinator.
QString deviceDescription(const torch::Device &device);
// The device of local worker `worker` (from 0): a list's entries in turn; auto and cuda
// spread the workers over every visible GPU (cuda:0, cuda:1, …), or stay as they are
// where there is none.
QString localWorkerDevice(const QString &device, int worker);
// CUDA GPUs LibTorch can use here (0 with a CPU-only LibTorch).
int visibleGpus();

} // namespace flotilla
