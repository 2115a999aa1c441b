// Join tokens and the trust store: the token's text form and every way it can arrive
// damaged, issuing, redeeming, listing and revoking tokens (expiry, uses, wrong secrets,
// unknown ids, revocation by id prefix, notes), the certificate records and their
// revocation by name or fingerprint prefix, two stores on one folder (as `flotilla token`
// beside `flotilla serve`), and the file itself: private, never overwritten when it cannot
// be read.
#include "TestFiles.h"
#include "net/TrustStore.h"

#include <QtTest>

#include <QCborArray>
#include <QCborMap>
#include <QCborValue>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>

#include <sqlite3.h>
#include <QFile>
#include <QTemporaryDir>

#include <atomic>
#include <thread>

#ifdef Q_OS_UNIX
#include <sys/stat.h>
#endif

using namespace flotilla;
using namespace flotilla::net;
using namespace flotilla::test;

namespace {

// A fixed "now" (2024-01-01 00:00:00 UTC): tests drive time through nowMs, never the clock.
constexpr qint64 kNow = 1704067200000;

QByteArray filled(int size, char first)
{
    QByteArray b(size, Qt::Uninitialized);
    for (int i = 0; i < size; ++i)
        b[i] = char(first + i);
    return b;
}

JoinToken sampleToken()
{
    JoinToken t;
    t.host = QStringLiteral("coordinator.example.org");
    t.port = 7443;
    t.caFingerprint = filled(32, '\x10');
    t.id = filled(8, '\x70');
    t.secret = filled(16, '\x40');
    t.expiresMs = kNow + 3600 * 1000;
    return t;
}

QString base64Url(const QByteArray &bytes)
{
    return QString::fromLatin1(bytes.toBase64(QByteArray::Base64UrlEncoding | QByteArray::OmitTrailingEquals));
}

// The CBOR map inside an encoded token, read back independently of JoinToken::decode.
QCborMap tokenMap(const JoinToken &token)
{
    const QString text = token.encode();
    const QByteArray cbor = QByteArray::fromBase64(text.mid(5).toLatin1(), QByteArray::Base64UrlEncoding);
    return QCborValue::fromCbor(cbor).toMap();
}

QString tokenText(const QCborMap &map)
{
    return QStringLiteral("flt1.") + base64Url(map.toCborValue().toCbor());
}

CertificateRecord record(const QByteArray &fingerprint, const QString &name, qint64 issuedMs = kNow)
{
    CertificateRecord r;
    r.fingerprint = fingerprint;
    r.workerName = name;
    r.issuedMs = issuedMs;
    return r;
}

// 32 bytes whose hex form starts with the given byte: distinct prefixes for distinct tests.
QByteArray fingerprint(unsigned char first)
{
    QByteArray fp = QCryptographicHash::hash(QByteArray(1, char(first)), QCryptographicHash::Sha256);
    fp[0] = char(first);
    return fp;
}

QString hex(const QByteArray &b)
{
    return QString::fromLatin1(b.toHex());
}




std::optional<TokenRecord> findToken(const TrustStore &store, const QByteArray &id)
{
    auto tokens = store.tokens();
    if (!tokens)
        return std::nullopt;
    for (const TokenRecord &t : *tokens)
        if (t.id == id)
            return t;
    return std::nullopt;
}

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

class TestTrust : public QObject
{
    Q_OBJECT

private:
    std::unique_ptr<QTemporaryDir> m_dir;

    QString folder() const { return m_dir->filePath(QStringLiteral("coordinator")); }

private Q_SLOTS:
    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
    }

    void cleanup() { m_dir.reset(); }

    // ---- the token's text ----

    void tokenRoundTrip()
    {
        const JoinToken token = sampleToken();
        const QString text = token.encode();
        QVERIFY2(text.startsWith(QLatin1String("flt1.")), qPrintable(text));
        // Copy-pasteable: base64url without padding, no spaces, no '+' '/' '='.
        const QString body = text.mid(5);
        QVERIFY(!body.isEmpty());
        for (const QChar c : body)
            QVERIFY2(c.isLetterOrNumber() || c == u'-' || c == u'_', qPrintable(text));
        QVERIFY2(text.size() < 200, qPrintable(text));

        for (const QString &pasted :
            QStringList { text, QString(QStringLiteral("  ") + text + QStringLiteral("\r\n")) }) {
            auto decoded = JoinToken::decode(pasted);
            REQUIRE_OK(decoded);
            QCOMPARE(decoded->host, token.host);
            QCOMPARE(decoded->port, token.port);
            QCOMPARE(decoded->caFingerprint, token.caFingerprint);
            QCOMPARE(decoded->id, token.id);
            QCOMPARE(decoded->secret, token.secret);
            QCOMPARE(decoded->expiresMs, token.expiresMs);
        }
    }

    void tokenRoundTripEdgeValues()
    {
        JoinToken token = sampleToken();
        token.host = QStringLiteral("::1");
        token.port = 65535;
        token.caFingerprint = QByteArray(32, '\xff');
        token.id = QByteArray(8, '\0');
        token.secret = QByteArray(16, '\0');
        auto decoded = JoinToken::decode(token.encode());
        REQUIRE_OK(decoded);
        QCOMPARE(decoded->host, token.host);
        QCOMPARE(decoded->port, quint16(65535));
        QCOMPARE(decoded->caFingerprint, token.caFingerprint);
        QCOMPARE(decoded->id, token.id);
        QCOMPARE(decoded->secret, token.secret);
    }

