#include "net/Frame.h"

#include <QCborValue>
#include <QtEndian>

namespace flotilla::net {

namespace {

const QString kPayloadSize = QStringLiteral("payload_size");
const QString kPayloadCheck = QStringLiteral("payload_crc32c");
constexpr qsizetype kCheckSize = 4;

QString hexPrefix(const QByteArray &bytes)
{
    return QString::fromLatin1(bytes.left(8).toHex(' '));
}

// A frame's 12 bytes followed by its CBOR header; the payload follows on its own.
QByteArray frameHead(std::uint8_t type, const QByteArray &cborHeader, qsizetype payloadSize)
{
    QByteArray head(kFrameHeaderSize, Qt::Uninitialized);
    head[0] = 'F';
    head[1] = 'L';
    head[2] = char(kProtocolVersion);
    head[3] = char(type);
    qToBigEndian(static_cast<quint32>(cborHeader.size()), head.data() + 4);
    qToBigEndian(static_cast<quint32>(payloadSize), head.data() + 8);
    head.append(cborHeader);
    return head;
}

QByteArray cbor(const QCborMap &map)
{
    return map.toCborValue().toCbor();
}

} // namespace

QByteArray encodeFrame(std::uint8_t version, std::uint8_t type, const QByteArray &cborHeader, const QByteArray &payload)
{
    QByteArray out = frameHead(type, cborHeader, payload.size());
    out[2] = char(version);
    out.append(payload);
    return out;
}

OutgoingMessage::OutgoingMessage(MessageType type, QCborMap header, QByteArray payload)
    : m_type(type)
    , m_header(std::move(header))
    , m_payload(std::move(payload))
{
    const qsizetype n = m_payload.size();
    if (n > 0)
        m_header.insert(kPayloadSize, static_cast<qint64>(n));
    // The size on the wire, known before the check value: its CBOR is as long as any other
    // 4 bytes'.
    const QByteArray digestShape(kCheckSize, '\0');
    const qsizetype chunks = n > qsizetype(Limits::maxFramePayload) ? (n - 1) / Limits::maxFramePayload : 0;
    QCborMap first = m_header;
    if (n > 0 && chunks == 0)
        first.insert(kPayloadCheck, digestShape);
    m_size = kFrameHeaderSize + cbor(first).size() + n;
    if (chunks > 0)
        m_size += chunks * kFrameHeaderSize + (chunks - 1) * cbor(QCborMap()).size()
                  + cbor(QCborMap{{kPayloadCheck, digestShape}}).size();
    prepareFrame();
}

void OutgoingMessage::prepareFrame()
{
    const qsizetype n = m_payload.size();
    m_sliceLength = std::min<qsizetype>(Limits::maxFramePayload, n - m_at);
    m_sliceSent = 0;
    m_headSent = 0;
    // Each slice is checksummed once, just before it goes out; the frame that ends the
    // payload carries the check value.
    if (m_sliceLength > 0)
        m_hash.addData(QByteArrayView(m_payload).sliced(m_at, m_sliceLength));
    const bool last = m_at + m_sliceLength >= n;
    QCborMap header = m_first ? m_header : QCborMap();
    if (n > 0 && last)
        header.insert(kPayloadCheck, m_hash.result());
    m_frameHead = frameHead(static_cast<std::uint8_t>(m_first ? m_type : MessageType::Chunk), cbor(header), m_sliceLength);
}

QByteArrayView OutgoingMessage::next()
{
    if (m_done)
        return {};
    if (m_headSent < m_frameHead.size())
        return QByteArrayView(m_frameHead).sliced(m_headSent);
    return QByteArrayView(m_payload).sliced(m_at + m_sliceSent, m_sliceLength - m_sliceSent);
}

void OutgoingMessage::advance(qsizetype bytes)
{
    m_sent += bytes;
    const qsizetype inHead = std::min(bytes, m_frameHead.size() - m_headSent);
    m_headSent += inHead;
    m_sliceSent += bytes - inHead;
    if (m_headSent < m_frameHead.size() || m_sliceSent < m_sliceLength)
        return;
    m_at += m_sliceLength;
    if (m_at >= m_payload.size()) {
        m_done = true;
        m_frameHead.clear();
        return;
    }
    m_first = false;
    prepareFrame();
}

QByteArray encodeMessage(MessageType type, QCborMap header, const QByteArray &payload)
{
    OutgoingMessage message(type, std::move(header), payload);
    QByteArray out;
    out.reserve(message.size());
    for (QByteArrayView bytes = message.next(); !bytes.isEmpty(); bytes = message.next()) {
        out.append(bytes);
        message.advance(bytes.size());
    }
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
    // At most a slice at a time: the kernel may hold megabytes for a fast peer, and the
    // buffer keeps its allocation for the connection's life. The rest is read on the next
    // turn of the event loop.
    constexpr qint64 kReadSlice = 256 * 1024;
    const qint64 available = std::min(device.bytesAvailable(), kReadSlice);
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
        const quint64 received = quint64(m_partial->payload.size()) + quint64(frame.payload.size());
        if (received > m_expected)
            return fail(QStringLiteral("the %1 payload is longer than the %2 bytes announced")
                            .arg(describe(m_partial->type)).arg(m_expected));
        const QCborValue sha = frame.header.value(kPayloadCheck);
        if (received == m_expected && (!sha.isByteArray() || sha.toByteArray().size() != kCheckSize))
            return fail(QStringLiteral("the Chunk that ends a %1 payload carries no 4-byte payload_crc32c")
                            .arg(describe(m_partial->type)));
        if (received < m_expected && !frame.header.isEmpty())
            return fail(QStringLiteral("a Chunk in the middle of a %1 payload carries a header; only the last "
                                       "one does (payload_crc32c)")
                            .arg(describe(m_partial->type)));
        m_hash.addData(frame.payload);
        // A peer's announcement is not a reason to allocate much: room grows with what has
        // arrived, to at most four times that (one move of what came before, not one per
        // doubling).
        if (m_partial->payload.capacity() < qsizetype(received))
            m_partial->payload.reserve(qsizetype(std::min<quint64>(m_expected, std::max<quint64>(received, 4 * quint64(m_partial->payload.size())))));
        m_partial->payload.append(QByteArrayView(frame.payload)); // a copy, also of a borrowed payload
        if (received == m_expected)
            return finish(sha.toByteArray());
        return std::optional<Message>();
    } else {
        if (frame.type == MessageType::Chunk)
            return fail(QStringLiteral("a Chunk frame arrived with no message to continue"));
        Message m;
        m.type = frame.type;
        m.header = frame.header;
        const QCborValue size = frame.header.value(QStringLiteral("payload_size"));
        const QCborValue sha = frame.header.value(kPayloadCheck);
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
        m_expected = std::uint64_t(size.toInteger());
        if (quint64(frame.payload.size()) > m_expected)
            return fail(QStringLiteral("the %1 payload is longer than the %2 bytes announced")
                            .arg(describe(frame.type)).arg(m_expected));
        const bool whole = quint64(frame.payload.size()) == m_expected;
        if (whole && (!sha.isByteArray() || sha.toByteArray().size() != kCheckSize))
            return fail(QStringLiteral("a %1 message carries its whole payload without a 4-byte payload_crc32c")
                            .arg(describe(frame.type)));
        if (!whole && !sha.isUndefined())
            return fail(QStringLiteral("a %1 message announces a payload over several frames but carries its "
                                       "payload_crc32c in the first (it belongs in the last)")
                            .arg(describe(frame.type)));
        m_hash.reset();
        m_hash.addData(frame.payload);
        // A peer's announcement is not a reason to allocate much: room for four times what
        // came, growing with what arrives.
        m.payload.reserve(static_cast<qsizetype>(
            std::min<std::uint64_t>(m_expected, 4 * std::max<std::uint64_t>(frame.payload.size(), 64 * 1024))));
        m.payload.append(QByteArrayView(frame.payload)); // a copy, also of a borrowed payload
        m_partial = std::move(m);
        if (whole)
            return finish(sha.toByteArray());
    }
    return std::optional<Message>();
}

Result<std::optional<Message>> MessageAssembler::finish(const QByteArray &sha)
{
    Message done = std::move(*m_partial);
    m_partial.reset();
    if (m_hash.result() != sha)
        return fail(QStringLiteral("the %1 payload's CRC-32C does not match the one announced (%2 bytes received): "
                                   "it was put together wrongly")
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
