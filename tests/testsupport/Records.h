#pragma once
// The records the control center draws (job/Records.h), made with the fields the charts and
// the operator stream use, named in the order the stream sends them.

#include "job/Records.h"

namespace records {

inline flotilla::AssimilationRecord assimilationAt(qint64 atMs, qint64 seq, qint64 version, qint64 staleness,
                                                   double loss, qint64 samples, double seconds, qint64 workerId)
{
    flotilla::AssimilationRecord a;
    a.atMs = atMs;
    a.seq = seq;
    a.version = version;
    a.staleness = staleness;
    a.loss = loss;
    a.samples = samples;
    a.trainSeconds = seconds;
    a.workerId = workerId;
    return a;
}

inline flotilla::EvaluationRecord evaluationAt(qint64 atMs, int epoch, qint64 version, double accuracy, double loss)
{
    flotilla::EvaluationRecord e;
    e.atMs = atMs;
    e.epoch = epoch;
    e.version = version;
    e.accuracy = accuracy;
    e.loss = loss;
    return e;
}

inline flotilla::EventRecord eventAt(qint64 atMs, const QString &kind, qint64 workerId, qint64 subtaskId,
                                     qint64 leaseId, const QString &detail)
{
    return flotilla::EventRecord{0, atMs, kind, workerId, subtaskId, leaseId, detail};
}

} // namespace records
