// The fleet simulator: `flotilla simulate` on a tiny fleet gives a well-formed report in which
// every shard of every epoch is assimilated exactly once; the same seed gives the same bytes
// and another seed other numbers; on hand-made traces leases expire, are lost and are
// reassigned at the simulated times worked out by hand, and the wasted compute is what was
// lost; bad traces and options are refused naming the file and line; the charts have data.
#include "TestSupport.h"
#include "bench/Simulator.h"
#include "bench/SimulatorCharts.h"

#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;

namespace {

struct Ran
{
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
};

Ran runFlotilla(const QStringList &arguments)
{
    QProcess p;
    p.start(test::flotillaBinary(), arguments);
    Ran r;
    if (!p.waitForFinished(60000))
        return r;
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

const QStringList kTiny { QStringLiteral("simulate"), QStringLiteral("--workers"), QStringLiteral("6"),
    QStringLiteral("--shards"), QStringLiteral("9"), QStringLiteral("--shard-size"), QStringLiteral("24"),
    QStringLiteral("--epochs"), QStringLiteral("3"), QStringLiteral("--preemption-rate"), QStringLiteral("30"),
    QStringLiteral("--downtime"), QStringLiteral("20"), QStringLiteral("--notice"), QStringLiteral("5"),
    QStringLiteral("--threads"), QStringLiteral("2") };

// Three workers of speed 1 sample/s, three shards of 10 samples, one epoch, instant transfers:
// every subtask takes exactly 10 s of simulated time.
SimulationConfig handMade(std::vector<TraceEntry> trace)
{
    SimulationConfig c;
    c.workers = 3;
    c.speed = 1.0;
    c.speedSpread = 1.0;
    c.shards = 3;
    c.shardSize = 10;
    c.epochs = 1;
    c.batchSize = 5;
    c.latencySeconds = 0.0;
    c.weightsBytes = 1;
    c.bandwidthBytesPerSecond = 1e12;
    c.leaseTimeoutSeconds = 100.0;
    c.heartbeatTimeoutSeconds = 0.0;
    c.testSamples = 100;
    c.useTrace = true;
    c.trace = std::move(trace);
    c.rates = CostRates { 1.0, 2.0, 1.0 };
    c.recordEvents = true;
    return c;
}

SimulationResult simulate(const SimulationConfig &config, const QString &rule = QStringLiteral("vc-asgd"))
{
    auto sim = Simulator::create(config);
    if (!sim)
        qFatal("%s", qPrintable(sim.error()));
    auto r = (*sim)->run(rule);
    if (!r)
        qFatal("%s", qPrintable(r.error()));
    return std::move(r).value();
}

const SimulationEvent *findEvent(const SimulationResult &r, EventKind kind, int worker = -2)
{
    for (const auto &e : r.events)
        if (e.kind == kind && (worker == -2 || e.worker == worker))
            return &e;
    return nullptr;
}

} // namespace

class TestSimulator : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void tinyFleetReportIsWellFormed()
    {
        QTemporaryDir dir;
        const QString json = dir.filePath(QStringLiteral("report.json"));
        const Ran r = runFlotilla(kTiny + QStringList { QStringLiteral("--json"), json });
        QVERIFY2(r.exitCode == 0, r.err.constData());
        for (const char *rule : { "vc-asgd", "staleness-aware", "async-delta", "sync-average" })
            QVERIFY2(r.out.contains(rule), r.out.constData());

