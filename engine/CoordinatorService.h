#pragma once
// Runs a Coordinator on a thread of its own and gives other threads a blocking, thread-safe
// way to reach it (local workers today; the network endpoint calls it the same way).
// Progress, events and the end of the job are announced with queued signals.
//
// Threads: the service object and its Coordinator live on the service's thread; the public
// call*() methods may be called from any other thread and block until the coordinator's
// thread has answered. Never call them from the service's own thread.

#include "Coordinator.h"

#include <QObject>
#include <QThread>
#include <QThreadPool>
#include <QTimer>

#include <functional>
#include <memory>

namespace flotilla {

class CoordinatorService : public QObject
{
    Q_OBJECT

public:
    // Takes the coordinator and moves itself to a new thread, which it starts.
    explicit CoordinatorService(std::unique_ptr<Coordinator> coordinator);
    ~CoordinatorService() override;

    Result<qint64> callJoin(const WorkerInfo &info, qint64 knownWorkerId = 0);
    void callLeave(qint64 workerId, const QString &reason);
    std::optional<Assignment> callRequest(qint64 workerId);
    SubmitReply callSubmit(qint64 workerId, SubtaskResult result);
    void callHandBack(qint64 workerId, qint64 leaseId, const QString &reason);
    void callHeartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 planned);
    void callRecordEvent(const QString &kind, qint64 workerId, const QString &detail);
    void callReportSpeed(qint64 workerId, double samplesPerSecond);
    JobProgress callProgress();
    // Whether the job is over; cheap (progress() also sums the cost ledger in the store).
    bool callFinished();

    // Runs f on the service's thread with the coordinator and waits for it.
    void withCoordinator(const std::function<void(Coordinator &)> &f);

    // Stops the timers and the thread; the coordinator is destroyed on its own thread.
    void shutdown();

    // Asynchronous, for the UI thread: nothing waits.
    void setPausedAsync(bool paused);
    // Lifts a worker's quarantine, as the operator in the control center decided.
    void releaseAsync(qint64 workerId, const QString &by);

Q_SIGNALS:
    void progressed(const flotilla::JobProgress &progress);
    // Once a second: the job and every worker, for dashboards.
    void snapshot(const flotilla::JobProgress &progress, const std::vector<flotilla::WorkerStatus> &workers);
    void assimilated(const flotilla::AssimilationRecord &record);
    void evaluated(const flotilla::EvaluationRecord &record);
    void eventRecorded(const flotilla::EventRecord &event);
    void leaseSuperseded(qint64 workerId, qint64 leaseId);
    // ok is false when the job stopped on an error (message says which).
    void jobEnded(bool ok, const QString &message);

private:
    template <typename F>
    auto blocking(F &&f) -> decltype(f());
    void start();
    void onTick();

    std::unique_ptr<Coordinator> m_coordinator;
    QThread m_thread;
    QThreadPool m_evaluationPool; // one thread: evaluations run one after another
    std::unique_ptr<Model> m_evaluationModel;
    QTimer *m_tickTimer = nullptr;
    int m_ticks = 0;
    bool m_ended = false;
};

} // namespace flotilla

Q_DECLARE_METATYPE(flotilla::JobProgress)
Q_DECLARE_METATYPE(flotilla::EventRecord)
Q_DECLARE_METATYPE(flotilla::AssimilationRecord)
Q_DECLARE_METATYPE(flotilla::EvaluationRecord)
Q_DECLARE_METATYPE(std::vector<flotilla::WorkerStatus>)
