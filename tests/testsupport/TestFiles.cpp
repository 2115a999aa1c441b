#include "TestFiles.h"

#include <QFile>

#include <stdexcept>

#ifdef Q_OS_UNIX
#include <sys/stat.h>
#endif

namespace flotilla::test {

QByteArray readFile(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeFile(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(bytes) != bytes.size())
        throw std::runtime_error("cannot write test file " + path.toStdString() + ": " + f.errorString().toStdString());
}

int fileMode(const QString &path)
{
#ifdef Q_OS_UNIX
    struct stat info;
    if (::stat(QFile::encodeName(path).constData(), &info) != 0)
        return -1;
    return int(info.st_mode & 0777);
#else
    Q_UNUSED(path);
    return -1;
#endif
}

} // namespace flotilla::test
