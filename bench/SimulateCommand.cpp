// `flotilla simulate`: a fleet of up to 100,000 simulated workers trains a small synthetic
// objective through the real scheduler and aggregation rules; one row per rule compares them
// on the same fleet (same seed, same preemptions).
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/MeasurementCommands.h"
#include "bench/SimulatorCharts.h"

#include "bench/Simulator.h"
#include "job/PriceTable.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QSaveFile>
#include <QTextStream>
#include <QThread>

#include <atomic>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>
#include <type_traits>

namespace flotilla {

namespace {

const QString kAllRules = QStringLiteral("vc-asgd,staleness-aware,async-delta,sync-average");

struct Options
{
    SimulationConfig config;
    QStringList rules;
    QString json;
    QString events;
    QString charts;
    QString chartsPrefix;
    QString priceTable;
    int threads = 1;
};

// Reads one numeric option; an error names the option and the value.
template<typename T> bool number(const QCommandLineParser &parser, const char *name, T &out, QString &error)
{
    const QString option = QString::fromLatin1(name);
    if (!parser.isSet(option))
        return true;
    const QString text = parser.value(option);
    bool ok = false;
    if constexpr (std::is_floating_point_v<T>) {
        const double v = text.toDouble(&ok);
        if (ok)
            out = T(v);
    } else {
        const qlonglong v = text.toLongLong(&ok);
        ok = ok && v >= qlonglong(std::numeric_limits<T>::min()) && v <= qlonglong(std::numeric_limits<T>::max());
        if (ok)
            out = T(v);
    }
    if (!ok)
        error = QStringLiteral("--%1: '%2' is not %3")
                    .arg(option, text,
                        std::is_floating_point_v<T> ? QStringLiteral("a number") : QStringLiteral("a whole number"));
    return ok;
}

Result<Options> readOptions(const QCommandLineParser &parser)
{
    Options o;
    SimulationConfig &c = o.config;
    QString error;
    double latencyMs = c.latencySeconds * 1000.0;
    double bandwidthMb = c.bandwidthBytesPerSecond / 1e6;
    double weightsMb = double(c.weightsBytes) / 1e6;
    qint64 seed = qint64(c.seed);
    const bool shardsSet = parser.isSet(QStringLiteral("shards"));
    const bool ok = number(parser, "seed", seed, error) && number(parser, "workers", c.workers, error)
        && number(parser, "speed", c.speed, error) && number(parser, "speed-spread", c.speedSpread, error)
        && number(parser, "preemption-rate", c.preemptionsPerHour, error)
        && number(parser, "downtime", c.downtimeSeconds, error) && number(parser, "notice", c.noticeSeconds, error)
        && number(parser, "latency", latencyMs, error) && number(parser, "bandwidth", bandwidthMb, error)
        && number(parser, "weights-mb", weightsMb, error)
        && number(parser, "lease-timeout", c.leaseTimeoutSeconds, error)
        && number(parser, "target-subtask", c.targetSubtaskSeconds, error)
        && number(parser, "heartbeat-timeout", c.heartbeatTimeoutSeconds, error)
        && number(parser, "shards", c.shards, error) && number(parser, "shard-size", c.shardSize, error)
        && number(parser, "epochs", c.epochs, error) && number(parser, "local-epochs", c.localEpochs, error)
        && number(parser, "batch-size", c.batchSize, error) && number(parser, "lr", c.learningRate, error)
        && number(parser, "features", c.features, error) && number(parser, "classes", c.classes, error)
        && number(parser, "separation", c.separation, error) && number(parser, "test-samples", c.testSamples, error)
        && number(parser, "alpha", c.aggregation.alpha, error)
        && number(parser, "staleness-exponent", c.aggregation.stalenessExponent, error)
        && number(parser, "outer-lr", c.aggregation.outerLearningRate, error)
        && number(parser, "outer-momentum", c.aggregation.outerMomentum, error)
        && number(parser, "threads", o.threads, error)
        && number(parser, "epochs-ahead", c.epochsAhead, error);
    if (!ok)
        return fail(error);
    if (parser.isSet(QStringLiteral("buffer"))) {
        const QString text = parser.value(QStringLiteral("buffer")).trimmed();
        bool whole = false;
        const qlonglong k = text.toLongLong(&whole);
        if (text == QLatin1String("auto"))
            c.buffer = 0;
        else if (!whole || k < 1 || k > kMaxBuffer)
            return fail(QStringLiteral("--buffer: '%1' is not 'auto' or a whole number of results from 1 to %2")
                            .arg(text)
                            .arg(kMaxBuffer));
        else
            c.buffer = int(k);
    }
    c.shareTail = parser.isSet(QStringLiteral("share-tail"));
    c.speculate = parser.isSet(QStringLiteral("speculate"));
    c.dismissIdle = parser.isSet(QStringLiteral("dismiss-idle"));
    if (seed < 0)
        return fail(QStringLiteral("--seed must be ≥ 0"));
    c.seed = quint64(seed);
    c.latencySeconds = latencyMs / 1000.0;
    c.bandwidthBytesPerSecond = bandwidthMb * 1e6;
    c.weightsBytes = qint64(std::llround(weightsMb * 1e6));
    if (!shardsSet && c.workers > 0 && c.workers <= 10'000'000)
        c.shards = 2 * c.workers; // every worker busy while the next epoch opens
    c.instanceType = parser.value(QStringLiteral("instance"));
    o.priceTable = parser.value(QStringLiteral("price-table"));
    o.json = parser.value(QStringLiteral("json"));
    o.events = parser.value(QStringLiteral("events"));
    o.charts = parser.value(QStringLiteral("charts"));
    o.chartsPrefix = parser.value(QStringLiteral("charts-prefix"));
    if (o.chartsPrefix.contains(u'/') || o.chartsPrefix.contains(u'\\'))
        return fail(QStringLiteral("--charts-prefix is a start of file names, not a path: '%1'").arg(o.chartsPrefix));
    if (o.threads < 1)
        return fail(QStringLiteral("--threads must be ≥ 1"));

    for (const QString &rule : parser.value(QStringLiteral("rules")).split(u',', Qt::SkipEmptyParts)) {
        AggregationSpec spec = c.aggregation;
        spec.rule = rule.trimmed();
        if (auto created = createAggregationRule(spec); !created)
            return fail(QStringLiteral("--rules: %1").arg(created.error()));
        if (o.rules.contains(spec.rule))
            return fail(QStringLiteral("--rules names '%1' twice").arg(spec.rule));
        o.rules << spec.rule;
    }
    if (o.rules.isEmpty())
        return fail(QStringLiteral("--rules names no rule (%1)").arg(kAllRules));
    if (const QStringList problems = c.problems(); !problems.isEmpty())
        return fail(problems.join(QStringLiteral("; ")));

    if (parser.isSet(QStringLiteral("trace"))) {
        auto trace = loadPreemptionTrace(parser.value(QStringLiteral("trace")), c.workers);
        if (!trace)
            return fail(trace.error());
        c.trace = std::move(trace).value();
        c.useTrace = true;
    }
    auto prices = PriceTable::load(o.priceTable);
    if (!prices)
        return fail(prices.error());
    auto rates = prices->rates(c.instanceType, QStringLiteral("spot"));
    if (!rates)
        return fail(QStringLiteral("--instance: %1").arg(rates.error()));
    c.rates = *rates;
    c.recordEvents = !o.events.isEmpty();
    return o;
}

QString csvField(const QString &text)
{
    if (!text.contains(u',') && !text.contains(u'"'))
        return text;
    return u'"' + QString(text).replace(QStringLiteral("\""), QStringLiteral("\"\"")) + u'"';
}

Result<void> writeFile(const QString &path, const QByteArray &bytes)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return fail(QStringLiteral("cannot write '%1': %2").arg(path, file.errorString()));
    return {};
}

QByteArray eventsCsv(const std::vector<SimulationResult> &results)
{
    QString text;
    QTextStream out(&text);
    out << "time_s,rule,event,worker,lease,subtask,detail\n";
    for (const auto &r : results)
        for (const auto &e : r.events)
            out << QString::number(double(e.atMs) / 1000.0, 'f', 3) << ',' << r.rule << ',' << eventName(e.kind) << ','
                << (e.worker >= 0 ? QString::number(e.worker) : QString()) << ','
                << (e.lease ? QString::number(e.lease) : QString()) << ','
                << (e.subtask ? QString::number(e.subtask) : QString()) << ',' << csvField(e.detail) << '\n';
    out.flush();
    return text.toUtf8();
}

} // namespace

int runSimulateCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Simulates a fleet of unreliable workers training a small synthetic objective with the real scheduler,\n"
        "leases and aggregation rules, on a simulated clock, and compares the rules on the same fleet.\n"
        "The same seed gives the same report, byte for byte. The trace file is CSV, one preemption per line:\n"
        "worker,down,up (worker from 0, seconds since the start; up empty: the worker never comes back)."));
    parser.addHelpOption();
    const auto opt = [&](const char *name, const char *help, const char *value, const QString &def = {}) {
        parser.addOption({ QString::fromLatin1(name), QString::fromUtf8(help), QString::fromLatin1(value), def });
    };
    opt("workers", "Workers in the fleet (default 100).", "n");
    opt("speed", "Median speed of a worker, samples per second (default 1).", "samples/s");
    opt("speed-spread", "Speeds are log-uniform in [speed/x, speed·x] (default 4).", "x");
    opt("preemption-rate", "Preemptions per worker-hour online, a Poisson process (default 0.5).", "rate");
    opt("downtime", "Mean seconds a preempted worker stays away (exponential; default 120).", "seconds");
    opt("trace", "Preemptions from a CSV trace (worker,down,up) instead of the Poisson process.", "file");
    opt("notice", "Seconds of warning before each preemption; a warned worker returns a partial result (default 0).",
        "seconds");
    opt("latency", "Network latency of each transfer, milliseconds (default 50).", "ms");
    opt("bandwidth", "Each worker's bandwidth, megabytes per second (default 12.5).", "MB/s");
    opt("weights-mb", "Megabytes of weights sent each way per subtask; 0: the synthetic model's size (default 10).",
        "MB");
    opt("lease-timeout", "Longest lease, seconds (fleet.lease_timeout_s; default 120).", "seconds");
    opt("target-subtask", "Seconds of work a worker of known speed gets (fleet.target_subtask_s; default 60).",
        "seconds");
    opt("heartbeat-timeout", "A silent worker is declared gone after this many seconds; 0: never (default 30).",
        "seconds");
    opt("shards", "Shards of the training set (default: twice the workers).", "n");
    opt("shard-size", "Samples per shard (default 32).", "n");
    opt("epochs", "Epochs (default 5).", "n");
    opt("local-epochs", "Passes over its positions per subtask (default 1).", "n");
    opt("batch-size", "Mini-batch size of the local SGD (default 8).", "n");
    opt("lr", "Learning rate of the local SGD (default 0.1).", "rate");
    opt("features", "Features of the synthetic objective (default 32).", "n");
    opt("classes", "Classes of the synthetic objective (default 10).", "n");
    opt("separation", "Spread of the class centres; larger is easier (default 0.5).", "sd");
    opt("test-samples", "Held-out samples the model is evaluated on (default 2000).", "n");
    opt("rules", "Aggregation rules to compare, comma-separated.", "list", kAllRules);
    opt("alpha", "vc-asgd, staleness-aware: weight kept by the global model (default 0.5).", "a");
    opt("staleness-exponent", "staleness-aware: p in α_s = 1 − (1−α)/(1+s)^p (default 0.5).", "p");
    opt("outer-lr", "async-delta: outer learning rate (default 1).", "rate");
    opt("outer-momentum", "async-delta: outer momentum (default 0).", "m");
    opt("buffer", "Asynchronous rules fold the mean of this many results as one version; 'auto': the square root "
        "of the fleet (default 1).", "k|auto");
    opt("epochs-ahead", "Epochs an asynchronous job may open past the oldest unfinished one (default 1).", "n");
    parser.addOption({ QStringLiteral("share-tail"),
        QStringLiteral("No subtask takes more than its share of the queued work (smaller subtasks near an epoch's end).") });
    parser.addOption({ QStringLiteral("speculate"),
        QStringLiteral("When nothing is queued in the last epoch, idle workers train copies of the most overdue subtasks.") });
    parser.addOption({ QStringLiteral("dismiss-idle"),
        QStringLiteral("A worker asking for work when the job has none left to give (last epoch open, nothing queued, "
                       "no copy to make) leaves the fleet and is no longer paid.") });
    opt("instance", "Instance type whose prices cost the fleet.", "type", QStringLiteral("aws/c5.large"));
    opt("price-table", "Price table (JSON) instead of the built-in one.", "file");
    opt("seed", "Seed of the data, the speeds and the preemptions (default 1).", "n");
    opt("json", "Also write the full report as JSON to this file.", "file");
    opt("events", "Write every event of every run as CSV to this file (small fleets).", "file");
    opt("charts", "Write PNG charts into this folder: staleness, loss, accuracy, fleet.", "dir");
    opt("charts-prefix", "Start of the charts' file names (e.g. 'fleet1k-').", "text");
    opt("threads", "Rules simulated at once (default: the cores of this machine).", "n");
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("simulate")))
        return *stop;
    if (!parser.positionalArguments().isEmpty()) {
        std::fprintf(stderr, "flotilla simulate: unexpected argument '%s' (see flotilla simulate --help)\n",
            parser.positionalArguments().first().toUtf8().constData());
        return ExitUsage;
    }
    auto read = readOptions(parser);
    if (!read) {
        std::fprintf(stderr, "flotilla simulate: %s\n", read.error().toUtf8().constData());
        return ExitUsage;
    }
    Options options = std::move(read).value();
    if (!parser.isSet(QStringLiteral("threads")))
        options.threads = std::max(1, QThread::idealThreadCount());
    if (!options.charts.isEmpty() && !qobject_cast<QApplication *>(QCoreApplication::instance())) {
        std::fprintf(stderr,
            "flotilla simulate: --charts needs the application to start with a window system "
            "(QApplication); run it where one is started, or write --json and chart that\n");
        return ExitUsage;
    }

    QElapsedTimer wall;
    wall.start();
    auto created = Simulator::create(options.config);
    if (!created) {
        std::fprintf(stderr, "flotilla simulate: %s\n", created.error().toUtf8().constData());
        return ExitUsage;
    }
    const Simulator &simulator = **created;

    // Each rule is an independent run on the same fleet: they may go in parallel.
    std::vector<std::optional<Result<SimulationResult>>> runs(std::size_t(options.rules.size()));
    std::atomic<int> next { 0 };
    const auto work = [&] {
        for (int i = next++; i < options.rules.size(); i = next++)
            runs[std::size_t(i)] = simulator.run(options.rules[i]);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min<int>(options.threads, int(options.rules.size())); ++t)
        pool.emplace_back(work);
    work();
    for (auto &t : pool)
        t.join();

    std::vector<SimulationResult> results;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        if (!*runs[i]) {
            std::fprintf(stderr, "flotilla simulate: %s\n", runs[i]->error().toUtf8().constData());
            return ExitFailure;
        }
        results.push_back(std::move(*runs[i]).value());
    }
    std::fputs(simulationReport(options.config, results).toUtf8().constData(), stdout);
    std::fflush(stdout);

    if (!options.json.isEmpty()) {
        const QByteArray json = QJsonDocument(simulationJson(options.config, results)).toJson(QJsonDocument::Indented);
        if (auto r = writeFile(options.json, json); !r) {
            std::fprintf(stderr, "flotilla simulate: %s\n", r.error().toUtf8().constData());
            return ExitFailure;
        }
    }
    if (!options.events.isEmpty()) {
        if (auto r = writeFile(options.events, eventsCsv(results)); !r) {
            std::fprintf(stderr, "flotilla simulate: %s\n", r.error().toUtf8().constData());
            return ExitFailure;
        }
    }
    if (!options.charts.isEmpty()) {
        auto written = writeSimulationCharts(options.config, results, options.charts, options.chartsPrefix);
        if (!written) {
            std::fprintf(stderr, "flotilla simulate: %s\n", written.error().toUtf8().constData());
            return ExitFailure;
        }
        for (const QString &path : *written)
            std::fprintf(stderr, "chart: %s\n", path.toUtf8().constData());
    }
    std::fprintf(
        stderr, "simulated %d rule(s) in %.1f s of wall time\n", int(results.size()), double(wall.elapsed()) / 1000.0);
    bool allExact = true;
    for (const auto &r : results)
        allExact = allExact && r.exactlyOnce;
    return allExact ? ExitOk : ExitFailure;
}

Command simulateCommand()
{
    // The executable that has the simulator draws charts: bench scaling's plot too.
    setSpeedupChartWriter(&writeSpeedupChart);
    return {"simulate", "Simulate a fleet of up to 100,000 unreliable workers and compare the rules.", runSimulateCommand};
}

} // namespace flotilla
