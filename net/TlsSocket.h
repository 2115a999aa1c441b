#pragma once
// A TLS 1.3 connection driven by OpenSSL straight on the socket's descriptor, for both ends
// of Flotilla's links.
//
// Qt's QSslSocket puts two memory buffers and a ring buffer between the kernel and the
// reader (and as many between the writer and the kernel): every byte of a 45 MiB result was
// copied five times on each side, and the receive path of a transfer ran at a fifth of what
// OpenSSL does on the same descriptor. Here OpenSSL reads the kernel's bytes into its one
// record buffer and decrypts them into the reader's own buffer; writes are encrypted from
// the caller's bytes, which are queued without a copy. Idle connections keep no buffers
// (SSL_MODE_RELEASE_BUFFERS), which matters to a coordinator holding thousands of them.
//
// The interface is the part of QSslSocket that the endpoint and the worker use, so that
// neither changes shape: readyRead, encrypted, bytesWritten, disconnected, errorOccurred.
// Verification never stops a handshake; whoever reads the peer's certificate decides, with
// verificationError() (the coordinator lets workers without a certificate in to redeem a
// token, and refuses a foreign one by name). A client that pins its CA asks for
// Verify::Require: a chain that does not verify, or names another host, stops the handshake
// before the client shows its own certificate, with verificationFailed() and a closed
// connection instead of encrypted().
//
// Threads: a socket belongs to the thread it lives on, like any QObject with notifiers.

#include "common/Result.h"
#include "net/Frame.h"

#include <QAbstractSocket>
#include <QByteArray>
#include <QHostAddress>
#include <QIODevice>
#include <QList>
#include <QSslCertificate>

#include <deque>
#include <memory>

class QSocketNotifier;
struct ssl_ctx_st;
struct ssl_st;

namespace flotilla::net {

// The TLS settings of one end: its certificate chain and key (optional for a client), the
// CA it trusts and how it treats the peer's certificate. Shared by the sockets made with it.
class TlsContext
{
public:
    enum class Side { Server, Client };
    enum class Verify
    {
        None,    // read the peer's certificate if it sends one, check nothing
        Query,   // a server asks for a client certificate but lets a connection without one in
        Require  // the peer's chain must verify against the CA (and, on a client, name the host)
    };
    struct Options
    {
        Side side = Side::Client;
        Verify verify = Verify::Require;
        QByteArray certificateChainPem; // this end's certificate first, then its issuers
        QByteArray keyPem;
        QByteArray caPem;               // the one CA trusted for the peer's chain
    };

    static Result<std::shared_ptr<TlsContext>> create(const Options &options);
    ~TlsContext();
    TlsContext(const TlsContext &) = delete;
    TlsContext &operator=(const TlsContext &) = delete;

    ssl_ctx_st *handle() const { return m_ctx; }
    Side side() const { return m_side; }
    Verify verify() const { return m_verify; }

private:
    TlsContext() = default;
    ssl_ctx_st *m_ctx = nullptr;
    Side m_side = Side::Client;
    Verify m_verify = Verify::Require;
};

class TlsSocket : public QIODevice
{
    Q_OBJECT

public:
    enum class State
    {
        Unconnected,
        Connecting, // looking the host up, or TCP connecting
        Connected,  // TCP up, no TLS yet
        Handshake,
        Encrypted,
        Closing     // writing what is queued, then closing
    };

    explicit TlsSocket(std::shared_ptr<TlsContext> context, QObject *parent = nullptr);
    ~TlsSocket() override;

    // Takes an accepted, connected descriptor (the endpoint's side). False if it cannot.
    bool setSocketDescriptor(qintptr descriptor);
    // Looks the host up, connects, and starts the handshake (the worker's side).
    void connectToHostEncrypted(const QString &host, quint16 port);
    // Starts the handshake on a connection taken with setSocketDescriptor().
    void startServerEncryption();

