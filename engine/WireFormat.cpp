#include "engine/WireFormat.h"

#include "common/Cbor.h"
#include "common/Sha256.h"

#include <QCborArray>

#include <torch/torch.h>

#include <cmath>
#include <cstring>

static_assert(Q_BYTE_ORDER == Q_LITTLE_ENDIAN, "tensors travel as little-endian buffers");

namespace flotilla {

namespace {

QString shapeText(const QCborArray &shape)
{
    QStringList parts;
    for (const auto &d : shape)
        parts << QString::number(cborInteger(d));
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
    if (cborInteger(manifest.value(QStringLiteral("numel"))) != layout.totalNumel)
        return fail(QStringLiteral("the weights announce %1 values; the model has %2")
                        .arg(cborInteger(manifest.value(QStringLiteral("numel")))).arg(layout.totalNumel));
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
                    {QStringLiteral("classes"), shard.numClasses},
                    {QStringLiteral("dtype"), shard.features.scalar_type() == torch::kUInt8 ? QStringLiteral("uint8")
                                                                                             : QStringLiteral("float32")},
                    {QStringLiteral("normalization"), static_cast<qint64>(shard.normalization.mean.size())},
                    {QStringLiteral("crop_padding"), shard.augmentation.cropPadding},
                    {QStringLiteral("horizontal_flip"), shard.augmentation.horizontalFlip}};
}

QByteArray shardToBytes(const Dataset &shard)
{
    const bool bytes = shard.features.scalar_type() == torch::kUInt8;
    const torch::Tensor x = bytes ? shard.features.contiguous() : shard.features.to(torch::kFloat32).contiguous();
    const torch::Tensor y = shard.labels.to(torch::kInt64).contiguous();
    const auto featureBytes = static_cast<qsizetype>(x.numel() * (bytes ? 1 : 4));
    const auto &norm = shard.normalization;
    QByteArray out;
    out.reserve(featureBytes + static_cast<qsizetype>(y.numel() * 8 + norm.mean.size() * 8));
    out.append(static_cast<const char *>(x.data_ptr()), featureBytes);
    out.append(reinterpret_cast<const char *>(y.data_ptr<std::int64_t>()), static_cast<qsizetype>(y.numel() * 8));
    out.append(reinterpret_cast<const char *>(norm.mean.data()), static_cast<qsizetype>(norm.mean.size() * 4));
    out.append(reinterpret_cast<const char *>(norm.stddev.data()), static_cast<qsizetype>(norm.stddev.size() * 4));
    return out;
}

QByteArray shardDigest(const QCborMap &manifest, QByteArrayView bytes)
{
    QCborMap own;
    for (const char *key : {"dtype", "samples", "sample_shape", "classes", "normalization", "crop_padding",
                            "horizontal_flip"})
        own.insert(QLatin1String(key), manifest.value(QLatin1String(key)));
    Sha256 hash;
    hash.addData(own.toCborValue().toCbor());
    hash.addData(bytes);
    return hash.result();
}

Result<Dataset> shardFromBytes(const QByteArray &bytes, const QCborMap &manifest)
{
    const qint64 samples = cborInteger(manifest.value(QStringLiteral("samples")), -1);
    const qint64 classes = cborInteger(manifest.value(QStringLiteral("classes")), -1);
    const QCborArray shapeValues = manifest.value(QStringLiteral("sample_shape")).toArray();
    if (samples <= 0 || classes < 2 || shapeValues.isEmpty() || shapeValues.size() > 4)
        return fail(QStringLiteral("the shard's manifest is malformed (samples %1, classes %2, shape %3)")
                        .arg(samples).arg(classes).arg(shapeText(shapeValues)));
    const QString dtype = manifest.value(QStringLiteral("dtype")).toString();
    const bool isBytes = dtype == QLatin1String("uint8");
    if (!isBytes && dtype != QLatin1String("float32"))
        return fail(QStringLiteral("the shard's features are of type '%1'; uint8 (images) or float32 (tables) is expected")
                        .arg(dtype));
    if (isBytes && shapeValues.size() != 3)
        return fail(QStringLiteral("the shard holds uint8 samples of shape %1; byte samples must be images "
                                   "(channels, height, width)")
                        .arg(shapeText(shapeValues)));
    std::vector<std::int64_t> shape{samples};
    qint64 perSample = 1;
    for (const auto &d : shapeValues) {
        const qint64 v = cborInteger(d, -1);
        if (v <= 0 || v > (1 << 20) || perSample > (qint64(1) << 40) / v)
            return fail(QStringLiteral("the shard's sample shape %1 is malformed").arg(shapeText(shapeValues)));
        perSample *= v;
        shape.push_back(v);
    }
    const qint64 normCount = cborInteger(manifest.value(QStringLiteral("normalization")), -1);
    if (normCount != 0 && normCount != shape[1])
        return fail(QStringLiteral("the shard announces %1 normalization values; its samples of shape %2 need %3 (or 0)")
                        .arg(normCount).arg(shapeText(shapeValues)).arg(shape[1]));
    const qint64 elementSize = isBytes ? 1 : 4;
    if (samples > (qint64(1) << 40) / (perSample * elementSize + 8)
        || bytes.size() != samples * perSample * elementSize + samples * 8 + normCount * 8)
        return fail(QStringLiteral("the shard is %1 bytes; %2 %3 samples of %4 with their labels and %5 normalization "
                                   "values need %6")
                        .arg(bytes.size()).arg(samples).arg(dtype, shapeText(shapeValues)).arg(normCount)
                        .arg(samples * perSample * elementSize + samples * 8 + normCount * 8));
    const QCborValue padding = manifest.value(QStringLiteral("crop_padding"));
    const QCborValue flip = manifest.value(QStringLiteral("horizontal_flip"));
    if (!padding.isInteger() || padding.toInteger() < 0 || !flip.isBool())
        return fail(QStringLiteral("the shard's augmentation is malformed (crop_padding %1, horizontal_flip %2)")
                        .arg(padding.toVariant().toString(), flip.toVariant().toString()));
    Augmentation augmentation{int(std::min<qint64>(padding.toInteger(), 1 << 20)), flip.toBool()};
    if (augmentation.enabled()
        && (shapeValues.size() != 3 || augmentation.cropPadding > std::min(shape[2], shape[3])))
        return fail(QStringLiteral("the shard asks for augmentation (crop padding %1) that samples of shape %2 cannot have")
                        .arg(augmentation.cropPadding).arg(shapeText(shapeValues)));

    Dataset d;
    const char *p = bytes.constData();
    d.features = torch::empty(shape, isBytes ? torch::kUInt8 : torch::kFloat32);
    std::memcpy(d.features.data_ptr(), p, static_cast<std::size_t>(samples * perSample * elementSize));
    p += samples * perSample * elementSize;
    d.labels = torch::empty({samples}, torch::kInt64);
    std::memcpy(d.labels.data_ptr<std::int64_t>(), p, static_cast<std::size_t>(samples * 8));
    p += samples * 8;
    d.normalization.mean.resize(static_cast<std::size_t>(normCount));
    d.normalization.stddev.resize(static_cast<std::size_t>(normCount));
    std::memcpy(d.normalization.mean.data(), p, static_cast<std::size_t>(normCount * 4));
    std::memcpy(d.normalization.stddev.data(), p + normCount * 4, static_cast<std::size_t>(normCount * 4));
    if (!isBytes && !torch::isfinite(d.features).all().item<bool>())
        return fail(QStringLiteral("the shard's features contain NaN or infinite values"));
    for (std::size_t i = 0; i < d.normalization.mean.size(); ++i)
        if (!std::isfinite(d.normalization.mean[i]) || !std::isfinite(d.normalization.stddev[i])
            || !(d.normalization.stddev[i] > 0.0f))
            return fail(QStringLiteral("the shard's normalization %1 is unusable (mean %2, standard deviation %3)")
                            .arg(i).arg(double(d.normalization.mean[i])).arg(double(d.normalization.stddev[i])));
    if (d.labels.min().item<std::int64_t>() < 0 || d.labels.max().item<std::int64_t>() >= classes)
        return fail(QStringLiteral("the shard's labels are outside [0, %1)").arg(classes));
    d.numClasses = static_cast<int>(classes);
    d.augmentation = augmentation;
    return d;
}

} // namespace flotilla
