#include "bench/BenchScaling.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/BenchParity.h"
#include "bench/Contenders.h"
#include "bench/CpuQuota.h"
#include "bench/LinkShaper.h"
#include "common/Random.h"
#include "engine/coordination/FleetQueue.h"
#include "engine/coordination/Store.h"
#include "net/TrustStore.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>

namespace flotilla {

namespace {

SpeedupChartWriter &chartWriter()
{
    static SpeedupChartWriter writer;
    return writer;
}

// One run of one contender to the target.
struct Attempt
{
    QString job;
    QString contender; // loop, flotilla, ddp
    QString setting;   // flotilla: its rule; ddp: its learning rate; both with the lr grid's choice
    int workers = 1;
    int repeat = 0;
    double seconds = -1; // to the target (< 0: not reached)
    int epochs = 0;      // to the target
    std::vector<EpochLine> curve;
    QString note;
    double waitingShare = -1; // Flotilla: its workers' time between a result and the next grant
};

struct Settings
{
    double machineCpu = 0.25;
    double coordinatorCpu = 0.25;
    double evaluatorCpu = 0.25; // the coordinator's evaluations on a machine of their own (0: on its own machine)
    double slowFactor = 1.0; // machine 1 runs this many times slower
    double killEvery = 0.0;  // seconds between SIGKILLs of a worker (0: none)
    bool coldStart = false;  // the service's and the workers' start on Flotilla's clock
    std::optional<LinkSpec> link;
    double maxSeconds = 3600;
    QString python;
    QString ddpScript;
    QString app;
};

// The emulated machines: the coordinator's, the loop's, and one per worker or DDP rank.
struct Machines
{
    std::unique_ptr<CpuQuota> quota; // null: no quotas (cgroups not writable)
    QString coordinator;
    int evaluator = -1; // the machine the coordinator's evaluation thread is moved to; -1: none
    QString loop;
    std::vector<QString> workers;
    QString of(int worker) const { return quota ? workers.at(std::size_t(worker)) : QString(); }
};

// A fleet run whose job stalled and granted nothing for this long since is given up.
constexpr qint64 kStalledRunMs = 30000;

double targetFor(const QString &job, const std::map<QString, double> &targets)
{
    if (const auto it = targets.find(job); it != targets.end())
        return it->second;
    return job == QLatin1String("shapes") || job == QLatin1String("bn-cnn") ? 0.95 : 0.90;
}

// The share of its time a fleet run's workers waited between a result and the next grant, up
// to `untilMs` (< 0: the whole run); -1 where the store cannot be read.
double workersWaiting(const QString &runDir, qint64 untilMs)
{
    if (runDir.isEmpty())
        return -1;
    auto store = Store::open(runDir + QStringLiteral("/flotilla.db"));
    if (!store)
        return -1;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return -1;
    std::vector<EventRecord> events;
    for (const EventKind kind : {EventKind::LeaseGranted, EventKind::ResultBuffered, EventKind::ResultAssimilated,
                                 EventKind::LeaseLost, EventKind::LeaseHandedBack})
        if (auto some = (*store)->events((**job).id, kind))
            events.insert(events.end(), some->begin(), some->end());
    return splitWorkerTime(std::move(events), untilMs < 0 ? std::numeric_limits<qint64>::max() : untilMs).waitingShare();
}

// Flotilla on an emulated fleet: a `flotilla serve` on the coordinator's machine and W
// `flotilla worker`s, each on its own, over TLS on loopback. As a lab runs it, the fleet is up
// before the job: a fleet service with its W workers joined and waiting, and the clock runs from
// `flotilla submit` (on the submitter's own machine, outside the quotas, as a data scientist's
// laptop) to the end of the epoch whose evaluation reached the target. With a cold start the
// service is started with the job, the workers join it, and all of that is on the clock.
// Evaluations run on the coordinator's machine, beside training, as in a real fleet.
Attempt runFleet(const JobSpec &spec, int workers, double target, const Machines &machines, const Settings &s,
                 const QString &workDir)
{
    Attempt a;
    QDir().mkpath(workDir);
    const QDir dir(workDir);
    JobSpec job = spec;
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    job.fleet.heartbeatTimeoutSeconds = std::min(job.fleet.heartbeatTimeoutSeconds, 6.0);
    const QString jobFile = dir.filePath(QStringLiteral("job.json"));
    if (auto saved = job.save(jobFile); !saved) {
        a.note = saved.error();
        return a;
    }
    const QString tokenFile = dir.filePath(QStringLiteral("token"));
    const QString identity = dir.filePath(QStringLiteral("identity"));
    QString runDir = s.coldStart ? dir.filePath(QStringLiteral("run")) : QString();
    qint64 t0 = QDateTime::currentMSecsSinceEpoch();
    QStringList serveArgs{QStringLiteral("serve"), QStringLiteral("--identity-dir"), identity,
                          QStringLiteral("--listen"), QStringLiteral("127.0.0.1"), QStringLiteral("--host"),
                          QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QStringLiteral("0"),
                          QStringLiteral("--token-file"), tokenFile, QStringLiteral("--token-uses"),
                          QStringLiteral("1000"), QStringLiteral("--quiet")};
    if (s.coldStart)
        serveArgs << QStringLiteral("--job") << jobFile << QStringLiteral("--run-dir") << runDir;
    else
        serveArgs << QStringLiteral("--concurrent-jobs") << QStringLiteral("1");
    Contender serve(s.app, serveArgs, dir.filePath(QStringLiteral("coordinator.log")), machines.coordinator);
    QString token;
    while (token.isEmpty() && serve.running() && serve.seconds() < 120) {
        serve.process().waitForFinished(100);
        QFile f(tokenFile);
        if (f.open(QIODevice::ReadOnly))
            token = QString::fromUtf8(f.readAll()).trimmed();
    }
    if (token.isEmpty()) {
        a.note = QStringLiteral("the coordinator did not start (see %1)").arg(dir.filePath(QStringLiteral("coordinator.log")));
        return a;
    }
    std::unique_ptr<LinkShaper> shaper;
    if (s.link) {
        auto decoded = net::JoinToken::decode(token);
        if (!decoded) {
            a.note = decoded.error();
            return a;
        }
        shaper = std::make_unique<LinkShaper>(*s.link, decoded->host, decoded->port);
        auto port = shaper->start();
        if (!port) {
            a.note = port.error();
            return a;
        }
        decoded->port = *port;
        token = decoded->encode();
    }
    std::vector<std::unique_ptr<Contender>> fleet;
    fleet.resize(std::size_t(workers));
    const auto startWorker = [&](int i, bool join) {
        QStringList args{QStringLiteral("worker"), QStringLiteral("--state-dir"),
                         dir.filePath(QStringLiteral("worker-%1").arg(i + 1)), QStringLiteral("--threads"),
                         QStringLiteral("1")};
        if (join)
            args << QStringLiteral("--join") << token << QStringLiteral("--name") << QStringLiteral("machine-%1").arg(i + 1);
        if (job.model.kind == QLatin1String("torchscript"))
            args << QStringLiteral("--model-file") << job.model.path;
        fleet[std::size_t(i)] = std::make_unique<Contender>(
            s.app, args, dir.filePath(QStringLiteral("worker-%1.log").arg(i + 1)), machines.of(i));
    };
    for (int i = 0; i < workers; ++i)
        startWorker(i, true);

    if (!s.coldStart) {
        // The fleet is up when every worker has enrolled (the service logs each one).
        const QString fleetLog = QDir(identity).filePath(QStringLiteral("fleet.log"));
        const auto enrolled = [&] {
            QFile f(fleetLog);
            return f.open(QIODevice::ReadOnly) ? int(f.readAll().count("enrolled worker")) : 0;
        };
        QElapsedTimer waited;
        waited.start();
        while (enrolled() < workers && serve.running() && waited.elapsed() < 300000)
            serve.process().waitForFinished(100);
        if (enrolled() < workers) {
            a.note = QStringLiteral("%1 of %2 workers joined the fleet (see %3)").arg(enrolled()).arg(workers).arg(fleetLog);
            for (auto &w : fleet)
                w->stop();
            serve.stop();
            return a;
        }
        serve.process().waitForFinished(500); // the last one's Hello after its enrolment
        t0 = QDateTime::currentMSecsSinceEpoch();
        QProcess submit;
        submit.setProcessChannelMode(QProcess::MergedChannels);
        submit.start(s.app, {QStringLiteral("submit"), jobFile, QStringLiteral("--identity-dir"), identity});
        if (!submit.waitForFinished(120000) || submit.exitCode() != 0) {
            a.note = QStringLiteral("flotilla submit failed: %1").arg(QString::fromUtf8(submit.readAll()).trimmed());
            for (auto &w : fleet)
                w->stop();
            serve.stop();
            return a;
        }
    }

    QEventLoop loop;
    SplitMix64 random(mixSeed(spec.training.seed, 0x5CA1E));
    QTimer chaos;
    if (s.killEvery > 0) {
        QObject::connect(&chaos, &QTimer::timeout, &loop, [&] {
            const int victim = int(random.below(std::uint64_t(workers)));
            fleet[std::size_t(victim)]->stop(); // SIGKILL
            QTimer::singleShot(3000, &loop, [&, victim] { startWorker(victim, false); });
        });
        chaos.start(int(s.killEvery * 1000));
    }
    // The loop's and DDP's evaluations are off their clocks. The coordinator's run beside its
    // folds, on the thread it names "evaluation" (nameThisThread), and on the coordinator's
    // quarter core they would take the quota the folds wait for: the thread is moved onto a
    // machine of its own as soon as it appears, so that every contender's clock leaves the
    // evaluation out.
    QTimer evaluator;
    std::set<qint64> moved;
    if (machines.evaluator >= 0) {
        QObject::connect(&evaluator, &QTimer::timeout, &loop, [&] {
            const qint64 pid = serve.process().processId();
            if (pid <= 0)
                return;
            const QDir tasks(QStringLiteral("/proc/%1/task").arg(pid));
            for (const QString &tid : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
                if (moved.count(tid.toLongLong()))
                    continue;
                QFile comm(tasks.filePath(tid + QStringLiteral("/comm")));
                if (!comm.open(QIODevice::ReadOnly) || comm.readAll().trimmed() != "evaluation")
                    continue;
                if (auto r = machines.quota->moveThread(machines.evaluator, tid.toLongLong()); !r)
                    std::fprintf(stderr, "flotilla bench scaling: the evaluation thread stays on the coordinator's "
                                         "machine: %s\n", r.error().toUtf8().constData());
                moved.insert(tid.toLongLong());
            }
        });
        evaluator.start(50);
    }
    QTimer poll;
    QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
        if (runDir.isEmpty()) // the queue names the job's run folder
            if (auto queue = FleetQueue::open(QDir(identity).filePath(QStringLiteral("fleet.db")))) {
                auto queued = (*queue)->jobs();
                if (queued && !queued->empty())
                    runDir = queued->front().runDir;
            }
        const QString db = runDir + QStringLiteral("/flotilla.db");
        if (!runDir.isEmpty() && QFile::exists(db)) {
            auto store = Store::open(db);
            auto latest = store ? (*store)->latestJob() : Result<std::optional<JobRecord>>(fail(QString()));
            if (latest && latest->has_value()) {
                const qint64 jobId = (**latest).id;
                auto evaluations = (*store)->evaluations(jobId);
                auto closed = (*store)->events(jobId, EventKind::EpochCompleted);
                if (evaluations && closed) {
                    a.curve.clear();
                    for (const EvaluationRecord &e : *evaluations) {
                        EpochLine line;
                        line.epoch = e.epoch + 1;
                        line.accuracy = e.accuracy;
                        if (std::size_t(e.epoch) < closed->size())
                            line.seconds = double((*closed)[std::size_t(e.epoch)].atMs - t0) / 1000.0;
                        a.curve.push_back(line);
                        if (a.seconds < 0 && e.accuracy >= target && std::size_t(e.epoch) < closed->size()) {
                            a.seconds = line.seconds;
                            a.epochs = line.epoch;
                        }
                    }
                }
                if (a.seconds >= 0 || (**latest).state != QLatin1String("running")) {
                    loop.quit();
                    return;
                }
                // A job that says it cannot go on, and has granted nothing for half a minute
                // since, is given up: the run is reported as stalled, with the job's reason,
                // rather than waited on until --max-seconds.
                if (auto stalls = (*store)->events(jobId, EventKind::JobStalled); stalls && !stalls->empty()) {
                    const EventRecord &stall = stalls->back();
                    auto grants = (*store)->eventsAfter(jobId, stall.id, 100000);
                    const bool granted = grants && std::any_of(grants->begin(), grants->end(), [](const EventRecord &e) {
                                             return e.is(EventKind::LeaseGranted);
                                         });
                    if (!granted && QDateTime::currentMSecsSinceEpoch() - stall.atMs > kStalledRunMs) {
                        a.note = QStringLiteral("the job stalled: %1").arg(stall.detail);
                        if (auto quarantined = (*store)->events(jobId, EventKind::WorkerQuarantined);
                            quarantined && !quarantined->empty())
                            a.note += QStringLiteral(" (%1 quarantine(s); the first: %2)")
                                          .arg(quarantined->size())
                                          .arg(quarantined->front().detail);
                        loop.quit();
                        return;
                    }
                }
            }
        }
        if (!serve.running() || serve.seconds() > s.maxSeconds)
            loop.quit();
    });
    poll.start(250);
    loop.exec();
    chaos.stop();
    evaluator.stop();
    if (machines.evaluator >= 0 && moved.empty() && !a.curve.empty())
        std::fprintf(stderr, "flotilla bench scaling: the coordinator's evaluation thread was not seen; this run's "
                             "evaluations shared the coordinator's machine\n");
    if (a.seconds < 0 && a.note.isEmpty())
        a.note = serve.seconds() > s.maxSeconds ? QStringLiteral("not reached in %1 s").arg(s.maxSeconds)
                                                : QStringLiteral("the job ended without reaching the target");
    a.waitingShare = workersWaiting(runDir, a.seconds >= 0 ? t0 + qint64(a.seconds * 1000.0) : -1);
    for (auto &w : fleet)
        if (w)
            w->stop();
    serve.stop();
    if (shaper)
        shaper->stop();
    return a;
}

