// A job's journal on real files: a checkpoint is on disk before the transaction that records
// it, a group commits once with one checkpoint of its latest state or leaves nothing behind,
// resuming deletes the files of assimilations that never committed, and old checkpoints go
// while the two latest and those still needed stay.
#include "FakeClock.h"
#include "engine/coordination/Journal.h"

#include <QDir>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;
using flotilla::test::FakeClock;

namespace {

constexpr int kParameters = 8;

class Fixture
{
public:
    Fixture()
    {
        AggregationSpec spec;
        spec.rule = QStringLiteral("vc-asgd");
        spec.alpha = 0.5;
        AssimilatorConfig config;
        config.schedule.epochs = 20;
        config.schedule.shardSizes = {10, 10};
        m_core = std::make_unique<Assimilator>(config, std::move(createAggregationRule(spec)).value(), &m_clock);
        AggregationState initial;
        initial.weights = torch::zeros({kParameters});
        m_core->start(std::move(initial), 0, 0);
        auto journal = Journal::open(m_dir.path(), &m_clock);
        if (!journal)
            qFatal("%s", qPrintable(journal.error()));
        m_journal = std::move(journal).value();
        m_journal->follow(*m_core, QStringLiteral("layout"));
        auto sha = m_journal->writeCheckpointFile();
        auto jobId = sha ? m_journal->createJob(QStringLiteral("job"), QStringLiteral("{}"), m_clock.nowMs(), *sha)
                         : Result<qint64>(sha.takeError());
        if (!jobId)
            qFatal("%s", qPrintable(jobId.error()));
        m_jobId = *jobId;
    }

    Journal &journal() { return *m_journal; }
    Store &store() { return m_journal->store(); }
    qint64 jobId() const { return m_jobId; }
    const Assimilator &core() const { return *m_core; }
    QString dir() const { return m_dir.path(); }

    // One result folded into the core (nothing recorded): its new seq.
    qint64 fold(float value)
    {
        auto g = m_core->grant(1);
        m_core->fold(g->lease, g->subtask, m_core->admit(g->subtask, 10, 10), torch::full({kParameters}, value), {},
                     1.0, false);
        return m_core->seq();
    }

    // Records the core's latest fold with one ledger row as the caller's step.
    Result<void> record(const std::function<void()> &duringTransaction = {})
    {
        return m_journal->recordFold(m_core->seq(), m_core->version(), m_clock.nowMs(), [&] {
            if (duringTransaction)
                duringTransaction();
            return std::vector<Result<void>>{
                store().addLedger(m_jobId, LedgerRecord{1, 1, m_clock.nowMs(), QStringLiteral("useful"), 1.0})};
        });
    }

    bool onDisk(qint64 seq) const
    {
        return QFileInfo::exists(m_dir.path() + QStringLiteral("/checkpoints/state-%1.ckpt").arg(seq, 9, 10, QChar(u'0')));
    }

    qint64 latestSeq()
    {
        auto latest = store().latestState(m_jobId);
        return latest && latest->has_value() ? (*latest)->seq : -1;
    }

    double usefulSeconds() { return store().ledgerTotals(m_jobId)->usefulSeconds; }

private:
    QTemporaryDir m_dir;
    FakeClock m_clock;
    std::unique_ptr<Assimilator> m_core;
    std::unique_ptr<Journal> m_journal;
    qint64 m_jobId = 0;
};

} // namespace

