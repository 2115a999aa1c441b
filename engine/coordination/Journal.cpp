#include "engine/coordination/Journal.h"

#include "common/LogCategories.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>

namespace flotilla {

namespace {

const QString kStoreFile = QStringLiteral("flotilla.db");

} // namespace

Result<std::unique_ptr<Journal>> Journal::open(const QString &runDir, const Clock *clock)
{
    std::unique_ptr<Journal> j(new Journal);
    j->m_runDir = runDir;
    j->m_clock = clock;
    if (!QDir().mkpath(runDir + QStringLiteral("/checkpoints")))
        return fail(QStringLiteral("cannot create run directory '%1'").arg(runDir));
    auto store = Store::open(runDir + u'/' + kStoreFile);
    if (!store)
        return store.takeError();
    j->m_store = std::move(store).value();
    return j;
}

Result<std::optional<JobRecord>> Journal::storedJob(const QString &runDir)
{
    const QString path = runDir + u'/' + kStoreFile;
    if (!QFileInfo::exists(path))
        return std::optional<JobRecord>();
    auto store = Store::open(path);
    if (!store)
        return store.takeError();
    return (*store)->latestJob();
}

void Journal::follow(const Assimilator &core, const QString &layoutDigest)
{
    m_core = &core;
    m_layoutDigest = layoutDigest;
}

QString Journal::checkpointPath(qint64 seq) const
{
    return QStringLiteral("checkpoints/state-%1.ckpt").arg(seq, 9, 10, QChar(u'0'));
}

Result<QString> Journal::writeCheckpointFile()
{
    const Checkpoint checkpoint{m_core->seq(), m_core->version(), m_layoutDigest, m_core->state()};
    return writeCheckpoint(m_runDir + u'/' + checkpointPath(checkpoint.seq), checkpoint);
}

Result<qint64> Journal::createJob(const QString &name, const QString &specJson, qint64 nowMs, const QString &sha256)
{
    const qint64 seq = m_core->seq();
    if (auto r = m_store->begin(); !r)
        return r.takeError();
    auto jobId = m_store->createJob(name, specJson, nowMs);
    if (!jobId) {
        m_store->rollback();
        return jobId.takeError();
    }
    if (auto r = m_store->addState(*jobId, StateRecord{seq, m_core->version(), checkpointPath(seq), sha256, nowMs});
        !r) {
        m_store->rollback();
        return r.takeError();
    }
    if (auto r = m_store->commit(); !r)
        return r.takeError();
    m_jobId = *jobId;
    m_durableSeq = seq;
    m_checkpointSeqs.insert(seq);
    return jobId;
}

void Journal::resume(qint64 jobId, qint64 seq)
{
    m_jobId = jobId;
    m_durableSeq = seq;
    // Checkpoint files newer than the latest committed state were written by an
    // assimilation that never committed: the global model never included them.
    const QDir dir(m_runDir + QStringLiteral("/checkpoints"));
    for (const QString &name : dir.entryList({QStringLiteral("state-*.ckpt")}, QDir::Files)) {
        const qint64 fileSeq = name.mid(6, 9).toLongLong();
        if (fileSeq > seq) {
            QFile::remove(dir.filePath(name));
            qCInfo(lcStore) << "removed uncommitted checkpoint" << name;
        } else {
            m_checkpointSeqs.insert(fileSeq);
        }
    }
}

Result<Checkpoint> Journal::read(const StateRecord &state) const
{
    return readCheckpoint(m_runDir + u'/' + state.path, state.sha256);
}

Result<void> Journal::transaction(const std::function<std::vector<Result<void>>()> &steps)
{
    if (m_grouped) {
        // The group's transaction: endGroup() commits it, or rolls it back after a failure.
        for (const auto &r : steps())
            if (!r)
                return r;
        return {};
    }
    if (auto r = m_store->begin(); !r)
        return r;
    for (const auto &r : steps())
        if (!r) {
            m_store->rollback();
            return r;
        }
    return m_store->commit();
}

Result<void> Journal::beginGroup()
{
    if (auto r = m_store->begin(); !r)
        return r;
    m_grouped = true;
    m_groupFolds = 0;
    return {};
}

Result<bool> Journal::endGroup(const QString &failure)
{
    const int folds = m_groupFolds;
    auto finish = [&]() -> Result<void> {
        if (!failure.isEmpty())
            return fail(failure);
        if (folds > 0)
            if (auto r = recordLatest(); !r)
                return r;
        return m_store->commit();
    };
    auto r = finish();
    m_grouped = false;
    m_groupFolds = 0;
    if (!r) {
        m_store->rollback();
        return r.takeError();
    }
    if (folds > 0) {
        m_durableSeq = m_core->seq();
        m_checkpointSeqs.insert(m_durableSeq);
    }
    return folds > 0;
}

Result<void> Journal::recordLatest()
{
    const qint64 seq = m_core->seq();
    auto sha = writeCheckpointFile();
    if (!sha)
        return fail(QStringLiteral("cannot write the checkpoint of assimilation %1: %2").arg(seq).arg(sha.error()));
    return m_store->addState(m_jobId, StateRecord{seq, m_core->version(), checkpointPath(seq), *sha, m_clock->nowMs()});
}

Result<void> Journal::recordFold(qint64 seq, qint64 version, qint64 nowMs,
                                 const std::function<std::vector<Result<void>>()> &steps)
{
    QString sha;
    if (!m_grouped) {
        const Checkpoint checkpoint{seq, version, m_layoutDigest, m_core->state()};
        auto written = writeCheckpoint(m_runDir + u'/' + checkpointPath(seq), checkpoint);
        if (!written)
            return fail(QStringLiteral("cannot write the checkpoint of assimilation %1: %2").arg(seq).arg(written.error()));
        sha = *written;
    }
    auto committed = transaction([&] {
        std::vector<Result<void>> all = steps();
        if (!m_grouped)
            all.push_back(m_store->addState(m_jobId, StateRecord{seq, version, checkpointPath(seq), sha, nowMs}));
        return all;
    });
    if (!committed)
        return fail(QStringLiteral("cannot record assimilation %1: %2").arg(seq).arg(committed.error()));
    if (m_grouped) {
        ++m_groupFolds;
    } else {
        m_durableSeq = seq;
        m_checkpointSeqs.insert(seq);
    }
    return {};
}

Result<Checkpoint> Journal::durableState() const
{
    auto st = m_store->state(m_jobId, m_durableSeq);
    if (!st)
        return st.takeError();
    if (!st->has_value())
        return fail(QStringLiteral("the store records no state at assimilation %1").arg(m_durableSeq));
    return read(**st);
}

std::optional<Checkpoint> Journal::keptState(qint64 seq) const
{
    auto st = m_store->state(m_jobId, seq);
    if (st && st->has_value() && QFileInfo::exists(m_runDir + u'/' + (*st)->path)) {
        auto c = read(**st);
        if (c)
            return std::move(c).value();
    }
    return std::nullopt;
}

void Journal::collect(std::set<qint64> needed)
{
    int latest = 0;
    for (auto it = m_checkpointSeqs.rbegin(); it != m_checkpointSeqs.rend() && latest < 2; ++it, ++latest)
        needed.insert(*it);
    for (auto it = m_checkpointSeqs.begin(); it != m_checkpointSeqs.end();) {
        if (needed.count(*it)) {
            ++it;
            continue;
        }
        QFile::remove(m_runDir + u'/' + checkpointPath(*it));
        it = m_checkpointSeqs.erase(it);
    }
}

} // namespace flotilla
