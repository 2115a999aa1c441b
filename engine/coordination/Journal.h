#pragma once
// The durable side of one job: its store (engine/coordination/Store), the checkpoint files of its global
// state in the run folder, and the group commit. It decides nothing about the job; it keeps
// the order that makes what the Coordinator decided durable:
//
// - A checkpoint file is written and synced (temporary file, fsync, rename) before the store
//   transaction that records its SHA-256. A crash before the commit leaves an orphan file
//   that resuming deletes; a crash after it loses nothing.
// - Group commit: between beginGroup() and endGroup() every store write joins one
//   transaction and folds write no checkpoint of their own; endGroup() writes one checkpoint
//   of the latest state, then commits, so results that arrive together share one fsync. When
//   either fails, everything of the group is rolled back. Outside a group every write is
//   durable when it returns.
// - The two latest checkpoints stay on disk, and those the caller still needs.
//
// Owned by the Coordinator; used on its thread only.

#include "common/Clock.h"
#include "common/Result.h"
#include "engine/coordination/Assimilator.h"
#include "engine/coordination/Checkpoint.h"
#include "engine/coordination/Store.h"

#include <QString>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace flotilla {

class Journal
{
public:
    // Opens the store of runDir (creating it, and the checkpoints folder, for a new job).
    static Result<std::unique_ptr<Journal>> open(const QString &runDir, const Clock *clock);
    // The job recorded in runDir's store, without creating anything: none when the folder
    // holds no store (a job never started there).
    static Result<std::optional<JobRecord>> storedJob(const QString &runDir);

    Store &store() { return *m_store; }
    // The core whose global state the checkpoints hold, and the layout recorded with them.
    void follow(const Assimilator &core, const QString &layoutDigest);

    // A new job: writes the checkpoint of the core's state (its file only) and returns its
    // SHA-256; createJob() then records the job and that state in one transaction.
    Result<QString> writeCheckpointFile();
    Result<qint64> createJob(const QString &name, const QString &specJson, qint64 nowMs, const QString &sha256);
    // A job resumed from the state recorded at seq: checkpoint files past it were written by
    // an assimilation that never committed and are deleted, the others kept track of.
    void resume(qint64 jobId, qint64 seq);
    // A recorded state's checkpoint, checked against its SHA-256.
    Result<Checkpoint> read(const StateRecord &state) const;

    Result<void> beginGroup();
    // Ends the group: when it folded anything, the checkpoint of the latest state and its
    // record, then the commit. A non-empty failure (the job stopped during the group) rolls
    // it back instead, as does any error. True: a new checkpoint is durable.
    Result<bool> endGroup(const QString &failure);
    bool inGroup() const { return m_grouped; }
    // The open group holds folds that have no checkpoint yet: undoing a fold cannot reload
    // the latest checkpoint.
    bool foldsAwaitCheckpoint() const { return m_grouped && m_groupFolds > 0; }

    // Records the fold that made the state at seq: outside a group its checkpoint file first,
    // then one transaction of the caller's steps and the state's record; in a group the steps
    // join the group's transaction and endGroup() writes the checkpoint.
    Result<void> recordFold(qint64 seq, qint64 version, qint64 nowMs,
                            const std::function<std::vector<Result<void>>()> &steps);
    // The latest durable state, as its checkpoint.
    Result<Checkpoint> durableState() const;
    // The checkpoint of the state at seq, if it is still on disk.
    std::optional<Checkpoint> keptState(qint64 seq) const;
    // Deletes checkpoint files other than the two latest and those in needed.
    void collect(std::set<qint64> needed);

private:
    Journal() = default;
    QString checkpointPath(qint64 seq) const;
    Result<void> recordLatest(); // the checkpoint of the core's state, and its record
    // Runs a store transaction's steps: in a group they join its transaction.
    Result<void> transaction(const std::function<std::vector<Result<void>>()> &steps);

    QString m_runDir;
    const Clock *m_clock = nullptr;
    std::unique_ptr<Store> m_store;
    const Assimilator *m_core = nullptr;
    QString m_layoutDigest;
    qint64 m_jobId = 0;
    bool m_grouped = false;
    int m_groupFolds = 0;               // assimilations in the open group, not yet checkpointed
    qint64 m_durableSeq = 0;            // the latest checkpointed state
    std::set<qint64> m_checkpointSeqs;  // checkpoint files on disk
};

} // namespace flotilla
