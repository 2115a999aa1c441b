// Operators: a control center attached to a coordinator that runs elsewhere.
//
// The stream and its checks without sockets (batches and subtask lists round-trip, malformed
// rows and fields are refused by name, tokens and certificates keep their role), then a real
// `flotilla serve` in a child process: a control center attaches with a token from
// `flotilla token --operator`, sees the job live (charts, workers, events, subtasks, tokens),
// pauses and resumes it, issues a join token, follows the coordinator through a SIGKILL and
// a restart without a row shown twice or missed, and stops it. Worker certificates that try
// to watch, ten at once, are refused, as is an operator that tries to train.
#include "testsupport/Records.h"
#include "TestSupport.h"

#include "agent/WorkerAgent.h"
#include "desktop/RemoteSession.h"
#include "engine/coordination/Store.h"
#include "net/Messages.h"
#include "net/TrustStore.h"
#include "net/WorkerClient.h"
#include "server/WatchStream.h"
#include "ui/Dashboard.h"
#include "ui/MainWindow.h"
#include "ui/Views.h"

#include <QtTest>

#include <QAction>
#include <QCborArray>
#include <QCborMap>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTableWidget>
#include <QTemporaryDir>

#include <algorithm>
#include <csignal>
#include <memory>

using namespace flotilla;

namespace {

QString hostOf(const QString &endpoint)
{
    return endpoint.section(QLatin1Char(':'), 0, 0);
}

} // namespace

class TestOperator : public QObject
{
    Q_OBJECT

    QTemporaryDir m_dir;
    std::unique_ptr<QProcess> m_serve;
    int m_port = 0;
    std::unique_ptr<WorkerAgent> m_worker;
    std::unique_ptr<RemoteSession> m_session;

    QString runDir() const { return m_dir.filePath(QStringLiteral("run")); }
    QString identityDir() const { return m_dir.filePath(QStringLiteral("identity")); }

    // Starts (or starts again, on the same port) `flotilla serve` on a job long enough to
    // outlive the test.
    void startServe()
    {
        m_serve = std::make_unique<QProcess>();
        m_serve->setProcessChannelMode(QProcess::MergedChannels);
        m_serve->setStandardOutputFile(m_dir.filePath(QStringLiteral("serve.out")), QIODevice::Append);
        m_serve->start(test::flotillaBinary(),
                       {QStringLiteral("serve"), QStringLiteral("--run-dir"), runDir(), QStringLiteral("--identity-dir"),
                        identityDir(), QStringLiteral("--listen"), QStringLiteral("127.0.0.1"), QStringLiteral("--host"),
                        QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QString::number(m_port),
                        QStringLiteral("--token-file"), m_dir.filePath(QStringLiteral("worker-token")),
                        QStringLiteral("--quiet"), QStringLiteral("--train-limit"), QStringLiteral("3000"),
                        QStringLiteral("--test-limit"), QStringLiteral("200"), QStringLiteral("--shards"),
                        QStringLiteral("6"), QStringLiteral("--epochs"), QStringLiteral("200"),
                        QStringLiteral("--preempt-mean"), QStringLiteral("0")});
        QVERIFY(m_serve->waitForStarted(10000));
    }

    // A token from `flotilla token`, as an admin on the coordinator's machine gets one.
    QString token(const QStringList &extra)
    {
        const test::ProcessRun run = test::runFlotilla(
            QStringList{QStringLiteral("token"), QStringLiteral("--identity-dir"), identityDir(), QStringLiteral("--uses"),
                        QStringLiteral("20")}
                + extra,
            30000);
        if (!run.finished || run.exitCode != 0)
            qWarning().noquote() << run.err;
        return run.out.trimmed();
    }

    std::unique_ptr<Store> store()
    {
        auto s = Store::open(QDir(runDir()).filePath(QStringLiteral("flotilla.db")));
        return s ? std::move(s).value() : nullptr;
    }

