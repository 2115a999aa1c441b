#include "net/TrustStore.h"

#include "common/AtomicFile.h"

#include <QCborMap>
#include <QCborValue>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLockFile>
#include <QRandomGenerator>

namespace flotilla::net {

namespace {

const QString kTokenPrefix = QStringLiteral("flt1.");

QByteArray randomBytes(int n)
{
    QByteArray out(n, Qt::Uninitialized);
    QRandomGenerator::system()->fillRange(reinterpret_cast<quint32 *>(out.data()), n / 4);
    return out;
}

bool constantTimeEqual(const QByteArray &a, const QByteArray &b)
{
    if (a.size() != b.size())
        return false;
    unsigned char diff = 0;
    for (qsizetype i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

QString when(qint64 ms)
{
    return QDateTime::fromMSecsSinceEpoch(ms, Qt::UTC).toString(QStringLiteral("yyyy-MM-dd HH:mm:ss 'UTC'"));
}

QString hex(const QByteArray &b)
{
    return QString::fromLatin1(b.toHex());
}

} // namespace

QString describe(Role role)
{
    return role == Role::Operator ? QStringLiteral("operator") : QStringLiteral("worker");
}

namespace {

Role roleFrom(const QJsonObject &o)
{
    return o.value(QStringLiteral("role")).toString() == QLatin1String("operator") ? Role::Operator : Role::Worker;
}

} // namespace

TokenRecord::State TokenRecord::state(qint64 nowMs) const
{
    if (revokedMs != 0)
        return State::Revoked;
    if (usesLeft <= 0)
        return State::UsedUp;
    if (nowMs >= expiresMs)
        return State::Expired;
    return State::Live;
}

QString describe(TokenRecord::State state)
{
    switch (state) {
    case TokenRecord::State::Live:
        return QStringLiteral("live");
    case TokenRecord::State::Expired:
        return QStringLiteral("expired");
    case TokenRecord::State::UsedUp:
        return QStringLiteral("used up");
    case TokenRecord::State::Revoked:
        return QStringLiteral("revoked");
    }
    return {};
}

QString JoinToken::encode() const
{
    QCborMap map{{QStringLiteral("h"), host},
                 {QStringLiteral("p"), int(port)},
                 {QStringLiteral("f"), caFingerprint},
                 {QStringLiteral("i"), id},
                 {QStringLiteral("s"), secret},
                 {QStringLiteral("e"), expiresMs}};
    // Absent: a worker's token, as every token was before operators.
    if (role == Role::Operator)
        map.insert(QStringLiteral("r"), QStringLiteral("operator"));
    return kTokenPrefix
           + QString::fromLatin1(map.toCborValue().toCbor().toBase64(QByteArray::Base64UrlEncoding
                                                                      | QByteArray::OmitTrailingEquals));
}

Result<JoinToken> JoinToken::decode(const QString &text)
{
    const QString trimmed = text.trimmed();
    if (!trimmed.startsWith(kTokenPrefix))
        return fail(QStringLiteral("this is not a Flotilla join token (it should start with '%1')").arg(kTokenPrefix));
    if (trimmed.size() > 1024)
        return fail(QStringLiteral("this join token is too long to be one"));
    const auto decoded = QByteArray::fromBase64Encoding(trimmed.mid(kTokenPrefix.size()).toLatin1(),
                                                        QByteArray::Base64UrlEncoding
                                                            | QByteArray::AbortOnBase64DecodingErrors);
    if (!decoded)
        return fail(QStringLiteral("the join token is damaged (not base64url); copy it again whole"));
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(*decoded, &error);
    if (error.error != QCborError::NoError || !value.isMap())
        return fail(QStringLiteral("the join token is damaged; copy it again whole"));
    const QCborMap map = value.toMap();
    JoinToken t;
    t.host = map.value(QStringLiteral("h")).toString();
    // Integers only: QCborValue::toInteger() also converts a float, which is undefined
    // behaviour when it is out of qint64's range (1e300, NaN), and encode() writes integers.
    const QCborValue portValue = map.value(QStringLiteral("p"));
    const QCborValue expiryValue = map.value(QStringLiteral("e"));
    const qint64 port = portValue.isInteger() ? portValue.toInteger() : 0;
    t.caFingerprint = map.value(QStringLiteral("f")).toByteArray();
    t.id = map.value(QStringLiteral("i")).toByteArray();
    t.secret = map.value(QStringLiteral("s")).toByteArray();
    t.expiresMs = expiryValue.isInteger() ? expiryValue.toInteger() : 0;
    if (t.host.isEmpty() || port <= 0 || port > 65535 || t.caFingerprint.size() != 32 || t.id.size() != 8
        || t.secret.size() != 16 || t.expiresMs <= 0)
        return fail(QStringLiteral("the join token is incomplete; ask the coordinator for a new one"));
    t.port = static_cast<quint16>(port);
    const QCborValue roleValue = map.value(QStringLiteral("r"));
    if (roleValue.isString() && roleValue.toString() == QLatin1String("operator"))
        t.role = Role::Operator;
    else if (!roleValue.isUndefined())
        return fail(QStringLiteral("the token is for a role this version of Flotilla does not know; update it"));
    return t;
}

TrustStore::TrustStore(QString folder) : m_folder(std::move(folder)) {}

QString TrustStore::path() const
{
    return QDir(m_folder).filePath(QStringLiteral("trust.json"));
}

Result<TrustStore::Data> TrustStore::load() const
{
    Data data;
    QFile file(path());
    if (!file.exists())
        return data;
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read '%1': %2").arg(path(), file.errorString()));
    QJsonParseError parseError{};
    const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &parseError);
    if (parseError.error != QJsonParseError::NoError || !doc.isObject())
        return fail(QStringLiteral("'%1' is corrupt (%2); restore it from a backup").arg(path(), parseError.errorString()));
    for (const auto &v : doc.object().value(QStringLiteral("tokens")).toArray()) {
        const QJsonObject o = v.toObject();
        data.tokens << TokenRecord{QByteArray::fromHex(o.value(QStringLiteral("id")).toString().toLatin1()),
                                   QByteArray::fromHex(o.value(QStringLiteral("secret_sha256")).toString().toLatin1()),
                                   qint64(o.value(QStringLiteral("created_ms")).toDouble()),
                                   qint64(o.value(QStringLiteral("expires_ms")).toDouble()),
                                   o.value(QStringLiteral("uses_left")).toInt(),
                                   o.value(QStringLiteral("uses_total")).toInt(),
                                   qint64(o.value(QStringLiteral("revoked_ms")).toDouble()),
                                   o.value(QStringLiteral("note")).toString(), roleFrom(o)};
    }
    for (const auto &v : doc.object().value(QStringLiteral("certificates")).toArray()) {
        const QJsonObject o = v.toObject();
        data.certificates << CertificateRecord{
            QByteArray::fromHex(o.value(QStringLiteral("fingerprint")).toString().toLatin1()),
            o.value(QStringLiteral("worker_name")).toString(), qint64(o.value(QStringLiteral("worker_id")).toDouble()),
            qint64(o.value(QStringLiteral("issued_ms")).toDouble()), qint64(o.value(QStringLiteral("revoked_ms")).toDouble()),
            o.value(QStringLiteral("revoke_reason")).toString(), roleFrom(o)};
    }
    return data;
}

Result<void> TrustStore::save(const Data &data) const
{
    QJsonArray tokens;
    const auto withRole = [](QJsonObject o, Role role) {
        if (role == Role::Operator)
            o.insert(QStringLiteral("role"), describe(role));
        return o;
    };
    for (const auto &t : data.tokens)
        tokens.append(withRole(QJsonObject{{QStringLiteral("id"), hex(t.id)},
                                  {QStringLiteral("secret_sha256"), hex(t.secretSha256)},
                                  {QStringLiteral("created_ms"), double(t.createdMs)},
                                  {QStringLiteral("expires_ms"), double(t.expiresMs)},
                                  {QStringLiteral("uses_left"), t.usesLeft},
                                  {QStringLiteral("uses_total"), t.usesTotal},
                                  {QStringLiteral("revoked_ms"), double(t.revokedMs)},
                                  {QStringLiteral("note"), t.note}}, t.role));
    QJsonArray certificates;
    for (const auto &c : data.certificates)
        certificates.append(withRole(QJsonObject{{QStringLiteral("fingerprint"), hex(c.fingerprint)},
                                        {QStringLiteral("worker_name"), c.workerName},
                                        {QStringLiteral("worker_id"), double(c.workerId)},
                                        {QStringLiteral("issued_ms"), double(c.issuedMs)},
                                        {QStringLiteral("revoked_ms"), double(c.revokedMs)},
                                        {QStringLiteral("revoke_reason"), c.revokeReason}}, c.role));
    const QJsonObject root{{QStringLiteral("tokens"), tokens}, {QStringLiteral("certificates"), certificates}};
    // Token secrets are stored only as hashes, but the file still says who may connect.
    return writeFileAtomically(path(), QJsonDocument(root).toJson(), int(QFile::ReadOwner | QFile::WriteOwner));
}

template <typename F>
Result<void> TrustStore::modify(F &&change)
{
    if (!QDir().mkpath(m_folder))
        return fail(QStringLiteral("cannot create '%1'").arg(m_folder));
    QLockFile lock(QDir(m_folder).filePath(QStringLiteral("trust.lock")));
    lock.setStaleLockTime(30000);
    if (!lock.tryLock(10000))
        return fail(QStringLiteral("'%1' is locked by another process for more than 10 s").arg(path()));
    auto data = load();
    if (!data)
        return data.takeError();
    if (auto r = change(*data); !r)
        return r;
    return save(*data);
}

Result<JoinToken> TrustStore::issueToken(const QString &host, quint16 port, const QByteArray &caFingerprint,
                                         qint64 validSeconds, int uses, qint64 nowMs, const QString &note, Role role)
{
    if (validSeconds <= 0 || uses <= 0)
        return fail(QStringLiteral("a join token needs a positive lifetime and number of uses"));
    JoinToken token{host, port, caFingerprint, randomBytes(8), randomBytes(16), nowMs + validSeconds * 1000, role};
    auto r = modify([&](Data &d) -> Result<void> {
        d.tokens << TokenRecord{token.id,  QCryptographicHash::hash(token.secret, QCryptographicHash::Sha256),
                                nowMs,     token.expiresMs,
                                uses,      uses,
                                0,         note.left(200),
                                role};
        return {};
    });
    if (!r)
        return r.takeError();
    return token;
}

Result<Role> TrustStore::redeem(const QByteArray &id, const QByteArray &secret, qint64 nowMs)
{
    Role role = Role::Worker;
    auto r = modify([&](Data &d) -> Result<void> {
        for (auto &t : d.tokens) {
            if (t.id != id)
                continue;
            if (!constantTimeEqual(t.secretSha256, QCryptographicHash::hash(secret, QCryptographicHash::Sha256)))
                return fail(QStringLiteral("the join token's secret is wrong"));
            if (t.revokedMs != 0)
                return fail(QStringLiteral("the join token was revoked at %1; ask for a new one (flotilla token)")
                                .arg(when(t.revokedMs)));
            if (nowMs >= t.expiresMs)
                return fail(QStringLiteral("the join token expired at %1; ask for a new one (flotilla token)")
                                .arg(when(t.expiresMs)));
            if (t.usesLeft <= 0)
                return fail(QStringLiteral("the join token has been used up (%1 use%2); ask for a new one (flotilla token)")
                                .arg(t.usesTotal).arg(t.usesTotal == 1 ? QString() : QStringLiteral("s")));
            --t.usesLeft;
            role = t.role;
            return {};
        }
        return fail(QStringLiteral("the join token is unknown to this coordinator (issued by another one, or deleted)"));
    });
    if (!r)
        return r.takeError();
    return role;
}

Result<TokenRecord> TrustStore::revokeToken(const QString &idOrPrefix, qint64 nowMs)
{
    const QString key = idOrPrefix.trimmed().toLower();
    bool hexDigits = key.size() >= 4;
    for (const QChar c : key)
        hexDigits = hexDigits && ((c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f'));
    if (!hexDigits)
        return fail(QStringLiteral("'%1' is not a token id: give the id that flotilla token --list shows (16 hex "
                                   "digits), or at least its first 4")
                        .arg(idOrPrefix));
    TokenRecord revoked;
    auto r = modify([&](Data &d) -> Result<void> {
        QList<TokenRecord *> matches;
        for (auto &t : d.tokens)
            if (hex(t.id).startsWith(key))
                matches << &t;
        if (matches.isEmpty())
            return fail(QStringLiteral("no join token has an id starting with '%1' (flotilla token --list shows them)")
                            .arg(key));
        if (matches.size() > 1)
            return fail(QStringLiteral("%1 join tokens have ids starting with '%2': give more digits")
                            .arg(matches.size())
                            .arg(key));
        TokenRecord &t = *matches.first();
        if (t.revokedMs != 0)
            return fail(QStringLiteral("join token %1 was already revoked at %2").arg(hex(t.id), when(t.revokedMs)));
        t.revokedMs = nowMs;
        revoked = t;
        return {};
    });
    if (!r)
        return r.takeError();
    return revoked;
}

Result<std::optional<TokenRecord>> TrustStore::token(const QByteArray &id) const
{
    auto data = load();
    if (!data)
        return data.takeError();
    for (const auto &t : data->tokens)
        if (t.id == id)
            return std::optional<TokenRecord>(t);
    return std::optional<TokenRecord>();
}

Result<void> TrustStore::addCertificate(const CertificateRecord &record)
{
    return modify([&](Data &d) -> Result<void> {
        d.certificates << record;
        return {};
    });
}

Result<void> TrustStore::setWorkerId(const QByteArray &fingerprint, qint64 workerId)
{
    return modify([&](Data &d) -> Result<void> {
        for (auto &c : d.certificates)
            if (c.fingerprint == fingerprint) {
                c.workerId = workerId;
                return {};
            }
        return fail(QStringLiteral("no certificate %1 was issued").arg(hex(fingerprint)));
    });
}

Result<std::optional<CertificateRecord>> TrustStore::certificate(const QByteArray &fingerprint) const
{
    auto data = load();
    if (!data)
        return data.takeError();
    for (const auto &c : data->certificates)
        if (c.fingerprint == fingerprint)
            return std::optional<CertificateRecord>(c);
    return std::optional<CertificateRecord>();
}

Result<int> TrustStore::revoke(const QString &nameOrFingerprint, const QString &reason, qint64 nowMs,
                               std::optional<Role> only)
{
    int count = 0;
    const QString key = nameOrFingerprint.trimmed().toLower().remove(u':');
    auto r = modify([&](Data &d) -> Result<void> {
        for (auto &c : d.certificates) {
            const bool byName = c.workerName == nameOrFingerprint.trimmed();
            const bool byFingerprint = key.size() >= 8 && hex(c.fingerprint).startsWith(key);
            if ((byName || byFingerprint) && !c.revoked() && (!only || c.role == *only)) {
                c.revokedMs = nowMs;
                c.revokeReason = reason;
                ++count;
            }
        }
        if (count == 0)
            return fail(QStringLiteral("no unrevoked %1certificate matches '%2' (give a worker name or a "
                                       "fingerprint of at least 8 hex digits)")
                            .arg(only ? describe(*only) + QLatin1Char(' ') : QString(), nameOrFingerprint));
        return {};
    });
    if (!r)
        return r.takeError();
    return count;
}

Result<QList<TokenRecord>> TrustStore::tokens() const
{
    auto data = load();
    if (!data)
        return data.takeError();
    return data->tokens;
}

Result<QList<CertificateRecord>> TrustStore::certificates() const
{
    auto data = load();
    if (!data)
        return data.takeError();
    return data->certificates;
}

} // namespace flotilla::net
