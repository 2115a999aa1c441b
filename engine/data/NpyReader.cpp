#include "engine/data/NpyReader.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStringList>

#include <torch/torch.h>

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <new>
#include <optional>

namespace flotilla {

namespace {

// Above this a .npy file is mapped rather than read: its pages are loaded as they are used,
// and a uint8 or float32 array is never copied.
constexpr qint64 kMapThreshold = qint64(64) << 20;
// No data set we train on comes near this; a larger count means a corrupt header.
constexpr std::int64_t kMaxElements = std::int64_t(1) << 40;
constexpr std::int64_t kMaxClasses = std::int64_t(1) << 20;

// A read-only file mapped copy-on-write, so that a stray in-place write to a tensor over it
// changes the process's copy and never faults; unmapped when the last tensor lets go.
struct Mapping
{
    QFile file;
    uchar *data = nullptr;
    ~Mapping()
    {
        if (data)
            file.unmap(data);
    }
};

struct Bytes
{
    const char *data = nullptr;
    quint64 size = 0;
    std::shared_ptr<void> owner; // keeps `data` alive; null when `data` is only borrowed
    bool mapped = false;
};

// The whole file, mapped when it is large.
Result<Bytes> openBytes(const QString &path)
{
    if (!QFileInfo::exists(path))
        return fail(QStringLiteral("'%1' does not exist").arg(path));
    auto mapping = std::make_shared<Mapping>();
    mapping->file.setFileName(path);
    if (!mapping->file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open '%1': %2").arg(path, mapping->file.errorString()));
    const qint64 size = mapping->file.size();
    if (size >= kMapThreshold) {
        mapping->data = mapping->file.map(0, size, QFileDevice::MapPrivateOption);
        if (mapping->data)
            return Bytes{reinterpret_cast<const char *>(mapping->data), quint64(size), mapping, true};
    }
    auto buffer = std::make_shared<QByteArray>(mapping->file.readAll());
    if (buffer->size() != size)
        return fail(QStringLiteral("cannot read '%1': %2").arg(path, mapping->file.errorString()));
    return Bytes{buffer->constData(), quint64(buffer->size()), buffer};
}

quint64 le(const char *p, int bytes)
{
    quint64 v = 0;
    for (int i = bytes - 1; i >= 0; --i)
        v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

QString shapeText(const std::vector<std::int64_t> &shape)
{
    QStringList dims;
    for (const std::int64_t d : shape)
        dims << QString::number(d);
    return shape.size() == 1 ? QStringLiteral("(%1,)").arg(dims.first())
                             : QStringLiteral("(%1)").arg(dims.join(QStringLiteral(", ")));
}

struct Header
{
    QByteArray descr;
    bool fortranOrder = false;
    std::vector<std::int64_t> shape;
};

// The header is a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (600, 784), }
// parsed by hand: only these three keys, strings, booleans and tuples of integers.
struct HeaderParser
{
    const QByteArray &text;
    qsizetype pos = 0;

    // An empty string when it parsed, else what is wrong.
    QString parse(Header &out)
    {
        static const QByteArray keys[] = {"descr", "fortran_order", "shape"};
        int seen = 0;
        if (!eat('{'))
            return QStringLiteral("it does not start with '{'");
        while (!eat('}')) {
            QByteArray key;
            if (!string(key) || !eat(':'))
                return QStringLiteral("expected 'key': at character %1").arg(pos);
            const int k = int(std::find(std::begin(keys), std::end(keys), key) - std::begin(keys));
            if (k == 0 && peek() == '[')
                return QStringLiteral("structured");
            const bool ok = k == 0 ? string(out.descr)
                          : k == 1 ? (out.fortranOrder = word("True")) || word("False")
                          : k == 2 && tuple(out.shape);
            if (!ok)
                return QStringLiteral("unexpected key or bad value '%1'").arg(QString::fromLatin1(key));
            seen |= 1 << k;
            if (!eat(',') && peek() != '}')
                return QStringLiteral("expected ',' or '}' at character %1").arg(pos);
        }
        if (peek() != '\0')
            return QStringLiteral("unexpected text after the closing '}'");
        if (seen != 7)
            return QStringLiteral("it lacks one of 'descr', 'fortran_order' and 'shape'");
        return {};
    }

    char peek()
    {
        while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
            ++pos;
        return pos < text.size() ? text[pos] : '\0';
    }
    bool eat(char c) { return peek() == c && ++pos > 0; }
    bool word(const char *w)
    {
        peek();
        const bool found = text.mid(pos).startsWith(w);
        pos += found ? qsizetype(std::strlen(w)) : 0;
        return found;
    }
    bool string(QByteArray &out)
    {
        const char quote = peek();
        const qsizetype end = quote == '\'' || quote == '"' ? text.indexOf(quote, pos + 1) : -1;
        if (end < 0)
            return false;
        out = text.mid(pos + 1, end - pos - 1);
        pos = end + 1;
        return true;
    }
    bool tuple(std::vector<std::int64_t> &out)
    {
        if (!eat('('))
            return false;
        while (!eat(')')) {
            if (!std::isdigit(static_cast<unsigned char>(peek())))
                return false;
            std::int64_t v = 0; // clamped past the largest size readArray accepts
            while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
                v = std::min(v * 10 + (text[pos++] - '0'), kMaxElements + 1);
            pos += pos < text.size() && text[pos] == 'L' ? 1 : 0; // Python 2's long integers
            out.push_back(v);
            if (!eat(','))
                return eat(')');
        }
        return true;
    }
};

// The tensor type for a descr without its byte-order mark ("f4"). LibTorch has no uint16 or
// uint32: those are read as the signed type of their size, then widened.
std::optional<torch::ScalarType> storedType(const QByteArray &code)
{
    static const std::map<QByteArray, torch::ScalarType> types{
        {"b1", torch::kBool},  {"u1", torch::kUInt8},   {"i1", torch::kInt8},    {"i2", torch::kInt16},
        {"u2", torch::kInt16}, {"i4", torch::kInt32},   {"u4", torch::kInt32},   {"i8", torch::kInt64},
        {"f2", torch::kHalf},  {"f4", torch::kFloat32}, {"f8", torch::kFloat64}};
    const auto it = types.find(code);
    return it == types.end() ? std::nullopt : std::optional(it->second);
}

// Decodes the bytes of one .npy file; the tensor shares their memory when they have an
// owner and the array is aligned, else it is a copy.
Result<NpyArray> readArray(const Bytes &bytes, const QString &origin)
{
    const char *p = bytes.data;
    if (bytes.size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
        const bool zip = bytes.size >= 2 && p[0] == 'P' && p[1] == 'K';
        return fail(QStringLiteral("'%1' is not a NumPy .npy file: it does not start with \\x93NUMPY%2")
                        .arg(origin, zip ? QStringLiteral(" (it looks like a .npz archive)")
                                         : QStringLiteral("; write it with numpy.save")));
    }
    const int major = static_cast<unsigned char>(p[6]);
    const int minor = static_cast<unsigned char>(p[7]);
    if (major < 1 || major > 3 || minor != 0)
        return fail(QStringLiteral("'%1' is in .npy format version %2.%3; versions 1.0, 2.0 and 3.0 can be read")
                        .arg(origin).arg(major).arg(minor));
    const quint64 lengthBytes = major == 1 ? 2 : 4;
    const quint64 headerStart = 8 + lengthBytes;
    if (bytes.size < headerStart)
        return fail(QStringLiteral("'%1' is truncated: it ends inside its header").arg(origin));
    const quint64 dataStart = headerStart + le(p + 8, int(lengthBytes));
    if (bytes.size < dataStart)
        return fail(QStringLiteral("'%1' is truncated: its header needs %2 bytes, the file has %3")
                        .arg(origin).arg(dataStart).arg(bytes.size));
    const QByteArray text = QByteArray::fromRawData(p + headerStart, qsizetype(dataStart - headerStart));

    Header header;
    const QString problem = HeaderParser{text}.parse(header);
    if (problem == QLatin1String("structured"))
        return fail(QStringLiteral("'%1' holds a structured (record) array; save each field as a numeric "
                                   "array of its own").arg(origin));
    if (!problem.isEmpty())
        return fail(QStringLiteral("'%1' has a malformed .npy header: %2 (the header is %3); write the file "
                                   "again with numpy.save")
                        .arg(origin, problem, QString::fromLatin1(text.trimmed().left(200))));

    const QString descr = QString::fromLatin1(header.descr);
    const char order = header.descr.size() > 0 ? header.descr[0] : '\0';
    const char kind = header.descr.size() > 1 ? header.descr[1] : '\0';
    const auto type = storedType(header.descr.mid(1));
    if (kind == 'O')
        return fail(QStringLiteral("'%1' holds Python objects (dtype '%2'): pickled objects cannot be read; "
                                   "save a numeric array").arg(origin, descr));
    if (!QByteArrayView("<>|=").contains(order) || !type)
        return fail(QStringLiteral("'%1' has dtype '%2', which cannot be read; save it as bool, int8, uint8, "
                                   "int16, uint16, int32, uint32, int64, float16, float32 or float64, e.g. "
                                   "x.astype('float32')").arg(origin, descr));
    const int itemSize = int(c10::elementSize(*type));
    if (order == '>' && itemSize > 1)
        return fail(QStringLiteral("'%1' is big-endian (dtype '%2'); save it little-endian, e.g. "
                                   "x.astype('<%3')").arg(origin, descr, descr.mid(1)));
    if (header.fortranOrder && header.shape.size() > 1)
        return fail(QStringLiteral("'%1' is stored in Fortran (column-major) order; save it in C order, e.g. "
                                   "numpy.save(path, numpy.ascontiguousarray(x))").arg(origin));

    std::int64_t count = 1;
    for (const std::int64_t d : header.shape) {
        if (d > kMaxElements || (d > 0 && count > kMaxElements / d))
            return fail(QStringLiteral("'%1' declares shape %2: more than 2^40 elements, more than can be "
                                       "loaded; the header is probably corrupt")
                            .arg(origin, shapeText(header.shape)));
        count *= d;
    }
    const quint64 expected = quint64(count) * quint64(itemSize);
    const quint64 actual = bytes.size - dataStart;
    if (actual < expected)
        return fail(QStringLiteral("'%1' is truncated: its header says shape %2 of '%3', %4 bytes of data, "
                                   "but only %5 bytes follow the header; copy or write the file again")
                        .arg(origin, shapeText(header.shape), descr).arg(expected).arg(actual));
    if (actual > expected)
        return fail(QStringLiteral("'%1' has %2 bytes after its array of shape %3; a file holding several "
                                   "arrays one after another cannot be read: save them with numpy.savez")
                        .arg(origin).arg(actual - expected).arg(shapeText(header.shape)));

    NpyArray array;
    array.path = origin;
    array.dtype = descr;
    array.shape = header.shape;
    const char *data = p + dataStart;
    const auto options = torch::TensorOptions().dtype(*type);
    if (bytes.owner && reinterpret_cast<quintptr>(data) % quintptr(itemSize) == 0 && count > 0) {
        std::shared_ptr<void> owner = bytes.owner;
        array.tensor = torch::from_blob(const_cast<char *>(data), header.shape, [owner](void *) {}, options);
        array.mapped = bytes.mapped;
    } else {
        array.tensor = torch::empty(header.shape, options);
        if (count > 0)
            std::memcpy(array.tensor.data_ptr(), data, expected);
    }
    if (kind == 'u' && itemSize > 1) {
        const bool wide = itemSize == 4;
        array.tensor = array.tensor.to(wide ? torch::kInt64 : torch::kInt32)
                           .bitwise_and(wide ? std::int64_t(0xFFFFFFFF) : std::int64_t(0xFFFF));
        array.mapped = false;
    }
    return array;
}

quint32 crc(const char *data, quint64 size)
{
    uLong c = crc32(0L, Z_NULL, 0);
    for (quint64 done = 0; done < size;) {
        const uInt n = uInt(std::min<quint64>(size - done, 1u << 30));
        c = crc32(c, reinterpret_cast<const Bytef *>(data + done), n);
        done += n;
    }
    return quint32(c);
}

// Raw deflate (no zlib or gzip wrapper), as zip stores it, into exactly `size` bytes.
Result<Bytes> inflateEntry(const char *in, quint64 inSize, quint64 size, const QString &origin)
{
    std::shared_ptr<QByteArray> out;
    try {
        out = std::make_shared<QByteArray>(qsizetype(size), Qt::Uninitialized);
    } catch (const std::bad_alloc &) {
        return fail(QStringLiteral("'%1' inflates to %2 bytes, more than the memory free").arg(origin).arg(size));
    }
    if (size == 0) // not an array; readArray says so
        return Bytes{out->constData(), 0, out, false};
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        return fail(QStringLiteral("cannot start decompression for '%1'").arg(origin));
    // zlib counts in 32 bits: feed and drain it a GiB at a time.
    constexpr quint64 kChunk = 1u << 30;
    quint64 inPos = 0;
    quint64 outPos = 0; // handed to zlib, not all filled yet
    QString reason;
    for (int rc = Z_OK; rc != Z_STREAM_END;) {
        if (zs.avail_in == 0) {
            const quint64 n = std::min(inSize - inPos, kChunk);
            zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in + inPos));
            zs.avail_in = uInt(n);
            inPos += n;
        }
        if (zs.avail_out == 0) {
            const quint64 n = std::min(size - outPos, kChunk);
            zs.next_out = reinterpret_cast<Bytef *>(out->data() + outPos);
            zs.avail_out = uInt(n);
            outPos += n;
        }
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc == Z_OK || rc == Z_STREAM_END)
            continue;
        if (rc == Z_BUF_ERROR && zs.avail_in == 0 && inPos == inSize)
            reason = QStringLiteral("its compressed data ends early");
        else if (rc == Z_BUF_ERROR && zs.avail_out == 0 && outPos == size)
            reason = QStringLiteral("it inflates to more than the %1 bytes its directory entry says").arg(size);
        else
            reason = QStringLiteral("corrupt deflate data (%1)").arg(QString::fromLatin1(zs.msg ? zs.msg : "?"));
        break;
    }
    const quint64 produced = outPos - zs.avail_out;
    inflateEnd(&zs);
    if (reason.isEmpty() && produced != size)
        reason = QStringLiteral("it inflates to %1 bytes, its directory entry says %2").arg(produced).arg(size);
    if (!reason.isEmpty())
        return fail(QStringLiteral("'%1' is corrupt: %2; write the archive again").arg(origin, reason));
    return Bytes{out->constData(), size, out, false};
}

Result<std::map<QString, NpyArray>> readZip(const QString &path)
{
    auto file = openBytes(path);
    if (!file)
        return file.takeError();
    const char *z = file->data;
    const quint64 n = file->size;
    const auto truncated = [&] {
        return fail(QStringLiteral("'%1' is truncated or is not a .npz (zip) archive: its directory is missing "
                                   "or cut short; write it again with numpy.savez").arg(path));
    };
    // The end-of-directory record: the last 22 bytes, unless a comment (up to 64 KiB) follows.
    qint64 eocd = -1;
    for (qint64 i = qint64(n) - 22; i >= 0 && i >= qint64(n) - 22 - 65535 && eocd < 0; --i)
        eocd = le(z + i, 4) == 0x06054b50 ? i : -1;
    if (eocd < 0)
        return truncated();
    quint64 entries = le(z + eocd + 10, 2);
    quint64 dirSize = le(z + eocd + 12, 4);
    quint64 dirOffset = le(z + eocd + 16, 4);
    if (entries == 0xFFFF || dirSize == 0xFFFFFFFF || dirOffset == 0xFFFFFFFF) {
        // Zip64: a locator just before the record points at the 64-bit record.
        if (eocd < 20 || le(z + eocd - 20, 4) != 0x07064b50)
            return truncated();
        const quint64 record = le(z + eocd - 20 + 8, 8);
        if (n < 56 || record > n - 56 || le(z + record, 4) != 0x06064b50)
            return truncated();
        entries = le(z + record + 32, 8);
        dirSize = le(z + record + 40, 8);
        dirOffset = le(z + record + 48, 8);
    }
    if (dirOffset > n || dirSize > n - dirOffset)
        return truncated();

    std::map<QString, NpyArray> arrays;
    quint64 pos = dirOffset;
    const quint64 dirEnd = dirOffset + dirSize;
    for (quint64 e = 0; e < entries; ++e) {
        if (dirEnd - pos < 46 || le(z + pos, 4) != 0x02014b50)
            return truncated();
        const char *h = z + pos;
        const quint64 flags = le(h + 8, 2), method = le(h + 10, 2), nameLength = le(h + 28, 2);
        const quint64 extraLength = le(h + 30, 2), commentLength = le(h + 32, 2);
        const quint32 storedCrc = quint32(le(h + 16, 4));
        quint64 packedSize = le(h + 20, 4), size = le(h + 24, 4), local = le(h + 42, 4);
        if (dirEnd - pos - 46 < nameLength + extraLength + commentLength)
            return truncated();
        const QByteArray rawName(h + 46, qsizetype(nameLength));
        const QString name = flags & 0x800 ? QString::fromUtf8(rawName) : QString::fromLatin1(rawName);
        // Zip64 extra field: 64-bit values for those of the three fields that read 0xFFFFFFFF.
        for (quint64 x = 0; x + 4 <= extraLength;) {
            const char *f = h + 46 + nameLength + x;
            const quint64 id = le(f, 2), length = le(f + 2, 2);
            quint64 at = 4;
            for (quint64 *field : {&size, &packedSize, &local}) {
                if (id == 1 && *field == 0xFFFFFFFF && at + 8 <= 4 + length && x + at + 8 <= extraLength) {
                    *field = le(f + at, 8);
                    at += 8;
                }
            }
            x += 4 + length;
        }
        pos += 46 + nameLength + extraLength + commentLength;
        if (!name.endsWith(QLatin1String(".npy")))
            continue;
        const QString origin = path + u':' + name;
        if (flags & 1)
            return fail(QStringLiteral("'%1' is encrypted; save the archive without a password").arg(origin));
        if (method != 0 && method != 8)
            return fail(QStringLiteral("'%1' is compressed with zip method %2; only stored and deflated entries "
                                       "(numpy.savez, numpy.savez_compressed) can be read").arg(origin).arg(method));
        if (local > n || n - local < 30 || le(z + local, 4) != 0x04034b50)
            return truncated();
        const quint64 start = local + 30 + le(z + local + 26, 2) + le(z + local + 28, 2);
        if (start > n || n - start < packedSize)
            return fail(QStringLiteral("'%1' is truncated: the entry needs %2 bytes from offset %3, the archive "
                                       "has %4 bytes").arg(origin).arg(packedSize).arg(start).arg(n));
        Result<Bytes> entry = Bytes{z + start, packedSize, file->owner, file->mapped};
        if (method == 8)
            entry = inflateEntry(z + start, packedSize, size, origin);
        else if (packedSize != size)
            return fail(QStringLiteral("'%1' is corrupt: stored with %2 bytes, but its size is %3")
                            .arg(origin).arg(packedSize).arg(size));
        if (!entry)
            return entry.takeError();
        const quint32 actualCrc = crc(entry->data, entry->size);
        if (actualCrc != storedCrc)
            return fail(QStringLiteral("'%1' is corrupt: its CRC-32 is %2, the archive says %3; copy or write "
                                       "the archive again")
                            .arg(origin).arg(actualCrc, 8, 16, QChar(u'0')).arg(storedCrc, 8, 16, QChar(u'0')));
        auto array = readArray(*entry, origin);
        if (!array)
            return array.takeError();
        arrays[name.chopped(4)] = std::move(array.value());
    }
    if (arrays.empty())
        return fail(QStringLiteral("'%1' holds no .npy arrays; write it with numpy.savez(path, x=x, y=y)").arg(path));
    return arrays;
}

Result<torch::Tensor> features(const NpyArray &x)
{
    const auto rank = x.shape.size();
    if (rank == 0 || rank > 4)
        return fail(QStringLiteral("'%1' has shape %2; features must have 1 to 4 dimensions: (N,), (N, F), "
                                   "(N, H, W) or (N, C, H, W)").arg(x.path, shapeText(x.shape)));
    if (x.tensor.numel() == 0)
        return fail(QStringLiteral("'%1' is empty (shape %2)").arg(x.path, shapeText(x.shape)));
    torch::Tensor t = x.tensor;
    // Bytes of images stay bytes, as the IDX and image-folder readers keep them.
    if (t.scalar_type() != torch::kUInt8 || rank < 3)
        t = t.to(torch::kFloat32);
    if (rank == 1 || rank == 3)
        t = t.unsqueeze(1);
    if (x.tensor.is_floating_point()) {
        const torch::Tensor badRows = torch::isfinite(t).reshape({t.size(0), -1}).all(1).logical_not();
        if (badRows.any().item<bool>())
            return fail(QStringLiteral("'%1' holds NaN or infinite values (or values too large for float32), the "
                                       "first in row %2; clean or drop those rows")
                            .arg(x.path).arg(badRows.nonzero()[0][0].item<std::int64_t>()));
    }
    return t.contiguous();
}

Result<torch::Tensor> labels(const NpyArray &y, int &numClasses)
{
    if (y.shape.size() != 1)
        return fail(QStringLiteral("'%1' has shape %2; labels must be one class index per row, shape (N,) "
                                   "(flatten them with y.ravel())").arg(y.path, shapeText(y.shape)));
    if (y.tensor.numel() == 0)
        return fail(QStringLiteral("'%1' is empty (shape %2)").arg(y.path, shapeText(y.shape)));
    const torch::Tensor v = y.tensor.to(torch::kFloat64);
    const torch::Tensor notWhole = torch::isfinite(v).logical_and(v.eq(v.round())).logical_not();
    if (notWhole.any().item<bool>()) {
        const std::int64_t i = notWhole.nonzero()[0][0].item<std::int64_t>();
        return fail(QStringLiteral("'%1' holds the label %2 at index %3, which is not a whole number; labels "
                                   "must be class indices 0, 1, 2, ...").arg(y.path).arg(v[i].item<double>()).arg(i));
    }
    const std::int64_t lowest = v.argmin().item<std::int64_t>();
    if (v[lowest].item<double>() < 0)
        return fail(QStringLiteral("'%1' holds the negative label %2 at index %3; labels must be class indices "
                                   "0, 1, 2, ...").arg(y.path).arg(v[lowest].item<double>()).arg(lowest));
    const double highest = v.max().item<double>();
    if (highest >= kMaxClasses)
        return fail(QStringLiteral("'%1' holds the label %2; labels must be class indices, and more than %3 "
                                   "classes are not supported").arg(y.path).arg(highest).arg(kMaxClasses));
    numClasses = int(highest) + 1;
    if (numClasses < 2)
        return fail(QStringLiteral("'%1' has only one class; a classifier needs at least two").arg(y.path));
    return v.to(torch::kInt64).contiguous();
}

// Regression and multi-label targets: float32 (N,) or (N, T), every value finite (multi-label:
// 0 or 1); numClasses is the targets per row.
Result<torch::Tensor> targets(const NpyArray &y, Task task, int &numClasses)
{
    const bool multiLabel = task == Task::MultiLabel;
    if (multiLabel ? y.shape.size() != 2 : (y.shape.empty() || y.shape.size() > 2))
        return fail(QStringLiteral("'%1' has shape %2; %3").arg(y.path, shapeText(y.shape),
                                                                 multiLabel ? QStringLiteral("multi-label targets are a 0 or 1 per label, shape (N, labels)")
                                                                            : QStringLiteral("regression targets are one number per row, shape (N,), or several, shape (N, targets)")));
    if (y.tensor.numel() == 0)
        return fail(QStringLiteral("'%1' is empty (shape %2)").arg(y.path, shapeText(y.shape)));
    const torch::Tensor v = y.tensor.to(torch::kFloat64);
    const torch::Tensor bad = multiLabel ? v.ne(0).logical_and(v.ne(1)) : torch::isfinite(v.to(torch::kFloat32)).logical_not();
    if (bad.any().item<bool>()) {
        const torch::Tensor first = bad.reshape({-1}).nonzero()[0][0];
        const std::int64_t i = first.item<std::int64_t>();
        const std::int64_t columns = y.shape.size() == 2 ? y.shape[1] : 1;
        return fail(QStringLiteral("'%1' holds %2 at row %3%4; %5")
                        .arg(y.path).arg(v.reshape({-1})[i].item<double>()).arg(i / columns)
                        .arg(columns > 1 ? QStringLiteral(", column %1").arg(i % columns) : QString(),
                             multiLabel ? QStringLiteral("multi-label targets must be 0 or 1")
                                        : QStringLiteral("regression targets must be finite numbers within float32's range")));
    }
    numClasses = y.shape.size() == 2 ? int(std::min<std::int64_t>(y.shape[1], kMaxClasses)) : 1;
    return v.to(torch::kFloat32).contiguous();
}

// The arrays of a NumPy data set: x and y, and where it has them x_test and y_test.
struct Pairs
{
    NpyArray x, y;
    std::optional<std::pair<NpyArray, NpyArray>> test;
};

Result<Pairs> readPair(const QString &dirOrFile, QString &name)
{
    const QFileInfo info(dirOrFile);
    if (!info.exists())
        return fail(QStringLiteral("'%1' does not exist").arg(dirOrFile));
    QString archive;
    if (info.isDir()) {
        const QDir dir(dirOrFile);
        name = info.fileName();
        const QString x = dir.filePath(QStringLiteral("x.npy")), y = dir.filePath(QStringLiteral("y.npy"));
        if (QFileInfo::exists(x) || QFileInfo::exists(y)) {
            if (!QFileInfo::exists(x) || !QFileInfo::exists(y))
                return fail(QStringLiteral("'%1' does not exist; a NumPy data set folder holds both x.npy "
                                           "(features) and y.npy (labels)").arg(QFileInfo::exists(x) ? y : x));
            auto xs = readNpy(x);
            if (!xs)
                return xs.takeError();
            auto ys = readNpy(y);
            if (!ys)
                return ys.takeError();
            Pairs out{std::move(xs.value()), std::move(ys.value()), std::nullopt};
            const QString xt = dir.filePath(QStringLiteral("x_test.npy")), yt = dir.filePath(QStringLiteral("y_test.npy"));
            if (QFileInfo::exists(xt) || QFileInfo::exists(yt)) {
                if (!QFileInfo::exists(xt) || !QFileInfo::exists(yt))
                    return fail(QStringLiteral("'%1' does not exist; a test split is x_test.npy and y_test.npy, both")
                                    .arg(QFileInfo::exists(xt) ? yt : xt));
                auto xts = readNpy(xt);
                if (!xts)
                    return xts.takeError();
                auto yts = readNpy(yt);
                if (!yts)
                    return yts.takeError();
                out.test = std::make_pair(std::move(xts.value()), std::move(yts.value()));
            }
            return out;
        }
        const QStringList npz = dir.entryList({QStringLiteral("*.npz")}, QDir::Files, QDir::Name);
        if (npz.size() != 1)
            return fail(npz.isEmpty()
                            ? QStringLiteral("'%1' holds neither x.npy and y.npy nor a .npz archive").arg(dirOrFile)
                            : QStringLiteral("'%1' holds several .npz archives (%2); pass the one to use")
                                  .arg(dirOrFile, npz.join(QStringLiteral(", "))));
        archive = dir.filePath(npz.first());
    } else if (info.suffix().compare(QLatin1String("npz"), Qt::CaseInsensitive) == 0) {
        archive = dirOrFile;
        name = info.completeBaseName();
    } else {
        return fail(QStringLiteral("'%1' is neither a folder holding x.npy and y.npy nor a .npz archive")
                        .arg(dirOrFile));
    }
    auto arrays = readZip(archive);
    if (!arrays)
        return arrays.takeError();
    for (const QString &key : {QStringLiteral("x"), QStringLiteral("y")}) {
        if (arrays->count(key) == 0) {
            QStringList held;
            for (const auto &[k, a] : *arrays)
                held << k;
            return fail(QStringLiteral("'%1' has no array '%2' (it holds %3); save it with "
                                       "numpy.savez(path, x=features, y=labels)")
                            .arg(archive, key, held.join(QStringLiteral(", "))));
        }
    }
    Pairs out{arrays->at(QStringLiteral("x")), arrays->at(QStringLiteral("y")), std::nullopt};
    const bool xTest = arrays->count(QStringLiteral("x_test")) > 0, yTest = arrays->count(QStringLiteral("y_test")) > 0;
    if (xTest != yTest)
        return fail(QStringLiteral("'%1' has an array '%2' but no '%3'; a test split is x_test and y_test, both")
                        .arg(archive, xTest ? QStringLiteral("x_test") : QStringLiteral("y_test"),
                             xTest ? QStringLiteral("y_test") : QStringLiteral("x_test")));
    if (xTest)
        out.test = std::make_pair(arrays->at(QStringLiteral("x_test")), arrays->at(QStringLiteral("y_test")));
    return out;
}

Result<Dataset> toDataset(const NpyArray &x, const NpyArray &y, Task task, const QString &name)
{
    Dataset data;
    data.name = QStringLiteral("NumPy %1").arg(name);
    auto xs = features(x);
    if (!xs)
        return xs.takeError();
    auto ys = task == Task::Regression || task == Task::MultiLabel ? targets(y, task, data.numClasses)
                                                                   : labels(y, data.numClasses);
    if (!ys)
        return ys.takeError();
    if (xs->size(0) != ys->size(0))
        return fail(QStringLiteral("'%1' has %2 rows (shape %3) but '%4' has %5 labels (shape %6); x and y "
                                   "need one row per sample")
                        .arg(x.path).arg(xs->size(0)).arg(shapeText(x.shape))
                        .arg(y.path).arg(ys->size(0)).arg(shapeText(y.shape)));
    data.features = *xs;
    data.labels = *ys;
    return data;
}

Result<NpySplits> buildSplits(const QString &dirOrFile, Task task)
{
    QString name;
    auto pairs = readPair(dirOrFile, name);
    if (!pairs)
        return pairs.takeError();
    auto train = toDataset(pairs->x, pairs->y, task, name);
    if (!train)
        return train.takeError();
    NpySplits out{std::move(train).value(), std::nullopt};
    if (pairs->test) {
        const auto &[xt, yt] = *pairs->test;
        auto test = toDataset(xt, yt, task, name);
        if (!test)
            return test.takeError();
        const auto sample = [](const torch::Tensor &t) { return std::vector<std::int64_t>(t.sizes().begin() + 1, t.sizes().end()); };
        if (sample(test->features) != sample(out.train.features) || sample(test->labels) != sample(out.train.labels)
            || test->features.scalar_type() != out.train.features.scalar_type())
            return fail(QStringLiteral("'%1' holds samples of shape %2 with labels of %3, but '%4' holds %5 with %6; "
                                       "the test split must match the training set")
                            .arg(xt.path, shapeText(sample(test->features)), shapeText(sample(test->labels)),
                                 pairs->x.path, shapeText(sample(out.train.features)),
                                 shapeText(sample(out.train.labels))));
        out.test = std::move(test).value();
    }
    return out;
}

// LibTorch reports failures, running out of memory among them, as exceptions: they stop here.
template <typename F>
auto guarded(const QString &origin, F &&body) -> decltype(body())
{
    try {
        return body();
    } catch (const c10::Error &e) {
        return fail(QStringLiteral("cannot read '%1': %2").arg(origin, QString::fromLocal8Bit(e.what_without_backtrace())));
    } catch (const std::exception &e) {
        return fail(QStringLiteral("cannot read '%1': %2").arg(origin, QString::fromLocal8Bit(e.what())));
    }
}

} // namespace

Result<NpyArray> parseNpy(const QByteArray &bytes, const QString &origin)
{
    return guarded(origin, [&] { return readArray(Bytes{bytes.constData(), quint64(bytes.size()), nullptr}, origin); });
}

Result<NpyArray> readNpy(const QString &path)
{
    return guarded(path, [&]() -> Result<NpyArray> {
        auto bytes = openBytes(path);
        if (!bytes)
            return bytes.takeError();
        return readArray(*bytes, path);
    });
}

Result<std::map<QString, NpyArray>> readNpz(const QString &path)
{
    return guarded(path, [&] { return readZip(path); });
}

Result<NpySplits> readNpySplits(const QString &dirOrFile, Task task)
{
    return guarded(dirOrFile, [&] { return buildSplits(dirOrFile, task); });
}

Result<Dataset> readNpyDataset(const QString &dirOrFile, Task task)
{
    return guarded(dirOrFile, [&]() -> Result<Dataset> {
        auto splits = buildSplits(dirOrFile, task);
        if (!splits)
            return splits.takeError();
        return std::move(splits->train);
    });
}

} // namespace flotilla
