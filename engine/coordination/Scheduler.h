#pragma once
// Scheduling of subtasks and leases, without I/O: epochs become one subtask per shard,
// workers take subtasks under leases with deadlines, leases expire or are handed back and
// their subtasks go back to the queue, and each subtask is assimilated exactly once.
//
// A subtask names positions [begin, end) of its shard's order in its epoch. A partial result
// covering [begin, begin+k) closes the subtask and opens a remainder subtask [begin+k, end),
// so every sample of every shard is trained exactly once per epoch even when workers are
// preempted mid-subtask.
//
// Late results: a result whose lease has expired, been handed back or been lost is still
// accepted if its subtask is not done yet; otherwise it is a duplicate and is dropped. When a
// subtask is done, other active leases on it are superseded (their results will be dropped).
// A subtask may have been split after its lease ended (a slower worker got its first part):
// the late result then also takes the positions past the split that are still owed, so that
// no sample is trained twice in one epoch (see reach()).
//
// Memory stays flat over a long job: once an epoch is done, its subtasks and leases leave
// memory (the store keeps them); a result for one of its leases is a duplicate.
//
// Every mutation returns the records it changed so the caller can persist them. Owned and
// used by the coordinator's thread only.
//
// Active leases are indexed by deadline, worker and subtask, and the queue by epoch, so no
// operation scans every lease ever issued: a fleet of 100,000 workers stays cheap.

#include "common/Clock.h"

#include <QString>

#include <map>
#include <optional>
#include <set>
#include <vector>

namespace flotilla {

enum class SubtaskState { Queued, Leased, Done };
enum class LeaseState { Active, Completed, Expired, HandedBack, Lost, Superseded };

QString toString(SubtaskState state);
QString toString(LeaseState state);
std::optional<SubtaskState> subtaskStateFromString(const QString &text);
std::optional<LeaseState> leaseStateFromString(const QString &text);

struct Subtask
{
    qint64 id = 0;
    int epoch = 0;
    int shard = 0;
    qint64 begin = 0;
    qint64 end = 0;
    qint64 parentId = 0;  // the subtask this one was split from or is the remainder of
    SubtaskState state = SubtaskState::Queued;
    qint64 coveredEnd = 0; // done: the positions [begin, coveredEnd) were assimilated
    qint64 assimilatedSeq = 0;
    int attempts = 0;      // leases granted on it so far (not stored; rebuilt from leases)

    qint64 size() const { return end - begin; }
};

struct Lease
{
    qint64 id = 0;
    qint64 subtaskId = 0;
    qint64 workerId = 0;
    qint64 baseSeq = 0;      // the state the worker started from
    qint64 baseVersion = 0;
    qint64 issuedMs = 0;
    qint64 deadlineMs = 0;
    LeaseState state = LeaseState::Active;
    qint64 endedMs = 0;
};

struct SchedulerChanges
{
    std::vector<Subtask> subtasks;
    std::vector<Lease> leases;
    void add(const Subtask &s) { subtasks.push_back(s); }
    void add(const Lease &l) { leases.push_back(l); }
};

// The lease policy of heterogeneous fleets, shared by the coordinator and the simulator: a
// worker whose speed is known gets about targetSubtaskSeconds of work (at least a batch) and
// a deadline of three times its expected duration plus 10 s, capped by the lease timeout; an
// unknown one (speed 0) gets whole subtasks and the lease timeout.
struct LeaseSizing
{
    qint64 maxPositions = 0; // 0: no split
    qint64 durationMs = 0;
};
LeaseSizing sizeLease(double samplesPerSecond, double targetSubtaskSeconds, double leaseTimeoutSeconds,
                      int batchSize, int localEpochs, bool byLocalSteps, qint64 largestSubtask);

// Where a subtask of `size` positions is cut for a bound of maxPositions: the first of the
// fewest pieces of whole steps (a step: a batch's positions) that fit, as equal as steps allow.
// Without a step, or with a bound under one, at the bound.
qint64 balancedCut(qint64 size, qint64 maxPositions, qint64 step);

// The credit of a result: the share of a full shard's work it did, counting only the
// positions its subtask still names (a late result may have trained more, if the subtask was
// split after its lease expired). Clamped to (0, 1].
double resultCredit(qint64 sampleSteps, qint64 covered, qint64 resultCovered, qint64 fullShardWork);

class Scheduler
{
public:
    struct Config
    {
        int epochs = 1;
        std::vector<qint64> shardSizes;
        bool synchronous = false; // open epoch e+1 only when epoch e is done
        // Keep finished epochs' subtasks and leases in memory (the simulator checks every
        // epoch's tiling at the end); otherwise they are forgotten once done.
        bool keepDoneEpochs = false;
        // Asynchronous jobs: how many epochs past the oldest unfinished one may be open (1:
        // the next one only). More keep a fleet busy through an epoch's slow tail; each one
        // adds about an epoch of versions to the staleness of the results that finish it.
        int epochsAhead = 1;
    };

