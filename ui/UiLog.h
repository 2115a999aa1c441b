#pragma once
// The user interface's logging category: `flotilla.ui`.

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcUi)
