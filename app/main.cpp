#include "app/CommandLine.h"
#include "app/GuiCommand.h"
#include "bench/MeasurementCommands.h"
#include "common/ProcessSetup.h"

#include <QApplication>
#include <QCoreApplication>

#include <cstdio>

namespace {

// Every command: the headless ones, measurement and the simulator.
QList<flotilla::Command> commands()
{
    using namespace flotilla;
    return headlessCommands() + measurementCommands() + QList<Command>{simulateCommand()};
}

} // namespace

int main(int argc, char *argv[])
{
    using namespace flotilla;
    waitPassivelyInThreadPools(argv); // first: it may start the program again
    keepLargeBuffersForReuse();
    if (const char *why = raiseOpenFileLimit(); *why)
        std::fprintf(stderr, "flotilla: cannot raise the limit on open files (%s); a coordinator may refuse workers "
                             "beyond about a thousand\n", why);
    const StartupMode mode = startupMode(argc, argv);
    if (mode == StartupMode::ControlCenter || mode == StartupMode::WorkerWindow) {
        if (!displayAvailable()) {
            std::fprintf(stderr, "flotilla: there is no display for a window here; use 'flotilla train' (headless "
                                 "training) or 'flotilla worker --join TOKEN'\n");
            return ExitUsage;
        }
        QApplication app(argc, argv);
        return mode == StartupMode::ControlCenter ? runControlCenter(app.arguments()) : runWorkerWindow(app.arguments());
    }
    if (mode == StartupMode::CommandLineDrawing) {
        if (!displayAvailable())
            qputenv("QT_QPA_PLATFORM", "offscreen");
        QApplication app(argc, argv);
        return runCommandLine(app.arguments(), commands(), true);
    }
    QCoreApplication app(argc, argv);
    if (mode == StartupMode::HeadlessDefault) {
        std::fprintf(stderr, "flotilla: no display: training the default job headless (flotilla --help for more)\n");
        return runCommandLine({app.arguments().first(), QStringLiteral("train")}, commands(), true);
    }
    return runCommandLine(app.arguments(), commands(), true);
}
