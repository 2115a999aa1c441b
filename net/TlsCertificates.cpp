// The listener's view of the trust database: its index of certificates, reloaded when the
// database changes, one certificate read again at a handshake, and the revocations that end
// connections already open.
#include "net/TlsListener.h"

namespace flotilla::net {

Result<void> TlsListener::refreshCertificates(bool force)
{
    auto version = m_trustWatch.version();
    if (!version)
        return version.takeError();
    if (!force && *version == m_trustVersion)
        return {};
    auto certificates = m_trustWatch.certificates();
    if (!certificates)
        return certificates.takeError();
    QHash<QByteArray, CertificateRecord> index;
    index.reserve(certificates->size());
    for (const auto &record : *certificates)
        index.insert(record.fingerprint, record);
    m_certificates = std::move(index);
    m_trustVersion = *version;
    return {};
}

Result<std::optional<CertificateRecord>> TlsListener::certificateRecord(const QByteArray &fingerprint)
{
    // Changed since the last reload (an enrolment, a revocation in this process or another):
    // this one certificate is read again, by its key, so that a revocation holds from the
    // next handshake on; the whole index is reloaded on the revocation timer.
    auto version = m_trustWatch.version();
    if (!version)
        return version.takeError();
    if (*version != m_trustVersion) {
        auto fresh = m_trustWatch.certificate(fingerprint);
        if (!fresh)
            return fresh.takeError();
        if (fresh->has_value())
            m_certificates.insert(fingerprint, **fresh);
        else
            m_certificates.remove(fingerprint);
        return fresh;
    }
    const auto it = m_certificates.constFind(fingerprint);
    return it == m_certificates.cend() ? std::optional<CertificateRecord>() : std::optional<CertificateRecord>(*it);
}

void TlsListener::checkRevocations()
{
    forgetIdleBudgets();
    // Revocations by an operator, by flotilla revoke in another process, or by the budgets.
    if (auto r = refreshCertificates(false); !r) {
        logRefusal(QStringLiteral("cannot read the trust database: %1").arg(r.error()), true);
        return;
    }
    if (m_connections.empty())
        return;
    std::vector<std::pair<qint64, QString>> revoked;
    for (const auto &[id, c] : m_connections)
        if (c->authenticated)
            if (const auto it = m_certificates.constFind(c->peer.fingerprint);
                it != m_certificates.cend() && it->revoked())
                revoked.emplace_back(id, it->revokeReason);
    for (const auto &[id, reason] : revoked)
        drop(id, QStringLiteral("the worker's certificate was revoked (%1)").arg(reason), true);
}

} // namespace flotilla::net
