#pragma once
// A trainable classifier, built in or loaded from TorchScript, with its weights seen as one
// flat float32 buffer in a fixed order (the layout). Flat buffers are what aggregation,
// checkpoints and the network move around; a Model turns them back into parameters.
//
// A Model instance belongs to one thread at a time (its owner trains or evaluates it);
// clone() gives another thread its own copy.

#include "common/Result.h"
#include "engine/training/Task.h"
#include "job/JobSpec.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/script.h>
#include <torch/torch.h>
#endif

#include <memory>
#include <string>
#include <vector>

namespace flotilla {

// What a tensor of the model is to training and aggregation. The layout lists all
// parameters first, then the floating-point buffers, then the integer ones, so each kind is
// one contiguous range of the flat buffer.
enum class TensorKind {
    Parameter, // trained by the optimizer
    Buffer,    // floating-point state the forward pass updates (BatchNorm's running statistics)
    Counter,   // integer state (BatchNorm's num_batches_tracked), carried as float32 values
};

// Where each kind lies in a flat weight buffer: [0, parameterEnd) parameters,
// [parameterEnd, bufferEnd) buffers, [bufferEnd, total) counters.
struct WeightSegments
{
    std::int64_t parameterEnd = -1; // -1: the whole buffer is parameters
    std::int64_t bufferEnd = -1;
    std::int64_t total = -1;

    bool onlyParameters() const { return parameterEnd < 0 || parameterEnd == total; }
};

// Names, shapes and offsets of the tensors inside a flat weight buffer.
struct WeightLayout
{
    struct Entry
    {
        std::string name;
        std::vector<std::int64_t> shape;
        std::int64_t offset = 0;
        std::int64_t numel = 0;
        TensorKind kind = TensorKind::Parameter;
    };
    std::vector<Entry> entries;
    std::int64_t totalNumel = 0;

    // A digest of names and shapes: two models can exchange weights iff their digests match.
    QString digest() const;
    WeightSegments segments() const;
};

// One named tensor of a model, as state() lists it.
struct StateTensor
{
    std::string name;
    torch::Tensor tensor;
    TensorKind kind = TensorKind::Parameter;
};

class Model
{
public:
    virtual ~Model() = default;

    virtual torch::Tensor forward(const torch::Tensor &input) = 0;
    virtual void setTraining(bool on) = 0;
    virtual void to(torch::Device device) = 0;
    // Trainable parameters, for the optimizer.
    virtual std::vector<torch::Tensor> parameters() = 0;
    // Everything that makes up the weights, in the layout's order: parameters, floating-point
    // buffers, integer buffers.
    virtual std::vector<StateTensor> state() = 0;
    virtual std::unique_ptr<Model> clone() const = 0;
    // Writes the model as TorchScript in eval mode with every buffer, for Python's
    // torch.jit.load (built-in models too).
    virtual Result<void> save(const QString &path) = 0;
    virtual QString kind() const = 0;

    WeightLayout layout();
    // CPU, float32, contiguous; integer buffers as float32 values (exact up to 2^24).
    torch::Tensor flatWeights();
    Result<void> loadFlatWeights(const torch::Tensor &flat);
};

// Builds the model a job asks for. inputShape is one sample's shape ([C, H, W] or [F]).
Result<std::unique_ptr<Model>> createModel(const ModelSpec &spec, const std::vector<std::int64_t> &inputShape,
                                           int numClasses);

// Runs a tiny batch through the model: a model that cannot take the data set's samples, or
// whose outputs do not fit the task's targets (targetShape: one sample's, empty for a class
// index), is reported before any training starts.
Result<void> checkModelFitsData(Model &model, const std::vector<std::int64_t> &inputShape, int numClasses,
                                const TaskLoss &task = {}, const std::vector<std::int64_t> &targetShape = {});

// The first line of a LibTorch error, without its C++ stack trace.
QString torchErrorSummary(const std::exception &e);

} // namespace flotilla
