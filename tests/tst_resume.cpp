// A real `flotilla train` process is killed with SIGKILL at random moments and started again
// on the same run directory, several times; the job must still finish with every shard of
// every epoch assimilated exactly once, contiguous versions, and a consistent checkpoint.
#include "TestSupport.h"
#include "common/AtomicFile.h"

#include <QtTest>

#include <QRandomGenerator>

using namespace flotilla;

namespace {

QStringList trainArguments(const QString &runDir)
{
    return {QStringLiteral("train"), QStringLiteral("--run-dir"), runDir, QStringLiteral("--quiet"),
            QStringLiteral("--train-limit"), QStringLiteral("6000"), QStringLiteral("--test-limit"),
            QStringLiteral("1000"), QStringLiteral("--epochs"), QStringLiteral("4"), QStringLiteral("--shards"),
            QStringLiteral("12"), QStringLiteral("--workers"), QStringLiteral("2"), QStringLiteral("--preempt-mean"),
            QStringLiteral("1"), QStringLiteral("--rejoin-delay"), QStringLiteral("0.3")};
}

} // namespace

class TestResume : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void survivesSigkillAtRandomMoments()
    {
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
        QTemporaryDir dir;
        const QString runDir = dir.filePath(QStringLiteral("run"));
        const QString db = runDir + QStringLiteral("/flotilla.db");
        const quint32 seed = QRandomGenerator::global()->generate();
        qInfo("kill moments drawn with seed %u", seed);
        QRandomGenerator random(seed);

        // Kill 1 right after start-up, the others after some assimilations plus a random delay.
        const int kills = 4;
        for (int k = 0; k < kills; ++k) {
            QProcess p;
            p.setProcessChannelMode(QProcess::MergedChannels);
            p.start(test::flotillaBinary(), trainArguments(runDir));
            QVERIFY(p.waitForStarted());
            const qint64 before = test::assimilations(db);
            if (k == 0) {
                QByteArray seen;
                QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAll()).contains("job '"), 60000);
                QTest::qWait(int(random.bounded(200)));
            } else {
                const qint64 target = before + 2 + qint64(random.bounded(6));
                QTRY_VERIFY_WITH_TIMEOUT(test::assimilations(db) >= target || p.state() == QProcess::NotRunning, 60000);
                QTest::qWait(int(random.bounded(400)));
            }
            QVERIFY2(p.state() == QProcess::Running, "the job finished before it could be killed");
            p.kill(); // SIGKILL
            QVERIFY(p.waitForFinished(10000));
            QCOMPARE(p.exitStatus(), QProcess::CrashExit);
            qInfo("kill %d at %lld assimilations", k + 1, static_cast<long long>(test::assimilations(db)));
        }

        QProcess last;
        last.setProcessChannelMode(QProcess::MergedChannels);
        last.start(test::flotillaBinary(), trainArguments(runDir));
        QVERIFY(last.waitForFinished(300000));
        const QByteArray output = last.readAll();
        QVERIFY2(last.exitStatus() == QProcess::NormalExit && last.exitCode() == 0, output.constData());
        QVERIFY(output.contains("Resuming job"));

        auto store = Store::open(db);
        QVERIFY(store);
        const QString wrong = test::verifyExactlyOnce(**store, std::vector<qint64>(12, 500), 4);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        auto resumed = (*store)->events(1, QStringLiteral("job-resumed"));
        QCOMPARE(int(resumed->size()), kills);
        // The latest checkpoint is on disk and matches the hash recorded for it.
        auto state = (*store)->latestState(1);
        QVERIFY(state && state->has_value());
        auto sha = sha256OfFile(runDir + u'/' + (*state)->path);
        QVERIFY(sha);
        QCOMPARE(*sha, (*state)->sha256);
        auto evaluations = (*store)->evaluations(1);
        QVERIFY(!evaluations->empty());
        QVERIFY2(evaluations->back().accuracy > 0.7, qPrintable(QString::number(evaluations->back().accuracy)));
    }
};

QTEST_GUILESS_MAIN(TestResume)
#include "tst_resume.moc"
