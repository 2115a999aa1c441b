#include "bench/BenchFlood.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/ProcStats.h"
#include "common/Statistics.h"

#include "engine/coordination/Store.h"
#include "net/Frame.h"
#include "net/Messages.h"
#include "net/Pki.h"
#include "net/TrustStore.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QPointer>
#include <QProcess>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

namespace flotilla {

namespace {

using net::MessageType;

// A worker not welcomed within this long counts as locked out.
constexpr int kJoinTimeoutMs = 60000;
const QString kLoopback = QStringLiteral("127.0.0.1");

struct Settings
{
    int idle = 1000;
    int stalled = 1000;
    int silentTls = 0;
    int sources = 64;
    int workers = 2;
    int attackSeconds = 20;
    double rateSeconds = 3;
    int rateConcurrency = 4;
    int rateRepeats = 3;
    QString binary;   // the flotilla whose serve and worker are measured
    QString baseline; // another build measured the same way, or empty
    QStringList serveFlags;
    QString keep;
};

QByteArray readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Turns the event loop until done() holds or timeoutMs have passed, asking every pollMs;
// whether done() holds.
bool waitFor(const std::function<bool()> &done, qint64 timeoutMs, int pollMs = 5)
{
    if (done())
        return true;
    QEventLoop loop;
    QTimer poll;
    QElapsedTimer clock;
    clock.start();
    QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
        if (done() || clock.elapsed() >= timeoutMs)
            loop.quit();
    });
    poll.start(pollMs);
    loop.exec();
    return done();
}

void sleepWithEvents(qint64 ms)
{
    QElapsedTimer clock;
    clock.start();
    waitFor([&] { return clock.elapsed() >= ms; }, ms + 1000);
}

// Assimilations so far: the sequence number of the job's latest global state.
qint64 assimilations(const QString &db)
{
    auto store = QFileInfo::exists(db) ? Store::open(db) : Result<std::unique_ptr<Store>>(fail(QString()));
    if (!store)
        return 0;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return 0;
    auto state = (*store)->latestState((*job)->id);
    return state && state->has_value() ? (*state)->seq : 0;
}

// A TLS record that announces 512 bytes of handshake and brings only the start of a
// ClientHello (type, length, version, random): the coordinator waits for the rest.
QByteArray partialClientHello()
{
    return QByteArray::fromHex("1603010200010001fc0303") + QByteArray(32, '\x5a');
}

// `flotilla serve` under test, on loopback, and the join token it wrote.
class ServeProcess
{
public:
    ServeProcess(QString binary, QString root) : m_binary(std::move(binary)), m_root(std::move(root)) {}
    ~ServeProcess() { stop(); }

    Result<void> start(const QStringList &flags)
    {
        QDir().mkpath(m_root);
        const QString tokenFile = path(QStringLiteral("token"));
        QFile::remove(tokenFile);
        m_process.setProcessChannelMode(QProcess::MergedChannels);
        m_process.setStandardOutputFile(log(), QIODevice::Append);
        m_process.start(m_binary, QStringList{QStringLiteral("serve"), QStringLiteral("--run-dir"), path(QStringLiteral("run")),
                                              QStringLiteral("--identity-dir"), path(QStringLiteral("identity")),
                                              QStringLiteral("--listen"), kLoopback, QStringLiteral("--host"), kLoopback,
                                              QStringLiteral("--port"), QStringLiteral("0"), QStringLiteral("--token-file"),
                                              tokenFile, QStringLiteral("--token-uses"), QStringLiteral("1000"),
                                              QStringLiteral("--quiet")}
                                      + flags);
        const bool ready = waitFor(
            [&] {
                if (m_process.state() == QProcess::NotRunning)
                    return true;
                auto token = net::JoinToken::decode(QString::fromUtf8(readAll(tokenFile)));
                m_caPem = readAll(path(QStringLiteral("identity/ca.pem")));
                if (!token || net::certificateFingerprint(m_caPem) != token->caFingerprint)
                    return false;
                m_token = *token;
                return true;
            },
            300000, 100);
        if (!ready || m_process.state() == QProcess::NotRunning)
            return fail(QStringLiteral("%1 serve did not start; the end of its output:\n%2")
                            .arg(m_binary, QString::fromUtf8(readAll(log()).right(2000))));
        return {};
    }

