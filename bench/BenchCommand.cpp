// `flotilla bench`: measurements that compare Flotilla with a peer run in the same
// invocation. `transfer`, here, sends a model's weights over Flotilla's TLS connection on
// loopback and compares the rate with what `openssl speed` gets from the same cipher on this
// machine; the others are in BenchPeers.cpp and BenchScale.cpp.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/Attacks.h"
#include "bench/BenchFlood.h"
#include "bench/BenchParity.h"
#include "bench/BenchPeers.h"
#include "bench/BenchScale.h"
#include "bench/BenchScaling.h"
#include "bench/Insider.h"
#include "bench/MeasurementCommands.h"

#include "common/Crc32c.h"
#include "net/Pki.h"
#include "net/TlsListener.h"
#include "net/TlsSocket.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QElapsedTimer>
#include <QProcess>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QTimer>
#include <QTemporaryDir>
#include <QThread>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include <openssl/ssl.h>

#ifdef Q_OS_UNIX
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace flotilla {

namespace {

using net::MessageType;

// Bytes per second of `openssl speed -evp aes-128-gcm` on 16 KiB blocks, or 0.
double opensslAesGcmRate(int seconds)
{
    QProcess p;
    p.start(QStringLiteral("openssl"), {QStringLiteral("speed"), QStringLiteral("-evp"), QStringLiteral("aes-128-gcm"),
                                        QStringLiteral("-bytes"), QStringLiteral("16384"), QStringLiteral("-seconds"),
                                        QString::number(seconds)});
    if (!p.waitForFinished(60000))
        return 0;
    // The table's last line: "AES-128-GCM   <rate>k" (thousands of bytes per second).
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    const QRegularExpression row(QStringLiteral("(?i)aes-128-gcm\\s+([0-9.]+)k"));
    const auto match = row.match(out);
    return match.hasMatch() ? match.captured(1).toDouble() * 1000.0 : 0.0;
}

#ifdef Q_OS_UNIX
// The same bytes over a bare OpenSSL TLS 1.3 connection on loopback, as a program with no
// protocol would send them: one thread writes 1 MiB at a time from the weights, hashing each
// slice just before it goes (CRC-32C, as Flotilla's sender does); another reads into one
// buffer allocated in advance, summing as it reads (as Flotilla's receiver does), and answers
// one byte. What is left between this and Flotilla's figure is Flotilla's own: framing,
// parsing, the message buffer, the event loop.
class BareTlsPeer
{
public:
    ~BareTlsPeer()
    {
        if (m_server.joinable()) {
            m_stop = true;
            if (m_client)
                SSL_free(m_client);
            if (m_clientFd >= 0)
                ::close(m_clientFd);
            m_server.join();
        }
    }

    // Starts the receiving thread and connects to it; false with the reason if it cannot.
    bool start(const net::CoordinatorIdentity &identity, qint64 bytes, QString *error)
    {
        m_bytes = bytes;
        net::TlsContext::Options server;
        server.side = net::TlsContext::Side::Server;
        server.verify = net::TlsContext::Verify::None;
        server.certificateChainPem = identity.serverCertificatePem;
        server.keyPem = identity.serverKeyPem;
        net::TlsContext::Options client;
        client.verify = net::TlsContext::Verify::None;
        auto s = net::TlsContext::create(server);
        auto c = net::TlsContext::create(client);
        if (!s || !c) {
            *error = s ? c.error() : s.error();
            return false;
        }
        m_serverContext = *s;
        m_clientContext = *c;
        const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t size = sizeof address;
        if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr *>(&address), size) != 0
            || ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr *>(&address), &size) != 0) {
            *error = QStringLiteral("bare TLS peer: cannot listen on loopback");
            return false;
        }
        m_server = std::thread([this, listener] { serve(listener); });
        m_clientFd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(m_clientFd, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0) {
            *error = QStringLiteral("bare TLS peer: cannot connect");
            return false;
        }
        m_client = SSL_new(m_clientContext->handle());
        SSL_set_fd(m_client, m_clientFd);
        if (SSL_connect(m_client) != 1) {
            *error = QStringLiteral("bare TLS peer: handshake failed");
            return false;
        }
        return true;
    }

    // Sends the weights once and waits for the answer; bytes per second, or 0.
    double transfer(const QByteArray &weights)
    {
        QElapsedTimer timer;
        timer.start();
        Crc32c hash;
        constexpr qsizetype slice = 1 << 20;
        for (qsizetype at = 0; at < weights.size(); at += slice) {
            const QByteArrayView part = QByteArrayView(weights).sliced(at, std::min(slice, weights.size() - at));
            hash.addData(part);
            std::size_t written = 0;
            for (qsizetype done = 0; done < part.size(); done += qsizetype(written))
                if (SSL_write_ex(m_client, part.data() + done, std::size_t(part.size() - done), &written) != 1)
                    return 0;
        }
        hash.result();
        char answer = 0;
        std::size_t read = 0;
        if (SSL_read_ex(m_client, &answer, 1, &read) != 1)
            return 0;
        return double(weights.size()) / (double(timer.nsecsElapsed()) / 1e9);
    }

