#pragma once
// A worker that is a thread of this process: it joins the coordinator, asks for subtasks,
// trains them with the local trainer and returns the results. For demos and tests it can
// be preempted: with a notice it stops after the current batch and returns a partial
// result; without one (a simulated SIGKILL) its work is lost. Either way it is down for a
// while, then comes back under the same worker id.
//
// Threads: the worker's own thread runs the loop; stop(), preempt() and supersede() may be
// called from any thread.

#include "engine/coordination/Coordinator.h"
#include "engine/coordination/CoordinatorThread.h"

#include <QMutex>
#include <QThread>

#include <atomic>
#include <memory>

namespace flotilla {

class LocalWorker
{
public:
    LocalWorker(CoordinatorThread *coordinator, std::shared_ptr<const JobData> data, JobSpec spec, WorkerInfo info,
                double rejoinDelaySeconds);
    ~LocalWorker();

    void start();
    void stop();  // hands in what the current subtask trained so far and ends the loop
    // stop(), and the worker leaves the job: switched off on this machine. Its leases go back
    // at once instead of at the heartbeat timeout.
    void retire();
    void wait();
    // Before start(): join as this worker id again (one switched off earlier, now back).
    void setRejoinId(qint64 id) { m_rejoinId = id; }

    // Returns false if the worker is already down.
    bool preempt(bool withNotice);
    // The coordinator no longer needs the result of this lease.
    void supersede(qint64 leaseId);
    // Tells the coordinator this worker is alive, with its progress, unless it is down: the
    // fleet calls it on its own timer, so that a slow batch (a loaded machine, a large model)
    // or a long wait does not make a live worker look gone.
    void keepAlive();
    // The worker's thread ended without being stopped: it could not start or join.
    bool failed() const { return m_failed.load(); }

    bool isDown() const { return m_down.load(); }
    // LibTorch threads for the next subtasks (0: the job's training.threads).
    void setThreads(int threads) { m_threads = threads; }
    // Benchmarks: this worker trains `factor` times slower (WorkerJob::setSlowdown).
    void setSlowdown(double factor) { m_slowdown = factor; }
    QThread *thread() const { return m_thread.get(); }
    qint64 workerId() const { return m_workerId.load(); }
    QString name() const { return m_info.name; }
    QString lastError() const;

private:
    void run();
    bool sleepFor(double seconds); // false if stopped meanwhile

    CoordinatorThread *m_coordinator;
    std::shared_ptr<const JobData> m_data;
    JobSpec m_spec;
    WorkerInfo m_info;
    double m_rejoinDelay;
    std::unique_ptr<QThread> m_thread;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_leave{false};
    qint64 m_rejoinId = 0; // set before start()
    std::atomic<bool> m_cancel{false};
    std::atomic<bool> m_down{false};
    std::atomic<bool> m_killed{false};
    std::atomic<qint64> m_workerId{0};
    std::atomic<qint64> m_currentLease{0};
    std::atomic<qint64> m_supersededLease{0};
    std::atomic<int> m_threads{0};
    std::atomic<qint64> m_done{0};
    std::atomic<qint64> m_planned{0};
    std::atomic<bool> m_failed{false};
    double m_slowdown = 1.0; // set before start()
    mutable QMutex m_errorMutex;
    QString m_lastError;
};

} // namespace flotilla
