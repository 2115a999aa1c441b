#include "bridge/BridgeLog.h"

Q_LOGGING_CATEGORY(lcBridge, "flotilla.bridge", QtInfoMsg)
