#pragma once
// The coordinator of one job: it hands out subtasks under leases, validates and assimilates
// results with the job's aggregation rule, keeps the version counter and the staleness of
// every assimilation, evaluates the global model after each epoch, accounts cost, and
// persists everything so that a killed job resumes where it stopped.
//
// The folding itself (scheduler, rule, seq/version, staleness, credit, speeds, rounds) is the
// Assimilator's, shared with the simulator; the coordinator adds validation, screening,
// redundancy, trust, cost and events, and its Journal makes them durable: the store, the
// checkpoint files (each on disk before the transaction that records it) and the group
// commit (engine/coordination/Journal.h).
//
// Group commit: between beginGroup() and endGroup() every store write joins one transaction
// and endGroup() writes one checkpoint of the latest state and commits. Whatever promises
// durability (a result's Ack, a lease handed to a worker) may be told to its worker only
// after endGroup() succeeded. Outside a group every call is durable when it returns.
//
// It does not know how workers reach it: a worker is anything that joins, asks for a
// subtask and returns a result, be it a thread of this process or a remote process. All
// methods must be called from one thread, the coordinator's owner.

#include "common/Clock.h"
#include "common/Result.h"
#include "engine/coordination/Aggregation.h"
#include "engine/coordination/Assimilator.h"
#include "engine/coordination/BestModel.h"
#include "engine/coordination/Journal.h"
#include "engine/coordination/ResultScreen.h"
#include "engine/coordination/Store.h"
#include "engine/data/JobData.h"
#include "engine/training/Model.h"
#include "engine/training/Trainer.h"
#include "engine/wire/Compression.h"
#include "job/EventKind.h"
#include "job/JobSpec.h"
#include "job/PriceTable.h"

#include <QHash>
#include <QLockFile>
#include <QString>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace flotilla {

class RunBoard;

struct WorkerInfo
{
    QString name;
    QString instanceType;
    QString priceClass;
    QString device = QStringLiteral("cpu");
    int threads = 1;
    double samplesPerSecond = 0.0; // the worker's own measurement, 0 if unknown
    // A worker of the coordinator's own process (a local worker): its results are checked
    // (size, finite values) but never screened out, and it is never quarantined. Remote
    // workers are never trusted, whatever they say.
    bool trusted = false;
};

// Everything a worker needs to run a subtask.
struct Assignment
{
    qint64 leaseId = 0;
    qint64 subtaskId = 0;
    int epoch = 0;
    int shard = 0;
    qint64 begin = 0;
    qint64 end = 0;
    qint64 baseSeq = 0;
    qint64 baseVersion = 0;
    qint64 deadlineMs = 0;
    TrainConfig config;
    torch::Tensor weights; // read-only snapshot of the global model; never modify in place
};

struct SubtaskResult
{
    qint64 leaseId = 0;
    torch::Tensor weights;
    // Or, when the job compresses results: the change from the lease's base weights in that
    // form (Compression.h), which the coordinator decodes against the base it kept.
    Compression encoding = Compression::None;
    QByteArray update;
    qint64 wireBytes = 0; // what the weights took on the way (0: not counted)
    double meanLoss = 0.0;
    qint64 sampleSteps = 0;
    qint64 covered = 0; // leading positions of the subtask trained at least once
    double seconds = 0.0;
    bool partial = false;
    // Set by whoever decoded the result when its weights could not be decoded at all: the
    // coordinator rejects it for this reason (and records it) like any invalid result.
    QString invalidReason;

    static SubtaskResult fromOutcome(qint64 leaseId, const TrainOutcome &outcome);
    // The same, compressed by `encoder` against `base` when `encoding` is not None, rounding
    // the first `rounded` values, the parameters (-1: all; Compression.h).
    static SubtaskResult fromOutcome(qint64 leaseId, const TrainOutcome &outcome, Compression encoding,
                                     UpdateEncoder &encoder, const torch::Tensor &base, qint64 rounded = -1);
};

// Held: kept aside until another worker's result of the same subtask can be compared with it
// (redundancy), or until the aggregation buffer folds it with others; the worker is done with
// it either way.
enum class SubmitStatus { Assimilated, Held, Duplicate, Rejected };

struct SubmitReply
{
    SubmitStatus status = SubmitStatus::Rejected;
    QString reason;
    qint64 seq = 0;
    qint64 version = 0;
    qint64 staleness = 0;
};