    void stop()
    {
        if (m_process.state() == QProcess::NotRunning)
            return;
        m_process.terminate();
        if (!m_process.waitForFinished(60000)) {
            m_process.kill();
            m_process.waitForFinished(10000);
        }
    }

    qint64 pid() const { return m_process.processId(); }
    bool running() const { return m_process.state() != QProcess::NotRunning; }
    const net::JoinToken &token() const { return m_token; }
    const QByteArray &caPem() const { return m_caPem; }
    QString db() const { return path(QStringLiteral("run/flotilla.db")); }
    QString log() const { return path(QStringLiteral("serve.out")); }
    QString path(const QString &name) const { return QDir(m_root).filePath(name); }

private:
    QString m_binary;
    QString m_root;
    QProcess m_process;
    net::JoinToken m_token;
    QByteArray m_caPem;
};

// `flotilla worker` under test: notes when the coordinator welcomes it ("connected to" in
// its --verbose log), counted from the process's start.
class WorkerProcess
{
public:
    WorkerProcess(QString binary, QString stateDir, QString name)
        : m_binary(std::move(binary)), m_stateDir(std::move(stateDir)), m_name(std::move(name))
    {
    }
    ~WorkerProcess() { kill(); }

    void start(const QString &token)
    {
        kill();
        m_welcomedMs = -1;
        m_output.clear();
        m_process = std::make_unique<QProcess>();
        m_process->setProcessChannelMode(QProcess::MergedChannels);
        QObject::connect(m_process.get(), &QProcess::readyRead, m_process.get(), [this] {
            m_output += m_process->readAll();
            if (m_welcomedMs < 0 && m_output.contains("connected to "))
                m_welcomedMs = m_clock.elapsed();
        });
        m_clock.start();
        m_process->start(m_binary, {QStringLiteral("worker"), QStringLiteral("--join"), token, QStringLiteral("--state-dir"),
                                    m_stateDir, QStringLiteral("--name"), m_name, QStringLiteral("--threads"),
                                    QStringLiteral("1"), QStringLiteral("--verbose")});
    }

    // SIGKILL, as a spot instance taken away. What the process printed is appended to
    // worker-output.log in its state folder (kept with --keep).
    void kill()
    {
        if (!m_process)
            return;
        if (m_process->state() != QProcess::NotRunning) {
            m_process->kill();
            m_process->waitForFinished(10000);
        }
        m_output += m_process->readAll();
        QFile log(QDir(m_stateDir).filePath(QStringLiteral("worker-output.log")));
        if (!m_output.isEmpty() && log.open(QIODevice::Append))
            log.write(m_output);
        m_output.clear();
    }

    // Milliseconds from the process's start to the coordinator's Welcome; -1 until then.
    qint64 welcomedMs() const { return m_welcomedMs; }
    bool waitWelcomed() { return waitFor([&] { return m_welcomedMs >= 0 || !running(); }, kJoinTimeoutMs) && m_welcomedMs >= 0; }
    bool running() const { return m_process && m_process->state() != QProcess::NotRunning; }
    QString output() const { return QString::fromUtf8(m_output.right(1500)); }

private:
    QString m_binary;
    QString m_stateDir;
    QString m_name;
    std::unique_ptr<QProcess> m_process;
    QByteArray m_output;
    QElapsedTimer m_clock;
    qint64 m_welcomedMs = -1;
};

// Hostile connections from many loopback addresses (127.0.0.2, .3, ...; on Linux every
// 127.x.y.z reaches loopback), each reopened as soon as the coordinator closes it.
class Flood : public QObject
{
public:
    Flood(quint16 port, const Settings &s) : m_port(port)
    {
        const int total = s.idle + s.stalled + s.silentTls;
        for (int i = 0; i < total; ++i) {
            const Kind kind = i < s.idle ? Kind::Idle : i < s.idle + s.stalled ? Kind::Stalled : Kind::SilentTls;
            Slot slot;
            slot.kind = kind;
            slot.from = QHostAddress(QHostAddress(kLoopback).toIPv4Address() + 1 + quint32(i % s.sources));
            m_slots.push_back(slot);
        }
    }

    void start()
    {
        m_stopped = false;
        for (std::size_t i = 0; i < m_slots.size(); ++i)
            open(i);
    }

    void stop()
    {
        m_stopped = true;
        for (Slot &s : m_slots)
            if (QAbstractSocket *socket = s.socket) {
                socket->disconnect(this);
                socket->abort();
                socket->deleteLater();
                s.socket = nullptr;
            }
        m_open = 0;
    }

