// The coordinator's trust in workers: replicas of subtasks and their quorums, the screen's
// verdicts, quarantine and release.
#include "engine/coordination/Coordinator.h"
#include "engine/coordination/CoordinatorLimits.h"

#include "common/LogCategories.h"
#include "common/Random.h"

#include <torch/torch.h>

#include <cmath>

namespace flotilla {

using namespace coordinator_limits;

namespace {

// How far apart two results are, relative to the larger of their updates from their common
// base: 0 for identical results, about 1.4 for unrelated updates of the same size, 2 for
// opposite ones.
double disagreement(const torch::Tensor &a, const torch::Tensor &b, const torch::Tensor &base)
{
    const double scale = std::max((a - base).norm().item<double>(), (b - base).norm().item<double>());
    const double distance = (a - b).norm().item<double>();
    return scale > 0 ? distance / scale : (distance > 0 ? 1e9 : 0.0);
}

} // namespace

bool Coordinator::replicate(const Subtask &s) const
{
    const double share = m_spec.fleet.redundancy;
    if (share <= 0.0 || m_quorums.count(s.id))
        return false;
    // Only when another worker could take the replica.
    int eligible = 0;
    for (const auto &[id, w] : m_workers)
        eligible += w.online && !w.trust.quarantined ? 1 : 0;
    if (eligible < 2)
        return false;
    // The same subtasks are chosen on every run of the same job.
    const std::uint64_t draw = mixSeed(mixSeed(m_spec.training.seed, static_cast<std::uint64_t>(s.id)), 0x5EC0D);
    return double(draw >> 11) * 0x1.0p-53 < share;
}

std::optional<Assignment> Coordinator::grantReplica(qint64 workerId)
{
    for (auto &[subtaskId, q] : m_quorums) {
        if (q.workers.count(workerId)
            || int(q.held.size()) + m_scheduler->activeLeasesOn(subtaskId) >= q.needed)
            continue;
        auto grant = m_scheduler->grantReplica(subtaskId, workerId, q.baseSeq, q.baseVersion,
                                               qint64(m_spec.fleet.leaseTimeoutSeconds * 1000.0));
        if (!grant)
            continue;
        if (auto r = persist(grant->changes); !r) {
            setFatal(r.error());
            return std::nullopt;
        }
        q.workers.insert(workerId);
        if (keepsBases() && !m_bases.count(q.baseSeq))
            m_bases.emplace(q.baseSeq, q.base);
        if (m_screen && !m_baseSamples.count(q.baseSeq))
            m_baseSamples.emplace(q.baseSeq, m_screen->sample(q.base));
        const Subtask &s = grant->subtask;
        event(EventKind::LeaseGranted, workerId, s.id, grant->lease.id,
              QStringLiteral("epoch %1, shard %2, positions %3-%4, version %5 (replica %6 of %7, to compare)")
                  .arg(s.epoch + 1).arg(s.shard).arg(s.begin).arg(s.end).arg(q.baseVersion)
                  .arg(q.workers.size()).arg(q.needed));
        return assign(m_workers[workerId], grant->lease, s, q.base);
    }
    return std::nullopt;
}

SubmitReply Coordinator::holdResult(PendingResult p)
{
    const qint64 subtaskId = p.subtask.id;
    Quorum &q = m_quorums.at(subtaskId);
    if (auto r = persist(m_scheduler->hold(p.lease.id)); !r) {
        setFatal(r.error());
        return SubmitReply{SubmitStatus::Rejected, m_fatal, 0, 0, 0};
    }
    if (m_workers[p.workerId].leaseId == p.lease.id)
        m_workers[p.workerId].leaseId = 0;
    if (q.held.empty())
        q.waitingSinceMs = m_clock->nowMs();
    p.base = q.base;
    SubmitReply reply;
    reply.status = SubmitStatus::Held;
    reply.reason = QStringLiteral("kept until another worker's result of the same subtask can be compared with it");
    event(EventKind::ResultHeld, p.workerId, subtaskId, p.lease.id,
          QStringLiteral("result %1 of %2 for epoch %3, shard %4, positions %5-%6: %7")
              .arg(q.held.size() + 1).arg(q.needed).arg(p.subtask.epoch + 1).arg(p.subtask.shard)
              .arg(p.subtask.begin).arg(p.subtask.end).arg(reply.reason));
    q.held.push_back(std::move(p));
    if (int(q.held.size()) >= q.needed)
        resolveQuorum(subtaskId);
    return reply;
}

void Coordinator::resolveQuorum(qint64 subtaskId)
{
    Quorum q = std::move(m_quorums.at(subtaskId));
    m_quorums.erase(subtaskId);
    const double tolerance = m_spec.fleet.redundancyTolerance;
    const int n = int(q.held.size());
    // The first pair that agrees wins; with three results, whoever agrees with neither of the
    // others is the odd one out.
    int first = -1;
    int second = -1;
    double closest = 1e30;
    for (int i = 0; i < n && first < 0; ++i)
        for (int j = i + 1; j < n; ++j) {
            const double d = disagreement(q.held[i].result.weights, q.held[j].result.weights, q.base);
            closest = std::min(closest, d);
            if (d <= tolerance) {
                first = i;
                second = j;
                break;
            }
        }
    if (first < 0 && n < 3) {
        // Two results that disagree: a third worker decides.
        ++m_disagreements;
        q.needed = 3;
        event(EventKind::ResultsDisagree, 0, subtaskId, 0,
              QStringLiteral("two workers' results of subtask %1 differ by %2 (tolerance %3): a third worker will train it")
                  .arg(subtaskId).arg(closest, 0, 'f', 3).arg(tolerance));
        // The subtask stays leased with no one on it until grantReplica() hands it to a
        // worker that has not trained it; expireQuorums() gives up if none comes.
        q.waitingSinceMs = m_clock->nowMs();
        m_quorums.emplace(subtaskId, std::move(q));
        return;
    }
    if (first < 0) {
        // Three results, no two alike: nothing can be trusted; the subtask is trained again.
        ++m_disagreements;
        const QString why = QStringLiteral("three workers' results of subtask %1 all differ (closest pair %2, "
                                           "tolerance %3): none is assimilated, the subtask is trained again")
                                .arg(subtaskId).arg(closest, 0, 'f', 3).arg(tolerance);
        event(EventKind::ResultsDisagree, 0, subtaskId, 0, why);
        for (const auto &h : q.held)
            ledger(h.workerId, h.lease.id, QStringLiteral("wasted"), h.workSeconds);
        handleChanges(m_scheduler->release(subtaskId), why);
        return;
    }
    // The odd one out (with three) is rejected and counts against its worker.
    for (int i = 0; i < n; ++i) {
        if (i == first || i == second)
            continue;
        const PendingResult &odd = q.held[i];
        const QString why = QStringLiteral("disagreed with two other workers' results of the same subtask from the same "
                                           "base (by %1, tolerance %2)")
                                .arg(disagreement(odd.result.weights, q.held[first].result.weights, q.base), 0, 'f', 3)
                                .arg(tolerance);
        ++m_rejected;
        event(EventKind::ResultRejected, odd.workerId, subtaskId, odd.lease.id, why);
        ledger(odd.workerId, odd.lease.id, QStringLiteral("wasted"), odd.workSeconds);
        noteVerdict(odd.workerId, true, {}, why);
    }
    // The other of the pair verified the one folded in: its compute bought assurance, not
    // progress, and is booked as such.
    const PendingResult &verifier = q.held[second];
    ++m_verified;
    ++m_workers[verifier.workerId].leasesCompleted;
    ledger(verifier.workerId, verifier.lease.id, QStringLiteral("wasted"), verifier.workSeconds);
    event(EventKind::ResultVerified, verifier.workerId, subtaskId, verifier.lease.id,
          QStringLiteral("agrees with lease %1's result within %2 (tolerance %3)")
              .arg(q.held[first].lease.id)
              .arg(disagreement(verifier.result.weights, q.held[first].result.weights, q.base), 0, 'f', 4)
              .arg(tolerance));
    noteVerdict(verifier.workerId, false, verifier.verdict, {});
    fold(std::move(q.held[first]));
}

void Coordinator::dropQuorum(qint64 subtaskId, const QString &why)
{
    const auto it = m_quorums.find(subtaskId);
    if (it == m_quorums.end())
        return;
    for (const auto &h : it->second.held) {
        ledger(h.workerId, h.lease.id, QStringLiteral("wasted"), h.workSeconds);
        event(EventKind::ResultDuplicate, h.workerId, subtaskId, h.lease.id,
              QStringLiteral("dropped: %1").arg(why));
    }
    m_quorums.erase(it);
}

void Coordinator::expireQuorums()
{
    // A held result nobody came to check (too few workers, or they all left): after a lease
    // timeout it is folded in unverified, or, after a disagreement, the subtask is trained
    // again.
    const qint64 now = m_clock->nowMs();
    const auto waitMs = qint64(m_spec.fleet.leaseTimeoutSeconds * 1000.0);
    std::vector<qint64> due;
    for (const auto &[id, q] : m_quorums)
        if (!q.held.empty() && m_scheduler->activeLeasesOn(id) == 0 && now - q.waitingSinceMs > waitMs)
            due.push_back(id);
    for (const qint64 id : due) {
        Quorum q = std::move(m_quorums.at(id));
        m_quorums.erase(id);
        if (q.held.size() == 1) {
            event(EventKind::ResultUnverified, q.held[0].workerId, id, q.held[0].lease.id,
                  QStringLiteral("no other worker trained subtask %1 within %2 s: folded in without a comparison")
                      .arg(id).arg(waitMs / 1000));
            fold(std::move(q.held[0]));
            continue;
        }
        const QString why = QStringLiteral("no third worker settled the disagreement on subtask %1 within %2 s: "
                                           "the subtask is trained again")
                                .arg(id).arg(waitMs / 1000);
        event(EventKind::ResultsDisagree, 0, id, 0, why);
        for (const auto &h : q.held)
            ledger(h.workerId, h.lease.id, QStringLiteral("wasted"), h.workSeconds);
        handleChanges(m_scheduler->release(id), why);
    }
}

bool Coordinator::everyOtherWorkerWasRefused(qint64 workerId) const
{
    int others = 0;
    for (const auto &[id, w] : m_workers) {
        if (id == workerId || !w.online || w.trusted || w.trust.quarantined)
            continue;
        if (w.verdicts.empty() || !w.verdicts.back())
            return false;
        ++others;
    }
    return others > 0;
}

void Coordinator::noteVerdict(qint64 workerId, bool rejected, const ResultScreen::Verdict &verdict,
                              const QString &reason)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end())
        return;
    WorkerState &w = it->second;
    w.verdicts.push_back(rejected);
    while (int(w.verdicts.size()) > kVerdictWindow)
        w.verdicts.pop_front();
    if (rejected) {
        ++w.trust.rejected;
        w.trust.trust *= 0.5;
    } else {
        ++w.trust.accepted;
        w.trust.trust = std::min(1.0, w.trust.trust + 0.05);
        if (m_screen && m_screen->warmedUp() && m_screen->judgesDirections()) {
            w.cosines.push_back(verdict.cosine);
            while (int(w.cosines.size()) > kCosineWindow)
                w.cosines.pop_front();
        }
    }
    saveTrust(workerId);
    const int limit = m_spec.fleet.quarantineAfter;
    if (limit <= 0 || w.trust.quarantined || w.trusted)
        return;
    const auto rejections = int(std::count(w.verdicts.begin(), w.verdicts.end(), true));
    // Every other worker's last result refused too: the job is the likely cause, not this
    // worker (a learning rate at which every honest worker's training blows up), and a
    // quarantine, which keeps the machine from every job of the fleet until an operator
    // releases it, would strand honest machines. Not held against it now; the job says that
    // no worker can train it (stallReason). A worker alone is judged alone, and one whose
    // results are refused while another's are folded is quarantined as before.
    if (rejections >= limit && rejected && everyOtherWorkerWasRefused(workerId)) {
        if (!w.spared) {
            w.spared = true;
            qCWarning(lcEngine).noquote()
                << QStringLiteral("not quarantining %1: %2 of its last %3 results were refused, and so was the last "
                                  "result of every other connected worker; the job, not the worker, looks like the "
                                  "cause (the last: %4)")
                       .arg(w.record.name).arg(rejections).arg(w.verdicts.size()).arg(reason);
        }
        return;
    }
    if (!rejected)
        w.spared = false;
    if (rejections >= limit) {
        quarantine(workerId, QStringLiteral("%1 of its last %2 results were rejected; the last: %3")
                                 .arg(rejections).arg(w.verdicts.size()).arg(reason));
        return;
    }
    // A patient attacker stays under each single result's threshold; its updates still point
    // the wrong way on average. Near convergence honest updates are mostly noise and come in
    // runs of negative cosines (measured: five in a row averaging -0.11 with the fleet's
    // typical cosine at 0.14), so the test waits for a full window of ten accepted updates
    // and asks for a negative mean four standard errors below the fleet's typical cosine.
    if (!rejected && int(w.cosines.size()) >= kCosineWindow && m_screen->judgesDirections()) {
        double mean = 0.0;
        for (const double c : w.cosines)
            mean += c;
        mean /= double(w.cosines.size());
        const double center = m_screen->medianCosine();
        const double bound = center - 4.0 * m_screen->cosineSpread() / std::sqrt(double(w.cosines.size()));
        // Only while the fleet has a clear direction (see ResultScreen::judge).
        if (center >= 0.3 && mean < 0 && mean < bound)
            quarantine(workerId, QStringLiteral("its last %1 updates point, on average, against the fleet's direction "
                                                "(mean cosine %2, typical %3)")
                                     .arg(w.cosines.size())
                                     .arg(mean, 0, 'f', 2)
                                     .arg(center, 0, 'f', 2));
    }
}

