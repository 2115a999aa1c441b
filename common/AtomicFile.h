#pragma once
// Durable file writes: the file either keeps its old content or has the new one, never a
// mix, even if the process is killed or the machine loses power mid-write.

#include "common/Result.h"

#include <QByteArray>
#include <QString>

namespace flotilla {

// Writes data to a temporary file beside path, flushes it to disk, renames it over path and
// flushes the directory entry. permissions: a QFile::Permissions value, or 0 to keep the
// default.
Result<void> writeFileAtomically(const QString &path, const QByteArray &data, int permissions = 0);

// Hex SHA-256 of a byte array and of a whole file.
QString sha256Hex(const QByteArray &data);
Result<QString> sha256OfFile(const QString &path);

} // namespace flotilla
