#pragma once
// The in-memory heart of a job, shared by the Coordinator (which adds durability, events,
// validation, screening and trust) and the Simulator (which adds simulated time): the
// scheduler, the aggregation rule and its state, the assimilation counter (seq) and the model
// version, the staleness and credit of each result, the lease policy by workers' measured
// speeds, the training-loss average and the closing of synchronous rounds.
//
// It has no clock of its own (the scheduler reads the one it is given), no disk and no
// events: every call returns what changed and the caller records it. Owned and used by one
// thread.

#include "engine/Aggregation.h"
#include "engine/Scheduler.h"

#include <QString>

#include <torch/torch.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>

namespace flotilla {

struct AssimilatorConfig
{
    Scheduler::Config schedule; // synchronous is taken from the rule
    // The lease policy (see sizeLease).
    double targetSubtaskSeconds = 60.0;
    double leaseTimeoutSeconds = 120.0;
    int batchSize = 32;
    int localEpochs = 1;
    int localSteps = 0; // > 0: a shard's work is this many steps, whatever its size
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

    // Leases the next subtask to a worker, sized by its speed, based on the current version.
    std::optional<Scheduler::Grant> grant(qint64 workerId);

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
    FoldOutcome fold(const Lease &lease, const Subtask &subtask, const Admission &admission, torch::Tensor result,
                     torch::Tensor base, double meanLoss, bool keepUndo);
    // A result of the job's past (at resume), for the averages.
    void replay(double meanLoss, qint64 staleness);

    double lossEma() const { return m_lossEma; }
    double recentStaleness() const;
    qint64 maxStaleness() const { return m_maxStaleness; }

private:
    bool stateIsFinite() const;

    AssimilatorConfig m_config;
    std::unique_ptr<AggregationRule> m_rule;
    Scheduler m_scheduler;
    AggregationState m_state;
    qint64 m_seq = 0;
    qint64 m_version = 0;
    torch::Tensor m_snapshot;
    std::map<qint64, double> m_speeds;
    double m_lossEma = -1.0;
    std::deque<qint64> m_recentStaleness;
    qint64 m_maxStaleness = 0;
};

} // namespace flotilla
