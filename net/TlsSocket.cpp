#include "net/TlsSocket.h"

#include <QHostInfo>
#include <QMetaObject>
#include <QSocketNotifier>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <climits>
#include <cstring>

#ifdef Q_OS_WIN
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace flotilla::net {

namespace {

// What one SSL_write is handed at a time: large enough that the per-call cost vanishes.
constexpr qsizetype kWriteSlice = 1 << 20;
// TLS 1.3's mandatory suite first: AES-128-GCM is as safe for this use and a third cheaper
// than AES-256-GCM on CPUs with AES instructions.
constexpr char kCipherSuites[] = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

#ifdef Q_OS_WIN
using Native = SOCKET;
int lastSocketError()
{
    return WSAGetLastError();
}
bool wouldBlock(int error)
{
    return error == WSAEWOULDBLOCK || error == WSAEINPROGRESS;
}
void closeSocket(qintptr fd)
{
    ::closesocket(SOCKET(fd));
}
bool makeNonBlocking(qintptr fd)
{
    u_long on = 1;
    return ::ioctlsocket(SOCKET(fd), FIONBIO, &on) == 0;
}
qint64 kernelBytes(qintptr fd)
{
    u_long n = 0;
    return ::ioctlsocket(SOCKET(fd), FIONREAD, &n) == 0 ? qint64(n) : 0;
}
QString socketErrorText(int error)
{
    return QStringLiteral("socket error %1").arg(error);
}
#else
using Native = int;
int lastSocketError()
{
    return errno;
}
bool wouldBlock(int error)
{
    return error == EAGAIN || error == EWOULDBLOCK || error == EINPROGRESS;
}
void closeSocket(qintptr fd)
{
    ::close(int(fd));
}
bool makeNonBlocking(qintptr fd)
{
    const int flags = ::fcntl(int(fd), F_GETFL);
    return flags >= 0 && ::fcntl(int(fd), F_SETFL, flags | O_NONBLOCK) == 0;
}
qint64 kernelBytes(qintptr fd)
{
    int n = 0;
    return ::ioctl(int(fd), FIONREAD, &n) == 0 ? qint64(n) : 0;
}
QString socketErrorText(int error)
{
    return QString::fromLocal8Bit(std::strerror(error));
}
#endif

// The oldest error on OpenSSL's queue, as text; the queue is emptied.
QString takeOpenSslError()
{
    const unsigned long code = ERR_get_error();
    ERR_clear_error();
    if (code == 0)
        return {};
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    return QString::fromLatin1(text);
}

QSslCertificate toQt(X509 *certificate)
{
    const int size = i2d_X509(certificate, nullptr);
    if (size <= 0)
        return QSslCertificate();
    QByteArray der(size, Qt::Uninitialized);
    auto *p = reinterpret_cast<unsigned char *>(der.data());
    i2d_X509(certificate, &p);
    return QSslCertificate(der, QSsl::Der);
}

// Verification is judged after the handshake (see the header): the chain is still checked,
// and its result kept for SSL_get_verify_result.
int acceptAnyChain(int, X509_STORE_CTX *)
{
    return 1;
}

// A notifier may be the one whose signal is being handled: disable it now, delete it later.
void retire(QSocketNotifier *&notifier)
{
    if (!notifier)
        return;
    notifier->setEnabled(false);
    QObject::disconnect(notifier, nullptr, nullptr, nullptr);
    notifier->deleteLater();
    notifier = nullptr;
}

// OpenSSL's socket BIO writes with write(), which raises SIGPIPE on a connection the peer
// has reset; this one sends with MSG_NOSIGNAL, so that a reset is an error to handle.
#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0; // macOS: SO_NOSIGPIPE on the socket; Windows has no SIGPIPE
#endif

// One send() or recv() on the BIO's descriptor, again after a signal; "would block" tells
// OpenSSL to try again when the socket is ready (retryFlag: which way).
template <typename Call>
int bioCall(BIO *bio, int retryFlag, Call call)
{
    BIO_clear_retry_flags(bio);
    const qintptr fd = qintptr(BIO_get_data(bio));
    for (;;) {
        const auto n = call(fd);
        if (n >= 0)
            return int(n);
#ifndef Q_OS_WIN
        if (errno == EINTR)
            continue;
#endif
        if (wouldBlock(lastSocketError()))
            BIO_set_flags(bio, retryFlag | BIO_FLAGS_SHOULD_RETRY);
        return -1;
    }
}

int bioWrite(BIO *bio, const char *data, int size)
{
    return bioCall(bio, BIO_FLAGS_WRITE, [&](qintptr fd) { return ::send(Native(fd), data, size, kSendFlags); });
}

int bioRead(BIO *bio, char *data, int size)
{
    return bioCall(bio, BIO_FLAGS_READ, [&](qintptr fd) { return ::recv(Native(fd), data, size, 0); });
}

long bioControl(BIO *, int command, long, void *)
{
    return command == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO_METHOD *socketMethod()
{
    static BIO_METHOD *method = [] {
        BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "flotilla socket");
        BIO_meth_set_write(m, bioWrite);
        BIO_meth_set_read(m, bioRead);
        BIO_meth_set_ctrl(m, bioControl);
        return m;
    }();
    return method;
}

// Every connection's socket options: no Nagle delay (messages are small and waited for), and
// where the system has it, no SIGPIPE for a write to a peer that has gone.
void setSocketOptions(qintptr fd)
{
    int on = 1;
    ::setsockopt(Native(fd), IPPROTO_TCP, TCP_NODELAY, reinterpret_cast<const char *>(&on), sizeof on);
#ifdef SO_NOSIGPIPE
    ::setsockopt(Native(fd), SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
}

} // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::create(const Options &options)
{
#ifdef Q_OS_WIN
    // Sockets are made here before Qt has made any (a worker connecting to an address).
    static const bool winsock = [] {
        WSADATA data;
        return WSAStartup(MAKEWORD(2, 2), &data) == 0;
    }();
    if (!winsock)
        return fail(QStringLiteral("cannot start Windows sockets"));
#endif
    const bool server = options.side == Side::Server;
    std::shared_ptr<TlsContext> context(new TlsContext);
    context->m_side = options.side;
    context->m_verify = options.verify;
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx)
        return fail(QStringLiteral("cannot set up TLS: %1").arg(takeOpenSslError()));
    context->m_ctx = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_ciphersuites(ctx, kCipherSuites);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    // A peer that hangs up without close_notify has closed the connection, not broken TLS.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);

    if (!options.certificateChainPem.isEmpty()) {
        BIO *bio = BIO_new_mem_buf(options.certificateChainPem.constData(), int(options.certificateChainPem.size()));
        X509 *leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
        bool ok = leaf && SSL_CTX_use_certificate(ctx, leaf) == 1;
        X509_free(leaf);
        while (ok) {
            X509 *issuer = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
            if (!issuer)
                break;
            ok = SSL_CTX_add0_chain_cert(ctx, issuer) == 1;
            if (!ok)
                X509_free(issuer);
        }
        BIO_free(bio);
        ERR_clear_error(); // the end of the PEM list reads as an error
        if (!ok)
            return fail(QStringLiteral("cannot use the TLS certificate: it is not a PEM certificate chain"));
    }
    if (!options.keyPem.isEmpty()) {
        BIO *bio = BIO_new_mem_buf(options.keyPem.constData(), int(options.keyPem.size()));
        EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
        BIO_free(bio);
        const bool ok = key && SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
        EVP_PKEY_free(key);
        if (!ok)
            return fail(QStringLiteral("cannot use the TLS key: %1")
                            .arg(takeOpenSslError().isEmpty() ? QStringLiteral("not a PEM private key")
                                                              : QStringLiteral("it does not match the certificate")));
    }
    if (!options.caPem.isEmpty()) {
        BIO *bio = BIO_new_mem_buf(options.caPem.constData(), int(options.caPem.size()));
        X509 *ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
        BIO_free(bio);
        const bool ok = ca && X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca) == 1
                        && (!server || SSL_CTX_add_client_CA(ctx, ca) == 1);
        X509_free(ca);
        if (!ok)
            return fail(QStringLiteral("cannot trust the CA: it is not a PEM certificate (%1)").arg(takeOpenSslError()));
    }
    if (!server && options.verify == Verify::Require) {
        // A client that pins its CA stops the handshake at a chain that does not verify,
        // before it shows its own certificate.
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    } else {
        int mode = SSL_VERIFY_PEER; // checked, and the verdict kept for later (see the header)
        if (server && options.verify == Verify::None)
            mode = SSL_VERIFY_NONE;
        else if (server && options.verify == Verify::Require)
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(ctx, mode, acceptAnyChain);
    }
    return context;
}

