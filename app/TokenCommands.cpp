// `flotilla token` and `flotilla revoke`: who may join a coordinator (tokens: issued, listed,
// revoked) and who may connect to it (worker certificates, revoked by name).
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"

#include "net/Pki.h"
#include "net/TrustStore.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStandardPaths>

#include <cstdio>

namespace flotilla {

QString defaultIdentityDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinator");
}

namespace {

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QString utc(qint64 ms)
{
    return QDateTime::fromMSecsSinceEpoch(ms, Qt::UTC).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
}

// `flotilla token --list`: one line per token, newest last.
int listTokens(const QString &dir, bool all)
{
    net::TrustStore trust(dir);
    auto tokens = trust.tokens();
    if (!tokens) {
        std::fprintf(stderr, "flotilla token: %s\n", tokens.error().toUtf8().constData());
        return ExitFailure;
    }
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    int shown = 0;
    for (const net::TokenRecord &t : *tokens) {
        if (!all && !t.live(now))
            continue;
        if (shown++ == 0)
            std::printf("%-16s  %-8s  %-8s  %-9s  %-16s  %-16s  %s\n", "ID", "ROLE", "STATE", "USES LEFT",
                        "CREATED (UTC)", "EXPIRES (UTC)", "NOTE");
        std::printf("%-16s  %-8s  %-8s  %-9s  %-16s  %-16s  %s\n", t.idHex().toUtf8().constData(),
                    net::describe(t.role).toUtf8().constData(), net::describe(t.state(now)).toUtf8().constData(),
                    QStringLiteral("%1/%2").arg(t.usesLeft).arg(t.usesTotal).toUtf8().constData(),
                    utc(t.createdMs).toUtf8().constData(), utc(t.expiresMs).toUtf8().constData(),
                    t.note.toUtf8().constData());
    }
    if (shown == 0)
        std::printf(all ? "No join tokens have been issued.\n"
                        : "No live join tokens (--all lists expired, used up and revoked ones too).\n");
    // Operators and submitters: people attached from elsewhere, revoked by name like workers.
    auto certificates = trust.certificates();
    if (!certificates) {
        std::fprintf(stderr, "flotilla token: %s\n", certificates.error().toUtf8().constData());
        return ExitFailure;
    }
    bool heading = false;
    for (const net::CertificateRecord &c : *certificates) {
        if (!net::isPerson(c.role) || (c.revoked() && !all))
            continue;
        if (!heading)
            std::printf("\nOperators and submitters (flotilla revoke NAME bars one):\n%-32s  %-9s  %-16s  %s\n", "NAME",
                        "ROLE", "ENROLLED (UTC)", "STATE");
        heading = true;
        std::printf("%-32s  %-9s  %-16s  %s\n", c.workerName.toUtf8().constData(),
                    net::describe(c.role).toUtf8().constData(), utc(c.issuedMs).toUtf8().constData(),
                    c.revoked() ? qPrintable(QStringLiteral("revoked %1").arg(utc(c.revokedMs))) : "active");
    }
    return ExitOk;
}

int revokeToken(const QString &dir, const QString &id)
{
    net::TrustStore trust(dir);
    auto revoked = trust.revokeToken(id, QDateTime::currentMSecsSinceEpoch());
    if (!revoked) {
        std::fprintf(stderr, "flotilla token: %s\n", revoked.error().toUtf8().constData());
        return ExitFailure;
    }
    std::printf("Revoked join token %s (%d of %d uses left). Workers that joined with it stay; revoke them by name "
                "with flotilla revoke.\n",
                revoked->idHex().toUtf8().constData(), revoked->usesLeft, revoked->usesTotal);
    return ExitOk;
}

} // namespace

Result<net::JoinToken> tokenArgument(const QString &value)
{
    QString text = value;
    if (!text.startsWith(QLatin1String("flt1.")) && QFile::exists(text)) {
        QFile file(text);
        if (!file.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("cannot read the token file '%1': %2").arg(value, file.errorString()));
        text = QString::fromUtf8(file.read(4096));
    }
    return net::JoinToken::decode(text);
}

int runTokenCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Issue a join token: what a worker needs to join this coordinator (its address, the fingerprint of its CA,\n"
        "and a secret). Prints the token alone on standard output.\n"
        "--list shows the live tokens (id, uses left, expiry, what each was issued for); --revoke ID bars one."));
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
        {QStringLiteral("note"), QStringLiteral("What the token is for, shown by --list."), QStringLiteral("text"),
         QStringLiteral("flotilla token")},
        {{QStringLiteral("operator"), QStringLiteral("admin")},
         QStringLiteral("An operator token, the fleet's administrator: for a control center that attaches from "
                        "elsewhere (File > Connect to coordinator..., or flotilla gui --connect TOKEN) or flotilla "
                        "submit/jobs --coordinator, to watch and manage any job, hand out join tokens, revoke and "
                        "release workers. An operator never trains; a worker's certificate cannot watch.")},
        {QStringLiteral("submitter"),
         QStringLiteral("A submitter token: for a person who queues jobs on the fleet from elsewhere (a control "
                        "center, or flotilla submit --coordinator), watches them, and manages and downloads its own "
                        "jobs, not others' nor the fleet.")},
        {QStringLiteral("list"), QStringLiteral("List the live join tokens instead of issuing one.")},
        {QStringLiteral("all"), QStringLiteral("With --list: expired, used up and revoked tokens too.")},
        {QStringLiteral("revoke"),
         QStringLiteral("Revoke the join token with this id (as --list shows it, or its first 4 or more digits)."),
         QStringLiteral("id")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("token")))
        return *stop;
    const QString dir = parser.value(QStringLiteral("identity-dir"));
    if (parser.isSet(QStringLiteral("list")) && parser.isSet(QStringLiteral("revoke"))) {
        std::fprintf(stderr, "flotilla token: give --list or --revoke, not both\n");
        return ExitUsage;
    }
    if (parser.isSet(QStringLiteral("list")))
        return listTokens(dir, parser.isSet(QStringLiteral("all")));
    if (parser.isSet(QStringLiteral("revoke")))
        return revokeToken(dir, parser.value(QStringLiteral("revoke")));
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
    if (parser.isSet(QStringLiteral("operator")) && parser.isSet(QStringLiteral("submitter"))) {
        std::fprintf(stderr, "flotilla token: give --operator or --submitter, not both\n");
        return ExitUsage;
    }
    const net::Role role = parser.isSet(QStringLiteral("operator"))    ? net::Role::Operator
                           : parser.isSet(QStringLiteral("submitter")) ? net::Role::Submitter
                                                                        : net::Role::Worker;
    QString note = parser.value(QStringLiteral("note"));
    if (role != net::Role::Worker && !parser.isSet(QStringLiteral("note")))
        note = QStringLiteral("flotilla token --%1").arg(net::describe(role));
    auto token = trust.issueToken(host, static_cast<quint16>(port), fingerprint, valid, uses,
                                  QDateTime::currentMSecsSinceEpoch(), note, role);
    if (!token) {
        std::fprintf(stderr, "flotilla token: %s\n", token.error().toUtf8().constData());
        return ExitFailure;
    }
    std::fprintf(stderr, "%s token %s for %s:%d, %d use%s, valid until %s:\n",
                 role == net::Role::Operator    ? "Operator"
                 : role == net::Role::Submitter ? "Submitter"
                                                : "Join",
                 token->id.toHex().constData(),
                 host.toUtf8().constData(), port, uses, uses == 1 ? "" : "s",
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
