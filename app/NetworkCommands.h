#pragma once
// The commands of a fleet that spans processes and machines: `serve` runs a coordinator,
// `worker` joins one, `token` issues join tokens, `revoke` bars a worker, `release` frees a
// quarantined one.
// Each takes its arguments without the program name (arguments[0] is the command).

#include "common/Result.h"
#include "net/TrustStore.h"

#include <QStringList>

namespace flotilla {

int runServeCommand(const QStringList &arguments);
// `flotilla submit` and `flotilla jobs`: a fleet service's queue (app/FleetCommands.cpp).
int runSubmitCommand(const QStringList &arguments);
int runJobsCommand(const QStringList &arguments);
int runWorkerCommand(const QStringList &arguments);
int runTokenCommand(const QStringList &arguments);
int runRevokeCommand(const QStringList &arguments);
int runReleaseCommand(const QStringList &arguments);

// A token given on the command line: the token itself (flt1.…), or a file that holds one.
Result<net::JoinToken> tokenArgument(const QString &value);

class NetworkHost;
// Where a coordinator keeps its CA, certificates, trust list and fleet queue by default.
QString defaultIdentityDir();
// `flotilla serve` as a fleet service, once its endpoint is open: runs the queue of
// identityDir/fleet.db until a stop signal. Returns the exit code.
int runFleetService(NetworkHost &network, const QString &identityDir, int concurrentJobs, bool quiet);

} // namespace flotilla
