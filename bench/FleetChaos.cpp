#include "bench/FleetChaos.h"

#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "engine/coordination/FleetQueue.h"
#include "engine/coordination/RunAudit.h"
#include "engine/coordination/Store.h"
#include "engine/data/JobData.h"
#include "net/TrustStore.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QProcess>
#include <QTcpServer>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <numeric>

namespace flotilla {

namespace {

// The service must come back on the port its workers know.
quint16 freeLoopbackPort()
{
    QTcpServer probe;
    probe.listen(QHostAddress::LocalHost, 0);
    return probe.serverPort();
}

QString readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// What one job's run folder says after the run.
struct JobAudit
{
    QString verdict; // what is wrong; empty when nothing is
    int epochs = 0;
    qint64 assimilated = 0;
    int quarantined = 0; // worker-quarantined events
    QStringList quarantines{}; // what each of them says
    int overBudget = 0;  // worker-over-budget events
};

JobAudit auditJob(const QueuedJob &row)
{
    JobAudit out;
    const QString db = QDir(row.runDir).filePath(QStringLiteral("flotilla.db"));
    {
        auto store = Store::open(db);
        if (!store)
            return JobAudit{store.error()};
        auto stored = (*store)->latestJob();
        if (!stored || !stored->has_value())
            return JobAudit{stored ? QStringLiteral("no job in its store") : stored.error()};
        const qint64 id = (*stored)->id;
        // The shards as the job's own data make them: the audit does not trust the store for them.
        auto spec = JobSpec::fromJson(QJsonDocument::fromJson((*stored)->spec.toUtf8()).object());
        auto data = spec ? loadJobData(*spec) : Result<std::shared_ptr<const JobData>>(spec.takeError());
        if (!data) {
            out.verdict = data.error();
        } else {
            out.epochs = spec->training.epochs;
            std::vector<qint64> sizes;
            for (int s = 0; s < (*data)->plan.numShards(); ++s)
                sizes.push_back((*data)->plan.shardSize(s));
            out.verdict = auditExactlyOnce(**store, sizes, out.epochs);
        }
        if (auto a = (*store)->assimilations(id))
            out.assimilated = qint64(a->size());
        if (auto q = (*store)->events(id, EventKind::WorkerQuarantined)) {
            out.quarantined = int(q->size());
            for (const auto &e : *q)
                out.quarantines << e.detail.left(400);
        }
        if (auto b = (*store)->events(id, EventKind::WorkerOverBudget))
            out.overBudget = int(b->size());
    }
    if (const QString integrity = auditSqliteIntegrity(db); !integrity.isEmpty())
        out.verdict += (out.verdict.isEmpty() ? QString() : QStringLiteral("; ")) + integrity;
    return out;
}

struct Member
{
    QString name; // "service" or the worker's
    std::unique_ptr<QProcess> process;
    int kills = 0;
    bool restarting = false;
};

} // namespace

RequestTally tallyRequests(const QString &log)
{
    std::deque<qint64> window;
    RequestTally out;
    for (const QString &line : log.split(u'\n')) {
        if (!line.contains(QLatin1String("flotilla.agent: asking for work")))
            continue;
        const QDateTime at = QDateTime::fromString(line.section(u' ', 0, 0), Qt::ISODateWithMs);
        if (!at.isValid())
            continue;
        const qint64 ms = at.toMSecsSinceEpoch();
        ++out.total;
        window.push_back(ms);
        while (!window.empty() && window.front() <= ms - 1000)
            window.pop_front();
        out.peakPerSecond = std::max(out.peakPerSecond, int(window.size()));
    }
    return out;
}

int chaosGapMs(double seconds, bool fixed, SplitMix64 &random)
{
    return int((fixed ? seconds : -seconds * std::log(1.0 - random.uniform())) * 1000.0);
}

void addFleetChaosOptions(QCommandLineParser &parser)
{
    parser.addOptions({
        {QStringLiteral("fleet"),
         QStringLiteral("Run a fleet service instead of one job's coordinator: --jobs jobs from --submitters submitters "
                        "in its queue, --workers worker processes, SIGKILLs (every --chaos-mean s on average) hitting "
                        "the service and the workers; every job is checked at the end.")},
        {QStringLiteral("jobs"), QStringLiteral("With --fleet: jobs to submit."), QStringLiteral("n"), QStringLiteral("5")},
        {QStringLiteral("submitters"), QStringLiteral("With --fleet: submitters the jobs are shared among."),
         QStringLiteral("n"), QStringLiteral("2")},
        {QStringLiteral("concurrent-jobs"), QStringLiteral("With --fleet: jobs the service runs at once."),
         QStringLiteral("n"), QStringLiteral("2")},
        {QStringLiteral("kill"), QStringLiteral("With --fleet: what the SIGKILLs hit: both, service or workers."),
         QStringLiteral("what"), QStringLiteral("both")},
        {QStringLiteral("deadline"), QStringLiteral("With --fleet: give up, and fail, after so many seconds."),
         QStringLiteral("seconds"), QStringLiteral("1800")},
    });
}

int runFleetChaos(const QCommandLineParser &parser, JobSpec job)
{
    const int jobs = std::clamp(parser.value(QStringLiteral("jobs")).toInt(), 1, 100);
    const int submitters = std::clamp(parser.value(QStringLiteral("submitters")).toInt(), 1, 20);
    const int concurrent = std::clamp(parser.value(QStringLiteral("concurrent-jobs")).toInt(), 1, 16);
    const int workers = std::max(1, job.fleet.workers);
    const QString kill = parser.value(QStringLiteral("kill"));
    if (kill != QLatin1String("both") && kill != QLatin1String("service") && kill != QLatin1String("workers")) {
        std::fprintf(stderr, "flotilla demo: --kill is both, service or workers, not '%s'\n", kill.toUtf8().constData());
        return ExitUsage;
    }
    const double chaosMean = parser.value(parser.isSet(QStringLiteral("chaos-every")) ? QStringLiteral("chaos-every")
                                                                                       : QStringLiteral("chaos-mean"))
                                 .toDouble();
    const bool chaosFixed = parser.isSet(QStringLiteral("chaos-every"));
    const qint64 deadlineMs = qint64(std::max(10.0, parser.value(QStringLiteral("deadline")).toDouble()) * 1000.0);
    // The processes are killed for real: no simulated preemptions; a killed worker is noticed
    // within seconds. Small jobs unless told otherwise, so that a run takes minutes.
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    job.fleet.heartbeatTimeoutSeconds = std::min(job.fleet.heartbeatTimeoutSeconds, 6.0);
    if (!parser.isSet(QStringLiteral("train-limit")) && job.dataset.trainLimit == 0)
        job.dataset.trainLimit = 6000;
    if (!parser.isSet(QStringLiteral("test-limit")) && job.dataset.testLimit == 0)
        job.dataset.testLimit = 500;
    if (!parser.isSet(QStringLiteral("epochs")))
        job.training.epochs = 3;
    if (!parser.isSet(QStringLiteral("shards")) && job.training.shards == 0)
        job.training.shards = 4;
    const double rejoinDelay = std::max(0.5, job.fleet.preemption.rejoinDelaySeconds);

    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty())
        runDir = defaultRunDir(job) + QStringLiteral("-fleet-chaos");
    const QDir dir(runDir);
    if (!QDir().mkpath(dir.filePath(QStringLiteral("workers"))) || !QDir().mkpath(dir.filePath(QStringLiteral("jobs")))) {
        std::fprintf(stderr, "flotilla demo: cannot create '%s'\n", runDir.toUtf8().constData());
        return ExitFailure;
    }
    const QString identity = dir.filePath(QStringLiteral("identity"));
    const QString tokenFile = dir.filePath(QStringLiteral("token"));
    QFile::remove(tokenFile);
    const QString binary = QCoreApplication::applicationFilePath();
    const quint16 port = freeLoopbackPort();
    SplitMix64 random(mixSeed(job.training.seed, 0xF1EE7));