    // Rows of the job in its store, read beside the running coordinator.
    qsizetype storeCount(const char *what)
    {
        auto s = store();
        if (!s)
            return -1;
        auto job = s->latestJob();
        if (!job || !job->has_value())
            return -1;
        if (qstrcmp(what, "assimilations") == 0)
            return qsizetype(s->assimilations((*job)->id).value().size());
        if (qstrcmp(what, "evaluations") == 0)
            return qsizetype(s->evaluations((*job)->id).value().size());
        return qsizetype(s->events((*job)->id).value().size());
    }

private Q_SLOTS:
    // --- The stream, without sockets ---------------------------------------------------

    void batchesRoundTripAndMalformedRowsAreRefused()
    {
        WatchBatch b;
        b.spec = QStringLiteral("{\"name\":\"x\"}");
        b.rows.assimilations << records::assimilationAt(1000, 7, 6, 2, 0.5, 320, 1.25, 3);
        b.rows.evaluations << records::evaluationAt(2000, 1, 6, 0.81, 0.52);
        b.rows.events << records::eventAt(3000, QStringLiteral("worker-joined"), 3, 0, 0, QStringLiteral("lab-7"));
        b.rows.costs << CostPoint{4000, 0.1, 0.3, 0.05, 12.0, 1.5};
        Snapshot s;
        s.job = QStringLiteral("job");
        s.version = 6;
        WorkerRow w;
        w.id = 3;
        w.name = QStringLiteral("lab-7");
        w.online = true;
        w.quarantineReason = QStringLiteral("none");
        s.workers << w;
        b.snapshot = s;
        b.tokens = QList<JoinTokenRow>{{QStringLiteral("00aa"), QStringLiteral("live"), true, 2, 3, 10, 20,
                                            QStringLiteral("lab"), true}};
        auto back = decodeBatch(encodeBatch(b));
        QVERIFY2(back, qPrintable(back.error()));
        QCOMPARE(back->spec, b.spec);
        QCOMPARE(back->rows.assimilations.size(), 1);
        QCOMPARE(back->rows.assimilations[0].seq, 7);
        QCOMPARE(back->rows.assimilations[0].trainSeconds, 1.25);
        QCOMPARE(back->rows.evaluations[0].accuracy, 0.81);
        QCOMPARE(back->rows.events[0].detail, QStringLiteral("lab-7"));
        QCOMPARE(back->rows.costs[0].wastedSeconds, 1.5);
        QVERIFY(back->snapshot);
        QCOMPARE(back->snapshot->workers.size(), 1);
        QCOMPARE(back->snapshot->workers[0].name, QStringLiteral("lab-7"));
        QVERIFY(back->snapshot->workers[0].online);
        QVERIFY(back->tokens && back->tokens->size() == 1 && back->tokens->at(0).operatorRole);

        // A row of the wrong shape or type fails the batch, named.
        const auto refused = [](const QCborMap &m, const QString &expected) {
            auto r = decodeBatch(m.toCborValue().toCbor());
            QVERIFY(!r);
            QVERIFY2(r.error().contains(expected), qPrintable(r.error()));
        };
        refused(QCborMap{{QStringLiteral("assimilations"), QCborArray{QCborArray{1, 2, 3}}}}, QStringLiteral("assimilation"));
        refused(QCborMap{{QStringLiteral("events"), QCborArray{QCborArray{1, 2, 3, 4, 5, 6}}}}, QStringLiteral("event"));
        refused(QCborMap{{QStringLiteral("evaluations"), QStringLiteral("all of them")}}, QStringLiteral("not a list"));
        refused(QCborMap{{QStringLiteral("snapshot"), 5}}, QStringLiteral("snapshot"));
        QVERIFY(!decodeBatch(QByteArray("\xff\x00garbage", 9)));
        QVERIFY(!decodeSubtasks(QCborMap{{QStringLiteral("subtasks"), QCborArray{QCborArray{1}}}}.toCborValue().toCbor()));
        auto subtasks = decodeSubtasks(encodeSubtasks({SubtaskRow{4, 1, 2, 0, 500, QStringLiteral("done"), 2, 9,
                                                                      QStringLiteral("lease 3 (a): expired")}}));
        QVERIFY2(subtasks, qPrintable(subtasks.error()));
        QCOMPARE(subtasks->at(0).history, QStringLiteral("lease 3 (a): expired"));
    }

