#include "engine/Coordinator.h"

#include "job/Tasks.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "engine/Random.h"
#include "engine/RunBoard.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLockFile>
#include <QTextStream>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <iterator>

namespace flotilla {

namespace {

constexpr int kEvaluationAttempts = 3;
constexpr qint64 kEvaluationRetryMs = 2000; // times the attempt number
constexpr qint64 kScreenedBases = 256;      // recent versions whose samples are kept
constexpr std::ptrdiff_t kOldBaseSampleSlack = 64; // older ones kept until this many gather
constexpr int kVerdictWindow = 10;          // a worker's recent results that quarantine looks at
// Per-class accuracies and per-label F1 of at most this many classes or labels are kept as
// named metrics of each evaluation (the confusion matrix keeps every class's).
constexpr std::size_t kNamedClasses = 100;
constexpr int kFailuresToStall = 3;         // subtasks in a row a worker failed: it cannot train this job
constexpr qint64 kNoWorkerGraceMs = 10'000; // no worker online for this long: the job says it waits
constexpr int kCosineWindow = 10; // a worker's recent accepted updates the direction test averages
constexpr qint64 kOperatorPollMs = 2000;
constexpr double kNormFactor = 1000.0;
const QString kLockFile = QStringLiteral("flotilla.lock");

} // namespace

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

    auto rule = createAggregationRule(m_spec.aggregation, m_layout.segments());
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
            reply.reason = kept.error();
            ++m_rejected;
            event(EventKind::ResultRejected, p.workerId, p.subtask.id, p.lease.id, kept.error());
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
    int online = 0;
    for (const auto &[id, w] : m_workers)
        online += w.online ? 1 : 0;
    m_core->setFleetSize(std::max(1, online));
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

// "test accuracy 91.20%", "test R² 0.9312": an evaluation's score as the task names it.
QString scoreText(const QString &task, double score)
{
    const TaskInfo &info = taskInfo(task);
    if (info.scoreKey.endsWith(QLatin1String("accuracy")))
        return QStringLiteral("test %1 %2%").arg(info.score).arg(100.0 * score, 0, 'f', 2);
    return QStringLiteral("test %1 %2").arg(info.score).arg(score, 0, 'f', 4);
}

// The confusion matrix of one evaluation as CSV: a row per true class, a column per predicted
// class, and each class's accuracy last.
QByteArray confusionCsv(const EvaluationDetail &d, const QStringList &names)
{
    const auto name = [&](int c) {
        QString n = c < names.size() ? names[c] : QString::number(c);
        return n.contains(u',') || n.contains(u'"') ? u'"' + n.replace(u'"', QStringLiteral("\"\"")) + u'"' : n;
    };
    QByteArray csv = "true\\predicted";
    for (int p = 0; p < d.classes; ++p)
        csv += ',' + name(p).toUtf8();
    csv += ",accuracy\n";
    const std::vector<double> accuracy = d.classAccuracy();
    for (int t = 0; t < d.classes; ++t) {
        csv += name(t).toUtf8();
        for (int p = 0; p < d.classes; ++p)
            csv += ',' + QByteArray::number(d.confusion[std::size_t(t * d.classes + p)]);
        csv += ',' + (accuracy[std::size_t(t)] >= 0 ? QByteArray::number(accuracy[std::size_t(t)], 'f', 5) : QByteArray())
               + '\n';
    }
    return csv;
}

// Renames `from` over `to`: at once where the system can (POSIX rename replaces), else by
// removing `to` first.
bool replaceFile(const QString &from, const QString &to)
{
    if (std::rename(QFile::encodeName(from).constData(), QFile::encodeName(to).constData()) == 0)
        return true;
    QFile::remove(to);
    return QFile::rename(from, to);
}

} // namespace

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

