#pragma once
// The network layer's logging category: `flotilla.net`.

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcNet)
