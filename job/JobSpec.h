#pragma once
// A job: model + dataset + hyperparameters + aggregation rule + fleet policy, as plain
// values, read from and written to JSON job files. Free of LibTorch so that every layer may
// hold one.

#include "common/Result.h"

#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

#include <algorithm>

namespace flotilla {

struct DatasetSpec
{
    QString kind = QStringLiteral("fashion-mnist"); // fashion-mnist | idx | csv | images | npy | tokens
    // folder of IDX files, CSV file, image folder, NumPy data (a folder with x.npy and
    // y.npy, or a .npz), or a token file (a flat array of token ids, as nanoGPT's
    // prepare.py writes train.bin); fashion-mnist: optional folder
    QString path;
    // csv: the label column, by name or 1-based number; empty = the last column. Regression
    // and multi-label jobs may name several, separated by commas (one target each).
    QString labelColumn;
    // tokens: the ids' type (uint16 | uint32) and the length of the contexts the file is cut
    // into (each sample: `context` tokens and the `context` that follow them by one).
    QString tokenType = QStringLiteral("uint16");
    int context = 64;
    double testFraction = 0.1; // held out when the source has no test split of its own
    qint64 trainLimit = 0;   // use only the first N training samples (0 = all)
    qint64 testLimit = 0;    // evaluate on only the first N test samples (0 = all)
    // images: every image is resized to this side (0 = kept as stored; then all must agree)
    int imageSize = 0;
    QString color = QStringLiteral("auto");     // images: auto | gray | rgb
    QString badImages = QStringLiteral("stop"); // images: stop | skip (unreadable or truncated files)
    // Augmentation of training batches (image data sets of any kind)
    int cropPadding = 0;         // random crop after padding each side by this many pixels (0 = off)
    bool horizontalFlip = false; // mirror half of the training images, at random
};

struct ModelSpec
{
    QString kind = QStringLiteral("cnn"); // mlp | cnn | resnet | torchscript
    QString path;                         // torchscript: the .pt file
    double dropout = 0.0;
    QList<int> hidden{256, 128};          // mlp: hidden layer widths
};

struct TrainingSpec
{
    int epochs = 20;
    // 0: as many as give every subtask at least kMinSubtaskSteps optimizer steps (ShardPlan.h),
    // at most kMaxAutoShards; the job's data set decides.
    int shards = 0;
    int localEpochs = 1;   // per subtask
    int localSteps = 0;    // if > 0: a subtask trains this many steps instead of localEpochs
    int batchSize = 32;
    // What the model learns (job/Tasks.h): classification (a class per sample; cross-entropy),
    // regression (numbers; regressionLoss), multi-label (a 0/1 per label; binary
    // cross-entropy on logits) or next-token (a token file; cross-entropy per position).
    QString task = QStringLiteral("classification");
    QString regressionLoss = QStringLiteral("mse"); // mse | l1
    QString optimizer = QStringLiteral("sgd"); // sgd | adam | adamw
    double learningRate = 0.03;
    double momentum = 0.9;
    bool nesterov = false;   // sgd with momentum
    // sgd, adam: L2 added to the gradient; adamw: decoupled, the weights shrink by
    // learning rate × weight decay each step.
    double weightDecay = 0.0;
    double beta1 = 0.9;      // adam, adamw
    double beta2 = 0.999;
    double eps = 1e-8;
    double clipGradNorm = 0.0;   // > 0: the gradients' global norm is clipped to this
    double labelSmoothing = 0.0; // classification, next-token: the target's share spread over all classes
    // fp32 | bf16 | fp16: the forward pass under autocast in that type (fp16 with a loss
    // scale); the weights, the optimizer's state and everything sent stay float32.
    QString precision = QStringLiteral("fp32");
    // Per optimizer step over the whole job: a linear warmup from lrFloor × rate over
    // lrWarmupSteps steps, then constant, step (× lrGamma every lrStepEpochs epochs) or cosine
    // (down to lrFloor × rate at the job's last step).
    QString lrSchedule = QStringLiteral("cosine"); // constant | step | cosine
    int lrStepEpochs = 5;
    double lrGamma = 0.5;
    int lrWarmupSteps = 0;
    double lrFloor = 0.05;
    // Workers keep their optimizer's state (momentum buffers, Adam's moments) from one subtask
    // of the job to the next, as one process would; false: every subtask starts afresh.
    bool carryOptimizer = true;
    // The model with the best test score (accuracy; for other tasks their score, job/Tasks.h)
    // or the lowest test loss is kept beside the last as model-best.pt; with earlyStopAfter >
    // 0, the job ends after that many evaluations in a row without a better one.
    QString bestMetric = QStringLiteral("accuracy"); // accuracy (= score) | score | loss
    int earlyStopAfter = 0;
    quint64 seed = 1;
    int threads = 1;        // torch intra-op threads per worker
    // auto | cpu | cuda | cuda:N, or a list "cuda:0,cuda:1": local workers take the
    // devices in turn; auto and cuda spread them over every visible GPU.
    QString device = QStringLiteral("auto");
};

struct AggregationSpec
{
    // async-delta in version-synchronous rounds, its outer momentum and rate following the
    // fleet, is the default: it measured best of the rules with several workers and is the
    // plain loop with one (docs/algorithms.md, "Choosing the default"); vc-asgd is the paper's.
    QString rule = QStringLiteral("async-delta"); // async-delta | vc-asgd | staleness-aware | sync-average
    double alpha = 0.5;             // vc-asgd, staleness-aware: weight kept by the global model
    double stalenessExponent = 0.5; // staleness-aware: alpha_s = 1 - (1 - alpha) / (1 + s)^p
    // async-delta: the outer rate; with outer_scaled_by_fleet, the rate per worker online (below).
    double outerLearningRate = 1.0;
    double outerMomentum = 0.9;     // async-delta: 0 = plain delta
    bool nesterov = true;           // async-delta with momentum
    // async-delta with momentum: the momentum is updated once every this many results (Delayed
    // Nesterov); between, each change is applied at outer_learning_rate / period. 1: every
    // result; 0: the number of workers online.
    int momentumPeriod = 1;
    // async-delta: a result of staleness s counts (1 + s)^-p, as FedBuff weighs them; 0: every
    // result counts fully (a result with nothing folded since its base always does).
    double stalenessDamping = 1.0;
    // Buffered aggregation (asynchronous rules): the mean of this many results is folded as
    // one version. 1: every result is its own version; 0: ⌈√(workers online)⌉.
    int buffer = 1;
    // async-delta, version-synchronous rounds: every worker online trains one subtask from the
    // same version, and the mean of their changes is folded as one step when the last is in;
    // a worker that delivered waits for the next round. The buffer is the fleet's size. Only
    // with a buffer of 1 (a buffer set apart from it folds as it says) and for async-delta.
    bool rounds = true;
    bool usesRounds() const { return rounds && buffer == 1 && rule == QLatin1String("async-delta"); }
    // Rounds of several workers: a subtask takes at most this many optimizer steps (0: as the
    // lease policy sizes it), so that a small data set still has many rounds an epoch.
    int roundSteps = 8;
    // async-delta: the outer momentum and rate follow the workers online, N: with one worker no
    // momentum and rate 1 (the plain loop); with N ≥ 2 momentum outer_momentum, started warm
    // (its bias corrected, as Adam's), and rate outer_learning_rate · min(N, L) · (1 − μ),
    // reached from 1 over the first epoch: a round's mean change, worth one worker's steps,
    // is carried up to L times as far (docs/algorithms.md, "Choosing the default").
    bool outerScaledByFleet = true;
    // L above: the largest fleet factor. Past about four a fleet's step stopped paying and
    // diverged on a small job; a large data set, with a larger critical batch, may take more.
    int largestFleetStep = 4;
    // Rounds with outer_scaled_by_fleet: the fleet factor follows the rounds' gain ratio (as
    // AdaScale's), r = E|Δ_i|² / |mean Δ|², running means over about ten rounds started at
    // min(N, L), within [1, min(N, L)]: near 1 while the workers' changes agree (a larger step
    // would only overshoot), near N where their noise dominates (the mean of N is worth N
    // steps). The default since 2026-12-07 (docs/algorithms.md, "Choosing the default").
    bool adaptiveFleetStep = true;
    // async-delta: each result's weight (1 + s)^-d divided by the running mean of those
    // weights, so that the mean fold weight is about 1 whatever the staleness, reached over
    // the first epoch from the plain damped weights (about 1/N).
    bool normalizeStaleness = false;
    // Workers' momentum falls with the workers online, N: μ' = max(0, 1 − N·(1 − μ)), since
    // asynchrony itself acts as momentum of about 1 − 1/N.
    bool workerMomentumScaledByFleet = false;
};

struct PreemptionSpec
{
    double meanIntervalSeconds = 0.0; // 0 = no simulated preemptions
    double noticeFraction = 0.5;      // share of preemptions that come with a notice
    double rejoinDelaySeconds = 3.0;  // a preempted worker comes back after this long
};

struct FleetSpec
{
    int workers = 4;
    // The longest a lease lasts; a worker whose speed is known gets a deadline of three times
    // its expected time plus 10 s, within this bound.
    double leaseTimeoutSeconds = 120.0;
    // A worker whose speed is known gets at most this many seconds of work per subtask (a
    // slower machine trains part of a shard); 0 = always whole shards.
    double targetSubtaskSeconds = 60.0;
    // Asynchronous rules: how many epochs past the oldest unfinished one may be open. More keep
    // a fleet busy through an epoch's slow tail; each adds about an epoch of staleness to the
    // results that finish it.
    int epochsAhead = 1;
    // Smaller subtasks near an epoch's end: no grant takes more than its share of the queued
    // work, so the last of an epoch is spread over the fleet.
    bool shareTail = false;
    // Once the last epoch is open and nothing is queued, an idle worker gets a copy of the
    // subtask most overdue; the first result wins.
    bool speculate = false;
    // A worker that asks for work when none is left to give (the last epoch open, nothing
    // queued, no copy to make) is dismissed: told so, it stops, and a cloud fleet stops
    // paying for it (scaling in at the job's tail).
    bool dismissIdle = false;
    // A worker not heard from for this long is considered gone; its leases are reassigned.
    double heartbeatTimeoutSeconds = 30.0;
    // How often workers send a heartbeat (told to them in Welcome): a quarter of the timeout,
    // at most every 2 s, so that three heartbeats can be lost before a worker is declared gone.
    int heartbeatIntervalMs() const { return int(std::clamp(heartbeatTimeoutSeconds * 250.0, 100.0, 2000.0)); }
    QString instanceType = QStringLiteral("aws/c5.large");
    QString priceClass = QStringLiteral("spot"); // spot | on-demand | volunteer
    QString priceTable;                          // empty = the built-in table
    // Untrusted workers: results are screened statistically (ResultScreen) and a worker with
    // this many rejected results among its last ten is quarantined (0: never).
    bool screenResults = true;
    int quarantineAfter = 3;
    // Redundancy as BOINC does it: this share of subtasks (0..1) is also given to a second
    // worker from the same base version; results that differ by more than the tolerance
    // (relative to the larger update) go to a third worker, and the odd one out is rejected.
    double redundancy = 0.0;
    double redundancyTolerance = 0.05;
    // How results travel: none (the new weights in float32), fp16 or int8 (the change from the
    // base weights, with the rounding carried into the worker's next result).
    QString compression = QStringLiteral("none");
    // What a worker needs to be placed in this job by a fleet service: a device kind (any,
    // cpu, cuda) and physical memory in MiB (0: any). A job no connected worker meets waits,
    // and says so in the queue.
    QString requireDevice = QStringLiteral("any");
    qint64 requireMemoryMb = 0;
    PreemptionSpec preemption;
};

struct JobSpec
{
    QString name = QStringLiteral("fashion-mnist-cnn");
    DatasetSpec dataset;
    ModelSpec model;
    TrainingSpec training;
    AggregationSpec aggregation;
    FleetSpec fleet;

