// `flotilla bench scale`: K simulated workers against a real `flotilla serve` on loopback.
//
// Each simulated worker does on the wire what `flotilla worker` does: it redeems the join
// token with a certificate request of its own (the coordinator counts one certificate as one
// worker), connects with the certificate it got, says Hello, asks for work, heartbeats while
// it "trains", and after the simulated subtask time returns the weights it was sent plus
// small noise, with the manifest from Welcome, so the coordinator validates and assimilates
// them like any result. Nothing is trained.
//
// Heartbeats are not answered by the coordinator. To time them, each Heartbeat leaves in one
// write with an Echo right behind it: the coordinator handles one connection's messages in
// order on its network thread, which hands the heartbeat to the coordinator's thread and
// answers the Echo at once, so the Echo comes back only after the heartbeat went through
// the network thread. That round trip is the "heartbeat round trip" reported; it costs what
// a heartbeat costs (the benchmark timed it with a ShardRequest before, whose ShardData a
// real fleet never asks for).
#include "bench/BenchScale.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/ProcStats.h"
#include "bench/ScaleLoad.h"
#include "common/Cbor.h"

#include "engine/coordination/Store.h"
#include "job/JobSpec.h"
#include "net/Frame.h"
#include "net/Messages.h"
#include "net/Pki.h"
#include "net/TlsListener.h"
#include "net/TrustStore.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMutex>
#include <QProcess>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#ifdef Q_OS_UNIX
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace flotilla {

namespace {

using namespace scale_load;

qint64 openDescriptors(qint64 pid)
{
    return QDir(QStringLiteral("/proc/%1/fd").arg(pid)).entryList(QDir::NoDotAndDotDot | QDir::AllEntries | QDir::System).size();
}

// The soft "Max open files" of a process, from /proc/<pid>/limits, or -1.
qint64 softNofile(qint64 pid)
{
    QFile f(QStringLiteral("/proc/%1/limits").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    for (const QByteArray &line : f.readAll().split('\n'))
        if (line.startsWith("Max open files")) {
            const QList<QByteArray> parts = line.mid(14).simplified().split(' ');
            return parts.value(0) == "unlimited" ? std::numeric_limits<qint64>::max() : parts.value(0).toLongLong();
        }
    return -1;
}

double ownCpuSeconds()
{
#ifdef Q_OS_UNIX
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
#else
    return 0;
#endif
}

QString loadAverage()
{
    QFile f(QStringLiteral("/proc/loadavg"));
    if (!f.open(QIODevice::ReadOnly))
        return QStringLiteral("?");
    return QString::fromLatin1(f.readAll()).section(u' ', 0, 2);
}

struct Percentiles
{
    qint64 count = 0;
    double p50 = 0, p90 = 0, p99 = 0, max = 0; // ms
};

Percentiles percentiles(const std::vector<Sample> &samples, const Shared &shared)
{
    std::vector<qint64> v;
    for (const Sample &s : samples)
        if (shared.inWindow(s.sentNs))
            v.push_back(s.rttNs);
    Percentiles p;
    p.count = qint64(v.size());
    if (v.empty())
        return p;
    std::sort(v.begin(), v.end());
    auto rank = [&](double q) {
        const auto k = std::size_t(std::max(1.0, std::ceil(q * double(v.size())))) - 1;
        return double(v[std::min(k, v.size() - 1)]) / 1e6;
    };
    p.p50 = rank(0.50);
    p.p90 = rank(0.90);
    p.p99 = rank(0.99);
    p.max = double(v.back()) / 1e6;
    return p;
}

QJsonObject toJson(const Percentiles &p)
{
    return QJsonObject{{QStringLiteral("count"), p.count}, {QStringLiteral("p50_ms"), p.p50},
                       {QStringLiteral("p90_ms"), p.p90},  {QStringLiteral("p99_ms"), p.p99},
                       {QStringLiteral("max_ms"), p.max}};
}

QString tail(const QString &path, int lines)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    const QStringList all = QString::fromUtf8(f.readAll()).split(u'\n');
    return all.mid(std::max<qsizetype>(0, all.size() - lines)).join(u'\n');
}

struct CoordinatorView
{
    bool read = false;
    qint64 assimilations = 0;
    qint64 workersGone = 0;    // declared gone for missed heartbeats
    qint64 leasesExpired = 0;
    qint64 rejected = 0;
    qint64 duplicates = 0;
};

CoordinatorView readStore(const QString &db)
{
    CoordinatorView v;
    auto store = Store::open(db);
    if (!store)
        return v;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return v;
    const qint64 id = (*job)->id;
    auto rows = (*store)->assimilations(id);
    auto left = (*store)->events(id, EventKind::WorkerLeft);
    auto expired = (*store)->events(id, EventKind::LeaseExpired);
    auto rejected = (*store)->events(id, EventKind::ResultRejected);
    auto duplicates = (*store)->events(id, EventKind::ResultDuplicate);
    if (!rows || !left || !expired || !rejected || !duplicates)
        return v;
    v.read = true;
    v.assimilations = qint64(rows->size());
    for (const auto &e : *left)
        if (e.detail.contains(QStringLiteral("missed heartbeats")))
            ++v.workersGone;
    v.leasesExpired = qint64(expired->size());
    v.rejected = qint64(rejected->size());
    v.duplicates = qint64(duplicates->size());
    return v;
}

Result<Settings> settingsFrom(const QCommandLineParser &p)
{
    Settings s;
    bool ok = true;
    auto integer = [&](const char *name, int &field, int low, int high) {
        const QString flag = QString::fromLatin1(name);
        if (!p.isSet(flag))
            return;
        bool good = false;
        const int v = p.value(flag).toInt(&good);
        if (!good || v < low || v > high)
            ok = false;
        else
            field = v;
    };
    auto number = [&](const char *name, double &field, double low, double high) {
        const QString flag = QString::fromLatin1(name);
        if (!p.isSet(flag))
            return;
        bool good = false;
        const double v = p.value(flag).toDouble(&good);
        if (!good || !(v >= low && v <= high))
            ok = false;
        else
            field = v;
    };
    integer("workers", s.workers, 1, 100000);
    number("seconds", s.seconds, 0.5, 86400);
    number("warmup", s.warmup, 0, 3600);
    number("subtask-seconds", s.subtaskSeconds, 0.01, 86400);
    integer("heartbeat-ms", s.heartbeatMs, 0, 600000);
    integer("samples-per-shard", s.samplesPerShard, 1, 60000);
    integer("shards", s.shards, 0, 1000000);
    integer("threads", s.threads, 1, 64);
    integer("nice", s.nice, 0, 19);
    integer("connect-concurrency", s.connectConcurrency, 1, 100000);
    number("noise", s.noise, 0, 1);
    number("join-timeout", s.joinTimeout, 1, 86400);
    if (!ok)
        return fail(QStringLiteral("an option is out of range or not a number (see flotilla bench scale --help)"));
    if (p.isSet(QStringLiteral("hidden"))) {
        s.hidden.clear();
        for (const QString &part : p.value(QStringLiteral("hidden")).split(u',', Qt::SkipEmptyParts)) {
            bool good = false;
            const int width = part.trimmed().toInt(&good);
            if (!good || width < 1 || width > 65536)
                return fail(QStringLiteral("--hidden takes layer widths separated by commas, e.g. 32 or 64,32"));
            s.hidden << width;
        }
        if (s.hidden.isEmpty())
            return fail(QStringLiteral("--hidden needs at least one layer width"));
    }
    if (p.isSet(QStringLiteral("coordinator-nofile"))) {
        bool good = false;
        s.coordinatorNofile = p.value(QStringLiteral("coordinator-nofile")).toLong(&good);
        if (!good || s.coordinatorNofile < 16)
            return fail(QStringLiteral("--coordinator-nofile needs a number of at least 16"));
    }
    s.threads = std::min(s.threads, s.workers);
    if (s.warmup < 0)
        s.warmup = 1.2 * s.subtaskSeconds;
    return s;
}

// The job the coordinator serves: a small MLP on the first samples of Fashion-MNIST, one
// shard per worker of a few samples each (so every worker can hold a lease and a shard's
// bytes are small), and epochs enough that it does not finish during the run.
JobSpec benchJob(const Settings &s)
{
    JobSpec job = JobSpec::defaultJob();
    job.name = QStringLiteral("bench-scale");
    job.model.kind = QStringLiteral("mlp");
    job.model.hidden = s.hidden;
    job.model.dropout = 0;
    job.training.shards = s.shards > 0 ? s.shards : s.workers;
    job.dataset.trainLimit = std::min<qint64>(60000, qint64(job.training.shards) * s.samplesPerShard);
    job.training.shards = int(std::min<qint64>(job.training.shards, job.dataset.trainLimit));
    job.dataset.testLimit = 200;
    job.training.epochs = 100000;
    job.training.localEpochs = 1;
    job.training.lrSchedule = QStringLiteral("constant");
    job.training.threads = 1;
    job.training.device = QStringLiteral("cpu");
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    // Each result its own version, as the coordinator's figures in docs/benchmarks.md were
    // measured: a round of K simulated workers would fold once per K results, all at once.
    job.aggregation.rounds = false;
    return job;
}

} // namespace

int runBenchScale(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Coordinator scale: start `flotilla serve` on loopback with a small MLP job and K simulated workers that\n"
        "enroll with a join token, connect over mutual TLS 1.3, heartbeat, take subtasks and return results of\n"
        "the model's shape (the weights they were sent plus small noise) after a simulated subtask time, without\n"
        "training. Reports assimilations per second, heartbeat/request/result round trips, the coordinator's\n"
        "CPU and peak RSS, and dropped connections. Exits 1 when a worker could not join or a connection dropped."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("workers"), QStringLiteral("Simulated workers (K)."), QStringLiteral("k"), QStringLiteral("100")},
        {QStringLiteral("seconds"), QStringLiteral("Length of the measured window, after all workers joined."),
         QStringLiteral("s"), QStringLiteral("30")},
        {QStringLiteral("warmup"),
         QStringLiteral("Seconds between the last join and the measured window (default: 1.2 subtask times, the "
                        "longest a simulated subtask takes, so that results arrive at a steady rate)."),
         QStringLiteral("s")},
        {QStringLiteral("subtask-seconds"),
         QStringLiteral("Simulated training time of a subtask; each worker draws ±20% around it. The default is the "
                        "coordinator's fleet.target_subtask_s."),
         QStringLiteral("s"), QStringLiteral("60")},
        {QStringLiteral("heartbeat-ms"),
         QStringLiteral("Heartbeat interval (default: the coordinator's, 2000 ms, as real workers)."), QStringLiteral("ms")},
        {QStringLiteral("hidden"), QStringLiteral("Hidden layer widths of the MLP."), QStringLiteral("list"),
         QStringLiteral("32")},
        {QStringLiteral("samples-per-shard"), QStringLiteral("Training samples per shard."), QStringLiteral("n"),
         QStringLiteral("4")},
        {QStringLiteral("shards"), QStringLiteral("Shards (default: one per worker)."), QStringLiteral("n")},
        {QStringLiteral("nice"), QStringLiteral("Nice value of the load threads (0: as serve's; above it serve gets "
                                                "the cores first, and the load threads' delays enter the round trips)."),
         QStringLiteral("n"), QStringLiteral("0")},
        {QStringLiteral("threads"), QStringLiteral("Load threads the simulated workers are spread over."),
         QStringLiteral("n"), QStringLiteral("1")},
        {QStringLiteral("connect-concurrency"), QStringLiteral("Joins (enrolment and first connection) in flight at once."),
         QStringLiteral("n"), QStringLiteral("32")},
        {QStringLiteral("noise"), QStringLiteral("Half-width of the uniform noise added to each weight of a result."),
         QStringLiteral("x"), QStringLiteral("0.001")},
        {QStringLiteral("join-timeout"), QStringLiteral("Seconds allowed for all workers to join."), QStringLiteral("s"),
         QStringLiteral("600")},
        {QStringLiteral("coordinator-nofile"),
         QStringLiteral("Cap the coordinator's limit of open files (soft and hard) at n, to see what a low limit "
                        "does (default: none; every flotilla process raises its soft limit to the hard one)."),
         QStringLiteral("n")},
        {QStringLiteral("json"), QStringLiteral("Also write the results as JSON to this file."), QStringLiteral("file")},
        {QStringLiteral("keep"), QStringLiteral("Keep the coordinator's run directory here (else a temporary one)."),
         QStringLiteral("dir")},
        {QStringLiteral("samples"),
         QStringLiteral("Write every timed round trip of the window to this CSV file (kind, seconds into the window, "
                        "milliseconds), to see when slow ones happened."),
         QStringLiteral("file")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench scale")))
        return *stop;
    auto parsed = settingsFrom(parser);
    if (!parsed) {
        std::fprintf(stderr, "flotilla bench scale: %s\n", parsed.error().toUtf8().constData());
        return ExitUsage;
    }
    Shared shared;
    shared.settings = *parsed;
    const Settings &settings = shared.settings;

    // Every simulated worker is a socket of this process: raise the soft limit to the hard one.
    long startNofile = -1;
    long ownNofile = -1;
#ifdef Q_OS_UNIX
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        startNofile = long(limit.rlim_cur);
        limit.rlim_cur = limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &limit) == 0)
            ownNofile = long(limit.rlim_cur);
    }
