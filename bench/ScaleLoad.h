#pragma once
// The load of `flotilla bench scale`: groups of simulated workers, each group on a thread of its
// own, that join a coordinator over real TLS, ask for subtasks, fetch shards and weights and
// return results, recording every latency (bench/BenchScale.cpp runs them and reports).

#include "common/Cbor.h"
#include "net/Frame.h"
#include "net/Messages.h"
#include "net/Pki.h"
#include "net/TlsListener.h"
#include "net/TrustStore.h"

#include <QJsonObject>
#include <QMutex>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace flotilla::scale_load {


using net::MessageType;

constexpr int kMaxJoinAttempts = 5;
constexpr int kMaxReasons = 8;

inline qint64 nowNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct Settings
{
    int workers = 100;
    double seconds = 30;
    double warmup = -1; // -1: the longest simulated subtask, so that results arrive at a steady rate
    double subtaskSeconds = 60;
    int heartbeatMs = 0; // 0: what the coordinator's Welcome says
    QList<int> hidden{32};
    int samplesPerShard = 4;
    int shards = 0;      // 0: one per worker
    int threads = 1;
    // The load threads' nice value. Above 0 the coordinator gets the cores first on a
    // machine too small to drive both ends, but the load threads' own delays then enter the
    // round trips they time (docs/benchmarks-scale.md): 0 by default.
    int nice = 0;
    int connectConcurrency = 32;
    double noise = 1e-3;
    double joinTimeout = 600;
    long coordinatorNofile = -1; // -1: the soft limit this command started with
};

// What the load threads and the main thread share.
struct Shared
{
    std::atomic<int> welcomed{0};
    std::atomic<int> joinFailed{0};
    std::atomic<bool> stopping{false};
    std::atomic<qint64> windowStart{0}; // ns; 0 = not yet
    std::atomic<qint64> windowEnd{0};
    QString host;
    quint16 port = 0;
    QSslCertificate ca;
    net::JoinToken token;
    Settings settings;

    bool inWindow(qint64 t) const
    {
        const qint64 start = windowStart.load();
        const qint64 end = windowEnd.load();
        return start > 0 && t >= start && (end == 0 || t < end);
    }
};

struct Sample
{
    qint64 sentNs = 0;
    qint64 rttNs = 0;
};

// What one load thread measured. Read by the main thread only after the thread stopped.
struct GroupStats
{
    std::vector<Sample> heartbeat, request, result;
    std::vector<qint64> assimilatedAt;
    qint64 heartbeats = 0;      // sent in the window
    qint64 probesSkipped = 0;   // a heartbeat whose previous probe was still unanswered
    qint64 duplicates = 0;
    qint64 rejected = 0;
    qint64 cancels = 0;
    qint64 noWork = 0;
    qint64 drops = 0;           // connections lost after Welcome, before the end
    qint64 joinRetries = 0;
    qint64 finished = 0;        // the coordinator said the job is finished
    qint64 badAssign = 0;       // an Assign whose weights were not the model's size
    QStringList reasons;
};

class LoadGroup : public QObject
{
public:
    LoadGroup(Shared &shared, int first, int count) : m_shared(shared)
    {
        m_workers.resize(std::size_t(count));
        for (int i = 0; i < count; ++i) {
            Worker &w = m_workers[std::size_t(i)];
            w.name = QStringLiteral("sim-%1").arg(first + i + 1, 5, 10, QChar(u'0'));
            w.rng = 0x9E3779B97F4A7C15ull * quint64(first + i + 1) | 1;
        }
    }

    void start()
    {
        m_tick = new QTimer(this);
        m_tick->setTimerType(Qt::PreciseTimer);
        m_tick->setInterval(10);
        QObject::connect(m_tick, &QTimer::timeout, this, [this] { tick(); });
        m_tick->start();
        pumpJoins();
    }

    void stop()
    {
        if (m_tick)
            m_tick->stop();
        for (Worker &w : m_workers) {
            w.phase = Phase::Stopped;
            if (w.socket) {
                w.socket->disconnect(this);
                w.socket->abort();
                delete w.socket;
                w.socket = nullptr;
            }
        }
    }

