#include "engine/coordination/Coordinator.h"
#include "engine/coordination/CoordinatorLimits.h"

#include "common/LogCategories.h"
#include "common/Random.h"
#include "engine/coordination/RunBoard.h"

#include <QDir>
#include <QJsonDocument>
#include <QLockFile>

#include <torch/torch.h>

#include <cmath>

namespace flotilla {

using namespace coordinator_limits;

SubtaskResult SubtaskResult::fromOutcome(qint64 leaseId, const TrainOutcome &outcome)
{
    SubtaskResult r;
    r.leaseId = leaseId;
    r.weights = outcome.weights;
    r.meanLoss = outcome.meanLoss;
    r.sampleSteps = outcome.sampleSteps;
    r.covered = outcome.covered;
    r.seconds = outcome.seconds;
    r.partial = outcome.partial;
    return r;
}

SubtaskResult SubtaskResult::fromOutcome(qint64 leaseId, const TrainOutcome &outcome, Compression encoding,
                                         UpdateEncoder &encoder, const torch::Tensor &base, qint64 rounded)
{
    SubtaskResult r = fromOutcome(leaseId, outcome);
    if (encoding == Compression::None || !outcome.weights.defined())
        return r;
    r.encoding = encoding;
    r.update = encoder.encode(encoding, outcome.weights, base, rounded);
    r.wireBytes = r.update.size();
    r.weights = torch::Tensor();
    return r;
}

Coordinator::~Coordinator() = default;

Result<std::unique_ptr<Coordinator>> Coordinator::open(const JobSpec &spec, const QString &runDir, const Clock *clock,
                                                       std::shared_ptr<const JobData> data)
{
    std::unique_ptr<Coordinator> c(new Coordinator);
    c->m_runDir = QDir(runDir).absolutePath();
    c->m_clock = clock;
    c->m_openedMs = clock->nowMs();
    auto journal = Journal::open(c->m_runDir, clock);
    if (!journal)
        return journal.takeError();
    c->m_journal = std::move(journal).value();

    auto existing = c->m_journal->store().latestJob();
    if (!existing)
        return existing.takeError();
    if (existing->has_value()) {
        const JobRecord &job = **existing;
        if (job.state == QLatin1String("finished"))
            return fail(QStringLiteral("the job '%1' in '%2' has already finished; choose another run directory to "
                                       "start a new job")
                            .arg(job.name, c->m_runDir));
        auto stored = JobSpec::fromJson(QJsonDocument::fromJson(job.spec.toUtf8()).object());
        if (!stored)
            return fail(QStringLiteral("the job stored in '%1' cannot be read: %2").arg(c->m_runDir, stored.error()));
        c->m_spec = *stored;
    } else {
        c->m_spec = spec;
    }
    // Two coordinators in one run folder would both write its store and checkpoints (a
    // finished job is refused above, whoever holds it). The lock of a process that died (a
    // SIGKILL, a power loss) is stale and taken over.
    c->m_lock = std::make_unique<QLockFile>(c->m_runDir + u'/' + kLockFile);
    c->m_lock->setStaleLockTime(0);
    if (!c->m_lock->tryLock(2000)) {
        qint64 pid = 0;
        QString host, app;
        c->m_lock->getLockInfo(&pid, &host, &app);
        return c->m_lock->error() == QLockFile::LockFailedError
                   ? fail(QStringLiteral("the run folder '%1' is in use by another Flotilla process (pid %2 on %3); "
                                         "stop it first, or choose another run folder")
                              .arg(c->m_runDir)
                              .arg(pid)
                              .arg(host.isEmpty() ? QStringLiteral("this machine") : host))
                   : fail(QStringLiteral("cannot lock the run folder '%1' (check that it is writable)").arg(c->m_runDir));
    }
    if (auto valid = c->m_spec.validate(); !valid)
        return valid.takeError();
    for (const QString &caution : c->m_spec.cautions())
        qCWarning(lcEngine).noquote() << "job" << c->m_spec.name << "-" << caution;
    c->m_board = RunBoard::open(c->m_runDir, c->m_spec, double(clock->nowMs()) / 1000.0);
    c->m_best = BestModelWatch(c->m_spec.training.bestMetric, c->m_spec.training.earlyStopAfter);

    if (!data) {
        auto loaded = loadJobData(c->m_spec);
        if (!loaded)
            return loaded.takeError();
        data = *loaded;
    }
    c->m_data = std::move(data);
    // training.shards 0: the count the data set gave (JobData), recorded with the job so that
    // a resumed job keeps it.
    c->m_spec.training.shards = c->m_data->plan.numShards();
    if (auto r = c->prepare(); !r)
        return r.takeError();
    auto r = existing->has_value() ? c->resume(**existing) : c->createNew(c->m_spec);
    if (!r)
        return r.takeError();
    return c;
}

Result<void> Coordinator::prepare()
{
    auto prices = PriceTable::load(m_spec.fleet.priceTable);
    if (!prices)
        return prices.takeError();
    m_prices = *prices;
    if (auto rates = m_prices.rates(m_spec.fleet.instanceType, m_spec.fleet.priceClass); !rates)
        return fail(QStringLiteral("'fleet.instance_type': %1").arg(rates.error()));

    // The job seed fixes the initial weights; LibTorch's generator is process-wide.
    torch::manual_seed(m_spec.training.seed);
    auto model = createModel(m_spec.model, m_data->inputShape, m_data->numClasses);
    if (!model)
        return model.takeError();
    m_evalModel = std::move(model).value();
    if (auto fits = checkModelFitsData(*m_evalModel, m_data->inputShape, m_data->numClasses,
                                       taskLoss(m_spec.training), m_data->targetShape);
        !fits)
        return fits;
    m_layout = m_evalModel->layout();

    // With Adam or AdamW the workers' own moments already carry each direction on: outer
    // momentum on top of a round's mean overshoots (a regression's R² 0.92 against 0.995
    // without it, docs/algorithms.md), so a fleet-following step goes without it there.
    AggregationSpec aggregation = m_spec.aggregation;
    if (aggregation.outerScaledByFleet && m_spec.training.optimizer != QLatin1String("sgd"))
        aggregation.outerMomentum = 0.0;
    auto rule = createAggregationRule(aggregation, m_layout.segments());
    if (!rule)
        return rule.takeError();
    if (m_spec.fleet.screenResults)
        m_screen = std::make_unique<ResultScreen>(m_layout.segments(), m_spec.training.seed);
    m_compression = compressionFromName(m_spec.fleet.compression).value_or(Compression::None);

    AssimilatorConfig config;
    config.schedule.epochs = m_spec.training.epochs;
    for (int s = 0; s < m_data->plan.numShards(); ++s)
        config.schedule.shardSizes.push_back(m_data->plan.shardSize(s));
    config.targetSubtaskSeconds = m_spec.fleet.targetSubtaskSeconds;
    config.leaseTimeoutSeconds = m_spec.fleet.leaseTimeoutSeconds;
    config.batchSize = m_spec.training.batchSize;
    config.localEpochs = m_spec.training.localEpochs;
    config.localSteps = m_spec.training.localSteps;
    config.buffer = std::max(1, m_spec.aggregation.buffer);
    config.rounds = m_spec.aggregation.usesRounds();
    config.roundSteps = m_spec.aggregation.roundSteps;
    config.shareTail = m_spec.fleet.shareTail;
    config.speculate = m_spec.fleet.speculate;
    config.dismissIdle = m_spec.fleet.dismissIdle;
    config.schedule.epochsAhead = m_spec.fleet.epochsAhead;
    m_steps = StepPlan(config.schedule.shardSizes, m_spec.training.batchSize, m_spec.training.localEpochs,
                       m_spec.training.localSteps);
    m_schedule = learningRateSchedule(m_spec.training, m_steps.stepsPerEpoch());
    m_core = std::make_unique<Assimilator>(std::move(config), std::move(rule).value(), m_clock);
    m_scheduler = &m_core->scheduler();
    m_journal->follow(*m_core, m_layout.digest());
    return {};
}

Result<void> Coordinator::createNew(const JobSpec &spec)
{
    const qint64 now = m_clock->nowMs();
    AggregationState initial;
    initial.weights = m_evalModel->flatWeights();
    m_core->start(std::move(initial), 0, 0);
    auto sha = m_journal->writeCheckpointFile();
    if (!sha)
        return sha.takeError();
    if (auto r = spec.save(m_runDir + QStringLiteral("/job.json")); !r)
        return r;
    auto jobId = m_journal->createJob(
        spec.name, QString::fromUtf8(QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact)), now, *sha);
    if (!jobId)
        return jobId.takeError();
    m_jobId = *jobId;
    m_startedMs = now;
    event(EventKind::JobCreated, 0, 0, 0,
          QStringLiteral("%1: %2 on %3, %4 epochs × %5 shards, rule %6, %7 parameters")
              .arg(spec.name, spec.model.kind, spec.dataset.kind)
              .arg(spec.training.epochs)
              .arg(spec.training.shards)
              .arg(spec.aggregation.rule)
              .arg(m_layout.totalNumel));
    return {};
}

