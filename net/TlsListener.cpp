#include "net/TlsListener.h"

#include "common/LogCategories.h"

#include <QDateTime>

#ifdef Q_OS_WIN
#include <winsock2.h>
#else
#include <unistd.h>
#endif

namespace flotilla::net {

namespace {

constexpr int kWorkerCertificateDays = 365;
constexpr qsizetype kMaxName = 64;
// Refusals logged one by one in each window; the rest are counted in one line.
constexpr int kLogWindowMs = 10000;
constexpr int kLoggedPerWindow = 50;
constexpr char kTlsHandshakeRecord = 0x16;
// How much may wait in a connection's socket before pump() hands it the next message.
constexpr qsizetype kSocketWindow = 64 * 1024;

QString peerAddress(const TlsSocket *s)
{
    // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d; say a.b.c.d.
    QHostAddress address = s->peerAddress();
    bool mapped = false;
    const quint32 v4 = address.toIPv4Address(&mapped);
    if (mapped)
        address = QHostAddress(v4);
    return QStringLiteral("%1:%2").arg(address.toString()).arg(s->peerPort());
}

QString seconds(int ms)
{
    return QString::number(ms / 1000.0);
}

// "10 min", "90 s".
QString duration(int ms)
{
    return ms >= 60000 && ms % 60000 == 0 ? QStringLiteral("%1 min").arg(ms / 60000)
                                          : QStringLiteral("%1 s").arg(seconds(ms));
}

void closeDescriptor(qintptr descriptor)
{
#ifdef Q_OS_WIN
    ::closesocket(SOCKET(descriptor));
#else
    ::close(int(descriptor));
#endif
}

// What a worker's (or a person's) connection may send: the message table's W and B types.
bool sentByWorkers(MessageType t)
{
    switch (t) {
#define FLOTILLA_SENT_BY_WORKERS(name, code, dir)                                                                     \
    case MessageType::name:                                                                                           \
        return #dir[0] != 'C';
        FLOTILLA_MESSAGES(FLOTILLA_SENT_BY_WORKERS)
#undef FLOTILLA_SENT_BY_WORKERS
    }
    return false;
}

} // namespace

std::map<MessageType, MessageRate> defaultMessageRates()
{
    // An honest worker asks for work once per subtask or per NoWork retry (at least 250 ms),
    // for a shard once per subtask at most, beats its heart at most every 100 ms; a control
    // center sends a command per click. Bursts cover a fleet's start and a reconnect.
    return {
        {MessageType::Request, {50, 200}},   {MessageType::ShardRequest, {20, 200}},
        {MessageType::Heartbeat, {20, 100}}, {MessageType::Result, {50, 200}},
        {MessageType::HandBack, {50, 200}},  {MessageType::Command, {10, 50}},
        {MessageType::Watch, {1, 10}},       {MessageType::Echo, {20, 100}},
        {MessageType::ModelRequest, {1, 10}},
    };
}

bool TlsListener::Bucket::take(const MessageRate &rate, qint64 nowMs)
{
    if (lastMs < 0)
        tokens = rate.burst;
    else
        tokens = std::min(rate.burst, tokens + double(nowMs - lastMs) * rate.perSecond / 1000.0);
    lastMs = nowMs;
    if (tokens < 1.0)
        return false;
    tokens -= 1.0;
    return true;
}

void AcceptingServer::incomingConnection(qintptr descriptor)
{
    TlsSocket *socket = make ? make(descriptor) : nullptr;
    if (!socket) {
        closeDescriptor(descriptor);
        return;
    }
    pending.emplace_back(socket);
    if (added)
        added();
}

QString TlsListener::sourceOf(const QHostAddress &address)
{
    bool v4 = false;
    const quint32 ipv4 = address.toIPv4Address(&v4);
    if (v4)
        return QHostAddress(ipv4).toString();
    if (address.protocol() == QAbstractSocket::IPv6Protocol) {
        Q_IPV6ADDR bytes = address.toIPv6Address();
        for (int i = 8; i < 16; ++i)
            bytes[i] = 0;
        return QHostAddress(bytes).toString() + QStringLiteral("/64");
    }
    return address.toString();
}

Result<std::unique_ptr<TlsListener>> TlsListener::create(const Options &options)
{
    if (options.handshakeTimeoutMs < 100 || options.maxUnauthenticated < 1 || options.maxUnauthenticatedPerSource < 1
        || options.maxJoinFailuresPerSource < 1 || options.joinFailureWindowMs < 1 || options.listenBacklog < 1)
        return fail(QStringLiteral("the limits on connections before authentication must be positive (and the "
                                   "handshake timeout at least 0.1 s)"));
    bool ratesOk = options.sessions.burst >= 1 && options.sessions.perSecond > 0;
    for (const auto &[type, rate] : options.rates)
        ratesOk = ratesOk && rate.burst >= 1 && rate.perSecond > 0;
    if (!ratesOk || options.maxSessionsPerCertificate < 1 || options.maxBudgetClosings < 1
        || options.budgetWindowMs < 1 || options.maxQueuedBytes < 1)
        return fail(QStringLiteral("the budgets after authentication must be positive (rates at least one message "
                                   "a burst, at least one session per certificate)"));
    auto identity = loadOrCreateCoordinatorIdentity(options.identityDir, options.hostNames);
    if (!identity)
        return identity.takeError();
    std::unique_ptr<TlsListener> e(new TlsListener);
    e->m_options = options;
    e->m_identity = *identity;
    e->m_trust = TrustStore(options.identityDir);
    e->m_trustWatch = TrustStore(options.identityDir);
    // An old trust.json is migrated now, before the first handshake (a fresh folder gets
    // its database with the first token), and the certificates are read into the index.
    if (auto tokens = e->m_trust.tokens(); !tokens)
        return tokens.takeError();
    if (auto loaded = e->refreshCertificates(true); !loaded)
        return loaded.takeError();
    qRegisterMetaType<flotilla::net::PeerInfo>();
    qRegisterMetaType<flotilla::net::Message>();

    // TLS 1.3 and nothing older. Workers without a certificate may connect, but only to
    // redeem a join token: the certificate is asked for, not required.
    TlsContext::Options tls;
    tls.side = TlsContext::Side::Server;
    tls.verify = TlsContext::Verify::Query;
    tls.certificateChainPem = e->m_identity.serverCertificatePem + '\n' + e->m_identity.ca.certificatePem;
    tls.keyPem = e->m_identity.serverKeyPem;
    tls.caPem = e->m_identity.ca.certificatePem;
    auto context = TlsContext::create(tls);
    if (!context)
        return context.takeError();
    e->m_tls = *context;
    e->m_server.setListenBacklogSize(options.listenBacklog);

    TlsListener *self = e.get();
    e->m_server.make = [self](qintptr descriptor) { return self->socketFor(descriptor); };
    // Taken on the next turn of the event loop, after the sockets already there have had
    // theirs.
    e->m_server.added = [self] {
        if (std::exchange(self->m_takeScheduled, true))
            return;
        QMetaObject::invokeMethod(self, &TlsListener::takeAccepted, Qt::QueuedConnection);
    };
    // Qt stops accepting after an error such as running out of file descriptors: free the
    // oldest unauthenticated connection's and start again shortly.
    connect(&e->m_server, &QTcpServer::acceptError, self, [self](QAbstractSocket::SocketError) {
        self->logRefusal(QStringLiteral("cannot accept a connection: %1").arg(self->m_server.errorString()), true);
        if (!self->m_unauthenticated.empty())
            self->drop(*self->m_unauthenticated.begin(),
                       QStringLiteral("closed to make room: the coordinator could not accept new connections (%1)")
                           .arg(self->m_server.errorString()),
                       false);
        QTimer::singleShot(100, self, [self] {
            if (self->m_server.isListening())
                self->m_server.resumeAccepting();
        });
    });
    e->m_clock.start();
    e->m_deadlineTimer.setSingleShot(true);
    connect(&e->m_deadlineTimer, &QTimer::timeout, self, &TlsListener::expireDeadlines);
    // Tokens may be revoked by another process (flotilla revoke): look now and then.
    e->m_revocationTimer.setInterval(options.revocationCheckMs);
    connect(&e->m_revocationTimer, &QTimer::timeout, self, &TlsListener::checkRevocations);
    return e;
}

TlsListener::~TlsListener()
{
    m_server.close(); // and with it the sockets not taken yet
    // abort() emits disconnected at once, whose handler erases from m_connections: take the
    // sockets out first.
    std::vector<QPointer<TlsSocket>> sockets;
    for (auto &[id, c] : m_connections)
        sockets.push_back(c->socket);
    for (auto &socket : m_server.pending)
        sockets.push_back(socket);
    m_server.pending.clear();
    m_connections.clear();
    for (auto &socket : sockets)
        if (socket) {
            socket->disconnect(this);
            socket->abort();
        }
}

Result<void> TlsListener::listen()
{
    if (!m_server.listen(m_options.bindAddress, m_options.port))
        return fail(QStringLiteral("cannot listen on %1:%2: %3")
                        .arg(m_options.bindAddress.toString()).arg(m_options.port).arg(m_server.errorString()));
    m_revocationTimer.start();
    qCInfo(lcNet).noquote() << "listening on" << QStringLiteral("%1:%2").arg(m_options.bindAddress.toString()).arg(port())
                            << "with TLS 1.3; CA fingerprint" << QString::fromLatin1(m_identity.caFingerprint.toHex());
    return {};
}

quint16 TlsListener::port() const
{
    return m_server.serverPort();
}

void TlsListener::setPayloadLimit(MessageType type, std::uint64_t bytes)
{
    m_limits[type] = bytes;
    for (auto &[id, c] : m_connections)
        if (c->authenticated)
            c->reader.assembler().setPayloadLimit(type, bytes);
}

void TlsListener::setPersonPayloadLimit(MessageType type, std::uint64_t bytes)
{
    m_personLimits[type] = bytes;
    for (auto &[id, c] : m_connections)
        if (c->authenticated && isPerson(c->peer.role))
            c->reader.assembler().setPayloadLimit(type, bytes);
}

TlsSocket *TlsListener::socketFor(qintptr descriptor)
{
    auto *socket = new TlsSocket(m_tls, this);
    if (!socket->setSocketDescriptor(descriptor)) {
        logRefusal(QStringLiteral("cannot take an accepted connection: %1").arg(socket->errorString()), true);
        delete socket;
        return nullptr;
    }
    return socket;
}

void TlsListener::takeAccepted()
{
    m_takeScheduled = false;
    std::deque<QPointer<TlsSocket>> accepted = std::exchange(m_server.pending, {});
    for (const QPointer<TlsSocket> &socket : accepted)
        if (socket)
            accept(socket);
}

void TlsListener::accept(TlsSocket *socket)
{
    if (!socket->isConnected()) {
        // Gone before its turn came.
        socket->deleteLater();
        return;
    }
    const QString source = sourceOf(socket->peerAddress());
    makeRoom(source);
    auto c = std::make_unique<Connection>();
    c->id = m_nextId++;
    c->socket = socket;
    c->address = peerAddress(socket);
    c->source = source;
    c->deadline = m_clock.elapsed() + m_options.handshakeTimeoutMs;
    const qint64 id = c->id;
    connect(socket, &QIODevice::readyRead, this, [this, id] { onReadyRead(id); });
    connect(socket, &TlsSocket::encrypted, this, [this, id] { onEncrypted(id); });
    const auto pumpLater = [this, id] {
        if (const auto it = m_connections.find(id); it != m_connections.end())
            pump(*it->second);
    };
    connect(socket, &QIODevice::bytesWritten, this, pumpLater);
    connect(socket, &TlsSocket::errorOccurred, this,
            [this, id](QAbstractSocket::SocketError error) { onHandshakeError(id, error); });
    connect(socket, &TlsSocket::disconnected, this, [this, id] {
        const auto it = m_connections.find(id);
        if (it == m_connections.end())
            return;
        const Stage stage = it->second->stage;
        if (stage == Stage::Tcp || stage == Stage::Handshake) {
            onHandshakeError(id, QAbstractSocket::RemoteHostClosedError);
            return;
        }
        std::unique_ptr<Connection> gone = take(id);
        gone->socket->deleteLater();
        if (stage == Stage::Worker)
            Q_EMIT connectionClosed(id, QStringLiteral("the worker disconnected"));
    });
    m_unauthenticated.insert(id);
    m_unauthenticatedBySource[source].insert(id);
    Connection &conn = *c;
    m_connections[id] = std::move(c);
    if (!m_deadlineTimer.isActive())
        m_deadlineTimer.start(m_options.handshakeTimeoutMs);
    // Bytes that came while it waited for its turn announce no more readyRead.
    if (socket->bytesAvailable() > 0)
        onFirstBytes(conn);
}

void TlsListener::makeRoom(const QString &source)
{
    for (;;) {
        const auto mine = m_unauthenticatedBySource.constFind(source);
        if (mine == m_unauthenticatedBySource.cend() || int(mine->size()) < m_options.maxUnauthenticatedPerSource)
            break;
        drop(*mine->begin(),
             QStringLiteral("made way for a newer connection from %1, which already held %2 connections that had not "
                            "authenticated (the most one source may hold)")
                 .arg(source)
                 .arg(m_options.maxUnauthenticatedPerSource),
             false);
    }
    while (int(m_unauthenticated.size()) >= m_options.maxUnauthenticated)
        drop(*m_unauthenticated.begin(),
             QStringLiteral("made way for a newer connection: the coordinator already held %1 connections that had not "
                            "authenticated (the most it holds)")
                 .arg(m_options.maxUnauthenticated),
             false);
}

std::unique_ptr<TlsListener::Connection> TlsListener::take(qint64 id)
{
    const auto it = m_connections.find(id);
    if (it == m_connections.end())
        return {};
    std::unique_ptr<Connection> c = std::move(it->second);
    m_connections.erase(it);
    authenticated(*c);
    if (c->authenticated)
        if (const auto budget = m_budgets.find(c->peer.fingerprint); budget != m_budgets.end())
            budget->connections.erase(id);
    return c;
}

void TlsListener::authenticated(const Connection &c)
{
    if (m_unauthenticated.erase(c.id) == 0)
        return;
    const auto mine = m_unauthenticatedBySource.find(c.source);
    if (mine == m_unauthenticatedBySource.end())
        return;
    mine->erase(c.id);
    if (mine->empty())
        m_unauthenticatedBySource.erase(mine);
}

void TlsListener::expireDeadlines()
{
    const qint64 now = m_clock.elapsed();
    while (!m_unauthenticated.empty()) {
        const qint64 id = *m_unauthenticated.begin();
        const Connection &c = *m_connections.at(id);
        if (c.deadline > now) {
            m_deadlineTimer.start(int(c.deadline - now) + 1);
            return;
        }
        const QString limit = seconds(m_options.handshakeTimeoutMs);
        switch (c.stage) {
        case Stage::Tcp:
            drop(id, QStringLiteral("no TLS handshake within %1 s: the peer sent nothing").arg(limit), false);
            break;
        case Stage::Handshake:
            drop(id, QStringLiteral("the TLS handshake did not finish within %1 s").arg(limit), false);
            break;
        default:
            drop(id, QStringLiteral("said neither Hello nor Redeem within %1 s").arg(limit), false);
        }
    }
}

void TlsListener::onFirstBytes(Connection &c)
{
    const QByteArray first = c.socket->peekRaw(8);
    if (first.isEmpty())
        return;
    if (first.front() != kTlsHandshakeRecord) {
        drop(c.id, QStringLiteral("the TLS handshake failed: the peer does not speak TLS (its first bytes: %1)")
                       .arg(QString::fromLatin1(first.toHex(' '))),
             false);
        return;
    }
    // TLS state is made only now: an idle TCP connection costs a socket and little else.
    c.stage = Stage::Handshake;
    c.socket->startServerEncryption();
}

void TlsListener::onHandshakeError(qint64 id, QAbstractSocket::SocketError error)
{
    const auto it = m_connections.find(id);
    if (it == m_connections.end())
        return;
    Connection &c = *it->second;
    if (c.stage != Stage::Tcp && c.stage != Stage::Handshake)
        return; // disconnected() says what happened
    // A joining worker reads the CA off the handshake and hangs up: not an attack.
    if (error == QAbstractSocket::RemoteHostClosedError)
        drop(id, QStringLiteral("the TLS handshake failed: the peer closed the connection during it"), false, false);
    else
        drop(id, QStringLiteral("the TLS handshake failed: %1").arg(c.socket->errorString()), false);
}

void TlsListener::onEncrypted(qint64 id)
{
    const auto it = m_connections.find(id);
    if (it == m_connections.end())
        return;
    Connection &c = *it->second;
    c.stage = Stage::Encrypted;
    // What workers may send: a CSR, weights; nothing else carries a payload.
    for (const MessageType type : kMessageTypes)
        c.reader.assembler().setPayloadLimit(type, 0);
    c.reader.assembler().setPayloadLimit(MessageType::Redeem, 64 * 1024);
    c.stallTimer = new QTimer(c.socket);
    c.stallTimer->setSingleShot(true);
    c.stallTimer->setInterval(m_options.stallTimeoutMs);
    connect(c.stallTimer, &QTimer::timeout, this, [this, id] {
        const auto found = m_connections.find(id);
        if (found == m_connections.end())
            return;
        Connection &conn = *found->second;
        if (conn.reader.pending() > 0 || conn.reader.inTransfer())
            drop(id, QStringLiteral("went silent for %1 s in the middle of a message (%2 bytes of it received)")
                         .arg(seconds(m_options.stallTimeoutMs))
                         .arg(conn.reader.pending()),
                 false);
    });

    const QSslCertificate cert = c.socket->peerCertificate();
    if (cert.isNull())
        return; // an enrolling worker: only Redeem is allowed
    if (!c.socket->verificationError().isEmpty()) {
        drop(id, QStringLiteral("presented a certificate this coordinator did not issue (%1)")
                     .arg(c.socket->verificationError()),
             true);
        return;
    }
    const QByteArray fingerprint = cert.digest(QCryptographicHash::Sha256);
    auto record = certificateRecord(fingerprint);
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
    // An insider's budgets: a barred certificate, new sessions per second, sessions at once.
    CertificateBudget &budget = budgetOf(fingerprint);
    const qint64 now = m_clock.elapsed();
    c.peer = PeerInfo{id, fingerprint, (*record)->workerName, (*record)->workerId, c.address, (*record)->role};
    if (budget.barredUntil > now) {
        drop(id, QStringLiteral("worker '%1' is refused for another %2: its connections were closed %3 times in %4 for "
                                "going over their budgets (the last: %5)")
                     .arg((*record)->workerName, duration(int(budget.barredUntil - now)))
                     .arg(m_options.maxBudgetClosings)
                     .arg(duration(m_options.budgetWindowMs), budget.lastReason),
             false, true, false, budget.barredUntil - now);
        return;
    }
    if (!budget.sessions.take(m_options.sessions, now)) {
        overBudgetClose(c, QStringLiteral("opened more than %1 sessions in a burst (%2 a second on average) under one "
                                          "certificate")
                               .arg(m_options.sessions.burst)
                               .arg(m_options.sessions.perSecond));
        return;
    }
    while (int(budget.connections.size()) >= m_options.maxSessionsPerCertificate)
        drop(*budget.connections.begin(),
             QStringLiteral("made way for a newer session of the same certificate, which already held %1 (the most one "
                            "certificate may hold)")
                 .arg(m_options.maxSessionsPerCertificate),
             false, false);
    budget.connections.insert(id);
    c.authenticated = true;
    // Weights and results only from a certificate this coordinator issued: a connection
    // without one may not even announce them.
    for (const auto &[type, limit] : m_limits)
        c.reader.assembler().setPayloadLimit(type, limit);
    if (isPerson(c.peer.role))
        for (const auto &[type, limit] : m_personLimits)
            c.reader.assembler().setPayloadLimit(type, limit);
}

void TlsListener::onReadyRead(qint64 id)
{
    auto it = m_connections.find(id);
    if (it == m_connections.end())
        return;
    Connection &c = *it->second;
    if (c.overBudget)
        return; // closing: nothing more of its is handled
    if (c.stage == Stage::Tcp) {
        onFirstBytes(c);
        return;
    }
    if (c.stage == Stage::Handshake)
        return; // the TLS layer reads the handshake itself
    c.reader.readFrom(*c.socket);
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
        if (!m_connections.count(id) || c.overBudget)
            return; // handling closed it, or is about to
    }
}

