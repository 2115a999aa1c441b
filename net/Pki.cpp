#include "net/Pki.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHostAddress>
#include <QUrl>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

namespace flotilla::net {

namespace {

// Certificates start an hour in the past so that a worker whose clock lags a little
// behind the coordinator's still accepts them.
constexpr long kBackdateSeconds = 3600;
// No PEM object of ours comes near this; anything bigger is not one, and a CSR arrives
// from the network, so it is checked before OpenSSL parses it.
constexpr qsizetype kMaxPemBytes = 64 * 1024;
// RFC 5280 ub-common-name.
constexpr int kMaxCommonNameLength = 64;
// EC P-256 gives 128; weaker keys are refused as subjects of our certificates.
constexpr int kMinSecurityBits = 128;

template<auto Free> struct Deleter
{
    template<typename T> void operator()(T *p) const { Free(p); }
};

using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using RequestPtr = std::unique_ptr<X509_REQ, Deleter<X509_REQ_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using IntegerPtr = std::unique_ptr<ASN1_INTEGER, Deleter<ASN1_INTEGER_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using GeneralNamePtr = std::unique_ptr<GENERAL_NAME, Deleter<GENERAL_NAME_free>>;
using OctetStringPtr = std::unique_ptr<ASN1_OCTET_STRING, Deleter<ASN1_OCTET_STRING_free>>;
using Ia5StringPtr = std::unique_ptr<ASN1_IA5STRING, Deleter<ASN1_IA5STRING_free>>;

// Every public function starts and ends with an empty error queue, so that messages only
// carry what went wrong in this call and nothing is left behind for Qt's TLS code, which
// shares the thread's queue.
class OpenSslErrorScope
{
public:
    OpenSslErrorScope() { ERR_clear_error(); }
    ~OpenSslErrorScope() { ERR_clear_error(); }
    OpenSslErrorScope(const OpenSslErrorScope &) = delete;
    OpenSslErrorScope &operator=(const OpenSslErrorScope &) = delete;
};

QString takeOpenSslErrors()
{
    QStringList parts;
    while (const unsigned long code = ERR_get_error()) {
        char text[256];
        ERR_error_string_n(code, text, sizeof text);
        parts << QString::fromLatin1(text);
    }
    parts.removeDuplicates();
    return parts.join(QLatin1String("; "));
}

// message plus what OpenSSL said, if it said anything.
Error openSslFail(const QString &message)
{
    const QString details = takeOpenSslErrors();
    if (details.isEmpty())
        return fail(message);
    return fail(QStringLiteral("%1 (OpenSSL: %2)").arg(message, details));
}

// Keys are stored unencrypted; without this callback OpenSSL would prompt on the terminal
// for the passphrase of an encrypted one.
int refusePassphrase(char *, int, int, void *)
{
    return -1;
}

QString quoted(const QString &path)
{
    return QLatin1Char('\'') + QDir::toNativeSeparators(path) + QLatin1Char('\'');
}

Result<void> checkPemInput(const QByteArray &pem, const QString &what)
{
    if (pem.trimmed().isEmpty())
        return fail(QStringLiteral("%1 is empty").arg(what));
    if (pem.size() > kMaxPemBytes)
        return fail(QStringLiteral("%1 is too large to be a PEM object (%2 bytes, at most %3)")
                        .arg(what)
                        .arg(pem.size())
                        .arg(kMaxPemBytes));
    return {};
}

BioPtr readOnlyBio(const QByteArray &data)
{
    return BioPtr(BIO_new_mem_buf(data.constData(), int(data.size())));
}

Result<QByteArray> drainBio(BIO *bio, const QString &what)
{
    char *data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    if (size <= 0 || !data)
        return openSslFail(QStringLiteral("cannot encode %1 as PEM").arg(what));
    return QByteArray(data, qsizetype(size));
}

Result<X509Ptr> parseCertificate(const QByteArray &pem, const QString &what)
{
    if (auto ok = checkPemInput(pem, what); !ok)
        return ok.takeError();
    BioPtr bio = readOnlyBio(pem);
    X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!cert)
        return openSslFail(QStringLiteral("%1 is not a PEM certificate").arg(what));
    return cert;
}

Result<PkeyPtr> parsePrivateKey(const QByteArray &pem, const QString &what)
{
    if (auto ok = checkPemInput(pem, what); !ok)
        return ok.takeError();
    if (pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || pem.contains("Proc-Type: 4,ENCRYPTED"))
        return fail(QStringLiteral("%1 is encrypted with a passphrase; Flotilla needs an unencrypted key "
                                   "(decrypt it with `openssl pkey`)")
                        .arg(what));
    BioPtr bio = readOnlyBio(pem);
    PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!key)
        return openSslFail(QStringLiteral("%1 is not a PEM private key").arg(what));
    return key;
}

