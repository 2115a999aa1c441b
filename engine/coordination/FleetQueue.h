#pragma once
// A fleet's job queue: the jobs submitted to one coordinator (`flotilla submit`), in a SQLite
// file beside its identity (fleet.db), shared by the fleet service that runs them and the
// commands that submit and manage them (`flotilla jobs`). Each job keeps its own run folder
// and store; this file says only which jobs there are, who submitted them, their priority,
// weight and state, and how much of the fleet each has used.
//
// Start order (docs/algorithms.md): priority first; among equal priorities, the submitter
// with the largest fair-share factor F = 2^(-U/S), where U is the submitter's share of the
// fleet's recent usage (worker-seconds, halved every half-life) and S its share of the fleet
// (equal between the submitters that have jobs queued or running); then the oldest. A job
// that was running when the service stopped resumes before any other.
//
// Threads: one FleetQueue per thread; several processes may open the file at once (WAL,
// a busy timeout).

#include "common/Result.h"

#include <QString>

#include <memory>
#include <optional>
#include <vector>

struct sqlite3;

namespace flotilla {

struct QueuedJob
{
    qint64 id = 0;
    QString name;
    QString submitter;
    // Who the submitter is: a user of the coordinator's machine (local), or the name of an
    // operator's or a submitter's certificate (operator, submitter). A certificate named
    // like a local user is not that user.
    QString origin = QStringLiteral("local");
    QString spec; // the job file, JSON, with absolute paths
    QString runDir;
    int priority = 0;
    double weight = 1.0; // its share of the workers while it runs beside others
    // queued, running, paused, finished, failed, cancelled
    QString state = QStringLiteral("queued");
    qint64 submittedMs = 0;
    qint64 startedMs = 0; // the first start; 0 while it never ran
    qint64 endedMs = 0;
    double workerSeconds = 0; // the fleet's workers it held, summed over time
    QString message;
    // What `flotilla jobs` asked of a running job: cancel or pause (the service does it).
    QString wanted;

    bool ended() const;
};

class FleetQueue
{
public:
    static Result<std::unique_ptr<FleetQueue>> open(const QString &path);
    ~FleetQueue();
    FleetQueue(const FleetQueue &) = delete;
    FleetQueue &operator=(const FleetQueue &) = delete;

    // Adds a queued job; its run folder is runsDir/<id>-<name>. Returns the id.
    Result<qint64> submit(QueuedJob job, const QString &runsDir, qint64 nowMs);
    Result<std::vector<QueuedJob>> jobs();
    Result<std::optional<QueuedJob>> job(qint64 id);
    Result<void> setState(qint64 id, const QString &state, const QString &message, qint64 nowMs);
    Result<void> setWanted(qint64 id, const QString &wanted, const QString &message);
    // What the queue says of a job (why a running job gets no workers, say).
    Result<void> setMessage(qint64 id, const QString &message);
    Result<void> setPriority(qint64 id, int priority);
    Result<void> setWeight(qint64 id, double weight);
    Result<void> addWorkerSeconds(qint64 id, double seconds);
    // The queued jobs in the order they are to start (see above).
    Result<std::vector<QueuedJob>> startOrder(qint64 nowMs, qint64 halfLifeMs = qint64(3600) * 1000);
    // The fair-share factor of each submitter with jobs queued or running, for `flotilla jobs`.
    Result<std::vector<std::pair<QString, double>>> fairShare(qint64 nowMs, qint64 halfLifeMs = qint64(3600) * 1000);

private:
    explicit FleetQueue(sqlite3 *db) : m_db(db) { }
    Result<void> exec(const char *sql);
    sqlite3 *m_db = nullptr;
};

} // namespace flotilla
