#pragma once
// Process-wide settings, applied once at start-up by main().

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

} // namespace flotilla
