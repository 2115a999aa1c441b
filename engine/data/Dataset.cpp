#include "engine/data/Dataset.h"

#include "common/Random.h"

#include <torch/torch.h>

namespace flotilla {

std::vector<std::int64_t> Dataset::sampleShape() const
{
    if (!features.defined())
        return {};
    const auto sizes = features.sizes();
    return {sizes.begin() + 1, sizes.end()};
}

Dataset Dataset::select(const std::vector<std::int64_t> &indices) const
{
    const auto idx = torch::from_blob(const_cast<std::int64_t *>(indices.data()),
                                      {static_cast<std::int64_t>(indices.size())}, torch::kInt64);
    Dataset out;
    out.name = name;
    out.features = features.index_select(0, idx).contiguous();
    out.labels = labels.index_select(0, idx).contiguous();
    out.numClasses = numClasses;
    out.classNames = classNames;
    out.normalization = normalization;
    out.augmentation = augmentation;
    return out;
}

Normalization Normalization::fit(const Dataset &train)
{
    Normalization norm;
    const torch::Tensor &x = train.features;
    if (!x.defined() || x.size(0) == 0 || x.dim() < 2 || x.scalar_type() == torch::kInt64)
        return norm;
    // Statistics per channel for images, per column for tables: reduce over every other dim.
    std::vector<std::int64_t> dims{0};
    for (std::int64_t d = 2; d < x.dim(); ++d)
        dims.push_back(d);
    const std::int64_t channels = x.size(1);
    const double perSample = double(x[0].numel()) / double(channels);
    const double toUnit = x.scalar_type() == torch::kUInt8 ? 1.0 / 255.0 : 1.0;
    torch::Tensor sum = torch::zeros({channels}, torch::kFloat64);
    torch::Tensor squares = torch::zeros({channels}, torch::kFloat64);
    // Chunks of a few megabytes, in double so that a million samples add up exactly enough.
    const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t(1) << 19) / std::max<std::int64_t>(1, x[0].numel()));
    for (std::int64_t i = 0; i < x.size(0); i += chunk) {
        const torch::Tensor part = x.narrow(0, i, std::min(chunk, x.size(0) - i)).to(torch::kFloat64).mul_(toUnit);
        sum += part.sum(dims);
        squares += part.square().sum(dims);
    }
    const double count = double(x.size(0)) * perSample;
    const torch::Tensor mean = sum / count;
    torch::Tensor stddev = (squares / count - mean.square()).clamp_min(0.0).sqrt();
    // A constant column would divide by zero; leave it centred but unscaled.
    stddev = torch::where(stddev > 1e-8, stddev, torch::ones_like(stddev));
    const torch::Tensor m = mean.to(torch::kFloat32).contiguous();
    const torch::Tensor s = stddev.to(torch::kFloat32).contiguous();
    norm.mean.assign(m.data_ptr<float>(), m.data_ptr<float>() + m.numel());
    norm.stddev.assign(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
    return norm;
}

InputPipeline::InputPipeline(const Dataset &data, torch::Device device) : m_data(data), m_device(device)
{
    const bool bytes = data.features.defined() && data.features.scalar_type() == torch::kUInt8;
    const double toUnit = bytes ? 1.0 / 255.0 : 1.0;
    const Normalization &n = data.normalization;
    if (n.isIdentity()) {
        if (bytes)
            m_scale = torch::full({1}, toUnit, torch::kFloat32).to(device);
        return;
    }
    // (v * toUnit - mean) / std as one multiply and one add per value.
    std::vector<std::int64_t> viewShape(static_cast<std::size_t>(data.features.dim()), 1);
    viewShape[1] = static_cast<std::int64_t>(n.mean.size());
    const torch::Tensor mean = torch::tensor(n.mean, torch::kFloat64);
    const torch::Tensor stddev = torch::tensor(n.stddev, torch::kFloat64);
    m_scale = (toUnit / stddev).to(torch::kFloat32).view(viewShape).to(device);
    m_shift = (-mean / stddev).to(torch::kFloat32).view(viewShape).to(device);
}

torch::Tensor InputPipeline::prepare(torch::Tensor stored, const std::uint64_t *augmentSeed) const
{
    // Token ids go to the model as they are.
    if (stored.scalar_type() == torch::kInt64)
        return stored.to(m_device);
    torch::Tensor x = stored.to(m_device).to(torch::kFloat32);
    // Augmentation works on the stored values, so its padding is black as in torchvision.
    if (augmentSeed && m_data.augmentation.enabled() && x.dim() == 4)
        x = augmentImages(x, m_data.augmentation, *augmentSeed);
    // Out of place: for float32 rows already on the device, x is a view of the data set.
    if (m_shift.defined())
        return torch::addcmul(m_shift, x, m_scale);
    return m_scale.defined() ? x * m_scale : x;
}

torch::Tensor InputPipeline::rows(std::int64_t begin, std::int64_t count) const
{
    return prepare(m_data.features.narrow(0, begin, count), nullptr);
}

torch::Tensor InputPipeline::trainingRows(const torch::Tensor &indices, std::uint64_t seed) const
{
    return prepare(m_data.features.index_select(0, indices), &seed);
}

torch::Tensor augmentImages(const torch::Tensor &images, const Augmentation &augmentation, std::uint64_t seed)
{
    const std::int64_t b = images.size(0);
    const std::int64_t c = images.size(1);
    const std::int64_t h = images.size(2);
    const std::int64_t w = images.size(3);
    const std::int64_t pad = augmentation.cropPadding;
    // The draws happen here, on the CPU, in a fixed order: rows, columns, flip per image.
    SplitMix64 g(seed);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(b * h));
    std::vector<std::int64_t> cols(static_cast<std::size_t>(b * w));
    for (std::int64_t i = 0; i < b; ++i) {
        const auto top = pad > 0 ? static_cast<std::int64_t>(g.below(static_cast<std::uint64_t>(2 * pad + 1))) : 0;
        const auto left = pad > 0 ? static_cast<std::int64_t>(g.below(static_cast<std::uint64_t>(2 * pad + 1))) : 0;
        const bool flip = augmentation.horizontalFlip && (g.next() >> 63) != 0;
        for (std::int64_t y = 0; y < h; ++y)
            rows[static_cast<std::size_t>(i * h + y)] = top + y;
        for (std::int64_t x = 0; x < w; ++x)
            cols[static_cast<std::size_t>(i * w + x)] = left + (flip ? w - 1 - x : x);
    }
    const torch::Tensor padded = pad > 0 ? torch::constant_pad_nd(images, {pad, pad, pad, pad}, 0.0) : images;
    // Two gathers cut every image's window at once, on whatever device the batch is on.
    const torch::Tensor rowIndex = torch::from_blob(rows.data(), {b, 1, h, 1}, torch::kInt64)
                                       .to(images.device())
                                       .expand({b, c, h, w + 2 * pad});
    const torch::Tensor colIndex = torch::from_blob(cols.data(), {b, 1, 1, w}, torch::kInt64)
                                       .to(images.device())
                                       .expand({b, c, h, w});
    return padded.gather(2, rowIndex).gather(3, colIndex);
}

QString shapeToString(const std::vector<std::int64_t> &shape)
{
    QStringList parts;
    for (const auto d : shape)
        parts << QString::number(d);
    return parts.join(QChar(0x00D7));
}

} // namespace flotilla