void Coordinator::handBack(qint64 workerId, qint64 leaseId, const QString &reason, bool failed)
{
    const Scheduler::Check check = m_scheduler->check(leaseId);
    if (check.verdict == Scheduler::Verdict::Unknown || check.lease.workerId != workerId)
        return;
    if (failed)
        noteFailure(workerId, reason);
    handleChanges(m_scheduler->handBack(leaseId), reason);
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
        if (m_screen && m_screen->warmedUp()) {
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
    if (!rejected && int(w.cosines.size()) >= kCosineWindow) {
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

void Coordinator::requestEvaluation(int epoch)
{
    if (epoch <= m_requestedEpoch)
        return;
    m_requestedEpoch = epoch;
    dispatchEvaluation(EvaluationRequest{epoch, m_core->version(), m_core->seq(), m_core->state().weights.clone()});
}

void Coordinator::dispatchEvaluation(EvaluationRequest request)
{
    if (m_hooks.evaluate) {
        m_hooks.evaluate(std::move(request));
        return;
    }
    auto device = request.onCpu ? Result<torch::Device>(torch::Device(torch::kCPU)) : selectDevice(m_spec.training.device);
    if (!device) {
        evaluationFailed(request, device.error());
        return;
    }
    auto ev = evaluate(*m_evalModel, request.weights, m_data->test, *device, taskLoss(m_spec.training));
    if (!ev) {
        evaluationFailed(request, ev.error());
        return;
    }
    recordEvaluation(request, *ev);
}

void Coordinator::evaluationFailed(const EvaluationRequest &request, const QString &error)
{
    if (m_finished || request.epoch <= m_evaluatedEpoch)
        return;
    const bool again = request.attempt < kEvaluationAttempts;
    EvaluationRequest retry = request;
    ++retry.attempt;
    // The last attempt runs on the CPU: a GPU that ran out of memory or lost its driver
    // should not cost the job its accuracy figure.
    retry.onCpu = retry.attempt == kEvaluationAttempts && m_spec.training.device != QLatin1String("cpu");
    const qint64 delayMs = kEvaluationRetryMs * request.attempt;
    m_lastEvaluationError = error;
    event(EventKind::EvaluationFailed, 0, 0, 0,
          QStringLiteral("epoch %1, version %2, attempt %3 of %4: %5; %6")
              .arg(request.epoch + 1).arg(request.version).arg(request.attempt).arg(kEvaluationAttempts)
              .arg(error,
                   again ? QStringLiteral("trying again%1%2")
                               .arg(m_hooks.evaluate ? QStringLiteral(" in %1 s").arg(double(delayMs) / 1000.0) : QString())
                               .arg(retry.onCpu ? QStringLiteral(" on the CPU") : QString())
                         : QStringLiteral("giving up on this evaluation; training goes on")));
    if (again) {
        if (m_hooks.evaluate)
            m_evaluationRetries.push_back({m_clock->nowMs() + delayMs, std::move(retry)});
        else
            dispatchEvaluation(std::move(retry));
        return;
    }
    // Nothing waits for an evaluation that will not come: the last epoch's ends the job.
    if (m_scheduler->finished() && request.epoch == m_spec.training.epochs - 1 && !m_finished) {
        if (auto r = finalize(); !r)
            setFatal(r.error());
    }
}

void Coordinator::recordEvaluation(const EvaluationRequest &request, const Evaluation &evaluation)
{
    if (!std::isfinite(evaluation.loss) || !std::isfinite(evaluation.accuracy)) {
        evaluationFailed(request, QStringLiteral("the test loss of the global model at version %1 is %2: its "
                                                 "outputs on the test set are not finite")
                                      .arg(request.version)
                                      .arg(evaluation.loss));
        return;
    }
    EvaluationRecord record{request.epoch, request.version, request.seq, evaluation.accuracy, evaluation.loss,
                            m_clock->nowMs()};
    const EvaluationDetail detail{request.epoch, request.seq, evaluation.top5Accuracy, evaluation.classes,
                                  {evaluation.confusion.begin(), evaluation.confusion.end()}};
    if (auto r = store().addEvaluation(m_jobId, record); !r) {
        setFatal(r.error());
        return;
    }
    if (auto r = store().addEvaluationDetail(m_jobId, detail); !r) {
        setFatal(r.error());
        return;
    }
    std::vector<std::pair<QString, double>> metrics = evaluation.metrics;
    const std::vector<double> perClass = detail.classAccuracy();
    for (std::size_t c = 0; c < perClass.size() && c < kNamedClasses; ++c)
        if (perClass[c] >= 0)
            metrics.emplace_back(QStringLiteral("class_accuracy/%1").arg(c < std::size_t(m_data->test.classNames.size())
                                                                          ? m_data->test.classNames[qsizetype(c)]
                                                                          : QString::number(c)),
                                 perClass[c]);
    for (std::size_t l = 0; l < evaluation.labelF1.size() && l < kNamedClasses; ++l)
        metrics.emplace_back(QStringLiteral("f1/%1").arg(l < std::size_t(m_data->test.classNames.size())
                                                            ? m_data->test.classNames[qsizetype(l)]
                                                            : QString::number(l)),
                             evaluation.labelF1[l]);
    if (auto r = store().addEvaluationMetrics(m_jobId, request.epoch, request.seq, metrics); !r) {
        setFatal(r.error());
        return;
    }
    if (request.epoch > m_evaluatedEpoch) {
        m_evaluatedEpoch = request.epoch;
        m_lastAccuracy = evaluation.accuracy;
        m_lastTestLoss = evaluation.loss;
    }
    QString further;
    for (const auto &[name, value] : evaluation.metrics)
        if (name != QLatin1String("top5_accuracy"))
            further += QStringLiteral(", %1 %2").arg(name).arg(value, 0, 'g', 5);
    event(EventKind::Evaluation, 0, 0, 0,
          QStringLiteral("epoch %1, version %2: %3, loss %4%5")
              .arg(request.epoch + 1).arg(request.version)
              .arg(scoreText(m_spec.training.task, evaluation.accuracy))
              .arg(evaluation.loss, 0, 'f', 4)
              .arg(further));
    if (m_board)
        m_board->evaluation(record, metrics, double(m_clock->nowMs()) / 1000.0);
    if (m_hooks.evaluated)
        m_hooks.evaluated(record);
    if (m_finished)
        return;
    const BestModelWatch::Verdict verdict = m_best.observe(request.epoch, evaluation.accuracy, evaluation.loss);
    if (verdict.improved) {
        // The best so far, beside the last: written whole, then renamed over the last best.
        const QString best = m_runDir + QStringLiteral("/model-best.pt");
        auto saved = m_evalModel->loadFlatWeights(request.weights);
        if (saved)
            saved = m_evalModel->save(best + QStringLiteral(".part"));
        if (saved && !replaceFile(best + QStringLiteral(".part"), best))
            saved = Result<void>(fail(QStringLiteral("cannot replace '%1'").arg(best)));
        if (!saved)
            qCWarning(lcEngine).noquote() << "the best model so far could not be kept:" << saved.error();
    }
    if (verdict.stop && !m_scheduler->finished()) {
        m_stoppedEarly = QStringLiteral("stopped early after epoch %1 of %2: no better test %3 in %4 evaluations "
                                        "(the best, %5 at epoch %6, is model-best.pt)")
                             .arg(request.epoch + 1)
                             .arg(m_spec.training.epochs)
                             .arg(m_best.metric())
                             .arg(m_best.patience())
                             .arg(m_best.metric() == QLatin1String("loss")
                                      ? QString::number(m_best.best(), 'f', 4)
                                      : QStringLiteral("%1%").arg(100.0 * m_best.best(), 0, 'f', 2))
                             .arg(m_best.bestEpoch() + 1);
        if (auto r = finalize(); !r)
            setFatal(r.error());
        return;
    }
    if (m_scheduler->finished() && request.epoch == m_spec.training.epochs - 1 && !m_finished) {
        if (auto r = finalize(); !r)
            setFatal(r.error());
    }
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

Result<void> Coordinator::finalize()
{
    // The final model, in a form Python loads, and the metrics as CSV.
    if (auto r = m_evalModel->loadFlatWeights(m_core->state().weights); !r)
        return r;
    if (auto r = m_evalModel->save(m_runDir + QStringLiteral("/model.pt")); !r)
        return r;
    QJsonArray mean;
    QJsonArray stddev;
    for (const float v : m_data->normalization.mean)
        mean.append(double(v));
    for (const float v : m_data->normalization.stddev)
        stddev.append(double(v));
    const QJsonObject norm{{QStringLiteral("mean"), mean}, {QStringLiteral("std"), stddev},
                           {QStringLiteral("about"), QStringLiteral("inputs are scaled to [0,1] (images), then "
                                                                    "(x - mean) / std per channel or feature")}};
    if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/normalization.json"), QJsonDocument(norm).toJson()); !r)
        return r;

    auto assimilations = store().assimilations(m_jobId);
    auto evaluations = store().evaluations(m_jobId);
    if (!assimilations || !evaluations)
        return fail(QStringLiteral("cannot read the metrics back from the store"));
    auto details = store().evaluationDetails(m_jobId);
    if (!details)
        return details.takeError();
    auto named = store().evaluationMetrics(m_jobId);
    if (!named)
        return named.takeError();
    // The task's metrics by seq, then name (older stores kept only the top-5 accuracy, in the details).
    std::map<qint64, std::map<QString, double>> further;
    for (const auto &d : *details)
        if (d.top5Accuracy >= 0)
            further[d.seq][QStringLiteral("top5_accuracy")] = d.top5Accuracy;
    for (const auto &m : *named)
        further[m.seq][m.name] = m.value;
    const TaskInfo &task = taskInfo(m_spec.training.task);
    QByteArray csv = "seq,version,epoch,shard,worker,staleness,credit,samples,train_loss,train_seconds,at_ms,test_"
                     + task.scoreKey.toUtf8() + ",test_loss";
    for (const QString &name : task.metrics)
        csv += ",test_" + name.toUtf8();
    csv += '\n';
    std::size_t e = 0;
    for (const auto &a : *assimilations) {
        QString tested = u',' + QString(u',');
        for (qsizetype m = 0; m < task.metrics.size(); ++m)
            tested += u',';
        while (e < evaluations->size() && (*evaluations)[e].seq <= a.seq) {
            if ((*evaluations)[e].seq == a.seq) {
                tested = u',' + QString::number((*evaluations)[e].accuracy, 'f', 5) + u','
                         + QString::number((*evaluations)[e].loss, 'f', 5);
                const auto values = further.find(a.seq);
                for (const QString &name : task.metrics) {
                    tested += u',';
                    if (values != further.end())
                        if (const auto v = values->second.find(name); v != values->second.end())
                            tested += QString::number(v->second, 'g', 6);
                }
            }
            ++e;
        }
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11")
                   .arg(a.seq).arg(a.version).arg(a.epoch).arg(a.shard).arg(a.workerId).arg(a.staleness)
                   .arg(a.credit, 0, 'f', 4).arg(a.samples).arg(a.loss, 0, 'f', 5).arg(a.trainSeconds, 0, 'f', 3)
                   .arg(a.atMs)
                   .toUtf8()
               + tested.toUtf8() + '\n';
    }
    if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/metrics.csv"), csv); !r)
        return r;
    if (!details->empty() && details->back().classes > 0) {
        if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/confusion.csv"),
                                         confusionCsv(details->back(), m_data->test.classNames));
            !r)
            return r;
    }
    if (m_board)
        m_board->flush();
    const qint64 now = m_clock->nowMs();
    if (auto r = store().setJobState(m_jobId, QStringLiteral("finished"), now); !r)
        return r;
    m_finished = true;
    const QString accuracy = m_evaluatedEpoch == m_spec.training.epochs - 1 || !m_stoppedEarly.isEmpty()
                                 ? scoreText(m_spec.training.task, m_lastAccuracy)
                                 : QStringLiteral("test %1 unknown (the final evaluation failed: %2)")
                                       .arg(taskInfo(m_spec.training.task).score, m_lastEvaluationError);
    event(EventKind::JobFinished, 0, 0, 0,
          m_stoppedEarly.isEmpty()
              ? QStringLiteral("%1 epochs, version %2, %3; model saved to %4/model.pt")
                    .arg(m_spec.training.epochs).arg(m_core->version()).arg(accuracy, m_runDir)
              : QStringLiteral("%1; version %2, %3; model saved to %4/model.pt")
                    .arg(m_stoppedEarly).arg(m_core->version()).arg(accuracy, m_runDir));
    if (m_hooks.finished)
        m_hooks.finished();
    return {};
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
