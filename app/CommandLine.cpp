#include "app/CommandLine.h"

#include "app/NetworkCommands.h"
#include "app/TrainCommand.h"

#include <QCoreApplication>
#include <QTextStream>

#include <cstdio>

namespace flotilla {

namespace {

struct Command
{
    const char *name;
    const char *summary;
    int (*run)(const QStringList &arguments);
};

const Command kCommands[] = {
    {"train", "Train a job on this machine with local workers (headless), or resume one.", runTrainCommand},
    {"serve", "Run a coordinator: train a job with workers that join over TLS.", runServeCommand},
    {"submit", "Queue a job on a fleet service: this machine's, or another's (--coordinator).", runSubmitCommand},
    {"jobs", "List, manage and download the jobs of a fleet's queue (here, or --coordinator).", runJobsCommand},
    {"worker", "Contribute this machine to a coordinator's job (joins with a token).", runWorkerCommand},
    {"token", "Issue a join token for a coordinator.", runTokenCommand},
    {"revoke", "Revoke a worker's certificate.", runRevokeCommand},
    {"release", "Release a quarantined worker (its results were rejected repeatedly).", runReleaseCommand},
    {"demo", "A coordinator and worker processes on this machine, with random SIGKILLs.", runDemoCommand},
    {"bench", "Benchmarks against a peer run in the same invocation (transfer).", runBenchCommand},
    {"simulate", "Simulate a fleet of up to 100,000 unreliable workers and compare the rules.", runSimulateCommand},
};

QString usage()
{
    QString text;
    QTextStream out(&text);
    out << "Flotilla " << FLOTILLA_VERSION
        << " trains deep-learning models on fleets of unreliable machines (VC-ASGD).\n\n"
        << "Usage: flotilla [<command>] [options]\n"
        << "       flotilla <command> --help    options of one command\n\n"
        << "Commands:\n";
    for (const auto &c : kCommands)
        out << "  " << QString::fromLatin1(c.name).leftJustified(10) << c.summary << '\n';
    out << "  " << QStringLiteral("gui").leftJustified(10) << "The control center window (what flotilla without a command opens).\n";
    out << "\nOptions:\n"
        << "  -h, --help      Show this help.\n"
        << "  -v, --version   Show the version.\n\n"
        << "Without a command, flotilla opens the control center (where there is a display; else it\n"
        << "trains the default job headless). 'flotilla gui --help' lists the window's options;\n"
        << "'flotilla --join TOKEN' opens the worker-only window.\n"
        << "'flotilla train' without options trains the default job: a small CNN on Fashion-MNIST\n"
        << "with four local workers and simulated preemptions.\n";
    return text;
}

} // namespace

int runCommandLine(const QStringList &arguments)
{
    QCoreApplication::setApplicationName(QStringLiteral("flotilla"));
    QCoreApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QCoreApplication::setApplicationVersion(QStringLiteral(FLOTILLA_VERSION));
    const QString first = arguments.value(1);
    if (first.isEmpty() || first == QLatin1String("-h") || first == QLatin1String("--help")
        || first == QLatin1String("help")) {
        std::fputs(usage().toUtf8().constData(), stdout);
        return first.isEmpty() ? ExitUsage : ExitOk;
    }
    if (first == QLatin1String("-v") || first == QLatin1String("--version")) {
        std::printf("flotilla %s\n", FLOTILLA_VERSION);
        return ExitOk;
    }
    for (const auto &c : kCommands)
        if (first == QLatin1String(c.name))
            return c.run(arguments.mid(1));
    std::fprintf(stderr, "flotilla: unknown command '%s'\n\n", first.toUtf8().constData());
    std::fputs(usage().toUtf8().constData(), stderr);
    return ExitUsage;
}

} // namespace flotilla