struct JobProgress
{
    QString name;
    int epochsDone = 0;
    int epochs = 0;
    qint64 seq = 0;
    qint64 version = 0;
    double lossEma = -1.0;      // training loss, exponentially averaged over assimilations
    double testAccuracy = -1.0; // latest evaluation; -1 before the first
    double testLoss = -1.0;
    int evaluatedEpoch = -1;
    int workersOnline = 0;
    int activeLeases = 0;
    int queuedSubtasks = 0;
    double recentStaleness = 0.0; // mean over the last assimilations
    qint64 maxStaleness = 0;
    int bufferedResults = 0; // waiting in the aggregation buffer
    int bufferSize = 1;
    qint64 reassignments = 0;
    qint64 preemptions = 0;
    qint64 rejected = 0;
    qint64 duplicates = 0;
    qint64 resultsReceived = 0; // results whose weights were counted on their way in
    qint64 resultBytes = 0;     // and the bytes those weights took
    qint64 weightsSent = 0;      // global weights sent to workers over the network (Assign)
    qint64 weightsSentBytes = 0; // and the bytes they took
    qint64 weightsSentWhole = 0;    // of which as float32 weights, not as a change (engine/wire/Downlink.h)
    qint64 weightsSentAnchored = 0; // and as an anchor whole followed by a change from it
    int quarantined = 0; // workers in quarantine now
    qint64 verified = 0;      // results confirmed by another worker's (redundancy)
    qint64 disagreements = 0; // subtasks whose replicas disagreed
    LedgerTotals cost;
    qint64 elapsedMs = 0;
    bool finished = false;
    bool paused = false;
    // Why no work gets done now, when no worker can train (none connected, every one
    // quarantined, every one's recent subtasks failed); empty while the job trains.
    QString stalled;
    // The stall is one the job cannot leave by itself waiting: every connected worker is
    // quarantined or failing (a job of local workers ends on it; `serve` waits and says so).
    bool stalledForGood = false;
};

// What the control center shows of one worker.
struct WorkerStatus
{
    qint64 id = 0;
    QString name;
    QString instanceType;
    QString priceClass;
    QString device;
    int threads = 0;
    bool online = false;
    double samplesPerSecond = 0.0;
    qint64 leaseId = 0; // 0 when idle
    int epoch = 0;
    int shard = 0;
    qint64 begin = 0;
    qint64 end = 0;
    qint64 done = 0;    // sample-steps of the current subtask, as last reported
    qint64 planned = 0;
    int leasesCompleted = 0;
    int leasesLost = 0;
    int preemptions = 0;
    double costSpot = 0.0;
    double costOnDemand = 0.0;
    double costActual = 0.0;
    qint64 lastSeenMs = 0;
    double trust = 1.0;       // see WorkerTrust
    int rejected = 0;         // results rejected (invalid or screened out)
    bool quarantined = false; // gets no leases until released
    QString quarantineReason;
};

struct EvaluationRequest
{
    int epoch = 0;
    qint64 version = 0;
    qint64 seq = 0;
    torch::Tensor weights; // a private copy
    int attempt = 1;       // failed evaluations are tried again, a few times
    bool onCpu = false;    // evaluate on the CPU whatever the job's device
};

// Hooks for the coordinator's owner; all called on the coordinator's thread.
struct CoordinatorHooks
{
    // Runs an evaluation somewhere else and later calls recordEvaluation(). Without it the
    // coordinator evaluates inline.
    std::function<void(EvaluationRequest)> evaluate;
    // A worker's lease was superseded: it may stop training that subtask.
    std::function<void(qint64 workerId, qint64 leaseId)> superseded;
    // Every event, as it is stored.
    std::function<void(const EventRecord &)> event;
    std::function<void(const AssimilationRecord &)> assimilated;
    std::function<void(const EvaluationRecord &)> evaluated;
    std::function<void()> finished;
};

class Coordinator
{
public:
    ~Coordinator();

    // Opens the job in runDir: resumes the job stored there, or creates it from spec.
    // data may be given when the caller has loaded it already.
    static Result<std::unique_ptr<Coordinator>> open(const JobSpec &spec, const QString &runDir, const Clock *clock,
                                                     std::shared_ptr<const JobData> data = nullptr);

    const JobSpec &spec() const { return m_spec; }
    std::shared_ptr<const JobData> data() const { return m_data; }
    bool resumed() const { return m_resumed; }
    QString runDir() const { return m_runDir; }
    Store &store() { return m_journal->store(); }
    void setHooks(CoordinatorHooks hooks) { m_hooks = std::move(hooks); }

