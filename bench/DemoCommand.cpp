// `flotilla demo`: a whole fleet on this machine — a coordinator process and worker
// processes on loopback with real TLS — with workers SIGKILLed at random like spot
// instances, and replacements started, until the job is done.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "bench/Attacks.h"
#include "bench/FleetChaos.h"
#include "bench/LinkShaper.h"
#include "bench/MeasurementCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "net/TrustStore.h"

#include "common/Random.h"
#include "engine/coordination/Store.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

namespace flotilla {

namespace {

struct DemoStats
{
    int kills = 0;
    int started = 0;
    int failedWorkers = 0; // stopped by themselves with an error
    QString attack; // empty: every worker is honest
};

// What screening did: the attackers' results that got in, honest ones turned away, and who
// was quarantined. Attackers are named "attacker-N".
void printScreeningSummary(Store &store, qint64 jobId, const DemoStats &stats)
{
    auto workers = store.workers(jobId);
    auto rows = store.assimilations(jobId);
    auto rejected = store.events(jobId, EventKind::ResultRejected);
    auto quarantined = store.events(jobId, EventKind::WorkerQuarantined);
    if (!workers || !rows || !rejected || !quarantined)
        return;
    std::map<qint64, bool> isAttacker;
    for (const auto &w : *workers)
        isAttacker[w.id] = w.name.startsWith(QLatin1String("attacker-"));
    int attackerAssimilated = 0;
    int honestAssimilated = 0;
    for (const auto &a : *rows)
        (isAttacker[a.workerId] ? attackerAssimilated : honestAssimilated) += 1;
    int attackerRejected = 0;
    int honestRejected = 0;
    for (const auto &e : *rejected)
        (isAttacker[e.workerId] ? attackerRejected : honestRejected) += 1;
    int attackersQuarantined = 0;
    int honestQuarantined = 0;
    for (const auto &e : *quarantined)
        (isAttacker[e.workerId] ? attackersQuarantined : honestQuarantined) += 1;
    std::printf("  attack               %s\n", stats.attack.isEmpty() ? "none" : stats.attack.toUtf8().constData());
    std::printf("  attackers' results   %d assimilated, %d rejected; %d attacker(s) quarantined\n", attackerAssimilated,
                attackerRejected, attackersQuarantined);
    std::printf("  honest results       %d assimilated, %d rejected; %d honest worker(s) quarantined\n",
                honestAssimilated, honestRejected, honestQuarantined);
    auto verified = store.events(jobId, EventKind::ResultVerified);
    auto disagreed = store.events(jobId, EventKind::ResultsDisagree);
    if (verified && disagreed && (!verified->empty() || !disagreed->empty()))
        std::printf("  redundancy           %d results confirmed by a second worker, %d disagreements\n",
                    int(verified->size()), int(disagreed->size()));
}

void printDemoSummary(const QString &db, const DemoStats &stats, qint64 wallMs)
{
    auto store = Store::open(db);
    if (!store)
        return;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return;
    const qint64 id = (*job)->id;
    auto rows = (*store)->assimilations(id);
    auto evaluations = (*store)->evaluations(id);
    auto reassigned = (*store)->events(id, EventKind::SubtaskReassigned);
    auto gone = (*store)->events(id, EventKind::WorkerLeft);
    auto totals = (*store)->ledgerTotals(id);
    if (!rows || !evaluations || !reassigned || !gone || !totals)
        return;
    std::map<qint64, int> histogram;
    qint64 maxStaleness = 0;
    double sum = 0;
    int epochs = 0;
    for (const auto &a : *rows) {
        ++histogram[std::min<qint64>(a.staleness, 8)];
        maxStaleness = std::max(maxStaleness, a.staleness);
        sum += double(a.staleness);
        epochs = std::max(epochs, a.epoch + 1);
    }
    QStringList buckets;
    for (const auto &[s, n] : histogram)
        buckets << QStringLiteral("%1%2: %3").arg(s).arg(s == 8 ? QStringLiteral("+") : QString()).arg(n);
    const double accuracy = evaluations->empty() ? -1 : evaluations->back().accuracy;
    std::printf("\nDemo finished (%s):\n", (*job)->state.toUtf8().constData());
    std::printf("  test accuracy        %.2f%% after %d epochs\n", 100.0 * accuracy, epochs);
    std::printf("  versions             %lld\n", rows->empty() ? 0LL : static_cast<long long>(rows->back().version));
    std::printf("  preemptions          %d workers SIGKILLed, %d worker processes started in all%s\n", stats.kills,
                stats.started,
                stats.failedWorkers > 0
                    ? QStringLiteral(", %1 stopped with an error").arg(stats.failedWorkers).toUtf8().constData()
                    : "");
    std::printf("  detected by the coordinator: %d workers gone (missed heartbeats or left), %d subtasks reassigned\n",
                int(gone->size()), int(reassigned->size()));
    std::printf("  staleness            mean %.2f, max %lld; histogram %s\n", rows->empty() ? 0.0 : sum / double(rows->size()),
                static_cast<long long>(maxStaleness), buckets.join(QStringLiteral(", ")).toUtf8().constData());
    std::printf("  cost                 $%.4f at spot prices vs $%.4f at on-demand prices (%.0f%% saved)\n",
                totals->costSpot, totals->costOnDemand, totals->savingsPercent());
    std::printf("  wasted compute       %.0f worker-seconds of %.0f (%.1f%%)\n", totals->wastedSeconds,
                totals->usefulSeconds + totals->wastedSeconds,
                totals->usefulSeconds + totals->wastedSeconds > 0
                    ? 100.0 * totals->wastedSeconds / (totals->usefulSeconds + totals->wastedSeconds)
                    : 0.0);
    printScreeningSummary(**store, id, stats);
    std::printf("  wall time            %s\n", duration(wallMs).toUtf8().constData());
}

} // namespace

int runDemoCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Run a fleet on this machine: a coordinator process and --workers worker processes on loopback with real\n"
        "TLS. With --chaos-mean, a random worker is SIGKILLed every so many seconds on average (like a spot\n"
        "instance taken back) and a new one started after --rejoin-delay. Prints a summary at the end.\n"
        "With --fleet: a fleet service with a queue of jobs from several submitters, the SIGKILLs hitting the\n"
        "service too, and every job checked at the end (finished, exactly once, nobody quarantined). Never two\n"
        "SIGKILLs of a fleet without an assimilation between them: on a slow machine the strikes wait."));
    parser.addHelpOption();
    addJobOptions(parser);
    parser.addOption({QStringLiteral("chaos-mean"), QStringLiteral("Mean seconds between SIGKILLs of workers (0: none)."),
                      QStringLiteral("seconds"), QStringLiteral("30")});
    parser.addOption({QStringLiteral("chaos-every"),
                      QStringLiteral("SIGKILL a worker exactly every so many seconds instead (for benchmarks)."),
                      QStringLiteral("seconds")});
    parser.addOption({QStringLiteral("attack"),
                      QStringLiteral("Make some workers dishonest, to see result screening at work: %1.")
                          .arg(Attack::kinds().join(QStringLiteral(", "))),
                      QStringLiteral("kind")});
    parser.addOption({QStringLiteral("link"),
                      QStringLiteral("Give each worker's connection an emulated link: a rate and a round trip, e.g. "
                                     "50mbit/40ms or 10mbit/80ms (a relay in this process paces and delays the bytes)."),
                      QStringLiteral("rate/rtt")});
    parser.addOption({QStringLiteral("slow-worker"),
                      QStringLiteral("Benchmarks: the first worker trains this many times slower than the others."),
                      QStringLiteral("factor"), QStringLiteral("1")});
    parser.addOption({QStringLiteral("attackers"),
                      QStringLiteral("How many of the --workers are attackers (with --attack)."), QStringLiteral("n"),
                      QStringLiteral("1")});
    addFleetChaosOptions(parser);
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("demo")))
        return *stop;
    installLogSink(parser.isSet(QStringLiteral("verbose")));
    auto parsed = jobFromOptions(parser);
    if (!parsed) {
        std::fprintf(stderr, "flotilla demo: %s\n", parsed.error().toUtf8().constData());
        return ExitUsage;
    }
    JobSpec job = *parsed;
    if (parser.isSet(QStringLiteral("fleet")))
        return runFleetChaos(parser, job);
    const int workers = std::max(1, job.fleet.workers);
    DemoStats stats;
    int attackers = 0;
    if (parser.isSet(QStringLiteral("attack"))) {
        auto attack = Attack::parse(parser.value(QStringLiteral("attack")));
        if (!attack) {
            std::fprintf(stderr, "flotilla demo: %s\n", attack.error().toUtf8().constData());
            return ExitUsage;
        }
        stats.attack = attack->describe();
        attackers = std::clamp(parser.value(QStringLiteral("attackers")).toInt(), 0, workers);
    }
    std::optional<LinkSpec> link;
    if (parser.isSet(QStringLiteral("link"))) {
        auto spec = LinkSpec::parse(parser.value(QStringLiteral("link")));
        if (!spec) {
            std::fprintf(stderr, "flotilla demo: --link: %s\n", spec.error().toUtf8().constData());
            return ExitUsage;
        }
        link = *spec;
    }
    const bool chaosFixed = parser.isSet(QStringLiteral("chaos-every"));
    const double chaosMean = parser.value(chaosFixed ? QStringLiteral("chaos-every") : QStringLiteral("chaos-mean")).toDouble();
    const double rejoinDelay = job.fleet.preemption.rejoinDelaySeconds;
    // The workers are processes now: no simulated preemptions inside the coordinator, and a
    // killed worker is noticed within seconds.
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    job.fleet.heartbeatTimeoutSeconds = std::min(job.fleet.heartbeatTimeoutSeconds, 6.0);

    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty())
        runDir = defaultRunDir(job) + QStringLiteral("-demo");
    const QDir dir(runDir);
    if (!QDir().mkpath(dir.filePath(QStringLiteral("workers")))) {
        std::fprintf(stderr, "flotilla demo: cannot create '%s'\n", runDir.toUtf8().constData());
        return ExitFailure;
    }
    const QString jobFile = dir.filePath(QStringLiteral("job.json"));
    const QString tokenFile = dir.filePath(QStringLiteral("token"));
    if (auto saved = job.save(jobFile); !saved) {
        std::fprintf(stderr, "flotilla demo: %s\n", saved.error().toUtf8().constData());
        return ExitFailure;
    }
    QFile::remove(tokenFile);
    const QString binary = QCoreApplication::applicationFilePath();

    QProcess serve;
    serve.setStandardOutputFile(dir.filePath(QStringLiteral("coordinator.out")), QIODevice::Append);
    serve.setStandardErrorFile(dir.filePath(QStringLiteral("coordinator.out")), QIODevice::Append);
    serve.start(binary, {QStringLiteral("serve"), QStringLiteral("--job"), jobFile, QStringLiteral("--run-dir"),
                         dir.filePath(QStringLiteral("coordinator")), QStringLiteral("--identity-dir"),
                         dir.filePath(QStringLiteral("identity")), QStringLiteral("--listen"), QStringLiteral("127.0.0.1"),
                         QStringLiteral("--host"), QStringLiteral("127.0.0.1"), QStringLiteral("--port"),
                         QStringLiteral("0"), QStringLiteral("--token-file"), tokenFile, QStringLiteral("--token-uses"),
                         QStringLiteral("10000"), QStringLiteral("--quiet")});
    const QString chaosLine = chaosMean <= 0 ? QStringLiteral("no worker SIGKILLed")
                          : chaosFixed   ? QStringLiteral("a worker SIGKILLed every %1 s").arg(chaosMean)
                                         : QStringLiteral("a worker SIGKILLed every %1 s on average").arg(chaosMean);
    std::printf("Demo in %s: a coordinator and %d workers on loopback, %s\n", runDir.toUtf8().constData(), workers,
                chaosLine.toUtf8().constData());
    std::fflush(stdout);
    QElapsedTimer wall;
    wall.start();
    while (!QFile::exists(tokenFile) && serve.state() != QProcess::NotRunning && wall.elapsed() < 120000)
        serve.waitForFinished(100);
    QFile token(tokenFile);
    if (!token.open(QIODevice::ReadOnly)) {
        std::fprintf(stderr, "flotilla demo: the coordinator did not start; see %s\n",
                     dir.filePath(QStringLiteral("coordinator.out")).toUtf8().constData());
        serve.kill();
        serve.waitForFinished();
        return ExitFailure;
    }
    QString tokenText = QString::fromUtf8(token.readAll()).trimmed();
    // With --link the workers are sent to a relay that gives each connection the link, and
    // the relay forwards to the coordinator; the token carries the relay's address.
    std::unique_ptr<LinkShaper> shaper;
    if (link) {
        auto decoded = net::JoinToken::decode(tokenText);
        if (decoded)
            shaper = std::make_unique<LinkShaper>(*link, decoded->host, decoded->port);
        auto port = decoded ? shaper->start() : Result<quint16>(decoded.takeError());
        if (!port) {
            std::fprintf(stderr, "flotilla demo: cannot start the emulated link: %s\n", port.error().toUtf8().constData());
            serve.kill();
            serve.waitForFinished();
            return ExitFailure;
        }
        decoded->host = QStringLiteral("127.0.0.1");
        decoded->port = *port;
        tokenText = decoded->encode();
        std::printf("Each worker reaches the coordinator over an emulated %s link\n", link->text().toUtf8().constData());
        std::fflush(stdout);
    }

    std::vector<std::unique_ptr<QProcess>> fleet;
    int pendingReplacements = 0;
    int exitCode = ExitOk;
    auto startWorker = [&](bool attacker) {
        const int n = ++stats.started;
        const QString name = QStringLiteral("%1-%2").arg(attacker ? QStringLiteral("attacker") : QStringLiteral("worker")).arg(n);
        auto p = std::make_unique<QProcess>();
        p->setProcessChannelMode(QProcess::MergedChannels);
        p->setStandardOutputFile(dir.filePath(QStringLiteral("workers/%1.log").arg(name)));
        QStringList arguments{QStringLiteral("worker")};
        if (attacker)
            arguments = QStringList{QStringLiteral("bench"), QStringLiteral("attack-worker"), QStringLiteral("--attack"),
                                    parser.value(QStringLiteral("attack"))};
        arguments << QStringLiteral("--join") << tokenText << QStringLiteral("--state-dir")
                  << dir.filePath(QStringLiteral("workers/") + name) << QStringLiteral("--name") << name
                  << QStringLiteral("--instance-type") << job.fleet.instanceType << QStringLiteral("--price-class")
                  << job.fleet.priceClass << QStringLiteral("--threads") << QString::number(job.training.threads)
                  << QStringLiteral("--device") << job.training.device;
        // A TorchScript model is code: every worker loads its own copy, here the user's file.
        if (job.model.kind == QLatin1String("torchscript"))
            arguments << QStringLiteral("--model-file") << job.model.path;
        if (n == 1 && !attacker && parser.value(QStringLiteral("slow-worker")).toDouble() > 1.0)
            arguments << QStringLiteral("--slowdown") << parser.value(QStringLiteral("slow-worker"));
        QProcess *started = p.get();
        // A worker that stops by itself with an error (not one the chaos killed, not one
        // dismissed) is named with its last words; when none is left, the demo ends.
        QObject::connect(started, &QProcess::finished, started, [&, started, name](int code, QProcess::ExitStatus status) {
            if (status != QProcess::NormalExit || code == 0)
                return;
            ++stats.failedWorkers;
            QFile log(dir.filePath(QStringLiteral("workers/%1.log").arg(name)));
            const QStringList lines = log.open(QIODevice::ReadOnly)
                                          ? QString::fromUtf8(log.readAll()).split(u'\n', Qt::SkipEmptyParts)
                                          : QStringList();
            std::fprintf(stderr, "flotilla demo: %s stopped (exit %d): %s\n", name.toUtf8().constData(), code,
                         lines.isEmpty() ? "no output" : lines.constLast().toUtf8().constData());
            const bool anyLeft = std::any_of(fleet.begin(), fleet.end(), [&](const std::unique_ptr<QProcess> &w) {
                return w.get() != started && w->state() != QProcess::NotRunning;
            });
            if (!anyLeft && pendingReplacements == 0) {
                std::fprintf(stderr, "flotilla demo: no worker is left; see %s\n",
                             dir.filePath(QStringLiteral("workers")).toUtf8().constData());
                exitCode = ExitFailure;
                QCoreApplication::quit();
            }
        });
        p->start(binary, arguments);
        p->setProperty("attacker", attacker);
        fleet.push_back(std::move(p));
    };
    for (int i = 0; i < workers; ++i)
        startWorker(i < attackers);

    SplitMix64 random(mixSeed(job.training.seed, 0xC4A05));
    QTimer chaos;
    chaos.setSingleShot(true);
    auto scheduleChaos = [&] {
        if (chaosMean > 0)
            chaos.start(chaosGapMs(chaosMean, chaosFixed, random));
    };
    QObject::connect(&chaos, &QTimer::timeout, &chaos, [&] {
        std::vector<QProcess *> running;
        for (auto &p : fleet)
            if (p->state() == QProcess::Running)
                running.push_back(p.get());
        if (!running.empty()) {
            QProcess *victim = running[std::size_t(random.below(running.size()))];
            const bool attacker = victim->property("attacker").toBool();
            victim->kill(); // SIGKILL: no notice, no goodbye
            ++stats.kills;
            std::printf("  SIGKILL a worker (%d so far); a replacement starts in %.0f s\n", stats.kills, rejoinDelay);
            std::fflush(stdout);
            ++pendingReplacements;
            QTimer::singleShot(int(rejoinDelay * 1000), &chaos, [&, attacker] {
                --pendingReplacements;
                if (serve.state() == QProcess::Running)
                    startWorker(attacker);
            });
        }
        scheduleChaos();
    });
    scheduleChaos();

    QObject::connect(&serve, &QProcess::finished, &serve, [&](int code, QProcess::ExitStatus status) {
        if (status != QProcess::NormalExit || code != 0) {
            std::fprintf(stderr, "flotilla demo: the coordinator stopped (exit %d); see %s\n", code,
                         dir.filePath(QStringLiteral("coordinator.out")).toUtf8().constData());
            exitCode = ExitFailure;
        }
        QCoreApplication::quit();
    });
    installStopSignals();
    QTimer poll;
    QObject::connect(&poll, &QTimer::timeout, &poll, [&] {
        if (pendingStopSignal() != 0) {
            exitCode = ExitInterrupted;
            QCoreApplication::quit();
        }
    });
    poll.start(100);
    QCoreApplication::exec();
    chaos.stop();
    // From here on the demo stops its own processes: their ends are not news.
    QObject::disconnect(&serve, nullptr, nullptr, nullptr);
    for (auto &p : fleet)
        QObject::disconnect(p.get(), nullptr, nullptr, nullptr);
    for (auto &p : fleet)
        if (p->state() == QProcess::Running)
            p->terminate(); // a preemption notice: they hand in what they have and leave
    for (auto &p : fleet)
        if (!p->waitForFinished(30000))
            p->kill();
    if (serve.state() == QProcess::Running) {
        serve.terminate();
        if (!serve.waitForFinished(30000))
            serve.kill();
    }
    if (exitCode == ExitOk) {
        printDemoSummary(dir.filePath(QStringLiteral("coordinator/flotilla.db")), stats, wall.elapsed());
        if (shaper)
            std::printf("  emulated links       %s each, %.1f MB relayed over %d connections\n",
                        link->text().toUtf8().constData(), double(shaper->bytesRelayed()) / 1e6,
                        shaper->connectionsAccepted());
    }
    return exitCode;
}

} // namespace flotilla