    Member service{QStringLiteral("service"), nullptr};
    auto startService = [&] {
        service.process = std::make_unique<QProcess>();
        service.process->setProcessChannelMode(QProcess::MergedChannels);
        service.process->setStandardOutputFile(dir.filePath(QStringLiteral("service.out")), QIODevice::Append);
        service.process->start(binary, {QStringLiteral("serve"), QStringLiteral("--fleet"), QStringLiteral("--identity-dir"),
                                        identity, QStringLiteral("--listen"), QStringLiteral("127.0.0.1"),
                                        QStringLiteral("--host"), QStringLiteral("127.0.0.1"), QStringLiteral("--port"),
                                        QString::number(port), QStringLiteral("--token-file"), tokenFile,
                                        QStringLiteral("--token-uses"), QStringLiteral("10000"),
                                        QStringLiteral("--concurrent-jobs"), QString::number(concurrent),
                                        QStringLiteral("--quiet")});
    };
    startService();
    std::printf("Fleet chaos in %s: a fleet service, %d jobs from %d submitters (%d at once), %d workers; SIGKILLs "
                "every %s%.0f s at the %s\n",
                runDir.toUtf8().constData(), jobs, submitters, concurrent, workers, chaosFixed ? "" : "~", chaosMean,
                kill == QLatin1String("both") ? "service and the workers" : kill.toUtf8().constData());
    std::fflush(stdout);
    QElapsedTimer wall;
    wall.start();
    while (!QFile::exists(tokenFile) && service.process->state() != QProcess::NotRunning && wall.elapsed() < 120000)
        service.process->waitForFinished(100);
    const QString token = readAll(tokenFile).trimmed();
    if (token.isEmpty()) {
        std::fprintf(stderr, "flotilla demo: the fleet service did not start; see %s\n",
                     dir.filePath(QStringLiteral("service.out")).toUtf8().constData());
        service.process->kill();
        service.process->waitForFinished();
        return ExitFailure;
    }

