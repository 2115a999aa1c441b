#pragma once
// The fixture of the endpoint tests (tst_listener, tst_listenerfloods): a fresh coordinator
// endpoint on loopback for every test, with a steady worker joined to it that must keep
// talking to the coordinator through whatever the test does; raw TLS and TCP clients; the
// records of what the endpoint refused and closed; and the macros that check them.

#include "TestFiles.h"
#include "common/ProcessSetup.h"
#include "net/TlsListener.h"
#include "net/WorkerClient.h"

#include <QtTest>

#include <QCborMap>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtEndian>

#include <memory>

#ifdef Q_OS_UNIX
#include <sys/stat.h>
#endif
#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace flotilla;
using namespace flotilla::net;
using namespace flotilla::test;

namespace listener_fixture {


inline const QString kLocalHost = QStringLiteral("127.0.0.1");



inline qint64 nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

inline QByteArray cbor(const QCborMap &map)
{
    return map.toCborValue().toCbor();
}

// 127.0.0.n: one of many source addresses on loopback.
inline QHostAddress loopback(int n)
{
    return QHostAddress(QHostAddress(kLocalHost).toIPv4Address() - 1 + quint32(n));
}

// A TLS record that announces 512 bytes of handshake and brings only the start of a
// ClientHello: the peer then waits for the rest.
inline QByteArray partialClientHello()
{
    return QByteArray::fromHex("1603010200010001fc0303") + QByteArray(32, '\x5a');
}

// A Redeem with a real certificate request.
inline QByteArray redeem(const QByteArray &tokenId, const QByteArray &secret, const QString &name)
{
    return encodeMessage(MessageType::Redeem,
        QCborMap { { QStringLiteral("token_id"), tokenId }, { QStringLiteral("secret"), secret },
            { QStringLiteral("name"), name } },
        createCertificateRequest(generatePrivateKeyPem().value(), name).value());
}

// A frame whose 12-byte header announces other lengths than what follows.
inline QByteArray frameAnnouncing(MessageType type, quint32 headerLength, quint32 payloadLength)
{
    QByteArray frame = encodeFrame(kProtocolVersion, std::uint8_t(type), QByteArray(), QByteArray());
    qToBigEndian(headerLength, frame.data() + 4);
    qToBigEndian(payloadLength, frame.data() + 8);
    return frame;
}

struct Credentials
{
    QByteArray certificatePem;
    QByteArray keyPem;
    QByteArray fingerprint;
};

// A client key and certificate signed by ca; recorded in trust when it is given.
inline Result<Credentials> issueClient(const CertificateAuthority &ca, const QString &name, TrustStore *trust)
{
    auto key = generatePrivateKeyPem();
    if (!key)
        return key.takeError();
    auto csr = createCertificateRequest(*key, name);
    if (!csr)
        return csr.takeError();
    auto cert = signCertificateRequest(ca, *csr, name, 30);
    if (!cert)
        return cert.takeError();
    Credentials c { *cert, *key, certificateFingerprint(*cert) };
    if (trust) {
        CertificateRecord record;
        record.fingerprint = c.fingerprint;
        record.workerName = name;
        record.issuedMs = nowMs();
        if (auto added = trust->addCertificate(record); !added)
            return added.takeError();
    }
    return c;
}

// A hand-driven TLS (or plain TCP) client that records everything it receives.
class RawClient
{
public:
    // caPem empty: a plain TCP socket that never starts TLS.
    RawClient(const QByteArray &caPem, const QByteArray &certPem = {}, const QByteArray &keyPem = {},
        QSsl::SslProtocol protocol = QSsl::TlsV1_3)
        : m_tls(!caPem.isEmpty())
    {
        if (m_tls) {
            QSslConfiguration config = QSslConfiguration::defaultConfiguration();
            config.setProtocol(protocol);
            config.setCaCertificates({ QSslCertificate(caPem) });
            config.setPeerVerifyMode(QSslSocket::VerifyPeer);
            if (!certPem.isEmpty()) {
                config.setLocalCertificate(QSslCertificate(certPem));
                config.setPrivateKey(QSslKey(keyPem, QSsl::Ec));
            }
            m_socket.setSslConfiguration(config);
        }
        QObject::connect(&m_socket, &QIODevice::readyRead, &m_socket, [this] { m_received += m_socket.readAll(); });
        QObject::connect(&m_socket, &QAbstractSocket::errorOccurred, &m_socket,
            [this](QAbstractSocket::SocketError e) { m_errors << e; });
    }

