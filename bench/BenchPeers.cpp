// `flotilla bench trainer|aggregation|accuracy`: Flotilla against the peers a user would pick
// instead, each pair run in the same invocation, alternating, with min/median/max over
// repeats.
//   trainer      the local trainer vs a bare LibTorch loop (samples/s; target ratio >= 0.97)
//   aggregation  one VC-ASGD assimilation vs a memcpy of the same bytes (time; target <= 1.5)
//   accuracy     time to a test accuracy on Fashion-MNIST: Flotilla with 2 worker processes vs
//                PyTorch DDP with 2 processes (gloo) vs a single-process LibTorch loop, each
//                first tuned over the same grid of learning rates and batch sizes, evaluation
//                off every clock; with --preemption-every, also Flotilla with a worker
//                SIGKILLed that often and DDP with one rank SIGKILLed once; with --link, the
//                workers and ranks behind an emulated link.
#include "bench/BenchPeers.h"

#include "app/CommandLine.h"
#include "bench/Benchmarks.h"
#include "bench/Contenders.h"
#include "engine/coordination/ResultScreen.h"
#include "engine/coordination/Store.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>

#include <algorithm>
#include <cstdio>

#ifdef Q_OS_UNIX
#include <csignal>
#include <unistd.h>
#endif

namespace flotilla {

namespace {

// Flotilla: `flotilla demo` (a coordinator and worker processes on loopback, real TLS); the
// store is read while it runs, as the dashboard does. The coordinator evaluates on a thread
// of its own while the workers go on; its clock stops when the epoch whose evaluation reached
// the target was complete (its epoch-completed event), so evaluation is off it as it is off
// the others'.
Outcome runFlotilla(const QStringList &jobFlags, double chaosEvery, double target, double maxSeconds)
{
    const qint64 startedMs = QDateTime::currentMSecsSinceEpoch();
    QTemporaryDir dir;
    QStringList arguments{QStringLiteral("demo"), QStringLiteral("--run-dir"), dir.filePath(QStringLiteral("demo"))};
    arguments += jobFlags;
    if (chaosEvery > 0)
        arguments += {QStringLiteral("--chaos-every"), QString::number(chaosEvery)};
    else
        arguments += {QStringLiteral("--chaos-mean"), QStringLiteral("0")};
    Contender c(QCoreApplication::applicationFilePath(), arguments, dir.filePath(QStringLiteral("demo.out")));
    const QString db = dir.filePath(QStringLiteral("demo/coordinator/flotilla.db"));
    Outcome out;
    while (c.seconds() < maxSeconds) {
        QThread::msleep(250);
        if (QFileInfo::exists(db)) {
            if (auto store = Store::open(db)) {
                auto evaluations = (*store)->evaluations(1);
                auto closed = (*store)->events(1, EventKind::EpochCompleted); // in epoch order
                for (const auto &e : evaluations ? *evaluations : std::vector<EvaluationRecord>{}) {
                    out.epoch = std::max(out.epoch, e.epoch + 1);
                    if (e.accuracy >= target && closed && std::size_t(e.epoch) < closed->size()) {
                        out.seconds = double((*closed)[std::size_t(e.epoch)].atMs - startedMs) / 1000.0;
                        out.epoch = e.epoch + 1;
                        return out;
                    }
                }
            }
        }
        if (!c.running()) {
            QFile log(dir.filePath(QStringLiteral("demo.out")));
            log.open(QIODevice::ReadOnly);
            out.note = QStringLiteral("ended (exit %1) without reaching the target: %2")
                           .arg(c.process().exitCode())
                           .arg(QString::fromUtf8(log.readAll().right(300)).simplified());
            return out;
        }
    }
    out.note = QStringLiteral("not reached in %1 s (%2 epochs)").arg(maxSeconds).arg(out.epoch);
    return out;
}

QString findDdpScript(const QString &given)
{
    if (!given.isEmpty())
        return given;
    const QString app = QCoreApplication::applicationDirPath();
    const QStringList candidates{app + QStringLiteral("/../../../bench/ddp_fashion.py"),
                                 QDir::currentPath() + QStringLiteral("/bench/ddp_fashion.py")};
    for (const QString &candidate : candidates)
        if (QFileInfo::exists(candidate))
            return QFileInfo(candidate).canonicalFilePath();
    return {};
}

void printSpread(const char *label, const std::vector<double> &v, const char *unit, double scale)
{
    const Spread s = spread(v);
    std::printf("  %-34s min %9.3f  median %9.3f  max %9.3f %s\n", label, s.min * scale, s.median * scale,
                s.max * scale, unit);
}

} // namespace

int benchTrainerPeers(const QCommandLineParser &parser)
{
    TrainerBenchConfig config;
    config.dataDir = parser.value(QStringLiteral("data"));
    config.samples = std::max(64, parser.value(QStringLiteral("samples")).toInt());
    config.threads = std::max(1, parser.value(QStringLiteral("threads")).toInt());
    config.repeats = std::max(1, parser.value(QStringLiteral("repeats")).toInt());
    std::printf("Trainer: the cnn on %d Fashion-MNIST samples, batch %d, %d thread(s), %d repeats, alternating\n",
                config.samples, config.batchSize, config.threads, config.repeats);
    std::fflush(stdout);
    auto rates = benchTrainer(config);
    if (!rates) {
        std::fprintf(stderr, "flotilla bench trainer: %s\n", rates.error().toUtf8().constData());
        return ExitFailure;
    }
    printSpread("Flotilla trainer (samples/s)", rates->flotilla, "", 1);
    printSpread("bare LibTorch loop (samples/s)", rates->peer, "", 1);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < rates->flotilla.size(); ++i)
        ratios.push_back(rates->flotilla[i] / rates->peer[i]);
    printSpread("ratio Flotilla / bare", ratios, "(target >= 0.97)", 1);
    return ExitOk;
}

