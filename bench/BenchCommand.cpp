// `flotilla bench`: measurements that compare Flotilla with a peer run in the same
// invocation. `transfer`, here, sends a model's weights over Flotilla's TLS connection on
// loopback and compares the rate with what `openssl speed` gets from the same cipher on this
// machine; the others are in BenchPeers.cpp and BenchScale.cpp.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "bench/Attacks.h"
#include "bench/BenchFlood.h"
#include "bench/BenchPeers.h"
#include "bench/BenchScale.h"

#include "net/Pki.h"
#include "net/TlsListener.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QElapsedTimer>
#include <QProcess>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QTemporaryDir>
#include <QThread>

#include <algorithm>
#include <cstdio>

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
    QSslSocket socket;
    QSslConfiguration config = QSslConfiguration::defaultConfiguration();
    config.setProtocol(QSsl::TlsV1_3);
    config.setCaCertificates({QSslCertificate(identity.ca.certificatePem)});
    config.setLocalCertificate(QSslCertificate(cert));
    config.setPrivateKey(QSslKey(key, QSsl::Ec));
    socket.setSslConfiguration(config);
    socket.connectToHostEncrypted(QStringLiteral("127.0.0.1"), port);
    net::MessageReader reader;
    auto await = [&](MessageType type) {
        for (;;) {
            auto m = reader.next();
            if (!m)
                return false;
            if (m->has_value() && (*m)->type == type)
                return true;
            if (m->has_value())
                continue;
            if (!socket.waitForReadyRead(30000))
                return false;
            reader.feed(socket.readAll());
        }
    };
    if (!socket.waitForEncrypted(10000)) {
        std::fprintf(stderr, "flotilla bench: TLS connection failed: %s\n", socket.errorString().toUtf8().constData());
        stop();
        return ExitFailure;
    }
    socket.write(net::encodeMessage(MessageType::Hello, {}));
    if (!await(MessageType::Welcome)) {
        stop();
        return ExitFailure;
    }
    QByteArray weights(qsizetype(megabytes) << 20, Qt::Uninitialized);
    QRandomGenerator(1).fillRange(reinterpret_cast<quint32 *>(weights.data()), weights.size() / 4);

    std::printf("Transfer of %d MiB of weights over TLS 1.3 on loopback (encode, send, receive, check SHA-256, ack), "
                "%d times; then openssl speed -evp aes-128-gcm at 16 KiB blocks.\n", megabytes, repeats);
    std::vector<double> rates;
    for (int i = 0; i < repeats; ++i) {
        QElapsedTimer timer;
        timer.start();
        socket.write(net::encodeMessage(MessageType::Result, QCborMap{{QStringLiteral("lease"), i}}, weights));
        while (socket.bytesToWrite() > 0)
            socket.waitForBytesWritten(30000);
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
    const double median = rates[rates.size() / 2];
    const double cipher = opensslAesGcmRate(3);
    std::printf("  Flotilla TLS transfer   min %.0f, median %.0f, max %.0f MB/s\n", rates.front() / 1e6, median / 1e6,
                rates.back() / 1e6);
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
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Benchmarks against a peer run in the same invocation, alternating, with min/median/max over repeats.\n"
        "  trainer      the local trainer vs a bare LibTorch loop: same CNN, batch, threads, data in memory\n"
        "  aggregation  one VC-ASGD assimilation of an 11M-parameter model vs a memcpy of the same bytes\n"
        "  transfer     weights over Flotilla's TLS connection vs openssl speed -evp aes-128-gcm (16 KiB blocks)\n"
        "  accuracy     time to a test accuracy on Fashion-MNIST: Flotilla (2 worker processes) vs PyTorch DDP\n"
        "               (2 processes, gloo) vs a single-process LibTorch loop; --preemption-every adds runs\n"
        "               with workers SIGKILLed\n"
        "  scale        K simulated workers over TLS against one coordinator (flotilla bench scale --help)\n"
        "  flood        idle and stalled connections against a coordinator training with honest workers\n"
        "               (flotilla bench flood --help)"));
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
    std::fprintf(stderr, "flotilla bench: name one benchmark: trainer, aggregation, transfer, accuracy, scale or flood\n");
    return ExitUsage;
}

} // namespace flotilla
