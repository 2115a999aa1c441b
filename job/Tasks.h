#pragma once
// The tasks a job can train (training.task), each with the score it is judged by: the one
// table the job file's check, the engine, the store's exports, the command line and the
// windows take task names and score names from. Free of LibTorch.

#include "common/Result.h"

#include <QString>
#include <QStringList>

namespace flotilla {

// The tasks in the table's order.
enum class Task { Classification, Regression, MultiLabel, NextToken };

// Classification for an empty name; an error naming it for one the table does not hold.
Result<Task> taskFromName(const QString &name);
QString taskName(Task task);


struct TaskInfo
{
    QString name;     // as in the job file: classification, regression, multi-label, next-token
    QString score;    // what the score of an evaluation is, in words: "accuracy", "R²", …
    QString scoreKey; // the score's column in metrics.csv and tag in TensorBoard: accuracy, r2, …
    // The task's further metrics, by key, in the order they are exported.
    QStringList metrics;
};

const QList<TaskInfo> &taskTable();
QStringList taskNames();
// The task's entry; classification's for a name the table does not hold.
const TaskInfo &taskInfo(const QString &task);
// A score as the task shows it: an accuracy in percent ("91.20%"), any other as the number it
// is ("0.9312").
QString scoreValue(const QString &task, double score);
// With its name: "accuracy 91.20%", "R² 0.9312".
QString scoreText(const QString &task, double score);

} // namespace flotilla
