#include "app/CommandLine.h"
#include "app/NetworkCommands.h"
#include "app/TrainCommand.h"

namespace flotilla {

QList<Command> headlessCommands()
{
    return {
        {"train", "Train a job on this machine with local workers (headless), or resume one.", runTrainCommand},
        {"serve", "Run a coordinator: train a job with workers that join over TLS.", runServeCommand},
        {"submit", "Queue a job on a fleet service: this machine's, or another's (--coordinator).", runSubmitCommand},
        {"jobs", "List, manage and download the jobs of a fleet's queue (here, or --coordinator).", runJobsCommand},
        {"worker", "Contribute this machine to a coordinator's job (joins with a token).", runWorkerCommand},
        {"token", "Issue a join token for a coordinator.", runTokenCommand},
        {"revoke", "Revoke a worker's certificate.", runRevokeCommand},
        {"release", "Release a quarantined worker (its results were rejected repeatedly).", runReleaseCommand},
    };
}

} // namespace flotilla
