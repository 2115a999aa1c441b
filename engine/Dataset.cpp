#include "Dataset.h"

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
    return out;
}

Normalization Normalization::fit(const Dataset &train)
{
    Normalization norm;
    // Statistics per channel for images, per column for tables: reduce over every other dim.
    const torch::Tensor x = train.features;
    torch::Tensor mean;
    torch::Tensor stddev;
    if (x.dim() == 2) {
        mean = x.mean(0);
        stddev = x.std(0, /*unbiased=*/false);
    } else {
        std::vector<std::int64_t> dims{0};
        for (std::int64_t d = 2; d < x.dim(); ++d)
            dims.push_back(d);
        mean = x.mean(dims);
        stddev = x.std(dims, /*unbiased=*/false);
    }
    // A constant column would divide by zero; leave it centred but unscaled.
    stddev = torch::where(stddev > 1e-8, stddev, torch::ones_like(stddev));
    mean = mean.contiguous();
    stddev = stddev.contiguous();
    norm.mean.assign(mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
    norm.stddev.assign(stddev.data_ptr<float>(), stddev.data_ptr<float>() + stddev.numel());
    return norm;
}

void Normalization::apply(Dataset &data) const
{
    if (mean.empty() || !data.features.defined())
        return;
    const auto n = static_cast<std::int64_t>(mean.size());
    std::vector<std::int64_t> viewShape(static_cast<std::size_t>(data.features.dim()), 1);
    viewShape[1] = n;
    const auto m = torch::tensor(mean).view(viewShape);
    const auto s = torch::tensor(stddev).view(viewShape);
    data.features.sub_(m).div_(s);
}

QString shapeToString(const std::vector<std::int64_t> &shape)
{
    QStringList parts;
    for (const auto d : shape)
        parts << QString::number(d);
    return parts.join(QChar(0x00D7));
}

} // namespace flotilla