void TlsListener::handle(Connection &c, Message message)
{
    const qint64 id = c.id;
    if (!sentByWorkers(message.type)) {
        drop(id, QStringLiteral("sent a %1 message, which only a coordinator sends").arg(describe(message.type)), false);
        return;
    }
    if (message.type == MessageType::Error) {
        auto error = ErrorMsg::decode(message.header);
        drop(id, error ? QStringLiteral("the worker reported an error: %1").arg(error->reason) : error.error(), false);
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
    if (c.stage != Stage::Worker) {
        if (message.type != MessageType::Hello) {
            drop(id, QStringLiteral("sent %1 before Hello").arg(describe(message.type)), false);
            return;
        }
        auto hello = HelloMsg::decode(message.header);
        if (!hello) {
            drop(id, hello.error(), false);
            return;
        }
        // The certificate names the worker; a Hello may not rename it, or the name on the
        // dashboard and the one `flotilla revoke` matches could be two different machines.
        const QString said = hello->name;
        if (!said.isEmpty() && said != c.peer.workerName) {
            drop(id, QStringLiteral("said Hello as '%1', but its certificate was issued to worker '%2': a worker keeps "
                                    "the name it joined with (start it with --name %2, or join again under the new "
                                    "name with a new token and an empty state folder)")
                         .arg(said.left(kMaxName), c.peer.workerName),
                 true);
            return;
        }
        c.stage = Stage::Worker;
        authenticated(c);
        Q_EMIT helloReceived(c.peer, *hello);
        return;
    }
    if (message.type == MessageType::Hello || message.type == MessageType::Redeem) {
        drop(id, QStringLiteral("sent %1 twice").arg(describe(message.type)), false);
        return;
    }
    if (const auto rate = m_options.rates.find(message.type); rate != m_options.rates.end()) {
        CertificateBudget &budget = budgetOf(c.peer.fingerprint);
        if (!budget.messages[message.type].take(rate->second, m_clock.elapsed())) {
            overBudgetClose(c, QStringLiteral("sent more than %1 %2 messages in a burst (%3 a second on average)")
                                   .arg(rate->second.burst)
                                   .arg(describe(message.type))
                                   .arg(rate->second.perSecond));
            return;
        }
    }
    Q_EMIT messageReceived(id, message);
}

qint64 TlsListener::joinBlockedMs(const QString &source)
{
    const auto it = m_joinFailures.find(source);
    if (it == m_joinFailures.end())
        return 0;
    const qint64 now = m_clock.elapsed();
    while (!it->empty() && now - it->front() >= m_options.joinFailureWindowMs)
        it->pop_front();
    if (it->empty()) {
        m_joinFailures.erase(it);
        return 0;
    }
    if (int(it->size()) < m_options.maxJoinFailuresPerSource)
        return 0;
    return it->front() + m_options.joinFailureWindowMs - now;
}

void TlsListener::joinFailed(const QString &source)
{
    // Many sources that failed once each: forget those whose window has passed.
    if (m_joinFailures.size() > 100000) {
        const qint64 now = m_clock.elapsed();
        for (auto it = m_joinFailures.begin(); it != m_joinFailures.end();)
            it = now - it->back() >= m_options.joinFailureWindowMs ? m_joinFailures.erase(it) : std::next(it);
    }
    m_joinFailures[source].push_back(m_clock.elapsed());
}

void TlsListener::enroll(Connection &c, const Message &message)
{
    // Token guessing: a source that keeps failing is refused before anything is checked.
    if (const qint64 waitMs = joinBlockedMs(c.source); waitMs > 0) {
        drop(c.id, QStringLiteral("join refused: %1 failed join attempts from %2 in the last %3; try again in %4 s")
                       .arg(m_options.maxJoinFailuresPerSource)
                       .arg(c.source, duration(m_options.joinFailureWindowMs))
                       .arg((waitMs + 999) / 1000),
             false);
        return;
    }
    auto redeem = RedeemMsg::decode(message.header);
    if (!redeem) {
        joinFailed(c.source);
        drop(c.id, QStringLiteral("join refused: %1").arg(redeem.error()), true);
        return;
    }
    const QString name = redeem->name;
    if (name.isEmpty() || name.size() > kMaxName) {
        joinFailed(c.source);
        drop(c.id, QStringLiteral("tried to join without a worker name of 1 to %1 characters").arg(kMaxName), true);
        return;
    }
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    // A person's name is who owns jobs on the fleet: one certificate at a time may hold it,
    // checked before the token pays for another (the old one revoked, the name is free).
    if (auto token = m_trust.token(redeem->tokenId); token && token->has_value() && isPerson((*token)->role)) {
        auto certificates = m_trust.certificates();
        if (!certificates) {
            drop(c.id, QStringLiteral("cannot check the name now: %1").arg(certificates.error()), false, true);
            return;
        }
        for (const CertificateRecord &held : *certificates)
            if (held.workerName == name && !held.revoked()) {
                joinFailed(c.source);
                drop(c.id,
                     QStringLiteral("join refused: the name '%1' belongs to another certificate (a %2's); enrol under "
                                    "another name, or have an operator revoke the old one (flotilla revoke %1)")
                         .arg(name, describe(held.role)),
                     true);
                return;
            }
    }
    // A malformed request must not cost the token a use: sign first, then redeem.
    auto cert = signCertificateRequest(m_identity.ca, message.payload, name, kWorkerCertificateDays);
    if (!cert) {
        joinFailed(c.source);
        drop(c.id, QStringLiteral("join refused: %1").arg(cert.error()), true);
        return;
    }
    auto redeemed = m_trust.redeem(redeem->tokenId, redeem->secret, now);
    if (!redeemed) {
        joinFailed(c.source);
        drop(c.id, QStringLiteral("join refused: %1").arg(redeemed.error()), true);
        return;
    }
    const QByteArray fingerprint = certificateFingerprint(*cert);
    const CertificateRecord record{fingerprint, name, 0, now, 0, {}, *redeemed};
    if (auto added = m_trust.addCertificate(record); !added) {
        drop(c.id, added.error(), true);
        return;
    }
    m_certificates.insert(fingerprint, record);
    qCInfo(lcEnrolment).noquote() << "enrolled" << describe(*redeemed) << name << "from" << c.address << "certificate"
                            << QString::fromLatin1(fingerprint.toHex().left(16));
    // Its work here is done: it hangs up and comes back with the certificate.
    authenticated(c);
    c.outbox.push_back(std::make_unique<OutgoingMessage>(EnrolledMsg::type, EnrolledMsg{name, fingerprint}.encode(), *cert));
    flushOutbox(c); // all of it in the socket before the hang-up
    c.socket->disconnectFromHost();
}

void TlsListener::send(qint64 connectionId, MessageType type, const QCborMap &header, const QByteArray &payload)
{
    const auto it = m_connections.find(connectionId);
    if (it == m_connections.end() || !it->second->socket)
        return;
    Connection &c = *it->second;
    if (c.overBudget)
        return;
    auto message = std::make_unique<OutgoingMessage>(type, header, payload);
    const qint64 size = message->remaining();
    // The backlog is what counts: one message larger than the limit (a big shard) may go
    // to a peer that has read what it was sent before.
    if (c.authenticated && queuedBytes(c) > 0 && queuedBytes(c) + size > queueLimit(c)) {
        const QString reason = QStringLiteral("does not read what it is sent: %1 MiB were waiting for it and %2 more "
                                              "were to be queued (the most is %3 MiB)")
                                   .arg(double(queuedBytes(c)) / double(1 << 20), 0, 'f', 1)
                                   .arg(double(size) / double(1 << 20), 0, 'f', 1)
                                   .arg(double(queueLimit(c)) / double(1 << 20), 0, 'f', 1);
        // Closed on the next turn of the event loop, not here: the owner may be sending to
        // each of its connections in a loop that closing one would disturb.
        c.overBudget = true;
        QMetaObject::invokeMethod(
            this,
            [this, id = c.id, reason] {
                if (const auto found = m_connections.find(id); found != m_connections.end())
                    overBudgetClose(*found->second, reason);
            },
            Qt::QueuedConnection);
        return;
    }
    c.outboxBytes += size;
    c.outbox.push_back(std::move(message));
    pump(c);
}

qint64 TlsListener::queuedBytes(const Connection &c) const
{
    return c.outboxBytes + (c.socket ? c.socket->bytesToWrite() : 0);
}

qint64 TlsListener::queueLimit(const Connection &c) const
{
    std::uint64_t largest = 0;
    for (const auto &[type, limit] : m_limits)
        largest = std::max(largest, limit);
    // A person's download (a job's run folder) is about as large as what it may upload.
    if (isPerson(c.peer.role))
        for (const auto &[type, limit] : m_personLimits)
            largest = std::max(largest, limit);
    return std::max<qint64>(m_options.maxQueuedBytes, 3 * qint64(largest) + (1 << 20));
}

qint64 TlsListener::pendingBytes(qint64 connectionId) const
{
    const auto it = m_connections.find(connectionId);
    if (it == m_connections.end())
        return 0;
    return queuedBytes(*it->second);
}

void TlsListener::pump(Connection &c)
{
    TlsSocket *socket = c.socket;
    if (!socket)
        return;
    while (!c.outbox.empty() && socket->bytesToWrite() < kSocketWindow) {
        std::unique_ptr<OutgoingMessage> next = std::move(c.outbox.front());
        c.outbox.pop_front();
        c.outboxBytes -= next->remaining();
        socket->send(std::move(next));
    }
}

void TlsListener::flushOutbox(Connection &c)
{
    if (!c.socket)
        return;
    // Taken out first: the socket's bytesWritten pumps the outbox again.
    std::deque<std::unique_ptr<OutgoingMessage>> all = std::exchange(c.outbox, {});
    c.outboxBytes = 0;
    for (auto &message : all)
        c.socket->send(std::move(message));
}

void TlsListener::close(qint64 connectionId, const QString &reason, bool fatal, bool error)
{
    drop(connectionId, reason, fatal, error);
}

void TlsListener::drop(qint64 id, const QString &reason, bool fatal, bool error, bool throttled, qint64 retryAfterMs)
{
    std::unique_ptr<Connection> c = take(id);
    if (!c)
        return;
    const bool refusedBeforeHello = c->stage != Stage::Worker;
    const QString who = c->peer.workerName.isEmpty() ? c->address
                                                     : QStringLiteral("%1 (worker '%2')").arg(c->address, c->peer.workerName);
    const QString line = QStringLiteral("closing connection from %1 - %2").arg(who, reason);
    if (refusedBeforeHello || throttled)
        logRefusal(line, error);
    else if (error)
        qCWarning(lcNet).noquote() << line;
    else
        qCInfo(lcNet).noquote() << line;
    if (TlsSocket *socket = c->socket) {
        socket->disconnect(this);
        if (!socket->isEncrypted()) {
            // Nothing can be said before TLS: close it (we may be inside one of its TLS calls).
            socket->abortLater();
        } else {
            // The Error must leave before the socket goes: close once the bytes are written
            // (or after a few seconds if the peer does not read them), and only then delete it.
            connect(socket, &TlsSocket::disconnected, socket, &QObject::deleteLater);
            QTimer::singleShot(5000, socket, [socket] {
                socket->abort();
                socket->deleteLater();
            });
            // A message already begun ends before the Error; what was not begun is moot for
            // a connection being closed, and does not hold the Error back.
            c->outbox.clear();
            c->outboxBytes = 0;
            socket->discardUnstarted();
            socket->send(std::make_unique<OutgoingMessage>(ErrorMsg::type, ErrorMsg{reason, fatal, retryAfterMs}.encode()));
            socket->disconnectFromHost();
        }
    }
    if (refusedBeforeHello)
        Q_EMIT refused(c->address, reason);
    else
        Q_EMIT connectionClosed(id, reason);
}

void TlsListener::logRefusal(const QString &line, bool warning)
{
    if (m_clock.elapsed() - m_logWindowStart >= kLogWindowMs)
        flushRefusalLog();
    if (m_loggedInWindow < kLoggedPerWindow) {
        ++m_loggedInWindow;
        if (warning)
            qCWarning(lcNet).noquote() << line;
        else
            qCInfo(lcNet).noquote() << line;
        return;
    }
    // The count is told when the window ends.
    if (m_unloggedInWindow++ == 0)
        QTimer::singleShot(int(m_logWindowStart + kLogWindowMs - m_clock.elapsed()) + 1, this,
                           &TlsListener::flushRefusalLog);
}

void TlsListener::flushRefusalLog()
{
    const qint64 now = m_clock.elapsed();
    if (m_unloggedInWindow > 0)
        qCWarning(lcNet).noquote() << m_unloggedInWindow
                                   << "more connections were refused or closed (before authenticating, or over a budget) in the last"
                                   << (now - m_logWindowStart + 500) / 1000 << "s (not logged one by one)";
    m_logWindowStart = now;
    m_loggedInWindow = 0;
    m_unloggedInWindow = 0;
}

TlsListener::CertificateBudget &TlsListener::budgetOf(const QByteArray &fingerprint)
{
    CertificateBudget &budget = m_budgets[fingerprint];
    const qint64 now = m_clock.elapsed();
    budget.lastUsedMs = now;
    while (!budget.closings.empty() && now - budget.closings.front() >= m_options.budgetWindowMs)
        budget.closings.pop_front();
    if (budget.barredUntil != 0 && budget.barredUntil <= now)
        budget.barredUntil = 0;
    return budget;
}

void TlsListener::overBudgetClose(Connection &c, const QString &reason)
{
    const qint64 id = c.id;
    const PeerInfo peer = c.peer;
    CertificateBudget &budget = budgetOf(peer.fingerprint);
    const qint64 now = m_clock.elapsed();
    budget.closings.push_back(now);
    budget.lastReason = reason;
    budget.workerId = peer.workerId;
    budget.workerName = peer.workerName;
    const bool barred = budget.barredUntil == 0 && int(budget.closings.size()) >= m_options.maxBudgetClosings;
    QString line = QStringLiteral("went over its budget: %1").arg(reason);
    if (barred) {
        budget.barredUntil = now + m_options.budgetWindowMs;
        line += QStringLiteral("; closed %1 times in %2 for budgets, its certificate is refused for %2")
                    .arg(budget.closings.size())
                    .arg(duration(m_options.budgetWindowMs));
        if (m_options.revokeAbusers) {
            const auto revoked = m_trust.revoke(QString::fromLatin1(peer.fingerprint.toHex()),
                                                QStringLiteral("went over its budgets %1 times: %2")
                                                    .arg(budget.closings.size())
                                                    .arg(reason),
                                                QDateTime::currentMSecsSinceEpoch());
            line += revoked ? QStringLiteral(" and revoked") : QStringLiteral(" (cannot revoke it: %1)").arg(revoked.error());
        }
    }
    Q_EMIT overBudget(peer, reason, barred);
    // The peer is told when to come back: a worker with a bug that storms waits longer after
    // each closing (30 s, 1 min, ...) instead of reconnecting into the next closing at once.
    const qint64 retryAfter = barred ? budget.barredUntil - now
                                     : std::min<qint64>(m_options.budgetWindowMs, 30000 * qint64(budget.closings.size()));
    // Logged within the refusal budget: a storm of sessions under one certificate must not
    // become a storm of log lines.
    drop(id, line, false, true, true, retryAfter);
    if (barred) {
        // The bar is the certificate's, not this session's: its other sessions go too.
        const std::set<qint64> others = budgetOf(peer.fingerprint).connections;
        for (const qint64 other : others)
            drop(other, QStringLiteral("its certificate is refused for %1: %2").arg(duration(m_options.budgetWindowMs), line),
                 false, true, true, retryAfter);
    }
}

std::vector<TlsListener::Barred> TlsListener::barred() const
{
    const qint64 now = m_clock.elapsed();
    std::vector<Barred> out;
    for (auto it = m_budgets.begin(); it != m_budgets.end(); ++it)
        if (it.value().barredUntil > now)
            out.push_back(Barred{it.value().workerId, it.value().workerName, it.value().barredUntil - now,
                                 it.value().lastReason});
    return out;
}

void TlsListener::forgive(qint64 workerId)
{
    for (auto it = m_budgets.begin(); it != m_budgets.end(); ++it)
        if (it.value().workerId == workerId && workerId != 0) {
            it.value().barredUntil = 0;
            it.value().closings.clear();
        }
}

void TlsListener::forgetIdleBudgets()
{
    const qint64 now = m_clock.elapsed();
    for (auto it = m_budgets.begin(); it != m_budgets.end();) {
        const CertificateBudget &b = it.value();
        const bool idle = b.connections.empty() && b.barredUntil <= now && now - b.lastUsedMs >= m_options.budgetWindowMs;
        it = idle ? m_budgets.erase(it) : std::next(it);
    }
}

} // namespace flotilla::net
