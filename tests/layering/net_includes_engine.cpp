// Must not compile: the network layer sees weights only as bytes and never the engine.
#include "net/Frame.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "engine/training/Model.h"