    Scheduler(Config config, const Clock *clock);

    // Rebuilds the state from stored records (in any order).
    void restore(const std::vector<Subtask> &subtasks, const std::vector<Lease> &leases);
    // After restore(): what is wrong with the records, or an empty string. In every opened
    // epoch, the pieces of each shard — positions assimilated by done subtasks, positions
    // of the others — must tile the shard exactly.
    QString checkIntegrity() const;

    // Opens the next epoch(s) when the policy allows: asynchronous jobs run at most
    // Config::epochsAhead epochs ahead of the oldest unfinished one, synchronous jobs one
    // epoch at a time.
    SchedulerChanges openEpochs();

    // Leases the next queued subtask (oldest epoch first) to a worker. With maxPositions > 0
    // a larger subtask is split first: the worker gets its first maxPositions positions and
    // the rest stays queued as a subtask of its own (so a slow machine gets less work).
    struct Grant
    {
        Lease lease;
        Subtask subtask;
        SchedulerChanges changes;
    };
    // With a step (a batch's positions), a split is balanced in whole steps: a subtask of
    // 19 steps under a bound of 8 becomes 7 + 6 + 6, not 8 + 8 + 3, so that the leases of one
    // round take about as long as each other and no worker waits out the others' longer piece.
    std::optional<Grant> grant(qint64 workerId, qint64 baseSeq, qint64 baseVersion, qint64 durationMs,
                               qint64 maxPositions = 0, qint64 step = 0);

    // Redundancy: one more lease on a subtask that is leased already, for a second (or third)
    // worker to train the same positions from the same base. Nothing when the subtask is not
    // leased (queued, done, or unknown).
    std::optional<Grant> grantReplica(qint64 subtaskId, qint64 workerId, qint64 baseSeq, qint64 baseVersion,
                                      qint64 durationMs);

    enum class Verdict { Accept, Duplicate, Unknown };
    struct Check
    {
        Verdict verdict = Verdict::Unknown;
        QString reason; // why a result is not accepted
        bool late = false;
        bool forgotten = false; // the lease's epoch is done and left memory: owner unknown
        Lease lease;
        Subtask subtask;
    };
    // What to do with a result that arrives for a lease.
    Check check(qint64 leaseId) const;

    // How many leading positions of a result for subtask s count: a result may cover more than
    // s names when s was split after the result's lease ended. The positions past s.end count
    // while the pieces holding them are still owed (queued or leased); a piece assimilated
    // already in that range means the result trained samples twice (overlapsDone).
    struct Reach
    {
        qint64 covered = 0;
        bool overlapsDone = false;
        qint64 doneBegin = 0; // where the assimilated piece starts, when overlapsDone
    };
    Reach reach(const Subtask &s, qint64 resultCovered) const;

    // Records an accepted result that trained positions [begin, begin + covered) of the
    // subtask. Closes the subtask, opens a remainder if covered < size. covered beyond the
    // subtask's end (see reach()) completes the owed pieces that follow it as well.
    SchedulerChanges complete(qint64 leaseId, qint64 covered, qint64 seq);
    // A result kept aside until another worker's result of the same subtask can be compared
    // with it (redundancy): the lease has delivered, the subtask stays leased. A resend of the
    // result is a duplicate; complete() can still take the lease later.
    // supersedeOthers: the held result will be assimilated (a buffered one), so other active
    // leases on the subtask end as superseded (their workers can stop; no drop() of theirs
    // can send the subtask back to the queue).
    SchedulerChanges hold(qint64 leaseId, bool supersedeOthers = false);
    // Records a result that was checked and dropped (a duplicate, or a rejected upload):
    // the lease ends; an active lease's subtask goes back to the queue unless another active
    // lease (a replica) still trains it.
    SchedulerChanges drop(qint64 leaseId, LeaseState endState);
    // The worker gives the subtask back without a result.
    SchedulerChanges handBack(qint64 leaseId);
    // Active leases past their deadline expire; their subtasks go back to the queue.
    SchedulerChanges expire();
    // A worker is gone (crashed, killed, restarted): its active leases are lost.
    SchedulerChanges workerLost(qint64 workerId);
    // Every active lease's deadline moves this much later: time in which the coordinator did
    // not run (its process stopped, its machine suspended) is not held against the workers.
    SchedulerChanges postpone(qint64 ms);
    // A leased subtask nobody trains any more (its held results were given up): back to the
    // queue.
    SchedulerChanges release(qint64 subtaskId);
    // Active leases on a subtask.
    int activeLeasesOn(qint64 subtaskId) const;

