#pragma once
// The engine's logging category: `flotilla.engine`.

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcEngine)
