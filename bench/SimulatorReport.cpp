// The simulator's reports: the text table and the JSON of a comparison of rules.
#include "bench/Simulator.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QTextStream>

#include <algorithm>
#include <cmath>

namespace flotilla {

QString stalenessBucketLabel(int bucket)
{
    if (bucket == 0)
        return QStringLiteral("0");
    if (bucket == 1)
        return QStringLiteral("1");
    const qint64 low = qint64(1) << (bucket - 1);
    return QStringLiteral("%1-%2").arg(low).arg(2 * low - 1);
}

namespace {

QString fixed(double v, int decimals)
{
    return QString::number(v, 'f', decimals);
}

double meanEpochSeconds(const SimulationResult &r)
{
    return r.epochEndMs.empty() ? 0.0 : double(r.epochEndMs.back()) / 1000.0 / double(r.epochEndMs.size());
}

double wastedShare(const SimulationResult &r)
{
    return r.busySeconds > 0 ? r.wastedSeconds / r.busySeconds : 0.0;
}

} // namespace

QString simulationReport(const SimulationConfig &c, const std::vector<SimulationResult> &results)
{
    QString text;
    QTextStream out(&text);
    const qint64 bytes = c.weightsBytes > 0 ? c.weightsBytes : c.modelParameters() * 4;
    const double transfer = c.latencySeconds + double(bytes) / c.bandwidthBytesPerSecond;
    out << "Fleet simulation, seed " << c.seed << "\n";
    out << "  fleet:    " << c.workers << " workers, median speed " << c.speed << " samples/s (spread x"
        << c.speedSpread << "), ";
    if (c.useTrace)
        out << "preemptions from a trace of " << c.trace.size() << " entries";
    else
        out << c.preemptionsPerHour << " preemptions per worker-hour, " << c.downtimeSeconds << " s mean downtime";
    out << ", notice " << c.noticeSeconds << " s\n";
    out << "  network:  latency " << c.latencySeconds * 1000.0 << " ms, " << c.bandwidthBytesPerSecond / 1e6
        << " MB/s, " << fixed(double(bytes) / 1e6, 3) << " MB of weights each way (" << fixed(transfer, 3)
        << " s per transfer)\n";
    out << "  leases:   timeout " << c.leaseTimeoutSeconds << " s, target subtask " << c.targetSubtaskSeconds
        << " s, heartbeat timeout " << c.heartbeatTimeoutSeconds << " s\n";
    out << "  policy:   aggregation buffer " << c.effectiveBuffer() << (c.buffer == 0 ? " (auto)" : "")
        << " result(s) per version, " << c.epochsAhead << " epoch(s) ahead, share tail "
        << (c.shareTail ? "on" : "off") << ", speculation " << (c.speculate ? "on" : "off") << ", dismiss idle "
        << (c.dismissIdle ? "on" : "off") << "\n";
    out << "  job:      " << c.shards << " shards x " << c.shardSize << " samples, " << c.epochs << " epochs, "
        << c.localEpochs << " local epoch(s), batch " << c.batchSize << ", lr " << c.learningRate << "\n";
    out << "  model:    softmax regression, " << c.features << " features x " << c.classes << " classes ("
        << c.modelParameters() << " parameters), " << c.testSamples << " test samples\n";
    out << "  prices:   " << c.instanceType << ", spot $" << fixed(c.rates.spotPerSecond * 3600.0, 4)
        << "/h, on-demand $" << fixed(c.rates.onDemandPerSecond * 3600.0, 4) << "/h\n\n";

    const QStringList header { QStringLiteral("rule"), QStringLiteral("done"), QStringLiteral("time s"),
        QStringLiteral("s/epoch"), QStringLiteral("stale p50"), QStringLiteral("p90"), QStringLiteral("p99"),
        QStringLiteral("max"), QStringLiteral("busy"), QStringLiteral("wasted"), QStringLiteral("spot $"), QStringLiteral("on-dem. $"),
        QStringLiteral("loss"), QStringLiteral("accuracy") };
    std::vector<QStringList> rows { header };
    for (const auto &r : results)
        rows.push_back({ r.rule, r.exactlyOnce ? QStringLiteral("yes") : QStringLiteral("NO"),
            fixed(double(r.simulatedMs) / 1000.0, 1), fixed(meanEpochSeconds(r), 1),
            QString::number(r.stalenessPercentile(50)), QString::number(r.stalenessPercentile(90)),
            QString::number(r.stalenessPercentile(99)), QString::number(r.stalenessPercentile(100)),
            fixed(100.0 * r.busyShare(), 1) + u'%', fixed(100.0 * wastedShare(r), 1) + u'%', fixed(r.costSpot, 4), fixed(r.costOnDemand, 4),
            fixed(r.finalLoss(), 4), fixed(100.0 * r.finalAccuracy(), 2) + u'%' });
    std::vector<int> width(header.size(), 0);
    for (const auto &row : rows)
        for (int i = 0; i < row.size(); ++i)
            width[std::size_t(i)] = std::max(width[std::size_t(i)], int(row[i].size()));
    for (const auto &row : rows) {
        for (int i = 0; i < row.size(); ++i) {
            if (i > 0)
                out << "  ";
            out << (i == 0 ? row[i].leftJustified(width[std::size_t(i)])
                           : row[i].rightJustified(width[std::size_t(i)]));
        }
        out << '\n';
    }

    for (const auto &r : results) {
        out << "\n" << r.rule << ":\n";
        if (!r.finished)
            out << "  UNFINISHED after " << fixed(double(r.simulatedMs) / 1000.0, 1) << " s: " << r.stopReason << "\n";
        if (!r.integrityError.isEmpty())
            out << "  INTEGRITY: " << r.integrityError << "\n";
        out << "  epochs end at (s):";
        for (const qint64 ms : r.epochEndMs)
            out << ' ' << fixed(double(ms) / 1000.0, 1);
        out << "\n  assimilations " << r.assimilations << ", versions " << r.versions << ", partial results "
            << r.partialResults << ", samples assimilated " << r.positionsAssimilated << ", credit "
            << fixed(r.creditSum, 3) << "\n";
        out << "  leases: granted " << r.leasesGranted << ", expired " << r.leasesExpired << ", lost " << r.leasesLost
            << ", handed back " << r.leasesHandedBack << ", superseded " << r.leasesSuperseded << ", reassignments "
            << r.reassignments << ", duplicates " << r.duplicates << ", speculative copies " << r.speculativeCopies
            << "; preemptions " << r.preemptions << "\n";
        out << "  worker-hours: online " << fixed(r.onlineSeconds / 3600.0, 3) << ", busy "
            << fixed(r.busySeconds / 3600.0, 3) << " (" << fixed(100.0 * r.busyShare(), 1) << "% of online), wasted " << fixed(r.wastedSeconds / 3600.0, 3) << " ("
            << fixed(100.0 * wastedShare(r), 1) << "% of busy), sample-steps wasted " << r.sampleStepsWasted << " of "
            << r.sampleStepsTrained << ", workers dismissed at the tail " << r.dismissed << "\n";
        out << "  staleness histogram:";
        for (std::size_t b = 0; b < r.stalenessHistogram.size(); ++b)
            if (r.stalenessHistogram[b] > 0)
                out << ' ' << stalenessBucketLabel(int(b)) << ':' << r.stalenessHistogram[b];
        out << "\n";
    }
    out.flush();
    return text;
}

QJsonObject simulationJson(const SimulationConfig &c, const std::vector<SimulationResult> &results)
{
    QJsonObject config {
        { QStringLiteral("seed"), QString::number(c.seed) },
        { QStringLiteral("workers"), c.workers },
        { QStringLiteral("speed"), c.speed },
        { QStringLiteral("speed_spread"), c.speedSpread },
        { QStringLiteral("preemptions_per_hour"), c.useTrace ? QJsonValue() : QJsonValue(c.preemptionsPerHour) },
        { QStringLiteral("downtime_s"), c.downtimeSeconds },
        { QStringLiteral("trace_entries"), c.useTrace ? qint64(c.trace.size()) : 0 },
        { QStringLiteral("notice_s"), c.noticeSeconds },
        { QStringLiteral("latency_s"), c.latencySeconds },
        { QStringLiteral("bandwidth_bytes_per_s"), c.bandwidthBytesPerSecond },
        { QStringLiteral("weights_bytes"), c.weightsBytes > 0 ? c.weightsBytes : c.modelParameters() * 4 },
        { QStringLiteral("lease_timeout_s"), c.leaseTimeoutSeconds },
        { QStringLiteral("target_subtask_s"), c.targetSubtaskSeconds },
        { QStringLiteral("heartbeat_timeout_s"), c.heartbeatTimeoutSeconds },
        { QStringLiteral("buffer"), c.effectiveBuffer() },
        { QStringLiteral("epochs_ahead"), c.epochsAhead },
        { QStringLiteral("share_tail"), c.shareTail },
        { QStringLiteral("speculate"), c.speculate },
        { QStringLiteral("dismiss_idle"), c.dismissIdle },
        { QStringLiteral("shards"), c.shards },
        { QStringLiteral("shard_size"), c.shardSize },
        { QStringLiteral("samples"), qint64(c.shards) * c.shardSize },
        { QStringLiteral("epochs"), c.epochs },
        { QStringLiteral("local_epochs"), c.localEpochs },
        { QStringLiteral("batch_size"), c.batchSize },
        { QStringLiteral("learning_rate"), c.learningRate },
        { QStringLiteral("features"), c.features },
        { QStringLiteral("classes"), c.classes },
        { QStringLiteral("parameters"), c.modelParameters() },
        { QStringLiteral("test_samples"), c.testSamples },
        { QStringLiteral("instance_type"), c.instanceType },
        { QStringLiteral("spot_per_hour"), c.rates.spotPerSecond * 3600.0 },
        { QStringLiteral("on_demand_per_hour"), c.rates.onDemandPerSecond * 3600.0 },
    };
    QJsonArray runs;
    for (const auto &r : results) {
        QJsonArray epochs;
        for (const qint64 ms : r.epochEndMs)
            epochs.append(double(ms) / 1000.0);
        QJsonArray histogram;
        for (std::size_t b = 0; b < r.stalenessHistogram.size(); ++b)
            histogram.append(QJsonObject { { QStringLiteral("bucket"), stalenessBucketLabel(int(b)) },
                { QStringLiteral("count"), r.stalenessHistogram[b] } });
        QJsonArray curve;
        for (const auto &e : r.evaluations)
            curve.append(QJsonObject { { QStringLiteral("t_s"), double(e.atMs) / 1000.0 },
                { QStringLiteral("version"), e.version }, { QStringLiteral("loss"), e.loss },
                { QStringLiteral("accuracy"), e.accuracy } });
        QJsonArray fleet;
        const std::size_t stride = std::max<std::size_t>(1, r.fleet.size() / 400);
        for (std::size_t i = 0; i < r.fleet.size(); i += stride)
            fleet.append(QJsonArray { double(r.fleet[i].atMs) / 1000.0, r.fleet[i].online, r.fleet[i].busy });
        if (!r.fleet.empty() && (r.fleet.size() - 1) % stride != 0)
            fleet.append(
                QJsonArray { double(r.fleet.back().atMs) / 1000.0, r.fleet.back().online, r.fleet.back().busy });
        double mean = 0.0;
        for (const qint64 s : r.staleness)
            mean += double(s);
        mean = r.staleness.empty() ? 0.0 : mean / double(r.staleness.size());
        runs.append(QJsonObject {
            { QStringLiteral("rule"), r.rule },
            { QStringLiteral("finished"), r.finished },
            { QStringLiteral("stop_reason"), r.stopReason },
            { QStringLiteral("exactly_once"), r.exactlyOnce },
            { QStringLiteral("integrity_error"), r.integrityError },
            { QStringLiteral("simulated_s"), double(r.simulatedMs) / 1000.0 },
            { QStringLiteral("epoch_end_s"), epochs },
            { QStringLiteral("mean_epoch_s"), meanEpochSeconds(r) },
            { QStringLiteral("assimilations"), r.assimilations },
            { QStringLiteral("versions"), r.versions },
            { QStringLiteral("partial_results"), r.partialResults },
            { QStringLiteral("samples_assimilated"), r.positionsAssimilated },
            { QStringLiteral("credit_sum"), r.creditSum },
            { QStringLiteral("staleness"),
                QJsonObject { { QStringLiteral("mean"), mean }, { QStringLiteral("p50"), r.stalenessPercentile(50) },
                    { QStringLiteral("p90"), r.stalenessPercentile(90) },
                    { QStringLiteral("p99"), r.stalenessPercentile(99) },
                    { QStringLiteral("max"), r.stalenessPercentile(100) },
                    { QStringLiteral("histogram"), histogram } } },
            { QStringLiteral("leases"),
                QJsonObject { { QStringLiteral("granted"), r.leasesGranted },
                    { QStringLiteral("expired"), r.leasesExpired }, { QStringLiteral("lost"), r.leasesLost },
                    { QStringLiteral("handed_back"), r.leasesHandedBack },
                    { QStringLiteral("superseded"), r.leasesSuperseded },
                    { QStringLiteral("reassignments"), r.reassignments },
                    { QStringLiteral("duplicates"), r.duplicates } } },
            { QStringLiteral("preemptions"), r.preemptions },
            { QStringLiteral("online_s"), r.onlineSeconds },
            { QStringLiteral("busy_s"), r.busySeconds },
            { QStringLiteral("useful_s"), r.usefulSeconds },
            { QStringLiteral("wasted_s"), r.wastedSeconds },
            { QStringLiteral("wasted_share"), wastedShare(r) },
            { QStringLiteral("busy_share"), r.busyShare() },
            { QStringLiteral("speculative_copies"), r.speculativeCopies },
            { QStringLiteral("dismissed"), r.dismissed },
            { QStringLiteral("sample_steps_trained"), r.sampleStepsTrained },
            { QStringLiteral("sample_steps_wasted"), r.sampleStepsWasted },
            { QStringLiteral("cost_spot"), r.costSpot },
            { QStringLiteral("cost_on_demand"), r.costOnDemand },
            { QStringLiteral("final_loss"), r.finalLoss() },
            { QStringLiteral("final_accuracy"), r.finalAccuracy() },
            { QStringLiteral("evaluations"), curve },
            { QStringLiteral("fleet"), fleet },
        });
    }
    return QJsonObject { { QStringLiteral("config"), config }, { QStringLiteral("runs"), runs } };
}

} // namespace flotilla
