// The benchmarks' link shaper on loopback: link descriptions parse and print back; a shaped
// connection runs at the link's rate, paced rather than in lumps, and at its round-trip time
// (and an unshaped one does not, so the bounds measure the shaper); each connection gets a link
// of its own; a slow link holds its sender back instead of buffering everything; a closing side
// still gets its bytes delivered; many connections open and close without losing bytes or
// leaking; stop() is prompt with connections open; and a target that is down closes the client
// instead of leaving it hanging. Timings are taken in signal handlers, as the bytes arrive.
#include "bench/LinkShaper.h"

#include <QtTest>

#include <QElapsedTimer>
#include <QTcpServer>
#include <QTcpSocket>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

using namespace flotilla;

namespace {

// Runs the event loop until done() or the timeout; the loop wakes on every event, so a
// caller that reads the clock right after sees when the event came, not when a poll did.
bool waitFor(const std::function<bool()> &done, int timeoutMs)
{
    QElapsedTimer clock;
    clock.start();
    QTimer tick; // the deadline is checked even when nothing else happens
    tick.start(10);
    while (!done()) {
        if (clock.hasExpired(timeoutMs))
            return false;
        QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
    }
    return true;
}

// A server on the test thread that counts what each connection brings, and when the last
// byte came.
class Sink
{
public:
    struct Peer
    {
        qint64 bytes = 0;
        qint64 lastByteNs = 0;
        std::vector<qint64> arrivalsNs; // when each read came
        bool closed = false;
    };

    explicit Sink(const QElapsedTimer &clock) : m_clock(clock)
    {
        QObject::connect(&m_server, &QTcpServer::newConnection, &m_server, [this] {
            while (QTcpSocket *socket = m_server.nextPendingConnection()) {
                m_peers.push_back(std::make_unique<Peer>());
                Peer *peer = m_peers.back().get();
                QObject::connect(socket, &QIODevice::readyRead, socket, [this, socket, peer] {
                    const qint64 size = socket->readAll().size();
                    peer->bytes += size;
                    m_totalBytes += size;
                    peer->lastByteNs = m_clock.nsecsElapsed();
                    peer->arrivalsNs.push_back(peer->lastByteNs);
                });
                QObject::connect(socket, &QAbstractSocket::disconnected, socket, [socket, peer] {
                    peer->closed = true;
                    socket->deleteLater();
                });
            }
        });
    }

    bool listen() { return m_server.listen(QHostAddress::LocalHost, 0); }
    quint16 port() const { return m_server.serverPort(); }
    qint64 totalBytes() const { return m_totalBytes; }
    const std::vector<std::unique_ptr<Peer>> &peers() const { return m_peers; }
    int closedCount() const
    {
        return int(std::count_if(m_peers.begin(), m_peers.end(),
                                 [](const auto &peer) { return peer->closed; }));
    }

private:
    const QElapsedTimer &m_clock;
    std::vector<std::unique_ptr<Peer>> m_peers;
    qint64 m_totalBytes = 0;
    // Last, so it dies first: its sockets report their close to the peers as they go.
    QTcpServer m_server;
};

// A server on the test thread that sends back what it reads.
class Echo
{
public:
    Echo()
    {
        QObject::connect(&m_server, &QTcpServer::newConnection, &m_server, [this] {
            while (QTcpSocket *socket = m_server.nextPendingConnection()) {
                ++m_connections;
                socket->setSocketOption(QAbstractSocket::LowDelayOption, 1);
                QObject::connect(socket, &QIODevice::readyRead, socket,
                                 [socket] { socket->write(socket->readAll()); });
                QObject::connect(socket, &QAbstractSocket::disconnected, socket,
                                 &QObject::deleteLater);
            }
        });
    }

    bool listen() { return m_server.listen(QHostAddress::LocalHost, 0); }
    quint16 port() const { return m_server.serverPort(); }
    int connections() const { return m_connections; }

private:
    QTcpServer m_server;
    int m_connections = 0;
};

LinkSpec link(qint64 bitsPerSecond, int rttMs)
{
    LinkSpec spec;
    spec.bitsPerSecond = bitsPerSecond;
    spec.rttMs = rttMs;
    return spec;
}

double median(QList<double> values)
{
    std::sort(values.begin(), values.end());
    return values.size() % 2 ? values.at(values.size() / 2)
                             : (values.at(values.size() / 2 - 1) + values.at(values.size() / 2)) / 2;
}

} // namespace

