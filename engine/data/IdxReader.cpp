#include "engine/data/IdxReader.h"

#include <QFile>
#include <QFileInfo>

#include <torch/torch.h>

#include <zlib.h>

#include <limits>

namespace flotilla {

namespace {

// Fashion-MNIST's training images are 47 MB; anything past this is not a data set we load
// into memory.
constexpr qint64 kMaxInflatedBytes = qint64(4) << 30;

Result<QByteArray> inflateGzip(const QByteArray &compressed, const QString &path)
{
    z_stream zs{};
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return fail(QStringLiteral("cannot start gzip decompression for '%1'").arg(path));
    QByteArray out;
    out.reserve(compressed.size() * 4);
    zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(compressed.constData()));
    zs.avail_in = static_cast<uInt>(compressed.size());
    char buffer[1 << 16];
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        zs.next_out = reinterpret_cast<Bytef *>(buffer);
        zs.avail_out = sizeof buffer;
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            const QString reason = rc == Z_BUF_ERROR
                ? QStringLiteral("the file is truncated (the compressed stream ends early)")
                : QStringLiteral("corrupt gzip data (%1)")
                      .arg(QString::fromLatin1(zs.msg ? zs.msg : "unknown zlib error"));
            inflateEnd(&zs);
            return fail(QStringLiteral("cannot read '%1': %2").arg(path, reason));
        }
        out.append(buffer, static_cast<qsizetype>(sizeof buffer - zs.avail_out));
        if (out.size() > kMaxInflatedBytes) {
            inflateEnd(&zs);
            return fail(QStringLiteral("cannot read '%1': it inflates to more than %2 GiB")
                            .arg(path).arg(kMaxInflatedBytes >> 30));
        }
        if (rc == Z_STREAM_END && zs.avail_in > 0) {
            // gzip allows several members one after the other; anything else is garbage.
            const auto *next = zs.next_in;
            if (zs.avail_in >= 2 && next[0] == 0x1f && next[1] == 0x8b) {
                inflateReset(&zs);
                rc = Z_OK;
                continue;
            }
            inflateEnd(&zs);
            return fail(QStringLiteral("cannot read '%1': %2 unexpected bytes after the end of the gzip data")
                            .arg(path).arg(zs.avail_in));
        }
        if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
            inflateEnd(&zs);
            return fail(QStringLiteral(
                            "cannot read '%1': the file is truncated (the compressed stream ends early)")
                            .arg(path));
        }
    }
    inflateEnd(&zs);
    return out;
}

std::int64_t typeSize(std::uint8_t type)
{
    switch (type) {
    case 0x08:
    case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C:
    case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
    }
}

} // namespace

Result<QByteArray> readMaybeGzipped(const QString &path)
{
    QFile file(path);
    if (!QFileInfo::exists(path))
        return fail(QStringLiteral("'%1' does not exist").arg(path));
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open '%1': %2").arg(path, file.errorString()));
    const QByteArray bytes = file.readAll();
    if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f
        && static_cast<unsigned char>(bytes[1]) == 0x8b)
        return inflateGzip(bytes, path);
    return bytes;
}

