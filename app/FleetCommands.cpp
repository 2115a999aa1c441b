// A fleet service's queue from the command line: `flotilla serve` (as a fleet) runs it,
// `flotilla submit` adds to it, `flotilla jobs` lists and manages it. All three meet in
// <identity-dir>/fleet.db; the models of submitted TorchScript jobs are kept beside it, named
// by their SHA-256, so that a job does not depend on the file it was submitted from.
#include "app/AppLog.h"
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "bridge/FleetService.h"
#include "common/AtomicFile.h"
#include "engine/FleetQueue.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QTimer>

#include <cstdio>

namespace flotilla {

namespace {

QString queuePath(const QString &identityDir)
{
    return QDir(identityDir).filePath(QStringLiteral("fleet.db"));
}

QString userName()
{
    for (const char *variable : {"USER", "USERNAME", "LOGNAME"})
        if (const QString name = qEnvironmentVariable(variable); !name.isEmpty())
            return name;
    return QStringLiteral("unknown");
}

QCommandLineOption identityOption()
{
    return {QStringLiteral("identity-dir"),
            QStringLiteral("The fleet's folder: its coordinator's identity, queue (fleet.db), models and runs."),
            QStringLiteral("dir"), defaultIdentityDir()};
}

// The model of a TorchScript job, copied into the fleet's folder under its SHA-256: the job
// trains that copy whatever becomes of the file it was submitted from.
Result<QString> keepModel(const QString &identityDir, const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read the TorchScript model '%1': %2").arg(path, file.errorString()));
    const QByteArray bytes = file.readAll();
    const QString sha = QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex());
    const QString kept = QDir(identityDir).filePath(QStringLiteral("models/%1.pt").arg(sha));
    if (!QFileInfo::exists(kept)) {
        QDir().mkpath(QFileInfo(kept).absolutePath());
        if (auto written = writeFileAtomically(kept, bytes); !written)
            return written.takeError();
    }
    return kept;
}

} // namespace

int runSubmitCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Queue a job on the fleet service of this machine (flotilla serve without a job). The job is the\n"
        "job file given (or --job), with the job flags applied; --model-file and --data travel with it.\n"
        "The service starts it when its turn comes: flotilla jobs shows the queue."));
    parser.addHelpOption();
    addJobOptions(parser);
    parser.addOptions({
        identityOption(),
        {QStringLiteral("priority"), QStringLiteral("Higher runs first."), QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("weight"),
         QStringLiteral("Its share of the workers while it runs beside other jobs (relative to theirs)."),
         QStringLiteral("w"), QStringLiteral("1")},
        {QStringLiteral("as"), QStringLiteral("Submit under this name (default: your user name)."),
         QStringLiteral("name")},
    });
    parser.addPositionalArgument(QStringLiteral("job.json"), QStringLiteral("The job file (or --job)."));
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("submit")))
        return *stop;
    installLogSink(false);
    const QStringList positional = parser.positionalArguments();
    if (positional.size() > 1) {
        std::fprintf(stderr, "flotilla submit: one job file at a time, not %d\n", int(positional.size()));
        return ExitUsage;
    }
    if (!positional.isEmpty() && parser.isSet(QStringLiteral("job"))) {
        std::fprintf(stderr, "flotilla submit: give the job file or --job, not both\n");
        return ExitUsage;
    }
    auto job = jobFromOptions(parser, positional.value(0));
    if (!job) {
        std::fprintf(stderr, "flotilla submit: %s\n", job.error().toUtf8().constData());
        return ExitUsage;
    }
    bool ok = false;
    const int priority = parser.value(QStringLiteral("priority")).toInt(&ok);
    bool weightOk = false;
    const double weight = parser.value(QStringLiteral("weight")).toDouble(&weightOk);
    if (!ok || !weightOk || !(weight > 0) || weight > 1e6) {
        std::fprintf(stderr, "flotilla submit: --priority must be a whole number and --weight a positive number\n");
        return ExitUsage;
    }
    const QString identityDir = parser.value(QStringLiteral("identity-dir"));
    // Paths as the service will read them, from wherever it was started.
    if (!job->dataset.path.isEmpty()) {
        job->dataset.path = QFileInfo(job->dataset.path).absoluteFilePath();
        if (!QFileInfo::exists(job->dataset.path)) {
            std::fprintf(stderr, "flotilla submit: the job's data '%s' does not exist\n",
                         job->dataset.path.toUtf8().constData());
            return ExitUsage;
        }
    }
    if (job->model.kind == QLatin1String("torchscript")) {
        auto kept = keepModel(identityDir, job->model.path);
        if (!kept) {
            std::fprintf(stderr, "flotilla submit: %s\n", kept.error().toUtf8().constData());
            return ExitUsage;
        }
        job->model.path = *kept;
    }
    auto queue = FleetQueue::open(queuePath(identityDir));
    if (!queue) {
        std::fprintf(stderr, "flotilla submit: %s\n", queue.error().toUtf8().constData());
        return ExitFailure;
    }
    QueuedJob entry;
    entry.name = job->name;
    entry.submitter = parser.isSet(QStringLiteral("as")) ? parser.value(QStringLiteral("as")) : userName();
    entry.spec = QString::fromUtf8(QJsonDocument(job->toJson()).toJson(QJsonDocument::Compact));
    entry.priority = priority;
    entry.weight = weight;
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    auto id = (*queue)->submit(entry, QDir(identityDir).filePath(QStringLiteral("runs")), now);
    if (!id) {
        std::fprintf(stderr, "flotilla submit: %s\n", id.error().toUtf8().constData());
        return ExitFailure;
    }
    auto order = (*queue)->startOrder(now);
    int ahead = 0;
    if (order)
        for (const QueuedJob &j : *order) {
            if (j.id == *id)
                break;
            ++ahead;
        }
    std::printf("Job %lld '%s' queued for %s on the fleet of %s (%d queued ahead of it)\n", qlonglong(*id),
                entry.name.toUtf8().constData(), entry.submitter.toUtf8().constData(),
                identityDir.toUtf8().constData(), ahead);
    return ExitOk;
}

int runJobsCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "The jobs of a fleet's queue.\n"
        "  flotilla jobs                     list them\n"
        "  flotilla jobs cancel ID           cancel a queued, paused or running job\n"
        "  flotilla jobs pause ID            stop a job until resumed (a running one keeps its run folder)\n"
        "  flotilla jobs resume ID           queue a paused job again (it resumes where it stopped)\n"
        "  flotilla jobs priority ID N       higher runs first\n"
        "  flotilla jobs weight ID W         its share of the workers beside other running jobs\n"
        "A submitter manages its own jobs; --admin manages any."));
    parser.addHelpOption();
    parser.addOptions({
        identityOption(),
        {QStringLiteral("as"), QStringLiteral("Act as this submitter (default: your user name)."),
         QStringLiteral("name")},
        {QStringLiteral("admin"), QStringLiteral("Manage any submitter's job.")},
    });
    parser.addPositionalArgument(QStringLiteral("action"), QStringLiteral("cancel, pause, resume, priority or weight."));
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("jobs")))
        return *stop;
    installLogSink(false);
    const QString identityDir = parser.value(QStringLiteral("identity-dir"));
    if (!QFileInfo::exists(queuePath(identityDir))) {
        std::fprintf(stderr, "flotilla jobs: '%s' holds no fleet queue: submit a job first (flotilla submit)\n",
                     identityDir.toUtf8().constData());
        return ExitFailure;
    }
    auto queue = FleetQueue::open(queuePath(identityDir));
    if (!queue) {
        std::fprintf(stderr, "flotilla jobs: %s\n", queue.error().toUtf8().constData());
        return ExitFailure;
    }
    const QStringList args = parser.positionalArguments();
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    if (args.isEmpty()) {
        auto jobs = (*queue)->jobs();
        if (!jobs) {
            std::fprintf(stderr, "flotilla jobs: %s\n", jobs.error().toUtf8().constData());
            return ExitFailure;
        }
        std::printf("%-5s %-10s %-24s %-12s %8s %6s %14s  %s\n", "ID", "STATE", "NAME", "SUBMITTER", "PRIORITY",
                    "WEIGHT", "WORKER-SECONDS", "MESSAGE");
        for (const QueuedJob &j : *jobs)
            std::printf("%-5lld %-10s %-24s %-12s %8d %6.2f %14.1f  %s\n", qlonglong(j.id),
                        j.state.toUtf8().constData(), j.name.left(24).toUtf8().constData(),
                        j.submitter.left(12).toUtf8().constData(), j.priority, j.weight, j.workerSeconds,
                        j.message.toUtf8().constData());
        if (auto shares = (*queue)->fairShare(now); shares && !shares->empty()) {
            std::printf("\nFair-share factor F = 2^(-U/S) of the submitters with jobs queued or running:");
            for (const auto &[who, f] : *shares)
                std::printf("  %s %.3f", who.toUtf8().constData(), f);
            std::printf("\n");
        }
        return ExitOk;
    }
    const QString action = args.first();
    const bool takesValue = action == QLatin1String("priority") || action == QLatin1String("weight");
    const bool known = takesValue || action == QLatin1String("cancel") || action == QLatin1String("pause")
                       || action == QLatin1String("resume");
    if (!known || args.size() != (takesValue ? 3 : 2)) {
        std::fprintf(stderr, "flotilla jobs: say 'cancel ID', 'pause ID', 'resume ID', 'priority ID N' or 'weight ID W' "
                             "(flotilla jobs --help)\n");
        return ExitUsage;
    }
    bool ok = false;
    const qint64 id = args.at(1).toLongLong(&ok);
    auto found = ok ? (*queue)->job(id) : Result<std::optional<QueuedJob>>(std::optional<QueuedJob>());
    if (!found) {
        std::fprintf(stderr, "flotilla jobs: %s\n", found.error().toUtf8().constData());
        return ExitFailure;
    }
    if (!found->has_value()) {
        std::fprintf(stderr, "flotilla jobs: the queue has no job '%s'\n", args.at(1).toUtf8().constData());
        return ExitUsage;
    }
    const QueuedJob &job = **found;
    const QString who = parser.isSet(QStringLiteral("as")) ? parser.value(QStringLiteral("as")) : userName();
    if (job.submitter != who && !parser.isSet(QStringLiteral("admin"))) {
        std::fprintf(stderr, "flotilla jobs: job %lld was submitted by %s, not %s: a submitter manages its own jobs "
                             "(--admin manages any)\n",
                     qlonglong(id), job.submitter.toUtf8().constData(), who.toUtf8().constData());
        return ExitFailure;
    }
    Result<void> done;
    QString said;
    if (action == QLatin1String("priority") || action == QLatin1String("weight")) {
        bool valueOk = false;
        const double value = args.at(2).toDouble(&valueOk);
        if (!valueOk) {
            std::fprintf(stderr, "flotilla jobs: '%s' is not a number\n", args.at(2).toUtf8().constData());
            return ExitUsage;
        }
        done = action == QLatin1String("priority") ? (*queue)->setPriority(id, int(value)) : (*queue)->setWeight(id, value);
        said = QStringLiteral("job %1's %2 is now %3").arg(id).arg(action, args.at(2));
    } else if (job.ended()) {
        std::fprintf(stderr, "flotilla jobs: job %lld is %s already\n", qlonglong(id), job.state.toUtf8().constData());
        return ExitFailure;
    } else if (action == QLatin1String("resume")) {
        if (job.state != QLatin1String("paused")) {
            std::fprintf(stderr, "flotilla jobs: job %lld is %s, not paused\n", qlonglong(id),
                         job.state.toUtf8().constData());
            return ExitFailure;
        }
        done = (*queue)->setState(id, QStringLiteral("queued"), QStringLiteral("resumed by %1").arg(who), now);
        said = QStringLiteral("job %1 is queued again; it resumes where it stopped").arg(id);
    } else {
        const QString state = action == QLatin1String("cancel") ? QStringLiteral("cancelled") : QStringLiteral("paused");
        const QString message = QStringLiteral("%1 by %2").arg(state, who);
        if (job.state == QLatin1String("running")) {
            // The service stops it, within a second.
            done = (*queue)->setWanted(id, action, message);
            said = QStringLiteral("asked the fleet service to %1 job %2").arg(action).arg(id);
        } else if (action == QLatin1String("pause") && job.state == QLatin1String("paused")) {
            said = QStringLiteral("job %1 is paused already").arg(id);
        } else {
            done = (*queue)->setState(id, state, message, now);
            said = QStringLiteral("job %1 is %2").arg(id).arg(state);
        }
    }
    if (!done) {
        std::fprintf(stderr, "flotilla jobs: %s\n", done.error().toUtf8().constData());
        return ExitFailure;
    }
    std::printf("%s\n", said.toUtf8().constData());
    return ExitOk;
}

