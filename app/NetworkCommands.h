#pragma once
// The commands of a fleet that spans processes and machines: `serve` runs a coordinator,
// `worker` joins one, `token` issues join tokens, `revoke` bars a worker, `demo` starts a
// coordinator and worker processes on this machine and knocks workers out at random.
// Each takes its arguments without the program name (arguments[0] is the command).

#include <QStringList>

namespace flotilla {

int runServeCommand(const QStringList &arguments);
int runWorkerCommand(const QStringList &arguments);
int runTokenCommand(const QStringList &arguments);
int runRevokeCommand(const QStringList &arguments);
int runReleaseCommand(const QStringList &arguments);
int runDemoCommand(const QStringList &arguments);
int runBenchCommand(const QStringList &arguments);
int runSimulateCommand(const QStringList &arguments);

} // namespace flotilla