class TestLinkShaper : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void parse_data();
    void parse();
    void parseErrors_data();
    void parseErrors();
    void startFailsWhenPortIsTaken();
    void rateHolds();
    void unlimitedIsMuchFaster();
    void roundTrip_data();
    void roundTrip();
    void eachConnectionHasItsOwnLink();
    void slowLinkHoldsSenderBack();
    void closeDeliversWhatIsQueued();
    void manyConnectionsCloseCleanly();
    void targetDownClosesClient();

private:
    // Sends bytesEach through a shaper from each of `clients` clients at once and gives the
    // rate each connection achieved, from the first byte written to its last byte received.
    // busyShare, if given: for each, the share of 50 ms intervals in which bytes arrived.
    void measureRates(const LinkSpec &spec, int clients, qint64 bytesEach, QList<double> *mbits,
                      QList<double> *busyShare = nullptr);
};

void TestLinkShaper::parse_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<qint64>("bitsPerSecond");
    QTest::addColumn<int>("rttMs");
    QTest::addColumn<QString>("canonical");

    QTest::newRow("50mbit/40ms") << QStringLiteral("50mbit/40ms") << qint64(50'000'000) << 40
                                 << QStringLiteral("50mbit/40ms");
    QTest::newRow("10mbit/80ms") << QStringLiteral("10mbit/80ms") << qint64(10'000'000) << 80
                                 << QStringLiteral("10mbit/80ms");
    QTest::newRow("1gbit/1ms") << QStringLiteral("1gbit/1ms") << qint64(1'000'000'000) << 1
                               << QStringLiteral("1gbit/1ms");
    QTest::newRow("500kbit/200ms") << QStringLiteral("500kbit/200ms") << qint64(500'000) << 200
                                   << QStringLiteral("500kbit/200ms");
    QTest::newRow("no delay") << QStringLiteral("100mbit") << qint64(100'000'000) << 0
                              << QStringLiteral("100mbit");
    QTest::newRow("case and spaces") << QStringLiteral(" 50MBit / 40MS ") << qint64(50'000'000)
                                     << 40 << QStringLiteral("50mbit/40ms");
    QTest::newRow("decimals") << QStringLiteral("1.5mbit/10ms") << qint64(1'500'000) << 10
                              << QStringLiteral("1.5mbit/10ms");
    QTest::newRow("unlimited") << QStringLiteral("unlimited/40ms") << qint64(0) << 40
                               << QStringLiteral("unlimited/40ms");
}

void TestLinkShaper::parse()
{
    QFETCH(QString, text);
    QFETCH(qint64, bitsPerSecond);
    QFETCH(int, rttMs);
    QFETCH(QString, canonical);

    const Result<LinkSpec> parsed = LinkSpec::parse(text);
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QCOMPARE(parsed->bitsPerSecond, bitsPerSecond);
    QCOMPARE(parsed->rttMs, rttMs);
    QCOMPARE(parsed->text(), canonical);
    const Result<LinkSpec> again = LinkSpec::parse(parsed->text());
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(again->bitsPerSecond, bitsPerSecond);
    QCOMPARE(again->rttMs, rttMs);
}

void TestLinkShaper::parseErrors_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("culprit"); // the part of the text the message must name

    QTest::newRow("word") << QStringLiteral("fast") << QStringLiteral("\"fast\"");
    QTest::newRow("negative delay") << QStringLiteral("50mbit/-3ms") << QStringLiteral("\"-3ms\"");
    QTest::newRow("zero rate") << QStringLiteral("0mbit/1ms") << QStringLiteral("\"0mbit\"");
    QTest::newRow("bad unit") << QStringLiteral("50mbits/40") << QStringLiteral("\"mbits\"");
    QTest::newRow("empty") << QString() << QStringLiteral("empty");
    QTest::newRow("delay without unit") << QStringLiteral("50mbit/40") << QStringLiteral("\"40\"");
    QTest::newRow("rate without unit") << QStringLiteral("50/40ms") << QStringLiteral("\"50\"");
    QTest::newRow("two slashes") << QStringLiteral("50mbit/40ms/1ms") << QStringLiteral("'/'");
    QTest::newRow("seconds") << QStringLiteral("50mbit/1s") << QStringLiteral("\"s\"");
    QTest::newRow("sub-bit") << QStringLiteral("1.0001kbit") << QStringLiteral("1 bit/s");
}

