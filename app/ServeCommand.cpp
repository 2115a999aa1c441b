// `flotilla serve`: a coordinator that trains a job with remote workers over TLS.
#include "AppLog.h"
#include "CommandLine.h"
#include "CoordinatorServer.h"
#include "JobOptions.h"
#include "LocalFleet.h"
#include "NetworkCommands.h"

#include "AtomicFile.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QElapsedTimer>
#include <QFile>
#include <QStandardPaths>
#include <QDir>
#include <QHostInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QThread>
#include <QTimer>

namespace flotilla {

namespace {

QString defaultIdentityDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinator");
}

} // namespace

int runServeCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Run a coordinator: train a job with workers that join over TLS (flotilla worker --join TOKEN).\n"
        "Kill it at any moment and start it again with the same --run-dir: the job resumes and the workers\n"
        "reconnect by themselves."));
    parser.addHelpOption();
    addJobOptions(parser);
    parser.addOptions({
        {QStringLiteral("identity-dir"),
         QStringLiteral("Folder of the coordinator's CA, server certificate and trust list (created on first start)."),
         QStringLiteral("dir"), defaultIdentityDir()},
        {QStringLiteral("listen"), QStringLiteral("Address to listen on."), QStringLiteral("address"),
         QStringLiteral("0.0.0.0")},
        {QStringLiteral("port"), QStringLiteral("Port to listen on (0: any free port)."), QStringLiteral("port"),
         QStringLiteral("7441")},
        {QStringLiteral("host"),
         QStringLiteral("Name or address workers reach this coordinator by: it goes into the server certificate and "
                        "the join tokens. Repeat it for several. Default: this machine's name, localhost, 127.0.0.1."),
         QStringLiteral("name")},
        {QStringLiteral("local-workers"), QStringLiteral("Workers that run inside this process as well."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("token-file"),
         QStringLiteral("Issue a join token at start and write it to this file (mode 0600)."), QStringLiteral("file")},
        {QStringLiteral("token-uses"), QStringLiteral("Uses of the token written with --token-file."), QStringLiteral("n"),
         QStringLiteral("100")},
        {QStringLiteral("token-valid"), QStringLiteral("Lifetime in seconds of that token."), QStringLiteral("seconds"),
         QStringLiteral("86400")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("serve")))
        return *stop;
    installLogSink(parser.isSet(QStringLiteral("verbose")));
    auto job = jobFromOptions(parser);
    if (!job) {
        std::fprintf(stderr, "flotilla serve: %s\n", job.error().toUtf8().constData());
        return ExitUsage;
    }
    bool ok = false;
    const int port = parser.value(QStringLiteral("port")).toInt(&ok);
    const int localWorkers = parser.value(QStringLiteral("local-workers")).toInt();
    const QHostAddress listenAddress(parser.value(QStringLiteral("listen")));
    if (!ok || port < 0 || port > 65535 || listenAddress.isNull() || localWorkers < 0 || localWorkers > 256) {
        std::fprintf(stderr, "flotilla serve: --port, --listen or --local-workers is invalid\n");
        return ExitUsage;
    }
    QStringList hosts = parser.values(QStringLiteral("host"));
    if (hosts.isEmpty())
        hosts = {QHostInfo::localHostName(), QStringLiteral("localhost"), QStringLiteral("127.0.0.1")};

    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty())
        runDir = defaultRunDir(*job);
    if (!QDir().mkpath(runDir)) {
        std::fprintf(stderr, "flotilla serve: cannot create run directory '%s'\n", runDir.toUtf8().constData());
        return ExitFailure;
    }
    setLogFile(QDir(runDir).filePath(QStringLiteral("flotilla.log")));
    std::printf("Loading data and model for '%s'...\n", job->name.toUtf8().constData());
    std::fflush(stdout);
    auto fleet = LocalFleet::create(*job, runDir, localWorkers);
    if (!fleet) {
        qCCritical(lcApp).noquote() << "cannot start the job:" << fleet.error();
        return ExitFailure;
    }
    LocalFleet &f = **fleet;

    // The network runs on a thread of its own: hashing and copying weights never wait for
    // the coordinator's thread, nor the other way round.
    QThread network;
    network.setObjectName(QStringLiteral("network"));
    QObject context;
    context.moveToThread(&network);
    network.start();
    std::unique_ptr<CoordinatorServer> server;
    QString error;
    net::CoordinatorEndpoint::Options options;
    options.identityDir = parser.value(QStringLiteral("identity-dir"));
    options.bindAddress = listenAddress;
    options.port = static_cast<quint16>(port);
    options.hostNames = hosts;
    QMetaObject::invokeMethod(&context, [&] {
        auto created = CoordinatorServer::create(f.service(), options);
        if (!created) {
            error = created.error();
            return;
        }
        if (auto listening = (*created)->listen(); !listening) {
            error = listening.error();
            return;
        }
        server = std::move(created).value();
    }, Qt::BlockingQueuedConnection);
    auto stopNetwork = [&] {
        QMetaObject::invokeMethod(&context, [&] { server.reset(); }, Qt::BlockingQueuedConnection);
        network.quit();
        network.wait();
    };
    if (!server) {
        qCCritical(lcApp).noquote() << "cannot start the coordinator's endpoint:" << error;
        stopNetwork();
        return ExitFailure;
    }
    const quint16 actualPort = server->port();
    const QByteArray fingerprint = server->caFingerprint();
    // Where to reach this coordinator, for `flotilla token`.
    (void)writeFileAtomically(QDir(options.identityDir).filePath(QStringLiteral("endpoint.json")),
                              QJsonDocument(QJsonObject{{QStringLiteral("host"), hosts.first()},
                                                        {QStringLiteral("port"), int(actualPort)}})
                                  .toJson());
    const JobSpec &spec = f.spec();
    std::printf("%s job '%s' in %s\n  coordinator on %s:%d (TLS 1.3, CA fingerprint %s)\n",
                f.resumed() ? "Resuming" : "Starting", spec.name.toUtf8().constData(), f.runDir().toUtf8().constData(),
                hosts.first().toUtf8().constData(), actualPort, fingerprint.toHex().left(16).constData());
    if (parser.isSet(QStringLiteral("token-file"))) {
        net::TrustStore trust(options.identityDir);
        auto token = trust.issueToken(hosts.first(), actualPort, fingerprint,
                                      parser.value(QStringLiteral("token-valid")).toLongLong(),
                                      parser.value(QStringLiteral("token-uses")).toInt(),
                                      QDateTime::currentMSecsSinceEpoch());
        if (!token || !writeFileAtomically(parser.value(QStringLiteral("token-file")), token->encode().toUtf8() + '\n',
                                           int(QFile::ReadOwner | QFile::WriteOwner))) {
            qCCritical(lcApp).noquote() << "cannot write the join token:" << (token ? QString() : token.error());
            stopNetwork();
            return ExitFailure;
        }
        std::printf("  join token written to %s\n", parser.value(QStringLiteral("token-file")).toUtf8().constData());
    }
    std::fflush(stdout);

    ProgressPrinter printer(parser.isSet(QStringLiteral("quiet")), spec.fleet.workers);
    QElapsedTimer wall;
    wall.start();
    int exitCode = ExitOk;
    QObject::connect(&f, &LocalFleet::progressed, &f,
                     [&](const JobProgress &p, int) { printer.update(p, p.workersOnline); });
    QObject::connect(&f, &LocalFleet::finished, &f, [&](bool done, const QString &message) {
        if (!done) {
            qCCritical(lcApp).noquote() << "the job stopped:" << message;
            exitCode = ExitFailure;
        }
        // Let the workers hear that the job is finished before the endpoint goes.
        QTimer::singleShot(done ? 1500 : 0, qApp, &QCoreApplication::quit);
    });
    installStopSignals();
    QTimer signalPoll;
    QObject::connect(&signalPoll, &QTimer::timeout, &f, [&] {
        if (pendingStopSignal() == 0)
            return;
        std::fprintf(stderr, "\nStopping the coordinator. Resume with the same command; workers reconnect.\n");
        exitCode = ExitInterrupted;
        QCoreApplication::quit();
    });
    signalPoll.start(100);
    f.start();
    QCoreApplication::exec();
    signalPoll.stop();
    stopNetwork();
    f.stop();
    if (exitCode == ExitOk) {
        printer.endLine();
        printSummary(printer.last(), f.runDir(), wall.elapsed());
    }
    setLogFile({});
    return exitCode;
}

} // namespace flotilla
