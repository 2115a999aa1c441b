#include "common/Crc32c.h"

#include <QtEndian>

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define FLOTILLA_CRC32C_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define FLOTILLA_CRC32C_ARM 1
#endif

namespace flotilla {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u; // reflected Castagnoli

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

Tables makeTables()
{
    Tables t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
        t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
        for (int k = 1; k < 8; ++k)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    return t;
}

const Tables &tables()
{
    static const Tables t = makeTables();
    return t;
}

std::uint32_t software(std::uint32_t crc, const unsigned char *p, std::size_t n)
{
    const Tables &t = tables();
    while (n >= 8) {
        std::uint64_t word;
        std::memcpy(&word, p, 8);
        word = qFromLittleEndian(word) ^ crc;
        crc = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^ t[4][(word >> 24) & 0xFF]
              ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^ t[1][(word >> 48) & 0xFF]
              ^ t[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(FLOTILLA_CRC32C_X86)
__attribute__((target("sse4.2"))) std::uint32_t hardware(std::uint32_t crc, const unsigned char *p, std::size_t n)
{
    std::uint64_t c = crc;
    while (n >= 8) {
        std::uint64_t word;
        std::memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    auto c32 = std::uint32_t(c);
    while (n-- > 0)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
bool haveHardware()
{
    static const bool have = __builtin_cpu_supports("sse4.2");
    return have;
}
#elif defined(FLOTILLA_CRC32C_ARM)
std::uint32_t hardware(std::uint32_t crc, const unsigned char *p, std::size_t n)
{
    while (n >= 8) {
        std::uint64_t word;
        std::memcpy(&word, p, 8);
        crc = __crc32cd(crc, word);
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = __crc32cb(crc, *p++);
    return crc;
}
bool haveHardware()
{
    return true;
}
#else
std::uint32_t hardware(std::uint32_t crc, const unsigned char *p, std::size_t n)
{
    return software(crc, p, n);
}
bool haveHardware()
{
    return false;
}
#endif

} // namespace

void Crc32c::addData(QByteArrayView data)
{
    const auto *p = reinterpret_cast<const unsigned char *>(data.data());
    const auto n = std::size_t(data.size());
    m_crc = haveHardware() ? hardware(m_crc, p, n) : software(m_crc, p, n);
}

QByteArray Crc32c::result()
{
    QByteArray out(4, Qt::Uninitialized);
    qToBigEndian(value(), out.data());
    reset();
    return out;
}

std::uint32_t Crc32c::of(QByteArrayView data)
{
    Crc32c c;
    c.addData(data);
    return c.value();
}

bool Crc32c::accelerated()
{
    return haveHardware();
}

} // namespace flotilla