    void decodeRefusesDamagedText_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("expected");

        const QCborMap good = tokenMap(sampleToken());
        QVERIFY(good.contains(QStringLiteral("h")) && good.contains(QStringLiteral("s")));
        const QString goodText = tokenText(good);
        const QString notAToken = QStringLiteral("not a Flotilla join token");
        const QString damaged = QStringLiteral("damaged");
        const QString incomplete = QStringLiteral("incomplete");

        QTest::newRow("empty") << QString() << notAToken;
        QTest::newRow("spaces") << QStringLiteral("   ") << notAToken;
        QTest::newRow("no prefix") << goodText.mid(5) << notAToken;
        QTest::newRow("other version") << QString(QStringLiteral("flt2.") + goodText.mid(5)) << notAToken;
        QTest::newRow("upper-case prefix") << QString(QStringLiteral("FLT1.") + goodText.mid(5)) << notAToken;
        QTest::newRow("a URL") << QStringLiteral("https://coordinator.example.org:7443/") << notAToken;
        QTest::newRow("too long") << QString(QStringLiteral("flt1.") + QString(2000, u'A'))
                                  << QStringLiteral("too long");
        QTest::newRow("not base64") << QStringLiteral("flt1.@@@@!!!!") << QStringLiteral("not base64url");
        QTest::newRow("standard base64 alphabet") << QStringLiteral("flt1.ab+/cd+/") << QStringLiteral("not base64url");
        QTest::newRow("space inside") << QString(goodText.left(20) + QStringLiteral(" ") + goodText.mid(20))
                                      << QStringLiteral("not base64url");
        QTest::newRow("nothing after prefix") << QStringLiteral("flt1.") << damaged;
        const QByteArray cbor = good.toCborValue().toCbor();
        QTest::newRow("truncated CBOR") << QString(QStringLiteral("flt1.") + base64Url(cbor.left(cbor.size() / 2)))
                                        << damaged;
        QTest::newRow("CBOR missing its last byte")
            << QString(QStringLiteral("flt1.") + base64Url(cbor.left(cbor.size() - 1))) << damaged;
        QTest::newRow("garbage bytes") << QString(
            QStringLiteral("flt1.") + base64Url(QByteArray("\xff\xfe\xfd\xfc\x00\x01", 6)))
                                       << damaged;
        QTest::newRow("CBOR text, not a map")
            << QString(QStringLiteral("flt1.") + base64Url(QCborValue(QStringLiteral("hello")).toCbor())) << damaged;
        QTest::newRow("CBOR array, not a map")
            << QString(QStringLiteral("flt1.") + base64Url(QCborArray { 1, 2, 3 }.toCborValue().toCbor())) << damaged;