    // A worker joins, or comes back. knownWorkerId is the fleet's id for it (its certificate's,
    // the same in every job), 0 for a worker of this process: a worker known under that id
    // comes back and loses its active leases, since it can no longer be working on them; one
    // not known yet is added under that id.
    Result<qint64> workerJoined(const WorkerInfo &info, qint64 knownWorkerId = 0);
    void workerLeft(qint64 workerId, const QString &reason);
    // A note from whoever runs the fleet (e.g. a simulated preemption), stored as an event.
    void recordEvent(EventKind kind, qint64 workerId, const QString &detail);
    void heartbeat(qint64 workerId, qint64 leaseId, qint64 sampleSteps, qint64 plannedSampleSteps);
    // The coordinator did not run for gapMs (its process was stopped, its machine suspended
    // or overloaded, or its clock jumped): the workers' silence and the leases' time in that
    // gap are not held against them (heartbeats and deadlines move by the gap).
    void absorbStall(qint64 gapMs);
    // The network layer sent a lease's weights in `bytes`: as float32 weights (whole), as an
    // anchor and a change from it (anchored), or as a change alone (neither).
    void countWeightsSent(qint64 bytes, bool whole, bool anchored);
    // Whether the worker is known and online (a revoked or timed-out worker is not).
    bool isOnline(qint64 workerId) const;
    // The worker's own measurement of its speed; used until results give a measured one.
    void reportSpeed(qint64 workerId, double samplesPerSecond);

    // See the group commit above. endGroup() fails (and the job stops) when the checkpoint
    // or the commit could not be written; nothing of the group is then acknowledged.
    Result<void> beginGroup();
    Result<void> endGroup();
    bool inGroup() const { return m_journal->inGroup(); }

    std::optional<Assignment> requestSubtask(qint64 workerId);
    // fleet.dismiss_idle: a worker that got nothing from requestSubtask() now is to stop, as
    // nothing is left to give it (the last epoch open, nothing queued, no copy to make).
    bool dismissesIdle() const;
    // Rounds (aggregation.rounds): the round is full, a worker asking now waits for its fold.
    bool roundFull() const;
    SubmitReply submitResult(qint64 workerId, SubtaskResult result);
    // failed: the worker could not train the subtask (an error, not a cancellation or a
    // shutdown); a worker whose every recent subtask failed cannot train this job.
    void handBack(qint64 workerId, qint64 leaseId, const QString &reason, bool failed = false);
    // Expires leases past their deadline; workers silent longer than the heartbeat timeout
    // are considered gone and their leases reassigned.
    void tick();
    void recordEvaluation(const EvaluationRequest &request, const Evaluation &evaluation);
    // An evaluation could not be run: recorded as an event and tried again later (the last
    // time on the CPU); after the last attempt the job goes on, and ends, without it.
    void evaluationFailed(const EvaluationRequest &request, const QString &error);

    // Workers' throughput, as measured from their results (samples per second).
    double workerSpeed(qint64 workerId) const;
    std::vector<WorkerStatus> workerStatuses() const;
    // Lifts a worker's quarantine (an operator's decision): it gets leases again, with its
    // trust halfway back and its recent record cleared.
    void releaseWorker(qint64 workerId, const QString &by);
    // Quarantines a worker for what its connections did (the network's budgets), not for
    // its results; the coordinator's own trusted workers and unknown ids are left alone.
    void quarantineForConduct(qint64 workerId, const QString &reason);
    // A paused job hands out no subtasks; results of running ones are still assimilated.
    void setPaused(bool paused);
    bool paused() const { return m_paused; }

    bool finished() const { return m_finished; }
    // Set when the store or a checkpoint could not be written: the job stops, and resuming
    // it from the store loses nothing that was acknowledged.
    QString fatalError() const { return m_fatal; }
    JobProgress progress() const;
    torch::Tensor globalWeights() const { return m_core->state().weights; }
    const WeightLayout &layout() const { return m_layout; }

private:
    Coordinator() = default;
    Result<void> createNew(const JobSpec &spec);
    Result<void> resume(const JobRecord &job);
    Result<void> prepare();
    Result<void> persist(const SchedulerChanges &changes);
    void event(EventKind kind, qint64 workerId, qint64 subtaskId, qint64 leaseId, const QString &detail);
    LedgerRecord ledgerRecord(qint64 workerId, qint64 leaseId, const QString &kind, double seconds) const;
    void ledger(qint64 workerId, qint64 leaseId, const QString &kind, double seconds);
    void leaseEnded(const Lease &lease, const QString &why);
    void handleChanges(const SchedulerChanges &changes, const QString &why);
    void setFatal(const QString &message);
    QString validate(const SubtaskResult &result) const;
    // Records a screened or invalid result's verdict against its worker, and quarantines the
    // worker when its recent record calls for it.
    void noteVerdict(qint64 workerId, bool rejected, const ResultScreen::Verdict &verdict, const QString &reason);
    // Whether every other connected, untrusted worker not quarantined has a last verdict, and
    // it was a refusal (false when there is no such worker).
    bool everyOtherWorkerWasRefused(qint64 workerId) const;
    void quarantine(qint64 workerId, const QString &reason);
    // A worker declared gone that is heard from again (a request, a heartbeat, a result) is
    // alive: it is online again, without the leases it lost.
    void reviveIfGone(qint64 workerId, const char *heardBy);
    void noteFailure(qint64 workerId, const QString &reason);
    // See JobProgress::stalled; recorded as an event when it changes.
    std::pair<QString, bool> stallReason() const;