#endif
    if (ownNofile >= 0 && ownNofile < settings.workers + 64)
        std::fprintf(stderr, "flotilla bench scale: warning: this process may open only %ld files, too few for %d workers\n",
                     ownNofile, settings.workers);

    QTemporaryDir temporary;
    const QString root = parser.isSet(QStringLiteral("keep")) ? parser.value(QStringLiteral("keep")) : temporary.path();
    const QDir dir(root);
    if (!QDir().mkpath(root) || !temporary.isValid()) {
        std::fprintf(stderr, "flotilla bench scale: cannot create '%s'\n", root.toUtf8().constData());
        return ExitFailure;
    }
    const QString jobFile = dir.filePath(QStringLiteral("job.json"));
    const QString tokenFile = dir.filePath(QStringLiteral("token"));
    const QString serveLog = dir.filePath(QStringLiteral("serve.out"));
    const QString identityDir = dir.filePath(QStringLiteral("identity"));
    const QString runDir = dir.filePath(QStringLiteral("run"));
    QFile::remove(tokenFile);
    const JobSpec job = benchJob(settings);
    if (auto saved = job.save(jobFile); !saved) {
        std::fprintf(stderr, "flotilla bench scale: %s\n", saved.error().toUtf8().constData());
        return ExitFailure;
    }

    QProcess serve;
    serve.setProcessChannelMode(QProcess::MergedChannels);
    serve.setStandardOutputFile(serveLog, QIODevice::Append);
    const long coordinatorNofile = settings.coordinatorNofile > 0 ? settings.coordinatorNofile : startNofile;
