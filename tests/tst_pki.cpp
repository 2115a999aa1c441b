// The coordinator's PKI: keys, the CA, server and client certificates checked with OpenSSL
// and Qt, refusal of tampered requests and garbage input, the identity folder, and real
// mutual TLS 1.3 handshakes on loopback with QSslServer/QSslSocket.
#include "TestFiles.h"
#include "net/Pki.h"

#include <QtTest>

#include <QHostAddress>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslServer>
#include <QSslSocket>
#include <QTemporaryDir>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#ifdef Q_OS_UNIX
#include <sys/stat.h>
#include <unistd.h>
#endif

using namespace flotilla;
using namespace flotilla::net;
using namespace flotilla::test;

namespace {

template<auto Free> struct Deleter
{
    template<typename T> void operator()(T *p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using RequestPtr = std::unique_ptr<X509_REQ, Deleter<X509_REQ_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE_free>>;
using StoreContextPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX_free>>;

X509Ptr parseCert(const QByteArray &pem)
{
    BioPtr bio(BIO_new_mem_buf(pem.constData(), int(pem.size())));
    return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr parseKey(const QByteArray &pem)
{
    BioPtr bio(BIO_new_mem_buf(pem.constData(), int(pem.size())));
    return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

RequestPtr parseRequest(const QByteArray &pem)
{
    BioPtr bio(BIO_new_mem_buf(pem.constData(), int(pem.size())));
    return RequestPtr(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
}

QByteArray requestPem(X509_REQ *request)
{
    BioPtr bio(BIO_new(BIO_s_mem()));
    PEM_write_bio_X509_REQ(bio.get(), request);
    char *data = nullptr;
    const long size = BIO_get_mem_data(bio.get(), &data);
    return QByteArray(data, qsizetype(size));
}

// The DER inside a PEM block, and back.
QByteArray pemBody(const QByteArray &pem)
{
    QByteArray base64;
    for (const QByteArray &line : pem.split('\n')) {
        if (!line.startsWith("-----"))
            base64 += line.trimmed();
    }
    return QByteArray::fromBase64(base64);
}

QByteArray toPem(const QByteArray &der, const char *label)
{
    QByteArray pem = QByteArray("-----BEGIN ") + label + "-----\n";
    const QByteArray base64 = der.toBase64();
    for (qsizetype i = 0; i < base64.size(); i += 64)
        pem += base64.mid(i, 64) + '\n';
    pem += QByteArray("-----END ") + label + "-----\n";
    return pem;
}

// X509_verify_cert against a store that holds caPem alone. Returns the OpenSSL verify
// error (X509_V_OK on success).
int verifyAgainst(const QByteArray &certPem, const QByteArray &caPem, int purpose)
{
    X509Ptr cert = parseCert(certPem);
    X509Ptr ca = parseCert(caPem);
    if (!cert || !ca)
        return -1;
    StorePtr store(X509_STORE_new());
    X509_STORE_add_cert(store.get(), ca.get());
    StoreContextPtr context(X509_STORE_CTX_new());
    X509_STORE_CTX_init(context.get(), store.get(), cert.get(), nullptr);
    X509_STORE_CTX_set_purpose(context.get(), purpose);
    const int ok = X509_verify_cert(context.get());
    const int error = X509_STORE_CTX_get_error(context.get());
    ERR_clear_error();
    if (ok == 1)
        return X509_V_OK;
    return error == X509_V_OK ? -2 : error;
}

QString verifyErrorText(int error)
{
    return error < 0 ? QStringLiteral("unparsable") : QString::fromLatin1(X509_verify_cert_error_string(error));
}

bool isCritical(X509 *cert, int nid)
{
    const int index = X509_get_ext_by_NID(cert, nid, -1);
    return index >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, index)) == 1;
}




QString describe(const QList<QSslError> &errors)
{
    QStringList parts;
    for (const QSslError &e : errors)
        parts << QStringLiteral("%1 (%2)").arg(e.errorString()).arg(int(e.error()));
    return parts.join(QLatin1String("; "));
}

const QStringList kHostNames = { QStringLiteral("127.0.0.1"), QStringLiteral("localhost"), QStringLiteral("::1") };

} // namespace

// Evaluates result once (QVERIFY2 also evaluates its description on success).
#define REQUIRE_OK(result)                                                                                             \
    do {                                                                                                               \
        const auto &r_ = (result);                                                                                     \
        QVERIFY2(r_.ok(), qPrintable(r_.error()));                                                                     \
    } while (false)

// Expects a failure whose message contains each of the given words.
#define REQUIRE_ERROR(result, ...)                                                                                     \
    do {                                                                                                               \
        const auto &r_ = (result);                                                                                     \
        QVERIFY2(!r_.ok(), "expected an error");                                                                       \
        for (const QString &word_ : QStringList { __VA_ARGS__ })                                                       \
            QVERIFY2(r_.error().contains(word_, Qt::CaseInsensitive),                                                  \
                qPrintable(QStringLiteral("'%1' not in: %2").arg(word_, r_.error())));                                 \
    } while (false)

// One TLS endpoint of the coordinator: a QSslServer as the coordinator will configure it,
// recording what it sees of each client.
class FleetServer : public QObject
{
    Q_OBJECT

public:
    FleetServer(const CoordinatorIdentity &identity)
    {
        QSslConfiguration config = QSslConfiguration::defaultConfiguration();
        config.setProtocol(QSsl::TlsV1_3);
        config.setLocalCertificate(QSslCertificate(identity.serverCertificatePem));
        config.setPrivateKey(QSslKey(identity.serverKeyPem, QSsl::Ec));
        config.setCaCertificates({ QSslCertificate(identity.ca.certificatePem) });
        config.setPeerVerifyMode(QSslSocket::QueryPeer);
        m_server.setSslConfiguration(config);
        connect(&m_server, &QSslServer::sslErrors, this,
            [this](QSslSocket *, const QList<QSslError> &errors) { m_sslErrors += errors; });
        connect(&m_server, &QSslServer::errorOccurred, this,
            [this](QSslSocket *, QAbstractSocket::SocketError error) { m_socketErrors << error; });
        connect(&m_server, &QTcpServer::pendingConnectionAvailable, this, [this]() {
            while (QTcpSocket *socket = m_server.nextPendingConnection())
                m_accepted << qobject_cast<QSslSocket *>(socket);
        });
    }

    bool listen() { return m_server.listen(QHostAddress::LocalHost, 0); }
    quint16 port() const { return m_server.serverPort(); }
    const QString errorString() const { return m_server.errorString(); }

    QSslServer m_server;
    QList<QSslSocket *> m_accepted; // owned by m_server
    QList<QSslError> m_sslErrors;
    QList<QAbstractSocket::SocketError> m_socketErrors;
};

class TestPki : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    CoordinatorIdentity m_identity;
    QByteArray m_clientKey;
    QByteArray m_clientCert;
    CertificateAuthority m_foreignCa;
    QByteArray m_foreignClientKey;
    QByteArray m_foreignClientCert;

    QString folder(const QString &name) const { return m_dir.filePath(name); }

    // A worker's TLS client: pins caPem alone, verifies the coordinator, presents
    // certPem/keyPem when given.
    static void configureClient(QSslSocket &socket, const QByteArray &caPem, const QByteArray &certPem,
        const QByteArray &keyPem, QSsl::SslProtocol protocol = QSsl::TlsV1_3)
    {
        QSslConfiguration config = QSslConfiguration::defaultConfiguration();
        config.setProtocol(protocol);
        config.setCaCertificates({ QSslCertificate(caPem) });
        config.setPeerVerifyMode(QSslSocket::VerifyPeer);
        if (!certPem.isEmpty()) {
            config.setLocalCertificate(QSslCertificate(certPem));
            config.setPrivateKey(QSslKey(keyPem, QSsl::Ec));
        }
        socket.setSslConfiguration(config);
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QSslSocket::supportsSsl(), "Qt has no working TLS backend");
        QCOMPARE(QSslSocket::activeBackend(), QStringLiteral("openssl"));
        QVERIFY(m_dir.isValid());

        auto identity = loadOrCreateCoordinatorIdentity(folder(QStringLiteral("coordinator")), kHostNames);
        REQUIRE_OK(identity);
        m_identity = *identity;

        auto key = generatePrivateKeyPem();
        REQUIRE_OK(key);
        m_clientKey = *key;
        // The worker asks for one name; the coordinator decides another.
        auto csr = createCertificateRequest(m_clientKey, QStringLiteral("asked-for-admin"));
        REQUIRE_OK(csr);
        auto cert = signCertificateRequest(m_identity.ca, *csr, QStringLiteral("worker-1"), 30);
        REQUIRE_OK(cert);
        m_clientCert = *cert;

        auto foreignCa = createCertificateAuthority(QStringLiteral("Intruder CA"), 30);
        REQUIRE_OK(foreignCa);
        m_foreignCa = *foreignCa;
        auto foreignKey = generatePrivateKeyPem();
        REQUIRE_OK(foreignKey);
        m_foreignClientKey = *foreignKey;
        auto foreignCsr = createCertificateRequest(m_foreignClientKey, QStringLiteral("worker-1"));
        REQUIRE_OK(foreignCsr);
        auto foreignCert = signCertificateRequest(m_foreignCa, *foreignCsr, QStringLiteral("worker-1"), 30);
        REQUIRE_OK(foreignCert);
        m_foreignClientCert = *foreignCert;
    }

    void generatedKeyIsP256InPkcs8()
    {
        auto first = generatePrivateKeyPem();
        auto second = generatePrivateKeyPem();
        REQUIRE_OK(first);
        REQUIRE_OK(second);
        QVERIFY(first->startsWith("-----BEGIN PRIVATE KEY-----\n"));
        QVERIFY(*first != *second);
        PkeyPtr key = parseKey(*first);
        QVERIFY(key);
        QCOMPARE(EVP_PKEY_get_base_id(key.get()), EVP_PKEY_EC);
        char group[64] = {};
        QVERIFY(EVP_PKEY_get_utf8_string_param(key.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, nullptr));
        QCOMPARE(QLatin1String(group), QLatin1String("prime256v1"));
        const QSslKey qtKey(*first, QSsl::Ec);
        QVERIFY(!qtKey.isNull());
        QCOMPARE(qtKey.length(), 256);
        QCOMPARE(qtKey.type(), QSsl::PrivateKey);
    }

    void certificateAuthorityProperties()
    {
        const QDateTime before = QDateTime::currentDateTimeUtc();
        auto ca = createCertificateAuthority(QStringLiteral("Flotilla test CA"), 100);
        REQUIRE_OK(ca);
        QVERIFY(ca->keyPem.startsWith("-----BEGIN PRIVATE KEY-----"));

        const QSslCertificate qt(ca->certificatePem);
        QVERIFY(!qt.isNull());
        QCOMPARE(qt.subjectInfo(QSslCertificate::CommonName), QStringList { QStringLiteral("Flotilla test CA") });
        QCOMPARE(qt.issuerInfo(QSslCertificate::CommonName), QStringList { QStringLiteral("Flotilla test CA") });
        QVERIFY(qt.isSelfSigned());
        QVERIFY(qt.effectiveDate() <= before);
        QVERIFY(qt.effectiveDate() > before.addSecs(-2 * 3600));
        QVERIFY(qAbs(qt.expiryDate().secsTo(before.addDays(100))) < 120);
        QCOMPARE(qt.publicKey().algorithm(), QSsl::Ec);

        X509Ptr cert = parseCert(ca->certificatePem);
        QVERIFY(cert);
        QCOMPARE(X509_get_version(cert.get()), long(X509_VERSION_3));
        QCOMPARE(X509_check_ca(cert.get()), 1);
        QVERIFY(isCritical(cert.get(), NID_basic_constraints));
        QCOMPARE(X509_get_pathlen(cert.get()), 0L);
        QVERIFY(isCritical(cert.get(), NID_key_usage));
        QCOMPARE(X509_get_key_usage(cert.get()), quint32(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
        QVERIFY(X509_get0_subject_key_id(cert.get()) != nullptr);
        QCOMPARE(X509_get_signature_nid(cert.get()), NID_ecdsa_with_SHA256);
        QCOMPARE(X509_verify(cert.get(), X509_get0_pubkey(cert.get())), 1);
        PkeyPtr key = parseKey(ca->keyPem);
        QVERIFY(key);
        QCOMPARE(X509_check_private_key(cert.get(), key.get()), 1);
        // A self-signed CA verifies against itself.
        QCOMPARE(verifyAgainst(ca->certificatePem, ca->certificatePem, X509_PURPOSE_ANY), X509_V_OK);

        // Random 128-bit serials: positive, long, different each time.
        auto other = createCertificateAuthority(QStringLiteral("Flotilla test CA"), 100);
        REQUIRE_OK(other);
        const QSslCertificate otherQt(other->certificatePem);
        QVERIFY(qt.serialNumber() != otherQt.serialNumber());
        std::unique_ptr<BIGNUM, Deleter<BN_free>> serial(
            ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
        QVERIFY(!BN_is_negative(serial.get()));
        QVERIFY(BN_num_bits(serial.get()) > 96); // fails with probability 2^-32
        QVERIFY(BN_num_bits(serial.get()) <= 128);

        const QByteArray fingerprint = certificateFingerprint(ca->certificatePem);
        QCOMPARE(fingerprint.size(), 32);
        QCOMPARE(fingerprint, qt.digest(QCryptographicHash::Sha256));
        QVERIFY(fingerprint != certificateFingerprint(other->certificatePem));
    }

    void fingerprintOfGarbageIsEmpty()
    {
        QVERIFY(certificateFingerprint(QByteArray()).isEmpty());
        QVERIFY(certificateFingerprint("not a certificate").isEmpty());
        QVERIFY(certificateFingerprint(m_clientKey).isEmpty());
        const QByteArray pem = m_identity.ca.certificatePem;
        QVERIFY(certificateFingerprint(pem.left(pem.size() / 2)).isEmpty());
        QByteArray flipped = pemBody(pem);
        flipped[4] = char(flipped[4] ^ 0x55); // breaks the DER structure
        QVERIFY(certificateFingerprint(toPem(flipped, "CERTIFICATE")).isEmpty());
        // Fingerprint of what Qt sees, for the other certificates too.
        QCOMPARE(
            certificateFingerprint(m_clientCert), QSslCertificate(m_clientCert).digest(QCryptographicHash::Sha256));
        QCOMPARE(certificateFingerprint(m_identity.serverCertificatePem),
            QSslCertificate(m_identity.serverCertificatePem).digest(QCryptographicHash::Sha256));
    }

    void serverCertificateVerifiesAgainstItsCaOnly()
    {
        const QByteArray &server = m_identity.serverCertificatePem;
        int error = verifyAgainst(server, m_identity.ca.certificatePem, X509_PURPOSE_SSL_SERVER);
        QVERIFY2(error == X509_V_OK, qPrintable(verifyErrorText(error)));
        error = verifyAgainst(server, m_foreignCa.certificatePem, X509_PURPOSE_SSL_SERVER);
        QCOMPARE(error, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
        // serverAuth only: it cannot pose as a worker.
        QCOMPARE(
            verifyAgainst(server, m_identity.ca.certificatePem, X509_PURPOSE_SSL_CLIENT), X509_V_ERR_INVALID_PURPOSE);

        X509Ptr cert = parseCert(server);
        X509Ptr ca = parseCert(m_identity.ca.certificatePem);
        QVERIFY(cert && ca);
        QCOMPARE(X509_check_ca(cert.get()), 0);
        QCOMPARE(X509_get_extended_key_usage(cert.get()), quint32(XKU_SSL_SERVER));
        QCOMPARE(X509_get_key_usage(cert.get()), quint32(KU_DIGITAL_SIGNATURE));
        QCOMPARE(X509_get_signature_nid(cert.get()), NID_ecdsa_with_SHA256);
        QVERIFY(X509_get0_authority_key_id(cert.get()));
        QCOMPARE(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(cert.get()), X509_get0_subject_key_id(ca.get())), 0);
        PkeyPtr serverKey = parseKey(m_identity.serverKeyPem);
        QCOMPARE(X509_check_private_key(cert.get(), serverKey.get()), 1);

        const QSslCertificate qt(server);
        const auto names = qt.subjectAlternativeNames();
        QCOMPARE(names.values(QSsl::DnsEntry), QStringList { QStringLiteral("localhost") });
        QList<QHostAddress> addresses;
        for (const QString &ip : names.values(QSsl::IpAddressEntry))
            addresses << QHostAddress(ip);
        QCOMPARE(addresses.size(), 2);
        QVERIFY(addresses.contains(QHostAddress(QHostAddress::LocalHost)));
        QVERIFY(addresses.contains(QHostAddress(QHostAddress::LocalHostIPv6)));
        QCOMPARE(qt.issuerInfo(QSslCertificate::CommonName),
            QSslCertificate(m_identity.ca.certificatePem).subjectInfo(QSslCertificate::CommonName));
    }

    void serverCertificateInputsAreChecked()
    {
        const auto &ca = m_identity.ca;
        const QByteArray &key = m_identity.serverKeyPem;
        REQUIRE_ERROR(issueServerCertificate(ca, key, {}, 30), QStringLiteral("at least one host name"));
        REQUIRE_ERROR(issueServerCertificate(ca, key, { QStringLiteral("bad host!") }, 30),
            QStringLiteral("'bad host!'"), QStringLiteral("neither an IP address nor a valid host name"));
        REQUIRE_ERROR(
            issueServerCertificate(ca, key, { QStringLiteral("*.example.com") }, 30), QStringLiteral("wildcard"));
        REQUIRE_ERROR(issueServerCertificate(ca, key, { QStringLiteral(" ") }, 30), QStringLiteral("empty"));
        REQUIRE_ERROR(issueServerCertificate(ca, "garbage", kHostNames, 30), QStringLiteral("server's private key"),
            QStringLiteral("not a PEM private key"));
        REQUIRE_ERROR(issueServerCertificate(ca, key, kHostNames, 0), QStringLiteral("out of range"));
        const CertificateAuthority mismatched { ca.certificatePem, m_foreignCa.keyPem };
        REQUIRE_ERROR(issueServerCertificate(mismatched, key, kHostNames, 30), QStringLiteral("does not match"));
        // A leaf certificate cannot act as a CA even with its own key.
        const CertificateAuthority leaf { m_identity.serverCertificatePem, m_identity.serverKeyPem };
        REQUIRE_ERROR(issueServerCertificate(leaf, key, kHostNames, 30), QStringLiteral("not a CA certificate"));

        // Internationalised names become ACE; the certificate ends with the CA.
        auto cert = issueServerCertificate(
            m_foreignCa, key, { QStringLiteral("Bücher.Example"), QStringLiteral("10.1.2.3") }, 3650);
        REQUIRE_OK(cert);
        const QSslCertificate qt(*cert);
        QCOMPARE(qt.subjectAlternativeNames().values(QSsl::DnsEntry),
            QStringList { QStringLiteral("xn--bcher-kva.example") });
        QCOMPARE(qt.subjectAlternativeNames().values(QSsl::IpAddressEntry), QStringList { QStringLiteral("10.1.2.3") });
        QVERIFY(qt.expiryDate() <= QSslCertificate(m_foreignCa.certificatePem).expiryDate());
    }

    void clientCertificateComesFromTheCoordinator()
    {
        const QSslCertificate qt(m_clientCert);
        QVERIFY(!qt.isNull());
        // The subject is what the coordinator chose, not what the request asked for.
        QCOMPARE(qt.subjectInfo(QSslCertificate::CommonName), QStringList { QStringLiteral("worker-1") });
        QVERIFY(!m_clientCert.contains("asked-for-admin"));
        QVERIFY(!pemBody(m_clientCert).contains("asked-for-admin"));
        QVERIFY(qAbs(qt.expiryDate().secsTo(QDateTime::currentDateTimeUtc().addDays(30))) < 120);

        int error = verifyAgainst(m_clientCert, m_identity.ca.certificatePem, X509_PURPOSE_SSL_CLIENT);
        QVERIFY2(error == X509_V_OK, qPrintable(verifyErrorText(error)));
        QCOMPARE(verifyAgainst(m_clientCert, m_foreignCa.certificatePem, X509_PURPOSE_SSL_CLIENT),
            X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
        QCOMPARE(verifyAgainst(m_foreignClientCert, m_identity.ca.certificatePem, X509_PURPOSE_SSL_CLIENT),
            X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
        // clientAuth only: a worker cannot pose as the coordinator.
        QCOMPARE(verifyAgainst(m_clientCert, m_identity.ca.certificatePem, X509_PURPOSE_SSL_SERVER),
            X509_V_ERR_INVALID_PURPOSE);

        X509Ptr cert = parseCert(m_clientCert);
        QVERIFY(cert);
        QCOMPARE(X509_check_ca(cert.get()), 0);
        QCOMPARE(X509_get_extended_key_usage(cert.get()), quint32(XKU_SSL_CLIENT));
        QCOMPARE(X509_get_key_usage(cert.get()), quint32(KU_DIGITAL_SIGNATURE));
        PkeyPtr key = parseKey(m_clientKey);
        QCOMPARE(EVP_PKEY_eq(X509_get0_pubkey(cert.get()), key.get()), 1);
        QCOMPARE(X509_check_private_key(cert.get(), key.get()), 1);
    }

    void tamperedRequestsAreRefused()
    {
        auto key = generatePrivateKeyPem();
        REQUIRE_OK(key);
        auto csr = createCertificateRequest(*key, QStringLiteral("worker-77"));
        REQUIRE_OK(csr);
        QVERIFY(csr->startsWith("-----BEGIN CERTIFICATE REQUEST-----"));
        REQUIRE_OK(signCertificateRequest(m_identity.ca, *csr, QStringLiteral("worker-77"), 30));

        // The subject edited after signing: still a well-formed request, the signature no
        // longer matches.
        QByteArray der = pemBody(*csr);
        const qsizetype at = der.indexOf("worker-77");
        QVERIFY(at > 0);
        der[at + 8] = '8';
        const QByteArray edited = toPem(der, "CERTIFICATE REQUEST");
        QVERIFY(parseRequest(edited)); // parses: what fails is the signature check
        REQUIRE_ERROR(signCertificateRequest(m_identity.ca, edited, QStringLiteral("worker-77"), 30),
            QStringLiteral("not signed by its own key"));

        // The last byte of the signature flipped.
        der = pemBody(*csr);
        der[der.size() - 1] = char(der[der.size() - 1] ^ 0x01);
        const QByteArray badSignature = toPem(der, "CERTIFICATE REQUEST");
        if (parseRequest(badSignature)) // a flipped byte can also break the DER of the signature
            REQUIRE_ERROR(signCertificateRequest(m_identity.ca, badSignature, QStringLiteral("worker-77"), 30),
                QStringLiteral("not signed by its own key"));
        else
            REQUIRE_ERROR(signCertificateRequest(m_identity.ca, badSignature, QStringLiteral("worker-77"), 30),
                QStringLiteral("not a PEM certificate request"));

        // A forged request: someone else's public key, signed with the forger's key.
        auto victimKey = generatePrivateKeyPem();
        REQUIRE_OK(victimKey);
        PkeyPtr victim = parseKey(*victimKey);
        PkeyPtr forger = parseKey(*key);
        RequestPtr forged(X509_REQ_new());
        X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(forged.get()), "CN", MBSTRING_ASC,
            reinterpret_cast<const unsigned char *>("victim"), -1, -1, 0);
        QCOMPARE(X509_REQ_set_pubkey(forged.get(), victim.get()), 1);
        QVERIFY(X509_REQ_sign(forged.get(), forger.get(), EVP_sha256()) > 0);
        REQUIRE_ERROR(signCertificateRequest(m_identity.ca, requestPem(forged.get()), QStringLiteral("victim"), 30),
            QStringLiteral("not signed by its own key"));
        QCOMPARE(ERR_peek_error(), 0UL); // the error queue is left empty
    }

    void garbageInputsGiveClearErrors()
    {
        const auto &ca = m_identity.ca;
        auto csr = createCertificateRequest(m_clientKey, QStringLiteral("w"));
        REQUIRE_OK(csr);
        const QString request = QStringLiteral("certificate request");
        REQUIRE_ERROR(
            signCertificateRequest(ca, QByteArray(), QStringLiteral("w"), 30), request, QStringLiteral("empty"));
        REQUIRE_ERROR(
            signCertificateRequest(ca, "hello", QStringLiteral("w"), 30), request, QStringLiteral("not a PEM"));
        REQUIRE_ERROR(
            signCertificateRequest(ca, "-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n",
                QStringLiteral("w"), 30),
            request, QStringLiteral("not a PEM"));
        REQUIRE_ERROR(signCertificateRequest(ca, csr->left(csr->size() / 2), QStringLiteral("w"), 30), request);
        REQUIRE_ERROR(
            signCertificateRequest(ca, m_clientCert, QStringLiteral("w"), 30), request, QStringLiteral("not a PEM"));
        REQUIRE_ERROR(signCertificateRequest(ca, QByteArray(1 << 20, 'A'), QStringLiteral("w"), 30), request,
            QStringLiteral("too large"));
        QByteArray binary(4096, '\0');
        for (int i = 0; i < binary.size(); ++i)
            binary[i] = char(i * 37);
        REQUIRE_ERROR(signCertificateRequest(ca, binary, QStringLiteral("w"), 30), request);
        REQUIRE_ERROR(signCertificateRequest(ca, *csr, QString(), 30), QStringLiteral("common name is empty"));
        REQUIRE_ERROR(signCertificateRequest(ca, *csr, QString(65, QLatin1Char('x')), 30), QStringLiteral("too long"));
        REQUIRE_ERROR(signCertificateRequest(ca, *csr, QStringLiteral("w"), -5), QStringLiteral("out of range"));
        REQUIRE_ERROR(signCertificateRequest(CertificateAuthority { "junk", ca.keyPem }, *csr, QStringLiteral("w"), 30),
            QStringLiteral("CA certificate"), QStringLiteral("not a PEM certificate"));
        REQUIRE_ERROR(
            signCertificateRequest(CertificateAuthority { ca.certificatePem, "junk" }, *csr, QStringLiteral("w"), 30),
            QStringLiteral("CA's private key"), QStringLiteral("not a PEM private key"));
        REQUIRE_ERROR(signCertificateRequest(CertificateAuthority { ca.certificatePem, m_foreignCa.keyPem }, *csr,
                          QStringLiteral("w"), 30),
            QStringLiteral("does not match"));

        REQUIRE_ERROR(createCertificateRequest("garbage", QStringLiteral("w")), QStringLiteral("private key"));
        REQUIRE_ERROR(
            createCertificateRequest(m_clientCert, QStringLiteral("w")), QStringLiteral("not a PEM private key"));
        REQUIRE_ERROR(createCertificateRequest(m_clientKey, QString()), QStringLiteral("common name is empty"));
        const QByteArray encrypted
            = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n";
        REQUIRE_ERROR(createCertificateRequest(encrypted, QStringLiteral("w")), QStringLiteral("encrypted"));

        REQUIRE_ERROR(createCertificateAuthority(QString(), 10), QStringLiteral("common name is empty"));
        REQUIRE_ERROR(createCertificateAuthority(QStringLiteral("CA"), 0), QStringLiteral("out of range"));
        REQUIRE_ERROR(createCertificateAuthority(QStringLiteral("CA\nevil"), 10), QStringLiteral("control character"));
        QCOMPARE(ERR_peek_error(), 0UL);
    }

    void identityFolderIsCreatedThenLoaded()
    {
        const QString dir = folder(QStringLiteral("identity"));
        auto first = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(first);
        for (const char *name : { "ca.pem", "ca-key.pem", "server.pem", "server-key.pem" })
            QVERIFY2(QFile::exists(dir + QLatin1Char('/') + QLatin1String(name)), name);
#ifdef Q_OS_UNIX
        QCOMPARE(fileMode(dir + QStringLiteral("/ca-key.pem")), 0600);
        QCOMPARE(fileMode(dir + QStringLiteral("/server-key.pem")), 0600);
        QCOMPARE(fileMode(dir + QStringLiteral("/ca.pem")) & 077 & ~0044,
            0); // certificates are public, never writable by others
#endif
        const QByteArray caOnDisk = readFile(dir + QStringLiteral("/ca.pem"));
        QCOMPARE(first->caFingerprint, certificateFingerprint(caOnDisk));
        QCOMPARE(first->caFingerprint, QSslCertificate(first->ca.certificatePem).digest(QCryptographicHash::Sha256));
        QCOMPARE(certificateFingerprint(readFile(dir + QStringLiteral("/server.pem"))),
            certificateFingerprint(first->serverCertificatePem));
        QCOMPARE(
            verifyAgainst(first->serverCertificatePem, first->ca.certificatePem, X509_PURPOSE_SSL_SERVER), X509_V_OK);
        QVERIFY(first->caFingerprint != m_identity.caFingerprint); // a new folder, a new CA

        // Second start: everything loaded, nothing re-issued; order and duplicates of host
        // names do not matter.
        const QStringList reordered = { QStringLiteral("::1"), QStringLiteral("LOCALHOST"), QStringLiteral("127.0.0.1"),
            QStringLiteral("localhost") };
        auto second = loadOrCreateCoordinatorIdentity(dir, reordered);
        REQUIRE_OK(second);
        QCOMPARE(second->caFingerprint, first->caFingerprint);
        QCOMPARE(second->ca.keyPem, first->ca.keyPem);
        QCOMPARE(
            certificateFingerprint(second->serverCertificatePem), certificateFingerprint(first->serverCertificatePem));
        QCOMPARE(second->serverKeyPem, first->serverKeyPem);

        // New host names: a new server certificate from the same CA and the same key.
        const QStringList moved = { QStringLiteral("10.0.0.5"), QStringLiteral("coordinator.example") };
        auto third = loadOrCreateCoordinatorIdentity(dir, moved);
        REQUIRE_OK(third);
        QCOMPARE(third->caFingerprint, first->caFingerprint);
        QVERIFY(
            certificateFingerprint(third->serverCertificatePem) != certificateFingerprint(first->serverCertificatePem));
        QCOMPARE(third->serverKeyPem, first->serverKeyPem);
        QCOMPARE(certificateFingerprint(readFile(dir + QStringLiteral("/server.pem"))),
            certificateFingerprint(third->serverCertificatePem));
        const auto names = QSslCertificate(third->serverCertificatePem).subjectAlternativeNames();
        QCOMPARE(names.values(QSsl::DnsEntry), QStringList { QStringLiteral("coordinator.example") });
        QCOMPARE(names.values(QSsl::IpAddressEntry), QStringList { QStringLiteral("10.0.0.5") });
        QCOMPARE(
            verifyAgainst(third->serverCertificatePem, first->ca.certificatePem, X509_PURPOSE_SSL_SERVER), X509_V_OK);
    }

    void serverCertificateNearExpiryIsReissued()
    {
        const QString dir = folder(QStringLiteral("expiring"));
        auto first = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(first);
        auto shortLived = issueServerCertificate(first->ca, first->serverKeyPem, kHostNames, 10);
        REQUIRE_OK(shortLived);
        writeFile(dir + QStringLiteral("/server.pem"), *shortLived);
        auto second = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(second);
        QCOMPARE(second->caFingerprint, first->caFingerprint);
        QVERIFY(certificateFingerprint(second->serverCertificatePem) != certificateFingerprint(*shortLived));
        QVERIFY(
            QSslCertificate(second->serverCertificatePem).expiryDate() > QDateTime::currentDateTimeUtc().addDays(300));

        // A server certificate from some other CA is replaced by one from ours.
        auto foreign = issueServerCertificate(m_foreignCa, first->serverKeyPem, kHostNames, 300);
        REQUIRE_OK(foreign);
        writeFile(dir + QStringLiteral("/server.pem"), *foreign);
        auto third = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(third);
        QCOMPARE(
            verifyAgainst(third->serverCertificatePem, first->ca.certificatePem, X509_PURPOSE_SSL_SERVER), X509_V_OK);

        // A lost server key: a new key and a certificate that matches it.
        QVERIFY(QFile::remove(dir + QStringLiteral("/server-key.pem")));
        auto fourth = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(fourth);
        QVERIFY(fourth->serverKeyPem != first->serverKeyPem);
        X509Ptr cert = parseCert(fourth->serverCertificatePem);
        PkeyPtr key = parseKey(fourth->serverKeyPem);
        QCOMPARE(X509_check_private_key(cert.get(), key.get()), 1);
        QCOMPARE(fourth->caFingerprint, first->caFingerprint);
    }

    void brokenCaFilesAreErrorsNamingTheFile()
    {
        const QString dir = folder(QStringLiteral("broken"));
        auto created = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(created);
        const QString caPath = dir + QStringLiteral("/ca.pem");
        const QString caKeyPath = dir + QStringLiteral("/ca-key.pem");
        const QByteArray caPem = readFile(caPath);
        const QByteArray caKeyPem = readFile(caKeyPath);

        writeFile(caPath, "this is not a certificate\n");
        REQUIRE_ERROR(
            loadOrCreateCoordinatorIdentity(dir, kHostNames), caPath, QStringLiteral("not a PEM certificate"));
        QCOMPARE(readFile(caPath), QByteArray("this is not a certificate\n")); // never overwritten

        writeFile(caPath, created->serverCertificatePem);
        REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), caPath, QStringLiteral("not a CA certificate"));

        writeFile(caPath, caPem);
        writeFile(caKeyPath, m_foreignCa.keyPem);
        REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), caKeyPath, QStringLiteral("does not match"));

        QVERIFY(QFile::remove(caKeyPath));
        REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), caKeyPath, QStringLiteral("missing"));
        QVERIFY(!QFile::exists(caKeyPath)); // no new CA behind the user's back