    int open() const { return m_open; }
    qint64 opened() const { return m_opened; }
    qint64 closedByCoordinator() const { return m_closed; }
    qint64 failedToConnect() const { return m_failed; }
    int size() const { return int(m_slots.size()); }

private:
    enum class Kind { Idle, Stalled, SilentTls };
    struct Slot
    {
        Kind kind = Kind::Idle;
        QHostAddress from;
        QPointer<QAbstractSocket> socket;
        bool up = false;
    };

    void open(std::size_t i)
    {
        Slot &slot = m_slots[i];
        QAbstractSocket *socket = nullptr;
        QSslSocket *tls = nullptr;
        if (slot.kind == Kind::SilentTls) {
            tls = new QSslSocket(this);
            QSslConfiguration config = QSslConfiguration::defaultConfiguration();
            config.setProtocol(QSsl::TlsV1_3);
            config.setPeerVerifyMode(QSslSocket::VerifyNone);
            tls->setSslConfiguration(config);
            socket = tls;
        } else {
            socket = new QTcpSocket(this);
        }
        slot.socket = socket;
        slot.up = false;
        socket->bind(slot.from);
        connect(socket, &QAbstractSocket::connected, this, [this, i, socket] {
            Slot &s = m_slots[i];
            if (s.socket != socket)
                return;
            s.up = true;
            ++m_open;
            if (s.kind == Kind::Stalled)
                socket->write(partialClientHello());
        });
        connect(socket, &QAbstractSocket::disconnected, this, [this, i, socket] { closed(i, socket); });
        connect(socket, &QAbstractSocket::errorOccurred, this, [this, i, socket] { closed(i, socket); });
        ++m_opened;
        if (tls)
            tls->connectToHostEncrypted(kLoopback, m_port);
        else
            socket->connectToHost(kLoopback, m_port);
    }

    void closed(std::size_t i, QAbstractSocket *socket)
    {
        Slot &slot = m_slots[i];
        if (slot.socket != socket)
            return;
        if (slot.up) {
            --m_open;
            ++m_closed;
        } else {
            ++m_failed;
        }
        const bool wasUp = slot.up;
        slot.up = false;
        slot.socket = nullptr;
        socket->disconnect(this);
        socket->deleteLater();
        // At once, as an attacker would; a connection that could not be made waits a little.
        if (!m_stopped)
            QTimer::singleShot(wasUp ? 0 : 100, this, [this, i] {
                if (!m_stopped && !m_slots[i].socket)
                    open(i);
            });
    }

    quint16 m_port;
    std::vector<Slot> m_slots;
    bool m_stopped = true;
    int m_open = 0;
    qint64 m_opened = 0;
    qint64 m_closed = 0;
    qint64 m_failed = 0;
};

struct Credentials
{
    QByteArray certificatePem;
    QByteArray keyPem;
};

// Joins the coordinator the way a worker does (Redeem with a CSR), for the handshake loop.
Result<Credentials> enroll(const ServeProcess &c, const QString &name)
{
    auto key = net::generatePrivateKeyPem();
    if (!key)
        return key.takeError();
    auto csr = net::createCertificateRequest(*key, name);
    if (!csr)
        return csr.takeError();
    QSslSocket socket;
    QSslConfiguration config = QSslConfiguration::defaultConfiguration();
    config.setProtocol(QSsl::TlsV1_3);
    config.setCaCertificates({QSslCertificate(c.caPem())});
    config.setPeerVerifyMode(QSslSocket::VerifyPeer);
    socket.setSslConfiguration(config);
    socket.connectToHostEncrypted(kLoopback, c.token().port);
    if (!socket.waitForEncrypted(10000))
        return fail(QStringLiteral("cannot reach the coordinator over TLS: %1").arg(socket.errorString()));
    socket.write(net::encodeMessage(net::RedeemMsg{c.token().id, c.token().secret, name}, *csr));
    net::MessageReader reader;
    while (socket.waitForReadyRead(10000)) {
        reader.feed(socket.readAll());
        auto m = reader.next();
        if (!m)
            return fail(m.error());
        if (!m->has_value())
            continue;
        if ((*m)->type != MessageType::Enrolled) {
            const auto error = net::ErrorMsg::decode((*m)->header);
            return fail(QStringLiteral("the join was answered with %1: %2")
                            .arg(net::describe((*m)->type), error ? error->reason : error.error()));
        }
        return Credentials{(*m)->payload, *key};
    }
    return fail(QStringLiteral("no answer to the join"));
}

