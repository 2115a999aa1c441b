#include "engine/coordination/CoordinatorThread.h"

#include "common/LogCategories.h"
#include "common/ProcessSetup.h"
#include "engine/training/Device.h"

#include <QDateTime>
#include <QMetaObject>

#include <algorithm>
#include <chrono>
#include <future>

#include <ATen/Parallel.h>

namespace flotilla {

CoordinatorThread::CoordinatorThread(std::unique_ptr<Coordinator> coordinator)
    : m_coordinator(std::move(coordinator))
{
    qRegisterMetaType<flotilla::JobProgress>();
    qRegisterMetaType<flotilla::EventRecord>();
    qRegisterMetaType<flotilla::AssimilationRecord>();
    qRegisterMetaType<flotilla::EvaluationRecord>();
    qRegisterMetaType<std::vector<flotilla::WorkerStatus>>();
    qRegisterMetaType<flotilla::SubmitReply>();
    qRegisterMetaType<std::optional<flotilla::Assignment>>();
    m_evaluationPool.setMaxThreadCount(1);
    m_thread.setObjectName(QStringLiteral("coordinator"));
    moveToThread(&m_thread);
    connect(&m_thread, &QThread::started, this, &CoordinatorThread::start);
    m_thread.start();
}

CoordinatorThread::~CoordinatorThread()
{
    shutdown();
}

void CoordinatorThread::openGroup()
{
    if (!m_groupEndPosted) {
        // Runs after every call queued so far: they share the group.
        m_groupEndPosted = true;
        QMetaObject::invokeMethod(this, &CoordinatorThread::endGroup, Qt::QueuedConnection);
    }
    if (!m_groupOpen && m_coordinator && m_coordinator->beginGroup())
        m_groupOpen = true;
}

void CoordinatorThread::endGroup()
{
    m_groupEndPosted = false;
    QString failure;
    if (m_groupOpen) {
        m_groupOpen = false;
        if (auto r = m_coordinator->endGroup(); !r)
            failure = r.error();
    }
    if (!m_coordinator)
        failure = QStringLiteral("the coordinator has stopped");
    auto deliveries = std::move(m_deliveries);
    m_deliveries.clear();
    for (auto &deliver : deliveries)
        deliver(failure);
}

void CoordinatorThread::endGroupIfIdle()
{
    // Nothing else is queued: waiting for the posted end would only delay this call's answer
    // by a trip through the event loop. Under load, calls queue up and share the group.
    if (m_waiting.load() == 0 && (m_groupOpen || !m_deliveries.empty()))
        endGroup();
}

template <typename R, typename Op, typename Lost>
void CoordinatorThread::queue(Op op, Lost lost, std::function<void(R)> deliver, bool early)
{
    ++m_waiting;
    QMetaObject::invokeMethod(this, [this, op = std::move(op), lost, deliver = std::move(deliver), early]() mutable {
        --m_waiting;
        openGroup();
        std::optional<R> answer;
        if (m_coordinator)
            answer.emplace(op(*m_coordinator));
        if (early && answer) {
            deliver(std::move(*answer));
            endGroupIfIdle();
            return;
        }
        m_deliveries.push_back([answer = std::move(answer), lost, deliver](const QString &failure) mutable {
            deliver(answer && failure.isEmpty() ? std::move(*answer) : lost(failure));
        });
        endGroupIfIdle();
    }, Qt::QueuedConnection);
}

void CoordinatorThread::post(std::function<void(Coordinator &)> op, bool grouped)
{
    ++m_waiting;
    QMetaObject::invokeMethod(this, [this, op = std::move(op), grouped] {
        --m_waiting;
        if (grouped)
            openGroup();
        if (m_coordinator)
            op(*m_coordinator);
        endGroupIfIdle();
    }, Qt::QueuedConnection);
}

namespace {

Result<qint64> joinLost(const QString &why)
{
    return fail(why);
}

SubmitReply submitLost(const QString &why)
{
    return SubmitReply{SubmitStatus::Rejected, QStringLiteral("the coordinator could not record it: %1").arg(why), 0, 0, 0};
}

// Waits for an answer given on another thread.
template <typename R>
struct Awaited
{
    std::shared_ptr<std::promise<R>> promise = std::make_shared<std::promise<R>>();
    std::function<void(R)> deliver() const
    {
        return [p = promise](R r) { p->set_value(std::move(r)); };
    }
    R get() { return promise->get_future().get(); }
};

} // namespace

void CoordinatorThread::start()
{
    Coordinator &c = *m_coordinator;
    // The evaluator's model lives on the evaluation pool's single thread.
    auto model = createModel(c.spec().model, c.data()->inputShape, c.data()->numClasses);
    if (model)
        m_evaluationModel = std::move(model).value();

    CoordinatorHooks hooks;
    hooks.evaluate = [this](EvaluationRequest request) {
        if (m_closing)
            return; // shutting down: a resumed job asks for it again
        const auto data = m_coordinator->data();
        const JobSpec spec = m_coordinator->spec();
        m_evaluationPool.start([this, request = std::move(request), data, spec]() mutable {
            at::set_num_threads(spec.training.threads);
            // Evaluation is the coordinator's heaviest work; it must not take CPU from workers
            // on the same machine (the control center's own, a benchmark's).
            yieldCpuToOtherWork();
            nameThisThread("evaluation");
            auto device = request.onCpu ? Result<torch::Device>(torch::Device(torch::kCPU))
                                        : selectDevice(spec.training.device);
            Result<Evaluation> ev = !m_evaluationModel ? Result<Evaluation>(fail(QStringLiteral("no model to evaluate with")))
                                    : !device          ? Result<Evaluation>(device.takeError())
                                                       : evaluate(*m_evaluationModel, request.weights, data->test,
                                                                  *device, taskLoss(spec.training));
            ++m_waiting;
            QMetaObject::invokeMethod(this, [this, request, ev] {
                --m_waiting;
                if (!m_coordinator)
                    return;
                openGroup();
                if (!ev) {
                    qCWarning(lcEngine).noquote() << "evaluation failed:" << ev.error();
                    m_coordinator->evaluationFailed(request, ev.error());
                } else {
                    m_coordinator->recordEvaluation(request, *ev);
                }
                endGroupIfIdle();
            }, Qt::QueuedConnection);
        });
    };
    hooks.superseded = [this](qint64 workerId, qint64 leaseId) { Q_EMIT leaseSuperseded(workerId, leaseId); };
    hooks.event = [this](const EventRecord &e) { Q_EMIT eventRecorded(e); };
    hooks.assimilated = [this](const AssimilationRecord &a) { Q_EMIT assimilated(a); };
    hooks.evaluated = [this](const EvaluationRecord &e) { Q_EMIT evaluated(e); };
    hooks.finished = [this] {
        Q_EMIT progressed(m_coordinator->progress());
        announceEnd(true, QString());
    };
    c.setHooks(std::move(hooks));

    m_tickTimer = new QTimer(this);
    m_tickTimer->setInterval(250);
    connect(m_tickTimer, &QTimer::timeout, this, &CoordinatorThread::onTick);
    m_tickTimer->start();
    // The first tick measures its gap too: a process stopped within its first 250 ms (a
    // worker can be two assimilations in by then) was a stall nobody noticed.
    m_tickClock.start();
    m_lastTickWallMs = QDateTime::currentMSecsSinceEpoch();
    if (c.finished())
        announceEnd(true, QString());
}

void CoordinatorThread::announceEnd(bool ok, const QString &message)
{
    if (m_ended)
        return;
    m_ended = true;
    const QMutexLocker lock(&m_endLock);
    m_end.emplace(ok, message);
    Q_EMIT jobEnded(ok, message);
}

QMetaObject::Connection CoordinatorThread::whenEnded(QObject *context,
                                                     std::function<void(bool ok, const QString &message)> react)
{
    const QMutexLocker lock(&m_endLock);
    if (m_end) {
        QMetaObject::invokeMethod(context, [react = std::move(react), end = *m_end] { react(end.first, end.second); },
                                  Qt::QueuedConnection);
        return {};
    }
    return connect(this, &CoordinatorThread::jobEnded, context, std::move(react), Qt::QueuedConnection);
}

void CoordinatorThread::onTick()
{
    openGroup();
    // Ticks come every 250 ms. A longer gap on the steady clock means this thread did not run
    // (the process was stopped, the machine overloaded); on the wall clock, also a suspended
    // machine or a clock set forward. Either way the workers were not silent by choice.
    const qint64 wallMs = QDateTime::currentMSecsSinceEpoch();
    if (m_tickClock.isValid()) {
        const qint64 gap = std::max(m_tickClock.elapsed(), wallMs - m_lastTickWallMs);
        const qint64 timeoutMs = qint64(m_coordinator->spec().fleet.heartbeatTimeoutSeconds * 1000.0);
        if (gap > std::max<qint64>(kStallMs, timeoutMs / 4))
            m_coordinator->absorbStall(gap);
    }
    m_tickClock.start();
    m_lastTickWallMs = wallMs;
    m_coordinator->tick();
    endGroupIfIdle();
    const JobProgress p = m_coordinator->progress();
    Q_EMIT progressed(p);
    if (++m_ticks % 4 == 0)
        Q_EMIT snapshot(p, m_coordinator->workerStatuses());
    if (m_ticks % 240 == 0) // once a minute
        reportHeartbeatWaits();
    if (!m_coordinator->fatalError().isEmpty())
        announceEnd(false, m_coordinator->fatalError());
}

void CoordinatorThread::shutdown()
{
    if (!m_thread.isRunning())
        return;
    // First, on the coordinator's thread, after the calls queued before this one (a result
    // among them may just have started an evaluation): no tick and no new evaluation from here on.
    QMetaObject::invokeMethod(this, [this] {
        m_closing = true;
        delete m_tickTimer;
        m_tickTimer = nullptr;
    }, Qt::BlockingQueuedConnection);
    // Then the evaluation running now, if any, finishes with the model it uses.
    m_evaluationPool.waitForDone();
    // Destroy the coordinator (its store connection) and the evaluation model on the thread
    // that used them, after the open group is committed and answered.
    QMetaObject::invokeMethod(this, [this] {
        endGroup();
        reportHeartbeatWaits();
        // Evaluations queued back after the pool drained are dropped with the coordinator.
        m_coordinator.reset();
        m_evaluationModel.reset();
    }, Qt::BlockingQueuedConnection);
    m_thread.quit();
    m_thread.wait();
}

qint64 CoordinatorThread::join(const WorkerInfo &info, qint64 knownWorkerId)
{
    const qint64 ticket = m_nextTicket++;
    queue<Result<qint64>>([info, knownWorkerId](Coordinator &c) { return c.workerJoined(info, knownWorkerId); },
                          joinLost, [this, ticket](Result<qint64> joined) {
                              Q_EMIT joinAnswered(ticket, joined ? *joined : 0, joined ? QString() : joined.error());
                          });
    return ticket;
}

qint64 CoordinatorThread::request(qint64 workerId, double samplesPerSecond)
{
    const qint64 ticket = m_nextTicket++;
    queue<RequestAnswer>(
        [workerId, samplesPerSecond](Coordinator &c) {
            c.reportSpeed(workerId, samplesPerSecond);
            auto assignment = c.requestSubtask(workerId);
            const bool dismissed = !assignment && c.dismissesIdle();
            const bool roundFull = !assignment && c.roundFull();
            return RequestAnswer{std::move(assignment), c.finished(), dismissed, roundFull};
        },
        [](const QString &) { return RequestAnswer{}; },
        [this, ticket](RequestAnswer a) {
            Q_EMIT requestAnswered(ticket, a.assignment, a.finished, a.dismissed, a.roundFull);
        });
    return ticket;
}

qint64 CoordinatorThread::submit(qint64 workerId, SubtaskResult result)
{
    const qint64 ticket = m_nextTicket++;
    auto shared = std::make_shared<SubtaskResult>(std::move(result));
    queue<SubmitReply>([workerId, shared](Coordinator &c) { return c.submitResult(workerId, std::move(*shared)); },
                       submitLost, [this, ticket](SubmitReply r) { Q_EMIT submitAnswered(ticket, r); });
    return ticket;
}

void CoordinatorThread::leave(qint64 workerId, const QString &reason)
{
    post([workerId, reason](Coordinator &c) { c.workerLeft(workerId, reason); });
}

void CoordinatorThread::handBack(qint64 workerId, qint64 leaseId, const QString &reason, bool failed)
{
    post([workerId, leaseId, reason, failed](Coordinator &c) { c.handBack(workerId, leaseId, reason, failed); });
}

void CoordinatorThread::heartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 planned)
{
    // Writes nothing: it opens no group. How long it waited in the queue is kept for the log.
    const auto queued = std::chrono::steady_clock::now();
    post([=](Coordinator &c) {
        c.heartbeat(workerId, leaseId, sampleSteps, planned);
        m_heartbeatWaits.push_back(
            float(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - queued).count()));
    }, false);
}

