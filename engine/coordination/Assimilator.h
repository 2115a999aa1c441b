#pragma once
// The in-memory heart of a job, shared by the Coordinator (which adds durability, events,
// validation, screening and trust) and the Simulator (which adds simulated time): the
// scheduler, the aggregation rule and its state, the assimilation counter (seq) and the model
// version, the staleness and credit of each result, the lease policy (subtasks sized by
// workers' measured speeds, and what an idle worker gets at the job's tail), the
// training-loss average and the closing of synchronous rounds.
//
// It has no clock of its own (the scheduler reads the one it is given), no disk and no
// events: every call returns what changed and the caller records it. Owned and used by one
// thread.

#include "engine/coordination/Aggregation.h"
#include "engine/coordination/LeasePolicy.h"
#include "engine/coordination/Scheduler.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace flotilla {

// Rounds: a worker at least this share of the members' median speed trains a whole piece
// (equal machines measure within a few percent of each other); a slower one a share of it.
constexpr double kRoundPaceTolerance = 0.8;

struct AssimilatorConfig
{
    Scheduler::Config schedule; // synchronous is taken from the rule
    // The lease policy (see sizeLease and decideIdle).
    double targetSubtaskSeconds = 60.0;
    double leaseTimeoutSeconds = 120.0;
    int batchSize = 32;
    int localEpochs = 1;
    int localSteps = 0; // > 0: a shard's work is this many steps, whatever its size
    // Buffered aggregation (asynchronous rules): the mean of this many admitted results is
    // folded as one version (1: each result is its own version). See fold().
    int buffer = 1;
    // Smaller subtasks near an epoch's end: no grant takes more than its share of what is
    // queued (⌈queued positions / (active leases + 1)⌉, at least a batch), so the last work
    // is spread over the fleet instead of waiting on a few workers' full-sized subtasks.
    bool shareTail = false;
    bool speculate = false;   // fleet.speculate
    bool dismissIdle = false; // fleet.dismiss_idle
    // Version-synchronous rounds (aggregation.rounds): a round is a buffer's worth of subtasks
    // (setBufferSize: the workers online), all granted from the same version; no grant once
    // the round's leases and delivered results fill it, and the buffer folds when the round's
    // last lease has ended (delivered, expired, lost or handed back), not only when full.
    bool rounds = false;
    int roundSteps = 0; // rounds: a subtask takes at most this many optimizer steps (0: no cap)
};

// One result folded into the global model.
struct FoldedResult
{
    qint64 leaseId = 0;
    qint64 workerId = 0;
    Subtask subtask;
    qint64 seq = 0;
    qint64 staleness = 0;
    qint64 covered = 0;
    double credit = 0.0;
};

// What one result did to the job.
struct FoldOutcome
{
    bool folded = false;
    // Not folded: why. restoreNeeded: the state is not finite and the caller must restore()
    // it from durable storage (it asked for no undo copy).
    QString refusal;
    bool restoreNeeded = false;

    qint64 seq = 0;
    qint64 version = 0;
    qint64 staleness = 0;
    qint64 covered = 0; // positions assimilated, from the subtask's begin
    bool epochClosed = false;
    bool roundClosed = false;
    QString roundRefused; // a synchronous round's mean was not finite: the weights kept theirs
    SchedulerChanges changes;

    // Buffered aggregation: the result waits in the buffer (folded is false, nothing is
    // assimilated yet: its lease is held, its subtask stays leased until the fold).
    bool buffered = false;
    // Every result this call folded into the global model: the one given when unbuffered;
    // a buffer's K results when this call folded the buffer; none when it only buffered.
    // seq, version, covered and epochClosed above are those of the last of them.
    std::vector<FoldedResult> results;
    // A buffer's fold was refused: the subtasks of its results went back to the queue.
    std::vector<FoldedResult> refused;
};

class Assimilator
{
public:
    Assimilator(AssimilatorConfig config, std::unique_ptr<AggregationRule> rule, const Clock *clock);

    // The state the job starts from (a new job: its initial weights at 0/0; a resumed one:
    // its latest checkpoint).
    void start(AggregationState state, qint64 seq, qint64 version);
    // Puts back the state of the last fold after a refused one (see FoldOutcome).
    void restore(AggregationState state);

    Scheduler &scheduler() { return m_scheduler; }
    const Scheduler &scheduler() const { return m_scheduler; }
    const AggregationRule &rule() const { return *m_rule; }
    const AggregationState &state() const { return m_state; }
    qint64 seq() const { return m_seq; }
    qint64 version() const { return m_version; }
    // The global weights at seq(), as handed to workers: one read-only copy per version.
    const torch::Tensor &snapshot();

    // Workers' speeds (samples per second): reported by the worker until results measure
    // them (an exponential average, 0.7 old / 0.3 new).
    double speed(qint64 workerId) const;
    void reportSpeed(qint64 workerId, double samplesPerSecond);
    void measureSpeed(qint64 workerId, qint64 sampleSteps, double seconds);
    // Rounds: the workers online, whose median speed paces a round. A worker slower than that
    // (below kRoundPaceTolerance of it) gets its share of the round's steps, so that its lease
    // ends with the others' instead of holding the round back.
    void setRoundMembers(std::vector<qint64> workers) { m_roundMembers = std::move(workers); }