    // The queue: jobs named chaos-1..n, shared among the submitters in turn.
    static const char *const kSubmitters[] = {"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
                                              "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert",
                                              "sybil", "trent", "uma", "victor", "wendy"};
    for (int i = 1; i <= jobs; ++i) {
        JobSpec one = job;
        one.name = QStringLiteral("chaos-%1").arg(i);
        one.training.seed = job.training.seed + quint64(i);
        const QString file = dir.filePath(QStringLiteral("jobs/chaos-%1.json").arg(i));
        if (auto saved = one.save(file); !saved) {
            std::fprintf(stderr, "flotilla demo: %s\n", saved.error().toUtf8().constData());
            service.process->kill();
            return ExitFailure;
        }
        QProcess submit;
        submit.setProcessChannelMode(QProcess::MergedChannels);
        submit.start(binary, {QStringLiteral("submit"), file, QStringLiteral("--as"),
                              QString::fromLatin1(kSubmitters[(i - 1) % submitters]), QStringLiteral("--identity-dir"),
                              identity});
        if (!submit.waitForFinished(120000) || submit.exitCode() != 0) {
            std::fprintf(stderr, "flotilla demo: submitting chaos-%d failed: %s\n", i,
                         QString::fromUtf8(submit.readAll()).trimmed().toUtf8().constData());
            service.process->kill();
            return ExitFailure;
        }
    }

    // Workers log each Request they send (flotilla.agent debug): the chaos run reports the
    // most any sent in a second.
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    environment.insert(QStringLiteral("QT_LOGGING_RULES"), QStringLiteral("flotilla.agent.debug=true"));
    std::vector<Member> fleet;
    auto startWorker = [&](Member &m, bool first) {
        m.process = std::make_unique<QProcess>();
        m.process->setProcessChannelMode(QProcess::MergedChannels);
        m.process->setProcessEnvironment(environment);
        m.process->setStandardOutputFile(dir.filePath(QStringLiteral("workers/%1.log").arg(m.name)), QIODevice::Append);
        QStringList arguments{QStringLiteral("worker"), QStringLiteral("--state-dir"),
                              dir.filePath(QStringLiteral("workers/") + m.name), QStringLiteral("--grace"),
                              QStringLiteral("5")};
        // Back from its state folder after a kill: its certificate says who it is.
        if (first)
            arguments << QStringLiteral("--join") << token << QStringLiteral("--name") << m.name;
        m.process->start(binary, arguments);
    };
    fleet.reserve(std::size_t(workers));
    for (int i = 1; i <= workers; ++i) {
        fleet.push_back(Member{QStringLiteral("w%1").arg(i), nullptr});
        startWorker(fleet.back(), true);
    }