void CoordinatorThread::reportHeartbeatWaits()
{
    if (m_heartbeatWaits.empty())
        return;
    std::vector<float> w = std::move(m_heartbeatWaits);
    m_heartbeatWaits.clear();
    std::sort(w.begin(), w.end());
    const auto at = [&](double q) { return w[std::min(w.size() - 1, std::size_t(q * double(w.size())))]; };
    qCInfo(lcEngine).noquote() << QStringLiteral("%1 heartbeats waited for the coordinator's thread: p50 %2 ms, p99 %3 ms, "
                                                 "max %4 ms")
                                      .arg(w.size())
                                      .arg(double(at(0.5)), 0, 'f', 2)
                                      .arg(double(at(0.99)), 0, 'f', 2)
                                      .arg(double(w.back()), 0, 'f', 2);
}

void CoordinatorThread::recordEvent(EventKind kind, qint64 workerId, const QString &detail)
{
    post([kind, workerId, detail](Coordinator &c) { c.recordEvent(kind, workerId, detail); });
}

void CoordinatorThread::countWeightsSent(qint64 bytes, bool whole, bool anchored)
{
    post([=](Coordinator &c) { c.countWeightsSent(bytes, whole, anchored); }, false); // writes nothing
}

void CoordinatorThread::setPausedAsync(bool paused)
{
    post([paused](Coordinator &c) { c.setPaused(paused); });
}

