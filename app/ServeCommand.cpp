// `flotilla serve`: a coordinator that trains a job with remote workers over TLS.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "engine/coordination/LocalFleet.h"
#include "server/NetworkHost.h"

#include "common/AtomicFile.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHostInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStandardPaths>
#include <QTimer>

namespace flotilla {

namespace {

struct FileToken
{
    QString text;
    bool reused = false;
    QStringList revoked; // ids of the tokens it replaced
};

// The join token of --token-file. Every start used to issue another token and leave the
// last one valid; now the file keeps its token while that still works for this coordinator
// (same CA, host, port and number of uses, not expired, used up or revoked). Otherwise a new
// one is issued and every live token issued to this file before is revoked, so one file
// means at most one live token.
Result<FileToken> tokenForFile(net::TrustStore &trust, const QString &file, const QString &host, quint16 port,
                               const QByteArray &caFingerprint, qint64 validSeconds, int uses)
{
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    const QString note = QStringLiteral("serve --token-file %1").arg(QFileInfo(file).absoluteFilePath());
    std::optional<net::JoinToken> current;
    QFile f(file);
    if (f.open(QIODevice::ReadOnly))
        if (auto decoded = net::JoinToken::decode(QString::fromUtf8(f.read(4096))))
            current = *decoded;
    if (current && current->caFingerprint == caFingerprint) {
        auto record = trust.token(current->id);
        if (!record)
            return record.takeError();
        const bool ours = record->has_value()
                          && (*record)->secretSha256 == QCryptographicHash::hash(current->secret, QCryptographicHash::Sha256);
        if (ours && (*record)->live(now) && current->host == host && current->port == port
            && (*record)->usesTotal == uses)
            return FileToken{current->encode(), true, {}};
    }
    auto tokens = trust.tokens();
    if (!tokens)
        return tokens.takeError();
    FileToken out;
    for (const net::TokenRecord &t : *tokens)
        if (t.live(now) && (t.note == note || (current && t.id == current->id))) {
            if (auto r = trust.revokeToken(t.idHex(), now); !r)
                return r.takeError();
            out.revoked << t.idHex();
        }
    auto token = trust.issueToken(host, port, caFingerprint, validSeconds, uses, now, note);
    if (!token)
        return token.takeError();
    out.text = token->encode();
    if (auto written = writeFileAtomically(file, out.text.toUtf8() + '\n', int(QFile::ReadOwner | QFile::WriteOwner));
        !written)
        return written.takeError();
    return out;
}

// A positive integer option, or a message naming it.
Result<int> positiveOption(const QCommandLineParser &parser, const QString &name, int most)
{
    bool ok = false;
    const int value = parser.value(name).toInt(&ok);
    if (!ok || value < 1 || value > most)
        return fail(QStringLiteral("--%1 must be a whole number from 1 to %2, not '%3'").arg(name).arg(most).arg(parser.value(name)));
    return value;
}

} // namespace

int runServeCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Run a coordinator: train a job with workers that join over TLS (flotilla worker --join TOKEN).\n"
        "Kill it at any moment and start it again with the same --run-dir: the job resumes and the workers\n"
        "reconnect by themselves.\n"
        "Without a job (no --job, --run-dir or job flag), or with --fleet, it runs a fleet service: it keeps\n"
        "running, trains the jobs of its queue (flotilla submit, flotilla jobs) several at once, and its\n"
        "workers stay connected between jobs."));
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
         QStringLiteral("Keep a join token in this file (mode 0600): the one it holds while that still works for this "
                        "coordinator (same address and uses, not expired, used up or revoked), else a new one; the "
                        "token it replaces is revoked."),
         QStringLiteral("file")},
        {QStringLiteral("token-uses"), QStringLiteral("Uses of the token written with --token-file."), QStringLiteral("n"),
         QStringLiteral("100")},
        {QStringLiteral("token-valid"), QStringLiteral("Lifetime in seconds of that token."), QStringLiteral("seconds"),
         QStringLiteral("86400")},
        // Work before authentication is bounded; docs/security.md explains each limit.
        {QStringLiteral("handshake-timeout"),
         QStringLiteral("Seconds a connection has, from its accept, to finish TLS and say Hello or redeem a token."),
         QStringLiteral("seconds"), QStringLiteral("10")},
        {QStringLiteral("max-unauthenticated"),
         QStringLiteral("Connections held that have not authenticated yet (TLS or Hello under way); when full, the "
                        "oldest makes way for a new one."),
         QStringLiteral("n"), QStringLiteral("1024")},
        {QStringLiteral("max-unauthenticated-per-address"),
         QStringLiteral("The same, per source address (IPv6: per /64)."), QStringLiteral("n"), QStringLiteral("64")},
        {QStringLiteral("fleet"), QStringLiteral("Run a fleet service even with job flags (they are ignored).")},
        {QStringLiteral("concurrent-jobs"),
         QStringLiteral("Fleet service: jobs of the queue that run at once, sharing the workers by their weights."),
         QStringLiteral("n"), QStringLiteral("2")},
        {QStringLiteral("join-failures"),
         QStringLiteral("Failed join attempts (wrong, unknown, spent or revoked tokens) one address may make in 10 "
                        "minutes; then its joins are refused until the 10 minutes have passed."),
         QStringLiteral("n"), QStringLiteral("10")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("serve")))
        return *stop;
    installLogSink(parser.isSet(QStringLiteral("verbose")));
    const bool fleetMode = parser.isSet(QStringLiteral("fleet")) || !anyJobOptionSet(parser);
    auto job = fleetMode ? Result<JobSpec>(JobSpec::defaultJob()) : jobFromOptions(parser);
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
    net::TlsListener::Options options;
    {
        bool timeoutOk = false;
        const double timeout = parser.value(QStringLiteral("handshake-timeout")).toDouble(&timeoutOk);
        if (!timeoutOk || !(timeout >= 0.1 && timeout <= 3600)) {
            std::fprintf(stderr, "flotilla serve: --handshake-timeout must be a number of seconds from 0.1 to 3600, "
                                 "not '%s'\n",
                         parser.value(QStringLiteral("handshake-timeout")).toUtf8().constData());
            return ExitUsage;
        }
        options.handshakeTimeoutMs = int(timeout * 1000);
        auto total = positiveOption(parser, QStringLiteral("max-unauthenticated"), 1000000);
        auto perAddress = positiveOption(parser, QStringLiteral("max-unauthenticated-per-address"), 1000000);
        auto joinFailures = positiveOption(parser, QStringLiteral("join-failures"), 1000000);
        for (const auto *r : {&total, &perAddress, &joinFailures})
            if (!*r) {
                std::fprintf(stderr, "flotilla serve: %s\n", r->error().toUtf8().constData());
                return ExitUsage;
            }
        options.maxUnauthenticated = *total;
        options.maxUnauthenticatedPerSource = *perAddress;
        options.maxJoinFailuresPerSource = *joinFailures;
    }
    QStringList hosts = parser.values(QStringLiteral("host"));
    if (hosts.isEmpty())
        hosts = {QHostInfo::localHostName(), QStringLiteral("localhost"), QStringLiteral("127.0.0.1")};

    int concurrentJobs = 2;
    if (fleetMode) {
        auto concurrent = positiveOption(parser, QStringLiteral("concurrent-jobs"), 64);
        if (!concurrent) {
            std::fprintf(stderr, "flotilla serve: %s\n", concurrent.error().toUtf8().constData());
            return ExitUsage;
        }
        concurrentJobs = *concurrent;
    }
    std::unique_ptr<LocalFleet> single;
    if (!fleetMode) {
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
        single = std::move(fleet).value();
    }

    options.identityDir = parser.value(QStringLiteral("identity-dir"));
    if (fleetMode) {
        QDir().mkpath(options.identityDir);
        setLogFile(QDir(options.identityDir).filePath(QStringLiteral("fleet.log")));
    }
    options.bindAddress = listenAddress;
    options.hostNames = hosts;
    NetworkHost network;
    if (auto serving = fleetMode ? network.startFleet(options, {quint16(port)})
                                 : network.start(single->coordinator(), options, {quint16(port)});
        !serving) {
        qCCritical(lcApp).noquote() << "cannot start the coordinator's endpoint:" << serving.error();
        return ExitFailure;
    }
    const quint16 actualPort = network.port();
    const QByteArray fingerprint = network.caFingerprint();
    // Where to reach this coordinator, for `flotilla token`.
    (void)writeFileAtomically(QDir(options.identityDir).filePath(QStringLiteral("endpoint.json")),
                              QJsonDocument(QJsonObject{{QStringLiteral("host"), hosts.first()},
                                                        {QStringLiteral("port"), int(actualPort)}})
                                  .toJson());
    if (fleetMode)
        std::printf("Fleet service of %s\n  coordinator on %s:%d (TLS 1.3, CA fingerprint %s), up to %d jobs at once\n",
                    options.identityDir.toUtf8().constData(), hosts.first().toUtf8().constData(), actualPort,
                    fingerprint.toHex().left(16).constData(), concurrentJobs);
    else
        std::printf("%s job '%s' in %s\n  coordinator on %s:%d (TLS 1.3, CA fingerprint %s)\n",
                    single->resumed() ? "Resuming" : "Starting", single->spec().name.toUtf8().constData(),
                    single->runDir().toUtf8().constData(), hosts.first().toUtf8().constData(), actualPort,
                    fingerprint.toHex().left(16).constData());
    if (parser.isSet(QStringLiteral("token-file"))) {
        const QString file = parser.value(QStringLiteral("token-file"));
        net::TrustStore trust(options.identityDir);
        auto token = tokenForFile(trust, file, hosts.first(), actualPort, fingerprint,
                                  parser.value(QStringLiteral("token-valid")).toLongLong(),
                                  parser.value(QStringLiteral("token-uses")).toInt());
        if (!token) {
            qCCritical(lcApp).noquote() << "cannot write the join token to" << file << "-" << token.error();
            return ExitFailure;
        }
        if (token->reused)
            std::printf("  join token in %s (still valid; flotilla token --list shows what is left of it)\n",
                        file.toUtf8().constData());
        else
            std::printf("  join token written to %s%s\n", file.toUtf8().constData(),
                        token->revoked.isEmpty()
                            ? ""
                            : qPrintable(QStringLiteral(" (it replaces %1, now revoked)").arg(token->revoked.join(u','))));
    }
    std::fflush(stdout);
    if (fleetMode)
        return runFleetService(network, options.identityDir, concurrentJobs, parser.isSet(QStringLiteral("quiet")));

    JobRun run;
    run.quiet = parser.isSet(QStringLiteral("quiet"));
    run.countConnected = true;
    run.stopMessage = QStringLiteral("Stopping the coordinator. Resume with the same command; workers reconnect.");
    // Let the workers hear that the job is finished before the endpoint goes.
    run.quitDelayMs = 1500;
    // An operator's Stop (a control center attached with an operator token): as a SIGTERM,
    // once its answer has had a moment to leave.
    run.connectMore = [&network, &single](int &exitCode) {
        QObject::connect(network.server(), &FleetServer::stopRequested, single.get(), [&exitCode](const QString &by) {
            std::fprintf(stderr,
                         "\nStopping the coordinator: operator %s asked to. Resume with the same command; workers "
                         "reconnect.\n",
                         by.toUtf8().constData());
            exitCode = ExitInterrupted;
            QTimer::singleShot(500, qApp, &QCoreApplication::quit);
        });
    };
    run.beforeStop = [&network] { network.stop(); };
    return runJobToEnd(*single, run);
}

} // namespace flotilla
