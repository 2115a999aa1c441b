#pragma once
// Starting a program when the user logs in, the way each desktop expects it: an XDG
// autostart entry on Linux and other freedesktop systems ($XDG_CONFIG_HOME/autostart), the
// HKCU Run key on Windows, a LaunchAgents property list on macOS.
//
// Threads: any; each call reads or writes one small file (or registry value).

#include "common/Result.h"

#include <QString>
#include <QStringList>

namespace flotilla {

struct AutostartEntry
{
    QString id;          // file or value name: "org.flotilla.FlotillaWorker"
    QString name;        // what a session manager shows: "Flotilla worker"
    QString program;     // absolute path of the executable
    QStringList arguments;
};

// Where the entry lives on this platform: a file path, or the registry value's path.
QString autostartLocation(const QString &id);
bool autostartEnabled(const QString &id);
// Writes the entry (replacing one of the same id) or removes it; removing an absent one succeeds.
Result<void> setAutostart(const AutostartEntry &entry, bool enabled);

} // namespace flotilla