        QFile f(json);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QJsonParseError error {};
        const QJsonObject report = QJsonDocument::fromJson(f.readAll(), &error).object();
        QCOMPARE(error.error, QJsonParseError::NoError);
        const QJsonObject config = report.value(QStringLiteral("config")).toObject();
        QCOMPARE(config.value(QStringLiteral("samples")).toInteger(), 9 * 24);
        const QJsonArray runs = report.value(QStringLiteral("runs")).toArray();
        QCOMPARE(runs.size(), 4);
        for (const auto &value : runs) {
            const QJsonObject run = value.toObject();
            const QString rule = run.value(QStringLiteral("rule")).toString();
            QVERIFY2(run.value(QStringLiteral("finished")).toBool(), qPrintable(rule));
            QVERIFY2(run.value(QStringLiteral("exactly_once")).toBool(),
                qPrintable(rule + u' ' + run.value(QStringLiteral("integrity_error")).toString()));
            // Every sample of every epoch assimilated once; credits add up to one per shard.
            QCOMPARE(run.value(QStringLiteral("samples_assimilated")).toInteger(), 9 * 24 * 3);
            QVERIFY(qAbs(run.value(QStringLiteral("credit_sum")).toDouble() - 27.0) < 1e-9);
            const QJsonArray epochs = run.value(QStringLiteral("epoch_end_s")).toArray();
            QCOMPARE(epochs.size(), 3);
            QVERIFY(epochs[0].toDouble() > 0 && epochs[0].toDouble() <= epochs[1].toDouble()
                && epochs[1].toDouble() <= epochs[2].toDouble());
            QCOMPARE(epochs[2].toDouble(), run.value(QStringLiteral("simulated_s")).toDouble());

            const QJsonObject stale = run.value(QStringLiteral("staleness")).toObject();
            const qint64 p50 = stale.value(QStringLiteral("p50")).toInteger();
            const qint64 p90 = stale.value(QStringLiteral("p90")).toInteger();
            const qint64 p99 = stale.value(QStringLiteral("p99")).toInteger();
            const qint64 max = stale.value(QStringLiteral("max")).toInteger();
            QVERIFY(0 <= p50 && p50 <= p90 && p90 <= p99 && p99 <= max);
            qint64 histogram = 0;
            for (const auto &b : stale.value(QStringLiteral("histogram")).toArray())
                histogram += b.toObject().value(QStringLiteral("count")).toInteger();
            const qint64 assimilations = run.value(QStringLiteral("assimilations")).toInteger();
            QCOMPARE(histogram, assimilations);
            QVERIFY(assimilations >= 27);
            if (rule == QLatin1String("sync-average")) {
                QCOMPARE(max, qint64(0)); // one version per round, every result from its start
                QCOMPARE(run.value(QStringLiteral("versions")).toInteger(), 3);
            } else {
                QVERIFY2(max > 0, qPrintable(rule)); // six workers at once cannot all be fresh
            }

            // Preemptions happened and cost something; the fleet was billed for its time.
            QVERIFY(run.value(QStringLiteral("preemptions")).toInteger() > 0);
            const double busy = run.value(QStringLiteral("busy_s")).toDouble();
            const double wasted = run.value(QStringLiteral("wasted_s")).toDouble();
            const double useful = run.value(QStringLiteral("useful_s")).toDouble();
            QVERIFY(wasted >= 0 && useful > 0 && qAbs(busy - wasted - useful) < 1e-6);
            QVERIFY(run.value(QStringLiteral("online_s")).toDouble() >= busy);
            const double spot = run.value(QStringLiteral("cost_spot")).toDouble();
            const double onDemand = run.value(QStringLiteral("cost_on_demand")).toDouble();
            QVERIFY(spot > 0 && spot < onDemand);

            // The synthetic objective learned something, from chance (10 classes) upwards.
            const double accuracy = run.value(QStringLiteral("final_accuracy")).toDouble();
            QVERIFY2(accuracy > 0.3 && accuracy <= 1.0, qPrintable(QStringLiteral("%1: %2").arg(rule).arg(accuracy)));
            const QJsonArray curve = run.value(QStringLiteral("evaluations")).toArray();
            QVERIFY(curve.size() >= 2);
            QCOMPARE(curve.first().toObject().value(QStringLiteral("t_s")).toDouble(), 0.0);
            QVERIFY(qAbs(curve.first().toObject().value(QStringLiteral("loss")).toDouble() - std::log(10.0)) < 1e-6);
            QVERIFY(!run.value(QStringLiteral("fleet")).toArray().isEmpty());
        }
    }

    void sameSeedSameBytes()
    {
        QTemporaryDir dir;
        const auto run = [&](const QString &seed, const QString &name) {
            const QString json = dir.filePath(name);
            const Ran r
                = runFlotilla(kTiny + QStringList { QStringLiteral("--seed"), seed, QStringLiteral("--json"), json });
            QFile f(json);
            return std::make_pair(r, f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray());
        };
        const auto [a, aJson] = run(QStringLiteral("11"), QStringLiteral("a.json"));
        const auto [b, bJson] = run(QStringLiteral("11"), QStringLiteral("b.json"));
        const auto [c, cJson] = run(QStringLiteral("12"), QStringLiteral("c.json"));
        QCOMPARE(a.exitCode, 0);
        QVERIFY(!a.out.isEmpty() && !aJson.isEmpty());
        QCOMPARE(b.out, a.out);
        QCOMPARE(bJson, aJson);
        QVERIFY(c.out != a.out);
        QVERIFY(cJson != aJson);
    }

