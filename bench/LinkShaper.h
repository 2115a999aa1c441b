#pragma once
// A user-space link emulator for benchmarks on loopback (there is no netem): a TCP relay that
// gives each connection a link's bandwidth and delay. It relays on a thread of its own;
// start() and stop() belong to the thread that owns the LinkShaper.

#include "common/Result.h"

#include <QString>
#include <QtGlobal>

#include <atomic>
#include <memory>

QT_BEGIN_NAMESPACE
class QThread;
QT_END_NAMESPACE

namespace flotilla {

// A link's two figures: bandwidth per direction and round-trip time.
struct LinkSpec
{
    qint64 bitsPerSecond = 0; // 0: unlimited
    int rttMs = 0;

    // "50mbit/40ms", "10mbit/80ms", "1gbit/1ms", "500kbit/200ms", "100mbit" (no delay);
    // units kbit, mbit, gbit (decimal: 1 mbit = 1,000,000 bit/s) and ms, in any case; a rate
    // may have decimals ("1.5mbit"). "unlimited" (or "unlimited/40ms") is a link without a
    // rate limit. The error names the text and the part of it that was wrong.
    static Result<LinkSpec> parse(const QString &text);
    // The form parse() reads: "50mbit/40ms", "100mbit" without delay, "unlimited/40ms".
    QString text() const;
};

// A relay on 127.0.0.1 that forwards every connection it accepts to a target, each connection
// with its own link: each direction gets the bandwidth and half the round-trip time as one-way
// delay. Runs on a thread of its own (so a benchmark's main thread can block on processes while
// it relays); start()/stop() are called from the owner's thread.
//
// The delay is applied to the data, not to the TCP handshake: a client's connect() completes
// at once (the kernel accepts it), so connection set-up costs one round trip less than on the
// emulated link. Rates count payload bytes, not TCP/IP headers. When either side closes (a
// half-close included) what it sent is still delivered, then the other side is closed.
class LinkShaper
{
public:
    LinkShaper(LinkSpec link, QString targetHost, quint16 targetPort);
    ~LinkShaper(); // stops
    LinkShaper(const LinkShaper &) = delete;
    LinkShaper &operator=(const LinkShaper &) = delete;

    // Listens on 127.0.0.1:listenPort (0: any free port) and returns the port it listens on.
    // Fails if it is already started or the port cannot be had.
    Result<quint16> start(quint16 listenPort = 0);
    // Closes the listener and every relayed connection at once (queued bytes are dropped).
    void stop();

    const LinkSpec &link() const { return m_link; }
    qint64 bytesRelayed() const; // both directions, all connections (atomic)
    int connectionsAccepted() const;
    int connectionsOpen() const; // accepted and not yet closed on both sides

private:
    LinkSpec m_link;
    QString m_targetHost;
    quint16 m_targetPort;
    std::unique_ptr<QThread> m_thread; // runs the relay; null while stopped
    // Written by the relay thread, read by the owner.
    std::atomic<qint64> m_bytesRelayed{0};
    std::atomic<int> m_connectionsAccepted{0};
    std::atomic<int> m_connectionsOpen{0};
};

} // namespace flotilla
