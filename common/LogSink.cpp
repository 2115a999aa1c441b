#include "common/LogSink.h"

#include <QDateTime>
#include <QFile>
#include <QMutex>
#include <QMutexLocker>

#include <cstdio>
#include <memory>

#ifdef Q_OS_WIN
#include <io.h>
#define FLOTILLA_ISATTY(f) _isatty(_fileno(f))
#else
#include <unistd.h>
#define FLOTILLA_ISATTY(f) isatty(fileno(f))
#endif

namespace flotilla {

namespace {

QMutex g_mutex;
std::unique_ptr<QFile> g_file;
bool g_verbose = false;

const char *levelName(QtMsgType type)
{
    switch (type) {
    case QtDebugMsg: return "debug";
    case QtInfoMsg: return "info";
    case QtWarningMsg: return "warning";
    case QtCriticalMsg: return "error";
    case QtFatalMsg: return "fatal";
    }
    return "?";
}

void sink(QtMsgType type, const QMessageLogContext &context, const QString &message)
{
    const QByteArray line = QStringLiteral("%1 %2 %3: %4\n")
                                .arg(QDateTime::currentDateTime().toString(Qt::ISODateWithMs),
                                     QString::fromLatin1(levelName(type)),
                                     QString::fromLatin1(context.category ? context.category : "default"), message)
                                .toUtf8();
    QMutexLocker lock(&g_mutex);
    if (g_file) {
        g_file->write(line);
        g_file->flush();
    }
    if (type == QtDebugMsg) {
        // Debug reaches the sink only for a category someone switched on (QT_LOGGING_RULES):
        // in full, with its time, since it is read to see when things happened.
        std::fputs(line.constData(), stderr);
        return;
    }
    if (type == QtWarningMsg || type == QtCriticalMsg || type == QtFatalMsg || (g_verbose && type == QtInfoMsg)) {
        // The progress line may be mid-redraw on a terminal: start on a fresh line.
        static const bool terminal = isTerminal(stderr);
        if (terminal)
            std::fputs("\r\x1b[K", stderr);
        std::fputs(message.toUtf8().constData(), stderr);
        std::fputc('\n', stderr);
    }
}

} // namespace

bool isTerminal(std::FILE *stream)
{
    return FLOTILLA_ISATTY(stream);
}

void installLogSink(bool verbose)
{
    g_verbose = verbose;
    qInstallMessageHandler(sink);
}

void setLogFile(const QString &path)
{
    QMutexLocker lock(&g_mutex);
    g_file.reset();
    if (path.isEmpty())
        return;
    auto file = std::make_unique<QFile>(path);
    if (file->open(QIODevice::Append | QIODevice::Text))
        g_file = std::move(file);
}

} // namespace flotilla
