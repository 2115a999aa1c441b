#include "engine/EngineLog.h"

Q_LOGGING_CATEGORY(lcEngine, "flotilla.engine", QtInfoMsg)
