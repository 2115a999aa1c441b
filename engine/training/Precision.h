#pragma once
// Mixed precision for a training step: the forward pass under LibTorch's autocast in
// bfloat16 or float16, and for float16 a dynamic loss scale (as PyTorch's GradScaler), so
// that small gradients do not vanish. The weights, the optimizer's state, the results and
// everything sent stay float32.

#include "common/Result.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

#include <vector>

namespace flotilla {

enum class Precision { Fp32, Bf16, Fp16 };

// The precision `name` (fp32 | bf16 | fp16) on `device`, or why it cannot train there:
// float16 autocast needs a CUDA GPU; bfloat16 a CPU (any: LibTorch emulates it where the
// CPU lacks the instructions) or a GPU of compute capability 8.0 or newer.
Result<Precision> precisionOn(const QString &name, const torch::Device &device);
QString precisionName(Precision precision);

// Autocast on for the device's kind, in the given precision, on this thread until the scope
// ends (nothing for fp32). Autocast is thread-local: a scope on a worker's thread leaves
// every other thread as it was.
class AutocastScope
{
public:
    AutocastScope(Precision precision, const torch::Device &device);
    ~AutocastScope();
    AutocastScope(const AutocastScope &) = delete;
    AutocastScope &operator=(const AutocastScope &) = delete;

private:
    bool m_active = false;
    bool m_cuda = false;
    bool m_wasEnabled = false;
    at::ScalarType m_wasType = at::kFloat;
};

// float16's dynamic loss scale: the loss is multiplied by the scale before backward; the
// gradients are divided by it before the step. A step whose gradients overflowed is skipped
// and the scale halved; after `growthInterval` good steps in a row it doubles.
class LossScaler
{
public:
    explicit LossScaler(bool enabled, double initialScale = 65536.0, int growthInterval = 2000);

    bool enabled() const { return m_enabled; }
    double scale() const { return m_scale; }
    torch::Tensor scaled(const torch::Tensor &loss) const;
    // Divides every defined gradient by the scale; false when one is not finite (then the
    // optimizer must not step, and the scale has been halved).
    bool unscale(const std::vector<torch::Tensor> &parameters);
    // Steps skipped since the last good one.
    int skippedInARow() const { return m_skipped; }

private:
    bool m_enabled = false;
    double m_scale = 1.0;
    int m_growthInterval = 2000;
    int m_good = 0;
    int m_skipped = 0;
};

} // namespace flotilla
