#pragma once
// The coordinator's own certificate authority: EC P-256 keys, the CA, the coordinator's
// server certificate, workers' certificate requests and the client certificates signed
// from them, SHA-256 fingerprints for pinning, and the identity files kept on disk.
// Free functions without shared state: any thread may call them, several at once.

#include "common/Result.h"

#include <QByteArray>
#include <QString>
#include <QStringList>

namespace flotilla::net {

// A new EC P-256 private key as unencrypted PKCS#8 PEM ("BEGIN PRIVATE KEY").
Result<QByteArray> generatePrivateKeyPem();

struct CertificateAuthority
{
    QByteArray certificatePem;
    QByteArray keyPem;
};

// A self-signed CA with a new P-256 key: basicConstraints critical CA:TRUE pathlen:0,
// keyUsage critical keyCertSign+cRLSign, subjectKeyIdentifier, random 128-bit serial,
// ECDSA-SHA256. validDays: 1 to kMaxValidDays.
Result<CertificateAuthority> createCertificateAuthority(const QString &commonName, int validDays);

// The coordinator's server certificate for serverKeyPem, signed by ca. Each host name that
// parses as an IPv4/IPv6 address becomes an IP SAN, any other a DNS SAN (internationalised
// names in their ACE form). EKU serverAuth, keyUsage digitalSignature, not a CA, subject
// and authority key identifiers. The validity is cut to end no later than the CA's.
Result<QByteArray> issueServerCertificate(
    const CertificateAuthority &ca, const QByteArray &serverKeyPem, const QStringList &hostNames, int validDays);

// A PKCS#10 certificate signing request (PEM) for keyPem, subject CN = commonName.
Result<QByteArray> createCertificateRequest(const QByteArray &keyPem, const QString &commonName);

// Signs a worker's CSR after checking that the CSR is signed by the key it carries (a
// tampered or forged request is refused) and that this key is strong enough. The subject
// is CN = commonName whatever the request asked for; EKU clientAuth, keyUsage
// digitalSignature, not a CA. Returns the certificate as PEM.
Result<QByteArray> signCertificateRequest(
    const CertificateAuthority &ca, const QByteArray &csrPem, const QString &commonName, int validDays);

// SHA-256 of the first certificate's DER encoding in certificatePem (32 raw bytes), the
// same as QSslCertificate(pem).digest(QCryptographicHash::Sha256). Empty when
// certificatePem holds no readable certificate.
QByteArray certificateFingerprint(const QByteArray &certificatePem);

struct CoordinatorIdentity
{
    CertificateAuthority ca;
    QByteArray serverCertificatePem;
    QByteArray serverKeyPem;
    QByteArray caFingerprint; // certificateFingerprint(ca.certificatePem)
};

// Loads the coordinator's identity from folder (ca.pem, ca-key.pem, server.pem,
// server-key.pem), creating what is missing on first start; private keys are written with
// mode 0600. The CA is never replaced (workers pin its fingerprint): a missing, unreadable,
// expired or mismatched CA file is an error naming the file. The server certificate is
// derived state: it is re-issued from the same CA when it is missing, names other host
// names than hostNames, expires within kServerRenewalDays, does not match server-key.pem,
// or was not issued by this CA.
Result<CoordinatorIdentity> loadOrCreateCoordinatorIdentity(const QString &folder, const QStringList &hostNames);

constexpr int kMaxValidDays = 36500;
constexpr int kCaValidDays = 3650;
constexpr int kServerValidDays = 825;
constexpr int kServerRenewalDays = 30;

} // namespace flotilla::net