Result<RequestPtr> parseRequest(const QByteArray &pem, const QString &what)
{
    if (auto ok = checkPemInput(pem, what); !ok)
        return ok.takeError();
    BioPtr bio = readOnlyBio(pem);
    RequestPtr request(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!request)
        return openSslFail(QStringLiteral("%1 is not a PEM certificate request").arg(what));
    return request;
}

Result<QByteArray> certificateToPem(X509 *cert)
{
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1)
        return openSslFail(QStringLiteral("cannot encode the certificate as PEM"));
    return drainBio(bio.get(), QStringLiteral("the certificate"));
}

Result<QByteArray> privateKeyToPem(EVP_PKEY *key)
{
    BioPtr bio(BIO_new(BIO_s_mem()));
    // PEM_write_bio_PrivateKey writes PKCS#8 ("BEGIN PRIVATE KEY"), unencrypted.
    if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
        return openSslFail(QStringLiteral("cannot encode the private key as PEM"));
    return drainBio(bio.get(), QStringLiteral("the private key"));
}

Result<QByteArray> requestToPem(X509_REQ *request)
{
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_X509_REQ(bio.get(), request) != 1)
        return openSslFail(QStringLiteral("cannot encode the certificate request as PEM"));
    return drainBio(bio.get(), QStringLiteral("the certificate request"));
}

QDateTime toDateTime(const ASN1_TIME *time)
{
    std::tm tm {};
    if (!time || ASN1_TIME_to_tm(time, &tm) != 1)
        return {};
    return QDateTime(
        QDate(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday), QTime(tm.tm_hour, tm.tm_min, tm.tm_sec), Qt::UTC);
}

QString describeTime(const ASN1_TIME *time)
{
    return toDateTime(time).toString(Qt::ISODate);
}

Result<void> checkCommonName(const QString &commonName)
{
    if (commonName.trimmed().isEmpty())
        return fail(QStringLiteral("the common name is empty: give the certificate a name"));
    if (commonName.size() > kMaxCommonNameLength)
        return fail(QStringLiteral("the common name '%1' is too long (%2 characters, at most %3)")
                        .arg(commonName)
                        .arg(commonName.size())
                        .arg(kMaxCommonNameLength));
    for (const QChar c : commonName) {
        if (c.category() == QChar::Other_Control)
            return fail(QStringLiteral("the common name '%1' contains a control character").arg(commonName));
    }
    return {};
}

Result<void> checkValidDays(int validDays)
{
    if (validDays < 1 || validDays > kMaxValidDays)
        return fail(QStringLiteral("a validity of %1 days is out of range: give 1 to %2 days")
                        .arg(validDays)
                        .arg(kMaxValidDays));
    return {};
}

Result<void> checkKeyStrength(EVP_PKEY *key, const QString &what)
{
    const int bits = EVP_PKEY_get_security_bits(key);
    if (bits < kMinSecurityBits)
        return fail(QStringLiteral("%1 is too weak (%2-bit security, at least %3 needed): use an EC P-256 key")
                        .arg(what)
                        .arg(bits)
                        .arg(kMinSecurityBits));
    return {};
}

// One subject alternative name: an IP address as its 4 or 16 network-order bytes, or a
// DNS name in lower-case ACE form.
struct HostName
{
    bool isIp = false;
    QByteArray value;

    QString describe() const
    {
        if (!isIp)
            return QLatin1String("DNS:") + QString::fromLatin1(value);
        QHostAddress address;
        if (value.size() == 4) {
            const auto *b = reinterpret_cast<const uchar *>(value.constData());
            address.setAddress(quint32(b[0]) << 24 | quint32(b[1]) << 16 | quint32(b[2]) << 8 | quint32(b[3]));
        } else if (value.size() == 16) {
            address.setAddress(reinterpret_cast<const quint8 *>(value.constData()));
        } else {
            return QLatin1String("IP:invalid-") + QString::fromLatin1(value.toHex());
        }
        return QLatin1String("IP:") + address.toString();
    }
};

