#include "engine/Assimilator.h"

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
    for (torch::Tensor *t : {&c.weights, &c.momentum, &c.roundSum})
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

std::optional<Scheduler::Grant> Assimilator::grant(qint64 workerId)
{
    const qint64 largest = m_scheduler.shards() > 0 ? m_scheduler.shardSize(0) + 1 : 1;
    const LeaseSizing sizing = sizeLease(speed(workerId), m_config.targetSubtaskSeconds, m_config.leaseTimeoutSeconds,
                                         m_config.batchSize, m_config.localEpochs, m_config.localSteps > 0, largest);
    return m_scheduler.grant(workerId, m_seq, m_version, sizing.durationMs, sizing.maxPositions);
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
    a.covered = reach.covered;
    const qint64 fullShardWork = m_config.localSteps > 0
                                     ? qint64(m_config.localSteps) * m_config.batchSize
                                     : qint64(m_config.localEpochs) * m_scheduler.shardSize(subtask.shard);
    a.credit = resultCredit(sampleSteps, a.covered, resultCovered, fullShardWork);
    return a;
}

bool Assimilator::stateIsFinite() const
{
    return isFinite(m_state.weights) && isFinite(m_state.momentum) && isFinite(m_state.roundSum);
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
    replay(meanLoss, c.staleness);
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
