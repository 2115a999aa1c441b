#include "engine/training/Model.h"

#include "common/AtomicFile.h"
#include "engine/data/Dataset.h"
#include "engine/training/Networks.h"
#include "engine/training/ScriptExport.h"

#include <QCryptographicHash>
#include <QFileInfo>

#include <sstream>

namespace flotilla {

QString torchErrorSummary(const std::exception &e)
{
    const auto *c10 = dynamic_cast<const c10::Error *>(&e);
    QString text = QString::fromUtf8(c10 ? c10->what_without_backtrace() : e.what()).trimmed();
    // A TorchScript model's error starts with a generic line and a traceback; what went wrong
    // ("RuntimeError: CUDA out of memory ...") is the last line.
    if (text.startsWith(QLatin1String("The following operation failed in the TorchScript interpreter"))) {
        const QStringList lines = text.split(u'\n', Qt::SkipEmptyParts);
        for (auto it = lines.crbegin(); it != lines.crend(); ++it)
            if (!it->trimmed().isEmpty())
                return QStringLiteral("in the TorchScript model: %1").arg(it->trimmed());
    }
    const qsizetype newline = text.indexOf(u'\n');
    if (newline > 0)
        text.truncate(newline);
    return text;
}

QString WeightLayout::digest() const
{
    QCryptographicHash hash(QCryptographicHash::Sha256);
    for (const auto &e : entries) {
        hash.addData(QByteArrayView(e.name.data(), static_cast<qsizetype>(e.name.size())));
        for (const auto d : e.shape)
            hash.addData(QByteArray(QByteArray::number(static_cast<qlonglong>(d)) + 'x'));
        hash.addData(QByteArrayView(";"));
    }
    return QString::fromLatin1(hash.result().toHex().left(16));
}

WeightSegments WeightLayout::segments() const
{
    WeightSegments s;
    s.total = totalNumel;
    s.parameterEnd = s.bufferEnd = 0;
    for (const auto &e : entries) {
        if (e.kind == TensorKind::Parameter)
            s.parameterEnd = s.bufferEnd = e.offset + e.numel;
        else if (e.kind == TensorKind::Buffer)
            s.bufferEnd = e.offset + e.numel;
    }
    return s;
}

WeightLayout Model::layout()
{
    WeightLayout l;
    for (auto &t : state()) {
        WeightLayout::Entry e;
        e.name = t.name;
        e.shape = t.tensor.sizes().vec();
        e.numel = t.tensor.numel();
        e.offset = l.totalNumel;
        e.kind = t.kind;
        l.totalNumel += e.numel;
        l.entries.push_back(std::move(e));
    }
    return l;
}

torch::Tensor Model::flatWeights()
{
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> parts;
    for (auto &t : state())
        parts.push_back(t.tensor.detach().to(torch::kCPU, torch::kFloat32).reshape({-1}));
    if (parts.empty())
        return torch::empty({0}, torch::kFloat32);
    return torch::cat(parts).contiguous();
}

Result<void> Model::loadFlatWeights(const torch::Tensor &flat)
{
    torch::NoGradGuard noGrad;
    auto entries = state();
    std::int64_t total = 0;
    for (const auto &e : entries)
        total += e.tensor.numel();
    if (flat.dim() != 1 || flat.numel() != total || flat.scalar_type() != torch::kFloat32)
        return fail(QStringLiteral("weights have %1 float32 values but the %2 model has %3")
                        .arg(flat.numel()).arg(kind()).arg(total));
    std::int64_t offset = 0;
    for (auto &e : entries) {
        const std::int64_t n = e.tensor.numel();
        const torch::Tensor part = flat.narrow(0, offset, n).view(e.tensor.sizes());
        // Counters travel as float32; rounding makes the conversion back exact.
        e.tensor.copy_(e.kind == TensorKind::Counter ? part.round() : part);
        offset += n;
    }
    return {};
}

namespace {

// Parameters, then floating-point buffers, then integer buffers: the layout's order.
template <typename Params, typename Buffers, typename Key, typename Value>
std::vector<StateTensor> orderedState(const Params &params, const Buffers &buffers, Key key, Value value)
{
    std::vector<StateTensor> out;
    for (const auto &p : params)
        out.push_back({key(p), value(p), TensorKind::Parameter});
    for (const auto &b : buffers)
        if (value(b).defined() && value(b).is_floating_point())
            out.push_back({key(b), value(b), TensorKind::Buffer});
    for (const auto &b : buffers)
        if (value(b).defined() && !value(b).is_floating_point())
            out.push_back({key(b), value(b), TensorKind::Counter});
    return out;
}

// A built-in network behind the Model interface.
template <typename Net>
class BuiltinModel final : public Model
{
public:
    BuiltinModel(Net net, ModelSpec spec, std::vector<std::int64_t> inputShape, int classes)
        : m_net(std::move(net)), m_spec(std::move(spec)), m_inputShape(std::move(inputShape)), m_classes(classes)
    {
    }

