#pragma once
// What a CUDA GPU is, asked of the CUDA driver itself: its name, memory and compute
// capability. The driver numbers GPUs as LibTorch's cuda:N does (it honours
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER), answers at once, and is there wherever a GPU
// can train; LibTorch's CPU headers cannot ask the CUDA runtime, and the driver's command-line
// tool numbers GPUs by bus and may block for seconds.

#include <QString>

#include <optional>

namespace flotilla {

struct GpuInfo
{
    QString name;          // "NVIDIA H100 80GB HBM3"
    qint64 memoryBytes = 0;
    int computeMajor = 0;  // compute capability, e.g. 9.0
    int computeMinor = 0;

    // "NVIDIA H100 80GB HBM3, 80 GiB, compute 9.0"
    QString summary() const;
};

// The GPU LibTorch calls cuda:<index>, or nothing where no CUDA driver answers (a machine
// without one, or an index past its GPUs). Loads the driver once, on first use; thread-safe.
std::optional<GpuInfo> gpuInfo(int index);

} // namespace flotilla
