#include "machine/Autostart.h"

#include "common/AtomicFile.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSettings>

namespace flotilla {

namespace {

#if defined(Q_OS_WIN)
const QString kRunKey = QStringLiteral("HKEY_CURRENT_USER\\Software\\Microsoft\\Windows\\CurrentVersion\\Run");

QString quoted(const QString &s)
{
    return s.contains(u' ') ? u'"' + s + u'"' : s;
}
#elif defined(Q_OS_MACOS)
QString xmlEscaped(const QString &s)
{
    return s.toHtmlEscaped();
}
#else
// The Exec key's quoting (Desktop Entry Specification, "The Exec key"): an argument with a
// reserved character is double-quoted, and inside the quotes `"`, `` ` ``, `$` and `\` are
// escaped; `%` is doubled everywhere, as field codes start with it.
QString execArgument(QString s)
{
    s.replace(u'%', QStringLiteral("%%"));
    static const QString reserved = QStringLiteral(" \t\n\"'\\><~|&;$*?#()`");
    bool quote = s.isEmpty();
    for (const QChar c : reserved)
        quote = quote || s.contains(c);
    if (!quote)
        return s;
    QString out;
    for (const QChar c : s) {
        if (c == u'"' || c == u'`' || c == u'$' || c == u'\\')
            out += u'\\';
        out += c;
    }
    return u'"' + out + u'"';
}

QString autostartDir()
{
    // Read here rather than through QStandardPaths, whose test mode would move it elsewhere.
    const QString config = qEnvironmentVariable("XDG_CONFIG_HOME");
    return (config.isEmpty() ? QDir::homePath() + QStringLiteral("/.config") : config) + QStringLiteral("/autostart");
}
#endif

} // namespace

QString autostartLocation(const QString &id)
{
#if defined(Q_OS_WIN)
    return kRunKey + u'\\' + id;
#elif defined(Q_OS_MACOS)
    return QDir::homePath() + QStringLiteral("/Library/LaunchAgents/") + id + QStringLiteral(".plist");
#else
    return autostartDir() + u'/' + id + QStringLiteral(".desktop");
#endif
}

bool autostartEnabled(const QString &id)
{
#if defined(Q_OS_WIN)
    return QSettings(kRunKey, QSettings::NativeFormat).contains(id);
#else
    return QFileInfo::exists(autostartLocation(id));
#endif
}

Result<void> setAutostart(const AutostartEntry &entry, bool enabled)
{
#if defined(Q_OS_WIN)
    QSettings run(kRunKey, QSettings::NativeFormat);
    if (enabled) {
        QStringList parts{quoted(QDir::toNativeSeparators(entry.program))};
        for (const QString &a : entry.arguments)
            parts << quoted(a);
        run.setValue(entry.id, parts.join(u' '));
    } else {
        run.remove(entry.id);
    }
    run.sync();
    if (run.status() != QSettings::NoError)
        return fail(QStringLiteral("could not change the Run key %1; check that this account may write it")
                        .arg(kRunKey));
    return {};
#else
    const QString path = autostartLocation(entry.id);
    if (!enabled) {
        if (QFileInfo::exists(path) && !QFile::remove(path))
            return fail(QStringLiteral("could not remove %1; remove it by hand to stop starting at login").arg(path));
        return {};
    }
    if (!QDir().mkpath(QFileInfo(path).absolutePath()))
        return fail(QStringLiteral("could not create the folder %1").arg(QFileInfo(path).absolutePath()));
    QByteArray text;
#if defined(Q_OS_MACOS)
    QString args = QStringLiteral("    <string>%1</string>\n").arg(xmlEscaped(entry.program));
    for (const QString &a : entry.arguments)
        args += QStringLiteral("    <string>%1</string>\n").arg(xmlEscaped(a));
    text = QStringLiteral("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                          "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" "
                          "\"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n"
                          "<plist version=\"1.0\">\n<dict>\n"
                          "  <key>Label</key>\n  <string>%1</string>\n"
                          "  <key>ProgramArguments</key>\n  <array>\n%2  </array>\n"
                          "  <key>RunAtLoad</key>\n  <true/>\n"
                          "</dict>\n</plist>\n")
               .arg(xmlEscaped(entry.id), args)
               .toUtf8();
#else
    QStringList exec{execArgument(entry.program)};
    for (const QString &a : entry.arguments)
        exec << execArgument(a);
    text = QStringLiteral("[Desktop Entry]\n"
                          "Type=Application\n"
                          "Name=%1\n"
                          "Exec=%2\n"
                          "Icon=flotilla\n"
                          "Terminal=false\n"
                          "X-GNOME-Autostart-enabled=true\n")
               .arg(entry.name, exec.join(u' '))
               .toUtf8();
#endif
    return writeFileAtomically(path, text);
#endif
}

} // namespace flotilla