    torch::Tensor forward(const torch::Tensor &input) override { return m_net->forward(input); }
    void setTraining(bool on) override { m_net->train(on); }
    void to(torch::Device device) override { m_net->to(device); }
    std::vector<torch::Tensor> parameters() override { return m_net->parameters(); }
    std::vector<StateTensor> state() override
    {
        return orderedState(
            m_net->named_parameters(true), m_net->named_buffers(true), [](const auto &item) { return item.key(); },
            [](const auto &item) { return item.value(); });
    }
    std::unique_ptr<Model> clone() const override
    {
        auto copy = createModel(m_spec, m_inputShape, m_classes);
        auto *self = const_cast<BuiltinModel *>(this);
        (void)(*copy)->loadFlatWeights(self->flatWeights());
        return std::move(copy).value();
    }
    Result<void> save(const QString &path) override
    {
        try {
            // As TorchScript in eval mode, so Python needs only torch.jit.load.
            std::ostringstream out;
            toTorchScript(*m_net).save(out);
            const std::string bytes = out.str();
            return writeFileAtomically(path, QByteArray(bytes.data(), static_cast<qsizetype>(bytes.size())));
        } catch (const std::exception &e) {
            return fail(QStringLiteral("cannot save the model to '%1': %2").arg(path, torchErrorSummary(e)));
        }
    }
    QString kind() const override { return m_spec.kind; }

private:
    Net m_net;
    ModelSpec m_spec;
    std::vector<std::int64_t> m_inputShape;
    int m_classes;
};

// A TorchScript module made in Python with torch.jit.script(...).save(...).
class ScriptModel final : public Model
{
public:
    explicit ScriptModel(torch::jit::Module module) : m_module(std::move(module)) {}