        writeFile(caKeyPath, caKeyPem);
        QVERIFY(QFile::setPermissions(caKeyPath, QFile::ReadOwner | QFile::WriteOwner));
        writeFile(dir + QStringLiteral("/server-key.pem"), "garbage");
        REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), dir + QStringLiteral("/server-key.pem"),
            QStringLiteral("not a PEM private key"));
        writeFile(dir + QStringLiteral("/server-key.pem"), created->serverKeyPem);
        writeFile(dir + QStringLiteral("/server.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n");
        REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), dir + QStringLiteral("/server.pem"),
            QStringLiteral("not a PEM certificate"));
        writeFile(dir + QStringLiteral("/server.pem"), created->serverCertificatePem);

#ifdef Q_OS_UNIX
        if (::geteuid() != 0) { // root reads any file
            QVERIFY(QFile::setPermissions(caPath, QFileDevice::Permissions()));
            REQUIRE_ERROR(loadOrCreateCoordinatorIdentity(dir, kHostNames), caPath, QStringLiteral("cannot read"));
            QVERIFY(QFile::setPermissions(caPath, QFile::ReadOwner | QFile::WriteOwner));
        }
#endif
        auto repaired = loadOrCreateCoordinatorIdentity(dir, kHostNames);
        REQUIRE_OK(repaired);
        QCOMPARE(repaired->caFingerprint, created->caFingerprint);