private:
    void serve(int listener)
    {
        const int fd = ::accept(listener, nullptr, nullptr);
        ::close(listener);
        if (fd < 0)
            return;
        SSL *ssl = SSL_new(m_serverContext->handle());
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
            QByteArray buffer(m_bytes, Qt::Uninitialized);
            for (;;) {
                Crc32c hash;
                qint64 got = 0;
                std::size_t n = 0;
                while (got < m_bytes && SSL_read_ex(ssl, buffer.data() + got, std::size_t(m_bytes - got), &n) == 1) {
                    hash.addData(QByteArrayView(buffer).sliced(got, qsizetype(n)));
                    got += qint64(n);
                }
                hash.result();
                if (got < m_bytes || m_stop || SSL_write_ex(ssl, "k", 1, &n) != 1)
                    break;
            }
        }
        SSL_free(ssl);
        ::close(fd);
    }

    qint64 m_bytes = 0;
    std::shared_ptr<net::TlsContext> m_serverContext;
    std::shared_ptr<net::TlsContext> m_clientContext;
    std::thread m_server;
    std::atomic<bool> m_stop{false};
    SSL *m_client = nullptr;
    int m_clientFd = -1;
};
#endif

int benchTransfer(int megabytes, int repeats)
{
    QTemporaryDir dir;
    // The coordinator's endpoint on a thread of its own, answering every Result with an Ack.
    QThread network;
    QObject context;
    context.moveToThread(&network);
    network.start();
    std::unique_ptr<net::TlsListener> endpoint;
    net::CoordinatorIdentity identity;
    QString error;
    QMetaObject::invokeMethod(&context, [&] {
        net::TlsListener::Options options;
        options.identityDir = dir.filePath(QStringLiteral("identity"));
        options.bindAddress = QHostAddress::LocalHost;
        auto e = net::TlsListener::create(options);
        if (!e || !(*e)->listen()) {
            error = e ? QStringLiteral("cannot listen") : e.error();
            return;
        }
        endpoint = std::move(e).value();
        endpoint->setPayloadLimit(MessageType::Result, std::uint64_t(megabytes + 1) << 20);
        net::TlsListener *raw = endpoint.get();
        QObject::connect(raw, &net::TlsListener::helloReceived, raw,
                         [raw](const net::PeerInfo &peer, const net::HelloMsg &) {
                             raw->send(peer.connectionId, MessageType::Welcome, {});
                         });
        QObject::connect(raw, &net::TlsListener::messageReceived, raw,
                         [raw](qint64 id, const net::Message &m) {
                             raw->send(id, MessageType::Ack, QCborMap{{QStringLiteral("bytes"), m.payload.size()}});
                         });
        auto loaded = net::loadOrCreateCoordinatorIdentity(options.identityDir, options.hostNames);
        if (loaded)
            identity = *loaded;
    }, Qt::BlockingQueuedConnection);
    auto stop = [&] {
        QMetaObject::invokeMethod(&context, [&] { endpoint.reset(); }, Qt::BlockingQueuedConnection);
        network.quit();
        network.wait();
    };
    if (!endpoint || identity.ca.certificatePem.isEmpty()) {
        std::fprintf(stderr, "flotilla bench: %s\n", error.toUtf8().constData());
        stop();
        return ExitFailure;
    }
    const quint16 port = endpoint->port();

    // A worker identity issued the way a join issues it.
    const QByteArray key = net::generatePrivateKeyPem().value();
    const QByteArray cert = net::signCertificateRequest(identity.ca, net::createCertificateRequest(key, QStringLiteral("bench")).value(),
                                                        QStringLiteral("bench"), 1).value();
    (void)endpoint->trust().addCertificate(
        net::CertificateRecord{net::certificateFingerprint(cert), QStringLiteral("bench"), 0,
                               QDateTime::currentMSecsSinceEpoch(), 0, {}});
    // The worker's end is the same TLS socket a worker uses, driven by this thread's event loop.
    net::TlsContext::Options tls;
    tls.side = net::TlsContext::Side::Client;
    tls.verify = net::TlsContext::Verify::Require;
    tls.certificateChainPem = cert;
    tls.keyPem = key;
    tls.caPem = identity.ca.certificatePem;
    auto worker = net::TlsContext::create(tls);
    if (!worker) {
        std::fprintf(stderr, "flotilla bench: %s\n", worker.error().toUtf8().constData());
        stop();
        return ExitFailure;
    }
    net::TlsSocket socket(*worker);
    net::MessageReader reader;
    QObject::connect(&socket, &QIODevice::readyRead, &socket, [&] { reader.readFrom(socket); });
    // Runs the event loop until done() or for at most ms.
    auto until = [&](const std::function<bool()> &done, int ms) {
        QElapsedTimer waited;
        waited.start();
        QTimer wake;
        wake.start(50);
        while (!done() && waited.elapsed() < ms && socket.state() != net::TlsSocket::State::Unconnected)
            QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents);
        return done();
    };
    auto await = [&](MessageType type) {
        bool seen = false;
        const auto found = [&] {
            while (!seen) {
                auto m = reader.next();
                if (!m || !m->has_value())
                    return false;
                seen = (*m)->type == type;
            }
            return true;
        };
        return until(found, 30000);
    };
    socket.connectToHostEncrypted(QStringLiteral("127.0.0.1"), port);
    if (!until([&] { return socket.isEncrypted(); }, 10000)) {
        std::fprintf(stderr, "flotilla bench: TLS connection failed: %s\n", socket.errorString().toUtf8().constData());
        stop();
        return ExitFailure;
    }
    socket.send(net::encodeMessage(MessageType::Hello, {}));
    if (!await(MessageType::Welcome)) {
        stop();
        return ExitFailure;
    }
    QByteArray weights(qsizetype(megabytes) << 20, Qt::Uninitialized);
    QRandomGenerator(1).fillRange(reinterpret_cast<quint32 *>(weights.data()), weights.size() / 4);

    std::printf("Transfer of %d MiB of weights over TLS 1.3 on loopback (encode, send, receive, check CRC-32C, ack), "
                "%d times, alternating with a bare OpenSSL TLS loop sending the same bytes; then openssl speed -evp "
                "aes-128-gcm at 16 KiB blocks.\n", megabytes, repeats);
