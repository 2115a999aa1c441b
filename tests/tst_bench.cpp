// Every benchmark of `flotilla bench` runs on a tiny size and prints well-formed figures.
// (The figures themselves are measured with the commands in docs/benchmarks.md, never here.)
#include "TestSupport.h"
#include "bench/BenchScaling.h"
#include "bench/Contenders.h"
#include "bench/CpuQuota.h"
#include "common/ProcessSetup.h"

#include <QFileInfo>
#include <QRegularExpression>
#include <QtTest>
#include <QTemporaryDir>

#include <atomic>
#include <map>
#include <thread>

#include <sys/syscall.h>
#include <unistd.h>

namespace {

struct Run
{
    int exitCode = -1;
    QString output;
};

Run bench(const QStringList &arguments, int timeoutMs = 240000)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(flotilla::test::flotillaBinary(), QStringList{QStringLiteral("bench")} + arguments);
    if (!p.waitForFinished(timeoutMs))
        p.kill();
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAll())};
}

// "label ... min A  median B  max C": the three numbers, which must be ordered and positive.
QVector<double> spreadOf(const QString &output, const QString &label)
{
    const QRegularExpression row(QRegularExpression::escape(label)
                                 + QStringLiteral(".*min\\s+([0-9.]+)\\s+median\\s+([0-9.]+)\\s+max\\s+([0-9.]+)"));
    const auto m = row.match(output);
    if (!m.hasMatch())
        return {};
    return {m.captured(1).toDouble(), m.captured(2).toDouble(), m.captured(3).toDouble()};
}

bool wellFormed(const QVector<double> &s)
{
    return s.size() == 3 && s[0] > 0 && s[0] <= s[1] && s[1] <= s[2];
}

} // namespace

