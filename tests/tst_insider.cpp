// The coordinator's trust under pressure, against `flotilla serve` as users run it.
//
// Insiders: a real coordinator process, an honest
// worker process training, and `flotilla bench insider` holding valid certificates enrolled
// with the fleet's own token. Each attack (floods of each message kind, a peer that never
// reads, a 4 GiB claim, a foreign lease, a storm of sessions) must be closed with the budget
// it broke named in the store, cost the coordinator little memory, leave the port answering
// a fresh handshake, and never interrupt the honest worker, whose results keep being
// assimilated while the attacks run.
//
// Enrolment killed: thirty workers join at once and the coordinator is SIGKILLed while they
// do. The trust database opens afterwards, holds every certificate a worker received (and
// paid a token's use for each), and the coordinator started again lets every enrolled
// worker back in from its state folder.
#include "TestSupport.h"
#include "engine/coordination/Store.h"
#include "net/TrustStore.h"
#include "net/WorkerClient.h"

#include <QSslCertificate>

#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

using namespace flotilla;

namespace {

QString readText(const QString &path)
{
    return QString::fromUtf8(test::readFile(path));
}

} // namespace

class TestInsider : public QObject
{
    Q_OBJECT

    QTemporaryDir m_dir;
    quint16 m_port = test::freeLoopbackPort();

    QString path(const QString &name) const { return m_dir.filePath(name); }

    std::unique_ptr<QProcess> start(const QStringList &arguments, const QString &log)
    {
        auto p = std::make_unique<QProcess>();
        p->setProcessChannelMode(QProcess::MergedChannels);
        p->setStandardOutputFile(path(log));
        p->start(test::flotillaBinary(), arguments);
        return p;
    }

    std::unique_ptr<QProcess> serve(const QString &run, const QStringList &job)
    {
        const QStringList common{QStringLiteral("serve"), QStringLiteral("--run-dir"), path(run),
                                 QStringLiteral("--identity-dir"), path(QStringLiteral("identity")),
                                 QStringLiteral("--listen"), QStringLiteral("127.0.0.1"), QStringLiteral("--host"),
                                 QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QString::number(m_port),
                                 QStringLiteral("--token-file"), path(QStringLiteral("token"))};
        return start(common + job, run + QStringLiteral(".out"));
    }

private Q_SLOTS:
    void trustSurvivesAKillDuringEnrolment()
    {
        QVERIFY(m_dir.isValid());
        const QStringList job{QStringLiteral("--train-limit"), QStringLiteral("3000"), QStringLiteral("--test-limit"),
                              QStringLiteral("300"), QStringLiteral("--epochs"), QStringLiteral("400"),
                              QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--token-uses"),
                              QStringLiteral("200")};
        auto coordinator = serve(QStringLiteral("enrol-run"), job);
        QTRY_VERIFY_WITH_TIMEOUT(!readText(path(QStringLiteral("token"))).trimmed().isEmpty(), 60000);
        auto token = net::JoinToken::decode(readText(path(QStringLiteral("token"))).trimmed());
        QVERIFY2(token, qPrintable(token.error()));
        constexpr int kWorkers = 30;
        std::vector<std::unique_ptr<net::WorkerClient>> workers;
        net::HelloMsg hello;
        hello.instanceType = QStringLiteral("local");
        hello.priceClass = QStringLiteral("volunteer");
        const auto stateOf = [&](int i) { return path(QStringLiteral("enrolling/w%1").arg(i)); };
        for (int i = 0; i < kWorkers; ++i) {
            net::WorkerClient::Options o;
            o.stateDir = stateOf(i);
            o.name = QStringLiteral("w%1").arg(i);
            o.initialBackoffMs = 100;
            o.maxBackoffMs = 1000;
            workers.push_back(std::make_unique<net::WorkerClient>(o));
            QVERIFY(workers.back()->configure(*token).ok());
            workers.back()->start(hello);
        }
        const auto enrolled = [&] {
            int n = 0;
            for (int i = 0; i < kWorkers; ++i)
                n += QFileInfo::exists(stateOf(i) + QStringLiteral("/cert.pem")) ? 1 : 0;
            return n;
        };
        // Killed in the middle: some have their certificates, others are still asking.
        QTRY_VERIFY_WITH_TIMEOUT(enrolled() >= 3, 30000);
        coordinator->kill();
        QVERIFY(coordinator->waitForFinished(10000));
        const int before = enrolled();
        qInfo("%d of %d workers held a certificate when the coordinator was killed", before, kWorkers);
        for (auto &w : workers)
            w->stop();
        workers.clear();

        // The database opens, and every certificate a worker holds is in it, paid for.
        net::TrustStore trust(path(QStringLiteral("identity")));
        auto certificates = trust.certificates();
        QVERIFY2(certificates, qPrintable(certificates.error()));
        QSet<QByteArray> recorded;
        for (const auto &c : *certificates)
            recorded.insert(c.fingerprint);
        int held = 0;
        for (int i = 0; i < kWorkers; ++i) {
            QFile pem(stateOf(i) + QStringLiteral("/cert.pem"));
            if (!pem.open(QIODevice::ReadOnly))
                continue;
            ++held;
            const QByteArray fingerprint = QSslCertificate(pem.readAll()).digest(QCryptographicHash::Sha256);
            QVERIFY2(recorded.contains(fingerprint), qPrintable(QStringLiteral("w%1's certificate is not recorded").arg(i)));
        }
        auto record = trust.token(token->id);
        QVERIFY(record && record->has_value());
        QVERIFY2((*record)->usesTotal - (*record)->usesLeft >= int(recorded.size()),
                 qPrintable(QStringLiteral("%1 uses spent for %2 certificates")
                                .arg((*record)->usesTotal - (*record)->usesLeft)
                                .arg(recorded.size())));

        // Started again, the coordinator lets each of them back in without a token.
        auto again = serve(QStringLiteral("enrol-run"), job);
        int welcomed = 0;
        for (int i = 0; i < kWorkers; ++i) {
            if (!QFileInfo::exists(stateOf(i) + QStringLiteral("/cert.pem")))
                continue;
            net::WorkerClient::Options o;
            o.stateDir = stateOf(i);
            o.name = QStringLiteral("w%1").arg(i);
            o.initialBackoffMs = 200;
            net::WorkerClient w(o);
            QVERIFY(w.configure(std::nullopt).ok());
            bool in = false;
            QString failure;
            connect(&w, &net::WorkerClient::welcomed, this, [&] { in = true; });
            connect(&w, &net::WorkerClient::failed, this, [&](const QString &why) { failure = why; });
            w.start(hello);
            QTRY_VERIFY2_WITH_TIMEOUT(in || !failure.isEmpty(), qPrintable(failure), 60000);
            QVERIFY2(in, qPrintable(QStringLiteral("w%1: %2").arg(i).arg(failure)));
            ++welcomed;
            w.stop();
        }
        QCOMPARE(welcomed, held);
        again->terminate();
        QVERIFY(again->waitForFinished(30000));
    }

