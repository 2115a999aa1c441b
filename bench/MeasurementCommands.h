#pragma once
// The commands of measurement, not product: `demo` starts a coordinator and worker processes
// on this machine and knocks workers out at random (with the attackers and the link shaper),
// `bench` measures against peers, `simulate` runs the fleet simulator. Both executables add
// them to their command line; the product's libraries never link them.

#include "app/CommandLine.h"

namespace flotilla {

int runDemoCommand(const QStringList &arguments);
int runBenchCommand(const QStringList &arguments);
// In flotilla_simulator (its charts need Qt Charts): `flotilla` only.
int runSimulateCommand(const QStringList &arguments);

// demo and bench.
QList<Command> measurementCommands();
// simulate.
Command simulateCommand();

} // namespace flotilla
