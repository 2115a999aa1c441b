#pragma once
// `flotilla bench scaling`: more machines, sooner? A fleet of W machines emulated on one box,
// each a cgroup with a CPU quota (CpuQuota): Flotilla's coordinator on a machine of its own
// (its evaluation thread on another: the loop's and DDP's evaluations are off their clocks)
// and each `flotilla worker` on one, the plain loop on one machine, PyTorch DDP's W ranks each
// on one. For every job of the parity suite and every W it measures the time and the epochs to
// a target accuracy, the speedup S_W = T_loop / T_W, the parallel efficiency S_W / W, and that
// efficiency split into a statistical part (the loop's epochs to the target over W's) and a
// hardware part (the rest: throughput). Medians over repeats; a CSV of every run, and a PNG of
// speedup against W with the ideal line where the build draws charts.
//
// Options make the fleet heterogeneous (one machine slower), preemptible (a worker SIGKILLed
// every so many seconds) or far apart (each worker's connection through the link shaper).

#include "common/Result.h"
#include "job/Records.h"

#include <QString>
#include <QStringList>

#include <functional>
#include <vector>

namespace flotilla {

int runBenchScaling(const QStringList &arguments);

// How a fleet run's workers spent their time, read from its store's events up to `untilMs`:
// from each lease's grant to the worker's result (training, and the weights' transfers both
// ways), and from that result to the worker's next grant (waiting: for the round's last
// result, the fold and checkpoint, the coordinator's turn on its machine). A grant whose
// lease ends without a result (lost, handed back) starts no wait. Where the hardware part of
// a fleet's efficiency goes.
struct WorkerTimeSplit
{
    double trainingSeconds = 0.0;
    double waitingSeconds = 0.0;
    double waitingShare() const
    {
        const double total = trainingSeconds + waitingSeconds;
        return total > 0 ? waitingSeconds / total : -1.0;
    }
};
WorkerTimeSplit splitWorkerTime(std::vector<EventRecord> events, qint64 untilMs);

// One line of the plot: a contender on a job, its median speedup at each W.
struct SpeedupSeries
{
    QString name;
    std::vector<std::pair<int, double>> points; // (W, speedup); a W that never reached the target is left out
    int largestFleet = 1; // the largest W asked for: the axis and the ideal line reach it, reached or not
};
// Draws speedup against W (with the ideal line y = W) as a PNG. Charts need Qt Widgets, which
// flotilla-headless does not link: the desktop executable registers a writer at start.
using SpeedupChartWriter =
    std::function<Result<void>(const std::vector<SpeedupSeries> &series, const QString &title, const QString &path)>;
void setSpeedupChartWriter(SpeedupChartWriter writer);

} // namespace flotilla
