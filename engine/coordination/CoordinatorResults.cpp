// The coordinator's results: checked, decoded, folded into the global model (at once, buffered
// or held for a quorum), recorded in the store, and the bases the screen keeps collected.
#include "engine/coordination/Coordinator.h"
#include "engine/coordination/CoordinatorLimits.h"

#include "common/LogCategories.h"
#include "engine/coordination/RunBoard.h"

#include <torch/torch.h>

#include <cmath>
#include <iterator>

namespace flotilla {

using namespace coordinator_limits;

QString Coordinator::validate(const SubtaskResult &r) const
{
    if (!r.invalidReason.isEmpty())
        return r.invalidReason;
    const torch::Tensor &w = r.weights;
    if (!w.defined())
        return QStringLiteral("the result carries no weights");
    if (w.scalar_type() != torch::kFloat32 || w.dim() != 1)
        return QStringLiteral("the weights must be one flat float32 buffer");
    if (w.numel() != m_layout.totalNumel)
        return QStringLiteral("the weights have %1 values; the %2 model has %3")
            .arg(w.numel()).arg(m_spec.model.kind).arg(m_layout.totalNumel);
    if (!torch::isfinite(w).all().item<bool>())
        return QStringLiteral("the weights contain NaN or infinite values");
    // No honest subtask multiplies the size of a model by a thousand.
    const double norm = w.norm().item<double>();
    const double bound = kNormFactor * std::max(1.0, m_core->state().weights.norm().item<double>());
    if (norm > bound)
        return QStringLiteral("the weights' L2 norm is %1, more than %2 times the global model's (%3): refused as absurd")
            .arg(norm, 0, 'g', 4).arg(kNormFactor).arg(bound / kNormFactor, 0, 'g', 4);
    if (r.sampleSteps < 0 || r.covered < 0 || !std::isfinite(r.meanLoss) || !std::isfinite(r.seconds))
        return QStringLiteral("the result's metrics are malformed");
    return {};
}

Result<void> Coordinator::restoreState()
{
    auto checkpoint = m_journal->durableState();
    if (!checkpoint)
        return checkpoint.takeError();
    m_core->restore(checkpoint->state);
    return {};
}

Result<torch::Tensor> Coordinator::baseWeights(const Lease &lease)
{
    if (const auto it = m_bases.find(lease.baseSeq); it != m_bases.end())
        return it->second;
    if (lease.baseSeq == m_core->seq())
        return m_core->state().weights.clone();
    if (auto kept = m_journal->keptState(lease.baseSeq))
        return kept->state.weights;
    return fail(QStringLiteral("the weights of version %1 this result started from are no longer kept")
                    .arg(lease.baseVersion));
}

void Coordinator::countWeightsSent(qint64 bytes, bool whole, bool anchored)
{
    ++m_weightsSent;
    m_weightsSentBytes += bytes;
    m_weightsSentWhole += whole ? 1 : 0;
    m_weightsSentAnchored += anchored ? 1 : 0;
}

bool Coordinator::keepsBases() const
{
    return m_core->rule().needsBase() || m_compression != Compression::None;
}

bool Coordinator::decodeResult(const Lease &lease, SubtaskResult &result)
{
    if (result.wireBytes > 0) {
        ++m_resultsReceived;
        m_resultBytes += result.wireBytes;
    }
    if (result.encoding == Compression::None || !result.invalidReason.isEmpty())
        return true;
    if (result.encoding != m_compression) {
        result.invalidReason = QStringLiteral("the result is compressed as %1; this job takes %2 results")
                                   .arg(compressionName(result.encoding), compressionName(m_compression));
        return true;
    }
    auto base = baseWeights(lease);
    if (!base)
        return false;
    auto weights = decodeUpdate(result.encoding, result.update, *base, m_layout.segments().parameterEnd);
    if (!weights) {
        result.invalidReason = weights.error();
        return true;
    }
    result.weights = std::move(*weights);
    result.update = QByteArray();
    return true;
}

SubmitReply Coordinator::submitResult(qint64 workerId, SubtaskResult result)
{
    SubmitReply reply;
    if (!m_fatal.isEmpty()) {
        reply.reason = m_fatal;
        return reply;
    }
    // A job that ended (early, or a copy's late result) keeps the model it saved: a result
    // still on its way is answered, not folded.
    if (m_finished) {
        reply.status = SubmitStatus::Duplicate;
        reply.reason = QStringLiteral("the job has finished");
        return reply;
    }
    if (const auto it = m_workers.find(workerId); it != m_workers.end()) {
        reviveIfGone(workerId, "it sent a result");
        it->second.record.lastSeenMs = m_clock->nowMs();
    }
    const Scheduler::Check check = m_scheduler->check(result.leaseId);
    if (check.verdict == Scheduler::Verdict::Unknown || (!check.forgotten && check.lease.workerId != workerId)) {
        reply.reason = check.verdict == Scheduler::Verdict::Unknown
                           ? check.reason
                           : QStringLiteral("lease %1 belongs to another worker").arg(result.leaseId);
        ++m_rejected;
        event(EventKind::ResultRejected, workerId, check.subtask.id, result.leaseId, reply.reason);
        return reply;
    }
    const Lease &lease = check.lease;
    const Subtask &subtask = check.subtask;
    const auto duplicate = [&](const QString &why) {
        reply.status = SubmitStatus::Duplicate;
        reply.reason = why;
        ++m_duplicates;
        event(EventKind::ResultDuplicate, workerId, subtask.id, lease.id, QStringLiteral("dropped: %1").arg(why));
        // A superseded or already-ended lease was accounted for when it ended.
        return reply;
    };
    if (check.verdict == Scheduler::Verdict::Duplicate)
        return duplicate(check.reason);
    // A very late result whose base is no longer kept is nobody's fault: it is dropped like a
    // duplicate (its subtask was handed out again when its lease ended), not held against
    // its worker.
    if (!decodeResult(lease, result)) {
        const QString why = QStringLiteral("the weights of version %1 this delta is a change from are no longer kept")
                                .arg(lease.baseVersion);
        handleChanges(m_scheduler->drop(lease.id, LeaseState::Lost), why);
        return duplicate(why);
    }
    if (const QString invalid = validate(result); !invalid.isEmpty()) {
        reply.reason = invalid;
        ++m_rejected;
        event(EventKind::ResultRejected, workerId, subtask.id, lease.id, invalid);
        ++m_refusals[subtask.id];
        noteFailure(workerId, invalid);
        handleChanges(m_scheduler->drop(lease.id, LeaseState::Lost), QStringLiteral("its result was rejected: %1").arg(invalid));
        noteVerdict(workerId, true, {}, invalid);
        return reply;
    }
    const Assimilator::Admission admission = m_core->admit(subtask, result.sampleSteps, result.covered);
    if (!admission.duplicate.isEmpty()) {
        handleChanges(m_scheduler->drop(lease.id, LeaseState::Lost), admission.duplicate);
        return duplicate(admission.duplicate);
    }
    if (admission.covered <= 0) {
        handBack(workerId, lease.id, QStringLiteral("the partial result trained no sample"));
        reply.status = SubmitStatus::Duplicate;
        reply.reason = QStringLiteral("nothing was trained");
        return reply;
    }

    // Screening: the update against recent accepted ones. A result whose base is no longer
    // remembered (a very late one) is judged by validate()'s absolute checks only.
    ResultScreen::Verdict verdict;
    torch::Tensor resultSample;
    torch::Tensor baseSample;
    if (m_screen) {
        if (const auto it = m_baseSamples.find(lease.baseSeq); it != m_baseSamples.end()) {
            baseSample = it->second;
            resultSample = m_screen->sample(result.weights);
            verdict = m_screen->judge(resultSample, baseSample, screeningRate(subtask), admission.credit);
            m_screen->observed(verdict);
        }
        // The sample did not move: the whole weights tell an idle result from one that
        // trained only parameters the sample does not hold. Without the whole base (a rule
        // that keeps none, and it was collected) the sample's word stands.
        if (verdict.unchangedSample && !verdict.reject) {
            auto base = baseWeights(lease);
            if (!base || m_screen->sameParameters(result.weights, *base)) {
                verdict.reason = m_screen->unchangedWork(admission.credit);
                verdict.reject = !verdict.reason.isEmpty();
            }
        }
    }
    // The coordinator's own workers run this build on this machine: the screen's statistics
    // learn from their updates, but an unusual one (small data, a sharp turn of the loss
    // surface) is not held against them.
    if (verdict.reject && m_workers.count(workerId) && m_workers[workerId].trusted) {
        qCDebug(lcEngine).noquote() << "a local worker's result would have been screened out:" << verdict.reason;
        verdict.reject = false;
    }
    if (verdict.reject) {
        reply.reason = QStringLiteral("screened out: %1").arg(verdict.reason);
        ++m_rejected;
        event(EventKind::ResultRejected, workerId, subtask.id, lease.id, reply.reason);
        ++m_refusals[subtask.id];
        noteFailure(workerId, reply.reason);
        handleChanges(m_scheduler->drop(lease.id, LeaseState::Lost),
                      QStringLiteral("its result was rejected: %1").arg(reply.reason));
        noteVerdict(workerId, true, verdict, reply.reason);
        return reply;
    }
    if (const auto it = m_workers.find(workerId); it != m_workers.end())
        it->second.failures = 0;
    PendingResult pending;
    pending.workerId = workerId;
    pending.lease = lease;
    pending.subtask = subtask;
    pending.result = std::move(result);
    pending.admission = admission;
    pending.verdict = verdict;
    pending.resultSample = resultSample;
    pending.baseSample = baseSample;
    pending.workSeconds = std::max<qint64>(0, m_clock->nowMs() - lease.issuedMs) / 1000.0;
    pending.late = check.late;
    if (const auto q = m_quorums.find(subtask.id); q != m_quorums.end() && q->second.baseSeq == lease.baseSeq)
        return holdResult(std::move(pending));
    return fold(std::move(pending));
}

Result<void> Coordinator::beginGroup()
{
    if (m_journal->inGroup())
        return {};
    if (!m_fatal.isEmpty())
        return fail(m_fatal);
    if (auto r = m_journal->beginGroup(); !r) {
        setFatal(QStringLiteral("cannot open a store transaction: %1").arg(r.error()));
        return r;
    }
    return {};
}

Result<void> Coordinator::endGroup()
{
    if (!m_journal->inGroup())
        return m_fatal.isEmpty() ? Result<void>{} : fail(m_fatal);
    auto checkpointed = m_journal->endGroup(m_fatal);
    if (!checkpointed) {
        setFatal(QStringLiteral("cannot record assimilations up to %1: %2").arg(m_core->seq()).arg(checkpointed.error()));
        return fail(m_fatal);
    }
    if (*checkpointed)
        collectGarbage();
    return {};
}

// The three steps of an accepted result: fold it in (the core), make it durable (record),
// and tell everyone (observe).
SubmitReply Coordinator::fold(PendingResult p)
{
    SubmitReply reply;
    torch::Tensor base;
    if (m_core->rule().needsBase()) {
        auto kept = p.base.defined() ? Result<torch::Tensor>(p.base) : baseWeights(p.lease);
        if (!kept) {
            // A late result (its lease was lost, to a restart of the coordinator or a timeout)
            // whose base was collected since: nobody's fault, dropped as a late delta is in
            // submitResult, and its subtask trained again.
            reply.status = SubmitStatus::Duplicate;
            reply.reason = kept.error();
            ++m_duplicates;
            event(EventKind::ResultDuplicate, p.workerId, p.subtask.id, p.lease.id,
                  QStringLiteral("dropped: %1").arg(kept.error()));
            handleChanges(m_scheduler->drop(p.lease.id, LeaseState::Lost), kept.error());
            handleChanges(m_scheduler->release(p.subtask.id), kept.error());
            return reply;
        }
        base = *kept;
    }
    // Undoing a non-finite fold needs the state before it: the last checkpoint, unless the
    // group holds folds that are not checkpointed yet.
    const FoldOutcome f = m_core->fold(p.lease, p.subtask, p.admission, std::move(p.result.weights), std::move(base),
                                       p.result.meanLoss, m_journal->foldsAwaitCheckpoint());
    if (f.buffered && !f.folded && f.refused.empty())
        return bufferResult(std::move(p), f);
    if (!f.refused.empty()) {
        refuseBuffer(f);
        reply.reason = f.refusal;
        return reply;
    }
    if (!f.folded)
        return refuseFold(p, f);
    return commitFold(std::move(p), f);
}

SubmitReply Coordinator::commitFold(std::optional<PendingResult> current, const FoldOutcome &f)
{
    SubmitReply reply;
    if (!f.roundRefused.isEmpty())
        event(EventKind::RoundRefused, 0, 0, 0, f.roundRefused);
    // The results in the order they were folded: each has its own seq.
    std::vector<PendingResult> results;
    std::size_t currentIndex = f.results.size();
    for (const FoldedResult &r : f.results) {
        if (current && r.leaseId == current->lease.id) {
            currentIndex = results.size();
            results.push_back(std::move(*current));
            current.reset();
        } else if (auto node = m_buffered.extract(r.leaseId)) {
            results.push_back(std::move(node.mapped()));
        } else {
            setFatal(QStringLiteral("the aggregation buffer folded the result of lease %1, which the coordinator does "
                                    "not hold")
                         .arg(r.leaseId));
            reply.reason = m_fatal;
            return reply;
        }
    }
    auto recorded = record(results, f);
    if (!recorded) {
        setFatal(recorded.error());
        reply.reason = m_fatal;
        return reply;
    }
    for (std::size_t i = 0; i < results.size(); ++i)
        observe(results[i], f.results[i], f.version, (*recorded)[i]);
    observeFold(f, results.empty() ? 0 : results.back().lease.id);
    if (currentIndex < f.results.size()) {
        const FoldedResult &mine = f.results[currentIndex];
        reply.status = SubmitStatus::Assimilated;
        reply.seq = mine.seq;
        reply.version = f.version;
        reply.staleness = mine.staleness;
    }
    return reply;
}

SubmitReply Coordinator::bufferResult(PendingResult p, const FoldOutcome &f)
{
    if (auto r = persist(f.changes); !r) {
        setFatal(r.error());
        return SubmitReply{SubmitStatus::Rejected, m_fatal, 0, 0, 0};
    }
    if (m_workers[p.workerId].leaseId == p.lease.id)
        m_workers[p.workerId].leaseId = 0;
    for (const auto &l : f.changes.leases)
        if (l.state == LeaseState::Superseded)
            leaseEnded(l, QStringLiteral("subtask %1 was returned by lease %2").arg(l.subtaskId).arg(p.lease.id));
    SubmitReply reply;
    reply.status = SubmitStatus::Held;
    reply.staleness = f.staleness;
    reply.reason = QStringLiteral("waits in the aggregation buffer (%1 of %2 results)")
                       .arg(m_core->buffered()).arg(m_core->bufferSize());
    event(EventKind::ResultBuffered, p.workerId, p.subtask.id, p.lease.id,
          QStringLiteral("epoch %1, shard %2, positions %3-%4, staleness %5: %6")
              .arg(p.subtask.epoch + 1).arg(p.subtask.shard).arg(p.subtask.begin).arg(p.subtask.begin + p.admission.covered)
              .arg(f.staleness).arg(reply.reason));
    p.result.weights = torch::Tensor(); // gathered into the buffer's sum
    p.base = torch::Tensor();
    m_buffered.emplace(p.lease.id, std::move(p));
    flushBufferIfDue();
    return reply;
}

void Coordinator::refuseBuffer(const FoldOutcome &f)
{
    if (f.restoreNeeded) {
        if (auto restored = restoreState(); !restored) {
            setFatal(QStringLiteral("cannot restore the global model after a non-finite fold: %1").arg(restored.error()));
            return;
        }
    }
    if (auto r = persist(f.changes); !r) {
        setFatal(r.error());
        return;
    }
    // No one result is to blame for the mean: nobody's record is marked.
    for (const FoldedResult &r : f.refused) {
        m_buffered.erase(r.leaseId);
        ++m_rejected;
        event(EventKind::ResultRejected, r.workerId, r.subtask.id, r.leaseId, f.refusal);
    }
}

void Coordinator::flushBufferIfDue()
{
    if (!m_fatal.isEmpty() || !m_core->flushDue())
        return;
    const FoldOutcome f = m_core->flush(m_journal->foldsAwaitCheckpoint());
    if (!f.refused.empty())
        refuseBuffer(f);
    else if (f.folded)
        commitFold(std::nullopt, f);
}

void Coordinator::sizeBuffer()
{
    std::vector<qint64> members;
    for (const auto &[id, w] : m_workers)
        if (w.online)
            members.push_back(id);
    const int online = int(members.size());
    m_core->setFleetSize(std::max(1, online));
    // Rounds: one result of every worker online, paced by the fastest of them.
    if (m_spec.aggregation.usesRounds()) {
        m_core->setBufferSize(std::max(1, online));
        m_core->setRoundMembers(std::move(members));
        return;
    }
    if (m_spec.aggregation.buffer != 0)
        return;
    m_core->setBufferSize(int(std::ceil(std::sqrt(double(std::max(1, online))))));
}

SubmitReply Coordinator::refuseFold(const PendingResult &p, const FoldOutcome &f)
{
    SubmitReply reply;
    if (f.restoreNeeded) {
        if (auto restored = restoreState(); !restored) {
            setFatal(QStringLiteral("cannot restore the global model after a non-finite fold: %1").arg(restored.error()));
            reply.reason = m_fatal;
            return reply;
        }
    }
    reply.reason = f.refusal;
    ++m_rejected;
    event(EventKind::ResultRejected, p.workerId, p.subtask.id, p.lease.id, f.refusal);
    ++m_refusals[p.subtask.id];
    noteFailure(p.workerId, f.refusal);
    handleChanges(m_scheduler->drop(p.lease.id, LeaseState::Lost), QStringLiteral("its result was rejected: %1").arg(f.refusal));
    handleChanges(m_scheduler->release(p.subtask.id), f.refusal);
    noteVerdict(p.workerId, true, {}, f.refusal);
    return reply;
}

// Checkpoint file first, then one store transaction (in a group: both at the group's end; see
// Journal::recordFold). A buffer's fold records each of its results with its own seq, and one
// state at the last.
Result<std::vector<Coordinator::Recorded>> Coordinator::record(const std::vector<PendingResult> &results,
                                                               const FoldOutcome &f)
{
    const qint64 version = f.version;
    const qint64 now = m_clock->nowMs();
    std::vector<Recorded> recorded;
    // The rows are made once the checkpoint is on disk: the ledger's times are those at which
    // its entries are recorded.
    auto committed = m_journal->recordFold(f.seq, version, now, [&] {
        for (std::size_t i = 0; i < results.size(); ++i) {
            const PendingResult &p = results[i];
            const FoldedResult &folded = f.results[i];
            const Subtask &subtask = p.subtask;
            Recorded r;
            r.assimilation = AssimilationRecord{folded.seq, version, subtask.epoch, subtask.shard, subtask.id,
                                                p.lease.id, p.workerId, folded.staleness, folded.credit,
                                                p.result.sampleSteps, subtask.begin, subtask.begin + folded.covered,
                                                p.result.meanLoss, p.result.seconds, now};
            // The ledger entries of this lease go in the same transaction: cost is counted once.
            // A late result reverses the waste booked when its lease ended.
            if (const auto wasted = m_wastedSeconds.find(p.lease.id); p.late && wasted != m_wastedSeconds.end())
                r.ledger.push_back(ledgerRecord(p.workerId, p.lease.id, QStringLiteral("wasted"), -wasted->second));
            r.ledger.push_back(ledgerRecord(p.workerId, p.lease.id, QStringLiteral("useful"), p.workSeconds));
            recorded.push_back(std::move(r));
        }
        std::vector<Result<void>> steps;
        for (const Recorded &r : recorded)
            steps.push_back(store().addAssimilation(m_jobId, r.assimilation));
        steps.push_back(persist(f.changes));
        for (const Recorded &r : recorded)
            for (const auto &row : r.ledger)
                steps.push_back(store().addLedger(m_jobId, row));
        return steps;
    });
    if (!committed)
        return committed.takeError();
    return recorded;
}

// After the commit (in a group: after the fold; the group's end commits): one result.
void Coordinator::observe(const PendingResult &p, const FoldedResult &folded, qint64 version, const Recorded &r)
{
    const qint64 workerId = p.workerId;
    const Lease &lease = p.lease;
    const Subtask &subtask = p.subtask;
    const qint64 covered = folded.covered;
    dropQuorum(subtask.id, QStringLiteral("subtask %1 was assimilated from another result").arg(subtask.id));

    if (p.late)
        m_wastedSeconds.erase(lease.id);
    for (const auto &row : r.ledger)
        account(row);
    if (m_board) {
        int online = 0;
        for (const auto &[id, w] : m_workers)
            online += w.online ? 1 : 0;
        m_board->result(r.assimilation, m_schedule.at(m_steps.firstStep(subtask.epoch, subtask.shard, subtask.begin)),
                        online, m_costTotals, double(m_clock->nowMs()) / 1000.0);
    }
    auto &worker = m_workers[workerId];
    if (worker.leaseId == lease.id)
        worker.leaseId = 0;
    ++worker.leasesCompleted;
    m_core->measureSpeed(workerId, p.result.sampleSteps, p.result.seconds);
    event(p.result.partial || covered < subtask.size() ? EventKind::ResultPartial : EventKind::ResultAssimilated,
          workerId, subtask.id, lease.id,
          QStringLiteral("seq %1, version %2, staleness %3, credit %4, positions %5-%6 of shard %7%8%9")
              .arg(folded.seq).arg(version).arg(folded.staleness).arg(folded.credit, 0, 'f', 3)
              .arg(subtask.begin).arg(subtask.begin + covered).arg(subtask.shard)
              .arg(p.late ? QStringLiteral(" (late result)") : QString())
              .arg(p.resultSample.defined()
                       ? QStringLiteral("; screened: size z %1, cosine %2 (z %3)")
                             .arg(p.verdict.sizeScore, 0, 'f', 1)
                             .arg(p.verdict.cosine, 0, 'f', 2)
                             .arg(p.verdict.directionScore, 0, 'f', 1)
                       : QString()));
    if (m_hooks.assimilated)
        m_hooks.assimilated(r.assimilation);
    if (p.resultSample.defined()) {
        m_screen->accepted(p.resultSample, p.baseSample, p.verdict);
        noteVerdict(workerId, false, p.verdict, {});
    }
}

// After the results of a fold were observed: what the fold did to the job.
void Coordinator::observeFold(const FoldOutcome &f, qint64 leaseId)
{
    for (const auto &l : f.changes.leases)
        if (l.state == LeaseState::Superseded)
            leaseEnded(l, QStringLiteral("subtask %1 was completed by lease %2").arg(l.subtaskId).arg(leaseId));
    if (f.roundClosed && m_screen) {
        // A synchronous round starts every worker from the round's mean, and its updates can
        // be several times smaller than the last round's (a fifth after the first epoch of a
        // BatchNorm CNN): each round is judged against itself. The same seed draws the same
        // sample of coordinates, so the remembered base samples stay valid.
        m_screen = std::make_unique<ResultScreen>(m_layout.segments(), m_spec.training.seed);
    }
    collectGarbage();

    if (!f.epochClosed)
        return;
    // A buffer's fold can close more than one epoch.
    for (; m_epochsAnnounced < m_scheduler->epochsDone(); ++m_epochsAnnounced) {
        const int epoch = m_epochsAnnounced;
        event(EventKind::EpochCompleted, 0, 0, 0,
              QStringLiteral("epoch %1 of %2 at version %3").arg(epoch + 1).arg(m_spec.training.epochs).arg(f.version));
        requestEvaluation(epoch);
    }
    // Leases of finished epochs left the scheduler: their wasted time can no longer be
    // reversed by a late result.
    for (auto it = m_wastedSeconds.begin(); it != m_wastedSeconds.end();)
        it = m_scheduler->check(it->first).forgotten ? m_wastedSeconds.erase(it) : std::next(it);
}

void Coordinator::collectGarbage()
{
    // Keep the bases of active leases (async-delta needs them), the current one, and the two
    // latest checkpoints.
    const qint64 seq = m_core->seq();
    std::set<qint64> needed{seq};
    if (keepsBases())
        for (const auto &lease : m_scheduler->activeLeases())
            needed.insert(lease.baseSeq);
    for (auto it = m_bases.begin(); it != m_bases.end();)
        it = needed.count(it->first) ? std::next(it) : m_bases.erase(it);
    // Base samples are small: those of active leases and of the last few hundred versions
    // stay, so that late results can be screened too. Walking every active lease after every
    // fold costs O(K log K) with K workers; it is done only once some slack of older samples
    // has gathered beyond those that active leases held at the last walk.
    const qint64 oldest = seq - kScreenedBases;
    const auto old = std::distance(m_baseSamples.begin(), m_baseSamples.lower_bound(oldest));
    if (old > m_oldBaseSamplesKept + kOldBaseSampleSlack) {
        std::set<qint64> active;
        for (const auto &lease : m_scheduler->activeLeases())
            active.insert(lease.baseSeq);
        m_oldBaseSamplesKept = 0;
        for (auto it = m_baseSamples.begin(); it != m_baseSamples.end();) {
            const bool keep = it->first >= oldest || active.count(it->first);
            m_oldBaseSamplesKept += keep && it->first < oldest;
            it = keep ? std::next(it) : m_baseSamples.erase(it);
        }
    }
    m_journal->collect(std::move(needed));
}

} // namespace flotilla