int runFleetService(NetworkHost &network, const QString &identityDir, int concurrentJobs, bool quiet)
{
    auto queue = FleetQueue::open(queuePath(identityDir));
    if (!queue) {
        qCCritical(lcApp).noquote() << "cannot open the fleet queue:" << queue.error();
        return ExitFailure;
    }
    FleetService::Options options;
    options.concurrentJobs = concurrentJobs;
    FleetService service(network, std::move(queue).value(), options);
    QObject::connect(&service, &FleetService::jobChanged, &service,
                     [](qint64 id, const QString &name, const QString &state, const QString &message) {
                         std::printf("job %lld '%s' %s%s\n", qlonglong(id), name.toUtf8().constData(),
                                     state.toUtf8().constData(),
                                     message.isEmpty() ? "" : qPrintable(QStringLiteral(": ") + message));
                         std::fflush(stdout);
                     });
    QObject::connect(&service, &FleetService::jobProgressed, &service, [quiet](qint64 id, const JobProgress &p) {
        if (quiet)
            return;
        static QHash<qint64, int> lastEpoch;
        // One line per job and epoch: several jobs share the terminal.
        if (lastEpoch.value(id, -1) == p.epochsDone)
            return;
        lastEpoch[id] = p.epochsDone;
        std::printf("job %lld: %s\n", qlonglong(id), progressLine(p, p.workersOnline, p.workersOnline).toUtf8().constData());
        std::fflush(stdout);
    });
    if (auto started = service.start(); !started) {
        qCCritical(lcApp).noquote() << "cannot start the fleet service:" << started.error();
        return ExitFailure;
    }
    std::printf("Waiting for jobs: flotilla submit JOB.json --identity-dir %s\n", identityDir.toUtf8().constData());
    std::fflush(stdout);
    installStopSignals();
    QTimer signalPoll;
    QObject::connect(&signalPoll, &QTimer::timeout, &service, [&] {
        if (pendingStopSignal() == 0)
            return;
        std::fprintf(stderr, "\nStopping the fleet service. Its running jobs resume at the next start; workers "
                             "reconnect.\n");
        QCoreApplication::quit();
    });
    signalPoll.start(100);
    QCoreApplication::exec();
    signalPoll.stop();
    service.stop();
    network.stop();
    setLogFile({});
    return ExitOk;
}

} // namespace flotilla
