#pragma once
// `flotilla demo --fleet`: a fleet service on this machine with a queue of jobs from several
// submitters and worker processes that stay connected from job to job, while SIGKILLs hit the
// service and the workers at random, each started again a moment later. At the end it checks
// what a lab would check: every job finished in the queue (none failed, none left running),
// every shard of every epoch assimilated exactly once, no honest worker quarantined or closed
// for going over a budget, and every SQLite file intact. It prints one line per job and exits
// 0 only when every check passed.
//
// Threads: the main thread's event loop drives the processes and reads the queue.

#include "common/Random.h"
#include "job/JobSpec.h"

#include <QCommandLineParser>

namespace flotilla {

// The Requests a worker sent, read from its log's "asking for work" lines (a worker started
// with QT_LOGGING_RULES=flotilla.agent.debug=true logs each with its time).
struct RequestTally
{
    int peakPerSecond = 0; // the most in any one second
    int total = 0;
};
RequestTally tallyRequests(const QString &log);
// The most Requests an honest worker's pacer lets it send in any one second: 20 in a burst,
// then 10 a second (agent/RequestPacer.h).
constexpr int kHonestRequestPeak = 30;

// Milliseconds to the next SIGKILL of a chaos run: exactly `seconds` when fixed, else an
// exponential gap of that mean (a Poisson process of kills).
int chaosGapMs(double seconds, bool fixed, SplitMix64 &random);

// The --fleet options of `flotilla demo` (the job options and --chaos-mean are demo's own).
void addFleetChaosOptions(QCommandLineParser &parser);
// job: each submitted job's settings (its name is numbered); the chaos timer's mean from
// --chaos-mean.
int runFleetChaos(const QCommandLineParser &parser, JobSpec job);

} // namespace flotilla
