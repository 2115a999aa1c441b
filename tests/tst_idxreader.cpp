// The IDX reader on small hand-made files, raw and gzipped, on every kind of broken file it
// must refuse, and on the real Fashion-MNIST training set when it is installed.
#include "TestSupport.h"
#include "engine/data/IdxReader.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

// Three 2×3 images with pixel values 0, 51, 102, ... and their labels.
constexpr int kImages = 3;
constexpr int kRows = 2;
constexpr int kCols = 3;

QByteArray pixels()
{
    QByteArray p;
    for (int i = 0; i < kImages * kRows * kCols; ++i)
        p.append(char((i * 15) % 256));
    return p;
}

QByteArray imagesIdx()
{
    return test::idxBytes(0x08, {kImages, kRows, kCols}, pixels());
}

QByteArray labelsIdx()
{
    return test::idxBytes(0x08, {kImages}, QByteArray("\x04\x00\x02", 3));
}

} // namespace

class TestIdxReader : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    QString path(const char *name) const { return m_dir.filePath(QString::fromLatin1(name)); }

    // Writes both files and loads them as a data set.
    Result<Dataset> loadPair(const QByteArray &images, const QByteArray &labels)
    {
        test::writeFile(path("images"), images);
        test::writeFile(path("labels"), labels);
        return loadIdxDataset(path("images"), path("labels"), QStringLiteral("tiny"));
    }

    void checkTinyDataset(const Result<Dataset> &data)
    {
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QCOMPARE(data->name, QStringLiteral("tiny"));
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{kImages, 1, kRows, kCols}));
        // Kept as the bytes of the file: batches are scaled and normalized as they are made.
        QVERIFY(data->features.scalar_type() == torch::kUInt8);
        QVERIFY(data->features.is_contiguous());
        const QByteArray raw = pixels();
        const std::uint8_t *f = data->features.data_ptr<std::uint8_t>();
        for (int i = 0; i < raw.size(); ++i)
            QCOMPARE(int(f[i]), int(static_cast<unsigned char>(raw[i])));
        QCOMPARE(int(data->features.max().item<std::uint8_t>()), 255);
        QCOMPARE(int(data->features.min().item<std::uint8_t>()), 0);
        QVERIFY(data->labels.scalar_type() == torch::kInt64);
        QCOMPARE(data->labels.sizes().vec(), (std::vector<std::int64_t>{kImages}));
        QCOMPARE(data->labels[0].item<std::int64_t>(), std::int64_t(4));
        QCOMPARE(data->labels[1].item<std::int64_t>(), std::int64_t(0));
        QCOMPARE(data->labels[2].item<std::int64_t>(), std::int64_t(2));
        QCOMPARE(data->numClasses, 5);
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void parsesHeaderAndPayload()
    {
        const QByteArray payload("\x01\x02\x03\x04\x05\x06", 6);
        auto a = parseIdx(test::idxBytes(0x08, {2, 3}, payload), QStringLiteral("mem"));
        QVERIFY2(a.ok(), qPrintable(a.error()));
        QCOMPARE(int(a->type), 0x08);
        QCOMPARE(a->dims, (std::vector<std::int64_t>{2, 3}));
        QCOMPARE(a->data, payload);
    }

    void rawRoundTrip()
    {
        // 18 = 3·2·3 pixel values reach 255 at the end: (17·15) % 256 = 255.
        QCOMPARE(int(static_cast<unsigned char>(pixels().back())), 255);
        checkTinyDataset(loadPair(imagesIdx(), labelsIdx()));
    }

    void gzippedRoundTrip()
    {
        const QByteArray gz = test::gzip(imagesIdx());
        QCOMPARE(int(static_cast<unsigned char>(gz[0])), 0x1f);
        auto inflated = [&] {
            test::writeFile(path("images.gz"), gz);
            return readMaybeGzipped(path("images.gz"));
        }();
        QVERIFY2(inflated.ok(), qPrintable(inflated.error()));
        QCOMPARE(*inflated, imagesIdx());
        checkTinyDataset(loadPair(gz, test::gzip(labelsIdx())));
    }

    void fourDimensionalImagesKeepTheirChannels()
    {
        QByteArray payload(2 * 3 * 2 * 2, char(255));
        auto data = loadPair(test::idxBytes(0x08, {2, 3, 2, 2}, payload), test::idxBytes(0x08, {2}, QByteArray("\x00\x01", 2)));
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{2, 3, 2, 2}));
        QVERIFY(data->features.scalar_type() == torch::kUInt8);
        QCOMPARE(int(data->features.min().item<std::uint8_t>()), 255);
        QCOMPARE(data->numClasses, 2);
    }

    void missingPathIsNamed()
    {
        const QString missing = path("no-such-file-idx3-ubyte");
        auto r = readIdxFile(missing);
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(missing), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("does not exist")), qPrintable(r.error()));

        test::writeFile(path("labels"), labelsIdx());
        auto d = loadIdxDataset(missing, path("labels"), QStringLiteral("x"));
        QVERIFY(!d.ok());
        QVERIFY2(d.error().contains(missing), qPrintable(d.error()));
    }

    void truncatedGzipIsRefused()
    {
        const QByteArray gz = test::gzip(imagesIdx());
        test::writeFile(path("cut.gz"), gz.left(gz.size() / 2));
        auto r = readMaybeGzipped(path("cut.gz"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(path("cut.gz")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("truncated")), qPrintable(r.error()));

        // Only the trailer (CRC and size) missing: the stream still ends early.
        test::writeFile(path("cut8.gz"), gz.left(gz.size() - 8));
        auto r8 = readMaybeGzipped(path("cut8.gz"));
        QVERIFY(!r8.ok());
        QVERIFY2(r8.error().contains(QLatin1String("truncated")), qPrintable(r8.error()));
    }

    void corruptGzipIsRefused()
    {
        // A wrong CRC in the trailer.
        QByteArray gz = test::gzip(imagesIdx());
        gz[gz.size() - 8] = char(gz[gz.size() - 8] ^ 0xFF);
        test::writeFile(path("crc.gz"), gz);
        auto r = readMaybeGzipped(path("crc.gz"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(path("crc.gz")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("corrupt gzip data")), qPrintable(r.error()));

        // The gzip magic followed by garbage.
        QByteArray garbage("\x1f\x8b", 2);
        garbage += QByteArray(64, char(0xAB));
        test::writeFile(path("garbage.gz"), garbage);
        auto g = readIdxFile(path("garbage.gz"));
        QVERIFY(!g.ok());
        QVERIFY2(g.error().contains(QLatin1String("corrupt gzip data")), qPrintable(g.error()));
    }

    void wrongMagicIsRefused()
    {
        QByteArray bytes = imagesIdx();
        bytes[0] = 'P';
        bytes[1] = 'K';
        auto r = parseIdx(bytes, QStringLiteral("zipfile.bin"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("'zipfile.bin' is not an IDX file")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("magic bytes 50 4b 08 03")), qPrintable(r.error()));

        // An unknown type code.
        QByteArray badType = imagesIdx();
        badType[2] = char(0x07);
        auto t = parseIdx(badType, QStringLiteral("t"));
        QVERIFY(!t.ok());
        QVERIFY2(t.error().contains(QLatin1String("not an IDX file")), qPrintable(t.error()));

        auto tiny = parseIdx(QByteArray("\x00\x00", 2), QStringLiteral("tiny"));
        QVERIFY(!tiny.ok());
        QVERIFY2(tiny.error().contains(QLatin1String("only 2 bytes")), qPrintable(tiny.error()));
    }

    void shortPayloadIsTruncated()
    {
        const QByteArray bytes = imagesIdx().chopped(5);
        auto r = parseIdx(bytes, QStringLiteral("short.idx"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("'short.idx' is truncated")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QStringLiteral("3×2×3 = 18 bytes")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("the file has 13")), qPrintable(r.error()));

        // The header itself cut short: 3 dimensions need 16 bytes.
        auto h = parseIdx(imagesIdx().left(10), QStringLiteral("head.idx"));
        QVERIFY(!h.ok());
        QVERIFY2(h.error().contains(QLatin1String("truncated")), qPrintable(h.error()));
        QVERIFY2(h.error().contains(QLatin1String("16 bytes")), qPrintable(h.error()));
    }

    void trailingBytesAreRefused()
    {
        auto r = parseIdx(imagesIdx() + QByteArray("xyz"), QStringLiteral("long.idx"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("'long.idx' is corrupt")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("the file has 21")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("extra bytes")), qPrintable(r.error()));
    }

    void zeroDimensionIsRefused()
    {
        auto r = parseIdx(test::idxBytes(0x08, {0, 3}, {}), QStringLiteral("zero.idx"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("dimension 0 is 0")), qPrintable(r.error()));
    }

    void countMismatchNamesBothCounts()
    {
        auto r = loadPair(imagesIdx(), test::idxBytes(0x08, {4}, QByteArray("\x00\x01\x02\x03", 4)));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QStringLiteral("'%1' has 3 images").arg(path("images"))), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QStringLiteral("'%1' has 4 labels").arg(path("labels"))), qPrintable(r.error()));
    }

    void twoDimensionalLabelsAreRefused()
    {
        auto r = loadPair(imagesIdx(), test::idxBytes(0x08, {3, 1}, QByteArray("\x00\x01\x02", 3)));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(path("labels")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("not a label file")), qPrintable(r.error()));
    }

    void imagesMustBeBytesOfThreeOrFourDimensions()
    {
        auto flat = loadPair(test::idxBytes(0x08, {3, 6}, pixels()), labelsIdx());
        QVERIFY(!flat.ok());
        QVERIFY2(flat.error().contains(QLatin1String("has 2 dimensions")), qPrintable(flat.error()));

        auto floats = loadPair(test::idxBytes(0x0D, {3, 1, 1}, QByteArray(12, char(0))), labelsIdx());
        QVERIFY(!floats.ok());
        QVERIFY2(floats.error().contains(QLatin1String("type 0x0d")), qPrintable(floats.error()));
    }

    void realFashionMnistTrainingSet()
    {
        const QDir dir(test::fashionMnistDir());
        if (!dir.exists())
            QSKIP(qPrintable(QStringLiteral("Fashion-MNIST is not installed in %1").arg(dir.path())));
        auto data = loadIdxDataset(dir.filePath(QStringLiteral("train-images-idx3-ubyte.gz")),
                                   dir.filePath(QStringLiteral("train-labels-idx1-ubyte.gz")),
                                   QStringLiteral("fashion-mnist"));
        QVERIFY2(data.ok(), qPrintable(data.error()));
        QCOMPARE(data->size(), std::int64_t(60000));
        QCOMPARE(data->features.sizes().vec(), (std::vector<std::int64_t>{60000, 1, 28, 28}));
        QCOMPARE(data->numClasses, 10);
        QCOMPARE(data->labels.min().item<std::int64_t>(), std::int64_t(0));
        QCOMPARE(int(data->features.max().item<std::uint8_t>()), 255);
        // Fashion-MNIST is balanced: 6000 training images per class.
        const torch::Tensor counts = torch::bincount(data->labels);
        QCOMPARE(counts.min().item<std::int64_t>(), std::int64_t(6000));
        QCOMPARE(counts.max().item<std::int64_t>(), std::int64_t(6000));
    }

    void concatenatedGzipMembersAreRead()
    {
        const QByteArray raw = imagesIdx();
        const QByteArray twoMembers = test::gzip(raw.left(9)) + test::gzip(raw.mid(9));
        test::writeFile(path("members.gz"), twoMembers);
        auto r = readMaybeGzipped(path("members.gz"));
        QVERIFY2(r.ok(), qPrintable(r.error()));
        QCOMPARE(*r, raw);
    }

    void garbageAfterTheGzipDataIsRefused()
    {
        test::writeFile(path("tail.gz"), test::gzip(imagesIdx()) + QByteArray("junk"));
        auto r = readMaybeGzipped(path("tail.gz"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("4 unexpected bytes after the end of the gzip data")), qPrintable(r.error()));
    }
};

QTEST_GUILESS_MAIN(TestIdxReader)
#include "tst_idxreader.moc"
