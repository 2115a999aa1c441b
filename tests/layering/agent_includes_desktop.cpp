// Must not compile: the worker's agent is headless; the desk over it is the desktop's.
#include "agent/WorkerAgent.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "desktop/AgentDesk.h"
