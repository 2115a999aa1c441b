#pragma once
// The coordinator's side of the network: a TLS 1.3 server that enrolls workers with join
// tokens, accepts only mutual-TLS connections with a certificate it issued and has not
// revoked, turns bytes into messages, and closes any connection that sends something
// malformed — with a logged reason — without disturbing the others.
//
// Enrollment is handled here (token, CSR, certificate); everything a worker says after
// Hello is handed to the owner as messages. A worker is known by the name its certificate
// was issued to: a Hello that claims another name is refused. Work before authentication is
// bounded (Options), and accepting never stops: when the bounds are reached, the oldest
// unauthenticated connection makes way for the new one.
//
// Work after authentication is bounded too, because a join token handed out widely puts a
// valid certificate in anyone's hands (docs/security.md, "Insiders"): bytes waiting for a
// peer that does not read, messages per second of each kind and new sessions per second per
// certificate, sessions at once per certificate. A connection over a budget is closed with
// a reason that names it; a certificate that keeps going over is barred for a while
// (overBudget says so, for the coordinator to record and quarantine).
//
// Threads: the endpoint and its sockets belong to the thread it lives on (the network
// thread).

#include "net/Frame.h"
#include "net/Messages.h"
#include "net/Pki.h"
#include "net/TlsSocket.h"
#include "net/TrustStore.h"

#include <QElapsedTimer>
#include <QHash>
#include <QHostAddress>
#include <QObject>
#include <QPointer>
#include <QTcpServer>
#include <QTimer>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

namespace flotilla::net {

struct PeerInfo
{
    qint64 connectionId = 0;
    QByteArray fingerprint;
    QString workerName;  // the name its certificate was issued to (enrolled under)
    qint64 workerId = 0; // the fleet's id for it, from its certificate's record (one per certificate, every job)
    QString address;
    Role role = Role::Worker; // what its certificate was issued for
};

// Accepts the connections the kernel has queued and keeps their sockets until the endpoint's
// next turn of the event loop, which takes them all. QSslServer counted sockets still in
// their TLS handshake as pending connections and stopped reading the listening socket when
// it held maxPendingConnections of them; in Qt 6.4 only nextPendingConnection() turned
// reading back on, which a handshake that never finishes never called, so 30 idle peers
// locked the port for good. Here a socket is pending only until that next turn, and one turn
// accepts at most the kernel's queue (Options::listenBacklog), each for the price of a
// descriptor and a notifier: TLS state is made when the peer's first bytes arrive.
class AcceptingServer : public QTcpServer
{
public:
    // Makes the socket for an accepted descriptor; nullptr when it cannot (then it is closed).
    std::function<TlsSocket *(qintptr)> make;
    // Called for each socket added to pending.
    std::function<void()> added;
    std::deque<QPointer<TlsSocket>> pending;

protected:
    void incomingConnection(qintptr descriptor) override;
};

// A token bucket's size: so many a second on average, so many at once.
struct MessageRate
{
    double perSecond = 0;
    double burst = 0;
};
// What an honest worker or control center never comes near (docs/security.md, "Insiders").
std::map<MessageType, MessageRate> defaultMessageRates();

class TlsListener : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString identityDir;               // CA, server key and certificate, trust.db
        QHostAddress bindAddress = QHostAddress::Any;
        quint16 port = 0;                  // 0: any free port
        QStringList hostNames{QStringLiteral("127.0.0.1"), QStringLiteral("localhost")};
        // Work before authentication is bounded. A connection is unauthenticated from its
        // accept until it says Hello with a certificate this coordinator issued, or redeems a
        // token: TCP without TLS yet, a TLS handshake, or TLS without Hello or Redeem.
        int handshakeTimeoutMs = 10000;    // from accept to Hello or Redeem
        int maxUnauthenticated = 1024;     // all sources together; the oldest makes way
        int maxUnauthenticatedPerSource = 64; // per IPv4 address or IPv6 /64
        // Failed join attempts (unknown, wrong, spent or revoked tokens, bad requests) one
        // source may make in joinFailureWindowMs; then its Redeems are refused unread.
        int maxJoinFailuresPerSource = 10;
        int joinFailureWindowMs = 10 * 60 * 1000;
        int listenBacklog = 1024;          // the kernel's queue of connections not yet accepted
        int stallTimeoutMs = 15000;        // silence in the middle of a message
        int revocationCheckMs = 2000;