TlsContext::~TlsContext()
{
    SSL_CTX_free(m_ctx);
}

TlsSocket::TlsSocket(std::shared_ptr<TlsContext> context, QObject *parent)
    : QIODevice(parent)
    , m_context(std::move(context))
{
}

TlsSocket::~TlsSocket()
{
    closeNow(false);
}

bool TlsSocket::setSocketDescriptor(qintptr descriptor)
{
    closeNow(false);
    if (descriptor < 0 || !makeNonBlocking(descriptor)) {
        setErrorString(QStringLiteral("cannot use the accepted connection: %1").arg(socketErrorText(lastSocketError())));
        return false;
    }
    sockaddr_storage peer{};
    socklen_t size = sizeof peer;
    if (::getpeername(Native(descriptor), reinterpret_cast<sockaddr *>(&peer), &size) != 0) {
        setErrorString(QStringLiteral("the connection is gone: %1").arg(socketErrorText(lastSocketError())));
        return false;
    }
    m_peerAddress = QHostAddress(reinterpret_cast<const sockaddr *>(&peer));
    m_peerPort = peer.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6 *>(&peer)->sin6_port)
                                            : ntohs(reinterpret_cast<const sockaddr_in *>(&peer)->sin_port);
    setSocketOptions(descriptor);
    m_fd = descriptor;
    m_state = State::Connected;
    open(QIODevice::ReadWrite | QIODevice::Unbuffered);
    setNotifiers(true, false);
    return true;
}

