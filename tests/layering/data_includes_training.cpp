// Must not compile: data sets and their readers know no model.
#include "engine/data/Dataset.h"

// The include that must fail (the last one; tests/layering/check.sh reads it):
#include "engine/training/Model.h"
