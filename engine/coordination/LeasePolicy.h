#pragma once
// The lease policy's answer to a worker that asks for work when no subtask can be granted to
// it: a speculative copy of the most overdue subtask (fleet.speculate), its dismissal
// (fleet.dismiss_idle), or nothing. One pure function, so that the Coordinator and the
// Simulator, through the Assimilator, decide alike. No state: any thread may call it.

#include <QtGlobal>

#include <optional>

namespace flotilla {

struct IdleSituation
{
    // The job's fleet policy.
    bool speculate = false;   // fleet.speculate
    bool dismissIdle = false; // fleet.dismiss_idle
    // The job hands out nothing now (every position in, paused, stopped by an error): an idle
    // worker is neither given a copy nor let go, since the job is about to say why.
    bool halted = false;
    // Every epoch is open: what is queued and leased is all the job has left.
    bool tailReached = false;
    bool queueEmpty = false;
    // The subtask a copy may be made of: the one whose only lease is nearest its deadline,
    // unless the caller forbids copying it (a quorum's subtask, a worker that gets no copy).
    std::optional<qint64> candidate;
    // The worker was let go already (it asks again, or its answer was lost).
    bool dismissed = false;
};

struct IdleDecision
{
    std::optional<qint64> copyOf; // grant the worker a speculative copy of this subtask
    bool dismiss = false;         // nothing is left to give the worker: it is to stop
    bool firstDismissal = false;  // dismiss, and the worker had not been let go before: record it
};

IdleDecision decideIdle(const IdleSituation &situation);

} // namespace flotilla