Result<void> Coordinator::resume(const JobRecord &job)
{
    m_jobId = job.id;
    m_resumed = true;
    m_startedMs = job.createdMs;
    auto latest = store().latestState(m_jobId);
    if (!latest)
        return latest.takeError();
    if (!latest->has_value())
        return fail(QStringLiteral("the store in '%1' records no global model state").arg(m_runDir));
    const StateRecord &st = **latest;
    auto checkpoint = m_journal->read(st);
    if (!checkpoint)
        return fail(QStringLiteral("cannot resume: %1. The store and its checkpoints no longer match; restore the run "
                                   "directory from a backup or start a new run")
                        .arg(checkpoint.error()));
    if (checkpoint->layoutDigest != m_layout.digest() || checkpoint->state.weights.numel() != m_layout.totalNumel)
        return fail(QStringLiteral("cannot resume: checkpoint '%1' does not match the %2 model of this job")
                        .arg(st.path, m_spec.model.kind));
    m_core->start(checkpoint->state, st.seq, st.version);

    auto subtasks = store().subtasks(m_jobId);
    auto leases = store().leases(m_jobId);
    auto workers = store().workers(m_jobId);
    auto assimilations = store().assimilations(m_jobId);
    auto evaluations = store().evaluations(m_jobId);
    if (!subtasks || !leases || !workers || !assimilations || !evaluations)
        return fail(QStringLiteral("cannot resume from '%1': the store cannot be read").arg(store().path()));
    m_scheduler->restore(*subtasks, *leases);
    if (const QString broken = m_scheduler->checkIntegrity(); !broken.isEmpty())
        return fail(QStringLiteral("cannot resume from '%1': the store is inconsistent (%2)").arg(store().path(), broken));
    m_epochsAnnounced = m_scheduler->epochsDone();
    for (const auto &a : *assimilations)
        m_core->replay(a.loss, a.staleness);
    if (auto totals = store().ledgerTotals(m_jobId))
        m_costTotals = *totals;
    for (const auto &e : *evaluations) {
        m_best.observe(e.epoch, e.accuracy, e.loss); // model-best.pt was written when it was best
        m_evaluatedEpoch = std::max(m_evaluatedEpoch, e.epoch);
        m_lastAccuracy = e.accuracy;
        m_lastTestLoss = e.loss;
    }
    m_requestedEpoch = m_evaluatedEpoch;
    // Workers were alive at most until the coordinator's last record: the time of leases
    // lost to the restart is counted up to then, not up to now.
    auto lastEvent = store().lastEventMs(m_jobId);
    auto perWorker = store().ledgerByWorker(m_jobId);
    std::map<qint64, int> completed;
    for (const auto &a : *assimilations)
        ++completed[a.workerId];
    for (const auto &w : *workers) {
        WorkerState ws;
        ws.record = w;
        ws.leasesCompleted = completed[w.id];
        if (perWorker && perWorker->count(w.id)) {
            const LedgerTotals &t = perWorker->at(w.id);
            ws.costSpot = t.costSpot;
            ws.costOnDemand = t.costOnDemand;
            ws.costActual = t.costActual;
        }
        ws.record.state = QStringLiteral("offline");
        if (lastEvent)
            ws.record.lastSeenMs = std::max(ws.record.lastSeenMs, *lastEvent);
        auto rates = m_prices.rates(w.instanceType, w.priceClass);
        ws.rates = rates ? *rates : CostRates{};
        ws.trust.workerId = w.id;
        m_workers[w.id] = ws;
    }
    if (auto trust = store().workerTrust(m_jobId)) {
        for (const WorkerTrust &t : *trust)
            if (const auto it = m_workers.find(t.workerId); it != m_workers.end())
                it->second.trust = t;
    }
    m_journal->resume(m_jobId, m_core->seq());

    event(EventKind::JobResumed, 0, 0, 0,
          QStringLiteral("resumed at version %1 (%2 assimilations, %3 of %4 epochs done)")
              .arg(m_core->version()).arg(m_core->seq()).arg(m_scheduler->epochsDone()).arg(m_scheduler->epochs()));
    // Whatever was leased before the restart is lost: local workers died with the process,
    // remote ones will rejoin and take new leases.
    const std::vector<Lease> active = m_scheduler->activeLeases();
    for (const auto &lease : active)
        handleChanges(m_scheduler->drop(lease.id, LeaseState::Lost), QStringLiteral("the coordinator restarted"));
    collectGarbage();
    if (m_scheduler->finished() && m_evaluatedEpoch < m_spec.training.epochs - 1)
        requestEvaluation(m_spec.training.epochs - 1);
    else if (m_scheduler->finished())
        return finalize();
    return {};
}