struct Rate
{
    double perSecond = 0;
    qint64 done = 0;
    qint64 failed = 0;
};

// Mutual-TLS handshakes, `concurrency` at a time, for `seconds`. One counts once the
// coordinator has finished its side: in TLS 1.3 it sends session tickets only after it has
// checked the client's certificate and Finished.
Rate handshakeRate(quint16 port, const QByteArray &caPem, const Credentials &credentials, double seconds, int concurrency)
{
    QSslConfiguration config = QSslConfiguration::defaultConfiguration();
    config.setProtocol(QSsl::TlsV1_3);
    config.setCaCertificates({QSslCertificate(caPem)});
    config.setPeerVerifyMode(QSslSocket::VerifyPeer);
    config.setLocalCertificate(QSslCertificate(credentials.certificatePem));
    config.setPrivateKey(QSslKey(credentials.keyPem, QSsl::Ec));
    config.setSslOption(QSsl::SslOptionDisableSessionPersistence, false);
    Rate rate;
    QElapsedTimer clock;
    clock.start();
    const qint64 endMs = qint64(seconds * 1000);
    int active = 0;
    std::function<void()> next = [&] {
        if (clock.elapsed() >= endMs)
            return;
        auto *socket = new QSslSocket;
        socket->setSslConfiguration(config);
        ++active;
        auto finish = [&, socket](bool ok) {
            socket->disconnect();
            // Not from inside its TLS call (a session ticket arrives in the middle of one).
            QMetaObject::invokeMethod(
                socket,
                [socket] {
                    socket->abort();
                    socket->deleteLater();
                },
                Qt::QueuedConnection);
            ++(ok ? rate.done : rate.failed);
            --active;
            next();
        };
        QObject::connect(socket, &QSslSocket::newSessionTicketReceived, socket, [finish] { finish(true); });
        QObject::connect(socket, &QAbstractSocket::errorOccurred, socket, [finish] { finish(false); });
        socket->connectToHostEncrypted(kLoopback, port);
    };
    for (int i = 0; i < concurrency; ++i)
        next();
    waitFor([&] { return active == 0; }, endMs + 30000);
    rate.perSecond = double(rate.done) / (double(clock.elapsed()) / 1000.0);
    return rate;
}

struct Figures
{
    qint64 restartQuietMs = -1;
    qint64 restartAttackMs = -1;
    qint64 freshAfterMs = -1;
    double rssBeforeMiB = 0;
    double rssPeakMiB = 0;
    double cpuQuiet = 0;  // cores
    double cpuAttack = 0; // cores
    double pacePerSecondQuiet = 0;
    double pacePerSecondAttack = 0;
    int heldAfterRampUp = 0;
    qint64 opened = 0;
    qint64 closedByCoordinator = 0;
    qint64 failedToConnect = 0;
    double attackSeconds = 0;
};

QString seconds(qint64 ms)
{
    return ms < 0 ? QStringLiteral("not welcomed within %1 s").arg(kJoinTimeoutMs / 1000)
                  : QStringLiteral("%1 s to Welcome").arg(double(ms) / 1000.0, 0, 'f', 2);
}

