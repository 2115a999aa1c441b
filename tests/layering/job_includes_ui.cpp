// Must not compile: the job description and the sessions' records are below the control center.
#include "job/SessionTypes.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "ui/Dashboard.h"
