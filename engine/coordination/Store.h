#pragma once
// The job store: one SQLite file (WAL mode, synchronous=FULL) holding jobs, workers,
// subtasks, leases, global model states (checkpoint files and their SHA-256), assimilations,
// evaluations, events and the cost ledger. It is the source of truth a job resumes from.
//
// A Store is one SQLite connection and belongs to one thread; another thread that wants to
// read opens its own Store on the same file (WAL lets readers run beside the writer).

#include "common/Result.h"
#include "engine/coordination/Scheduler.h"
#include "job/EventKind.h"
#include "job/Records.h"

#include <QString>

#include <map>
#include <memory>
#include <optional>
#include <vector>

struct sqlite3;

namespace flotilla {

struct JobRecord
{
    qint64 id = 0;
    QString name;
    QString spec; // the job file's JSON
    QString state; // running | finished | failed
    qint64 createdMs = 0;
    qint64 finishedMs = 0;
};

// Workers with no fleet id (the worker threads of the coordinator's own process) are numbered
// from here; a fleet's workers keep the id their certificate was given at enrolment.
constexpr qint64 kLocalWorkerIds = 1000000000;

struct WorkerRecord
{
    qint64 id = 0;
    QString name;
    QString instanceType;
    QString priceClass;
    QString device;
    int threads = 0;
    qint64 joinedMs = 0;
    qint64 lastSeenMs = 0;
    QString state; // online | offline
};

struct StateRecord
{
    qint64 seq = 0;
    qint64 version = 0;
    QString path; // relative to the run directory
    QString sha256;
    qint64 atMs = 0;
};

// What an evaluation found beyond accuracy and loss: top-5 accuracy (-1 with five classes or
// fewer) and the confusion matrix, counts[true class × classes + predicted class].
struct EvaluationDetail
{
    int epoch = 0;
    qint64 seq = 0;
    double top5Accuracy = -1.0;
    int classes = 0;
    std::vector<qint64> confusion;

    // Per class: the share of its test samples predicted right (-1 for a class with none).
    std::vector<double> classAccuracy() const
    {
        std::vector<double> out;
        for (int t = 0; t < classes; ++t) {
            qint64 all = 0;
            for (int p = 0; p < classes; ++p)
                all += confusion[std::size_t(t * classes + p)];
            out.push_back(all > 0 ? double(confusion[std::size_t(t * classes + t)]) / double(all) : -1.0);
        }
        return out;
    }
};

// One of an evaluation's named metrics beyond the score and loss (job/Tasks.h lists each
// task's; a multi-label job adds "f1/<label>" per label).
struct EvaluationMetric
{
    int epoch = 0;
    qint64 seq = 0;
    QString name;
    double value = 0.0;
};

struct LedgerRecord
{
    qint64 workerId = 0;
    qint64 leaseId = 0;
    qint64 atMs = 0;
    QString kind; // useful | wasted
    double seconds = 0.0;
    double costSpot = 0.0;
    double costOnDemand = 0.0;
    double costActual = 0.0;
    qint64 id = 0; // the row's, in the order rows were added
};

struct LedgerTotals
{
    double usefulSeconds = 0.0;
    double wastedSeconds = 0.0;
    double costSpot = 0.0;     // all worker-seconds at spot prices
    double costOnDemand = 0.0; // all worker-seconds at on-demand prices
    double costActual = 0.0;   // what the fleet's price classes actually pay
    double wastedCostActual = 0.0;
    double savingsPercent() const { return costOnDemand > 0 ? 100.0 * (1.0 - costActual / costOnDemand) : 0.0; }
};

// What the coordinator thinks of a worker's results (ResultScreen's verdicts).
struct WorkerTrust
{
    qint64 workerId = 0;
    double trust = 1.0; // 1: nothing against it; halves with each rejected result
    int accepted = 0;
    int rejected = 0;
    bool quarantined = false; // no more leases until an operator releases it
    QString reason;           // why it was quarantined
};

// Something an operator asked of a running coordinator from outside its process.
struct OperatorRequest
{
    qint64 id = 0;
    qint64 atMs = 0;
    QString kind;   // "release": lift a worker's quarantine
    QString worker; // the worker's name
};

class Store
{
public:
    ~Store();
    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;

    static Result<std::unique_ptr<Store>> open(const QString &path);
    QString path() const { return m_path; }

