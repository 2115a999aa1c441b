#pragma once
// The command line's logging category (`flotilla.app`) and the log sink: every message goes
// to the run directory's flotilla.log; warnings (and, when verbose, information) also go to
// standard error.

#include <QLoggingCategory>
#include <QString>

Q_DECLARE_LOGGING_CATEGORY(lcApp)

namespace flotilla {

void installLogSink(bool verbose);
// Starts (or switches) the log file; an empty path stops file logging.
void setLogFile(const QString &path);

} // namespace flotilla
