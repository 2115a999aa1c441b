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
    int numClasses = 0;
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
// deviceName() plus, for a GPU, its model and memory ("cuda:0 (NVIDIA H200, 140 GiB)") as
// the driver reports them; what workers tell the coordinator.
QString deviceDescription(const torch::Device &device);

} // namespace flotilla