        // Budgets after authentication, per connection and per certificate.
        // Bytes waiting for a peer (queued and in the socket) beyond which it is closed as one
        // that does not read; never less than three times the largest payload limit, so that
        // an honest worker on a slow link may have a whole model on its way.
        qint64 maxQueuedBytes = qint64(32) << 20;
        // Messages a certificate may send per second, and in a burst, by kind; kinds not
        // listed are not counted. Shared by all of a certificate's sessions.
        std::map<MessageType, MessageRate> rates = defaultMessageRates();
        MessageRate sessions{0.5, 10};            // new authenticated sessions per certificate
        int maxSessionsPerCertificate = 8; // at once; the oldest makes way for the newest
        // A certificate closed this many times for budgets within the window is refused for
        // the rest of the window (and revoked, with revokeAbusers).
        int maxBudgetClosings = 5;
        int budgetWindowMs = 10 * 60 * 1000;
        bool revokeAbusers = false;
    };

    static Result<std::unique_ptr<TlsListener>> create(const Options &options);
    ~TlsListener() override;

    Result<void> listen();
    quint16 port() const;
    QByteArray caFingerprint() const { return m_identity.caFingerprint; }
    TrustStore &trust() { return m_trust; }
    // The largest payload accepted in a message of this type from workers.
    void setPayloadLimit(MessageType type, std::uint64_t bytes);
    // The same, for people's certificates (operators, submitters) only: a worker's
    // certificate, which a leaked join token puts in anyone's hands, keeps the limit above.
    void setPersonPayloadLimit(MessageType type, std::uint64_t bytes);

    // Queues a message. A peer with more than its budget of bytes waiting unread gets no more
    // and is closed on the next turn of the event loop, never from inside send(): a caller
    // may be sending to each of its connections in a loop.
    void send(qint64 connectionId, MessageType type, const QCborMap &header, const QByteArray &payload = {});
    template <typename Msg>
    void send(qint64 connectionId, const Msg &message, const QByteArray &payload = {})
    {
        send(connectionId, Msg::type, message.encode(), payload);
    }
    // Sends an Error with the reason, logs it (as a warning when error), and closes the
    // connection.
    void close(qint64 connectionId, const QString &reason, bool fatal = false, bool error = true);
    int connectionCount() const { return int(m_connections.size()); }
    // Bytes queued for a connection and not yet taken by its peer (0 for an unknown one):
    // what a sender of optional traffic checks before queueing more.
    qint64 pendingBytes(qint64 connectionId) const;
    int unauthenticatedCount() const { return int(m_unauthenticated.size()); }

    // Certificates refused for now for going over their budgets, by worker.
    struct Barred
    {
        qint64 workerId = 0;
        QString workerName;
        qint64 remainingMs = 0;
        QString reason; // the last budget it went over
    };
    std::vector<Barred> barred() const;
    // An operator released the worker: its certificates' bars and closings are forgotten.
    void forgive(qint64 workerId);

    // The key that per-source limits count by: an IPv4 address, or the /64 prefix of an
    // IPv6 one (one host owns a whole /64).
    static QString sourceOf(const QHostAddress &address);

Q_SIGNALS:
    // A worker connected with a valid certificate and said Hello (what it told).
    void helloReceived(const flotilla::net::PeerInfo &peer, const flotilla::net::HelloMsg &hello);
    void messageReceived(qint64 connectionId, const flotilla::net::Message &message);
    void connectionClosed(qint64 connectionId, const QString &reason);
    // A connection refused before it became a worker's (for logs and tests).
    void refused(const QString &address, const QString &reason);
    // A certificate's connection was closed for going over a budget (reason names which);
    // barred: it did so often enough to be refused for the rest of the window. Emitted
    // before connectionClosed.
    void overBudget(const flotilla::net::PeerInfo &peer, const QString &reason, bool barred);

