#include "app/TrainCommand.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"

#include "engine/coordination/LocalFleet.h"
#include "job/JobSpec.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>

namespace flotilla {

int runTrainCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Train a job on this machine with local workers and simulated preemptions, writing a run directory.\n"
        "Without options it trains the default job: a small CNN on Fashion-MNIST with four workers.\n"
        "Interrupt it (Ctrl-C) or kill it at any moment and run it again with the same --run-dir to resume."));
    parser.addHelpOption();
    addJobOptions(parser);
    parser.addOption({QStringLiteral("slow-worker"),
                      QStringLiteral("Benchmarks: the first local worker trains this many times slower than the others."),
                      QStringLiteral("factor"), QStringLiteral("1")});
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("train")))
        return *stop;
    if (!parser.positionalArguments().isEmpty()) {
        std::fprintf(stderr, "flotilla train: unexpected argument '%s' (see flotilla train --help)\n",
                     parser.positionalArguments().first().toUtf8().constData());
        return ExitUsage;
    }
    installLogSink(parser.isSet(QStringLiteral("verbose")));

    auto loaded = jobFromOptions(parser);
    if (!loaded) {
        std::fprintf(stderr, "flotilla train: %s\n", loaded.error().toUtf8().constData());
        return ExitUsage;
    }
    const JobSpec job = *loaded;
    if (job.fleet.workers == 0) {
        std::fprintf(stderr, "flotilla train: a job trained here needs at least one local worker (--workers); "
                             "flotilla serve trains with remote workers\n");
        return ExitUsage;
    }
    if (parser.isSet(QStringLiteral("save-job"))) {
        if (auto saved = job.save(parser.value(QStringLiteral("save-job"))); !saved) {
            std::fprintf(stderr, "flotilla train: %s\n", saved.error().toUtf8().constData());
            return ExitFailure;
        }
        return ExitOk;
    }

    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty())
        runDir = defaultRunDir(job);
    if (!QDir().mkpath(runDir)) {
        std::fprintf(stderr, "flotilla train: cannot create run directory '%s'\n", runDir.toUtf8().constData());
        return ExitFailure;
    }
    setLogFile(QDir(runDir).filePath(QStringLiteral("flotilla.log")));

    std::printf("Loading data and model for '%s'...\n", job.name.toUtf8().constData());
    std::fflush(stdout);
    auto fleet = LocalFleet::create(job, runDir);
    if (!fleet) {
        qCCritical(lcApp).noquote() << "cannot start the job:" << fleet.error();
        return ExitFailure;
    }
    LocalFleet &f = **fleet;
    f.setSlowWorker(std::clamp(parser.value(QStringLiteral("slow-worker")).toDouble(), 1.0, 1000.0));
    const JobSpec &spec = f.spec();
    std::printf("%s job '%s' in %s\n  %s on %s, %d epochs x %d shards, rule %s, %d local workers, "
                "preemptions %s\n",
                f.resumed() ? "Resuming" : "Starting", spec.name.toUtf8().constData(),
                f.runDir().toUtf8().constData(), spec.model.kind.toUtf8().constData(),
                spec.dataset.kind.toUtf8().constData(), spec.training.epochs, spec.training.shards,
                spec.aggregation.rule.toUtf8().constData(), spec.fleet.workers,
                spec.fleet.preemption.meanIntervalSeconds > 0
                    ? QStringLiteral("every %1 s on average").arg(spec.fleet.preemption.meanIntervalSeconds)
                          .toUtf8().constData()
                    : "off");
    std::fflush(stdout);

    JobRun run;
    run.quiet = parser.isSet(QStringLiteral("quiet"));
    run.failureHint = QStringLiteral("Resume it with: flotilla train --run-dir %1").arg(f.runDir());
    run.stopMessage = QStringLiteral("Stopping: the workers hand in what they trained so far. Resume with: flotilla "
                                     "train --run-dir %1")
                          .arg(f.runDir());
    return runJobToEnd(f, run);
}

} // namespace flotilla
