#pragma once
// The wire protocol's vocabulary: one table of message types (it generates the enum, the
// names and the checks), the protocol version, and the limits every peer enforces.
// docs/protocol.md describes the messages and their fields.

#include <QString>

#include <cstdint>

namespace flotilla::net {

// 2: a payload's SHA-256 travels in the frame that ends it, not the first.
// 3: a CRC-32C (payload_crc32c) replaces that SHA-256: TLS authenticates every record.
constexpr std::uint8_t kProtocolVersion = 3;

// X(name, code, direction): W = worker to coordinator, C = coordinator to worker, B = both.
// An operator (a control center attached to a remote coordinator) speaks the same protocol
// with its own messages: Watch and Command (W), Update and Reply (C). Echo is answered with
// itself at once, on the network thread: what a peer measures a round trip with.
#define FLOTILLA_MESSAGES(X)  \
    X(Hello, 1, W)            \
    X(Welcome, 2, C)          \
    X(Redeem, 3, W)           \
    X(Enrolled, 4, C)         \
    X(Request, 5, W)          \
    X(Assign, 6, C)           \
    X(NoWork, 7, C)           \
    X(ShardRequest, 8, W)     \
    X(ShardData, 9, C)        \
    X(Heartbeat, 10, W)       \
    X(Result, 11, W)          \
    X(Ack, 12, C)             \
    X(HandBack, 13, W)        \
    X(Cancel, 14, C)          \
    X(Chunk, 15, B)           \
    X(Error, 16, B)           \
    X(Bye, 17, B)             \
    X(Watch, 18, W)           \
    X(Update, 19, C)          \
    X(Command, 20, W)         \
    X(Reply, 21, C)           \
    X(Echo, 22, B)            \
    X(ModelRequest, 23, W)    \
    X(ModelData, 24, C)

enum class MessageType : std::uint8_t {
#define FLOTILLA_ENUM(name, code, dir) name = code,
    FLOTILLA_MESSAGES(FLOTILLA_ENUM)
#undef FLOTILLA_ENUM
};

// Every message type, in code order.
inline constexpr MessageType kMessageTypes[] = {
#define FLOTILLA_LIST(name, code, dir) MessageType::name,
    FLOTILLA_MESSAGES(FLOTILLA_LIST)
#undef FLOTILLA_LIST
};

// The name of a type ("Hello"), or nullptr for a code no message has.
const char *messageName(std::uint8_t code);
inline bool isKnownMessage(std::uint8_t code) { return messageName(code) != nullptr; }
QString describe(MessageType type);

struct Limits
{
    // A frame's CBOR header and payload are checked against these before any allocation.
    static constexpr std::uint32_t maxHeader = 64 * 1024;
    static constexpr std::uint32_t maxFramePayload = 1024 * 1024; // a chunk
    // A message's whole payload (the sum of its chunks): weights or a shard.
    static constexpr std::uint64_t maxMessagePayload = std::uint64_t(2) << 30;
};

} // namespace flotilla::net
