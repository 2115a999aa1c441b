// The coordinator's server in this process with real TLS, and workers that send bad
// results on purpose: NaN and infinite weights, wrong shapes, a wrong number of values, an
// absurd norm, unknown leases, the same result twice, a payload whose CRC-32C does not
// match, an upload that stops half way. Each is refused with a clear reason, the offending
// connection is closed, the global model is untouched, and an honest worker carries on.
// A worker is stored under the name its certificate was issued to, whatever its Hello says.
//
// Then `flotilla serve` as users run it, a real process: hundreds of idle TCP connections and
// stalled handshakes do not lock it out (a worker joins and comes back within 2 s, during and
// after them), its --token-file keeps one live token across restarts, `flotilla token --list`
// and `--revoke` see and bar tokens, and its limits have options that refuse bad values.
#include "TestSupport.h"
#include "engine/coordination/LocalFleet.h"
#include "engine/coordination/Store.h"
#include "engine/wire/WireFormat.h"
#include "net/TrustStore.h"
#include "net/WorkerClient.h"
#include "server/NetworkHost.h"

#include <QMutex>
#include <QProcess>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QTcpServer>
#include <QTcpSocket>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <set>

using namespace flotilla;
using flotilla::test::readFile;
using net::Message;
using net::MessageType;

namespace {


// A worker speaking the protocol by hand over a mutual-TLS socket, with an identity
// enrolled through the real join flow.
class RawWorker
{
public:
    RawWorker(const QString &stateDir, quint16 port)
    {
        QSslConfiguration config = QSslConfiguration::defaultConfiguration();
        config.setProtocol(QSsl::TlsV1_3);
        config.setCaCertificates({QSslCertificate(readFile(stateDir + QStringLiteral("/ca.pem")))});
        config.setPeerVerifyMode(QSslSocket::VerifyPeer);
        config.setLocalCertificate(QSslCertificate(readFile(stateDir + QStringLiteral("/cert.pem"))));
        config.setPrivateKey(QSslKey(readFile(stateDir + QStringLiteral("/key.pem")), QSsl::Ec));
        socket.setSslConfiguration(config);
        socket.connectToHostEncrypted(QStringLiteral("127.0.0.1"), port);
    }

    // The server runs on this thread too: waiting must keep the event loop turning.
    bool hello()
    {
        if (!QTest::qWaitFor([&] { return socket.isEncrypted(); }, 10000))
            return false;
        send(MessageType::Hello, QCborMap{{QStringLiteral("instance_type"), QStringLiteral("aws/c5.large")},
                                          {QStringLiteral("price_class"), QStringLiteral("spot")}});
        return receive(MessageType::Welcome).has_value();
    }

    void send(MessageType type, const QCborMap &header, const QByteArray &payload = {})
    {
        socket.write(net::encodeMessage(type, header, payload));
    }

    // The next message of that type (others are skipped), if it comes within the timeout.
    std::optional<Message> receive(MessageType type, int timeoutMs = 10000)
    {
        QElapsedTimer timer;
        timer.start();
        while (timer.elapsed() < timeoutMs) {
            auto m = reader.next();
            if (!m)
                return std::nullopt;
            if (m->has_value()) {
                if ((*m)->type == MessageType::Error)
                    lastError = (*m)->header.value(QStringLiteral("reason")).toString();
                if ((*m)->type == type)
                    return **m;
                continue;
            }
            if (socket.state() != QAbstractSocket::ConnectedState && socket.bytesAvailable() == 0)
                return std::nullopt;
            QTest::qWait(10);
            reader.feed(socket.readAll());
        }
        return std::nullopt;
    }

    bool closedByPeer(int timeoutMs = 5000)
    {
        QElapsedTimer timer;
        timer.start();
        while (socket.state() == QAbstractSocket::ConnectedState && timer.elapsed() < timeoutMs) {
            QTest::qWait(10);
            reader.feed(socket.readAll());
            while (auto m = reader.next()) {
                if (!m->has_value())
                    break;
                if ((*m)->type == MessageType::Error)
                    lastError = (*m)->header.value(QStringLiteral("reason")).toString();
            }
        }
        return socket.state() != QAbstractSocket::ConnectedState;
    }