void Coordinator::event(EventKind kind, qint64 workerId, qint64 subtaskId, qint64 leaseId, const QString &detail)
{
    const EventKindInfo &info = eventInfo(kind);
    EventRecord e{0, m_clock->nowMs(), info.name, workerId, subtaskId, leaseId, detail};
    auto id = store().addEvent(m_jobId, e);
    if (!id) {
        setFatal(id.error());
        return;
    }
    e.id = *id;
    if (info.level == EventLevel::Routine)
        qCDebug(lcEvents).noquote() << info.name << "worker" << workerId << "subtask" << subtaskId << "lease" << leaseId << detail;
    else
        qCInfo(lcEvents).noquote() << info.name << (workerId ? QStringLiteral("worker %1").arg(workerId) : QString())
                                   << detail;
    if (m_hooks.event)
        m_hooks.event(e);
}

LedgerRecord Coordinator::ledgerRecord(qint64 workerId, qint64 leaseId, const QString &kind, double seconds) const
{
    const auto it = m_workers.find(workerId);
    const CostRates rates = it == m_workers.end() ? CostRates{} : it->second.rates;
    return LedgerRecord{workerId, leaseId, m_clock->nowMs(), kind, seconds, seconds * rates.spotPerSecond,
                        seconds * rates.onDemandPerSecond, seconds * rates.actualPerSecond};
}

void Coordinator::ledger(qint64 workerId, qint64 leaseId, const QString &kind, double seconds)
{
    const LedgerRecord l = ledgerRecord(workerId, leaseId, kind, seconds);
    if (auto r = store().addLedger(m_jobId, l); !r)
        setFatal(r.error());
    else
        account(l);
}

