#pragma once
// A run's recorded history as the sessions' plain values (job/SessionTypes.h): what the
// operator stream sends an attached control center, and what the control center reads from
// a run folder on disk.

#include "common/Result.h"
#include "engine/coordination/Store.h"
#include "job/SessionTypes.h"

namespace flotilla {

// The store's records as the control center's plain values.
EventRow toRow(const EventRecord &e);
AssimilationPoint toPoint(const AssimilationRecord &a);
EvaluationPoint toPoint(const EvaluationRecord &e);

// A job store's recorded history: every assimilation, evaluation, event and the cumulative
// cost, of the store's latest job. An error names the store and what was wrong.
Result<History> readRunHistory(const QString &dbPath);

} // namespace flotilla
