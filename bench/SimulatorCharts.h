#pragma once
// Charts of a fleet simulation, written as PNG files: the staleness histogram per rule, test
// loss and accuracy against simulated time per rule, and workers online and busy. Runs on the
// main thread of a QApplication (the offscreen platform is enough).

#include "bench/BenchScaling.h"
#include "bench/Simulator.h"
#include "common/Result.h"

#include <QStringList>

#include <vector>

namespace flotilla {

// Writes the charts into dir (created if missing) as <prefix>staleness.png, <prefix>loss.png,
// <prefix>accuracy.png and <prefix>fleet.png; returns the files written.
Result<QStringList> writeSimulationCharts(const SimulationConfig &config, const std::vector<SimulationResult> &results,
    const QString &dir, const QString &prefix = {});

// `flotilla bench scaling --plot`: speedup against the machines, one line per contender and
// job, with the ideal y = W dashed (setSpeedupChartWriter registers it).
Result<void> writeSpeedupChart(const std::vector<SpeedupSeries> &series, const QString &title, const QString &path);

} // namespace flotilla
