#include "bench/Insider.h"

#include "app/CommandLine.h"
#include "bench/ProcStats.h"
#include "net/Frame.h"
#include "net/Messages.h"
#include "net/WorkerClient.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QThread>
#include <QTimer>

#include <cstdio>
#include <memory>
#include <vector>

namespace flotilla {

namespace {

using net::MessageType;

const QStringList kAttacks{QStringLiteral("baseline"),       QStringLiteral("shard-flood"),    QStringLiteral("request-flood"),
                           QStringLiteral("heartbeat-flood"), QStringLiteral("handback-flood"),
                           QStringLiteral("command-flood"),   QStringLiteral("no-read"),
                           QStringLiteral("oversized"),       QStringLiteral("foreign-result"),
                           QStringLiteral("malformed-header"), QStringLiteral("session-storm")};

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Turns the event loop until done() or the time is up.
bool waitFor(const std::function<bool()> &done, int ms)
{
    QElapsedTimer t;
    t.start();
    while (!done()) {
        if (t.elapsed() >= ms)
            return false;
        QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
        QThread::usleep(500);
    }
    return true;
}

struct Identity
{
    QString host;
    quint16 port = 0;
    QByteArray caPem, certPem, keyPem;
};

Result<Identity> enroll(const QString &stateDir, const QString &name, const QString &token)
{
    net::WorkerClient::Options o;
    o.stateDir = stateDir;
    o.name = name;
    net::WorkerClient client(o);
    auto joinToken = net::JoinToken::decode(token);
    if (!joinToken)
        return fail(QStringLiteral("--join: %1").arg(joinToken.error()));
    if (auto configured = client.configure(*joinToken); !configured)
        return configured.takeError();
    bool welcomed = false;
    QString failed;
    QObject::connect(&client, &net::WorkerClient::welcomed, &client, [&] { welcomed = true; });
    QObject::connect(&client, &net::WorkerClient::failed, &client, [&](const QString &why) { failed = why; });
    net::HelloMsg h;
    h.instanceType = QStringLiteral("local");
    h.priceClass = QStringLiteral("volunteer");
    client.start(h);
    if (!waitFor([&] { return welcomed || !failed.isEmpty(); }, 30000) || !failed.isEmpty())
        return fail(QStringLiteral("cannot join as '%1': %2").arg(name, failed.isEmpty() ? QStringLiteral("no Welcome within 30 s") : failed));
    client.stop();
    waitFor([] { return false; }, 200);
    Identity id;
    const QJsonObject c = QJsonDocument::fromJson(readFile(stateDir + QStringLiteral("/coordinator.json"))).object();
    id.host = c.value(QStringLiteral("host")).toString();
    id.port = quint16(c.value(QStringLiteral("port")).toInt());
    id.caPem = readFile(stateDir + QStringLiteral("/ca.pem"));
    id.certPem = readFile(stateDir + QStringLiteral("/cert.pem"));
    id.keyPem = readFile(stateDir + QStringLiteral("/key.pem"));
    return id;
}

// One session under the insider's certificate (withCertificate false: as an enrolling
// worker's probe, which only completes the handshake).
std::unique_ptr<QSslSocket> session(const Identity &id, bool withCertificate = true)
{
    auto s = std::make_unique<QSslSocket>();
    QSslConfiguration config = QSslConfiguration::defaultConfiguration();
    config.setProtocol(QSsl::TlsV1_3);
    config.setCaCertificates({QSslCertificate(id.caPem)});
    config.setPeerVerifyMode(QSslSocket::VerifyPeer);
    if (withCertificate) {
        config.setLocalCertificate(QSslCertificate(id.certPem));
        config.setPrivateKey(QSslKey(id.keyPem, QSsl::Ec));
    }
    s->setSslConfiguration(config);
    s->connectToHostEncrypted(id.host, id.port);
    return s;
}

QByteArray hello()
{
    net::HelloMsg h;
    h.instanceType = QStringLiteral("local"); // known to the price table: the job lets it in
    h.priceClass = QStringLiteral("volunteer");
    return net::encodeMessage(MessageType::Hello, h.encode());
}

// The Error among what a session read, or empty.
QString errorIn(const QByteArray &received)
{
    net::MessageReader reader;
    reader.feed(received);
    for (;;) {
        auto m = reader.next();
        if (!m || !m->has_value())
            return {};
        if ((*m)->type == MessageType::Error)
            return (*m)->header.value(QStringLiteral("reason")).toString();
    }
}

struct Figures
{
    QString attack;
    qint64 sent = 0;
    qint64 closedMs = -1; // as the insider saw it
    QString reason;
    double extraRssMiB = -1;
    double cpuPercent = -1;
    qint64 probeMaxMs = -1;
    int probes = 0;
};

// Samples the coordinator and probes its port while an attack runs.
class Watch
{
public:
    Watch(const Identity &id, qint64 pid)
        : m_id(id)
        , m_pid(pid)
    {
        m_clock.start();
        m_baseRss = pid > 0 ? statusKiB(pid, "VmRSS") : -1;
        m_baseCpu = pid > 0 ? cpuSeconds(pid) : -1;
        m_peakRss = m_baseRss;
        m_sampler.setInterval(50);
        QObject::connect(&m_sampler, &QTimer::timeout, [this] {
            if (m_pid > 0)
                m_peakRss = std::max(m_peakRss, statusKiB(m_pid, "VmRSS"));
            probe();
        });
        m_sampler.start();
    }
    void finish(Figures &f)
    {
        // At least a second: CPU over a few milliseconds says nothing.
        if (m_clock.elapsed() < 1000)
            waitFor([] { return false; }, int(1000 - m_clock.elapsed()));
        m_sampler.stop();
        const double seconds = double(m_clock.elapsed()) / 1000.0;
        if (m_pid > 0 && m_baseRss >= 0) {
            f.extraRssMiB = double(m_peakRss - m_baseRss) / 1024.0;
            f.cpuPercent = 100.0 * (cpuSeconds(m_pid) - m_baseCpu) / std::max(0.001, seconds);
        }
        // A probe still waiting counts as long as it has waited.
        for (const auto &p : m_probes)
            if (!p.socket->isEncrypted())
                m_probeMax = std::max(m_probeMax, p.started.elapsed());
        f.probeMaxMs = m_probeMax;
        f.probes = m_probeCount;
    }

private:
    struct Probe
    {
        std::unique_ptr<QSslSocket> socket;
        QElapsedTimer started;
    };
    void probe()
    {
        for (auto it = m_probes.begin(); it != m_probes.end();) {
            if (it->socket->isEncrypted()) {
                m_probeMax = std::max(m_probeMax, it->started.elapsed());
                it->socket->abort();
                it = m_probes.erase(it);
            } else if (it->started.elapsed() > 10000) {
                m_probeMax = std::max(m_probeMax, it->started.elapsed());
                it = m_probes.erase(it);
            } else {
                ++it;
            }
        }
        if (m_clock.elapsed() - m_lastProbe < 200)
            return;
        m_lastProbe = m_clock.elapsed();
        Probe p;
        p.started.start();
        p.socket = session(m_id, false);
        m_probes.push_back(std::move(p));
        ++m_probeCount;
    }

