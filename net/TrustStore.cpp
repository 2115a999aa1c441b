#include "net/TrustStore.h"


#include <QCborMap>
#include <QCborValue>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QFileInfo>
#include <QMutex>
#include <QRandomGenerator>

#include <sqlite3.h>

#include <type_traits>

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
    switch (role) {
    case Role::Operator:
        return QStringLiteral("operator");
    case Role::Submitter:
        return QStringLiteral("submitter");
    case Role::Worker:
        break;
    }
    return QStringLiteral("worker");
}

std::optional<Role> roleNamed(const QString &name)
{
    for (const Role role : {Role::Worker, Role::Operator, Role::Submitter})
        if (describe(role) == name)
            return role;
    return std::nullopt;
}

namespace {

Role roleFrom(const QJsonObject &o)
{
    return roleNamed(o.value(QStringLiteral("role")).toString()).value_or(Role::Worker);
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
    if (role != Role::Worker)
        map.insert(QStringLiteral("r"), describe(role));
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
    const auto named = roleValue.isString() ? roleNamed(roleValue.toString()) : std::nullopt;
    if (named && *named != Role::Worker)
        t.role = *named;
    else if (!roleValue.isUndefined())
        return fail(QStringLiteral("the token is for a role this version of Flotilla does not know; update it"));
    return t;
}

QString TrustStore::path() const
{
    return QDir(m_folder).filePath(QStringLiteral("trust.db"));
}

QString TrustStore::legacyPath() const
{
    return QDir(m_folder).filePath(QStringLiteral("trust.json"));
}

// One connection per store (and its copies), opened on first use; SQLite serializes the
// threads that share it.
struct TrustStore::Database
{
    QMutex mutex;
    sqlite3 *db = nullptr;
    ~Database()
    {
        if (db)
            sqlite3_close_v2(db);
    }
};

TrustStore::TrustStore(QString folder) : m_folder(std::move(folder)), m_db(std::make_shared<Database>()) {}

namespace {

// A prepared statement that finalizes itself; bind() and the column getters as in the store.
class Query
{
public:
    Query(sqlite3 *db, const char *sql) : m_db(db)
    {
        m_rc = sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr);
    }
    ~Query() { sqlite3_finalize(m_stmt); }
    Query(const Query &) = delete;
    Query &operator=(const Query &) = delete;

    Query &bind(qint64 v)
    {
        if (m_rc == SQLITE_OK)
            m_rc = sqlite3_bind_int64(m_stmt, ++m_at, v);
        return *this;
    }
    Query &bind(const QString &v)
    {
        if (m_rc == SQLITE_OK) {
            const QByteArray utf8 = v.toUtf8();
            m_rc = sqlite3_bind_text(m_stmt, ++m_at, utf8.constData(), int(utf8.size()), SQLITE_TRANSIENT);
        }
        return *this;
    }
    // SQLITE_ROW, SQLITE_DONE, or an error code.
    int step()
    {
        if (m_rc != SQLITE_OK)
            return m_rc;
        return sqlite3_step(m_stmt);
    }
    Result<void> run()
    {
        const int rc = step();
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            return fail(QString::fromUtf8(sqlite3_errmsg(m_db)));
        return {};
    }
    qint64 integer(int column) const { return sqlite3_column_int64(m_stmt, column); }
    QString text(int column) const
    {
        return QString::fromUtf8(reinterpret_cast<const char *>(sqlite3_column_text(m_stmt, column)),
                                 sqlite3_column_bytes(m_stmt, column));
    }
    QString error() const { return QString::fromUtf8(sqlite3_errmsg(m_db)); }

private:
    sqlite3 *m_db;
    sqlite3_stmt *m_stmt = nullptr;
    int m_rc = SQLITE_OK;
    int m_at = 0;
};

constexpr const char *kSchema = R"(
CREATE TABLE IF NOT EXISTS tokens(
    id TEXT PRIMARY KEY, secret_sha256 TEXT NOT NULL, created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
    uses_left INTEGER NOT NULL, uses_total INTEGER NOT NULL, revoked_ms INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '', role TEXT NOT NULL DEFAULT 'worker');
CREATE TABLE IF NOT EXISTS certificates(
    fingerprint TEXT PRIMARY KEY, worker_name TEXT NOT NULL, worker_id INTEGER NOT NULL DEFAULT 0,
    issued_ms INTEGER NOT NULL, revoked_ms INTEGER NOT NULL DEFAULT 0, revoke_reason TEXT NOT NULL DEFAULT '',
    role TEXT NOT NULL DEFAULT 'worker');
CREATE INDEX IF NOT EXISTS certificates_by_name ON certificates(worker_name);
CREATE TABLE IF NOT EXISTS quarantine(
    worker_id INTEGER PRIMARY KEY, reason TEXT NOT NULL, since_ms INTEGER NOT NULL);
)";

