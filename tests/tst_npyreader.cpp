// The NumPy reader on .npy files and .npz archives written byte by byte here: every dtype it
// reads, header versions 1 to 3, data sets of tables and of images, stored, deflated and zip64
// archives, a file large enough to be memory-mapped, every kind of broken file it must refuse
// (each error naming the file), and files written by NumPy itself when it is installed.
#include "TestFiles.h"
#include "engine/data/NpyReader.h"

#include <QDir>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <zlib.h>

#include <cstring>
#include <limits>

using namespace flotilla;

namespace {

template <typename T>
QByteArray raw(const std::vector<T> &values)
{
    return QByteArray(reinterpret_cast<const char *>(values.data()), qsizetype(values.size() * sizeof(T)));
}

QByteArray shapeLiteral(const std::vector<std::int64_t> &shape)
{
    QByteArray s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += QByteArray::number(qint64(shape[i])) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
    return s + ")";
}

// A .npy file with the given header dict, padded as numpy.save pads it (data at a multiple
// of 64 bytes) unless `pad` is false.
QByteArray npyWithHeader(const QByteArray &dict, const QByteArray &data, int major = 1, bool pad = true)
{
    const int lengthBytes = major == 1 ? 2 : 4;
    QByteArray header = dict;
    if (pad) {
        while ((6 + 2 + lengthBytes + header.size() + 1) % 64 != 0)
            header += ' ';
    }
    header += '\n';
    QByteArray out("\x93NUMPY", 6);
    out += char(major);
    out += char(0);
    for (int i = 0; i < lengthBytes; ++i)
        out += char((header.size() >> (8 * i)) & 0xFF);
    return out + header + data;
}

QByteArray npy(const QByteArray &descr, const std::vector<std::int64_t> &shape, const QByteArray &data, int major = 1,
               bool fortran = false, bool pad = true)
{
    const QByteArray dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False")
                            + ", 'shape': " + shapeLiteral(shape) + ", }";
    return npyWithHeader(dict, data, major, pad);
}

void put(QByteArray &out, quint64 value, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out += char((value >> (8 * i)) & 0xFF);
}

QByteArray rawDeflate(const QByteArray &data)
{
    z_stream zs{};
    if (deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return {};
    QByteArray out(qsizetype(deflateBound(&zs, uLong(data.size()))), Qt::Uninitialized);
    zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data.constData()));
    zs.avail_in = uInt(data.size());
    zs.next_out = reinterpret_cast<Bytef *>(out.data());
    zs.avail_out = uInt(out.size());
    const int rc = deflate(&zs, Z_FINISH);
    out.resize(qsizetype(zs.total_out));
    deflateEnd(&zs);
    return rc == Z_STREAM_END ? out : QByteArray();
}

struct ZipEntry
{
    QByteArray name;
    QByteArray data;
    bool deflate = false;
};

// A zip archive as numpy.savez (stored) or numpy.savez_compressed (deflated) writes it; with
// `zip64`, sizes and offsets are in zip64 extra fields and a zip64 end record.
QByteArray zip(const QList<ZipEntry> &entries, bool zip64 = false)
{
    QByteArray body;
    QByteArray directory;
    for (const ZipEntry &e : entries) {
        const QByteArray packed = e.deflate ? rawDeflate(e.data) : e.data;
        const quint32 crc = quint32(crc32(0, reinterpret_cast<const Bytef *>(e.data.constData()), uInt(e.data.size())));
        const quint64 offset = quint64(body.size());
        put(body, 0x04034b50, 4);
        put(body, 20, 2);
        put(body, 0, 2);
        put(body, e.deflate ? 8 : 0, 2);
        put(body, 0, 2);
        put(body, 0x21, 2);
        put(body, crc, 4);
        put(body, quint64(packed.size()), 4);
        put(body, quint64(e.data.size()), 4);
        put(body, quint64(e.name.size()), 2);
        put(body, 0, 2);
        body += e.name + packed;

        put(directory, 0x02014b50, 4);
        put(directory, 45, 2);
        put(directory, zip64 ? 45 : 20, 2);
        put(directory, 0, 2);
        put(directory, e.deflate ? 8 : 0, 2);
        put(directory, 0, 2);
        put(directory, 0x21, 2);
        put(directory, crc, 4);
        put(directory, zip64 ? 0xFFFFFFFF : quint64(packed.size()), 4);
        put(directory, zip64 ? 0xFFFFFFFF : quint64(e.data.size()), 4);
        put(directory, quint64(e.name.size()), 2);
        put(directory, zip64 ? 28 : 0, 2);
        put(directory, 0, 2);
        put(directory, 0, 2);
        put(directory, 0, 2);
        put(directory, 0, 4);
        put(directory, zip64 ? 0xFFFFFFFF : offset, 4);
        directory += e.name;
        if (zip64) {
            put(directory, 1, 2);
            put(directory, 24, 2);
            put(directory, quint64(e.data.size()), 8);
            put(directory, quint64(packed.size()), 8);
            put(directory, offset, 8);
        }
    }
    QByteArray out = body + directory;
    const quint64 count = quint64(entries.size());
    if (zip64) {
        const quint64 record = quint64(out.size());
        put(out, 0x06064b50, 4);
        put(out, 44, 8);
        put(out, 45, 2);
        put(out, 45, 2);
        put(out, 0, 4);
        put(out, 0, 4);
        put(out, count, 8);
        put(out, count, 8);
        put(out, quint64(directory.size()), 8);
        put(out, quint64(body.size()), 8);
        put(out, 0x07064b50, 4);
        put(out, 0, 4);
        put(out, record, 8);
        put(out, 1, 4);
    }
    put(out, 0x06054b50, 4);
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, zip64 ? 0xFFFF : count, 2);
    put(out, zip64 ? 0xFFFF : count, 2);
    put(out, zip64 ? 0xFFFFFFFF : quint64(directory.size()), 4);
    put(out, zip64 ? 0xFFFFFFFF : quint64(body.size()), 4);
    put(out, 0, 2);
    return out;
}