    bool epochDone(int epoch) const;
    int epochsDone() const { return m_epochsDone; }
    int openedEpochs() const { return m_openedEpochs; }
    int epochs() const { return m_config.epochs; }
    bool finished() const { return m_epochsDone >= m_config.epochs; }
    qint64 shardSize(int shard) const { return m_config.shardSizes[static_cast<std::size_t>(shard)]; }
    int shards() const { return static_cast<int>(m_config.shardSizes.size()); }

    std::vector<Lease> activeLeases() const;
    std::optional<Lease> activeLeaseOf(qint64 workerId) const;
    const Subtask *subtask(qint64 id) const;
    int queuedCount() const { return static_cast<int>(m_queue.size()); }
    // Positions of all queued subtasks together.
    qint64 queuedPositions() const { return m_queuedPositions; }
    // Speculation: a leased subtask that only one active lease trains, the one whose lease is
    // nearest its deadline, for grantReplica() to give a second worker when nothing is
    // queued; nothing when every leased subtask has a copy already.
    std::optional<qint64> speculationCandidate() const;
    int activeLeaseCount() const;
    // The lowest base version of any active lease (to keep its weights), or -1.
    qint64 oldestActiveBaseSeq() const;

private:
    Subtask &newSubtask(int epoch, int shard, qint64 begin, qint64 end, qint64 parentId);
    void requeue(Subtask &s);
    void enqueue(const Subtask &s);
    void dequeue(const Subtask &s);
    // A new active lease on s (counted as an attempt).
    const Lease &newLease(Subtask &s, qint64 workerId, qint64 baseSeq, qint64 baseVersion, qint64 durationMs);
    void endLease(Lease &lease, LeaseState state, SchedulerChanges &changes);
    void advanceDoneEpochs();
    void indexActive(const Lease &lease);
    void unindexActive(const Lease &lease);
    // Marks s done with [begin, begin + covered) assimilated at seq; a remainder is queued.
    void close(Subtask &s, qint64 covered, qint64 seq, SchedulerChanges &changes);
    // The piece of (epoch, shard) starting at position begin, or null.
    Subtask *pieceAt(int epoch, int shard, qint64 begin);
    const Subtask *pieceAt(int epoch, int shard, qint64 begin) const;
    void forgetEpoch(int epoch);
    QString checkTiling(int firstEpoch) const;

    Config m_config;
    const Clock *m_clock;
    std::map<qint64, Subtask> m_subtasks;
    std::map<qint64, Lease> m_leases;
    std::set<std::pair<int, qint64>> m_queue; // (epoch, subtask id)
    qint64 m_queuedPositions = 0;
    std::map<int, int> m_openByEpoch;         // subtasks not yet done, per epoch
    // Indexes of the active leases (ids in ascending order, the order of m_leases).
    std::set<std::pair<qint64, qint64>> m_activeByDeadline; // (deadline, lease id)
    std::map<qint64, std::set<qint64>> m_activeByWorker;
    std::map<qint64, std::set<qint64>> m_activeBySubtask;
    std::multiset<qint64> m_activeBaseSeqs;
    std::set<std::pair<qint64, qint64>> m_aloneByDeadline; // active leases alone on their subtask
    int m_openedEpochs = 0;
    int m_epochsDone = 0;
    int m_forgottenEpochs = 0; // epochs [0, this) left memory
    QString m_restoredProblem; // checkIntegrity() of the records as restored
    qint64 m_nextSubtaskId = 1;
    qint64 m_nextLeaseId = 1;
};

} // namespace flotilla