    void insidersAreClosedAndTheHonestWorkerTrainsOn()
    {
        QVERIFY(m_dir.isValid());
        // A job that outlasts the attacks: many short epochs of a small slice.
        auto serve = start({QStringLiteral("serve"), QStringLiteral("--run-dir"), path(QStringLiteral("run")),
                            QStringLiteral("--identity-dir"), path(QStringLiteral("insider-identity")), QStringLiteral("--listen"),
                            QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                            QStringLiteral("--port"), QString::number(m_port), QStringLiteral("--token-file"),
                            path(QStringLiteral("insider-token")), QStringLiteral("--train-limit"), QStringLiteral("3000"),
                            QStringLiteral("--test-limit"), QStringLiteral("300"), QStringLiteral("--epochs"),
                            QStringLiteral("400"), QStringLiteral("--preempt-mean"), QStringLiteral("0")},
                           QStringLiteral("serve.out"));
        QTRY_VERIFY_WITH_TIMEOUT(!readText(path(QStringLiteral("insider-token"))).trimmed().isEmpty(), 60000);
        const QString token = readText(path(QStringLiteral("insider-token"))).trimmed();
        auto honest = start({QStringLiteral("worker"), QStringLiteral("--join"), token, QStringLiteral("--state-dir"),
                             path(QStringLiteral("honest")), QStringLiteral("--name"), QStringLiteral("honest")},
                            QStringLiteral("honest.out"));
        const QString db = path(QStringLiteral("run/flotilla.db"));
        const auto assimilated = [&] { return test::assimilations(db); };
        QTRY_VERIFY2_WITH_TIMEOUT(assimilated() >= 3, qPrintable(readText(path(QStringLiteral("honest.out")))), 60000);

        const qint64 before = assimilated();
        auto insider = start({QStringLiteral("bench"), QStringLiteral("insider"), QStringLiteral("--join"), token,
                              QStringLiteral("--state-dir"), path(QStringLiteral("insiders")), QStringLiteral("--pid"),
                              QString::number(serve->processId()), QStringLiteral("--seconds"), QStringLiteral("20")},
                             QStringLiteral("insider.out"));
        QVERIFY(insider->waitForFinished(240000));
        const QString report = readText(path(QStringLiteral("insider.out")));
        qInfo().noquote() << report;
        QCOMPARE(insider->exitCode(), 0); // every attack was closed
        QVERIFY2(serve->state() == QProcess::Running, qPrintable(readText(path(QStringLiteral("serve.out")))));
        QVERIFY2(honest->state() == QProcess::Running, qPrintable(readText(path(QStringLiteral("honest.out")))));
        // Training went on through the attacks.
        QTRY_VERIFY_WITH_TIMEOUT(assimilated() > before + 5, 30000);

        // Per attack: what it cost the coordinator, and the port kept answering.
        const QRegularExpression row(QStringLiteral("^(\\S+-\\S+|baseline|oversized)\\s+(\\d+)\\s+(-?\\d+)\\s+(-?[\\d.]+)\\s+"
                                                    "(-?[\\d.]+)\\s+(-?\\d+)\\s+(.*)$"),
                                     QRegularExpression::MultilineOption);
        int rows = 0;
        for (auto it = row.globalMatch(report); it.hasNext();) {
            const auto m = it.next();
            ++rows;
            const QString attack = m.captured(1);
            QVERIFY2(m.captured(3).toLongLong() >= 0, qPrintable(attack + QLatin1String(" was never closed")));
            QVERIFY2(m.captured(4).toDouble() < 128.0,
                     qPrintable(attack + QLatin1String(" grew the coordinator by ") + m.captured(4) + QLatin1String(" MiB")));
            QVERIFY2(m.captured(6).toLongLong() < 2000,
                     qPrintable(attack + QLatin1String(": a fresh handshake waited ") + m.captured(6) + QLatin1String(" ms")));
        }
        QCOMPARE(rows, 11);

        // The store names each budget that was broken, against the insider's worker.
        auto store = Store::open(db);
        QVERIFY(store);
        auto over = (*store)->events(1, EventKind::WorkerOverBudget);
        QVERIFY(over);
        QStringList details;
        for (const auto &e : *over)
            details << e.detail;
        const QString all = details.join(QLatin1Char('\n'));
        for (const char *words : {"does not read what it is sent", "Request messages in a burst",
                                  "Heartbeat messages in a burst", "HandBack messages in a burst",
                                  "sessions in a burst"})
            QVERIFY2(all.contains(QLatin1String(words)), qPrintable(QStringLiteral("no '%1' in:\n%2").arg(QLatin1String(words), all)));
        // The storm's certificate went over often enough to be quarantined.
        auto quarantined = (*store)->events(1, EventKind::WorkerQuarantined);
        QVERIFY(quarantined);
        QVERIFY2(std::any_of(quarantined->begin(), quarantined->end(),
                             [](const EventRecord &e) { return e.detail.contains(QLatin1String("insider-session-storm")); }),
                 qPrintable(all));
        const QString serveLog = readText(path(QStringLiteral("serve.out")));
        for (const char *words : {"announces a payload of 4294967296 bytes", "only an operator may send",
                                  "no lease 987654321 was ever issued", "malformed Heartbeat message: 'lease'"})
            QVERIFY2(serveLog.contains(QLatin1String(words)), words);
        // The honest worker was never closed or declared gone.
        auto workers = (*store)->workers(1);
        QVERIFY(workers);
        qint64 honestId = 0;
        for (const auto &w : *workers)
            if (w.name == QLatin1String("honest"))
                honestId = w.id;
        QVERIFY(honestId != 0);
        auto left = (*store)->events(1, EventKind::WorkerLeft);
        QVERIFY(left);
        for (const auto &e : *left)
            QVERIFY2(e.workerId != honestId, qPrintable(e.detail));

        honest->terminate();
        serve->terminate();
        QVERIFY(honest->waitForFinished(30000));
        QVERIFY(serve->waitForFinished(30000));
    }
};

QTEST_GUILESS_MAIN(TestInsider)
#include "tst_insider.moc"
