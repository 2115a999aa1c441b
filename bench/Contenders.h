#pragma once
// What the peer benchmarks share: a contender run as a process of its own (in a process
// group, so that a tree of processes stops at once), read one JSON line per epoch, and the
// min/median/max of repeats.

#include <QElapsedTimer>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <functional>
#include <vector>

namespace flotilla {

struct Spread
{
    double min = 0, median = 0, max = 0;
};
Spread spread(std::vector<double> v);

class Contender
{
public:
    // logFile: where its output goes; empty: it is read through process(). machine: the
    // cgroup procs file of the emulated machine it runs on (CpuQuota); empty: this machine.
    // It runs in a session of its own and is SIGKILLed if the process that started it dies.
    Contender(const QString &program, const QStringList &arguments, const QString &logFile,
              const QString &machine = {});
    ~Contender();

    double seconds() const { return double(m_timer.nsecsElapsed()) / 1e9; }
    bool running() const { return m_process.state() != QProcess::NotRunning; }
    QProcess &process() { return m_process; }
    // Kills the whole process group.
    void stop();

private:
    QProcess m_process;
    QElapsedTimer m_timer;
};

struct Outcome
{
    double seconds = -1; // to the target, evaluation excluded; < 0: not reached
    int epoch = 0;       // the epoch that reached the target; the last one printed if none did
    QString note;
};

// One epoch as a contender printed it.
struct EpochLine
{
    int epoch = 0;
    double accuracy = 0;
    double seconds = 0;     // since the contender started, as it measured them
    double evalSeconds = 0; // its evaluations so far took this long
};

// A contender that prints one JSON line per epoch: {"epoch", "accuracy", "eval_seconds"} or
// {"failed"}. Its clock runs from starting the process to the line of the epoch that reached
// the target, less the seconds its evaluations took (eval_seconds, summed so far). A target
// above 1 is never reached: the contender runs to its end. Every epoch's line is appended to
// `epochs` when given, to the end of the run unless atTarget says Stop (a race to a target
// need not watch the rest).
// tick: called every fifth of a second or so with the seconds since the start.
enum class AtTarget { ReadOn, Stop };
Outcome runLines(const QString &program, const QStringList &arguments, double target, double maxSeconds,
                 std::vector<EpochLine> *epochs = nullptr, const QString &machine = {},
                 const std::function<void(double seconds)> &tick = {}, AtTarget atTarget = AtTarget::ReadOn);

// In a child between fork and exec (async-signal-safe): moves the process into the cgroup
// whose procs file this is; exits the child with 126 when it cannot.
void joinCgroupFromChild(const char *procsFile);

} // namespace flotilla
