// A fleet in chaos, as `flotilla demo --fleet` runs it with real processes on loopback and
// real TLS: a fleet service with five jobs from two submitters in its queue and three worker
// processes, while SIGKILLs hit the service and the workers at random, beside a process that
// keeps a core busy. The command itself checks what a lab would: every job finished in the
// queue, every shard of every epoch assimilated exactly once, no honest worker quarantined or
// closed for its budgets, every SQLite file intact; the test checks that it says so, and
// reads the figures it prints.
#include "TestSupport.h"
#include "bench/FleetChaos.h"

#include <QtTest>

using namespace flotilla;

class TestFleetChaos : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
    }

    void everyJobFinishesThroughKillsOfTheServiceAndTheWorkers()
    {
        QTemporaryDir dir;
        // Another CPU-bound process on the machine, as on a lab's shared box (the reaper ends
        // it with the test).
        QProcess hog;
        hog.start(QStringLiteral("/bin/sh"), {QStringLiteral("-c"), QStringLiteral("while :; do :; done")});
        QVERIFY(hog.waitForStarted());
        const auto stopHog = qScopeGuard([&] {
            hog.kill();
            hog.waitForFinished(5000);
        });
        const test::ProcessRun run = test::runFlotilla(
            {QStringLiteral("demo"), QStringLiteral("--fleet"), QStringLiteral("--jobs"), QStringLiteral("5"),
             QStringLiteral("--submitters"), QStringLiteral("2"), QStringLiteral("--workers"), QStringLiteral("3"),
             QStringLiteral("--epochs"), QStringLiteral("2"), QStringLiteral("--train-limit"), QStringLiteral("3000"),
             QStringLiteral("--chaos-every"), QStringLiteral("4"),
             QStringLiteral("--rejoin-delay"), QStringLiteral("2"), QStringLiteral("--deadline"), QStringLiteral("420"),
             QStringLiteral("--run-dir"), dir.filePath(QStringLiteral("chaos"))},
            480000);
        qInfo("%s", qPrintable(run.out.right(3000)));
        QVERIFY2(run.finished && run.exitCode == 0, qPrintable(run.out.right(4000) + run.err.right(2000)));
        QVERIFY2(run.out.contains(QLatin1String("Every check passed")), qPrintable(run.out.right(3000)));
        // Five jobs, each finished and exactly once, in its line.
        QCOMPARE(int(run.out.count(QRegularExpression(QStringLiteral("chaos-\\d+ +finished .* yes\\n")))), 5);
        // The chaos happened: a SIGKILL every 4 s, every second one the service's.
        const auto kills = QRegularExpression(QStringLiteral("(\\d+) SIGKILLs of the service, (\\d+) of workers")).match(run.out);
        QVERIFY(kills.hasMatch());
        QVERIFY2(kills.captured(1).toInt() >= 2 && kills.captured(2).toInt() >= 2, qPrintable(kills.captured(0)));
        const auto peak = QRegularExpression(QStringLiteral("at most (\\d+) in a second")).match(run.out);
        QVERIFY(peak.hasMatch());
        QVERIFY2(peak.captured(1).toInt() <= kHonestRequestPeak, qPrintable(peak.captured(0)));
    }
};

QTEST_GUILESS_MAIN(TestFleetChaos)
#include "tst_fleetchaos.moc"