void TestLinkShaper::parseErrors()
{
    QFETCH(QString, text);
    QFETCH(QString, culprit);

    const Result<LinkSpec> parsed = LinkSpec::parse(text);
    QVERIFY(!parsed.ok());
    const QString message = parsed.error();
    QVERIFY2(message.contains(QLatin1Char('"') + text + QLatin1Char('"')), qPrintable(message));
    QVERIFY2(message.contains(culprit), qPrintable(message));
}

void TestLinkShaper::startFailsWhenPortIsTaken()
{
    QTcpServer holder;
    QVERIFY(holder.listen(QHostAddress::LocalHost, 0));
    LinkShaper shaper(link(10'000'000, 0), QStringLiteral("127.0.0.1"), 9);
    const Result<quint16> taken = shaper.start(holder.serverPort());
    QVERIFY(!taken.ok());
    QVERIFY2(taken.error().contains(QString::number(holder.serverPort())), qPrintable(taken.error()));

    const Result<quint16> started = shaper.start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
    const Result<quint16> twice = shaper.start();
    QVERIFY(!twice.ok());
    shaper.stop();
    const Result<quint16> restarted = shaper.start();
    QVERIFY2(restarted.ok(), qPrintable(restarted.error()));
}

void TestLinkShaper::measureRates(const LinkSpec &spec, int clients, qint64 bytesEach,
                                  QList<double> *mbits, QList<double> *busyShare)
{
    QElapsedTimer clock;
    clock.start();
    Sink sink(clock);
    QVERIFY(sink.listen());
    LinkShaper shaper(spec, QStringLiteral("127.0.0.1"), sink.port());
    const Result<quint16> port = shaper.start();
    QVERIFY2(port.ok(), qPrintable(port.error()));

    std::vector<std::unique_ptr<QTcpSocket>> sockets;
    for (int i = 0; i < clients; ++i) {
        sockets.push_back(std::make_unique<QTcpSocket>());
        sockets.back()->connectToHost(QHostAddress::LocalHost, *port);
    }
    // Set-up is not part of the link: start the clock once every path reaches the sink.
    QVERIFY(waitFor(
        [&] {
            return int(sink.peers().size()) == clients
                && std::all_of(sockets.begin(), sockets.end(), [](const auto &socket) {
                       return socket->state() == QAbstractSocket::ConnectedState;
                   });
        },
        5000));

    const QByteArray payload(bytesEach, 'x');
    const qint64 startNs = clock.nsecsElapsed();
    for (const auto &socket : sockets)
        socket->write(payload);
    QVERIFY2(waitFor([&] { return sink.totalBytes() == clients * bytesEach; }, 15000),
             qPrintable(QStringLiteral("%1 of %2 bytes arrived")
                            .arg(sink.totalBytes())
                            .arg(clients * bytesEach)));
    for (const auto &peer : sink.peers()) {
        QCOMPARE(peer->bytes, bytesEach);
        const double seconds = double(peer->lastByteNs - startNs) / 1e9;
        mbits->append(double(bytesEach) * 8 / seconds / 1e6);
        if (busyShare) {
            constexpr qint64 kBinNs = 50'000'000;
            const qint64 bins = (peer->lastByteNs - startNs) / kBinNs + 1;
            std::vector<bool> busy(size_t(bins), false);
            for (qint64 arrival : peer->arrivalsNs)
                busy[size_t((arrival - startNs) / kBinNs)] = true;
            busyShare->append(double(std::count(busy.begin(), busy.end(), true)) / double(bins));
        }
    }
    QTRY_COMPARE_WITH_TIMEOUT(shaper.bytesRelayed(), clients * bytesEach, 2000);
}