void Coordinator::account(const LedgerRecord &l)
{
    (l.kind == QLatin1String("useful") ? m_costTotals.usefulSeconds : m_costTotals.wastedSeconds) += l.seconds;
    m_costTotals.costSpot += l.costSpot;
    m_costTotals.costOnDemand += l.costOnDemand;
    m_costTotals.costActual += l.costActual;
    if (l.kind == QLatin1String("wasted"))
        m_costTotals.wastedCostActual += l.costActual;
    const auto it = m_workers.find(l.workerId);
    if (it == m_workers.end())
        return;
    it->second.costSpot += l.costSpot;
    it->second.costOnDemand += l.costOnDemand;
    it->second.costActual += l.costActual;
}

void Coordinator::setFatal(const QString &message)
{
    if (m_fatal.isEmpty()) {
        m_fatal = message;
        qCCritical(lcEngine).noquote() << "the job stops:" << message;
    }
}

Result<void> Coordinator::persist(const SchedulerChanges &changes)
{
    if (changes.subtasks.empty() && changes.leases.empty())
        return {};
    return store().saveChanges(m_jobId, changes);
}

// Records the end of a lease that delivered nothing: wasted compute, and an event.
void Coordinator::leaseEnded(const Lease &lease, const QString &why)
{
    auto &worker = m_workers[lease.workerId];
    if (worker.leaseId == lease.id)
        worker.leaseId = 0;
    // Worker-seconds spent on the lease, as far as the coordinator saw the worker alive.
    const qint64 end = lease.state == LeaseState::Lost && worker.record.lastSeenMs >= lease.issuedMs
                           ? std::min(lease.endedMs, worker.record.lastSeenMs)
                           : lease.endedMs;
    const double seconds = std::max<qint64>(0, end - lease.issuedMs) / 1000.0;
    m_wastedSeconds[lease.id] = seconds;
    ledger(lease.workerId, lease.id, QStringLiteral("wasted"), seconds);
    if (lease.state != LeaseState::HandedBack)
        ++worker.leasesLost;
    const EventKind kind = lease.state == LeaseState::Expired      ? EventKind::LeaseExpired
                         : lease.state == LeaseState::HandedBack ? EventKind::LeaseHandedBack
                         : lease.state == LeaseState::Superseded ? EventKind::LeaseSuperseded
                                                                 : EventKind::LeaseLost;
    event(kind, lease.workerId, lease.subtaskId, lease.id, why);
    if (lease.state == LeaseState::Superseded && m_hooks.superseded)
        m_hooks.superseded(lease.workerId, lease.id);
}

void Coordinator::handleChanges(const SchedulerChanges &changes, const QString &why)
{
    if (auto r = persist(changes); !r) {
        setFatal(r.error());
        return;
    }
    for (const auto &lease : changes.leases)
        if (lease.state != LeaseState::Active && lease.state != LeaseState::Completed)
            leaseEnded(lease, why);
    for (const auto &lease : changes.leases)
        if (lease.state != LeaseState::Active && m_bases.count(lease.baseSeq))
            collectGarbage();
}

Result<qint64> Coordinator::workerJoined(const WorkerInfo &info, qint64 knownWorkerId)
{
    if (!m_fatal.isEmpty())
        return fail(m_fatal);
    auto rates = m_prices.rates(info.instanceType, info.priceClass);
    if (!rates)
        return rates.takeError();
    const qint64 now = m_clock->nowMs();
    auto known = m_workers.find(knownWorkerId);
    // A store from before worker ids were the fleet's may hold another machine under this id:
    // that one is not this worker, who joins under an id of its own.
    if (known != m_workers.end() && known->second.record.name != info.name) {
        qCWarning(lcEngine).noquote() << "worker id" << knownWorkerId << "is" << known->second.record.name
                                      << "in this job's store, not" << info.name << "- it joins under a new id";
        knownWorkerId = 0;
        known = m_workers.end();
    }
    if (knownWorkerId != 0 && known != m_workers.end()) {
        WorkerState &w = known->second;
        w.online = true;
        w.dismissed = false;
        w.trusted = info.trusted;
        w.rates = *rates;
        w.record.instanceType = info.instanceType;
        w.record.priceClass = info.priceClass;
        w.record.state = QStringLiteral("online");
        w.record.lastSeenMs = now;
        m_core->reportSpeed(knownWorkerId, info.samplesPerSecond);
        if (auto r = store().updateWorker(m_jobId, w.record); !r)
            return r.takeError();
        event(EventKind::WorkerJoined, knownWorkerId, 0, 0, QStringLiteral("%1 came back").arg(w.record.name));
        sizeBuffer();
        handleChanges(m_scheduler->workerLost(knownWorkerId),
                      QStringLiteral("the worker came back without the result (it was restarted)"));
        return knownWorkerId;
    }
    WorkerRecord record{std::max<qint64>(knownWorkerId, 0), info.name, info.instanceType, info.priceClass, info.device,
                        info.threads, now, now, QStringLiteral("online")};
    auto id = store().addWorker(m_jobId, record);
    if (!id)
        return id.takeError();
    record.id = *id;
    WorkerState state;
    state.record = record;
    state.rates = *rates;
    state.online = true;
    state.trusted = info.trusted;
    state.trust.workerId = *id;
    m_core->reportSpeed(*id, info.samplesPerSecond);
    m_workers[*id] = state;
    event(EventKind::WorkerJoined, *id, 0, 0,
          QStringLiteral("%1 (%2, %3, %4 %5 thread(s))")
              .arg(info.name, info.instanceType, info.priceClass, info.device)
              .arg(info.threads));
    sizeBuffer();
    return *id;
}

