#pragma once
// Frames and messages on the wire, as pure functions and state machines that tests and
// fuzzers drive without sockets.
//
// A frame is a 12-byte header — the magic "FL", the protocol version, the message type, the
// length of a CBOR header and the length of a binary payload, both big-endian u32 — followed
// by the CBOR header and the payload. Both lengths are checked against Limits before
// anything is allocated. A message whose payload is larger than one frame continues in
// Chunk frames; its first frame's header announces the whole payload's size
// ("payload_size"), and the frame that ends the payload carries its CRC-32C
// ("payload_crc32c", 4 bytes big-endian), which the receiver checks then. It travels last so
// that a sender sums each chunk as it goes out instead of the whole payload before the first
// byte. TLS 1.3 authenticates every record already; the CRC guards only the assembly of
// chunks into a payload (docs/protocol.md, "Payload check").

#include "common/Result.h"
#include "net/Protocol.h"

#include "common/Crc32c.h"
#include <QByteArray>
#include <QCborMap>
#include <QIODevice>

#include <map>
#include <optional>

namespace flotilla::net {

struct Frame
{
    std::uint8_t version = kProtocolVersion;
    MessageType type = MessageType::Error;
    QCborMap header;
    QByteArray payload;
};

struct Message
{
    MessageType type = MessageType::Error;
    QCborMap header;
    QByteArray payload; // the whole payload, its CRC-32C checked
};

constexpr int kFrameHeaderSize = 12;

// Bytes a socket sends in order, handed out a piece at a time (see TlsSocket::send).
class OutgoingBytes
{
public:
    virtual ~OutgoingBytes() = default;
    // The next bytes to send, valid until advance(); empty when all have been sent.
    virtual QByteArrayView next() = 0;
    // That many bytes of next() were sent.
    virtual void advance(qsizetype bytes) = 0;
    // Bytes not sent yet.
    virtual qint64 remaining() const = 0;
};

// One message as frames, made as they go out: the first frame carries the header, the rest
// of the payload follows in Chunk frames of at most Limits::maxFramePayload bytes. The
// payload is not copied (its slices are sent straight from the caller's array, which this
// keeps alive) and is checksummed slice by slice as the slices are handed out.
class OutgoingMessage final : public OutgoingBytes
{
public:
    OutgoingMessage(MessageType type, QCborMap header, QByteArray payload = {});
    QByteArrayView next() override;
    void advance(qsizetype bytes) override;
    qint64 remaining() const override { return m_size - m_sent; }
    qint64 size() const { return m_size; }

private:
    // Makes the frame header (and CBOR header) that comes before payload[m_at...).
    void prepareFrame();

    MessageType m_type;
    QCborMap m_header;
    QByteArray m_payload;
    QByteArray m_frameHead;     // the current frame's 12 bytes and CBOR header
    qsizetype m_headSent = 0;
    qsizetype m_at = 0;         // start of the current frame's payload slice
    qsizetype m_sliceLength = 0;
    qsizetype m_sliceSent = 0;
    bool m_first = true;
    bool m_done = false;
    Crc32c m_hash;
    qint64 m_size = 0;
    qint64 m_sent = 0;
};

// The whole message at once, for tests and tools that need the bytes (the same bytes that
// OutgoingMessage hands out).
QByteArray encodeMessage(MessageType type, QCborMap header, const QByteArray &payload = {});
// One raw frame, for tests that need to forge exactly what goes on the wire.
QByteArray encodeFrame(std::uint8_t version, std::uint8_t type, const QByteArray &cborHeader,
                       const QByteArray &payload);

// Splits a byte stream into frames. After the first error it stays failed: the connection
// is to be closed with that error.
class FrameParser
{
public:
    void feed(const QByteArray &bytes);
    // Reads what the device has straight into the parser's buffer (no intermediate array);
    // returns the bytes read, or -1 if the device failed.
    qint64 readFrom(QIODevice &device);
    // Copied: the frame owns its payload. Borrowed: the payload refers to the parser's
    // buffer, valid only until the next feed() or next() (saves a copy of every byte).
    enum class Payload { Copied, Borrowed };
    // The next complete frame, if any; check error() when it returns nothing.
    std::optional<Frame> next(Payload payload = Payload::Copied);
    const QString &error() const { return m_error; }
    bool failed() const { return !m_error.isEmpty(); }
    // Bytes received but not yet part of a complete frame (a peer stalled mid-frame has some).
    qint64 pending() const { return m_buffer.size() - m_offset; }

private:
    void compact();

    QByteArray m_buffer;
    qsizetype m_offset = 0;
    QString m_error;
};

// Reassembles messages from frames: a frame with payload_size above its own payload is
// followed by Chunk frames until the announced size; the CRC-32C is then checked.
class MessageAssembler
{
public:
    // payloadLimit: the largest payload accepted for a message type (0 = none allowed).
    // Defaults to Limits::maxMessagePayload for every type.
    void setPayloadLimit(MessageType type, std::uint64_t limit);

    // Returns a complete message, nothing while one is still arriving, or an error.
    Result<std::optional<Message>> add(Frame frame);
    bool inTransfer() const { return m_partial.has_value(); }

private:
    // The payload is all in: checks its CRC-32C against check and hands the message out.
    Result<std::optional<Message>> finish(const QByteArray &sha);

    std::optional<Message> m_partial;
    std::uint64_t m_expected = 0;
    Crc32c m_hash;
    std::map<MessageType, std::uint64_t> m_limits;
};

// Reads both layers at once: bytes in, messages out.
class MessageReader
{
public:
    void feed(const QByteArray &bytes) { m_frames.feed(bytes); }
    qint64 readFrom(QIODevice &device) { return m_frames.readFrom(device); }
    Result<std::optional<Message>> next();
    MessageAssembler &assembler() { return m_assembler; }
    qint64 pending() const { return m_frames.pending(); }
    bool inTransfer() const { return m_assembler.inTransfer(); }

private:
    FrameParser m_frames;
    MessageAssembler m_assembler;
    QString m_error;
};

} // namespace flotilla::net
