#include "engine/training/Networks.h"

namespace F = torch::nn::functional;

namespace flotilla {

MlpImpl::MlpImpl(std::int64_t inputs, const std::vector<int> &hidden, std::int64_t classes, double dropout_)
    : dropout(dropout_)
{
    layers = register_module("layers", torch::nn::ModuleList());
    std::int64_t width = inputs;
    for (const int h : hidden) {
        layers->push_back(torch::nn::Linear(width, h));
        width = h;
    }
    layers->push_back(torch::nn::Linear(width, classes));
}

torch::Tensor MlpImpl::forward(torch::Tensor x)
{
    x = x.flatten(1);
    const std::size_t last = layers->size() - 1;
    for (std::size_t i = 0; i < layers->size(); ++i) {
        x = layers[i]->as<torch::nn::Linear>()->forward(x);
        if (i != last) {
            x = torch::relu(x);
            if (dropout > 0)
                x = F::dropout(x, F::DropoutFuncOptions().p(dropout).training(is_training()));
        }
    }
    return x;
}

CnnImpl::CnnImpl(std::int64_t channels, std::int64_t height, std::int64_t width, std::int64_t classes,
                 double dropout_)
    : dropout(dropout_)
{
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 32, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(64 * featureSide(height) * featureSide(width), 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, classes));
}

torch::Tensor CnnImpl::forward(torch::Tensor x)
{
    x = F::max_pool2d(torch::relu(conv1->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(torch::relu(conv2->forward(x)), F::MaxPool2dFuncOptions(2));
    x = x.flatten(1);
    if (dropout > 0)
        x = F::dropout(x, F::DropoutFuncOptions().p(dropout).training(is_training()));
    x = torch::relu(fc1->forward(x));
    if (dropout > 0)
        x = F::dropout(x, F::DropoutFuncOptions().p(dropout).training(is_training()));
    return fc2->forward(x);
}

ResidualBlockImpl::ResidualBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
{
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3)
                                                           .stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3)
                                                           .padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
    shortcut = register_module("shortcut", torch::nn::Sequential());
    if (stride != 1 || in != out) {
        shortcut->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
        shortcut->push_back(torch::nn::BatchNorm2d(out));
    }
}

torch::Tensor ResidualBlockImpl::forward(torch::Tensor x)
{
    torch::Tensor y = torch::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    const torch::Tensor skip = shortcut->is_empty() ? x : shortcut->forward(x);
    return torch::relu(y + skip);
}

ResNetImpl::ResNetImpl(std::int64_t channels, std::int64_t classes, double dropout_)
    : dropout(dropout_)
{
    stem = register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 16, 3)
                                                         .padding(1).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(16));
    stage1 = register_module("stage1", ResidualBlock(16, 16, 1));
    stage2 = register_module("stage2", ResidualBlock(16, 32, 2));
    stage3 = register_module("stage3", ResidualBlock(32, 64, 2));
    fc = register_module("fc", torch::nn::Linear(64, classes));
}

torch::Tensor ResNetImpl::forward(torch::Tensor x)
{
    x = torch::relu(bn->forward(stem->forward(x)));
    x = stage3->forward(stage2->forward(stage1->forward(x)));
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
    if (dropout > 0)
        x = F::dropout(x, F::DropoutFuncOptions().p(dropout).training(is_training()));
    return fc->forward(x);
}

} // namespace flotilla