#ifdef Q_OS_UNIX
        // A CA key others can read still loads, with a warning that says how to fix it.
        QVERIFY(QFile::setPermissions(
            caKeyPath, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup | QFile::ReadOther));
        QTest::ignoreMessage(QtWarningMsg,
            QRegularExpression(QStringLiteral("ca-key.pem' can be read by other users; "
                                              "restrict it with chmod 600")));
        REQUIRE_OK(loadOrCreateCoordinatorIdentity(dir, kHostNames));
#endif
    }

    void mutualTls13Handshake_data()
    {
        QTest::addColumn<QString>("host");
        QTest::newRow("ip") << QStringLiteral("127.0.0.1");
        QTest::newRow("name") << QStringLiteral("localhost");
    }

    void mutualTls13Handshake()
    {
        QFETCH(QString, host);
        FleetServer server(m_identity);
        QVERIFY2(server.listen(), qPrintable(server.errorString()));

        QSslSocket client;
        configureClient(client, m_identity.ca.certificatePem, m_clientCert, m_clientKey);
        QList<QSslError> clientErrors;
        connect(&client, &QSslSocket::sslErrors, this, [&](const QList<QSslError> &e) { clientErrors += e; });
        client.connectToHostEncrypted(host, server.port());
        QTRY_VERIFY2_WITH_TIMEOUT(client.isEncrypted() || client.state() == QAbstractSocket::UnconnectedState,
            "handshake neither finished nor failed", 5000);
        QVERIFY2(client.isEncrypted(), qPrintable(client.errorString() + QLatin1Char(' ') + describe(clientErrors)));
        QVERIFY2(clientErrors.isEmpty(), qPrintable(describe(clientErrors)));
        QCOMPARE(client.sessionProtocol(), QSsl::TlsV1_3);
        QCOMPARE(client.peerCertificate(), QSslCertificate(m_identity.serverCertificatePem));
        // The server sends the CA along with its certificate, so a worker that holds only
        // the pinned fingerprint can find the CA certificate in the chain.
        const QList<QSslCertificate> chain = client.peerCertificateChain();
        QCOMPARE(chain.size(), 2);
        QCOMPARE(chain.last().digest(QCryptographicHash::Sha256), m_identity.caFingerprint);

        QTRY_COMPARE_WITH_TIMEOUT(server.m_accepted.size(), 1, 5000);
        QSslSocket *peer = server.m_accepted.first();
        QVERIFY(peer && peer->isEncrypted());
        QCOMPARE(peer->sessionProtocol(), QSsl::TlsV1_3);
        // What the coordinator checks: a certificate, no verification errors, a known
        // fingerprint.
        QVERIFY(!peer->peerCertificate().isNull());
        QVERIFY2(peer->sslHandshakeErrors().isEmpty(), qPrintable(describe(peer->sslHandshakeErrors())));
        QVERIFY2(server.m_sslErrors.isEmpty(), qPrintable(describe(server.m_sslErrors)));
        QCOMPARE(peer->peerCertificate().digest(QCryptographicHash::Sha256), certificateFingerprint(m_clientCert));
        QCOMPARE(peer->peerCertificate().subjectInfo(QSslCertificate::CommonName),
            QStringList { QStringLiteral("worker-1") });

        client.write("hello, coordinator\n");
        QTRY_VERIFY_WITH_TIMEOUT(peer->canReadLine(), 5000);
        QCOMPARE(peer->readLine(), QByteArray("hello, coordinator\n"));
        peer->write("hello, worker\n");
        QTRY_VERIFY_WITH_TIMEOUT(client.canReadLine(), 5000);
        QCOMPARE(client.readLine(), QByteArray("hello, worker\n"));
        client.disconnectFromHost();
    }

    void clientPinningAnotherCaRefusesTheCoordinator()
    {
        FleetServer server(m_identity);
        QVERIFY(server.listen());
        QSslSocket client;
        configureClient(client, m_foreignCa.certificatePem, m_clientCert, m_clientKey);
        QSignalSpy errorSpy(&client, &QAbstractSocket::errorOccurred);
        QList<QSslError> clientErrors;
        connect(&client, &QSslSocket::sslErrors, this, [&](const QList<QSslError> &e) { clientErrors += e; });
        client.connectToHostEncrypted(QStringLiteral("127.0.0.1"), server.port());
        QTRY_VERIFY_WITH_TIMEOUT(!errorSpy.isEmpty(), 5000);
        QVERIFY(!client.isEncrypted());
        QCOMPARE(
            errorSpy.first().first().value<QAbstractSocket::SocketError>(), QAbstractSocket::SslHandshakeFailedError);
        QVERIFY(!clientErrors.isEmpty());
        bool untrustedIssuer = false;
        for (const QSslError &e : std::as_const(clientErrors))
            untrustedIssuer |= e.error() == QSslError::SelfSignedCertificateInChain; // the server sends our CA along
        QVERIFY2(untrustedIssuer, qPrintable(describe(clientErrors)));
        // The coordinator never gets an encrypted connection out of it.
        QTRY_VERIFY_WITH_TIMEOUT(!server.m_socketErrors.isEmpty(), 5000);
        QVERIFY(server.m_accepted.isEmpty());
    }

    void clientWithoutCertificateConnectsUnderQueryPeer()
    {
        FleetServer server(m_identity);
        QVERIFY(server.listen());
        QSslSocket client;
        configureClient(client, m_identity.ca.certificatePem, QByteArray(), QByteArray());
        client.connectToHostEncrypted(QStringLiteral("127.0.0.1"), server.port());
        QTRY_VERIFY_WITH_TIMEOUT(client.isEncrypted(), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(server.m_accepted.size(), 1, 5000);
        QSslSocket *peer = server.m_accepted.first();
        QVERIFY(peer->isEncrypted());
        QVERIFY(peer->peerCertificate().isNull());
        QVERIFY2(peer->sslHandshakeErrors().isEmpty(), qPrintable(describe(peer->sslHandshakeErrors())));
    }

    // Under QueryPeer the handshake succeeds whatever the client presents, so the
    // coordinator must check itself; this shows what it has to go on.
    void foreignClientCertificateIsVisibleOnTheServer()
    {
        FleetServer server(m_identity);
        QVERIFY(server.listen());
        QSslSocket client;
        configureClient(client, m_identity.ca.certificatePem, m_foreignClientCert, m_foreignClientKey);
        client.connectToHostEncrypted(QStringLiteral("127.0.0.1"), server.port());
        QTRY_VERIFY_WITH_TIMEOUT(client.isEncrypted(), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(server.m_accepted.size(), 1, 5000);
        QSslSocket *peer = server.m_accepted.first();
        QVERIFY(peer->isEncrypted());
        const QSslCertificate presented = peer->peerCertificate();
        QVERIFY(!presented.isNull());
        // Same common name as a real worker: the name proves nothing.
        QCOMPARE(presented.subjectInfo(QSslCertificate::CommonName), QStringList { QStringLiteral("worker-1") });
        QVERIFY(presented.digest(QCryptographicHash::Sha256) != certificateFingerprint(m_clientCert));
        QCOMPARE(presented.digest(QCryptographicHash::Sha256), certificateFingerprint(m_foreignClientCert));
        // The verification errors are kept on the socket and were signalled by the server.
        const QList<QSslError> errors = peer->sslHandshakeErrors();
        qInfo().noquote() << "a foreign client certificate shows on the server as:" << describe(errors);
        QVERIFY(!errors.isEmpty());
        bool untrustedIssuer = false;
        for (const QSslError &e : errors)
            untrustedIssuer |= (e.error() == QSslError::UnableToGetLocalIssuerCertificate
                                   || e.error() == QSslError::UnableToVerifyFirstCertificate)
                && e.certificate() == presented;
        QVERIFY2(untrustedIssuer, qPrintable(describe(errors)));
        QCOMPARE(server.m_sslErrors.size(), errors.size());
    }

    // The coordinator's own server certificate is not a client certificate (serverAuth
    // only): the server sees an "invalid purpose" error for it.
    void serverCertificateAsClientCertificateIsFlagged()
    {
        FleetServer server(m_identity);
        QVERIFY(server.listen());
        QSslSocket client;
        configureClient(client, m_identity.ca.certificatePem, m_identity.serverCertificatePem, m_identity.serverKeyPem);
        client.connectToHostEncrypted(QStringLiteral("127.0.0.1"), server.port());
        QTRY_VERIFY_WITH_TIMEOUT(client.isEncrypted(), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(server.m_accepted.size(), 1, 5000);
        const QList<QSslError> errors = server.m_accepted.first()->sslHandshakeErrors();
        bool invalidPurpose = false;
        for (const QSslError &e : errors)
            invalidPurpose |= e.error() == QSslError::InvalidPurpose;
        QVERIFY2(invalidPurpose, qPrintable(describe(errors)));
    }

    void tls12ClientIsRefused()
    {
        FleetServer server(m_identity);
        QVERIFY(server.listen());
        QSslSocket client;
        configureClient(client, m_identity.ca.certificatePem, m_clientCert, m_clientKey, QSsl::TlsV1_2);
        QSignalSpy errorSpy(&client, &QAbstractSocket::errorOccurred);
        client.connectToHostEncrypted(QStringLiteral("127.0.0.1"), server.port());
        QTRY_VERIFY_WITH_TIMEOUT(!errorSpy.isEmpty(), 5000);
        QVERIFY(!client.isEncrypted());
        QVERIFY(server.m_accepted.isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestPki)
#include "tst_pki.moc"