    Identity m_id;
    qint64 m_pid = 0;
    QElapsedTimer m_clock;
    qint64 m_baseRss = -1, m_peakRss = -1;
    double m_baseCpu = -1;
    QTimer m_sampler;
    std::vector<Probe> m_probes;
    qint64 m_lastProbe = -1000;
    qint64 m_probeMax = 0;
    int m_probeCount = 0;
};

QByteArray floodOf(MessageType type, const QCborMap &header, int count)
{
    const QByteArray one = net::encodeMessage(type, header);
    QByteArray all;
    all.reserve(one.size() * count);
    for (int i = 0; i < count; ++i)
        all += one;
    return all;
}

Figures run(const QString &attack, const Identity &id, qint64 pid, int count, int sessions, int seconds)
{
    Figures f;
    f.attack = attack;
    QElapsedTimer clock;
    Watch watch(id, pid);
    const int limitMs = seconds * 1000;

    if (attack == QLatin1String("baseline")) {
        // No attack: what the coordinator costs and how fast its port answers meanwhile.
        waitFor([] { return false; }, 3000);
        f.closedMs = 0;
        f.reason = QStringLiteral("(no attack: 3 s of the honest fleet alone)");
        watch.finish(f);
        return f;
    }
    if (attack == QLatin1String("session-storm")) {
        std::vector<std::unique_ptr<QSslSocket>> all;
        std::vector<QByteArray> received(static_cast<std::size_t>(sessions), QByteArray());
        clock.start();
        for (int i = 0; i < sessions; ++i) {
            all.push_back(session(id));
            QSslSocket *s = all.back().get();
            QObject::connect(s, &QSslSocket::encrypted, s, [s] { s->write(hello()); });
            QObject::connect(s, &QIODevice::readyRead, s, [s, &received, i] { received[std::size_t(i)] += s->readAll(); });
            ++f.sent;
        }
        // Done when every session has been answered (a Welcome or an Error) or closed.
        waitFor([&] {
            for (std::size_t i = 0; i < all.size(); ++i)
                if (received[i].isEmpty() && all[i]->state() != QAbstractSocket::UnconnectedState)
                    return false;
            return true;
        }, limitMs);
        f.closedMs = clock.elapsed();
        for (const QByteArray &r : received)
            if (const QString e = errorIn(r); !e.isEmpty()) {
                f.reason = e;
                if (e.contains(QLatin1String("refused for")))
                    break;
            }
        for (auto &s : all)
            s->abort();
        watch.finish(f);
        return f;
    }

    auto s = session(id);
    QByteArray received;
    bool reading = true;
    QObject::connect(s.get(), &QIODevice::readyRead, s.get(), [&] {
        if (reading)
            received += s->readAll();
    });
    if (!waitFor([&] { return s->isEncrypted() || s->state() == QAbstractSocket::UnconnectedState; }, 10000)
        || !s->isEncrypted()) {
        f.reason = QStringLiteral("could not connect: %1").arg(s->errorString());
        watch.finish(f);
        return f;
    }
    s->write(hello());
    if (!waitFor([&] { return received.size() > 0 || s->state() != QAbstractSocket::ConnectedState; }, 10000)) {
        f.reason = QStringLiteral("no Welcome");
        watch.finish(f);
        return f;
    }
    received.clear();
    // The floods and no-read never read again: the socket takes at most 16 KiB, the rest
    // waits in the kernel and, unless the coordinator bounds it, in the coordinator.
    reading = !(attack == QLatin1String("no-read") || attack.endsWith(QLatin1String("-flood")));
    if (!reading)
        s->setReadBufferSize(16 * 1024);
    clock.start();
    const auto closed = [&] { return s->state() != QAbstractSocket::ConnectedState; };
    if (attack.endsWith(QLatin1String("-flood"))) {
        const QString kind = attack.chopped(6);
        const MessageType type = kind == QLatin1String("shard")       ? MessageType::ShardRequest
                                 : kind == QLatin1String("request")   ? MessageType::Request
                                 : kind == QLatin1String("heartbeat") ? MessageType::Heartbeat
                                 : kind == QLatin1String("handback")  ? MessageType::HandBack
                                                                      : MessageType::Command;
        const QCborMap header{{QStringLiteral("shard"), 0},         {QStringLiteral("lease"), 987654321},
                              {QStringLiteral("samples_per_second"), 1.0}, {QStringLiteral("reason"), QStringLiteral("x")},
                              {QStringLiteral("command"), QStringLiteral("pause")}};
        s->write(floodOf(type, header, count));
        f.sent = count;
    } else if (attack == QLatin1String("no-read")) {
        // Within the ShardRequest rate (20 a second), one every 100 ms.
        QTimer ask;
        QObject::connect(&ask, &QTimer::timeout, s.get(), [&] {
            if (!closed()) {
                s->write(net::encodeMessage(MessageType::ShardRequest, QCborMap{{QStringLiteral("shard"), qint64(f.sent % 3)}}));
                ++f.sent;
            }
        });
        ask.start(100);
        waitFor(closed, limitMs);
    } else if (attack == QLatin1String("oversized")) {
        const QCborMap announce{{QStringLiteral("lease"), 1}, {QStringLiteral("payload_size"), qint64(4) << 30}};
        s->write(net::encodeFrame(net::kProtocolVersion, std::uint8_t(MessageType::Result), announce.toCborValue().toCbor(),
                                  QByteArray(1024, 'w')));
        f.sent = 1;
    } else if (attack == QLatin1String("malformed-header")) {
        // A field of the wrong type: the header must not reach the coordinator's handlers.
        s->write(net::encodeMessage(MessageType::Heartbeat, QCborMap{{QStringLiteral("lease"), QStringLiteral("x")}}));
        f.sent = 1;
    } else if (attack == QLatin1String("foreign-result")) {
        s->write(net::encodeMessage(MessageType::Result,
                                    QCborMap{{QStringLiteral("lease"), 987654321}, {QStringLiteral("loss"), 0.1},
                                             {QStringLiteral("sample_steps"), 1}, {QStringLiteral("covered"), 1},
                                             {QStringLiteral("seconds"), 1.0}},
                                    QByteArray(64, '\0')));
        f.sent = 1;
    }
    // The peer's close is seen once what it sent has been read: read after half a second
    // (closed_ms of a peer that does not read says when it looked, at the soonest), and wait.
    if (!reading) {
        waitFor([] { return false; }, 500);
        s->setReadBufferSize(0);
        reading = true;
        received += s->readAll();
    }
    waitFor(closed, std::max<qint64>(1, limitMs - clock.elapsed()));
    f.closedMs = closed() ? clock.elapsed() : -1;
    received += s->readAll();
    f.reason = errorIn(received);
    if (f.reason.isEmpty() && closed())
        f.reason = QStringLiteral("(closed: %1)").arg(s->errorString());
    watch.finish(f);
    return f;
}

} // namespace

int runBenchInsider(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "An insider against a running coordinator: a valid worker certificate (enrolled with --join) that floods, does "
        "not read, claims oversized payloads or foreign leases, or storms sessions. Prints, per attack, what the "
        "coordinator did and (with --pid) what it cost it. Attacks: ")
        + kAttacks.join(QStringLiteral(", ")));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("join"), QStringLiteral("A join token of the coordinator (each attack enrolls once)."),
         QStringLiteral("token")},
        {QStringLiteral("state-dir"), QStringLiteral("Folder for the insider's identities (one per attack)."),
         QStringLiteral("dir")},
        {QStringLiteral("attack"), QStringLiteral("One attack, or all."), QStringLiteral("kind"), QStringLiteral("all")},
        {QStringLiteral("pid"), QStringLiteral("The coordinator's process, to measure its RSS and CPU."),
         QStringLiteral("pid"), QStringLiteral("0")},
        {QStringLiteral("count"), QStringLiteral("Messages per flood."), QStringLiteral("n"), QStringLiteral("20000")},
        {QStringLiteral("sessions"), QStringLiteral("Sessions in the storm."), QStringLiteral("n"), QStringLiteral("64")},
        {QStringLiteral("seconds"), QStringLiteral("The longest an attack runs."), QStringLiteral("s"),
         QStringLiteral("30")},
    });
    parser.process(arguments);
    const QString token = parser.value(QStringLiteral("join"));
    const QString stateDir = parser.value(QStringLiteral("state-dir"));
    if (token.isEmpty() || stateDir.isEmpty()) {
        std::fprintf(stderr, "flotilla bench insider: --join and --state-dir are required\n");
        return ExitUsage;
    }
    QStringList attacks{parser.value(QStringLiteral("attack"))};
    if (attacks.front() == QLatin1String("all"))
        attacks = kAttacks;
    for (const QString &a : attacks)
        if (!kAttacks.contains(a)) {
            std::fprintf(stderr, "flotilla bench insider: unknown attack '%s' (%s)\n", qPrintable(a),
                         qPrintable(kAttacks.join(QStringLiteral(", "))));
            return ExitUsage;
        }
    const qint64 pid = parser.value(QStringLiteral("pid")).toLongLong();
    const int count = std::max(1, parser.value(QStringLiteral("count")).toInt());
    const int sessions = std::max(1, parser.value(QStringLiteral("sessions")).toInt());
    const int seconds = std::max(1, parser.value(QStringLiteral("seconds")).toInt());

    std::printf("%-16s %7s %10s %10s %8s %10s  %s\n", "attack", "sent", "closed_ms", "extra_MiB", "cpu_%",
                "probe_max", "reason");
    int failures = 0;
    for (const QString &attack : attacks) {
        if (attack == QLatin1String("baseline") && pid <= 0)
            continue;
        auto id = enroll(QDir(stateDir).filePath(attack), QStringLiteral("insider-") + attack, token);
        if (!id) {
            std::printf("%-16s enrol failed: %s\n", qPrintable(attack), qPrintable(id.error()));
            ++failures;
            continue;
        }
        const Figures f = run(attack, *id, pid, count, sessions, seconds);
        std::printf("%-16s %7lld %10lld %10.1f %8.1f %10lld  %s\n", qPrintable(f.attack), f.sent, f.closedMs,
                    f.extraRssMiB, f.cpuPercent, f.probeMaxMs, qPrintable(f.reason.left(300)));
        std::fflush(stdout);
        if (f.closedMs < 0)
            ++failures;
    }
    return failures == 0 ? ExitOk : ExitFailure;
}

} // namespace flotilla
