#include "engine/data/ImageFolder.h"

#include "common/Random.h"

#include <QBuffer>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QImageReader>
#include <QtConcurrent>
#include <QtEndian>

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <numeric>

namespace flotilla {

namespace {

constexpr int kSkippedExamples = 5;

struct ClassFolder
{
    QString name;
    QString path;
    QStringList files;
};

QString extensionList()
{
    QStringList dotted;
    for (const QString &e : imageFileExtensions())
        dotted << u'.' + e;
    return dotted.mid(0, dotted.size() - 1).join(QStringLiteral(", ")) + QStringLiteral(" or ") + dotted.last();
}

bool isImageFile(const QString &path)
{
    return imageFileExtensions().contains(QFileInfo(path).suffix().toLower());
}

// Sorted by code point, as Python's sorted() does for torchvision, not by locale.
void sortPaths(QStringList &list)
{
    std::sort(list.begin(), list.end(), [](const QString &a, const QString &b) { return a < b; });
}

QStringList imagesBelow(const QString &dir)
{
    QStringList files;
    QDirIterator it(dir, QDir::Files, QDirIterator::Subdirectories | QDirIterator::FollowSymlinks);
    while (it.hasNext()) {
        const QString path = it.next();
        if (isImageFile(path))
            files << path;
    }
    sortPaths(files);
    return files;
}

// The class folders of one split, each with its images; an empty class folder is an error.
Result<std::vector<ClassFolder>> listClasses(const QString &dir)
{
    QStringList names = QDir(dir).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    sortPaths(names);
    if (names.isEmpty()) {
        const qsizetype loose = QDir(dir).entryList(QDir::Files).size();
        return fail(QStringLiteral("image folder '%1' has no class folders%2: put each class's images in a folder of "
                                   "its own, named after the class (%1/<class>/*.png)")
                        .arg(dir, loose > 0 ? QStringLiteral(" (only %1 loose files)").arg(loose) : QString()));
    }
    std::vector<ClassFolder> classes;
    for (const QString &name : names) {
        ClassFolder c{name, QDir(dir).filePath(name), {}};
        c.files = imagesBelow(c.path);
        if (c.files.isEmpty())
            return fail(QStringLiteral("class folder '%1' is empty: it has no %2 files; add images to it or remove it")
                            .arg(c.path, extensionList()));
        classes.push_back(std::move(c));
    }
    return classes;
}

bool isGrayFormat(QImage::Format f)
{
    return f == QImage::Format_Grayscale8 || f == QImage::Format_Grayscale16 || f == QImage::Format_Mono
           || f == QImage::Format_MonoLSB || f == QImage::Format_Alpha8;
}

// Qt's readers, named from the first bytes: no trial of every plugin for every file.
QByteArray formatOf(const QByteArray &bytes)
{
    if (bytes.startsWith(QByteArrayView("\x89PNG", 4)))
        return "png";
    if (bytes.startsWith(QByteArrayView("\xFF\xD8", 2)))
        return "jpeg";
    if (bytes.startsWith("BM"))
        return "bmp";
    return {};
}

struct Decoded
{
    QString error;      // empty: decoded
    bool fatal = false; // a problem of the data set (mixed sizes), not of one file: always stops
    bool done = false;
};

// Decodes one file into `out` ([C, H, W] bytes).
Decoded decodeInto(const QString &path, int channels, int height, int width, bool resize, std::uint8_t *out)
{
    Decoded d;
    d.done = true;
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        d.error = QStringLiteral("cannot be opened: %1").arg(file.errorString());
        return d;
    }
    QByteArray bytes = file.readAll();
    if (bytes.isEmpty()) {
        d.error = QStringLiteral("is empty");
        return d;
    }
    if (const QString cut = truncationProblem(bytes); !cut.isEmpty()) {
        d.error = cut;
        return d;
    }
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::ReadOnly);
    QImageReader reader(&buffer, formatOf(bytes));
    QImage image = reader.read();
    if (image.isNull()) {
        d.error = QStringLiteral("cannot be decoded: %1").arg(reader.errorString());
        return d;
    }
    if (!resize && (image.width() != width || image.height() != height)) {
        d.error = QStringLiteral("is %1×%2 pixels, but the first image is %3×%4: the images have mixed sizes; set an "
                                 "image size (--image-size, dataset.image_size) to resize them all")
                      .arg(image.width()).arg(image.height()).arg(width).arg(height);
        d.fatal = true;
        return d;
    }
    const QImage::Format format = channels == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888;
    image = image.convertToFormat(format);
    if (image.width() != width || image.height() != height)
        image = image.scaled(width, height, Qt::IgnoreAspectRatio, Qt::SmoothTransformation).convertToFormat(format);
    const std::size_t plane = std::size_t(height) * std::size_t(width);
    for (int y = 0; y < height; ++y) {
        const uchar *line = image.constScanLine(y);
        if (channels == 1) {
            std::memcpy(out + std::size_t(y) * std::size_t(width), line, std::size_t(width));
            continue;
        }
        // Interleaved RGB to planes: [C, H, W] is what convolutions read.
        for (int x = 0; x < width; ++x)
            for (int c = 0; c < 3; ++c)
                out[std::size_t(c) * plane + std::size_t(y) * std::size_t(width) + std::size_t(x)] = line[3 * x + c];
    }
    return d;
}