void TestLinkShaper::rateHolds()
{
    QList<double> mbits;
    QList<double> busyShare;
    measureRates(link(20'000'000, 0), 1, 4'000'000, &mbits, &busyShare);
    if (QTest::currentTestFailed())
        return;
    qInfo("20mbit/0ms: %.2f Mbit/s, bytes arrived in %.0f%% of 50 ms intervals", mbits.at(0),
          busyShare.at(0) * 100);
    QVERIFY2(mbits.at(0) > 18.0 && mbits.at(0) < 22.0, qPrintable(QString::number(mbits.at(0))));
    // Paced, not lumped: a link that let through its read buffer (256 KiB, 100 ms of this
    // link) at a time would leave about half the intervals empty.
    QVERIFY2(busyShare.at(0) > 0.8, qPrintable(QString::number(busyShare.at(0))));
}

void TestLinkShaper::unlimitedIsMuchFaster()
{
    QList<double> mbits;
    measureRates(LinkSpec(), 1, 4'000'000, &mbits);
    if (QTest::currentTestFailed())
        return;
    qInfo("unlimited: %.0f Mbit/s", mbits.at(0));
    // Three times the shaped rate (unloaded it is 30 to 50 times): the shaped test's bound is
    // the shaper's doing, not the relay's cost or the machine's.
    QVERIFY2(mbits.at(0) > 60.0, qPrintable(QString::number(mbits.at(0))));
}

void TestLinkShaper::roundTrip_data()
{
    QTest::addColumn<int>("rttMs");
    QTest::addColumn<double>("lowestMs");
    QTest::addColumn<double>("highestMs");

    // Never early; late by at most what a loaded 2-core machine adds to the event loop's
    // turns (a relay that delayed by the whole round trip each way would take 80 ms).
    QTest::newRow("40ms") << 40 << 40.0 << 60.0;
    QTest::newRow("0ms") << 0 << 0.0 << 10.0;
}