    // A result that passed validation and screening, on its way to the global model.
    struct PendingResult
    {
        qint64 workerId = 0;
        Lease lease;
        Subtask subtask;
        SubtaskResult result;
        Assimilator::Admission admission;
        ResultScreen::Verdict verdict;
        torch::Tensor resultSample; // screening samples; undefined when not screened
        torch::Tensor baseSample;
        torch::Tensor base; // the weights it started from, when the coordinator kept them
        double workSeconds = 0.0;
        bool late = false;
    };
    // Folds a result into the global model and makes it durable.
    SubmitReply fold(PendingResult pending);
    struct Recorded
    {
        AssimilationRecord assimilation;
        std::vector<LedgerRecord> ledger;
    };
    SubmitReply refuseFold(const PendingResult &pending, const FoldOutcome &outcome);
    // Buffered aggregation: a result that waits in the buffer (its lease held, its subtask
    // leased; nothing of it is durable, so a restart trains its subtask again).
    SubmitReply bufferResult(PendingResult pending, const FoldOutcome &outcome);
    // A buffer's fold was refused: its results' subtasks went back to the queue.
    void refuseBuffer(const FoldOutcome &outcome);
    // Folds the buffer when nothing else can arrive to fill it (see Assimilator::flushDue).
    void flushBufferIfDue();
    // Records and announces every result a fold took in; `current`, when given, is the one
    // whose submission made the fold (the others wait in m_buffered). Returns current's reply.
    SubmitReply commitFold(std::optional<PendingResult> current, const FoldOutcome &outcome);
    Result<std::vector<Recorded>> record(const std::vector<PendingResult> &results, const FoldOutcome &outcome);
    void observe(const PendingResult &pending, const FoldedResult &folded, qint64 version, const Recorded &recorded);
    void observeFold(const FoldOutcome &outcome, qint64 leaseId);
    // aggregation.buffer 0: ⌈√(workers online)⌉.
    void sizeBuffer();

    // Redundancy (fleet.redundancy): a subtask trained from the same base by two workers, by
    // a third when their results disagree. Held results live only in memory: after a restart
    // the subtask is simply trained again.
    struct Quorum
    {
        qint64 baseSeq = 0;
        qint64 baseVersion = 0;
        torch::Tensor base;
        int needed = 2;
        std::set<qint64> workers; // given a lease on it; none gets two
        std::vector<PendingResult> held;
        qint64 waitingSinceMs = 0;
    };
    bool replicate(const Subtask &subtask) const;
    // Records the lease as the worker's current one and makes its assignment.
    struct WorkerState;
    Assignment assign(WorkerState &worker, const Lease &lease, const Subtask &subtask, const torch::Tensor &weights);
    std::optional<Assignment> grantReplica(qint64 workerId);
    SubmitReply holdResult(PendingResult pending);
    void resolveQuorum(qint64 subtaskId);
    // Forgets a quorum whose subtask was assimilated some other way; its held results are
    // duplicates now.
    void dropQuorum(qint64 subtaskId, const QString &why);
    void expireQuorums();
    // The coordinator's own inputs to the lease policy for an idle worker (decideIdle).
    Assimilator::IdleConditions idleConditions() const;
    void saveTrust(qint64 workerId);
    void applyOperatorRequests();
    // Reloads the aggregation state of the latest committed assimilation from its checkpoint.
    Result<void> restoreState();
    Result<torch::Tensor> baseWeights(const Lease &lease);
    // Base weights are kept for active leases when the rule needs them or results come as deltas.
    bool keepsBases() const;
    // Turns a compressed result into weights against its lease's base; sets invalidReason
    // when the bytes are bad. False: the base is no longer kept (a very late result).
    bool decodeResult(const Lease &lease, SubtaskResult &result);
    void collectGarbage();
    void requestEvaluation(int epoch);
    void dispatchEvaluation(EvaluationRequest request);
    Result<void> finalize();
    TrainConfig trainConfigFor(const Subtask &subtask) const;
    // The rate the screen measures an update's size against: the subtask's largest.
    double screeningRate(const Subtask &subtask) const;