// DDP with W ranks, rank r on machine r (each rank moves itself there). With kills, a rank is
// SIGKILLed every so often, as a worker would be: DDP does not survive it.
Attempt runDdp(const JobSpec &spec, int workers, double lr, double target, const Machines &machines,
               const Settings &s, const QString &exported, int port)
{
    Attempt a;
    const TrainingSpec &t = spec.training;
    QStringList args{s.ddpScript,
                     QStringLiteral("--data"), exported,
                     QStringLiteral("--processes"), QString::number(workers),
                     QStringLiteral("--threads"), QStringLiteral("1"),
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
                     QStringLiteral("--seed"), QString::number(t.seed),
                     QStringLiteral("--port"), QString::number(port)};
    if (t.nesterov)
        args << QStringLiteral("--nesterov");
    if (machines.quota) {
        QStringList procs;
        for (int r = 0; r < workers; ++r)
            procs << machines.of(r);
        args << QStringLiteral("--cgroups") << procs.join(u',');
    }
    if (s.slowFactor > 1.0 && !machines.quota)
        args << QStringLiteral("--slow-rank") << QString::number(s.slowFactor);
    double nextKill = s.killEvery;
    SplitMix64 random(mixSeed(t.seed, 0xDD9));
    const auto tick = [&](double seconds) {
        if (s.killEvery <= 0 || seconds < nextKill || !machines.quota)
            return;
        nextKill += s.killEvery;
        QFile procs(machines.of(int(random.below(std::uint64_t(workers)))));
        if (procs.open(QIODevice::ReadOnly))
            if (const qint64 pid = QString::fromLatin1(procs.readLine()).trimmed().toLongLong(); pid > 0)
                ::kill(pid_t(pid), SIGKILL);
    };
    const Outcome o = runLines(s.python, args, target, s.maxSeconds, &a.curve, {}, tick, AtTarget::Stop);
    a.seconds = o.seconds;
    a.epochs = o.seconds >= 0 ? o.epoch : 0;
    a.note = o.note;
    return a;
}