    int exitCode = ExitOk;
    QTimer chaos;
    chaos.setSingleShot(true);
    auto scheduleChaos = [&] {
        if (chaosMean > 0)
            chaos.start(chaosGapMs(chaosMean, chaosFixed, random));
    };
    // With both, the service is every second victim (when it is up), a random worker the
    // others: a chaos run of a few minutes restarts the service several times. Never two
    // SIGKILLs without an assimilation between them: on a slow or busy machine a service
    // killed every 8 s may spend each life starting up, and the chaos would stop the fleet
    // rather than test it. Such a strike waits for the fleet's next assimilation.
    int strikes = 0;
    int heldBack = 0;
    bool holding = false;
    std::vector<QString> runDirs; // the queue's jobs' run folders, as the poll last read them
    qint64 progressAtLastKill = -1;
    const auto assimilatedSoFar = [&] {
        qint64 sum = 0;
        for (const QString &folder : runDirs)
            sum += std::max<qint64>(0, countAssimilations(QDir(folder).filePath(QStringLiteral("flotilla.db"))));
        return sum;
    };
    QObject::connect(&chaos, &QTimer::timeout, &chaos, [&] {
        if (const qint64 progress = assimilatedSoFar(); progress <= progressAtLastKill) {
            heldBack += holding ? 0 : 1;
            holding = true;
            chaos.start(500);
            return;
        } else {
            holding = false;
            progressAtLastKill = progress;
        }
        const bool hitService = kill == QLatin1String("service") || (kill == QLatin1String("both") && ++strikes % 2 == 0);
        std::vector<Member *> targets;
        if (hitService && !service.restarting)
            targets.push_back(&service);
        if (kill != QLatin1String("service") && targets.empty())
            for (Member &m : fleet)
                if (!m.restarting && m.process->state() == QProcess::Running)
                    targets.push_back(&m);
        if (!targets.empty()) {
            Member *victim = targets[std::size_t(random.below(targets.size()))];
            victim->process->kill(); // SIGKILL: no notice, no goodbye
            victim->process->waitForFinished(5000);
            ++victim->kills;
            victim->restarting = true;
            const bool isService = victim == &service;
            const double back = isService ? 1.0 + random.uniform() * 2.0 : rejoinDelay;
            std::printf("  %5.0f s  SIGKILL %s; back in %.1f s\n", double(wall.elapsed()) / 1000.0,
                        victim->name.toUtf8().constData(), back);
            std::fflush(stdout);
            QTimer::singleShot(int(back * 1000.0), &chaos, [&, victim, isService] {
                victim->restarting = false;
                if (isService)
                    startService();
                else
                    startWorker(*victim, false);
            });
        }
        scheduleChaos();
    });
    scheduleChaos();

    // The queue, read as `flotilla jobs` reads it, twice a second: done when every job ended.
    const QString queuePath = QDir(identity).filePath(QStringLiteral("fleet.db"));
    QTimer poll;
    int lastEnded = -1;
    QObject::connect(&poll, &QTimer::timeout, &poll, [&] {
        if (pendingStopSignal() != 0) {
            exitCode = ExitInterrupted;
            QCoreApplication::quit();
            return;
        }
        if (wall.elapsed() > deadlineMs) {
            std::fprintf(stderr, "flotilla demo: the queue did not end within %lld s\n", deadlineMs / 1000);
            exitCode = ExitFailure;
            QCoreApplication::quit();
            return;
        }
        auto queue = FleetQueue::open(queuePath);
        if (!queue)
            return; // the service may be rewriting it; next time
        auto rows = (*queue)->jobs();
        if (!rows)
            return;
        runDirs.clear();
        for (const QueuedJob &j : *rows)
            if (!j.runDir.isEmpty())
                runDirs.push_back(j.runDir);
        const int ended = int(std::count_if(rows->begin(), rows->end(), [](const QueuedJob &j) { return j.ended(); }));
        if (ended != lastEnded) {
            lastEnded = ended;
            std::printf("  %5.0f s  %d of %d jobs ended\n", double(wall.elapsed()) / 1000.0, ended, int(rows->size()));
            std::fflush(stdout);
        }
        if (int(rows->size()) == jobs && ended == jobs)
            QCoreApplication::quit();
    });
    poll.start(500);
    installStopSignals();
    QCoreApplication::exec();
    chaos.stop();
    poll.stop();
    const qint64 wallMs = wall.elapsed();
    for (Member &m : fleet)
        if (m.process && m.process->state() == QProcess::Running)
            m.process->terminate();
    for (Member &m : fleet)
        if (m.process && !m.process->waitForFinished(30000))
            m.process->kill();
    if (service.process && service.process->state() == QProcess::Running) {
        service.process->terminate();
        if (!service.process->waitForFinished(30000))
            service.process->kill();
    }
    if (exitCode == ExitInterrupted)
        return exitCode;