    const GroupStats &stats() const { return m_stats; }

private:
    enum class Phase { Waiting, Enrolling, Connecting, Working, Stopped, Failed };

    struct Worker
    {
        QString name;
        QByteArray keyPem;
        QByteArray certPem;
        Phase phase = Phase::Waiting;
        QSslSocket *socket = nullptr;
        std::unique_ptr<net::MessageReader> reader;
        bool everWelcomed = false;
        int attempts = 0;
        quint64 rng = 1;
        // The subtask being "trained".
        qint64 leaseId = 0;
        qint64 shard = 0;
        qint64 samples = 0;
        qint64 localEpochs = 1;
        QByteArray base;
        qint64 leaseAtNs = 0;
        qint64 resultDueNs = 0;
        // Timers and outstanding questions (ns; 0 = none).
        qint64 nextHeartbeatNs = 0;
        qint64 retryAtNs = 0;
        qint64 probeSentNs = 0;
        qint64 echoes = 0;
        qint64 requestSentNs = 0;
        qint64 resultSentNs = 0;
    };

    double uniform(Worker &w)
    {
        // xorshift64*: cheap, and plenty for noise.
        w.rng ^= w.rng >> 12;
        w.rng ^= w.rng << 25;
        w.rng ^= w.rng >> 27;
        return double((w.rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
    }

    void note(const QString &reason)
    {
        if (m_stats.reasons.size() < kMaxReasons && !m_stats.reasons.contains(reason))
            m_stats.reasons << reason;
    }

    void pumpJoins()
    {
        while (m_inFlight < m_shared.settings.connectConcurrency && m_nextJoin < m_workers.size()) {
            ++m_inFlight;
            enroll(m_nextJoin++);
        }
    }

    void joinDone(std::size_t i, bool ok)
    {
        Worker &w = m_workers[i];
        if (ok) {
            w.everWelcomed = true;
            ++m_shared.welcomed;
        } else {
            w.phase = Phase::Failed;
            ++m_shared.joinFailed;
        }
        --m_inFlight;
        pumpJoins();
    }

    QSslSocket *newSocket(std::size_t i, bool withCertificate)
    {
        Worker &w = m_workers[i];
        if (w.socket) {
            w.socket->disconnect(this);
            w.socket->abort();
            w.socket->deleteLater();
        }
        auto *socket = new QSslSocket(this);
        QSslConfiguration config = QSslConfiguration::defaultConfiguration();
        config.setProtocol(QSsl::TlsV1_3);
        config.setCaCertificates({m_shared.ca}); // the pinned CA and nothing else
        config.setPeerVerifyMode(QSslSocket::VerifyPeer);
        if (withCertificate) {
            config.setLocalCertificate(QSslCertificate(w.certPem));
            config.setPrivateKey(QSslKey(w.keyPem, QSsl::Ec));
        }
        socket->setSslConfiguration(config);
        w.socket = socket;
        w.reader = std::make_unique<net::MessageReader>();
        QObject::connect(socket, &QSslSocket::readyRead, this, [this, i, socket] {
            if (m_workers[i].socket == socket)
                onReadyRead(i);
        });
        QObject::connect(socket, &QSslSocket::disconnected, this, [this, i, socket] {
            if (m_workers[i].socket == socket)
                lost(i, QStringLiteral("the coordinator closed the connection"));
        });
        QObject::connect(socket, &QSslSocket::errorOccurred, this, [this, i, socket](QAbstractSocket::SocketError e) {
            if (m_workers[i].socket == socket && e != QAbstractSocket::RemoteHostClosedError)
                lost(i, socket->errorString());
        });
        QObject::connect(socket, &QSslSocket::sslErrors, this, [this, i, socket](const QList<QSslError> &errors) {
            if (m_workers[i].socket == socket)
                lost(i, QStringLiteral("the coordinator failed verification: %1")
                            .arg(errors.isEmpty() ? QString() : errors.first().errorString()));
        });
        return socket;
    }

    void enroll(std::size_t i)
    {
        Worker &w = m_workers[i];
        if (!w.certPem.isEmpty()) {
            connectWorker(i);
            return;
        }
        if (w.keyPem.isEmpty()) {
            auto key = net::generatePrivateKeyPem();
            if (!key) {
                note(key.error());
                joinDone(i, false);
                return;
            }
            w.keyPem = *key;
        }
        auto csr = net::createCertificateRequest(w.keyPem, w.name);
        if (!csr) {
            note(csr.error());
            joinDone(i, false);
            return;
        }
        w.phase = Phase::Enrolling;
        QSslSocket *socket = newSocket(i, false);
        const QByteArray request = *csr;
        QObject::connect(socket, &QSslSocket::encrypted, this, [this, i, socket, request] {
            socket->write(
                net::encodeMessage(net::RedeemMsg{m_shared.token.id, m_shared.token.secret, m_workers[i].name}, request));
        });
        socket->connectToHostEncrypted(m_shared.host, m_shared.port);
    }

    void connectWorker(std::size_t i)
    {
        Worker &w = m_workers[i];
        w.phase = Phase::Connecting;
        QSslSocket *socket = newSocket(i, true);
        QObject::connect(socket, &QSslSocket::encrypted, this, [this, i, socket] {
            net::HelloMsg hello;
            hello.name = m_workers[i].name;
            hello.instanceType = QStringLiteral("local");
            hello.priceClass = QStringLiteral("volunteer");
            hello.device = QStringLiteral("cpu");
            hello.threads = 1;
            socket->write(net::encodeMessage(hello));
        });
        socket->connectToHostEncrypted(m_shared.host, m_shared.port);
    }

    void lost(std::size_t i, const QString &reason)
    {
        Worker &w = m_workers[i];
        if (w.socket) {
            w.socket->disconnect(this);
            w.socket->abort();
            w.socket->deleteLater();
            w.socket = nullptr;
        }
        if (m_shared.stopping || w.phase == Phase::Stopped || w.phase == Phase::Failed)
            return;
        w.leaseId = 0;
        w.probeSentNs = w.requestSentNs = w.resultSentNs = w.retryAtNs = 0;
        if (w.phase == Phase::Working) {
            ++m_stats.drops;
            note(QStringLiteral("%1: %2").arg(w.name, reason));
            // A real worker comes back; so does this one, without counting as a new join.
            w.phase = Phase::Connecting;
            QTimer::singleShot(1000, this, [this, i] {
                if (!m_shared.stopping && m_workers[i].phase == Phase::Connecting)
                    connectWorker(i);
            });
            return;
        }
        if (w.everWelcomed) {
            // Losing a reconnection attempt: try again, it was counted as a drop already.
            QTimer::singleShot(1000, this, [this, i] {
                if (!m_shared.stopping && m_workers[i].phase == Phase::Connecting)
                    connectWorker(i);
            });
            return;
        }
        if (++w.attempts >= kMaxJoinAttempts) {
            note(QStringLiteral("%1 could not join: %2").arg(w.name, reason));
            joinDone(i, false);
            return;
        }
        ++m_stats.joinRetries;
        w.phase = Phase::Waiting;
        QTimer::singleShot(250 << w.attempts, this, [this, i] {
            if (!m_shared.stopping && m_workers[i].phase == Phase::Waiting)
                enroll(i);
        });
    }

    void onReadyRead(std::size_t i)
    {
        Worker &w = m_workers[i];
        QSslSocket *socket = w.socket;
        w.reader->feed(socket->readAll());
        for (;;) {
            if (m_workers[i].socket != socket)
                return;
            auto message = w.reader->next();
            if (!message) {
                lost(i, QStringLiteral("the coordinator sent something malformed: %1").arg(message.error()));
                return;
            }
            if (!message->has_value())
                return;
            handle(i, std::move(**message));
        }
    }

    void handle(std::size_t i, const net::Message &m)
    {
        Worker &w = m_workers[i];
        const qint64 now = nowNs();
        if (m.type == MessageType::Error) {
            if (const auto error = decoded<net::ErrorMsg>(i, m))
                lost(i, QStringLiteral("the coordinator sent an error: %1").arg(error->reason));
            return;
        }
        switch (w.phase) {
        case Phase::Enrolling:
            if (m.type != MessageType::Enrolled || m.payload.isEmpty()) {
                lost(i, QStringLiteral("the join was answered with %1").arg(net::describe(m.type)));
                return;
            }
            w.certPem = m.payload;
            connectWorker(i); // replaces the enrolment socket, which the coordinator closes
            return;
        case Phase::Connecting:
            if (m.type != MessageType::Welcome) {
                lost(i, QStringLiteral("Hello was answered with %1").arg(net::describe(m.type)));
                return;
            }
            if (const auto welcome = decoded<net::WelcomeMsg>(i, m))
                welcomed(i, *welcome, now);
            return;
        case Phase::Working:
            working(i, m, now);
            return;
        default:
            return;
        }
    }

    // The header as its message's struct, or nothing when it is malformed: then the worker
    // is lost, as when a frame is malformed.
    template <typename Msg>
    std::optional<Msg> decoded(std::size_t i, const net::Message &m)
    {
        auto message = Msg::decode(m.header);
        if (message)
            return std::move(message).value();
        lost(i, QStringLiteral("the coordinator sent something malformed: %1").arg(message.error()));
        return std::nullopt;
    }

    void welcomed(std::size_t i, const net::WelcomeMsg &welcome, qint64 now)
    {
        Worker &w = m_workers[i];
        if (m_manifest.isEmpty()) {
            m_manifest = welcome.weights;
            m_numel = cborInteger(m_manifest.value(QStringLiteral("numel")));
            const qint64 ms = m_shared.settings.heartbeatMs > 0 ? m_shared.settings.heartbeatMs : welcome.heartbeatMs;
            m_heartbeatNs = std::max<qint64>(100, ms) * 1000000;
        }
        const bool first = !w.everWelcomed;
        w.phase = Phase::Working;
        // Spread the fleet's heartbeats over the interval, as independent machines would be.
        w.nextHeartbeatNs = now + qint64(uniform(w) * double(m_heartbeatNs));
        sendRequest(w, now);
        if (first)
            joinDone(i, true);
    }

    void working(std::size_t i, const net::Message &m, qint64 now)
    {
        Worker &w = m_workers[i];
        switch (m.type) {
        case MessageType::Echo:
            if (w.probeSentNs > 0)
                m_stats.heartbeat.push_back({w.probeSentNs, now - w.probeSentNs});
            w.probeSentNs = 0;
            return;
        case MessageType::Assign: {
            const auto assign = decoded<net::AssignMsg>(i, m);
            if (!assign)
                return;
            if (w.requestSentNs > 0)
                m_stats.request.push_back({w.requestSentNs, now - w.requestSentNs});
            w.requestSentNs = 0;
            if (m.payload.size() != m_numel * 4) {
                ++m_stats.badAssign;
                note(QStringLiteral("an Assign carried %1 bytes of weights, the model has %2").arg(m.payload.size()).arg(m_numel * 4));
            }
            w.leaseId = assign->lease;
            w.shard = assign->shard;
            w.samples = assign->end - assign->begin;
            w.localEpochs = std::max<qint64>(1, assign->localEpochs);
            w.base = m.payload;
            w.leaseAtNs = now;
            // Machines differ: ±20% around the simulated subtask time.
            w.resultDueNs = now + qint64(m_shared.settings.subtaskSeconds * 1e9 * (0.8 + 0.4 * uniform(w)));
            w.resultSentNs = 0;
            return;
        }
        case MessageType::NoWork: {
            const auto noWork = decoded<net::NoWorkMsg>(i, m);
            if (!noWork)
                return;
            if (w.requestSentNs > 0)
                m_stats.request.push_back({w.requestSentNs, now - w.requestSentNs});
            w.requestSentNs = 0;
            ++m_stats.noWork;
            if (noWork->finished) {
                ++m_stats.finished;
                w.phase = Phase::Stopped;
                return;
            }
            w.retryAtNs = now + std::clamp<qint64>(noWork->retryMs, 50, 10000) * 1000000;
            return;
        }
        case MessageType::Ack: {
            const auto ack = decoded<net::AckMsg>(i, m);
            if (!ack)
                return;
            if (w.resultSentNs > 0)
                m_stats.result.push_back({w.resultSentNs, now - w.resultSentNs});
            w.resultSentNs = 0;
            // "held": taken into a buffer or a round, to be assimilated with the others.
            if (ack->status == QLatin1String("assimilated") || ack->status == QLatin1String("held"))
                m_stats.assimilatedAt.push_back(now);
            else if (ack->status == QLatin1String("duplicate"))
                ++m_stats.duplicates;
            else {
                ++m_stats.rejected;
                note(QStringLiteral("result rejected: %1").arg(ack->reason));
            }
            if (ack->lease == w.leaseId)
                w.leaseId = 0;
            if (w.leaseId == 0)
                sendRequest(w, now);
            return;
        }
        case MessageType::Cancel: {
            const auto cancel = decoded<net::CancelMsg>(i, m);
            if (!cancel)
                return;
            ++m_stats.cancels;
            if (cancel->lease == w.leaseId && w.resultSentNs == 0) {
                w.leaseId = 0;
                w.base.clear();
                sendRequest(w, now);
            }
            return;
        }
        default:
            note(QStringLiteral("unexpected %1 message").arg(net::describe(m.type)));
            return;
        }
    }

    void sendRequest(Worker &w, qint64 now)
    {
        w.retryAtNs = 0;
        w.requestSentNs = now;
        w.socket->write(net::encodeMessage(net::RequestMsg{0.0}));
    }

    void sendHeartbeat(Worker &w, qint64 now)
    {
        qint64 planned = 0;
        qint64 done = 0;
        if (w.leaseId != 0) {
            planned = w.samples * w.localEpochs;
            const double span = double(std::max<qint64>(1, w.resultDueNs - w.leaseAtNs));
            done = std::min(planned, qint64(double(planned) * double(now - w.leaseAtNs) / span));
        }
        QByteArray bytes = net::encodeMessage(net::HeartbeatMsg{w.leaseId, done, planned, {}});
        if (w.probeSentNs == 0) {
            // The probe behind the heartbeat: its answer times the heartbeat's way through.
            bytes += net::encodeMessage(net::EchoMsg{++w.echoes});
            w.probeSentNs = now;
        } else if (m_shared.inWindow(now)) {
            ++m_stats.probesSkipped;
        }
        if (m_shared.inWindow(now))
            ++m_stats.heartbeats;
        w.socket->write(bytes);
    }

    void sendResult(Worker &w, qint64 now)
    {
        QByteArray weights = w.base;
        w.base.clear();
        float *values = reinterpret_cast<float *>(weights.data());
        const qsizetype n = weights.size() / qsizetype(sizeof(float));
        const double noise = m_shared.settings.noise;
        for (qsizetype k = 0; k < n; ++k) {
            float v = 0;
            std::memcpy(&v, values + k, sizeof v);
            v += float((2.0 * uniform(w) - 1.0) * noise);
            std::memcpy(values + k, &v, sizeof v);
        }
        const qint64 steps = w.samples * w.localEpochs;
        const net::ResultMsg header{
            w.leaseId, 0.5 + 0.1 * uniform(w), steps, w.samples, double(now - w.leaseAtNs) / 1e9, false, m_manifest};
        w.resultSentNs = now;
        w.socket->write(net::encodeMessage(header, weights));
    }

    void tick()
    {
        if (m_shared.stopping)
            return;
        const qint64 now = nowNs();
        for (Worker &w : m_workers) {
            if (w.phase != Phase::Working || !w.socket)
                continue;
            if (now >= w.nextHeartbeatNs) {
                sendHeartbeat(w, now);
                w.nextHeartbeatNs += m_heartbeatNs;
                if (w.nextHeartbeatNs < now)
                    w.nextHeartbeatNs = now + m_heartbeatNs; // the load thread fell behind
            }
            if (w.leaseId != 0 && w.resultSentNs == 0 && now >= w.resultDueNs)
                sendResult(w, now);
            if (w.retryAtNs != 0 && now >= w.retryAtNs)
                sendRequest(w, now);
        }
    }

    Shared &m_shared;
    std::vector<Worker> m_workers;
    std::size_t m_nextJoin = 0;
    int m_inFlight = 0;
    QTimer *m_tick = nullptr;
    QCborMap m_manifest;
    qint64 m_numel = 0;
    qint64 m_heartbeatNs = 2000000000;
    GroupStats m_stats;
};

} // namespace flotilla::scale_load
