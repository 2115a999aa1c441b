#pragma once
// The process's log sink: every message goes to the run directory's flotilla.log; warnings
// (and, when verbose, information) also go to standard error, on a fresh line if a progress
// line is being drawn. Installed once by each command; the run folder's owner (a command, or
// the control center's session) points it at the run's log file.
#include <QString>

#include <cstdio>

namespace flotilla {

// Whether the stream is a terminal (a progress line is redrawn in place there).
bool isTerminal(std::FILE *stream);

void installLogSink(bool verbose);
// Starts (or switches) the log file; an empty path stops file logging.
void setLogFile(const QString &path);

} // namespace flotilla
