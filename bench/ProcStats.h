#pragma once
// What /proc says about another process (Linux): its CPU time and memory. The benchmarks
// sample the coordinator with these; elsewhere they answer -1.

#include <QtGlobal>

namespace flotilla {

// A process's CPU time (user + system, seconds) from /proc/<pid>/stat, or -1.
double cpuSeconds(qint64 pid);

// A field of /proc/<pid>/status in KiB ("VmHWM", "VmRSS"), or -1.
qint64 statusKiB(qint64 pid, const char *field);

} // namespace flotilla