    State state() const { return m_state; }
    bool isEncrypted() const { return m_state == State::Encrypted; }
    bool isConnected() const { return m_state != State::Unconnected && m_state != State::Connecting; }
    QHostAddress peerAddress() const { return m_peerAddress; }
    quint16 peerPort() const { return m_peerPort; }
    // The peer's bytes not yet read, before TLS: what a server looks at to tell TLS from
    // anything else. Empty after encryption started.
    QByteArray peekRaw(int bytes) const;

    // After encrypted(): the peer's certificate (null if it sent none), its chain as sent,
    // and why that chain does not verify against the context's CA (empty when it does).
    QSslCertificate peerCertificate() const { return m_peerCertificate; }
    QList<QSslCertificate> peerCertificateChain() const { return m_peerChain; }
    QString verificationError() const { return m_verificationError; }

    // Queues bytes for the peer without copying them; they leave in order, encrypted straight
    // from the caller's memory (a message's payload is hashed as it goes, see OutgoingMessage).
    void send(QByteArray bytes);
    void send(std::unique_ptr<OutgoingBytes> bytes);
    // Drops what is queued and not begun; a message already begun stays, so that the peer
    // never sees half of one followed by another.
    void discardUnstarted();
    // Writes what is queued, then closes; disconnected() follows. What the peer sends
    // meanwhile is read and dropped.
    void disconnectFromHost();
    // Closes now, dropping what is queued.
    void abort();
    // Aborts and deletes the socket on the next turn of the event loop: for a caller that may
    // be inside one of its TLS calls now (a handshake's signal), which must not see its state
    // freed.
    void abortLater();
    QAbstractSocket::SocketError socketError() const { return m_error; }

    bool isSequential() const override { return true; }
    void close() override { abort(); }
    qint64 bytesAvailable() const override;
    qint64 bytesToWrite() const override { return m_queued; }

Q_SIGNALS:
    void encrypted();
    void disconnected();
    void errorOccurred(QAbstractSocket::SocketError error);
    // A client that requires verification: the peer's chain did not verify; the connection
    // is closed and disconnected() follows.
    void verificationFailed(const QString &reason);

protected:
    qint64 readData(char *data, qint64 maxSize) override;
    qint64 writeData(const char *data, qint64 size) override;

private:
    void connectTo(const QList<QHostAddress> &addresses, quint16 port);
    void onConnectNotifier();
    void onReadable();
    void onWritable();
    void startHandshake(bool server);
    void continueHandshake();
    void flushWrites();
    void discardIncoming();
    // Leaves the socket unconnected; emits errorOccurred (unless NoError... see .cpp) and
    // disconnected when it was connected.
    void fail(QAbstractSocket::SocketError error, const QString &text);
    void closeNow(bool emitDisconnected);
    QString sslErrorText(int result) const;
    void setNotifiers(bool read, bool write);
    void scheduleReadyRead();

    std::shared_ptr<TlsContext> m_context;
    qintptr m_fd = -1;
    ssl_st *m_ssl = nullptr;
    State m_state = State::Unconnected;
    QSocketNotifier *m_readNotifier = nullptr;
    QSocketNotifier *m_writeNotifier = nullptr;
    QHostAddress m_peerAddress;
    quint16 m_peerPort = 0;
    QString m_hostName; // what the client connected to: checked against the certificate
    QList<QHostAddress> m_addresses; // left to try
    int m_lookupId = -1;
    QSslCertificate m_peerCertificate;
    QList<QSslCertificate> m_peerChain;
    QString m_verificationError;
    QAbstractSocket::SocketError m_error = QAbstractSocket::UnknownSocketError;
    std::deque<std::unique_ptr<OutgoingBytes>> m_queue;
    qint64 m_queued = 0;
    bool m_frontStarted = false; // some of m_queue.front() was written
    bool m_readWantsWrite = false;  // SSL_read needs the socket writable
    bool m_writeWantsRead = false;  // SSL_write needs the socket readable
    bool m_peerClosed = false;
    bool m_readyReadScheduled = false;
    bool m_emittingBytesWritten = false;
};

} // namespace flotilla::net
