#pragma once
// What a task's model is trained and judged by (training.task, job/Tasks.h): the loss of a
// batch of outputs against their targets, and the metrics an evaluation adds up batch by
// batch. The trainer, the evaluation, the speed probe and the benchmarks' plain loop take
// their losses from here, so they cannot differ.
//
//   classification  outputs [B, C]         targets int64 [B]       cross-entropy (smoothed)
//   regression      outputs [B, T] or [B]  targets float32 [B, T]  MSE or L1, over all values
//                                          or [B]
//   multi-label     outputs [B, L]         targets float32 [B, L]  binary cross-entropy on
//                                          of 0/1                  logits, over all values
//   next-token      outputs [B, N, V]      targets int64 [B, N]    cross-entropy per position

#include "common/Result.h"
#include "job/Tasks.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

#include <cstdint>
#include <utility>
#include <vector>

namespace flotilla {

struct TaskLoss
{
    Task task = Task::Classification;
    bool l1 = false;           // regression: mean absolute error instead of squared
    double labelSmoothing = 0; // classification, next-token

    // The mean loss of the batch, as a scalar (float32 for float32 outputs). An error names
    // outputs whose shape does not fit the targets.
    torch::Tensor operator()(const torch::Tensor &outputs, const torch::Tensor &targets) const;
    // Empty when a model's outputs for `samples` inputs may be trained against targets of
    // `targetShape` (per sample); else what is wrong with them.
    QString mismatch(const std::vector<std::int64_t> &outputShape, const std::vector<std::int64_t> &targetShape,
                     int outputs) const;
};

// Random targets of a task for a batch (the speed probe's).
torch::Tensor randomTargets(Task task, std::int64_t batch, const std::vector<std::int64_t> &targetShape, int outputs);

// What an evaluation finds: its loss (the training loss, unsmoothed, per sample; per value for
// regression and multi-label; per token for next-token) and its score (job/Tasks.h), with the
// task's further metrics by key; a classification also has its top-5 accuracy and confusion
// matrix, a multi-label task the F1 of each label.
struct Evaluation
{
    double accuracy = 0.0; // the task's score: accuracy, R², mean F1 or token accuracy
    double loss = 0.0;
    std::int64_t samples = 0;
    double top5Accuracy = -1.0; // classification: the true class among the five highest outputs; -1: five classes or fewer
    int classes = 0;
    std::vector<std::int64_t> confusion; // classification: [true × classes + predicted]: counts
    std::vector<std::pair<QString, double>> metrics; // the task's metrics (TaskInfo::metrics), in that order
    std::vector<double> labelF1; // multi-label: per label
};

// Adds up a task's evaluation batch by batch, on the batches' device; finish() reads it back once.
class TaskMetrics
{
public:
    TaskMetrics(Task task, bool l1) : m_task(task), m_l1(l1) {}
    void add(const torch::Tensor &outputs, const torch::Tensor &targets);
    Evaluation finish(std::int64_t samples) const;

private:
    Task m_task;
    bool m_l1;
    torch::Tensor m_lossSum;       // float64
    torch::Tensor m_correct;       // classification, next-token
    torch::Tensor m_top5;          // classification
    torch::Tensor m_confusion;     // classification
    torch::Tensor m_sum, m_squares, m_errorSquares, m_errorAbs; // regression, per target
    torch::Tensor m_tp, m_fp, m_fn, m_exact;                    // multi-label, per label
    std::int64_t m_classes = 0;
    std::int64_t m_values = 0; // loss terms: samples × targets, or tokens
};

} // namespace flotilla
