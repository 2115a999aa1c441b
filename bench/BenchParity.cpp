#include "bench/BenchParity.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/Contenders.h"
#include "bench/ParityData.h"
#include "common/AtomicFile.h"
#include "common/Random.h"
#include "engine/coordination/Store.h"
#include "engine/data/JobData.h"
#include "engine/training/Precision.h"
#include "engine/training/Trainer.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QThread>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <thread>

namespace flotilla {

namespace {

struct Run
{
    QString job;
    QString contender; // loop, flotilla, ddp
    QString rule;      // flotilla: the rule; ddp: its learning rate
    int workers = 1;
    int repeat = 0;
    std::vector<EpochLine> epochs;
    QString note; // why it did not finish
    double finalAccuracy() const { return epochs.empty() ? -1.0 : epochs.back().accuracy; }
};

} // namespace

QString findBenchFile(const QString &name)
{
    const QString app = QCoreApplication::applicationDirPath();
    const QStringList candidates{app + QStringLiteral("/../../../bench/") + name,
                                 QDir::currentPath() + QStringLiteral("/bench/") + name};
    for (const QString &candidate : candidates)
        if (QFileInfo::exists(candidate))
            return QFileInfo(candidate).canonicalFilePath();
    return {};
}

namespace {

// NumPy's .npy format, version 1.0: magic, header length, a Python dict literal padded to a
// multiple of 64 bytes, the raw little-endian data.
Result<void> writeNpy(const QString &path, const torch::Tensor &tensor)
{
    const torch::Tensor t = tensor.contiguous().cpu();
    const char *descr = t.scalar_type() == torch::kFloat32 ? "<f4" : t.scalar_type() == torch::kInt64 ? "<i8" : nullptr;
    if (!descr)
        return fail(QStringLiteral("cannot write a %1 tensor as .npy").arg(QString::fromLatin1(t.dtype().name().data())));
    QByteArray shape;
    for (std::int64_t d = 0; d < t.dim(); ++d)
        shape += QByteArray::number(qint64(t.size(d))) + ", ";
    QByteArray header = "{'descr': '" + QByteArray(descr) + "', 'fortran_order': False, 'shape': (" + shape + "), }";
    while ((10 + header.size() + 1) % 64 != 0)
        header += ' ';
    header += '\n';
    QByteArray bytes("\x93NUMPY\x01\x00", 8);
    bytes.append(char(header.size() & 0xFF)).append(char(header.size() >> 8)).append(header);
    bytes.append(static_cast<const char *>(t.data_ptr()), qsizetype(t.numel() * t.element_size()));
    return writeFileAtomically(path, bytes);
}

} // namespace

Result<void> exportForPython(const JobSpec &spec, const QString &dir)
{
    auto data = loadJobData(spec);
    if (!data)
        return data.takeError();
    QDir().mkpath(dir);
    const auto features = [](const Dataset &d) {
        return InputPipeline(d, torch::kCPU).rows(0, d.size()).to(torch::kFloat32).contiguous();
    };
    for (const auto &[name, tensor] :
         {std::pair<const char *, torch::Tensor>{"x_train", features((*data)->train)}, {"y_train", (*data)->train.labels},
          {"x_test", features((*data)->test)}, {"y_test", (*data)->test.labels}})
        if (auto r = writeNpy(QDir(dir).filePath(QLatin1String(name) + QStringLiteral(".npy")), tensor); !r)
            return r;
    torch::manual_seed(spec.training.seed);
    auto model = createModel(spec.model, (*data)->inputShape, (*data)->numClasses);
    if (!model)
        return model.takeError();
    return (*model)->save(QDir(dir).filePath(QStringLiteral("model.pt")));
}

namespace {

// The plain loop: the job's model with its initial weights (the same seed as the
// coordinator's), its optimizer, batch and schedule per step, the whole training set
// shuffled every epoch, no shards, no workers.
Result<void> runPlainLoop(const JobSpec &spec, int threads,
                          const std::function<void(int epoch, const Evaluation &test, double evalSeconds)> &epochDone)
{
    auto loaded = loadJobData(spec);
    if (!loaded)
        return loaded.takeError();
    const JobData &data = **loaded;
    at::set_num_threads(std::max(1, threads));
    torch::manual_seed(spec.training.seed);
    auto built = createModel(spec.model, data.inputShape, data.numClasses);
    if (!built)
        return built.takeError();
    Model &model = **built;
    const TrainingSpec &t = spec.training;
    try {
        std::unique_ptr<torch::optim::Optimizer> optimizer;
        if (t.optimizer == QLatin1String("adam"))
            optimizer = std::make_unique<torch::optim::Adam>(
                model.parameters(),
                torch::optim::AdamOptions(t.learningRate).betas({t.beta1, t.beta2}).eps(t.eps).weight_decay(t.weightDecay));
        else if (t.optimizer == QLatin1String("adamw"))
            optimizer = std::make_unique<torch::optim::AdamW>(
                model.parameters(),
                torch::optim::AdamWOptions(t.learningRate).betas({t.beta1, t.beta2}).eps(t.eps).weight_decay(t.weightDecay));
        else
            optimizer = std::make_unique<torch::optim::SGD>(
                model.parameters(), torch::optim::SGDOptions(t.learningRate)
                                        .momentum(t.momentum)
                                        .nesterov(t.nesterov)
                                        .weight_decay(t.weightDecay));
        const TaskLoss lossOf = taskLoss(t);
        auto precisionOk = precisionOn(t.precision, torch::kCPU);
        if (!precisionOk)
            return precisionOk.takeError();
        const Precision precision = *precisionOk;
        const Dataset &train = data.train;
        const std::int64_t n = train.size();
        const std::int64_t batch = t.batchSize;
        const LearningRateSchedule schedule = learningRateSchedule(t, (n + batch - 1) / batch);
        const InputPipeline inputs(train, torch::kCPU);
        std::vector<std::int64_t> order(static_cast<std::size_t>(n));
        std::iota(order.begin(), order.end(), std::int64_t{0});
        std::int64_t step = 0;
        for (int epoch = 1; epoch <= t.epochs; ++epoch) {
            deterministicShuffle(order, mixSeed(t.seed, static_cast<std::uint64_t>(epoch)));
            const torch::Tensor orderTensor = torch::from_blob(order.data(), {n}, torch::kInt64).clone();
            model.setTraining(true);
            for (std::int64_t i = 0; i < n; i += batch) {
                const torch::Tensor idx = orderTensor.narrow(0, i, std::min(batch, n - i));
                const torch::Tensor x = inputs.trainingRows(idx, mixSeed(t.seed, static_cast<std::uint64_t>(step)));
                for (auto &group : optimizer->param_groups())
                    group.options().set_lr(schedule.at(step));
                ++step;
                optimizer->zero_grad();
                torch::Tensor loss;
                {
                    const AutocastScope autocast(precision, torch::kCPU);
                    loss = lossOf(model.forward(x), train.labels.index_select(0, idx));
                }
                loss.to(torch::kFloat).backward();
                if (t.clipGradNorm > 0)
                    torch::nn::utils::clip_grad_norm_(model.parameters(), t.clipGradNorm);
                optimizer->step();
            }
            QElapsedTimer evaluation;
            evaluation.start();
            auto ev = evaluate(model, model.flatWeights(), data.test, torch::kCPU, lossOf);
            if (!ev)
                return ev.takeError();
            epochDone(epoch, *ev, double(evaluation.nsecsElapsed()) / 1e9);
        }
    } catch (const std::exception &e) {
        return fail(QStringLiteral("the plain loop failed: %1").arg(torchErrorSummary(e)));
    }
    return {};
}

} // namespace

Result<void> applyParityRule(JobSpec &job, const QString &text)
{
    AggregationSpec &a = job.aggregation;
    const QStringList parts = text.split(u'/');
    a.rule = parts.first();
    for (int i = 1; i < parts.size(); ++i) {
        const QString name = parts[i].section(u'=', 0, 0);
        bool ok = false;
        const double v = parts[i].section(u'=', 1).toDouble(&ok);
        if (!ok)
            return fail(QStringLiteral("'%1' in rule '%2' is not name=number").arg(parts[i], text));
        if (name == QLatin1String("alpha"))
            a.alpha = v;
        else if (name == QLatin1String("damping"))
            a.stalenessDamping = v;
        else if (name == QLatin1String("outer-lr"))
            a.outerLearningRate = v;
        else if (name == QLatin1String("outer-momentum"))
            a.outerMomentum = v;
        else if (name == QLatin1String("period"))
            a.momentumPeriod = int(v);
        else if (name == QLatin1String("exponent"))
            a.stalenessExponent = v;
        else if (name == QLatin1String("buffer"))
            a.buffer = int(v);
        else if (name == QLatin1String("rounds"))
            a.rounds = v != 0;
        else if (name == QLatin1String("round-steps"))
            a.roundSteps = int(v);
        else if (name == QLatin1String("outer-scaled"))
            a.outerScaledByFleet = v != 0;
        else if (name == QLatin1String("largest-step"))
            a.largestFleetStep = int(v);
        else if (name == QLatin1String("adaptive"))
            a.adaptiveFleetStep = v != 0;
        else if (name == QLatin1String("normalize"))
            a.normalizeStaleness = v != 0;
        else if (name == QLatin1String("worker-momentum-scaled"))
            a.workerMomentumScaledByFleet = v != 0;
        else if (name == QLatin1String("lr-times"))
            job.training.learningRate *= v; // the linear scaling rule, as DDP is tuned
        else
            return fail(QStringLiteral("unknown setting '%1' in rule '%2' (alpha, damping, outer-lr, outer-momentum, "
                                       "period, exponent, buffer, rounds, round-steps, outer-scaled, largest-step, adaptive, normalize, "
                                       "worker-momentum-scaled, lr-times)")
                            .arg(name, text));
    }
    return {};
}

namespace {

// A Flotilla run: `flotilla train` on the job, then its store read back. An epoch's seconds
// run from starting the process to its epoch-completed event (evaluations run beside
// training and stay on the clock).
Run runFlotilla(const ParityJob &job, const QString &rule, int workers, int threads, double slowWorker,
                double maxSeconds, const QString &logFile)
{
    Run run;
    QTemporaryDir dir;
    JobSpec spec = job.spec;
    if (auto r = applyParityRule(spec, rule); !r) {
        run.note = r.error();
        return run;
    }
    spec.fleet.workers = workers;
    spec.training.threads = threads;
    spec.fleet.preemption.meanIntervalSeconds = 0;
    const QString jobFile = dir.filePath(QStringLiteral("job.json"));
    if (auto saved = spec.save(jobFile); !saved) {
        run.note = saved.error();
        return run;
    }
    const QString runDir = dir.filePath(QStringLiteral("run"));
    QStringList arguments{QStringLiteral("train"), QStringLiteral("--job"), jobFile, QStringLiteral("--run-dir"),
                          runDir, QStringLiteral("--quiet")};
    if (slowWorker > 1)
        arguments << QStringLiteral("--slow-worker") << QString::number(slowWorker);
    const qint64 startedMs = QDateTime::currentMSecsSinceEpoch();
    {
        Contender c(QCoreApplication::applicationFilePath(), arguments, logFile);
        while (c.running() && c.seconds() < maxSeconds)
            c.process().waitForFinished(250);
        if (c.running())
            run.note = QStringLiteral("not finished in %1 s").arg(maxSeconds);
        else if (c.process().exitCode() != 0)
            run.note = QStringLiteral("flotilla train exited with %1 (see %2)").arg(c.process().exitCode()).arg(logFile);
    }
    auto store = Store::open(runDir + QStringLiteral("/flotilla.db"));
    if (!store) {
        run.note = store.error();
        return run;
    }
    auto evaluations = (*store)->evaluations(1);
    auto closed = (*store)->events(1, EventKind::EpochCompleted);
    if (!evaluations || !closed)
        return run;
    for (const EvaluationRecord &e : *evaluations) {
        EpochLine line;
        line.epoch = e.epoch + 1;
        line.accuracy = e.accuracy;
        if (std::size_t(e.epoch) < closed->size())
            line.seconds = double((*closed)[std::size_t(e.epoch)].atMs - startedMs) / 1000.0;
        run.epochs.push_back(line);
    }
    return run;
}

std::vector<double> numbers(const QString &text)
{
    std::vector<double> out;
    for (const QString &part : text.split(u',', Qt::SkipEmptyParts))
        out.push_back(part.trimmed().toDouble());
    return out;
}

QString percent(double v)
{
    return v < 0 ? QStringLiteral("  -  ") : QString::number(100.0 * v, 'f', 1);
}

} // namespace

Result<std::vector<ParityJob>> paritySuite(const ParitySuiteOptions &options)
{
    const bool quick = options.quick;
    const QString dataDir = QDir(options.dataDir).absolutePath();
    QDir().mkpath(dataDir);
    const QString shapes = QDir(dataDir).filePath(quick ? QStringLiteral("shapes-quick") : QStringLiteral("shapes"));
    const QString table = QDir(dataDir).filePath(quick ? QStringLiteral("table-quick.csv") : QStringLiteral("table.csv"));
    const QString models = QDir(dataDir).filePath(QStringLiteral("models"));
    ShapesFolderConfig shapesConfig;
    TableConfig tableConfig;
    if (quick) {
        shapesConfig.trainPerClass = 400;
        shapesConfig.testPerClass = 100;
        shapesConfig.size = 16;
        tableConfig.rows = 2000;
    }
    if (!QFileInfo::exists(shapes + QStringLiteral("/test"))) {
        std::printf("Generating %d images in %s\n", 4 * (shapesConfig.trainPerClass + shapesConfig.testPerClass),
                    shapes.toUtf8().constData());
        std::fflush(stdout);
        if (auto r = writeShapesFolder(shapes, shapesConfig); !r) {
            return r.takeError();
        }
    }
    if (!QFileInfo::exists(table))
        if (auto r = writeTableCsv(table, tableConfig); !r) {
            return r.takeError();
        }

    const auto imageJob = [&](JobSpec spec) {
        spec.dataset.kind = QStringLiteral("images");
        spec.dataset.path = shapes;
        spec.dataset.imageSize = shapesConfig.size;
        spec.dataset.color = QStringLiteral("rgb");
        return spec;
    };
    std::vector<ParityJob> jobs;
    for (const QString &name : options.jobs) {
        ParityJob job;
        job.name = name;
        job.spec = JobSpec();
        job.spec.name = QStringLiteral("parity-") + name;
        JobSpec &s = job.spec;
        if (name == QLatin1String("fashion")) {
            s.training.epochs = 3;
            s.dataset.trainLimit = quick ? 3000 : options.fashionLimit;
            if (quick)
                s.dataset.testLimit = 1000;
            job.description = QStringLiteral("the built-in cnn on Fashion-MNIST (%1 training images)")
                                  .arg(s.dataset.trainLimit > 0 ? s.dataset.trainLimit : 60000);
        } else if (name == QLatin1String("shapes")) {
            s = imageJob(s);
            s.training.epochs = 6;
            job.description = QStringLiteral("the built-in cnn on a generated image folder (%1 training images, RGB "
                                             "%2×%2, 4 classes)")
                                  .arg(4 * shapesConfig.trainPerClass).arg(shapesConfig.size);
        } else if (name == QLatin1String("table")) {
            s.dataset.kind = QStringLiteral("csv");
            s.dataset.path = table;
            s.dataset.testFraction = 0.2;
            s.model.kind = QStringLiteral("mlp");
            s.training.epochs = 10;
            job.description = QStringLiteral("the built-in mlp on a generated CSV (%1 rows, %2 features on scales from "
                                             "0.01 to 1000, %3 classes)")
                                  .arg(tableConfig.rows).arg(tableConfig.features).arg(tableConfig.classes);
        } else if (name == QLatin1String("bn-cnn") || name == QLatin1String("resnet18")) {
            s = imageJob(s);
            s.model.kind = QStringLiteral("torchscript");
            s.model.path = QDir(models).filePath(name + QStringLiteral(".pt"));
            s.training.epochs = name == QLatin1String("resnet18") ? 4 : 6;
            job.python = true;
            job.description = name == QLatin1String("bn-cnn")
                                  ? QStringLiteral("a Python TorchScript CNN with BatchNorm on the image folder")
                                  : QStringLiteral("torchvision's ResNet-18 (TorchScript, BatchNorm, residual adds) on "
                                                   "the image folder");
        } else {
            return fail(QStringLiteral("unknown job '%1' (fashion, shapes, table, bn-cnn, resnet18)").arg(name));
        }
        if (quick)
            s.training.epochs = std::min(s.training.epochs, 4);
        // The warmup in steps of the plain loop's epoch (every contender scales it to its own).
        if (const double warmup = options.warmupEpochs; warmup > 0) {
            const qint64 samples = name == QLatin1String("fashion")
                                       ? (s.dataset.trainLimit > 0 ? s.dataset.trainLimit : 60000)
                                   : name == QLatin1String("table")
                                       ? qint64(double(tableConfig.rows) * (1.0 - s.dataset.testFraction))
                                       : qint64(4 * shapesConfig.trainPerClass);
            s.training.lrWarmupSteps = int(std::ceil(warmup * double((samples + s.training.batchSize - 1)
                                                                      / s.training.batchSize)));
        }
        if (const auto e = options.epochs.find(name); e != options.epochs.end() && e->second > 0)
            s.training.epochs = e->second;
        if (options.adjust)
            options.adjust(s);
        if (auto valid = s.validate(); !valid)
            return fail(QStringLiteral("job %1: %2").arg(name, valid.error()));
        jobs.push_back(job);
    }
    // The Python models, where Python can make them.
    if (std::any_of(jobs.begin(), jobs.end(), [](const ParityJob &j) { return j.python; })) {
        const QString script = findBenchFile(QStringLiteral("parity_models.py"));
        QProcess make;
        make.setProcessChannelMode(QProcess::MergedChannels);
        make.start(options.python, {script, models, QStringLiteral("--channels"), QStringLiteral("3"), QStringLiteral("--classes"),
                            QStringLiteral("4"), QStringLiteral("--size"), QString::number(shapesConfig.size)});
        make.waitForFinished(300000);
        const QString said = QString::fromUtf8(make.readAll()).trimmed();
        if (!said.isEmpty())
            std::printf("%s\n", said.toUtf8().constData());
        for (auto it = jobs.begin(); it != jobs.end();) {
            if (it->python && !QFileInfo::exists(it->spec.model.path)) {
                std::printf("Leaving out %s: %s was not made (%s)\n", it->name.toUtf8().constData(),
                            it->spec.model.path.toUtf8().constData(),
                            script.isEmpty() ? "bench/parity_models.py not found" : "see above");
                it = jobs.erase(it);
            } else {
                ++it;
            }
        }
    }
    return jobs;
}

int runBenchParityLoop(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("The plain single-process loop of `flotilla bench parity`: one "
                                                    "JSON line per epoch."));
    parser.addHelpOption();
    parser.addOptions({{QStringLiteral("job"), QStringLiteral("Job file."), QStringLiteral("file")},
                       {QStringLiteral("threads"), QStringLiteral("LibTorch threads."), QStringLiteral("n"),
                        QStringLiteral("2")}});
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench parity-loop")))
        return *stop;
    auto spec = JobSpec::load(parser.value(QStringLiteral("job")));
    if (!spec) {
        std::printf("{\"failed\": \"%s\"}\n", spec.error().toUtf8().constData());
        return ExitUsage;
    }
    QElapsedTimer timer;
    timer.start();
    double evalSeconds = 0;
    auto done = runPlainLoop(*spec, parser.value(QStringLiteral("threads")).toInt(),
                             [&](int epoch, const Evaluation &test, double evaluation) {
                                 evalSeconds += evaluation;
                                 // The score (accuracy, or the task's: R², mean F1, token accuracy), the
                                 // loss and the task's metrics.
                                 QByteArray further;
                                 for (const auto &[name, value] : test.metrics)
                                     further += QStringLiteral(", \"%1\": %2").arg(name).arg(value, 0, 'g', 6).toUtf8();
                                 std::printf("{\"epoch\": %d, \"accuracy\": %.4f, \"loss\": %.5f%s, \"seconds\": %.2f, "
                                             "\"eval_seconds\": %.3f}\n",
                                             epoch, test.accuracy, test.loss, further.constData(),
                                             double(timer.elapsed()) / 1000.0, evalSeconds);
                                 std::fflush(stdout);
                             });
    if (!done) {
        std::printf("{\"failed\": \"%s\"}\n", QString(done.error()).replace(u'"', u'\'').toUtf8().constData());
        return ExitFailure;
    }
    return ExitOk;
}

