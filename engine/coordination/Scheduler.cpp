#include "engine/coordination/Scheduler.h"

#include <algorithm>
#include <limits>

namespace flotilla {

namespace {

const char *const kSubtaskStates[] = {"queued", "leased", "done"};
const char *const kLeaseStates[] = {"active", "completed", "expired", "handed-back", "lost", "superseded"};

} // namespace

QString toString(SubtaskState state)
{
    return QString::fromLatin1(kSubtaskStates[static_cast<int>(state)]);
}

QString toString(LeaseState state)
{
    return QString::fromLatin1(kLeaseStates[static_cast<int>(state)]);
}

std::optional<SubtaskState> subtaskStateFromString(const QString &text)
{
    for (int i = 0; i < 3; ++i)
        if (text == QLatin1String(kSubtaskStates[i]))
            return static_cast<SubtaskState>(i);
    return std::nullopt;
}

std::optional<LeaseState> leaseStateFromString(const QString &text)
{
    for (int i = 0; i < 6; ++i)
        if (text == QLatin1String(kLeaseStates[i]))
            return static_cast<LeaseState>(i);
    return std::nullopt;
}

Scheduler::Scheduler(Config config, const Clock *clock)
    : m_config(std::move(config)), m_clock(clock)
{
}

void Scheduler::restore(const std::vector<Subtask> &subtasks, const std::vector<Lease> &leases)
{
    m_subtasks.clear();
    m_leases.clear();
    m_queue.clear();
    m_queuedPositions = 0;
    m_openByEpoch.clear();
    m_activeByDeadline.clear();
    m_aloneByDeadline.clear();
    m_activeByWorker.clear();
    m_activeBySubtask.clear();
    m_activeBaseSeqs.clear();
    m_openedEpochs = 0;
    for (const auto &s : subtasks) {
        m_subtasks[s.id] = s;
        m_nextSubtaskId = std::max(m_nextSubtaskId, s.id + 1);
        m_openedEpochs = std::max(m_openedEpochs, s.epoch + 1);
        m_openByEpoch[s.epoch] += 0;
        if (s.state != SubtaskState::Done)
            ++m_openByEpoch[s.epoch];
        if (s.state == SubtaskState::Queued)
            enqueue(s);
    }
    for (const auto &l : leases) {
        m_leases[l.id] = l;
        if (l.state == LeaseState::Active)
            indexActive(l);
        m_nextLeaseId = std::max(m_nextLeaseId, l.id + 1);
        if (const auto it = m_subtasks.find(l.subtaskId); it != m_subtasks.end())
            ++it->second.attempts;
    }
    // A subtask recorded as leased without an active lease (the lease ended in the same
    // moment the process died) goes back to the queue.
    for (auto &[id, s] : m_subtasks) {
        if (s.state != SubtaskState::Leased)
            continue;
        const auto held = m_activeBySubtask.find(id);
        if (held == m_activeBySubtask.end() || held->second.empty())
            requeue(s);
    }
    m_epochsDone = 0;
    m_forgottenEpochs = 0;
    // The records are checked whole before finished epochs leave memory.
    m_restoredProblem = checkTiling(0);
    advanceDoneEpochs();
}

QString Scheduler::checkIntegrity() const
{
    return m_restoredProblem.isEmpty() ? checkTiling(m_forgottenEpochs) : m_restoredProblem;
}

QString Scheduler::checkTiling(int firstEpoch) const
{
    std::map<std::pair<int, int>, std::vector<std::pair<qint64, qint64>>> pieces;
    for (const auto &[id, s] : m_subtasks) {
        if (s.epoch < 0 || s.epoch >= m_config.epochs || s.shard < 0 || s.shard >= shards())
            return QStringLiteral("subtask %1 names epoch %2, shard %3 outside the job").arg(id).arg(s.epoch).arg(s.shard);
        const qint64 end = s.state == SubtaskState::Done ? s.coveredEnd : s.end;
        if (s.begin < 0 || s.end > shardSize(s.shard) || s.begin >= end || end > s.end)
            return QStringLiteral("subtask %1 covers positions %2-%3 of a shard of %4")
                .arg(id).arg(s.begin).arg(end).arg(shardSize(s.shard));
        pieces[{s.epoch, s.shard}].push_back({s.begin, end});
    }
    for (int epoch = firstEpoch; epoch < m_openedEpochs; ++epoch)
        for (int shard = 0; shard < shards(); ++shard) {
            auto &ranges = pieces[{epoch, shard}];
            std::sort(ranges.begin(), ranges.end());
            qint64 at = 0;
            for (const auto &[b, e] : ranges) {
                if (b != at)
                    return QStringLiteral("epoch %1, shard %2: positions %3-%4 %5")
                        .arg(epoch + 1).arg(shard).arg(std::min(at, b)).arg(std::max(at, b))
                        .arg(b > at ? QStringLiteral("belong to no subtask") : QStringLiteral("belong to two subtasks"));
                at = e;
            }
            if (at != shardSize(shard))
                return QStringLiteral("epoch %1, shard %2: positions %3-%4 belong to no subtask")
                    .arg(epoch + 1).arg(shard).arg(at).arg(shardSize(shard));
        }
    return {};
}

Subtask &Scheduler::newSubtask(int epoch, int shard, qint64 begin, qint64 end, qint64 parentId)
{
    Subtask s;
    s.id = m_nextSubtaskId++;
    s.epoch = epoch;
    s.shard = shard;
    s.begin = begin;
    s.end = end;
    s.parentId = parentId;
    s.state = SubtaskState::Queued;
    enqueue(s);
    ++m_openByEpoch[epoch];
    return m_subtasks[s.id] = s;
}

void Scheduler::requeue(Subtask &s)
{
    s.state = SubtaskState::Queued;
    enqueue(s);
}

void Scheduler::enqueue(const Subtask &s)
{
    m_queue.insert({s.epoch, s.id});
    m_queuedPositions += s.size();
}

void Scheduler::dequeue(const Subtask &s)
{
    if (m_queue.erase({s.epoch, s.id}) > 0)
        m_queuedPositions -= s.size();
}

SchedulerChanges Scheduler::openEpochs()
{
    SchedulerChanges changes;
    for (;;) {
        if (m_openedEpochs >= m_config.epochs)
            break;
        if (m_openedEpochs > 0) {
            const int latest = m_openedEpochs - 1;
            if (m_config.synchronous) {
                if (!epochDone(latest))
                    break;
            } else {
                // epochsAhead epochs ahead of the oldest unfinished one at most, and only once
                // the latest one has nothing queued.
                if (latest - m_epochsDone >= std::max(1, m_config.epochsAhead))
                    break;
                const auto queued = m_queue.lower_bound({latest, std::numeric_limits<qint64>::min()});
                if (queued != m_queue.end() && queued->first == latest)
                    break;
            }
        }
        const int epoch = m_openedEpochs++;
        m_openByEpoch[epoch] += 0;
        for (int shard = 0; shard < shards(); ++shard)
            changes.add(newSubtask(epoch, shard, 0, shardSize(shard), 0));
    }
    return changes;
}

std::optional<Scheduler::Grant> Scheduler::grant(qint64 workerId, qint64 baseSeq, qint64 baseVersion,
                                                 qint64 durationMs, qint64 maxPositions, qint64 step)
{
    Grant g;
    g.changes = openEpochs();
    if (m_queue.empty())
        return std::nullopt;
    const qint64 subtaskId = m_queue.begin()->second;
    dequeue(m_subtasks.at(subtaskId));
    if (maxPositions > 0 && m_subtasks.at(subtaskId).size() > maxPositions) {
        const Subtask original = m_subtasks.at(subtaskId);
        const qint64 cut = balancedCut(original.size(), maxPositions, step);
        g.changes.add(newSubtask(original.epoch, original.shard, original.begin + cut, original.end, original.id));
        m_subtasks.at(subtaskId).end = original.begin + cut;
    }
    Subtask &s = m_subtasks.at(subtaskId);
    s.state = SubtaskState::Leased;
    g.lease = newLease(s, workerId, baseSeq, baseVersion, durationMs);
    g.subtask = s;
    g.changes.add(s);
    g.changes.add(g.lease);
    // Granting the last queued subtask of an epoch may open the next one.
    const SchedulerChanges more = openEpochs();
    g.changes.subtasks.insert(g.changes.subtasks.end(), more.subtasks.begin(), more.subtasks.end());
    return g;
}

std::optional<Scheduler::Grant> Scheduler::grantReplica(qint64 subtaskId, qint64 workerId, qint64 baseSeq,
                                                        qint64 baseVersion, qint64 durationMs)
{
    const auto it = m_subtasks.find(subtaskId);
    if (it == m_subtasks.end() || it->second.state != SubtaskState::Leased)
        return std::nullopt;
    Grant g;
    g.lease = newLease(it->second, workerId, baseSeq, baseVersion, durationMs);
    g.subtask = it->second;
    g.changes.add(g.lease);
    return g;
}

const Lease &Scheduler::newLease(Subtask &s, qint64 workerId, qint64 baseSeq, qint64 baseVersion, qint64 durationMs)
{
    ++s.attempts;
    Lease lease;
    lease.id = m_nextLeaseId++;
    lease.subtaskId = s.id;
    lease.workerId = workerId;
    lease.baseSeq = baseSeq;
    lease.baseVersion = baseVersion;
    lease.issuedMs = m_clock->nowMs();
    lease.deadlineMs = lease.issuedMs + durationMs;
    indexActive(lease);
    return m_leases[lease.id] = lease;
}

Scheduler::Check Scheduler::check(qint64 leaseId) const
{
    Check c;
    const auto it = m_leases.find(leaseId);
    if (it == m_leases.end() && leaseId > 0 && leaseId < m_nextLeaseId) {
        // Issued, and no longer in memory: its epoch is done.
        c.verdict = Verdict::Duplicate;
        c.forgotten = true;
        c.lease.id = leaseId;
        c.reason = QStringLiteral("lease %1 belongs to a finished epoch").arg(leaseId);
        return c;
    }
    if (it == m_leases.end()) {
        c.verdict = Verdict::Unknown;
        c.reason = QStringLiteral("no lease %1 was ever issued").arg(leaseId);
        return c;
    }
    c.lease = it->second;
    c.subtask = m_subtasks.at(c.lease.subtaskId);
    switch (c.lease.state) {
    case LeaseState::Completed:
        c.verdict = Verdict::Duplicate;
        c.reason = QStringLiteral("lease %1 already delivered its result").arg(leaseId);
        return c;
    case LeaseState::Superseded:
        c.verdict = Verdict::Duplicate;
        c.reason = QStringLiteral("subtask %1 was completed by another worker's result").arg(c.subtask.id);
        return c;
    case LeaseState::Active:
        break;
    case LeaseState::Expired:
    case LeaseState::HandedBack:
    case LeaseState::Lost:
        c.late = true;
        break;
    }
    if (c.subtask.state == SubtaskState::Done) {
        c.verdict = Verdict::Duplicate;
        c.reason = QStringLiteral("subtask %1 (epoch %2, shard %3) was already assimilated")
                       .arg(c.subtask.id).arg(c.subtask.epoch + 1).arg(c.subtask.shard);
        return c;
    }
    c.verdict = Verdict::Accept;
    return c;
}

void Scheduler::indexActive(const Lease &lease)
{
    m_activeByDeadline.insert({lease.deadlineMs, lease.id});
    m_activeByWorker[lease.workerId].insert(lease.id);
    std::set<qint64> &onSubtask = m_activeBySubtask[lease.subtaskId];
    onSubtask.insert(lease.id);
    m_activeBaseSeqs.insert(lease.baseSeq);
    // Only leases alone on their subtask are candidates for a speculative copy.
    if (onSubtask.size() == 1) {
        m_aloneByDeadline.insert({lease.deadlineMs, lease.id});
    } else if (onSubtask.size() == 2) {
        const Lease &other = m_leases.at(*onSubtask.begin() == lease.id ? *onSubtask.rbegin() : *onSubtask.begin());
        m_aloneByDeadline.erase({other.deadlineMs, other.id});
    }
}

void Scheduler::unindexActive(const Lease &lease)
{
    m_activeByDeadline.erase({lease.deadlineMs, lease.id});
    const auto eraseFrom = [&](std::map<qint64, std::set<qint64>> &index, qint64 key) {
        const auto it = index.find(key);
        if (it == index.end())
            return;
        it->second.erase(lease.id);
        if (it->second.empty())
            index.erase(it);
    };
    eraseFrom(m_activeByWorker, lease.workerId);
    eraseFrom(m_activeBySubtask, lease.subtaskId);
    m_aloneByDeadline.erase({lease.deadlineMs, lease.id});
    if (const auto left = m_activeBySubtask.find(lease.subtaskId);
        left != m_activeBySubtask.end() && left->second.size() == 1) {
        const Lease &other = m_leases.at(*left->second.begin());
        m_aloneByDeadline.insert({other.deadlineMs, other.id});
    }
    if (const auto it = m_activeBaseSeqs.find(lease.baseSeq); it != m_activeBaseSeqs.end())
        m_activeBaseSeqs.erase(it);
}

void Scheduler::endLease(Lease &lease, LeaseState state, SchedulerChanges &changes)
{
    if (lease.state == LeaseState::Active && state != LeaseState::Active)
        unindexActive(lease);
    lease.state = state;
    lease.endedMs = m_clock->nowMs();
    changes.add(lease);
}

Scheduler::Reach Scheduler::reach(const Subtask &s, qint64 resultCovered) const
{
    Reach r;
    r.covered = std::clamp<qint64>(resultCovered, 0, s.size());
    const qint64 wanted = s.begin + resultCovered;
    qint64 at = s.end;
    while (resultCovered > s.size() && at < wanted) {
        const Subtask *next = pieceAt(s.epoch, s.shard, at);
        if (!next)
            break;
        if (next->state == SubtaskState::Done) {
            r.overlapsDone = true;
            r.doneBegin = at;
            break;
        }
        at = std::min(next->end, wanted);
        r.covered = at - s.begin;
    }
    return r;
}

Subtask *Scheduler::pieceAt(int epoch, int shard, qint64 begin)
{
    const auto *self = this;
    return const_cast<Subtask *>(self->pieceAt(epoch, shard, begin));
}

const Subtask *Scheduler::pieceAt(int epoch, int shard, qint64 begin) const
{
    // Rare (a late result past a split): a scan of the open epochs' pieces.
    for (const auto &[id, s] : m_subtasks)
        if (s.epoch == epoch && s.shard == shard && s.begin == begin)
            return &s;
    return nullptr;
}

void Scheduler::close(Subtask &s, qint64 covered, qint64 seq, SchedulerChanges &changes)
{
    if (const auto others = m_activeBySubtask.find(s.id); others != m_activeBySubtask.end()) {
        const std::set<qint64> ids = others->second; // endLease() edits the index
        for (const qint64 id : ids)
            endLease(m_leases.at(id), LeaseState::Superseded, changes);
    }
    if (s.state == SubtaskState::Queued)
        dequeue(s);
    s.state = SubtaskState::Done;
    s.coveredEnd = s.begin + covered;
    s.assimilatedSeq = seq;
    --m_openByEpoch[s.epoch];
    changes.add(s);
    if (covered < s.size())
        changes.add(newSubtask(s.epoch, s.shard, s.begin + covered, s.end, s.id));
}

SchedulerChanges Scheduler::complete(qint64 leaseId, qint64 covered, qint64 seq)
{
    SchedulerChanges changes;
    Lease &lease = m_leases.at(leaseId);
    Subtask &s = m_subtasks.at(lease.subtaskId);
    const qint64 reached = std::max<qint64>(1, reach(s, covered).covered);

    if (lease.state == LeaseState::Active)
        endLease(lease, LeaseState::Completed, changes);
    else {
        // A late result: the lease keeps its end time, its state records the delivery.
        lease.state = LeaseState::Completed;
        changes.add(lease);
    }
    // The owed pieces past a split that the result trained as well.
    for (qint64 at = s.end; at < s.begin + reached;) {
        Subtask *next = pieceAt(s.epoch, s.shard, at);
        if (!next)
            break; // reach() found it: cannot happen
        const qint64 take = std::min(next->end, s.begin + reached) - next->begin;
        at = next->begin + take;
        close(*next, take, seq, changes);
    }
    close(s, std::min(reached, s.size()), seq, changes);

    advanceDoneEpochs();
    const SchedulerChanges more = openEpochs();
    changes.subtasks.insert(changes.subtasks.end(), more.subtasks.begin(), more.subtasks.end());
    return changes;
}

SchedulerChanges Scheduler::hold(qint64 leaseId, bool supersedeOthers)
{
    SchedulerChanges changes;
    const auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return changes;
    Lease &lease = it->second;
    if (lease.state == LeaseState::Active) {
        endLease(lease, LeaseState::Completed, changes);
    } else if (supersedeOthers) {
        // A late result: the lease keeps its end time, its state records the delivery.
        lease.state = LeaseState::Completed;
        changes.add(lease);
    } else {
        return changes;
    }
    if (!supersedeOthers)
        return changes;
    // The subtask may have gone back to the queue, or to another worker, when the lease
    // ended: it is not to be trained again.
    Subtask &s = m_subtasks.at(lease.subtaskId);
    if (s.state == SubtaskState::Queued) {
        dequeue(s);
        s.state = SubtaskState::Leased;
        changes.add(s);
    }
    if (const auto others = m_activeBySubtask.find(s.id); others != m_activeBySubtask.end()) {
        const std::set<qint64> ids = others->second; // endLease() edits the index
        for (const qint64 id : ids)
            endLease(m_leases.at(id), LeaseState::Superseded, changes);
    }
    return changes;
}

SchedulerChanges Scheduler::drop(qint64 leaseId, LeaseState endState)
{
    SchedulerChanges changes;
    const auto it = m_leases.find(leaseId);
    if (it == m_leases.end() || it->second.state != LeaseState::Active)
        return changes;
    endLease(it->second, endState, changes);
    Subtask &s = m_subtasks.at(it->second.subtaskId);
    if (s.state == SubtaskState::Leased && activeLeasesOn(s.id) == 0) {
        requeue(s);
        changes.add(s);
    }
    return changes;
}

SchedulerChanges Scheduler::release(qint64 subtaskId)
{
    SchedulerChanges changes;
    const auto it = m_subtasks.find(subtaskId);
    if (it == m_subtasks.end() || it->second.state != SubtaskState::Leased || activeLeasesOn(subtaskId) > 0)
        return changes;
    requeue(it->second);
    changes.add(it->second);
    return changes;
}

int Scheduler::activeLeasesOn(qint64 subtaskId) const
{
    const auto it = m_activeBySubtask.find(subtaskId);
    return it == m_activeBySubtask.end() ? 0 : int(it->second.size());
}

SchedulerChanges Scheduler::handBack(qint64 leaseId)
{
    return drop(leaseId, LeaseState::HandedBack);
}

SchedulerChanges Scheduler::expire()
{
    SchedulerChanges changes;
    const qint64 now = m_clock->nowMs();
    // In lease id order, as a scan of all leases would find them.
    std::vector<qint64> due;
    for (auto it = m_activeByDeadline.begin(); it != m_activeByDeadline.end() && it->first <= now; ++it)
        due.push_back(it->second);
    std::sort(due.begin(), due.end());
    for (const qint64 id : due) {
        const SchedulerChanges one = drop(id, LeaseState::Expired);
        changes.subtasks.insert(changes.subtasks.end(), one.subtasks.begin(), one.subtasks.end());
        changes.leases.insert(changes.leases.end(), one.leases.begin(), one.leases.end());
    }
    return changes;
}

SchedulerChanges Scheduler::postpone(qint64 ms)
{
    SchedulerChanges changes;
    if (ms <= 0)
        return changes;
    std::set<std::pair<qint64, qint64>> moved;
    for (const auto &[deadline, id] : m_activeByDeadline) {
        Lease &lease = m_leases.at(id);
        lease.deadlineMs = deadline + ms;
        moved.insert({lease.deadlineMs, id});
        changes.add(lease);
    }
    m_activeByDeadline = std::move(moved);
    std::set<std::pair<qint64, qint64>> alone;
    for (const auto &[deadline, id] : m_aloneByDeadline)
        alone.insert({deadline + ms, id});
    m_aloneByDeadline = std::move(alone);
    return changes;
}

SchedulerChanges Scheduler::workerLost(qint64 workerId)
{
    SchedulerChanges changes;
    const auto held = m_activeByWorker.find(workerId);
    if (held == m_activeByWorker.end())
        return changes;
    const std::set<qint64> ids = held->second; // drop() edits the index
    for (const qint64 id : ids) {
        const SchedulerChanges one = drop(id, LeaseState::Lost);
        changes.subtasks.insert(changes.subtasks.end(), one.subtasks.begin(), one.subtasks.end());
        changes.leases.insert(changes.leases.end(), one.leases.begin(), one.leases.end());
    }
    return changes;
}

bool Scheduler::epochDone(int epoch) const
{
    if (epoch >= m_openedEpochs)
        return false;
    const auto it = m_openByEpoch.find(epoch);
    return it != m_openByEpoch.end() && it->second == 0;
}

void Scheduler::advanceDoneEpochs()
{
    while (m_epochsDone < m_openedEpochs && epochDone(m_epochsDone))
        ++m_epochsDone;
    if (!m_config.keepDoneEpochs)
        while (m_forgottenEpochs < m_epochsDone)
            forgetEpoch(m_forgottenEpochs++);
}

void Scheduler::forgetEpoch(int epoch)
{
    // Every lease of a done epoch has ended: completing a subtask supersedes the others.
    std::set<qint64> subtasks;
    for (auto it = m_subtasks.begin(); it != m_subtasks.end();) {
        if (it->second.epoch == epoch && it->second.state == SubtaskState::Done) {
            subtasks.insert(it->first);
            it = m_subtasks.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = m_leases.begin(); it != m_leases.end();)
        it = subtasks.count(it->second.subtaskId) && it->second.state != LeaseState::Active ? m_leases.erase(it)
                                                                                           : std::next(it);
}

std::vector<Lease> Scheduler::activeLeases() const
{
    std::vector<qint64> ids;
    ids.reserve(m_activeByDeadline.size());
    for (const auto &[deadline, id] : m_activeByDeadline)
        ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    std::vector<Lease> out;
    out.reserve(ids.size());
    for (const qint64 id : ids)
        out.push_back(m_leases.at(id));
    return out;
}

std::optional<Lease> Scheduler::activeLeaseOf(qint64 workerId) const
{
    const auto held = m_activeByWorker.find(workerId);
    if (held == m_activeByWorker.end() || held->second.empty())
        return std::nullopt;
    return m_leases.at(*held->second.begin());
}

const Subtask *Scheduler::subtask(qint64 id) const
{
    const auto it = m_subtasks.find(id);
    return it == m_subtasks.end() ? nullptr : &it->second;
}

std::optional<qint64> Scheduler::speculationCandidate() const
{
    // The lease nearest its deadline is the one most overdue for its expected time: a slow
    // worker, or one that is gone and not yet declared lost.
    if (m_aloneByDeadline.empty())
        return std::nullopt;
    return m_leases.at(m_aloneByDeadline.begin()->second).subtaskId;
}

int Scheduler::activeLeaseCount() const
{
    return static_cast<int>(m_activeByDeadline.size());
}

qint64 Scheduler::oldestActiveBaseSeq() const
{
    return m_activeBaseSeqs.empty() ? -1 : *m_activeBaseSeqs.begin();
}

qint64 balancedCut(qint64 size, qint64 maxPositions, qint64 step)
{
    if (step <= 0 || maxPositions < step)
        return std::min(size, maxPositions);
    const qint64 steps = (size + step - 1) / step;
    const qint64 maxSteps = maxPositions / step;
    const qint64 pieces = (steps + maxSteps - 1) / maxSteps;
    return std::min(size, (steps + pieces - 1) / pieces * step);
}

LeaseSizing sizeLease(double samplesPerSecond, double targetSubtaskSeconds, double leaseTimeoutSeconds,
                      int batchSize, int localEpochs, bool byLocalSteps, qint64 largestSubtask)
{
    LeaseSizing sizing;
    const double speed = samplesPerSecond;
    if (speed > 0 && targetSubtaskSeconds > 0 && !byLocalSteps)
        sizing.maxPositions = std::max<qint64>(batchSize, qint64(speed * targetSubtaskSeconds / localEpochs));
    sizing.durationMs = qint64(leaseTimeoutSeconds * 1000.0);
    if (speed > 0) {
        const qint64 largest = sizing.maxPositions > 0 ? sizing.maxPositions : largestSubtask;
        const double expectedSeconds = double(largest) * localEpochs / speed;
        sizing.durationMs = std::min<qint64>(sizing.durationMs, qint64((3.0 * expectedSeconds + 10.0) * 1000.0));
    }
    return sizing;
}

double resultCredit(qint64 sampleSteps, qint64 covered, qint64 resultCovered, qint64 fullShardWork)
{
    const double countedShare = resultCovered > covered ? double(covered) / double(resultCovered) : 1.0;
    return std::clamp(double(sampleSteps) * countedShare / double(std::max<qint64>(1, fullShardWork)), 1e-6, 1.0);
}

} // namespace flotilla