    void expiredLeaseIsReassignedAtItsDeadline()
    {
        // Worker 1 holds shard 1 and vanishes at 4 s for good. Nobody notices until its lease
        // (100 s, its speed being unknown) expires; worker 0, idle since 10 s, trains the
        // shard from 100 s to 110 s.
        const SimulationResult r = simulate(handMade({ TraceEntry { 1, 4000, -1, 1 } }));
        const SimulationEvent *granted = findEvent(r, EventKind::LeaseGranted, 1);
        QVERIFY(granted);
        QCOMPARE(granted->atMs, qint64(0));
        const SimulationEvent *expired = findEvent(r, EventKind::LeaseExpired);
        QVERIFY(expired);
        QCOMPARE(expired->atMs, qint64(100'000));
        QCOMPARE(expired->worker, 1);
        QCOMPARE(expired->lease, granted->lease);
        const SimulationEvent *reassigned = findEvent(r, EventKind::SubtaskReassigned);
        QVERIFY(reassigned);
        QCOMPARE(reassigned->atMs, qint64(100'000));
        QCOMPARE(reassigned->worker, 0);
        QCOMPARE(reassigned->subtask, granted->subtask);
        QVERIFY(r.finished && r.exactlyOnce);
        QCOMPARE(r.simulatedMs, qint64(110'000));
        QCOMPARE(r.epochEndMs, std::vector<qint64> { 110'000 });
        QCOMPARE(r.leasesExpired, qint64(1));
        QCOMPARE(r.reassignments, qint64(1));
        // Wasted: the 4 s worker 1 trained before it went. Useful: three subtasks of 10 s.
        QCOMPARE(r.wastedSeconds, 4.0);
        QCOMPARE(r.usefulSeconds, 30.0);
        QCOMPARE(r.sampleStepsWasted, qint64(4));
        QCOMPARE(r.preemptions, qint64(1));
        // Billed: workers 0 and 2 for 110 s, worker 1 for 4 s; spot $1/s, on-demand $2/s.
        QCOMPARE(r.onlineSeconds, 224.0);
        QCOMPARE(r.costSpot, 224.0);
        QCOMPARE(r.costOnDemand, 448.0);
        QCOMPARE(r.staleness, (std::vector<qint64> { 0, 1, 0 }));
    }

    void silentWorkerIsDeclaredGoneAfterTheHeartbeatTimeout()
    {
        SimulationConfig c = handMade({ TraceEntry { 1, 4000, 60'000, 1 } });
        c.heartbeatTimeoutSeconds = 30.0;
        const SimulationResult r = simulate(c);
        const SimulationEvent *lost = findEvent(r, EventKind::LeaseLost);
        QVERIFY(lost);
        QCOMPARE(lost->atMs, qint64(34'000));
        QCOMPARE(lost->worker, 1);
        const SimulationEvent *reassigned = findEvent(r, EventKind::SubtaskReassigned);
        QVERIFY(reassigned);
        QCOMPARE(reassigned->atMs, qint64(34'000));
        QCOMPARE(r.simulatedMs, qint64(44'000));
        QCOMPARE(r.leasesLost, qint64(1));
        QCOMPARE(r.leasesExpired, qint64(0));
        QCOMPARE(r.wastedSeconds, 4.0);
        QVERIFY(r.exactlyOnce);
    }

    void noticeTurnsIntoAPartialResultAndARemainder()
    {
        // With 3 s of notice worker 1 stops at 1 s, after one sample, and uploads it; the other
        // nine positions become a remainder that worker 0 trains from 10 s to 19 s.
        SimulationConfig c = handMade({ TraceEntry { 1, 4000, -1, 1 } });
        c.noticeSeconds = 3.0;
        const SimulationResult r = simulate(c, QStringLiteral("async-delta"));
        const SimulationEvent *partial = findEvent(r, EventKind::ResultPartial, 1);
        QVERIFY(partial);
        QCOMPARE(partial->atMs, qint64(1'000));
        QVERIFY2(partial->detail.contains(QStringLiteral("positions 0-1")), qPrintable(partial->detail));
        QCOMPARE(r.partialResults, qint64(1));
        QCOMPARE(r.simulatedMs, qint64(19'000));
        QCOMPARE(r.wastedSeconds, 0.0);
        QCOMPARE(r.positionsAssimilated, qint64(30));
        QVERIFY(qAbs(r.creditSum - 3.0) < 1e-12);
        QVERIFY(r.exactlyOnce);
    }

    void traceParsing()
    {
        const QByteArray good = "# a comment\nworker,down,up\n0,1.5,3\n\n2,10,\n0,3,4\n";
        auto parsed = parsePreemptionTrace(good, QStringLiteral("t.csv"), 3);
        QVERIFY2(parsed, qPrintable(parsed.error()));
        QCOMPARE(parsed->size(), std::size_t(3));
        QCOMPARE((*parsed)[0].downMs, qint64(1500));
        QCOMPARE((*parsed)[1].upMs, qint64(-1));
        QCOMPARE((*parsed)[1].line, 5);

        const struct
        {
            const char *text;
            const char *expected;
        } bad[] = {
            { "0,1\n", "t.csv:1: expected three fields" },
            { "0,1,2\n3,1,2\n", "t.csv:2: worker 3 is outside the fleet" },
            { "x,1,2\n", "t.csv:1: the worker 'x'" },
            { "0,-1,2\n", "t.csv:1: the down time '-1'" },
            { "0,5,3\n", "t.csv:1: worker 0 comes back up" },
            { "0,5,\n0,9,10\n", "t.csv:2: worker 0 goes down at 9 s while it is still down from line 1" },
            { "1,5,8\n1,7,10\n", "t.csv:2:" },
        };
        for (const auto &b : bad) {
            auto r = parsePreemptionTrace(b.text, QStringLiteral("t.csv"), 3);
            QVERIFY2(!r, b.text);
            QVERIFY2(r.error().startsWith(QLatin1String(b.expected)), qPrintable(r.error()));
        }
    }

    void helpAndBadOptions()
    {
        const Ran help = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--help") });
        QCOMPARE(help.exitCode, 0);
        QVERIFY(help.out.contains("--trace"));
        QVERIFY(help.out.contains("worker,down,up"));
        QVERIFY(help.out.contains("--rules"));

        QTemporaryDir dir;
        const QString trace = dir.filePath(QStringLiteral("bad.csv"));
        test::writeFile(trace, "worker,down,up\n0,5,abc\n");
        const Ran bad = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--workers"), QStringLiteral("3"),
            QStringLiteral("--trace"), trace });
        QCOMPARE(bad.exitCode, 2);
        QVERIFY2(bad.err.contains((trace + QStringLiteral(":2: the up time 'abc'")).toUtf8()), bad.err.constData());
        QVERIFY(bad.out.isEmpty());

        const Ran missing = runFlotilla(
            { QStringLiteral("simulate"), QStringLiteral("--trace"), dir.filePath(QStringLiteral("none.csv")) });
        QCOMPARE(missing.exitCode, 2);
        QVERIFY2(missing.err.contains("none.csv"), missing.err.constData());

        const Ran word
            = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--workers"), QStringLiteral("many") });
        QCOMPARE(word.exitCode, 2);
        QVERIFY2(word.err.contains("--workers: 'many' is not a whole number"), word.err.constData());

        const Ran rule
            = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--rules"), QStringLiteral("vc-asgd,fedprox") });
        QCOMPARE(rule.exitCode, 2);
        QVERIFY2(rule.err.contains("fedprox"), rule.err.constData());

        const Ran instance
            = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--instance"), QStringLiteral("aws/x9") });
        QCOMPARE(instance.exitCode, 2);
        QVERIFY2(instance.err.contains("aws/x9"), instance.err.constData());
    }

    void bufferAndGoodputPoliciesKeepEveryShardExactlyOnce()
    {
        // A churning fleet: a few preemptions per worker over the job.
        SimulationConfig base;
        base.workers = 40;
        base.shards = 80;
        base.shardSize = 16;
        base.epochs = 3;
        base.preemptionsPerHour = 20;
        base.downtimeSeconds = 30;
        base.testSamples = 200;
        SimulationConfig policy = base;
        policy.buffer = 4;
        policy.epochsAhead = 2;
        policy.shareTail = true;
        policy.speculate = true;
        for (const char *rule : { "vc-asgd", "staleness-aware", "async-delta" }) {
            const SimulationResult before = simulate(base, QString::fromLatin1(rule));
            const SimulationResult after = simulate(policy, QString::fromLatin1(rule));
            QVERIFY2(after.exactlyOnce, qPrintable(after.integrityError));
            QCOMPARE(after.creditSum, 240.0);
            QCOMPARE(after.positionsAssimilated, qint64(80 * 16 * 3));
            // Four results a version, plus the flushes that close an epoch.
            QVERIFY2(after.versions * 4 >= after.assimilations && after.versions <= after.assimilations / 4 + 3,
                qPrintable(QStringLiteral("%1 versions for %2 results").arg(after.versions).arg(after.assimilations)));
            QVERIFY(after.stalenessPercentile(50) < before.stalenessPercentile(50));
            QVERIFY2(after.busyShare() > before.busyShare(),
                qPrintable(QStringLiteral("busy %1 → %2").arg(before.busyShare()).arg(after.busyShare())));
        }
        // sync-average has no buffer: each result is its own fold, as before.
        const SimulationResult sync = simulate(policy, QStringLiteral("sync-average"));
        QVERIFY(sync.exactlyOnce);
        QCOMPARE(sync.versions, qint64(3));
    }

    void dismissingIdleWorkersCutsPaidTimeNotTheJob()
    {
        // The same churning fleet with the three goodput policies, then also releasing the
        // workers that ask for work when none is left: every shard still exactly once, the
        // same schedule and model (releasing happens only when nobody could be given work),
        // and less paid time for the same busy time.
        SimulationConfig policy;
        policy.workers = 40;
        policy.shards = 80;
        policy.shardSize = 16;
        policy.epochs = 3;
        policy.preemptionsPerHour = 20;
        policy.downtimeSeconds = 30;
        policy.testSamples = 200;
        policy.epochsAhead = 2;
        policy.shareTail = true;
        policy.speculate = true;
        SimulationConfig release = policy;
        release.dismissIdle = true;
        const SimulationResult kept = simulate(policy);
        const SimulationResult dismissed = simulate(release);
        QVERIFY2(dismissed.exactlyOnce, qPrintable(dismissed.integrityError));
        QCOMPARE(dismissed.positionsAssimilated, qint64(80 * 16 * 3));
        QVERIFY(dismissed.dismissed > 0);
        QVERIFY(kept.dismissed == 0);
        QVERIFY2(dismissed.onlineSeconds < kept.onlineSeconds,
            qPrintable(QStringLiteral("online %1 s → %2 s").arg(kept.onlineSeconds).arg(dismissed.onlineSeconds)));
        QVERIFY2(dismissed.busyShare() > kept.busyShare(),
            qPrintable(QStringLiteral("busy %1 → %2").arg(kept.busyShare()).arg(dismissed.busyShare())));
        QVERIFY(!dismissed.evaluations.empty() && !kept.evaluations.empty());
        // Released workers never come back: the fleet ends smaller than it started.
        QVERIFY(dismissed.fleet.back().online < kept.fleet.back().online || dismissed.fleet.back().online == 0);
    }

    void badBufferAndPolicyOptionsAreRefused()
    {
        const Ran zero = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--buffer"), QStringLiteral("0") });
        QCOMPARE(zero.exitCode, 2);
        QVERIFY2(zero.err.contains("--buffer: '0' is not 'auto' or a whole number of results from 1"), zero.err.constData());
        const Ran word = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--buffer"), QStringLiteral("lots") });
        QCOMPARE(word.exitCode, 2);
        QVERIFY2(word.err.contains("--buffer: 'lots'"), word.err.constData());
        const Ran ahead
            = runFlotilla({ QStringLiteral("simulate"), QStringLiteral("--epochs-ahead"), QStringLiteral("0") });
        QCOMPARE(ahead.exitCode, 2);
        QVERIFY2(ahead.err.contains("--epochs-ahead must be between 1 and 10,000"), ahead.err.constData());
    }

    void chartsHaveData()
    {
        SimulationConfig c;
        c.workers = 8;
        c.shards = 16;
        c.epochs = 2;
        c.preemptionsPerHour = 20;
        c.rates = CostRates { 1.0, 2.0, 1.0 };
        auto sim = Simulator::create(c);
        QVERIFY(sim);
        std::vector<SimulationResult> results;
        for (const char *rule : { "vc-asgd", "sync-average" }) {
            auto r = (*sim)->run(QString::fromLatin1(rule));
            QVERIFY(r);
            results.push_back(*r);
        }
        QTemporaryDir dir;
        auto written = writeSimulationCharts(c, results, dir.path());
        QVERIFY2(written, qPrintable(written.error()));
        QCOMPARE(written->size(), 4);
        for (const QString &path : *written) {
            const QImage image(path);
            QVERIFY2(!image.isNull() && image.width() >= 900, qPrintable(path));
            // A chart with lines or bars has many colours; a blank one a handful.
            QSet<QRgb> colours;
            for (int y = 0; y < image.height(); y += 3)
                for (int x = 0; x < image.width(); x += 3)
                    colours.insert(image.pixel(x, y));
            QVERIFY2(colours.size() > 30, qPrintable(QStringLiteral("%1: %2 colours").arg(path).arg(colours.size())));
        }
    }
};

QTEST_MAIN(TestSimulator)
#include "tst_simulator.moc"
