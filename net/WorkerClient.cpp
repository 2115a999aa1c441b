#include "net/WorkerClient.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "net/Messages.h"
#include "net/Pki.h"

#include <QDir>
#include <QFile>
#include <QHostInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QSslCertificate>

#include <cmath>

namespace flotilla::net {

namespace {

QString fileIn(const QString &dir, const char *name)
{
    return QDir(dir).filePath(QString::fromLatin1(name));
}

QByteArray readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

WorkerClient::WorkerClient(Options options, QObject *parent) : QObject(parent), m_options(std::move(options))
{
    qRegisterMetaType<flotilla::net::Message>();
    m_retry.setSingleShot(true);
    connect(&m_retry, &QTimer::timeout, this, &WorkerClient::connectNext);
    m_stall.setSingleShot(true);
    m_stall.setInterval(m_options.stallTimeoutMs);
    connect(&m_stall, &QTimer::timeout, this, [this] {
        if (m_reader->pending() > 0 || m_reader->inTransfer())
            lost(QStringLiteral("the coordinator went silent for %1 s in the middle of a message")
                     .arg(m_options.stallTimeoutMs / 1000));
    });
}

WorkerClient::~WorkerClient()
{
    stop();
}

Result<void> WorkerClient::loadIdentity()
{
    const QString dir = m_options.stateDir;
    const QByteArray json = readAll(fileIn(dir, "coordinator.json"));
    if (json.isEmpty())
        return {};
    const QJsonObject o = QJsonDocument::fromJson(json).object();
    const QByteArray cert = readAll(fileIn(dir, "cert.pem"));
    const QByteArray key = readAll(fileIn(dir, "key.pem"));
    const QSslCertificate ca(readAll(fileIn(dir, "ca.pem")));
    if (cert.isEmpty() || key.isEmpty() || ca.isNull() || o.value(QStringLiteral("host")).toString().isEmpty())
        return fail(QStringLiteral("the worker identity in '%1' is incomplete (coordinator.json, ca.pem, cert.pem, key.pem); "
                                   "delete the folder and join again with a new token")
                        .arg(dir));
    if (QString::fromLatin1(ca.digest(QCryptographicHash::Sha256).toHex())
        != o.value(QStringLiteral("ca_fingerprint")).toString())
        return fail(QStringLiteral("'%1' holds a CA that does not match its coordinator.json; delete the folder and join "
                                   "again")
                        .arg(fileIn(dir, "ca.pem")));
    m_host = o.value(QStringLiteral("host")).toString();
    m_port = static_cast<quint16>(o.value(QStringLiteral("port")).toInt());
    m_certificatePem = cert;
    m_keyPem = key;
    m_ca = ca;
    return {};
}

Result<void> WorkerClient::saveIdentity()
{
    const QString dir = m_options.stateDir;
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("cannot create '%1'").arg(dir));
    const int privateMode = int(QFile::ReadOwner | QFile::WriteOwner);
    const QJsonObject o{{QStringLiteral("host"), m_host},
                        {QStringLiteral("port"), int(m_port)},
                        {QStringLiteral("ca_fingerprint"), QString::fromLatin1(m_ca.digest(QCryptographicHash::Sha256).toHex())},
                        {QStringLiteral("name"), m_options.name}};
    for (const auto &[name, bytes, mode] :
         {std::tuple{"key.pem", m_keyPem, privateMode}, std::tuple{"cert.pem", m_certificatePem, 0},
          std::tuple{"ca.pem", m_ca.toPem(), 0}, std::tuple{"coordinator.json", QJsonDocument(o).toJson(), 0}})
        if (auto r = writeFileAtomically(fileIn(dir, name), bytes, mode); !r)
            return r;
    return {};
}

Result<void> WorkerClient::configure(const std::optional<JoinToken> &token)
{
    if (auto r = loadIdentity(); !r)
        return r;
    if (token) {
        const bool sameCoordinator = !m_ca.isNull() && m_ca.digest(QCryptographicHash::Sha256) == token->caFingerprint;
        // The coordinator may have moved: the token's address wins.
        m_host = token->host;
        m_port = token->port;
        if (!sameCoordinator) {
            m_certificatePem.clear();
            m_ca = QSslCertificate();
            m_token = token;
        }
        return settleName();
    }
    if (!hasIdentity())
        return fail(QStringLiteral("'%1' holds no worker identity: join a coordinator first with --join TOKEN")
                        .arg(m_options.stateDir));
    return settleName();
}

Result<void> WorkerClient::settleName()
{
    // The certificate says who this worker is: a name asked for that is not its own would be
    // refused by the coordinator at every Hello.
    const QString issued = m_certificatePem.isEmpty()
                               ? QString()
                               : QSslCertificate(m_certificatePem).subjectInfo(QSslCertificate::CommonName).value(0);
    if (!issued.isEmpty()) {
        if (!m_options.name.isEmpty() && m_options.name != issued)
            return fail(QStringLiteral("the identity in '%1' was issued to worker '%2', not '%3': leave out --name, or "
                                       "join as '%3' with another state folder and a token")
                            .arg(m_options.stateDir, issued, m_options.name));
        m_options.name = issued;
    }
    if (m_options.name.isEmpty())
        m_options.name = QHostInfo::localHostName();
    return {};
}

void WorkerClient::start(const HelloMsg &hello)
{
    m_hello = hello;
    m_stopped = false;
    connectNext();
}

void WorkerClient::stop()
{
    m_stopped = true;
    m_retry.stop();
    m_stall.stop();
    m_welcomed = false;
    if (m_socket) {
        m_socket->disconnect(this);
        m_socket->disconnectFromHost();
        m_socket->deleteLater();
    }
    m_phase = Phase::Idle;
}

void WorkerClient::connectNext()
{
    if (m_stopped)
        return;
    if (hasIdentity())
        connectWorker();
    else if (m_ca.isNull())
        probe();
    else
        enroll();
}

TlsSocket *WorkerClient::newSocket(bool withCertificate)
{
    if (m_socket) {
        m_socket->disconnect(this);
        m_socket->abort();
        m_socket->deleteLater();
    }
    TlsContext::Options tls;
    tls.side = TlsContext::Side::Client;
    if (m_ca.isNull()) {
        // Only to read the CA off the coordinator's chain; nothing is sent on this connection.
        tls.verify = TlsContext::Verify::None;
    } else {
        tls.caPem = m_ca.toPem(); // the pinned CA and nothing else
        tls.verify = TlsContext::Verify::Require;
    }
    if (withCertificate) {
        tls.certificateChainPem = m_certificatePem;
        tls.keyPem = m_keyPem;
    }
    auto context = TlsContext::create(tls);
    auto *socket = new TlsSocket(context ? *context : nullptr, this);
    m_reader = std::make_unique<MessageReader>();
    connect(socket, &QIODevice::readyRead, this, &WorkerClient::onReadyRead);
    connect(socket, &TlsSocket::disconnected, this, [this] { lost(QStringLiteral("the connection closed")); });
    connect(socket, &TlsSocket::errorOccurred, this, [this, socket](QAbstractSocket::SocketError error) {
        if (error != QAbstractSocket::RemoteHostClosedError && socket == m_socket)
            lost(socket->errorString());
    });
    connect(socket, &TlsSocket::verificationFailed, this, [this](const QString &reason) {
        giveUp(QStringLiteral("the coordinator at %1 failed verification against the pinned CA: %2")
                   .arg(coordinatorAddress(), reason));
    });
    m_socket = socket;
    if (!context) {
        QMetaObject::invokeMethod(
            this, [this, error = context.error()] { giveUp(error); }, Qt::QueuedConnection);
        return socket;
    }
    return socket;
}

void WorkerClient::probe()
{
    m_phase = Phase::Probing;
    TlsSocket *socket = newSocket(false);
    connect(socket, &TlsSocket::encrypted, this, [this, socket] {
        const QByteArray pin = m_token->caFingerprint;
        QStringList seen;
        for (const QSslCertificate &c : socket->peerCertificateChain()) {
            const QByteArray digest = c.digest(QCryptographicHash::Sha256);
            if (digest == pin) {
                m_ca = c;
                socket->disconnect(this);
                socket->disconnectFromHost();
                enroll();
                return;
            }
            seen << QString::fromLatin1(digest.toHex().left(16));
        }
        giveUp(QStringLiteral("the coordinator at %1 presents CA fingerprint %2, but the token pins %3: refusing to "
                              "join (a token for another coordinator, or someone in between)")
                   .arg(coordinatorAddress(), seen.join(QStringLiteral(", ")),
                        QString::fromLatin1(pin.toHex().left(16))));
    });
    socket->connectToHostEncrypted(m_host, m_port);
}

void WorkerClient::enroll()
{
    m_phase = Phase::Enrolling;
    if (m_keyPem.isEmpty()) {
        auto key = generatePrivateKeyPem();
        if (!key) {
            giveUp(key.error());
            return;
        }
        m_keyPem = *key;
    }
    auto csr = createCertificateRequest(m_keyPem, m_options.name);
    if (!csr) {
        giveUp(csr.error());
        return;
    }
    TlsSocket *socket = newSocket(false);
    const QByteArray request = *csr;
    connect(socket, &TlsSocket::encrypted, this, [this, request] {
        send(RedeemMsg{m_token->id, m_token->secret, m_options.name}, request);
    });
    socket->connectToHostEncrypted(m_host, m_port);
}

void WorkerClient::connectWorker()
{
    m_phase = Phase::Connecting;
    TlsSocket *socket = newSocket(true);
    connect(socket, &TlsSocket::encrypted, this, [this] {
        HelloMsg hello = m_hello;
        hello.protocol = kProtocolVersion;
        hello.name = m_options.name;
        send(hello);
    });
    socket->connectToHostEncrypted(m_host, m_port);
}

void WorkerClient::send(MessageType type, const QCborMap &header, const QByteArray &payload)
{
    if (m_socket && m_socket->isEncrypted())
        m_socket->send(std::make_unique<OutgoingMessage>(type, header, payload));
}

void WorkerClient::onReadyRead()
{
    if (!m_socket)
        return;
    m_reader->readFrom(*m_socket);
    m_stall.start();
    for (;;) {
        auto message = m_reader->next();
        if (!message) {
            lost(QStringLiteral("the coordinator sent something malformed: %1").arg(message.error()));
            return;
        }
        if (!message->has_value() || m_stopped)
            return;
        handle(std::move(**message));
    }
}

void WorkerClient::handle(Message message)
{
    if (message.type == MessageType::Error) {
        auto error = ErrorMsg::decode(message.header);
        if (!error) {
            lost(QStringLiteral("the coordinator sent something malformed: %1").arg(error.error()));
            return;
        }
        const QString reason = error->reason;
        if (error->fatal)
            giveUp(QStringLiteral("the coordinator refused this worker: %1%2")
                       .arg(reason, hasIdentity() && reason.contains(QStringLiteral("revoked"))
                                        ? QStringLiteral(" (to join again, delete '%1' and use a new token)")
                                              .arg(m_options.stateDir)
                                        : QString()));
        else
            lost(QStringLiteral("the coordinator closed the connection: %1").arg(reason), error->retryAfterMs);
        return;
    }
    if (m_phase == Phase::Enrolling) {
        if (message.type != MessageType::Enrolled || message.payload.isEmpty()) {
            giveUp(QStringLiteral("the coordinator answered the join with %1").arg(describe(message.type)));
            return;
        }
        m_certificatePem = message.payload;
        if (auto saved = saveIdentity(); !saved) {
            giveUp(saved.error());
            return;
        }
        qCInfo(lcNet).noquote() << "joined" << coordinatorAddress() << "as" << m_options.name;
        Q_EMIT joined(m_options.name);
        m_socket->disconnect(this);
        m_socket->disconnectFromHost();
        connectWorker();
        return;
    }
    if (m_phase == Phase::Connecting) {
        if (message.type != MessageType::Welcome) {
            lost(QStringLiteral("the coordinator answered Hello with %1").arg(describe(message.type)));
            return;
        }
        m_phase = Phase::Connected;
        m_welcomed = true;
        m_attempt = 0;
        Q_EMIT welcomed(message.header);
        return;
    }
    if (m_phase == Phase::Connected)
        Q_EMIT messageReceived(message);
}

void WorkerClient::lost(const QString &reason, qint64 retryAfterMs)
{
    if (m_stopped || m_retry.isActive())
        return;
    const bool wasWelcomed = m_welcomed;
    m_welcomed = false;
    m_stall.stop();
    if (m_socket) {
        m_socket->disconnect(this);
        m_socket->abort();
        m_socket->deleteLater();
    }
    m_phase = Phase::Idle;
    // Exponential backoff with jitter, so a fleet does not reconnect in lockstep.
    const double base = std::min<double>(m_options.maxBackoffMs, m_options.initialBackoffMs * std::pow(2.0, m_attempt));
    int delay = int(base * (0.5 + QRandomGenerator::global()->generateDouble()));
    // Told to stay away (a budget): at least that long, a little more so a fleet spreads out.
    if (retryAfterMs > 0)
        delay = std::max(delay, int(std::min<qint64>(retryAfterMs, 24 * 3600 * 1000)
                                    * (1.0 + 0.25 * QRandomGenerator::global()->generateDouble())));
    ++m_attempt;
    qCInfo(lcNet).noquote() << "lost the coordinator at" << coordinatorAddress() << "-" << reason << "- retrying in"
                            << delay << "ms";
    if (wasWelcomed || m_attempt == 1)
        Q_EMIT disconnected(reason);
    m_retry.start(delay);
}

void WorkerClient::giveUp(const QString &reason)
{
    if (m_stopped)
        return;
    qCWarning(lcNet).noquote() << reason;
    stop();
    Q_EMIT failed(reason);
}

} // namespace flotilla::net