    // All writes of one assimilation go in one transaction.
    Result<void> begin();
    Result<void> commit();
    // A consistent copy of the whole store in a new file (VACUUM INTO): what a submitter
    // downloads while the job may still be writing; it holds the last commit.
    Result<void> copyTo(const QString &path);
    void rollback();

    Result<qint64> createJob(const QString &name, const QString &spec, qint64 nowMs);
    Result<std::optional<JobRecord>> latestJob();
    Result<void> setJobState(qint64 jobId, const QString &state, qint64 nowMs);

    // Under worker.id when it is set (a fleet's worker: the id its certificate has in every
    // job), else under the next id from kLocalWorkerIds up. Returns the id.
    Result<qint64> addWorker(qint64 jobId, const WorkerRecord &worker);
    Result<void> updateWorker(qint64 jobId, const WorkerRecord &worker);
    Result<std::vector<WorkerRecord>> workers(qint64 jobId);

    Result<void> saveChanges(qint64 jobId, const SchedulerChanges &changes);
    Result<std::vector<Subtask>> subtasks(qint64 jobId);
    Result<std::vector<Lease>> leases(qint64 jobId);

    Result<void> addState(qint64 jobId, const StateRecord &state);
    Result<std::optional<StateRecord>> latestState(qint64 jobId);
    Result<std::optional<StateRecord>> state(qint64 jobId, qint64 seq);

    Result<void> addAssimilation(qint64 jobId, const AssimilationRecord &a);
    // From the one after afterSeq on, at most limit of them (-1: all).
    Result<std::vector<AssimilationRecord>> assimilations(qint64 jobId, qint64 afterSeq = -1, int limit = -1);
    Result<void> addEvaluation(qint64 jobId, const EvaluationRecord &e);
    Result<void> addEvaluationDetail(qint64 jobId, const EvaluationDetail &d);
    Result<std::vector<EvaluationDetail>> evaluationDetails(qint64 jobId);
    Result<void> addEvaluationMetrics(qint64 jobId, int epoch, qint64 seq,
                                      const std::vector<std::pair<QString, double>> &metrics);
    // In the order recorded.
    Result<std::vector<EvaluationMetric>> evaluationMetrics(qint64 jobId);
    Result<std::vector<EvaluationRecord>> evaluations(qint64 jobId);
    // The evaluations recorded after the one with row id afterRowId, in the order recorded.
    Result<std::vector<EvaluationRecord>> evaluationsAfter(qint64 jobId, qint64 afterRowId, int limit);
    Result<qint64> addEvent(qint64 jobId, const EventRecord &e);
    Result<std::vector<EventRecord>> events(qint64 jobId, const QString &kind = {});
    Result<std::vector<EventRecord>> events(qint64 jobId, EventKind kind) { return events(jobId, eventName(kind)); }
    // The events after the one with id afterId, at most limit of them.
    Result<std::vector<EventRecord>> eventsAfter(qint64 jobId, qint64 afterId, int limit);
    // When the job last recorded anything (0 if never): a lower bound of when a killed
    // coordinator died.
    Result<qint64> lastEventMs(qint64 jobId);
    Result<void> addLedger(qint64 jobId, const LedgerRecord &l);
    Result<LedgerTotals> ledgerTotals(qint64 jobId);
    Result<std::map<qint64, LedgerTotals>> ledgerByWorker(qint64 jobId);
    // Every ledger entry in order, for charts of cost over time.
    // The rows after the one with id afterId, at most limit of them (-1: all).
    Result<std::vector<LedgerRecord>> ledger(qint64 jobId, qint64 afterId = 0, int limit = -1);

    Result<void> setWorkerTrust(qint64 jobId, const WorkerTrust &trust);
    Result<std::vector<WorkerTrust>> workerTrust(qint64 jobId);
    Result<qint64> addOperatorRequest(qint64 jobId, const QString &kind, const QString &worker, qint64 nowMs);
    Result<std::vector<OperatorRequest>> pendingOperatorRequests(qint64 jobId);
    Result<void> markOperatorRequestDone(qint64 id);

private:
    Store() = default;
    Result<void> exec(const char *sql);
    Result<void> saveChangeRows(qint64 jobId, const SchedulerChanges &changes);
    Result<void> migrate();

    sqlite3 *m_db = nullptr;
    QString m_path;
};

} // namespace flotilla