void TlsSocket::connectToHostEncrypted(const QString &host, quint16 port)
{
    closeNow(false);
    m_hostName = host;
    m_peerPort = port;
    m_state = State::Connecting;
    QHostAddress literal;
    if (literal.setAddress(host)) {
        QMetaObject::invokeMethod(this, [this, literal, port] { connectTo({literal}, port); }, Qt::QueuedConnection);
        return;
    }
    m_lookupId = QHostInfo::lookupHost(host, this, [this, port](const QHostInfo &info) {
        m_lookupId = -1;
        if (m_state != State::Connecting)
            return;
        if (info.error() != QHostInfo::NoError || info.addresses().isEmpty()) {
            fail(QAbstractSocket::HostNotFoundError, QStringLiteral("host %1 not found: %2").arg(m_hostName, info.errorString()));
            return;
        }
        connectTo(info.addresses(), port);
    });
}

void TlsSocket::connectTo(const QList<QHostAddress> &addresses, quint16 port)
{
    if (m_state != State::Connecting)
        return;
    m_addresses = addresses;
    int lastError = 0;
    while (!m_addresses.isEmpty()) {
        const QHostAddress address = m_addresses.takeFirst();
        sockaddr_storage to{};
        socklen_t size = 0;
        if (address.protocol() == QAbstractSocket::IPv6Protocol) {
            auto *in6 = reinterpret_cast<sockaddr_in6 *>(&to);
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons(port);
            const Q_IPV6ADDR bytes = address.toIPv6Address();
            std::memcpy(&in6->sin6_addr, &bytes, 16);
            in6->sin6_scope_id = address.scopeId().toUInt();
            size = sizeof *in6;
        } else {
            auto *in4 = reinterpret_cast<sockaddr_in *>(&to);
            in4->sin_family = AF_INET;
            in4->sin_port = htons(port);
            in4->sin_addr.s_addr = htonl(address.toIPv4Address());
            size = sizeof *in4;
        }
#ifdef SOCK_CLOEXEC
        const qintptr fd = qintptr(::socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
#else
        const qintptr fd = qintptr(::socket(to.ss_family, SOCK_STREAM, 0));
#endif
        if (fd < 0 || !makeNonBlocking(fd)) {
            lastError = lastSocketError();
            if (fd >= 0)
                closeSocket(fd);
            continue;
        }
        setSocketOptions(fd);
        m_peerAddress = address;
        if (::connect(Native(fd), reinterpret_cast<const sockaddr *>(&to), size) == 0 || wouldBlock(lastSocketError())) {
            m_fd = fd;
            retire(m_writeNotifier);
            m_writeNotifier = new QSocketNotifier(fd, QSocketNotifier::Write, this);
            connect(m_writeNotifier, &QSocketNotifier::activated, this, &TlsSocket::onConnectNotifier);
            return;
        }
        lastError = lastSocketError();
        closeSocket(fd);
    }
    fail(QAbstractSocket::ConnectionRefusedError,
         QStringLiteral("cannot connect to %1:%2: %3").arg(m_hostName).arg(port).arg(socketErrorText(lastError)));
}

void TlsSocket::onConnectNotifier()
{
    retire(m_writeNotifier);
    int error = 0;
    socklen_t size = sizeof error;
    ::getsockopt(Native(m_fd), SOL_SOCKET, SO_ERROR, reinterpret_cast<char *>(&error), &size);
    if (error != 0) {
        closeSocket(std::exchange(m_fd, -1));
        if (!m_addresses.isEmpty()) {
            connectTo(m_addresses, m_peerPort);
            return;
        }
        fail(QAbstractSocket::ConnectionRefusedError,
             QStringLiteral("cannot connect to %1:%2: %3").arg(m_hostName).arg(m_peerPort).arg(socketErrorText(error)));
        return;
    }
    m_state = State::Connected;
    open(QIODevice::ReadWrite | QIODevice::Unbuffered);
    startHandshake(false);
}

void TlsSocket::startServerEncryption()
{
    if (m_state == State::Connected)
        startHandshake(true);
}

void TlsSocket::startHandshake(bool server)
{
    if (!m_context) {
        fail(QAbstractSocket::SslInternalError, QStringLiteral("cannot start TLS: no TLS settings"));
        return;
    }
    m_ssl = SSL_new(m_context->handle());
    BIO *bio = m_ssl ? BIO_new(socketMethod()) : nullptr;
    if (!bio) {
        fail(QAbstractSocket::SslInternalError, QStringLiteral("cannot start TLS: %1").arg(takeOpenSslError()));
        return;
    }
    BIO_set_data(bio, reinterpret_cast<void *>(m_fd));
    BIO_set_init(bio, 1);
    SSL_set_bio(m_ssl, bio, bio); // one reference, for both directions
    if (server) {
        SSL_set_accept_state(m_ssl);
    } else {
        SSL_set_connect_state(m_ssl);
        QHostAddress literal;
        const bool isAddress = literal.setAddress(m_hostName);
        if (!isAddress)
            SSL_set_tlsext_host_name(m_ssl, m_hostName.toUtf8().constData());
        if (m_context->verify() == TlsContext::Verify::Require) {
            // The certificate must name the host connected to; a name OpenSSL cannot check
            // is refused rather than left unchecked.
            const QByteArray host = (isAddress ? literal.toString() : m_hostName).toUtf8();
            const int checked = isAddress ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(m_ssl), host.constData())
                                          : SSL_set1_host(m_ssl, host.constData());
            if (checked != 1) {
                const QString reason = QStringLiteral("cannot check the certificate against the host name '%1'").arg(m_hostName);
                Q_EMIT verificationFailed(reason);
                fail(QAbstractSocket::SslHandshakeFailedError, reason);
                return;
            }
        }
    }
    m_state = State::Handshake;
    setNotifiers(true, false);
    continueHandshake();
}

