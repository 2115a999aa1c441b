#pragma once
// SHA-256 through OpenSSL, which uses the CPU's SHA extensions where there are some: several
// times faster than QCryptographicHash on the megabytes of weights, shards and checkpoints
// Flotilla hashes all the time.

#include <QByteArray>
#include <QByteArrayView>

#include <memory>

namespace flotilla {

class Sha256
{
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256 &) = delete;
    Sha256 &operator=(const Sha256 &) = delete;

    void addData(QByteArrayView data);
    // The 32-byte digest; the object starts over afterwards.
    QByteArray result();
    void reset();

    static QByteArray hash(QByteArrayView data);

private:
    struct Context;
    std::unique_ptr<Context> m_context;
};

} // namespace flotilla
