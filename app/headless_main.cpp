// `flotilla-headless`: the commands that need no window (train, serve, worker, token, revoke,
// release, submit, jobs, demo, bench) in an executable that links neither Qt Widgets nor Qt
// Charts nor OpenGL: for servers, containers and fleets of workers.

#include "app/CommandLine.h"
#include "bench/MeasurementCommands.h"
#include "common/ProcessSetup.h"

#include <QCoreApplication>

#include <cstdio>
#include <cstring>

int main(int argc, char *argv[])
{
    using namespace flotilla;
    waitPassivelyInThreadPools(argv); // first: it may start the program again
    keepLargeBuffersForReuse();
    if (const char *why = raiseOpenFileLimit(); *why)
        std::fprintf(stderr, "flotilla-headless: cannot raise the limit on open files (%s); a coordinator may refuse "
                             "workers beyond about a thousand\n", why);
    if (argc > 1 && (std::strcmp(argv[1], "gui") == 0 || std::strcmp(argv[1], "--join") == 0)) {
        std::fprintf(stderr, "flotilla-headless: this build has no windows; '%s' is in the 'flotilla' package (for a "
                             "worker without a window: flotilla-headless worker --join TOKEN)\n", argv[1]);
        return ExitUsage;
    }
    QCoreApplication app(argc, argv);
    return runCommandLine(app.arguments(), headlessCommands() + measurementCommands(), false);
}