void TlsSocket::continueHandshake()
{
    ERR_clear_error();
    const int r = SSL_do_handshake(m_ssl);
    if (r == 1) {
        m_state = State::Encrypted;
        if (X509 *peer = SSL_get1_peer_certificate(m_ssl)) {
            m_peerCertificate = toQt(peer);
            X509_free(peer);
        }
        if (STACK_OF(X509) *chain = SSL_get_peer_cert_chain(m_ssl))
            for (int i = 0; i < sk_X509_num(chain); ++i)
                m_peerChain << toQt(sk_X509_value(chain, i));
        const long verified = SSL_get_verify_result(m_ssl);
        if (!m_peerCertificate.isNull() && verified != X509_V_OK)
            m_verificationError = QString::fromLatin1(X509_verify_cert_error_string(verified));
        else if (m_peerCertificate.isNull() && m_context->side() == TlsContext::Side::Client)
            m_verificationError = QStringLiteral("the server sent no certificate");
        if (m_context->side() == TlsContext::Side::Client && m_context->verify() == TlsContext::Verify::Require
            && !m_verificationError.isEmpty()) {
            const QString reason = m_verificationError;
            // Said first: whoever hears it gives up, rather than retrying on the error.
            Q_EMIT verificationFailed(reason);
            fail(QAbstractSocket::SslHandshakeFailedError, reason);
            return;
        }
        setNotifiers(true, !m_queue.empty());
        Q_EMIT encrypted();
        if (m_state == State::Encrypted || m_state == State::Closing) {
            flushWrites();
            if (m_ssl && (SSL_pending(m_ssl) > 0 || kernelBytes(m_fd) > 0))
                scheduleReadyRead();
        }
        return;
    }
    const int error = SSL_get_error(m_ssl, r);
    if (error == SSL_ERROR_WANT_READ) {
        setNotifiers(true, false);
        return;
    }
    if (error == SSL_ERROR_WANT_WRITE) {
        setNotifiers(true, true);
        return;
    }
    const QString text = takeOpenSslError();
    const long verified = SSL_get_verify_result(m_ssl);
    if (m_context->side() == TlsContext::Side::Client && m_context->verify() == TlsContext::Verify::Require
        && verified != X509_V_OK) {
        const QString reason = QString::fromLatin1(X509_verify_cert_error_string(verified));
        Q_EMIT verificationFailed(reason); // first: see above
        fail(QAbstractSocket::SslHandshakeFailedError, reason);
        return;
    }
    if (text.isEmpty() && (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN))
        fail(QAbstractSocket::RemoteHostClosedError, QStringLiteral("the peer closed the connection during the TLS handshake"));
    else
        fail(QAbstractSocket::SslHandshakeFailedError, text.isEmpty() ? sslErrorText(error) : text);
}