void Coordinator::workerLeft(qint64 workerId, const QString &reason)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end() || !it->second.online)
        return;
    it->second.online = false;
    it->second.record.state = QStringLiteral("offline");
    if (auto r = store().updateWorker(m_jobId, it->second.record); !r)
        setFatal(r.error());
    event(EventKind::WorkerLeft, workerId, 0, 0, reason);
    handleChanges(m_scheduler->workerLost(workerId), reason);
    sizeBuffer();
    flushBufferIfDue();
}

void Coordinator::recordEvent(EventKind kind, qint64 workerId, const QString &detail)
{
    // A preemption reported after the job ended (a local fleet's timer racing the end) costs
    // the job nothing; its figures were final when it finished.
    if (kind == EventKind::WorkerPreempted && m_finished)
        return;
    if (kind == EventKind::WorkerPreempted) {
        ++m_preemptions;
        if (const auto it = m_workers.find(workerId); it != m_workers.end())
            ++it->second.preemptions;
    }
    event(kind, workerId, 0, 0, detail);
}

void Coordinator::heartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 plannedSampleSteps)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end())
        return;
    reviveIfGone(workerId, "it sent a heartbeat");
    it->second.record.lastSeenMs = m_clock->nowMs();
    if (it->second.leaseId == leaseId) {
        it->second.sampleSteps = sampleSteps;
        it->second.plannedSampleSteps = plannedSampleSteps;
    }
}

bool Coordinator::isOnline(qint64 workerId) const
{
    const auto it = m_workers.find(workerId);
    return it != m_workers.end() && it->second.online;
}

void Coordinator::reportSpeed(qint64 workerId, double samplesPerSecond)
{
    if (m_workers.count(workerId))
        m_core->reportSpeed(workerId, samplesPerSecond);
}

double Coordinator::workerSpeed(qint64 workerId) const
{
    return m_core->speed(workerId);
}

double Coordinator::screeningRate(const Subtask &subtask) const
{
    const TrainingSpec &t = m_spec.training;
    const qint64 first = m_steps.firstStep(subtask.epoch, subtask.shard, subtask.begin);
    const qint64 last = first + std::max<std::int64_t>(1, subtaskSteps(subtask.size(), t.batchSize, t.localEpochs, t.localSteps)) - 1;
    if (first < m_schedule.warmupSteps && last >= m_schedule.warmupSteps)
        return m_schedule.base;
    return std::max(m_schedule.at(first), m_schedule.at(last));
}

TrainConfig Coordinator::trainConfigFor(const Subtask &subtask) const
{
    const TrainingSpec &t = m_spec.training;
    TrainConfig c;
    c.optimizer = t.optimizer;
    c.schedule = m_schedule;
    c.firstStep = m_steps.firstStep(subtask.epoch, subtask.shard, subtask.begin);
    c.learningRate = m_schedule.at(c.firstStep);
    // Replicas are compared with each other: they start alike, from no optimizer state.
    c.freshOptimizer = !t.carryOptimizer || m_quorums.count(subtask.id) > 0;
    c.momentum = t.momentum;
    if (m_spec.aggregation.workerMomentumScaledByFleet && t.optimizer == QLatin1String("sgd")) {
        // Asynchrony itself acts as momentum of about 1 − 1/N: the workers' own falls so that
        // the two together amplify a step about as much as the job's momentum alone.
        int online = 0;
        for (const auto &[id, w] : m_workers)
            online += w.online ? 1 : 0;
        c.momentum = std::max(0.0, 1.0 - double(std::max(1, online)) * (1.0 - t.momentum));
    }
    c.nesterov = t.nesterov;
    c.weightDecay = t.weightDecay;
    c.beta1 = t.beta1;
    c.beta2 = t.beta2;
    c.eps = t.eps;
    c.clipGradNorm = t.clipGradNorm;
    c.labelSmoothing = t.labelSmoothing;
    c.task = t.task;
    c.regressionLoss = t.regressionLoss;
    c.precision = t.precision;
    c.batchSize = t.batchSize;
    c.localEpochs = t.localEpochs;
    if (t.localSteps > 0) {
        // A remainder subtask gets its share of the steps.
        const double share = double(subtask.size()) / double(m_scheduler->shardSize(subtask.shard));
        c.localSteps = std::max(1, int(std::lround(t.localSteps * share)));
    }
    c.seed = mixSeed(mixSeed(t.seed, static_cast<std::uint64_t>(subtask.id)), 0xC0FFEE);
    // A subtask whose result was refused is trained again with other draws (augmentation,
    // the later passes' orders), never the same way twice.
    if (const auto refused = m_refusals.find(subtask.id); refused != m_refusals.end())
        c.seed = mixSeed(c.seed, static_cast<std::uint64_t>(refused->second));
    c.threads = t.threads;
    return c;
}

