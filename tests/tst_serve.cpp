// The coordinator's server in this process with real TLS, and workers that send bad
// results on purpose: NaN and infinite weights, wrong shapes, a wrong number of values, an
// absurd norm, unknown leases, the same result twice, a payload whose SHA-256 does not
// match, an upload that stops half way. Each is refused with a clear reason, the offending
// connection is closed, the global model is untouched, and an honest worker carries on.
#include "CoordinatorServer.h"
#include "LocalFleet.h"
#include "TestSupport.h"
#include "WireFormat.h"
#include "WorkerClient.h"

#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QtTest>

#include <torch/torch.h>

using namespace flotilla;
using net::Message;
using net::MessageType;

namespace {

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

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
    std::unique_ptr<CoordinatorServer> m_server;
    WeightLayout m_layout;
    QStringList m_closed; // reasons of closed connections
    int m_enrolled = 0;

    // Enrolls a worker through the real join flow and returns its state folder.
    QString enroll()
    {
        const QString state = m_dir.filePath(QStringLiteral("worker-%1").arg(++m_enrolled));
        auto token = m_server->endpoint().trust().issueToken(QStringLiteral("127.0.0.1"), m_server->port(),
                                                             m_server->caFingerprint(), 600, 1,
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
        m_fleet->service()->withCoordinator([&](Coordinator &c) { w = c.globalWeights().clone(); });
        return w;
    }

    qint64 seq()
    {
        return m_fleet->service()->callProgress().seq;
    }

    // Sends a result that must be refused: checks the reason, the closed connection, the
    // unchanged model.
    void expectRejected(const std::function<void(RawWorker &, const Message &)> &sendBad, const QString &reason)
    {
        const QString state = enroll();
        QVERIFY(!state.isEmpty());
        RawWorker w(state, m_server->port());
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
        auto fleet = LocalFleet::create(job, m_dir.filePath(QStringLiteral("run")), 0);
        QVERIFY2(fleet, qPrintable(fleet.error()));
        m_fleet = std::move(fleet).value();
        m_fleet->start();
        net::CoordinatorEndpoint::Options options;
        options.identityDir = m_dir.filePath(QStringLiteral("identity"));
        options.bindAddress = QHostAddress::LocalHost;
        options.stallTimeoutMs = 1000;
        auto server = CoordinatorServer::create(m_fleet->service(), options);
        QVERIFY2(server, qPrintable(server.error()));
        m_server = std::move(server).value();
        QVERIFY(m_server->listen());
        connect(&m_server->endpoint(), &net::CoordinatorEndpoint::connectionClosed, this,
                [this](qint64, const QString &reason) { m_closed << reason; });
        connect(&m_server->endpoint(), &net::CoordinatorEndpoint::refused, this,
                [this](const QString &, const QString &reason) { m_closed << reason; });
        m_fleet->service()->withCoordinator([&](Coordinator &c) { m_layout = c.layout(); });
    }

    void cleanupTestCase()
    {
        m_server.reset();
        m_fleet.reset();
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
            QStringLiteral("SHA-256 does not match"));
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
        RawWorker w(state, m_server->port());
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
        auto rejected = (*store)->events(1, QStringLiteral("result-rejected"));
        QStringList reasons;
        for (const auto &e : *rejected)
            reasons << e.detail;
        for (const char *expected : {"NaN or infinite", "tensor 0 of the weights", "bytes", "absurd", "987654"})
            QVERIFY2(reasons.join(u'|').contains(QString::fromLatin1(expected)), expected);
    }
};

QTEST_GUILESS_MAIN(TestServe)
#include "tst_serve.moc"
