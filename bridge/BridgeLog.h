#pragma once
// The bridges' logging category (`flotilla.bridge`).
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcBridge)