bool isValidDnsName(const QByteArray &ace)
{
    if (ace.isEmpty() || ace.size() > 253)
        return false;
    for (const QByteArray &label : ace.split('.')) {
        if (label.isEmpty() || label.size() > 63 || label.startsWith('-') || label.endsWith('-'))
            return false;
        for (const char c : label) {
            const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
            if (!ok)
                return false;
        }
    }
    return true;
}

Result<QList<HostName>> parseHostNames(const QStringList &hostNames)
{
    if (hostNames.isEmpty())
        return fail(QStringLiteral("the server certificate needs at least one host name or IP address "
                                   "that workers use to reach the coordinator"));
    QList<HostName> parsed;
    QStringList seen;
    for (const QString &raw : hostNames) {
        const QString name = raw.trimmed();
        if (name.isEmpty())
            return fail(QStringLiteral("a host name for the server certificate is empty"));
        HostName entry;
        QHostAddress address;
        if (address.setAddress(name)) {
            entry.isIp = true;
            if (address.protocol() == QAbstractSocket::IPv4Protocol) {
                const quint32 v4 = address.toIPv4Address();
                const char bytes[4] = { char(v4 >> 24), char(v4 >> 16), char(v4 >> 8), char(v4) };
                entry.value = QByteArray(bytes, 4);
            } else {
                const Q_IPV6ADDR v6 = address.toIPv6Address();
                entry.value = QByteArray(reinterpret_cast<const char *>(v6.c), 16);
            }
        } else {
            QString dns = name;
            if (dns.endsWith(QLatin1Char('.')))
                dns.chop(1);
            if (dns.contains(QLatin1Char('*')))
                return fail(QStringLiteral("the host name '%1' is a wildcard; give the coordinator's exact "
                                           "host names")
                                .arg(name));
            const QByteArray ace = QUrl::toAce(dns).toLower();
            if (!isValidDnsName(ace))
                return fail(QStringLiteral("'%1' is neither an IP address nor a valid host name").arg(name));
            entry.value = ace;
        }
        const QString key = entry.describe();
        if (seen.contains(key))
            continue;
        seen << key;
        parsed << entry;
    }
    return parsed;
}

QStringList describeHostNames(const QList<HostName> &names)
{
    QStringList described;
    for (const HostName &name : names)
        described << name.describe();
    described.removeDuplicates();
    described.sort();
    return described;
}

// The subject alternative names of a certificate, in the form describeHostNames gives.
QStringList subjectAlternativeNames(X509 *cert)
{
    GeneralNamesPtr names(static_cast<GENERAL_NAMES *>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
    QList<HostName> entries;
    if (names) {
        for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
            const GENERAL_NAME *name = sk_GENERAL_NAME_value(names.get(), i);
            HostName entry;
            if (name->type == GEN_DNS) {
                const ASN1_IA5STRING *s = name->d.dNSName;
                entry.value
                    = QByteArray(reinterpret_cast<const char *>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s))
                          .toLower();
            } else if (name->type == GEN_IPADD) {
                const ASN1_OCTET_STRING *s = name->d.iPAddress;
                entry.isIp = true;
                entry.value
                    = QByteArray(reinterpret_cast<const char *>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
            } else {
                continue;
            }
            entries << entry;
        }
    }
    return describeHostNames(entries);
}

Result<GeneralNamesPtr> toGeneralNames(const QList<HostName> &hostNames)
{
    GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
    if (!names)
        return openSslFail(QStringLiteral("out of memory building the subject alternative names"));
    for (const HostName &host : hostNames) {
        GeneralNamePtr name(GENERAL_NAME_new());
        if (!name)
            return openSslFail(QStringLiteral("out of memory building the subject alternative names"));
        if (host.isIp) {
            OctetStringPtr ip(ASN1_OCTET_STRING_new());
            if (!ip
                || ASN1_OCTET_STRING_set(ip.get(), reinterpret_cast<const unsigned char *>(host.value.constData()),
                       int(host.value.size()))
                    != 1)
                return openSslFail(QStringLiteral("cannot encode the IP address %1").arg(host.describe()));
            GENERAL_NAME_set0_value(name.get(), GEN_IPADD, ip.release());
        } else {
            Ia5StringPtr dns(ASN1_IA5STRING_new());
            if (!dns || ASN1_STRING_set(dns.get(), host.value.constData(), int(host.value.size())) != 1)
                return openSslFail(QStringLiteral("cannot encode the host name %1").arg(host.describe()));
            GENERAL_NAME_set0_value(name.get(), GEN_DNS, dns.release());
        }
        if (sk_GENERAL_NAME_push(names.get(), name.get()) <= 0)
            return openSslFail(QStringLiteral("out of memory building the subject alternative names"));
        name.release(); // the stack owns it now
    }
    return names;
}