Result<IdxArray> parseIdx(const QByteArray &bytes, const QString &origin)
{
    const auto *p = reinterpret_cast<const unsigned char *>(bytes.constData());
    if (bytes.size() < 4)
        return fail(QStringLiteral("'%1' is not an IDX file: only %2 bytes").arg(origin).arg(bytes.size()));
    if (p[0] != 0 || p[1] != 0 || typeSize(p[2]) == 0 || p[3] == 0 || p[3] > 8)
        return fail(QStringLiteral("'%1' is not an IDX file: magic bytes %2 %3 %4 %5 (expected 00 00, "
                                   "a type code 08-0E and 1-8 dimensions)")
                        .arg(origin)
                        .arg(p[0], 2, 16, QChar(u'0'))
                        .arg(p[1], 2, 16, QChar(u'0'))
                        .arg(p[2], 2, 16, QChar(u'0'))
                        .arg(p[3], 2, 16, QChar(u'0')));
    IdxArray array;
    array.type = p[2];
    const int ndims = p[3];
    const qsizetype headerSize = 4 + 4 * ndims;
    if (bytes.size() < headerSize)
        return fail(QStringLiteral("'%1' is truncated: its header needs %2 bytes, the file has %3")
                        .arg(origin).arg(headerSize).arg(bytes.size()));
    std::int64_t count = 1;
    QStringList dimText;
    for (int i = 0; i < ndims; ++i) {
        const unsigned char *d = p + 4 + 4 * i;
        const std::int64_t dim = (std::int64_t(d[0]) << 24) | (std::int64_t(d[1]) << 16)
                                 | (std::int64_t(d[2]) << 8) | std::int64_t(d[3]);
        if (dim <= 0 || dim > (std::int64_t(1) << 31) / 2)
            return fail(QStringLiteral("'%1' is corrupt: dimension %2 is %3").arg(origin).arg(i).arg(dim));
        array.dims.push_back(dim);
        dimText << QString::number(dim);
        if (count > kMaxInflatedBytes / dim)
            return fail(QStringLiteral("'%1' is corrupt: its dimensions %2 are too large")
                            .arg(origin, dimText.join(u'×')));
        count *= dim;
    }
    const std::int64_t expected = count * typeSize(array.type);
    const std::int64_t actual = bytes.size() - headerSize;
    if (actual < expected)
        return fail(QStringLiteral("'%1' is truncated: its header says %2 = %3 bytes of data, "
                                   "the file has %4")
                        .arg(origin, dimText.join(u'×')).arg(expected).arg(actual));
    if (actual > expected)
        return fail(QStringLiteral("'%1' is corrupt: its header says %2 = %3 bytes of data, "
                                   "the file has %4 (extra bytes at the end)")
                        .arg(origin, dimText.join(u'×')).arg(expected).arg(actual));
    array.data = bytes.mid(headerSize);
    return array;
}

Result<IdxArray> readIdxFile(const QString &path)
{
    auto bytes = readMaybeGzipped(path);
    if (!bytes)
        return bytes.takeError();
    return parseIdx(*bytes, path);
}

Result<Dataset> loadIdxDataset(const QString &imagesPath, const QString &labelsPath,
                               const QString &name)
{
    auto images = readIdxFile(imagesPath);
    if (!images)
        return images.takeError();
    auto labels = readIdxFile(labelsPath);
    if (!labels)
        return labels.takeError();

    if (images->type != 0x08)
        return fail(QStringLiteral("'%1' holds IDX type 0x%2; image files must hold unsigned bytes (0x08)")
                        .arg(imagesPath).arg(images->type, 2, 16, QChar(u'0')));
    if (images->dims.size() != 3 && images->dims.size() != 4)
        return fail(QStringLiteral("'%1' has %2 dimensions; images must be N×H×W or N×C×H×W")
                        .arg(imagesPath).arg(images->dims.size()));
    if (labels->type != 0x08 || labels->dims.size() != 1)
        return fail(QStringLiteral("'%1' is not a label file: labels must be one dimension of unsigned bytes")
                        .arg(labelsPath));
    if (images->dims[0] != labels->dims[0])
        return fail(QStringLiteral("'%1' has %2 images but '%3' has %4 labels")
                        .arg(imagesPath).arg(images->dims[0]).arg(labelsPath).arg(labels->dims[0]));

    std::vector<std::int64_t> shape = images->dims;
    if (shape.size() == 3)
        shape.insert(shape.begin() + 1, 1);
    Dataset data;
    data.name = name;
    // Kept as bytes: a quarter of float32's memory; batches are scaled to [0, 1] and
    // normalized as they are made (InputPipeline).
    data.features = torch::from_blob(images->data.data(), shape, torch::kUInt8).clone();
    data.labels = torch::from_blob(labels->data.data(), {labels->dims[0]}, torch::kUInt8)
                      .to(torch::kInt64)
                      .contiguous();
    data.numClasses = static_cast<int>(data.labels.max().item<std::int64_t>()) + 1;
    return data;
}

} // namespace flotilla