constexpr const char *kTokenColumns =
    "id, secret_sha256, created_ms, expires_ms, uses_left, uses_total, revoked_ms, note, role";
constexpr const char *kCertificateColumns =
    "fingerprint, worker_name, worker_id, issued_ms, revoked_ms, revoke_reason, role";

// A row's role; one this version does not know is a worker's, the least a certificate may do.
Role storedRole(const QString &name)
{
    return roleNamed(name).value_or(Role::Worker);
}

TokenRecord tokenFrom(const Query &q)
{
    return TokenRecord{QByteArray::fromHex(q.text(0).toLatin1()), QByteArray::fromHex(q.text(1).toLatin1()),
                       q.integer(2), q.integer(3), int(q.integer(4)), int(q.integer(5)), q.integer(6), q.text(7),
                       storedRole(q.text(8))};
}

CertificateRecord certificateFrom(const Query &q)
{
    return CertificateRecord{QByteArray::fromHex(q.text(0).toLatin1()), q.text(1), q.integer(2), q.integer(3),
                             q.integer(4), q.text(5), storedRole(q.text(6))};
}

Result<void> insertToken(sqlite3 *db, const TokenRecord &t)
{
    const QString sql = QStringLiteral("INSERT INTO tokens(%1) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)")
                            .arg(QLatin1String(kTokenColumns));
    Query q(db, sql.toUtf8().constData());
    q.bind(hex(t.id)).bind(hex(t.secretSha256)).bind(t.createdMs).bind(t.expiresMs).bind(qint64(t.usesLeft))
        .bind(qint64(t.usesTotal)).bind(t.revokedMs).bind(t.note).bind(describe(t.role));
    return q.run();
}

// A certificate's worker id is the fleet's: given here, once, the next after the largest, so
// that it names one certificate in every job the fleet runs (a job's store keeps its workers
// under these ids). The record's own workerId is ignored.
Result<void> insertCertificate(sqlite3 *db, const CertificateRecord &c)
{
    const QString sql = QStringLiteral("INSERT INTO certificates(%1) VALUES(?, ?, (SELECT COALESCE(MAX(worker_id), 0) "
                                       "+ 1 FROM certificates), ?, ?, ?, ?)")
                            .arg(QLatin1String(kCertificateColumns));
    Query q(db, sql.toUtf8().constData());
    q.bind(hex(c.fingerprint)).bind(c.workerName).bind(c.issuedMs).bind(c.revokedMs).bind(c.revokeReason)
        .bind(describe(c.role));
    return q.run();
}

Result<void> exec(sqlite3 *db, const char *sql)
{
    char *message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) == SQLITE_OK)
        return {};
    const QString text = QString::fromUtf8(message ? message : sqlite3_errmsg(db));
    sqlite3_free(message);
    return fail(text);
}

// Databases written before worker ids were the fleet's kept the id a certificate was given
// by the first job it joined, so two machines could share one across jobs. Numbered again,
// once, in the order the certificates were issued; the index then holds them apart.
Result<void> numberCertificates(sqlite3 *db)
{
    Query version(db, "PRAGMA user_version");
    if (version.step() != SQLITE_ROW)
        return fail(version.error());
    if (version.integer(0) >= 2)
        return {};
    if (auto r = exec(db, "UPDATE certificates SET worker_id = -rowid; "
                          "UPDATE certificates SET worker_id = (SELECT count(*) FROM certificates AS o WHERE "
                          "o.issued_ms < certificates.issued_ms OR (o.issued_ms = certificates.issued_ms AND "
                          "o.rowid <= certificates.rowid)); "
                          "CREATE UNIQUE INDEX IF NOT EXISTS certificates_by_worker ON certificates(worker_id); "
                          "PRAGMA user_version = 2;");
        !r)
        return r;
    return {};
}


} // namespace