void Coordinator::quarantine(qint64 workerId, const QString &reason)
{
    WorkerState &w = m_workers[workerId];
    w.trust.quarantined = true;
    w.trust.reason = reason;
    saveTrust(workerId);
    // A fleet of one attacker, or an honest fleet the screen misjudged, would otherwise wait
    // in silence: say so when nobody is left to train.
    const bool nobodyLeft = std::none_of(m_workers.begin(), m_workers.end(), [](const auto &entry) {
        return entry.second.online && !entry.second.trust.quarantined;
    });
    event(EventKind::WorkerQuarantined, workerId, 0, 0,
          QStringLiteral("%1: %2; it gets no more subtasks until an operator releases it%3")
              .arg(w.record.name, reason,
                   nobodyLeft ? QStringLiteral(". No other worker is connected: the job waits for one to join "
                                               "or for a release")
                              : QString()));
    handleChanges(m_scheduler->workerLost(workerId), QStringLiteral("the worker was quarantined"));
}

void Coordinator::quarantineForConduct(qint64 workerId, const QString &reason)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end() || it->second.trusted || it->second.trust.quarantined)
        return;
    quarantine(workerId, reason);
}

void Coordinator::releaseWorker(qint64 workerId, const QString &by)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end() || !it->second.trust.quarantined)
        return;
    WorkerState &w = it->second;
    w.trust.quarantined = false;
    w.trust.reason.clear();
    w.trust.trust = std::max(w.trust.trust, 0.5);
    w.verdicts.clear();
    w.cosines.clear();
    saveTrust(workerId);
    event(EventKind::WorkerReleased, workerId, 0, 0,
          QStringLiteral("%1 released from quarantine by %2").arg(w.record.name, by));
}

void Coordinator::saveTrust(qint64 workerId)
{
    WorkerTrust &t = m_workers[workerId].trust;
    t.workerId = workerId;
    if (auto r = store().setWorkerTrust(m_jobId, t); !r)
        setFatal(r.error());
}

} // namespace flotilla