#ifdef Q_OS_UNIX
    const bool capHard = settings.coordinatorNofile > 0;
    serve.setChildProcessModifier([coordinatorNofile, capHard] {
        // What the coordinator would get from the shell that started this command (which it
        // raises to the hard limit itself); --coordinator-nofile caps the hard limit too.
        rlimit l{};
        if (coordinatorNofile > 0 && getrlimit(RLIMIT_NOFILE, &l) == 0) {
            l.rlim_cur = std::min<rlim_t>(rlim_t(coordinatorNofile), l.rlim_max);
            if (capHard)
                l.rlim_max = l.rlim_cur;
            setrlimit(RLIMIT_NOFILE, &l);
        }
    });
#endif
    const int tokenUses = settings.workers + settings.workers / 10 + 10;
    serve.start(QCoreApplication::applicationFilePath(),
                {QStringLiteral("serve"), QStringLiteral("--job"), jobFile, QStringLiteral("--run-dir"), runDir,
                 QStringLiteral("--identity-dir"), identityDir, QStringLiteral("--listen"), QStringLiteral("127.0.0.1"),
                 QStringLiteral("--host"), QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QStringLiteral("0"),
                 QStringLiteral("--token-file"), tokenFile, QStringLiteral("--token-uses"), QString::number(tokenUses),
                 QStringLiteral("--quiet")});
    auto stopServe = [&serve] {
        if (serve.state() == QProcess::NotRunning)
            return;
        serve.terminate();
        if (!serve.waitForFinished(60000)) {
            serve.kill();
            serve.waitForFinished(10000);
        }
    };
    const QString loadAtStart = loadAverage();
    std::printf("Coordinator scale benchmark: %d simulated workers against flotilla serve on 127.0.0.1 (TLS 1.3)\n",
                settings.workers);
    std::fflush(stdout);
    QElapsedTimer clock;
    clock.start();
    while (!QFile::exists(tokenFile) && serve.state() != QProcess::NotRunning && clock.elapsed() < 180000)
        serve.waitForFinished(100);
    QFile tokenText(tokenFile);
    auto token = tokenText.open(QIODevice::ReadOnly) ? net::JoinToken::decode(QString::fromUtf8(tokenText.readAll()))
                                                     : Result<net::JoinToken>(fail(QStringLiteral("no token")));
    QFile caFile(QDir(identityDir).filePath(QStringLiteral("ca.pem")));
    const QByteArray caPem = caFile.open(QIODevice::ReadOnly) ? caFile.readAll() : QByteArray();
    if (!token || caPem.isEmpty() || net::certificateFingerprint(caPem) != token->caFingerprint) {
        std::fprintf(stderr, "flotilla bench scale: the coordinator did not start (%s); its output:\n%s\n",
                     token ? "its CA does not match the token" : token.error().toUtf8().constData(),
                     tail(serveLog, 20).toUtf8().constData());
        stopServe();
        return ExitFailure;
    }
    const qint64 pid = serve.processId();
    const double startupSeconds = double(clock.elapsed()) / 1000.0;
    shared.token = *token;
    shared.host = token->host;
    shared.port = token->port;
    shared.ca = QSslCertificate(caPem);

    // The load threads, at a lower priority than serve (Linux: a new thread takes its
    // creator's nice value, and the main thread only samples and waits).