QByteArray TlsSocket::peekRaw(int bytes) const
{
    if (m_state != State::Connected || bytes <= 0)
        return {};
    QByteArray out(bytes, Qt::Uninitialized);
    const auto n = ::recv(Native(m_fd), out.data(), bytes, MSG_PEEK);
    out.resize(n > 0 ? qsizetype(n) : 0);
    return out;
}

qint64 TlsSocket::bytesAvailable() const
{
    switch (m_state) {
    case State::Connected:
        return kernelBytes(m_fd);
    case State::Encrypted:
    case State::Closing:
        return qint64(SSL_pending(m_ssl)) + kernelBytes(m_fd);
    default:
        return 0;
    }
}

qint64 TlsSocket::readData(char *data, qint64 maxSize)
{
    if (m_state != State::Encrypted && m_state != State::Closing)
        return m_state == State::Unconnected ? -1 : 0;
    qint64 total = 0;
    while (total < maxSize && m_ssl) {
        std::size_t n = 0;
        ERR_clear_error();
        if (SSL_read_ex(m_ssl, data + total, std::size_t(std::min<qint64>(maxSize - total, INT_MAX)), &n) == 1) {
            total += qint64(n);
            continue;
        }
        const int error = SSL_get_error(m_ssl, 0);
        if (error == SSL_ERROR_WANT_READ)
            break;
        if (error == SSL_ERROR_WANT_WRITE) {
            m_readWantsWrite = true;
            setNotifiers(true, true);
            break;
        }
        // Closed or broken: said on the next turn of the event loop, not inside the reader.
        const QString text = takeOpenSslError();
        const bool closed = error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && text.isEmpty());
        if (!m_peerClosed) {
            m_peerClosed = true;
            setNotifiers(false, false);
            QMetaObject::invokeMethod(
                this,
                [this, closed, text, error] {
                    if (closed)
                        fail(QAbstractSocket::RemoteHostClosedError, QStringLiteral("the peer closed the connection"));
                    else
                        fail(QAbstractSocket::SslInternalError, text.isEmpty() ? sslErrorText(error) : text);
                },
                Qt::QueuedConnection);
        }
        break;
    }
    return total;
}

