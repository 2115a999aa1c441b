#include "CoordinatorService.h"

#include "EngineLog.h"

#include <QMetaObject>

#include <ATen/Parallel.h>

namespace flotilla {

CoordinatorService::CoordinatorService(std::unique_ptr<Coordinator> coordinator)
    : m_coordinator(std::move(coordinator))
{
    qRegisterMetaType<flotilla::JobProgress>();
    qRegisterMetaType<flotilla::EventRecord>();
    qRegisterMetaType<flotilla::AssimilationRecord>();
    qRegisterMetaType<flotilla::EvaluationRecord>();
    qRegisterMetaType<std::vector<flotilla::WorkerStatus>>();
    m_evaluationPool.setMaxThreadCount(1);
    m_thread.setObjectName(QStringLiteral("coordinator"));
    moveToThread(&m_thread);
    connect(&m_thread, &QThread::started, this, &CoordinatorService::start);
    m_thread.start();
}

CoordinatorService::~CoordinatorService()
{
    shutdown();
}

template <typename F>
auto CoordinatorService::blocking(F &&f) -> decltype(f())
{
    using R = decltype(f());
    if (QThread::currentThread() == &m_thread)
        return f();
    if constexpr (std::is_void_v<R>) {
        QMetaObject::invokeMethod(this, std::forward<F>(f), Qt::BlockingQueuedConnection);
    } else {
        std::optional<R> out;
        QMetaObject::invokeMethod(this, [&] { out.emplace(f()); }, Qt::BlockingQueuedConnection);
        return std::move(*out);
    }
}

void CoordinatorService::start()
{
    Coordinator &c = *m_coordinator;
    // The evaluator's model lives on the evaluation pool's single thread.
    auto model = createModel(c.spec().model, c.data()->inputShape, c.data()->numClasses);
    if (model)
        m_evaluationModel = std::move(model).value();

    CoordinatorHooks hooks;
    hooks.evaluate = [this](EvaluationRequest request) {
        const auto data = m_coordinator->data();
        const JobSpec spec = m_coordinator->spec();
        m_evaluationPool.start([this, request = std::move(request), data, spec]() mutable {
            at::set_num_threads(spec.training.threads);
            auto device = request.onCpu ? Result<torch::Device>(torch::Device(torch::kCPU))
                                        : selectDevice(spec.training.device);
            Result<Evaluation> ev = !m_evaluationModel ? Result<Evaluation>(fail(QStringLiteral("no model to evaluate with")))
                                    : !device          ? Result<Evaluation>(device.takeError())
                                                       : evaluate(*m_evaluationModel, request.weights, data->test,
                                                                  *device);
            QMetaObject::invokeMethod(this, [this, request, ev] {
                if (!m_coordinator)
                    return;
                if (!ev) {
                    qCWarning(lcEngine).noquote() << "evaluation failed:" << ev.error();
                    m_coordinator->evaluationFailed(request, ev.error());
                    return;
                }
                m_coordinator->recordEvaluation(request, *ev);
            }, Qt::QueuedConnection);
        });
    };
    hooks.superseded = [this](qint64 workerId, qint64 leaseId) { Q_EMIT leaseSuperseded(workerId, leaseId); };
    hooks.event = [this](const EventRecord &e) { Q_EMIT eventRecorded(e); };
    hooks.assimilated = [this](const AssimilationRecord &a) { Q_EMIT assimilated(a); };
    hooks.evaluated = [this](const EvaluationRecord &e) { Q_EMIT evaluated(e); };
    hooks.finished = [this] {
        Q_EMIT progressed(m_coordinator->progress());
        if (!m_ended) {
            m_ended = true;
            Q_EMIT jobEnded(true, QString());
        }
    };
    c.setHooks(std::move(hooks));

    m_tickTimer = new QTimer(this);
    m_tickTimer->setInterval(250);
    connect(m_tickTimer, &QTimer::timeout, this, &CoordinatorService::onTick);
    m_tickTimer->start();
    if (c.finished() && !m_ended) {
        m_ended = true;
        Q_EMIT jobEnded(true, QString());
    }
}

void CoordinatorService::onTick()
{
    m_coordinator->tick();
    const JobProgress p = m_coordinator->progress();
    Q_EMIT progressed(p);
    if (++m_ticks % 4 == 0)
        Q_EMIT snapshot(p, m_coordinator->workerStatuses());
    if (!m_coordinator->fatalError().isEmpty() && !m_ended) {
        m_ended = true;
        Q_EMIT jobEnded(false, m_coordinator->fatalError());
    }
}

void CoordinatorService::shutdown()
{
    if (!m_thread.isRunning())
        return;
    m_evaluationPool.waitForDone();
    // Destroy the coordinator (its store connection, its timer) on the thread that used it.
    QMetaObject::invokeMethod(this, [this] {
        delete m_tickTimer;
        m_tickTimer = nullptr;
        // Evaluations queued back after the pool drained are dropped with the coordinator.
        m_coordinator.reset();
        m_evaluationModel.reset();
    }, Qt::BlockingQueuedConnection);
    m_thread.quit();
    m_thread.wait();
}

Result<qint64> CoordinatorService::callJoin(const WorkerInfo &info, qint64 knownWorkerId)
{
    return blocking([&] { return m_coordinator ? m_coordinator->workerJoined(info, knownWorkerId)
                                               : Result<qint64>(fail(QStringLiteral("the coordinator has stopped"))); });
}

void CoordinatorService::callLeave(qint64 workerId, const QString &reason)
{
    blocking([&] {
        if (m_coordinator)
            m_coordinator->workerLeft(workerId, reason);
    });
}

std::optional<Assignment> CoordinatorService::callRequest(qint64 workerId)
{
    return blocking([&] { return m_coordinator ? m_coordinator->requestSubtask(workerId) : std::optional<Assignment>{}; });
}

SubmitReply CoordinatorService::callSubmit(qint64 workerId, SubtaskResult result)
{
    return blocking([&] {
        if (!m_coordinator)
            return SubmitReply{SubmitStatus::Rejected, QStringLiteral("the coordinator has stopped"), 0, 0, 0};
        return m_coordinator->submitResult(workerId, std::move(result));
    });
}

void CoordinatorService::callHandBack(qint64 workerId, qint64 leaseId, const QString &reason)
{
    blocking([&] {
        if (m_coordinator)
            m_coordinator->handBack(workerId, leaseId, reason);
    });
}

void CoordinatorService::callHeartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 planned)
{
    blocking([&] {
        if (m_coordinator)
            m_coordinator->heartbeat(workerId, leaseId, sampleSteps, planned);
    });
}