private:
    enum class Stage
    {
        Tcp,       // accepted; no byte yet
        Handshake, // TLS handshake under way
        Encrypted, // TLS done; neither Hello nor Redeem yet
        Worker     // said Hello with one of our certificates
    };

    struct Connection
    {
        qint64 id = 0;
        QPointer<TlsSocket> socket;
        MessageReader reader;
        QString address;
        QString source;
        qint64 deadline = 0; // on m_clock; unauthenticated connections only
        Stage stage = Stage::Tcp;
        bool authenticated = false; // presented one of our certificates
        bool overBudget = false;    // to be closed on the next turn of the event loop
        PeerInfo peer;
        QTimer *stallTimer = nullptr;
        // Messages not yet handed to the socket: see pump().
        std::deque<std::unique_ptr<OutgoingMessage>> outbox;
        qint64 outboxBytes = 0; // their remaining bytes
    };

    struct Bucket
    {
        double tokens = 0;
        qint64 lastMs = -1;
        // Takes one token at nowMs; false when none is left.
        bool take(const MessageRate &rate, qint64 nowMs);
    };
    // What one certificate has spent, over all its sessions.
    struct CertificateBudget
    {
        std::map<MessageType, Bucket> messages;
        Bucket sessions;
        std::set<qint64> connections; // authenticated, oldest first
        std::deque<qint64> closings;  // times on m_clock of closings for budgets
        qint64 barredUntil = 0;
        QString lastReason;
        qint64 workerId = 0; // whose certificate it is, once it went over a budget
        QString workerName;
        qint64 lastUsedMs = 0;
    };

    TlsListener() = default;
    // Hands the socket the connection's next messages while less than a window waits in it
    // (the socket encrypts straight from them, without a copy). A connection closed with an
    // Error drops what was not handed over yet.
    void pump(Connection &c);
    // Hands the socket everything that is left, at once (before a hang-up).
    static void flushOutbox(Connection &c);
    TlsSocket *socketFor(qintptr descriptor);
    // Takes the sockets accepted since the last turn of the event loop.
    void takeAccepted();
    void accept(TlsSocket *socket);
    // Closes the oldest unauthenticated connections until a new one from source fits.
    void makeRoom(const QString &source);
    // Removes a connection from the books, and from the unauthenticated ones.
    std::unique_ptr<Connection> take(qint64 id);
    // It no longer counts against the limits before authentication.
    void authenticated(const Connection &c);
    void expireDeadlines();
    void onFirstBytes(Connection &c);
    void onHandshakeError(qint64 id, QAbstractSocket::SocketError error);
    void onEncrypted(qint64 id);
    void onReadyRead(qint64 id);
    void handle(Connection &c, Message message);
    void enroll(Connection &c, const Message &message);
    // How long the source must wait before it may try to join again; 0 when it may now.
    qint64 joinBlockedMs(const QString &source);
    void joinFailed(const QString &source);
    // fatal: the worker must not come back with the same credentials (it is told so).
    // throttled: logged within the refusal log's budget (a flood must not flood the log).
    // retryAfterMs: told to the peer, which reconnects no sooner (budgets).
    void drop(qint64 id, const QString &reason, bool fatal, bool error = true, bool throttled = false,
              qint64 retryAfterMs = 0);
    void logRefusal(const QString &line, bool warning);
    void flushRefusalLog();
    void checkRevocations();
    // Reloads the index of certificates when the trust database changed since the last look
    // (or always, with force). The network thread checks certificates against the index
    // only: no handshake waits on the database.
    Result<void> refreshCertificates(bool force);
    // The record of a certificate, from the index (reloaded once if it is not there).
    Result<std::optional<CertificateRecord>> certificateRecord(const QByteArray &fingerprint);
    // Closes a certificate's connection for going over a budget and counts it against the
    // certificate; bars (and revokes) it when that happens too often.
    void overBudgetClose(Connection &c, const QString &reason);
    // The closings of the window that are left; clears an expired bar.
    CertificateBudget &budgetOf(const QByteArray &fingerprint);
    qint64 queuedBytes(const Connection &c) const;
    qint64 queueLimit(const Connection &c) const;
    void forgetIdleBudgets();

    Options m_options;
    CoordinatorIdentity m_identity;
    TrustStore m_trust{QString()};
    // A second connection to the same database, whose version changes with every write of
    // m_trust's and of other processes' (flotilla revoke).
    TrustStore m_trustWatch{QString()};
    QHash<QByteArray, CertificateRecord> m_certificates;
    qint64 m_trustVersion = -1;
    std::shared_ptr<TlsContext> m_tls;
    AcceptingServer m_server;
    std::map<qint64, std::unique_ptr<Connection>> m_connections;
    // Unauthenticated connections by id; ids grow with each accept, so the first is the oldest.
    std::set<qint64> m_unauthenticated;
    QHash<QString, std::set<qint64>> m_unauthenticatedBySource;
    QHash<QString, std::deque<qint64>> m_joinFailures; // times on m_clock
    std::map<MessageType, std::uint64_t> m_limits;
    std::map<MessageType, std::uint64_t> m_personLimits;
    QHash<QByteArray, CertificateBudget> m_budgets; // by certificate fingerprint
    qint64 m_nextId = 1;
    bool m_takeScheduled = false;
    QElapsedTimer m_clock;
    QTimer m_deadlineTimer;
    QTimer m_revocationTimer;
    // Refusals are logged one by one up to a budget per window, then counted: a flood must
    // not turn into a flood of log lines.
    qint64 m_logWindowStart = 0;
    int m_loggedInWindow = 0;
    int m_unloggedInWindow = 0;
};

} // namespace flotilla::net

Q_DECLARE_METATYPE(flotilla::net::PeerInfo)
Q_DECLARE_METATYPE(flotilla::net::Message)
