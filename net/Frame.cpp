#include "net/Frame.h"

#include <QCborValue>
#include <QtEndian>

namespace flotilla::net {

namespace {

const QString kPayloadSize = QStringLiteral("payload_size");
const QString kPayloadSha = QStringLiteral("payload_sha256");

QString hexPrefix(const QByteArray &bytes)
{
    return QString::fromLatin1(bytes.left(8).toHex(' '));
}

// Appends one frame to `out`: the payload is copied once, straight from the caller's bytes.
void appendFrame(QByteArray &out, std::uint8_t version, std::uint8_t type, QByteArrayView cborHeader,
                 QByteArrayView payload)
{
    char head[kFrameHeaderSize] = {'F', 'L', char(version), char(type)};
    qToBigEndian(static_cast<quint32>(cborHeader.size()), head + 4);
    qToBigEndian(static_cast<quint32>(payload.size()), head + 8);
    out.append(head, kFrameHeaderSize);
    out.append(cborHeader);
    out.append(payload);
}

} // namespace

QByteArray encodeFrame(std::uint8_t version, std::uint8_t type, const QByteArray &cborHeader, const QByteArray &payload)
{
    QByteArray out;
    out.reserve(kFrameHeaderSize + cborHeader.size() + payload.size());
    appendFrame(out, version, type, cborHeader, payload);
    return out;
}

QByteArray encodeMessage(MessageType type, QCborMap header, const QByteArray &payload)
{
    const qsizetype first = std::min<qsizetype>(payload.size(), Limits::maxFramePayload);
    if (!payload.isEmpty()) {
        header.insert(kPayloadSize, static_cast<qint64>(payload.size()));
        header.insert(kPayloadSha, Sha256::hash(payload));
    }
    const QByteArray cbor = header.toCborValue().toCbor();
    const QByteArray emptyHeader = QCborMap().toCborValue().toCbor();
    const qsizetype chunks = (payload.size() - first + Limits::maxFramePayload - 1) / Limits::maxFramePayload;
    // One allocation for the whole message; each payload byte is copied once.
    QByteArray out;
    out.reserve(kFrameHeaderSize + cbor.size() + payload.size() + chunks * (kFrameHeaderSize + emptyHeader.size()));
    const QByteArrayView bytes(payload);
    appendFrame(out, kProtocolVersion, static_cast<std::uint8_t>(type), cbor, bytes.first(first));
    for (qsizetype at = first; at < payload.size(); at += Limits::maxFramePayload)
        appendFrame(out, kProtocolVersion, static_cast<std::uint8_t>(MessageType::Chunk), emptyHeader,
                    bytes.sliced(at, std::min<qsizetype>(Limits::maxFramePayload, payload.size() - at)));
    return out;
}

void FrameParser::compact()
{
    // Drop what was consumed before growing the buffer; the allocation is kept for the
    // bytes that follow.
    if (m_offset > 0 && m_offset == m_buffer.size()) {
        m_buffer.resize(0);
        m_offset = 0;
    } else if (m_offset > (1 << 20)) {
        m_buffer.remove(0, m_offset);
        m_offset = 0;
    }
}

void FrameParser::feed(const QByteArray &bytes)
{
    if (failed())
        return;
    compact();
    m_buffer.append(bytes);
}

qint64 FrameParser::readFrom(QIODevice &device)
{
    if (failed())
        return 0;
    compact();
    const qint64 available = device.bytesAvailable();
    if (available <= 0)
        return 0;
    const qsizetype before = m_buffer.size();
    m_buffer.resize(before + qsizetype(available));
    const qint64 read = device.read(m_buffer.data() + before, available);
    m_buffer.resize(before + qsizetype(std::max<qint64>(0, read)));
    return read;
}

std::optional<Frame> FrameParser::next(Payload payload)
{
    if (failed() || pending() < 2)
        return std::nullopt;
    const auto *p = reinterpret_cast<const unsigned char *>(m_buffer.constData() + m_offset);
    // The magic is checked as soon as two bytes are in, so garbage is refused at once.
    if (p[0] != 'F' || p[1] != 'L') {
        m_error = QStringLiteral("not a Flotilla frame: it starts with bytes %1 (expected 46 4c, \"FL\"); is this "
                                 "a Flotilla peer?")
                      .arg(hexPrefix(m_buffer.mid(m_offset)));
        return std::nullopt;
    }
    if (pending() < 3)
        return std::nullopt;
    if (p[2] != kProtocolVersion) {
        m_error = QStringLiteral("protocol version %1 is not supported (this Flotilla speaks version %2); upgrade the "
                                 "older side")
                      .arg(p[2]).arg(kProtocolVersion);
        return std::nullopt;
    }
    if (pending() < 4)
        return std::nullopt;
    if (!isKnownMessage(p[3])) {
        m_error = QStringLiteral("unknown message type %1").arg(p[3]);
        return std::nullopt;
    }
    if (pending() < kFrameHeaderSize)
        return std::nullopt;
    const quint32 headerLength = qFromBigEndian<quint32>(p + 4);
    const quint32 payloadLength = qFromBigEndian<quint32>(p + 8);
    if (headerLength > Limits::maxHeader) {
        m_error = QStringLiteral("a %1 frame announces a header of %2 bytes; the limit is %3")
                      .arg(QString::fromLatin1(messageName(p[3]))).arg(headerLength).arg(Limits::maxHeader);
        return std::nullopt;
    }
    if (payloadLength > Limits::maxFramePayload) {
        m_error = QStringLiteral("a %1 frame announces a payload of %2 bytes; the limit is %3 per frame")
                      .arg(QString::fromLatin1(messageName(p[3]))).arg(payloadLength).arg(Limits::maxFramePayload);
        return std::nullopt;
    }
    const qint64 total = kFrameHeaderSize + qint64(headerLength) + qint64(payloadLength);
    if (pending() < total)
        return std::nullopt;

    Frame frame;
    frame.version = p[2];
    frame.type = static_cast<MessageType>(p[3]);
    QCborParserError cborError{};
    const QCborValue header = QCborValue::fromCbor(
        QByteArray::fromRawData(m_buffer.constData() + m_offset + kFrameHeaderSize, headerLength), &cborError);
    if (cborError.error != QCborError::NoError || !header.isMap()) {
        m_error = QStringLiteral("the header of a %1 frame is not a CBOR map%2")
                      .arg(describe(frame.type),
                           cborError.error != QCborError::NoError ? QStringLiteral(": ") + cborError.errorString()
                                                                  : QString());
        return std::nullopt;
    }
    frame.header = header.toMap();
    const char *bytes = m_buffer.constData() + m_offset + kFrameHeaderSize + headerLength;
    frame.payload = payload == Payload::Borrowed ? QByteArray::fromRawData(bytes, payloadLength)
                                                 : QByteArray(bytes, payloadLength);
    m_offset += total;
    return frame;
}

void MessageAssembler::setPayloadLimit(MessageType type, std::uint64_t limit)
{
    m_limits[type] = limit;
}

Result<std::optional<Message>> MessageAssembler::add(Frame frame)
{
    if (m_partial) {
        if (frame.type != MessageType::Chunk)
            return fail(QStringLiteral("a %1 frame arrived in the middle of a %2 payload (%3 of %4 bytes received)")
                            .arg(describe(frame.type), describe(m_partial->type))
                            .arg(m_partial->payload.size()).arg(m_expected));
        if (quint64(m_partial->payload.size()) + quint64(frame.payload.size()) > m_expected)
            return fail(QStringLiteral("the %1 payload is longer than the %2 bytes announced")
                            .arg(describe(m_partial->type)).arg(m_expected));
        m_hash.addData(frame.payload);
        m_partial->payload.append(QByteArrayView(frame.payload)); // a copy, also of a borrowed payload
    } else {
        if (frame.type == MessageType::Chunk)
            return fail(QStringLiteral("a Chunk frame arrived with no message to continue"));
        Message m;
        m.type = frame.type;
        m.header = frame.header;
        const QCborValue size = frame.header.value(QStringLiteral("payload_size"));
        const QCborValue sha = frame.header.value(QStringLiteral("payload_sha256"));
        if (size.isUndefined()) {
            if (!frame.payload.isEmpty())
                return fail(QStringLiteral("a %1 frame carries %2 payload bytes but announces no payload_size")
                                .arg(describe(frame.type)).arg(frame.payload.size()));
            return std::optional<Message>(std::move(m));
        }
        const auto limitIt = m_limits.find(frame.type);
        const std::uint64_t limit = limitIt == m_limits.end() ? Limits::maxMessagePayload : limitIt->second;
        if (!size.isInteger() || size.toInteger() < 0 || std::uint64_t(size.toInteger()) > limit)
            return fail(QStringLiteral("a %1 message announces a payload of %2 bytes; at most %3 are accepted")
                            .arg(describe(frame.type), size.toVariant().toString()).arg(limit));
        if (!sha.isByteArray() || sha.toByteArray().size() != 32)
            return fail(QStringLiteral("a %1 message announces a payload without a 32-byte payload_sha256")
                            .arg(describe(frame.type)));
        m_expected = std::uint64_t(size.toInteger());
        if (quint64(frame.payload.size()) > m_expected)
            return fail(QStringLiteral("the %1 payload is longer than the %2 bytes announced")
                            .arg(describe(frame.type)).arg(m_expected));
        m_expectedSha = sha.toByteArray();
        m_hash.reset();
        m_hash.addData(frame.payload);
        // A peer's announcement is not a reason to allocate much: grow with what arrives.
        m.payload.reserve(static_cast<qsizetype>(std::min<std::uint64_t>(m_expected, 16u << 20)));
        m.payload.append(QByteArrayView(frame.payload)); // a copy, also of a borrowed payload
        m_partial = std::move(m);
    }
    if (quint64(m_partial->payload.size()) < m_expected)
        return std::optional<Message>();
    Message done = std::move(*m_partial);
    m_partial.reset();
    if (m_hash.result() != m_expectedSha)
        return fail(QStringLiteral("the %1 payload's SHA-256 does not match the one announced (%2 bytes received)")
                        .arg(describe(done.type)).arg(done.payload.size()));
    return std::optional<Message>(std::move(done));
}

Result<std::optional<Message>> MessageReader::next()
{
    if (!m_error.isEmpty())
        return fail(m_error);
    for (;;) {
        // The frame's payload is copied into its message before the parser is touched again.
        std::optional<Frame> frame = m_frames.next(FrameParser::Payload::Borrowed);
        if (!frame) {
            if (m_frames.failed()) {
                m_error = m_frames.error();
                return fail(m_error);
            }
            return std::optional<Message>();
        }
        auto message = m_assembler.add(std::move(*frame));
        if (!message) {
            m_error = message.error();
            return message;
        }
        if (message->has_value())
            return message;
    }
}

} // namespace flotilla::net
