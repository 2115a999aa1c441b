#pragma once
// An in-memory labelled data set as it is stored (images as bytes, tables as float32), how
// its samples become model inputs (normalization; for training, augmentation), and the
// pipeline that makes batches of those inputs on a device. A data set is built once, then
// read-only: any thread may read it (LibTorch tensors are safe to read concurrently).

#include "common/Result.h"

#include <QString>
#include <QStringList>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

#include <cstdint>
#include <vector>

namespace flotilla {

struct Dataset;

// Per-channel (images [C, H, W]) or per-feature (tabular [F]) standardization, computed on
// the training set and applied to every batch of every split, training and evaluation
// alike. For byte images the statistics are those of value / 255, so that the figures in
// normalization.json mean the same whatever the images were stored as.
struct Normalization
{
    std::vector<float> mean;
    std::vector<float> stddev;

    bool isIdentity() const { return mean.empty(); }
    // Reads the training set in chunks: a byte data set is never copied whole as floats.
    static Normalization fit(const Dataset &train);
};

// Training-time augmentation of images, as torchvision's RandomCrop(size, padding) and
// RandomHorizontalFlip(): pad every side with `cropPadding` black pixels, cut a window of
// the original size at a random place, mirror it left to right with probability 1/2.
struct Augmentation
{
    int cropPadding = 0;
    bool horizontalFlip = false;

    bool enabled() const { return cropPadding > 0 || horizontalFlip; }
};

struct Dataset
{
    QString name;
    // uint8 [N, C, H, W] for images (a byte v stands for v / 255), float32 [N, ...], or
    // int64 [N, context] token ids (never normalized); contiguous, as stored: not normalized.
    torch::Tensor features;
    // The targets, by task (Task.h): int64 [N] class indices in [0, numClasses);
    // float32 [N] or [N, T] numbers (regression); float32 [N, L] of 0/1 (multi-label);
    // int64 [N, context] token ids in [0, numClasses) (next-token).
    torch::Tensor labels;
    int numClasses = 0;     // the model's outputs: classes, targets, labels or the vocabulary
    QStringList classNames; // may be empty
    Normalization normalization; // applied to every batch
    Augmentation augmentation;   // applied to training batches only

    std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
    std::vector<std::int64_t> sampleShape() const;
    bool isImages() const { return features.defined() && features.dim() == 4; }

    // The rows at the given indices, as a new contiguous data set with the same
    // normalization and augmentation.
    Dataset select(const std::vector<std::int64_t> &indices) const;
};

// Makes batches of model inputs on a device from a data set's stored rows: gathers the rows,
// moves them in their stored type (bytes for images: a quarter of float32's traffic to a
// GPU), then converts, augments (training batches only) and normalizes them on the device.
// Training and evaluation both make their batches here, so they cannot normalize
// differently. Belongs to the thread that makes the batches; the data set must outlive it.
class InputPipeline
{
public:
    InputPipeline(const Dataset &data, torch::Device device);

    // Rows [begin, begin + count), not augmented: for evaluation.
    torch::Tensor rows(std::int64_t begin, std::int64_t count) const;
    // The rows at `indices` (int64, on the CPU), augmented when the data set asks for it,
    // with crops and flips drawn from `seed`.
    torch::Tensor trainingRows(const torch::Tensor &indices, std::uint64_t seed) const;

private:
    torch::Tensor prepare(torch::Tensor stored, const std::uint64_t *augmentSeed) const;

    const Dataset &m_data;
    torch::Device m_device;
    torch::Tensor m_scale; // on the device, shaped to broadcast over channels or features
    torch::Tensor m_shift;
};

// Applies `augmentation` to images [B, C, H, W] (float, any device), drawing one crop
// position and one flip per image from `seed` on the CPU: the same seed gives the same
// crops on every machine and every device.
torch::Tensor augmentImages(const torch::Tensor &images, const Augmentation &augmentation, std::uint64_t seed);

// A sample shape as text, e.g. "1×28×28".
QString shapeToString(const std::vector<std::int64_t> &shape);

} // namespace flotilla
