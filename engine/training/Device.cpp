#include "engine/training/Device.h"

#include "engine/training/GpuInfo.h"
#include "job/JobSpec.h"

#include <QStringList>

#include <torch/cuda.h>

namespace flotilla {

Result<torch::Device> selectDevice(const QString &device)
{
    // A list names the devices of local workers in turn: the first is this process's own.
    if (const QStringList devices = deviceList(device); devices.size() > 1)
        return selectDevice(devices.front());
    if (!isDeviceName(device))
        return fail(QStringLiteral("unknown device '%1'; use auto, cpu, cuda or cuda:N").arg(device));
    const bool cuda = torch::cuda::is_available();
    if (device.startsWith(QLatin1String("cuda"))) {
        if (!cuda)
            return fail(QStringLiteral("device '%1' was asked for, but no CUDA GPU is usable here (this LibTorch "
                                       "build or this machine has none); use 'cpu' or 'auto'")
                            .arg(device));
        const int index = device.size() > 4 ? device.mid(5).toInt() : 0;
        const auto count = static_cast<int>(torch::cuda::device_count());
        if (index >= count)
            return fail(QStringLiteral("device '%1' was asked for, but this machine has %2 CUDA GPU(s), numbered "
                                       "from 0")
                            .arg(device)
                            .arg(count));
        return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    }
    if (device == QLatin1String("auto") && cuda)
        return torch::Device(torch::kCUDA, 0);
    return torch::Device(torch::kCPU);
}

QString deviceName(const torch::Device &device)
{
    return device.is_cuda() ? QStringLiteral("cuda:%1").arg(device.has_index() ? int(device.index()) : 0)
                            : QStringLiteral("cpu");
}

QString deviceDescription(const torch::Device &device)
{
    const QString name = deviceName(device);
    if (!device.is_cuda())
        return name;
    const auto gpu = gpuInfo(device.has_index() ? int(device.index()) : 0);
    return gpu ? QStringLiteral("%1 (%2)").arg(name, gpu->summary()) : name;
}

int visibleGpus()
{
    return torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0;
}

QString localWorkerDevice(const QString &device, int worker)
{
    const QStringList devices = deviceList(device);
    if (devices.size() > 1)
        return devices[worker % devices.size()];
    if (device != QLatin1String("auto") && device != QLatin1String("cuda"))
        return device;
    const int gpus = visibleGpus();
    return gpus > 0 ? QStringLiteral("cuda:%1").arg(worker % gpus) : device;
}

} // namespace flotilla
