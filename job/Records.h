#pragma once
// What a job records as it runs, one type each: the store's rows (engine/coordination/Store.h),
// the coordinator's signals, the operator stream and the control center's history and charts
// all carry these. A source that does not know a field (the operator stream sends what the
// charts draw) leaves its default.

#include "job/EventKind.h"

#include <QList>
#include <QMetaType>
#include <QPair>
#include <QString>

namespace flotilla {

// One result taken into the global model.
struct AssimilationRecord
{
    qint64 seq = 0;
    qint64 version = 0;
    int epoch = 0;
    int shard = 0;
    qint64 subtaskId = 0;
    qint64 leaseId = 0;
    qint64 workerId = 0;
    qint64 staleness = 0;
    double credit = 0.0;
    qint64 samples = 0; // sample-steps trained
    qint64 begin = 0;   // positions [begin, coveredEnd) of the shard's epoch order
    qint64 coveredEnd = 0;
    double loss = 0.0;
    double trainSeconds = 0.0;
    qint64 atMs = 0;
};

// One evaluation of the global model on the test set.
struct EvaluationRecord
{
    int epoch = 0;
    qint64 version = 0;
    qint64 seq = 0;
    double accuracy = 0.0; // the task's score: accuracy, R², mean F1 or token accuracy
    double loss = 0.0;
    qint64 atMs = 0;
    qint64 rowId = 0; // in the order evaluations were recorded (a late retry comes last)
    // The task's further metrics by name (top5_accuracy, rmse, f1/<label>, perplexity, …),
    // where the source keeps them (a run's store does; the store's own rows keep them apart).
    QList<QPair<QString, double>> metrics = {};
};

// A state change of a subtask, worker or job (job/EventKind.h names the kinds).
struct EventRecord
{
    qint64 id = 0; // the store's row; 0 where the source has none
    qint64 atMs = 0;
    QString kind;
    qint64 workerId = 0;
    qint64 subtaskId = 0;
    qint64 leaseId = 0;
    QString detail;

    bool is(EventKind k) const { return kind == eventName(k); }
};

} // namespace flotilla

Q_DECLARE_METATYPE(flotilla::AssimilationRecord)
Q_DECLARE_METATYPE(flotilla::EvaluationRecord)
Q_DECLARE_METATYPE(flotilla::EventRecord)