    // from: a loopback address to connect from (on Linux every 127.x.y.z reaches loopback),
    // to play many machines.
    void connectTo(quint16 port, const QHostAddress &from = {})
    {
        if (!from.isNull())
            m_socket.bind(from);
        if (m_tls)
            m_socket.connectToHostEncrypted(kLocalHost, port);
        else
            m_socket.connectToHost(kLocalHost, port);
    }
    bool closed() const { return m_socket.state() == QAbstractSocket::UnconnectedState; }
    void send(const QByteArray &bytes)
    {
        m_socket.write(bytes);
        m_socket.flush();
    }

    // The messages received so far (stops at the first malformed byte).
    QList<Message> messages() const
    {
        QList<Message> out;
        MessageReader reader;
        reader.feed(m_received);
        for (;;) {
            auto m = reader.next();
            if (!m || !m->has_value())
                return out;
            out << **m;
        }
    }
    // The first Error message's header, or an empty map.
    QCborMap error() const
    {
        for (const Message &m : messages())
            if (m.type == MessageType::Error)
                return m.header;
        return {};
    }
    bool received(MessageType type) const
    {
        for (const Message &m : messages())
            if (m.type == type)
                return true;
        return false;
    }

    bool m_tls;
    // Declared before the socket, which may still signal while it is destroyed.
    QByteArray m_received;
    QList<QAbstractSocket::SocketError> m_errors;
    QSslSocket m_socket;
};

struct Refusal
{
    QString address;
    QString reason;
};

struct Closure
{
    qint64 id = 0;
    QString reason;
};

} // namespace listener_fixture

using namespace listener_fixture;


// Evaluates result once (QVERIFY2 also evaluates its description on success).
#define REQUIRE_OK(result)                                                                                             \
    do {                                                                                                               \
        const auto &r_ = (result);                                                                                     \
        QVERIFY2(r_.ok(), qPrintable(r_.error()));                                                                     \
    } while (false)

#define REQUIRE_ERROR(result, word)                                                                                    \
    do {                                                                                                               \
        const auto &r_ = (result);                                                                                     \
        QVERIFY2(!r_.ok(), "expected an error");                                                                       \
        QVERIFY2(r_.error().contains(word), qPrintable(QStringLiteral("'%1' not in: %2").arg(word, r_.error())));      \
    } while (false)

// The steady worker still talks to the coordinator on its first connection.
#define VERIFY_FLEET()                                                                                                 \
    do {                                                                                                               \
        const QString why_ = fleetProblem();                                                                           \
        QVERIFY2(why_.isEmpty(), qPrintable(why_));                                                                    \
    } while (false)

// The same, while other connections are expected to be open.
#define VERIFY_FLEET_EXCEPT_COUNT()                                                                                    \
    do {                                                                                                               \
        const QString why_ = fleetProblem(false);                                                                      \
        QVERIFY2(why_.isEmpty(), qPrintable(why_));                                                                    \
    } while (false)

// Waits for the endpoint to refuse a connection with a reason containing `words`.
#define VERIFY_REFUSED(words, timeoutMs)                                                                               \
    do {                                                                                                               \
        const QString words_ = (words);                                                                                \
        QTRY_VERIFY2_WITH_TIMEOUT(!refusalWith(words_).isNull(),                                                       \
            qPrintable(QStringLiteral("no refusal containing '%1'; refusals: %2").arg(words_, refusals())),            \
            timeoutMs);                                                                                                \
    } while (false)

// The client read an Error message whose reason contains `words` (and whose fatal flag is
// `isFatal`).
#define VERIFY_CLIENT_READ_ERROR(client, words, isFatal)                                                               \
    do {                                                                                                               \
        const QCborMap error_ = (client).error();                                                                      \
        QVERIFY2(!error_.isEmpty(),                                                                                    \
            qPrintable(QStringLiteral("the closed connection never received an Error message (%1 bytes received: %2)") \
                           .arg((client).m_received.size())                                                            \
                           .arg(QString::fromLatin1((client).m_received.left(48).toHex(' ')))));                       \
        const QString reason_ = error_.value(QStringLiteral("reason")).toString();                                     \
        QVERIFY2(reason_.contains(words), qPrintable(reason_));                                                        \
        QCOMPARE(error_.value(QStringLiteral("fatal")).toBool(), isFatal);                                             \
    } while (false)

