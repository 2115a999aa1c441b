#pragma once
// The command line of `flotilla` and `flotilla-headless`: subcommands, their flags and their
// help. Each executable hands runCommandLine the commands it has: the headless ones
// (headlessCommands()), the measurement ones (bench/MeasurementCommands.h) and, in
// `flotilla`, the windows.

#include <QList>
#include <QStringList>

namespace flotilla {

// Exit codes shared by all commands.
enum ExitCode { ExitOk = 0, ExitFailure = 1, ExitUsage = 2, ExitInterrupted = 130 };

struct Command
{
    const char *name;
    const char *summary;
    // Takes its arguments without the program name (arguments[0] is the command).
    int (*run)(const QStringList &arguments);
};

// The commands that need no window: train, serve, submit, jobs, worker, token, revoke,
// release.
QList<Command> headlessCommands();

// Runs the command the arguments name; returns the process exit code. windows: this
// executable also has the control center and the worker window (its help says how to open
// them).
int runCommandLine(const QStringList &arguments, const QList<Command> &commands, bool windows);

} // namespace flotilla