    // The checks.
    QStringList problems;
    auto queue = FleetQueue::open(queuePath);
    auto rows = queue ? (*queue)->jobs() : Result<std::vector<QueuedJob>>(queue.takeError());
    if (!rows) {
        std::fprintf(stderr, "flotilla demo: cannot read the queue: %s\n", rows.error().toUtf8().constData());
        return ExitFailure;
    }
    std::printf("\nFleet chaos: %s, %d SIGKILLs of the service, %d of workers (%d strike(s) waited for an "
                "assimilation first)\n",
                duration(wallMs).toUtf8().constData(), service.kills,
                int(std::accumulate(fleet.begin(), fleet.end(), 0, [](int n, const Member &m) { return n + m.kills; })),
                heldBack);
    std::printf("  %-10s %-9s %-10s %-8s %-12s %-11s %s\n", "job", "state", "submitter", "epochs", "assimilated",
                "quarantined", "exactly once");
    int quarantinedInJobs = 0;
    int overBudgetInJobs = 0;
    for (const QueuedJob &row : *rows) {
        const JobAudit a = auditJob(row);
        quarantinedInJobs += a.quarantined;
        overBudgetInJobs += a.overBudget;
        if (row.state != QLatin1String("finished"))
            problems << QStringLiteral("job %1 is %2 in the queue: %3").arg(row.name, row.state, row.message.left(300));
        if (!a.verdict.isEmpty())
            problems << QStringLiteral("job %1: %2").arg(row.name, a.verdict);
        for (const QString &why : a.quarantines)
            problems << QStringLiteral("job %1 quarantined %2").arg(row.name, why);
        std::printf("  %-10s %-9s %-10s %-8d %-12lld %-11d %s\n", row.name.toUtf8().constData(),
                    row.state.toUtf8().constData(), row.submitter.toUtf8().constData(), a.epochs,
                    static_cast<long long>(a.assimilated), a.quarantined, a.verdict.isEmpty() ? "yes" : "NO");
    }
    if (quarantinedInJobs > 0)
        problems << QStringLiteral("%1 honest worker(s) quarantined by a job").arg(quarantinedInJobs);
    net::TrustStore trust(identity);
    if (auto held = trust.quarantined(); !held)
        problems << held.error();
    else if (!held->empty())
        problems << QStringLiteral("%1 honest worker(s) quarantined in the fleet").arg(held->size());
    const QString fleetLog = readAll(QDir(identity).filePath(QStringLiteral("fleet.log")));
    const int budgetClosings = int(fleetLog.count(QLatin1String("went over its budget")));
    // A service that came back before its jobs did takes no result yet: a worker holds it
    // until it has a job again, and is never closed for sending it too soon.
    if (const int early = int(fleetLog.count(QLatin1String("announces a payload"))); early > 0)
        problems << QStringLiteral("honest workers were closed %1 time(s) for a payload the service did not take yet")
                        .arg(early);
    if (budgetClosings > 0 || overBudgetInJobs > 0)
        problems << QStringLiteral("honest workers were closed for going over their budgets (%1 in the fleet's log, %2 "
                                   "in the jobs' stores)")
                        .arg(budgetClosings)
                        .arg(overBudgetInJobs);
    for (const QString &db : {QStringLiteral("fleet.db"), QStringLiteral("trust.db")})
        if (const QString integrity = auditSqliteIntegrity(QDir(identity).filePath(db)); !integrity.isEmpty())
            problems << integrity;
    QStringList peaks;
    int peak = 0;
    for (const Member &m : fleet) {
        const RequestTally t = tallyRequests(readAll(dir.filePath(QStringLiteral("workers/%1.log").arg(m.name))));
        peak = std::max(peak, t.peakPerSecond);
        peaks << QStringLiteral("%1 %2 (of %3)").arg(m.name).arg(t.peakPerSecond).arg(t.total);
    }
    std::printf("  Requests          at most %d in a second by one worker: %s\n", peak,
                peaks.join(QStringLiteral(", ")).toUtf8().constData());
    // A worker's pacer allows 10 a second and bursts of 20 (RequestPacer); the coordinator's
    // budget is 50 a second and bursts of 200.
    if (peak > kHonestRequestPeak)
        problems << QStringLiteral("a worker sent %1 Requests in one second (an honest worker's pacer allows at most %2)")
                        .arg(peak)
                        .arg(kHonestRequestPeak);
    std::printf("  budget closings   %d; quarantined: %d in jobs, in the fleet %s\n", budgetClosings, quarantinedInJobs,
                trust.quarantined() && trust.quarantined()->empty() ? "none" : "some");
    if (problems.isEmpty()) {
        std::printf("Every check passed: every job finished, every shard of every epoch assimilated exactly once, no "
                    "honest worker quarantined or closed for its budgets, every SQLite file intact.\n");
        return exitCode;
    }
    for (const QString &p : problems)
        std::printf("  FAILED: %s\n", p.toUtf8().constData());
    return ExitFailure;
}

} // namespace flotilla
