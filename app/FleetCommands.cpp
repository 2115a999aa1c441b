// A fleet service's queue from the command line: `flotilla serve` (as a fleet) runs it,
// `flotilla submit` adds to it, `flotilla jobs` lists and manages it. On the coordinator's
// machine the three meet in <identity-dir>/fleet.db; from another machine, submit and jobs
// ask the service over the network with a person's certificate (--coordinator). Either way
// server/FleetRequests decides; the models and data of submitted jobs are kept in the fleet's
// folder, named by their SHA-256, so that a job does not depend on the files it came from.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "engine/coordination/FleetQueue.h"
#include "server/FleetClient.h"
#include "server/FleetRequests.h"
#include "server/FleetService.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
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

// A fleet elsewhere: the person's identity folder, and the token it enrols with the first time.
QList<QCommandLineOption> remoteOptions()
{
    return {
        {QStringLiteral("coordinator"),
         QStringLiteral("Ask the fleet service of another machine, as the person whose identity this folder holds "
                        "(created by the first use, with --token)."),
         QStringLiteral("dir")},
        {QStringLiteral("token"),
         QStringLiteral("With --coordinator, the first time: a submitter or operator token (flotilla token --submitter "
                        "on the coordinator's machine), or a file holding one."),
         QStringLiteral("token")},
        {QStringLiteral("name"),
         QStringLiteral("With --token: the name to enrol under (default: this machine's name); it is the submitter "
                        "name of your jobs."),
         QStringLiteral("name")},
    };
}

// The client of a remote fleet, configured; or why it cannot be.
Result<std::unique_ptr<FleetClient>> remoteClient(const QCommandLineParser &parser)
{
    std::optional<net::JoinToken> token;
    if (parser.isSet(QStringLiteral("token"))) {
        auto decoded = tokenArgument(parser.value(QStringLiteral("token")));
        if (!decoded)
            return fail(QStringLiteral("--token: %1").arg(decoded.error()));
        token = *decoded;
    }
    FleetClient::Options options;
    options.stateDir = parser.value(QStringLiteral("coordinator"));
    options.name = parser.value(QStringLiteral("name"));
    auto client = std::make_unique<FleetClient>(options);
    if (auto r = client->configure(token); !r)
        return r.takeError();
    return client;
}

// Who asks, on this machine: the user, or a name given; --admin for any job.
Requester localRequester(const QCommandLineParser &parser, bool admin)
{
    return Requester{parser.isSet(QStringLiteral("as")) ? parser.value(QStringLiteral("as")) : userName(), admin,
                     false};
}

void printJobs(const std::vector<QueuedJob> &jobs)
{
    std::printf("%-5s %-10s %-24s %-12s %8s %6s %14s  %s\n", "ID", "STATE", "NAME", "SUBMITTER", "PRIORITY", "WEIGHT",
                "WORKER-SECONDS", "MESSAGE");
    for (const QueuedJob &j : jobs)
        std::printf("%-5lld %-10s %-24s %-12s %8d %6.2f %14.1f  %s\n", qlonglong(j.id), j.state.toUtf8().constData(),
                    j.name.left(24).toUtf8().constData(), j.submitter.left(12).toUtf8().constData(), j.priority,
                    j.weight, j.workerSeconds, j.message.toUtf8().constData());
}

int fleetFailure(const char *command, const QString &error, int code = ExitFailure)
{
    std::fprintf(stderr, "flotilla %s: %s\n", command, error.toUtf8().constData());
    return code;
}

// Writes a downloaded or copied run folder under `parent`.
int saveRun(qint64 id, Result<FileBundle> bundle, const QString &parent)
{
    auto written = bundle ? writeBundle(*bundle, parent) : Result<QString>(bundle.takeError());
    if (!written)
        return fleetFailure("jobs", written.error());
    std::printf("Job %lld's model and run folder are in %s\n", qlonglong(id), written->toUtf8().constData());
    return ExitOk;
}

} // namespace

int runSubmitCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Queue a job on a fleet service: this machine's (flotilla serve without a job), or with --coordinator\n"
        "another machine's, as a submitter or operator. The job is the job file given (or --job), with the job\n"
        "flags applied; its TorchScript model (--model-file) and its data (--data) travel with it. The service\n"
        "starts it when its turn comes: flotilla jobs shows the queue."));
    parser.addHelpOption();
    addJobOptions(parser);
    parser.addOptions({
        identityOption(),
        {QStringLiteral("priority"), QStringLiteral("Higher runs first."), QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("weight"),
         QStringLiteral("Its share of the workers while it runs beside other jobs (relative to theirs)."),
         QStringLiteral("w"), QStringLiteral("1")},
        {QStringLiteral("as"), QStringLiteral("On this machine: submit under this name (default: your user name)."),
         QStringLiteral("name")},
        {QStringLiteral("data-on-coordinator"),
         QStringLiteral("With --coordinator: --data names a path on the coordinator's machine, not one here to send "
                        "(operators only).")},
    });
    parser.addOptions(remoteOptions());
    parser.addPositionalArgument(QStringLiteral("job.json"), QStringLiteral("The job file (or --job)."));
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("submit")))
        return *stop;
    installLogSink(false);
    const QStringList positional = parser.positionalArguments();
    if (positional.size() > 1)
        return fleetFailure("submit", QStringLiteral("one job file at a time, not %1").arg(positional.size()), ExitUsage);
    if (!positional.isEmpty() && parser.isSet(QStringLiteral("job")))
        return fleetFailure("submit", QStringLiteral("give the job file or --job, not both"), ExitUsage);
    auto job = jobFromOptions(parser, positional.value(0));
    if (!job)
        return fleetFailure("submit", job.error(), ExitUsage);
    bool ok = false;
    const int priority = parser.value(QStringLiteral("priority")).toInt(&ok);
    bool weightOk = false;
    const double weight = parser.value(QStringLiteral("weight")).toDouble(&weightOk);
    if (!ok || !weightOk || !(weight > 0) || weight > 1e6)
        return fleetFailure("submit", QStringLiteral("--priority must be a whole number and --weight a positive number"),
                            ExitUsage);
    Submission submission;
    submission.spec = *job;
    submission.priority = priority;
    submission.weight = weight;
    if (!parser.isSet(QStringLiteral("coordinator"))) {
        const QString identityDir = parser.value(QStringLiteral("identity-dir"));
        auto queue = FleetQueue::open(queuePath(identityDir));
        if (!queue)
            return fleetFailure("submit", queue.error());
        FleetRequests requests(**queue, identityDir);
        auto queued = requests.submit(localRequester(parser, true), std::move(submission),
                                      QDateTime::currentMSecsSinceEpoch());
        if (!queued)
            return fleetFailure("submit", queued.error(), ExitUsage);
        std::printf("Job %lld '%s' queued for %s on the fleet of %s (%d queued ahead of it)\n",
                    qlonglong(queued->first.id), queued->first.name.toUtf8().constData(),
                    queued->first.submitter.toUtf8().constData(), identityDir.toUtf8().constData(), queued->second);
        return ExitOk;
    }
    // Another machine's fleet: the model and the data go with the job.
    if (job->model.kind == QLatin1String("torchscript")) {
        QFile model(job->model.path);
        if (!model.open(QIODevice::ReadOnly))
            return fleetFailure("submit",
                                QStringLiteral("cannot read the TorchScript model '%1': %2")
                                    .arg(job->model.path, model.errorString()),
                                ExitUsage);
        submission.model = model.readAll();
    }
    if (!job->dataset.path.isEmpty() && !parser.isSet(QStringLiteral("data-on-coordinator"))) {
        std::fprintf(stderr, "Reading the job's data '%s'...\n", job->dataset.path.toUtf8().constData());
        auto data = readBundle(job->dataset.path, FleetRequests::kMaxSubmissionBytes);
        if (!data)
            return fleetFailure("submit", data.error(), ExitUsage);
        submission.data = std::move(data).value();
    }
    auto client = remoteClient(parser);
    if (!client)
        return fleetFailure("submit", client.error(), ExitUsage);
    const QByteArray payload = encodeSubmission(submission);
    std::fprintf(stderr, "Sending job '%s' (%.1f MiB with its model and data) to %s...\n",
                 job->name.toUtf8().constData(), double(payload.size()) / double(1 << 20),
                 (*client)->coordinatorAddress().toUtf8().constData());
    net::CommandMsg command;
    command.action = QStringLiteral("submit");
    auto answer = (*client)->request(command, payload);
    if (!answer)
        return fleetFailure("submit", answer.error());
    std::printf("%s\n", answer->text.toUtf8().constData());
    return ExitOk;
}

int runJobsCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "The jobs of a fleet's queue: this machine's, or with --coordinator another machine's.\n"
        "  flotilla jobs                     list them\n"
        "  flotilla jobs cancel ID           cancel a queued, paused or running job\n"
        "  flotilla jobs pause ID            stop a job until resumed (a running one keeps its run folder)\n"
        "  flotilla jobs resume ID           queue a paused job again (it resumes where it stopped)\n"
        "  flotilla jobs priority ID N       higher runs first\n"
        "  flotilla jobs weight ID W         its share of the workers beside other running jobs\n"
        "  flotilla jobs download ID DIR     the job's trained model and run folder, into DIR/<run folder>\n"
        "A submitter manages its own jobs; an operator (or --admin on this machine) any."));
    parser.addHelpOption();
    parser.addOptions({
        identityOption(),
        {QStringLiteral("as"), QStringLiteral("On this machine: act as this submitter (default: your user name)."),
         QStringLiteral("name")},
        {QStringLiteral("admin"), QStringLiteral("On this machine: manage any submitter's job.")},
    });
    parser.addOptions(remoteOptions());
    parser.addPositionalArgument(QStringLiteral("action"),
                                 QStringLiteral("cancel, pause, resume, priority, weight or download."));
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("jobs")))
        return *stop;
    installLogSink(false);
    const QStringList args = parser.positionalArguments();
    const QString action = args.value(0);
    const bool takesValue = action == QLatin1String("priority") || action == QLatin1String("weight")
                            || action == QLatin1String("download");
    const bool known = takesValue || action == QLatin1String("cancel") || action == QLatin1String("pause")
                       || action == QLatin1String("resume");
    if (!args.isEmpty() && (!known || args.size() != (takesValue ? 3 : 2)))
        return fleetFailure("jobs",
                            QStringLiteral("say 'cancel ID', 'pause ID', 'resume ID', 'priority ID N', 'weight ID W' or "
                                           "'download ID DIR' (flotilla jobs --help)"),
                            ExitUsage);
    bool ok = true;
    const qint64 id = args.isEmpty() ? 0 : args.at(1).toLongLong(&ok);
    double value = 0;
    if (ok && (action == QLatin1String("priority") || action == QLatin1String("weight")))
        value = args.at(2).toDouble(&ok);
    if (!ok)
        return fleetFailure("jobs", QStringLiteral("'%1' is not a number").arg(args.mid(1).join(QLatin1Char(' '))),
                            ExitUsage);
    const qint64 now = QDateTime::currentMSecsSinceEpoch();

    if (parser.isSet(QStringLiteral("coordinator"))) {
        auto client = remoteClient(parser);
        if (!client)
            return fleetFailure("jobs", client.error(), ExitUsage);
        net::CommandMsg command;
        command.action = args.isEmpty() ? QStringLiteral("jobs") : QStringLiteral("job-") + action;
        command.job = id;
        command.value = value;
        auto answer = (*client)->request(command);
        if (!answer)
            return fleetFailure("jobs", answer.error());
        if (action == QLatin1String("download"))
            return saveRun(id, decodeBundle(answer->payload), args.at(2));
        if (!args.isEmpty()) {
            std::printf("%s\n", answer->text.toUtf8().constData());
            return ExitOk;
        }
        auto jobs = decodeJobs(answer->payload);
        if (!jobs)
            return fleetFailure("jobs", jobs.error());
        printJobs(*jobs);
        return ExitOk;
    }

    const QString identityDir = parser.value(QStringLiteral("identity-dir"));
    if (!QFileInfo::exists(queuePath(identityDir)))
        return fleetFailure("jobs", QStringLiteral("'%1' holds no fleet queue: submit a job first (flotilla submit)")
                                        .arg(identityDir));
    auto queue = FleetQueue::open(queuePath(identityDir));
    if (!queue)
        return fleetFailure("jobs", queue.error());
    FleetRequests requests(**queue, identityDir);
    if (args.isEmpty()) {
        auto jobs = requests.jobs();
        if (!jobs)
            return fleetFailure("jobs", jobs.error());
        printJobs(*jobs);
        if (auto shares = (*queue)->fairShare(now); shares && !shares->empty()) {
            std::printf("\nFair-share factor F = 2^(-U/S) of the submitters with jobs queued or running:");
            for (const auto &[who, f] : *shares)
                std::printf("  %s %.3f", who.toUtf8().constData(), f);
            std::printf("\n");
        }
        return ExitOk;
    }
    // On this machine the names are a courtesy, not security: whoever can write fleet.db can
    // do anything. The coordinator checks a remote person's certificate.
    const Requester by = localRequester(parser, parser.isSet(QStringLiteral("admin")));
    if (action == QLatin1String("download"))
        return saveRun(id, requests.download(by, id), args.at(2));
    auto done = requests.manage(by, id, action, value, now);
    if (!done)
        return fleetFailure("jobs", done.error());
    std::printf("%s\n", done->toUtf8().constData());
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
    options.fleetDir = identityDir;
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
