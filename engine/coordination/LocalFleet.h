#pragma once
// A job trained on this machine: the coordinator on its own thread, N local workers on
// theirs, and an optional preemption simulator that knocks workers out at random (with or
// without a notice) and lets them come back after a delay.
//
// Threads: a LocalFleet lives on the thread that created it (the CLI's main thread, the
// GUI's thread); it never blocks that thread on training.

#include "common/Random.h"
#include "engine/coordination/CoordinatorThread.h"
#include "engine/coordination/LocalWorker.h"

#include <QObject>
#include <QTimer>

#include <map>
#include <memory>
#include <vector>

namespace flotilla {

class LocalFleet : public QObject
{
    Q_OBJECT

public:
    // Opens (or resumes) the job in runDir; loads its data; nothing runs yet. localWorkers:
    // how many workers run in this process (-1: the job's fleet.workers; 0: none, when all
    // workers are remote).
    static Result<std::unique_ptr<LocalFleet>> create(const JobSpec &spec, const QString &runDir, int localWorkers = -1);
    ~LocalFleet() override;

    void start();
    // Stops the workers (each hands in what it trained so far) and the coordinator; the job
    // can be resumed later.
    void stop();

    const JobSpec &spec() const { return m_spec; }
    bool resumed() const { return m_resumed; }
    QString runDir() const { return m_runDir; }
    int workersAlive() const;
    // Changes how many workers run in this process, and their LibTorch threads (0: the
    // job's). Workers being removed hand in what they trained and stop in the background.
    void setLocalWorkers(int count, int threads = 0);
    int localWorkers() const { return int(m_workers.size()); }
    // Benchmarks: the first local worker trains `factor` times slower (call before start()).
    void setSlowWorker(double factor) { m_slowWorker = factor; }
    CoordinatorThread *coordinator() { return m_coordinator.get(); }

Q_SIGNALS:
    void progressed(const flotilla::JobProgress &progress, int workersAlive);
    void finished(bool ok, const QString &message);

private:
    LocalFleet() = default;
    void schedulePreemption();
    void preemptOne();
    // Ends the job when none of this fleet's workers can train it (see JobProgress::stalled):
    // nobody here could release a quarantine or fix the job, so waiting would be for ever.
    void checkStall(const JobProgress &progress);
    void end(bool ok, const QString &message);

    JobSpec m_spec;
    QString m_runDir;
    bool m_resumed = false;
    int m_localWorkers = 0;
    std::shared_ptr<const JobData> m_data;
    std::unique_ptr<CoordinatorThread> m_coordinator;
    std::vector<std::unique_ptr<LocalWorker>> m_workers;
    std::vector<std::unique_ptr<LocalWorker>> m_retiring;
    std::map<QString, qint64> m_retiredIds; // worker ids of the local workers switched off, by name
    void addWorker(int threads);
    QTimer m_preemptionTimer{this}; // a child: it moves with the fleet to the owner's thread
    QTimer m_keepAlive{this};       // heartbeats of the workers that are up, whatever they are doing
    bool m_ended = false;
    double m_slowWorker = 1.0;
    SplitMix64 m_random{1};
    bool m_stopped = false;
};

} // namespace flotilla
