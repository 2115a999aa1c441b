#pragma once
// The command line's logging category (`flotilla.app`); the sink the commands install is
// common/LogSink.h.

#include "common/LogSink.h"

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcApp)
