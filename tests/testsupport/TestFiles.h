#pragma once
// File helpers every test may use, the network layer's included: no LibTorch, no engine.

#include <QByteArray>
#include <QString>

namespace flotilla::test {

// The file's bytes, or empty when it cannot be read.
QByteArray readFile(const QString &path);
// Writes (replaces) the file; throws std::runtime_error naming the file when it cannot.
void writeFile(const QString &path, const QByteArray &bytes);
// The file's permission bits (0600), or -1 when it cannot be read; Unix only.
int fileMode(const QString &path);

} // namespace flotilla::test