Result<void> setRandomSerial(X509 *cert)
{
    unsigned char bytes[16];
    BignumPtr number;
    do {
        if (RAND_bytes(bytes, sizeof bytes) != 1)
            return openSslFail(QStringLiteral("the random number generator failed while choosing a serial number"));
        number.reset(BN_bin2bn(bytes, sizeof bytes, nullptr));
        if (!number)
            return openSslFail(QStringLiteral("cannot build a serial number"));
    } while (BN_is_zero(number.get()));
    IntegerPtr serial(BN_to_ASN1_INTEGER(number.get(), nullptr));
    if (!serial || X509_set_serialNumber(cert, serial.get()) != 1)
        return openSslFail(QStringLiteral("cannot set the certificate's serial number"));
    return {};
}

Result<void> addExtension(X509 *cert, X509V3_CTX *context, int nid, const char *value)
{
    ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, context, nid, value));
    if (!extension || X509_add_ext(cert, extension.get(), -1) != 1)
        return openSslFail(QStringLiteral("cannot add the %1 extension").arg(QLatin1String(OBJ_nid2ln(nid))));
    return {};
}

enum class CertificateKind { Authority, Server, Client };

struct Issuer
{
    X509 *cert = nullptr; // null for a self-signed certificate
    EVP_PKEY *key = nullptr;
};

// Builds and signs one certificate for subjectKey's public half.
Result<X509Ptr> buildCertificate(CertificateKind kind, const QString &commonName, EVP_PKEY *subjectKey,
    const Issuer &issuer, int validDays, const GENERAL_NAMES *alternativeNames)
{
    X509Ptr cert(X509_new());
    if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1)
        return openSslFail(QStringLiteral("cannot create a certificate"));
    if (auto ok = setRandomSerial(cert.get()); !ok)
        return ok.takeError();

    X509_NAME *subject = X509_get_subject_name(cert.get());
    const QByteArray cn = commonName.toUtf8();
    if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
            reinterpret_cast<const unsigned char *>(cn.constData()), int(cn.size()), -1, 0)
        != 1)
        return openSslFail(QStringLiteral("cannot use '%1' as the certificate's common name").arg(commonName));
    X509_NAME *issuerName = issuer.cert ? X509_get_subject_name(issuer.cert) : subject;
    if (X509_set_issuer_name(cert.get(), issuerName) != 1 || X509_set_pubkey(cert.get(), subjectKey) != 1)
        return openSslFail(QStringLiteral("cannot fill in the certificate"));

    if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds)
        || !X509_time_adj_ex(X509_getm_notAfter(cert.get()), validDays, 0, nullptr))
        return openSslFail(QStringLiteral("cannot set the certificate's validity"));
    // A certificate cannot outlive the CA that vouches for it.
    if (issuer.cert && ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(issuer.cert)) > 0) {
        if (X509_set1_notAfter(cert.get(), X509_get0_notAfter(issuer.cert)) != 1)
            return openSslFail(QStringLiteral("cannot set the certificate's validity"));
    }

    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer.cert ? issuer.cert : cert.get(), cert.get(), nullptr, nullptr, 0);

    struct Extension
    {
        int nid;
        const char *value;
    };
    std::vector<Extension> extensions;
    switch (kind) {
    case CertificateKind::Authority:
        extensions = { { NID_basic_constraints, "critical,CA:TRUE,pathlen:0" },
            { NID_key_usage, "critical,keyCertSign,cRLSign" }, { NID_subject_key_identifier, "hash" } };
        break;
    case CertificateKind::Server:
        extensions = { { NID_basic_constraints, "critical,CA:FALSE" }, { NID_key_usage, "critical,digitalSignature" },
            { NID_ext_key_usage, "serverAuth" }, { NID_subject_key_identifier, "hash" },
            { NID_authority_key_identifier, "keyid:always" } };
        break;
    case CertificateKind::Client:
        extensions = { { NID_basic_constraints, "critical,CA:FALSE" }, { NID_key_usage, "critical,digitalSignature" },
            { NID_ext_key_usage, "clientAuth" }, { NID_subject_key_identifier, "hash" },
            { NID_authority_key_identifier, "keyid:always" } };
        break;
    }
    for (const Extension &extension : extensions) {
        if (auto ok = addExtension(cert.get(), &context, extension.nid, extension.value); !ok)
            return ok.takeError();
    }
    if (alternativeNames
        && X509_add1_ext_i2d(
               cert.get(), NID_subject_alt_name, const_cast<GENERAL_NAMES *>(alternativeNames), 0, X509V3_ADD_DEFAULT)
            != 1)
        return openSslFail(QStringLiteral("cannot add the subject alternative names"));

    if (X509_sign(cert.get(), issuer.key, EVP_sha256()) <= 0)
        return openSslFail(QStringLiteral("cannot sign the certificate"));
    return cert;
}

