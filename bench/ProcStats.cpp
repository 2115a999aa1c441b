#include "bench/ProcStats.h"

#include <QByteArray>
#include <QFile>
#include <QList>
#include <QString>

#ifdef Q_OS_UNIX
#include <unistd.h>
#endif

namespace flotilla {

// A process's CPU time (user + system, seconds) from /proc/<pid>/stat, or -1.
double cpuSeconds(qint64 pid)
{
    QFile f(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    const QByteArray text = f.readAll();
    // The command name may hold spaces: the fields start after its closing parenthesis.
    const qsizetype close = text.lastIndexOf(')');
    if (close < 0)
        return -1;
    const QList<QByteArray> fields = text.mid(close + 2).split(' ');
    // Fields 14 and 15 of the file (utime, stime) are 11 and 12 after the name and state.
    if (fields.size() < 13)
        return -1;
#ifdef Q_OS_UNIX
    const double hz = double(sysconf(_SC_CLK_TCK));
#else
    const double hz = 100.0;
#endif
    return double(fields[11].toLongLong() + fields[12].toLongLong()) / hz;
}

// A field of /proc/<pid>/status in KiB ("VmHWM", "VmRSS"), or -1.
qint64 statusKiB(qint64 pid, const char *field)
{
    QFile f(QStringLiteral("/proc/%1/status").arg(pid));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    const QByteArray prefix = QByteArray(field) + ':';
    for (const QByteArray &line : f.readAll().split('\n'))
        if (line.startsWith(prefix))
            return line.mid(prefix.size()).trimmed().split(' ').value(0).toLongLong();
    return -1;
}

} // namespace flotilla
