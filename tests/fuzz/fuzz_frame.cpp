// libFuzzer target: bytes off the network, through everything that reads them before the
// application does. The bytes go into a MessageReader (FrameParser + MessageAssembler) in
// pieces cut at pseudo-random points, under one of the payload limits the coordinator and
// the worker set; each message that comes out is then
//   - encoded again with encodeMessage and read back, which must give the same message;
//   - read as a join token's CBOR map (JoinToken::decode, and encode/decode once more when
//     it is one);
//   - a Redeem: its CSR signed the way enrollment does (signCertificateRequest with the
//     header's name), and the certificate fingerprinted;
//   - an Enrolled: its certificate fingerprinted, as the worker stores it.
// An error must be sticky and say something. Any broken expectation aborts, which libFuzzer
// reports as a crash with the input that caused it.
//
// Input: one control byte, then the stream. Control bits 0-1 pick the payload limits, bits
// 2-7 seed the cutting points.
#include "FuzzExpect.h"
#include "net/Frame.h"
#include "net/Pki.h"
#include "net/TrustStore.h"

#include <QCborValue>

using namespace flotilla::net;
using flotilla::fuzz::broken;
using flotilla::fuzz::expect;

namespace {

const QString kPayloadSize = QStringLiteral("payload_size");
const QString kPayloadSha = QStringLiteral("payload_crc32c");

const CertificateAuthority &authority()
{
    static const CertificateAuthority ca = [] {
        auto created = createCertificateAuthority(QStringLiteral("Flotilla fuzz CA"), 30);
        if (!created)
            broken("cannot create the CA:", created.error());
        return *created;
    }();
    return ca;
}

// The limits peers set: 0 the worker's (the defaults), 1 the coordinator's (no payload but a
// CSR and a small model's weights), 2 a small cap on every type, 3 no payload at all.
void setLimits(MessageAssembler &assembler, int profile)
{
    if (profile == 0)
        return;
    for (int t = 1; t <= 17; ++t)
        assembler.setPayloadLimit(static_cast<MessageType>(t), profile == 2 ? 4096 : 0);
    if (profile == 1) {
        assembler.setPayloadLimit(MessageType::Redeem, 64 * 1024);
        assembler.setPayloadLimit(MessageType::Result, 4096);
    }
}

QCborMap withoutPayloadFields(QCborMap header)
{
    // A map off the wire may hold a key twice; the assembler read the first of each.
    while (header.contains(kPayloadSize))
        header.remove(kPayloadSize);
    while (header.contains(kPayloadSha))
        header.remove(kPayloadSha);
    return header;
}

std::vector<Message> readWhole(const QByteArray &wire, QString *error)
{
    MessageReader reader;
    reader.feed(wire);
    std::vector<Message> out;
    for (;;) {
        auto m = reader.next();
        if (!m) {
            *error = m.error();
            return out;
        }
        if (!m->has_value())
            return out;
        out.push_back(std::move(**m));
    }
}

// What the sender side makes of this message must read back as the same message.
void checkRoundTrip(const Message &m)
{
    const QCborMap header = withoutPayloadFields(m.header);
    const QByteArray headerCbor = header.toCborValue().toCbor();
    // Qt writes every float as a double: a header of many half-precision floats grows past the
    // header limit when written again. No Flotilla peer writes such a header.
    if (headerCbor.size() + 128 > qsizetype(Limits::maxHeader))
        return;
    QString error;
    const std::vector<Message> again = readWhole(encodeMessage(m.type, header, m.payload), &error);
    expect(error.isEmpty(), "a message encoded again does not read back:", error);
    expect(again.size() == 1, "a message encoded again reads back as several");
    expect(again[0].type == m.type, "a message encoded again changed its type");
    expect(again[0].payload == m.payload, "a message encoded again changed its payload");
    expect(withoutPayloadFields(again[0].header).toCborValue().toCbor() == headerCbor,
           "a message encoded again changed its header");
}

void checkJoinToken(const QCborMap &header)
{
    const QByteArray body = header.toCborValue().toCbor().toBase64(QByteArray::Base64UrlEncoding
                                                                   | QByteArray::OmitTrailingEquals);
    auto token = JoinToken::decode(QStringLiteral("flt1.") + QString::fromLatin1(body));
    if (!token) {
        expect(!token.error().isEmpty(), "a refused join token has no reason");
        return;
    }
    expect(token->caFingerprint.size() == 32 && token->id.size() == 8 && token->secret.size() == 16
               && token->port > 0 && !token->host.isEmpty(),
           "a join token was accepted with a wrong field");
    auto again = JoinToken::decode(token->encode());
    expect(again.ok(), "a join token encoded again is refused:", again.error());
    expect(again->host == token->host && again->port == token->port && again->caFingerprint == token->caFingerprint
               && again->id == token->id && again->secret == token->secret && again->expiresMs == token->expiresMs,
           "a join token encoded again changed");
}

void checkEnrollment(const Message &m)
{
    const QString name = m.header.value(QStringLiteral("name")).toString();
    auto certificate = signCertificateRequest(authority(), m.payload, name, 365);
    if (!certificate) {
        expect(!certificate.error().isEmpty(), "a refused certificate request has no reason");
        return;
    }
    expect(certificateFingerprint(*certificate).size() == 32, "a signed certificate cannot be fingerprinted");
}

void checkMessage(const Message &m)
{
    expect(!describe(m.type).isEmpty(), "a message type has no name");
    checkRoundTrip(m);
    checkJoinToken(m.header);
    if (m.type == MessageType::Redeem)
        checkEnrollment(m);
    if (m.type == MessageType::Enrolled) {
        const QByteArray fingerprint = certificateFingerprint(m.payload);
        expect(fingerprint.isEmpty() || fingerprint.size() == 32, "a certificate fingerprint is not 32 bytes");
    }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
    authority();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    if (size < 1)
        return 0;
    const std::uint8_t control = data[0];
    const char *stream = reinterpret_cast<const char *>(data + 1);
    const std::size_t length = size - 1;

    MessageReader reader;
    setLimits(reader.assembler(), control & 3);
    // xorshift32: the same input always cuts at the same points.
    std::uint32_t state = 0x9e3779b9u ^ (std::uint32_t(control >> 2) * 0x85ebca6bu) ^ std::uint32_t(length);
    auto random = [&state] {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        return state;
    };
    QString error;
    std::size_t at = 0;
    while (at < length) {
        // Mostly short pieces, so that every field of a frame header is seen cut in two.
        const std::uint32_t r = random();
        const std::size_t piece = (r & 3) == 0 ? 1 + (r >> 8) % 512 : 1 + (r >> 8) % 13;
        const std::size_t n = std::min(piece, length - at);
        reader.feed(QByteArray(stream + at, qsizetype(n)));
        at += n;
        expect(reader.pending() >= 0, "negative pending bytes");
        for (;;) {
            auto m = reader.next();
            if (!m) {
                expect(!m.error().isEmpty(), "an error without a reason");
                if (error.isEmpty())
                    error = m.error();
                expect(m.error() == error, "the reader's error changed:", m.error());
                break;
            }
            if (!m->has_value())
                break;
            checkMessage(**m);
        }
    }
    if (!error.isEmpty()) {
        // Failed for good: more bytes change nothing.
        reader.feed(QByteArray("FL", 2));
        auto m = reader.next();
        expect(!m && m.error() == error, "a failed reader recovered");
    }
    return 0;
}
