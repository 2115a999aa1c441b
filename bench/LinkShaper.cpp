#include "bench/LinkShaper.h"

#include <QHostAddress>
#include <QRegularExpression>
#include <QStringList>
#include <QTcpServer>
#include <QTcpSocket>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <optional>

namespace flotilla {

namespace {

using Clock = std::chrono::steady_clock;

// Small enough that a burst is spread over the link's time instead of arriving in one lump.
constexpr qint64 kChunkBytes = 16 * 1024;
// What a socket may hold unread; past it the kernel's window closes and the sender waits.
constexpr qint64 kReadBufferBytes = 256 * 1024;
// The least a direction may hold in flight, so a fast link is not starved between timer ticks.
constexpr qint64 kMinInFlightBytes = 64 * 1024;
// How far a busy link's schedule may fall behind the clock and still be kept: a relay thread
// starved of CPU for up to this long delivers late, but loses none of the link's capacity.
constexpr std::chrono::milliseconds kMaxCatchUp(200);
constexpr qint64 kMaxBitsPerSecond = 10'000'000'000'000; // 10 tbit: far past any loopback
constexpr int kMaxRttMs = 600'000;

struct RateUnit
{
    const char *name;
    qint64 bitsPerUnit;
    int decimals; // digits after the point that still name whole bits
};

// Largest first: text() writes a rate in the largest unit it reaches.
constexpr RateUnit kRateUnits[] = {
    {"gbit", 1'000'000'000, 9},
    {"mbit", 1'000'000, 6},
    {"kbit", 1'000, 3},
};

QString quoted(const QString &text)
{
    return QLatin1Char('"') + text + QLatin1Char('"');
}

Result<qint64> parseRate(const QString &link, const QString &rate)
{
    const QString where = QStringLiteral("Link ") + quoted(link) + QStringLiteral(": ");
    if (rate.compare(QLatin1String("unlimited"), Qt::CaseInsensitive) == 0)
        return qint64(0);
    static const QRegularExpression form(QStringLiteral("^([0-9]+)(?:\\.([0-9]+))?([a-zA-Z]*)$"));
    const QRegularExpressionMatch match = form.match(rate);
    if (!match.hasMatch()) {
        return fail(where + QStringLiteral("the rate ") + quoted(rate)
                    + QStringLiteral(" is not a number with a unit, such as 50mbit"));
    }
    const QString unitName = match.captured(3).toLower();
    if (unitName.isEmpty()) {
        return fail(where + QStringLiteral("the rate ") + quoted(rate)
                    + QStringLiteral(" has no unit (kbit, mbit or gbit)"));
    }
    const RateUnit *unit = nullptr;
    for (const RateUnit &candidate : kRateUnits) {
        if (unitName == QLatin1String(candidate.name))
            unit = &candidate;
    }
    if (!unit) {
        return fail(where + QStringLiteral("unknown unit ") + quoted(match.captured(3))
                    + QStringLiteral(" in the rate ") + quoted(rate)
                    + QStringLiteral(" (use kbit, mbit or gbit)"));
    }
    const QString whole = match.captured(1);
    QString fraction = match.captured(2);
    while (fraction.endsWith(QLatin1Char('0')))
        fraction.chop(1);
    const QString tooLarge = where + QStringLiteral("the rate ") + quoted(rate)
        + QStringLiteral(" is too large (at most 10000gbit)");
    if (whole.size() > 13)
        return fail(tooLarge);
    if (fraction.size() > unit->decimals) {
        return fail(where + QStringLiteral("the rate ") + quoted(rate)
                    + QStringLiteral(" is finer than 1 bit/s"));
    }
    const qint64 wholeUnits = whole.toLongLong();
    if (wholeUnits > kMaxBitsPerSecond / unit->bitsPerUnit)
        return fail(tooLarge);
    const qint64 fractionBits =
        fraction.isEmpty() ? 0 : fraction.leftJustified(unit->decimals, QLatin1Char('0')).toLongLong();
    const qint64 bits = wholeUnits * unit->bitsPerUnit + fractionBits;
    if (bits > kMaxBitsPerSecond)
        return fail(tooLarge);
    if (bits == 0) {
        return fail(where + QStringLiteral("the rate ") + quoted(rate)
                    + QStringLiteral(" is zero; a link needs a rate above zero (or \"unlimited\")"));
    }
    return bits;
}

Result<int> parseRtt(const QString &link, const QString &rtt)
{
    const QString where = QStringLiteral("Link ") + quoted(link) + QStringLiteral(": ");
    static const QRegularExpression form(QStringLiteral("^([0-9]+)([a-zA-Z]*)$"));
    const QRegularExpressionMatch match = form.match(rtt);
    if (rtt.isEmpty()) {
        return fail(where + QStringLiteral("the round-trip time after '/' is missing; "
                                           "write one such as 40ms"));
    }
    if (!match.hasMatch()) {
        return fail(where + QStringLiteral("the round-trip time ") + quoted(rtt)
                    + QStringLiteral(" is not a whole number of milliseconds (at least 0), "
                                     "such as 40ms"));
    }
    const QString unit = match.captured(2);
    if (unit.isEmpty()) {
        return fail(where + QStringLiteral("the round-trip time ") + quoted(rtt)
                    + QStringLiteral(" has no unit; write ") + match.captured(1)
                    + QStringLiteral("ms"));
    }
    if (unit.compare(QLatin1String("ms"), Qt::CaseInsensitive) != 0) {
        return fail(where + QStringLiteral("unknown unit ") + quoted(unit)
                    + QStringLiteral(" in the round-trip time ") + quoted(rtt)
                    + QStringLiteral(" (use ms)"));
    }
    const QString digits = match.captured(1);
    if (digits.size() > 9 || digits.toInt() > kMaxRttMs) {
        return fail(where + QStringLiteral("the round-trip time ") + quoted(rtt)
                    + QStringLiteral(" is too long (at most 600000ms)"));
    }
    return digits.toInt();
}

// One direction of a connection: what is read from `from` waits in `queue` until the link
// would have delivered it, then is written to `to`.
struct Pipe
{
    struct Chunk
    {
        Clock::time_point due;
        QByteArray bytes;
    };

    QTcpSocket *from = nullptr;
    QTcpSocket *to = nullptr;
    QTimer *timer = nullptr; // fires when the first chunk of the queue is due
    std::deque<Chunk> queue;
    qint64 queuedBytes = 0;
    Clock::time_point lastDeparture{};
    bool backlogged = false; // bytes were left unread: the link had more to carry than it took
    bool sourceClosed = false; // nothing more will come from `from` than it still holds
    bool sinkClosed = false; // `to` is gone: nothing can be delivered any more
    bool closingSink = false;
};

// One accepted connection and its connection to the target. Lives on the relay thread.
class ShapedConnection : public QObject
{
public:
    ShapedConnection(QTcpSocket *client, const LinkSpec &link, const QString &targetHost,
                     quint16 targetPort, std::atomic<qint64> *bytesRelayed,
                     std::atomic<int> *connectionsOpen, QObject *parent)
        : QObject(parent),
          m_client(client),
          m_target(new QTcpSocket(this)),
          m_bitsPerSecond(link.bitsPerSecond),
          m_oneWay(std::chrono::microseconds(qint64(link.rttMs) * 500)),
          // A round trip's worth at the rate, so the rate holds across the delay; and no less
          // than a few chunks, so a fast link does not starve between two passes of the loop.
          m_inFlightLimit(std::max<qint64>(kMinInFlightBytes,
                                           link.bitsPerSecond / 8 * link.rttMs / 1000)),
          m_bytesRelayed(bytesRelayed),
          m_connectionsOpen(connectionsOpen)
    {
        m_client->setParent(this);
        configure(m_client);
        m_up.from = m_client;
        m_up.to = m_target;
        m_down.from = m_target;
        m_down.to = m_client;
        for (Pipe *pipe : {&m_up, &m_down}) {
            pipe->from->setReadBufferSize(kReadBufferBytes);
            pipe->timer = new QTimer(this);
            pipe->timer->setSingleShot(true);
            pipe->timer->setTimerType(Qt::PreciseTimer);
            connect(pipe->timer, &QTimer::timeout, this, [this, pipe] { service(*pipe); });
            connect(pipe->from, &QIODevice::readyRead, this, [this, pipe] { service(*pipe); });
            // The sink's own buffer counts against the queue, so a slow reader slows the sender.
            connect(pipe->to, &QIODevice::bytesWritten, this, [this, pipe] { service(*pipe); });
        }
        for (QTcpSocket *socket : {m_client, m_target}) {
            connect(socket, &QAbstractSocket::stateChanged, this,
                    [this, socket](QAbstractSocket::SocketState state) {
                        if (state != QAbstractSocket::UnconnectedState)
                            return;
                        // Later, not inside the socket call (a write, a close) that got here.
                        QMetaObject::invokeMethod(
                            this, [this, socket] { onClosed(socket); }, Qt::QueuedConnection);
                    });
        }
        connect(m_target, &QAbstractSocket::connected, this, [this] {
            configure(m_target);
            service(m_up);
        });
        m_target->connectToHost(targetHost, targetPort);
        // The client may have sent before the first readyRead reaches this object.
        QMetaObject::invokeMethod(this, [this] { service(m_up); }, Qt::QueuedConnection);
    }

    ~ShapedConnection() override
    {
        // Without this the sockets, dying with their parent, would call back into a half
        // destroyed object.
        for (QTcpSocket *socket : {m_client, m_target}) {
            socket->disconnect(this);
            socket->abort();
        }
        m_connectionsOpen->fetch_sub(1);
    }

private:
    static void configure(QTcpSocket *socket)
    {
        // Coalescing small writes would add delay the emulated link does not have.
        socket->setSocketOption(QAbstractSocket::LowDelayOption, 1);
        // A fixed kernel buffer: left to grow, it would take megabytes the sender then
        // counts as sent, hiding the link's rate behind a queue that is not the link's.
        socket->setSocketOption(QAbstractSocket::ReceiveBufferSizeSocketOption,
                                int(kReadBufferBytes));
    }

    void service(Pipe &pipe)
    {
        if (pipe.sinkClosed)
            return;
        // Delivering makes room on the link, and reading may fill it with bytes already due
        // (an unlimited link, or one catching up): until neither moves anything.
        for (;;) {
            const bool delivered = deliverDue(pipe);
            const bool read = readAllowed(pipe);
            if (!delivered && !read)
                break;
        }
        armTimer(pipe);
        if (pipe.sourceClosed && !pipe.closingSink && pipe.queue.empty()
            && pipe.from->bytesAvailable() == 0) {
            pipe.closingSink = true;
            // Writes what the socket still holds, then closes.
            pipe.to->disconnectFromHost();
        }
    }

    bool deliverDue(Pipe &pipe)
    {
        if (pipe.to->state() != QAbstractSocket::ConnectedState)
            return false;
        bool delivered = false;
        const Clock::time_point now = Clock::now();
        while (!pipe.queue.empty() && pipe.queue.front().due <= now) {
            const QByteArray bytes = std::move(pipe.queue.front().bytes);
            pipe.queue.pop_front();
            pipe.queuedBytes -= bytes.size();
            // Counted first, so whoever has received the bytes also sees them counted.
            m_bytesRelayed->fetch_add(bytes.size());
            pipe.to->write(bytes);
            delivered = true;
        }
        return delivered;
    }

    bool readAllowed(Pipe &pipe)
    {
        const bool continuing = pipe.backlogged;
        bool read = false;
        // Past the limit the bytes stay in the socket: its buffer fills, the kernel's window
        // closes, and the sender sees the link's rate instead of filling our memory.
        while (pipe.from->bytesAvailable() > 0
               && pipe.queuedBytes + pipe.to->bytesToWrite() < m_inFlightLimit) {
            QByteArray bytes = pipe.from->read(std::min(kChunkBytes, pipe.from->bytesAvailable()));
            if (bytes.isEmpty())
                break;
            enqueue(pipe, std::move(bytes), continuing);
            read = true;
        }
        pipe.backlogged = pipe.from->bytesAvailable() > 0;
        return read;
    }

    // continuing: these bytes were waiting while the link was busy, so the link never idled.
    void enqueue(Pipe &pipe, QByteArray bytes, bool continuing)
    {
        // Serialization: a chunk leaves when the one before it has, so the rate holds over any
        // burst. An idle link starts from now. A busy one keeps its schedule even when the
        // relay ran late (the queue emptied only because this thread got no CPU), or the
        // link would lose the time the thread lost.
        const Clock::time_point now = Clock::now();
        Clock::time_point departure = continuing ? std::max(pipe.lastDeparture, now - kMaxCatchUp)
                                                 : std::max(pipe.lastDeparture, now);
        if (m_bitsPerSecond > 0) {
            departure += std::chrono::nanoseconds(qint64(bytes.size()) * 8 * 1'000'000'000
                                                  / m_bitsPerSecond);
        }
        pipe.lastDeparture = departure;
        pipe.queuedBytes += bytes.size();
        pipe.queue.push_back({departure + m_oneWay, std::move(bytes)});
    }

    void armTimer(Pipe &pipe)
    {
        if (pipe.queue.empty() || pipe.to->state() != QAbstractSocket::ConnectedState) {
            pipe.timer->stop();
            return;
        }
        // Rounded up: a chunk may arrive a little late, never early.
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(pipe.queue.front().due
                                                                        - Clock::now());
        pipe.timer->start(std::max(wait, std::chrono::milliseconds(0)));
    }

    void onClosed(QTcpSocket *socket)
    {
        Pipe &outgoing = socket == m_client ? m_up : m_down; // socket was its source
        Pipe &incoming = socket == m_client ? m_down : m_up; // socket was its sink
        if (!outgoing.sourceClosed) {
            outgoing.sourceClosed = true;
            incoming.sinkClosed = true;
            incoming.queue.clear();
            incoming.queuedBytes = 0;
            incoming.timer->stop();
            // What the closed side sent before it closed still goes to the other side.
            service(outgoing);
        }
        if (m_client->state() == QAbstractSocket::UnconnectedState
            && m_target->state() == QAbstractSocket::UnconnectedState && !m_finished) {
            m_finished = true;
            deleteLater();
        }
    }

    QTcpSocket *m_client;
    QTcpSocket *m_target;
    Pipe m_up; // client to target
    Pipe m_down; // target to client
    qint64 m_bitsPerSecond;
    Clock::duration m_oneWay;
    qint64 m_inFlightLimit; // bytes a direction may hold: its queue and its sink's buffer
    bool m_finished = false;
    std::atomic<qint64> *m_bytesRelayed;
    std::atomic<int> *m_connectionsOpen;
};

// The listener and its connections. Lives on the shaper's thread and dies there when it ends.
class ShaperRelay : public QObject
{
public:
    ShaperRelay(LinkSpec link, QString targetHost, quint16 targetPort,
                std::atomic<qint64> *bytesRelayed, std::atomic<int> *connectionsAccepted,
                std::atomic<int> *connectionsOpen)
        : m_link(link),
          m_targetHost(std::move(targetHost)),
          m_targetPort(targetPort),
          m_bytesRelayed(bytesRelayed),
          m_connectionsAccepted(connectionsAccepted),
          m_connectionsOpen(connectionsOpen)
    {
    }

    Result<quint16> listen(quint16 port)
    {
        m_server = new QTcpServer(this);
        if (!m_server->listen(QHostAddress::LocalHost, port)) {
            const QString error = m_server->errorString();
            delete m_server;
            m_server = nullptr;
            return fail(QStringLiteral("The link shaper cannot listen on 127.0.0.1:%1: %2")
                            .arg(port)
                            .arg(error));
        }
        connect(m_server, &QTcpServer::newConnection, this, &ShaperRelay::acceptPending);
        return m_server->serverPort();
    }

private:
    void acceptPending()
    {
        while (QTcpSocket *client = m_server->nextPendingConnection()) {
            m_connectionsAccepted->fetch_add(1);
            m_connectionsOpen->fetch_add(1);
            new ShapedConnection(client, m_link, m_targetHost, m_targetPort, m_bytesRelayed,
                                 m_connectionsOpen, this);
        }
    }

    LinkSpec m_link;
    QString m_targetHost;
    quint16 m_targetPort;
    QTcpServer *m_server = nullptr;
    std::atomic<qint64> *m_bytesRelayed;
    std::atomic<int> *m_connectionsAccepted;
    std::atomic<int> *m_connectionsOpen;
};

} // namespace

Result<LinkSpec> LinkSpec::parse(const QString &text)
{
    const QString trimmed = text.trimmed();
    if (trimmed.isEmpty()) {
        return fail(QStringLiteral("Link ") + quoted(text)
                    + QStringLiteral(" is empty: expected a rate and a round-trip time such as "
                                     "50mbit/40ms"));
    }
    const QStringList parts = trimmed.split(QLatin1Char('/'));
    if (parts.size() > 2) {
        return fail(QStringLiteral("Link ") + quoted(text)
                    + QStringLiteral(": expected one '/' between the rate and the round-trip "
                                     "time, such as 50mbit/40ms"));
    }
    LinkSpec link;
    Result<qint64> rate = parseRate(text, parts.at(0).trimmed());
    if (!rate)
        return rate.takeError();
    link.bitsPerSecond = *rate;
    if (parts.size() == 2) {
        Result<int> rtt = parseRtt(text, parts.at(1).trimmed());
        if (!rtt)
            return rtt.takeError();
        link.rttMs = *rtt;
    }
    return link;
}

QString LinkSpec::text() const
{
    QString rate;
    if (bitsPerSecond <= 0) {
        rate = QStringLiteral("unlimited");
    } else {
        const RateUnit *unit = &kRateUnits[std::size(kRateUnits) - 1];
        for (const RateUnit &candidate : kRateUnits) {
            if (bitsPerSecond >= candidate.bitsPerUnit) {
                unit = &candidate;
                break;
            }
        }
        rate = QString::number(bitsPerSecond / unit->bitsPerUnit);
        QString fraction = QString::number(bitsPerSecond % unit->bitsPerUnit)
                               .rightJustified(unit->decimals, QLatin1Char('0'));
        while (fraction.endsWith(QLatin1Char('0')))
            fraction.chop(1);
        if (!fraction.isEmpty())
            rate += QLatin1Char('.') + fraction;
        rate += QLatin1String(unit->name);
    }
    if (rttMs == 0)
        return rate;
    return rate + QLatin1Char('/') + QString::number(rttMs) + QStringLiteral("ms");
}

LinkShaper::LinkShaper(LinkSpec link, QString targetHost, quint16 targetPort)
    : m_link(link), m_targetHost(std::move(targetHost)), m_targetPort(targetPort)
{
}

LinkShaper::~LinkShaper()
{
    stop();
}

Result<quint16> LinkShaper::start(quint16 listenPort)
{
    if (m_thread) {
        return fail(QStringLiteral("The link shaper for %1:%2 is already started")
                        .arg(m_targetHost)
                        .arg(m_targetPort));
    }
    auto thread = std::make_unique<QThread>();
    thread->setObjectName(QStringLiteral("LinkShaper"));
    auto *relay = new ShaperRelay(m_link, m_targetHost, m_targetPort, &m_bytesRelayed,
                                  &m_connectionsAccepted, &m_connectionsOpen);
    relay->moveToThread(thread.get());
    // Its sockets must be closed on the thread they live on: deleted there as it ends.
    QObject::connect(thread.get(), &QThread::finished, relay, &QObject::deleteLater);
    thread->start();
    std::optional<Result<quint16>> listened;
    QMetaObject::invokeMethod(
        relay, [&] { listened.emplace(relay->listen(listenPort)); },
        Qt::BlockingQueuedConnection);
    if (!listened->ok()) {
        thread->quit();
        thread->wait();
        return listened->takeError();
    }
    m_thread = std::move(thread);
    return std::move(*listened);
}

void LinkShaper::stop()
{
    if (!m_thread)
        return;
    m_thread->quit();
    m_thread->wait();
    m_thread.reset();
}

qint64 LinkShaper::bytesRelayed() const
{
    return m_bytesRelayed.load();
}

int LinkShaper::connectionsAccepted() const
{
    return m_connectionsAccepted.load();
}

int LinkShaper::connectionsOpen() const
{
    return m_connectionsOpen.load();
}

} // namespace flotilla
