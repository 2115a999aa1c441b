#pragma once
// A run's recorded history (job/SessionTypes.h History): what the control center reads from
// a run folder on disk.

#include "common/Result.h"
#include "engine/coordination/Store.h"
#include "job/SessionTypes.h"

namespace flotilla {

// A job store's recorded history: every assimilation, evaluation, event and the cumulative
// cost, of the store's latest job. An error names the store and what was wrong.
Result<History> readRunHistory(const QString &dbPath);

} // namespace flotilla