void CoordinatorThread::releaseAsync(qint64 workerId, const QString &by)
{
    post([workerId, by](Coordinator &c) { c.releaseWorker(workerId, by); });
}

void CoordinatorThread::quarantineAsync(qint64 workerId, const QString &reason)
{
    post([workerId, reason](Coordinator &c) { c.quarantineForConduct(workerId, reason); });
}

Result<qint64> CoordinatorThread::callJoin(const WorkerInfo &info, qint64 knownWorkerId)
{
    Awaited<Result<qint64>> answer;
    queue<Result<qint64>>([info, knownWorkerId](Coordinator &c) { return c.workerJoined(info, knownWorkerId); },
                          joinLost, answer.deliver());
    return answer.get();
}

std::optional<Assignment> CoordinatorThread::callRequest(qint64 workerId)
{
    Awaited<std::optional<Assignment>> answer;
    queue<std::optional<Assignment>>([workerId](Coordinator &c) { return c.requestSubtask(workerId); },
                                     [](const QString &) { return std::optional<Assignment>{}; }, answer.deliver(),
                                     true);
    return answer.get();
}

SubmitReply CoordinatorThread::callSubmit(qint64 workerId, SubtaskResult result)
{
    Awaited<SubmitReply> answer;
    auto shared = std::make_shared<SubtaskResult>(std::move(result));
    queue<SubmitReply>([workerId, shared](Coordinator &c) { return c.submitResult(workerId, std::move(*shared)); },
                       submitLost, answer.deliver(), true);
    return answer.get();
}

JobProgress CoordinatorThread::callProgress()
{
    JobProgress out;
    withCoordinator([&](Coordinator &c) { out = c.progress(); });
    return out;
}

void CoordinatorThread::withCoordinator(const std::function<void(Coordinator &)> &f)
{
    const auto run = [&] {
        if (m_coordinator)
            f(*m_coordinator);
    };
    if (QThread::currentThread() == &m_thread)
        run();
    else
        QMetaObject::invokeMethod(this, run, Qt::BlockingQueuedConnection);
}

} // namespace flotilla
