#pragma once
// The windows: the control center (`flotilla`, `flotilla gui`) and the worker-only window
// (`flotilla --join TOKEN`). They need a display; without one `flotilla` trains the
// default job headless instead.

#include <QStringList>

namespace flotilla {

// CommandLineDrawing: a command that draws charts (simulate --charts) and so needs a
// QApplication, offscreen where there is no display.
enum class StartupMode { CommandLine, CommandLineDrawing, ControlCenter, WorkerWindow, HeadlessDefault };

// What to run for these arguments: the window modes only when a display is there.
StartupMode startupMode(int argc, char **argv);
bool displayAvailable();

// Run inside a QApplication. arguments[0] is the program.
int runControlCenter(const QStringList &arguments);
int runWorkerWindow(const QStringList &arguments);

} // namespace flotilla
