#pragma once
// A fleet that outlives its jobs: it runs the jobs of its queue (FleetQueue, fed by `flotilla
// submit`), several at once, each in its own run folder with its own coordinator, on one
// network endpoint whose workers stay connected between jobs (FleetServer in fleet mode).
// It starts the queued jobs in the queue's order while fewer than `concurrentJobs` run,
// gives each running job its weight's share of the workers, and acts on what `flotilla
// jobs` asks of a running job (cancel, pause). It answers the queue commands of people
// attached from elsewhere (submit, list, manage, download: FleetRequests says who may). Killed at any moment, it resumes at its next
// start every job that was running, from its run folder, before any other.
//
// Threads: lives on the thread that made it (the main thread of `flotilla serve`); it reads
// and writes the queue there, about twice a second. Loading a job's data happens there too.

#include "engine/coordination/FleetQueue.h"
#include "engine/coordination/LocalFleet.h"
#include "server/NetworkHost.h"

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

#include <map>
#include <memory>
#include <set>

namespace flotilla {

class FleetService : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString fleetDir; // the identity folder: models/, data/ and runs/ of submitted jobs
        int concurrentJobs = 2;
        int pollMs = 500;
        qint64 fairShareHalfLifeMs = qint64(3600) * 1000;
    };

    FleetService(NetworkHost &network, std::unique_ptr<FleetQueue> queue, Options options, QObject *parent = nullptr);
    ~FleetService() override;

    // Jobs left running by a service that was killed go back to the head of the queue, and
    // the queue is read from now on.
    Result<void> start();
    // Stops the running jobs; they stay first in the queue and resume at the next start.
    void stop();
    int running() const { return int(m_running.size()); }
    static QString keyOf(qint64 id) { return QStringLiteral("job-%1").arg(id); }

Q_SIGNALS:
    // A job of the queue changed state (running, paused, finished, failed, cancelled).
    void jobChanged(qint64 id, const QString &name, const QString &state, const QString &message);
    // Once a second per running job.
    void jobProgressed(qint64 id, const flotilla::JobProgress &progress);

private:
    struct Running
    {
        QString name;
        std::unique_ptr<LocalFleet> fleet;
        double weight = 1.0;
        bool ending = false;
        QString message;  // what the queue says of it while it runs
        QString unmet;    // why no connected worker may train it (its requirements), or empty
    };

    void tick();
    void onQueueCommand(qint64 connectionId, const QString &name, bool administrator, const QCborMap &header,
                        const QByteArray &payload);
    void startJob(const QueuedJob &job);
    void endJob(qint64 id, const QString &state, const QString &message);
    void record(qint64 id, const QString &name, const QString &state, const QString &message);
    // Writes a job's state to the queue; one that cannot be written (the file busy, the disk
    // full) is kept and written again at each tick until it is.
    void writeState(qint64 id, const QString &state, const QString &message);

    NetworkHost &m_network;
    std::unique_ptr<FleetQueue> m_queue;
    Options m_options;
    QTimer m_poll;
    QElapsedTimer m_sinceTick;
    std::map<qint64, Running> m_running;
    std::set<qint64> m_busy; // connections with a submission or download being handled
    std::map<qint64, std::pair<QString, QString>> m_unwritten; // states not written yet: state, message
    bool m_stopping = false;
};

} // namespace flotilla