class TestBench : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void trainerAgainstABareLoop()
    {
        const Run r = bench({QStringLiteral("trainer"), QStringLiteral("--samples"), QStringLiteral("256"),
                             QStringLiteral("--repeats"), QStringLiteral("2")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("Flotilla trainer"))), qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("bare LibTorch loop"))), qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("ratio Flotilla / bare"))), qPrintable(r.output));
    }

    void aggregationAgainstMemcpy()
    {
        const Run r = bench({QStringLiteral("aggregation"), QStringLiteral("--parameters"), QStringLiteral("200000"),
                             QStringLiteral("--repeats"), QStringLiteral("3")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.output));
        QVERIFY2(r.output.contains(QStringLiteral("200000 float32 parameters")), qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("VC-ASGD assimilation"))), qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("memcpy"))), qPrintable(r.output));
        QVERIFY2(wellFormed(spreadOf(r.output, QStringLiteral("ratio assimilation / memcpy"))), qPrintable(r.output));
    }

    void transferAgainstTheCipher()
    {
        const Run r = bench({QStringLiteral("transfer"), QStringLiteral("--megabytes"), QStringLiteral("4"),
                             QStringLiteral("--repeats"), QStringLiteral("2")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.output));
        QVERIFY2(r.output.contains(QRegularExpression(QStringLiteral("median \\d+"))), qPrintable(r.output));
        QVERIFY2(r.output.contains(QStringLiteral("ratio (median)")), qPrintable(r.output));
        // The same bytes over a bare OpenSSL loop ran alternately; Flotilla's framing, hashing
        // and event loop on top of it keep most of its rate (0.9 on a quiet machine). A loose
        // bound, for a shared CI machine: below a fifth, something copies or waits that should
        // not.
        const auto bare = QRegularExpression(QStringLiteral("ratio to the bare loop\\s+([0-9.]+)")).match(r.output);
        QVERIFY2(bare.hasMatch(), qPrintable(r.output));
        QVERIFY2(bare.captured(1).toDouble() > 0.2, qPrintable(r.output));
    }

    void timeToAccuracyAgainstDdp()
    {
        // A low target on a small training set: every contender must reach it, with and
        // without SIGKILLs; DDP's killed run must report that it failed.
        const Run r = bench({QStringLiteral("accuracy"), QStringLiteral("--train-limit"), QStringLiteral("2000"),
                             QStringLiteral("--target"), QStringLiteral("0.4"), QStringLiteral("--epochs"),
                             QStringLiteral("4"), QStringLiteral("--repeats"), QStringLiteral("1"),
                             QStringLiteral("--max-seconds"), QStringLiteral("120"), QStringLiteral("--preemption-every"),
                             QStringLiteral("3"), QStringLiteral("--python"), QStringLiteral(FLOTILLA_PYTHON),
                             QStringLiteral("--ddp-script"), QStringLiteral(FLOTILLA_SOURCE_DIR "/bench/ddp_fashion.py"),
                             QStringLiteral("--lr-grid"), QStringLiteral("0.03,0.1"), QStringLiteral("--batch-grid"),
                             QStringLiteral("32")},
                            400000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.output));
        // Each contender was tuned over the grid, keeps the setting of its fastest tuning run
        // (times are printed to 0.1 s: any of those printed as the fastest), and runs best
        // against best with it.
        const QRegularExpression tuned(QStringLiteral("\\[tune\\] (.+?)\\s{2,}(lr [0-9.]+, batch \\d+)\\s+([0-9.]+) s"));
        std::map<QString, std::map<double, QStringList>> tuning; // contender → seconds → settings
        for (auto it = tuned.globalMatch(r.output); it.hasNext();) {
            const auto m = it.next();
            tuning[m.captured(1)][m.captured(3).toDouble()] << m.captured(2);
        }
        const QString bestSection = r.output.mid(r.output.indexOf(QStringLiteral("Best settings:")));
        for (const char *who : {"Flotilla, 2 worker processes", "PyTorch DDP, 2 processes (gloo)",
                                "LibTorch loop, 1 process"}) {
            const QString name = QString::fromLatin1(who);
            qsizetype runs = 0;
            for (const auto &[seconds, settings] : tuning[name])
                runs += settings.size();
            QVERIFY2(runs == 2, qPrintable(r.output)); // both learning rates reached the low target
            const auto kept = QRegularExpression(QRegularExpression::escape(name)
                                                 + QStringLiteral("\\s+(lr [0-9.]+, batch \\d+)\\n"))
                                  .match(bestSection);
            QVERIFY2(kept.hasMatch(), qPrintable(r.output));
            QVERIFY2(tuning[name].begin()->second.contains(kept.captured(1)),
                     qPrintable(name + QStringLiteral(" kept ") + kept.captured(1) + u'\n' + r.output));
            QVERIFY2(r.output.contains(QRegularExpression(QStringLiteral("\\[1\\] ") + QRegularExpression::escape(name)
                                                          + QStringLiteral("\\s+")
                                                          + QRegularExpression::escape(kept.captured(1)))),
                     qPrintable(r.output));
        }
        for (const char *who : {"Flotilla, 2 worker processes", "PyTorch DDP, 2 processes (gloo)",
                                "LibTorch loop, 1 process"})
            QVERIFY2(wellFormed(spreadOf(r.output, QString::fromLatin1(who))), qPrintable(r.output));
        QVERIFY2(r.output.contains(QRegularExpression(QStringLiteral("ratio Flotilla / DDP \\(medians\\)\\s+[0-9.]+"))),
                 qPrintable(r.output));
        // The killed DDP run either failed (a rank gone) or finished before the kill; both are
        // reported, neither is silently counted.
        QVERIFY2(r.output.contains(QRegularExpression(QStringLiteral("a rank SIGKILLed at 3 s\\s+(failed|never|min)"))),
                 qPrintable(r.output));
    }

    // Where a fleet's hardware efficiency goes: each worker's time from a grant to its result,
    // and from the result to its next grant, worked out by hand for two workers of a round;
    // a lost lease starts no wait, and nothing after the target's time counts.
    void workersTimeSplitsIntoTrainingAndWaiting()
    {
        using flotilla::EventKind;
        std::vector<flotilla::EventRecord> events;
        qint64 id = 0;
        const auto at = [&](qint64 ms, EventKind kind, qint64 worker) {
            flotilla::EventRecord e;
            e.id = ++id;
            e.atMs = ms;
            e.kind = flotilla::eventName(kind);
            e.workerId = worker;
            events.push_back(e);
        };
        at(1000, EventKind::LeaseGranted, 1);
        at(1000, EventKind::LeaseGranted, 2);
        at(1300, EventKind::ResultBuffered, 1);    // w1 trained 0.3 s
        at(1380, EventKind::ResultBuffered, 2);    // w2 0.38 s: the round's last
        at(1390, EventKind::ResultAssimilated, 1); // the fold: not a second result
        at(1390, EventKind::ResultAssimilated, 2);
        at(1400, EventKind::LeaseGranted, 1);      // w1 waited 0.1 s
        at(1400, EventKind::LeaseGranted, 2);      // w2 0.02 s
        at(1700, EventKind::ResultBuffered, 1);    // 0.3 s
        at(1500, EventKind::LeaseLost, 2);         // w2 trained 0.1 s for nothing: neither
        at(1900, EventKind::LeaseGranted, 2);      // ... nor a wait before this grant
        at(2000, EventKind::LeaseGranted, 1);      // past the target's time: not counted
        at(2100, EventKind::ResultBuffered, 2);
        std::reverse(events.begin(), events.end()); // the store's order is not the clock's
        const flotilla::WorkerTimeSplit split = flotilla::splitWorkerTime(events, 1950);
        QCOMPARE(qRound(split.trainingSeconds * 1000), 300 + 380 + 300);
        QCOMPARE(qRound(split.waitingSeconds * 1000), 100 + 20);
        QCOMPARE(qRound(split.waitingShare() * 1000), qRound(120.0 / 1100.0 * 1000));
        QCOMPARE(flotilla::WorkerTimeSplit{}.waitingShare(), -1.0);
    }

    // Where the machines' cgroups cannot be made, `bench scaling` stops before it trains,
    // says which folder it tried and why, and names the way out (--no-quota).
    void scalingRefusesWhereCgroupsCannotBeWritten()
    {
        QTemporaryDir notACgroup;
        QVERIFY(notACgroup.isValid());
        const Run r = bench({QStringLiteral("scaling"), QStringLiteral("--jobs"), QStringLiteral("shapes"),
                             QStringLiteral("--workers"), QStringLiteral("1"), QStringLiteral("--cgroup-root"),
                             notACgroup.path()},
                            60000);
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.output.contains(QStringLiteral("cannot make CPU quotas for emulated machines")), qPrintable(r.output));
        QVERIFY2(r.output.contains(notACgroup.path() + QStringLiteral(" (no cgroup.controllers")), qPrintable(r.output));
        QVERIFY2(r.output.contains(QStringLiteral("--no-quota")), qPrintable(r.output));
        // Nothing was left behind in the folder it could not use.
        QVERIFY(QDir(notACgroup.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries).isEmpty());
    }

    // A machine of a quarter core runs 25 ms in every 100 (2.5 in every 10 when asked for). One
    // too small for the kernel's least quota (1 ms) gets a longer period of its own instead of
    // more CPU: its share stays what it was asked.
    void emulatedMachinesGetTheirShareInShortPeriods()
    {
        auto quota = flotilla::CpuQuota::create();
        if (!quota)
            QSKIP(qPrintable(QStringLiteral("no cgroup can be written here: %1").arg(quota.error())));
        const auto limits = [&](int index) -> std::pair<qint64, qint64> {
            const QString dir = QFileInfo((*quota)->procsFile(index)).path();
            if (QFileInfo::exists(dir + QStringLiteral("/cpu.max"))) {
                const QStringList max = QString::fromLatin1(flotilla::test::readFile(dir + QStringLiteral("/cpu.max"))).split(u' ');
                return {max.value(0).toLongLong(), max.value(1).trimmed().toLongLong()};
            }
            return {flotilla::test::readFile(dir + QStringLiteral("/cpu.cfs_quota_us")).trimmed().toLongLong(),
                    flotilla::test::readFile(dir + QStringLiteral("/cpu.cfs_period_us")).trimmed().toLongLong()};
        };
        const auto quarter = (*quota)->addMachine(QStringLiteral("quarter"), 0.25);
        const auto tiny = (*quota)->addMachine(QStringLiteral("tiny"), 0.005);
        QVERIFY2(quarter && tiny, qPrintable(quarter ? tiny.error() : quarter.error()));
        QCOMPARE(limits(*quarter), (std::pair<qint64, qint64>(25000, 100000)));
        QCOMPARE(limits(*tiny), (std::pair<qint64, qint64>(1000, 200000)));
        QVERIFY((*quota)->describe().contains(QStringLiteral("period 100 ms")));
        auto fine = flotilla::CpuQuota::create({}, 10000);
        QVERIFY2(fine, qPrintable(fine.error()));
        const auto fineQuarter = (*fine)->addMachine(QStringLiteral("quarter"), 0.25);
        QVERIFY2(fineQuarter, qPrintable(fineQuarter.error()));
        const QString fineDir = QFileInfo((*fine)->procsFile(*fineQuarter)).path();
        const auto fineLimits = QFileInfo::exists(fineDir + QStringLiteral("/cpu.max"))
            ? QString::fromLatin1(flotilla::test::readFile(fineDir + QStringLiteral("/cpu.max"))).trimmed()
            : QString::fromLatin1(flotilla::test::readFile(fineDir + QStringLiteral("/cpu.cfs_quota_us")).trimmed() + ' '
                                  + flotilla::test::readFile(fineDir + QStringLiteral("/cpu.cfs_period_us")).trimmed());
        QCOMPARE(fineLimits, QStringLiteral("2500 10000"));
        const auto tooShort = flotilla::CpuQuota::create({}, 500);
        QVERIFY(!tooShort);
        QVERIFY2(tooShort.error().contains(QStringLiteral("1 to 1000 ms")), qPrintable(tooShort.error()));
    }

    // The coordinator's evaluations go onto a machine of their own, as the loop's and DDP's are
    // off their clocks: the thread named "evaluation" moves, and the process's other threads
    // stay on the machine they were on.
    void oneThreadOfAProcessMovesToAMachineOfItsOwn()
    {
        auto quota = flotilla::CpuQuota::create();
        if (!quota)
            QSKIP(qPrintable(QStringLiteral("no cgroup can be written here: %1").arg(quota.error())));
        const auto evaluator = (*quota)->addMachine(QStringLiteral("evaluator"), 0.25);
        QVERIFY2(evaluator, qPrintable(evaluator.error()));
        std::atomic<qint64> threadId{0};
        std::atomic<bool> done{false};
        std::thread evaluation([&] {
            flotilla::nameThisThread("evaluation");
            threadId = qint64(syscall(SYS_gettid));
            while (!done)
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
        });
        QTRY_VERIFY(threadId > 0);
        const QString task = QStringLiteral("/proc/self/task/%1/").arg(threadId.load());
        QCOMPARE(flotilla::test::readFile(task + QStringLiteral("comm")).trimmed(), QByteArray("evaluation"));
        const auto moved = (*quota)->moveThread(*evaluator, threadId);
        if (!(*quota)->movesThreads()) {
            QVERIFY(!moved);
            QVERIFY2(moved.error().contains(QStringLiteral("threaded subtree")), qPrintable(moved.error()));
        } else {
            QVERIFY2(moved, qPrintable(moved.error()));
            const QString group = QFileInfo((*quota)->procsFile(*evaluator)).path();
            const QString machine = group.mid(group.indexOf(QStringLiteral("flotilla-bench")));
            QVERIFY2(flotilla::test::readFile(task + QStringLiteral("cgroup")).contains(machine.toUtf8()),
                     flotilla::test::readFile(task + QStringLiteral("cgroup")).constData());
            const QString self = QStringLiteral("/proc/self/task/%1/cgroup").arg(qint64(syscall(SYS_gettid)));
            QVERIFY2(!flotilla::test::readFile(self).contains(machine.toUtf8()), flotilla::test::readFile(self).constData());
        }
        done = true;
        evaluation.join(); // a group with a thread in it cannot be removed
    }

    // A contender's curve is read to its end, and the epoch that reached the target stays the
    // one reported (the loop's 90% at epoch 4 was once reported as its last epoch, 6).
    void theEpochThatReachedTheTargetIsTheOneReported()
    {
        const QString lines = QStringLiteral(
            "printf '%s\\n' '{\"epoch\": 1, \"accuracy\": 0.5, \"seconds\": 1, \"eval_seconds\": 0}' "
            "'{\"epoch\": 2, \"accuracy\": 0.92, \"seconds\": 2, \"eval_seconds\": 0}' "
            "'{\"epoch\": 3, \"accuracy\": 0.95, \"seconds\": 3, \"eval_seconds\": 0}'");
        std::vector<flotilla::EpochLine> curve;
        const flotilla::Outcome reached =
            flotilla::runLines(QStringLiteral("/bin/sh"), {QStringLiteral("-c"), lines}, 0.9, 30, &curve);
        QVERIFY2(reached.seconds >= 0, qPrintable(reached.note));
        QCOMPARE(reached.epoch, 2);
        QCOMPARE(int(curve.size()), 3);
        const flotilla::Outcome missed = flotilla::runLines(QStringLiteral("/bin/sh"), {QStringLiteral("-c"), lines}, 0.99, 30);
        QVERIFY(missed.seconds < 0);
        QCOMPARE(missed.epoch, 3);
        QVERIFY2(missed.note.contains(QStringLiteral("without reaching the target after 3 epochs")), qPrintable(missed.note));
    }

    void unknownBenchmarkIsAUsageError()
    {
        const Run r = bench({QStringLiteral("nonsense")});
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.output.contains(QStringLiteral("name one benchmark")), qPrintable(r.output));
    }
};

QTEST_GUILESS_MAIN(TestBench)
#include "tst_bench.moc"