#ifdef Q_OS_UNIX
    BareTlsPeer bare;
    QString bareError;
    const bool bareRuns = bare.start(identity, weights.size(), &bareError);
    if (!bareRuns)
        std::fprintf(stderr, "flotilla bench: %s\n", bareError.toUtf8().constData());
#else
    const bool bareRuns = false;
#endif
    std::vector<double> rates;
    std::vector<double> bareRates;
    for (int i = 0; i < repeats; ++i) {
#ifdef Q_OS_UNIX
        // Alternating with Flotilla's, so that both see the same machine.
        if (bareRuns)
            bareRates.push_back(bare.transfer(weights));
#endif
        QElapsedTimer timer;
        timer.start();
        socket.send(std::make_unique<net::OutgoingMessage>(MessageType::Result, QCborMap{{QStringLiteral("lease"), i}}, weights));
        if (!await(MessageType::Ack)) {
            std::fprintf(stderr, "flotilla bench: no acknowledgement\n");
            stop();
            return ExitFailure;
        }
        rates.push_back(double(weights.size()) / (double(timer.nsecsElapsed()) / 1e9));
    }
    socket.disconnectFromHost();
    stop();
    std::sort(rates.begin(), rates.end());
    std::sort(bareRates.begin(), bareRates.end());
    const double median = rates[rates.size() / 2];
    const double cipher = opensslAesGcmRate(3);
    std::printf("  Flotilla TLS transfer   min %.0f, median %.0f, max %.0f MB/s\n", rates.front() / 1e6, median / 1e6,
                rates.back() / 1e6);
    if (!bareRates.empty() && bareRates.front() > 0) {
        const double bareMedian = bareRates[bareRates.size() / 2];
        std::printf("  bare OpenSSL TLS loop   min %.0f, median %.0f, max %.0f MB/s (same bytes, CRC-32C on both ends)\n"
                    "  ratio to the bare loop  %.2f\n",
                    bareRates.front() / 1e6, bareMedian / 1e6, bareRates.back() / 1e6, median / bareMedian);
    }
    if (cipher > 0)
        std::printf("  openssl aes-128-gcm     %.0f MB/s\n  ratio (median)          %.2f\n", cipher / 1e6, median / cipher);
    else
        std::printf("  openssl speed could not be run or read\n");
    return ExitOk;
}

} // namespace

