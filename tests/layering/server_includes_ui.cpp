// Must not compile: the coordinator's server is headless; it reaches no window.
#include "server/FleetServer.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "ui/MainWindow.h"
