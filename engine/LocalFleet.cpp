#include "engine/LocalFleet.h"

#include "engine/EngineLog.h"

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
    connect(m_coordinator.get(), &CoordinatorThread::progressed, this,
            [self](const JobProgress &p) { Q_EMIT self->progressed(p, self->workersAlive()); });
    connect(m_coordinator.get(), &CoordinatorThread::leaseSuperseded, this, [self](qint64 workerId, qint64 leaseId) {
        for (auto &w : self->m_workers)
            if (w->workerId() == workerId)
                w->supersede(leaseId);
    });
    connect(m_coordinator.get(), &CoordinatorThread::jobEnded, this, [self](bool ok, const QString &message) {
        self->m_preemptionTimer.stop();
        Q_EMIT self->finished(ok, message);
    });

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
    info.name = QStringLiteral("local-%1").arg(m_nextWorker++);
    info.instanceType = fleet.instanceType;
    info.priceClass = fleet.priceClass;
    auto worker = std::make_unique<LocalWorker>(m_coordinator.get(), m_data, m_spec, info,
                                                fleet.preemption.rejoinDelaySeconds);
    worker->setThreads(threads);
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
        w->stop();
        LocalWorker *raw = w.get();
        // The worker hands in its partial result on its own thread; it is deleted once that
        // thread has ended, without the caller waiting for it.
        connect(w->thread(), &QThread::finished, this, [this, raw] {
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
