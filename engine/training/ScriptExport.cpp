#include "engine/training/ScriptExport.h"

#include <iomanip>
#include <sstream>

namespace flotilla {

namespace {

// A float literal that TorchScript reads back as the same double.
std::string floatLiteral(double v)
{
    std::ostringstream s;
    s << std::setprecision(17) << v;
    std::string text = s.str();
    if (text.find_first_of(".eE") == std::string::npos)
        text += ".0";
    return text;
}

std::string intList(c10::IntArrayRef values)
{
    std::ostringstream s;
    s << '[';
    for (std::size_t i = 0; i < values.size(); ++i)
        s << (i ? ", " : "") << values[i];
    s << ']';
    return s.str();
}

// Builds the TorchScript twin of a module tree. Each module gets a class of its own (the
// classes differ in their attributes), all in one compilation unit so that they save
// together; the unit mangles repeated names.
class Exporter
{
public:
    torch::jit::Module convert(const torch::nn::Module &source)
    {
        std::string className;
        const std::string forward = forwardOf(source, className);
        torch::jit::Module target(c10::QualifiedName("__torch__.flotilla." + className), m_unit,
                                  /*shouldMangle=*/true);
        // torch.nn.Module.train()/eval() in Python and Module::train() in C++ set this
        // attribute on every submodule; the methods below read it.
        target.register_attribute("training", c10::BoolType::get(), source.is_training());
        for (const auto &p : source.named_parameters(/*recurse=*/false))
            target.register_parameter(p.key(), p.value().detach().cpu().clone().requires_grad_(true),
                                      /*is_buffer=*/false);
        for (const auto &b : source.named_buffers(/*recurse=*/false))
            if (b.value().defined())
                target.register_buffer(b.key(), b.value().detach().cpu().clone());
        for (const auto &child : source.named_children())
            target.register_module(child.key(), convert(*child.value()));
        if (!forward.empty())
            target.define(forward);
        return target;
    }

private:
    // The TorchScript forward of one module (empty for a container that is only indexed).
    static std::string forwardOf(const torch::nn::Module &source, std::string &className)
    {
        namespace nn = torch::nn;
        std::ostringstream s;
        if (const auto *linear = dynamic_cast<const nn::LinearImpl *>(&source)) {
            className = "Linear";
            s << "def forward(self, x):\n"
              << "    return torch.linear(x, self.weight, " << (linear->bias.defined() ? "self.bias" : "None")
              << ")\n";
        } else if (const auto *conv = dynamic_cast<const nn::Conv2dImpl *>(&source)) {
            className = "Conv2d";
            const auto &o = conv->options;
            const auto *padding = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
            TORCH_CHECK(padding && c10::get_if<torch::enumtype::kZeros>(&o.padding_mode()) && !o.transposed(),
                        "only zero-padded convolutions with explicit padding can be exported to TorchScript");
            s << "def forward(self, x):\n"
              << "    return torch.conv2d(x, self.weight, " << (o.bias() ? "self.bias" : "None") << ", "
              << intList(*o.stride()) << ", " << intList(**padding) << ", " << intList(*o.dilation()) << ", "
              << o.groups() << ")\n";
        } else if (const auto *bn = dynamic_cast<const nn::BatchNorm2dImpl *>(&source)) {
            className = "BatchNorm2d";
            const auto &o = bn->options;
            TORCH_CHECK(o.affine() && o.track_running_stats() && o.momentum().has_value(),
                        "only affine BatchNorm with running statistics and a momentum can be exported to "
                        "TorchScript");
            // What LibTorch's and PyTorch's BatchNorm do: count the batch in training mode,
            // normalize with the batch's statistics and update the running ones; use the
            // running ones in eval mode.
            s << "def forward(self, x):\n"
              << "    if self.training:\n"
              << "        self.num_batches_tracked.add_(1)\n"
              << "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, "
              << "self.training, " << floatLiteral(*o.momentum()) << ", " << floatLiteral(o.eps()) << ", True)\n";
        } else if (const auto *sequential = dynamic_cast<const nn::SequentialImpl *>(&source)) {
            className = "Sequential";
            s << "def forward(self, x):\n";
            for (std::size_t i = 0; i < sequential->size(); ++i)
                s << "    x = getattr(self, \"" << i << "\").forward(x)\n";
            s << "    return x\n";
        } else if (dynamic_cast<const nn::ModuleListImpl *>(&source)) {
            className = "ModuleList";
        } else if (const auto *mlp = dynamic_cast<const MlpImpl *>(&source)) {
            className = "Mlp";
            s << "def forward(self, x):\n"
              << "    x = x.flatten(1)\n";
            const std::size_t last = mlp->layers->size() - 1;
            for (std::size_t i = 0; i <= last; ++i) {
                s << "    x = getattr(self.layers, \"" << i << "\").forward(x)\n";
                if (i != last) {
                    s << "    x = torch.relu(x)\n";
                    if (mlp->dropout > 0)
                        s << "    x = torch.dropout(x, " << floatLiteral(mlp->dropout) << ", self.training)\n";
                }
            }
            s << "    return x\n";
        } else if (const auto *cnn = dynamic_cast<const CnnImpl *>(&source)) {
            className = "Cnn";
            const std::string pool = ", [2, 2], [2, 2], [0, 0], [1, 1], False)\n";
            const std::string dropout = cnn->dropout > 0 ? "    x = torch.dropout(x, " + floatLiteral(cnn->dropout)
                                                               + ", self.training)\n"
                                                         : std::string();
            s << "def forward(self, x):\n"
              << "    x = torch.max_pool2d(torch.relu(self.conv1.forward(x))" << pool
              << "    x = torch.max_pool2d(torch.relu(self.conv2.forward(x))" << pool << "    x = x.flatten(1)\n"
              << dropout << "    x = torch.relu(self.fc1.forward(x))\n"
              << dropout << "    return self.fc2.forward(x)\n";
        } else if (dynamic_cast<const ResidualBlockImpl *>(&source)) {
            // An empty shortcut is the identity, as in ResidualBlockImpl::forward.
            className = "ResidualBlock";
            s << "def forward(self, x):\n"
              << "    y = torch.relu(self.bn1.forward(self.conv1.forward(x)))\n"
              << "    y = self.bn2.forward(self.conv2.forward(y))\n"
              << "    return torch.relu(y + self.shortcut.forward(x))\n";
        } else if (const auto *resnet = dynamic_cast<const ResNetImpl *>(&source)) {
            className = "ResNet";
            s << "def forward(self, x):\n"
              << "    x = torch.relu(self.bn.forward(self.stem.forward(x)))\n"
              << "    x = self.stage3.forward(self.stage2.forward(self.stage1.forward(x)))\n"
              << "    x = torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)\n";
            if (resnet->dropout > 0)
                s << "    x = torch.dropout(x, " << floatLiteral(resnet->dropout) << ", self.training)\n";
            s << "    return self.fc.forward(x)\n";
        } else {
            TORCH_CHECK(false, "no TorchScript form for the layer '", source.name(), "'");
        }
        return s.str();
    }

    std::shared_ptr<torch::jit::CompilationUnit> m_unit = std::make_shared<torch::jit::CompilationUnit>();
};

} // namespace

torch::jit::Module toTorchScript(const torch::nn::Module &net)
{
    torch::jit::Module module = Exporter().convert(net);
    module.eval();
    return module;
}

} // namespace flotilla
