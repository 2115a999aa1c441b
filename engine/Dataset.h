#pragma once
// An in-memory labelled data set and its normalization. Built once, then read-only: any
// thread may read it (LibTorch tensors are safe to read concurrently).

#include "Result.h"

#include <QString>
#include <QStringList>

#include <torch/types.h>

#include <vector>

namespace flotilla {

struct Dataset
{
    QString name;
    torch::Tensor features; // float32 [N, ...sample shape], contiguous
    torch::Tensor labels;   // int64 [N], values in [0, numClasses)
    int numClasses = 0;
    QStringList classNames; // may be empty

    std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
    std::vector<std::int64_t> sampleShape() const;

    // The rows at the given indices, as a new contiguous data set.
    Dataset select(const std::vector<std::int64_t> &indices) const;
};

// Per-channel (images [C, H, W]) or per-feature (tabular [F]) standardization, computed on
// the training set and applied to every split.
struct Normalization
{
    std::vector<float> mean;
    std::vector<float> stddev;

    static Normalization fit(const Dataset &train);
    void apply(Dataset &data) const;
};

// A sample shape as text, e.g. "1×28×28".
QString shapeToString(const std::vector<std::int64_t> &shape);

} // namespace flotilla