#ifdef Q_OS_UNIX
    if (settings.nice > 0)
        ::setpriority(PRIO_PROCESS, 0, settings.nice);
#endif
    std::vector<std::unique_ptr<QThread>> threads;
    std::vector<std::unique_ptr<LoadGroup>> groups;
    for (int t = 0, first = 0; t < settings.threads; ++t) {
        const int count = settings.workers / settings.threads + (t < settings.workers % settings.threads ? 1 : 0);
        auto thread = std::make_unique<QThread>();
        thread->setObjectName(QStringLiteral("load-%1").arg(t));
        auto group = std::make_unique<LoadGroup>(shared, first, count);
        group->moveToThread(thread.get());
        thread->start();
        QMetaObject::invokeMethod(group.get(), [g = group.get()] { g->start(); }, Qt::QueuedConnection);
        threads.push_back(std::move(thread));
        groups.push_back(std::move(group));
        first += count;
    }

    // Join: every worker enrolls and connects.
    clock.restart();
    int lastShown = -1;
    while (shared.welcomed + shared.joinFailed < settings.workers && serve.state() == QProcess::Running
           && double(clock.elapsed()) < settings.joinTimeout * 1000.0) {
        serve.waitForFinished(100);
        const int now = shared.welcomed;
        if (now / 100 != lastShown / 100 && now < settings.workers && isTerminal(stdout)) {
            std::printf("\r  joining: %d of %d", now, settings.workers);
            std::fflush(stdout);
            lastShown = now;
        }
    }
    if (isTerminal(stdout))
        std::printf("\r\x1b[K");
    const double joinSeconds = double(clock.elapsed()) / 1000.0;
    const int joined = shared.welcomed;
    const bool serveAlive = serve.state() == QProcess::Running;

    double coordinatorCpu = -1, generatorCpu = 0, windowSeconds = 0;
    qint64 hwmKiB = -1, rssKiB = -1, descriptors = -1, coordinatorLimit = -1;
    if (serveAlive && joined > 0) {
        serve.waitForFinished(int(settings.warmup * 1000));
        const double cpu0 = cpuSeconds(pid);
        const double own0 = ownCpuSeconds();
        const qint64 t0 = nowNs();
        shared.windowStart = t0;
        serve.waitForFinished(int(settings.seconds * 1000));
        const qint64 t1 = nowNs();
        shared.windowEnd = t1;
        const double cpu1 = cpuSeconds(pid);
        generatorCpu = ownCpuSeconds() - own0;
        windowSeconds = double(t1 - t0) / 1e9;
        if (cpu0 >= 0 && cpu1 >= 0)
            coordinatorCpu = cpu1 - cpu0;
        hwmKiB = statusKiB(pid, "VmHWM");
        rssKiB = statusKiB(pid, "VmRSS");
        descriptors = openDescriptors(pid);
        coordinatorLimit = softNofile(pid);
    }
    const bool serveSurvived = serve.state() == QProcess::Running;
    shared.stopping = true;
    for (std::size_t t = 0; t < groups.size(); ++t) {
        QMetaObject::invokeMethod(groups[t].get(), [g = groups[t].get()] { g->stop(); }, Qt::BlockingQueuedConnection);
        threads[t]->quit();
        threads[t]->wait();
    }
    stopServe();
    const CoordinatorView view = readStore(QDir(runDir).filePath(QStringLiteral("flotilla.db")));

    // Everything the groups measured, together.
    GroupStats all;
    for (const auto &g : groups) {
        const GroupStats &s = g->stats();
        all.heartbeat.insert(all.heartbeat.end(), s.heartbeat.begin(), s.heartbeat.end());
        all.request.insert(all.request.end(), s.request.begin(), s.request.end());
        all.result.insert(all.result.end(), s.result.begin(), s.result.end());
        all.assimilatedAt.insert(all.assimilatedAt.end(), s.assimilatedAt.begin(), s.assimilatedAt.end());
        all.heartbeats += s.heartbeats;
        all.probesSkipped += s.probesSkipped;
        all.duplicates += s.duplicates;
        all.rejected += s.rejected;
        all.cancels += s.cancels;
        all.noWork += s.noWork;
        all.drops += s.drops;
        all.joinRetries += s.joinRetries;
        all.finished += s.finished;
        all.badAssign += s.badAssign;
        for (const QString &r : s.reasons)
            if (all.reasons.size() < kMaxReasons && !all.reasons.contains(r))
                all.reasons << r;
    }
    const qint64 assimilated = std::count_if(all.assimilatedAt.begin(), all.assimilatedAt.end(),
                                             [&](qint64 t) { return shared.inWindow(t); });
    const double rate = windowSeconds > 0 ? double(assimilated) / windowSeconds : 0;
    const Percentiles hb = percentiles(all.heartbeat, shared);
    const Percentiles rq = percentiles(all.request, shared);
    const Percentiles rs = percentiles(all.result, shared);
    const qint64 numel = [&] {
        qint64 n = 0, in = 784;
        for (const int h : settings.hidden) {
            n += in * h + h;
            in = h;
        }
        return n + in * 10 + 10;
    }();
    QStringList shape{QStringLiteral("784")};
    for (const int h : settings.hidden)
        shape << QString::number(h);
    shape << QStringLiteral("10");
    const double coordinatorPercent = windowSeconds > 0 && coordinatorCpu >= 0 ? 100.0 * coordinatorCpu / windowSeconds : -1;
    const double generatorPercent = windowSeconds > 0 ? 100.0 * generatorCpu / windowSeconds : -1;
    const int cores = QThread::idealThreadCount();

    std::printf("  job                   mlp %s (%lld weights, %.1f KiB a transfer), %d shards of %d samples\n",
                shape.join(u'-').toUtf8().constData(), static_cast<long long>(numel), double(numel) * 4 / 1024,
                job.training.shards, settings.samplesPerShard);
    std::printf("  simulated workers     subtask %.1f s ±20%%, heartbeat every %s, %d load thread%s at nice %d\n",
                settings.subtaskSeconds,
                settings.heartbeatMs > 0 ? QStringLiteral("%1 ms").arg(settings.heartbeatMs).toUtf8().constData()
                                         : "2000 ms (the coordinator's)",
                settings.threads, settings.threads == 1 ? "" : "s", settings.nice);
    std::printf("  coordinator start     %.1f s (data, model, identity)\n", startupSeconds);
    std::printf("  join                  %d of %d enrolled and connected in %.1f s (%d failed, %lld retries)\n", joined,
                settings.workers, joinSeconds, int(shared.joinFailed), static_cast<long long>(all.joinRetries));
    if (windowSeconds > 0) {
        std::printf("  measured window       %.1f s\n", windowSeconds);
        std::printf("  assimilations         %lld = %.2f /s (acks: %lld duplicate, %lld rejected)\n",
                    static_cast<long long>(assimilated), rate, static_cast<long long>(all.duplicates),
                    static_cast<long long>(all.rejected));
        std::printf("  heartbeat round trip  p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.1f ms (%lld heartbeats, %lld "
                    "timed, %lld untimed: previous probe unanswered)\n",
                    hb.p50, hb.p90, hb.p99, hb.max, static_cast<long long>(all.heartbeats),
                    static_cast<long long>(hb.count), static_cast<long long>(all.probesSkipped));
        std::printf("  request round trip    p50 %.2f ms, p99 %.2f ms, max %.1f ms (Request -> Assign/NoWork, %lld; "
                    "%lld NoWork in the whole run)\n",
                    rq.p50, rq.p99, rq.max, static_cast<long long>(rq.count), static_cast<long long>(all.noWork));
        std::printf("  result round trip     p50 %.2f ms, p99 %.2f ms, max %.1f ms (Result -> Ack, %lld)\n", rs.p50,
                    rs.p99, rs.max, static_cast<long long>(rs.count));
        std::printf("  coordinator CPU       %.1f%% of one core (%.2f s user+sys)\n", coordinatorPercent, coordinatorCpu);
        std::printf("  coordinator memory    peak RSS (VmHWM) %.1f MiB, RSS at the end %.1f MiB\n", double(hwmKiB) / 1024,
                    double(rssKiB) / 1024);
        std::printf("  coordinator files     %lld open, soft limit %lld\n", static_cast<long long>(descriptors),
                    static_cast<long long>(coordinatorLimit));
        std::printf("  load generator CPU    %.1f%% of one core\n", generatorPercent);
    }
    std::printf("  dropped connections   %lld%s\n", static_cast<long long>(all.drops),
                serveSurvived ? "" : " (the coordinator exited during the run)");
    if (view.read)
        std::printf("  coordinator's store   %lld assimilations in all; %lld workers declared gone (missed heartbeats), "
                    "%lld leases expired, %lld results rejected, %lld duplicates\n",
                    static_cast<long long>(view.assimilations), static_cast<long long>(view.workersGone),
                    static_cast<long long>(view.leasesExpired), static_cast<long long>(view.rejected),
                    static_cast<long long>(view.duplicates));
    std::printf("  machine               %d cores, load average %s at the start\n", cores,
                loadAtStart.toUtf8().constData());
    for (const QString &r : all.reasons)
        std::printf("  note: %s\n", r.toUtf8().constData());
    if (!serveSurvived)
        std::printf("  the coordinator's last output:\n%s\n", tail(serveLog, 10).toUtf8().constData());

    const QJsonObject result{
        {QStringLiteral("workers"), settings.workers},
        {QStringLiteral("joined"), joined},
        {QStringLiteral("join_failed"), int(shared.joinFailed)},
        {QStringLiteral("join_seconds"), joinSeconds},
        {QStringLiteral("window_seconds"), windowSeconds},
        {QStringLiteral("subtask_seconds"), settings.subtaskSeconds},
        {QStringLiteral("heartbeat_ms"), settings.heartbeatMs > 0 ? settings.heartbeatMs : 2000},
        {QStringLiteral("model_weights"), numel},
        {QStringLiteral("load_threads"), settings.threads},
        {QStringLiteral("assimilations"), assimilated},
        {QStringLiteral("assimilations_per_second"), rate},
        {QStringLiteral("duplicates"), all.duplicates},
        {QStringLiteral("no_work"), all.noWork},
        {QStringLiteral("rejected"), all.rejected},
        {QStringLiteral("heartbeats"), all.heartbeats},
        {QStringLiteral("heartbeat_rtt"), toJson(hb)},
        {QStringLiteral("request_rtt"), toJson(rq)},
        {QStringLiteral("result_rtt"), toJson(rs)},
        {QStringLiteral("probes_untimed"), all.probesSkipped},
        {QStringLiteral("coordinator_cpu_percent"), coordinatorPercent},
        {QStringLiteral("coordinator_cpu_seconds"), coordinatorCpu},
        {QStringLiteral("coordinator_peak_rss_mib"), double(hwmKiB) / 1024},
        {QStringLiteral("coordinator_rss_mib"), double(rssKiB) / 1024},
        {QStringLiteral("coordinator_open_files"), descriptors},
        {QStringLiteral("coordinator_nofile_soft"), coordinatorLimit},
        {QStringLiteral("generator_cpu_percent"), generatorPercent},
        {QStringLiteral("drops"), all.drops},
        {QStringLiteral("coordinator_survived"), serveSurvived},
        {QStringLiteral("store_assimilations"), view.assimilations},
        {QStringLiteral("store_workers_gone"), view.workersGone},
        {QStringLiteral("store_leases_expired"), view.leasesExpired},
        {QStringLiteral("cores"), cores},
        {QStringLiteral("load_average"), loadAtStart},
        {QStringLiteral("notes"), QJsonArray::fromStringList(all.reasons)},
    };
    const QByteArray json = QJsonDocument(result).toJson(QJsonDocument::Compact);
    std::printf("BENCH_SCALE %s\n", json.constData());
    if (parser.isSet(QStringLiteral("json"))) {
        QFile out(parser.value(QStringLiteral("json")));
        if (!out.open(QIODevice::WriteOnly | QIODevice::Truncate) || out.write(QJsonDocument(result).toJson()) < 0) {
            std::fprintf(stderr, "flotilla bench scale: cannot write '%s'\n",
                         parser.value(QStringLiteral("json")).toUtf8().constData());
            return ExitFailure;
        }
    }
    if (parser.isSet(QStringLiteral("samples"))) {
        QFile out(parser.value(QStringLiteral("samples")));
        if (out.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
            QByteArray csv = "kind,at_s,rtt_ms\n";
            const qint64 start = shared.windowStart;
            auto add = [&](const char *kind, const std::vector<Sample> &samples) {
                for (const Sample &x : samples)
                    if (shared.inWindow(x.sentNs))
                        csv += QByteArray(kind) + ',' + QByteArray::number(double(x.sentNs - start) / 1e9, 'f', 3) + ','
                               + QByteArray::number(double(x.rttNs) / 1e6, 'f', 3) + '\n';
            };
            add("heartbeat", all.heartbeat);
            add("request", all.request);
            add("result", all.result);
            for (const qint64 t : all.assimilatedAt)
                if (shared.inWindow(t))
                    csv += "assimilated," + QByteArray::number(double(t - start) / 1e9, 'f', 3) + ",0\n";
            out.write(csv);
        }
    }
    std::fflush(stdout);
    const bool clean = joined == settings.workers && all.drops == 0 && serveSurvived && windowSeconds > 0;
    return clean ? ExitOk : ExitFailure;
}

} // namespace flotilla
