#pragma once
// A discrete-event simulation of a fleet: workers of different speeds that are preempted
// (a Poisson process or a trace) and fetch and return weights over links with latency and
// bandwidth, driven through the real Scheduler (on a simulated clock) and the real
// aggregation rules, training a small softmax-regression objective on synthetic data so that
// staleness has its true effect on convergence. Time is simulated, so a fleet of 100,000
// workers runs in minutes on a laptop; the same seed gives the same numbers.
//
// A Simulator is built once per configuration (the data and the shard plan); run() is const
// and may be called for several rules at once from different threads.

#include "common/Result.h"
#include "engine/coordination/Aggregation.h"
#include "engine/data/ShardPlan.h"
#include "job/EventKind.h"
#include "job/JobSpec.h"
#include "job/PriceTable.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <vector>

namespace flotilla {

// One line of a preemption trace: the worker is down from downMs until upMs (-1: for good).
struct TraceEntry
{
    int worker = 0;
    qint64 downMs = 0;
    qint64 upMs = -1;
    int line = 0;
};

// A preemption trace is CSV: "worker,down,up" per line, worker numbered from 0, times in
// seconds of simulated time since the start, up empty when the worker never comes back.
// A header line "worker,down,up", blank lines and lines starting with # are skipped. Errors
// name the origin (a file name) and the line.
Result<std::vector<TraceEntry>> parsePreemptionTrace(const QByteArray &text, const QString &origin, int workers);
Result<std::vector<TraceEntry>> loadPreemptionTrace(const QString &path, int workers);

// The largest aggregation buffer a simulation or a job accepts.
constexpr int kMaxBuffer = 1'000'000;

struct SimulationConfig
{
    quint64 seed = 1;

    // The fleet. Speeds are log-uniform in [speed / spread, speed · spread] (samples trained
    // per second; a simulated sample stands for a real one of whatever model is being sized).
    int workers = 100;
    double speed = 1.0;
    double speedSpread = 4.0;

    // Preemptions: per worker a Poisson process with this many preemptions per hour online,
    // each followed by an exponential time offline with this mean; or the trace, if set.
    double preemptionsPerHour = 0.5;
    double downtimeSeconds = 120.0;
    bool useTrace = false;
    std::vector<TraceEntry> trace;
    // Seconds of warning before each preemption (0: none). A warned worker stops after the
    // current sample and uploads a partial result if the upload can finish in time.
    double noticeSeconds = 0.0;

    // The network: every transfer of weights (down at a grant, up with a result) takes
    // latency + bytes / bandwidth. weightsBytes 0: the size of the synthetic model.
    double latencySeconds = 0.05;
    double bandwidthBytesPerSecond = 12.5e6;
    qint64 weightsBytes = 10'000'000;

    // The coordinator's fleet policies (as fleet.* in a job).
    double leaseTimeoutSeconds = 120.0;
    double targetSubtaskSeconds = 60.0;
    double heartbeatTimeoutSeconds = 30.0; // a silent worker is declared gone (0: never)
    // Goodput policies (see docs/simulator.md): epochs an asynchronous job may open past the
    // oldest unfinished one; grants capped at their share of the queued work; speculative
    // copies of the most overdue subtasks once nothing is queued in the last epoch.
    int epochsAhead = 1;
    bool shareTail = false;
    bool speculate = false;
    // A worker that asks for work when the job has none left to give (the last epoch open,
    // nothing queued, no copy to make) is dismissed: it leaves the fleet for the rest of the
    // job and is no longer paid, as a cloud fleet scales in at its tail.
    bool dismissIdle = false;
    // Buffered aggregation: asynchronous rules fold the mean of this many results as one
    // version; 0: auto, ⌈√workers⌉.
    int buffer = 1;
    int effectiveBuffer() const;

    // The job: shards × shardSize training samples, trained for epochs.
    int shards = 200;
    int shardSize = 32;
    int epochs = 5;
    int localEpochs = 1;
    int batchSize = 8;
    double learningRate = 0.1;

    // The synthetic objective: softmax regression over `classes` Gaussian classes in
    // `features` dimensions (classes · (features + 1) parameters).
    int features = 32;
    int classes = 10;
    double separation = 0.5; // standard deviation of the class centres' coordinates
    int testSamples = 2000;