qint64 TlsSocket::writeData(const char *data, qint64 size)
{
    if (m_state == State::Unconnected)
        return -1;
    send(QByteArray(data, qsizetype(size)));
    return size;
}
namespace {

// Plain bytes in the queue.
class QueuedBytes final : public OutgoingBytes
{
public:
    explicit QueuedBytes(QByteArray bytes)
        : m_bytes(std::move(bytes))
    {
    }
    QByteArrayView next() override { return QByteArrayView(m_bytes).sliced(m_sent); }
    void advance(qsizetype bytes) override { m_sent += bytes; }
    qint64 remaining() const override { return m_bytes.size() - m_sent; }

private:
    QByteArray m_bytes;
    qsizetype m_sent = 0;
};

} // namespace

void TlsSocket::send(QByteArray bytes)
{
    if (!bytes.isEmpty())
        send(std::make_unique<QueuedBytes>(std::move(bytes)));
}

void TlsSocket::send(std::unique_ptr<OutgoingBytes> bytes)
{
    if (!bytes || bytes->remaining() == 0 || m_state == State::Unconnected || m_peerClosed)
        return;
    m_queued += bytes->remaining();
    m_queue.push_back(std::move(bytes));
    if (m_state == State::Encrypted || m_state == State::Closing)
        flushWrites();
}

void TlsSocket::flushWrites()
{
    if (!m_ssl || m_peerClosed)
        return;
    qint64 written = 0;
    while (!m_queue.empty()) {
        OutgoingBytes &front = *m_queue.front();
        const QByteArrayView bytes = front.next();
        if (bytes.isEmpty()) {
            m_queue.pop_front();
            m_frontStarted = false;
            continue;
        }
        const qsizetype length = std::min<qsizetype>(kWriteSlice, bytes.size());
        std::size_t n = 0;
        ERR_clear_error();
        if (SSL_write_ex(m_ssl, bytes.data(), std::size_t(length), &n) == 1) {
            front.advance(qsizetype(n));
            m_frontStarted = true;
            m_queued -= qint64(n);
            written += qint64(n);
            continue;
        }
        const int error = SSL_get_error(m_ssl, 0);
        if (error == SSL_ERROR_WANT_WRITE) {
            m_writeWantsRead = false;
            setNotifiers(true, true);
            break;
        }
        if (error == SSL_ERROR_WANT_READ) {
            m_writeWantsRead = true;
            break;
        }
        const QString text = takeOpenSslError();
        m_peerClosed = true;
        setNotifiers(false, false);
        QMetaObject::invokeMethod(
            this,
            [this, text, error] {
                fail(QAbstractSocket::RemoteHostClosedError,
                     QStringLiteral("cannot write to the peer: %1").arg(text.isEmpty() ? sslErrorText(error) : text));
            },
            Qt::QueuedConnection);
        return;
    }
    if (m_queue.empty()) {
        setNotifiers(true, m_readWantsWrite);
        if (m_state == State::Closing) {
            SSL_shutdown(m_ssl); // close_notify, once; the answer is not waited for
            ERR_clear_error();
            closeNow(true);
            return;
        }
    }
    // Not from inside a handler of its own: a handler that sends more is flushed here.
    if (written > 0 && !m_emittingBytesWritten) {
        m_emittingBytesWritten = true;
        Q_EMIT bytesWritten(written);
        m_emittingBytesWritten = false;
    }
}