// A 4×3 float64 table whose row r, column c holds r + c / 10, and its labels 0 2 1 2.
QByteArray tableX()
{
    std::vector<double> v;
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 3; ++c)
            v.push_back(r + c / 10.0);
    return npy("<f8", {4, 3}, raw(v));
}

QByteArray tableY()
{
    return npy("<i8", {4}, raw(std::vector<std::int64_t>{0, 2, 1, 2}));
}

bool hasNumpy()
{
    QProcess p;
    p.start(QStringLiteral(FLOTILLA_PYTHON), {QStringLiteral("-c"), QStringLiteral("import numpy")});
    return p.waitForFinished(60000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

} // namespace

class TestNpyReader : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_subdirs = 0;

    QString path(const QString &name) const { return m_dir.filePath(name); }
    QString write(const QString &name, const QByteArray &bytes) const
    {
        test::writeFile(path(name), bytes);
        return path(name);
    }
    // A new empty folder, its name starting with `stem`.
    QString folder(const QString &stem)
    {
        const QString name = stem + QString::number(++m_subdirs);
        QDir(m_dir.path()).mkdir(name);
        return path(name);
    }
    QString dataFolder(const QByteArray &x, const QByteArray &y)
    {
        const QString dir = folder(QStringLiteral("set"));
        test::writeFile(dir + QStringLiteral("/x.npy"), x);
        test::writeFile(dir + QStringLiteral("/y.npy"), y);
        return dir;
    }

    template <typename T>
    void roundTrip(const char *descr, const std::vector<T> &values, const torch::Tensor &expected)
    {
        const QString file = write(QStringLiteral("dtype.npy"), npy(descr, {qint64(values.size())}, raw(values)));
        auto a = readNpy(file);
        QVERIFY2(a.ok(), qPrintable(a.error()));
        QCOMPARE(a->dtype, QString::fromLatin1(descr));
        QCOMPARE(a->shape, (std::vector<std::int64_t>{std::int64_t(values.size())}));
        QCOMPARE(a->path, file);
        QVERIFY2(a->tensor.scalar_type() == expected.scalar_type(), descr);
        QVERIFY2(torch::equal(a->tensor, expected), descr);
    }

    static void checkError(const QString &error, const QString &file, const QString &phrase)
    {
        QVERIFY2(!error.isEmpty(), "an error was expected");
        QVERIFY2(error.contains(file), qPrintable(QStringLiteral("no '%1' in: %2").arg(file, error)));
        QVERIFY2(error.contains(phrase), qPrintable(QStringLiteral("no '%1' in: %2").arg(phrase, error)));
    }
    template <typename T>
    static void refused(const Result<T> &r, const QString &file, const char *phrase)
    {
        QVERIFY2(!r.ok(), phrase);
        checkError(r.error(), file, QString::fromUtf8(phrase));
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void everyDtypeRoundTrips()
    {
        roundTrip<std::uint8_t>("|u1", {0, 7, 255}, torch::tensor({0, 7, 255}).to(torch::kUInt8));
        roundTrip<std::int8_t>("|i1", {-128, 0, 127}, torch::tensor({-128, 0, 127}).to(torch::kInt8));
        roundTrip<std::uint8_t>("|b1", {0, 1, 1}, torch::tensor({0, 1, 1}).to(torch::kBool));
        roundTrip<std::int16_t>("<i2", {-32768, 1, 32767}, torch::tensor({-32768, 1, 32767}).to(torch::kInt16));
        // LibTorch has no uint16 or uint32: they are widened, keeping their values.
        roundTrip<std::uint16_t>("<u2", {0, 1, 65535}, torch::tensor({0, 1, 65535}).to(torch::kInt32));
        roundTrip<std::int32_t>("<i4", {std::numeric_limits<std::int32_t>::min(), 5, 2147483647},
                                torch::tensor(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 5,
                                                                        2147483647})
                                    .to(torch::kInt32));
        roundTrip<std::uint32_t>("<u4", {0, 1, 4294967295u},
                                 torch::tensor(std::vector<std::int64_t>{0, 1, 4294967295LL}));
        const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
        roundTrip<std::int64_t>("<i8", {lo, 42, hi}, torch::tensor(std::vector<std::int64_t>{lo, 42, hi}));
        // float16 bit patterns of 1, -2 and 0.5.
        roundTrip<std::uint16_t>("<f2", {0x3C00, 0xC000, 0x3800}, torch::tensor({1.0, -2.0, 0.5}).to(torch::kHalf));
        roundTrip<float>("<f4", {1.5f, -0.25f, 3e38f}, torch::tensor(std::vector<float>{1.5f, -0.25f, 3e38f}));
        roundTrip<double>("<f8", {1e-300, -2.5, 1e300}, torch::tensor(std::vector<double>{1e-300, -2.5, 1e300}, torch::kFloat64));
        // A single-byte type may carry any byte order mark.
        roundTrip<std::uint8_t>(">u1", {9}, torch::tensor({9}).to(torch::kUInt8));
    }

    void shapesKeepCOrder()
    {
        std::vector<std::int32_t> v(24);
        for (int i = 0; i < 24; ++i)
            v[std::size_t(i)] = i;
        auto a = parseNpy(npy("<i4", {2, 3, 4}, raw(v)), QStringLiteral("mem"));
        QVERIFY2(a.ok(), qPrintable(a.error()));
        QCOMPARE(a->tensor.sizes().vec(), (std::vector<std::int64_t>{2, 3, 4}));
        QCOMPARE(a->tensor[1][2][3].item<std::int32_t>(), 23);
        QCOMPARE(a->tensor[1][0][1].item<std::int32_t>(), 13);
        QVERIFY(!a->mapped);

        auto scalar = parseNpy(npy("<f8", {}, raw(std::vector<double>{6.5})), QStringLiteral("scalar"));
        QVERIFY2(scalar.ok(), qPrintable(scalar.error()));
        QCOMPARE(scalar->tensor.dim(), std::int64_t(0));
        QCOMPARE(scalar->tensor.item<double>(), 6.5);

        // Fortran order is the same layout when there is only one dimension.
        auto column = parseNpy(npy("<f4", {2}, raw(std::vector<float>{1, 2}), 1, true), QStringLiteral("f"));
        QVERIFY2(column.ok(), qPrintable(column.error()));
    }

    void headerVersionsOneTwoAndThree()
    {
        const QByteArray data = raw(std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f});
        for (int major : {1, 2, 3}) {
            const QByteArray bytes = npy("<f4", {2, 2}, data, major);
            QCOMPARE(bytes.size() - data.size(), qsizetype(128)); // padded to 64, as numpy.save writes it
            auto a = readNpy(write(QStringLiteral("v%1.npy").arg(major), bytes));
            QVERIFY2(a.ok(), qPrintable(a.error()));
            QCOMPARE(a->tensor[1][1].item<float>(), 3.5f);
        }
        // An unpadded header puts the data at an odd offset: read by copying.
        const QByteArray odd = npy("<f4", {4}, data, 2, false, false);
        QVERIFY((odd.size() - data.size()) % 4 != 0);
        auto a = readNpy(write(QStringLiteral("odd.npy"), odd));
        QVERIFY2(a.ok(), qPrintable(a.error()));
        QCOMPARE(a->tensor[3].item<float>(), 3.5f);
        // Python 2's numpy wrote shapes with long integers.
        auto longs = parseNpy(npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L)}", data),
                              QStringLiteral("py2"));
        QVERIFY2(longs.ok(), qPrintable(longs.error()));
        QCOMPARE(longs->shape, (std::vector<std::int64_t>{2, 2}));
    }

    void tabularDataset()
    {
        const QString dir = dataFolder(tableX(), tableY());
        auto data = readNpyDataset(dir);
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QCOMPARE(data->name, QStringLiteral("NumPy %1").arg(QFileInfo(dir).fileName()));
        QVERIFY(!data->isImages());
        QVERIFY(data->features.scalar_type() == torch::kFloat32);
        QVERIFY(data->features.is_contiguous());
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{4, 3}));
        QCOMPARE(data->features[3][2].item<float>(), 3.2f);
        QVERIFY(data->labels.scalar_type() == torch::kInt64);
        QVERIFY(torch::equal(data->labels, torch::tensor(std::vector<std::int64_t>{0, 2, 1, 2})));
        QCOMPARE(data->numClasses, 3);

        // Labels of another integer type, or floats that are whole numbers, will do.
        for (const QByteArray &y : {npy("|u1", {4}, raw(std::vector<std::uint8_t>{0, 2, 1, 2})),
                                    npy("<u2", {4}, raw(std::vector<std::uint16_t>{0, 2, 1, 2})),
                                    npy("<f4", {4}, raw(std::vector<float>{0, 2, 1, 2}))}) {
            auto d = readNpyDataset(dataFolder(tableX(), y));
            QVERIFY2(d.ok(), qPrintable(d.error()));
            QVERIFY(torch::equal(d->labels, data->labels));
        }
        // One feature per row.
        auto flat = readNpyDataset(dataFolder(npy("<i4", {4}, raw(std::vector<std::int32_t>{5, 6, 7, 8})), tableY()));
        QVERIFY2(flat.ok(), qPrintable(flat.error()));
        QCOMPARE(flat->features.sizes().vec(), (std::vector<std::int64_t>{4, 1}));
        QCOMPARE(flat->features[3][0].item<float>(), 8.0f);
    }

    void byteImagesStayBytes()
    {
        QByteArray pixels(3 * 28 * 28, Qt::Uninitialized);
        for (int i = 0; i < pixels.size(); ++i)
            pixels[i] = char((i * 13) % 256);
        const QByteArray y = npy("<i8", {3}, raw(std::vector<std::int64_t>{1, 0, 9}));
        auto data = readNpyDataset(dataFolder(npy("|u1", {3, 28, 28}, pixels), y));
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QVERIFY(data->isImages());
        QVERIFY(data->features.scalar_type() == torch::kUInt8);
        QVERIFY(data->features.is_contiguous());
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{3, 1, 28, 28}));
        QVERIFY(std::memcmp(data->features.data_ptr(), pixels.constData(), std::size_t(pixels.size())) == 0);
        QCOMPARE(data->numClasses, 10);

        auto colour = readNpyDataset(dataFolder(npy("|u1", {3, 3, 4, 4}, QByteArray(3 * 48, char(200))), y));
        QVERIFY2(colour.ok(), qPrintable(colour.error()));
        QCOMPARE(colour->features.sizes().vec(), (std::vector<std::int64_t>{3, 3, 4, 4}));
        QVERIFY(colour->features.scalar_type() == torch::kUInt8);

        // Float images become float32 N×1×H×W.
        auto floats = readNpyDataset(dataFolder(npy("<f8", {3, 2, 2}, raw(std::vector<double>(12, 0.25))), y));
        QVERIFY2(floats.ok(), qPrintable(floats.error()));
        QCOMPARE(floats->features.sizes().vec(), (std::vector<std::int64_t>{3, 1, 2, 2}));
        QVERIFY(floats->features.scalar_type() == torch::kFloat32);
    }

    void npzStoredDeflatedAndZip64()
    {
        const QList<ZipEntry> stored{{"x.npy", tableX()}, {"y.npy", tableY()}};
        const QList<ZipEntry> deflated{{"x.npy", tableX(), true}, {"y.npy", tableY(), true}};
        const QByteArray archives[] = {zip(stored), zip(deflated), zip(deflated, true)};
        for (const QByteArray &bytes : archives) {
            const QString file = write(QStringLiteral("data.npz"), bytes);
            auto arrays = readNpz(file);
            QVERIFY2(arrays.ok(), qPrintable(arrays.error()));
            QCOMPARE(arrays->size(), std::size_t(2));
            const NpyArray &x = arrays->at(QStringLiteral("x"));
            QCOMPARE(x.path, file + QStringLiteral(":x.npy"));
            QCOMPARE(x.dtype, QStringLiteral("<f8"));
            QCOMPARE(x.tensor[2][1].item<double>(), 2.1);

            auto data = readNpyDataset(file);
            QVERIFY2(data.ok(), qPrintable(data.error()));
            QCOMPARE(data->name, QStringLiteral("NumPy data"));
            QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{4, 3}));
            QCOMPARE(data->numClasses, 3);
        }
        // A folder holding one archive.
        const QString dir = folder(QStringLiteral("npz"));
        test::writeFile(dir + QStringLiteral("/mnist.npz"), zip(deflated));
        auto data = readNpyDataset(dir);
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QCOMPARE(data->size(), std::int64_t(4));
    }

    void largeFileIsMapped()
    {
        // 70000×1×32×32 bytes = 71.7 MB, past the 64 MiB above which files are mapped.
        constexpr std::int64_t n = 70000;
        QByteArray pixels(n * 1024, Qt::Uninitialized);
        for (qsizetype i = 0; i < pixels.size(); ++i)
            pixels[i] = char((i * 7) % 251);
        std::vector<std::int64_t> y(n);
        for (std::int64_t i = 0; i < n; ++i)
            y[std::size_t(i)] = i % 10;
        const QString dir = dataFolder(npy("|u1", {n, 1, 32, 32}, pixels), npy("<i8", {n}, raw(y)));
        pixels.clear();
        const QString xPath = dir + QStringLiteral("/x.npy");

        torch::Tensor kept;
        {
            auto x = readNpy(xPath);
            QVERIFY2(x.ok(), qPrintable(x.error()));
            QVERIFY(x->mapped);
            kept = x->tensor;
        }
        // The tensor keeps the mapping alive after the array is gone.
        QCOMPARE(int(kept[n - 1][0][31][31].item<std::uint8_t>()), int((n * 1024 - 1) * 7 % 251));
        // The mapping is private: writing through it changes neither the file nor a new read.
        kept[0][0][0][0] = 99;
        QCOMPARE(int(kept[0][0][0][0].item<std::uint8_t>()), 99);
        auto again = readNpy(xPath);
        QVERIFY2(again.ok(), qPrintable(again.error()));
        QCOMPARE(int(again->tensor[0][0][0][0].item<std::uint8_t>()), 0);
        kept = torch::Tensor();

        auto data = readNpyDataset(dir);
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QVERIFY(data->features.scalar_type() == torch::kUInt8);
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{n, 1, 32, 32}));
        QCOMPARE(int(data->features[12345][0][3][4].item<std::uint8_t>()), int((12345 * 1024 + 3 * 32 + 4) * 7 % 251));
        QCOMPARE(data->numClasses, 10);

        // A mapped file cut short is refused as any other.
        QVERIFY(QFile::resize(xPath, QFileInfo(xPath).size() - 1));
        auto cut = readNpy(xPath);
        refused(cut, xPath, "is truncated");
        QVERIFY2(cut.error().contains(QStringLiteral("71680000 bytes of data")), qPrintable(cut.error()));
        QVERIFY2(cut.error().contains(QStringLiteral("only 71679999 bytes")), qPrintable(cut.error()));
        QVERIFY(QDir(dir).removeRecursively());
    }

    void truncatedAndOverlongData()
    {
        const QByteArray full = npy("<f8", {3}, raw(std::vector<double>{1, 2, 3}));
        const QString file = write(QStringLiteral("cut.npy"), full.chopped(4));
        auto r = readNpy(file);
        refused(r, file, "is truncated");
        QVERIFY2(r.error().contains(QStringLiteral("shape (3,) of '<f8', 24 bytes of data")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QStringLiteral("only 20 bytes")), qPrintable(r.error()));

        const QString header = write(QStringLiteral("header.npy"), full.left(40));
        refused(readNpy(header), header, "is truncated");

        const QString twice = write(QStringLiteral("twice.npy"), full + full);
        refused(readNpy(twice), twice, "several arrays");
    }

    void bigEndianIsRefused()
    {
        const QString file = write(QStringLiteral("be.npy"), npy(">f4", {1}, QByteArray(4, char(0))));
        refused(readNpy(file), file, "is big-endian (dtype '>f4')");
        refused(readNpy(file), file, "x.astype('<f4')");
    }

    void fortranOrderIsRefused()
    {
        const QString file = write(QStringLiteral("fortran.npy"), npy("<f4", {2, 2}, QByteArray(16, char(0)), 1, true));
        refused(readNpy(file), file, "Fortran (column-major) order");
    }

    void objectsAndOtherDtypesAreRefused()
    {
        const QString objects = write(QStringLiteral("objects.npy"), npy("|O", {2}, QByteArray(16, char(0))));
        refused(readNpy(objects), objects, "pickled objects cannot be read; save a numeric array");
        const QString complex = write(QStringLiteral("complex.npy"), npy("<c8", {2}, QByteArray(16, char(0))));
        refused(readNpy(complex), complex, "dtype '<c8', which cannot be read");
        const QString text = write(QStringLiteral("text.npy"), npy("<U3", {2}, QByteArray(24, char(0))));
        refused(readNpy(text), text, "dtype '<U3', which cannot be read");
        const QString records = write(QStringLiteral("records.npy"),
                                      npyWithHeader("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, "
                                                    "'shape': (1,), }",
                                                    QByteArray(8, char(0))));
        refused(readNpy(records), records, "structured (record) array");
    }

    void malformedHeadersAreRefused()
    {
        const QByteArray data(8, char(0));
        const QByteArray headers[] = {
            "{'descr': '<f4', 'shape': (2,), }",                                  // a key missing
            "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",           // not a boolean
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }",        // negative dimension
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }",            // not a tuple
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",     // unknown key
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",              // no closing brace
            "{'descr': '<f4 , 'fortran_order': False, 'shape': (2,)}",             // quote unbalanced
            "['descr', '<f4']",                                                    // not a dict
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk",        // text after it
        };
        for (const QByteArray &header : headers) {
            const QString file = write(QStringLiteral("malformed.npy"), npyWithHeader(header, data));
            auto r = readNpy(file);
            QVERIFY2(!r.ok(), header.constData());
            checkError(r.error(), file, QStringLiteral("malformed .npy header"));
        }
    }

    void badMagicAndVersionAreRefused()
    {
        QByteArray bytes = npy("<f4", {1}, QByteArray(4, char(0)));
        bytes[1] = 'X';
        const QString file = write(QStringLiteral("magic.npy"), bytes);
        refused(readNpy(file), file, "is not a NumPy .npy file");

        const QString zipped = write(QStringLiteral("zipped.npy"), zip({{"x.npy", tableX()}}));
        refused(readNpy(zipped), zipped, "it looks like a .npz archive");

        bytes = npy("<f4", {1}, QByteArray(4, char(0)));
        bytes[6] = char(4);
        const QString v4 = write(QStringLiteral("v4.npy"), bytes);
        refused(readNpy(v4), v4, "format version 4.0");

        const QString tiny = write(QStringLiteral("tiny.npy"), QByteArray("\x93NUM", 4));
        refused(readNpy(tiny), tiny, "is not a NumPy .npy file");

        const QString missing = path(QStringLiteral("missing.npy"));
        refused(readNpy(missing), missing, "does not exist");
    }

    void absurdShapesAreRefusedBeforeAllocating()
    {
        const QString huge = write(QStringLiteral("huge.npy"), npy("<f4", {1099511627777LL}, {}));
        refused(readNpy(huge), huge, "more than 2^40 elements");
        const QString product = write(QStringLiteral("product.npy"), npy("<f4", {1 << 30, 1 << 30, 1 << 30}, {}));
        refused(readNpy(product), product, "more than 2^40 elements");
        const QString digits = write(QStringLiteral("digits.npy"),
                                     npy("|u1", {}, {}).replace("()", "(99999999999999999999999999,)"));
        refused(readNpy(digits), digits, "more than 2^40 elements");
    }

    void labelCountMustMatchRows()
    {
        const QByteArray x = npy("<f4", {600, 2}, QByteArray(600 * 8, char(0)));
        std::vector<std::int64_t> y(599);
        for (std::size_t i = 0; i < y.size(); ++i)
            y[i] = std::int64_t(i % 2);
        const QString dir = dataFolder(x, npy("<i8", {599}, raw(y)));
        auto r = readNpyDataset(dir);
        refused(r, dir + QStringLiteral("/x.npy"), "has 600 rows (shape (600, 2))");
        checkError(r.error(), dir + QStringLiteral("/y.npy"), QStringLiteral("has 599 labels (shape (599,))"));
    }

    void badLabelsAreRefused()
    {
        const QString negative = dataFolder(tableX(), npy("<i4", {4}, raw(std::vector<std::int32_t>{0, 1, -1, 2})));
        refused(readNpyDataset(negative), negative + QStringLiteral("/y.npy"), "negative label -1 at index 2");

        const QString fractional = dataFolder(tableX(), npy("<f4", {4}, raw(std::vector<float>{0, 1.5f, 1, 2})));
        refused(readNpyDataset(fractional), fractional + QStringLiteral("/y.npy"),
                "label 1.5 at index 1, which is not a whole number");

        const float nan = std::numeric_limits<float>::quiet_NaN();
        const QString nanLabel = dataFolder(tableX(), npy("<f4", {4}, raw(std::vector<float>{0, 1, 1, nan})));
        refused(readNpyDataset(nanLabel), nanLabel + QStringLiteral("/y.npy"), "not a whole number");

        const QString column = dataFolder(tableX(), npy("<i8", {4, 1}, raw(std::vector<std::int64_t>{0, 1, 1, 0})));
        refused(readNpyDataset(column), column + QStringLiteral("/y.npy"), "shape (N,)");

        const QString oneClass = dataFolder(tableX(), npy("<i8", {4}, raw(std::vector<std::int64_t>(4, 0))));
        refused(readNpyDataset(oneClass), oneClass + QStringLiteral("/y.npy"), "only one class");

        const QString tooMany = dataFolder(tableX(), npy("<i8", {4}, raw(std::vector<std::int64_t>{0, 1, 1, 1LL << 40})));
        refused(readNpyDataset(tooMany), tooMany + QStringLiteral("/y.npy"), "classes are not supported");
    }

    void badFeaturesAreRefused()
    {
        std::vector<float> v(12, 1.0f);
        v[7] = std::numeric_limits<float>::quiet_NaN();
        const QString nan = dataFolder(npy("<f4", {4, 3}, raw(v)), tableY());
        refused(readNpyDataset(nan), nan + QStringLiteral("/x.npy"), "NaN or infinite values");
        refused(readNpyDataset(nan), nan + QStringLiteral("/x.npy"), "the first in row 2");

        // Finite as float64, infinite as float32.
        const QString big = dataFolder(npy("<f8", {4}, raw(std::vector<double>{1, 2, 1e300, 4})), tableY());
        refused(readNpyDataset(big), big + QStringLiteral("/x.npy"), "too large for float32");

        const QString five = dataFolder(npy("|u1", {4, 1, 1, 1, 1}, QByteArray(4, char(0))), tableY());
        refused(readNpyDataset(five), five + QStringLiteral("/x.npy"), "1 to 4 dimensions");
        const QString scalar = dataFolder(npy("<f4", {}, QByteArray(4, char(0))), tableY());
        refused(readNpyDataset(scalar), scalar + QStringLiteral("/x.npy"), "1 to 4 dimensions");
        const QString empty = dataFolder(npy("<f4", {0, 3}, {}), npy("<i8", {0}, {}));
        refused(readNpyDataset(empty), empty + QStringLiteral("/x.npy"), "is empty");
    }

    void missingFilesAreNamed()
    {
        const QString dir = folder(QStringLiteral("onlyx"));
        test::writeFile(dir + QStringLiteral("/x.npy"), tableX());
        refused(readNpyDataset(dir), dir + QStringLiteral("/y.npy"), "does not exist");

        const QString none = folder(QStringLiteral("none"));
        refused(readNpyDataset(none), none, "neither x.npy and y.npy nor a .npz archive");

        const QString two = folder(QStringLiteral("two"));
        test::writeFile(two + QStringLiteral("/a.npz"), zip({{"x.npy", tableX()}}));
        test::writeFile(two + QStringLiteral("/b.npz"), zip({{"x.npy", tableX()}}));
        refused(readNpyDataset(two), two, "several .npz archives (a.npz, b.npz)");

        const QString noY = write(QStringLiteral("noy.npz"), zip({{"x.npy", tableX()}, {"labels.npy", tableY()}}));
        refused(readNpyDataset(noY), noY, "has no array 'y' (it holds labels, x)");

        const QString missing = path(QStringLiteral("nowhere"));
        refused(readNpyDataset(missing), missing, "does not exist");
    }

    void brokenArchivesAreRefused()
    {
        // One byte of stored data changed: only the CRC can tell.
        QByteArray stored = zip({{"x.npy", tableX()}, {"y.npy", tableY()}});
        const qsizetype at = stored.indexOf(QByteArray::fromRawData("\x9a\x99\x99\x99", 4)); // 0.1
        QVERIFY(at > 0);
        stored[at] = char(0x9b);
        const QString crc = write(QStringLiteral("crc.npz"), stored);
        auto r = readNpz(crc);
        refused(r, crc + QStringLiteral(":x.npy"), "is corrupt: its CRC-32 is");

        QByteArray deflated = zip({{"x.npy", tableX(), true}});
        const QByteArray packed = rawDeflate(tableX());
        const qsizetype start = deflated.indexOf(packed);
        QVERIFY(start > 0);
        deflated[start + packed.size() / 2] = char(deflated[start + packed.size() / 2] ^ 0x55);
        const QString corrupt = write(QStringLiteral("corrupt.npz"), deflated);
        refused(readNpz(corrupt), corrupt + QStringLiteral(":x.npy"), "is corrupt");

        const QByteArray whole = zip({{"x.npy", tableX()}});
        const QString cut = write(QStringLiteral("cut.npz"), whole.left(whole.size() - 30));
        refused(readNpz(cut), cut, "is truncated or is not a .npz (zip) archive");

        const QString plain = write(QStringLiteral("plain.npz"), tableX());
        refused(readNpz(plain), plain, "is not a .npz (zip) archive");

        const QString empty = write(QStringLiteral("empty.npz"), zip({{"readme.txt", "hello"}}));
        refused(readNpz(empty), empty, "holds no .npy arrays");

        // An entry whose array is broken is named with its archive.
        const QString inner = write(QStringLiteral("inner.npz"), zip({{"x.npy", npy(">f8", {1}, QByteArray(8, char(0)))}}));
        refused(readNpz(inner), inner + QStringLiteral(":x.npy"), "is big-endian");
    }

    void filesWrittenByNumpy()
    {
        if (!hasNumpy())
            QSKIP("NumPy is not installed for " FLOTILLA_PYTHON);
        const QString dir = folder(QStringLiteral("numpy"));
        const QString script = QStringLiteral(
            "import sys, numpy as np\n"
            "d = sys.argv[1]\n"
            "x = np.arange(24, dtype=np.float32).reshape(6, 4) / np.float32(7)\n"
            "y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)\n"
            "np.save(d + '/x.npy', x)\n"
            "np.save(d + '/y.npy', y)\n"
            "np.savez(d + '/stored.npz', x=x, y=y)\n"
            "np.savez_compressed(d + '/compressed.npz', x=x, y=y.astype(np.uint8))\n"
            "np.save(d + '/images.npy', (np.arange(6 * 28 * 28) % 256).astype(np.uint8).reshape(6, 28, 28))\n"
            "np.save(d + '/be.npy', x.astype('>f4'))\n"
            "np.save(d + '/fortran.npy', np.asfortranarray(x))\n");
        QProcess python;
        python.start(QStringLiteral(FLOTILLA_PYTHON), {QStringLiteral("-c"), script, dir});
        QVERIFY(python.waitForFinished(60000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());

        const torch::Tensor x = torch::arange(24, torch::kFloat32).reshape({6, 4}) / 7.0f;
        auto fromNpy = readNpy(dir + QStringLiteral("/x.npy"));
        QVERIFY2(fromNpy.ok(), qPrintable(fromNpy.error()));
        QCOMPARE(fromNpy->dtype, QStringLiteral("<f4"));
        QVERIFY(torch::equal(fromNpy->tensor, x));
        for (const char *archive : {"/stored.npz", "/compressed.npz"}) {
            auto arrays = readNpz(dir + QLatin1String(archive));
            QVERIFY2(arrays.ok(), qPrintable(arrays.error()));
            QVERIFY(torch::equal(arrays->at(QStringLiteral("x")).tensor, x));
            QCOMPARE(arrays->at(QStringLiteral("y")).tensor.to(torch::kInt64)[5].item<std::int64_t>(), std::int64_t(2));
        }
        auto data = readNpyDataset(dir);
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QVERIFY(torch::equal(data->features, x));
        QCOMPARE(data->numClasses, 3);
        auto images = readNpy(dir + QStringLiteral("/images.npy"));
        QVERIFY2(images.ok(), qPrintable(images.error()));
        QCOMPARE(images->dtype, QStringLiteral("|u1"));
        QCOMPARE(int(images->tensor[5][27][27].item<std::uint8_t>()), (6 * 28 * 28 - 1) % 256);
        refused(readNpy(dir + QStringLiteral("/be.npy")), dir + QStringLiteral("/be.npy"), "big-endian");
        refused(readNpy(dir + QStringLiteral("/fortran.npy")), dir + QStringLiteral("/fortran.npy"), "Fortran");
    }
};

QTEST_GUILESS_MAIN(TestNpyReader)
#include "tst_npyreader.moc"