struct LoadedAuthority
{
    X509Ptr cert;
    PkeyPtr key;
};

// Parses a CA and checks that it can sign: a CA certificate, self-signed, not expired, and
// the key is the one the certificate is for. certWhat/keyWhat name the inputs in errors.
Result<LoadedAuthority> loadAuthority(
    const CertificateAuthority &ca, const QString &certWhat, const QString &keyWhat, const QString &remedy)
{
    auto cert = parseCertificate(ca.certificatePem, certWhat);
    if (!cert)
        return fail(cert.error() + remedy);
    auto key = parsePrivateKey(ca.keyPem, keyWhat);
    if (!key)
        return fail(key.error() + remedy);
    X509 *c = cert->get();
    if (X509_check_ca(c) == 0)
        return fail(QStringLiteral("%1 is not a CA certificate (no basicConstraints CA:TRUE)%2").arg(certWhat, remedy));
    if (X509_check_issued(c, c) != X509_V_OK || X509_verify(c, X509_get0_pubkey(c)) != 1)
        return openSslFail(QStringLiteral("%1 is not a self-signed CA certificate%2").arg(certWhat, remedy));
    if (X509_check_private_key(c, key->get()) != 1) {
        ERR_clear_error(); // only says "key values mismatch", which the message already does
        return fail(QStringLiteral("%1 does not match %2: the key belongs to another certificate%3")
                        .arg(keyWhat, certWhat, remedy));
    }
    if (X509_cmp_current_time(X509_get0_notAfter(c)) <= 0)
        return fail(QStringLiteral("%1 expired on %2%3").arg(certWhat, describeTime(X509_get0_notAfter(c)), remedy));
    return LoadedAuthority { std::move(cert).value(), std::move(key).value() };
}

Result<LoadedAuthority> loadAuthority(const CertificateAuthority &ca)
{
    return loadAuthority(ca, QStringLiteral("the CA certificate"), QStringLiteral("the CA's private key"), QString());
}

Result<QByteArray> issueServerCertificate(
    const LoadedAuthority &ca, EVP_PKEY *serverKey, const QStringList &hostNames, int validDays)
{
    if (auto ok = checkValidDays(validDays); !ok)
        return ok.takeError();
    if (auto ok = checkKeyStrength(serverKey, QStringLiteral("the server's key")); !ok)
        return ok.takeError();
    auto names = parseHostNames(hostNames);
    if (!names)
        return names.takeError();
    auto generalNames = toGeneralNames(*names);
    if (!generalNames)
        return generalNames.takeError();
    auto cert = buildCertificate(CertificateKind::Server, QStringLiteral("Flotilla coordinator"), serverKey,
        Issuer { ca.cert.get(), ca.key.get() }, validDays, generalNames->get());
    if (!cert)
        return cert.takeError();
    return certificateToPem(cert->get());
}

Result<QByteArray> readPemFile(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1: %2; check the file's owner and permissions")
                        .arg(quoted(path), file.errorString()));
    if (file.size() > kMaxPemBytes)
        return fail(QStringLiteral("%1 is too large to be a PEM file (%2 bytes, at most %3)")
                        .arg(quoted(path))
                        .arg(file.size())
                        .arg(kMaxPemBytes));
    return file.readAll();
}

void warnIfReadableByOthers(const QString &path)
{
#ifdef Q_OS_UNIX
    const QFile::Permissions others = QFile::ReadGroup | QFile::WriteGroup | QFile::ReadOther | QFile::WriteOther;
    if (QFileInfo(path).permissions() & others)
        qCWarning(lcEnrolment).noquote() << "the private key" << quoted(path)
                                   << "can be read by other users; restrict it with chmod 600";
#else
    Q_UNUSED(path);
#endif
}

