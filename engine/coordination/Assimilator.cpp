#include "engine/coordination/Assimilator.h"

#include <algorithm>
#include <cmath>

namespace flotilla {

namespace {

constexpr std::size_t kStalenessWindow = 50;

Scheduler::Config scheduleFor(Scheduler::Config config, const AggregationRule &rule)
{
    config.synchronous = rule.synchronous();
    return config;
}

bool isFinite(const torch::Tensor &t)
{
    if (!t.defined() || t.numel() == 0)
        return true;
    // A sum is one cheap pass and is NaN or infinite whenever an element is; only then is
    // the exact (allocating) check run, since a sum can also overflow on finite values.
    if (std::isfinite(t.sum().item<double>()))
        return true;
    return torch::isfinite(t).all().item<bool>();
}

AggregationState copyOf(const AggregationState &s)
{
    AggregationState c = s;
    for (torch::Tensor *t : {&c.weights, &c.momentum, &c.roundSum, &c.periodSum})
        if (t->defined())
            *t = t->clone();
    return c;
}

} // namespace

Assimilator::Assimilator(AssimilatorConfig config, std::unique_ptr<AggregationRule> rule, const Clock *clock)
    : m_config(std::move(config))
    , m_rule(std::move(rule))
    , m_scheduler(scheduleFor(m_config.schedule, *m_rule), clock)
{
}

void Assimilator::start(AggregationState state, qint64 seq, qint64 version)
{
    m_state = std::move(state);
    m_rule->setEpochSize(m_scheduler.shards());
    m_rule->initialize(m_state);
    m_seq = seq;
    m_version = version;
    m_snapshot = torch::Tensor();
}

void Assimilator::restore(AggregationState state)
{
    m_state = std::move(state);
    m_rule->initialize(m_state);
    m_snapshot = torch::Tensor();
}

const torch::Tensor &Assimilator::snapshot()
{
    if (!m_snapshot.defined())
        m_snapshot = m_state.weights.clone();
    return m_snapshot;
}

double Assimilator::speed(qint64 workerId) const
{
    const auto it = m_speeds.find(workerId);
    return it == m_speeds.end() ? 0.0 : it->second;
}

void Assimilator::reportSpeed(qint64 workerId, double samplesPerSecond)
{
    if (speed(workerId) <= 0 && samplesPerSecond > 0 && std::isfinite(samplesPerSecond))
        m_speeds[workerId] = samplesPerSecond;
}

void Assimilator::measureSpeed(qint64 workerId, qint64 sampleSteps, double seconds)
{
    if (!(seconds > 0) || sampleSteps <= 0)
        return;
    const double measured = double(sampleSteps) / seconds;
    double &known = m_speeds[workerId];
    known = known > 0 ? 0.7 * known + 0.3 * measured : measured;
}

bool Assimilator::roundFull() const
{
    return m_config.rounds && m_scheduler.activeLeaseCount() + int(m_buffer.size()) >= bufferSize();
}

qint64 Assimilator::pacedRoundCap(qint64 workerId, qint64 roundCap) const
{
    // The pace is the members' median speed (the upper one of an even count), not the
    // fastest's: a worker that claims a speed it does not have (speeds are the workers' own
    // reports and timings) cannot shrink everyone else's pieces unless it is half the fleet.
    std::vector<double> known;
    for (const qint64 id : m_roundMembers)
        if (const double v = speed(id); v > 0)
            known.push_back(v);
    const double mine = speed(workerId);
    if (known.empty() || !(mine > 0))
        return roundCap;
    const auto middle = known.begin() + std::ptrdiff_t(known.size() / 2);
    std::nth_element(known.begin(), middle, known.end());
    const double pace = *middle;
    if (mine >= kRoundPaceTolerance * pace)
        return roundCap;
    // Whole batches, the nearest to the worker's share, at least one.
    const qint64 batch = std::max(1, m_config.batchSize);
    const qint64 steps = std::max<qint64>(1, std::llround(double(roundCap) / double(batch) * mine / pace));
    return std::min(roundCap, steps * batch);
}

std::optional<Scheduler::Grant> Assimilator::grant(qint64 workerId)
{
    if (roundFull())
        return std::nullopt;
    const qint64 largest = m_scheduler.shards() > 0 ? m_scheduler.shardSize(0) + 1 : 1;
    const LeaseSizing sizing = sizeLease(speed(workerId), m_config.targetSubtaskSeconds, m_config.leaseTimeoutSeconds,
                                         m_config.batchSize, m_config.localEpochs, m_config.localSteps > 0, largest);
    qint64 maxPositions = sizing.maxPositions;
    // A round's subtask takes at most roundSteps steps (local epochs count each pass). A round
    // of one worker is the plain loop, whose subtasks need no cutting. Where the round's bound
    // is the one that cuts, the pieces are balanced in whole batches (Scheduler::grant), so
    // that the leases of a round end together.
    qint64 roundCap = 0;
    if (m_config.rounds && m_config.roundSteps > 0 && m_config.localSteps == 0 && bufferSize() > 1) {
        roundCap = std::max<qint64>(1, qint64(m_config.roundSteps) * m_config.batchSize
                                           / std::max(1, m_config.localEpochs));
        roundCap = pacedRoundCap(workerId, roundCap);
        maxPositions = maxPositions > 0 ? std::min(maxPositions, roundCap) : roundCap;
    }
    // Nothing queued yet: the grant opens an epoch, and takes a whole subtask of it.
    if (m_config.shareTail && m_scheduler.queuedPositions() > 0) {
        const qint64 holders = qint64(m_scheduler.activeLeaseCount()) + 1;
        const qint64 share = std::max<qint64>(m_config.batchSize, (m_scheduler.queuedPositions() + holders - 1) / holders);
        maxPositions = maxPositions > 0 ? std::min(maxPositions, share) : share;
    }
    const qint64 step = roundCap > 0 && maxPositions == roundCap ? qint64(m_config.batchSize) : 0;
    return m_scheduler.grant(workerId, m_seq, m_version, sizing.durationMs, maxPositions, step);
}

Assimilator::Offer Assimilator::offer(qint64 workerId, const IdleConditions &conditions)
{
    Offer o;
    o.grant = grant(workerId);
    if (o.grant)
        return o;
    IdleSituation situation = idleSituation(conditions);
    o.idle = decideIdle(situation);
    if (o.idle.copyOf) {
        // A copy's size is its subtask's, not one fitted to the worker's speed: its deadline is
        // the lease timeout.
        const auto durationMs = qint64(m_config.leaseTimeoutSeconds * 1000.0);
        o.grant = m_scheduler.grantReplica(*o.idle.copyOf, workerId, m_seq, m_version, durationMs);
        if (o.grant) {
            o.speculative = true;
            return o;
        }
        situation.candidate.reset();
        o.idle = decideIdle(situation);
    }
    return o;
}

IdleSituation Assimilator::idleSituation(const IdleConditions &conditions) const
{
    IdleSituation s;
    s.speculate = m_config.speculate;
    s.dismissIdle = m_config.dismissIdle;
    s.halted = conditions.halted || m_scheduler.finished();
    s.tailReached = m_scheduler.openedEpochs() == m_scheduler.epochs();
    s.queueEmpty = m_scheduler.queuedCount() == 0;
    s.candidate = m_scheduler.speculationCandidate();
    if (s.candidate && conditions.mayCopy && !conditions.mayCopy(*s.candidate))
        s.candidate.reset();
    s.dismissed = conditions.dismissed;
    return s;
}

Assimilator::Admission Assimilator::admit(const Subtask &subtask, qint64 sampleSteps, qint64 resultCovered) const
{
    Admission a;
    const Scheduler::Reach reach = m_scheduler.reach(subtask, resultCovered);
    if (reach.overlapsDone) {
        a.duplicate = QStringLiteral("it trained positions %1-%2 of shard %3 past its subtask's end, and those from %4 "
                                     "were assimilated from another result since its lease ended")
                          .arg(subtask.end).arg(subtask.begin + resultCovered).arg(subtask.shard).arg(reach.doneBegin);
        return a;
    }
    const qint64 reachEnd = subtask.begin + std::max<qint64>(1, reach.covered);
    const auto pieces = m_bufferedPieces.equal_range({subtask.epoch, subtask.shard});
    for (auto it = pieces.first; it != pieces.second; ++it)
        if (it->second.first < reachEnd && subtask.begin < it->second.second) {
            a.duplicate = QStringLiteral("positions %1-%2 of shard %3 were returned by another result that waits in the "
                                         "aggregation buffer")
                              .arg(std::max(subtask.begin, it->second.first))
                              .arg(std::min(reachEnd, it->second.second))
                              .arg(subtask.shard);
            return a;
        }
    a.covered = reach.covered;
    const qint64 fullShardWork = m_config.localSteps > 0
                                     ? qint64(m_config.localSteps) * m_config.batchSize
                                     : qint64(m_config.localEpochs) * m_scheduler.shardSize(subtask.shard);
    a.credit = resultCredit(sampleSteps, a.covered, resultCovered, fullShardWork);
    return a;
}

bool Assimilator::stateIsFinite() const
{
    return isFinite(m_state.weights) && isFinite(m_state.momentum) && isFinite(m_state.roundSum)
           && isFinite(m_state.periodSum);
}

FoldOutcome Assimilator::fold(const Lease &lease, const Subtask &subtask, const Admission &admission,
                              torch::Tensor result, torch::Tensor base, double meanLoss, bool keepUndo)
{
    FoldOutcome out;
    Contribution c;
    c.staleness = m_version - lease.baseVersion;
    c.credit = admission.credit;
    c.result = std::move(result);
    c.base = std::move(base);
    out.staleness = c.staleness;

    if (bufferSize() > 1) {
        if (!isFinite(c.result) || (m_rule->needsBase() && !isFinite(c.base))) {
            out.refusal = QStringLiteral("the result is not finite (NaN or infinity); it does not enter the aggregation "
                                         "buffer");
            return out;
        }
        // The version does not change until the buffer folds, so this staleness is the one
        // the result has at the fold.
        m_rule->gather(m_state, c);
        out.changes = m_scheduler.hold(lease.id, true);
        m_buffer.push_back(Pending { lease, subtask, admission, c.staleness, meanLoss });
        m_bufferedPieces.insert({ { subtask.epoch, subtask.shard }, { subtask.begin, subtask.end } });
        out.buffered = true;
        if (int(m_buffer.size()) >= bufferSize() || admission.covered > subtask.size())
            return foldBuffer(keepUndo, std::move(out));
        return out;
    }

    std::optional<AggregationState> undo;
    if (keepUndo)
        undo = copyOf(m_state);
    bool changed = m_rule->assimilate(m_state, c);
    if (!stateIsFinite()) {
        // Every result is finite when it arrives, but a fold can still overflow (a huge
        // update through outer momentum).
        out.refusal = QStringLiteral("folding it in would have made the global model non-finite (NaN or infinity); "
                                     "the global model stays at version %1")
                          .arg(m_version);
        if (undo)
            restore(std::move(*undo));
        else
            out.restoreNeeded = true;
        return out;
    }

    const qint64 seq = m_seq + 1;
    const int epochsBefore = m_scheduler.epochsDone();
    out.changes = m_scheduler.complete(lease.id, admission.covered, seq);
    out.covered = admission.covered;
    // Epochs close in order: this result closed one if the count of finished epochs grew.
    out.epochClosed = m_scheduler.epochsDone() > epochsBefore;
    if (out.epochClosed && m_rule->synchronous()) {
        const torch::Tensor before = m_state.weights.clone();
        bool closed = m_rule->closeRound(m_state);
        if (!stateIsFinite()) {
            m_state.weights.copy_(before);
            closed = false;
            out.roundRefused = QStringLiteral("the mean of epoch %1's results is not finite; the global model keeps its "
                                              "weights from before the round")
                                   .arg(subtask.epoch + 1);
        }
        changed = changed || closed;
        out.roundClosed = closed;
    }
    m_seq = seq;
    m_version += changed ? 1 : 0;
    m_snapshot = torch::Tensor();
    out.folded = true;
    out.seq = m_seq;
    out.version = m_version;
    out.results.push_back(
        FoldedResult { lease.id, lease.workerId, subtask, m_seq, c.staleness, admission.covered, admission.credit });
    replay(meanLoss, c.staleness);
    return out;
}

bool Assimilator::flushDue() const
{
    // A round ends with its last lease; otherwise the buffer waits to be full unless nothing
    // else can come to fill it.
    return !m_buffer.empty() && m_scheduler.activeLeaseCount() == 0
           && (m_config.rounds || m_scheduler.queuedCount() == 0);
}

FoldOutcome Assimilator::flush(bool keepUndo)
{
    if (m_buffer.empty())
        return FoldOutcome {};
    return foldBuffer(keepUndo, FoldOutcome {});
}

FoldOutcome Assimilator::foldBuffer(bool keepUndo, FoldOutcome out)
{
    std::vector<Pending> pending;
    pending.swap(m_buffer);
    m_bufferedPieces.clear();
    const auto folded = [](const Pending &p, qint64 seq) {
        return FoldedResult { p.lease.id, p.lease.workerId, p.subtask, seq, p.staleness, p.admission.covered,
                              p.admission.credit };
    };
    const auto append = [&out](const SchedulerChanges &more) {
        out.changes.subtasks.insert(out.changes.subtasks.end(), more.subtasks.begin(), more.subtasks.end());
        out.changes.leases.insert(out.changes.leases.end(), more.leases.begin(), more.leases.end());
    };

    std::optional<AggregationState> undo;
    if (keepUndo)
        undo = copyOf(m_state);
    const bool changed = m_rule->foldGathered(m_state);
    if (!stateIsFinite()) {
        out.folded = false;
        out.refusal = QStringLiteral("folding the mean of %1 buffered results would have made the global model "
                                     "non-finite (NaN or infinity); the global model stays at version %2 and their "
                                     "subtasks are queued again")
                          .arg(pending.size())
                          .arg(m_version);
        if (undo)
            restore(std::move(*undo));
        else
            out.restoreNeeded = true;
        for (const Pending &p : pending) {
            out.refused.push_back(folded(p, 0));
            append(m_scheduler.release(p.subtask.id));
        }
        return out;
    }

    const int epochsBefore = m_scheduler.epochsDone();
    for (const Pending &p : pending) {
        const qint64 seq = ++m_seq;
        append(m_scheduler.complete(p.lease.id, p.admission.covered, seq));
        out.results.push_back(folded(p, seq));
        out.covered = p.admission.covered;
        replay(p.meanLoss, p.staleness);
    }
    out.epochClosed = m_scheduler.epochsDone() > epochsBefore;
    m_version += changed ? 1 : 0;
    m_snapshot = torch::Tensor();
    out.folded = true;
    out.seq = m_seq;
    out.version = m_version;
    return out;
}

void Assimilator::replay(double meanLoss, qint64 staleness)
{
    if (std::isfinite(meanLoss))
        m_lossEma = m_lossEma < 0 ? meanLoss : 0.9 * m_lossEma + 0.1 * meanLoss;
    m_maxStaleness = std::max(m_maxStaleness, staleness);
    m_recentStaleness.push_back(staleness);
    if (m_recentStaleness.size() > kStalenessWindow)
        m_recentStaleness.pop_front();
}

double Assimilator::recentStaleness() const
{
    if (m_recentStaleness.empty())
        return 0.0;
    double sum = 0;
    for (const qint64 s : m_recentStaleness)
        sum += double(s);
    return sum / double(m_recentStaleness.size());
}

} // namespace flotilla