int benchAggregationPeers(const QCommandLineParser &parser)
{
    const qint64 parameters = std::max<qint64>(1000, parser.value(QStringLiteral("parameters")).toLongLong());
    const int repeats = std::max(1, parser.value(QStringLiteral("repeats")).toInt());
    std::printf("Aggregation: %lld float32 parameters (%.1f MB), one thread, best of 5 per repeat, %d repeats\n",
                static_cast<long long>(parameters), double(parameters) * 4 / 1e6, repeats);
    std::fflush(stdout);
    const PairedRates times = benchAggregation(parameters, repeats, 5);
    if (times.peer.empty()) {
        std::fprintf(stderr, "flotilla bench aggregation: the copy did not copy\n");
        return ExitFailure;
    }
    printSpread("VC-ASGD assimilation (ms)", times.flotilla, "", 1000);
    printSpread("memcpy (ms)", times.peer, "", 1000);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < times.flotilla.size(); ++i)
        ratios.push_back(times.flotilla[i] / times.peer[i]);
    printSpread("ratio assimilation / memcpy", ratios, "(target <= 1.5)", 1);

    // What screening a result costs (docs/security.md): sampling its weights and judging the
    // sample against the statistics, once those are warm.
    WeightSegments segments;
    segments.total = parameters;
    ResultScreen screen(segments, 1);
    torch::manual_seed(1);
    const torch::Tensor base = torch::randn({parameters});
    const torch::Tensor baseSample = screen.sample(base);
    for (int i = 0; i < 32; ++i) {
        const torch::Tensor r = screen.sample(base + 0.01f * torch::randn({parameters}));
        screen.accepted(r, baseSample, screen.judge(r, baseSample, 0.03, 1.0));
    }
    const torch::Tensor result = base + 0.01f * torch::randn({parameters});
    std::vector<double> screening;
    for (int rep = 0; rep < repeats; ++rep) {
        double best = 1e30;
        for (int i = 0; i < 5; ++i) {
            QElapsedTimer t;
            t.start();
            const ResultScreen::Verdict v = screen.judge(screen.sample(result), baseSample, 0.03, 1.0);
            best = std::min(best, double(t.nsecsElapsed()) / 1e9);
            if (v.reject)
                std::fprintf(stderr, "flotilla bench aggregation: an honest-looking result was screened out: %s\n",
                             v.reason.toUtf8().constData());
        }
        screening.push_back(best);
    }
    printSpread("screening one result (ms)", screening, "", 1000);
    std::vector<double> shares;
    for (std::size_t i = 0; i < screening.size() && i < times.flotilla.size(); ++i)
        shares.push_back(screening[i] / times.flotilla[i]);
    printSpread("ratio screening / assimilation", shares, "", 1);
    return ExitOk;
}

