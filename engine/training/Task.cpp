#include "engine/training/Task.h"

#include "engine/data/Dataset.h"
#include "job/Tasks.h"

#include <torch/torch.h>

#include <cmath>

namespace flotilla {

namespace F = torch::nn::functional;

namespace {

// Regression outputs [B] or [B, 1] against targets [B]: the same numbers.
torch::Tensor asTargets(const torch::Tensor &outputs, const torch::Tensor &targets)
{
    return outputs.numel() == targets.numel() ? outputs.reshape(targets.sizes()) : outputs;
}

} // namespace

torch::Tensor TaskLoss::operator()(const torch::Tensor &outputs, const torch::Tensor &targets) const
{
    switch (task) {
    case Task::Classification:
        return F::cross_entropy(outputs, targets, F::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
    case Task::Regression: {
        const torch::Tensor o = asTargets(outputs, targets).to(torch::kFloat);
        return l1 ? F::l1_loss(o, targets, F::L1LossFuncOptions()) : F::mse_loss(o, targets, F::MSELossFuncOptions());
    }
    case Task::MultiLabel:
        return F::binary_cross_entropy_with_logits(outputs.to(torch::kFloat), targets);
    case Task::NextToken:
        return F::cross_entropy(outputs.reshape({-1, outputs.size(-1)}), targets.reshape({-1}),
                                F::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
    }
    return {};
}

QString TaskLoss::mismatch(const std::vector<std::int64_t> &outputShape, const std::vector<std::int64_t> &targetShape,
                           int outputs) const
{
    // outputShape includes the batch; targetShape does not.
    const auto shown = [](std::vector<std::int64_t> s) { return shapeToString(s); };
    const std::int64_t batch = outputShape.empty() ? 0 : outputShape[0];
    std::int64_t targetValues = 1;
    for (const auto d : targetShape)
        targetValues *= d;
    switch (task) {
    case Task::Classification:
        if (outputShape.size() == 2 && outputShape[1] == outputs)
            return {};
        return QStringLiteral("its output is %1 for %2 samples; [samples, %3] is needed, one score per class")
            .arg(shown(outputShape)).arg(batch).arg(outputs);
    case Task::Regression: {
        std::int64_t values = 1;
        for (std::size_t i = 1; i < outputShape.size(); ++i)
            values *= outputShape[i];
        if (!outputShape.empty() && values == targetValues)
            return {};
        return QStringLiteral("its output is %1 for %2 samples; [samples, %3] is needed, one number per target")
            .arg(shown(outputShape)).arg(batch).arg(targetValues);
    }
    case Task::MultiLabel:
        if (outputShape.size() == 2 && outputShape[1] == targetValues)
            return {};
        return QStringLiteral("its output is %1 for %2 samples; [samples, %3] is needed, one logit per label")
            .arg(shown(outputShape)).arg(batch).arg(targetValues);
    case Task::NextToken:
        if (outputShape.size() == 3 && targetShape.size() == 1 && outputShape[1] == targetShape[0]
            && outputShape[2] == outputs)
            return {};
        return QStringLiteral("its output is %1 for %2 contexts; [contexts, %3, %4] is needed, one logit per position "
                              "and token of the vocabulary")
            .arg(shown(outputShape)).arg(batch).arg(targetShape.empty() ? 0 : targetShape[0]).arg(outputs);
    }
    return {};
}

torch::Tensor randomTargets(Task task, std::int64_t batch, const std::vector<std::int64_t> &targetShape, int outputs)
{
    std::vector<std::int64_t> shape{batch};
    shape.insert(shape.end(), targetShape.begin(), targetShape.end());
    switch (task) {
    case Task::Regression:
        return torch::randn(shape);
    case Task::MultiLabel:
        return torch::randint(0, 2, shape, torch::kFloat);
    case Task::Classification:
    case Task::NextToken:
        break;
    }
    return torch::randint(0, std::max(1, outputs), shape, torch::kInt64);
}

void TaskMetrics::add(const torch::Tensor &outputs, const torch::Tensor &targets)
{
    const auto accumulate = [](torch::Tensor &into, const torch::Tensor &value) {
        into = into.defined() ? into + value : value;
    };
    const torch::Tensor out = outputs.to(torch::kFloat);
    switch (m_task) {
    case Task::Classification: {
        accumulate(m_lossSum, F::cross_entropy(out, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                                  .to(torch::kDouble));
        const torch::Tensor predicted = out.argmax(1);
        accumulate(m_correct, predicted.eq(targets).sum());
        m_classes = out.size(1);
        if (m_classes > 5)
            accumulate(m_top5, std::get<1>(out.topk(5, 1)).eq(targets.unsqueeze(1)).any(1).sum());
        accumulate(m_confusion, torch::bincount(targets * m_classes + predicted, {}, m_classes * m_classes)
                                    .narrow(0, 0, m_classes * m_classes));
        break;
    }
    case Task::Regression: {
        const torch::Tensor y = targets.to(torch::kDouble).reshape({targets.size(0), -1});
        const torch::Tensor o = out.to(torch::kDouble).reshape({targets.size(0), -1});
        const torch::Tensor error = o - y;
        accumulate(m_sum, y.sum(0));
        accumulate(m_squares, y.square().sum(0));
        accumulate(m_errorSquares, error.square().sum(0));
        accumulate(m_errorAbs, error.abs().sum(0));
        m_values += y.numel();
        break;
    }
    case Task::MultiLabel: {
        accumulate(m_lossSum, F::binary_cross_entropy_with_logits(
                                  out, targets, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum))
                                  .to(torch::kDouble));
        const torch::Tensor predicted = out.gt(0);
        const torch::Tensor truth = targets.gt(0.5);
        accumulate(m_tp, (predicted & truth).sum(0));
        accumulate(m_fp, (predicted & ~truth).sum(0));
        accumulate(m_fn, (~predicted & truth).sum(0));
        accumulate(m_exact, predicted.eq(truth).all(1).sum());
        m_values += targets.numel();
        break;
    }
    case Task::NextToken: {
        const torch::Tensor flat = out.reshape({-1, out.size(-1)});
        const torch::Tensor y = targets.reshape({-1});
        accumulate(m_lossSum, F::cross_entropy(flat, y, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                                  .to(torch::kDouble));
        accumulate(m_correct, flat.argmax(1).eq(y).sum());
        m_values += y.numel();
        break;
    }
    }
}

Evaluation TaskMetrics::finish(std::int64_t samples) const
{
    Evaluation ev;
    ev.samples = samples;
    if (samples <= 0)
        return ev;
    const auto number = [](const torch::Tensor &t) { return t.defined() ? t.item<double>() : 0.0; };
    const auto vector = [](const torch::Tensor &t) {
        const torch::Tensor c = t.to(torch::kCPU, torch::kDouble).contiguous();
        return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    };
    switch (m_task) {
    case Task::Classification: {
        ev.accuracy = number(m_correct) / double(samples);
        ev.loss = number(m_lossSum) / double(samples);
        ev.classes = int(m_classes);
        ev.top5Accuracy = m_classes > 5 ? number(m_top5) / double(samples) : -1.0;
        if (m_confusion.defined()) {
            const torch::Tensor cpu = m_confusion.to(torch::kCPU, torch::kInt64).contiguous();
            ev.confusion.assign(cpu.data_ptr<std::int64_t>(), cpu.data_ptr<std::int64_t>() + cpu.numel());
        }
        if (ev.top5Accuracy >= 0)
            ev.metrics = {{QStringLiteral("top5_accuracy"), ev.top5Accuracy}};
        break;
    }
    case Task::Regression: {
        const std::vector<double> sum = vector(m_sum), squares = vector(m_squares), sse = vector(m_errorSquares),
                                  sae = vector(m_errorAbs);
        double allSse = 0, allSae = 0, r2 = 0;
        for (std::size_t t = 0; t < sum.size(); ++t) {
            allSse += sse[t];
            allSae += sae[t];
            // R² of each target, averaged (a constant target explains nothing: 0 where it is
            // predicted exactly, else the error counts against it).
            const double total = squares[t] - sum[t] * sum[t] / double(samples);
            r2 += total > 1e-12 ? 1.0 - sse[t] / total : (sse[t] <= 1e-12 ? 1.0 : 0.0);
        }
        const double values = double(std::max<std::int64_t>(1, m_values));
        ev.loss = (m_l1 ? allSae : allSse) / values;
        ev.accuracy = sum.empty() ? 0.0 : r2 / double(sum.size());
        ev.metrics = {{QStringLiteral("rmse"), std::sqrt(allSse / values)}, {QStringLiteral("mae"), allSae / values}};
        break;
    }
    case Task::MultiLabel: {
        const std::vector<double> tp = vector(m_tp), fp = vector(m_fp), fn = vector(m_fn);
        double meanF1 = 0, allTp = 0, allFp = 0, allFn = 0;
        for (std::size_t l = 0; l < tp.size(); ++l) {
            // A label never present and never predicted is predicted perfectly.
            const double denominator = 2 * tp[l] + fp[l] + fn[l];
            ev.labelF1.push_back(denominator > 0 ? 2 * tp[l] / denominator : 1.0);
            meanF1 += ev.labelF1.back();
            allTp += tp[l];
            allFp += fp[l];
            allFn += fn[l];
        }
        ev.loss = number(m_lossSum) / double(std::max<std::int64_t>(1, m_values));
        ev.accuracy = tp.empty() ? 0.0 : meanF1 / double(tp.size());
        const double microDenominator = 2 * allTp + allFp + allFn;
        ev.metrics = {{QStringLiteral("f1_micro"), microDenominator > 0 ? 2 * allTp / microDenominator : 1.0},
                      {QStringLiteral("exact_match"), number(m_exact) / double(samples)}};
        break;
    }
    case Task::NextToken: {
        const double tokens = double(std::max<std::int64_t>(1, m_values));
        ev.loss = number(m_lossSum) / tokens;
        ev.accuracy = number(m_correct) / tokens;
        ev.metrics = {{QStringLiteral("perplexity"), std::exp(std::min(ev.loss, 700.0))}};
        break;
    }
    }
    return ev;
}

} // namespace flotilla
