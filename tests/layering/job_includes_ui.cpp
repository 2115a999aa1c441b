// Must not compile: the job description is below the control center.
#include "job/JobSpec.h"
#include "ui/SessionTypes.h"