    torch::Tensor forward(const torch::Tensor &input) override
    {
        return m_module.forward({input}).toTensor();
    }
    void setTraining(bool on) override { m_module.train(on); }
    void to(torch::Device device) override { m_module.to(device); }
    std::vector<torch::Tensor> parameters() override
    {
        std::vector<torch::Tensor> out;
        for (const auto &p : m_module.parameters(true))
            if (p.requires_grad())
                out.push_back(p);
        return out;
    }
    std::vector<StateTensor> state() override
    {
        return orderedState(
            m_module.named_parameters(true), m_module.named_buffers(true),
            [](const auto &item) { return item.name; }, [](const auto &item) { return item.value; });
    }
    std::unique_ptr<Model> clone() const override
    {
        return std::make_unique<ScriptModel>(m_module.deepcopy());
    }
    Result<void> save(const QString &path) override
    {
        try {
            // Saved for inference: Python's torch.jit.load gets a model in eval mode, with
            // every buffer (running statistics and counters) as trained.
            m_module.eval();
            std::ostringstream out;
            m_module.save(out);
            m_module.train(true);
            const std::string bytes = out.str();
            return writeFileAtomically(path, QByteArray(bytes.data(), static_cast<qsizetype>(bytes.size())));
        } catch (const std::exception &e) {
            return fail(QStringLiteral("cannot save the TorchScript model to '%1': %2").arg(path, torchErrorSummary(e)));
        }
    }
    QString kind() const override { return QStringLiteral("torchscript"); }

private:
    torch::jit::Module m_module;
};

} // namespace

Result<std::unique_ptr<Model>> createModel(const ModelSpec &spec, const std::vector<std::int64_t> &inputShape,
                                           int numClasses)
{
    try {
        std::int64_t inputs = 1;
        for (const auto d : inputShape)
            inputs *= d;
        if (spec.kind == QLatin1String("mlp")) {
            std::vector<int> hidden(spec.hidden.begin(), spec.hidden.end());
            return std::unique_ptr<Model>(std::make_unique<BuiltinModel<Mlp>>(
                Mlp(inputs, hidden, numClasses, spec.dropout), spec, inputShape, numClasses));
        }
        if (spec.kind == QLatin1String("cnn") || spec.kind == QLatin1String("resnet")) {
            if (inputShape.size() != 3)
                return fail(QStringLiteral("model '%1' needs image samples [channels, height, width], but "
                                           "this data set's samples have shape [%2]; use the 'mlp' model "
                                           "for tabular data")
                                .arg(spec.kind, shapeToString(inputShape)));
            if (spec.kind == QLatin1String("cnn")) {
                if (CnnImpl::featureSide(inputShape[1]) < 1 || CnnImpl::featureSide(inputShape[2]) < 1)
                    return fail(QStringLiteral("model 'cnn' needs images of at least 10×10 pixels; this data "
                                               "set's samples are %1")
                                    .arg(shapeToString(inputShape)));
                return std::unique_ptr<Model>(std::make_unique<BuiltinModel<Cnn>>(
                    Cnn(inputShape[0], inputShape[1], inputShape[2], numClasses, spec.dropout), spec,
                    inputShape, numClasses));
            }
            return std::unique_ptr<Model>(std::make_unique<BuiltinModel<ResNet>>(
                ResNet(inputShape[0], numClasses, spec.dropout), spec, inputShape, numClasses));
        }
        if (spec.kind == QLatin1String("torchscript")) {
            if (!QFileInfo::exists(spec.path))
                return fail(QStringLiteral("TorchScript model file '%1' does not exist").arg(spec.path));
            torch::jit::Module module = torch::jit::load(spec.path.toStdString(), torch::kCPU);
            auto model = std::make_unique<ScriptModel>(std::move(module));
            for (const auto &t : model->state())
                if (t.tensor.is_floating_point() && t.tensor.scalar_type() != torch::kFloat32)
                    return fail(QStringLiteral("TorchScript model '%1' has %2 tensor '%3'; Flotilla trains float32 "
                                               "models: convert it in Python with model.float() before "
                                               "torch.jit.script(model).save(...)")
                                    .arg(spec.path, QString::fromStdString(std::string(c10::toString(t.tensor.scalar_type()))),
                                         QString::fromStdString(t.name)));
            return std::unique_ptr<Model>(std::move(model));
        }
        return fail(QStringLiteral("unknown model kind '%1' (built in: mlp, cnn, resnet; or torchscript)").arg(spec.kind));
    } catch (const std::exception &e) {
        if (spec.kind == QLatin1String("torchscript"))
            return fail(QStringLiteral("cannot load TorchScript model '%1': %2 (save it in Python with "
                                       "torch.jit.script(model).save(path))")
                            .arg(spec.path, torchErrorSummary(e)));
        return fail(QStringLiteral("cannot build model '%1': %2").arg(spec.kind, torchErrorSummary(e)));
    }
}

Result<void> checkModelFitsData(Model &model, const std::vector<std::int64_t> &inputShape, int numClasses,
                                const TaskLoss &task, const std::vector<std::int64_t> &targetShape)
{
    std::vector<std::int64_t> batchShape{2};
    batchShape.insert(batchShape.end(), inputShape.begin(), inputShape.end());
    torch::Tensor out;
    try {
        torch::NoGradGuard noGrad;
        model.setTraining(false);
        out = model.forward(task.task == Task::NextToken ? torch::zeros(batchShape, torch::kInt64)
                                                         : torch::zeros(batchShape));
        model.setTraining(true);
    } catch (const std::exception &e) {
        return fail(QStringLiteral("the %1 model cannot take this data set's samples of shape [%2]: %3")
                        .arg(model.kind(), shapeToString(inputShape), torchErrorSummary(e)));
    }
    if (task.task == Task::Classification) {
        if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != numClasses)
            return fail(QStringLiteral("the %1 model outputs shape [%2] for a batch of 2, but this data set has "
                                       "%3 classes: it must output [batch, %3]")
                            .arg(model.kind(), shapeToString(out.sizes().vec())).arg(numClasses));
    } else if (const QString wrong = task.mismatch(out.sizes().vec(), targetShape, numClasses); !wrong.isEmpty()) {
        return fail(QStringLiteral("the %1 model does not fit the %2 task: %3")
                        .arg(model.kind(), taskName(task.task), wrong));
    }
    if (model.parameters().empty())
        return fail(QStringLiteral("the %1 model has no trainable parameters").arg(model.kind()));
    return {};
}

} // namespace flotilla