int benchBareLoop(const QCommandLineParser &parser)
{
    BareLoopConfig config;
    config.dataDir = parser.value(QStringLiteral("data"));
    config.epochs = std::max(1, parser.value(QStringLiteral("epochs")).toInt());
    config.threads = std::max(1, parser.value(QStringLiteral("threads")).toInt());
    config.trainLimit = std::max(0, parser.value(QStringLiteral("train-limit")).toInt());
    config.learningRate = parser.value(QStringLiteral("lr")).toDouble();
    config.batchSize = std::max(1, parser.value(QStringLiteral("batch-size")).toInt());
    QElapsedTimer timer;
    timer.start();
    double evalSeconds = 0;
    auto done = runBareLoop(config, [&](int epoch, double accuracy, double evaluation) {
        evalSeconds += evaluation;
        std::printf("{\"epoch\": %d, \"accuracy\": %.4f, \"seconds\": %.2f, \"eval_seconds\": %.3f}\n", epoch,
                    accuracy, double(timer.elapsed()) / 1000.0, evalSeconds);
        std::fflush(stdout);
        return true;
    });
    if (!done) {
        std::printf("{\"failed\": \"%s\"}\n", done.error().toUtf8().constData());
        return ExitFailure;
    }
    return ExitOk;
}

namespace {

// One point of the tuning grid: a learning rate (constant) and a batch size per process.
struct Setting
{
    double lr = 0.03;
    int batch = 32;
    QString text() const { return QStringLiteral("lr %1, batch %2").arg(lr).arg(batch); }
};

Result<std::vector<double>> numberList(const QString &text, const char *flag)
{
    std::vector<double> out;
    for (const QString &part : text.split(u',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const double v = part.trimmed().toDouble(&ok);
        if (!ok || !(v > 0))
            return fail(QStringLiteral("--%1 is a comma-separated list of positive numbers; '%2' is not one")
                            .arg(QLatin1String(flag), part));
        out.push_back(v);
    }
    if (out.empty())
        return fail(QStringLiteral("--%1 is empty").arg(QLatin1String(flag)));
    return out;
}

} // namespace

int benchAccuracyPeers(const QCommandLineParser &parser)
{
    const double target = parser.value(QStringLiteral("target")).toDouble();
    const int repeats = std::max(1, parser.value(QStringLiteral("repeats")).toInt());
    const int epochs = std::max(1, parser.value(QStringLiteral("epochs")).toInt());
    const double maxSeconds = std::max(10.0, parser.value(QStringLiteral("max-seconds")).toDouble());
    const double preemptEvery = parser.value(QStringLiteral("preemption-every")).toDouble();
    const int trainLimit = std::max(0, parser.value(QStringLiteral("train-limit")).toInt());
    const QString python = parser.value(QStringLiteral("python"));
    const QString script = findDdpScript(parser.value(QStringLiteral("ddp-script")));
    const QString link = parser.value(QStringLiteral("link"));
    const QString compression = parser.value(QStringLiteral("compression"));
    const double slowWorker = std::max(1.0, parser.value(QStringLiteral("slow-worker")).toDouble());
    if (script.isEmpty()) {
        std::fprintf(stderr, "flotilla bench accuracy: cannot find bench/ddp_fashion.py; give --ddp-script\n");
        return ExitUsage;
    }
    const auto lrs = numberList(parser.value(QStringLiteral("lr-grid")), "lr-grid");
    const auto batches = numberList(parser.value(QStringLiteral("batch-grid")), "batch-grid");
    if (!lrs || !batches) {
        std::fprintf(stderr, "flotilla bench accuracy: %s\n", (lrs ? batches.error() : lrs.error()).toUtf8().constData());
        return ExitUsage;
    }
    std::vector<Setting> grid;
    for (const double lr : *lrs)
        for (const double batch : *batches)
            grid.push_back({lr, int(batch)});

    // The same model and data for everyone, SGD with momentum 0.9 at a constant learning rate;
    // 2 processes of one thread each on the distributed side; the loop gets both threads.
    // Batch sizes are per process: a DDP step averages the gradients of both ranks' batches,
    // a Flotilla worker's step is its own.
    const auto flotillaFlags = [&](const Setting &s) {
        QStringList flags{QStringLiteral("--workers"), QStringLiteral("2"), QStringLiteral("--threads"),
                          QStringLiteral("1"), QStringLiteral("--epochs"), QString::number(epochs),
                          QStringLiteral("--lr"), QString::number(s.lr), QStringLiteral("--lr-schedule"),
                          QStringLiteral("constant"), QStringLiteral("--batch-size"), QString::number(s.batch),
                          QStringLiteral("--model"), QStringLiteral("cnn"), QStringLiteral("--train-limit"),
                          QString::number(trainLimit), QStringLiteral("--rejoin-delay"), QStringLiteral("3"),
                          QStringLiteral("--compression"), compression};
        if (!link.isEmpty())
            flags += {QStringLiteral("--link"), link};
        if (slowWorker > 1)
            flags += {QStringLiteral("--slow-worker"), QString::number(slowWorker)};
        return flags;
    };
    const auto ddpFlags = [&](const Setting &s) {
        QStringList flags{script, QStringLiteral("--processes"), QStringLiteral("2"), QStringLiteral("--threads"),
                          QStringLiteral("1"), QStringLiteral("--epochs"), QString::number(epochs),
                          QStringLiteral("--lr"), QString::number(s.lr), QStringLiteral("--batch-size"),
                          QString::number(s.batch), QStringLiteral("--train-limit"), QString::number(trainLimit)};
        if (!link.isEmpty())
            flags += {QStringLiteral("--link"), link};
        if (slowWorker > 1)
            flags += {QStringLiteral("--slow-rank"), QString::number(slowWorker)};
        return flags;
    };
    const auto bareFlags = [&](const Setting &s) {
        return QStringList{QStringLiteral("bench"), QStringLiteral("bare-loop"), QStringLiteral("--epochs"),
                           QString::number(epochs), QStringLiteral("--threads"), QStringLiteral("2"),
                           QStringLiteral("--train-limit"), QString::number(trainLimit), QStringLiteral("--lr"),
                           QString::number(s.lr), QStringLiteral("--batch-size"), QString::number(s.batch)};
    };

    // DDP's rendezvous ports: below the ephemeral range, different for each invocation so that
    // two benchmarks (or two test runs) on one machine do not meet.
    const int portBase = 10000 + int(QCoreApplication::applicationPid() % 20000);
    int runs = 0;
    const auto ddpPort = [&] { return QString::number(portBase + (runs++ % 500) * 7); };

    struct Entry
    {
        QString name;
        std::function<Outcome(const Setting &)> run;
        int tunedLike = -1; // runs with the best setting of that entry instead of its own tuning
        Setting best;
        std::vector<double> seconds;
        QStringList notes;
    };
    std::vector<Entry> entries;
    entries.push_back({QStringLiteral("Flotilla, 2 worker processes"),
                       [&](const Setting &s) { return runFlotilla(flotillaFlags(s), 0, target, maxSeconds); }, -1, {}, {}, {}});
    entries.push_back({QStringLiteral("PyTorch DDP, 2 processes (gloo)"),
                       [&](const Setting &s) {
                           return runLines(python, ddpFlags(s) + QStringList{QStringLiteral("--port"), ddpPort()},
                                           target, maxSeconds);
                       },
                       -1, {}, {}, {}});
    entries.push_back({QStringLiteral("LibTorch loop, 1 process"),
                       [&](const Setting &s) {
                           return runLines(QCoreApplication::applicationFilePath(), bareFlags(s), target, maxSeconds);
                       },
                       -1, {}, {}, {}});
    if (preemptEvery > 0) {
        entries.push_back({QStringLiteral("Flotilla, SIGKILL every %1 s").arg(preemptEvery),
                           [&](const Setting &s) { return runFlotilla(flotillaFlags(s), preemptEvery, target, maxSeconds); },
                           0, {}, {}, {}});
        entries.push_back({QStringLiteral("PyTorch DDP, a rank SIGKILLed at %1 s").arg(preemptEvery),
                           [&](const Setting &s) {
                               return runLines(python,
                                               ddpFlags(s) + QStringList{QStringLiteral("--port"), ddpPort(),
                                                                         QStringLiteral("--kill-rank-after"),
                                                                         QString::number(preemptEvery)},
                                               target, maxSeconds);
                           },
                           1, {}, {}, {}});
    }

    std::printf("Time to %.1f%% test accuracy on Fashion-MNIST (%s training samples), the cnn, SGD momentum 0.9 at a "
                "constant learning rate, evaluation after every epoch and off every clock%s%s\n",
                target * 100, trainLimit > 0 ? QByteArray::number(trainLimit).constData() : "60000",
                link.isEmpty() ? "" : ", each worker and rank behind an emulated ",
                link.toUtf8().constData());
    if (slowWorker > 1)
        std::printf("One of the two workers (DDP: rank 1) is %g times slower than the other\n", slowWorker);
    const auto report = [](int round, const Entry &e, const Setting &s, const Outcome &o) {
        if (o.seconds >= 0)
            std::printf("  [%s] %-40s %-20s %6.1f s (epoch %d)\n", round < 0 ? "tune" : QByteArray::number(round + 1).constData(),
                        e.name.toUtf8().constData(), s.text().toUtf8().constData(), o.seconds, o.epoch);
        else
            std::printf("  [%s] %-40s %-20s %s\n", round < 0 ? "tune" : QByteArray::number(round + 1).constData(),
                        e.name.toUtf8().constData(), s.text().toUtf8().constData(), o.note.toUtf8().constData());
        std::fflush(stdout);
    };

    // Tuning: every contender once at every point of the grid; each keeps its fastest.
    if (grid.size() > 1) {
        std::printf("Tuning over %zu settings (batch per process), one run each:\n", grid.size());
        std::fflush(stdout);
        for (Entry &e : entries) {
            if (e.tunedLike >= 0)
                continue;
            double bestSeconds = -1;
            e.best = grid.front();
            for (const Setting &s : grid) {
                const Outcome o = e.run(s);
                report(-1, e, s, o);
                if (o.seconds >= 0 && (bestSeconds < 0 || o.seconds < bestSeconds)) {
                    bestSeconds = o.seconds;
                    e.best = s;
                }
            }
        }
    } else {
        for (Entry &e : entries)
            e.best = grid.front();
    }
    for (Entry &e : entries)
        if (e.tunedLike >= 0)
            e.best = entries[std::size_t(e.tunedLike)].best;
    std::printf("Best settings:\n");
    for (const Entry &e : entries)
        std::printf("  %-40s %s\n", e.name.toUtf8().constData(), e.best.text().toUtf8().constData());
    std::printf("Best against best, %d repeats, the contenders alternating:\n", repeats);
    std::fflush(stdout);

    for (int r = 0; r < repeats; ++r) {
        for (std::size_t k = 0; k < entries.size(); ++k) {
            Entry &e = entries[(k + std::size_t(r)) % entries.size()]; // a different one goes first each round
            const Outcome o = e.run(e.best);
            report(r, e, e.best, o);
            if (o.seconds >= 0)
                e.seconds.push_back(o.seconds);
            else
                e.notes << o.note;
        }
    }
    std::printf("\nSeconds to %.1f%%:\n", target * 100);
    for (const Entry &e : entries) {
        if (e.seconds.empty()) {
            std::printf("  %-40s never reached it (%s)\n", e.name.toUtf8().constData(),
                        e.notes.value(0).toUtf8().constData());
            continue;
        }
        const Spread s = spread(e.seconds);
        std::printf("  %-40s min %6.1f  median %6.1f  max %6.1f  (%zu of %d runs reached it)\n",
                    e.name.toUtf8().constData(), s.min, s.median, s.max, e.seconds.size(), repeats);
    }
    const auto median = [&](std::size_t i) { return spread(entries[i].seconds).median; };
    if (!entries[0].seconds.empty() && !entries[1].seconds.empty())
        std::printf("  ratio Flotilla / DDP (medians)            %.2f  (target <= 0.8)\n", median(0) / median(1));
    if (!entries[0].seconds.empty() && !entries[2].seconds.empty())
        std::printf("  ratio Flotilla / single-process loop      %.2f  (target <= 0.75)\n", median(0) / median(2));
    if (preemptEvery > 0 && !entries[0].seconds.empty() && !entries[3].seconds.empty())
        std::printf("  ratio Flotilla with kills / without       %.2f  (target <= 1.25)\n", median(3) / median(0));
    return ExitOk;
}

} // namespace flotilla