std::vector<double> listOf(const QString &text)
{
    std::vector<double> out;
    for (const QString &part : text.split(u',', Qt::SkipEmptyParts))
        out.push_back(part.trimmed().toDouble());
    return out;
}

// The better of a grid's settings: the most repeats at the target, then the lower median time.
bool better(const std::vector<Attempt> &a, const std::vector<Attempt> &b)
{
    const auto reached = [](const std::vector<Attempt> &v) {
        return std::count_if(v.begin(), v.end(), [](const Attempt &x) { return x.seconds >= 0; });
    };
    const auto median = [](const std::vector<Attempt> &v) {
        std::vector<double> t;
        for (const Attempt &x : v)
            t.push_back(x.seconds >= 0 ? x.seconds : 1e30);
        return spread(t).median;
    };
    if (reached(a) != reached(b))
        return reached(a) > reached(b);
    return median(a) < median(b);
}

} // namespace

void setSpeedupChartWriter(SpeedupChartWriter writer)
{
    chartWriter() = std::move(writer);
}

WorkerTimeSplit splitWorkerTime(std::vector<EventRecord> events, qint64 untilMs)
{
    std::sort(events.begin(), events.end(), [](const EventRecord &a, const EventRecord &b) {
        return a.atMs != b.atMs ? a.atMs < b.atMs : a.id < b.id;
    });
    struct Worker
    {
        qint64 grantedMs = -1; // a lease is being trained since then
        qint64 resultMs = -1;  // its result came then; the wait for the next grant runs
    };
    std::map<qint64, Worker> workers;
    WorkerTimeSplit out;
    for (const EventRecord &e : events) {
        if (e.atMs > untilMs || e.workerId <= 0)
            continue;
        Worker &w = workers[e.workerId];
        if (e.is(EventKind::LeaseGranted)) {
            if (w.resultMs >= 0)
                out.waitingSeconds += double(e.atMs - w.resultMs) / 1000.0;
            w.grantedMs = e.atMs;
            w.resultMs = -1;
        } else if (e.is(EventKind::ResultBuffered) || e.is(EventKind::ResultAssimilated)) {
            // The first of the two is when the result came (a round's result is buffered, then
            // assimilated at the round's fold).
            if (w.grantedMs >= 0) {
                out.trainingSeconds += double(e.atMs - w.grantedMs) / 1000.0;
                w.resultMs = e.atMs;
                w.grantedMs = -1;
            }
        } else if (w.grantedMs >= 0) { // lost or handed back: no result, no wait
            w.grantedMs = -1;
            w.resultMs = -1;
        }
    }
    return out;
}