int runBenchCommand(const QStringList &arguments)
{
    if (arguments.value(1) == QLatin1String("scale"))
        return runBenchScale(arguments.mid(1));
    // A dishonest worker, for `flotilla demo --attack` and the screening tests (not listed:
    // it is a tool of the benchmarks, not something to run against a real fleet).
    if (arguments.value(1) == QLatin1String("attack-worker"))
        return runAttackWorker(arguments.mid(1));
    if (arguments.value(1) == QLatin1String("flood"))
        return runBenchFlood(arguments.mid(1));
    if (arguments.value(1) == QLatin1String("insider"))
        return runBenchInsider(arguments.mid(1));
    if (arguments.value(1) == QLatin1String("parity"))
        return runBenchParity(arguments.mid(1));
    if (arguments.value(1) == QLatin1String("parity-loop"))
        return runBenchParityLoop(arguments.mid(1));
    if (arguments.value(1) == QLatin1String("scaling"))
        return runBenchScaling(arguments.mid(1));
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Benchmarks against a peer run in the same invocation, alternating, with min/median/max over repeats.\n"
        "  trainer      the local trainer vs a bare LibTorch loop: same CNN, batch, threads, data in memory\n"
        "  aggregation  one VC-ASGD assimilation of an 11M-parameter model vs a memcpy of the same bytes\n"
        "  transfer     weights over Flotilla's TLS connection vs openssl speed -evp aes-128-gcm (16 KiB blocks)\n"
        "  accuracy     time to a test accuracy on Fashion-MNIST: Flotilla (2 worker processes) vs PyTorch DDP\n"
        "               (2 processes, gloo) vs a single-process LibTorch loop; --preemption-every adds runs\n"
        "               with workers SIGKILLed\n"
        "  parity       Flotilla vs the plain single-process loop and DDP on several jobs and data sets, 1, 2 and 4\n"
        "               workers, each rule (flotilla bench parity --help)\n"
        "  scale        K simulated workers over TLS against one coordinator (flotilla bench scale --help)\n"
        "  scaling      W emulated machines (cgroup CPU quotas) to a target: speedup over the loop, against DDP\n"
        "               (flotilla bench scaling --help)\n"
        "  flood        idle and stalled connections against a coordinator training with honest workers\n"
        "               (flotilla bench flood --help)\n"
        "  insider      a peer with a valid certificate floods, does not read, claims too much, storms sessions\n"
        "               (flotilla bench insider --help)"));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("benchmark"),
                                 QStringLiteral("trainer, aggregation, transfer, accuracy, scale or flood."));
    parser.addOptions({
        {QStringLiteral("repeats"), QStringLiteral("Repetitions (min, median and max are reported)."),
         QStringLiteral("n"), QStringLiteral("5")},
        {QStringLiteral("megabytes"), QStringLiteral("transfer: size of the weights in MiB."), QStringLiteral("n"),
         QStringLiteral("45")},
        {QStringLiteral("samples"), QStringLiteral("trainer: training samples per run."), QStringLiteral("n"),
         QStringLiteral("6000")},
        {QStringLiteral("threads"), QStringLiteral("trainer: LibTorch threads."), QStringLiteral("n"),
         QStringLiteral("1")},
        {QStringLiteral("parameters"), QStringLiteral("aggregation: model size (ResNet-18: 11.7M)."),
         QStringLiteral("n"), QStringLiteral("11689512")},
        {QStringLiteral("target"), QStringLiteral("accuracy: the test accuracy to reach."), QStringLiteral("fraction"),
         QStringLiteral("0.88")},
        {QStringLiteral("epochs"), QStringLiteral("accuracy: at most this many epochs per run."), QStringLiteral("n"),
         QStringLiteral("10")},
        {QStringLiteral("max-seconds"), QStringLiteral("accuracy: give a run up after this long."),
         QStringLiteral("seconds"), QStringLiteral("600")},
        {QStringLiteral("preemption-every"),
         QStringLiteral("accuracy: also run Flotilla with a worker SIGKILLed this often, and DDP with a rank killed then."),
         QStringLiteral("seconds"), QStringLiteral("0")},
        {QStringLiteral("train-limit"), QStringLiteral("accuracy: train on the first n samples only (0 = all)."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("lr-grid"),
         QStringLiteral("accuracy: learning rates every contender is tuned over (each takes its best)."),
         QStringLiteral("list"), QStringLiteral("0.02,0.05,0.1")},
        {QStringLiteral("batch-grid"),
         QStringLiteral("accuracy: batch sizes per process (per worker, per DDP rank, the loop's) tuned over."),
         QStringLiteral("list"), QStringLiteral("32,64")},
        {QStringLiteral("link"),
         QStringLiteral("accuracy: an emulated link between each worker (DDP rank) and the others, e.g. 50mbit/40ms."),
         QStringLiteral("rate/rtt")},
        {QStringLiteral("slow-worker"),
         QStringLiteral("accuracy: one of the two workers (DDP: rank 1) this many times slower than the other."),
         QStringLiteral("factor"), QStringLiteral("1")},
        {QStringLiteral("compression"), QStringLiteral("accuracy: how Flotilla's results travel: none, fp16 or int8."),
         QStringLiteral("form"), QStringLiteral("none")},
        {QStringLiteral("lr"), QStringLiteral("bare-loop: learning rate."), QStringLiteral("rate"), QStringLiteral("0.03")},
        {QStringLiteral("batch-size"), QStringLiteral("bare-loop: batch size."), QStringLiteral("n"),
         QStringLiteral("32")},
        {QStringLiteral("python"), QStringLiteral("accuracy: Python with torch (Debian's python3-torch)."),
         QStringLiteral("path"), QStringLiteral("/usr/bin/python3")},
        {QStringLiteral("ddp-script"), QStringLiteral("accuracy: the DDP peer (default: bench/ddp_fashion.py)."),
         QStringLiteral("file")},
        {QStringLiteral("data"), QStringLiteral("Fashion-MNIST folder (default: Debian's dataset-fashion-mnist)."),
         QStringLiteral("dir")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench")))
        return *stop;
    const QString which = parser.positionalArguments().value(0);
    if (parser.positionalArguments().size() == 1) {
        if (which == QLatin1String("transfer"))
            return benchTransfer(std::clamp(parser.value(QStringLiteral("megabytes")).toInt(), 1, 1024),
                                 std::clamp(parser.value(QStringLiteral("repeats")).toInt(), 1, 1000));
        if (which == QLatin1String("trainer"))
            return benchTrainerPeers(parser);
        if (which == QLatin1String("aggregation"))
            return benchAggregationPeers(parser);
        if (which == QLatin1String("accuracy"))
            return benchAccuracyPeers(parser);
        if (which == QLatin1String("bare-loop"))
            return benchBareLoop(parser);
    }
    std::fprintf(stderr, "flotilla bench: name one benchmark: trainer, aggregation, transfer, accuracy, parity, scale or "
                         "flood\n");
    return ExitUsage;
}

QList<Command> measurementCommands()
{
    return {
        {"demo", "A coordinator and worker processes on this machine, with random SIGKILLs.", runDemoCommand},
        {"bench", "Benchmarks against a peer run in the same invocation (transfer).", runBenchCommand},
    };
}

} // namespace flotilla
