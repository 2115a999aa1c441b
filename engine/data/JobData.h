#pragma once
// What a job trains on, loaded once and shared read-only by the coordinator and the local
// workers: the normalized training and test sets and the shard plan.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "engine/data/ShardPlan.h"
#include "job/JobSpec.h"

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

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

} // namespace flotilla