void TlsSocket::onReadable()
{
    switch (m_state) {
    case State::Connected: {
        // Before TLS the owner only looks at the first bytes: say so once, and listen again
        // when encryption starts.
        char byte = 0;
        const auto n = ::recv(Native(m_fd), &byte, 1, MSG_PEEK);
        if (n == 0 || (n < 0 && !wouldBlock(lastSocketError()))) {
            fail(QAbstractSocket::RemoteHostClosedError, QStringLiteral("the peer closed the connection"));
            return;
        }
        if (n > 0) {
            setNotifiers(false, false);
            Q_EMIT readyRead();
        }
        return;
    }
    case State::Handshake:
        continueHandshake();
        return;
    case State::Encrypted:
        break;
    case State::Closing:
        // Nobody reads a socket that is closing: what the peer still sends is read and
        // dropped, so that the notifier does not fire again at once and the close is not a
        // reset that would take our last bytes with it.
        if (m_writeWantsRead) {
            m_writeWantsRead = false;
            flushWrites();
        }
        if (m_state == State::Closing)
            discardIncoming();
        return;
    default:
        return;
    }
    if (m_writeWantsRead) {
        m_writeWantsRead = false;
        flushWrites();
        if (m_state != State::Encrypted && m_state != State::Closing)
            return;
    }
    if (SSL_pending(m_ssl) == 0 && kernelBytes(m_fd) == 0) {
        // Readable with nothing to read: the peer hung up (or the connection broke).
        char byte = 0;
        const auto n = ::recv(Native(m_fd), &byte, 1, MSG_PEEK);
        if (n == 0 || (n < 0 && !wouldBlock(lastSocketError())))
            fail(QAbstractSocket::RemoteHostClosedError, QStringLiteral("the peer closed the connection"));
        return;
    }
    Q_EMIT readyRead();
    if (m_ssl && (m_state == State::Encrypted || m_state == State::Closing) && SSL_pending(m_ssl) > 0)
        scheduleReadyRead();
}

void TlsSocket::discardIncoming()
{
    char scratch[16 * 1024];
    const qint64 before = kernelBytes(m_fd) + qint64(SSL_pending(m_ssl));
    qint64 got = 0;
    while (m_ssl && (m_state == State::Closing) && !m_peerClosed) {
        const qint64 n = readData(scratch, sizeof scratch);
        if (n <= 0)
            break;
        got += n;
    }
    if (m_ssl && m_state == State::Closing && !m_peerClosed && before == 0 && got == 0) {
        // Readable with nothing to read: the peer hung up.
        char byte = 0;
        const auto n = ::recv(Native(m_fd), &byte, 1, MSG_PEEK);
        if (n == 0 || (n < 0 && !wouldBlock(lastSocketError())))
            closeNow(true);
    }
}

void TlsSocket::discardUnstarted()
{
    if (m_queue.empty())
        return;
    std::unique_ptr<OutgoingBytes> front = m_frontStarted ? std::move(m_queue.front()) : nullptr;
    m_queue.clear();
    m_queued = 0;
    m_frontStarted = false;
    if (front) {
        m_queued = front->remaining();
        m_queue.push_back(std::move(front));
    }
}

