#pragma once
// Which device a process or a local worker trains on, and how a device is named and
// described to the coordinator.

#include "common/Result.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

namespace flotilla {

// "auto" picks the first CUDA GPU when LibTorch was built with CUDA and a GPU is present;
// "cuda:N" the N-th. The error says why a GPU asked for cannot be used.
Result<torch::Device> selectDevice(const QString &device);
// "cpu" or "cuda:N".
QString deviceName(const torch::Device &device);
// deviceName() plus, for a GPU, its model, memory and compute capability as the CUDA driver
// reports them ("cuda:0 (NVIDIA H200, 140 GiB, compute 9.0)"); what workers tell the
// coordinator.
QString deviceDescription(const torch::Device &device);
// The device of local worker `worker` (from 0): a list's entries in turn; auto and cuda
// spread the workers over every visible GPU (cuda:0, cuda:1, …), or stay as they are
// where there is none.
QString localWorkerDevice(const QString &device, int worker);
// CUDA GPUs LibTorch can use here (0 with a CPU-only LibTorch).
int visibleGpus();

} // namespace flotilla
