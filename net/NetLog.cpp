#include "net/NetLog.h"

Q_LOGGING_CATEGORY(lcNet, "flotilla.net", QtInfoMsg)
