// `flotilla bench parity --quick --epochs 8`: Flotilla against the plain single-process loop with the
// same model, optimizer, batch, schedule and epochs, on a generated image folder and a
// generated CSV, three seeds each. With one worker the default rule must train as the loop
// does (paired by seed, within a point on average): a rule that halves its updates, as the
// paper's VC-ASGD with α = 0.5 does, misses that bound, and the test checks that it does, so
// the bound is one that can fail. With two workers the default must finish and learn; how far
// it is from the loop is reported (`flotilla bench parity` sets it beside the other rules:
// docs/benchmarks.md).
#include "TestSupport.h"

#include <QtTest>

#include <map>
#include <tuple>

namespace {

// (job, contender, workers, rule, repeat) → the accuracy after the last epoch.
using Key = std::tuple<QString, QString, int, QString, int>;

std::map<Key, double> finals(const QString &csvPath)
{
    std::map<Key, std::pair<int, double>> last;
    QFile file(csvPath);
    if (!file.open(QIODevice::ReadOnly))
        return {};
    const QList<QByteArray> lines = file.readAll().split('\n');
    for (int i = 1; i < lines.size(); ++i) {
        const QList<QByteArray> f = lines[i].split(',');
        if (f.size() < 8 || f[5].toInt() <= 0)
            continue;
        const Key key{QString::fromUtf8(f[0]), QString::fromUtf8(f[1]), f[2].toInt(), QString::fromUtf8(f[3]),
                      f[4].toInt()};
        const int epoch = f[5].toInt();
        if (!last.count(key) || epoch > last[key].first)
            last[key] = {epoch, f[6].toDouble()};
    }
    std::map<Key, double> out;
    for (const auto &[k, v] : last)
        out[k] = v.second;
    return out;
}

// The mean over seeds of (contender − loop), in points, and how many seeds were paired.
std::pair<double, int> pairedGap(const std::map<Key, double> &f, const QString &job, int workers, const QString &rule)
{
    double sum = 0;
    int n = 0;
    for (int r = 1; r <= 3; ++r) {
        const auto loop = f.find(Key{job, QStringLiteral("loop"), 1, QStringLiteral("-"), r});
        const auto run = f.find(Key{job, QStringLiteral("flotilla"), workers, rule, r});
        if (loop == f.end() || run == f.end())
            continue;
        sum += 100.0 * (run->second - loop->second);
        ++n;
    }
    return {n > 0 ? sum / n : -100.0, n};
}

} // namespace

class TestParity : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void flotillaTrainsAsThePlainLoopDoes()
    {
        QTemporaryDir dir;
        const QString csv = dir.filePath(QStringLiteral("parity.csv"));
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(flotilla::test::flotillaBinary(),
                {QStringLiteral("bench"), QStringLiteral("parity"), QStringLiteral("--quick"), QStringLiteral("--epochs"),
                 QStringLiteral("8"), QStringLiteral("--jobs"),
                 QStringLiteral("shapes,table"), QStringLiteral("--workers"), QStringLiteral("1,2"),
                 QStringLiteral("--rules"), QStringLiteral("default,vc-asgd"), QStringLiteral("--repeats"),
                 QStringLiteral("3"), QStringLiteral("--ddp"), QStringLiteral("off"), QStringLiteral("--lr-scaled"),
                 QStringLiteral("off"), QStringLiteral("--data-dir"),
                 dir.path(), QStringLiteral("--csv"), csv});
        QVERIFY(p.waitForFinished(540000));
        const QString output = QString::fromUtf8(p.readAll());
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(output.right(3000)));
        QVERIFY2(output.contains(QStringLiteral("Summary")), qPrintable(output.right(3000)));
        const auto f = finals(csv);
        const QString defaultRule = flotilla::JobSpec().aggregation.rule;
        for (const QString &job : QStringList{QStringLiteral("shapes"), QStringLiteral("table")}) {
            const auto [gap, seeds] = pairedGap(f, job, 1, defaultRule);
            QCOMPARE(seeds, 3);
            QVERIFY2(gap >= -1.0, qPrintable(QStringLiteral("%1: one worker %2 points from the loop").arg(job).arg(gap)));
            // The halving rule misses the same bound.
            const auto [halved, halvedSeeds] = pairedGap(f, job, 1, QStringLiteral("vc-asgd"));
            QCOMPARE(halvedSeeds, 3);
            QVERIFY2(halved < -1.0,
                     qPrintable(QStringLiteral("%1: vc-asgd (α 0.5) within %2 points: the bound does not discriminate")
                                    .arg(job).arg(halved)));
            // Two workers: every seed finished and learned (chance is 25% and about 33%).
            for (int r = 1; r <= 3; ++r) {
                const auto two = f.find(Key{job, QStringLiteral("flotilla"), 2, defaultRule, r});
                QVERIFY2(two != f.end() && two->second > 0.6,
                         qPrintable(QStringLiteral("%1, 2 workers, seed %2").arg(job).arg(r)));
            }
            // More machines, sooner: how far the default is from the loop with two workers
            // (paired by seed). Reported, not asserted: on a loaded machine the rounds' cut into
            // pieces changes with timing and one seed in three can lose ten points, so a margin
            // here was flaky; docs/algorithms.md has the measured gaps against the other rules.
            const auto [two, seeds2] = pairedGap(f, job, 2, defaultRule);
            QCOMPARE(seeds2, 3);
            qInfo("%s, 2 workers: the default %+.1f points from the loop", qPrintable(job), two);
        }
    }
};

QTEST_GUILESS_MAIN(TestParity)
#include "tst_parity.moc"