struct Shape
{
    int channels = 0;
    int height = 0;
    int width = 0;
    QString why; // how the channels were chosen, for the log
};

Result<Shape> chooseShape(const std::vector<ClassFolder> &classes, const ImageFolderOptions &options)
{
    Shape s;
    if (options.color == QLatin1String("gray")) {
        s.channels = 1;
    } else if (options.color == QLatin1String("rgb")) {
        s.channels = 3;
    } else {
        // auto: colour if the first image of any class has colour in it. A header alone
        // cannot tell (a palette image may hold only grays), so those few are decoded.
        s.channels = 1;
        s.why = QStringLiteral("grayscale: the first image of every class is gray");
        for (const ClassFolder &c : classes) {
            QImageReader reader(c.files.front());
            if (isGrayFormat(reader.imageFormat()))
                continue;
            const QImage first = reader.read();
            if (!first.isNull() && !first.isGrayscale()) {
                s.channels = 3;
                s.why = QStringLiteral("RGB: '%1' is in colour").arg(c.files.front());
                break;
            }
        }
    }
    if (options.imageSize > 0) {
        s.height = s.width = options.imageSize;
        return s;
    }
    // As stored: the first image whose header can be read sets the size every image must have.
    for (const ClassFolder &c : classes)
        for (const QString &f : c.files) {
            const QSize size = QImageReader(f).size();
            if (size.isValid() && !size.isEmpty()) {
                s.height = size.height();
                s.width = size.width();
                return s;
            }
        }
    return fail(QStringLiteral("none of the images' headers can be read (the first is '%1')").arg(classes.front().files.front()));
}

// Decodes the files of one split into a byte data set.
Result<Dataset> decodeSplit(const std::vector<std::pair<QString, std::int64_t>> &files, const Shape &shape,
                            const ImageFolderOptions &options, const QStringList &classNames, ImageFolderData &report)
{
    const auto n = static_cast<std::int64_t>(files.size());
    const std::int64_t sampleBytes = std::int64_t(shape.channels) * shape.height * shape.width;
    Dataset d;
    try {
        d.features = torch::empty({n, shape.channels, shape.height, shape.width}, torch::kUInt8);
    } catch (const std::exception &) {
        return fail(QStringLiteral("%1 images of %2×%3×%4 need %5 GiB of memory as bytes, more than this machine "
                                   "can give; use a smaller image size or fewer images")
                        .arg(n).arg(shape.channels).arg(shape.height).arg(shape.width)
                        .arg(double(n) * double(sampleBytes) / double(1 << 30), 0, 'f', 1));
    }
    std::uint8_t *base = d.features.data_ptr<std::uint8_t>();
    std::vector<Decoded> outcomes(files.size());
    std::vector<std::int64_t> order(files.size());
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::atomic<bool> stop{false};
    const bool resize = options.imageSize > 0;
    QtConcurrent::blockingMap(order, [&](const std::int64_t i) {
        if (stop.load(std::memory_order_relaxed))
            return;
        const auto k = static_cast<std::size_t>(i);
        outcomes[k] = decodeInto(files[k].first, shape.channels, shape.height, shape.width, resize, base + i * sampleBytes);
        if (!outcomes[k].error.isEmpty() && (outcomes[k].fatal || !options.skipBadImages))
            stop = true;
    });

    // In file order, so that the same folder always gives the same error and the same rows.
    std::vector<std::int64_t> labels;
    labels.reserve(files.size());
    std::int64_t kept = 0;
    for (std::size_t k = 0; k < files.size(); ++k) {
        const Decoded &o = outcomes[k];
        if (!o.done)
            continue;
        if (!o.error.isEmpty()) {
            if (o.fatal)
                return fail(QStringLiteral("image '%1' %2").arg(files[k].first, o.error));
            if (!options.skipBadImages)
                return fail(QStringLiteral("image '%1' %2; fix or remove it, or skip such files (--bad-images skip, "
                                           "dataset.bad_images \"skip\")")
                                .arg(files[k].first, o.error));
            if (report.skippedExamples.size() < kSkippedExamples)
                report.skippedExamples << QStringLiteral("%1: %2").arg(files[k].first, o.error);
            ++report.skipped;
            continue;
        }
        // Compacted in place: a skipped file leaves no hole and no second copy of the set.
        if (kept != std::int64_t(k))
            std::memmove(base + kept * sampleBytes, base + std::int64_t(k) * sampleBytes, std::size_t(sampleBytes));
        labels.push_back(files[k].second);
        ++kept;
    }
    if (kept == 0)
        return fail(QStringLiteral("none of the %1 images could be read (the first: %2)")
                        .arg(n).arg(report.skippedExamples.value(0)));
    if (kept < n)
        d.features = d.features.narrow(0, 0, kept);
    d.labels = torch::tensor(labels, torch::kInt64);
    d.numClasses = static_cast<int>(classNames.size());
    d.classNames = classNames;
    // Every class needs a readable image, or its label would never be trained.
    const torch::Tensor counts = torch::bincount(d.labels, {}, d.numClasses);
    for (int c = 0; c < d.numClasses; ++c)
        if (counts[c].item<std::int64_t>() == 0
            && std::any_of(files.begin(), files.end(), [c](const auto &f) { return f.second == c; }))
            return fail(QStringLiteral("every image of class '%1' was unreadable and skipped (%2 skipped in all; the "
                                       "first: %3)")
                            .arg(classNames[c]).arg(report.skipped).arg(report.skippedExamples.value(0)));
    return d;
}

