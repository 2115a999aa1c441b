// Must not compile: the protocol's mappings sit below both network sides, which use them.
#include "protocol/TrainingFields.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "server/FleetServer.h"
