// `flotilla token` and `flotilla revoke`: who may join a coordinator.
#include "CommandLine.h"
#include "JobOptions.h"
#include "NetworkCommands.h"

#include "Pki.h"
#include "TrustStore.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStandardPaths>

#include <cstdio>

namespace flotilla {

namespace {

QString defaultIdentityDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinator");
}

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

int runTokenCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Issue a join token: what a worker needs to join this coordinator (its address, the fingerprint of its CA,\n"
        "and a secret). Prints the token alone on standard output."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("identity-dir"), QStringLiteral("The coordinator's identity folder (as given to serve)."),
         QStringLiteral("dir"), defaultIdentityDir()},
        {QStringLiteral("uses"), QStringLiteral("How many workers may join with it."), QStringLiteral("n"),
         QStringLiteral("1")},
        {QStringLiteral("valid"), QStringLiteral("Lifetime in seconds."), QStringLiteral("seconds"),
         QStringLiteral("86400")},
        {QStringLiteral("host"), QStringLiteral("Address workers use. Default: the one serve last announced."),
         QStringLiteral("name")},
        {QStringLiteral("port"), QStringLiteral("Port workers use. Default: the one serve last announced."),
         QStringLiteral("port")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("token")))
        return *stop;
    const QString dir = parser.value(QStringLiteral("identity-dir"));
    const QByteArray fingerprint = net::certificateFingerprint(readFile(QDir(dir).filePath(QStringLiteral("ca.pem"))));
    if (fingerprint.isEmpty()) {
        std::fprintf(stderr, "flotilla token: '%s' holds no coordinator CA; start flotilla serve with this "
                             "--identity-dir first\n",
                     dir.toUtf8().constData());
        return ExitFailure;
    }
    const QJsonObject endpoint = QJsonDocument::fromJson(readFile(QDir(dir).filePath(QStringLiteral("endpoint.json")))).object();
    const QString host = parser.isSet(QStringLiteral("host")) ? parser.value(QStringLiteral("host"))
                                                              : endpoint.value(QStringLiteral("host")).toString();
    const int port = parser.isSet(QStringLiteral("port")) ? parser.value(QStringLiteral("port")).toInt()
                                                          : endpoint.value(QStringLiteral("port")).toInt();
    const qint64 valid = parser.value(QStringLiteral("valid")).toLongLong();
    const int uses = parser.value(QStringLiteral("uses")).toInt();
    if (host.isEmpty() || port <= 0 || port > 65535 || valid <= 0 || uses <= 0) {
        std::fprintf(stderr, "flotilla token: give --host and --port (serve has not announced them), and positive "
                             "--uses and --valid\n");
        return ExitUsage;
    }
    net::TrustStore trust(dir);
    auto token = trust.issueToken(host, static_cast<quint16>(port), fingerprint, valid, uses,
                                  QDateTime::currentMSecsSinceEpoch());
    if (!token) {
        std::fprintf(stderr, "flotilla token: %s\n", token.error().toUtf8().constData());
        return ExitFailure;
    }
    std::fprintf(stderr, "Token for %s:%d, %d use%s, valid until %s:\n", host.toUtf8().constData(), port, uses,
                 uses == 1 ? "" : "s",
                 QDateTime::fromMSecsSinceEpoch(token->expiresMs).toString(Qt::ISODate).toUtf8().constData());
    std::printf("%s\n", token->encode().toUtf8().constData());
    return ExitOk;
}

int runRevokeCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Revoke a worker: its certificate is refused from then on, and a running coordinator closes its\n"
        "connection within seconds."));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("worker"), QStringLiteral("Worker name, or certificate fingerprint (hex)."));
    parser.addOptions({
        {QStringLiteral("identity-dir"), QStringLiteral("The coordinator's identity folder."), QStringLiteral("dir"),
         defaultIdentityDir()},
        {QStringLiteral("reason"), QStringLiteral("Why, for the records."), QStringLiteral("text"),
         QStringLiteral("revoked by an operator")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("revoke")))
        return *stop;
    if (parser.positionalArguments().size() != 1) {
        std::fprintf(stderr, "flotilla revoke: name one worker (its name or certificate fingerprint)\n");
        return ExitUsage;
    }
    net::TrustStore trust(parser.value(QStringLiteral("identity-dir")));
    auto revoked = trust.revoke(parser.positionalArguments().first(), parser.value(QStringLiteral("reason")),
                                QDateTime::currentMSecsSinceEpoch());
    if (!revoked) {
        std::fprintf(stderr, "flotilla revoke: %s\n", revoked.error().toUtf8().constData());
        return ExitFailure;
    }
    std::printf("Revoked %d certificate%s.\n", *revoked, *revoked == 1 ? "" : "s");
    return ExitOk;
}

} // namespace flotilla