    AggregationSpec aggregation; // the rule's parameters; run() names the rule
    QString instanceType = QStringLiteral("aws/c5.large");
    CostRates rates; // of instanceType, from the price table

    bool recordEvents = false; // keep every event (small fleets: tests, --events)

    QStringList problems() const;
    qint64 modelParameters() const { return qint64(classes) * (features + 1); }
};

struct SimulationEvent
{
    qint64 atMs = 0;
    EventKind kind = EventKind::WorkerUp; // job/EventKind.h: the kinds recorded by the simulator
    int worker = -1;
    qint64 lease = 0;
    qint64 subtask = 0;
    QString detail;
};

struct SimulationResult
{
    QString rule;
    bool finished = false;
    QString stopReason; // why an unfinished run stopped
    qint64 simulatedMs = 0;
    std::vector<qint64> epochEndMs; // when each epoch's last piece was assimilated

    qint64 assimilations = 0;
    qint64 versions = 0;
    std::vector<qint64> staleness; // one per assimilation, in order
    std::vector<qint64> stalenessHistogram; // buckets 0, 1, 2–3, 4–7, 8–15, … (powers of two)

    qint64 leasesGranted = 0;
    qint64 leasesExpired = 0;
    qint64 leasesLost = 0;
    qint64 leasesHandedBack = 0;
    qint64 leasesSuperseded = 0;
    qint64 reassignments = 0;
    qint64 duplicates = 0;
    qint64 partialResults = 0;
    qint64 preemptions = 0;
    qint64 speculativeCopies = 0;
    qint64 dismissed = 0; // workers dismissed at the tail (dismissIdle)

    double onlineSeconds = 0.0; // billed: every worker's time online until the job finished
    double busySeconds = 0.0; // time workers spent on subtasks (transfers and training)
    double usefulSeconds = 0.0; // … of work that reached an assimilation
    double wastedSeconds = 0.0; // … of work that never did (preempted, superseded, dropped)
    qint64 sampleStepsTrained = 0;
    qint64 sampleStepsWasted = 0;

    qint64 positionsAssimilated = 0; // Σ covered positions; samples × epochs when finished
    double creditSum = 0.0; // Σ credit; shards × epochs when finished
    bool exactlyOnce = false; // every shard of every epoch tiled exactly once
    QString integrityError;

    double costSpot = 0.0;
    double costOnDemand = 0.0;

    struct Evaluation
    {
        qint64 atMs = 0;
        qint64 version = 0;
        double loss = 0.0;
        double accuracy = 0.0;
    };
    std::vector<Evaluation> evaluations; // the first at time 0, the last at the end
    struct FleetSample
    {
        qint64 atMs = 0;
        int online = 0;
        int busy = 0;
    };
    std::vector<FleetSample> fleet; // at most one sample per simulated second
    std::vector<SimulationEvent> events; // with SimulationConfig::recordEvents

    // Busy worker time over paid (online) worker time.
    double busyShare() const { return onlineSeconds > 0 ? busySeconds / onlineSeconds : 0.0; }
    double finalLoss() const { return evaluations.empty() ? 0.0 : evaluations.back().loss; }
    double finalAccuracy() const { return evaluations.empty() ? 0.0 : evaluations.back().accuracy; }
    // Nearest-rank percentile of the staleness, p in (0, 100].
    qint64 stalenessPercentile(double p) const;
};

class Simulator
{
public:
    static Result<std::unique_ptr<Simulator>> create(SimulationConfig config);
    ~Simulator();

    Result<SimulationResult> run(const QString &rule) const;
    const SimulationConfig &config() const { return m_config; }

    struct Objective;

private:
    Simulator(SimulationConfig config);
    SimulationConfig m_config;
    ShardPlan m_plan;
    std::unique_ptr<Objective> m_objective;
};

// The report of runs on one fleet: the same seed gives the same bytes.
QString simulationReport(const SimulationConfig &config, const std::vector<SimulationResult> &results);
QJsonObject simulationJson(const SimulationConfig &config, const std::vector<SimulationResult> &results);
// The bucket labels of SimulationResult::stalenessHistogram: "0", "1", "2-3", …
QString stalenessBucketLabel(int bucket);

} // namespace flotilla