void TlsSocket::onWritable()
{
    switch (m_state) {
    case State::Handshake:
        continueHandshake();
        return;
    case State::Encrypted:
    case State::Closing:
        if (std::exchange(m_readWantsWrite, false))
            scheduleReadyRead();
        flushWrites();
        if (m_ssl && m_queue.empty() && !m_readWantsWrite)
            setNotifiers(!m_peerClosed, false);
        return;
    default:
        return;
    }
}

void TlsSocket::scheduleReadyRead()
{
    if (std::exchange(m_readyReadScheduled, true))
        return;
    QMetaObject::invokeMethod(
        this,
        [this] {
            m_readyReadScheduled = false;
            if ((m_state == State::Encrypted || m_state == State::Closing) && !m_peerClosed && bytesAvailable() > 0)
                Q_EMIT readyRead();
            if (m_ssl && (m_state == State::Encrypted || m_state == State::Closing) && !m_peerClosed
                && SSL_pending(m_ssl) > 0)
                scheduleReadyRead();
        },
        Qt::QueuedConnection);
}

void TlsSocket::disconnectFromHost()
{
    switch (m_state) {
    case State::Unconnected:
        return;
    case State::Encrypted:
        m_state = State::Closing;
        if (!m_queue.empty() && !m_peerClosed)
            return; // flushWrites() closes once the queue is out
        SSL_shutdown(m_ssl);
        ERR_clear_error();
        closeNow(true);
        return;
    case State::Closing:
        return;
    default:
        closeNow(true);
    }
}

void TlsSocket::abort()
{
    m_queue.clear();
    m_queued = 0;
    m_frontStarted = false;
    closeNow(true);
}

void TlsSocket::abortLater()
{
    QMetaObject::invokeMethod(
        this,
        [this] {
            abort();
            deleteLater();
        },
        Qt::QueuedConnection);
}

void TlsSocket::fail(QAbstractSocket::SocketError error, const QString &text)
{
    if (m_state == State::Unconnected)
        return; // already closed
    const bool wasConnected = isConnected();
    m_error = error;
    setErrorString(text);
    closeNow(false);
    Q_EMIT errorOccurred(error);
    if (wasConnected)
        Q_EMIT disconnected();
}

void TlsSocket::closeNow(bool emitDisconnected)
{
    if (m_lookupId >= 0) {
        QHostInfo::abortHostLookup(m_lookupId);
        m_lookupId = -1;
    }
    const bool wasConnected = isConnected();
    retire(m_readNotifier);
    retire(m_writeNotifier);
    if (m_ssl) {
        SSL_free(std::exchange(m_ssl, nullptr));
        ERR_clear_error();
    }
    if (m_fd >= 0)
        closeSocket(std::exchange(m_fd, -1));
    m_state = State::Unconnected;
    m_queue.clear();
    m_queued = 0;
    m_frontStarted = false;
    m_readWantsWrite = m_writeWantsRead = false;
    if (isOpen())
        QIODevice::close();
    if (emitDisconnected && wasConnected)
        Q_EMIT disconnected();
}

void TlsSocket::setNotifiers(bool read, bool write)
{
    if (m_fd < 0)
        return;
    if (!m_readNotifier) {
        m_readNotifier = new QSocketNotifier(m_fd, QSocketNotifier::Read, this);
        connect(m_readNotifier, &QSocketNotifier::activated, this, &TlsSocket::onReadable);
    }
    if (!m_writeNotifier) {
        m_writeNotifier = new QSocketNotifier(m_fd, QSocketNotifier::Write, this);
        connect(m_writeNotifier, &QSocketNotifier::activated, this, &TlsSocket::onWritable);
    }
    m_readNotifier->setEnabled(read);
    m_writeNotifier->setEnabled(write);
}

QString TlsSocket::sslErrorText(int result) const
{
    return QStringLiteral("TLS error %1").arg(result);
}

} // namespace flotilla::net
