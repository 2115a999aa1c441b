#pragma once
// `flotilla bench flood`: whether hostile connections can lock a coordinator out. It starts
// an unmodified `flotilla serve` on loopback training a job with honest `flotilla worker`
// processes, measures TLS handshakes per second, then holds idle TCP connections and
// stalled TLS handshakes open against it from many loopback source addresses (reopening
// each one the coordinator closes) while an honest worker is restarted; after the attack a
// fresh worker joins. It reports how long each took, the coordinator's memory and CPU, and
// training's pace before and during the attack. With --baseline-binary it measures another
// build the same way, in the same invocation. docs/security.md gives the figures.
//
// Threads: everything runs on the calling (main) thread: the attacking sockets and the
// handshake loop are asynchronous sockets on its event loop; the coordinator and the
// workers are other processes.

#include <QStringList>

namespace flotilla {

// arguments[0] is the benchmark's name ("flood"); the rest are its options (--help).
int runBenchFlood(const QStringList &arguments);

} // namespace flotilla
