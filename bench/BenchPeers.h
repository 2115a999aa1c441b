#pragma once
// `flotilla bench trainer|aggregation|accuracy|bare-loop`, run with the bench command's
// parsed options (see BenchCommand.cpp).

#include <QCommandLineParser>

namespace flotilla {

int benchTrainerPeers(const QCommandLineParser &parser);
int benchAggregationPeers(const QCommandLineParser &parser);
int benchAccuracyPeers(const QCommandLineParser &parser);
// The single-process LibTorch loop of `accuracy`, as a process of its own: one JSON line per epoch.
int benchBareLoop(const QCommandLineParser &parser);

} // namespace flotilla