    // The default job: a small CNN on Fashion-MNIST, four local workers, preemptions on.
    static JobSpec defaultJob();
    // A name that says what the job trains: its data and its model ("fashion-mnist-cnn",
    // "photos-resnet", "iris-mlp", "houses-net" for net.pt), in characters every file system takes.
    QString describedName() const;

    // Unknown keys are errors (a typo must not silently fall back to a default).
    static Result<JobSpec> fromJson(const QJsonObject &json);
    static Result<JobSpec> load(const QString &path);
    QJsonObject toJson() const;
    Result<void> save(const QString &path) const;

    // Checks every field; the error names the field, its value and the accepted range.
    Result<void> validate() const;
    // Every problem, not just the first; each message starts with the field in quotes
    // ("'training.epochs' is 0; ..."), which fieldOf() returns.
    QStringList problems() const;
    static QString fieldOf(const QString &problem);
    // Settings that are valid but known to train badly, each naming its fields and the cure;
    // the coordinator logs them when it opens the job.
    QStringList cautions() const;
};

// auto, cpu, cuda (the first GPU) or cuda:N.
bool isDeviceName(const QString &device);
// A device, or a comma-separated list of GPUs ("cuda:0,cuda:1"), as its parts; empty when
// it is neither.
// The names a job file's choices take, one table each, in the order the job wizard offers them:
// what the job's check accepts, the wizard lists and the engine and the protocol spell.
const QStringList &aggregationRuleNames(); // vc-asgd, staleness-aware, async-delta, sync-average
const QStringList &precisionNames();       // fp32, bf16, fp16
const QStringList &compressionNames();     // none, fp16, int8 (engine/wire/Compression.h's order)
const QStringList &priceClassNames();      // spot, on-demand, volunteer

QStringList deviceList(const QString &device);

// Where a run of this job goes when the user names no folder: <data location>/runs/<name>-<time>.
QString defaultRunDir(const JobSpec &job);

} // namespace flotilla
