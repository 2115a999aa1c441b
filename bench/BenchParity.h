#pragma once
// `flotilla bench parity`: Flotilla against the plain single-process loop a user already has
// (same model, optimizer, batch, schedule and epochs) and against PyTorch DDP, on several
// jobs off the default path: Fashion-MNIST with the built-in CNN, a generated image folder,
// a generated CSV, a Python TorchScript model with BatchNorm and, where python3-torchvision
// is installed, a torchvision ResNet-18. 1, 2 and 4 workers, any rules. It prints accuracy
// after equal epochs, epochs and seconds to a target (min/median/max over repeats) and writes
// every epoch of every run to a CSV.
//
// `flotilla bench parity-loop --job FILE --threads N` is the plain loop itself, as a process
// of its own: one JSON line per epoch.

#include <QStringList>

namespace flotilla {

int runBenchParity(const QStringList &arguments);
int runBenchParityLoop(const QStringList &arguments);

} // namespace flotilla
