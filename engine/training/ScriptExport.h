#pragma once
// Turns a built-in network into a TorchScript module, so that a built-in model's model.pt
// loads in Python with torch.jit.load alone, with no Flotilla code to import. The module
// has the network's submodules, parameters and buffers under the same names (its state_dict
// keys are the names Model::state() gives) and methods that compute what the C++ forward
// computes, in training and in eval mode.
//
// Called by the thread that owns the model; the result shares no storage with it.

#include "engine/training/Networks.h"

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/script.h>
#endif

namespace flotilla {

// A built-in network (Mlp, Cnn, ResNet) in eval mode, on the CPU, with copies of every
// parameter and buffer (num_batches_tracked included). Throws c10::Error for a layer it does
// not know how to express.
torch::jit::Module toTorchScript(const torch::nn::Module &net);

} // namespace flotilla