void CoordinatorService::callRecordEvent(const QString &kind, qint64 workerId, const QString &detail)
{
    blocking([&] {
        if (m_coordinator)
            m_coordinator->recordEvent(kind, workerId, detail);
    });
}

void CoordinatorService::callReportSpeed(qint64 workerId, double samplesPerSecond)
{
    blocking([&] {
        if (m_coordinator)
            m_coordinator->reportSpeed(workerId, samplesPerSecond);
    });
}

void CoordinatorService::setPausedAsync(bool paused)
{
    QMetaObject::invokeMethod(this, [this, paused] {
        if (m_coordinator)
            m_coordinator->setPaused(paused);
    }, Qt::QueuedConnection);
}

void CoordinatorService::releaseAsync(qint64 workerId, const QString &by)
{
    QMetaObject::invokeMethod(this, [this, workerId, by] {
        if (m_coordinator)
            m_coordinator->releaseWorker(workerId, by);
    }, Qt::QueuedConnection);
}

JobProgress CoordinatorService::callProgress()
{
    return blocking([&] { return m_coordinator ? m_coordinator->progress() : JobProgress{}; });
}

bool CoordinatorService::callFinished()
{
    return blocking([&] { return m_coordinator && m_coordinator->finished(); });
}

void CoordinatorService::withCoordinator(const std::function<void(Coordinator &)> &f)
{
    blocking([&] {
        if (m_coordinator)
            f(*m_coordinator);
    });
}

} // namespace flotilla
