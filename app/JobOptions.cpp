#include "app/JobOptions.h"

#include "app/CommandLine.h"
#include "common/LogCategories.h"
#include "engine/coordination/LocalFleet.h"

#include "engine/data/JobData.h"
#include "engine/training/Device.h"
#include "job/Tasks.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>
#include <QTimer>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <limits>

namespace flotilla {

namespace {

std::atomic<int> g_signal{0};

void onSignal(int signal)
{
    g_signal = signal;
}

struct Flag
{
    const char *name;
    const char *valueName; // nullptr: a switch
    const char *help;
};

const Flag kFlags[] = {
    {"job", "file", "Job file (JSON) to train; flags below override its fields. Default: the built-in default job."},
    {"run-dir", "dir", "Run directory for the store, checkpoints, metrics.csv, model.pt and flotilla.log. If it "
                       "holds an unfinished job, that job is resumed (its stored settings win). Default: a new "
                       "folder under the user's data location."},
    {"save-job", "file", "Write the effective job file and exit without training."},
    {"job-name", "name", "The job's name, as its run folder, the queue and the control center show it. Default: the "
                         "job file's, else one made from the data and the model (fashion-mnist-cnn, photos-resnet)."},
    {"workers", "n", "Number of local workers (threads of this process)."},
    {"epochs", "n", "Epochs to train: every shard trained once per epoch."},
    {"shards", "n", "Shards the training set is split into (one subtask per shard per epoch; 0 = from the data and the "
                    "batch, each subtask at least 16 optimizer steps)."},
    {"local-epochs", "n", "Passes over its shard a subtask makes."},
    {"local-steps", "n", "If > 0, a subtask trains this many steps instead of local epochs."},
    {"batch-size", "n", "Mini-batch size."},
    {"task", "name", "What the model learns: classification (default), regression (numeric targets; MSE, or L1 with "
                     "--regression-loss l1), multi-label (0/1 targets, one logit per label) or next-token (a token "
                     "file; --dataset tokens)."},
    {"regression-loss", "name", "Regression: mse (default) or l1."},
    {"optimizer", "name", "Local optimizer: sgd (with momentum), adam, or adamw (decoupled weight decay)."},
    {"lr", "rate", "Learning rate of the local optimizer (epoch 0 of the schedule)."},
    {"momentum", "m", "Momentum of SGD."},
    {"nesterov", nullptr, "SGD: Nesterov momentum."},
    {"weight-decay", "w", "Weight decay: L2 in the gradient for sgd and adam; decoupled for adamw."},
    {"beta1", "b", "Adam, AdamW: decay of the first moment (default 0.9)."},
    {"beta2", "b", "Adam, AdamW: decay of the second moment (default 0.999)."},
    {"eps", "e", "Adam, AdamW: the term added to the denominator (default 1e-8)."},
    {"clip-grad-norm", "n", "Clip the gradients' global norm to n before each step (0 = off)."},
    {"label-smoothing", "s", "Classification, next-token: spread this share of each target over all classes (0 = off)."},
    {"precision", "p", "fp32, bf16 or fp16: the forward pass under autocast (fp16 on a GPU only, with a loss scale); "
                       "the weights stay float32."},
    {"lr-schedule", "name", "Learning-rate schedule, per optimizer step over the whole job: constant, step or cosine."},
    {"lr-warmup", "steps", "Linear warmup of the learning rate over this many optimizer steps (0 = none)."},
    {"lr-floor", "f", "Cosine: the last step's rate as a share of --lr (default 0.05)."},
    {"fresh-optimizer", nullptr, "Start every subtask with a fresh optimizer (by default a worker keeps its momentum "
                                 "or Adam moments from one subtask to the next, as one process would)."},
    {"best-metric", "m", "accuracy (the task's score: accuracy, R², mean F1 or token accuracy) or loss: the model "
                         "with the best test score (or lowest test loss) is kept as model-best.pt beside model.pt."},
    {"early-stop", "n", "End the job after n evaluations (epochs) in a row without a better --best-metric (0 = off)."},
    {"seed", "n", "Seed of shards, sample orders, initial weights and simulated preemptions."},
    {"threads", "n", "LibTorch threads per worker (with --workers and no --threads: the cores shared among them)."},
    {"device", "name", "auto, cpu, cuda or cuda:N (the N-th GPU). auto and cuda give local workers the visible GPUs in "
                       "turn."},
    {"devices", "list", "GPUs for the local workers in turn, e.g. cuda:0,cuda:1 (or auto: every visible GPU)."},
    {"model", "kind", "Model: mlp, cnn, resnet, or torchscript (with --model-file)."},
    {"model-file", "file", "TorchScript model (.pt) made in Python with torch.jit.script(model).save(file)."},
    {"dropout", "p", "Dropout probability of the built-in models (0 = off)."},
    {"dataset", "kind", "Data set: fashion-mnist, idx (a folder of IDX files), csv, images (a folder of "
                        "class folders of .png/.jpg/.jpeg/.bmp files: DIR/train/<class>/ and DIR/test/<class>/, or "
                        "DIR/<class>/ with --test-fraction held out), npy (NumPy: a folder with x.npy and y.npy, "
                        "or one .npz holding x and y; --test-fraction held out), or tokens (a flat file of token ids "
                        "as nanoGPT writes train.bin, or a folder with train.bin and val.bin; --task next-token)."},
    {"context", "n", "Tokens: the length of each training context (default 64)."},
    {"token-type", "type", "Tokens: uint16 (default) or uint32, the ids' type in the file."},
    {"data", "path", "Folder of IDX files, the CSV file, the image folder, or the NumPy folder or .npz file."},
    {"test-fraction", "f", "Share of the samples held out for testing when the data has no test split of its own."},
    {"image-size", "n", "Images: resize every image to n×n pixels (0 = keep their size; then all must agree)."},
    {"color", "mode", "Images: gray (1 channel), rgb (3), or auto (rgb if the first image of any class is in colour)."},
    {"bad-images", "policy", "Images: on an unreadable or truncated file, stop (with its path) or skip (and count "
                             "it)."},
    {"crop-padding", "n", "Augment training images: pad each side by n pixels, then crop a window of the original size "
                          "at random (0 = off)."},
    {"hflip", nullptr, "Augment training images: mirror half of them left to right, at random."},
    {"label-column", "col", "CSV label column: a header name or a 1-based number (default: the last); regression and "
                            "multi-label: several, separated by commas."},
    {"train-limit", "n", "Train on only the first n training samples (0 = all)."},
    {"test-limit", "n", "Evaluate on only the first n test samples (0 = all)."},
    {"rule", "name", "Aggregation rule: async-delta (the default), vc-asgd (the paper's), staleness-aware or "
                     "sync-average."},
    {"alpha", "a", "VC-ASGD: the weight the global model keeps, W <- a*W + (1-a)*W_c."},
    {"outer-lr", "rate", "async-delta: the outer learning rate applied to each result's change (default 1)."},
    {"outer-momentum", "m", "async-delta: outer (Nesterov) momentum on the changes (default 0.9; 0: none, with --outer-scaled off)."},
    {"momentum-period", "n", "async-delta with outer momentum: update the momentum once every n results (Delayed "
                             "Nesterov; 0 = the number of workers online; default 1)."},
    {"staleness-damping", "p", "async-delta: a result s versions stale counts (1+s)^-p (default 1; 0: fully)."},
    {"buffer", "k", "Asynchronous rules: fold the mean of k results as one version (1 = each result is its own; "
                    "auto or 0 = the square root of the workers online, rounded up). Default: 1."},
    {"rounds", "on|off", "async-delta: version-synchronous rounds, one subtask of every worker online from the same "
                         "version, their mean change folded as one step."},
    {"round-steps", "n", "Rounds: a subtask takes at most n optimizer steps (0: as the lease policy sizes it)."},
    {"outer-scaled", "on|off", "async-delta: the outer momentum and rate follow the workers online (none and 1 with one "
                               "worker; with N, momentum --outer-momentum and rate --outer-lr x N x (1 - momentum))."},
    {"largest-fleet-step", "L", "async-delta with --outer-scaled: the fleet's factor on the outer rate is at most L "
                                "(default 4)."},
    {"adaptive-fleet-step", "on|off", "Rounds with --outer-scaled: the fleet's factor follows the round's gain ratio "
                                      "(the workers' changes' mean square over the square of their mean), weighed against L "
                                      "over the first 32 rounds, within 1..L (default on)."},
    {"normalize-staleness", "on|off", "async-delta: staleness weights divided by their running mean (fold weight about "
                                      "1), reached over the first epoch."},
    {"worker-momentum-scaled", "on|off", "Workers' momentum falls with the workers online: 1 - N x (1 - momentum)."},
    {"epochs-ahead", "n", "Asynchronous rules: how many epochs past the oldest unfinished one may be open (default 1)."},
    {"share-tail", nullptr, "Near an epoch's end, no subtask takes more than its share of the queued work."},
    {"speculate", nullptr, "At the job's end, idle workers train copies of the most overdue subtasks; the first "
                           "result wins."},
    {"dismiss-idle", nullptr, "At the job's end, a worker asking for work when none is left is dismissed: it stops "
                              "(a cloud fleet scales in)."},
    {"lease-timeout", "seconds", "A lease's deadline: after it, the subtask is reassigned."},
    {"preempt-mean", "seconds", "Simulated preemptions: mean seconds between them (0 = none)."},
    {"preempt-notice", "fraction", "Share of simulated preemptions that come with a notice (partial result)."},
    {"rejoin-delay", "seconds", "Seconds a preempted worker stays away."},
    {"instance-type", "type", "Instance type of the workers, for the cost ledger (see the price table)."},
    {"price-class", "class", "spot, on-demand or volunteer."},
    {"price-table", "file", "Price table (JSON) instead of the built-in one."},
    {"compression", "form", "How results travel: none (float32 weights), fp16 or int8 (the change from the base, "
                            "rounding carried into the next result). Default: none."},
    {"screen-results", "on|off", "Screen every result against recent honest ones (size, direction) and reject "
                                 "outliers (default: on)."},
    {"quarantine-after", "n", "Quarantine a worker with this many rejected results among its last ten (0 = never; "
                              "default 3)."},
    {"redundancy", "share", "Give this share of subtasks (0 to 1) to two workers from the same base and compare "
                            "their results; a disagreement goes to a third (default 0)."},
    {"redundancy-tolerance", "r", "Two results agree when they differ by at most this much, relative to the larger "
                                  "update (default 0.05)."},
    {"require-device", "kind", "In a fleet: place only workers with this device in the job: any, cpu or cuda "
                               "(default any)."},
    {"require-memory-mb", "MiB", "In a fleet: place only workers whose machine has this much memory (default 0: any)."},
    {"quiet", nullptr, "No live progress line."},
    {"verbose", nullptr, "Print every event (joins, leases, assimilations) to standard error."},
};

} // namespace

// Applies the flags that were given to the job.
static Result<void> applyFlags(const QCommandLineParser &p, JobSpec &job)
{
    auto integer = [&](const char *flag, auto &field) -> Result<void> {
        const QString name = QString::fromLatin1(flag);
        if (!p.isSet(name))
            return {};
        using Field = std::remove_reference_t<decltype(field)>;
        bool ok = false;
        const qlonglong v = p.value(name).toLongLong(&ok);
        if (!ok)
            return fail(QStringLiteral("--%1 needs an integer, got '%2'").arg(name, p.value(name)));
        if (v < 0 || (std::numeric_limits<Field>::max() < std::numeric_limits<qlonglong>::max()
                      && v > static_cast<qlonglong>(std::numeric_limits<Field>::max())))
            return fail(QStringLiteral("--%1 is out of range: %2").arg(name, p.value(name)));
        field = static_cast<Field>(v);
        return {};
    };
    auto number = [&](const char *flag, double &field) -> Result<void> {
        const QString name = QString::fromLatin1(flag);
        if (!p.isSet(name))
            return {};
        bool ok = false;
        const double v = p.value(name).toDouble(&ok);
        if (!ok)
            return fail(QStringLiteral("--%1 needs a number, got '%2'").arg(name, p.value(name)));
        field = v;
        return {};
    };
    auto onOff = [&](const char *flag, bool &field) -> Result<void> {
        const QString name = QString::fromLatin1(flag);
        if (!p.isSet(name))
            return {};
        const QString v = p.value(name).toLower();
        if (v != QLatin1String("on") && v != QLatin1String("off"))
            return fail(QStringLiteral("--%1 is on or off, not '%2'").arg(name, p.value(name)));
        field = v == QLatin1String("on");
        return {};
    };
    auto text = [&](const char *flag, QString &field) {
        if (p.isSet(QString::fromLatin1(flag)))
            field = p.value(QString::fromLatin1(flag));
    };
    const Result<void> checks[] = {
        integer("workers", job.fleet.workers),
        integer("epochs", job.training.epochs),
        integer("shards", job.training.shards),
        integer("local-epochs", job.training.localEpochs),
        integer("local-steps", job.training.localSteps),
        integer("batch-size", job.training.batchSize),
        number("lr", job.training.learningRate),
        number("momentum", job.training.momentum),
        number("weight-decay", job.training.weightDecay),
        number("beta1", job.training.beta1),
        number("beta2", job.training.beta2),
        number("eps", job.training.eps),
        number("clip-grad-norm", job.training.clipGradNorm),
        number("label-smoothing", job.training.labelSmoothing),
        integer("early-stop", job.training.earlyStopAfter),
        integer("seed", job.training.seed),
        integer("threads", job.training.threads),
        number("dropout", job.model.dropout),
        integer("train-limit", job.dataset.trainLimit),
        integer("test-limit", job.dataset.testLimit),
        number("test-fraction", job.dataset.testFraction),
        integer("image-size", job.dataset.imageSize),
        integer("crop-padding", job.dataset.cropPadding),
        integer("context", job.dataset.context),
        number("alpha", job.aggregation.alpha),
        number("outer-lr", job.aggregation.outerLearningRate),
        number("outer-momentum", job.aggregation.outerMomentum),
        integer("momentum-period", job.aggregation.momentumPeriod),
        number("staleness-damping", job.aggregation.stalenessDamping),
        integer("lr-warmup", job.training.lrWarmupSteps),
        number("lr-floor", job.training.lrFloor),
        [&]() -> Result<void> {
            if (p.value(QStringLiteral("buffer")) != QLatin1String("auto"))
                return integer("buffer", job.aggregation.buffer);
            job.aggregation.buffer = 0;
            return {};
        }(),
        integer("epochs-ahead", job.fleet.epochsAhead),
        integer("round-steps", job.aggregation.roundSteps),
        onOff("rounds", job.aggregation.rounds),
        onOff("outer-scaled", job.aggregation.outerScaledByFleet),
        integer("largest-fleet-step", job.aggregation.largestFleetStep),
        onOff("adaptive-fleet-step", job.aggregation.adaptiveFleetStep),
        onOff("normalize-staleness", job.aggregation.normalizeStaleness),
        onOff("worker-momentum-scaled", job.aggregation.workerMomentumScaledByFleet),
        number("lease-timeout", job.fleet.leaseTimeoutSeconds),
        number("preempt-mean", job.fleet.preemption.meanIntervalSeconds),
        number("preempt-notice", job.fleet.preemption.noticeFraction),
        number("rejoin-delay", job.fleet.preemption.rejoinDelaySeconds),
        integer("quarantine-after", job.fleet.quarantineAfter),
        integer("require-memory-mb", job.fleet.requireMemoryMb),
        number("redundancy", job.fleet.redundancy),
        number("redundancy-tolerance", job.fleet.redundancyTolerance),
        [&]() -> Result<void> {
            const QString value = p.value(QStringLiteral("screen-results"));
            if (!p.isSet(QStringLiteral("screen-results")))
                return {};
            if (value != QLatin1String("on") && value != QLatin1String("off"))
                return fail(QStringLiteral("--screen-results is on or off, got '%1'").arg(value));
            job.fleet.screenResults = value == QLatin1String("on");
            return {};
        }(),
    };
    for (const auto &c : checks)
        if (!c)
            return c;
    // Fewer local workers than cores: each gets its share of the cores, as a user's own loop
    // would use them all (one worker on two cores trained at half speed before).
    if (p.isSet(QStringLiteral("workers")) && !p.isSet(QStringLiteral("threads")) && job.fleet.workers > 0)
        job.training.threads = std::max(1, QThread::idealThreadCount() / job.fleet.workers);
    text("task", job.training.task);
    text("regression-loss", job.training.regressionLoss);
    text("token-type", job.dataset.tokenType);
    text("optimizer", job.training.optimizer);
    text("lr-schedule", job.training.lrSchedule);
    text("device", job.training.device);
    if (p.isSet(QStringLiteral("devices"))) {
        const QString devices = p.value(QStringLiteral("devices"));
        job.training.device = devices == QLatin1String("auto") ? QStringLiteral("cuda") : devices;
        if (devices == QLatin1String("auto") && visibleGpus() == 0)
            return fail(QStringLiteral("--devices auto found no CUDA GPU here; use --device cpu"));
        // One local worker per device unless --workers says otherwise.
        if (!p.isSet(QStringLiteral("workers")))
            job.fleet.workers = devices == QLatin1String("auto") ? visibleGpus() : int(deviceList(devices).size());
    }
    text("precision", job.training.precision);
    text("best-metric", job.training.bestMetric);
    if (p.isSet(QStringLiteral("nesterov")))
        job.training.nesterov = true;
    text("model", job.model.kind);
    if (p.isSet(QStringLiteral("model-file"))) {
        job.model.path = QFileInfo(p.value(QStringLiteral("model-file"))).absoluteFilePath();
        if (!p.isSet(QStringLiteral("model")))
            job.model.kind = QStringLiteral("torchscript");
    }
    text("dataset", job.dataset.kind);
    if (p.isSet(QStringLiteral("data")))
        job.dataset.path = QFileInfo(p.value(QStringLiteral("data"))).absoluteFilePath();
    text("label-column", job.dataset.labelColumn);
    text("color", job.dataset.color);
    text("bad-images", job.dataset.badImages);
    if (p.isSet(QStringLiteral("hflip")))
        job.dataset.horizontalFlip = true;
    if (p.isSet(QStringLiteral("fresh-optimizer")))
        job.training.carryOptimizer = false;
    if (p.isSet(QStringLiteral("share-tail")))
        job.fleet.shareTail = true;
    if (p.isSet(QStringLiteral("speculate")))
        job.fleet.speculate = true;
    if (p.isSet(QStringLiteral("dismiss-idle")))
        job.fleet.dismissIdle = true;
    text("rule", job.aggregation.rule);
    text("instance-type", job.fleet.instanceType);
    text("price-class", job.fleet.priceClass);
    text("compression", job.fleet.compression);
    text("require-device", job.fleet.requireDevice);
    if (p.isSet(QStringLiteral("price-table")))
        job.fleet.priceTable = QFileInfo(p.value(QStringLiteral("price-table"))).absoluteFilePath();
    // A job trained on other data or another model than the default job's says so in its name,
    // rather than carry the default job's.
    if (p.isSet(QStringLiteral("job-name")))
        job.name = p.value(QStringLiteral("job-name")).trimmed();
    else if (job.name == JobSpec::defaultJob().name)
        job.name = job.describedName();
    return job.validate();
}

QString duration(qint64 ms)
{
    const qint64 s = ms / 1000;
    if (s >= 3600)
        return QStringLiteral("%1h%2m").arg(s / 3600).arg((s / 60) % 60, 2, 10, QChar(u'0'));
    if (s >= 60)
        return QStringLiteral("%1m%2s").arg(s / 60).arg(s % 60, 2, 10, QChar(u'0'));
    return QStringLiteral("%1s").arg(s);
}

QString progressLine(const JobProgress &p, int alive, int workers, const QString &task)
{
    const bool classes = task == QLatin1String("classification");
    const QString scoreName = classes ? QStringLiteral("acc") : taskInfo(task).score;
    // No evaluation yet (the first epoch runs, or its evaluation is under way): a dash, not the
    // -1 that stands for "none" (an R² may be negative, so the epoch evaluated says it).
    const QString accuracy = p.evaluatedEpoch < 0 ? QStringLiteral("–") : scoreValue(task, p.testAccuracy);
    if (!p.stalled.isEmpty())
        return QStringLiteral("epoch %1/%2 | version %3 | test %4 %5 | STALLED: %6 | %7")
            .arg(p.epochsDone).arg(p.epochs).arg(p.version)
            .arg(scoreName, accuracy, p.stalled, duration(p.elapsedMs));
    return QStringLiteral("epoch %1/%2 | version %3 | loss %4 | test %5 %6 | workers %7/%8 | staleness %9 (max %10)"
                          " | savings %11% | %12")
        .arg(p.epochsDone).arg(p.epochs).arg(p.version)
        .arg(p.lossEma < 0 ? QStringLiteral("  -  ") : QString::number(p.lossEma, 'f', 3), scoreName, accuracy)
        .arg(alive).arg(workers)
        .arg(p.recentStaleness, 0, 'f', 1).arg(p.maxStaleness)
        .arg(p.cost.savingsPercent(), 0, 'f', 0)
        .arg(duration(p.elapsedMs));
}

void printSummary(const JobProgress &p, const QString &runDir, qint64 wallMs, const QString &task)
{
    const LedgerTotals &c = p.cost;
    const double wasteShare = c.usefulSeconds + c.wastedSeconds > 0
                                  ? 100.0 * c.wastedSeconds / (c.usefulSeconds + c.wastedSeconds)
                                  : 0.0;
    std::printf("\nJob '%s' finished.\n", p.name.toUtf8().constData());
    std::printf("  %s %s (loss %.4f) after %d epochs\n",
                QString(QStringLiteral("test ") + taskInfo(task).score).leftJustified(20).toUtf8().constData(),
                scoreValue(task, p.testAccuracy).toUtf8().constData(), p.testLoss, p.epochs);
    std::printf("  versions             %lld (assimilations %lld)\n", static_cast<long long>(p.version),
                static_cast<long long>(p.seq));
    std::printf("  staleness            mean of last 50: %.2f, max %lld\n", p.recentStaleness,
                static_cast<long long>(p.maxStaleness));
    if (p.bufferSize > 1)
        std::printf("  aggregation buffer   %d results per version\n", p.bufferSize);
    std::printf("  preemptions          %lld, reassigned subtasks %lld, duplicate results %lld, rejected %lld\n",
                static_cast<long long>(p.preemptions), static_cast<long long>(p.reassignments),
                static_cast<long long>(p.duplicates), static_cast<long long>(p.rejected));
    if (p.resultsReceived > 0)
        std::printf("  results' weights     %.1f KiB each on the way in (mean of %lld)\n",
                    double(p.resultBytes) / double(p.resultsReceived) / 1024.0, static_cast<long long>(p.resultsReceived));
    if (p.weightsSent > 0)
        std::printf("  global weights       %.1f KiB each on the way out (mean of %lld: %lld whole, %lld as a change, "
                    "%lld as an anchor and a change)\n",
                    double(p.weightsSentBytes) / double(p.weightsSent) / 1024.0, static_cast<long long>(p.weightsSent),
                    static_cast<long long>(p.weightsSentWhole),
                    static_cast<long long>(p.weightsSent - p.weightsSentWhole - p.weightsSentAnchored),
                    static_cast<long long>(p.weightsSentAnchored));
    std::printf("  worker time          %.0f s useful, %.0f s wasted by preemptions (%.1f%%)\n", c.usefulSeconds,
                c.wastedSeconds, wasteShare);
    std::printf("  cost                 $%.4f at spot prices, $%.4f at on-demand prices, $%.4f paid: savings %.0f%%\n",
                c.costSpot, c.costOnDemand, c.costActual, c.savingsPercent());
    std::printf("  wall time            %s this run\n", duration(wallMs).toUtf8().constData());
    std::printf("  run directory        %s (model.pt, model-best.pt, metrics.csv%s, tensorboard/, flotilla.db, flotilla.log)\n",
                runDir.toUtf8().constData(), task == QLatin1String("classification") ? ", confusion.csv" : "");
}


void addJobOptions(QCommandLineParser &parser)
{
    for (const auto &f : kFlags)
        parser.addOption(f.valueName ? QCommandLineOption(QString::fromLatin1(f.name), QString::fromLatin1(f.help),
                                                          QString::fromLatin1(f.valueName))
                                     : QCommandLineOption(QString::fromLatin1(f.name), QString::fromLatin1(f.help)));
}

bool anyJobOptionSet(const QCommandLineParser &parser)
{
    for (const auto &f : kFlags) {
        const QString name = QString::fromLatin1(f.name);
        if (name != QLatin1String("quiet") && name != QLatin1String("verbose") && parser.isSet(name))
            return true;
    }
    return false;
}

Result<JobSpec> jobFromOptions(const QCommandLineParser &parser, const QString &jobFile)
{
    JobSpec job = JobSpec::defaultJob();
    if (!jobFile.isEmpty() || parser.isSet(QStringLiteral("job"))) {
        auto loaded = JobSpec::load(jobFile.isEmpty() ? parser.value(QStringLiteral("job")) : jobFile);
        if (!loaded)
            return loaded.takeError();
        job = *loaded;
    }
    if (auto applied = applyFlags(parser, job); !applied)
        return applied.takeError();
    return job;
}

QString commandHelp(const QCommandLineParser &parser, const QString &command)
{
    // QCommandLineParser names the binary; the command's name is what users type.
    QString help = parser.helpText();
    const qsizetype options = help.indexOf(QStringLiteral(" [options]"));
    if (help.startsWith(QStringLiteral("Usage: ")) && options > 0)
        help.replace(0, options, QStringLiteral("Usage: flotilla ") + command);
    return help;
}

std::optional<int> parseOrExit(QCommandLineParser &parser, const QStringList &arguments, const QString &command)
{
    if (!parser.parse(arguments)) {
        std::fprintf(stderr, "flotilla %s: %s\n", command.toUtf8().constData(), parser.errorText().toUtf8().constData());
        return 2;
    }
    if (parser.isSet(QStringLiteral("help"))) {
        std::fputs(commandHelp(parser, command).toUtf8().constData(), stdout);
        return 0;
    }
    return std::nullopt;
}

void installStopSignals()
{
    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
}

int pendingStopSignal()
{
    return g_signal.load();
}

ProgressPrinter::ProgressPrinter(bool quiet, int workers, QString task)
    : m_quiet(quiet), m_terminal(isTerminal(stdout)), m_workers(workers), m_task(std::move(task))
{
    m_sinceLine.start();
}

void ProgressPrinter::update(const JobProgress &p, int alive)
{
    m_last = p;
    if (m_quiet)
        return;
    // On a terminal the line redraws in place; in a log it is written every 10 s.
    if (m_terminal) {
        std::printf("\r\x1b[K%s", progressLine(p, alive, m_workers, m_task).toUtf8().constData());
        std::fflush(stdout);
        m_drawn = true;
    } else if (m_sinceLine.elapsed() >= 10000) {
        m_sinceLine.restart();
        std::printf("%s\n", progressLine(p, alive, m_workers, m_task).toUtf8().constData());
        std::fflush(stdout);
    }
}

void ProgressPrinter::endLine()
{
    if (m_drawn)
        std::printf("\n");
    m_drawn = false;
}

int runJobToEnd(LocalFleet &f, const JobRun &run)
{
    const JobSpec &spec = f.spec();
    ProgressPrinter printer(run.quiet, spec.fleet.workers, spec.training.task);
    QElapsedTimer wall;
    wall.start();
    int exitCode = ExitOk;
    QObject::connect(&f, &LocalFleet::progressed, &f, [&](const JobProgress &p, int alive) {
        printer.update(p, run.countConnected ? p.workersOnline : alive);
    });
    QObject::connect(&f, &LocalFleet::finished, &f, [&](bool done, const QString &message) {
        if (!done) {
            qCCritical(lcApp).noquote() << "the job stopped:" << message;
            if (!run.failureHint.isEmpty())
                std::fprintf(stderr, "%s\n", run.failureHint.toUtf8().constData());
            exitCode = ExitFailure;
        }
        QTimer::singleShot(done ? run.quitDelayMs : 0, qApp, &QCoreApplication::quit);
    });
    installStopSignals();
    QTimer signalPoll;
    QObject::connect(&signalPoll, &QTimer::timeout, &f, [&] {
        if (pendingStopSignal() == 0)
            return;
        std::fprintf(stderr, "\n%s\n", run.stopMessage.toUtf8().constData());
        exitCode = ExitInterrupted;
        QCoreApplication::quit();
    });
    signalPoll.start(100);
    if (run.connectMore)
        run.connectMore(exitCode);

    f.start();
    QCoreApplication::exec();
    signalPoll.stop();
    if (run.beforeStop)
        run.beforeStop();
    f.stop();
    if (exitCode == ExitOk) {
        printer.endLine();
        printSummary(printer.last(), f.runDir(), wall.elapsed(), spec.training.task);
    }
    setLogFile({});
    return exitCode;
}

} // namespace flotilla
