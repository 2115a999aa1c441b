#include "engine/training/GpuInfo.h"

#include <QLibrary>
#include <QStringList>

#include <mutex>
#include <vector>

namespace flotilla {

namespace {

// The few entry points of the CUDA driver API used here (cuda.h is not needed to call them:
// CUresult and CUdevice are ints, the sizes size_t).
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int *);
using CuDeviceGet = int (*)(int *, int);
using CuDeviceGetName = int (*)(char *, int, int);
using CuDeviceTotalMem = int (*)(std::size_t *, int);
using CuDeviceGetAttribute = int (*)(int *, int, int);
constexpr int kComputeCapabilityMajor = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeCapabilityMinor = 76;

std::vector<GpuInfo> queryDriver()
{
    std::vector<GpuInfo> gpus;
#ifdef Q_OS_WIN
    QLibrary driver(QStringLiteral("nvcuda"));
#else
    QLibrary driver(QStringLiteral("cuda"), 1);
#endif
    if (!driver.load())
        return gpus;
    const auto init = reinterpret_cast<CuInit>(driver.resolve("cuInit"));
    const auto count = reinterpret_cast<CuDeviceGetCount>(driver.resolve("cuDeviceGetCount"));
    const auto get = reinterpret_cast<CuDeviceGet>(driver.resolve("cuDeviceGet"));
    const auto name = reinterpret_cast<CuDeviceGetName>(driver.resolve("cuDeviceGetName"));
    const auto memory = reinterpret_cast<CuDeviceTotalMem>(driver.resolve("cuDeviceTotalMem_v2"));
    const auto attribute = reinterpret_cast<CuDeviceGetAttribute>(driver.resolve("cuDeviceGetAttribute"));
    int n = 0;
    if (!init || !count || !get || !name || !memory || !attribute || init(0) != 0 || count(&n) != 0)
        return gpus;
    for (int i = 0; i < n; ++i) {
        int device = 0;
        if (get(&device, i) != 0)
            break;
        GpuInfo info;
        char text[256] = {};
        if (name(text, int(sizeof text) - 1, device) == 0)
            info.name = QString::fromUtf8(text).trimmed();
        std::size_t bytes = 0;
        if (memory(&bytes, device) == 0)
            info.memoryBytes = qint64(bytes);
        attribute(&info.computeMajor, kComputeCapabilityMajor, device);
        attribute(&info.computeMinor, kComputeCapabilityMinor, device);
        gpus.push_back(info);
    }
    // The library stays loaded: LibTorch's CUDA runtime uses the same driver.
    return gpus;
}

} // namespace

QString GpuInfo::summary() const
{
    QStringList parts;
    if (!name.isEmpty())
        parts << name;
    if (memoryBytes > 0)
        parts << QStringLiteral("%1 GiB").arg(double(memoryBytes) / double(qint64(1) << 30), 0, 'f', 0);
    if (computeMajor > 0)
        parts << QStringLiteral("compute %1.%2").arg(computeMajor).arg(computeMinor);
    return parts.join(QStringLiteral(", "));
}

std::optional<GpuInfo> gpuInfo(int index)
{
    static std::once_flag once;
    static std::vector<GpuInfo> gpus;
    std::call_once(once, [] { gpus = queryDriver(); });
    if (index < 0 || std::size_t(index) >= gpus.size())
        return std::nullopt;
    return gpus[std::size_t(index)];
}

} // namespace flotilla