    void operatorMessagesCheckTheirFields()
    {
        auto watch = net::WatchMsg::decode(net::WatchMsg{{QStringLiteral("1.1"), 5, 6, 2, 9}}.encode());
        QVERIFY(watch);
        QCOMPARE(watch->cursor.assimilationSeq, 6);
        auto negative = net::WatchMsg::decode(QCborMap{{QStringLiteral("event"), -3}});
        QVERIFY(!negative);
        QVERIFY2(negative.error().contains(QStringLiteral("'event'")), qPrintable(negative.error()));
        auto noAction = net::CommandMsg::decode(QCborMap{{QStringLiteral("id"), 1}});
        QVERIFY(!noAction);
        QVERIFY2(noAction.error().contains(QStringLiteral("'action' is missing")), qPrintable(noAction.error()));
        net::CommandMsg weight;
        weight.id = 3;
        weight.action = QStringLiteral("job-weight");
        weight.job = 12;
        weight.value = 2.5;
        auto decodedWeight = net::CommandMsg::decode(weight.encode());
        QVERIFY(decodedWeight);
        QCOMPARE(decodedWeight->job, qint64(12));
        QCOMPARE(decodedWeight->value, 2.5);
        auto negativeJob = net::CommandMsg::decode(QCborMap{{QStringLiteral("id"), 1},
                                                           {QStringLiteral("action"), QStringLiteral("job-cancel")},
                                                           {QStringLiteral("job"), -4}});
        QVERIFY(!negativeJob);
        QVERIFY2(negativeJob.error().contains(QStringLiteral("'job'")), qPrintable(negativeJob.error()));
        auto noState = net::UpdateMsg::decode(QCborMap{{QStringLiteral("job"), QStringLiteral("1.1")}});
        QVERIFY(!noState);
        QVERIFY2(noState.error().contains(QStringLiteral("'state'")), qPrintable(noState.error()));
    }

    void tokensAndCertificatesKeepTheirRole()
    {
        QTemporaryDir dir;
        net::TrustStore trust(dir.path());
        const QByteArray ca(32, 'c');
        auto op = trust.issueToken(QStringLiteral("lab"), 7441, ca, 600, 1, 1000, QStringLiteral("laptop"),
                                   net::Role::Operator);
        QVERIFY(op);
        auto decoded = net::JoinToken::decode(op->encode());
        QVERIFY2(decoded, qPrintable(decoded.error()));
        QCOMPARE(decoded->role, net::Role::Operator);
        auto worker = trust.issueToken(QStringLiteral("lab"), 7441, ca, 600, 1, 1000);
        QCOMPARE(net::JoinToken::decode(worker->encode())->role, net::Role::Worker);
        auto redeemed = trust.redeem(op->id, op->secret, 2000);
        QVERIFY(redeemed);
        QCOMPARE(*redeemed, net::Role::Operator);
        QCOMPARE(*trust.redeem(worker->id, worker->secret, 2000), net::Role::Worker);
        QVERIFY(trust.addCertificate({QByteArray(32, 'f'), QStringLiteral("laptop"), 0, 2000, 0, {}, net::Role::Operator}));
        QCOMPARE(trust.certificate(QByteArray(32, 'f'))->value().role, net::Role::Operator);
        QCOMPARE(trust.tokens()->at(0).role, net::Role::Operator);
        QCOMPARE(trust.tokens()->at(1).role, net::Role::Worker);
        // A role this version does not know is refused, not taken for a worker's.
        QCborMap map{{QStringLiteral("h"), QStringLiteral("lab")}, {QStringLiteral("p"), 7441},
                     {QStringLiteral("f"), ca}, {QStringLiteral("i"), QByteArray(8, 'i')},
                     {QStringLiteral("s"), QByteArray(16, 's')}, {QStringLiteral("e"), 99999},
                     {QStringLiteral("r"), QStringLiteral("admin")}};
        const QString text = QStringLiteral("flt1.") + QString::fromLatin1(map.toCborValue().toCbor().toBase64(
                                                           QByteArray::Base64UrlEncoding | QByteArray::OmitTrailingEquals));
        auto unknown = net::JoinToken::decode(text);
        QVERIFY(!unknown);
        QVERIFY2(unknown.error().contains(QStringLiteral("role")), qPrintable(unknown.error()));
        // A submitter's token keeps its role through the token, the redemption and the record.
        auto submitter = trust.issueToken(QStringLiteral("lab"), 7441, ca, 600, 1, 1000, QStringLiteral("alice"),
                                          net::Role::Submitter);
        QVERIFY(submitter);
        QCOMPARE(net::JoinToken::decode(submitter->encode())->role, net::Role::Submitter);
        QCOMPARE(*trust.redeem(submitter->id, submitter->secret, 2000), net::Role::Submitter);
        QVERIFY(trust.addCertificate({QByteArray(32, 'a'), QStringLiteral("alice"), 0, 2000, 0, {}, net::Role::Submitter}));
        QCOMPARE(trust.certificate(QByteArray(32, 'a'))->value().role, net::Role::Submitter);
        QCOMPARE(net::describe(net::Role::Submitter), QStringLiteral("submitter"));
        // A worker's token cannot attach a control center.
        RemoteSession session({dir.filePath(QStringLiteral("op")), QStringLiteral("op")});
        auto refused = session.attach(*net::JoinToken::decode(worker->encode()));
        QVERIFY(!refused);
        QVERIFY2(refused.error().contains(QStringLiteral("operator or submitter token")), qPrintable(refused.error()));
    }

