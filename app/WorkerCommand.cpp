// `flotilla worker`: contribute this machine to a coordinator's job.
#include "agent/WorkerAgent.h"
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "net/PreemptionWatcher.h"

#include <QCoreApplication>
#include <QFile>
#include <QStandardPaths>
#include <QTimer>

#include <algorithm>
#include <cstdio>

namespace flotilla {

int runWorkerCommand(const QStringList &arguments)
{
    return runWorker(arguments);
}

int runWorker(const QStringList &arguments, const std::function<void(TrainOutcome &, const torch::Tensor &)> &resultHook)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Join a coordinator and train its subtasks until the job is finished.\n"
        "The first start needs a join token (flotilla token on the coordinator); the worker keeps its identity in\n"
        "--state-dir and comes back without one. SIGTERM is a preemption notice: the worker stops training,\n"
        "hands in its partial result within --grace seconds, and exits."));
    parser.addHelpOption();
    const QString defaultState = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/worker");
    parser.addOptions({
        {QStringLiteral("join"), QStringLiteral("Join token from the coordinator."), QStringLiteral("token")},
        {QStringLiteral("join-file"), QStringLiteral("Read the join token from this file (for services)."),
         QStringLiteral("file")},
        {QStringLiteral("state-dir"), QStringLiteral("Folder of this worker's key, certificate and shard cache."),
         QStringLiteral("dir"), defaultState},
        {QStringLiteral("name"), QStringLiteral("Name shown on the coordinator, when joining. Default: the name the state folder's certificate was issued to, else this machine's."),
         QStringLiteral("name")},
        {QStringLiteral("device"), QStringLiteral("auto, cpu, cuda or cuda:N (the N-th GPU)."), QStringLiteral("name"), QStringLiteral("auto")},
        {QStringLiteral("threads"), QStringLiteral("LibTorch threads for training."), QStringLiteral("n"),
         QStringLiteral("1")},
        {QStringLiteral("instance-type"), QStringLiteral("Instance type, for the coordinator's cost ledger."),
         QStringLiteral("type"), QStringLiteral("local")},
        {QStringLiteral("price-class"), QStringLiteral("spot, on-demand or volunteer."), QStringLiteral("class"),
         QStringLiteral("volunteer")},
        {QStringLiteral("accept-models"),
         QStringLiteral("any: run the TorchScript models of the jobs its coordinator sends (a model is code; the "
                        "coordinator is the one whose CA this worker pinned when it joined); none: only a model given "
                        "with --model-file."),
         QStringLiteral("policy"), QStringLiteral("any")},
        {QStringLiteral("model-file"),
         QStringLiteral("This machine's copy of the job's TorchScript model (TorchScript jobs only)."),
         QStringLiteral("file")},
        {QStringLiteral("grace"), QStringLiteral("Seconds to hand in the partial result after a preemption notice."),
         QStringLiteral("seconds"), QStringLiteral("20")},
        {QStringLiteral("preemption-watch"),
         QStringLiteral("Watch this cloud's instance metadata for a preemption notice: gce, aws or azure. On a notice the "
                        "worker hands in its partial result and leaves, as on SIGTERM."),
         QStringLiteral("cloud")},
        {QStringLiteral("metadata-url"),
         QStringLiteral("Base address of the metadata service (default: the cloud's own, e.g. http://169.254.169.254)."),
         QStringLiteral("url")},
        {QStringLiteral("preemption-poll"), QStringLiteral("Seconds between two looks at the metadata service."),
         QStringLiteral("seconds"), QStringLiteral("5")},
        {QStringLiteral("shard-cache-mb"),
         QStringLiteral("Disk space for the shards kept in --state-dir, in MiB; the least recently used go first "
                        "(0 = keep none)."),
         QStringLiteral("MiB"), QStringLiteral("4096")},
        {QStringLiteral("shard-memory-mb"),
         QStringLiteral("Memory for decoded shards, in MiB; the least recently used go first."), QStringLiteral("MiB"),
         QStringLiteral("1024")},
        {QStringLiteral("verbose"), QStringLiteral("Print connection and subtask events to standard error.")},
        {QStringLiteral("slowdown"), QStringLiteral("Benchmarks: train this many times slower than this machine can."),
         QStringLiteral("factor"), QStringLiteral("1")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("worker")))
        return *stop;
    installLogSink(parser.isSet(QStringLiteral("verbose")));

    std::optional<net::JoinToken> token;
    QString tokenText = parser.value(QStringLiteral("join"));
    if (parser.isSet(QStringLiteral("join-file"))) {
        QFile file(parser.value(QStringLiteral("join-file")));
        if (!file.open(QIODevice::ReadOnly)) {
            std::fprintf(stderr, "flotilla worker: cannot read '%s': %s\n", file.fileName().toUtf8().constData(),
                         file.errorString().toUtf8().constData());
            return ExitUsage;
        }
        tokenText = QString::fromUtf8(file.readAll()).trimmed();
    }
    if (!tokenText.isEmpty()) {
        auto decoded = net::JoinToken::decode(tokenText);
        if (!decoded) {
            std::fprintf(stderr, "flotilla worker: %s\n", decoded.error().toUtf8().constData());
            return ExitUsage;
        }
        if (decoded->expiresMs <= QDateTime::currentMSecsSinceEpoch())
            std::fprintf(stderr, "flotilla worker: warning: this join token has expired; the coordinator will refuse it "
                                 "unless this worker joined before\n");
        token = *decoded;
    }
    WorkerAgent::Options options;
    options.stateDir = parser.value(QStringLiteral("state-dir"));
    options.name = parser.value(QStringLiteral("name")); // empty: the certificate's, else this machine's
    options.device = parser.value(QStringLiteral("device"));
    options.threads = std::max(1, parser.value(QStringLiteral("threads")).toInt());
    options.instanceType = parser.value(QStringLiteral("instance-type"));
    options.priceClass = parser.value(QStringLiteral("price-class"));
    options.modelFile = parser.value(QStringLiteral("model-file"));
    if (const QString policy = parser.value(QStringLiteral("accept-models"));
        policy != QLatin1String("any") && policy != QLatin1String("none")) {
        std::fprintf(stderr, "flotilla worker: --accept-models must be any or none, not '%s'\n", qPrintable(policy));
        return ExitUsage;
    }
    options.acceptModels = parser.value(QStringLiteral("accept-models")) == QLatin1String("any");
    options.slowdown = std::clamp(parser.value(QStringLiteral("slowdown")).toDouble(), 1.0, 1000.0);
    options.graceMs = std::max(1, parser.value(QStringLiteral("grace")).toInt()) * 1000;
    options.resultHook = resultHook;
    for (const auto &[flag, field] : {std::pair{"shard-cache-mb", &options.shardCacheBytes},
                                      std::pair{"shard-memory-mb", &options.shardMemoryBytes}}) {
        bool ok = false;
        const qint64 mib = parser.value(QString::fromLatin1(flag)).toLongLong(&ok);
        if (!ok || mib < 0 || mib > (qint64(1) << 30)) {
            std::fprintf(stderr, "flotilla worker: --%s needs a number of MiB, got '%s'\n", flag,
                         parser.value(QString::fromLatin1(flag)).toUtf8().constData());
            return ExitUsage;
        }
        *field = mib << 20;
    }

    std::unique_ptr<net::PreemptionWatcher> watcher;
    if (parser.isSet(QStringLiteral("preemption-watch"))) {
        const auto cloud = net::PreemptionWatcher::cloudFromName(parser.value(QStringLiteral("preemption-watch")));
        if (!cloud) {
            std::fprintf(stderr, "flotilla worker: --preemption-watch must be gce, aws or azure\n");
            return ExitUsage;
        }
        const QUrl base = parser.isSet(QStringLiteral("metadata-url")) ? QUrl(parser.value(QStringLiteral("metadata-url")))
                                                                        : net::PreemptionWatcher::defaultBase(*cloud);
        if (!base.isValid() || base.scheme() != QLatin1String("http")) {
            std::fprintf(stderr, "flotilla worker: --metadata-url must be an http:// address\n");
            return ExitUsage;
        }
        const double poll = parser.value(QStringLiteral("preemption-poll")).toDouble();
        watcher = std::make_unique<net::PreemptionWatcher>(*cloud, base, int(std::clamp(poll, 0.05, 600.0) * 1000));
    }

    WorkerAgent agent(options);
    if (watcher) {
        QObject::connect(watcher.get(), &net::PreemptionWatcher::noticed, &agent, [&agent](const QString &what) {
            std::printf("preemption notice from the cloud: %s\n", what.toUtf8().constData());
            std::fflush(stdout);
            agent.preemptionNotice();
        });
        QObject::connect(watcher.get(), &net::PreemptionWatcher::unreachable, &agent, [](const QString &why) {
            qCWarning(lcApp).noquote() << "cannot watch for preemption notices:" << why;
        });
        watcher->start();
    }
    int exitCode = ExitOk;
    QObject::connect(&agent, &WorkerAgent::finished, &agent, [&](int code, const QString &message) {
        if (code == 0)
            qCInfo(lcApp).noquote() << message;
        else
            qCCritical(lcApp).noquote() << message;
        std::fprintf(code == 0 ? stdout : stderr, "%s\n", message.toUtf8().constData());
        exitCode = code == 0 ? ExitOk : ExitFailure;
        // Let the last messages leave before the process does.
        QTimer::singleShot(300, qApp, &QCoreApplication::quit);
    });
    if (auto started = agent.start(token); !started) {
        std::fprintf(stderr, "flotilla worker: %s\n", started.error().toUtf8().constData());
        return ExitUsage;
    }
    std::printf("Worker '%s' %s\n", agent.name().toUtf8().constData(),
                token ? "joining with a token" : "connecting with its saved identity");
    std::fflush(stdout);
    installStopSignals();
    QTimer signalPoll;
    QObject::connect(&signalPoll, &QTimer::timeout, &agent, [&] {
        if (pendingStopSignal() != 0)
            agent.preemptionNotice();
    });
    signalPoll.start(50);
    QCoreApplication::exec();
    return exitCode;
}

} // namespace flotilla