void Coordinator::setPaused(bool paused)
{
    if (paused == m_paused)
        return;
    m_paused = paused;
    event(paused ? EventKind::JobPaused : EventKind::JobUnpaused, 0, 0, 0,
          paused ? QStringLiteral("no new subtasks until the job is resumed; running ones finish")
                 : QStringLiteral("subtasks are handed out again"));
}

std::vector<WorkerStatus> Coordinator::workerStatuses() const
{
    std::vector<WorkerStatus> out;
    for (const auto &[id, w] : m_workers) {
        WorkerStatus s;
        s.id = id;
        s.name = w.record.name;
        s.instanceType = w.record.instanceType;
        s.priceClass = w.record.priceClass;
        s.device = w.record.device;
        s.threads = w.record.threads;
        s.online = w.online;
        s.samplesPerSecond = m_core->speed(id);
        s.leaseId = w.leaseId;
        s.epoch = w.epoch;
        s.shard = w.shard;
        s.begin = w.begin;
        s.end = w.end;
        s.done = w.sampleSteps;
        s.planned = w.plannedSampleSteps;
        s.leasesCompleted = w.leasesCompleted;
        s.leasesLost = w.leasesLost;
        s.preemptions = w.preemptions;
        s.costSpot = w.costSpot;
        s.costOnDemand = w.costOnDemand;
        s.costActual = w.costActual;
        s.lastSeenMs = w.record.lastSeenMs;
        s.trust = w.trust.trust;
        s.rejected = w.trust.rejected;
        s.quarantined = w.trust.quarantined;
        s.quarantineReason = w.trust.reason;
        out.push_back(s);
    }
    return out;
}

Assimilator::IdleConditions Coordinator::idleConditions() const
{
    Assimilator::IdleConditions c;
    c.halted = !m_fatal.isEmpty() || m_finished || m_paused;
    // A quorum's subtask is trained by several workers already, whose results are compared.
    c.mayCopy = [this](qint64 subtaskId) { return !m_quorums.count(subtaskId); };
    return c;
}

bool Coordinator::roundFull() const
{
    return m_core->roundFull() && !finished();
}

bool Coordinator::dismissesIdle() const
{
    // Asked for a worker that got nothing, a quarantined one included, which no copy goes to.
    Assimilator::IdleConditions c = idleConditions();
    c.mayCopy = [](qint64) { return false; };
    return decideIdle(m_core->idleSituation(c)).dismiss;
}

std::optional<Assignment> Coordinator::requestSubtask(qint64 workerId)
{
    if (!m_fatal.isEmpty() || m_finished || m_paused)
        return std::nullopt;
    const auto wit = m_workers.find(workerId);
    if (wit == m_workers.end())
        return std::nullopt;
    reviveIfGone(workerId, "it asked for work");
    WorkerState &worker = wit->second;
    worker.record.lastSeenMs = m_clock->nowMs();
    if (worker.trust.quarantined)
        return std::nullopt;
    // One lease per worker: asking again means it dropped the previous one.
    if (auto held = m_scheduler->activeLeaseOf(workerId))
        handleChanges(m_scheduler->handBack(held->id), QStringLiteral("the worker asked for new work instead"));

    // Redundancy: a subtask waiting for another worker's result of it comes first.
    if (auto replica = grantReplica(workerId))
        return replica;

    // Heterogeneous fleets: work and deadline follow the worker's measured speed (sizeLease);
    // at the job's tail, a speculative copy or the worker's dismissal (decideIdle).
    Assimilator::IdleConditions conditions = idleConditions();
    conditions.dismissed = worker.dismissed;
    Assimilator::Offer offer = m_core->offer(workerId, conditions);
    auto &grant = offer.grant;
    const QString copyOf = offer.speculative
                               ? QStringLiteral(" (a speculative copy: the subtask's other lease is the most overdue)")
                               : QString();
    if (!grant) {
        if (offer.idle.firstDismissal) {
            worker.dismissed = true;
            event(EventKind::WorkerDismissed, workerId, 0, 0,
                  QStringLiteral("nothing queued in the last epoch and no copy to make (fleet.dismiss_idle)"));
        }
        return std::nullopt;
    }
    if (auto r = persist(grant->changes); !r) {
        setFatal(r.error());
        return std::nullopt;
    }
    const qint64 seq = m_core->seq();
    const torch::Tensor &snapshot = m_core->snapshot();
    if (keepsBases())
        m_bases.emplace(seq, snapshot);
    if (m_screen && !m_baseSamples.count(seq))
        m_baseSamples.emplace(seq, m_screen->sample(snapshot));

    const Subtask &s = grant->subtask;
    if (copyOf.isEmpty() && replicate(s)) {
        Quorum &q = m_quorums[s.id];
        q.baseSeq = seq;
        q.baseVersion = m_core->version();
        q.base = snapshot;
        q.workers.insert(workerId);
    }
    if (s.attempts > 1 && copyOf.isEmpty()) {
        ++m_reassignments;
        event(EventKind::SubtaskReassigned, workerId, s.id, grant->lease.id,
              QStringLiteral("epoch %1, shard %2, positions %3-%4, attempt %5")
                  .arg(s.epoch + 1).arg(s.shard).arg(s.begin).arg(s.end).arg(s.attempts));
    }
    event(EventKind::LeaseGranted, workerId, s.id, grant->lease.id,
          QStringLiteral("epoch %1, shard %2, positions %3-%4, version %5%6")
              .arg(s.epoch + 1).arg(s.shard).arg(s.begin).arg(s.end).arg(m_core->version()).arg(copyOf));
    return assign(worker, grant->lease, s, snapshot);
}