constexpr int kPrivateFileMode = int(QFile::ReadOwner | QFile::WriteOwner);

} // namespace

Result<QByteArray> generatePrivateKeyPem()
{
    OpenSslErrorScope scope;
    PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    if (!key)
        return openSslFail(QStringLiteral("cannot generate an EC P-256 key"));
    return privateKeyToPem(key.get());
}

Result<CertificateAuthority> createCertificateAuthority(const QString &commonName, int validDays)
{
    OpenSslErrorScope scope;
    if (auto ok = checkCommonName(commonName); !ok)
        return ok.takeError();
    if (auto ok = checkValidDays(validDays); !ok)
        return ok.takeError();
    PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    if (!key)
        return openSslFail(QStringLiteral("cannot generate an EC P-256 key for the certificate authority"));
    auto cert = buildCertificate(
        CertificateKind::Authority, commonName, key.get(), Issuer { nullptr, key.get() }, validDays, nullptr);
    if (!cert)
        return cert.takeError();
    auto certPem = certificateToPem(cert->get());
    if (!certPem)
        return certPem.takeError();
    auto keyPem = privateKeyToPem(key.get());
    if (!keyPem)
        return keyPem.takeError();
    return CertificateAuthority { std::move(certPem).value(), std::move(keyPem).value() };
}

Result<QByteArray> issueServerCertificate(
    const CertificateAuthority &ca, const QByteArray &serverKeyPem, const QStringList &hostNames, int validDays)
{
    OpenSslErrorScope scope;
    auto authority = loadAuthority(ca);
    if (!authority)
        return authority.takeError();
    auto key = parsePrivateKey(serverKeyPem, QStringLiteral("the server's private key"));
    if (!key)
        return key.takeError();
    return issueServerCertificate(*authority, key->get(), hostNames, validDays);
}

Result<QByteArray> createCertificateRequest(const QByteArray &keyPem, const QString &commonName)
{
    OpenSslErrorScope scope;
    if (auto ok = checkCommonName(commonName); !ok)
        return ok.takeError();
    auto key = parsePrivateKey(keyPem, QStringLiteral("the worker's private key"));
    if (!key)
        return key.takeError();
    RequestPtr request(X509_REQ_new());
    // Version 1 of PKCS#10 is encoded as 0.
    if (!request || X509_REQ_set_version(request.get(), 0) != 1)
        return openSslFail(QStringLiteral("cannot create a certificate request"));
    X509_NAME *subject = X509_REQ_get_subject_name(request.get());
    const QByteArray cn = commonName.toUtf8();
    if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
            reinterpret_cast<const unsigned char *>(cn.constData()), int(cn.size()), -1, 0)
        != 1)
        return openSslFail(QStringLiteral("cannot use '%1' as the request's common name").arg(commonName));
    if (X509_REQ_set_pubkey(request.get(), key->get()) != 1)
        return openSslFail(QStringLiteral("cannot put the public key into the certificate request"));
    if (X509_REQ_sign(request.get(), key->get(), EVP_sha256()) <= 0)
        return openSslFail(QStringLiteral("cannot sign the certificate request"));
    return requestToPem(request.get());
}

Result<QByteArray> signCertificateRequest(
    const CertificateAuthority &ca, const QByteArray &csrPem, const QString &commonName, int validDays)
{
    OpenSslErrorScope scope;
    if (auto ok = checkCommonName(commonName); !ok)
        return ok.takeError();
    if (auto ok = checkValidDays(validDays); !ok)
        return ok.takeError();
    auto authority = loadAuthority(ca);
    if (!authority)
        return authority.takeError();
    auto request = parseRequest(csrPem, QStringLiteral("the certificate request"));
    if (!request)
        return request.takeError();
    EVP_PKEY *publicKey = X509_REQ_get0_pubkey(request->get());
    if (!publicKey)
        return openSslFail(QStringLiteral("the certificate request carries no usable public key; "
                                          "create a new request"));
    // Proof of possession: only the holder of the private key can have signed the request.
    if (X509_REQ_verify(request->get(), publicKey) != 1)
        return openSslFail(QStringLiteral("the certificate request is not signed by its own key (it was altered "
                                          "or forged); create a new request from the worker's key"));
    if (auto ok = checkKeyStrength(publicKey, QStringLiteral("the certificate request's key")); !ok)
        return ok.takeError();
    // Only the key is taken from the request; the subject and the extensions are ours.
    auto cert = buildCertificate(CertificateKind::Client, commonName, publicKey,
        Issuer { authority->cert.get(), authority->key.get() }, validDays, nullptr);
    if (!cert)
        return cert.takeError();
    return certificateToPem(cert->get());
}

