#pragma once
// Runs a Coordinator on a thread of its own and gives other threads a thread-safe way to reach
// it. Progress, events and the end of the job are announced with queued signals.
//
// Threads: this object and its Coordinator live on the coordinator's thread. The network
// and UI threads make only asynchronous calls: join(), request() and submit() return a
// ticket, and the answer comes back as the matching *Answered signal; the others answer
// nothing. Local workers' threads may use the blocking call*() forms, which wait for the same
// answer. Never call a blocking form from the coordinator's own thread.
//
// Group commit: every call runs inside the coordinator's open group of writes (see
// Coordinator); the group ends with one checkpoint and one commit, and only then are the
// answers given. It ends as soon as no other call is waiting, so an idle coordinator answers
// each call after its own commit; calls that arrive while one runs (a slow disk, a busy
// fleet) join the group and share its commit. A heartbeat never waits for the disk.

#include "engine/coordination/Coordinator.h"

#include <QElapsedTimer>
#include <QMutex>
#include <QObject>
#include <QThread>
#include <QThreadPool>
#include <QTimer>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace flotilla {

class CoordinatorThread : public QObject
{
    Q_OBJECT

public:
    // Takes the coordinator and moves itself to a new thread, which it starts.
    explicit CoordinatorThread(std::unique_ptr<Coordinator> coordinator);
    ~CoordinatorThread() override;

    // jobEnded for a subscriber that may come after it: connects `react`, and where the job
    // already ended, calls it with how it ended. Either way it runs once, queued on context's
    // thread. (A resumed job whose epochs were all trained can finish while its service is
    // still setting it up; a plain connect would miss that, and its queue would say "running"
    // for ever.) Any thread.
    QMetaObject::Connection whenEnded(QObject *context, std::function<void(bool ok, const QString &message)> react);

    // Asynchronous: each returns a ticket that its answer signal carries.
    qint64 join(const WorkerInfo &info, qint64 knownWorkerId = 0);
    // samplesPerSecond: the worker's own measurement, used until results measure it.
    qint64 request(qint64 workerId, double samplesPerSecond = 0.0);
    qint64 submit(qint64 workerId, SubtaskResult result);
    void leave(qint64 workerId, const QString &reason);
    void handBack(qint64 workerId, qint64 leaseId, const QString &reason, bool failed = false);
    void heartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 planned);
    void recordEvent(EventKind kind, qint64 workerId, const QString &detail);
    void countWeightsSent(qint64 bytes, bool whole, bool anchored);
    void setPausedAsync(bool paused);
    // Lifts a worker's quarantine, as the operator in the control center decided.
    void releaseAsync(qint64 workerId, const QString &by);
    // Quarantines a worker for its connections' conduct (Coordinator::quarantineForConduct).
    void quarantineAsync(qint64 workerId, const QString &reason);

    // Blocking, for local workers' threads and set-up code. callRequest() and callSubmit()
    // answer as soon as the coordinator has decided, without waiting for the group's commit:
    // a local worker's memory dies with this process, so it can tell nobody outside about a
    // lease or an assimilation that a crash would undo (its next subtask overlaps the fsync,
    // instead of waiting for it). Remote workers are answered only after the commit.
    Result<qint64> callJoin(const WorkerInfo &info, qint64 knownWorkerId = 0);
    std::optional<Assignment> callRequest(qint64 workerId);
    SubmitReply callSubmit(qint64 workerId, SubtaskResult result);
    JobProgress callProgress();
    // Runs f on the coordinator's thread with the coordinator and waits for it.
    void withCoordinator(const std::function<void(Coordinator &)> &f);

    // Stops the timers and the thread; the coordinator is destroyed on its own thread.
    void shutdown();

Q_SIGNALS:
    // error is empty when the worker joined.
    void joinAnswered(qint64 ticket, qint64 workerId, const QString &error);
    // No assignment: nothing to do now; finished says whether the job is over.
    // dismissed: no assignment, and none will come (fleet.dismiss_idle): the worker is to stop.
    // roundFull: no assignment because the round (aggregation.rounds) is full: there will be
    // one when it folds, which an assimilated() signal tells.
    void requestAnswered(qint64 ticket, const std::optional<flotilla::Assignment> &assignment, bool finished,
                         bool dismissed, bool roundFull);
    void submitAnswered(qint64 ticket, const flotilla::SubmitReply &reply);

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
    struct RequestAnswer
    {
        std::optional<Assignment> assignment;
        bool finished = false;
        bool dismissed = false;
        bool roundFull = false;
    };
    // Queues op on the coordinator's thread, inside the open group; deliver gets op's answer
    // once the group ended (or what lost() makes of the reason when it could not be made
    // durable, or the coordinator stopped). early: at once, before the group's commit (see
    // callRequest()).
    template <typename R, typename Op, typename Lost>
    void queue(Op op, Lost lost, std::function<void(R)> deliver, bool early = false);
    // Queues op on the coordinator's thread; grouped: inside the open group.
    void post(std::function<void(Coordinator &)> op, bool grouped = true);
    void openGroup();
    void endGroup();
    // Ends the open group at once when no other call is waiting to join it.
    void endGroupIfIdle();
    void start();
    void onTick();
    // Logs how long heartbeats waited in the coordinator's queue since the last report.
    void reportHeartbeatWaits();

    std::unique_ptr<Coordinator> m_coordinator;
    QThread m_thread;
    QThreadPool m_evaluationPool; // one thread: evaluations run one after another
    std::unique_ptr<Model> m_evaluationModel;
    QTimer *m_tickTimer = nullptr;
    int m_ticks = 0;
    // Gaps between ticks longer than this (or than a quarter of the heartbeat timeout) are
    // stalls of the coordinator's own (Coordinator::absorbStall).
    static constexpr qint64 kStallMs = 3000;
    QElapsedTimer m_tickClock;
    qint64 m_lastTickWallMs = 0;
    // How the job ended, once it has: written on the coordinator's thread while jobEnded is
    // emitted, both under the lock, so that whenEnded() sees either the signal or this.
    void announceEnd(bool ok, const QString &message);
    mutable QMutex m_endLock;
    std::optional<std::pair<bool, QString>> m_end;
    bool m_ended = false; // coordinator's thread
    bool m_closing = false; // shutdown() began: no evaluation starts (coordinator's thread)
    std::atomic<qint64> m_nextTicket{1};
    bool m_groupOpen = false;
    bool m_groupEndPosted = false;
    std::atomic<int> m_waiting{0}; // calls posted to the coordinator's thread and not yet run
    std::vector<std::function<void(const QString &failure)>> m_deliveries;
    std::vector<float> m_heartbeatWaits; // ms
};

} // namespace flotilla

Q_DECLARE_METATYPE(flotilla::JobProgress)
Q_DECLARE_METATYPE(std::vector<flotilla::WorkerStatus>)
Q_DECLARE_METATYPE(flotilla::SubmitReply)
Q_DECLARE_METATYPE(std::optional<flotilla::Assignment>)