class ListenerFixture : public QObject
{
protected:
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<TlsListener> m_listener;
    CoordinatorIdentity m_identity;
    QList<Refusal> m_refused;
    QList<Closure> m_closed;
    QList<PeerInfo> m_hellos;
    QList<QPair<qint64, Message>> m_messages;

    std::unique_ptr<WorkerClient> m_steady;
    qint64 m_steadyId = 0;
    QList<Message> m_steadyReceived;
    int m_steadyDisconnects = 0;
    int m_seq = 0;

    TlsListener::Options options(const QString &dir) const
    {
        TlsListener::Options o;
        o.identityDir = dir;
        o.bindAddress = QHostAddress(kLocalHost);
        o.port = 0;
        o.hostNames = QStringList { kLocalHost, QStringLiteral("localhost") };
        o.handshakeTimeoutMs = 2000;
        o.stallTimeoutMs = 500;
        o.revocationCheckMs = 200;
        // The tests of the bounds before authentication hold their floods past the usual
        // deadline: what frees room there is the bound itself. So does the test that holds
        // connections between TLS and Hello while the endpoint is destroyed.
        const QByteArray test = QTest::currentTestFunction();
        if (test == "idleConnectionsDoNotLockTheCoordinatorOut" || test == "stalledFloodMakesWayForWorkers"
            || test == "perSourceLimitClosesThatSourcesOldest" || test == "oldestUnauthenticatedMakesWayWhenFull"
            || test == "destroyingTheEndpointWithLiveConnections")
            o.handshakeTimeoutMs = 60000;
        if (test == "stalledFloodMakesWayForWorkers")
            o.maxUnauthenticated = 50;
        if (test == "perSourceLimitClosesThatSourcesOldest")
            o.maxUnauthenticatedPerSource = 5;
        if (test == "oldestUnauthenticatedMakesWayWhenFull")
            o.maxUnauthenticated = 10;
        if (test == "aPeerThatDoesNotReadIsClosed" || test == "oneMessageLargerThanTheBudgetReachesAReader")
            o.maxQueuedBytes = 4 << 20;
        if (test == "failedJoinsAreLimitedPerSource") {
            o.maxJoinFailuresPerSource = 3;
            o.joinFailureWindowMs = 3000;
        }
        return o;
    }

    QString stateDir(const QString &name) const { return m_dir->filePath(QStringLiteral("workers/") + name); }

    std::unique_ptr<WorkerClient> newWorker(const QString &name)
    {
        WorkerClient::Options o;
        o.stateDir = stateDir(name);
        o.name = name;
        o.initialBackoffMs = 50;
        o.maxBackoffMs = 500;
        o.stallTimeoutMs = 2000;
        return std::make_unique<WorkerClient>(o);
    }

    Result<JoinToken> token(int uses = 1, qint64 validSeconds = 600, qint64 issuedMs = nowMs())
    {
        return m_listener->trust().issueToken(
            kLocalHost, m_listener->port(), m_listener->caFingerprint(), validSeconds, uses, issuedMs);
    }

    QString refusals() const
    {
        QStringList all;
        for (const Refusal &r : m_refused)
            all << QStringLiteral("[%1] %2").arg(r.address, r.reason);
        return all.join(QLatin1String("; "));
    }
    QString closures() const
    {
        QStringList all;
        for (const Closure &c : m_closed)
            all << QStringLiteral("[%1] %2").arg(c.id).arg(c.reason);
        return all.join(QLatin1String("; "));
    }
    // The first refusal whose reason contains words (a null string when there is none).
    QString refusalWith(const QString &words) const
    {
        for (const Refusal &r : m_refused)
            if (r.reason.contains(words))
                return r.reason;
        return {};
    }
    bool refusedFrom(quint16 localPort, const QString &words, const QHostAddress &from = QHostAddress(kLocalHost)) const
    {
        for (const Refusal &r : m_refused)
            if (r.reason.contains(words) && r.address == QStringLiteral("%1:%2").arg(from.toString()).arg(localPort))
                return true;
        return false;
    }
    int refusalsWith(const QString &words) const
    {
        int n = 0;
        for (const Refusal &r : m_refused)
            n += r.reason.contains(words) ? 1 : 0;
        return n;
    }

