#include "WireFormat.h"

#include <QCborArray>

#include <torch/torch.h>

#include <cstring>

static_assert(Q_BYTE_ORDER == Q_LITTLE_ENDIAN, "tensors travel as little-endian buffers");

namespace flotilla {

namespace {

QString shapeText(const QCborArray &shape)
{
    QStringList parts;
    for (const auto &d : shape)
        parts << QString::number(d.toInteger());
    return QStringLiteral("[") + parts.join(QStringLiteral(", ")) + u']';
}

QCborArray shapeArray(const std::vector<std::int64_t> &shape)
{
    QCborArray a;
    for (const auto d : shape)
        a.append(static_cast<qint64>(d));
    return a;
}

} // namespace

QCborMap weightManifest(const WeightLayout &layout)
{
    QCborArray tensors;
    for (const auto &e : layout.entries)
        tensors.append(QCborMap{{QStringLiteral("name"), QString::fromStdString(e.name)},
                                {QStringLiteral("shape"), shapeArray(e.shape)}});
    return QCborMap{{QStringLiteral("dtype"), QStringLiteral("float32")},
                    {QStringLiteral("numel"), static_cast<qint64>(layout.totalNumel)},
                    {QStringLiteral("tensors"), tensors}};
}

Result<void> checkWeightManifest(const QCborMap &manifest, const WeightLayout &layout)
{
    if (manifest.value(QStringLiteral("dtype")).toString() != QLatin1String("float32"))
        return fail(QStringLiteral("the weights are of type '%1'; float32 is expected")
                        .arg(manifest.value(QStringLiteral("dtype")).toString()));
    const QCborArray tensors = manifest.value(QStringLiteral("tensors")).toArray();
    if (tensors.size() != qsizetype(layout.entries.size()))
        return fail(QStringLiteral("the weights hold %1 tensors; the model has %2")
                        .arg(tensors.size()).arg(layout.entries.size()));
    for (qsizetype i = 0; i < tensors.size(); ++i) {
        const QCborMap t = tensors.at(i).toMap();
        const auto &e = layout.entries[std::size_t(i)];
        const QString name = t.value(QStringLiteral("name")).toString();
        const QCborArray shape = t.value(QStringLiteral("shape")).toArray();
        if (name != QString::fromStdString(e.name) || shape != shapeArray(e.shape))
            return fail(QStringLiteral("tensor %1 of the weights is '%2' %3; the model's is '%4' %5")
                            .arg(i).arg(name, shapeText(shape), QString::fromStdString(e.name),
                                        shapeText(shapeArray(e.shape))));
    }
    if (manifest.value(QStringLiteral("numel")).toInteger() != layout.totalNumel)
        return fail(QStringLiteral("the weights announce %1 values; the model has %2")
                        .arg(manifest.value(QStringLiteral("numel")).toInteger()).arg(layout.totalNumel));
    return {};
}

QByteArray weightsToBytes(const torch::Tensor &flat)
{
    const torch::Tensor t = flat.to(torch::kCPU, torch::kFloat32).contiguous();
    return QByteArray(reinterpret_cast<const char *>(t.data_ptr<float>()), static_cast<qsizetype>(t.numel() * 4));
}

Result<torch::Tensor> weightsFromBytes(const QByteArray &bytes, const WeightLayout &layout)
{
    if (bytes.size() != layout.totalNumel * 4)
        return fail(QStringLiteral("the weights are %1 bytes; the model's %2 float32 values are %3 bytes")
                        .arg(bytes.size()).arg(layout.totalNumel).arg(layout.totalNumel * 4));
    torch::Tensor t = torch::empty({layout.totalNumel}, torch::kFloat32);
    std::memcpy(t.data_ptr<float>(), bytes.constData(), static_cast<std::size_t>(bytes.size()));
    return t;
}

QCborMap shardManifest(const Dataset &shard)
{
    return QCborMap{{QStringLiteral("samples"), static_cast<qint64>(shard.size())},
                    {QStringLiteral("sample_shape"), shapeArray(shard.sampleShape())},
                    {QStringLiteral("classes"), shard.numClasses}};
}

QByteArray shardToBytes(const Dataset &shard)
{
    const torch::Tensor x = shard.features.to(torch::kFloat32).contiguous();
    const torch::Tensor y = shard.labels.to(torch::kInt64).contiguous();
    QByteArray out;
    out.reserve(static_cast<qsizetype>(x.numel() * 4 + y.numel() * 8));
    out.append(reinterpret_cast<const char *>(x.data_ptr<float>()), static_cast<qsizetype>(x.numel() * 4));
    out.append(reinterpret_cast<const char *>(y.data_ptr<std::int64_t>()), static_cast<qsizetype>(y.numel() * 8));
    return out;
}

Result<Dataset> shardFromBytes(const QByteArray &bytes, const QCborMap &manifest)
{
    const qint64 samples = manifest.value(QStringLiteral("samples")).toInteger(-1);
    const qint64 classes = manifest.value(QStringLiteral("classes")).toInteger(-1);
    const QCborArray shapeValues = manifest.value(QStringLiteral("sample_shape")).toArray();
    if (samples <= 0 || classes < 2 || shapeValues.isEmpty() || shapeValues.size() > 4)
        return fail(QStringLiteral("the shard's manifest is malformed (samples %1, classes %2, shape %3)")
                        .arg(samples).arg(classes).arg(shapeText(shapeValues)));
    std::vector<std::int64_t> shape{samples};
    qint64 perSample = 1;
    for (const auto &d : shapeValues) {
        const qint64 v = d.toInteger(-1);
        if (v <= 0 || v > (1 << 20) || perSample > (qint64(1) << 40) / v)
            return fail(QStringLiteral("the shard's sample shape %1 is malformed").arg(shapeText(shapeValues)));
        perSample *= v;
        shape.push_back(v);
    }
    if (samples > (qint64(1) << 40) / (perSample * 4 + 8)
        || bytes.size() != samples * perSample * 4 + samples * 8)
        return fail(QStringLiteral("the shard is %1 bytes; %2 samples of %3 need %4")
                        .arg(bytes.size()).arg(samples).arg(shapeText(shapeValues))
                        .arg(samples * perSample * 4 + samples * 8));
    Dataset d;
    d.features = torch::empty(shape, torch::kFloat32);
    std::memcpy(d.features.data_ptr<float>(), bytes.constData(), static_cast<std::size_t>(samples * perSample * 4));
    d.labels = torch::empty({samples}, torch::kInt64);
    std::memcpy(d.labels.data_ptr<std::int64_t>(), bytes.constData() + samples * perSample * 4,
                static_cast<std::size_t>(samples * 8));
    if (!torch::isfinite(d.features).all().item<bool>())
        return fail(QStringLiteral("the shard's features contain NaN or infinite values"));
    if (d.labels.min().item<std::int64_t>() < 0 || d.labels.max().item<std::int64_t>() >= classes)
        return fail(QStringLiteral("the shard's labels are outside [0, %1)").arg(classes));
    d.numClasses = static_cast<int>(classes);
    return d;
}

} // namespace flotilla