void TestLinkShaper::roundTrip()
{
    QFETCH(int, rttMs);
    QFETCH(double, lowestMs);
    QFETCH(double, highestMs);

    Echo echo;
    QVERIFY(echo.listen());
    LinkShaper shaper(link(1'000'000'000, rttMs), QStringLiteral("127.0.0.1"), echo.port());
    const Result<quint16> port = shaper.start();
    QVERIFY2(port.ok(), qPrintable(port.error()));
    QTcpSocket client;
    client.connectToHost(QHostAddress::LocalHost, *port);
    QVERIFY(waitFor(
        [&] {
            return client.state() == QAbstractSocket::ConnectedState && echo.connections() == 1;
        },
        5000));
    client.setSocketOption(QAbstractSocket::LowDelayOption, 1);

    QElapsedTimer clock;
    clock.start();
    QList<double> roundTrips;
    for (int i = 0; i < 20; ++i) {
        const qint64 sentNs = clock.nsecsElapsed();
        client.write("x", 1);
        QVERIFY(waitFor([&] { return client.bytesAvailable() > 0; }, 2000));
        roundTrips.append(double(clock.nsecsElapsed() - sentNs) / 1e6);
        QCOMPARE(client.readAll(), QByteArray("x"));
    }
    const double middle = median(roundTrips);
    qInfo("rtt %dms: median %.2f ms, min %.2f ms, max %.2f ms", rttMs, middle,
          *std::min_element(roundTrips.begin(), roundTrips.end()),
          *std::max_element(roundTrips.begin(), roundTrips.end()));
    QVERIFY2(middle >= lowestMs && middle <= highestMs, qPrintable(QString::number(middle)));
    QCOMPARE(shaper.bytesRelayed(), qint64(40));
}

void TestLinkShaper::eachConnectionHasItsOwnLink()
{
    QList<double> mbits;
    measureRates(link(10'000'000, 0), 2, 2'000'000, &mbits);
    if (QTest::currentTestFailed())
        return;
    qInfo("two clients on 10mbit/0ms: %.2f and %.2f Mbit/s", mbits.at(0), mbits.at(1));
    for (double rate : mbits)
        QVERIFY2(rate > 8.5 && rate < 11.5, qPrintable(QString::number(rate)));
}

void TestLinkShaper::slowLinkHoldsSenderBack()
{
    // Far more than the kernel's buffers and the relay's bounds hold together.
    constexpr qint64 kBytes = 48'000'000;
    QElapsedTimer clock;
    clock.start();
    Sink sink(clock);
    QVERIFY(sink.listen());
    LinkShaper shaper(link(8'000'000, 0), QStringLiteral("127.0.0.1"), sink.port());
    const Result<quint16> port = shaper.start();
    QVERIFY2(port.ok(), qPrintable(port.error()));
    QTcpSocket client;
    qint64 written = 0;
    QObject::connect(&client, &QIODevice::bytesWritten, &client,
                     [&](qint64 bytes) { written += bytes; });
    QObject::connect(&client, &QAbstractSocket::connected, &client, [&] {
        // A fixed send buffer: what the kernel holds must not depend on how it is tuned.
        client.setSocketOption(QAbstractSocket::SendBufferSizeSocketOption, 256 * 1024);
        client.write(QByteArray(kBytes, 'x'));
    });
    client.connectToHost(QHostAddress::LocalHost, *port);
    // Half a second of the link: a relay without backpressure has read everything by then.
    QVERIFY(waitFor([&] { return sink.totalBytes() >= 500'000; }, 5000));
    qInfo("8mbit/0ms: the sender had written %.1f MB when 0.5 MB had arrived", written / 1e6);
    QVERIFY2(written < kBytes / 2, qPrintable(QString::number(written)));
}

void TestLinkShaper::closeDeliversWhatIsQueued()
{
    // More than the link holds in flight and than a socket buffers, so that when the close
    // is seen most of the bytes are still in the relay's sockets and queue.
    constexpr qint64 kBytes = 1'000'000;
    const QByteArray payload(kBytes, 'x');
    QElapsedTimer clock;
    clock.start();

    // Client to target: the client writes and closes at once.
    Sink sink(clock);
    QVERIFY(sink.listen());
    LinkShaper upShaper(link(50'000'000, 10), QStringLiteral("127.0.0.1"), sink.port());
    const Result<quint16> upPort = upShaper.start();
    QVERIFY2(upPort.ok(), qPrintable(upPort.error()));
    QTcpSocket client;
    QObject::connect(&client, &QAbstractSocket::connected, &client, [&] {
        client.write(payload);
        client.disconnectFromHost();
    });
    client.connectToHost(QHostAddress::LocalHost, *upPort);
    QVERIFY2(waitFor([&] { return sink.closedCount() == 1; }, 5000),
             qPrintable(QString::number(sink.totalBytes())));
    QCOMPARE(sink.totalBytes(), kBytes);

    // Target to client: the target writes and closes as soon as it accepts.
    QTcpServer source;
    QObject::connect(&source, &QTcpServer::newConnection, &source, [&] {
        QTcpSocket *socket = source.nextPendingConnection();
        QObject::connect(socket, &QAbstractSocket::disconnected, socket, &QObject::deleteLater);
        socket->write(payload);
        socket->disconnectFromHost();
    });
    QVERIFY(source.listen(QHostAddress::LocalHost, 0));
    LinkShaper downShaper(link(50'000'000, 10), QStringLiteral("127.0.0.1"), source.serverPort());
    const Result<quint16> downPort = downShaper.start();
    QVERIFY2(downPort.ok(), qPrintable(downPort.error()));
    QTcpSocket reader;
    qint64 received = 0;
    bool closed = false;
    QObject::connect(&reader, &QIODevice::readyRead, &reader,
                     [&] { received += reader.readAll().size(); });
    QObject::connect(&reader, &QAbstractSocket::disconnected, &reader, [&] { closed = true; });
    reader.connectToHost(QHostAddress::LocalHost, *downPort);
    QVERIFY2(waitFor([&] { return closed; }, 5000), qPrintable(QString::number(received)));
    received += reader.readAll().size();
    QCOMPARE(received, kBytes);
    QTRY_COMPARE_WITH_TIMEOUT(upShaper.connectionsOpen() + downShaper.connectionsOpen(), 0, 5000);
}

void TestLinkShaper::manyConnectionsCloseCleanly()
{
    constexpr int kClients = 50;
    constexpr qint64 kBytes = 20'000;
    QElapsedTimer clock;
    clock.start();
    Sink sink(clock);
    QVERIFY(sink.listen());
    // Slow enough and delayed enough that each client closes while its bytes are on the link.
    LinkShaper shaper(link(100'000'000, 20), QStringLiteral("127.0.0.1"), sink.port());
    const Result<quint16> port = shaper.start();
    QVERIFY2(port.ok(), qPrintable(port.error()));

    const QByteArray payload(kBytes, 'x');
    std::vector<std::unique_ptr<QTcpSocket>> clients;
    for (int i = 0; i < kClients; ++i) {
        clients.push_back(std::make_unique<QTcpSocket>());
        QTcpSocket *client = clients.back().get();
        QObject::connect(client, &QAbstractSocket::connected, client, [client, &payload] {
            client->write(payload);
            client->disconnectFromHost();
        });
        client->connectToHost(QHostAddress::LocalHost, *port);
    }
    QVERIFY2(waitFor([&] { return sink.closedCount() == kClients; }, 10000),
             qPrintable(QStringLiteral("%1 of %2 closed at the sink, %3 bytes")
                            .arg(sink.closedCount())
                            .arg(kClients)
                            .arg(sink.totalBytes())));
    QCOMPARE(int(sink.peers().size()), kClients);
    for (const auto &peer : sink.peers())
        QCOMPARE(peer->bytes, kBytes);
    QVERIFY(std::all_of(clients.begin(), clients.end(), [](const auto &client) {
        return client->state() == QAbstractSocket::UnconnectedState;
    }));
    QCOMPARE(shaper.connectionsAccepted(), kClients);
    QCOMPARE(shaper.bytesRelayed(), kClients * kBytes);
    QTRY_COMPARE_WITH_TIMEOUT(shaper.connectionsOpen(), 0, 5000);

    // stop() with connections open and idle: prompt, and their clients learn of it.
    std::vector<std::unique_ptr<QTcpSocket>> idle;
    for (int i = 0; i < 5; ++i) {
        idle.push_back(std::make_unique<QTcpSocket>());
        idle.back()->connectToHost(QHostAddress::LocalHost, *port);
    }
    QVERIFY(waitFor([&] { return shaper.connectionsOpen() == 5 && sink.peers().size() == 55; },
                    5000));
    QElapsedTimer stopping;
    stopping.start();
    shaper.stop();
    const qint64 stopMs = stopping.elapsed();
    qInfo("stop() with 5 open connections took %lld ms", stopMs);
    QVERIFY2(stopMs < 1000, qPrintable(QString::number(stopMs)));
    QCOMPARE(shaper.connectionsOpen(), 0);
    QVERIFY(waitFor(
        [&] {
            return sink.closedCount() == 55
                && std::all_of(idle.begin(), idle.end(), [](const auto &client) {
                       return client->state() == QAbstractSocket::UnconnectedState;
                   });
        },
        5000));
}

void TestLinkShaper::targetDownClosesClient()
{
    quint16 deadPort = 0;
    {
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost, 0));
        deadPort = probe.serverPort();
    }
    LinkShaper shaper(link(10'000'000, 20), QStringLiteral("127.0.0.1"), deadPort);
    const Result<quint16> port = shaper.start();
    QVERIFY2(port.ok(), qPrintable(port.error()));
    QTcpSocket client;
    bool connected = false;
    QObject::connect(&client, &QAbstractSocket::connected, &client, [&] {
        connected = true;
        client.write("hello");
    });
    client.connectToHost(QHostAddress::LocalHost, *port);
    QVERIFY(waitFor([&] { return connected; }, 5000));
    QVERIFY(waitFor([&] { return client.state() == QAbstractSocket::UnconnectedState; }, 5000));
    QCOMPARE(shaper.connectionsAccepted(), 1);
    QTRY_COMPARE_WITH_TIMEOUT(shaper.connectionsOpen(), 0, 5000);
    QCOMPARE(shaper.bytesRelayed(), qint64(0));
}

QTEST_GUILESS_MAIN(TestLinkShaper)
#include "tst_linkshaper.moc"
