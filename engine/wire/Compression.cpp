#include "engine/wire/Compression.h"

#include "job/JobSpec.h"

#include <cstring>
#include <limits>

static_assert(Q_BYTE_ORDER == Q_LITTLE_ENDIAN, "updates travel as little-endian buffers");

namespace flotilla {

namespace {

constexpr float kHalfMax = 65504.0f;

qint64 blocksOf(qint64 numel)
{
    return (numel + kInt8Block - 1) / kInt8Block;
}

// `flat` zero-padded to whole blocks, as [blocks, kInt8Block].
torch::Tensor asBlocks(const torch::Tensor &flat)
{
    const qint64 n = flat.numel();
    torch::Tensor padded = torch::zeros({blocksOf(n) * kInt8Block}, flat.options());
    padded.narrow(0, 0, n).copy_(flat);
    return padded.view({blocksOf(n), kInt8Block});
}

QByteArray tensorBytes(const torch::Tensor &t, qint64 elementSize)
{
    return QByteArray(static_cast<const char *>(t.data_ptr()), static_cast<qsizetype>(t.numel() * elementSize));
}

} // namespace

QString compressionName(Compression kind)
{
    return compressionNames().value(int(kind), compressionNames().first());
}

std::optional<Compression> compressionFromName(const QString &name)
{
    const auto i = compressionNames().indexOf(name);
    if (i < 0)
        return std::nullopt;
    return Compression(i);
}

qint64 encodedBytes(Compression kind, qint64 numel, qint64 rounded)
{
    if (rounded < 0 || rounded > numel)
        rounded = numel;
    const qint64 exact = 4 * (numel - rounded);
    switch (kind) {
    case Compression::Fp16:
        return rounded * 2 + exact;
    case Compression::Int8:
        return blocksOf(rounded) * 4 + rounded + exact;
    case Compression::None:
        break;
    }
    return numel * 4;
}

namespace {

// `delta` rounded to `kind`; `sent` receives what the receiver will decode.
QByteArray quantize(Compression kind, const torch::Tensor &delta, torch::Tensor &sent)
{
    const qint64 n = delta.numel();
    QByteArray out;
    if (kind == Compression::Fp16) {
        const torch::Tensor half = delta.clamp(-kHalfMax, kHalfMax).to(torch::kHalf).contiguous();
        out = tensorBytes(half, 2);
        sent = half.to(torch::kFloat32);
    } else {
        const torch::Tensor blocks = asBlocks(delta);
        const torch::Tensor scales = (blocks.abs().amax(1) / 127.0f).contiguous();
        // A block of zeros has scale 0; dividing by the smallest normal float keeps it 0.
        const torch::Tensor divisor = scales.clamp_min(std::numeric_limits<float>::min()).unsqueeze(1);
        const torch::Tensor q = (blocks / divisor).round_().clamp_(-127, 127).to(torch::kInt8).contiguous();
        out.reserve(static_cast<qsizetype>(encodedBytes(kind, n)));
        out.append(tensorBytes(scales, 4));
        out.append(static_cast<const char *>(q.data_ptr()), static_cast<qsizetype>(n));
        sent = (q.to(torch::kFloat32) * scales.unsqueeze(1)).view({-1}).narrow(0, 0, n);
    }
    return out;
}

torch::Tensor difference(const torch::Tensor &weights, const torch::Tensor &base)
{
    return weights.to(torch::kCPU, torch::kFloat32).contiguous() - base.to(torch::kCPU, torch::kFloat32).contiguous();
}

} // namespace

namespace {

qint64 roundedOf(qint64 rounded, qint64 numel)
{
    return rounded < 0 || rounded > numel ? numel : rounded;
}

// The float32 values after the rounded ones, appended as they are.
void appendExact(QByteArray &out, const torch::Tensor &weights, qint64 rounded)
{
    const torch::Tensor rest = weights.to(torch::kCPU, torch::kFloat32).contiguous().narrow(0, rounded, weights.numel() - rounded);
    out.append(static_cast<const char *>(rest.data_ptr()), static_cast<qsizetype>(rest.numel() * 4));
}

} // namespace

QByteArray UpdateEncoder::encode(Compression kind, const torch::Tensor &weights, const torch::Tensor &base,
                                 qint64 rounded)
{
    Q_ASSERT(kind != Compression::None);
    torch::NoGradGuard noGrad;
    rounded = roundedOf(rounded, weights.numel());
    torch::Tensor delta = difference(weights, base).narrow(0, 0, rounded);
    if (m_residual.defined() && m_residual.numel() == delta.numel())
        delta.add_(m_residual);
    torch::Tensor sent;
    QByteArray out = quantize(kind, delta, sent);
    m_residual = delta - sent;
    appendExact(out, weights, rounded);
    return out;
}

QByteArray encodeChange(Compression kind, const torch::Tensor &weights, const torch::Tensor &base, qint64 rounded)
{
    Q_ASSERT(kind != Compression::None);
    torch::NoGradGuard noGrad;
    rounded = roundedOf(rounded, weights.numel());
    torch::Tensor sent;
    QByteArray out = quantize(kind, difference(weights, base).narrow(0, 0, rounded), sent);
    appendExact(out, weights, rounded);
    return out;
}

Result<torch::Tensor> decodeUpdate(Compression kind, QByteArrayView bytes, const torch::Tensor &base, qint64 rounded)
{
    torch::NoGradGuard noGrad;
    const qint64 total = base.numel();
    const qint64 n = roundedOf(rounded, total);
    const QString name = compressionName(kind);
    if (kind == Compression::None)
        return fail(QStringLiteral("an update named 'none' is the weights themselves, not a delta"));
    if (bytes.size() != encodedBytes(kind, total, n))
        return fail(QStringLiteral("the %1 update is %2 bytes; the model's %3 values need %4")
                        .arg(name).arg(bytes.size()).arg(total).arg(encodedBytes(kind, total, n)));
    torch::Tensor delta;
    qint64 used = 0;
    if (kind == Compression::Fp16) {
        torch::Tensor half = torch::empty({n}, torch::kHalf);
        std::memcpy(half.data_ptr(), bytes.data(), static_cast<std::size_t>(n * 2));
        delta = half.to(torch::kFloat32);
        used = n * 2;
    } else {
        const qint64 blocks = blocksOf(n);
        torch::Tensor scales = torch::empty({blocks}, torch::kFloat32);
        std::memcpy(scales.data_ptr(), bytes.data(), static_cast<std::size_t>(blocks * 4));
        if (!torch::isfinite(scales).all().item<bool>() || (scales < 0).any().item<bool>())
            return fail(QStringLiteral("the int8 update's block scales include negative, NaN or infinite values"));
        torch::Tensor q = torch::empty({n}, torch::kInt8);
        std::memcpy(q.data_ptr(), bytes.data() + blocks * 4, static_cast<std::size_t>(n));
        delta = (asBlocks(q.to(torch::kFloat32)) * scales.unsqueeze(1)).view({-1}).narrow(0, 0, n);
        used = blocks * 4 + n;
    }
    torch::Tensor rest = torch::empty({total - n}, torch::kFloat32);
    std::memcpy(rest.data_ptr(), bytes.data() + used, static_cast<std::size_t>((total - n) * 4));
    if (!torch::isfinite(delta).all().item<bool>() || !torch::isfinite(rest).all().item<bool>())
        return fail(QStringLiteral("the %1 update contains NaN or infinite values").arg(name));
    torch::Tensor out = base.to(torch::kCPU, torch::kFloat32).narrow(0, 0, n) + delta;
    return n == total ? out : torch::cat({out, rest});
}

} // namespace flotilla