    // --- A real coordinator ------------------------------------------------------------

    void operatorAttachesToARealCoordinator()
    {
        startServe();
        QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(m_dir.filePath(QStringLiteral("worker-token"))), 120000);
        QFile endpoint(QDir(identityDir()).filePath(QStringLiteral("endpoint.json")));
        QVERIFY(endpoint.open(QIODevice::ReadOnly));
        m_port = QJsonDocument::fromJson(endpoint.readAll()).object().value(QStringLiteral("port")).toInt();
        QVERIFY(m_port > 0);

        // One worker trains, in this process.
        QFile tokenFile(m_dir.filePath(QStringLiteral("worker-token")));
        QVERIFY(tokenFile.open(QIODevice::ReadOnly));
        WorkerAgent::Options w;
        w.stateDir = m_dir.filePath(QStringLiteral("worker"));
        w.name = QStringLiteral("lab-7");
        w.device = QStringLiteral("cpu");
        m_worker = std::make_unique<WorkerAgent>(w);
        QVERIFY(m_worker->start(net::JoinToken::decode(QString::fromUtf8(tokenFile.readAll())).value()));

        const QString text = token({QStringLiteral("--operator")});
        auto operatorToken = net::JoinToken::decode(text);
        QVERIFY2(operatorToken, qPrintable(text));
        QCOMPARE(operatorToken->role, net::Role::Operator);
        m_session = std::make_unique<RemoteSession>(
            RemoteSession::Options{m_dir.filePath(QStringLiteral("operator")), QStringLiteral("dana-laptop"), 1000});
        QSignalSpy loaded(m_session.get(), &ui::ControlSession::historyLoaded);
        QVERIFY(m_session->attach(*operatorToken));
        QCOMPARE(hostOf(m_session->endpoint()), QStringLiteral("127.0.0.1"));

