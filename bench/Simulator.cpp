#include "bench/Simulator.h"

#include "common/Clock.h"
#include "common/Random.h"
#include "engine/coordination/Assimilator.h"

#include <torch/torch.h>

#include <QFile>
#include <QJsonArray>
#include <QTextStream>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <set>

namespace flotilla {

// ---------------------------------------------------------------------------------------
// The synthetic objective: softmax regression on Gaussian classes. A sample's label and
// features are a pure function of (seed, index), so the training set needs no memory and
// every run of every rule sees the same data.

struct Simulator::Objective
{
    int features = 0;
    int classes = 0;
    std::uint64_t seed = 0;
    std::vector<float> centres; // classes × features
    std::vector<float> testFeatures;
    std::vector<int> testLabels;

    Objective(const SimulationConfig &c, std::uint64_t dataSeed)
        : features(c.features), classes(c.classes), seed(dataSeed)
    {
        SplitMix64 g(mixSeed(seed, 0xC3E7));
        centres.resize(std::size_t(classes) * std::size_t(features));
        for (auto &v : centres)
            v = float(c.separation * gaussian(g));
        testFeatures.resize(std::size_t(c.testSamples) * std::size_t(features));
        testLabels.resize(std::size_t(c.testSamples));
        for (int i = 0; i < c.testSamples; ++i)
            testLabels[std::size_t(i)] = draw(mixSeed(seed ^ 0x7E57'7E57ULL, std::uint64_t(i)),
                &testFeatures[std::size_t(i) * std::size_t(features)]);
    }

    int parameters() const { return classes * (features + 1); }

    // Box–Muller on the deterministic generator: the same numbers on every platform.
    static double gaussian(SplitMix64 &g)
    {
        const double u1 = 1.0 - g.uniform(); // (0, 1]
        const double u2 = g.uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

    int draw(std::uint64_t sampleSeed, float *x) const
    {
        SplitMix64 g(sampleSeed);
        const int label = int(g.below(std::uint64_t(classes)));
        const float *centre = &centres[std::size_t(label) * std::size_t(features)];
        for (int j = 0; j < features; ++j)
            x[j] = centre[j] + float(gaussian(g));
        return label;
    }

    int trainingSample(std::int64_t index, float *x) const { return draw(mixSeed(seed, std::uint64_t(index)), x); }

    // Softmax probabilities of one sample into p; returns the log-sum-exp of the logits.
    double probabilities(const float *w, const float *x, std::vector<double> &p) const
    {
        const float *bias = w + std::size_t(classes) * std::size_t(features);
        double top = -1e300;
        for (int k = 0; k < classes; ++k) {
            const float *row = w + std::size_t(k) * std::size_t(features);
            double z = bias[k];
            for (int j = 0; j < features; ++j)
                z += double(row[j]) * x[j];
            p[std::size_t(k)] = z;
            top = std::max(top, z);
        }
        double sum = 0.0;
        for (int k = 0; k < classes; ++k)
            sum += std::exp(p[std::size_t(k)] - top);
        const double lse = top + std::log(sum);
        return lse;
    }

    // Plain mini-batch SGD over `samples` in order, passes times, for at most steps
    // sample-steps; batches do not cross the end of a pass. Returns the mean loss.
    double train(float *w, const std::vector<std::int64_t> &samples, int passes, qint64 steps, int batchSize,
        double learningRate) const
    {
        const std::size_t n = samples.size();
        std::vector<float> x(static_cast<std::size_t>(batchSize) * static_cast<std::size_t>(features));
        std::vector<int> y(static_cast<std::size_t>(batchSize));
        std::vector<double> grad(static_cast<std::size_t>(parameters()));
        std::vector<double> p(static_cast<std::size_t>(classes));
        double lossSum = 0.0;
        qint64 done = 0;
        for (int pass = 0; pass < passes && done < steps; ++pass) {
            for (std::size_t at = 0; at < n && done < steps;) {
                const std::size_t b
                    = std::min<std::size_t>({ std::size_t(batchSize), n - at, std::size_t(steps - done) });
                for (std::size_t i = 0; i < b; ++i)
                    y[i] = trainingSample(samples[at + i], &x[i * std::size_t(features)]);
                std::fill(grad.begin(), grad.end(), 0.0);
                for (std::size_t i = 0; i < b; ++i) {
                    const float *xi = &x[i * std::size_t(features)];
                    const double lse = probabilities(w, xi, p);
                    lossSum += lse - p[std::size_t(y[i])];
                    for (int k = 0; k < classes; ++k) {
                        const double g = std::exp(p[std::size_t(k)] - lse) - (k == y[i] ? 1.0 : 0.0);
                        double *row = &grad[std::size_t(k) * std::size_t(features)];
                        for (int j = 0; j < features; ++j)
                            row[j] += g * xi[j];
                        grad[std::size_t(classes) * std::size_t(features) + std::size_t(k)] += g;
                    }
                }
                const double scale = learningRate / double(b);
                for (std::size_t i = 0; i < grad.size(); ++i)
                    w[i] -= float(scale * grad[i]);
                at += b;
                done += qint64(b);
            }
        }
        return done > 0 ? lossSum / double(done) : 0.0;
    }

    void evaluate(const float *w, double &loss, double &accuracy) const
    {
        std::vector<double> p(static_cast<std::size_t>(classes));
        double lossSum = 0.0;
        qint64 right = 0;
        const std::size_t count = testLabels.size();
        for (std::size_t i = 0; i < count; ++i) {
            const double lse = probabilities(w, &testFeatures[i * std::size_t(features)], p);
            lossSum += lse - p[std::size_t(testLabels[i])];
            const auto best = std::max_element(p.begin(), p.end()) - p.begin();
            right += best == testLabels[i] ? 1 : 0;
        }
        loss = count ? lossSum / double(count) : 0.0;
        accuracy = count ? double(right) / double(count) : 0.0;
    }
};

// ---------------------------------------------------------------------------------------
// The trace.

Result<std::vector<TraceEntry>> parsePreemptionTrace(const QByteArray &text, const QString &origin, int workers)
{
    std::vector<TraceEntry> entries;
    const QList<QByteArray> lines = text.split('\n');
    std::map<int, std::pair<qint64, int>> downUntil; // worker → (end of its last down interval, line)
    const auto seconds = [](const QByteArray &field, bool *ok) {
        const double v = field.trimmed().toDouble(ok);
        *ok = *ok && std::isfinite(v);
        return v;
    };
    for (int i = 0; i < lines.size(); ++i) {
        const int lineNo = i + 1;
        const QByteArray line = lines[i].trimmed();
        if (line.isEmpty() || line.startsWith('#'))
            continue;
        const QList<QByteArray> fields = line.split(',');
        const auto error
            = [&](const QString &what) { return fail(QStringLiteral("%1:%2: %3").arg(origin).arg(lineNo).arg(what)); };
        if (fields.size() != 3)
            return error(QStringLiteral("expected three fields 'worker,down,up', found %1").arg(fields.size()));
        if (fields[0].trimmed() == "worker" && entries.empty())
            continue; // the header
        bool ok = false;
        TraceEntry e;
        e.line = lineNo;
        e.worker = fields[0].trimmed().toInt(&ok);
        if (!ok)
            return error(
                QStringLiteral("the worker '%1' is not a whole number").arg(QString::fromUtf8(fields[0].trimmed())));
        if (e.worker < 0 || e.worker >= workers)
            return error(
                QStringLiteral("worker %1 is outside the fleet (workers 0 to %2)").arg(e.worker).arg(workers - 1));
        const double down = seconds(fields[1], &ok);
        if (!ok || down < 0)
            return error(QStringLiteral("the down time '%1' is not a number of seconds ≥ 0")
                             .arg(QString::fromUtf8(fields[1].trimmed())));
        e.downMs = qint64(std::llround(down * 1000.0));
        if (!fields[2].trimmed().isEmpty()) {
            const double up = seconds(fields[2], &ok);
            if (!ok)
                return error(QStringLiteral("the up time '%1' is not a number of seconds (leave it empty for a worker "
                                            "that never comes back)")
                                 .arg(QString::fromUtf8(fields[2].trimmed())));
            e.upMs = qint64(std::llround(up * 1000.0));
            if (e.upMs <= e.downMs)
                return error(QStringLiteral("worker %1 comes back up (%2 s) before it goes down (%3 s)")
                                 .arg(e.worker)
                                 .arg(up)
                                 .arg(down));
        }
        const auto previous = downUntil.find(e.worker);
        if (previous != downUntil.end() && (previous->second.first < 0 || e.downMs < previous->second.first))
            return error(QStringLiteral("worker %1 goes down at %2 s while it is still down from line %3")
                             .arg(e.worker)
                             .arg(down)
                             .arg(previous->second.second));
        downUntil[e.worker] = { e.upMs, lineNo };
        entries.push_back(e);
    }
    return entries;
}

Result<std::vector<TraceEntry>> loadPreemptionTrace(const QString &path, int workers)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read the trace '%1': %2").arg(path, file.errorString()));
    return parsePreemptionTrace(file.readAll(), path, workers);
}

// ---------------------------------------------------------------------------------------
// Configuration.

QStringList SimulationConfig::problems() const
{
    QStringList p;
    const auto need = [&](bool ok, const QString &what) {
        if (!ok)
            p << what;
    };
    need(workers >= 1 && workers <= 10'000'000, QStringLiteral("--workers must be between 1 and 10,000,000"));
    need(speed > 0 && std::isfinite(speed), QStringLiteral("--speed must be a positive number of samples per second"));
    need(speedSpread >= 1 && std::isfinite(speedSpread), QStringLiteral("--speed-spread must be ≥ 1"));
    need(preemptionsPerHour >= 0 && std::isfinite(preemptionsPerHour), QStringLiteral("--preemption-rate must be ≥ 0"));
    need(downtimeSeconds >= 0 && std::isfinite(downtimeSeconds), QStringLiteral("--downtime must be ≥ 0"));
    need(noticeSeconds >= 0 && std::isfinite(noticeSeconds), QStringLiteral("--notice must be ≥ 0"));
    need(latencySeconds >= 0 && std::isfinite(latencySeconds), QStringLiteral("--latency must be ≥ 0"));
    need(bandwidthBytesPerSecond > 0 && std::isfinite(bandwidthBytesPerSecond),
        QStringLiteral("--bandwidth must be positive"));
    need(weightsBytes >= 0, QStringLiteral("--weights-mb must be ≥ 0"));
    need(leaseTimeoutSeconds > 0, QStringLiteral("--lease-timeout must be positive"));
    need(targetSubtaskSeconds >= 0, QStringLiteral("--target-subtask must be ≥ 0"));
    need(heartbeatTimeoutSeconds >= 0, QStringLiteral("--heartbeat-timeout must be ≥ 0"));
    need(shards >= 1 && shards <= 50'000'000, QStringLiteral("--shards must be between 1 and 50,000,000"));
    need(shardSize >= 1, QStringLiteral("--shard-size must be ≥ 1"));
    need(qint64(shards) * shardSize <= 200'000'000,
        QStringLiteral("--shards × --shard-size must be at most 200,000,000 samples"));
    need(epochs >= 1 && epochs <= 10'000, QStringLiteral("--epochs must be between 1 and 10,000"));
    need(localEpochs >= 1, QStringLiteral("--local-epochs must be ≥ 1"));
    need(batchSize >= 1, QStringLiteral("--batch-size must be ≥ 1"));
    need(learningRate > 0 && std::isfinite(learningRate), QStringLiteral("--lr must be positive"));
    need(features >= 1 && features <= 4096, QStringLiteral("--features must be between 1 and 4096"));
    need(classes >= 2 && classes <= 1000, QStringLiteral("--classes must be between 2 and 1000"));
    need(separation >= 0 && std::isfinite(separation), QStringLiteral("--separation must be ≥ 0"));
    need(
        testSamples >= 1 && testSamples <= 1'000'000, QStringLiteral("--test-samples must be between 1 and 1,000,000"));
    need(epochsAhead >= 1 && epochsAhead <= 10'000, QStringLiteral("--epochs-ahead must be between 1 and 10,000"));
    need(buffer >= 0 && buffer <= kMaxBuffer,
        QStringLiteral("--buffer must be 'auto' or between 1 and %1 results").arg(kMaxBuffer));
    return p;
}

int SimulationConfig::effectiveBuffer() const
{
    if (buffer > 0)
        return buffer;
    // About √N results per version: an in-flight result sees some 0.6·N others assimilated
    // while it trains, so its staleness falls from ~0.6·N versions to ~0.6·√N, and each
    // version averages √N results.
    return std::max(1, int(std::ceil(std::sqrt(double(workers)))));
}

// ---------------------------------------------------------------------------------------
// The simulation.

namespace {

class SimulatedClock final : public Clock
{
public:
    qint64 nowMs() const override { return m_now; }
    void set(qint64 ms) { m_now = ms; }

private:
    qint64 m_now = 0;
};

enum class EventType { Up, Down, Notice, Arrive, Deadline, Heartbeat };

struct Event
{
    qint64 atMs;
    qint64 order; // ties are served in the order events were scheduled
    EventType type;
    int worker;
    quint32 generation;
    bool operator>(const Event &o) const { return atMs != o.atMs ? atMs > o.atMs : order > o.order; }
};

struct Worker
{
    double speed = 1.0; // samples per second
    SplitMix64 rng { 0 }; // this worker's preemptions, the same whatever the rule
    bool online = false;
    bool warned = false; // a notice came: no new work
    bool idle = false; // waiting in the idle queue
    bool dismissed = false; // left the fleet at the job's tail (dismissIdle)
    quint32 work = 0; // bumped when the result in flight is void (its Arrive event)
    quint32 life = 0; // bumped at each preemption (its Down, Notice, Heartbeat events)
    qint64 onlineSinceMs = 0;
    qint64 nextDownMs = -1; // Poisson: when the current online period ends

    // The subtask in flight.
    qint64 leaseId = 0;
    Subtask subtask;
    qint64 baseVersion = 0;
    torch::Tensor base;
    qint64 workStartMs = 0;
    qint64 computeStartMs = 0;
    qint64 computeEndMs = 0;
    qint64 covered = 0; // positions the result will cover
    qint64 sampleSteps = 0; // sample-steps it will have trained
    bool partial = false;
};

double exponential(SplitMix64 &g, double mean)
{
    return -mean * std::log(1.0 - g.uniform());
}

class Run
{
public:
    Run(const SimulationConfig &config, const ShardPlan &plan, const Simulator::Objective &objective,
        std::unique_ptr<AggregationRule> rule)
        : m_config(config)
        , m_plan(plan)
        , m_objective(objective)
        , m_core(assimilatorConfig(config, plan), std::move(rule), &m_clock)
        , m_scheduler(m_core.scheduler())
    {
        m_result.rule = m_core.rule().name();
        AggregationState initial;
        initial.weights = torch::zeros({ objective.parameters() }, torch::kFloat32);
        m_core.start(std::move(initial), 0, 0);
        const qint64 bytes = config.weightsBytes > 0 ? config.weightsBytes : qint64(objective.parameters()) * 4;
        m_transferMs
            = qint64(std::llround((config.latencySeconds + double(bytes) / config.bandwidthBytesPerSecond) * 1000.0));
        m_result.stalenessHistogram.assign(1, 0);
        m_covered.assign(std::size_t(config.epochs) * std::size_t(config.shards), 0);
        const qint64 expected = qint64(config.shards) * config.epochs;
        m_evaluateEvery = std::max<qint64>(1, expected / 100);
    }

    SimulationResult run()
    {
        startFleet();
        evaluate();
        sampleFleet(true);
        m_scheduler.openEpochs();
        for (int w = 0; w < m_config.workers; ++w)
            if (m_workers[std::size_t(w)].online)
                request(w);
        while (!m_scheduler.finished() && !m_events.empty()) {
            const Event e = m_events.top();
            m_events.pop();
            m_clock.set(e.atMs);
            handle(e);
            if (m_core.flushDue())
                folded(m_core.flush(true));
            serveIdle();
            sampleFleet(false);
        }
        finish();
        return std::move(m_result);
    }

private:
    static AssimilatorConfig assimilatorConfig(const SimulationConfig &c, const ShardPlan &plan)
    {
        AssimilatorConfig a;
        a.schedule.epochs = c.epochs;
        for (int i = 0; i < plan.numShards(); ++i)
            a.schedule.shardSizes.push_back(plan.shardSize(i));
        // finish() checks every epoch's tiling.
        a.schedule.keepDoneEpochs = true;
        a.targetSubtaskSeconds = c.targetSubtaskSeconds;
        a.leaseTimeoutSeconds = c.leaseTimeoutSeconds;
        a.batchSize = c.batchSize;
        a.localEpochs = c.localEpochs;
        a.schedule.epochsAhead = c.epochsAhead;
        a.buffer = c.effectiveBuffer();
        a.shareTail = c.shareTail;
        a.speculate = c.speculate;
        a.dismissIdle = c.dismissIdle;
        return a;
    }

    qint64 now() const { return m_clock.nowMs(); }

    void schedule(qint64 atMs, EventType type, int worker, quint32 generation = 0)
    {
        m_events.push(Event { atMs, m_order++, type, worker, generation });
    }

    void record(EventKind kind, int worker, qint64 lease = 0, qint64 subtask = 0, const QString &detail = {})
    {
        if (m_config.recordEvents)
            m_result.events.push_back(SimulationEvent { now(), kind, worker, lease, subtask, detail });
    }

    // --- the fleet --------------------------------------------------------------------

    void startFleet()
    {
        m_workers.resize(std::size_t(m_config.workers));
        const std::uint64_t fleetSeed = mixSeed(m_config.seed, 0xF1EE7);
        const double logSpread = std::log(m_config.speedSpread);
        std::vector<bool> downAtStart(std::size_t(m_config.workers), false);
        if (m_config.useTrace) {
            for (const auto &e : m_config.trace) {
                if (e.downMs == 0) {
                    downAtStart[std::size_t(e.worker)] = true;
                } else {
                    if (noticeMs() > 0)
                        schedule(std::max<qint64>(0, e.downMs - noticeMs()), EventType::Notice, e.worker);
                    schedule(e.downMs, EventType::Down, e.worker);
                }
                if (e.upMs >= 0)
                    schedule(e.upMs, EventType::Up, e.worker);
            }
        }
        for (int w = 0; w < m_config.workers; ++w) {
            Worker &worker = m_workers[std::size_t(w)];
            SplitMix64 g(mixSeed(fleetSeed, std::uint64_t(w)));
            worker.speed = m_config.speed * std::exp(logSpread * (2.0 * g.uniform() - 1.0));
            worker.rng = SplitMix64(g.next());
            if (!downAtStart[std::size_t(w)])
                comeUp(w, false);
        }
    }

    qint64 noticeMs() const { return qint64(std::llround(m_config.noticeSeconds * 1000.0)); }

    void comeUp(int w, bool rejoin)
    {
        Worker &worker = m_workers[std::size_t(w)];
        if (worker.online || worker.dismissed)
            return;
        worker.online = true;
        worker.warned = false;
        worker.onlineSinceMs = now();
        ++m_online;
        record(EventKind::WorkerUp, w);
        // A worker that comes back has restarted: the coordinator drops its old leases.
        if (rejoin)
            endLeases(m_scheduler.workerLost(w), EventKind::LeaseLost);
        if (!m_config.useTrace && m_config.preemptionsPerHour > 0) {
            const double gap = exponential(worker.rng, 3600.0 / m_config.preemptionsPerHour);
            worker.nextDownMs = now() + std::max<qint64>(1, qint64(std::llround(gap * 1000.0)));
            const qint64 warnAt = std::max(now(), worker.nextDownMs - noticeMs());
            if (noticeMs() > 0)
                schedule(warnAt, EventType::Notice, w, worker.life);
            schedule(worker.nextDownMs, EventType::Down, w, worker.life);
        }
    }

    // The job has nothing left for this worker: it leaves for good and is no longer paid.
    void dismiss(int w)
    {
        Worker &worker = m_workers[std::size_t(w)];
        worker.online = false;
        worker.idle = false;
        worker.dismissed = true;
        --m_online;
        m_result.onlineSeconds += double(now() - worker.onlineSinceMs) / 1000.0;
        ++m_result.dismissed;
        ++worker.life; // voids its pending Down and Notice events
        record(EventKind::WorkerDismissed, w);
    }

    void goDown(int w)
    {
        Worker &worker = m_workers[std::size_t(w)];
        if (!worker.online)
            return;
        ++m_result.preemptions;
        worker.online = false;
        worker.idle = false;
        --m_online;
        m_result.onlineSeconds += double(now() - worker.onlineSinceMs) / 1000.0;
        record(EventKind::WorkerDown, w, worker.leaseId);
        ++worker.life; // voids its pending Down and Notice events
        if (worker.leaseId) {
            // Whatever it was doing is lost; the coordinator learns of it only by silence.
            stopWork(worker, false, trainedSoFar(worker));
            ++worker.work;
            if (m_config.heartbeatTimeoutSeconds > 0)
                schedule(now() + qint64(std::llround(m_config.heartbeatTimeoutSeconds * 1000.0)), EventType::Heartbeat,
                    w, worker.life);
        }
        if (!m_config.useTrace && m_config.preemptionsPerHour > 0) {
            const double downtime = exponential(worker.rng, m_config.downtimeSeconds);
            schedule(now() + std::max<qint64>(1, qint64(std::llround(downtime * 1000.0))), EventType::Up, w);
        }
    }

    // The worker's subtask ends without an assimilation: its time is wasted.
    void stopWork(Worker &worker, bool useful, qint64 trained)
    {
        const double seconds = double(now() - worker.workStartMs) / 1000.0;
        m_result.busySeconds += seconds;
        (useful ? m_result.usefulSeconds : m_result.wastedSeconds) += seconds;
        m_result.sampleStepsTrained += trained;
        if (!useful)
            m_result.sampleStepsWasted += trained;
        worker.leaseId = 0;
        worker.base = torch::Tensor();
        --m_busy;
    }

    // --- the coordinator's side -------------------------------------------------------

    void request(int w)
    {
        Worker &worker = m_workers[std::size_t(w)];
        if (!worker.online || worker.warned || worker.leaseId || m_scheduler.finished())
            return;
        // The coordinator's lease policy, a speculative copy and dismissal at the tail included.
        Assimilator::Offer offer = m_core.offer(w, Assimilator::IdleConditions {});
        auto &grant = offer.grant;
        if (offer.speculative)
            ++m_result.speculativeCopies;
        if (offer.idle.dismiss) {
            dismiss(w);
            return;
        }
        if (!grant) {
            if (!worker.idle) {
                worker.idle = true;
                m_idle.push_back(w);
            }
            return;
        }
        worker.idle = false;
        ++m_result.leasesGranted;
        const Subtask &s = grant->subtask;
        if (s.attempts > 1) {
            ++m_result.reassignments;
            record(EventKind::SubtaskReassigned, w, grant->lease.id, s.id,
                QStringLiteral("attempt %1").arg(s.attempts));
        }
        record(EventKind::LeaseGranted, w, grant->lease.id, s.id,
            QStringLiteral("epoch %1, shard %2, positions %3-%4, version %5, deadline %6 s")
                .arg(s.epoch + 1)
                .arg(s.shard)
                .arg(s.begin)
                .arg(s.end)
                .arg(m_core.version())
                .arg(double(grant->lease.deadlineMs) / 1000.0));
        worker.leaseId = grant->lease.id;
        worker.subtask = s;
        worker.baseVersion = m_core.version();
        worker.base = m_core.snapshot();
        worker.partial = false;
        worker.covered = s.size();
        worker.sampleSteps = s.size() * m_config.localEpochs;
        worker.workStartMs = now();
        worker.computeStartMs = now() + m_transferMs;
        worker.computeEndMs = worker.computeStartMs
            + std::max<qint64>(1, qint64(std::llround(double(worker.sampleSteps) * 1000.0 / worker.speed)));
        ++m_busy;
        schedule(worker.computeEndMs + m_transferMs, EventType::Arrive, w, worker.work);
        schedule(grant->lease.deadlineMs, EventType::Deadline, w);
    }

    void serveIdle()
    {
        while (!m_idle.empty() && m_scheduler.queuedCount() > 0) {
            const int w = m_idle.front();
            m_idle.pop_front();
            Worker &worker = m_workers[std::size_t(w)];
            if (!worker.idle)
                continue;
            worker.idle = false;
            request(w);
        }
    }

    // Leases the scheduler ended (expired, lost, superseded): count them, stop workers whose
    // work became useless.
    void endLeases(const SchedulerChanges &changes, EventKind kind)
    {
        for (const Lease &l : changes.leases) {
            switch (l.state) {
            case LeaseState::Expired:
                ++m_result.leasesExpired;
                break;
            case LeaseState::Lost:
                ++m_result.leasesLost;
                break;
            case LeaseState::HandedBack:
                ++m_result.leasesHandedBack;
                break;
            case LeaseState::Superseded:
                ++m_result.leasesSuperseded;
                break;
            default:
                continue;
            }
            record(l.state == LeaseState::Superseded ? EventKind::LeaseSuperseded : kind, int(l.workerId), l.id,
                l.subtaskId);
            // A superseded worker is told to stop; an expired one may still deliver late.
            Worker &holder = m_workers[std::size_t(l.workerId)];
            if (l.state == LeaseState::Superseded && holder.leaseId == l.id && holder.online) {
                stopWork(holder, false, trainedSoFar(holder));
                ++holder.work;
                request(int(l.workerId));
            }
        }
    }

    qint64 trainedSoFar(const Worker &worker) const
    {
        const qint64 elapsed = std::clamp(now(), worker.computeStartMs, worker.computeEndMs) - worker.computeStartMs;
        return std::min(worker.sampleSteps, qint64(double(elapsed) / 1000.0 * worker.speed));
    }

    void notice(int w)
    {
        Worker &worker = m_workers[std::size_t(w)];
        if (!worker.online)
            return;
        worker.warned = true;
        worker.idle = false;
        record(EventKind::PreemptionNotice, w, worker.leaseId);
        if (!worker.leaseId || now() >= worker.computeEndMs)
            return; // idle, or the result is on its way already
        const qint64 downMs = m_config.useTrace ? traceDownAfter(w) : worker.nextDownMs;
        const qint64 trained = trainedSoFar(worker);
        const qint64 arrival = now() + m_transferMs;
        if (trained <= 0 || (downMs >= 0 && arrival > downMs)) {
            // Nothing to send, or no time to send it: the subtask goes back to the queue.
            const qint64 lease = worker.leaseId;
            stopWork(worker, false, trained);
            ++worker.work;
            endLeases(m_scheduler.handBack(lease), EventKind::LeaseHandedBack);
            return;
        }
        // The trainer's first pass visits the positions in order, so k sample-steps cover
        // the first min(k, size) positions.
        worker.partial = true;
        worker.sampleSteps = trained;
        worker.covered = std::min(trained, worker.subtask.size());
        worker.computeEndMs = now();
        ++worker.work;
        schedule(arrival, EventType::Arrive, w, worker.work);
    }

    qint64 traceDownAfter(int w) const
    {
        qint64 best = -1;
        for (const auto &e : m_config.trace)
            if (e.worker == w && e.downMs >= now() && (best < 0 || e.downMs < best))
                best = e.downMs;
        return best;
    }

    void arrive(int w)
    {
        Worker &worker = m_workers[std::size_t(w)];
        const qint64 leaseId = worker.leaseId;
        const Scheduler::Check check = m_scheduler.check(leaseId);
        if (check.verdict != Scheduler::Verdict::Accept) {
            ++m_result.duplicates;
            record(EventKind::ResultDuplicate, w, leaseId, worker.subtask.id, check.reason);
            stopWork(worker, false, worker.sampleSteps);
            request(w);
            return;
        }
        const Subtask &s = check.subtask;
        const Assimilator::Admission admission = m_core.admit(s, worker.sampleSteps, worker.covered);
        if (!admission.duplicate.isEmpty()) {
            ++m_result.duplicates;
            record(EventKind::ResultDuplicate, w, leaseId, s.id, admission.duplicate);
            stopWork(worker, false, worker.sampleSteps);
            endLeases(m_scheduler.drop(leaseId, LeaseState::Lost), EventKind::LeaseLost);
            request(w);
            return;
        }
        const qint64 covered = admission.covered;

        // Train from the weights the subtask started from, on the positions it covers (past
        // its end, when it was split after this lease ended and those positions were owed).
        const std::vector<std::int64_t> order = m_plan.epochOrder(s.shard, s.epoch);
        const std::vector<std::int64_t> samples(order.begin() + s.begin, order.begin() + s.begin + std::max(covered, s.size()));
        torch::Tensor result = worker.base.clone();
        m_objective.train(result.data_ptr<float>(), samples, m_config.localEpochs, worker.sampleSteps,
            m_config.batchSize, m_config.learningRate);

        // The objective is convex and bounded: a fold cannot overflow, but if one did it is
        // undone (the model is small) and the result dropped.
        const FoldOutcome f = m_core.fold(check.lease, s, admission, result,
            m_core.rule().needsBase() ? worker.base : torch::Tensor(), std::numeric_limits<double>::quiet_NaN(), true);
        if (!f.folded && !f.buffered) {
            record(EventKind::ResultRejected, w, leaseId, s.id, f.refusal);
            stopWork(worker, false, worker.sampleSteps);
            endLeases(m_scheduler.drop(leaseId, LeaseState::Lost), EventKind::LeaseLost);
            request(w);
            return;
        }
        if (worker.partial)
            m_partialLeases.insert(leaseId);
        if (check.late)
            m_lateLeases.insert(leaseId);
        const double computeSeconds = double(worker.computeEndMs - worker.computeStartMs) / 1000.0;
        m_core.measureSpeed(w, worker.sampleSteps, computeSeconds);
        stopWork(worker, true, worker.sampleSteps);
        folded(f);
        if (worker.warned)
            return;
        request(w);
    }

    // The results a fold assimilated (one, or a buffer's), and the leases it ended.
    void folded(const FoldOutcome &f)
    {
        for (const FoldedResult &r : f.refused)
            record(EventKind::ResultRejected, int(r.workerId), r.leaseId, r.subtask.id, f.refusal);
        for (const FoldedResult &r : f.results) {
            const Subtask &s = r.subtask;
            const bool partial = m_partialLeases.erase(r.leaseId) > 0 || r.covered < s.size();
            const bool late = m_lateLeases.erase(r.leaseId) > 0;
            ++m_result.assimilations;
            m_result.staleness.push_back(r.staleness);
            int bucket = 0;
            for (qint64 v = r.staleness; v > 0; v >>= 1)
                ++bucket;
            if (std::size_t(bucket) >= m_result.stalenessHistogram.size())
                m_result.stalenessHistogram.resize(std::size_t(bucket) + 1, 0);
            ++m_result.stalenessHistogram[std::size_t(bucket)];
            m_result.positionsAssimilated += r.covered;
            m_result.creditSum += r.credit;
            m_covered[std::size_t(s.epoch) * std::size_t(m_config.shards) + std::size_t(s.shard)] += r.covered;
            if (partial)
                ++m_result.partialResults;
            record(partial ? EventKind::ResultPartial : EventKind::ResultAssimilated, int(r.workerId), r.leaseId, s.id,
                QStringLiteral("seq %1, version %2, staleness %3, credit %4, positions %5-%6%7")
                    .arg(r.seq)
                    .arg(f.version)
                    .arg(r.staleness)
                    .arg(r.credit, 0, 'f', 3)
                    .arg(s.begin)
                    .arg(s.begin + r.covered)
                    .arg(late ? QStringLiteral(" (late)") : QString()));
        }
        endLeases(f.changes, EventKind::LeaseSuperseded);
        if (f.results.empty())
            return;
        if (f.epochClosed) {
            while (int(m_result.epochEndMs.size()) < m_scheduler.epochsDone()) {
                m_result.epochEndMs.push_back(now());
                record(EventKind::EpochCompleted, -1, 0, 0,
                    QStringLiteral("epoch %1 at version %2").arg(m_result.epochEndMs.size()).arg(f.version));
            }
            evaluate();
        } else if (m_result.assimilations / m_evaluateEvery
            > (m_result.assimilations - qint64(f.results.size())) / m_evaluateEvery) {
            evaluate();
        }
    }

    void handle(const Event &e)
    {
        Worker &worker = m_workers[std::size_t(e.worker)];
        switch (e.type) {
        case EventType::Up:
            comeUp(e.worker, true);
            if (worker.online)
                request(e.worker);
            return;
        case EventType::Down:
            if (!m_config.useTrace && e.generation != worker.life)
                return;
            goDown(e.worker);
            return;
        case EventType::Notice:
            if (!m_config.useTrace && e.generation != worker.life)
                return;
            notice(e.worker);
            return;
        case EventType::Arrive:
            if (e.generation == worker.work && worker.online && worker.leaseId)
                arrive(e.worker);
            return;
        case EventType::Deadline:
            endLeases(m_scheduler.expire(), EventKind::LeaseExpired);
            return;
        case EventType::Heartbeat:
            if (!worker.online && e.generation == worker.life)
                endLeases(m_scheduler.workerLost(e.worker), EventKind::LeaseLost);
            return;
        }
    }

    void evaluate()
    {
        SimulationResult::Evaluation ev;
        ev.atMs = now();
        ev.version = m_core.version();
        m_objective.evaluate(m_core.state().weights.data_ptr<float>(), ev.loss, ev.accuracy);
        if (!m_result.evaluations.empty() && m_result.evaluations.back().atMs == ev.atMs)
            m_result.evaluations.back() = ev;
        else
            m_result.evaluations.push_back(ev);
    }

    void sampleFleet(bool force)
    {
        if (!force && !m_result.fleet.empty() && now() < m_result.fleet.back().atMs + 1000)
            return;
        m_result.fleet.push_back({ now(), m_online, m_busy });
    }

    void finish()
    {
        m_result.finished = m_scheduler.finished();
        m_result.simulatedMs = now();
        if (!m_result.finished)
            m_result.stopReason = m_online == 0 ? QStringLiteral("every worker is gone for good")
                                                : QStringLiteral("no worker can make progress");
        for (int w = 0; w < m_config.workers; ++w) {
            const Worker &worker = m_workers[std::size_t(w)];
            if (worker.online)
                m_result.onlineSeconds += double(now() - worker.onlineSinceMs) / 1000.0;
            if (worker.leaseId) {
                // Work in flight when the job finished was not needed any more.
                const double seconds = double(now() - worker.workStartMs) / 1000.0;
                m_result.busySeconds += seconds;
                m_result.wastedSeconds += seconds;
            }
        }
        if (m_result.evaluations.empty() || m_result.evaluations.back().atMs != now()
            || m_result.evaluations.back().version != m_core.version())
            evaluate();
        m_result.fleet.push_back({ now(), m_online, m_busy });
        m_result.versions = m_core.version();
        m_result.costSpot = m_result.onlineSeconds * m_config.rates.spotPerSecond;
        m_result.costOnDemand = m_result.onlineSeconds * m_config.rates.onDemandPerSecond;

        // Exactly once: the scheduler's own tiling check, and the positions assimilated per
        // shard and epoch counted here.
        m_result.integrityError = m_scheduler.checkIntegrity();
        if (m_result.integrityError.isEmpty() && m_result.finished) {
            for (int e = 0; e < m_config.epochs && m_result.integrityError.isEmpty(); ++e)
                for (int s = 0; s < m_config.shards; ++s) {
                    const qint64 got = m_covered[std::size_t(e) * std::size_t(m_config.shards) + std::size_t(s)];
                    if (got != m_plan.shardSize(s)) {
                        m_result.integrityError
                            = QStringLiteral("epoch %1, shard %2: %3 positions assimilated, the shard has %4")
                                  .arg(e + 1)
                                  .arg(s)
                                  .arg(got)
                                  .arg(m_plan.shardSize(s));
                        break;
                    }
                }
        }
        m_result.exactlyOnce = m_result.finished && m_result.integrityError.isEmpty();
    }

    const SimulationConfig &m_config;
    const ShardPlan &m_plan;
    const Simulator::Objective &m_objective;
    SimulatedClock m_clock;
    Assimilator m_core;
    Scheduler &m_scheduler; // the core's
    qint64 m_transferMs = 0;
    qint64 m_evaluateEvery = 1;
    qint64 m_order = 0;
    int m_online = 0;
    int m_busy = 0;
    std::vector<Worker> m_workers;
    std::deque<int> m_idle;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> m_events;
    std::vector<qint64> m_covered; // positions assimilated per (epoch, shard)
    std::set<qint64> m_partialLeases, m_lateLeases; // buffered results' kinds, until their fold
    SimulationResult m_result;
};

} // namespace

qint64 SimulationResult::stalenessPercentile(double p) const
{
    if (staleness.empty())
        return 0;
    std::vector<qint64> sorted = staleness;
    const std::size_t rank = std::size_t(std::max(1.0, std::ceil(p / 100.0 * double(sorted.size()))));
    const std::size_t at = std::min(sorted.size(), rank) - 1;
    std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(at), sorted.end());
    return sorted[at];
}

Simulator::Simulator(SimulationConfig config) : m_config(std::move(config))
{ }

Simulator::~Simulator() = default;

Result<std::unique_ptr<Simulator>> Simulator::create(SimulationConfig config)
{
    if (const QStringList problems = config.problems(); !problems.isEmpty())
        return fail(problems.join(QStringLiteral("; ")));
    std::unique_ptr<Simulator> sim(new Simulator(std::move(config)));
    const SimulationConfig &c = sim->m_config;
    sim->m_plan = ShardPlan(qint64(c.shards) * c.shardSize, c.shards, mixSeed(c.seed, 0x5AAD));
    sim->m_objective = std::make_unique<Objective>(c, mixSeed(c.seed, 0xDA7A));
    return sim;
}

Result<SimulationResult> Simulator::run(const QString &rule) const
{
    AggregationSpec spec = m_config.aggregation;
    spec.rule = rule;
    auto created = createAggregationRule(spec);
    if (!created)
        return created.takeError();
    try {
        Run run(m_config, m_plan, *m_objective, std::move(created).value());
        return run.run();
    } catch (const c10::Error &e) {
        return fail(
            QStringLiteral("the simulation of %1 failed: %2").arg(rule, QString::fromUtf8(e.what_without_backtrace())));
    }
}

} // namespace flotilla
