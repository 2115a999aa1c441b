// Must not compile: the wire formats are below the coordinator.
#include "engine/wire/Compression.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "engine/coordination/Coordinator.h"
