#include "CoordinatorEndpoint.h"

#include "NetLog.h"

#include <QDateTime>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>

namespace flotilla::net {

namespace {

constexpr int kWorkerCertificateDays = 365;
constexpr qsizetype kMaxName = 64;

QString peerAddress(const QSslSocket *s)
{
    // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d; say a.b.c.d.
    QHostAddress address = s->peerAddress();
    bool mapped = false;
    const quint32 v4 = address.toIPv4Address(&mapped);
    if (mapped)
        address = QHostAddress(v4);
    return QStringLiteral("%1:%2").arg(address.toString()).arg(s->peerPort());
}

bool sentByWorkers(MessageType t)
{
    switch (t) {
    case MessageType::Hello:
    case MessageType::Redeem:
    case MessageType::Request:
    case MessageType::ShardRequest:
    case MessageType::Heartbeat:
    case MessageType::Result:
    case MessageType::HandBack:
    case MessageType::Chunk:
    case MessageType::Error:
    case MessageType::Bye:
        return true;
    default:
        return false;
    }
}

} // namespace

void ObservedSslServer::incomingConnection(qintptr descriptor)
{
    QSslServer::incomingConnection(descriptor);
    // The socket QSslServer just made is its newest child.
    const QObjectList &kids = children();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
        if (auto *socket = qobject_cast<QSslSocket *>(*it)) {
            if (created && !socket->property("flotillaAddress").isValid())
                created(socket);
            break;
        }
}

Result<std::unique_ptr<CoordinatorEndpoint>> CoordinatorEndpoint::create(const Options &options)
{
    auto identity = loadOrCreateCoordinatorIdentity(options.identityDir, options.hostNames);
    if (!identity)
        return identity.takeError();
    std::unique_ptr<CoordinatorEndpoint> e(new CoordinatorEndpoint);
    e->m_options = options;
    e->m_identity = *identity;
    e->m_trust = TrustStore(options.identityDir);
    qRegisterMetaType<flotilla::net::PeerInfo>();
    qRegisterMetaType<flotilla::net::Message>();

    const QSslCertificate ca(e->m_identity.ca.certificatePem);
    const QSslCertificate server(e->m_identity.serverCertificatePem);
    QSslConfiguration config = QSslConfiguration::defaultConfiguration();
    config.setProtocol(QSsl::TlsV1_3); // and nothing older
    config.setLocalCertificateChain({server, ca});
    config.setPrivateKey(QSslKey(e->m_identity.serverKeyPem, QSsl::Ec));
    config.setCaCertificates({ca});
    // Workers without a certificate may connect, but only to redeem a join token.
    config.setPeerVerifyMode(QSslSocket::QueryPeer);
    e->m_server.setSslConfiguration(config);
    e->m_server.setHandshakeTimeout(options.handshakeTimeoutMs);

    CoordinatorEndpoint *self = e.get();
    connect(&e->m_server, &QTcpServer::pendingConnectionAvailable, self, [self] {
        while (QTcpSocket *socket = self->m_server.nextPendingConnection())
            self->accept(qobject_cast<QSslSocket *>(socket));
    });
    // QSslServer drops some connections without a word (bytes that are not TLS at all):
    // remember each peer as it arrives, and report any that leaves unaccepted.
    e->m_server.created = [self](QSslSocket *socket) {
        socket->setProperty("flotillaAddress", peerAddress(socket));
        connect(socket, &QSslSocket::disconnected, self, [self, socket] {
            if (socket->property("flotillaAccepted").toBool() || socket->property("flotillaReported").toBool())
                return;
            socket->setProperty("flotillaReported", true);
            const QString address = socket->property("flotillaAddress").toString();
            const QString reason = QStringLiteral("the TLS handshake failed: the peer sent no TLS handshake, or left "
                                                  "during it");
            qCInfo(lcNet).noquote() << address << "-" << reason;
            Q_EMIT self->refused(address, reason);
        });
    };
    connect(&e->m_server, &QSslServer::errorOccurred, self,
            [self](QSslSocket *socket, QAbstractSocket::SocketError error) {
                if (socket->property("flotillaReported").toBool())
                    return;
                socket->setProperty("flotillaReported", true);
                const QString recorded = socket->property("flotillaAddress").toString();
                const QString address = recorded.isEmpty() ? peerAddress(socket) : recorded;
                const QString why = error == QAbstractSocket::SocketTimeoutError
                                        ? QStringLiteral("no TLS handshake within %1 s")
                                              .arg(self->m_options.handshakeTimeoutMs / 1000.0)
                                        : socket->errorString();
                const QString reason = QStringLiteral("the TLS handshake failed: %1").arg(why);
                // A joining worker reads the CA off the handshake and hangs up: not an attack.
                if (error == QAbstractSocket::RemoteHostClosedError)
                    qCInfo(lcNet).noquote() << address << "closed the connection during the TLS handshake";
                else
                    qCWarning(lcNet).noquote() << "refused" << address << "-" << reason;
                Q_EMIT self->refused(address, reason);
            });
    // Tokens may be revoked by another process (flotilla revoke): look now and then.
    e->m_revocationTimer.setInterval(options.revocationCheckMs);
    connect(&e->m_revocationTimer, &QTimer::timeout, self, &CoordinatorEndpoint::checkRevocations);
    return e;
}

CoordinatorEndpoint::~CoordinatorEndpoint()
{
    // abort() emits disconnected at once, whose handler erases from m_connections: take the
    // sockets out first.
    std::vector<QPointer<QSslSocket>> sockets;
    for (auto &[id, c] : m_connections)
        sockets.push_back(c->socket);
    m_connections.clear();
    for (auto &socket : sockets)
        if (socket) {
            socket->disconnect(this);
            socket->abort();
        }
}

Result<void> CoordinatorEndpoint::listen()
{
    if (!m_server.listen(m_options.bindAddress, m_options.port))
        return fail(QStringLiteral("cannot listen on %1:%2: %3")
                        .arg(m_options.bindAddress.toString()).arg(m_options.port).arg(m_server.errorString()));
    m_revocationTimer.start();
    qCInfo(lcNet).noquote() << "listening on" << QStringLiteral("%1:%2").arg(m_options.bindAddress.toString()).arg(port())
                            << "with TLS 1.3; CA fingerprint" << QString::fromLatin1(m_identity.caFingerprint.toHex());
    return {};
}

quint16 CoordinatorEndpoint::port() const
{
    return m_server.serverPort();
}

void CoordinatorEndpoint::setPayloadLimit(MessageType type, std::uint64_t bytes)
{
    m_limits[type] = bytes;
    for (auto &[id, c] : m_connections)
        c->reader.assembler().setPayloadLimit(type, bytes);
}

void CoordinatorEndpoint::accept(QSslSocket *socket)
{
    auto c = std::make_unique<Connection>();
    c->id = m_nextId++;
    c->socket = socket;
    c->address = peerAddress(socket);
    c->encrypted = socket->isEncrypted();
    // What workers may send: a CSR, weights; nothing else carries a payload.
    for (int t = 1; t <= 17; ++t)
        c->reader.assembler().setPayloadLimit(static_cast<MessageType>(t), 0);
    c->reader.assembler().setPayloadLimit(MessageType::Redeem, 64 * 1024);
    for (const auto &[type, limit] : m_limits)
        c->reader.assembler().setPayloadLimit(type, limit);
    const qint64 id = c->id;
    socket->setProperty("flotillaAccepted", true);
    c->stallTimer = new QTimer(socket);
    c->stallTimer->setSingleShot(true);
    c->stallTimer->setInterval(m_options.stallTimeoutMs);
    connect(c->stallTimer, &QTimer::timeout, this, [this, id] {
        const auto it = m_connections.find(id);
        if (it == m_connections.end())
            return;
        Connection &conn = *it->second;
        if (conn.reader.pending() > 0 || conn.reader.inTransfer())
            drop(id, QStringLiteral("went silent for %1 s in the middle of a message (%2 bytes of it received)")
                         .arg(m_options.stallTimeoutMs / 1000.0).arg(conn.reader.pending()),
                 false);
    });
    c->handshakeTimer = new QTimer(socket);
    c->handshakeTimer->setSingleShot(true);
    connect(c->handshakeTimer, &QTimer::timeout, this, [this, id] {
        const auto it = m_connections.find(id);
        if (it != m_connections.end() && !it->second->helloDone)
            drop(id, QStringLiteral("said neither Hello nor Redeem within %1 s").arg(m_options.handshakeTimeoutMs / 1000), false);
    });
    c->handshakeTimer->start(m_options.handshakeTimeoutMs);
    connect(socket, &QSslSocket::readyRead, this, [this, id] { onReadyRead(id); });
    connect(socket, &QSslSocket::disconnected, this, [this, id] {
        const auto it = m_connections.find(id);
        if (it == m_connections.end())
            return;
        const bool hello = it->second->helloDone;
        it->second->socket->deleteLater();
        m_connections.erase(it);
        if (hello)
            Q_EMIT connectionClosed(id, QStringLiteral("the worker disconnected"));
    });
    Connection &conn = *c;
    m_connections[id] = std::move(c);
    onEncrypted(conn.id);
}

void CoordinatorEndpoint::onEncrypted(qint64 id)
{
    Connection &c = *m_connections.at(id);
    const QSslCertificate cert = c.socket->peerCertificate();
    if (cert.isNull())
        return; // an enrolling worker: only Redeem is allowed
    if (!c.socket->sslHandshakeErrors().isEmpty()) {
        drop(id, QStringLiteral("presented a certificate this coordinator did not issue (%1)")
                     .arg(c.socket->sslHandshakeErrors().first().errorString()),
             true);
        return;
    }
    const QByteArray fingerprint = cert.digest(QCryptographicHash::Sha256);
    auto record = m_trust.certificate(fingerprint);
    if (!record) {
        // The trust list could not be read (out of file handles, a lock held too long): the
        // coordinator's trouble, not the worker's; it tries again later.
        drop(id, QStringLiteral("cannot check the certificate now: %1").arg(record.error()), false, true);
        return;
    }
    if (!record->has_value()) {
        drop(id, QStringLiteral("presented certificate %1, which this coordinator has no record of issuing")
                     .arg(QString::fromLatin1(fingerprint.toHex().left(16))),
             true);
        return;
    }
    if ((*record)->revoked()) {
        drop(id, QStringLiteral("presented the certificate of worker '%1', revoked at %2 (%3)")
                     .arg((*record)->workerName,
                          QDateTime::fromMSecsSinceEpoch((*record)->revokedMs, Qt::UTC).toString(Qt::ISODate),
                          (*record)->revokeReason),
             true);
        return;
    }
    c.authenticated = true;
    c.peer = PeerInfo{id, fingerprint, (*record)->workerName, (*record)->workerId, c.address};
}

void CoordinatorEndpoint::onReadyRead(qint64 id)
{
    auto it = m_connections.find(id);
    if (it == m_connections.end())
        return;
    Connection &c = *it->second;
    c.reader.feed(c.socket->readAll());
    c.stallTimer->start();
    for (;;) {
        auto message = c.reader.next();
        if (!message) {
            drop(id, message.error(), false);
            return;
        }
        if (!message->has_value())
            return;
        handle(c, std::move(**message));
        if (!m_connections.count(id))
            return; // handling closed it
    }
}

void CoordinatorEndpoint::handle(Connection &c, Message message)
{
    const qint64 id = c.id;
    if (!sentByWorkers(message.type)) {
        drop(id, QStringLiteral("sent a %1 message, which only a coordinator sends").arg(describe(message.type)), false);
        return;
    }
    if (message.type == MessageType::Error) {
        drop(id, QStringLiteral("the worker reported an error: %1")
                     .arg(message.header.value(QStringLiteral("reason")).toString()),
             false);
        return;
    }
    if (!c.authenticated) {
        if (message.type == MessageType::Redeem) {
            enroll(c, message);
            return;
        }
        drop(id, QStringLiteral("sent %1 without a client certificate: a worker joins with a token first, then "
                                "connects with the certificate it received")
                     .arg(describe(message.type)),
             true);
        return;
    }
    if (!c.helloDone) {
        if (message.type != MessageType::Hello) {
            drop(id, QStringLiteral("sent %1 before Hello").arg(describe(message.type)), false);
            return;
        }
        c.helloDone = true;
        c.handshakeTimer->stop();
        QString name = message.header.value(QStringLiteral("name")).toString().left(kMaxName);
        if (!name.isEmpty())
            c.peer.workerName = name;
        Q_EMIT helloReceived(c.peer, message.header);
        return;
    }
    if (message.type == MessageType::Hello || message.type == MessageType::Redeem) {
        drop(id, QStringLiteral("sent %1 twice").arg(describe(message.type)), false);
        return;
    }
    Q_EMIT messageReceived(id, message);
}

void CoordinatorEndpoint::enroll(Connection &c, const Message &message)
{
    const QByteArray tokenId = message.header.value(QStringLiteral("token_id")).toByteArray();
    const QByteArray secret = message.header.value(QStringLiteral("secret")).toByteArray();
    const QString name = message.header.value(QStringLiteral("name")).toString();
    if (name.isEmpty() || name.size() > kMaxName) {
        drop(c.id, QStringLiteral("tried to join without a worker name of 1 to %1 characters").arg(kMaxName), true);
        return;
    }
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    // A malformed request must not cost the token a use: sign first, then redeem.
    auto cert = signCertificateRequest(m_identity.ca, message.payload, name, kWorkerCertificateDays);
    if (!cert) {
        drop(c.id, QStringLiteral("join refused: %1").arg(cert.error()), true);
        return;
    }
    if (auto redeemed = m_trust.redeem(tokenId, secret, now); !redeemed) {
        drop(c.id, QStringLiteral("join refused: %1").arg(redeemed.error()), true);
        return;
    }
    const QByteArray fingerprint = certificateFingerprint(*cert);
    if (auto added = m_trust.addCertificate(CertificateRecord{fingerprint, name, 0, now, 0, {}}); !added) {
        drop(c.id, added.error(), true);
        return;
    }
    qCInfo(lcNet).noquote() << "enrolled worker" << name << "from" << c.address << "certificate"
                            << QString::fromLatin1(fingerprint.toHex().left(16));
    c.socket->write(encodeMessage(MessageType::Enrolled,
                                  QCborMap{{QStringLiteral("name"), name},
                                           {QStringLiteral("fingerprint"), fingerprint}},
                                  *cert));
    c.socket->disconnectFromHost();
}

void CoordinatorEndpoint::send(qint64 connectionId, MessageType type, const QCborMap &header, const QByteArray &payload)
{
    const auto it = m_connections.find(connectionId);
    if (it == m_connections.end() || !it->second->socket)
        return;
    it->second->socket->write(encodeMessage(type, header, payload));
}

void CoordinatorEndpoint::close(qint64 connectionId, const QString &reason, bool fatal, bool error)
{
    drop(connectionId, reason, fatal, error);
}

void CoordinatorEndpoint::drop(qint64 id, const QString &reason, bool fatal, bool error)
{
    const auto it = m_connections.find(id);
    if (it == m_connections.end())
        return;
    std::unique_ptr<Connection> c = std::move(it->second);
    m_connections.erase(it);
    const bool refusedBeforeHello = !c->helloDone;
    const QString who = c->peer.workerName.isEmpty() ? c->address
                                                     : QStringLiteral("%1 (worker '%2')").arg(c->address, c->peer.workerName);
    if (error)
        qCWarning(lcNet).noquote() << "closing connection from" << who << "-" << reason;
    else
        qCInfo(lcNet).noquote() << "closing connection from" << who << "-" << reason;
    if (QSslSocket *socket = c->socket) {
        // The Error must leave before the socket goes: close once the bytes are written (or
        // after a few seconds if the peer does not read them), and only then delete it.
        socket->disconnect(this);
        connect(socket, &QSslSocket::disconnected, socket, &QObject::deleteLater);
        QTimer::singleShot(5000, socket, [socket] {
            socket->abort();
            socket->deleteLater();
        });
        if (socket->state() == QAbstractSocket::ConnectedState && socket->isEncrypted())
            socket->write(encodeMessage(MessageType::Error, QCborMap{{QStringLiteral("reason"), reason},
                                                                     {QStringLiteral("fatal"), fatal}}));
        socket->flush();
        socket->disconnectFromHost();
    }
    if (refusedBeforeHello)
        Q_EMIT refused(c->address, reason);
    else
        Q_EMIT connectionClosed(id, reason);
}

void CoordinatorEndpoint::checkRevocations()
{
    if (m_connections.empty())
        return;
    auto certificates = m_trust.certificates();
    if (!certificates)
        return;
    std::vector<std::pair<qint64, QString>> revoked;
    for (const auto &[id, c] : m_connections) {
        if (!c->authenticated)
            continue;
        for (const auto &record : *certificates)
            if (record.fingerprint == c->peer.fingerprint && record.revoked())
                revoked.emplace_back(id, record.revokeReason);
    }
    for (const auto &[id, reason] : revoked)
        drop(id, QStringLiteral("the worker's certificate was revoked (%1)").arg(reason), true);
}

} // namespace flotilla::net