Result<TrustStore::Data> TrustStore::loadLegacy() const
{
    Data data;
    QFile file(legacyPath());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read '%1': %2").arg(legacyPath(), file.errorString()));
    QJsonParseError parseError{};
    const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &parseError);
    if (parseError.error != QJsonParseError::NoError || !doc.isObject())
        return fail(QStringLiteral("'%1' is corrupt (%2): the coordinator cannot tell which workers it let in; "
                                   "restore it from a backup, or move it away to start with no workers (every "
                                   "worker then joins again with a new token)")
                        .arg(legacyPath(), parseError.error != QJsonParseError::NoError ? parseError.errorString()
                                                                                        : QStringLiteral("not an object")));
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

Result<sqlite3 *> TrustStore::open(bool forWriting) const
{
    QMutexLocker lock(&m_db->mutex);
    if (m_db->db)
        return m_db->db;
    const bool exists = QFileInfo::exists(path());
    const bool legacy = QFileInfo::exists(legacyPath());
    if (!exists && !legacy && !forWriting)
        return static_cast<sqlite3 *>(nullptr); // nothing yet: reading creates nothing
    if (!QDir().mkpath(m_folder))
        return fail(QStringLiteral("cannot create '%1'").arg(m_folder));
    // A trust.json from before the database: read (and refused if corrupt) before anything
    // is created, so that a failed migration leaves the folder as it was.
    std::optional<Data> migrate;
    // Once the database exists, a trust.json beside it is history (a restored backup, say):
    // it is neither read nor trusted.
    if (legacy && !exists) {
        auto data = loadLegacy();
        if (!data)
            return data.takeError();
        migrate = std::move(*data);
    }
    sqlite3 *db = nullptr;
    const int rc = sqlite3_open_v2(QFile::encodeName(path()).constData(), &db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        const QString why = db ? QString::fromUtf8(sqlite3_errmsg(db)) : QString::fromUtf8(sqlite3_errstr(rc));
        sqlite3_close_v2(db);
        return fail(QStringLiteral("cannot open the trust database '%1': %2").arg(path(), why));
    }
    // It says who may connect: private, as the keys beside it (the WAL and its index take the
    // database file's mode).
    QFile::setPermissions(path(), QFile::ReadOwner | QFile::WriteOwner);
    sqlite3_busy_timeout(db, 5000);
    const auto opened = [&]() -> Result<void> {
        if (auto r = exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !r)
            return r;
        if (auto r = exec(db, "BEGIN IMMEDIATE"); !r)
            return r;
        Query check(db, "SELECT count(*) FROM sqlite_master WHERE name = 'tokens'");
        if (check.step() != SQLITE_ROW) {
            (void)exec(db, "ROLLBACK");
            return fail(check.error());
        }
        const bool fresh = check.integer(0) == 0;
        auto r = exec(db, kSchema);
        if (r && fresh && migrate) {
            for (const auto &t : migrate->tokens)
                if (r)
                    r = insertToken(db, t);
            for (const auto &c : migrate->certificates)
                if (r)
                    r = insertCertificate(db, c);
        }
        if (r)
            r = numberCertificates(db);
        if (!r) {
            (void)exec(db, "ROLLBACK");
            return r;
        }
        if (auto c = exec(db, "COMMIT"); !c)
            return c;
        // Migrated: the old file is kept beside, under a name nothing reads (a new one when
        // an earlier migration's is there).
        if (migrate && !QFile::rename(legacyPath(), legacyPath() + QStringLiteral(".migrated")))
            QFile::rename(legacyPath(),
                          legacyPath() + QStringLiteral(".migrated-%1").arg(QDateTime::currentMSecsSinceEpoch()));
        return {};
    }();
    if (!opened) {
        sqlite3_close_v2(db);
        return fail(QStringLiteral("cannot set up the trust database '%1': %2").arg(path(), opened.error()));
    }
    m_db->db = db;
    return db;
}

