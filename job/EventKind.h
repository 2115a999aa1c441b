#pragma once
// The one table of event kinds: every state change of a job (or of a simulated fleet) that
// is recorded, logged and shown. The coordinator and the simulator record them by enum, the
// store queries by them, the control center's filter and highlighting come from here, and
// docs/architecture.md carries the same table (tst_jobspec checks that it matches).
//
// X(id, name, level, recordedBy, meaning)
//   name:       the stored and shown name (the events table, the log, the simulator's CSV)
//   level:      Routine (debug log; hundreds a minute), Notice (info log), Trouble (info log,
//               shown in red: work or a worker was lost or refused)
//   recordedBy: Job (the coordinator), Sim (the simulator), Both
#include <QList>
#include <QString>
#include <QStringView>

#include <optional>

#define FLOTILLA_EVENT_KINDS(X)                                                                                        \
    X(JobCreated, "job-created", Notice, Job, "a new job started with its spec and initial model")                     \
    X(JobResumed, "job-resumed", Notice, Job, "the coordinator restarted and took up the job from its store")          \
    X(JobPaused, "job-paused", Notice, Job, "the operator paused the job: no new leases are granted")                  \
    X(JobUnpaused, "job-unpaused", Notice, Job, "the operator resumed the job")                                        \
    X(JobFinished, "job-finished", Notice, Job, "every epoch is assimilated and the final model is written")           \
    X(JobStalled, "job-stalled", Trouble, Job, "no worker can train: the job says why, and waits or ends")              \
    X(CoordinatorStalled, "coordinator-stalled", Trouble, Job, "the coordinator did not run for a while; deadlines moved") \
    X(WorkerJoined, "worker-joined", Notice, Job, "a worker enrolled or came back")                                    \
    X(WorkerLeft, "worker-left", Notice, Job, "a worker disconnected or stopped sending heartbeats")                   \
    X(WorkerPreempted, "worker-preempted", Trouble, Job, "a worker was preempted (a notice or a kill)")                \
    X(WorkerQuarantined, "worker-quarantined", Trouble, Job, "a worker's results failed checks; it gets no leases")    \
    X(WorkerOverBudget, "worker-over-budget", Trouble, Job, "a worker's connection went over a budget (rate, unread bytes, sessions) and was closed") \
    X(WorkerReleased, "worker-released", Notice, Job, "a quarantined worker may take leases again")                    \
    X(WorkerDismissed, "worker-dismissed", Notice, Both, "the job had no work left for an idle worker and let it go")   \
    X(WorkerUp, "worker-up", Notice, Sim, "a simulated instance started")                                              \
    X(WorkerDown, "worker-down", Trouble, Sim, "a simulated instance was reclaimed")                                   \
    X(PreemptionNotice, "preemption-notice", Notice, Sim, "a simulated instance got its reclaim notice")               \
    X(LeaseGranted, "lease-granted", Routine, Both, "a subtask was leased to a worker")                                \
    X(LeaseExpired, "lease-expired", Trouble, Both, "a lease ran past its deadline; its subtask is owed again")        \
    X(LeaseLost, "lease-lost", Trouble, Both, "the leaseholder left; its subtask is owed again")                       \
    X(LeaseHandedBack, "lease-handed-back", Notice, Both, "a worker gave its lease back unfinished")                   \
    X(LeaseSuperseded, "lease-superseded", Notice, Both, "a lease's positions were assimilated from another result")   \
    X(SubtaskReassigned, "subtask-reassigned", Notice, Both, "an owed subtask was leased to another worker")           \
    X(ResultAssimilated, "result-assimilated", Routine, Both, "a whole result was folded into the global model")       \
    X(ResultPartial, "result-partial", Notice, Both, "part of a subtask was folded in; the rest is a new subtask")     \
    X(ResultDuplicate, "result-duplicate", Notice, Both, "a result for positions already assimilated was dropped")     \
    X(ResultRejected, "result-rejected", Trouble, Both, "a result failed a check (stale, malformed, non-finite...)")   \
    X(ResultHeld, "result-held", Notice, Job, "a result waits for a second copy to verify it")                         \
    X(ResultBuffered, "result-buffered", Routine, Job, "a result waits in the aggregation buffer (buffer > 1)")        \
    X(ResultVerified, "result-verified", Notice, Job, "two copies of a subtask agreed; one was folded in")             \
    X(ResultUnverified, "result-unverified", Notice, Job, "a held result was folded in without a second copy")         \
    X(ResultsDisagree, "results-disagree", Trouble, Job, "copies of one subtask disagree; a third decides")            \
    X(RoundRefused, "round-refused", Trouble, Job, "a synchronous round's aggregate was refused")                      \
    X(EpochCompleted, "epoch-completed", Notice, Both, "every position of an epoch is assimilated")                    \
    X(Evaluation, "evaluation", Notice, Job, "the global model was evaluated on the test set")                         \
    X(EvaluationFailed, "evaluation-failed", Trouble, Job, "evaluating the global model failed")

namespace flotilla {

enum class EventKind {
#define FLOTILLA_EVENT_ENUM(id, name, level, by, meaning) id,
    FLOTILLA_EVENT_KINDS(FLOTILLA_EVENT_ENUM)
#undef FLOTILLA_EVENT_ENUM
};

enum class EventLevel { Routine, Notice, Trouble };
enum class EventSource { Job, Sim, Both };

struct EventKindInfo
{
    EventKind kind;
    QString name;
    EventLevel level;
    EventSource recordedBy;
    QString meaning;
};

// Every kind, in the table's order.
const QList<EventKindInfo> &eventKinds();
const EventKindInfo &eventInfo(EventKind kind);
inline const QString &eventName(EventKind kind)
{
    return eventInfo(kind).name;
}
// The kind a stored or typed name stands for; nothing for an unknown name.
std::optional<EventKind> eventKindNamed(QStringView name);
// The kinds a job's store can hold (recorded by the coordinator), for filters.
QList<EventKind> jobEventKinds();
QString levelName(EventLevel level);
QString sourceName(EventSource source);

} // namespace flotilla
