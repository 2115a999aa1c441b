#include "common/AtomicFile.h"

#include "common/Sha256.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

#ifdef Q_OS_UNIX
#include <fcntl.h>
#include <unistd.h>
#endif

namespace flotilla {

namespace {

// After a rename the new directory entry is durable only once the directory itself is
// flushed; without this a power loss can bring back the old file.
void syncDirectory(const QString &dirPath)
{
#ifdef Q_OS_UNIX
    const int fd = ::open(QFile::encodeName(dirPath).constData(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
#else
    Q_UNUSED(dirPath);
#endif
}

} // namespace

Result<void> writeFileAtomically(const QString &path, const QByteArray &data, int permissions)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return fail(QStringLiteral("cannot write '%1': %2").arg(path, file.errorString()));
    if (permissions != 0)
        file.setPermissions(QFile::Permissions(permissions));
    if (file.write(data) != data.size()) {
        const QString reason = file.errorString();
        file.cancelWriting();
        return fail(QStringLiteral("cannot write '%1': %2").arg(path, reason));
    }
    // QSaveFile::commit() syncs the temporary file to disk before renaming it.
    if (!file.commit())
        return fail(QStringLiteral("cannot save '%1': %2").arg(path, file.errorString()));
    syncDirectory(QFileInfo(path).absolutePath());
    return {};
}

QString sha256Hex(const QByteArray &data)
{
    return QString::fromLatin1(Sha256::hash(data).toHex());
}

Result<QString> sha256OfFile(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read '%1': %2").arg(path, file.errorString()));
    Sha256 hash;
    QByteArray block(1 << 20, Qt::Uninitialized);
    for (;;) {
        const qint64 n = file.read(block.data(), block.size());
        if (n < 0)
            return fail(QStringLiteral("cannot read '%1': %2").arg(path, file.errorString()));
        if (n == 0)
            break;
        hash.addData(QByteArrayView(block.constData(), n));
    }
    return QString::fromLatin1(hash.result().toHex());
}

} // namespace flotilla
