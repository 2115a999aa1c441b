#pragma once
// One box as a fleet of machines: each emulated machine is a cgroup with a CPU quota (cgroup
// v2's cpu.max, or v1's cpu.cfs_quota_us), and a process started into it, with all its
// threads and children, gets that much CPU and no more. `flotilla bench scaling` puts every
// worker, the plain loop and every DDP rank on a machine of its own and the coordinator on
// another. Needs root (or a delegated cgroup); where the cgroups cannot be written, create()
// says so and why.
//
// Threads: the owner's.

#include "common/Result.h"

#include <QString>

#include <memory>
#include <vector>

namespace flotilla {

class CpuQuota
{
public:
    // A fresh group of machines under the cgroup root, named after this process. `root`: a
    // cgroup folder to use instead of the system's (a delegated one, for a user who is not
    // root); empty: /sys/fs/cgroup, then /sys/fs/cgroup/unified (v2), then the v1 cpu root.
    // `periodUs`: the quota's period; a machine of 0.25 core runs a quarter of each. The
    // kernel's usual 100 ms is the default: 10 ms (smoother, in principle: bursts of 2.5 ms, not
    // 25) measured slower for every contender here and changed no speedup (docs/benchmarks.md).
    static constexpr qint64 kDefaultPeriodUs = 100000;
    static Result<std::unique_ptr<CpuQuota>> create(const QString &root = {}, qint64 periodUs = kDefaultPeriodUs);
    ~CpuQuota(); // removes the groups (their processes must have ended)

    // Adds a machine with `cores` of CPU (0.25: a quarter of one core); returns its index.
    Result<int> addMachine(const QString &name, double cores);
    // The file a process writes its pid to, to move itself into machine `index` (a
    // Contender started with it does, before exec).
    QString procsFile(int index) const;
    // Moves one thread (its kernel id) of a running process into machine `index`, the
    // process's other threads staying where they are: cgroup v1's `tasks` file. cgroup v2
    // moves a single thread only within a threaded subtree, which the machines are not; there
    // movesThreads() is false and this says so.
    bool movesThreads() const { return !m_v2; }
    Result<void> moveThread(int index, qint64 threadId) const;
    // "cgroup v2 at /sys/fs/cgroup/…, period 10 ms" or "cgroup v1 at …": for the report.
    QString describe() const;

private:
    CpuQuota() = default;
    bool m_v2 = false;
    qint64 m_periodUs = kDefaultPeriodUs;
    QString m_root; // our group: the machines are its children
    std::vector<QString> m_machines;
};

} // namespace flotilla