        for (const char *field : { "h", "p", "f", "i", "s" }) {
            QCborMap m = good;
            m.remove(QString::fromLatin1(field));
            QTest::addRow("missing field %s", field) << tokenText(m) << incomplete;
        }
        const auto with = [&](const char *field, const QCborValue &v) {
            QCborMap m = good;
            m.insert(QString::fromLatin1(field), v);
            return tokenText(m);
        };
        QTest::newRow("empty host") << with("h", QString()) << incomplete;
        QTest::newRow("port 0") << with("p", 0) << incomplete;
        QTest::newRow("port above 65535") << with("p", 70000) << incomplete;
        QTest::newRow("negative port") << with("p", -1) << incomplete;
        QTest::newRow("port as text") << with("p", QStringLiteral("7443")) << incomplete;
        // Found by fuzzing (tests/fuzz): floats were converted with QCborValue::toInteger(),
        // undefined behaviour when out of range. Only integers are accepted.
        QTest::newRow("port as a float") << with("p", 7443.0) << incomplete;
        QTest::newRow("port far out of range") << with("p", 1e300) << incomplete;
        QTest::newRow("expiry as a float") << with("e", 1.9e12) << incomplete;
        QTest::newRow("expiry beyond 2^63") << with("e", 18446744073709551615.0) << incomplete;
        QTest::newRow("expiry NaN") << with("e", qQNaN()) << incomplete;
        QTest::newRow("SHA-1 sized fingerprint") << with("f", QByteArray(20, 'x')) << incomplete;
        QTest::newRow("fingerprint as hex text") << with("f", QString(64, u'a')) << incomplete;
        QTest::newRow("short id") << with("i", QByteArray(4, 'x')) << incomplete;
        QTest::newRow("short secret") << with("s", QByteArray(8, 'x')) << incomplete;
        QTest::newRow("empty map") << tokenText(QCborMap()) << incomplete;
    }

    void decodeRefusesDamagedText()
    {
        QFETCH(QString, text);
        QFETCH(QString, expected);
        auto decoded = JoinToken::decode(text);
        REQUIRE_ERROR(decoded, expected);
        // Every refusal tells the user what to do or what a token looks like.
        const QString &message = decoded.error();
        QVERIFY2(message.contains(QLatin1String("flt1.")) || message.contains(QLatin1String("copy it again"))
                || message.contains(QLatin1String("new one")) || message.contains(QLatin1String("too long")),
            qPrintable(message));
    }

    // ---- issuing and redeeming ----

    void issueAndRedeemConsumesUses()
    {
        TrustStore store(folder());
        QCOMPARE(store.path(), QDir(folder()).filePath(QStringLiteral("trust.db")));
        const QByteArray ca = fingerprint(0xca);
        auto token = store.issueToken(QStringLiteral("10.0.0.5"), 7443, ca, 3600, 2, kNow);
        REQUIRE_OK(token);
        QCOMPARE(token->host, QStringLiteral("10.0.0.5"));
        QCOMPARE(token->port, quint16(7443));
        QCOMPARE(token->caFingerprint, ca);
        QCOMPARE(token->id.size(), 8);
        QCOMPARE(token->secret.size(), 16);
        QCOMPARE(token->expiresMs, kNow + 3600 * 1000);

        // What the worker gets is what the coordinator checks.
        auto pasted = JoinToken::decode(token->encode());
        REQUIRE_OK(pasted);
        QCOMPARE(pasted->id, token->id);
        QCOMPARE(pasted->secret, token->secret);

        auto before = findToken(store, token->id);
        QVERIFY(before);
        QCOMPARE(before->usesLeft, 2);
        QCOMPARE(before->usesTotal, 2);
        QCOMPARE(before->createdMs, kNow);
        QCOMPARE(before->expiresMs, kNow + 3600 * 1000);
        QCOMPARE(before->secretSha256, QCryptographicHash::hash(token->secret, QCryptographicHash::Sha256));

        REQUIRE_OK(store.redeem(pasted->id, pasted->secret, kNow + 1000));
        QCOMPARE(findToken(store, token->id)->usesLeft, 1);
        REQUIRE_OK(store.redeem(pasted->id, pasted->secret, kNow + 2000));
        QCOMPARE(findToken(store, token->id)->usesLeft, 0);
        REQUIRE_ERROR(store.redeem(pasted->id, pasted->secret, kNow + 3000), QStringLiteral("used up"),
            QStringLiteral("2 uses"), QStringLiteral("flotilla token"));
        QCOMPARE(findToken(store, token->id)->usesLeft, 0);
    }

    void oneUseTokenIsRefusedTheSecondTime()
    {
        TrustStore store(folder());
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(1), 600, 1, kNow);
        REQUIRE_OK(token);
        REQUIRE_OK(store.redeem(token->id, token->secret, kNow));
        REQUIRE_ERROR(
            store.redeem(token->id, token->secret, kNow), QStringLiteral("used up"), QStringLiteral("1 use)"));
        // Other tokens are not affected.
        auto other = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(1), 600, 1, kNow);
        REQUIRE_OK(other);
        QVERIFY(other->id != token->id);
        QVERIFY(other->secret != token->secret);
        REQUIRE_OK(store.redeem(other->id, other->secret, kNow));
    }

    // ---- listing and revoking tokens ----

    void tokenStates()
    {
        TokenRecord t;
        t.usesLeft = 2;
        t.usesTotal = 2;
        t.expiresMs = kNow + 1000;
        QCOMPARE(t.state(kNow), TokenRecord::State::Live);
        QVERIFY(t.live(kNow));
        QCOMPARE(t.state(kNow + 1000), TokenRecord::State::Expired);
        t.usesLeft = 0;
        QCOMPARE(t.state(kNow), TokenRecord::State::UsedUp);
        QCOMPARE(t.state(kNow + 1000), TokenRecord::State::UsedUp);
        t.revokedMs = kNow - 5;
        QCOMPARE(t.state(kNow), TokenRecord::State::Revoked);
        QVERIFY(!t.live(kNow));
        QCOMPARE(describe(TokenRecord::State::Live), QStringLiteral("live"));
        QCOMPARE(describe(TokenRecord::State::Expired), QStringLiteral("expired"));
        QCOMPARE(describe(TokenRecord::State::UsedUp), QStringLiteral("used up"));
        QCOMPARE(describe(TokenRecord::State::Revoked), QStringLiteral("revoked"));
        t.id = QByteArray::fromHex("00ff10ab00000001");
        QCOMPARE(t.idHex(), QStringLiteral("00ff10ab00000001"));
    }

    void revokedTokenIsRefusedAndKeptWithItsNote()
    {
        TrustStore store(folder());
        const QString note = QStringLiteral("serve --token-file /srv/flotilla/token");
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x81), 600, 5, kNow, note);
        REQUIRE_OK(token);
        auto other = store.issueToken(
            QStringLiteral("coordinator"), 7443, fingerprint(0x81), 600, 1, kNow, QStringLiteral("control center"));
        REQUIRE_OK(other);
        auto before = store.token(token->id);
        REQUIRE_OK(before);
        QVERIFY(before->has_value());
        QCOMPARE((*before)->note, note);
        QCOMPARE((*before)->revokedMs, qint64(0));
        QVERIFY((*before)->live(kNow));
        REQUIRE_OK(store.redeem(token->id, token->secret, kNow));

        // `flotilla token --revoke` takes the id or its first digits.
        auto revoked = TrustStore(folder()).revokeToken(hex(token->id).left(8).toUpper(), kNow + 1000);
        REQUIRE_OK(revoked);
        QCOMPARE(revoked->id, token->id);
        QCOMPARE(revoked->revokedMs, kNow + 1000);
        QCOMPARE(revoked->usesLeft, 4);
        REQUIRE_ERROR(store.redeem(token->id, token->secret, kNow + 2000), QStringLiteral("revoked"),
            QStringLiteral("2024-01-01 00:00:01 UTC"), QStringLiteral("flotilla token"));
        // A wrong secret is still told as such: revocation says nothing to a guesser.
        REQUIRE_ERROR(store.redeem(token->id, filled(16, 'z'), kNow + 2000), QStringLiteral("secret is wrong"));
        auto after = store.token(token->id);
        REQUIRE_OK(after);
        QCOMPARE((*after)->usesLeft, 4);
        QCOMPARE((*after)->state(kNow + 2000), TokenRecord::State::Revoked);
        QCOMPARE((*after)->note, note);
        REQUIRE_ERROR(store.revokeToken(hex(token->id), kNow + 3000), QStringLiteral("already revoked"));

        // The other token is untouched.
        QVERIFY((*store.token(other->id))->live(kNow + 2000));
        REQUIRE_OK(store.redeem(other->id, other->secret, kNow + 2000));
        auto none = store.token(filled(8, '\x01'));
        REQUIRE_OK(none);
        QVERIFY(!none->has_value());
    }

    void revokeTokenRefusesUnclearIds_data()
    {
        QTest::addColumn<QString>("id");
        QTest::addColumn<QString>("expected");
        QTest::newRow("empty") << QString() << QStringLiteral("not a token id");
        QTest::newRow("three digits") << QStringLiteral("abc") << QStringLiteral("not a token id");
        QTest::newRow("not hex") << QStringLiteral("abcz12") << QStringLiteral("not a token id");
        QTest::newRow("a worker name") << QStringLiteral("worker-7") << QStringLiteral("not a token id");
        QTest::newRow("unknown") << QStringLiteral("12345678") << QStringLiteral("no join token has an id starting with");
        QTest::newRow("shared prefix") << QStringLiteral("abcd") << QStringLiteral("2 join tokens have ids starting");
    }

    void revokeTokenRefusesUnclearIds()
    {
        QFETCH(QString, id);
        QFETCH(QString, expected);
        // Two tokens whose ids share their first digits, as a trust file can hold.
        QVERIFY(QDir().mkpath(folder()));
        TrustStore store(folder());
        const QByteArray json = R"({"tokens": [
            {"id": "abcd000000000001", "secret_sha256": "00", "created_ms": 1, "expires_ms": 9e15, "uses_left": 1, "uses_total": 1},
            {"id": "abcd000000000002", "secret_sha256": "00", "created_ms": 1, "expires_ms": 9e15, "uses_left": 1, "uses_total": 1}
        ], "certificates": []})";
        writeFile(store.legacyPath(), json);
        REQUIRE_ERROR(store.revokeToken(id, kNow), expected);
        const auto tokens = store.tokens();
        REQUIRE_OK(tokens);
        for (const TokenRecord &t : *tokens)
            QCOMPARE(t.revokedMs, qint64(0));
        // With enough digits it is clear.
        auto revoked = store.revokeToken(QStringLiteral("abcd000000000002"), kNow);
        REQUIRE_OK(revoked);
        QCOMPARE(hex(revoked->id), QStringLiteral("abcd000000000002"));
    }

    // A trust file written before tokens had notes and revocations still loads.
    void tokensFromBeforeNotesAndRevocationsLoad()
    {
        QVERIFY(QDir().mkpath(folder()));
        TrustStore store(folder());
        const QByteArray json = R"({"tokens": [
            {"id": "0102030405060708", "secret_sha256": "00", "created_ms": 1, "expires_ms": 9e15, "uses_left": 3, "uses_total": 4}
        ], "certificates": []})";
        writeFile(store.legacyPath(), json);
        auto tokens = store.tokens();
        REQUIRE_OK(tokens);
        QCOMPARE(tokens->size(), 1);
        QCOMPARE(tokens->first().note, QString());
        QCOMPARE(tokens->first().revokedMs, qint64(0));
        QVERIFY(tokens->first().live(kNow));
        REQUIRE_OK(store.revokeToken(QStringLiteral("01020304"), kNow));
        QCOMPARE(store.tokens()->first().state(kNow), TokenRecord::State::Revoked);
    }

    void issueTokenRefusesNonPositiveLifetimeOrUses_data()
    {
        QTest::addColumn<qint64>("validSeconds");
        QTest::addColumn<int>("uses");
        QTest::newRow("zero lifetime") << qint64(0) << 1;
        QTest::newRow("negative lifetime") << qint64(-60) << 1;
        QTest::newRow("zero uses") << qint64(60) << 0;
        QTest::newRow("negative uses") << qint64(60) << -3;
    }

    void issueTokenRefusesNonPositiveLifetimeOrUses()
    {
        QFETCH(qint64, validSeconds);
        QFETCH(int, uses);
        TrustStore store(folder());
        REQUIRE_ERROR(store.issueToken(QStringLiteral("h"), 1, fingerprint(2), validSeconds, uses, kNow),
            QStringLiteral("positive"));
        auto tokens = store.tokens();
        REQUIRE_OK(tokens);
        QVERIFY(tokens->isEmpty());
    }

    void expiredTokenIsRefused()
    {
        TrustStore store(folder());
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(3), 60, 2, kNow);
        REQUIRE_OK(token);
        // Valid up to the last millisecond before expiresMs.
        REQUIRE_OK(store.redeem(token->id, token->secret, kNow + 59999));
        REQUIRE_ERROR(store.redeem(token->id, token->secret, kNow + 60000), QStringLiteral("expired"),
            QStringLiteral("2024-01-01 00:01:00 UTC"), QStringLiteral("flotilla token"));
        REQUIRE_ERROR(store.redeem(token->id, token->secret, kNow + 86400000), QStringLiteral("expired"));
        // A refused redemption takes no use.
        QCOMPARE(findToken(store, token->id)->usesLeft, 1);
    }

    void wrongSecretIsRefused()
    {
        TrustStore store(folder());
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(4), 60, 1, kNow);
        REQUIRE_OK(token);
        QByteArray flipped = token->secret;
        flipped[15] = char(flipped[15] ^ 0x01);
        REQUIRE_ERROR(store.redeem(token->id, flipped, kNow), QStringLiteral("secret is wrong"));
        REQUIRE_ERROR(store.redeem(token->id, QByteArray(), kNow), QStringLiteral("secret is wrong"));
        REQUIRE_ERROR(store.redeem(token->id, token->secret + 'x', kNow), QStringLiteral("secret is wrong"));
        // Not even an expired token's state leaks to someone without the secret.
        REQUIRE_ERROR(store.redeem(token->id, flipped, kNow + 3600000), QStringLiteral("secret is wrong"));
        QCOMPARE(findToken(store, token->id)->usesLeft, 1);
        REQUIRE_OK(store.redeem(token->id, token->secret, kNow));
    }

    void unknownTokenIdIsRefused()
    {
        TrustStore store(folder());
        // An empty store (no file yet) and one with other tokens.
        REQUIRE_ERROR(store.redeem(filled(8, 'a'), filled(16, 'b'), kNow), QStringLiteral("unknown"));
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(5), 60, 1, kNow);
        REQUIRE_OK(token);
        QByteArray otherId = token->id;
        otherId[0] = char(otherId[0] ^ 0x80);
        REQUIRE_ERROR(store.redeem(otherId, token->secret, kNow), QStringLiteral("unknown to this coordinator"));
        REQUIRE_ERROR(store.redeem(QByteArray(), token->secret, kNow), QStringLiteral("unknown"));
        QCOMPARE(findToken(store, token->id)->usesLeft, 1);
    }

    void secretIsNotStoredInClear()
    {
        TrustStore store(folder());
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(6), 60, 1, kNow);
        REQUIRE_OK(token);
        // The database and its write-ahead log, where a fresh write sits until a checkpoint.
        const QByteArray file = readFile(store.path()) + readFile(store.path() + QStringLiteral("-wal"));
        QVERIFY(!file.isEmpty());
        QVERIFY(file.contains(token->id.toHex()));
        QVERIFY2(!file.contains(token->secret.toHex()), file.constData());
        QVERIFY(!file.contains(token->secret.toBase64()));
        QVERIFY(!file.contains(token->secret.toBase64(QByteArray::Base64UrlEncoding | QByteArray::OmitTrailingEquals)));
        QVERIFY(!file.contains(token->encode().toLatin1()));
    }

    // ---- certificates ----

    void certificateRecordsRoundTrip()
    {
        TrustStore store(folder());
        CertificateRecord r = record(fingerprint(0x11), QStringLiteral("gpu-box"), kNow - 5000);
        r.workerId = 7;
        REQUIRE_OK(store.addCertificate(r));
        auto found = store.certificate(r.fingerprint);
        REQUIRE_OK(found);
        QVERIFY(found->has_value());
        const CertificateRecord &c = **found;
        QCOMPARE(c.fingerprint, r.fingerprint);
        QCOMPARE(c.workerName, QStringLiteral("gpu-box"));
        QCOMPARE(c.workerId, qint64(1)); // the fleet's number for it, not the record's 7
        QCOMPARE(c.issuedMs, kNow - 5000);
        QCOMPARE(c.revokedMs, qint64(0));
        QVERIFY(!c.revoked());
        QVERIFY(c.revokeReason.isEmpty());

        auto missing = store.certificate(fingerprint(0x12));
        REQUIRE_OK(missing);
        QVERIFY(!missing->has_value());
        auto all = store.certificates();
        REQUIRE_OK(all);
        QCOMPARE(all->size(), 1);
    }

    void revokeByWorkerName()
    {
        TrustStore store(folder());
        const QByteArray a1 = fingerprint(0x21), a2 = fingerprint(0x22), b = fingerprint(0x23);
        REQUIRE_OK(store.addCertificate(record(a1, QStringLiteral("laptop-anna"))));
        REQUIRE_OK(store.addCertificate(record(a2, QStringLiteral("laptop-anna"))));
        REQUIRE_OK(store.addCertificate(record(b, QStringLiteral("laptop-bob"))));

        auto count = store.revoke(QStringLiteral("laptop-anna"), QStringLiteral("laptop stolen"), kNow + 42);
        REQUIRE_OK(count);
        QCOMPARE(*count, 2);
        for (const QByteArray &fp : { a1, a2 }) {
            auto c = store.certificate(fp);
            REQUIRE_OK(c);
            QVERIFY(c->has_value());
            QVERIFY((*c)->revoked());
            QCOMPARE((*c)->revokedMs, kNow + 42);
            QCOMPARE((*c)->revokeReason, QStringLiteral("laptop stolen"));
            QCOMPARE((*c)->workerName, QStringLiteral("laptop-anna"));
        }
        auto other = store.certificate(b);
        REQUIRE_OK(other);
        QVERIFY(!(*other)->revoked());
        QVERIFY((*other)->revokeReason.isEmpty());

        // Nothing left to revoke under that name; an unknown name is an error too.
        REQUIRE_ERROR(store.revoke(QStringLiteral("laptop-anna"), QStringLiteral("again"), kNow + 50),
            QStringLiteral("no unrevoked certificate matches 'laptop-anna'"));
        REQUIRE_ERROR(store.revoke(QStringLiteral("nobody"), QStringLiteral("?"), kNow), QStringLiteral("'nobody'"),
            QStringLiteral("at least 8 hex digits"));
        // The first revocation stands: a second attempt does not rewrite its time or reason.
        auto still = store.certificate(a1);
        REQUIRE_OK(still);
        QCOMPARE((*still)->revokedMs, kNow + 42);
        QCOMPARE((*still)->revokeReason, QStringLiteral("laptop stolen"));
    }

    void revokeByFingerprintPrefix()
    {
        TrustStore store(folder());
        const QByteArray target = fingerprint(0x31), bystander = fingerprint(0x32);
        REQUIRE_OK(store.addCertificate(record(target, QStringLiteral("w1"))));
        REQUIRE_OK(store.addCertificate(record(bystander, QStringLiteral("w2"))));
        const QString targetHex = hex(target);

        // Seven digits are too few: refused, and nothing is revoked.
        REQUIRE_ERROR(
            store.revoke(targetHex.left(7), QStringLiteral("short"), kNow), QStringLiteral("at least 8 hex digits"));
        REQUIRE_ERROR(store.revoke(QString(), QStringLiteral("empty"), kNow), QStringLiteral("no unrevoked"));
        QVERIFY(!(*store.certificate(target))->revoked());

        // Upper case with colons, as `openssl x509 -fingerprint` prints it, and padded.
        QString colons;
        for (int i = 0; i < 12; i += 2)
            colons += (i ? QStringLiteral(":") : QString()) + targetHex.mid(i, 2).toUpper();
        auto count
            = store.revoke(QStringLiteral(" ") + colons + QStringLiteral(" "), QStringLiteral("compromised"), kNow);
        REQUIRE_OK(count);
        QCOMPARE(*count, 1);
        auto c = store.certificate(target);
        REQUIRE_OK(c);
        QVERIFY((*c)->revoked());
        QCOMPARE((*c)->revokeReason, QStringLiteral("compromised"));
        QVERIFY(!(*store.certificate(bystander))->revoked());

        // Eight digits and the full fingerprint work too.
        auto eight = store.revoke(hex(bystander).left(8), QStringLiteral("eight"), kNow);
        REQUIRE_OK(eight);
        QCOMPARE(*eight, 1);
        const QByteArray third = fingerprint(0x33);
        REQUIRE_OK(store.addCertificate(record(third, QStringLiteral("w3"))));
        auto full = store.revoke(hex(third), QStringLiteral("full"), kNow);
        REQUIRE_OK(full);
        QCOMPARE(*full, 1);
        REQUIRE_ERROR(
            store.revoke(hex(fingerprint(0x34)), QStringLiteral("unknown"), kNow), QStringLiteral("no unrevoked"));
    }

    // One id per certificate for the whole fleet: every job's store keeps its workers under
    // these, so two machines must never share one, whatever id the record asked for.
    void everyCertificateHasAnIdOfItsOwn()
    {
        TrustStore store(folder());
        CertificateRecord first = record(fingerprint(0x41), QStringLiteral("w1"), kNow);
        first.workerId = 7; // ignored: the fleet numbers certificates
        CertificateRecord second = record(fingerprint(0x42), QStringLiteral("w2"), kNow + 1);
        second.workerId = 7;
        REQUIRE_OK(store.addCertificate(first));
        REQUIRE_OK(store.addCertificate(second));
        const qint64 a = (*store.certificate(fingerprint(0x41)))->workerId;
        const qint64 b = (*store.certificate(fingerprint(0x42)))->workerId;
        QVERIFY(a > 0 && b > 0);
        QVERIFY2(a != b, qPrintable(QStringLiteral("both certificates have worker id %1").arg(a)));
        // A revoked certificate keeps its id: a new one does not take it.
        QCOMPARE(*store.revoke(QStringLiteral("w1"), QStringLiteral("retired"), kNow), 1);
        REQUIRE_OK(store.addCertificate(record(fingerprint(0x43), QStringLiteral("w3"), kNow + 2)));
        const qint64 c = (*store.certificate(fingerprint(0x43)))->workerId;
        QVERIFY(c != a && c != b);
    }

    // A trust database from before the ids were the fleet's: the id was the one the first job
    // gave, so two machines enrolled for two jobs could hold the same. Opening it numbers the
    // certificates again, in the order they were issued.
    void oldDatabasesAreNumberedAgain()
    {
        const QString dir = folder();
        {
            TrustStore store(dir);
            REQUIRE_OK(store.addCertificate(record(fingerprint(0x44), QStringLiteral("w1"), kNow)));
            REQUIRE_OK(store.addCertificate(record(fingerprint(0x45), QStringLiteral("w2"), kNow + 5)));
        }
        sqlite3 *db = nullptr;
        QCOMPARE(sqlite3_open(QDir(dir).filePath(QStringLiteral("trust.db")).toUtf8().constData(), &db), SQLITE_OK);
        char *error = nullptr;
        const int rc = sqlite3_exec(db,
                                    "DROP INDEX certificates_by_worker; UPDATE certificates SET worker_id = 1; "
                                    "PRAGMA user_version = 1;",
                                    nullptr, nullptr, &error);
        const QString message = QString::fromUtf8(error ? error : "");
        sqlite3_free(error);
        sqlite3_close(db);
        QVERIFY2(rc == SQLITE_OK, qPrintable(message));
        TrustStore store(dir);
        auto w1 = store.certificate(fingerprint(0x44));
        REQUIRE_OK(w1);
        auto w2 = store.certificate(fingerprint(0x45));
        REQUIRE_OK(w2);
        QCOMPARE((*w1)->workerId, qint64(1));
        QCOMPARE((*w2)->workerId, qint64(2));
    }

    // ---- the file ----

    void twoStoresOnOneFolderSeeEachOthersWrites()
    {
        TrustStore serve(folder());
        TrustStore cli(folder());
        auto token = cli.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x51), 600, 2, kNow);
        REQUIRE_OK(token);
        REQUIRE_OK(serve.redeem(token->id, token->secret, kNow));
        QCOMPARE(findToken(cli, token->id)->usesLeft, 1);
        REQUIRE_OK(cli.redeem(token->id, token->secret, kNow));
        REQUIRE_ERROR(serve.redeem(token->id, token->secret, kNow), QStringLiteral("used up"));

        const QByteArray fp = fingerprint(0x52);
        REQUIRE_OK(serve.addCertificate(record(fp, QStringLiteral("worker-x"))));
        auto seen = cli.certificate(fp);
        REQUIRE_OK(seen);
        QVERIFY(seen->has_value());
        auto revoked = cli.revoke(QStringLiteral("worker-x"), QStringLiteral("decommissioned"), kNow);
        REQUIRE_OK(revoked);
        QCOMPARE(*revoked, 1);
        auto after = serve.certificate(fp);
        REQUIRE_OK(after);
        QVERIFY((*after)->revoked());
        QCOMPARE((*after)->revokeReason, QStringLiteral("decommissioned"));
        // The token issued by one is intact after the other's writes.
        auto tokens = serve.tokens();
        REQUIRE_OK(tokens);
        QCOMPARE(tokens->size(), 1);
    }

    // Several writers at once, each with its own TrustStore: no use is spent twice and no
    // record is lost.
    void concurrentWritersLoseNothing()
    {
        TrustStore setup(folder());
        constexpr int kUses = 6;
        auto token = setup.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x61), 600, kUses, kNow);
        REQUIRE_OK(token);
        std::atomic<int> redeemed { 0 };
        std::atomic<int> usedUp { 0 };
        std::atomic<int> otherErrors { 0 };
        std::atomic<int> added { 0 };
        const QString dir = folder();
        const auto work = [&](int thread) {
            TrustStore store(dir);
            for (int i = 0; i < kUses; ++i) {
                auto r = store.redeem(token->id, token->secret, kNow);
                if (r.ok())
                    ++redeemed;
                else if (r.error().contains(QLatin1String("used up")))
                    ++usedUp;
                else
                    ++otherErrors;
                if (store
                        .addCertificate(record(fingerprint(static_cast<unsigned char>(0x80 + thread * 16 + i)),
                            QStringLiteral("t%1-%2").arg(thread).arg(i)))
                        .ok())
                    ++added;
            }
        };
        std::thread first(work, 0);
        std::thread second(work, 1);
        first.join();
        second.join();
        QCOMPARE(otherErrors.load(), 0);
        QCOMPARE(redeemed.load(), kUses);
        QCOMPARE(usedUp.load(), kUses);
        QCOMPARE(findToken(setup, token->id)->usesLeft, 0);
        QCOMPARE(added.load(), 2 * kUses);
        auto certificates = setup.certificates();
        REQUIRE_OK(certificates);
        QCOMPARE(certificates->size(), 2 * kUses);
    }

    void trustFileIsPrivate()
    {
#ifdef Q_OS_UNIX
        TrustStore store(folder());
        auto token = store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x71), 600, 1, kNow);
        REQUIRE_OK(token);
        QCOMPARE(fileMode(store.path()), 0600);
        // Still private after it is changed, and so are its log and the log's index.
        REQUIRE_OK(store.redeem(token->id, token->secret, kNow));
        REQUIRE_OK(store.addCertificate(record(fingerprint(0x72), QStringLiteral("w"))));
        const QStringList entries = QDir(folder()).entryList(QDir::Files | QDir::Hidden);
        for (const QString &entry : entries) {
            QVERIFY2(entry.startsWith(QLatin1String("trust.db")), qPrintable(entry));
            QCOMPARE(fileMode(QDir(folder()).filePath(entry)), 0600);
        }
        QVERIFY(entries.contains(QStringLiteral("trust.db")));
