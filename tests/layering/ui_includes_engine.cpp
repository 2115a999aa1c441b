// Must not compile: the control center's library does not link the engine, so the engine's
// folders are not on its include path (tests/layering/check.sh expects this error).
#include "ui/Dashboard.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "engine/coordination/Store.h"
