#pragma once
// The coordinator's side of the network: a TLS 1.3 server that enrolls workers with join
// tokens, accepts only mutual-TLS connections with a certificate it issued and has not
// revoked, turns bytes into messages, and closes any connection that sends something
// malformed — with a logged reason — without disturbing the others.
//
// Enrollment is handled here (token, CSR, certificate); everything a worker says after
// Hello is handed to the owner as messages. Threads: the endpoint and its sockets belong
// to the thread it lives on (the network thread).

#include "Frame.h"
#include "Pki.h"
#include "TrustStore.h"

#include <QHostAddress>
#include <QObject>
#include <QPointer>
#include <QSslServer>
#include <QTimer>

#include <functional>
#include <map>
#include <memory>

class QSslSocket;

namespace flotilla::net {

struct PeerInfo
{
    qint64 connectionId = 0;
    QByteArray fingerprint;
    QString workerName;
    qint64 workerId = 0; // known from an earlier join, else 0
    QString address;
};

// QSslServer that lets the endpoint see every socket from the start: Qt drops a peer that
// sends no TLS handshake at all without a signal, and the endpoint wants to log it.
class ObservedSslServer : public QSslServer
{
public:
    std::function<void(QSslSocket *)> created;

protected:
    void incomingConnection(qintptr descriptor) override;
};

class CoordinatorEndpoint : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString identityDir;               // CA, server key and certificate, trust.json
        QHostAddress bindAddress = QHostAddress::Any;
        quint16 port = 0;                  // 0: any free port
        QStringList hostNames{QStringLiteral("127.0.0.1"), QStringLiteral("localhost")};
        int handshakeTimeoutMs = 10000;    // TLS handshake and enrollment
        int stallTimeoutMs = 15000;        // silence in the middle of a message
        int revocationCheckMs = 2000;
    };

    static Result<std::unique_ptr<CoordinatorEndpoint>> create(const Options &options);
    ~CoordinatorEndpoint() override;

    Result<void> listen();
    quint16 port() const;
    QByteArray caFingerprint() const { return m_identity.caFingerprint; }
    TrustStore &trust() { return m_trust; }
    // The largest payload accepted in a message of this type from workers.
    void setPayloadLimit(MessageType type, std::uint64_t bytes);

    void send(qint64 connectionId, MessageType type, const QCborMap &header, const QByteArray &payload = {});
    // Sends an Error with the reason, logs it (as a warning when error), and closes the
    // connection.
    void close(qint64 connectionId, const QString &reason, bool fatal = false, bool error = true);
    int connectionCount() const { return int(m_connections.size()); }

Q_SIGNALS:
    // A worker connected with a valid certificate and said Hello (header: what it told).
    void helloReceived(const flotilla::net::PeerInfo &peer, const QCborMap &hello);
    void messageReceived(qint64 connectionId, const flotilla::net::Message &message);
    void connectionClosed(qint64 connectionId, const QString &reason);
    // A connection refused before it became a worker's (for logs and tests).
    void refused(const QString &address, const QString &reason);

private:
    struct Connection
    {
        qint64 id = 0;
        QPointer<QSslSocket> socket;
        MessageReader reader;
        QString address;
        bool encrypted = false;
        bool authenticated = false; // presented one of our certificates
        bool helloDone = false;
        PeerInfo peer;
        QTimer *stallTimer = nullptr;
        QTimer *handshakeTimer = nullptr;
    };

    CoordinatorEndpoint() = default;
    void accept(QSslSocket *socket);
    void onEncrypted(qint64 id);
    void onReadyRead(qint64 id);
    void handle(Connection &c, Message message);
    void enroll(Connection &c, const Message &message);
    // fatal: the worker must not come back with the same credentials (it is told so).
    void drop(qint64 id, const QString &reason, bool fatal, bool error = true);
    void checkRevocations();

    Options m_options;
    CoordinatorIdentity m_identity;
    TrustStore m_trust{QString()};
    ObservedSslServer m_server;
    std::map<qint64, std::unique_ptr<Connection>> m_connections;
    std::map<MessageType, std::uint64_t> m_limits;
    qint64 m_nextId = 1;
    QTimer m_revocationTimer;
};

} // namespace flotilla::net

Q_DECLARE_METATYPE(flotilla::net::PeerInfo)
Q_DECLARE_METATYPE(flotilla::net::Message)