// The files of a split with their labels, in an order shuffled by `seed`, the first `limit`.
std::vector<std::pair<QString, std::int64_t>> labelledFiles(const std::vector<ClassFolder> &classes,
                                                            const std::map<QString, std::int64_t> &labelOf,
                                                            std::uint64_t seed, qint64 limit)
{
    std::vector<std::pair<QString, std::int64_t>> files;
    for (const ClassFolder &c : classes)
        for (const QString &f : c.files)
            files.emplace_back(f, labelOf.at(c.name));
    deterministicShuffle(files, seed);
    if (limit > 0 && limit < qint64(files.size()))
        files.resize(static_cast<std::size_t>(limit));
    return files;
}



} // namespace

QStringList imageFileExtensions()
{
    return {QStringLiteral("png"), QStringLiteral("jpg"), QStringLiteral("jpeg"), QStringLiteral("bmp")};
}

QString truncationProblem(const QByteArray &bytes)
{
    if (bytes.startsWith(QByteArrayView("\x89PNG\r\n\x1a\n", 8))) {
        if (bytes.lastIndexOf(QByteArrayView("IEND\xAE\x42\x60\x82", 8)) < 0)
            return QStringLiteral("is cut short: its PNG end chunk (IEND) is missing");
        return {};
    }
    if (bytes.startsWith(QByteArrayView("\xFF\xD8", 2))) {
        const qsizetype lastScan = bytes.lastIndexOf(QByteArrayView("\xFF\xDA", 2));
        if (lastScan < 0)
            return QStringLiteral("is cut short: it ends before its JPEG image data (no start-of-scan marker)");
        if (bytes.lastIndexOf(QByteArrayView("\xFF\xD9", 2)) < lastScan)
            return QStringLiteral("is cut short: no JPEG end-of-image marker follows its image data");
        return {};
    }
    if (bytes.startsWith("BM")) {
        const auto *p = reinterpret_cast<const uchar *>(bytes.constData());
        const auto size = qint64(bytes.size());
        if (size < 26)
            return QStringLiteral("is cut short: its BMP header is incomplete (%1 bytes)").arg(size);
        const qint64 declared = qFromLittleEndian<quint32>(p + 2);
        const qint64 offset = qFromLittleEndian<quint32>(p + 10);
        const qint64 infoSize = qFromLittleEndian<quint32>(p + 14);
        qint64 needed = declared;
        if (infoSize >= 40 && size >= 34) {
            const qint64 width = qFromLittleEndian<qint32>(p + 18);
            const qint64 height = qFromLittleEndian<qint32>(p + 22);
            const qint64 bpp = qFromLittleEndian<quint16>(p + 28);
            const quint32 compression = qFromLittleEndian<quint32>(p + 30);
            // Uncompressed rows have a known size; compressed ones only the file header's.
            if ((compression == 0 || compression == 3 || compression == 6) && width > 0 && bpp > 0)
                needed = offset + ((width * bpp + 31) / 32) * 4 * std::abs(height);
        } else if (infoSize == 12) {
            const qint64 width = qFromLittleEndian<quint16>(p + 18);
            const qint64 height = qFromLittleEndian<quint16>(p + 20);
            const qint64 bpp = size >= 26 ? qFromLittleEndian<quint16>(p + 24) : 0;
            needed = offset + ((width * bpp + 31) / 32) * 4 * height;
        }
        if (needed > size)
            return QStringLiteral("is cut short: its BMP header announces %1 bytes, the file has %2").arg(needed).arg(size);
    }
    return {};
}