int runBenchParity(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Flotilla against the plain single-process loop (same model, optimizer, batch, schedule and epochs) and "
        "against PyTorch DDP, on jobs off the default path. Data sets are generated at run time."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("jobs"),
         QStringLiteral("Jobs: fashion, shapes (an image folder), table (a CSV), bn-cnn (a Python TorchScript model "
                        "with BatchNorm, on shapes), resnet18 (torchvision's, on shapes)."),
         QStringLiteral("list"), QStringLiteral("fashion,shapes,table,bn-cnn,resnet18")},
        {QStringLiteral("workers"), QStringLiteral("Flotilla's local workers (and DDP's processes, above 1)."),
         QStringLiteral("list"), QStringLiteral("1,2,4")},
        {QStringLiteral("rules"), QStringLiteral("Aggregation rules, or 'default' (the job's), or 'all'."),
         QStringLiteral("list"), QStringLiteral("default")},
        {QStringLiteral("epochs"), QStringLiteral("Epochs of every job (0: each job's own)."), QStringLiteral("n"),
         QStringLiteral("0")},
        {QStringLiteral("repeats"), QStringLiteral("Runs of every contender (min, median and max are reported)."),
         QStringLiteral("n"), QStringLiteral("3")},
        {QStringLiteral("fashion-limit"), QStringLiteral("fashion: train on the first n samples (0 = all 60,000)."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("ddp"), QStringLiteral("Also PyTorch DDP (gloo), tuned over the job's learning rate and that "
                                               "times the processes: on or off."),
         QStringLiteral("on|off"), QStringLiteral("on")},
        {QStringLiteral("lr-scaled"),
         QStringLiteral("Flotilla with several workers also at the learning rate times the workers (DDP's grid): on, "
                        "off, or only (not at the job's own rate)."),
         QStringLiteral("on|off|only"), QStringLiteral("on")},
        {QStringLiteral("slow-worker"), QStringLiteral("One of the workers (DDP: rank 1) this many times slower."),
         QStringLiteral("factor"), QStringLiteral("1")},
        {QStringLiteral("csv"), QStringLiteral("Write every epoch of every run here."), QStringLiteral("file")},
        {QStringLiteral("data-dir"), QStringLiteral("Generate the data sets and models here (kept; reused when there)."),
         QStringLiteral("dir")},
        {QStringLiteral("max-seconds"), QStringLiteral("Give a run up after this long."), QStringLiteral("seconds"),
         QStringLiteral("1800")},
        {QStringLiteral("python"), QStringLiteral("Python with torch (Debian's python3-torch)."), QStringLiteral("path"),
         QStringLiteral("/usr/bin/python3")},
        {QStringLiteral("optimizer"), QStringLiteral("Every job's optimizer (sgd, adam, adamw) for all contenders; "
                                                     "default: each job's own."),
         QStringLiteral("name")},
        {QStringLiteral("lr"), QStringLiteral("Every job's learning rate (with --optimizer adam or adamw, say)."),
         QStringLiteral("rate")},
        {QStringLiteral("weight-decay"), QStringLiteral("Every job's weight decay."), QStringLiteral("w")},
        {QStringLiteral("precision"), QStringLiteral("fp32 or bf16 for Flotilla and the plain loop (autocast)."),
         QStringLiteral("p")},
        {QStringLiteral("warmup-epochs"),
         QStringLiteral("A gradual warmup of the learning rate over this many epochs, for every contender (DDP's "
                        "linear scaling rule calls for one)."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("quick"), QStringLiteral("Tiny data sets and one repeat, for the test suite.")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench parity")))
        return *stop;
    const bool quick = parser.isSet(QStringLiteral("quick"));
    const int repeats = std::max(1, parser.value(QStringLiteral("repeats")).toInt());
    const int epochsOverride = std::max(0, parser.value(QStringLiteral("epochs")).toInt());
    const double slowWorker = std::max(1.0, parser.value(QStringLiteral("slow-worker")).toDouble());
    const QString lrScaled = parser.value(QStringLiteral("lr-scaled"));
    const double maxSeconds = std::max(10.0, parser.value(QStringLiteral("max-seconds")).toDouble());
    const QString python = parser.value(QStringLiteral("python"));
    const int cores = std::max(1, int(std::thread::hardware_concurrency()));
    std::vector<int> workerCounts;
    for (const double w : numbers(parser.value(QStringLiteral("workers"))))
        if (w >= 1)
            workerCounts.push_back(int(w));
    QStringList rules = parser.value(QStringLiteral("rules")).split(u',', Qt::SkipEmptyParts);
    if (rules == QStringList{QStringLiteral("all")})
        rules = {QStringLiteral("async-delta"), QStringLiteral("async-delta/damping=0"),
                 QStringLiteral("async-delta/outer-lr=0.7/outer-momentum=0.9/period=0"), QStringLiteral("vc-asgd"),
                 QStringLiteral("staleness-aware/alpha=0"), QStringLiteral("sync-average")};
    const QString defaultRule = JobSpec().aggregation.rule;
    for (QString &r : rules)
        if (r == QLatin1String("default"))
            r = defaultRule;
    if (workerCounts.empty() || rules.isEmpty()) {
        std::fprintf(stderr, "flotilla bench parity: --workers and --rules need at least one entry\n");
        return ExitUsage;
    }

    // The data sets and models, made once.
    std::unique_ptr<QTemporaryDir> temporary;
    ParitySuiteOptions suite;
    suite.dataDir = parser.value(QStringLiteral("data-dir"));
    if (suite.dataDir.isEmpty()) {
        temporary = std::make_unique<QTemporaryDir>();
        suite.dataDir = temporary->path();
    }
    suite.jobs = parser.value(QStringLiteral("jobs")).split(u',', Qt::SkipEmptyParts);
    suite.quick = quick;
    suite.fashionLimit = parser.value(QStringLiteral("fashion-limit")).toLongLong();
    suite.warmupEpochs = parser.value(QStringLiteral("warmup-epochs")).toDouble();
    suite.python = python;
    for (const QString &name : suite.jobs)
        suite.epochs[name] = epochsOverride;
    suite.adjust = [&parser](JobSpec &s) {
        if (parser.isSet(QStringLiteral("optimizer")))
            s.training.optimizer = parser.value(QStringLiteral("optimizer"));
        if (parser.isSet(QStringLiteral("lr")))
            s.training.learningRate = parser.value(QStringLiteral("lr")).toDouble();
        if (parser.isSet(QStringLiteral("weight-decay")))
            s.training.weightDecay = parser.value(QStringLiteral("weight-decay")).toDouble();
        if (parser.isSet(QStringLiteral("precision")))
            s.training.precision = parser.value(QStringLiteral("precision"));
    };
    auto suiteJobs = paritySuite(suite);
    if (!suiteJobs) {
        std::fprintf(stderr, "flotilla bench parity: %s\n", suiteJobs.error().toUtf8().constData());
        return ExitFailure;
    }
    std::vector<ParityJob> jobs = std::move(suiteJobs).value();
    const QString ddpScript = findBenchFile(QStringLiteral("ddp_parity.py"));
    const bool ddp = parser.value(QStringLiteral("ddp")) != QLatin1String("off") && !ddpScript.isEmpty()
                     && QFileInfo::exists(python);

    std::vector<Run> runs;
    QFile csv;
    if (parser.isSet(QStringLiteral("csv"))) {
        csv.setFileName(parser.value(QStringLiteral("csv")));
        if (!csv.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
            std::fprintf(stderr, "flotilla bench parity: cannot write %s\n", csv.fileName().toUtf8().constData());
            return ExitFailure;
        }
        csv.write("job,contender,workers,rule,repeat,epoch,accuracy,seconds,note\n");
        csv.flush();
    }
    const auto record = [&](const Run &r) {
        runs.push_back(r);
        if (!csv.isOpen())
            return;
        if (r.epochs.empty())
            csv.write(QStringLiteral("%1,%2,%3,%4,%5,0,,,\"%6\"\n")
                          .arg(r.job, r.contender).arg(r.workers).arg(r.rule).arg(r.repeat + 1)
                          .arg(QString(r.note).replace(u'"', u'\''))
                          .toUtf8());
        for (const EpochLine &e : r.epochs)
            csv.write(QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,\"%9\"\n")
                          .arg(r.job, r.contender).arg(r.workers).arg(r.rule).arg(r.repeat + 1).arg(e.epoch)
                          .arg(e.accuracy, 0, 'f', 4).arg(e.seconds, 0, 'f', 2)
                          .arg(QString(r.note).replace(u'"', u'\''))
                          .toUtf8());
        csv.flush();
    };
    const auto say = [](const Run &r) {
        std::printf("  [%d] %-9s %d worker(s) %-26s", r.repeat + 1, r.contender.toUtf8().constData(), r.workers,
                    r.rule.toUtf8().constData());
        for (const EpochLine &e : r.epochs)
            std::printf(" %s", percent(e.accuracy).toUtf8().constData());
        if (!r.epochs.empty())
            std::printf("  (%.1f s)", r.epochs.back().seconds);
        if (!r.note.isEmpty())
            std::printf("  %s", r.note.toUtf8().constData());
        std::printf("\n");
        std::fflush(stdout);
    };
    QTemporaryDir work;
    const QString app = QCoreApplication::applicationFilePath();
    const int portBase = 11000 + int(QCoreApplication::applicationPid() % 20000);
    int ddpRuns = 0;

    std::printf("Parity: Flotilla at its defaults (rule %s unless named, a worker keeps its optimizer, subtasks of at "
                "least %d steps) against the plain loop with the same model, optimizer, batch, schedule and epochs%s; "
                "%d repeat(s); %d cores%s\n",
                defaultRule.toUtf8().constData(), kMinSubtaskSteps, ddp ? " and PyTorch DDP" : "", repeats, cores,
                slowWorker > 1 ? QStringLiteral("; one worker (DDP: rank 1) %1× slower").arg(slowWorker).toUtf8().constData()
                               : "");
    for (const ParityJob &job : jobs) {
        const TrainingSpec &t = job.spec.training;
        std::printf("\n%s: %s, %d epochs, %s lr %g momentum %g batch %d, %s schedule per step\n",
                    job.name.toUtf8().constData(), job.description.toUtf8().constData(), t.epochs,
                    t.optimizer.toUtf8().constData(), t.learningRate, t.momentum, t.batchSize,
                    t.lrSchedule.toUtf8().constData());
        std::fflush(stdout);
        // Repeat r of every contender runs with seed 1 + r: the same initial weights, shards
        // and orders for all of them, other ones from one repeat to the next.
        const auto seeded = [&](int r) {
            ParityJob j = job;
            j.spec.training.seed = job.spec.training.seed + quint64(r);
            return j;
        };
        // The loop: every core for its one process.
        for (int r = 0; r < repeats; ++r) {
            const QString jobFile = work.filePath(QStringLiteral("%1-%2.json").arg(job.name).arg(r));
            if (auto saved = seeded(r).spec.save(jobFile); !saved) {
                std::fprintf(stderr, "flotilla bench parity: %s\n", saved.error().toUtf8().constData());
                return ExitFailure;
            }
            Run run{job.name, QStringLiteral("loop"), QStringLiteral("-"), 1, r, {}, {}};
            const Outcome o = runLines(app, {QStringLiteral("bench"), QStringLiteral("parity-loop"), QStringLiteral("--job"),
                                             jobFile, QStringLiteral("--threads"), QString::number(cores)},
                                       2.0, maxSeconds, &run.epochs);
            run.note = o.note;
            say(run);
            record(run);
        }
        // Flotilla, the cores shared among the workers, at the job's learning rate and, for
        // several workers, at that times the workers too: the grid DDP is tuned over, since the
        // default rule averages concurrent results much as DDP averages gradients.
        std::vector<std::pair<QString, int>> flotillaRuns; // (rule, workers)
        for (const QString &rule : rules)
            for (const int w : workerCounts) {
                if (w == 1 || lrScaled != QLatin1String("only"))
                    flotillaRuns.push_back({rule, w});
                if (w > 1 && lrScaled != QLatin1String("off"))
                    flotillaRuns.push_back({rule + QStringLiteral("/lr-times=%1").arg(w), w});
            }
        for (const auto &[rule, w] : flotillaRuns)
            for (int r = 0; r < repeats; ++r) {
                const QString log = work.filePath(
                    QStringLiteral("%1-%2-%3-%4.log").arg(job.name, QString(rule).replace(u'/', u'_')).arg(w).arg(r));
                Run run = runFlotilla(seeded(r), rule, w, std::max(1, cores / w), slowWorker, maxSeconds, log);
                run.job = job.name;
                run.contender = QStringLiteral("flotilla");
                run.rule = rule;
                run.workers = w;
                run.repeat = r;
                say(run);
                record(run);
            }
        // DDP: each process one share of the cores; the learning rate tuned between the job's
        // and that times the processes (the linear scaling rule), the better kept.
        if (ddp) {
            const QString exported = work.filePath(job.name + QStringLiteral("-npy"));
            if (auto r = exportForPython(job.spec, exported); !r) {
                std::printf("  DDP left out: %s\n", r.error().toUtf8().constData());
                continue;
            }
            for (const int w : workerCounts) {
                if (w < 2)
                    continue;
                const auto ddpRun = [&](double lr, int repeat) {
                    Run run{job.name, QStringLiteral("ddp"), QStringLiteral("lr %1").arg(lr), w, repeat, {}, {}};
                    QStringList a{ddpScript,
                                  QStringLiteral("--data"), exported,
                                  QStringLiteral("--processes"), QString::number(w),
                                  QStringLiteral("--threads"), QString::number(std::max(1, cores / w)),
                                  QStringLiteral("--epochs"), QString::number(t.epochs),
                                  QStringLiteral("--optimizer"), t.optimizer,
                                  QStringLiteral("--lr"), QString::number(lr),
                                  QStringLiteral("--momentum"), QString::number(t.momentum),
                                  QStringLiteral("--weight-decay"), QString::number(t.weightDecay),
                                  QStringLiteral("--betas"), QStringLiteral("%1,%2").arg(t.beta1).arg(t.beta2),
                                  QStringLiteral("--eps"), QString::number(t.eps),
                                  QStringLiteral("--clip-grad-norm"), QString::number(t.clipGradNorm),
                                  QStringLiteral("--label-smoothing"), QString::number(t.labelSmoothing),
                                  QStringLiteral("--batch-size"), QString::number(t.batchSize),
                                  QStringLiteral("--schedule"), t.lrSchedule,
                                  QStringLiteral("--warmup-steps"), QString::number(t.lrWarmupSteps),
                                  QStringLiteral("--floor"), QString::number(t.lrFloor),
                                  QStringLiteral("--step-epochs"), QString::number(t.lrStepEpochs),
                                  QStringLiteral("--gamma"), QString::number(t.lrGamma),
                                  QStringLiteral("--seed"), QString::number(t.seed + quint64(repeat)),
                                  QStringLiteral("--port"), QString::number(portBase + (ddpRuns++ % 500) * 7)};
                    if (t.nesterov)
                        a << QStringLiteral("--nesterov");
                    if (slowWorker > 1)
                        a << QStringLiteral("--slow-rank") << QString::number(slowWorker);
                    const Outcome o = runLines(python, a, 2.0, maxSeconds, &run.epochs);
                    run.note = o.note;
                    return run;
                };
                double best = t.learningRate;
                if (repeats > 0) {
                    Run first = ddpRun(t.learningRate, 0);
                    Run scaled = ddpRun(t.learningRate * w, 0);
                    say(first);
                    say(scaled);
                    best = scaled.finalAccuracy() > first.finalAccuracy() ? t.learningRate * w : t.learningRate;
                    record(best == t.learningRate ? first : scaled);
                }
                for (int r = 1; r < repeats; ++r) {
                    Run run = ddpRun(best, r);
                    say(run);
                    record(run);
                }
            }
        }
    }

    // The summary: accuracy after the job's epochs, and epochs and seconds to the loop's
    // median accuracy less one point.
    std::printf("\nSummary (accuracy %% after the job's epochs: min / median / max; target: the loop's median less one "
                "point)\n");
    std::printf("  %-9s %-9s %-3s %-26s %-22s %8s %10s %10s\n", "job", "contender", "w", "rule", "accuracy",
                "vs loop", "epochs to", "s to");
    for (const ParityJob &job : jobs) {
        std::map<std::tuple<QString, int, QString>, std::vector<const Run *>> groups;
        for (const Run &r : runs)
            if (r.job == job.name)
                groups[{r.contender == QLatin1String("loop") ? QString() : r.contender, r.workers, r.rule}].push_back(&r);
        double loopMedian = -1;
        for (const auto &[key, members] : groups)
            if (std::get<0>(key).isEmpty()) {
                std::vector<double> finals;
                for (const Run *r : members)
                    finals.push_back(r->finalAccuracy());
                loopMedian = spread(finals).median;
            }
        const double target = loopMedian - 0.01;
        for (const auto &[key, members] : groups) {
            std::vector<double> finals, epochsTo, secondsTo;
            for (const Run *r : members) {
                finals.push_back(r->finalAccuracy());
                for (const EpochLine &e : r->epochs)
                    if (e.accuracy >= target) {
                        epochsTo.push_back(e.epoch);
                        secondsTo.push_back(e.seconds - e.evalSeconds);
                        break;
                    }
            }
            const Spread a = spread(finals);
            const QString contender = std::get<0>(key).isEmpty() ? QStringLiteral("loop") : std::get<0>(key);
            std::printf("  %-9s %-9s %-3d %-26s %5s / %5s / %5s %+8.1f %10s %10s\n", job.name.toUtf8().constData(),
                        contender.toUtf8().constData(), std::get<1>(key), std::get<2>(key).toUtf8().constData(),
                        percent(a.min).toUtf8().constData(), percent(a.median).toUtf8().constData(),
                        percent(a.max).toUtf8().constData(), loopMedian >= 0 ? 100.0 * (a.median - loopMedian) : 0.0,
                        epochsTo.size() == members.size() ? QString::number(spread(epochsTo).median).toUtf8().constData()
                                                          : "never",
                        secondsTo.size() == members.size()
                            ? QString::number(spread(secondsTo).median, 'f', 1).toUtf8().constData()
                            : "-");
        }
    }
    return ExitOk;
}

} // namespace flotilla