Assignment Coordinator::assign(WorkerState &worker, const Lease &lease, const Subtask &s, const torch::Tensor &weights)
{
    worker.leaseId = lease.id;
    worker.sampleSteps = 0;
    worker.plannedSampleSteps = 0;
    worker.epoch = s.epoch;
    worker.shard = s.shard;
    worker.begin = s.begin;
    worker.end = s.end;

    Assignment a;
    a.leaseId = lease.id;
    a.subtaskId = s.id;
    a.epoch = s.epoch;
    a.shard = s.shard;
    a.begin = s.begin;
    a.end = s.end;
    a.baseSeq = lease.baseSeq;
    a.baseVersion = lease.baseVersion;
    a.deadlineMs = lease.deadlineMs;
    a.config = trainConfigFor(s);
    a.weights = weights;
    return a;
}

void Coordinator::handBack(qint64 workerId, qint64 leaseId, const QString &reason, bool failed)
{
    const Scheduler::Check check = m_scheduler->check(leaseId);
    if (check.verdict == Scheduler::Verdict::Unknown || check.lease.workerId != workerId)
        return;
    if (failed)
        noteFailure(workerId, reason);
    handleChanges(m_scheduler->handBack(leaseId), reason);
    flushBufferIfDue();
}

void Coordinator::noteFailure(qint64 workerId, const QString &reason)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end())
        return;
    ++it->second.failures;
    it->second.lastFailure = reason;
}

void Coordinator::reviveIfGone(qint64 workerId, const char *heardBy)
{
    const auto it = m_workers.find(workerId);
    if (it == m_workers.end() || it->second.online || m_finished)
        return;
    WorkerState &w = it->second;
    w.online = true;
    w.record.state = QStringLiteral("online");
    w.record.lastSeenMs = m_clock->nowMs();
    if (auto r = store().updateWorker(m_jobId, w.record); !r)
        setFatal(r.error());
    event(EventKind::WorkerJoined, workerId, 0, 0,
          QStringLiteral("%1 is back (%2): it had been declared gone (%3); the leases it held then were given to others")
              .arg(w.record.name, QLatin1String(heardBy),
                   w.goneBecause.isEmpty() ? QStringLiteral("it left") : w.goneBecause));
    w.goneBecause.clear();
    sizeBuffer();
}

void Coordinator::absorbStall(qint64 gapMs)
{
    if (gapMs <= 0 || !m_fatal.isEmpty() || m_finished)
        return;
    const qint64 now = m_clock->nowMs();
    for (auto &[id, w] : m_workers)
        if (w.online)
            w.record.lastSeenMs = std::min(now, w.record.lastSeenMs + gapMs);
    const SchedulerChanges moved = m_scheduler->postpone(gapMs);
    if (auto r = persist(moved); !r)
        setFatal(r.error());
    event(EventKind::CoordinatorStalled, 0, 0, 0,
          QStringLiteral("the coordinator did not run for %1 s (its process was stopped or its machine suspended or "
                         "overloaded, or its clock jumped); the workers' silence in that time is not held against them, "
                         "and %2 lease deadline(s) moved by as much")
              .arg(double(gapMs) / 1000.0, 0, 'f', 1)
              .arg(moved.leases.size()));
}

std::pair<QString, bool> Coordinator::stallReason() const
{
    if (m_finished || m_paused || !m_fatal.isEmpty() || m_scheduler->finished())
        return {};
    int online = 0, quarantined = 0, failing = 0;
    const WorkerState *example = nullptr;
    for (const auto &[id, w] : m_workers) {
        if (!w.online)
            continue;
        ++online;
        if (w.trust.quarantined) {
            ++quarantined;
        } else if (w.failures >= kFailuresToStall) {
            ++failing;
            example = &w;
        }
    }
    // A moment without workers is ordinary (a job starting, its only worker restarting): a
    // stall only once it has lasted.
    if (online == 0) {
        if (m_clock->nowMs() - std::max(m_lastOnlineMs, m_openedMs) < kNoWorkerGraceMs)
            return {};
        return {m_workers.empty() ? QStringLiteral("no worker has joined yet; the job waits for one")
                                  : QStringLiteral("no worker is connected; the job waits for one to join or come back"),
                false};
    }
    if (quarantined + failing < online)
        return {};
    if (failing == 0)
        return {QStringLiteral("every connected worker (%1) is quarantined; release one (flotilla release, or the Workers "
                               "view) or add workers")
                    .arg(online),
                true};
    return {QStringLiteral("no connected worker can train this job: %1 of %2 failed their last %3 subtasks%4; the last "
                           "error: %5")
                .arg(failing)
                .arg(online)
                .arg(kFailuresToStall)
                .arg(quarantined > 0 ? QStringLiteral(", the other %1 are quarantined").arg(quarantined) : QString())
                .arg(example->lastFailure),
            true};
}

