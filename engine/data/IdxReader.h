#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST, gzipped or raw.
// http://yann.lecun.com/exdb/mnist/ describes the format: two zero bytes, a type code, the
// number of dimensions, the dimensions as big-endian 32-bit integers, then the data.

#include "common/Result.h"
#include "engine/data/Dataset.h"

#include <QByteArray>
#include <QString>

#include <cstdint>
#include <vector>

namespace flotilla {

struct IdxArray
{
    std::uint8_t type = 0; // 0x08 unsigned byte, 0x09 signed byte, 0x0B short, 0x0C int,
                           // 0x0D float, 0x0E double
    std::vector<std::int64_t> dims;
    QByteArray data; // the payload, still big-endian for multi-byte types
};

// The whole content of a file, inflated if it starts with the gzip magic bytes.
Result<QByteArray> readMaybeGzipped(const QString &path);

// Parses IDX bytes; `origin` names the source in error messages.
Result<IdxArray> parseIdx(const QByteArray &bytes, const QString &origin);
Result<IdxArray> readIdxFile(const QString &path);

// Images (N×H×W or N×C×H×W unsigned bytes, kept as uint8 N×C×H×W) and labels (N bytes).
Result<Dataset> loadIdxDataset(const QString &imagesPath, const QString &labelsPath,
                               const QString &name);

} // namespace flotilla
