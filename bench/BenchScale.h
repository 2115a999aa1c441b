#pragma once
// `flotilla bench scale`: how many workers one coordinator holds. It starts an unmodified
// `flotilla serve` on loopback and K simulated workers that enroll with a join token,
// connect over mutual TLS 1.3 and behave like real workers on the wire (heartbeats,
// requests, results of the model's exact shape) without training; then it reports
// assimilations per second, round-trip times, and the coordinator's CPU, peak memory and
// dropped connections. docs/benchmarks-scale.md explains each figure.
//
// Threads: runBenchScale() runs on the calling (main) thread, which starts the coordinator
// and reads its /proc entries; the simulated workers live on load threads of their own,
// each with its own event loop, and share only atomics with the main thread until they stop.

#include <QStringList>

namespace flotilla {

// arguments[0] is the benchmark's name ("scale"); the rest are its options (--help).
int runBenchScale(const QStringList &arguments);

} // namespace flotilla
