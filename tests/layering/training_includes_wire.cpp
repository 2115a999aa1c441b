// Must not compile: training on one machine knows nothing of what crosses the network.
#include "engine/training/Trainer.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "engine/wire/WireFormat.h"