class TestJournal : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void aNewJobRecordsItsInitialState()
    {
        Fixture f;
        QVERIFY(f.onDisk(0));
        QCOMPARE(f.latestSeq(), qint64(0));
        auto state = f.journal().durableState();
        QVERIFY2(state, qPrintable(state.error()));
        QCOMPARE(state->seq, qint64(0));
        QCOMPARE(state->layoutDigest, QStringLiteral("layout"));
    }

    void aFoldsCheckpointIsOnDiskBeforeItsTransaction()
    {
        Fixture f;
        const qint64 seq = f.fold(2.0f);
        QCOMPARE(seq, qint64(1));
        bool seenDuring = false;
        QVERIFY(f.record([&] { seenDuring = f.onDisk(seq); }));
        QVERIFY(seenDuring);
        QCOMPARE(f.latestSeq(), seq);
        QCOMPARE(f.usefulSeconds(), 1.0);
        auto state = f.journal().durableState();
        QVERIFY(state);
        QCOMPARE(state->seq, seq);
        QVERIFY(torch::equal(state->state.weights, f.core().state().weights));
    }

    void aGroupCommitsOnceWithOneCheckpoint()
    {
        Fixture f;
        QVERIFY(f.journal().beginGroup());
        QVERIFY(!f.journal().foldsAwaitCheckpoint());
        f.fold(1.0f);
        QVERIFY(f.record());
        const qint64 last = f.fold(3.0f);
        QVERIFY(f.record());
        // Nothing of the group is durable yet: no checkpoint, and another connection sees
        // neither its states nor its rows.
        QVERIFY(f.journal().foldsAwaitCheckpoint());
        QVERIFY(!f.onDisk(1) && !f.onDisk(last));
        {
            auto reader = Store::open(f.dir() + QStringLiteral("/flotilla.db"));
            QVERIFY(reader);
            QCOMPARE((*reader)->latestState(f.jobId())->value().seq, qint64(0));
            QCOMPARE((*reader)->ledgerTotals(f.jobId())->usefulSeconds, 0.0);
        }
        auto ended = f.journal().endGroup(QString());
        QVERIFY2(ended, qPrintable(ended.error()));
        QVERIFY(*ended);
        QVERIFY(!f.journal().inGroup());
        QVERIFY(!f.onDisk(1));
        QVERIFY(f.onDisk(last));
        QCOMPARE(f.latestSeq(), last);
        QCOMPARE(f.usefulSeconds(), 2.0);
        QCOMPARE(f.journal().durableState()->seq, last);

        // A group that folded nothing writes no checkpoint.
        QVERIFY(f.journal().beginGroup());
        ended = f.journal().endGroup(QString());
        QVERIFY(ended && !*ended);
    }

    void aStoppedGroupLeavesNothing()
    {
        Fixture f;
        QVERIFY(f.journal().beginGroup());
        f.fold(1.0f);
        QVERIFY(f.record());
        const auto ended = f.journal().endGroup(QStringLiteral("the job stopped"));
        QVERIFY(!ended);
        QCOMPARE(ended.error(), QStringLiteral("the job stopped"));
        QVERIFY(!f.journal().inGroup());
        QVERIFY(!f.onDisk(1));
        QCOMPARE(f.latestSeq(), qint64(0));
        QCOMPARE(f.usefulSeconds(), 0.0);
        QCOMPARE(f.journal().durableState()->seq, qint64(0));
    }

    void resumingDeletesCheckpointsThatNeverCommitted()
    {
        Fixture f;
        f.fold(1.0f);
        QVERIFY(f.record());
        // A crash between a checkpoint's file and its transaction leaves the file alone.
        const QString orphan = f.dir() + QStringLiteral("/checkpoints/state-000000002.ckpt");
        QVERIFY(QFile::copy(f.dir() + QStringLiteral("/checkpoints/state-000000001.ckpt"), orphan));
        f.journal().resume(f.jobId(), 1);
        QVERIFY(!QFileInfo::exists(orphan));
        QVERIFY(f.onDisk(0) && f.onDisk(1));
        QCOMPARE(f.journal().durableState()->seq, qint64(1));
    }

    void collectingKeepsTheTwoLatestAndTheNeeded()
    {
        Fixture f;
        for (int i = 1; i <= 4; ++i) {
            f.fold(float(i));
            QVERIFY(f.record());
        }
        f.journal().collect({1});
        QVERIFY(!f.onDisk(0));
        QVERIFY(f.onDisk(1));
        QVERIFY(!f.onDisk(2));
        QVERIFY(f.onDisk(3) && f.onDisk(4));
        QVERIFY(f.journal().keptState(1).has_value());
        QVERIFY(!f.journal().keptState(2).has_value());
        QCOMPARE(f.journal().keptState(4)->seq, qint64(4));
    }
};

QTEST_GUILESS_MAIN(TestJournal)
#include "tst_journal.moc"