    // Starts a worker (joining with the token when there is one, else from its state folder)
    // and returns how many milliseconds it took to be welcomed, or -1 with the reason in why.
    qint64 timeToWelcome(WorkerClient &worker, const std::optional<JoinToken> &joinToken, QString *why)
    {
        QSignalSpy welcomed(&worker, &WorkerClient::welcomed);
        QSignalSpy failed(&worker, &WorkerClient::failed);
        if (auto configured = worker.configure(joinToken); !configured) {
            *why = configured.error();
            return -1;
        }
        QElapsedTimer timer;
        timer.start();
        worker.start({});
        if (!QTest::qWaitFor([&] { return !welcomed.isEmpty() || !failed.isEmpty(); }, 10000)) {
            *why = QStringLiteral("not welcomed within 10 s; refusals: %1").arg(refusals());
            return -1;
        }
        if (!failed.isEmpty()) {
            *why = failed.first().first().toString();
            return -1;
        }
        return timer.elapsed();
    }
    bool refusedAddressIsLoopback(const QString &words) const
    {
        for (const Refusal &r : m_refused)
            if (r.reason.contains(words) && r.address.startsWith(kLocalHost + QLatin1Char(':')))
                return true;
        return false;
    }
    QString closureOf(qint64 id) const
    {
        for (const Closure &c : m_closed)
            if (c.id == id)
                return c.reason;
        return {};
    }
    const PeerInfo *helloFrom(const QString &name) const
    {
        for (const PeerInfo &p : m_hellos)
            if (p.workerName == name)
                return &p;
        return nullptr;
    }

    // Empty when the steady worker, on the connection it opened in init(), can still send a
    // Heartbeat that the coordinator sees and get the coordinator's Ack back, and (checkCount)
    // the endpoint holds no other connection.
    QString fleetProblem(bool checkCount = true)
    {
        if (!m_steady || !m_steady->isConnected())
            return QStringLiteral("the steady worker is no longer connected");
        if (m_steadyDisconnects != 0)
            return QStringLiteral("the steady worker was disconnected during the test");
        if (!closureOf(m_steadyId).isNull())
            return QStringLiteral("the steady worker's connection was closed: ") + closureOf(m_steadyId);
        const int seq = ++m_seq;
        m_steady->send(MessageType::Heartbeat, QCborMap { { QStringLiteral("seq"), seq } });
        const bool seen = QTest::qWaitFor(
            [&] {
                for (const auto &[id, m] : std::as_const(m_messages))
                    if (id == m_steadyId && m.type == MessageType::Heartbeat
                        && m.header.value(QStringLiteral("seq")).toInteger() == seq)
                        return true;
                return false;
            },
            5000);
        if (!seen)
            return QStringLiteral("the coordinator never received the steady worker's Heartbeat %1").arg(seq);
        const bool acked = QTest::qWaitFor(
            [&] {
                for (const Message &m : std::as_const(m_steadyReceived))
                    if (m.type == MessageType::Ack && m.header.value(QStringLiteral("seq")).toInteger() == seq)
                        return true;
                return false;
            },
            5000);
        if (!acked)
            return QStringLiteral("the steady worker never received the Ack for Heartbeat %1").arg(seq);
        if (checkCount && m_listener->connectionCount() != 1)
            return QStringLiteral("the endpoint holds %1 connections; only the steady worker's should be left")
                .arg(m_listener->connectionCount());
        return {};
    }

