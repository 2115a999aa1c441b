#pragma once
// Process-wide settings, applied once at start-up by main(), and facts about the machine.

namespace flotilla {

// Weights and shards travel as buffers of tens of megabytes. glibc serves allocations that
// large with fresh mmap()s and unmaps them on free, so every message pays a page fault per
// 4 KiB on first touch: on loopback that was a third of the cost of sending a 45 MB model.
// This keeps such buffers on the heap for reuse (up to 256 MiB each; freed memory above
// 1 GiB is given back). A no-op where the C library is not glibc.
void keepLargeBuffersForReuse();

// Every worker of a coordinator holds a socket, and the usual soft limit of 1024 open files
// would refuse the thousandth. Raises the soft limit to the hard one (POSIX only). Returns
// an explanation when it could not, else an empty string.
const char *raiseOpenFileLimit();

// LibTorch's OpenMP threads spin before they sleep when a parallel region ends (libgomp
// about 300,000 turns, LLVM's libomp 200 ms). Where the cores are shared (the coordinator's
// evaluation beside its worker, other programs, a CPU quota) the spinning threads hold the
// cores that the working ones wait for: one worker of two threads on a busy 2-core machine
// trained 2 subtasks a minute where it trains 9 with passive waits. The runtime reads its wait
// policy only when it is loaded, before main(); so unless the user set one (OMP_WAIT_POLICY,
// GOMP_SPINCOUNT, KMP_BLOCKTIME), this sets OMP_WAIT_POLICY=PASSIVE and starts the program
// again in place (same process id, arguments and descriptors). Linux and macOS; elsewhere,
// and where the restart fails, it returns and the program goes on as it was started.
void waitPassivelyInThreadPools(char *argv[]);

// Background work that should not slow the training on the same machine (the coordinator's
// evaluations, next to its own worker or a benchmark's): the calling thread gets about a tenth
// of the share of a normal one when the CPU is contended (Linux: nice 10 for this thread
// only; elsewhere Qt's lowest thread priority), and full speed when it is not. Not idle
// priority: a machine whose workers keep every core busy would never show an accuracy.
void yieldCpuToOtherWork();

// Names the calling thread as `top -H`, `ps -L` and a debugger show it (at most 15
// characters on Linux). A pooled thread keeps Qt's "Thread (pooled)" otherwise. Tools find
// the coordinator's evaluator by it: `flotilla bench scaling` moves the "evaluation" thread
// onto a machine of its own. A no-op where the system has no thread names.
void nameThisThread(const char *name);

// This machine's physical memory in MiB, as a worker tells its coordinator (a job may require
// so much); 0 where the system does not say.
long long physicalMemoryMb();

} // namespace flotilla