#else
        QSKIP("file modes are a Unix matter");
#endif
    }

    void missingFolderIsCreatedOnFirstWrite()
    {
        const QString nested = m_dir->filePath(QStringLiteral("a/b/c"));
        TrustStore store(nested);
        auto tokens = store.tokens();
        REQUIRE_OK(tokens);
        QVERIFY(tokens->isEmpty());
        auto none = store.certificate(fingerprint(0x73));
        REQUIRE_OK(none);
        QVERIFY(!none->has_value());
        QVERIFY(!QFileInfo::exists(nested)); // reading creates nothing
        REQUIRE_OK(store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x74), 600, 1, kNow));
        QVERIFY(QFileInfo::exists(store.path()));
    }

    void corruptFileIsAnErrorNamingTheFile_data()
    {
        QTest::addColumn<QByteArray>("content");
        QTest::newRow("not JSON") << QByteArray("{ \"tokens\": [ {\"id\": ");
        QTest::newRow("binary") << QByteArray("\x00\x01\x02\xff", 4);
        QTest::newRow("JSON array") << QByteArray("[1, 2, 3]");
    }

    void corruptFileIsAnErrorNamingTheFile()
    {
        QFETCH(QByteArray, content);
        QVERIFY(QDir().mkpath(folder()));
        TrustStore store(folder());
        writeFile(store.legacyPath(), content);
        const QString path = store.legacyPath();
        REQUIRE_ERROR(store.tokens(), path, QStringLiteral("corrupt"));
        REQUIRE_ERROR(store.certificates(), path);
        REQUIRE_ERROR(store.certificate(fingerprint(0x75)), path);
        // Writes refuse too, rather than replace what cannot be read.
        REQUIRE_ERROR(store.issueToken(QStringLiteral("coordinator"), 7443, fingerprint(0x76), 600, 1, kNow), path);
        REQUIRE_ERROR(store.redeem(filled(8, 'a'), filled(16, 'b'), kNow), path);
        REQUIRE_ERROR(store.addCertificate(record(fingerprint(0x77), QStringLiteral("w"))), path);
        REQUIRE_ERROR(store.revoke(QStringLiteral("w"), QStringLiteral("r"), kNow), path);
        QCOMPARE(readFile(path), content);
        QVERIFY(!QFileInfo::exists(store.path())); // nothing was created beside it
    }

    // The trust.json of a coordinator from before the database is moved into it on first
    // use, whole: tokens with their uses, notes, roles and revocations, certificates with
    // their worker ids and revocations. The old file is kept aside; a second store (another
    // process) sees the same.
    void legacyTrustFileIsMigrated()
    {
        QVERIFY(QDir().mkpath(folder()));
        TrustStore store(folder());
        const QByteArray json = R"({"tokens": [
            {"id": "0102030405060708", "secret_sha256": "aa", "created_ms": 5, "expires_ms": 9e15, "uses_left": 3, "uses_total": 4, "note": "lab", "role": "operator"},
            {"id": "1112131415161718", "secret_sha256": "bb", "created_ms": 6, "expires_ms": 7, "uses_left": 1, "uses_total": 1, "revoked_ms": 8}
        ], "certificates": [
            {"fingerprint": "c1c1c1c1", "worker_name": "w1", "worker_id": 17, "issued_ms": 9},
            {"fingerprint": "c2c2c2c2", "worker_name": "w2", "worker_id": 0, "issued_ms": 10, "revoked_ms": 11, "revoke_reason": "lost laptop"}
        ]})";
        writeFile(store.legacyPath(), json);
        auto tokens = store.tokens();
        REQUIRE_OK(tokens);
        QCOMPARE(tokens->size(), 2);
        QCOMPARE(hex(tokens->at(0).id), QStringLiteral("0102030405060708"));
        QCOMPARE(tokens->at(0).usesLeft, 3);
        QCOMPARE(tokens->at(0).usesTotal, 4);
        QCOMPARE(tokens->at(0).note, QStringLiteral("lab"));
        QCOMPARE(tokens->at(0).role, Role::Operator);
        QCOMPARE(tokens->at(1).revokedMs, qint64(8));
        auto certificates = store.certificates();
        REQUIRE_OK(certificates);
        QCOMPARE(certificates->size(), 2);
        // Numbered by the fleet in the order they were issued, not as the old file said.
        QCOMPARE(certificates->at(0).workerId, qint64(1));
        QCOMPARE(certificates->at(1).workerId, qint64(2));
        QCOMPARE(certificates->at(1).revokeReason, QStringLiteral("lost laptop"));
        QVERIFY(!QFileInfo::exists(store.legacyPath()));
        QVERIFY(QFileInfo::exists(store.legacyPath() + QStringLiteral(".migrated")));
        TrustStore other(folder());
        auto seen = other.certificate(QByteArray::fromHex("c1c1c1c1"));
        REQUIRE_OK(seen);
        QVERIFY(seen->has_value());
        QCOMPARE((*seen)->workerName, QStringLiteral("w1"));
        // And it goes on from there: a revocation by one is seen by the other.
        REQUIRE_OK(other.revoke(QStringLiteral("w1"), QStringLiteral("retired"), kNow));
        QVERIFY((*store.certificate(QByteArray::fromHex("c1c1c1c1")))->revoked());
    }
};

QTEST_GUILESS_MAIN(TestTrust)
#include "tst_trust.moc"
