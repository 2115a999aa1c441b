#pragma once
// A worker's side of the network: it joins a coordinator with a token (pinning the CA whose
// fingerprint the token carries, and trading a certificate request for a client
// certificate), then keeps a mutual-TLS connection to it, reconnecting with exponential
// backoff and jitter whenever it drops. It knows nothing of training: messages go in and
// out as they are.
//
// The worker's identity (key, certificate, the coordinator's CA and address) lives in a
// state folder, so a restarted worker comes back as itself without a new token.
// Threads: lives on the thread that created it.

#include "net/Frame.h"
#include "net/Messages.h"
#include "net/TlsSocket.h"
#include "net/TrustStore.h"

#include <QObject>
#include <QPointer>
#include <QSslCertificate>
#include <QTimer>

#include <memory>


namespace flotilla::net {

class WorkerClient : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString stateDir;          // key.pem, cert.pem, ca.pem, coordinator.json
        QString name;              // the worker's name, shown on the coordinator; empty: its certificate's, else this machine's
        int initialBackoffMs = 500;
        int maxBackoffMs = 30000;
        int stallTimeoutMs = 15000;

        // A person's connection (a control center attached from elsewhere, a queue command
        // from this shell): someone waits, so it tries again sooner than a worker does.
        static Options forPerson(const QString &stateDir, const QString &name, int maxBackoffMs)
        {
            Options o;
            o.stateDir = stateDir;
            o.name = name;
            o.initialBackoffMs = 250;
            o.maxBackoffMs = maxBackoffMs;
            return o;
        }
    };

    explicit WorkerClient(Options options, QObject *parent = nullptr);
    ~WorkerClient() override;

    // Uses the identity in the state folder if it belongs to the token's coordinator, else
    // joins with the token. Without a token, the state folder must hold an identity.
    Result<void> configure(const std::optional<JoinToken> &token);
    bool hasIdentity() const { return !m_certificatePem.isEmpty(); }
    // The name it joins or connects under (settled by configure()).
    QString name() const { return m_options.name; }
    QString coordinatorAddress() const { return QStringLiteral("%1:%2").arg(m_host).arg(m_port); }

    // Connects (joining first if needed) and says Hello with these fields on every
    // connection, the protocol version and the worker's name filled in.
    void start(const HelloMsg &hello);
    void stop();
    bool isConnected() const { return m_welcomed; }
    void send(MessageType type, const QCborMap &header, const QByteArray &payload = {});
    template <typename Msg>
    void send(const Msg &message, const QByteArray &payload = {})
    {
        send(Msg::type, message.encode(), payload);
    }
    // Closes the connection and reconnects after the usual backoff: for a message that was
    // framed well but that its reader could not make sense of.
    void reconnect(const QString &reason) { lost(reason); }

Q_SIGNALS:
    void joined(const QString &name);
    void welcomed(const QCborMap &welcome);
    void messageReceived(const flotilla::net::Message &message);
    void disconnected(const QString &reason); // it will reconnect
    void failed(const QString &reason);       // it will not: a refused token, a revoked certificate

private:
    enum class Phase { Idle, Probing, Enrolling, Connecting, Connected };

    void connectNext();
    void probe();
    void enroll();
    void connectWorker();
    TlsSocket *newSocket(bool withCertificate);
    void onReadyRead();
    void handle(Message message);
    // retryAfterMs: what the coordinator asked (its budgets): no reconnection sooner.
    void lost(const QString &reason, qint64 retryAfterMs = 0);
    void giveUp(const QString &reason);
    Result<void> loadIdentity();
    Result<void> saveIdentity();
    // The name from the certificate, when there is one; a different one asked for is an error.
    Result<void> settleName();

    Options m_options;
    std::optional<JoinToken> m_token;
    QString m_host;
    quint16 m_port = 0;
    QByteArray m_keyPem;
    QByteArray m_certificatePem;
    QSslCertificate m_ca;
    HelloMsg m_hello;
    Phase m_phase = Phase::Idle;
    QPointer<TlsSocket> m_socket;
    std::unique_ptr<MessageReader> m_reader = std::make_unique<MessageReader>();
    bool m_welcomed = false;
    bool m_stopped = true;
    int m_attempt = 0;
    QTimer m_retry;
    QTimer m_stall;
};

} // namespace flotilla::net
