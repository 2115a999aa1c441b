#pragma once
// `flotilla train`: runs a job on this machine with N local workers and writes a run
// directory (store, checkpoints, metrics CSV, final model, log). Re-running it on the same
// run directory resumes the job.

#include <QStringList>

namespace flotilla {

// arguments[0] is the command's name.
int runTrainCommand(const QStringList &arguments);

} // namespace flotilla
