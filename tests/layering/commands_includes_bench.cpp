// Must not compile: the product's commands never link measurement (the attackers, the link
// shaper); only the executables do.
#include "app/CommandLine.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "bench/Attacks.h"
