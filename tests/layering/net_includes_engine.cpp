// Must not compile: the network layer sees weights only as bytes and never the engine.
#include "net/Frame.h"
#include "engine/Model.h"