template <typename F>
Result<void> TrustStore::modify(F &&change)
{
    auto db = open(true);
    if (!db)
        return db.takeError();
    QMutexLocker lock(&m_db->mutex);
    // IMMEDIATE: the write lock is taken before anything is read, so that two writers (serve
    // and flotilla token) never read the same uses left.
    if (auto r = exec(*db, "BEGIN IMMEDIATE"); !r)
        return fail(QStringLiteral("the trust database '%1' is busy: %2").arg(path(), r.error()));
    auto r = change(*db);
    if (!r) {
        (void)exec(*db, "ROLLBACK");
        return r;
    }
    if (auto c = exec(*db, "COMMIT"); !c) {
        (void)exec(*db, "ROLLBACK");
        return fail(QStringLiteral("cannot write the trust database '%1': %2").arg(path(), c.error()));
    }
    return {};
}

Result<qint64> TrustStore::version() const
{
    auto db = open(false);
    if (!db)
        return db.takeError();
    if (!*db)
        return qint64(0);
    QMutexLocker lock(&m_db->mutex);
    Query q(*db, "PRAGMA data_version");
    if (q.step() != SQLITE_ROW)
        return fail(q.error());
    return q.integer(0);
}

Result<JoinToken> TrustStore::issueToken(const QString &host, quint16 port, const QByteArray &caFingerprint,
                                         qint64 validSeconds, int uses, qint64 nowMs, const QString &note, Role role)
{
    if (validSeconds <= 0 || uses <= 0)
        return fail(QStringLiteral("a join token needs a positive lifetime and number of uses"));
    JoinToken token{host, port, caFingerprint, randomBytes(8), randomBytes(16), nowMs + validSeconds * 1000, role};
    auto r = modify([&](sqlite3 *db) {
        return insertToken(db, TokenRecord{token.id, QCryptographicHash::hash(token.secret, QCryptographicHash::Sha256),
                                           nowMs, token.expiresMs, uses, uses, 0, note.left(200), role});
    });
    if (!r)
        return r.takeError();
    return token;
}

