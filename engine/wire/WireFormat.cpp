#include "engine/wire/WireFormat.h"

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

namespace {

QString featureType(const torch::Tensor &features)
{
    switch (features.scalar_type()) {
    case torch::kUInt8:
        return QStringLiteral("uint8");
    case torch::kInt64:
        return QStringLiteral("int64");
    default:
        return QStringLiteral("float32");
    }
}

// Class indices [N] need no description: a manifest without one (an older coordinator's)
// means them.
bool plainClassLabels(const torch::Tensor &labels)
{
    return labels.dim() == 1 && labels.scalar_type() == torch::kInt64;
}

} // namespace

QCborMap shardManifest(const Dataset &shard)
{
    QCborMap m{{QStringLiteral("samples"), static_cast<qint64>(shard.size())},
               {QStringLiteral("sample_shape"), shapeArray(shard.sampleShape())},
               {QStringLiteral("classes"), shard.numClasses},
               {QStringLiteral("dtype"), featureType(shard.features)},
               {QStringLiteral("normalization"), static_cast<qint64>(shard.normalization.mean.size())},
               {QStringLiteral("crop_padding"), shard.augmentation.cropPadding},
               {QStringLiteral("horizontal_flip"), shard.augmentation.horizontalFlip}};
    if (!plainClassLabels(shard.labels)) {
        const auto sizes = shard.labels.sizes();
        m.insert(QStringLiteral("label_dtype"),
                 shard.labels.scalar_type() == torch::kInt64 ? QStringLiteral("int64") : QStringLiteral("float32"));
        m.insert(QStringLiteral("label_shape"), shapeArray({sizes.begin() + 1, sizes.end()}));
    }
    return m;
}

