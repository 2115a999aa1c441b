#include "engine/coordination/LocalWorker.h"

#include "common/LogCategories.h"
#include "engine/training/Device.h"
#include "engine/training/Precision.h"
#include "engine/training/WorkerJob.h"

#include <QElapsedTimer>
#include <QMutexLocker>

#include <torch/torch.h>

namespace flotilla {

LocalWorker::LocalWorker(CoordinatorThread *coordinator, std::shared_ptr<const JobData> data, JobSpec spec,
                         WorkerInfo info, double rejoinDelaySeconds)
    : m_coordinator(coordinator), m_data(std::move(data)), m_spec(std::move(spec)), m_info(std::move(info)),
      m_rejoinDelay(rejoinDelaySeconds)
{
    m_info.trusted = true; // a thread of the coordinator's own process
}

LocalWorker::~LocalWorker()
{
    stop();
    wait();
}

void LocalWorker::start()
{
    m_thread.reset(QThread::create([this] { run(); }));
    m_thread->setObjectName(m_info.name);
    m_thread->start();
}

void LocalWorker::stop()
{
    m_stop = true;
    m_cancel = true;
}

void LocalWorker::retire()
{
    m_leave = true;
    stop();
}

void LocalWorker::wait()
{
    if (m_thread)
        m_thread->wait();
}

bool LocalWorker::preempt(bool withNotice)
{
    bool expected = false;
    if (!m_down.compare_exchange_strong(expected, true))
        return false;
    m_killed = !withNotice;
    m_cancel = true;
    return true;
}

void LocalWorker::supersede(qint64 leaseId)
{
    if (m_currentLease.load() == leaseId) {
        m_supersededLease = leaseId;
        m_cancel = true;
    }
}

void LocalWorker::keepAlive()
{
    const qint64 id = m_workerId.load();
    if (id == 0 || m_down.load() || m_stop.load())
        return;
    m_coordinator->heartbeat(id, m_currentLease.load(), m_done.load(), m_planned.load());
}

QString LocalWorker::lastError() const
{
    QMutexLocker lock(&m_errorMutex);
    return m_lastError;
}

bool LocalWorker::sleepFor(double seconds)
{
    QElapsedTimer timer;
    timer.start();
    while (!m_stop && timer.elapsed() < qint64(seconds * 1000.0))
        QThread::msleep(20);
    return !m_stop;
}

void LocalWorker::run()
{
    auto session = WorkerJob::create(m_spec.model, m_data->inputShape, m_data->numClasses, m_spec.training.device);
    if (!session) {
        QMutexLocker lock(&m_errorMutex);
        m_lastError = session.error();
        m_failed = true;
        qCWarning(lcEngine).noquote() << m_info.name << "cannot start:" << m_lastError;
        return;
    }
    if (auto precision = precisionOn(m_spec.training.precision, (*session)->device()); !precision) {
        QMutexLocker lock(&m_errorMutex);
        m_lastError = precision.error();
        m_failed = true;
        qCWarning(lcEngine).noquote() << m_info.name << "cannot start:" << m_lastError;
        return;
    }
    (*session)->setSlowdown(m_slowdown);
    m_info.device = deviceDescription((*session)->device());
    m_info.threads = m_spec.training.threads;
    auto joined = m_rejoinId > 0 ? m_coordinator->callJoin(m_info, m_rejoinId) : m_coordinator->callJoin(m_info);
    if (!joined) {
        QMutexLocker lock(&m_errorMutex);
        m_lastError = joined.error();
        m_failed = !m_stop;
        qCWarning(lcEngine).noquote() << m_info.name << "cannot join:" << m_lastError;
        return;
    }
    m_workerId = *joined;
    const qint64 id = *joined;
    // Results travel compressed as they would over the network, so that a job's accuracy with
    // compression can be tried on one machine.
    const Compression compression = compressionFromName(m_spec.fleet.compression).value_or(Compression::None);
    UpdateEncoder encoder;
    const qint64 parameters = (*session)->layout().segments().parameterEnd;
    const auto resultOf = [&](qint64 leaseId, const TrainOutcome &outcome, const torch::Tensor &base) {
        return SubtaskResult::fromOutcome(leaseId, outcome, compression, encoder, base, parameters);
    };

    while (!m_stop) {
        if (m_down) {
            if (!m_killed)
                m_coordinator->leave(id, QStringLiteral("preemption notice: the worker handed in its work and left"));
            if (!sleepFor(m_rejoinDelay))
                break;
            // A process that was killed comes back without its optimizer's state.
            if (m_killed)
                (*session)->forgetOptimizer();
            m_killed = false;
            m_cancel = false;
            m_down = false;
            if (auto back = m_coordinator->callJoin(m_info, id); !back)
                qCWarning(lcEngine).noquote() << m_info.name << "cannot rejoin:" << back.error();
            continue;
        }
        std::optional<Assignment> a = m_coordinator->callRequest(id);
        if (!a) {
            sleepFor(0.05);
            continue;
        }
        m_currentLease = a->leaseId;

        const Dataset shard = m_data->train.select(m_data->plan.shard(a->shard));
        SubtaskWork work{a->shard, a->epoch, a->begin, a->end, m_spec.training.seed, a->config};
        if (m_threads.load() > 0)
            work.config.threads = m_threads.load();
        QElapsedTimer beat;
        beat.start();
        const qint64 leaseId = a->leaseId;
        m_done = 0;
        m_planned = 0;
        auto outcome = (*session)->train(shard, work, a->weights, &m_cancel, [&](std::int64_t done, std::int64_t planned) {
            m_done = done;
            m_planned = planned;
            if (beat.elapsed() >= 250) {
                beat.restart();
                m_coordinator->heartbeat(id, leaseId, done, planned);
            }
        });
        // Let go of the snapshot, unless the result is sent as a change from it.
        const torch::Tensor base = compression == Compression::None ? torch::Tensor() : a->weights;
        a.reset();
        m_currentLease = 0;

        if (m_stop) {
            // Stopping is a notice too: what was trained is handed in, the rest handed back.
            if (outcome && outcome->covered > 0)
                m_coordinator->callSubmit(id, resultOf(leaseId, *outcome, base));
            else
                m_coordinator->handBack(id, leaseId, QStringLiteral("the worker is shutting down"));
            break;
        }
        if (m_killed) // a simulated SIGKILL: nothing reaches the coordinator
            continue;
        if (m_supersededLease.exchange(0) == leaseId) {
            if (!m_down)
                m_cancel = false;
            m_coordinator->handBack(id, leaseId, QStringLiteral("another worker's result completed the subtask"));
            continue;
        }
        if (!outcome) {
            qCWarning(lcEngine).noquote() << m_info.name << "subtask failed:" << outcome.error();
            {
                QMutexLocker lock(&m_errorMutex);
                m_lastError = outcome.error();
            }
            m_coordinator->handBack(id, leaseId, outcome.error(), true);
            continue;
        }
        const SubmitReply reply = m_coordinator->callSubmit(id, resultOf(leaseId, *outcome, base));
        if (reply.status == SubmitStatus::Rejected)
            qCWarning(lcEngine).noquote() << m_info.name << "result rejected:" << reply.reason;
    }
    // Switched off: what it trained is handed in (above); it leaves, so that its leases go
    // back now and the job does not count it as online until its heartbeats are missed.
    if (m_leave)
        m_coordinator->leave(id, QStringLiteral("switched off on this machine"));
}

} // namespace flotilla
