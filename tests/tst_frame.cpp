// Frames and messages without sockets: round trips, chunked payloads, every malformed input
// the network may bring, and a fuzzing loop over mutated streams.
#include "common/Crc32c.h"
#include "net/Frame.h"

#include <QRandomGenerator>
#include <QtTest>

using namespace flotilla;
using namespace flotilla::net;

namespace {

// The check value as it travels: CRC-32C, 4 bytes big-endian.
QByteArray crc(const QByteArray &bytes)
{
    Crc32c c;
    c.addData(bytes);
    return c.result();
}

// CRC-32C one bit at a time, as RFC 3720 defines it: what the fast one must agree with.
std::uint32_t crcBitByBit(const QByteArray &bytes)
{
    std::uint32_t c = 0xFFFFFFFFu;
    for (const char byte : bytes) {
        c ^= std::uint8_t(byte);
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

QByteArray header(std::initializer_list<std::pair<QString, QCborValue>> fields)
{
    QCborMap map;
    for (const auto &[k, v] : fields)
        map.insert(k, v);
    return map.toCborValue().toCbor();
}

// Feeds bytes and collects every message until nothing more comes; the error, if any.
struct Collected
{
    std::vector<Message> messages;
    QString error;
};

Collected readAll(MessageReader &reader, const QByteArray &bytes)
{
    Collected c;
    reader.feed(bytes);
    for (;;) {
        auto m = reader.next();
        if (!m) {
            c.error = m.error();
            return c;
        }
        if (!m->has_value())
            return c;
        c.messages.push_back(std::move(**m));
    }
}

QByteArray randomBytes(QRandomGenerator &g, qsizetype n)
{
    QByteArray b(n, Qt::Uninitialized);
    for (auto &ch : b)
        ch = char(g.bounded(256));
    return b;
}

} // namespace

class TestFrame : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void messageRoundTrip()
    {
        QCborMap h;
        h.insert(QStringLiteral("lease"), 42);
        h.insert(QStringLiteral("name"), QStringLiteral("worker-1"));
        MessageReader reader;
        const Collected c = readAll(reader, encodeMessage(MessageType::Hello, h));
        QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
        QCOMPARE(c.messages.size(), std::size_t(1));
        QVERIFY(c.messages[0].type == MessageType::Hello);
        QCOMPARE(c.messages[0].header.value(QStringLiteral("lease")).toInteger(), qint64(42));
        QVERIFY(c.messages[0].payload.isEmpty());
    }

    void largePayloadTravelsInChunks()
    {
        QRandomGenerator g(7);
        const QByteArray payload = randomBytes(g, 3 * 1024 * 1024 + 123);
        const QByteArray wire = encodeMessage(MessageType::Result, QCborMap{{QStringLiteral("lease"), 1}}, payload);
        // Four frames: the message and three chunks, each frame within the limit.
        FrameParser frames;
        frames.feed(wire);
        int count = 0;
        while (auto f = frames.next()) {
            QVERIFY(f->payload.size() <= qsizetype(Limits::maxFramePayload));
            QVERIFY(count == 0 ? f->type == MessageType::Result : f->type == MessageType::Chunk);
            ++count;
        }
        QCOMPARE(count, 4);
        MessageReader reader;
        const Collected c = readAll(reader, wire);
        QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
        QCOMPARE(c.messages.size(), std::size_t(1));
        QCOMPARE(c.messages[0].payload, payload);
    }

    // The published check value (RFC 3720 B.4, and "123456789" → E3069283), every length and
    // alignment against the bit-by-bit definition, and pieces summed one after another.
    void crc32cIsCastagnolis()
    {
        QCOMPARE(Crc32c::of("123456789"), 0xE3069283u);
        QCOMPARE(Crc32c::of(QByteArray(32, '\0')), 0x8A9136AAu);
        QCOMPARE(Crc32c::of(QByteArray(32, '\xff')), 0x62A8AB43u);
        QRandomGenerator g(3);
        const QByteArray data = randomBytes(g, 300);
        for (int offset = 0; offset < 8; ++offset)
            for (int n = 0; n + offset <= 200; ++n) {
                const QByteArray piece = data.mid(offset, n);
                QCOMPARE(Crc32c::of(piece), crcBitByBit(piece));
            }
        Crc32c pieces;
        pieces.addData(QByteArrayView(data).first(13));
        pieces.addData(QByteArrayView(data).sliced(13, 100));
        pieces.addData(QByteArrayView(data).sliced(113));
        QCOMPARE(pieces.value(), crcBitByBit(data));
        qInfo("CRC-32C with the CPU's instruction: %s", Crc32c::accelerated() ? "yes" : "no");
    }

    void digestTravelsInTheFrameThatEndsThePayload()
    {
        QRandomGenerator g(8);
        const QByteArray payload = randomBytes(g, 2 * 1024 * 1024 + 5);
        const QByteArray sha = crc(payload);
        FrameParser frames;
        frames.feed(encodeMessage(MessageType::Result, {}, payload));
        std::vector<Frame> all;
        while (auto f = frames.next())
            all.push_back(std::move(*f));
        QCOMPARE(all.size(), std::size_t(3));
        QCOMPARE(all[0].header.value(QStringLiteral("payload_size")).toInteger(), payload.size());
        QVERIFY(all[0].header.value(QStringLiteral("payload_crc32c")).isUndefined());
        QVERIFY(all[1].header.isEmpty());
        QCOMPARE(all[2].header.value(QStringLiteral("payload_crc32c")).toByteArray(), sha);
        // A payload that fits in one frame carries both in that frame.
        FrameParser one;
        one.feed(encodeMessage(MessageType::Result, {}, "abc"));
        const auto single = one.next();
        QVERIFY(single);
        QCOMPARE(single->header.value(QStringLiteral("payload_crc32c")).toByteArray(),
                 crc("abc"));
    }

    void digestInTheWrongFrameIsRefused()
    {
        const QByteArray a(Limits::maxFramePayload, 'a');
        const QByteArray b("bb");
        const QByteArray sha = crc(QByteArray(a + b));
        const auto type = std::uint8_t(MessageType::Result);
        const auto chunk = std::uint8_t(MessageType::Chunk);
        const QByteArray announce = header({{QStringLiteral("payload_size"), a.size() + b.size()}});
        const QByteArray announceWithSha
            = header({{QStringLiteral("payload_size"), a.size() + b.size()}, {QStringLiteral("payload_crc32c"), sha}});
        const QByteArray shaOnly = header({{QStringLiteral("payload_crc32c"), sha}});
        struct Case
        {
            QByteArray wire;
            QString error;
        };
        const Case cases[] = {
            // The old placement: the digest up front, nothing at the end.
            {encodeFrame(kProtocolVersion, type, announceWithSha, a) + encodeFrame(kProtocolVersion, chunk, header({}), b),
             QStringLiteral("carries its payload_crc32c in the first")},
            // No digest at the end.
            {encodeFrame(kProtocolVersion, type, announce, a) + encodeFrame(kProtocolVersion, chunk, header({}), b),
             QStringLiteral("ends a Result payload carries no 4-byte payload_crc32c")},
            // A digest of the wrong length at the end.
            {encodeFrame(kProtocolVersion, type, announce, a)
                 + encodeFrame(kProtocolVersion, chunk, header({{QStringLiteral("payload_crc32c"), QByteArray(3, 's')}}), b),
             QStringLiteral("ends a Result payload carries no 4-byte payload_crc32c")},
            // A whole payload in one frame without its digest.
            {encodeFrame(kProtocolVersion, type, header({{QStringLiteral("payload_size"), 2}}), b),
             QStringLiteral("whole payload without a 4-byte payload_crc32c")},
            // The digest of something else.
            {encodeFrame(kProtocolVersion, type, announce, a)
                 + encodeFrame(kProtocolVersion, chunk, header({{QStringLiteral("payload_crc32c"), QByteArray(4, 's')}}), b),
             QStringLiteral("CRC-32C does not match")},
        };
        for (const Case &c : cases) {
            MessageReader r;
            const Collected got = readAll(r, c.wire);
            QVERIFY(got.messages.empty());
            QVERIFY2(got.error.contains(c.error), qPrintable(got.error + QStringLiteral(" / expected: ") + c.error));
        }
        // A header on a chunk in the middle.
        const QByteArray three(2 * Limits::maxFramePayload + 1, 'c');
        MessageReader middle;
        const Collected got = readAll(middle, encodeFrame(kProtocolVersion, type,
                                                          header({{QStringLiteral("payload_size"), three.size()}}),
                                                          three.first(Limits::maxFramePayload))
                                                  + encodeFrame(kProtocolVersion, chunk, shaOnly,
                                                                three.sliced(Limits::maxFramePayload, Limits::maxFramePayload)));
        QVERIFY2(got.error.contains(QStringLiteral("in the middle of a Result payload carries a header")),
                 qPrintable(got.error));
        // The right placement is read.
        MessageReader good;
        const Collected ok = readAll(good, encodeFrame(kProtocolVersion, type, announce, a)
                                               + encodeFrame(kProtocolVersion, chunk, shaOnly, b));
        QVERIFY2(ok.error.isEmpty(), qPrintable(ok.error));
        QCOMPARE(ok.messages.size(), std::size_t(1));
        QCOMPARE(ok.messages[0].payload, QByteArray(a + b));
    }

    void outgoingMessageHandsOutTheSameBytesInAnyPieces()
    {
        // What a socket writes in pieces of any size (a full kernel buffer takes a few bytes at
        // a time) is exactly encodeMessage's bytes, and remaining() counts down to zero.
        QRandomGenerator g(9);
        for (const qsizetype size : {qsizetype(0), qsizetype(10), qsizetype(Limits::maxFramePayload),
                                     qsizetype(Limits::maxFramePayload) + 1, qsizetype(3 * 1024 * 1024 + 77)}) {
            const QByteArray payload = randomBytes(g, size);
            const QCborMap h{{QStringLiteral("lease"), 4}};
            const QByteArray expected = encodeMessage(MessageType::Result, h, payload);
            OutgoingMessage m(MessageType::Result, h, payload);
            QCOMPARE(m.size(), expected.size());
            QByteArray sent;
            for (QByteArrayView next = m.next(); !next.isEmpty(); next = m.next()) {
                const qsizetype take = std::min<qsizetype>(next.size(), 1 + g.bounded(200000));
                sent.append(next.first(take));
                m.advance(take);
                QCOMPARE(m.remaining(), expected.size() - sent.size());
            }
            QCOMPARE(sent, expected);
            MessageReader r;
            const Collected c = readAll(r, sent);
            QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
            QCOMPARE(c.messages.size(), std::size_t(1));
            QCOMPARE(c.messages[0].payload, payload);
        }
    }

    void byteByByteFeeding()
    {
        const QByteArray wire = encodeMessage(MessageType::Heartbeat, QCborMap{{QStringLiteral("done"), 5}}, "abc")
                                + encodeMessage(MessageType::Bye, QCborMap{});
        MessageReader reader;
        std::vector<Message> got;
        for (const char ch : wire) {
            reader.feed(QByteArray(1, ch));
            auto m = reader.next();
            QVERIFY2(m, qPrintable(m.error()));
            if (m->has_value())
                got.push_back(std::move(**m));
        }
        QCOMPARE(got.size(), std::size_t(2));
        QCOMPARE(got[0].payload, QByteArray("abc"));
        QVERIFY(got[1].type == MessageType::Bye);
    }

    void garbageFirstByteIsRefusedAtOnce()
    {
        FrameParser p;
        p.feed("GE");
        QVERIFY(!p.next());
        QVERIFY(p.failed());
        QVERIFY2(p.error().contains(QStringLiteral("not a Flotilla frame")), qPrintable(p.error()));
        QVERIFY(p.error().contains(QStringLiteral("47 45")));
        p.feed(encodeMessage(MessageType::Hello, {})); // nothing more is parsed after an error
        QVERIFY(!p.next());
    }

    void wrongProtocolVersion()
    {
        FrameParser p;
        p.feed(encodeFrame(9, 1, header({}), {}));
        QVERIFY(!p.next());
        QVERIFY2(p.error().contains(QStringLiteral("protocol version 9 is not supported")), qPrintable(p.error()));
    }

    void unknownMessageType()
    {
        FrameParser p;
        p.feed(encodeFrame(kProtocolVersion, 200, header({}), {}));
        QVERIFY(!p.next());
        QVERIFY2(p.error().contains(QStringLiteral("unknown message type 200")), qPrintable(p.error()));
    }

    void oversizedLengthsAreRefusedBeforeTheBodyArrives()
    {
        // Only the 12-byte frame header is sent: the lengths are judged on their own.
        QByteArray bigHeader = encodeFrame(kProtocolVersion, 1, QByteArray(), QByteArray()).left(kFrameHeaderSize);
        bigHeader[4] = char(0x7f); // header length 0x7f000000
        FrameParser p;
        p.feed(bigHeader);
        QVERIFY(!p.next());
        QVERIFY2(p.error().contains(QStringLiteral("header of 2130706432 bytes")), qPrintable(p.error()));

        QByteArray bigPayload = encodeFrame(kProtocolVersion, 11, QByteArray(), QByteArray()).left(kFrameHeaderSize);
        bigPayload[8] = char(0x01); // payload length 16 MiB
        FrameParser q;
        q.feed(bigPayload);
        QVERIFY(!q.next());
        QVERIFY2(q.error().contains(QStringLiteral("payload of 16777216 bytes")), qPrintable(q.error()));
    }

    void truncatedFrameWaitsAndShowsPendingBytes()
    {
        const QByteArray wire = encodeMessage(MessageType::Hello, QCborMap{{QStringLiteral("x"), 1}}, "payload");
        FrameParser p;
        p.feed(wire.left(wire.size() - 3));
        QVERIFY(!p.next());
        QVERIFY(!p.failed());
        QCOMPARE(p.pending(), wire.size() - 3); // the connection layer times this out
        p.feed(wire.right(3));
        QVERIFY(p.next());
    }

    void headerMustBeACborMap()
    {
        FrameParser p;
        p.feed(encodeFrame(kProtocolVersion, 1, QCborValue(5).toCbor(), {}));
        QVERIFY(!p.next());
        QVERIFY2(p.error().contains(QStringLiteral("not a CBOR map")), qPrintable(p.error()));
        FrameParser q;
        q.feed(encodeFrame(kProtocolVersion, 1, QByteArray("\xa1\x61", 2), {})); // cut-off map
        QVERIFY(!q.next());
        QVERIFY(q.failed());
    }

    void payloadWithoutAnnouncementIsRefused()
    {
        MessageReader r;
        const Collected c = readAll(r, encodeFrame(kProtocolVersion, 11, header({}), "sneaky"));
        QVERIFY2(c.error.contains(QStringLiteral("announces no payload_size")), qPrintable(c.error));
    }

    void payloadShaMismatchIsRefused()
    {
        QByteArray wire = encodeMessage(MessageType::Result, {}, QByteArray(1000, 'a'));
        wire[wire.size() - 1] = 'b'; // one flipped byte in the payload
        MessageReader r;
        const Collected c = readAll(r, wire);
        QVERIFY(c.messages.empty());
        QVERIFY2(c.error.contains(QStringLiteral("CRC-32C does not match")), qPrintable(c.error));
    }

    void chunkProtocolViolations()
    {
        const QByteArray chunk = encodeFrame(kProtocolVersion, 15, header({}), "x");
        MessageReader orphan;
        QVERIFY(readAll(orphan, chunk).error.contains(QStringLiteral("no message to continue")));

        // Announce 2 MiB, send the first frame, then interleave another message.
        const QByteArray big = encodeMessage(MessageType::Result, {}, QByteArray(2 * 1024 * 1024, 'z'));
        FrameParser split;
        split.feed(big);
        const auto first = split.next();
        QVERIFY(first);
        QByteArray firstFrame = big.left(kFrameHeaderSize + first->header.toCborValue().toCbor().size()
                                         + first->payload.size());
        MessageReader interleaved;
        const Collected c = readAll(interleaved, firstFrame + encodeMessage(MessageType::Heartbeat, {}));
        QVERIFY2(c.error.contains(QStringLiteral("in the middle of a Result payload")), qPrintable(c.error));

        // More bytes than announced.
        const QByteArray sha = crc("abc");
        const QByteArray tooLong = encodeFrame(kProtocolVersion, 11,
                                               header({{QStringLiteral("payload_size"), 2},
                                                       {QStringLiteral("payload_crc32c"), sha}}),
                                               "abc");
        MessageReader r;
        QVERIFY(readAll(r, tooLong).error.contains(QStringLiteral("longer than the 2 bytes announced")));
    }

    void perTypePayloadLimit()
    {
        MessageReader r;
        r.assembler().setPayloadLimit(MessageType::Result, 100);
        const Collected c = readAll(r, encodeMessage(MessageType::Result, {}, QByteArray(101, 'a')));
        QVERIFY2(c.error.contains(QStringLiteral("payload of 101 bytes; at most 100")), qPrintable(c.error));
        MessageReader none;
        none.assembler().setPayloadLimit(MessageType::Hello, 0);
        QVERIFY(!readAll(none, encodeMessage(MessageType::Hello, {}, "x")).error.isEmpty());
    }

    void fuzzMutatedStreams()
    {
        // Valid streams with random damage must give messages or a clean error, never a crash
        // or a hang, and never a payload other than the one that was sent (its SHA-256 is
        // checked; headers are protected by TLS, not here). Pure garbage must be refused.
        QRandomGenerator g(20261130);
        const QByteArray payload = randomBytes(g, 3000);
        const QByteArray good = encodeMessage(MessageType::Hello, QCborMap{{QStringLiteral("name"), QStringLiteral("w")}})
                                + encodeMessage(MessageType::Result, QCborMap{{QStringLiteral("lease"), 3}}, payload)
                                + encodeMessage(MessageType::Heartbeat, {});
        int errors = 0;
        int delivered = 0;
        for (int i = 0; i < 20000; ++i) {
            QByteArray wire = good;
            const int edits = 1 + int(g.bounded(4));
            for (int e = 0; e < edits && !wire.isEmpty(); ++e) {
                const int pos = int(g.bounded(int(wire.size())));
                switch (g.bounded(4)) {
                case 0: wire[pos] = char(wire[pos] ^ (1 << g.bounded(8))); break;
                case 1: wire.truncate(pos); break;
                case 2: wire.insert(pos, randomBytes(g, 1 + g.bounded(16))); break;
                default: wire.remove(pos, 1 + g.bounded(16)); break;
                }
            }
            MessageReader r;
            const qsizetype cut = wire.isEmpty() ? 0 : qsizetype(g.bounded(int(wire.size())));
            Collected c = readAll(r, wire.left(cut));
            if (c.error.isEmpty()) {
                Collected rest = readAll(r, wire.mid(cut));
                c.error = rest.error;
                c.messages.insert(c.messages.end(), rest.messages.begin(), rest.messages.end());
            }
            errors += c.error.isEmpty() ? 0 : 1;
            QVERIFY(c.messages.size() <= 3);
            for (const Message &m : c.messages) {
                ++delivered;
                if (!m.payload.isEmpty())
                    QCOMPARE(m.payload, payload);
            }
        }
        QVERIFY(errors > 1000);
        QVERIFY(delivered > 1000);
        for (int i = 0; i < 2000; ++i) {
            MessageReader r;
            QByteArray garbage = randomBytes(g, 2 + g.bounded(200));
            if (garbage.startsWith("FL"))
                garbage[0] = 'X';
            QVERIFY(!readAll(r, garbage).error.isEmpty());
        }
    }

    void everyTypeHasAName()
    {
        QCOMPARE(QString::fromLatin1(messageName(1)), QStringLiteral("Hello"));
        QCOMPARE(QString::fromLatin1(messageName(17)), QStringLiteral("Bye"));
        QVERIFY(!messageName(0));
        QCOMPARE(QString::fromLatin1(messageName(21)), QStringLiteral("Reply"));
        QCOMPARE(QString::fromLatin1(messageName(22)), QStringLiteral("Echo"));
        QCOMPARE(QString::fromLatin1(messageName(24)), QStringLiteral("ModelData"));
        QVERIFY(!messageName(25));
        QCOMPARE(describe(MessageType::Result), QStringLiteral("Result"));
    }
};

QTEST_GUILESS_MAIN(TestFrame)
#include "tst_frame.moc"