QByteArray certificateFingerprint(const QByteArray &certificatePem)
{
    OpenSslErrorScope scope;
    auto cert = parseCertificate(certificatePem, QString());
    if (!cert)
        return {};
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (X509_digest(cert->get(), EVP_sha256(), digest, &length) != 1)
        return {};
    return QByteArray(reinterpret_cast<const char *>(digest), int(length));
}

Result<CoordinatorIdentity> loadOrCreateCoordinatorIdentity(const QString &folder, const QStringList &hostNames)
{
    OpenSslErrorScope scope;
    if (folder.isEmpty())
        return fail(QStringLiteral("no folder given for the coordinator's certificates"));
    const QDir dir(folder);
    if (!dir.exists()) {
        if (!QDir().mkpath(dir.absolutePath()))
            return fail(QStringLiteral("cannot create the folder %1 for the coordinator's certificates; check that "
                                       "its parent exists and is writable")
                            .arg(quoted(dir.absolutePath())));
        QFile::setPermissions(dir.absolutePath(), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    }
    const QString caPath = dir.absoluteFilePath(QStringLiteral("ca.pem"));
    const QString caKeyPath = dir.absoluteFilePath(QStringLiteral("ca-key.pem"));
    const QString serverPath = dir.absoluteFilePath(QStringLiteral("server.pem"));
    const QString serverKeyPath = dir.absoluteFilePath(QStringLiteral("server-key.pem"));
    // Starting over with a new CA is the user's call: it invalidates every join token.
    const auto remedy = [](const QString &toDelete) {
        return QStringLiteral("; restore it from a backup, or delete %1 to create a new certificate authority "
                              "(every worker then needs a new join token)")
            .arg(toDelete);
    };
    const QString newCaRemedy = remedy(quoted(caPath) + QLatin1String(" and ") + quoted(caKeyPath));

    // The CA: workers pin its fingerprint, so it is created once and never replaced here.
    CoordinatorIdentity identity;
    const bool haveCa = QFileInfo::exists(caPath);
    const bool haveCaKey = QFileInfo::exists(caKeyPath);
    LoadedAuthority authority;
    if (!haveCa && !haveCaKey) {
        auto created = createCertificateAuthority(QStringLiteral("Flotilla coordinator CA"), kCaValidDays);
        if (!created)
            return created.takeError();
        // The key first: a crash in between leaves a key without a certificate, which the
        // next start reports instead of silently making a second CA.
        if (auto ok = writeFileAtomically(caKeyPath, created->keyPem, kPrivateFileMode); !ok)
            return ok.takeError();
        if (auto ok = writeFileAtomically(caPath, created->certificatePem); !ok)
            return ok.takeError();
        qCInfo(lcEnrolment).noquote() << "created a new certificate authority in" << quoted(dir.absolutePath());
        identity.ca = std::move(created).value();
    } else if (!haveCa) {
        return fail(QStringLiteral("%1 is missing while %2 exists").arg(quoted(caPath), quoted(caKeyPath))
            + remedy(quoted(caKeyPath)));
    } else if (!haveCaKey) {
        return fail(QStringLiteral("%1 is missing while %2 exists").arg(quoted(caKeyPath), quoted(caPath))
            + remedy(quoted(caPath)));
    } else {
        auto certPem = readPemFile(caPath);
        if (!certPem)
            return certPem.takeError();
        auto keyPem = readPemFile(caKeyPath);
        if (!keyPem)
            return keyPem.takeError();
        identity.ca = CertificateAuthority { std::move(certPem).value(), std::move(keyPem).value() };
        warnIfReadableByOthers(caKeyPath);
    }
    {
        auto loaded = loadAuthority(identity.ca, quoted(caPath), quoted(caKeyPath), newCaRemedy);
        if (!loaded)
            return loaded.takeError();
        authority = std::move(loaded).value();
    }
    // Hand back canonical PEM, whatever else the files hold around it.
    {
        auto certPem = certificateToPem(authority.cert.get());
        if (!certPem)
            return certPem.takeError();
        auto keyPem = privateKeyToPem(authority.key.get());
        if (!keyPem)
            return keyPem.takeError();
        identity.ca = CertificateAuthority { std::move(certPem).value(), std::move(keyPem).value() };
    }
    const QDateTime caExpiry = toDateTime(X509_get0_notAfter(authority.cert.get()));
    if (caExpiry < QDateTime::currentDateTimeUtc().addDays(kServerRenewalDays))
        qCWarning(lcEnrolment).noquote() << QStringLiteral("the certificate authority %1 expires on %2; create a new one "
                                                     "and new join tokens before then")
                                          .arg(quoted(caPath), caExpiry.toString(Qt::ISODate));

    // The server key: created once, kept across re-issued certificates.
    PkeyPtr serverKey;
    if (QFileInfo::exists(serverKeyPath)) {
        auto pem = readPemFile(serverKeyPath);
        if (!pem)
            return pem.takeError();
        auto key = parsePrivateKey(*pem, quoted(serverKeyPath));
        if (!key)
            return key.takeError();
        serverKey = std::move(key).value();
        warnIfReadableByOthers(serverKeyPath);
    } else {
        PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
        if (!key)
            return openSslFail(QStringLiteral("cannot generate an EC P-256 key for the server"));
        auto pem = privateKeyToPem(key.get());
        if (!pem)
            return pem.takeError();
        if (auto ok = writeFileAtomically(serverKeyPath, *pem, kPrivateFileMode); !ok)
            return ok.takeError();
        serverKey = std::move(key);
    }

    // The server certificate: derived from the CA, the server key and the host names, so
    // it is re-issued whenever it no longer fits them.
    QString reissueBecause;
    X509Ptr serverCert;
    if (!QFileInfo::exists(serverPath)) {
        reissueBecause = QStringLiteral("there is none yet");
    } else {
        auto pem = readPemFile(serverPath);
        if (!pem)
            return pem.takeError();
        auto cert = parseCertificate(*pem, quoted(serverPath));
        if (!cert)
            return cert.takeError();
        serverCert = std::move(cert).value();
        X509 *c = serverCert.get();
        const QStringList wanted = [&]() -> QStringList {
            auto parsed = parseHostNames(hostNames);
            return parsed ? describeHostNames(*parsed) : QStringList();
        }();
        if (X509_check_private_key(c, serverKey.get()) != 1)
            reissueBecause = QStringLiteral("it does not match %1").arg(quoted(serverKeyPath));
        else if (X509_check_issued(authority.cert.get(), c) != X509_V_OK
            || X509_verify(c, X509_get0_pubkey(authority.cert.get())) != 1)
            reissueBecause = QStringLiteral("it was not issued by %1").arg(quoted(caPath));
        else if (wanted.isEmpty() || subjectAlternativeNames(c) != wanted)
            reissueBecause = QStringLiteral("its host names %1 differ from %2")
                                 .arg(subjectAlternativeNames(c).join(QLatin1Char(',')), wanted.join(QLatin1Char(',')));
        else if (toDateTime(X509_get0_notAfter(c)) < QDateTime::currentDateTimeUtc().addDays(kServerRenewalDays))
            reissueBecause = QStringLiteral("it expires on %1").arg(describeTime(X509_get0_notAfter(c)));
        else if (X509_cmp_current_time(X509_get0_notBefore(c)) >= 0)
            reissueBecause = QStringLiteral("it is not valid before %1").arg(describeTime(X509_get0_notBefore(c)));
        ERR_clear_error();
    }
    if (!reissueBecause.isEmpty()) {
        auto pem = issueServerCertificate(authority, serverKey.get(), hostNames, kServerValidDays);
        if (!pem)
            return pem.takeError();
        if (auto ok = writeFileAtomically(serverPath, *pem); !ok)
            return ok.takeError();
        qCInfo(lcEnrolment).noquote() << "issued a new server certificate" << quoted(serverPath) << "because"
                                << reissueBecause;
        identity.serverCertificatePem = std::move(pem).value();
    } else {
        auto pem = certificateToPem(serverCert.get());
        if (!pem)
            return pem.takeError();
        identity.serverCertificatePem = std::move(pem).value();
    }
    auto serverKeyPem = privateKeyToPem(serverKey.get());
    if (!serverKeyPem)
        return serverKeyPem.takeError();
    identity.serverKeyPem = std::move(serverKeyPem).value();
    identity.caFingerprint = certificateFingerprint(identity.ca.certificatePem);
    return identity;
}

} // namespace flotilla::net
