#include "engine/coordination/LocalFleet.h"

#include "common/LogCategories.h"
#include "engine/data/JobData.h"
#include "engine/training/Device.h"

#include <algorithm>
#include <cmath>

namespace flotilla {

Result<std::unique_ptr<LocalFleet>> LocalFleet::create(const JobSpec &spec, const QString &runDir, int localWorkers)
{
    static const SystemClock systemClock;
    auto coordinator = Coordinator::open(spec, runDir, &systemClock);
    if (!coordinator)
        return coordinator.takeError();
    std::unique_ptr<LocalFleet> fleet(new LocalFleet);
    fleet->m_spec = (*coordinator)->spec();
    fleet->m_runDir = (*coordinator)->runDir();
    fleet->m_resumed = (*coordinator)->resumed();
    fleet->m_data = (*coordinator)->data();
    fleet->m_localWorkers = localWorkers >= 0 ? localWorkers : fleet->m_spec.fleet.workers;
    fleet->m_random = SplitMix64(mixSeed(fleet->m_spec.training.seed, 0x9EE));
    fleet->m_coordinator = std::make_unique<CoordinatorThread>(std::move(coordinator).value());
    return fleet;
}

LocalFleet::~LocalFleet()
{
    stop();
}

void LocalFleet::start()
{
    LocalFleet *self = this;
    connect(m_coordinator.get(), &CoordinatorThread::progressed, this, [self](const JobProgress &p) {
        Q_EMIT self->progressed(p, self->workersAlive());
        self->checkStall(p);
    });
    connect(m_coordinator.get(), &CoordinatorThread::leaseSuperseded, this, [self](qint64 workerId, qint64 leaseId) {
        for (auto &w : self->m_workers)
            if (w->workerId() == workerId)
                w->supersede(leaseId);
    });
    m_coordinator->whenEnded(this, [self](bool ok, const QString &message) { self->end(ok, message); });
    // A second is well within any heartbeat timeout (at least 1 s, 30 s by default); the
    // workers' own beats between batches carry their progress more often.
    m_keepAlive.setInterval(std::clamp(int(m_spec.fleet.heartbeatTimeoutSeconds * 250.0), 100, 1000));
    connect(&m_keepAlive, &QTimer::timeout, this, [self] {
        for (auto &w : self->m_workers)
            w->keepAlive();
    });
    m_keepAlive.start();

    for (int i = 0; i < m_localWorkers; ++i)
        addWorker(0);
    m_preemptionTimer.setSingleShot(true);
    connect(&m_preemptionTimer, &QTimer::timeout, this, [self] {
        self->preemptOne();
        self->schedulePreemption();
    });
    schedulePreemption();
}

void LocalFleet::addWorker(int threads)
{
    const FleetSpec &fleet = m_spec.fleet;
    WorkerInfo info;
    // A worker switched off and on again comes back under its name and worker id: the lowest
    // index not in use (the first ever is local-1). One still handing in its work as it leaves
    // keeps its name until its thread has ended.
    int index = 1;
    const auto inUse = [this](int i) {
        const QString name = QStringLiteral("local-%1").arg(i);
        for (const auto *list : {&m_workers, &m_retiring})
            for (const auto &w : *list)
                if (w->name() == name)
                    return true;
        return false;
    };
    while (inUse(index))
        ++index;
    info.name = QStringLiteral("local-%1").arg(index);
    info.instanceType = fleet.instanceType;
    info.priceClass = fleet.priceClass;
    // One GPU each, in turn, where the job names several or any ("auto", "cuda").
    JobSpec spec = m_spec;
    spec.training.device = localWorkerDevice(m_spec.training.device, index - 1);
    auto worker = std::make_unique<LocalWorker>(m_coordinator.get(), m_data, std::move(spec), info,
                                                fleet.preemption.rejoinDelaySeconds);
    worker->setThreads(threads);
    if (const auto it = m_retiredIds.find(info.name); it != m_retiredIds.end())
        worker->setRejoinId(it->second);
    if (index == 1 && m_workers.empty() && m_retiredIds.empty()) // the first
        worker->setSlowdown(m_slowWorker);
    worker->start();
    m_workers.push_back(std::move(worker));
}

void LocalFleet::setLocalWorkers(int count, int threads)
{
    if (m_stopped)
        return;
    for (auto &w : m_workers)
        w->setThreads(threads);
    while (int(m_workers.size()) < count)
        addWorker(threads);
    while (int(m_workers.size()) > count) {
        std::unique_ptr<LocalWorker> w = std::move(m_workers.back());
        m_workers.pop_back();
        if (w->workerId() != 0)
            m_retiredIds[w->name()] = w->workerId();
        w->retire();
        LocalWorker *raw = w.get();
        // The worker hands in its partial result on its own thread; it is deleted once that
        // thread has ended, without the caller waiting for it.
        connect(w->thread(), &QThread::finished, this, [this, raw] {
            // One switched off before it had joined joined as it stopped: it comes back as that.
            if (raw->workerId() != 0)
                m_retiredIds.try_emplace(raw->name(), raw->workerId());
            for (auto it = m_retiring.begin(); it != m_retiring.end(); ++it)
                if (it->get() == raw) {
                    m_retiring.erase(it);
                    return;
                }
        });
        m_retiring.push_back(std::move(w));
    }
}

void LocalFleet::schedulePreemption()
{
    const double mean = m_spec.fleet.preemption.meanIntervalSeconds;
    if (mean <= 0 || m_stopped)
        return;
    // Preemptions arrive as a Poisson process: exponential gaps with the given mean.
    const double gap = -mean * std::log(1.0 - m_random.uniform());
    m_preemptionTimer.start(static_cast<int>(std::min(gap, 1e6) * 1000.0));
}

void LocalFleet::preemptOne()
{
    std::vector<LocalWorker *> up;
    for (auto &w : m_workers)
        if (!w->isDown() && w->workerId() != 0)
            up.push_back(w.get());
    if (up.empty())
        return;
    LocalWorker *victim = up[static_cast<std::size_t>(m_random.below(up.size()))];
    const bool notice = m_random.uniform() < m_spec.fleet.preemption.noticeFraction;
    if (!victim->preempt(notice))
        return;
    m_coordinator->recordEvent(EventKind::WorkerPreempted, victim->workerId(),
                               notice ? QStringLiteral("simulated preemption with notice: the worker hands in a "
                                                       "partial result, back in %1 s")
                                            .arg(m_spec.fleet.preemption.rejoinDelaySeconds)
                                      : QStringLiteral("simulated SIGKILL: the subtask's work is lost, back in %1 s")
                                            .arg(m_spec.fleet.preemption.rejoinDelaySeconds));
}

void LocalFleet::end(bool ok, const QString &message)
{
    if (m_ended)
        return;
    m_ended = true;
    m_preemptionTimer.stop();
    m_keepAlive.stop();
    Q_EMIT finished(ok, message);
}

void LocalFleet::checkStall(const JobProgress &p)
{
    if (m_ended || m_stopped || m_workers.empty() || p.finished)
        return;
    // Every worker of this fleet has ended on an error: nothing here will train the job.
    const bool allFailed = std::all_of(m_workers.begin(), m_workers.end(), [](const auto &w) { return w->failed(); });
    if (allFailed && p.workersOnline == 0) {
        end(false, QStringLiteral("no local worker could start: %1").arg(m_workers.front()->lastError()));
        return;
    }
    // Quarantined or failing, every one, and no other (remote) worker connected either.
    if (p.stalledForGood && p.workersOnline <= int(m_workers.size()))
        end(false, p.stalled);
}

int LocalFleet::workersAlive() const
{
    int alive = 0;
    for (const auto &w : m_workers)
        alive += w->isDown() ? 0 : 1;
    return alive;
}

void LocalFleet::stop()
{
    if (m_stopped)
        return;
    m_stopped = true;
    m_preemptionTimer.stop();
    m_keepAlive.stop();
    for (auto &w : m_workers)
        w->stop();
    for (auto &w : m_workers)
        w->wait();
    for (auto &w : m_retiring)
        w->wait();
    m_workers.clear();
    m_retiring.clear();
    if (m_coordinator)
        m_coordinator->shutdown();
}

} // namespace flotilla
