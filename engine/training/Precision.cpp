#include "engine/training/Precision.h"

#include "engine/training/GpuInfo.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace flotilla {

namespace {

// LibTorch 2.4 asks for the device's kind in one call where 1.13 had a call per kind.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocastEnabled(bool cuda)
{
    return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
void setAutocast(bool cuda, bool enabled)
{
    at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
}
at::ScalarType autocastType(bool cuda)
{
    return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
}
void setAutocastType(bool cuda, at::ScalarType type)
{
    at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, type);
}
#else
bool autocastEnabled(bool cuda)
{
    return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void setAutocast(bool cuda, bool enabled)
{
    if (cuda)
        at::autocast::set_enabled(enabled);
    else
        at::autocast::set_cpu_enabled(enabled);
}
at::ScalarType autocastType(bool cuda)
{
    return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void setAutocastType(bool cuda, at::ScalarType type)
{
    if (cuda)
        at::autocast::set_autocast_gpu_dtype(type);
    else
        at::autocast::set_autocast_cpu_dtype(type);
}
#endif

} // namespace

Result<Precision> precisionOn(const QString &name, const torch::Device &device)
{
    if (name == QLatin1String("fp32") || name.isEmpty())
        return Precision::Fp32;
    if (name == QLatin1String("fp16")) {
        if (!device.is_cuda())
            return fail(QStringLiteral("precision fp16 needs a CUDA GPU, and this worker trains on %1; use bf16 "
                                       "on a CPU, or fp32")
                            .arg(device.is_cpu() ? QStringLiteral("the CPU") : QString::fromStdString(device.str())));
        return Precision::Fp16;
    }
    if (name == QLatin1String("bf16")) {
        if (device.is_cuda()) {
            const auto gpu = gpuInfo(device.has_index() ? int(device.index()) : 0);
            if (gpu && gpu->computeMajor > 0 && gpu->computeMajor < 8)
                return fail(QStringLiteral("precision bf16 needs a GPU of compute capability 8.0 or newer; %1 is "
                                           "%2.%3: use fp16 there")
                                .arg(gpu->name)
                                .arg(gpu->computeMajor)
                                .arg(gpu->computeMinor));
        }
        return Precision::Bf16;
    }
    return fail(QStringLiteral("unknown precision '%1'; use fp32, bf16 or fp16").arg(name.left(40)));
}

QString precisionName(Precision precision)
{
    switch (precision) {
    case Precision::Bf16:
        return QStringLiteral("bf16");
    case Precision::Fp16:
        return QStringLiteral("fp16");
    case Precision::Fp32:
        break;
    }
    return QStringLiteral("fp32");
}

AutocastScope::AutocastScope(Precision precision, const torch::Device &device)
{
    if (precision == Precision::Fp32)
        return;
    m_active = true;
    m_cuda = device.is_cuda();
    m_wasEnabled = autocastEnabled(m_cuda);
    m_wasType = autocastType(m_cuda);
    setAutocastType(m_cuda, precision == Precision::Bf16 ? at::kBFloat16 : at::kHalf);
    setAutocast(m_cuda, true);
}

AutocastScope::~AutocastScope()
{
    if (!m_active)
        return;
    setAutocast(m_cuda, m_wasEnabled);
    setAutocastType(m_cuda, m_wasType);
    // The casts of the weights made for this pass are not kept past it.
    if (!m_wasEnabled)
        at::autocast::clear_cache();
}

LossScaler::LossScaler(bool enabled, double initialScale, int growthInterval)
    : m_enabled(enabled), m_scale(enabled ? initialScale : 1.0), m_growthInterval(std::max(1, growthInterval))
{
}

torch::Tensor LossScaler::scaled(const torch::Tensor &loss) const
{
    return m_enabled ? loss * m_scale : loss;
}

bool LossScaler::unscale(const std::vector<torch::Tensor> &parameters)
{
    if (!m_enabled)
        return true;
    torch::NoGradGuard noGrad;
    bool finite = true;
    std::vector<torch::Tensor> checks;
    for (const auto &p : parameters) {
        torch::Tensor g = p.grad();
        if (!g.defined())
            continue;
        g.mul_(1.0 / m_scale);
        checks.push_back(torch::isfinite(g).all());
    }
    // One read-back for all the parameters, not one per tensor.
    if (!checks.empty())
        finite = torch::stack(checks).all().item<bool>();
    if (finite) {
        m_skipped = 0;
        if (++m_good >= m_growthInterval) {
            m_good = 0;
            m_scale *= 2.0;
        }
    } else {
        m_good = 0;
        ++m_skipped;
        m_scale = std::max(m_scale * 0.5, 1.0 / 65536.0);
    }
    return finite;
}

} // namespace flotilla