Result<Figures> scenario(const Settings &s, const QString &binary, const QString &root)
{
    ServeProcess coordinator(binary, root);
    if (auto started = coordinator.start(s.serveFlags); !started)
        return started.takeError();
    const QString token = coordinator.token().encode();
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    for (int i = 1; i <= s.workers; ++i) {
        workers.push_back(std::make_unique<WorkerProcess>(binary, QDir(root).filePath(QStringLiteral("worker-%1").arg(i)),
                                                   QStringLiteral("honest-%1").arg(i)));
        workers.back()->start(token);
    }
    for (auto &w : workers)
        if (!w->waitWelcomed())
            return fail(QStringLiteral("an honest worker did not join before the attack; its output:\n%1").arg(w->output()));
    // Training settles in before anything is measured.
    waitFor([&] { return assimilations(coordinator.db()) >= 1; }, 120000, 250);
    const qint64 pid = coordinator.pid();
    Figures f;

    // Quiet: the coordinator with its honest workers only.
    {
        const double cpu0 = cpuSeconds(pid);
        const qint64 a0 = assimilations(coordinator.db());
        QElapsedTimer clock;
        clock.start();
        sleepWithEvents(5000);
        f.cpuQuiet = (cpuSeconds(pid) - cpu0) / (double(clock.elapsed()) / 1000.0);
        f.pacePerSecondQuiet = double(assimilations(coordinator.db()) - a0) / (double(clock.elapsed()) / 1000.0);
        f.rssBeforeMiB = double(statusKiB(pid, "VmRSS")) / 1024.0;
        workers.front()->kill();
        workers.front()->start(token);
        workers.front()->waitWelcomed();
        f.restartQuietMs = workers.front()->welcomedMs();
    }

    // The attack: ramp up, then hold; an honest worker is restarted half way.
    Flood flood(coordinator.token().port, s);
    flood.start();
    waitFor([&] { return flood.opened() >= flood.size(); }, 10000);
    sleepWithEvents(1000);
    f.heldAfterRampUp = flood.open();
    {
        const double cpu0 = cpuSeconds(pid);
        const qint64 a0 = assimilations(coordinator.db());
        const qint64 opened0 = flood.opened();
        const qint64 closed0 = flood.closedByCoordinator();
        const qint64 failed0 = flood.failedToConnect();
        QElapsedTimer clock;
        clock.start();
        QTimer rss;
        QObject::connect(&rss, &QTimer::timeout, &rss,
                         [&] { f.rssPeakMiB = std::max(f.rssPeakMiB, double(statusKiB(pid, "VmRSS")) / 1024.0); });
        rss.start(200);
        sleepWithEvents(qint64(s.attackSeconds) * 500);
        workers.front()->kill();
        workers.front()->start(token);
        workers.front()->waitWelcomed();
        f.restartAttackMs = workers.front()->welcomedMs();
        const qint64 left = qint64(s.attackSeconds) * 1000 - clock.elapsed();
        if (left > 0)
            sleepWithEvents(left);
        f.attackSeconds = double(clock.elapsed()) / 1000.0;
        f.cpuAttack = (cpuSeconds(pid) - cpu0) / f.attackSeconds;
        f.pacePerSecondAttack = double(assimilations(coordinator.db()) - a0) / f.attackSeconds;
        f.opened = flood.opened() - opened0;
        f.closedByCoordinator = flood.closedByCoordinator() - closed0;
        f.failedToConnect = flood.failedToConnect() - failed0;
    }
    flood.stop();

    // After the attack: a machine that never joined before.
    WorkerProcess fresh(binary, QDir(root).filePath(QStringLiteral("worker-fresh")), QStringLiteral("fresh"));
    fresh.start(token);
    fresh.waitWelcomed();
    f.freshAfterMs = fresh.welcomedMs();
    fresh.kill();
    for (auto &w : workers)
        w->kill();
    coordinator.stop();
    return f;
}

void print(const QString &label, const Settings &s, const Figures &f)
{
    std::printf("\n%s\n", label.toUtf8().constData());
    std::printf("  worker restart, no attack          %s\n", seconds(f.restartQuietMs).toUtf8().constData());
    std::printf("  worker restart during the attack   %s\n", seconds(f.restartAttackMs).toUtf8().constData());
    std::printf("  fresh worker after the attack      %s (token, enrollment, then Hello)\n",
                seconds(f.freshAfterMs).toUtf8().constData());
    std::printf("  coordinator RSS                    %.0f MiB before, %.0f MiB at most during the attack (%+.0f MiB)\n",
                f.rssBeforeMiB, f.rssPeakMiB, f.rssPeakMiB - f.rssBeforeMiB);
    std::printf("  coordinator CPU                    %.0f%% of a core quiet, %.0f%% during the attack\n",
                100 * f.cpuQuiet, 100 * f.cpuAttack);
    std::printf("  training                           %.2f assimilations/s quiet, %.2f/s during the attack\n",
                f.pacePerSecondQuiet, f.pacePerSecondAttack);
    std::printf("  attack                             %d of %d connections open after the ramp-up; in %.0f s, %lld "
                "opened, %lld closed by the coordinator, %lld failed to connect\n",
                f.heldAfterRampUp, s.idle + s.stalled + s.silentTls, f.attackSeconds, static_cast<long long>(f.opened),
                static_cast<long long>(f.closedByCoordinator), static_cast<long long>(f.failedToConnect));
}