int runBenchScaling(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "More machines, sooner: a fleet of W machines emulated on this box, each a cgroup with a CPU quota (root "
        "needed), against the plain loop on one such machine and PyTorch DDP with W ranks on W of them. Time and "
        "epochs to a target accuracy, speedup over the loop, parallel efficiency split into its statistical and "
        "hardware parts."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("jobs"), QStringLiteral("Jobs of the parity suite: fashion, shapes, table, bn-cnn, resnet18."),
         QStringLiteral("list"), QStringLiteral("fashion,shapes,table,resnet18")},
        {QStringLiteral("workers"), QStringLiteral("Fleet sizes W."), QStringLiteral("list"), QStringLiteral("1,2,4,8")},
        {QStringLiteral("repeats"), QStringLiteral("Runs of each (seeds 1, 2, …): min, median and max are reported."),
         QStringLiteral("n"), QStringLiteral("3")},
        {QStringLiteral("machine-cpu"), QStringLiteral("Cores of one emulated machine (0.25: 8 of them fit in 2 cores)."),
         QStringLiteral("cores"), QStringLiteral("0.25")},
        {QStringLiteral("coordinator-cpu"), QStringLiteral("Cores of the coordinator's machine."), QStringLiteral("cores"),
         QStringLiteral("0.25")},
        {QStringLiteral("evaluator-cpu"),
         QStringLiteral("Cores of a machine for the coordinator's evaluations, as the loop's and DDP's are off their "
                        "clocks (cgroup v1; 0: on the coordinator's machine, sharing its quota with the folds)."),
         QStringLiteral("cores"), QStringLiteral("0.25")},
        {QStringLiteral("cpu-period"),
         QStringLiteral("Milliseconds of the quotas' period: a machine of 0.25 core runs a quarter of each and waits "
                        "out the rest (1 to 1000)."),
         QStringLiteral("ms"), QStringLiteral("100")},
        {QStringLiteral("targets"), QStringLiteral("Target accuracy per job, e.g. fashion=0.90,shapes=0.95 (defaults: "
                                                   "0.95 for shapes and bn-cnn, 0.90 for the others)."),
         QStringLiteral("list")},
        {QStringLiteral("epochs"), QStringLiteral("Epochs of each job's schedule, e.g. fashion=6,shapes=12 (the runs "
                                                  "stop at the target)."),
         QStringLiteral("list")},
        {QStringLiteral("rules"), QStringLiteral("Flotilla's rules as bench parity names them ('default': the job's)."),
         QStringLiteral("list"), QStringLiteral("default")},
        {QStringLiteral("ddp"), QStringLiteral("PyTorch DDP too: on or off."), QStringLiteral("on|off"),
         QStringLiteral("on")},
        {QStringLiteral("loop"),
         QStringLiteral("The plain loop too: on or off (off: Flotilla and DDP are compared with each other and with "
                        "themselves under --slow-machine or --kill-every, without speedups over the loop)."),
         QStringLiteral("on|off"), QStringLiteral("on")},
        {QStringLiteral("lr-grid"),
         QStringLiteral("Each contender with W > 1 at the job's learning rate and at that times W, the better kept: "
                        "on or off (the job's rate only)."),
         QStringLiteral("on|off"), QStringLiteral("on")},
        {QStringLiteral("warmup-epochs"), QStringLiteral("A gradual warmup of the learning rate, for every contender."),
         QStringLiteral("epochs"), QStringLiteral("1")},
        {QStringLiteral("slow-machine"), QStringLiteral("Machine 1 gets this many times less CPU (a heterogeneous fleet)."),
         QStringLiteral("factor"), QStringLiteral("1")},
        {QStringLiteral("kill-every"),
         QStringLiteral("SIGKILL a random worker (Flotilla) or rank (DDP) every so many seconds; a worker comes back "
                        "3 s later."),
         QStringLiteral("seconds"), QStringLiteral("0")},
        {QStringLiteral("cold-start"),
         QStringLiteral("Start Flotilla's clock before its service and workers start (each job then pays the "
                        "fleet's start-up); by default the fleet is up and joined, and the clock starts at flotilla "
                        "submit.")},
        {QStringLiteral("link"), QStringLiteral("Each worker's connection through an emulated link, e.g. 50mbit/40ms."),
         QStringLiteral("rate/rtt")},
        {QStringLiteral("csv"), QStringLiteral("Write every run here."), QStringLiteral("file")},
        {QStringLiteral("plot"), QStringLiteral("Draw speedup against W as a PNG (the desktop build)."),
         QStringLiteral("file")},
        {QStringLiteral("data-dir"), QStringLiteral("Generate the data sets and models here (kept; reused)."),
         QStringLiteral("dir")},
        {QStringLiteral("keep"), QStringLiteral("Keep every run's folders (coordinator, workers, logs) here."),
         QStringLiteral("dir")},
        {QStringLiteral("max-seconds"), QStringLiteral("Give a run up after this long."), QStringLiteral("seconds"),
         QStringLiteral("3600")},
        {QStringLiteral("python"), QStringLiteral("Python with torch (Debian's python3-torch)."), QStringLiteral("path"),
         QStringLiteral("/usr/bin/python3")},
        {QStringLiteral("no-quota"),
         QStringLiteral("Run without CPU quotas (where cgroups cannot be written): epochs to the target only.")},
        {QStringLiteral("cgroup-root"),
         QStringLiteral("Make the machines' cgroups under this folder (a delegated cgroup) instead of the system's."),
         QStringLiteral("dir")},
    });
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("bench scaling")))
        return *stop;
    Settings s;
    s.machineCpu = parser.value(QStringLiteral("machine-cpu")).toDouble();
    s.coordinatorCpu = parser.value(QStringLiteral("coordinator-cpu")).toDouble();
    s.evaluatorCpu = std::max(0.0, parser.value(QStringLiteral("evaluator-cpu")).toDouble());
    s.slowFactor = std::max(1.0, parser.value(QStringLiteral("slow-machine")).toDouble());
    s.killEvery = std::max(0.0, parser.value(QStringLiteral("kill-every")).toDouble());
    s.coldStart = parser.isSet(QStringLiteral("cold-start"));
    s.maxSeconds = std::max(10.0, parser.value(QStringLiteral("max-seconds")).toDouble());
    s.python = parser.value(QStringLiteral("python"));
    s.app = QCoreApplication::applicationFilePath();
    s.ddpScript = findBenchFile(QStringLiteral("ddp_parity.py"));
    if (!(s.machineCpu > 0) || !(s.coordinatorCpu > 0)) {
        std::fprintf(stderr, "flotilla bench scaling: --machine-cpu and --coordinator-cpu must be positive\n");
        return ExitUsage;
    }
    if (const double period = parser.value(QStringLiteral("cpu-period")).toDouble(); !(period >= 1 && period <= 1000)) {
        std::fprintf(stderr, "flotilla bench scaling: --cpu-period is in milliseconds, 1 to 1000 (the kernel's range)\n");
        return ExitUsage;
    }
    if (parser.isSet(QStringLiteral("link"))) {
        auto link = LinkSpec::parse(parser.value(QStringLiteral("link")));
        if (!link) {
            std::fprintf(stderr, "flotilla bench scaling: --link: %s\n", link.error().toUtf8().constData());
            return ExitUsage;
        }
        s.link = *link;
    }
    const int repeats = std::max(1, parser.value(QStringLiteral("repeats")).toInt());
    std::vector<int> fleets;
    for (const double w : listOf(parser.value(QStringLiteral("workers"))))
        if (w >= 1)
            fleets.push_back(int(w));
    std::sort(fleets.begin(), fleets.end());
    if (fleets.empty()) {
        std::fprintf(stderr, "flotilla bench scaling: --workers needs at least one fleet size\n");
        return ExitUsage;
    }
    std::map<QString, double> targets;
    std::map<QString, int> epochs;
    for (const QString &pair : parser.value(QStringLiteral("targets")).split(u',', Qt::SkipEmptyParts))
        targets[pair.section(u'=', 0, 0).trimmed()] = pair.section(u'=', 1).toDouble();
    for (const QString &pair : parser.value(QStringLiteral("epochs")).split(u',', Qt::SkipEmptyParts))
        epochs[pair.section(u'=', 0, 0).trimmed()] = pair.section(u'=', 1).toInt();

    // The machines. Without quotas the fleet shares this box's cores freely: epochs to the
    // target still mean something, seconds do not.
    Machines machines;
    const bool noQuota = parser.isSet(QStringLiteral("no-quota"));
    if (!noQuota) {
        auto quota = CpuQuota::create(parser.value(QStringLiteral("cgroup-root")),
                                      qint64(std::llround(parser.value(QStringLiteral("cpu-period")).toDouble() * 1000.0)));
        if (!quota) {
            std::fprintf(stderr, "flotilla bench scaling: %s\nRun it as root, or with --no-quota for the epochs to the "
                                 "target only.\n",
                         quota.error().toUtf8().constData());
            return ExitFailure;
        }
        machines.quota = std::move(quota).value();
        const auto add = [&](const QString &name, double cores) -> Result<QString> {
            auto index = machines.quota->addMachine(name, cores);
            if (!index)
                return index.takeError();
            return machines.quota->procsFile(*index);
        };
        auto coordinator = add(QStringLiteral("coordinator"), s.coordinatorCpu);
        auto loop = add(QStringLiteral("loop"), s.machineCpu);
        if (!coordinator || !loop) {
            std::fprintf(stderr, "flotilla bench scaling: %s\n",
                         (coordinator ? loop.error() : coordinator.error()).toUtf8().constData());
            return ExitFailure;
        }
        machines.coordinator = *coordinator;
        machines.loop = *loop;
        if (s.evaluatorCpu > 0 && !machines.quota->movesThreads()) {
            std::fprintf(stderr, "flotilla bench scaling: cgroup v2 cannot move the coordinator's evaluation thread "
                                 "alone; its evaluations share the coordinator's machine (as --evaluator-cpu 0)\n");
            s.evaluatorCpu = 0;
        }
        if (s.evaluatorCpu > 0) {
            auto index = machines.quota->addMachine(QStringLiteral("evaluator"), s.evaluatorCpu);
            if (!index) {
                std::fprintf(stderr, "flotilla bench scaling: %s\n", index.error().toUtf8().constData());
                return ExitFailure;
            }
            machines.evaluator = *index;
        }
        for (int i = 0; i < fleets.back(); ++i) {
            auto m = add(QStringLiteral("machine-%1").arg(i + 1), i == 0 ? s.machineCpu / s.slowFactor : s.machineCpu);
            if (!m) {
                std::fprintf(stderr, "flotilla bench scaling: %s\n", m.error().toUtf8().constData());
                return ExitFailure;
            }
            machines.workers.push_back(*m);
        }
    }

    std::unique_ptr<QTemporaryDir> temporary;
    ParitySuiteOptions suite;
    suite.jobs = parser.value(QStringLiteral("jobs")).split(u',', Qt::SkipEmptyParts);
    suite.dataDir = parser.value(QStringLiteral("data-dir"));
    if (suite.dataDir.isEmpty()) {
        temporary = std::make_unique<QTemporaryDir>();
        suite.dataDir = temporary->path();
    }
    suite.python = s.python;
    suite.warmupEpochs = parser.value(QStringLiteral("warmup-epochs")).toDouble();
    suite.epochs = epochs;
    auto jobs = paritySuite(suite);
    if (!jobs) {
        std::fprintf(stderr, "flotilla bench scaling: %s\n", jobs.error().toUtf8().constData());
        return ExitFailure;
    }
    QStringList rules = parser.value(QStringLiteral("rules")).split(u',', Qt::SkipEmptyParts);
    for (QString &r : rules)
        if (r == QLatin1String("default"))
            r = JobSpec().aggregation.rule;
    const bool lrGrid = parser.value(QStringLiteral("lr-grid")) != QLatin1String("off");
    const bool withLoop = parser.value(QStringLiteral("loop")) != QLatin1String("off");
    const bool ddp = parser.value(QStringLiteral("ddp")) != QLatin1String("off") && !s.ddpScript.isEmpty()
                     && QFileInfo::exists(s.python);

    QFile csv;
    if (parser.isSet(QStringLiteral("csv"))) {
        csv.setFileName(parser.value(QStringLiteral("csv")));
        if (!csv.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
            std::fprintf(stderr, "flotilla bench scaling: cannot write %s\n", csv.fileName().toUtf8().constData());
            return ExitFailure;
        }
        csv.write("job,contender,setting,workers,repeat,target,epochs_to_target,seconds_to_target,curve,note,"
                  "workers_waiting_share\n");
    }
    std::printf("Scaling: machines of %g core(s) (%s), the coordinator on one of %g%s%s%s%s; warmup %g epoch(s); %d "
                "repeat(s)\n",
                s.machineCpu, machines.quota ? machines.quota->describe().toUtf8().constData() : "no quotas: epochs only",
                s.coordinatorCpu,
                machines.evaluator >= 0
                    ? QStringLiteral(", its evaluations on one of %1").arg(s.evaluatorCpu).toUtf8().constData()
                    : machines.quota ? ", its evaluations on it" : "",
                s.slowFactor > 1 ? QStringLiteral("; machine 1 %1× slower").arg(s.slowFactor).toUtf8().constData() : "",
                s.killEvery > 0 ? QStringLiteral("; a worker SIGKILLed every %1 s").arg(s.killEvery).toUtf8().constData()
                                : "",
                s.link ? QStringLiteral("; links %1").arg(s.link->text()).toUtf8().constData() : "",
                suite.warmupEpochs, repeats);
    std::printf("Clocks: the loop and DDP from their launch, their evaluations off the clock; Flotilla %s%s\n",
                s.coldStart ? "from starting its service, before its workers join (--cold-start)"
                            : "from flotilla submit to a fleet that is up, its workers joined and waiting",
                machines.evaluator >= 0 ? ", its evaluations beside the clock on a machine of their own" : "");
    std::fflush(stdout);

    QTemporaryDir temporaryWork;
    QDir work(parser.isSet(QStringLiteral("keep")) ? parser.value(QStringLiteral("keep")) : temporaryWork.path());
    QDir().mkpath(work.absolutePath());
    int runs = 0;
    const int portBase = 12000 + int(QCoreApplication::applicationPid() % 20000);
    const auto record = [&](const Attempt &a, double target) {
        QStringList curve;
        for (const EpochLine &e : a.curve)
            curve << QStringLiteral("%1:%2@%3").arg(e.epoch).arg(e.accuracy, 0, 'f', 4).arg(e.seconds, 0, 'f', 1);
        std::printf("  [%d] %-8s %d machine(s) %-40s %s%s\n", a.repeat + 1, a.contender.toUtf8().constData(), a.workers,
                    a.setting.left(40).toUtf8().constData(),
                    a.seconds >= 0 ? QStringLiteral("%1% at epoch %2 in %3 s")
                                         .arg(100 * target, 0, 'f', 0).arg(a.epochs).arg(a.seconds, 0, 'f', 1)
                                         .toUtf8().constData()
                                   : "not reached",
                    a.note.isEmpty() ? "" : QStringLiteral(" (%1)").arg(a.note).toUtf8().constData());
        if (a.waitingShare >= 0)
            std::printf("      its workers waited %.0f%% of their time between a result and their next lease\n",
                        100.0 * a.waitingShare);
        std::fflush(stdout);
        if (csv.isOpen()) {
            csv.write(QStringLiteral("%1,%2,\"%3\",%4,%5,%6,%7,%8,%9,\"%10\",%11\n")
                          .arg(a.job, a.contender, a.setting)
                          .arg(a.workers)
                          .arg(a.repeat + 1)
                          .arg(target)
                          .arg(a.seconds >= 0 ? QString::number(a.epochs) : QString())
                          .arg(a.seconds >= 0 ? QString::number(a.seconds, 'f', 2) : QString())
                          .arg(curve.join(u' '))
                          .arg(QString(a.note).replace(u'"', u'\''))
                          .arg(a.waitingShare >= 0 ? QString::number(a.waitingShare, 'f', 3) : QString())
                          .toUtf8());
            csv.flush();
        }
    };

    // Results: job → contender → W → the kept attempts.
    std::map<QString, std::map<QString, std::map<int, std::vector<Attempt>>>> kept;
    for (const ParityJob &job : *jobs) {
        const double target = targetFor(job.name, targets);
        std::printf("\n%s: %s, to %.0f%%, schedule of %d epochs\n", job.name.toUtf8().constData(),
                    job.description.toUtf8().constData(), 100 * target, job.spec.training.epochs);
        std::fflush(stdout);
        const auto seeded = [&](JobSpec spec, int r) {
            spec.training.seed += quint64(r);
            return spec;
        };
        // The loop on one machine.
        for (int r = 0; withLoop && r < repeats; ++r) {
            const QString file = work.filePath(QStringLiteral("%1-loop-%2.json").arg(job.name).arg(r));
            if (auto saved = seeded(job.spec, r).save(file); !saved) {
                std::fprintf(stderr, "flotilla bench scaling: %s\n", saved.error().toUtf8().constData());
                return ExitFailure;
            }
            Attempt a;
            a.job = job.name;
            a.contender = QStringLiteral("loop");
            a.setting = QStringLiteral("-");
            a.repeat = r;
            const Outcome o = runLines(s.app,
                                       {QStringLiteral("bench"), QStringLiteral("parity-loop"), QStringLiteral("--job"),
                                        file, QStringLiteral("--threads"), QStringLiteral("1")},
                                       target, s.maxSeconds, &a.curve, machines.loop, {}, AtTarget::Stop);
            a.seconds = o.seconds;
            a.epochs = o.seconds >= 0 ? o.epoch : 0;
            a.note = o.note;
            record(a, target);
            kept[job.name][QStringLiteral("loop")][1].push_back(a);
        }
        // Flotilla: each rule, at the job's rate and (the grid) at that times W.
        for (const int w : fleets) {
            std::vector<Attempt> best;
            for (const QString &rule : rules)
                for (const double times : (lrGrid && w > 1) ? std::vector<double>{1.0, double(w)} : std::vector<double>{1.0}) {
                    const QString setting = times > 1 ? rule + QStringLiteral("/lr-times=%1").arg(times) : rule;
                    std::vector<Attempt> these;
                    for (int r = 0; r < repeats; ++r) {
                        JobSpec spec = seeded(job.spec, r);
                        if (auto ok = applyParityRule(spec, setting); !ok) {
                            std::fprintf(stderr, "flotilla bench scaling: %s\n", ok.error().toUtf8().constData());
                            return ExitUsage;
                        }
                        Attempt a = runFleet(spec, w, target, machines, s,
                                             work.filePath(QStringLiteral("run-%1").arg(++runs)));
                        a.job = job.name;
                        a.contender = QStringLiteral("flotilla");
                        a.setting = setting;
                        a.workers = w;
                        a.repeat = r;
                        record(a, target);
                        these.push_back(a);
                    }
                    if (best.empty() || better(these, best))
                        best = these;
                }
            kept[job.name][QStringLiteral("flotilla")][w] = best;
        }
        // DDP: W ranks on W machines, at the job's rate and at that times W.
        if (ddp) {
            const QString exported = work.filePath(job.name + QStringLiteral("-npy"));
            if (auto r = exportForPython(job.spec, exported); !r) {
                std::printf("  DDP left out: %s\n", r.error().toUtf8().constData());
            } else {
                for (const int w : fleets) {
                    if (w < 2)
                        continue;
                    std::vector<Attempt> best;
                    for (const double times : lrGrid ? std::vector<double>{1.0, double(w)} : std::vector<double>{1.0}) {
                        const double lr = job.spec.training.learningRate * times;
                        std::vector<Attempt> these;
                        for (int r = 0; r < repeats; ++r) {
                            Attempt a = runDdp(seeded(job.spec, r), w, lr, target, machines, s, exported,
                                               portBase + (runs++ % 500) * 7);
                            a.job = job.name;
                            a.contender = QStringLiteral("ddp");
                            a.setting = QStringLiteral("lr %1").arg(lr);
                            a.workers = w;
                            a.repeat = r;
                            record(a, target);
                            these.push_back(a);
                        }
                        if (best.empty() || better(these, best))
                            best = these;
                    }
                    kept[job.name][QStringLiteral("ddp")][w] = best;
                }
            }
        }
    }

    // The summary.
    std::printf("\nSummary (medians of %d; time to the target, evaluation excluded; S = the loop's time / W "
                "machines' time; efficiency S/W = statistical (the loop's epochs / W's) x hardware)\n",
                repeats);
    std::printf("  %-8s %-8s %-3s %-34s %-22s %6s %7s %6s %11s %8s\n", "job", "who", "W", "setting",
                "seconds min/med/max", "epochs", "speedup", "eff", "statistical", "hardware");
    std::vector<SpeedupSeries> series;
    for (const auto &[jobName, contenders] : kept) {
        // Without the loop the rows still say each contender's time and epochs.
        const auto loopIt = contenders.find(QStringLiteral("loop"));
        const bool hasLoop = loopIt != contenders.end() && !loopIt->second.empty();
        const auto medianOf = [](const std::vector<Attempt> &v, bool epochsToo) {
            std::vector<double> x;
            for (const Attempt &a : v)
                if (a.seconds >= 0)
                    x.push_back(epochsToo ? double(a.epochs) : a.seconds);
            return x.size() * 2 > v.size() ? spread(x) : Spread{-1, -1, -1};
        };
        const Spread loopT = hasLoop ? medianOf(loopIt->second.begin()->second, false) : Spread{-1, -1, -1};
        const Spread loopE = hasLoop ? medianOf(loopIt->second.begin()->second, true) : Spread{-1, -1, -1};
        for (const auto &[who, byW] : contenders) {
            SpeedupSeries line{QStringLiteral("%1 %2").arg(jobName, who), {}};
            // DDP with one rank is the loop.
            if (who == QLatin1String("ddp"))
                line.points.push_back({1, 1.0});
            for (const auto &[w, attempts] : byW) {
                const Spread t = medianOf(attempts, false);
                const Spread e = medianOf(attempts, true);
                const double speedup = t.median > 0 && loopT.median > 0 ? loopT.median / t.median : -1;
                const double efficiency = speedup > 0 ? speedup / w : -1;
                const double statistical = e.median > 0 && loopE.median > 0 ? loopE.median / e.median : -1;
                const double hardware = efficiency > 0 && statistical > 0 ? efficiency / statistical : -1;
                const QString setting = attempts.empty() ? QString() : attempts.front().setting;
                std::printf("  %-8s %-8s %-3d %-34s %-22s %6s %7s %6s %11s %8s\n", jobName.toUtf8().constData(),
                            who.toUtf8().constData(), w, setting.left(34).toUtf8().constData(),
                            t.median > 0 ? QStringLiteral("%1 / %2 / %3").arg(t.min, 0, 'f', 0).arg(t.median, 0, 'f', 0)
                                               .arg(t.max, 0, 'f', 0).toUtf8().constData()
                                         : "not reached",
                            e.median > 0 ? QString::number(e.median).toUtf8().constData() : "-",
                            speedup > 0 ? QString::number(speedup, 'f', 2).toUtf8().constData() : "-",
                            efficiency > 0 ? QString::number(efficiency, 'f', 2).toUtf8().constData() : "-",
                            statistical > 0 ? QString::number(statistical, 'f', 2).toUtf8().constData() : "-",
                            hardware > 0 ? QString::number(hardware, 'f', 2).toUtf8().constData() : "-");
                if (speedup > 0)
                    line.points.push_back({w, speedup});
                line.largestFleet = std::max(line.largestFleet, w);
            }
            if (who != QLatin1String("loop"))
                series.push_back(line);
        }
    }
    if (parser.isSet(QStringLiteral("plot"))) {
        if (!chartWriter()) {
            std::printf("No plot: charts need the desktop build (flotilla, not flotilla-headless)\n");
        } else if (auto r = chartWriter()(series,
                                          QStringLiteral("Speedup over the plain loop, machines of %1 core").arg(s.machineCpu),
                                          parser.value(QStringLiteral("plot")));
                   !r) {
            std::fprintf(stderr, "flotilla bench scaling: %s\n", r.error().toUtf8().constData());
            return ExitFailure;
        } else {
            std::printf("Plot: %s\n", parser.value(QStringLiteral("plot")).toUtf8().constData());
        }
    }
    return ExitOk;
}

} // namespace flotilla