void Coordinator::tick()
{
    if (!m_fatal.isEmpty())
        return;
    handleChanges(m_scheduler->expire(), QStringLiteral("the lease passed its deadline without a result"));
    expireQuorums();
    const qint64 now = m_clock->nowMs();
    if (m_board && now - m_boardFlushedMs >= 2000) {
        m_board->flush();
        m_boardFlushedMs = now;
    }
    std::vector<EvaluationRequest> due;
    for (auto it = m_evaluationRetries.begin(); it != m_evaluationRetries.end();) {
        if (it->first <= now) {
            due.push_back(std::move(it->second));
            it = m_evaluationRetries.erase(it);
        } else {
            ++it;
        }
    }
    for (auto &request : due)
        dispatchEvaluation(std::move(request));
    if (now - m_lastOperatorPollMs >= kOperatorPollMs) {
        m_lastOperatorPollMs = now;
        applyOperatorRequests();
    }
    const auto timeoutMs = static_cast<qint64>(m_spec.fleet.heartbeatTimeoutSeconds * 1000.0);
    std::vector<qint64> silent;
    for (const auto &[id, w] : m_workers)
        if (w.online && now - w.record.lastSeenMs > timeoutMs)
            silent.push_back(id);
    for (const qint64 id : silent) {
        const QString why = QStringLiteral("not heard from for %1 s (missed heartbeats)")
                                .arg((now - m_workers[id].record.lastSeenMs) / 1000);
        workerLeft(id, why);
        m_workers[id].goneBecause = why;
    }
    flushBufferIfDue();
    if (std::any_of(m_workers.begin(), m_workers.end(), [](const auto &w) { return w.second.online; }))
        m_lastOnlineMs = now;
    // A job that cannot go on says why, once for each new reason (and in every progress).
    const QString stalled = stallReason().first;
    if (stalled != m_stalled) {
        m_stalled = stalled;
        if (!stalled.isEmpty())
            event(EventKind::JobStalled, 0, 0, 0, stalled);
    }
}

void Coordinator::applyOperatorRequests()
{
    auto requests = store().pendingOperatorRequests(m_jobId);
    if (!requests) {
        qCWarning(lcEngine).noquote() << "cannot read operator requests:" << requests.error();
        return;
    }
    for (const OperatorRequest &r : *requests) {
        int matched = 0;
        for (auto &[id, w] : m_workers)
            if (w.record.name == r.worker && w.trust.quarantined) {
                releaseWorker(id, QStringLiteral("an operator"));
                ++matched;
            }
        if (matched == 0)
            qCWarning(lcEngine).noquote() << "operator request" << r.kind << r.worker
                                          << "matched no quarantined worker";
        if (auto done = store().markOperatorRequestDone(r.id); !done)
            qCWarning(lcEngine).noquote() << done.error();
    }
}

JobProgress Coordinator::progress() const
{
    JobProgress p;
    p.name = m_spec.name;
    p.epochsDone = m_scheduler->epochsDone();
    p.epochs = m_scheduler->epochs();
    p.seq = m_core->seq();
    p.version = m_core->version();
    p.lossEma = m_core->lossEma();
    p.testAccuracy = m_lastAccuracy;
    p.testLoss = m_lastTestLoss;
    p.evaluatedEpoch = m_evaluatedEpoch;
    for (const auto &[id, w] : m_workers) {
        p.workersOnline += w.online ? 1 : 0;
        p.quarantined += w.trust.quarantined ? 1 : 0;
    }
    p.activeLeases = m_scheduler->activeLeaseCount();
    p.queuedSubtasks = m_scheduler->queuedCount();
    p.recentStaleness = m_core->recentStaleness();
    p.maxStaleness = m_core->maxStaleness();
    p.bufferedResults = m_core->buffered();
    p.bufferSize = m_core->bufferSize();
    p.reassignments = m_reassignments;
    p.preemptions = m_preemptions;
    p.rejected = m_rejected;
    p.duplicates = m_duplicates;
    p.resultsReceived = m_resultsReceived;
    p.resultBytes = m_resultBytes;
    p.weightsSent = m_weightsSent;
    p.weightsSentBytes = m_weightsSentBytes;
    p.weightsSentWhole = m_weightsSentWhole;
    p.weightsSentAnchored = m_weightsSentAnchored;
    p.verified = m_verified;
    p.disagreements = m_disagreements;
    p.cost = m_costTotals;
    p.elapsedMs = m_clock->nowMs() - m_startedMs;
    p.finished = m_finished;
    p.paused = m_paused;
    std::tie(p.stalled, p.stalledForGood) = stallReason();
    return p;
}

} // namespace flotilla