int intOption(const QCommandLineParser &parser, const char *name, int low, int high, bool *ok)
{
    bool parsed = false;
    const int v = parser.value(QString::fromLatin1(name)).toInt(&parsed);
    if (!parsed || v < low || v > high) {
        std::fprintf(stderr, "flotilla bench flood: --%s must be a whole number from %d to %d\n", name, low, high);
        *ok = false;
    }
    return v;
}

} // namespace

int runBenchFlood(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Hostile connections against flotilla serve: TLS handshakes per second, then idle TCP connections and\n"
        "stalled TLS handshakes held open (each reopened when the coordinator closes it) while honest workers\n"
        "train; an honest worker is restarted during the attack, and a fresh one joins after it. Reports the\n"
        "time each took to be welcomed, the coordinator's memory and CPU, and training's pace."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("idle"), QStringLiteral("TCP connections that never start TLS."), QStringLiteral("n"),
         QStringLiteral("1000")},
        {QStringLiteral("stalled"), QStringLiteral("Connections that send part of a ClientHello and stop."),
         QStringLiteral("n"), QStringLiteral("1000")},
        {QStringLiteral("silent-tls"), QStringLiteral("Connections that finish TLS and never say Hello or Redeem."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("sources"), QStringLiteral("Loopback addresses the attack comes from (127.0.0.2 on)."),
         QStringLiteral("n"), QStringLiteral("64")},
        {QStringLiteral("workers"), QStringLiteral("Honest worker processes."), QStringLiteral("n"), QStringLiteral("2")},
        {QStringLiteral("attack-seconds"), QStringLiteral("How long the attack is held."), QStringLiteral("s"),
         QStringLiteral("20")},
        {QStringLiteral("rate-seconds"), QStringLiteral("Length of one handshake-rate measurement."), QStringLiteral("s"),
         QStringLiteral("3")},
        {QStringLiteral("rate-concurrency"), QStringLiteral("Handshakes under way at once."), QStringLiteral("n"),
         QStringLiteral("4")},
        {QStringLiteral("rate-repeats"), QStringLiteral("Handshake-rate measurements per build (median reported)."),
         QStringLiteral("n"), QStringLiteral("3")},
        {QStringLiteral("binary"), QStringLiteral("The flotilla to measure (default: this one)."), QStringLiteral("path")},
        {QStringLiteral("baseline-binary"),
         QStringLiteral("Another build measured the same way in this invocation, e.g. one from before a change."),
         QStringLiteral("path")},
        {QStringLiteral("serve-flag"),
         QStringLiteral("A flag for flotilla serve (repeat it; e.g. --serve-flag=--epochs=1). Default: the default "
                        "job."),
         QStringLiteral("flag")},
        {QStringLiteral("skip-attack"), QStringLiteral("Only measure handshakes per second.")},
        {QStringLiteral("keep"), QStringLiteral("Keep the coordinators' folders here (else temporary ones)."),
         QStringLiteral("dir")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench flood")))
        return *stop;
    bool ok = true;
    Settings s;
    s.idle = intOption(parser, "idle", 0, 100000, &ok);
    s.stalled = intOption(parser, "stalled", 0, 100000, &ok);
    s.silentTls = intOption(parser, "silent-tls", 0, 100000, &ok);
    s.sources = intOption(parser, "sources", 1, 65000, &ok);
    s.workers = intOption(parser, "workers", 1, 64, &ok);
    s.attackSeconds = intOption(parser, "attack-seconds", 2, 3600, &ok);
    s.rateSeconds = intOption(parser, "rate-seconds", 1, 600, &ok);
    s.rateConcurrency = intOption(parser, "rate-concurrency", 1, 1000, &ok);
    s.rateRepeats = intOption(parser, "rate-repeats", 1, 100, &ok);
    if (!ok)
        return ExitUsage;
    s.binary = parser.isSet(QStringLiteral("binary")) ? parser.value(QStringLiteral("binary"))
                                                      : QCoreApplication::applicationFilePath();
    s.baseline = parser.value(QStringLiteral("baseline-binary"));
    s.serveFlags = parser.values(QStringLiteral("serve-flag"));
    for (const QString &binary : {s.binary, s.baseline})
        if (!binary.isEmpty() && !QFileInfo(binary).isExecutable()) {
            std::fprintf(stderr, "flotilla bench flood: '%s' is not an executable\n", binary.toUtf8().constData());
            return ExitUsage;
        }
    QTemporaryDir temporary;
    const QString root = parser.isSet(QStringLiteral("keep")) ? parser.value(QStringLiteral("keep")) : temporary.path();
    if (!temporary.isValid() || !QDir().mkpath(root)) {
        std::fprintf(stderr, "flotilla bench flood: cannot create '%s'\n", root.toUtf8().constData());
        return ExitFailure;
    }
    QStringList builds{s.binary};
    QStringList labels{QStringLiteral("this build (%1)").arg(s.binary)};
    if (!s.baseline.isEmpty()) {
        builds << s.baseline;
        labels << QStringLiteral("baseline build (%1)").arg(s.baseline);
    }
    std::printf("Flood benchmark: flotilla serve on 127.0.0.1 (%s)\n",
                s.serveFlags.isEmpty() ? "the default job" : qPrintable(s.serveFlags.join(u' ')));
    std::fflush(stdout);

    // Handshakes per second, the builds alternating, each with a coordinator and no workers.
    {
        std::vector<std::unique_ptr<ServeProcess>> coordinators;
        std::vector<Credentials> credentials;
        for (int b = 0; b < builds.size(); ++b) {
            coordinators.push_back(
                std::make_unique<ServeProcess>(builds[b], QDir(root).filePath(QStringLiteral("rate-%1").arg(b))));
            if (auto started = coordinators.back()->start(s.serveFlags); !started) {
                std::fprintf(stderr, "flotilla bench flood: %s\n", started.error().toUtf8().constData());
                return ExitFailure;
            }
            auto enrolled = enroll(*coordinators.back(), QStringLiteral("bench-handshakes"));
            if (!enrolled) {
                std::fprintf(stderr, "flotilla bench flood: %s\n", enrolled.error().toUtf8().constData());
                return ExitFailure;
            }
            credentials.push_back(*enrolled);
        }
        std::vector<std::vector<double>> rates(std::size_t(builds.size()));
        std::vector<qint64> failures(std::size_t(builds.size()), 0);
        for (int r = 0; r < s.rateRepeats; ++r)
            for (int b = 0; b < builds.size(); ++b) {
                const Rate rate = handshakeRate(coordinators[b]->token().port, coordinators[b]->caPem(), credentials[b],
                                                s.rateSeconds, s.rateConcurrency);
                rates[b].push_back(rate.perSecond);
                failures[b] += rate.failed;
            }
        std::printf("\nTLS 1.3 handshakes with a client certificate, %d at a time, %.0f s each, median of %d:\n",
                    s.rateConcurrency, s.rateSeconds, s.rateRepeats);
        for (int b = 0; b < builds.size(); ++b)
            std::printf("  %-60s %6.0f/s (min %.0f, max %.0f; %lld failed)\n", labels[b].toUtf8().constData(),
                        median(rates[b]), *std::min_element(rates[b].begin(), rates[b].end()),
                        *std::max_element(rates[b].begin(), rates[b].end()), static_cast<long long>(failures[b]));
        if (builds.size() > 1 && median(rates[1]) > 0)
            std::printf("  ratio (this / baseline)                                      %6.2f\n",
                        median(rates[0]) / median(rates[1]));
        std::fflush(stdout);
    }
    if (parser.isSet(QStringLiteral("skip-attack")))
        return ExitOk;

    std::printf("\nAttack: %d idle TCP connections, %d stalled TLS handshakes and %d silent TLS connections from %d "
                "loopback addresses, each reopened when the coordinator closes it, held %d s; %d honest worker%s.\n",
                s.idle, s.stalled, s.silentTls, s.sources, s.attackSeconds, s.workers, s.workers == 1 ? "" : "s");
    std::fflush(stdout);
    int exit = ExitOk;
    for (int b = 0; b < builds.size(); ++b) {
        auto figures = scenario(s, builds[b], QDir(root).filePath(QStringLiteral("attack-%1").arg(b)));
        if (!figures) {
            std::fprintf(stderr, "flotilla bench flood: %s: %s\n", labels[b].toUtf8().constData(),
                         figures.error().toUtf8().constData());
            exit = ExitFailure;
            continue;
        }
        print(labels[b], s, *figures);
        std::fflush(stdout);
    }
    return exit;
}

} // namespace flotilla