Result<Role> TrustStore::redeem(const QByteArray &id, const QByteArray &secret, qint64 nowMs)
{
    Role role = Role::Worker;
    auto r = modify([&](sqlite3 *db) -> Result<void> {
        const QString sql = QStringLiteral("SELECT %1 FROM tokens WHERE id = ?").arg(QLatin1String(kTokenColumns));
        Query q(db, sql.toUtf8().constData());
        q.bind(hex(id));
        if (q.step() == SQLITE_ROW) {
            TokenRecord t = tokenFrom(q);
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
            role = t.role;
            Query use(db, "UPDATE tokens SET uses_left = uses_left - 1 WHERE id = ?");
            use.bind(hex(id));
            return use.run();
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
    auto r = modify([&](sqlite3 *db) -> Result<void> {
        const QString sql = QStringLiteral("SELECT %1 FROM tokens WHERE substr(id, 1, ?) = ?").arg(QLatin1String(kTokenColumns));
        Query q(db, sql.toUtf8().constData());
        q.bind(qint64(key.size())).bind(key);
        QList<TokenRecord> matches;
        while (q.step() == SQLITE_ROW)
            matches << tokenFrom(q);
        if (matches.isEmpty())
            return fail(QStringLiteral("no join token has an id starting with '%1' (flotilla token --list shows them)")
                            .arg(key));
        if (matches.size() > 1)
            return fail(QStringLiteral("%1 join tokens have ids starting with '%2': give more digits")
                            .arg(matches.size())
                            .arg(key));
        TokenRecord t = matches.first();
        if (t.revokedMs != 0)
            return fail(QStringLiteral("join token %1 was already revoked at %2").arg(hex(t.id), when(t.revokedMs)));
        t.revokedMs = nowMs;
        revoked = t;
        Query set(db, "UPDATE tokens SET revoked_ms = ? WHERE id = ?");
        set.bind(nowMs).bind(hex(t.id));
        return set.run();
    });
    if (!r)
        return r.takeError();
    return revoked;
}

Result<std::optional<TokenRecord>> TrustStore::token(const QByteArray &id) const
{
    auto tokens = select<TokenRecord>("tokens", kTokenColumns, "WHERE id = ?", hex(id));
    if (!tokens)
        return tokens.takeError();
    return tokens->isEmpty() ? std::optional<TokenRecord>() : std::optional<TokenRecord>(tokens->first());
}

Result<void> TrustStore::addCertificate(const CertificateRecord &record)
{
    return modify([&](sqlite3 *db) { return insertCertificate(db, record); });
}

Result<std::optional<CertificateRecord>> TrustStore::certificate(const QByteArray &fingerprint) const
{
    auto found = select<CertificateRecord>("certificates", kCertificateColumns, "WHERE fingerprint = ?", hex(fingerprint));
    if (!found)
        return found.takeError();
    return found->isEmpty() ? std::optional<CertificateRecord>() : std::optional<CertificateRecord>(found->first());
}

template <typename Record>
Result<QList<Record>> TrustStore::select(const char *table, const char *columns, const char *where,
                                         const QString &value) const
{
    auto db = open(false);
    if (!db)
        return db.takeError();
    QList<Record> out;
    if (!*db)
        return out;
    QMutexLocker lock(&m_db->mutex);
    const QString sql = QStringLiteral("SELECT %1 FROM %2 %3 ORDER BY rowid")
                            .arg(QLatin1String(columns), QLatin1String(table), QLatin1String(where));
    Query q(*db, sql.toUtf8().constData());
    if (!value.isNull())
        q.bind(value);
    int rc = SQLITE_OK;
    while ((rc = q.step()) == SQLITE_ROW) {
        if constexpr (std::is_same_v<Record, TokenRecord>)
            out << tokenFrom(q);
        else
            out << certificateFrom(q);
    }
    if (rc != SQLITE_DONE)
        return fail(QStringLiteral("cannot read the trust database '%1': %2").arg(path(), q.error()));
    return out;
}

Result<int> TrustStore::revoke(const QString &nameOrFingerprint, const QString &reason, qint64 nowMs,
                               std::optional<Role> only)
{
    int count = 0;
    const QString key = nameOrFingerprint.trimmed().toLower().remove(u':');
    auto r = modify([&](sqlite3 *db) -> Result<void> {
        const QString sql = QStringLiteral("SELECT %1 FROM certificates WHERE revoked_ms = 0 AND (worker_name = ? OR "
                                           "(? >= 8 AND substr(fingerprint, 1, ?) = ?))")
                                .arg(QLatin1String(kCertificateColumns));
        Query q(db, sql.toUtf8().constData());
        q.bind(nameOrFingerprint.trimmed()).bind(qint64(key.size())).bind(qint64(key.size())).bind(key);
        QList<CertificateRecord> matches;
        while (q.step() == SQLITE_ROW)
            matches << certificateFrom(q);
        for (const auto &c : matches) {
            if (only && c.role != *only)
                continue;
            Query set(db, "UPDATE certificates SET revoked_ms = ?, revoke_reason = ? WHERE fingerprint = ?");
            set.bind(nowMs).bind(reason).bind(hex(c.fingerprint));
            if (auto done = set.run(); !done)
                return done;
            ++count;
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

Result<void> TrustStore::quarantine(qint64 workerId, const QString &reason, qint64 nowMs)
{
    return modify([&](sqlite3 *db) -> Result<void> {
        Query q(db, "INSERT OR REPLACE INTO quarantine(worker_id, reason, since_ms) VALUES(?, ?, ?)");
        q.bind(workerId).bind(reason.left(1000)).bind(nowMs);
        return q.run();
    });
}

Result<void> TrustStore::release(qint64 workerId)
{
    return modify([&](sqlite3 *db) -> Result<void> {
        Query q(db, "DELETE FROM quarantine WHERE worker_id = ?");
        q.bind(workerId);
        return q.run();
    });
}

Result<std::map<qint64, QString>> TrustStore::quarantined() const
{
    auto db = open(false);
    if (!db)
        return db.takeError();
    std::map<qint64, QString> out;
    if (!*db)
        return out;
    QMutexLocker lock(&m_db->mutex);
    Query q(*db, "SELECT worker_id, reason FROM quarantine");
    int rc = SQLITE_OK;
    while ((rc = q.step()) == SQLITE_ROW)
        out[q.integer(0)] = q.text(1);
    if (rc != SQLITE_DONE)
        return fail(QStringLiteral("cannot read the trust database '%1': %2").arg(path(), q.error()));
    return out;
}

Result<QList<TokenRecord>> TrustStore::tokens() const
{
    return select<TokenRecord>("tokens", kTokenColumns, "", QString());
}

Result<QList<CertificateRecord>> TrustStore::certificates() const
{
    return select<CertificateRecord>("certificates", kCertificateColumns, "", QString());
}

} // namespace flotilla::net
