// `flotilla bench scale` against a real coordinator process: five simulated workers for
// three seconds. The report must be well-formed and its figures plausible: results were
// assimilated, heartbeats were timed, percentiles are ordered, the coordinator's memory was
// read, and no connection dropped.
#include "TestSupport.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

using namespace flotilla;

class TestBenchScale : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
    }

    void fiveWorkersForThreeSeconds()
    {
        QTemporaryDir dir;
        const QString jsonFile = dir.filePath(QStringLiteral("scale.json"));
        QProcess bench;
        bench.setProcessChannelMode(QProcess::MergedChannels);
        bench.start(test::flotillaBinary(),
                    {QStringLiteral("bench"), QStringLiteral("scale"), QStringLiteral("--workers"), QStringLiteral("5"),
                     QStringLiteral("--seconds"), QStringLiteral("3"), QStringLiteral("--warmup"), QStringLiteral("0.5"),
                     QStringLiteral("--subtask-seconds"), QStringLiteral("0.3"), QStringLiteral("--heartbeat-ms"),
                     QStringLiteral("500"), QStringLiteral("--json"), jsonFile, QStringLiteral("--keep"),
                     dir.filePath(QStringLiteral("run"))});
        QVERIFY(bench.waitForFinished(150000));
        const QString out = QString::fromUtf8(bench.readAll());
        QVERIFY2(bench.exitStatus() == QProcess::NormalExit && bench.exitCode() == 0, qPrintable(out));

        // The human-readable table and the machine-readable line.
        for (const char *row : {"assimilations", "heartbeat round trip", "coordinator CPU", "coordinator memory",
                                "dropped connections"})
            QVERIFY2(out.contains(QString::fromLatin1(row)), qPrintable(out));
        const qsizetype at = out.indexOf(QStringLiteral("BENCH_SCALE "));
        QVERIFY2(at >= 0, qPrintable(out));
        const QString line = out.mid(at + 12).section(u'\n', 0, 0);
        QJsonParseError error{};
        const QJsonObject fromLine = QJsonDocument::fromJson(line.toUtf8(), &error).object();
        QCOMPARE(error.error, QJsonParseError::NoError);
        QFile file(jsonFile);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QJsonObject r = QJsonDocument::fromJson(file.readAll(), &error).object();
        QCOMPARE(error.error, QJsonParseError::NoError);
        QCOMPARE(r, fromLine);

        QCOMPARE(r.value(QStringLiteral("workers")).toInt(), 5);
        QCOMPARE(r.value(QStringLiteral("joined")).toInt(), 5);
        QCOMPARE(r.value(QStringLiteral("drops")).toInt(-1), 0);
        QCOMPARE(r.value(QStringLiteral("rejected")).toInt(-1), 0);
        QVERIFY(r.value(QStringLiteral("coordinator_survived")).toBool());

        const double window = r.value(QStringLiteral("window_seconds")).toDouble();
        QVERIFY2(window > 2.5 && window < 10, qPrintable(line));
        // Five workers returning a result every 0.24-0.36 s (plus the round trips) for 3 s:
        // some, and not more than the fleet could have produced.
        const int assimilations = r.value(QStringLiteral("assimilations")).toInt();
        QVERIFY2(assimilations > 0, qPrintable(line));
        QVERIFY2(assimilations <= int(5 * window / 0.24) + 5, qPrintable(line));
        QVERIFY(qAbs(r.value(QStringLiteral("assimilations_per_second")).toDouble() - assimilations / window) < 1e-6);
        // The coordinator's own record holds every acknowledged assimilation.
        QVERIFY2(r.value(QStringLiteral("store_assimilations")).toInt() >= assimilations, qPrintable(line));
        QCOMPARE(r.value(QStringLiteral("store_workers_gone")).toInt(-1), 0);

        // A heartbeat every 0.5 s from each of five workers: about 30 in 3 s.
        const int heartbeats = r.value(QStringLiteral("heartbeats")).toInt();
        QVERIFY2(heartbeats >= 15 && heartbeats <= 60, qPrintable(line));
        const QJsonObject hb = r.value(QStringLiteral("heartbeat_rtt")).toObject();
        QVERIFY2(hb.value(QStringLiteral("count")).toInt() > 0, qPrintable(line));
        const double p50 = hb.value(QStringLiteral("p50_ms")).toDouble();
        const double p99 = hb.value(QStringLiteral("p99_ms")).toDouble();
        QVERIFY2(p50 > 0 && p50 <= p99 && p99 <= hb.value(QStringLiteral("max_ms")).toDouble(), qPrintable(line));
        QVERIFY2(p99 < 5000, qPrintable(line));
        const QJsonObject rs = r.value(QStringLiteral("result_rtt")).toObject();
        QVERIFY(rs.value(QStringLiteral("count")).toInt() > 0);
        QVERIFY(rs.value(QStringLiteral("p50_ms")).toDouble() <= rs.value(QStringLiteral("p99_ms")).toDouble());

        QVERIFY2(r.value(QStringLiteral("coordinator_peak_rss_mib")).toDouble() > 10, qPrintable(line));
        QVERIFY(r.value(QStringLiteral("coordinator_peak_rss_mib")).toDouble()
                >= r.value(QStringLiteral("coordinator_rss_mib")).toDouble());
        QVERIFY(r.value(QStringLiteral("coordinator_cpu_percent")).toDouble() >= 0);
        // Five worker connections and the listening socket at least.
        QVERIFY(r.value(QStringLiteral("coordinator_open_files")).toInt() >= 6);
    }

    void refusesBadOptions()
    {
        QProcess bench;
        bench.start(test::flotillaBinary(), {QStringLiteral("bench"), QStringLiteral("scale"), QStringLiteral("--workers"),
                                             QStringLiteral("0")});
        QVERIFY(bench.waitForFinished(30000));
        QCOMPARE(bench.exitCode(), 2);
        QVERIFY(bench.readAllStandardError().contains("out of range"));
    }
};

QTEST_GUILESS_MAIN(TestBenchScale)
#include "tst_benchscale.moc"
