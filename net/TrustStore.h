#pragma once
// Who may join a coordinator and who may connect to it: join tokens (with an expiry and a
// number of uses) and the client certificates issued to workers (with their revocations).
// One SQLite database beside the coordinator's keys (trust.db, WAL), so that `flotilla
// token` and `flotilla revoke` can run beside a live `flotilla serve`: an enrolment is a
// row added, a revocation a row changed, never the whole list rewritten. A trust.json of
// an older coordinator is moved into it on first use (and kept as trust.json.migrated); a
// corrupt one is refused, naming the file, and nothing is created.
//
// Threads: a store and its copies share one connection, which SQLite serializes; any thread
// may call. A reader of a folder that has no trust yet creates nothing.

#include "common/Result.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <map>
#include <memory>
#include <optional>

struct sqlite3;

namespace flotilla::net {

// What a certificate may do: a worker trains; a submitter (a person's control center or
// `flotilla submit` from elsewhere) queues jobs on the fleet, watches them and manages its
// own; an operator is the fleet's administrator: it does what a submitter does to any job,
// and manages the fleet itself (join tokens, revocations, quarantines). Neither ever trains.
// A token issues certificates of its own role. docs/security.md "Roles" has the table.
enum class Role { Worker, Operator, Submitter };
QString describe(Role role); // "worker", "operator", "submitter"
// The role of a name as describe() writes it; nothing for a name no role has.
std::optional<Role> roleNamed(const QString &name);
// Whether a certificate of this role is a person's (a control center or the command line),
// not a worker's.
inline bool isPerson(Role role) { return role != Role::Worker; }

// What a worker needs to join: where the coordinator is, the SHA-256 fingerprint of its
// CA (the worker refuses any other), and a one-off secret.
struct JoinToken
{
    QString host;
    quint16 port = 0;
    QByteArray caFingerprint; // 32 bytes
    QByteArray id;            // 8 bytes
    QByteArray secret;        // 16 bytes
    qint64 expiresMs = 0;
    Role role = Role::Worker;

    // "flt1." followed by base64url of a CBOR map: copy-pasteable, no spaces.
    QString encode() const;
    static Result<JoinToken> decode(const QString &text);
};

struct TokenRecord
{
    enum class State { Live, Expired, UsedUp, Revoked };

    QByteArray id;
    QByteArray secretSha256;
    qint64 createdMs = 0;
    qint64 expiresMs = 0;
    int usesLeft = 0;
    int usesTotal = 0;
    qint64 revokedMs = 0;
    QString note; // what it was issued for: "serve --token-file /srv/token", "control center", ...
    Role role = Role::Worker;

    // Revoked wins over used up, which wins over expired.
    State state(qint64 nowMs) const;
    bool live(qint64 nowMs) const { return state(nowMs) == State::Live; }
    // The id as `flotilla token --list` shows it and `--revoke` takes it: 16 hex digits.
    QString idHex() const { return QString::fromLatin1(id.toHex()); }
};

// "live", "expired", "used up", "revoked".
QString describe(TokenRecord::State state);

struct CertificateRecord
{
    QByteArray fingerprint; // SHA-256 of the certificate's DER
    QString workerName;
    qint64 workerId = 0;    // the fleet's id for the worker, given at enrolment (addCertificate ignores it)
    qint64 issuedMs = 0;
    qint64 revokedMs = 0;
    QString revokeReason;
    Role role = Role::Worker;

    bool revoked() const { return revokedMs != 0; }
};

class TrustStore
{
public:
    explicit TrustStore(QString folder);
    QString path() const;       // trust.db
    QString legacyPath() const; // trust.json, migrated on first use
    // Changes when another connection (another process) has changed the database since this
    // store last looked: what a cache of the certificates checks before reloading.
    Result<qint64> version() const;

    Result<JoinToken> issueToken(const QString &host, quint16 port, const QByteArray &caFingerprint,
                                 qint64 validSeconds, int uses, qint64 nowMs, const QString &note = {},
                                 Role role = Role::Worker);
    // Checks a token and takes one of its uses; the error says which check failed. Returns
    // the token's role, which the certificate it pays for gets.
    Result<Role> redeem(const QByteArray &id, const QByteArray &secret, qint64 nowMs);
    // Bars a token from further joins (workers that joined with it stay). idOrPrefix: its id
    // in hex, or a prefix of at least 4 hex digits that names one token. Returns the record.
    Result<TokenRecord> revokeToken(const QString &idOrPrefix, qint64 nowMs);
    Result<std::optional<TokenRecord>> token(const QByteArray &id) const;

    Result<void> addCertificate(const CertificateRecord &record);
    Result<std::optional<CertificateRecord>> certificate(const QByteArray &fingerprint) const;
    // Revokes the certificates of a worker's (or an operator's) name, or the one with a (hex, or hex prefix of at
    // least 8 digits) fingerprint. Returns how many were revoked.
    // only: the certificates of that role alone (an operator revokes workers, not operators).
    Result<int> revoke(const QString &nameOrFingerprint, const QString &reason, qint64 nowMs,
                       std::optional<Role> only = std::nullopt);

    Result<QList<TokenRecord>> tokens() const;
    Result<QList<CertificateRecord>> certificates() const;

    // The fleet's quarantine, by the fleet's worker id: a worker whose results one job
    // quarantined is placed in no job of the fleet until an operator releases it.
    Result<void> quarantine(qint64 workerId, const QString &reason, qint64 nowMs);
    Result<void> release(qint64 workerId);
    Result<std::map<qint64, QString>> quarantined() const;

private:
    struct Data
    {
        QList<TokenRecord> tokens;
        QList<CertificateRecord> certificates;
    };
    struct Database;
    Result<Data> loadLegacy() const;
    // The connection, opened (and the database created, or migrated) on first use; nullptr
    // when reading a folder that holds no trust yet.
    Result<sqlite3 *> open(bool forWriting) const;
    // Runs change in one write transaction.
    template <typename F>
    Result<void> modify(F &&change);
    template <typename Record>
    Result<QList<Record>> select(const char *table, const char *columns, const char *where, const QString &value) const;

    QString m_folder;
    std::shared_ptr<Database> m_db;
};

} // namespace flotilla::net
