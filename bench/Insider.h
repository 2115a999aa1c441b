#pragma once
// An insider: a peer holding a valid worker certificate (a join token handed out widely is
// the realistic way to get one) that speaks the protocol by hand to exhaust the coordinator.
// Outside the worker's normal path, as the dishonest workers of Attacks.h are; for the tests
// and the figures of docs/security.md ("Insiders").
//
//   shard-flood      ShardRequests as fast as the socket takes them, never reading
//   request-flood    Requests the same way
//   heartbeat-flood  Heartbeats the same way
//   handback-flood   HandBacks of a lease it does not hold
//   command-flood    operator Commands under a worker's certificate
//   no-read          ShardRequests within their rate, never reading the shards
//   oversized        a Result that announces a 4 GiB payload
//   foreign-result   a Result for a lease it does not hold
//   session-storm    many sessions at once under the one certificate, each saying Hello
//
// Each attack enrolls a certificate of its own (so that one attack's bar does not blur the
// next) and reports how long the coordinator took to close it, the reason it gave, and, with
// --pid, the coordinator's extra RSS and CPU over the attack, while a probe opens a fresh TLS
// connection to the port every 200 ms and times its handshake.
//
// `flotilla bench insider --join TOKEN --state-dir DIR [--attack KIND|all] [--pid PID]`

#include <QStringList>

namespace flotilla {

int runBenchInsider(const QStringList &arguments);

} // namespace flotilla
