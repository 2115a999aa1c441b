// Must not compile: the control center's library does not link the engine, so the engine's
// folder is not on its include path (tests/layering/check.sh expects this error).
#include "ui/Dashboard.h"
#include "engine/Store.h"
