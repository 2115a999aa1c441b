#pragma once
// What the commands that run a job share: the flags that describe a job (a job file and
// overrides), the run directory's default, the live progress line and the closing summary,
// and graceful stops on SIGINT/SIGTERM.

#include "common/LogSink.h" // isTerminal
#include "engine/coordination/Coordinator.h"
#include "job/JobSpec.h"

#include <QCommandLineParser>
#include <QElapsedTimer>

#include <cstdio>
#include <functional>
#include <optional>

namespace flotilla {

class LocalFleet;

void addJobOptions(QCommandLineParser &parser);
// The job from --job (or the default job) with the other flags applied, validated.
// jobFile: the job file to start from, instead of --job's.
Result<JobSpec> jobFromOptions(const QCommandLineParser &parser, const QString &jobFile = {});
// Whether any option of addJobOptions() that says something of the job was given (not
// --quiet or --verbose): `flotilla serve` without one runs a fleet service.
bool anyJobOptionSet(const QCommandLineParser &parser);
// parser.helpText() with "Usage: flotilla <command>".
QString commandHelp(const QCommandLineParser &parser, const QString &command);
// Parses a command's arguments (with --help). Returns the exit code when the command is to
// stop there: a usage error (reported on standard error) or the help (printed).
std::optional<int> parseOrExit(QCommandLineParser &parser, const QStringList &arguments, const QString &command);

// SIGINT and SIGTERM set a flag that pendingStopSignal() reads (poll it from a timer).
void installStopSignals();
int pendingStopSignal();

QString duration(qint64 ms);
// task: the job's (job/Tasks.h), whose score the line and the summary name.
QString progressLine(const JobProgress &p, int alive, int workers, const QString &task = QStringLiteral("classification"));
void printSummary(const JobProgress &p, const QString &runDir, qint64 wallMs,
                  const QString &task = QStringLiteral("classification"));

// Prints the progress line: redrawn in place on a terminal, every 10 s into a log.
class ProgressPrinter
{
public:
    ProgressPrinter(bool quiet, int workers, QString task = QStringLiteral("classification"));
    void update(const JobProgress &p, int alive);
    void endLine();
    const JobProgress &last() const { return m_last; }

private:
    bool m_quiet;
    bool m_terminal;
    int m_workers;
    QString m_task;
    bool m_drawn = false;
    QElapsedTimer m_sinceLine;
    JobProgress m_last;
};

// How a command runs its job's fleet to the end (train: its own workers; serve: the
// network's too): the progress line, graceful stops on SIGINT/SIGTERM and the summary of a
// finished job.
struct JobRun
{
    bool quiet = false;
    bool countConnected = false; // the line's live workers: all connected (serve), else the fleet's own
    QString failureHint;         // printed after a failure (how to resume); empty: nothing
    QString stopMessage;         // printed when a stop signal comes
    int quitDelayMs = 0;         // after a finished job, so that the workers hear it before the endpoint goes
    // Further reasons to stop (an operator's Stop), connected before the fleet starts; they
    // set the exit code and quit the event loop.
    std::function<void(int &exitCode)> connectMore = {};
    std::function<void()> beforeStop = {}; // after the event loop, before the fleet stops
};
// Starts the fleet, runs the event loop until the job ends or is stopped, stops the fleet and
// closes the log file. Returns the command's exit code.
int runJobToEnd(LocalFleet &fleet, const JobRun &run);

} // namespace flotilla
