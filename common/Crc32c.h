#pragma once
// CRC-32C (Castagnoli), as iSCSI, ext4 and TensorBoard's records use it: with the CPU's
// instruction where there is one (SSE4.2, ARMv8 CRC), else eight table lookups per 8 bytes.
// It guards the assembly of a payload from its chunks, where TLS 1.3 already authenticates
// every record (docs/protocol.md, "Payload check"); content that is addressed by its digest
// (shards, checkpoints, model files) keeps SHA-256.

#include <QByteArray>
#include <QByteArrayView>

#include <cstdint>

namespace flotilla {

class Crc32c
{
public:
    void addData(QByteArrayView data);
    std::uint32_t value() const { return ~m_crc; }
    // The value as 4 bytes, big-endian; the object starts over afterwards.
    QByteArray result();
    void reset() { m_crc = 0xFFFFFFFFu; }

    static std::uint32_t of(QByteArrayView data);
    // Whether the CPU's instruction is used (for the benchmark's report).
    static bool accelerated();

private:
    std::uint32_t m_crc = 0xFFFFFFFFu;
};

} // namespace flotilla