    // Leases the next subtask to a worker, sized by its speed, based on the current version.
    // With rounds, none while the round is full (roundFull()).
    std::optional<Scheduler::Grant> grant(qint64 workerId);
    // Rounds: every place of the round is leased or delivered; the worker waits for the fold.
    bool roundFull() const;

    // What the caller adds to the lease policy for a worker that gets no subtask (decideIdle).
    struct IdleConditions
    {
        bool halted = false;    // the caller hands out nothing now (paused, stopped by an error)
        bool dismissed = false; // the worker was let go already
        std::function<bool(qint64 subtaskId)> mayCopy; // empty: any subtask may be copied
    };
    // A worker's request for work: the next subtask (grant()) or, when none is left to grant, a
    // speculative copy of the most overdue one, or what the policy says of an idle worker.
    struct Offer
    {
        std::optional<Scheduler::Grant> grant;
        bool speculative = false; // the grant is a copy of a subtask that another lease holds
        IdleDecision idle;        // no grant: whether the worker is to stop
    };
    Offer offer(qint64 workerId, const IdleConditions &conditions);
    // The scheduler's side of decideIdle's situation, with the caller's conditions.
    IdleSituation idleSituation(const IdleConditions &conditions) const;

    // How much of a result counts: the positions it covers that are still owed (see
    // Scheduler::reach) and its share of a full shard's work.
    struct Admission
    {
        qint64 covered = 0;
        double credit = 0.0;
        QString duplicate; // why the result trained samples assimilated already
    };
    Admission admit(const Subtask &subtask, qint64 sampleSteps, qint64 resultCovered) const;

    // Folds a result into the global model: the rule's blend, the scheduler's bookkeeping,
    // the round's close. keepUndo: copy the state first, so that a fold that makes it
    // non-finite is undone here (otherwise the caller restores it).
    //
    // With a buffer of K > 1 (asynchronous rules) a finite result is gathered instead: its
    // lease is held and its subtask stays leased, so nothing of it is assimilated (or owed to
    // durable storage) until the buffer folds: when it holds K results, when a result reaches
    // past its subtask's end (a late result after a split: its extra positions are owed now),
    // or on flush(). A result that is not finite is refused and never enters the buffer.
    FoldOutcome fold(const Lease &lease, const Subtask &subtask, const Admission &admission, torch::Tensor result,
                     torch::Tensor base, double meanLoss, bool keepUndo);
    // Results waiting in the buffer.
    int buffered() const { return int(m_buffer.size()); }
    int bufferSize() const { return m_rule->synchronous() ? 1 : std::max(1, m_config.buffer); }
    // A buffer that follows the fleet's size: the buffer folds at the next result that finds
    // it holding k − 1 or more.
    void setBufferSize(int k) { m_config.buffer = std::max(1, k); }
    // Workers online now (the rule's settings that follow the fleet, AggregationRule::setFleetSize).
    void setFleetSize(int workers) { m_rule->setFleetSize(workers); }
    // Whether the buffer must fold now: nothing else can arrive to fill it (nothing queued,
    // no active lease), and the epoch it holds open would otherwise never close.
    bool flushDue() const;
    // Folds what the buffer holds as one version (nothing when empty).
    FoldOutcome flush(bool keepUndo);
    // A result of the job's past (at resume), for the averages.
    void replay(double meanLoss, qint64 staleness);

    double lossEma() const { return m_lossEma; }
    double recentStaleness() const;
    qint64 maxStaleness() const { return m_maxStaleness; }

private:
    bool stateIsFinite() const;
    // A round's cap for this worker, cut to its speed's share of the members' median.
    qint64 pacedRoundCap(qint64 workerId, qint64 roundCap) const;
    FoldOutcome foldBuffer(bool keepUndo, FoldOutcome out);

    struct Pending
    {
        Lease lease;
        Subtask subtask;
        Admission admission;
        qint64 staleness = 0;
        double meanLoss = 0.0;
    };

    AssimilatorConfig m_config;
    std::unique_ptr<AggregationRule> m_rule;
    Scheduler m_scheduler;
    AggregationState m_state;
    qint64 m_seq = 0;
    qint64 m_version = 0;
    torch::Tensor m_snapshot;
    std::map<qint64, double> m_speeds;
    std::vector<qint64> m_roundMembers;
    double m_lossEma = -1.0;
    std::deque<qint64> m_recentStaleness;
    qint64 m_maxStaleness = 0;
    std::vector<Pending> m_buffer;
    // (epoch, shard) → positions [begin, end) of the buffered results, for admit().
    std::multimap<std::pair<int, int>, std::pair<qint64, qint64>> m_bufferedPieces;
};

} // namespace flotilla