    // An insider: a valid certificate, spoken to by hand. Connected, and Hello said, when
    // the returned connection id is not 0.
    qint64 insiderHello(RawClient &client, const QString &name, const QHostAddress &from = {})
    {
        client.connectTo(m_listener->port(), from);
        if (!QTest::qWaitFor([&] { return client.m_socket.isEncrypted() || client.closed(); }, 5000)
            || !client.m_socket.isEncrypted())
            return 0;
        client.send(encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), name } }));
        if (!QTest::qWaitFor([&] { return client.received(MessageType::Welcome) || client.closed(); }, 5000))
            return 0;
        qint64 id = 0;
        for (const PeerInfo &p : std::as_const(m_hellos))
            if (p.workerName == name)
                id = p.connectionId; // the newest
        return client.received(MessageType::Welcome) ? id : 0;
    }

    void clearRecords()
    {
        m_refused.clear();
        m_closed.clear();
        m_hellos.clear();
        m_messages.clear();
    }

    void setUpCase()
    {
        QVERIFY2(QSslSocket::supportsSsl(), "Qt has no working TLS backend");
        // Floods of hundreds of connections, both ends in this process.
        QVERIFY2(QByteArray(raiseOpenFileLimit()).isEmpty(), raiseOpenFileLimit());
#ifdef __GLIBC__
        // Freed memory is overwritten (as with MALLOC_PERTURB_), so a use after free
        // crashes here rather than reading stale data that still looks right.
        mallopt(M_PERTURB, 0xa5);
#endif
    }

    // A fresh coordinator for every test, and a steady worker joined to it with a token.
    void setUp()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
        m_refused.clear();
        m_closed.clear();
        m_hellos.clear();
        m_messages.clear();
        m_steadyReceived.clear();
        m_steadyDisconnects = 0;

        const QString identityDir = m_dir->filePath(QStringLiteral("coordinator"));
        auto endpoint = TlsListener::create(options(identityDir));
        REQUIRE_OK(endpoint);
        m_listener = std::move(*endpoint);
        REQUIRE_OK(m_listener->listen());
        QVERIFY(m_listener->port() != 0);
        auto identity = loadOrCreateCoordinatorIdentity(identityDir, options(identityDir).hostNames);
        REQUIRE_OK(identity);
        m_identity = *identity;
        QCOMPARE(m_identity.caFingerprint, m_listener->caFingerprint());

        // The test plays the coordinator's logic: welcome every Hello, ack every Heartbeat.
        connect(m_listener.get(), &TlsListener::refused, this,
            [this](const QString &address, const QString &reason) {
                m_refused << Refusal { address, reason };
            });
        connect(
            m_listener.get(), &TlsListener::connectionClosed, this, [this](qint64 id, const QString &reason) {
                m_closed << Closure { id, reason };
            });
        connect(m_listener.get(), &TlsListener::helloReceived, this,
            [this](const PeerInfo &peer, const HelloMsg &) {
                m_hellos << peer;
                m_listener->send(
                    peer.connectionId, MessageType::Welcome, QCborMap { { QStringLiteral("worker_id"), 1 } });
            });
        connect(
            m_listener.get(), &TlsListener::messageReceived, this, [this](qint64 id, const Message &message) {
                m_messages << qMakePair(id, message);
                if (message.type == MessageType::Heartbeat)
                    m_listener->send(id, MessageType::Ack,
                        QCborMap { { QStringLiteral("seq"), message.header.value(QStringLiteral("seq")) } });
            });

        auto steadyToken = token();
        REQUIRE_OK(steadyToken);
        m_steady = newWorker(QStringLiteral("steady"));
        connect(
            m_steady.get(), &WorkerClient::messageReceived, this, [this](const Message &m) { m_steadyReceived << m; });
        connect(m_steady.get(), &WorkerClient::disconnected, this, [this] { ++m_steadyDisconnects; });
        QSignalSpy welcomed(m_steady.get(), &WorkerClient::welcomed);
        QSignalSpy failed(m_steady.get(), &WorkerClient::failed);
        REQUIRE_OK(m_steady->configure(*steadyToken));
        m_steady->start({});
        QTRY_VERIFY_WITH_TIMEOUT(welcomed.size() == 1 || !failed.isEmpty(), 10000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        const PeerInfo *steady = helloFrom(QStringLiteral("steady"));
        QVERIFY(steady);
        m_steadyId = steady->connectionId;
        // The joining worker's probe and enrollment connections are gone.
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        m_steadyDisconnects = 0;
        VERIFY_FLEET();
        clearRecords();
    }

    // The endpoint is destroyed only once every connection is gone: destroying it with
    // live connections is a test of its own (destroyingTheEndpointWithLiveConnections).
    void tearDown()
    {
        m_steady.reset();
        if (m_listener)
            QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 0, 5000);
        m_listener.reset();
        m_dir.reset();
    }

};
