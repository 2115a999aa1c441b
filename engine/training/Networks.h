#pragma once
// The built-in networks. Each is a LibTorch module (FooImpl + TORCH_MODULE) whose
// submodules are registered in the constructor, so their parameter order is fixed.

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

namespace flotilla {

// Multilayer perceptron over the flattened sample.
struct MlpImpl : torch::nn::Module
{
    MlpImpl(std::int64_t inputs, const std::vector<int> &hidden, std::int64_t classes, double dropout);
    torch::Tensor forward(torch::Tensor x);

    torch::nn::ModuleList layers;
    double dropout;
};
TORCH_MODULE(Mlp);

// The small CNN of the default job: conv 1→32 3×3, pool, conv 32→64 3×3, pool,
// fc 1600→128, fc 128→10 for 28×28 single-channel images.
struct CnnImpl : torch::nn::Module
{
    CnnImpl(std::int64_t channels, std::int64_t height, std::int64_t width, std::int64_t classes,
            double dropout);
    torch::Tensor forward(torch::Tensor x);
    static std::int64_t featureSide(std::int64_t side) { return ((side - 2) / 2 - 2) / 2; }

    torch::nn::Conv2d conv1{nullptr};
    torch::nn::Conv2d conv2{nullptr};
    torch::nn::Linear fc1{nullptr};
    torch::nn::Linear fc2{nullptr};
    double dropout;
};
TORCH_MODULE(Cnn);

// Two-convolution residual block with batch norm; a 1×1 projection when the shape changes.
struct ResidualBlockImpl : torch::nn::Module
{
    ResidualBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride);
    torch::Tensor forward(torch::Tensor x);

    torch::nn::Conv2d conv1{nullptr};
    torch::nn::BatchNorm2d bn1{nullptr};
    torch::nn::Conv2d conv2{nullptr};
    torch::nn::BatchNorm2d bn2{nullptr};
    torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(ResidualBlock);

// A small residual network: stem, three residual stages (16, 32, 64 channels), global
// average pooling, a linear classifier.
struct ResNetImpl : torch::nn::Module
{
    ResNetImpl(std::int64_t channels, std::int64_t classes, double dropout);
    torch::Tensor forward(torch::Tensor x);

    torch::nn::Conv2d stem{nullptr};
    torch::nn::BatchNorm2d bn{nullptr};
    ResidualBlock stage1{nullptr};
    ResidualBlock stage2{nullptr};
    ResidualBlock stage3{nullptr};
    torch::nn::Linear fc{nullptr};
    double dropout;
};
TORCH_MODULE(ResNet);

} // namespace flotilla
