#include "job/Tasks.h"

namespace flotilla {

const QList<TaskInfo> &taskTable()
{
    // Every evaluation has a loss and a score (higher is better): the score is what the
    // windows chart as the job's "accuracy", what best_metric "accuracy" keeps the best
    // model by, and what the summary names.
    static const QList<TaskInfo> table{
        {QStringLiteral("classification"), QStringLiteral("accuracy"), QStringLiteral("accuracy"),
         {QStringLiteral("top5_accuracy")}},
        {QStringLiteral("regression"), QStringLiteral("R²"), QStringLiteral("r2"),
         {QStringLiteral("rmse"), QStringLiteral("mae")}},
        {QStringLiteral("multi-label"), QStringLiteral("mean F1"), QStringLiteral("f1_macro"),
         {QStringLiteral("f1_micro"), QStringLiteral("exact_match")}},
        {QStringLiteral("next-token"), QStringLiteral("token accuracy"), QStringLiteral("token_accuracy"),
         {QStringLiteral("perplexity")}},
    };
    return table;
}

QStringList taskNames()
{
    QStringList names;
    for (const TaskInfo &t : taskTable())
        names << t.name;
    return names;
}

const TaskInfo &taskInfo(const QString &task)
{
    for (const TaskInfo &t : taskTable())
        if (t.name == task)
            return t;
    return taskTable().first();
}

QString scoreValue(const QString &task, double score)
{
    if (taskInfo(task).scoreKey.endsWith(QLatin1String("accuracy")))
        return QStringLiteral("%1%").arg(100.0 * score, 0, 'f', 2);
    return QString::number(score, 'f', 4);
}

QString scoreText(const QString &task, double score)
{
    return taskInfo(task).score + u' ' + scoreValue(task, score);
}

Result<Task> taskFromName(const QString &name)
{
    if (name.isEmpty() || name == QLatin1String("classification"))
        return Task::Classification;
    if (name == QLatin1String("regression"))
        return Task::Regression;
    if (name == QLatin1String("multi-label"))
        return Task::MultiLabel;
    if (name == QLatin1String("next-token"))
        return Task::NextToken;
    return fail(QStringLiteral("the task '%1' is not one of: %2").arg(name.left(40), taskNames().join(QStringLiteral(", "))));
}

QString taskName(Task task)
{
    return taskTable().at(int(task)).name;
}

} // namespace flotilla