Result<ImageFolderData> loadImageFolder(const QString &root, const ImageFolderOptions &options)
{
    const QFileInfo rootInfo(root);
    if (!rootInfo.isDir())
        return fail(QStringLiteral("image folder '%1' %2").arg(root, rootInfo.exists() ? QStringLiteral("is not a folder")
                                                                                      : QStringLiteral("does not exist")));
    const QDir dir(root);
    const bool hasTrain = QFileInfo(dir.filePath(QStringLiteral("train"))).isDir();
    const bool hasTest = QFileInfo(dir.filePath(QStringLiteral("test"))).isDir();
    if (hasTest && !hasTrain)
        return fail(QStringLiteral("image folder '%1' has a test folder but no train folder; put the training images in "
                                   "'%2'")
                        .arg(root, dir.filePath(QStringLiteral("train"))));
    const QString trainDir = hasTrain ? dir.filePath(QStringLiteral("train")) : root;

    auto trainClasses = listClasses(trainDir);
    if (!trainClasses)
        return trainClasses.takeError();
    if (trainClasses->size() < 2)
        return fail(QStringLiteral("image folder '%1' has one class folder ('%2'); a classifier needs at least two")
                        .arg(trainDir, trainClasses->front().name));
    QStringList classNames;
    std::map<QString, std::int64_t> labelOf;
    for (const ClassFolder &c : *trainClasses) {
        labelOf.emplace(c.name, std::int64_t(classNames.size()));
        classNames << c.name;
    }

    std::vector<ClassFolder> testClasses;
    if (hasTest) {
        auto listed = listClasses(dir.filePath(QStringLiteral("test")));
        if (!listed)
            return listed.takeError();
        for (const ClassFolder &c : *listed)
            if (!labelOf.count(c.name))
                return fail(QStringLiteral("test class '%1' ('%2') has no folder in the training set '%3' (its classes: "
                                           "%4); a model cannot learn a class it never sees")
                                .arg(c.name, c.path, trainDir, classNames.join(QStringLiteral(", "))));
        testClasses = std::move(listed).value();
    }

    auto shape = chooseShape(*trainClasses, options);
    if (!shape)
        return shape.takeError();

    ImageFolderData out;
    out.hasTestSplit = hasTest;
    auto train = decodeSplit(labelledFiles(*trainClasses, labelOf, mixSeed(options.orderSeed, 0x7A1),
                                           hasTest ? options.trainLimit : 0),
                             *shape, options, classNames, out);
    if (!train)
        return train.takeError();
    out.train = std::move(train).value();
    out.train.name = QFileInfo(root).fileName();
    if (hasTest) {
        auto test = decodeSplit(labelledFiles(testClasses, labelOf, mixSeed(options.orderSeed, 0x7E5),
                                              options.testLimit),
                                *shape, options, classNames, out);
        if (!test)
            return test.takeError();
        out.test = std::move(test).value();
        out.test.name = out.train.name;
    }
    out.layout = QStringLiteral("%1%2: %3 classes, %4 training%5 images of %6×%7×%8%9")
                     .arg(trainDir, hasTest ? QStringLiteral(" and ") + dir.filePath(QStringLiteral("test")) : QString())
                     .arg(classNames.size())
                     .arg(out.train.size())
                     .arg(hasTest ? QStringLiteral(" and %1 test").arg(out.test.size()) : QString())
                     .arg(shape->channels).arg(shape->height).arg(shape->width)
                     .arg(shape->why.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(shape->why));
    return out;
}

} // namespace flotilla
