#pragma once
// The `flotilla` command line: subcommands, their flags and their help.

#include <QStringList>

namespace flotilla {

// Runs the command the arguments name; returns the process exit code.
int runCommandLine(const QStringList &arguments);

// Exit codes shared by all commands.
enum ExitCode { ExitOk = 0, ExitFailure = 1, ExitUsage = 2, ExitInterrupted = 130 };

} // namespace flotilla