        // The window a data scientist looks at: the remote job, without Start or this machine.
        QSignalSpy everyAnswer(m_session.get(), &ui::ControlSession::commandAnswered);
        ui::MainWindow window(m_session.get(), JobSpec::defaultJob(), QString());
        QVERIFY(!window.connectAction()->isVisible());
        QVERIFY(window.machinePanel()->isHidden());
        window.show();
        QTRY_VERIFY_WITH_TIMEOUT(!loaded.isEmpty(), 60000);
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Running, 30000);
        QCOMPARE(m_session->job().training.shards, 6);
        QTRY_VERIFY_WITH_TIMEOUT(m_session->history().evaluations.size() >= 2, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(window.dashboard()->everyChartHasData(), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(window.workers()->table()->rowCount() == 1, 10000);
        QCOMPARE(window.workers()->table()->item(0, 0)->text().contains(QStringLiteral("lab-7"))
                     || window.workers()->table()->item(0, 1)->text().contains(QStringLiteral("lab-7")),
                 true);
        QVERIFY(window.events()->table()->rowCount() > 0);

        // The subtask list comes from the coordinator's store, on request.
        QSignalSpy subtasks(m_session.get(), &ui::ControlSession::subtasksLoaded);
        m_session->refreshSubtasks();
        QTRY_VERIFY_WITH_TIMEOUT(!subtasks.isEmpty(), 10000);
        QVERIFY(subtasks.first().at(0).value<QList<SubtaskRow>>().size() >= 6);

        // Pause: the coordinator gives out no more work; Resume: it goes on.
        m_session->setPaused(true);
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Paused, 10000);
        // Nothing new is recorded once the last leases are in: the operator's record and the
        // store agree row for row.
        QTRY_VERIFY_WITH_TIMEOUT(m_session->history().assimilations.size() == storeCount("assimilations")
                                     && m_session->history().events.size() == storeCount("events"),
                                 30000);
        m_session->setPaused(false);
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Running, 10000);

        // A join token for another worker, issued from here.
        QSignalSpy issued(m_session.get(), &ui::ControlSession::tokenIssued);
        QSignalSpy tokensChanged(m_session.get(), &ui::ControlSession::tokensChanged);
        m_session->issueToken(2, 3600);
        QTRY_VERIFY_WITH_TIMEOUT(!issued.isEmpty(), 10000);
        QVERIFY2(issued.first().at(1).toString().isEmpty(), qPrintable(issued.first().at(1).toString()));
        auto joinToken = net::JoinToken::decode(issued.first().at(0).toString());
        QVERIFY(joinToken);
        QCOMPARE(joinToken->role, net::Role::Worker);
        QCOMPARE(int(joinToken->port), m_port);
        const QString id = QString::fromLatin1(joinToken->id.toHex());
        const auto listed = [this, id] {
            const QList<JoinTokenRow> live = m_session->joinTokens(false).value();
            return std::any_of(live.cbegin(), live.cend(), [&](const JoinTokenRow &t) { return t.id == id; });
        };
        QTRY_VERIFY_WITH_TIMEOUT(listed(), 10000);
        // ...and revoked from here.
        QSignalSpy answered(m_session.get(), &ui::ControlSession::commandAnswered);
        m_session->revokeToken(id);
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 10000);
        QVERIFY2(answered.first().at(1).toString().isEmpty(), qPrintable(answered.first().at(1).toString()));
        QTRY_VERIFY_WITH_TIMEOUT(!listed(), 10000);
        QVERIFY(net::TrustStore(identityDir()).token(joinToken->id)->value().revokedMs != 0);

        // An operator revokes workers, not operators (itself included).
        answered.clear();
        m_session->revoke(QStringLiteral("dana-laptop"));
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 10000);
        QVERIFY2(answered.first().at(1).toString().contains(QStringLiteral("no unrevoked worker certificate")),
                 qPrintable(answered.first().at(1).toString()));
        // The Jobs tab asked this single job's coordinator for its queue: refused once, and not
        // asked again (the tab refreshes on every answer, and asked three times a second).
        const auto noQueue = std::count_if(everyAnswer.cbegin(), everyAnswer.cend(), [](const QList<QVariant> &a) {
            return a.at(1).toString().contains(QStringLiteral("no queue"));
        });
        QVERIFY2(noQueue <= 1, qPrintable(QStringLiteral("the queue was refused %1 times").arg(noQueue)));
        QCOMPARE(m_session->state(), JobState::Running);
    }

    void workersCannotWatchAndOperatorsCannotTrain()
    {
        QVERIFY(m_session);
        // Ten worker certificates, at once, try to watch: each is refused by name, and the
        // operator's stream goes on.
        auto workerToken = net::JoinToken::decode(token({}));
        QVERIFY(workerToken);
        std::vector<std::unique_ptr<net::WorkerClient>> intruders;
        int refused = 0;
        QStringList reasons;
        for (int i = 0; i < 10; ++i) {
            net::WorkerClient::Options o;
            o.stateDir = m_dir.filePath(QStringLiteral("intruder-%1").arg(i));
            o.name = QStringLiteral("intruder-%1").arg(i);
            auto client = std::make_unique<net::WorkerClient>(o);
            QVERIFY(client->configure(*workerToken));
            net::WorkerClient *c = client.get();
            connect(c, &net::WorkerClient::welcomed, c, [c] { c->send(net::WatchMsg{}); });
            connect(c, &net::WorkerClient::failed, this, [&](const QString &reason) {
                ++refused;
                reasons << reason;
            });
            net::HelloMsg hello;
            hello.instanceType = QStringLiteral("local");
            hello.priceClass = QStringLiteral("volunteer");
            client->start(hello);
            intruders.push_back(std::move(client));
        }
        const int before = m_session->updatesReceived();
        QTRY_COMPARE_WITH_TIMEOUT(refused, 10, 60000);
        for (const QString &reason : reasons)
            QVERIFY2(reason.contains(QStringLiteral("only an operator may send")), qPrintable(reason));
        QTRY_VERIFY_WITH_TIMEOUT(m_session->updatesReceived() > before + 2, 10000);

        // An operator's certificate that asks for work is refused too.
        auto operatorToken = net::JoinToken::decode(token({QStringLiteral("--operator")}));
        net::WorkerClient::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("operator-training"));
        o.name = QStringLiteral("sneaky");
        net::WorkerClient sneaky(o);
        QVERIFY(sneaky.configure(*operatorToken));
        connect(&sneaky, &net::WorkerClient::welcomed, &sneaky, [&sneaky] { sneaky.send(net::RequestMsg{}); });
        QSignalSpy failed(&sneaky, &net::WorkerClient::failed);
        sneaky.start(net::HelloMsg{});
        QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), 30000);
        QVERIFY2(failed.first().at(0).toString().contains(QStringLiteral("never trains")),
                 qPrintable(failed.first().at(0).toString()));
    }

    void theStreamSurvivesACoordinatorRestart()
    {
        QVERIFY(m_session && m_serve);
        const qsizetype before = m_session->history().assimilations.size();
        QVERIFY(before > 0);
        ::kill(pid_t(m_serve->processId()), SIGKILL);
        QVERIFY(m_serve->waitForFinished(10000));
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Loading, 10000);
        startServe(); // the same run folder and port: it resumes the job
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Running, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(m_session->history().assimilations.size() > before + 5, 120000);

        // Row for row what the store holds: nothing shown twice, nothing missed.
        m_session->setPaused(true);
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Paused, 10000);
        QTRY_VERIFY_WITH_TIMEOUT(m_session->history().assimilations.size() == storeCount("assimilations")
                                     && m_session->history().events.size() == storeCount("events")
                                     && m_session->history().evaluations.size() == storeCount("evaluations"),
                                 30000);
        auto s = store();
        QVERIFY(s);
        const auto job = s->latestJob().value().value();
        const auto stored = s->assimilations(job.id).value();
        const History &seen = m_session->history();
        for (size_t i = 0; i < stored.size(); ++i)
            QCOMPARE(seen.assimilations[qsizetype(i)].seq, stored[i].seq);
        const auto events = s->events(job.id).value();
        for (size_t i = 0; i < events.size(); ++i)
            QCOMPARE(seen.events[qsizetype(i)].kind, events[i].kind);
        m_session->setPaused(false);
    }

    void anOperatorStopsTheCoordinator()
    {
        QVERIFY(m_session && m_serve);
        QSignalSpy answered(m_session.get(), &ui::ControlSession::commandAnswered);
        m_session->stop();
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 10000);
        QVERIFY2(answered.first().at(1).toString().isEmpty(), qPrintable(answered.first().at(1).toString()));
        QVERIFY(m_serve->waitForFinished(30000));
        QCOMPARE(m_serve->exitStatus(), QProcess::NormalExit);
        // Stopped, not "reconnecting": it was asked to go (it is found again when it starts).
        QTRY_COMPARE_WITH_TIMEOUT(m_session->state(), JobState::Stopped, 10000);
        QTest::qWait(1500);
        QCOMPARE(m_session->state(), JobState::Stopped);
        QFile log(m_dir.filePath(QStringLiteral("serve.out")));
        QVERIFY(log.open(QIODevice::ReadOnly));
        QVERIFY(log.readAll().contains("operator dana-laptop asked to"));
    }

    // The cursor on its own, over the real store the coordinator left: a history read a few
    // rows at a time comes whole, in order, nothing twice; a cursor of another job starts over.
    void aLongHistoryComesInPiecesWithNothingTwice()
    {
        auto s = store();
        QVERIFY(s);
        const auto job = s->latestJob().value().value();
        const auto assimilations = s->assimilations(job.id).value();
        const auto events = s->events(job.id).value();
        const auto evaluations = s->evaluations(job.id).value();
        const auto ledger = s->ledger(job.id).value();
        QVERIFY(assimilations.size() > 20 && events.size() > 20 && ledger.size() > 20);

        net::WatchCursor cursor;
        History seen;
        int reads = 0;
        for (bool more = true; more; ++reads) {
            auto r = readAfter(*s, cursor, 7);
            QVERIFY2(r, qPrintable(r.error()));
            QCOMPARE(r->reset, reads == 0);
            QCOMPARE(!r->batch.spec.isEmpty(), reads == 0);
            seen.assimilations << r->batch.rows.assimilations;
            seen.events << r->batch.rows.events;
            seen.evaluations << r->batch.rows.evaluations;
            seen.costs << r->batch.rows.costs;
            cursor = r->cursor;
            more = r->more;
            QVERIFY(reads < 10000);
        }
        QVERIFY(reads > 3);
        QCOMPARE(seen.assimilations.size(), qsizetype(assimilations.size()));
        for (size_t i = 0; i < assimilations.size(); ++i)
            QCOMPARE(seen.assimilations[qsizetype(i)].seq, assimilations[i].seq);
        QCOMPARE(seen.events.size(), qsizetype(events.size()));
        for (size_t i = 0; i < events.size(); ++i)
            QCOMPARE(seen.events[qsizetype(i)].atMs, events[i].atMs);
        QCOMPARE(seen.evaluations.size(), qsizetype(evaluations.size()));
        QCOMPARE(seen.costs.size(), qsizetype(ledger.size()));
        // Caught up: nothing more, and no reset.
        auto after = readAfter(*s, cursor, 7);
        QVERIFY(after && !after->reset && !after->more);
        QVERIFY(after->batch.rows.events.isEmpty() && after->batch.rows.assimilations.isEmpty());
        // A cursor of another job starts from the beginning.
        net::WatchCursor other = cursor;
        other.job = QStringLiteral("1.1");
        auto fresh = readAfter(*s, other, 100000);
        QVERIFY(fresh && fresh->reset);
        QCOMPARE(fresh->batch.rows.assimilations.size(), qsizetype(assimilations.size()));
    }

    // A test function that failed shows what the coordinator said (its output is in the
    // temporary folder, gone with the test).
    void cleanup()
    {
        if (!QTest::currentTestFailed())
            return;
        QFile log(m_dir.filePath(QStringLiteral("serve.out")));
        if (log.open(QIODevice::ReadOnly))
            qWarning().noquote() << "--- the coordinator's output (last 6000 bytes) ---\n"
                                 << QString::fromUtf8(log.readAll().right(6000));
    }

    void cleanupTestCase()
    {
        m_session.reset();
        if (m_worker)
            m_worker->preemptionNotice();
        m_worker.reset();
        if (m_serve && m_serve->state() != QProcess::NotRunning) {
            m_serve->kill();
            m_serve->waitForFinished(10000);
        }
    }
};

QTEST_MAIN(TestOperator)
#include "tst_operator.moc"