    QSslSocket socket;
    net::MessageReader reader;
    QString lastError;
};

quint16 freePort()
{
    QTcpServer probe;
    probe.listen(QHostAddress::LocalHost, 0);
    return probe.serverPort();
}

// 127.0.0.n: one of many source addresses on loopback (Linux routes all of 127/8 there).
QHostAddress loopback(int n)
{
    return QHostAddress(QHostAddress(QHostAddress::LocalHost).toIPv4Address() - 1 + quint32(n));
}

// Connections waiting in the kernel's queue of the socket listening on this loopback port
// (what `ss -tln` shows as Recv-Q), from /proc/net/tcp; -1 where there is no such file.
int acceptQueue(quint16 port)
{
    QFile tcp(QStringLiteral("/proc/net/tcp"));
    if (!tcp.open(QIODevice::ReadOnly))
        return -1;
    const QByteArray local = "0100007F:" + QByteArray::number(port, 16).toUpper().rightJustified(4, '0');
    for (const QByteArray &line : tcp.readAll().split('\n')) {
        const QList<QByteArray> f = line.simplified().split(' ');
        // sl local rem st tx_queue:rx_queue ...; state 0A is LISTEN, whose rx_queue is the backlog.
        if (f.size() > 4 && f[1] == local && f[3] == "0A")
            return int(f[4].split(':').value(1).toInt(nullptr, 16));
    }
    return -1;
}

struct Ran
{
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
};

// `flotilla ARGUMENTS`: what it printed and returned (-1: it crashed or ran over 60 s).
Ran runFlotilla(const QStringList &arguments)
{
    QProcess p;
    p.start(test::flotillaBinary(), arguments);
    Ran r;
    if (!p.waitForFinished(60000)) {
        p.kill();
        p.waitForFinished();
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

// `flotilla serve` on loopback with a small job that never finishes during a test; its
// folders (identity, run, token) live in dir.
class ServeProcess
{
public:
    explicit ServeProcess(QString dir) : m_dir(std::move(dir)) {}
    ~ServeProcess() { stop(); }

    QString path(const QString &name) const { return QDir(m_dir).filePath(name); }
    QString tokenFile() const { return path(QStringLiteral("token")); }
    QString identityDir() const { return path(QStringLiteral("identity")); }
    QString tokenText() const { return QString::fromUtf8(readFile(tokenFile())).trimmed(); }
    QString output() const { return QString::fromUtf8(readFile(path(QStringLiteral("serve.out")))); }

    // Started and listening (it has said where its join token is).
    bool start(const QStringList &extra = {}, quint16 port = 0)
    {
        const qsizetype before = output().size();
        m_process.setProcessChannelMode(QProcess::MergedChannels);
        m_process.setStandardOutputFile(path(QStringLiteral("serve.out")), QIODevice::Append);
        m_process.start(test::flotillaBinary(),
                        QStringList{QStringLiteral("serve"), QStringLiteral("--run-dir"), path(QStringLiteral("run")),
                                    QStringLiteral("--identity-dir"), identityDir(), QStringLiteral("--listen"),
                                    QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                                    QStringLiteral("--port"), QString::number(port), QStringLiteral("--token-file"),
                                    tokenFile(), QStringLiteral("--quiet"), QStringLiteral("--model"),
                                    QStringLiteral("mlp"), QStringLiteral("--train-limit"), QStringLiteral("2000"),
                                    QStringLiteral("--test-limit"), QStringLiteral("200"), QStringLiteral("--epochs"),
                                    QStringLiteral("50"), QStringLiteral("--shards"), QStringLiteral("20"),
                                    QStringLiteral("--preempt-mean"), QStringLiteral("0")}
                            + extra);
        return QTest::qWaitFor(
                   [&] {
                       return output().mid(before).contains(QLatin1String("join token"))
                           || m_process.state() == QProcess::NotRunning;
                   },
                   120000)
            && m_process.state() == QProcess::Running;
    }

    void stop()
    {
        if (m_process.state() == QProcess::NotRunning)
            return;
        m_process.terminate();
        if (!m_process.waitForFinished(30000)) {
            m_process.kill();
            m_process.waitForFinished(10000);
        }
    }

    bool running() const { return m_process.state() == QProcess::Running; }

private:
    QString m_dir;
    QProcess m_process;
};

// Starts a worker (joining with the token when there is one, else from its state folder)
// and returns the milliseconds until it was welcomed, or -1 with the reason in why.
qint64 timeToWelcome(net::WorkerClient &worker, const std::optional<net::JoinToken> &token, QString *why)
{
    QSignalSpy welcomed(&worker, &net::WorkerClient::welcomed);
    QSignalSpy failed(&worker, &net::WorkerClient::failed);
    if (auto configured = worker.configure(token); !configured) {
        *why = configured.error();
        return -1;
    }
    QElapsedTimer timer;
    timer.start();
    // What the coordinator needs to price its work.
    net::HelloMsg hello;
    hello.instanceType = QStringLiteral("aws/c5.large");
    hello.priceClass = QStringLiteral("spot");
    worker.start(hello);
    if (!QTest::qWaitFor([&] { return !welcomed.isEmpty() || !failed.isEmpty(); }, 10000)) {
        *why = QStringLiteral("not welcomed within 10 s");
        return -1;
    }
    if (!failed.isEmpty()) {
        *why = failed.first().first().toString();
        return -1;
    }
    return timer.elapsed();
}

// The lines of `flotilla token --list` that name a token.
QStringList tokenLines(const QString &listing)
{
    QStringList lines;
    for (const QString &line : listing.split(u'\n'))
        if (!line.isEmpty() && !line.startsWith(QLatin1String("ID ")) && !line.startsWith(QLatin1String("No ")))
            lines << line;
    return lines;
}

QCborMap resultHeader(qint64 lease, const QCborMap &manifest)
{
    return QCborMap{{QStringLiteral("lease"), lease},          {QStringLiteral("loss"), 0.5},
                    {QStringLiteral("sample_steps"), 100},     {QStringLiteral("covered"), 100},
                    {QStringLiteral("seconds"), 1.0},          {QStringLiteral("partial"), false},
                    {QStringLiteral("weights"), manifest}};
}

} // namespace

class TestServe : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::unique_ptr<LocalFleet> m_fleet;
    std::unique_ptr<NetworkHost> m_network; // the coordinator's endpoint, hosted as serve hosts it
    QString m_identityDir;
    WeightLayout m_layout;
    QStringList m_closed; // reasons of closed connections
    int m_enrolled = 0;

    // Enrolls a worker through the real join flow and returns its state folder.
    QString enroll()
    {
        const QString state = m_dir.filePath(QStringLiteral("worker-%1").arg(++m_enrolled));
        auto token = net::TrustStore(m_identityDir)
                         .issueToken(QStringLiteral("127.0.0.1"), m_network->port(), m_network->caFingerprint(), 600, 1,
                                     QDateTime::currentMSecsSinceEpoch());
        net::WorkerClient client({state, QStringLiteral("raw-%1").arg(m_enrolled), 50, 500});
        QSignalSpy joined(&client, &net::WorkerClient::joined);
        if (!client.configure(*token))
            return {};
        client.start({});
        joined.wait(15000);
        client.stop();
        return state;
    }

    std::optional<Message> leaseSomething(RawWorker &w)
    {
        w.send(MessageType::Request, {});
        return w.receive(MessageType::Assign);
    }

    torch::Tensor globalWeights()
    {
        torch::Tensor w;
        m_fleet->coordinator()->withCoordinator([&](Coordinator &c) { w = c.globalWeights().clone(); });
        return w;
    }

    qint64 seq()
    {
        return m_fleet->coordinator()->callProgress().seq;
    }

    // Sends a result that must be refused: checks the reason, the closed connection, the
    // unchanged model.
    void expectRejected(const std::function<void(RawWorker &, const Message &)> &sendBad, const QString &reason)
    {
        const QString state = enroll();
        QVERIFY(!state.isEmpty());
        RawWorker w(state, m_network->port());
        QVERIFY(w.hello());
        auto assign = leaseSomething(w);
        QVERIFY(assign);
        const torch::Tensor before = globalWeights();
        const qint64 seqBefore = seq();
        m_closed.clear();
        sendBad(w, *assign);
        auto ack = w.receive(MessageType::Ack, 5000);
        const QString told = ack ? ack->header.value(QStringLiteral("reason")).toString() : w.lastError;
        QVERIFY(w.closedByPeer());
        QVERIFY2(told.contains(reason) || w.lastError.contains(reason),
                 qPrintable(QStringLiteral("expected '%1', the worker was told '%2' / '%3'").arg(reason, told, w.lastError)));
        QTRY_VERIFY(!m_closed.isEmpty());
        QVERIFY2(m_closed.join(u'|').contains(reason), qPrintable(m_closed.join(u'|')));
        QVERIFY(torch::equal(before, globalWeights()));
        QCOMPARE(seq(), seqBefore);
    }

private:
    // The weights of an assignment moved a little, as training moves them.
    QByteArray trained(const QByteArray &assigned) const
    {
        return weightsToBytes(weightsFromBytes(assigned, m_layout).value() + 0.001f);
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
        JobSpec job = JobSpec::defaultJob();
        job.model.kind = QStringLiteral("mlp");
        job.model.hidden = {16};
        job.dataset.trainLimit = 2000;
        job.dataset.testLimit = 200;
        job.training.epochs = 50; // never finishes during the test
        job.training.shards = 20;
        job.fleet.preemption.meanIntervalSeconds = 0;
        // Each result its own version: these tests read the Ack of every result they send.
        job.aggregation.rounds = false;
        auto fleet = LocalFleet::create(job, m_dir.filePath(QStringLiteral("run")), 0);
        QVERIFY2(fleet, qPrintable(fleet.error()));
        m_fleet = std::move(fleet).value();
        m_fleet->start();
        net::TlsListener::Options options;
        m_identityDir = m_dir.filePath(QStringLiteral("identity"));
        options.identityDir = m_identityDir;
        options.bindAddress = QHostAddress::LocalHost;
        options.stallTimeoutMs = 1000;
        m_network = std::make_unique<NetworkHost>();
        auto serving = m_network->start(m_fleet->coordinator(), options, {0});
        QVERIFY2(serving, qPrintable(serving.error()));
        connect(&m_network->server()->listener(), &net::TlsListener::connectionClosed, this,
                [this](qint64, const QString &reason) { m_closed << reason; });
        connect(&m_network->server()->listener(), &net::TlsListener::refused, this,
                [this](const QString &, const QString &reason) { m_closed << reason; });
        m_fleet->coordinator()->withCoordinator([&](Coordinator &c) { m_layout = c.layout(); });
    }

    void cleanupTestCase()
    {
        m_network.reset();
        m_fleet.reset();
    }

    // The asynchronous calls the network thread makes into the coordinator (made here from
    // the test's thread), whose answers are signals. A burst of results is answered, each Ack only once its assimilation is in the
    // store (another connection reads it at the moment the answer is given).
    void answersComeAfterTheirCommit()
    {
        CoordinatorThread *coordinator = m_fleet->coordinator();
        constexpr int kWorkers = 6;
        std::map<qint64, qint64> workerOf; // join ticket -> worker
        QStringList joinErrors;
        // The handlers capture this function's locals: they go when it returns, however it returns.
        std::vector<QMetaObject::Connection> handlers;
        const auto disconnectAll = qScopeGuard([&] {
            for (const auto &h : handlers)
                disconnect(h);
            // A direct handler may be running on the coordinator's thread: let it finish.
            coordinator->withCoordinator([](Coordinator &) {});
        });
        auto joined = connect(coordinator, &CoordinatorThread::joinAnswered, this,
                              [&](qint64 ticket, qint64 workerId, const QString &error) {
                                  if (error.isEmpty())
                                      workerOf[ticket] = workerId;
                                  else
                                      joinErrors << error;
                              });
        std::vector<qint64> tickets;
        for (int i = 0; i < kWorkers; ++i)
            tickets.push_back(coordinator->join(
                WorkerInfo{QStringLiteral("burst-%1").arg(i), QStringLiteral("local"), QStringLiteral("volunteer")}));
        handlers.push_back(joined);
        QTRY_VERIFY2(int(workerOf.size() + joinErrors.size()) == kWorkers, qPrintable(joinErrors.join(u';')));
        QVERIFY2(joinErrors.isEmpty(), qPrintable(joinErrors.join(u';')));
        disconnect(joined);

        std::map<qint64, Assignment> assigned; // by worker
        std::map<qint64, qint64> requestOf;    // request ticket -> worker
        auto answered = connect(coordinator, &CoordinatorThread::requestAnswered, this,
                                [&](qint64 ticket, const std::optional<Assignment> &a, bool) {
                                    if (a && requestOf.count(ticket))
                                        assigned[requestOf[ticket]] = *a;
                                });
        handlers.push_back(answered);
        for (const auto &[ticket, workerId] : workerOf)
            requestOf[coordinator->request(workerId)] = workerId;
        QTRY_COMPARE(int(assigned.size()), kWorkers);
        disconnect(answered);

        // Direct: the check runs on the coordinator's thread at the moment the answer is given.
        const QString db = QDir(m_dir.filePath(QStringLiteral("run"))).filePath(QStringLiteral("flotilla.db"));
        QMutex mutex;
        std::vector<SubmitReply> replies;
        QStringList notYetDurable;
        auto submitted = connect(coordinator, &CoordinatorThread::submitAnswered, coordinator,
                                 [&](qint64, const SubmitReply &reply) {
                                     QStringList problems;
                                     auto store = Store::open(db);
                                     auto job = store ? (*store)->latestJob() : Result<std::optional<JobRecord>>(fail(QString()));
                                     auto rows = job && *job ? (*store)->assimilations((*job)->id)
                                                             : Result<std::vector<AssimilationRecord>>(fail(QStringLiteral("no job")));
                                     if (!rows)
                                         problems << rows.error();
                                     else if (std::none_of(rows->begin(), rows->end(),
                                                           [&](const AssimilationRecord &a) { return a.seq == reply.seq; }))
                                         problems << QStringLiteral("seq %1 answered before it was committed").arg(reply.seq);
                                     QMutexLocker lock(&mutex);
                                     replies.push_back(reply);
                                     notYetDurable << problems;
                                 },
                                 Qt::DirectConnection);
        handlers.push_back(submitted);
        for (auto &[workerId, a] : assigned) {
            SubtaskResult r;
            r.leaseId = a.leaseId;
            r.weights = a.weights + 0.001f;
            r.meanLoss = 1.0;
            r.sampleSteps = r.covered = a.end - a.begin;
            r.seconds = 0.5;
            coordinator->submit(workerId, std::move(r));
        }
        QTRY_VERIFY([&] { QMutexLocker lock(&mutex); return int(replies.size()) == kWorkers; }());
        disconnect(submitted);
        QMutexLocker lock(&mutex);
        QVERIFY2(notYetDurable.isEmpty(), qPrintable(notYetDurable.join(u';')));
        std::set<qint64> seqs;
        for (const SubmitReply &reply : replies) {
            QVERIFY2(reply.status == SubmitStatus::Assimilated, qPrintable(reply.reason));
            seqs.insert(reply.seq);
        }
        QCOMPARE(int(seqs.size()), kWorkers);
        QCOMPARE(*seqs.rbegin() - *seqs.begin(), qint64(kWorkers - 1)); // contiguous
        for (const auto &[workerId, a] : assigned)
            coordinator->leave(workerId, QStringLiteral("test over"));
    }

    void nanWeights()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                auto weights = weightsFromBytes(a.payload, m_layout).value();
                weights[7] = std::numeric_limits<float>::quiet_NaN();
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(m_layout)),
                       weightsToBytes(weights));
            },
            QStringLiteral("NaN or infinite"));
    }

    void infiniteWeights()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                auto weights = weightsFromBytes(a.payload, m_layout).value();
                weights[0] = std::numeric_limits<float>::infinity();
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(m_layout)),
                       weightsToBytes(weights));
            },
            QStringLiteral("NaN or infinite"));
    }

    void wrongShapes()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                WeightLayout other = m_layout;
                std::swap(other.entries[0].shape[0], other.entries[0].shape[1]);
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(other)),
                       a.payload);
            },
            QStringLiteral("tensor 0 of the weights"));
    }

    void wrongParameterCount()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(m_layout)),
                       a.payload.left(a.payload.size() - 4));
            },
            QStringLiteral("bytes"));
    }

    void tooManyBytesAreRefusedBeforeArriving()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(m_layout)),
                       a.payload + QByteArray(400, '\0'));
            },
            QStringLiteral("at most"));
    }

    void absurdNorm()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                auto weights = weightsFromBytes(a.payload, m_layout).value() * 1e7f;
                w.send(MessageType::Result, resultHeader(a.header.value(QStringLiteral("lease")).toInteger(),
                                                         weightManifest(m_layout)),
                       weightsToBytes(weights));
            },
            QStringLiteral("absurd"));
    }

    void unknownLease()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                w.send(MessageType::Result, resultHeader(987654, weightManifest(m_layout)), a.payload);
            },
            QStringLiteral("no lease 987654 was ever issued"));
    }

    void payloadShaMismatch()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                QByteArray wire = net::encodeMessage(
                    MessageType::Result,
                    resultHeader(a.header.value(QStringLiteral("lease")).toInteger(), weightManifest(m_layout)), a.payload);
                wire[wire.size() - 1] = char(wire[wire.size() - 1] ^ 0x01); // one bit of the last chunk
                w.socket.write(wire);
            },
            QStringLiteral("CRC-32C does not match"));
    }

    void silentMidUpload()
    {
        expectRejected(
            [&](RawWorker &w, const Message &a) {
                const QByteArray wire = net::encodeMessage(
                    MessageType::Result,
                    resultHeader(a.header.value(QStringLiteral("lease")).toInteger(), weightManifest(m_layout)), a.payload);
                w.socket.write(wire.left(wire.size() / 2)); // and then nothing
            },
            QStringLiteral("went silent"));
    }

    void sameResultTwiceAndAnHonestWorkerCarriesOn()
    {
        const QString state = enroll();
        RawWorker w(state, m_network->port());
        QVERIFY(w.hello());
        auto a = leaseSomething(w);
        QVERIFY(a);
        const qint64 lease = a->header.value(QStringLiteral("lease")).toInteger();
        const qint64 before = seq();
        // An honest result moves the weights (one sent back unchanged is screened out as
        // "nothing was trained").
        const QByteArray result = trained(a->payload);
        w.send(MessageType::Result, resultHeader(lease, weightManifest(m_layout)), result);
        auto first = w.receive(MessageType::Ack);
        QVERIFY(first);
        QCOMPARE(first->header.value(QStringLiteral("status")).toString(), QStringLiteral("assimilated"));
        QCOMPARE(seq(), before + 1);
        // The same result again (a worker resending after a lost Ack): dropped, not fatal.
        w.send(MessageType::Result, resultHeader(lease, weightManifest(m_layout)), result);
        auto second = w.receive(MessageType::Ack);
        QVERIFY(second);
        QCOMPARE(second->header.value(QStringLiteral("status")).toString(), QStringLiteral("duplicate"));
        QVERIFY2(second->header.value(QStringLiteral("reason")).toString().contains(QStringLiteral("already")),
                 qPrintable(second->header.value(QStringLiteral("reason")).toString()));
        QCOMPARE(seq(), before + 1);
        QCOMPARE(w.socket.state(), QAbstractSocket::ConnectedState);
        // After all the bad workers above, honest work still goes through.
        auto next = leaseSomething(w);
        QVERIFY(next);
        w.send(MessageType::Result,
               resultHeader(next->header.value(QStringLiteral("lease")).toInteger(), weightManifest(m_layout)),
               trained(next->payload));
        auto ack = w.receive(MessageType::Ack);
        QCOMPARE(ack->header.value(QStringLiteral("status")).toString(), QStringLiteral("assimilated"));
        // Every refusal was recorded with its reason.
        auto store = Store::open(m_dir.filePath(QStringLiteral("run/flotilla.db")));
        auto rejected = (*store)->events(1, EventKind::ResultRejected);
        QStringList reasons;
        for (const auto &e : *rejected)
            reasons << e.detail;
        for (const char *expected : {"NaN or infinite", "tensor 0 of the weights", "bytes", "absurd", "987654"})
            QVERIFY2(reasons.join(u'|').contains(QString::fromLatin1(expected)), expected);
    }

    // The dashboard, the store and `flotilla revoke` see the name the certificate was issued
    // to; a Hello that claims another is refused, and never becomes a worker.
    // An Echo comes back with its seq, and costs the job nothing: what bench scale times a
    // heartbeat's way through the network thread with.
    void echoIsAnsweredWithItsSeq()
    {
        const QString state = enroll();
        QVERIFY(!state.isEmpty());
        RawWorker w(state, m_network->port());
        QVERIFY(w.hello());
        const qint64 before = seq();
        w.send(MessageType::Heartbeat, net::HeartbeatMsg{}.encode());
        w.send(MessageType::Echo, net::EchoMsg{77}.encode());
        auto echo = w.receive(MessageType::Echo, 5000);
        QVERIFY2(echo, qPrintable(w.lastError));
        QCOMPARE(echo->header.value(QStringLiteral("seq")).toInteger(), qint64(77));
        QCOMPARE(seq(), before);
    }

    void workerIsKnownByItsCertificateName()
    {
        const QString state = enroll();
        QVERIFY(!state.isEmpty());
        const QString enrolledAs = QStringLiteral("raw-%1").arg(m_enrolled);
        RawWorker impostor(state, m_network->port());
        QVERIFY(QTest::qWaitFor([&] { return impostor.socket.isEncrypted(); }, 10000));
        m_closed.clear();
        impostor.send(MessageType::Hello, QCborMap{{QStringLiteral("name"), QStringLiteral("gpu-box-1")}});
        QVERIFY(impostor.closedByPeer());
        QVERIFY2(impostor.lastError.contains(QStringLiteral("issued to worker '%1'").arg(enrolledAs)),
                 qPrintable(impostor.lastError));
        RawWorker honest(state, m_network->port());
        QVERIFY(honest.hello());
        auto store = Store::open(m_dir.filePath(QStringLiteral("run/flotilla.db")));
        QVERIFY(store);
        auto job = (*store)->latestJob();
        QVERIFY(job && job->has_value());
        QStringList names;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                names.clear();
                const auto workers = (*store)->workers((*job)->id);
                for (const auto &w : workers.value())
                    names << w.name;
                return names.contains(enrolledAs);
            }(),
            10000);
        QVERIFY2(!names.contains(QStringLiteral("gpu-box-1")), qPrintable(names.join(u',')));
    }

    // 30 idle TCP connections used to lock `flotilla serve` out for good. Hundreds of them,
    // and stalled TLS handshakes, from ten addresses: the kernel's accept queue stays empty,
    // a new worker joins and a restarted one comes back within 2 s, and again once they go.
    void idleConnectionsDoNotLockServeOut()
    {
        QTemporaryDir dir;
        ServeProcess serve(dir.path());
        // A long deadline: the connections stay held, so that only accepting can let workers in.
        QVERIFY2(serve.start({QStringLiteral("--handshake-timeout"), QStringLiteral("60")}), qPrintable(serve.output()));
        auto token = net::JoinToken::decode(serve.tokenText());
        QVERIFY2(token, qPrintable(token.error()));
        constexpr int kIdle = 200;
        constexpr int kStalled = 100;
        std::vector<std::unique_ptr<QTcpSocket>> hostile;
        int connected = 0;
        for (int i = 0; i < kIdle + kStalled; ++i) {
            auto socket = std::make_unique<QTcpSocket>();
            QTcpSocket *raw = socket.get();
            const bool stall = i >= kIdle;
            connect(raw, &QTcpSocket::connected, raw, [raw, stall, &connected] {
                ++connected;
                // The start of a ClientHello, in a record that announces more.
                if (stall)
                    raw->write(QByteArray::fromHex("1603010200010001fc0303") + QByteArray(32, '\x5a'));
            });
            raw->bind(loopback(2 + i % 10));
            raw->connectToHost(QHostAddress::LocalHost, token->port);
            hostile.push_back(std::move(socket));
        }
        QTRY_COMPARE_WITH_TIMEOUT(connected, kIdle + kStalled, 20000);
        if (acceptQueue(token->port) >= 0)
            QTRY_COMPARE_WITH_TIMEOUT(acceptQueue(token->port), 0, 10000);

        QString why;
        net::WorkerClient fresh({dir.filePath(QStringLiteral("fresh")), QStringLiteral("fresh"), 50, 500});
        qint64 ms = timeToWelcome(fresh, *token, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("joined after %1 ms: %2").arg(ms).arg(why)));
        fresh.stop();
        net::WorkerClient restarted({dir.filePath(QStringLiteral("fresh")), QStringLiteral("fresh"), 50, 500});
        ms = timeToWelcome(restarted, std::nullopt, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("came back after %1 ms: %2").arg(ms).arg(why)));
        restarted.stop();
        // None of the hostile connections was closed to let them in: accepting did it.
        for (const auto &socket : hostile)
            QCOMPARE(socket->state(), QAbstractSocket::ConnectedState);

        hostile.clear();
        net::WorkerClient late({dir.filePath(QStringLiteral("late")), QStringLiteral("late"), 50, 500});
        ms = timeToWelcome(late, *token, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("joined after %1 ms: %2").arg(ms).arg(why)));
        late.stop();
        QVERIFY(serve.running());
    }

    // --token-file keeps its token across restarts while it still works; otherwise the file
    // gets a new one and the old one is revoked. `flotilla token --list` and `--revoke` see
    // and bar them, and a revoked token admits no one.
    void tokenFileKeepsOneLiveTokenAndTokensAreListedAndRevoked()
    {
        QTemporaryDir dir;
        const quint16 port = freePort();
        QString original;
        {
            ServeProcess first(dir.path());
            QVERIFY2(first.start({}, port), qPrintable(first.output()));
            original = first.tokenText();
            QVERIFY(!original.isEmpty());
        }
        ServeProcess second(dir.path());
        QVERIFY2(second.start({}, port), qPrintable(second.output()));
        QCOMPARE(second.tokenText(), original);
        QVERIFY2(second.output().contains(QLatin1String("still valid")), qPrintable(second.output()));
        second.stop();
        const QString identity = QStringLiteral("--identity-dir=") + second.identityDir();
        const QString firstId = QString::fromLatin1(net::JoinToken::decode(original)->id.toHex());
        const QString note = QStringLiteral("serve --token-file ") + QFileInfo(second.tokenFile()).absoluteFilePath();
        Ran list = runFlotilla({QStringLiteral("token"), QStringLiteral("--list"), identity});
        QCOMPARE(list.exitCode, 0);
        QCOMPARE(tokenLines(QString::fromUtf8(list.out)).size(), 1);
        const QString line = tokenLines(QString::fromUtf8(list.out)).first();
        QVERIFY2(line.startsWith(firstId) && line.contains(QLatin1String("live")) && line.contains(QLatin1String("100/100"))
                     && line.endsWith(note),
                 qPrintable(QString::fromUtf8(list.out)));

        // Asked for another number of uses: a new token, and the one it replaces is revoked.
        ServeProcess third(dir.path());
        QVERIFY2(third.start({QStringLiteral("--token-uses"), QStringLiteral("5")}, port), qPrintable(third.output()));
        const QString replacement = third.tokenText();
        QVERIFY(replacement != original);
        const QString secondId = QString::fromLatin1(net::JoinToken::decode(replacement)->id.toHex());
        QVERIFY2(third.output().contains(QStringLiteral("it replaces %1, now revoked").arg(firstId)),
                 qPrintable(third.output()));
        list = runFlotilla({QStringLiteral("token"), QStringLiteral("--list"), identity});
        QCOMPARE(tokenLines(QString::fromUtf8(list.out)).size(), 1);
        QVERIFY2(tokenLines(QString::fromUtf8(list.out)).first().startsWith(secondId) && QString::fromUtf8(list.out).contains(QLatin1String("5/5")),
                 qPrintable(QString::fromUtf8(list.out)));
        list = runFlotilla({QStringLiteral("token"), QStringLiteral("--list"), QStringLiteral("--all"), identity});
        QCOMPARE(tokenLines(QString::fromUtf8(list.out)).size(), 2);
        QVERIFY2(tokenLines(QString::fromUtf8(list.out)).first().startsWith(firstId) && tokenLines(QString::fromUtf8(list.out)).first().contains(QLatin1String("revoked")),
                 qPrintable(QString::fromUtf8(list.out)));

        QString why;
        net::WorkerClient stale({dir.filePath(QStringLiteral("stale")), QStringLiteral("stale"), 50, 500});
        QCOMPARE(timeToWelcome(stale, net::JoinToken::decode(original).value(), &why), qint64(-1));
        QVERIFY2(why.contains(QLatin1String("revoked")), qPrintable(why));

        // Revoked by hand, with the first digits of its id.
        const Ran revoke = runFlotilla({QStringLiteral("token"), QStringLiteral("--revoke"), secondId.left(6), identity});
        QCOMPARE(revoke.exitCode, 0);
        QVERIFY2(QString::fromUtf8(revoke.out).contains(QStringLiteral("Revoked join token %1").arg(secondId)), qPrintable(QString::fromUtf8(revoke.out)));
        net::WorkerClient barred({dir.filePath(QStringLiteral("barred")), QStringLiteral("barred"), 50, 500});
        QCOMPARE(timeToWelcome(barred, net::JoinToken::decode(replacement).value(), &why), qint64(-1));
        QVERIFY2(why.contains(QLatin1String("revoked")), qPrintable(why));
        list = runFlotilla({QStringLiteral("token"), QStringLiteral("--list"), identity});
        QCOMPARE(list.exitCode, 0);
        QVERIFY2(QString::fromUtf8(list.out).contains(QLatin1String("No live join tokens")), qPrintable(QString::fromUtf8(list.out)));

        // Mistakes say what was wrong.
        Ran wrong = runFlotilla({QStringLiteral("token"), QStringLiteral("--revoke"), QStringLiteral("worker-7"), identity});
        QCOMPARE(wrong.exitCode, 1);
        QVERIFY2(QString::fromUtf8(wrong.err).contains(QLatin1String("not a token id")), qPrintable(QString::fromUtf8(wrong.err)));
        wrong = runFlotilla({QStringLiteral("token"), QStringLiteral("--revoke"), secondId, identity});
        QCOMPARE(wrong.exitCode, 1);
        QVERIFY2(QString::fromUtf8(wrong.err).contains(QLatin1String("already revoked")), qPrintable(QString::fromUtf8(wrong.err)));
        wrong = runFlotilla({QStringLiteral("token"), QStringLiteral("--list"), QStringLiteral("--revoke"), secondId, identity});
        QCOMPARE(wrong.exitCode, 2);
        QVERIFY2(QString::fromUtf8(wrong.err).contains(QLatin1String("not both")), qPrintable(QString::fromUtf8(wrong.err)));
    }

    void serveNamesItsLimitsAndRefusesBadValues()
    {
        const Ran help = runFlotilla({QStringLiteral("serve"), QStringLiteral("--help")});
        QCOMPARE(help.exitCode, 0);
        for (const char *option : {"--handshake-timeout", "--max-unauthenticated ", "--max-unauthenticated-per-address",
                                   "--join-failures", "--token-file"})
            QVERIFY2(QString::fromUtf8(help.out).contains(QString::fromLatin1(option)), option);
        const QList<QPair<QStringList, QString>> bad{
            {{QStringLiteral("--max-unauthenticated"), QStringLiteral("0")},
             QStringLiteral("--max-unauthenticated must be a whole number from 1")},
            {{QStringLiteral("--max-unauthenticated-per-address"), QStringLiteral("many")},
             QStringLiteral("--max-unauthenticated-per-address must be a whole number")},
            {{QStringLiteral("--join-failures"), QStringLiteral("-3")}, QStringLiteral("--join-failures must be")},
            {{QStringLiteral("--handshake-timeout"), QStringLiteral("soon")},
             QStringLiteral("--handshake-timeout must be a number of seconds")},
        };
        for (const auto &[flags, expected] : bad) {
            const Ran r = runFlotilla(QStringList{QStringLiteral("serve")} + flags);
            QCOMPARE(r.exitCode, 2);
            QVERIFY2(QString::fromUtf8(r.err).contains(expected), qPrintable(QString::fromUtf8(r.err)));
        }
    }
};

QTEST_GUILESS_MAIN(TestServe)
#include "tst_serve.moc"