QByteArray shardToBytes(const Dataset &shard)
{
    const auto type = shard.features.scalar_type();
    const torch::Tensor x = type == torch::kUInt8 || type == torch::kInt64 ? shard.features.contiguous()
                                                                           : shard.features.to(torch::kFloat32).contiguous();
    const torch::Tensor y = shard.labels.scalar_type() == torch::kInt64 ? shard.labels.contiguous()
                                                                        : shard.labels.to(torch::kFloat32).contiguous();
    const auto featureBytes = static_cast<qsizetype>(x.numel() * x.element_size());
    const auto labelBytes = static_cast<qsizetype>(y.numel() * y.element_size());
    const auto &norm = shard.normalization;
    QByteArray out;
    out.reserve(featureBytes + labelBytes + static_cast<qsizetype>(norm.mean.size() * 8));
    out.append(static_cast<const char *>(x.data_ptr()), featureBytes);
    out.append(static_cast<const char *>(y.data_ptr()), labelBytes);
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
    // Present only where the labels are more than class indices (an older coordinator's
    // digest of class labels stays what it was).
    for (const char *key : {"label_dtype", "label_shape"})
        if (manifest.contains(QLatin1String(key)))
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
    const bool describedLabels = manifest.contains(QStringLiteral("label_dtype"));
    const QString labelType = describedLabels ? manifest.value(QStringLiteral("label_dtype")).toString()
                                              : QStringLiteral("int64");
    const QCborArray labelShapeValues = manifest.value(QStringLiteral("label_shape")).toArray();
    if (samples <= 0 || classes < (describedLabels ? 1 : 2) || classes > (qint64(1) << 24) || shapeValues.isEmpty()
        || shapeValues.size() > 4 || labelShapeValues.size() > 2)
        return fail(QStringLiteral("the shard's manifest is malformed (samples %1, classes %2, shape %3, label shape %4)")
                        .arg(samples).arg(classes).arg(shapeText(shapeValues), shapeText(labelShapeValues)));
    if (labelType != QLatin1String("int64") && labelType != QLatin1String("float32"))
        return fail(QStringLiteral("the shard's labels are of type '%1'; int64 (classes, tokens) or float32 (targets) "
                                   "is expected")
                        .arg(labelType.left(40)));
    const bool floatLabels = labelType == QLatin1String("float32");
    std::vector<std::int64_t> labelShape{samples};
    qint64 labelsPerSample = 1;
    for (const auto &d : labelShapeValues) {
        const qint64 v = cborInteger(d, -1);
        if (v <= 0 || v > (1 << 20))
            return fail(QStringLiteral("the shard's label shape %1 is malformed").arg(shapeText(labelShapeValues)));
        labelsPerSample *= v;
        labelShape.push_back(v);
    }
    const QString dtype = manifest.value(QStringLiteral("dtype")).toString();
    const bool isBytes = dtype == QLatin1String("uint8");
    const bool isTokens = dtype == QLatin1String("int64");
    if (!isBytes && !isTokens && dtype != QLatin1String("float32"))
        return fail(QStringLiteral("the shard's features are of type '%1'; uint8 (images), float32 (tables) or int64 "
                                   "(tokens) is expected")
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
    if (isTokens && (shapeValues.size() != 1 || normCount != 0))
        return fail(QStringLiteral("the shard holds int64 samples of shape %1 with %2 normalization values; token "
                                   "samples are one context each, never normalized")
                        .arg(shapeText(shapeValues)).arg(normCount));
    const qint64 elementSize = isBytes ? 1 : isTokens ? 8 : 4;
    const qint64 labelBytes = labelsPerSample * (floatLabels ? 4 : 8);
    if (samples > (qint64(1) << 40) / (perSample * elementSize + labelBytes)
        || bytes.size() != samples * perSample * elementSize + samples * labelBytes + normCount * 8)
        return fail(QStringLiteral("the shard is %1 bytes; %2 %3 samples of %4 with their labels and %5 normalization "
                                   "values need %6")
                        .arg(bytes.size()).arg(samples).arg(dtype, shapeText(shapeValues)).arg(normCount)
                        .arg(samples * perSample * elementSize + samples * labelBytes + normCount * 8));
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
    d.features = torch::empty(shape, isBytes ? torch::kUInt8 : isTokens ? torch::kInt64 : torch::kFloat32);
    std::memcpy(d.features.data_ptr(), p, static_cast<std::size_t>(samples * perSample * elementSize));
    p += samples * perSample * elementSize;
    d.labels = torch::empty(labelShape, floatLabels ? torch::kFloat32 : torch::kInt64);
    std::memcpy(d.labels.data_ptr(), p, static_cast<std::size_t>(samples * labelBytes));
    p += samples * labelBytes;
    d.normalization.mean.resize(static_cast<std::size_t>(normCount));
    d.normalization.stddev.resize(static_cast<std::size_t>(normCount));
    std::memcpy(d.normalization.mean.data(), p, static_cast<std::size_t>(normCount * 4));
    std::memcpy(d.normalization.stddev.data(), p + normCount * 4, static_cast<std::size_t>(normCount * 4));
    if (!isBytes && !isTokens && !torch::isfinite(d.features).all().item<bool>())
        return fail(QStringLiteral("the shard's features contain NaN or infinite values"));
    if (isTokens && (d.features.min().item<std::int64_t>() < 0 || d.features.max().item<std::int64_t>() >= classes))
        return fail(QStringLiteral("the shard's token ids are outside the vocabulary [0, %1)").arg(classes));
    for (std::size_t i = 0; i < d.normalization.mean.size(); ++i)
        if (!std::isfinite(d.normalization.mean[i]) || !std::isfinite(d.normalization.stddev[i])
            || !(d.normalization.stddev[i] > 0.0f))
            return fail(QStringLiteral("the shard's normalization %1 is unusable (mean %2, standard deviation %3)")
                            .arg(i).arg(double(d.normalization.mean[i])).arg(double(d.normalization.stddev[i])));
    if (floatLabels) {
        if (!torch::isfinite(d.labels).all().item<bool>())
            return fail(QStringLiteral("the shard's targets contain NaN or infinite values"));
    } else if (d.labels.min().item<std::int64_t>() < 0 || d.labels.max().item<std::int64_t>() >= classes) {
        return fail(QStringLiteral("the shard's labels are outside [0, %1)").arg(classes));
    }
    d.numClasses = static_cast<int>(classes);
    d.augmentation = augmentation;
    return d;
}

} // namespace flotilla
