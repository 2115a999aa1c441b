#include "engine/coordination/LeasePolicy.h"

namespace flotilla {

IdleDecision decideIdle(const IdleSituation &s)
{
    IdleDecision d;
    // Before the tail, a worker with nothing to do waits for the next epoch to open or for
    // work to come back from a lost lease.
    if (s.halted || !s.tailReached)
        return d;
    // A copy, so that the job's end does not wait on one slow or vanished worker. The first
    // result wins; the other lease is superseded.
    if (s.speculate && s.candidate) {
        d.copyOf = s.candidate;
        return d;
    }
    // Nothing queued and no copy to make: nothing can come to this worker before the job ends,
    // except work handed back by another, which the workers still online take instead.
    d.dismiss = s.dismissIdle && s.queueEmpty;
    d.firstDismissal = d.dismiss && !s.dismissed;
    return d;
}

} // namespace flotilla