    JobSpec m_spec;
    QString m_runDir;
    const Clock *m_clock = nullptr;
    std::shared_ptr<const JobData> m_data;
    std::unique_ptr<QLockFile> m_lock; // the run folder is this coordinator's alone; released last
    std::unique_ptr<Journal> m_journal; // the store and the checkpoints
    std::unique_ptr<RunBoard> m_board;  // the run's TensorBoard log; null when it cannot be written
    BestModelWatch m_best;              // the best evaluation so far (model-best.pt), early stopping
    QString m_stoppedEarly;             // why the job ended before its last epoch, when it did
    qint64 m_boardFlushedMs = 0;
    std::unique_ptr<Assimilator> m_core;
    Scheduler *m_scheduler = nullptr; // the core's
    std::unique_ptr<Model> m_evalModel;
    WeightLayout m_layout;
    PriceTable m_prices;
    CoordinatorHooks m_hooks;
    qint64 m_jobId = 0;
    bool m_resumed = false;
    bool m_finished = false;
    bool m_paused = false;
    QString m_fatal;

    Compression m_compression = Compression::None;
    std::map<qint64, torch::Tensor> m_bases; // W at the base of active leases, when keepsBases()
    std::unique_ptr<ResultScreen> m_screen;  // null when the job does not screen results
    std::map<qint64, torch::Tensor> m_baseSamples; // ResultScreen::sample() of recent bases
    std::ptrdiff_t m_oldBaseSamplesKept = 0; // samples older than the screened window kept by leases
    qint64 m_lastOperatorPollMs = 0;
    std::map<qint64, Quorum> m_quorums; // by subtask id
    std::map<qint64, PendingResult> m_buffered; // by lease id: results in the aggregation buffer, weights gathered
    std::map<qint64, int> m_refusals; // by subtask id: its results refused so far (each retry draws anew)
    StepPlan m_steps;                 // where each subtask's first optimizer step falls in the job
    LearningRateSchedule m_schedule;

    struct WorkerState
    {
        WorkerRecord record;
        CostRates rates;
        bool online = false;
        qint64 leaseId = 0;
        qint64 sampleSteps = 0;
        qint64 plannedSampleSteps = 0;
        int epoch = 0;                 // of the current lease
        int shard = 0;
        qint64 begin = 0;
        qint64 end = 0;
        int leasesCompleted = 0;
        int leasesLost = 0;
        int preemptions = 0;
        double costSpot = 0.0;
        double costOnDemand = 0.0;
        double costActual = 0.0;
        WorkerTrust trust;
        bool dismissed = false;      // told to stop at the job's tail (recorded once)
        bool trusted = false;        // see WorkerInfo::trusted
        int failures = 0;            // subtasks in a row it could not train (errors, rejections)
        QString lastFailure;
        QString goneBecause;         // why it was declared gone, while it is
        std::deque<bool> verdicts;   // the last ten results: true = rejected
        bool spared = false;         // not quarantined while the whole fleet's results were refused (said once)
        std::deque<double> cosines;  // of the last accepted updates against the consensus
    };
    void account(const LedgerRecord &l);
    std::map<qint64, WorkerState> m_workers;
    LedgerTotals m_costTotals; // running totals of the ledger
    std::map<qint64, double> m_wastedSeconds; // recorded as wasted, reversed if a late result lands
    int m_epochsAnnounced = 0; // epochs whose completion was announced (and evaluation asked for)
    int m_evaluatedEpoch = -1;
    int m_requestedEpoch = -1;
    std::vector<std::pair<qint64, EvaluationRequest>> m_evaluationRetries; // (due time, request)
    QString m_lastEvaluationError;
    double m_lastAccuracy = -1.0;
    double m_lastTestLoss = -1.0;
    qint64 m_reassignments = 0;
    qint64 m_preemptions = 0;
    qint64 m_rejected = 0;
    qint64 m_duplicates = 0;
    qint64 m_resultsReceived = 0;
    qint64 m_resultBytes = 0;
    qint64 m_weightsSent = 0;
    qint64 m_weightsSentBytes = 0;
    qint64 m_weightsSentWhole = 0;
    qint64 m_weightsSentAnchored = 0;
    qint64 m_verified = 0;
    qint64 m_disagreements = 0;
    qint64 m_startedMs = 0;
    QString m_stalled; // the last stall reason recorded as an event
    qint64 m_openedMs = 0;     // when this coordinator opened the job
    qint64 m_lastOnlineMs = 0; // the last tick that found a worker online
};

} // namespace flotilla
