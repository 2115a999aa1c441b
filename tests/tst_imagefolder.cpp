// Image folders: real .png/.jpg/.bmp files written with QImage into a temporary folder, read
// back as bytes [N, C, H, W]; every bad input gets an error naming the file or folder; the
// batches training and evaluation make from them (normalization, augmentation) are the same
// for the same seed; and a real `flotilla train --dataset images` run learns such a folder.
#include "TestSupport.h"
#include "engine/coordination/Store.h"
#include "engine/data/ImageFolder.h"
#include "engine/data/JobData.h"
#include "engine/training/Trainer.h"

#include <QCborMap>
#include <QCborValue>
#include <QDir>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTcpServer>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <map>

using namespace flotilla;

namespace {

// A gray image whose pixels encode the class and the sample: value(x, y) = (seed * 37 + x * 5
// + y * 11) % 256, so that a row read back can be told apart from every other.
QImage grayImage(int width, int height, int seed)
{
    QImage image(width, height, QImage::Format_Grayscale8);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
            image.scanLine(y)[x] = uchar((seed * 37 + x * 5 + y * 11) % 256);
    return image;
}

// Horizontal or vertical stripes with a little noise: two classes a small model learns
// whatever the crop offset and the mirroring.
QImage stripes(bool horizontal, int side, int seed)
{
    QImage image(side, side, QImage::Format_Grayscale8);
    for (int y = 0; y < side; ++y)
        for (int x = 0; x < side; ++x) {
            const bool on = ((horizontal ? y : x) + seed) % 2 == 0;
            image.scanLine(y)[x] = uchar((on ? 200 : 40) + (x * 7 + y * 13 + seed * 3) % 30);
        }
    return image;
}

void save(const QImage &image, const QString &path)
{
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QVERIFY2(image.save(path), qPrintable(path));
}

QByteArray readAll(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Cuts a file to a share of its bytes (keep < 1) or drops its last -keep bytes (keep < 0).
void truncate(const QString &path, double keep)
{
    const QByteArray bytes = readAll(path);
    test::writeFile(path, bytes.left(keep < 0 ? bytes.size() + qsizetype(keep) : qsizetype(double(bytes.size()) * keep)));
}

// The CHW bytes of sample i.
std::vector<std::uint8_t> row(const Dataset &d, std::int64_t i)
{
    const torch::Tensor r = d.features[i].contiguous();
    return {r.data_ptr<std::uint8_t>(), r.data_ptr<std::uint8_t>() + r.numel()};
}

std::vector<std::uint8_t> bytesOf(const QImage &gray)
{
    std::vector<std::uint8_t> out;
    for (int y = 0; y < gray.height(); ++y)
        out.insert(out.end(), gray.constScanLine(y), gray.constScanLine(y) + gray.width());
    return out;
}

// Every row of `d` is, pixel for pixel, the 8×6 grayImage of one of its label's seeds, each
// seed used once. Returns what is wrong, or an empty string.
QString rowsMatch(const Dataset &d, std::map<std::int64_t, std::vector<int>> seedsOfLabel)
{
    std::size_t expected = 0;
    for (const auto &[label, seeds] : seedsOfLabel)
        expected += seeds.size();
    if (std::size_t(d.size()) != expected)
        return QStringLiteral("%1 rows, %2 expected").arg(d.size()).arg(expected);
    for (std::int64_t i = 0; i < d.size(); ++i) {
        std::vector<int> &seeds = seedsOfLabel[d.labels[i].item<std::int64_t>()];
        const auto it = std::find_if(seeds.begin(), seeds.end(),
                                     [&](int seed) { return row(d, i) == bytesOf(grayImage(8, 6, seed)); });
        if (it == seeds.end())
            return QStringLiteral("row %1 (label %2) is none of its class's images").arg(i).arg(d.labels[i].item<std::int64_t>());
        seeds.erase(it);
    }
    return {};
}

} // namespace

class TestImageFolder : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_folders = 0;

    // A fresh folder per test, so that no test sees another's files.
    QString freshFolder()
    {
        const QString path = m_dir.filePath(QStringLiteral("set%1").arg(++m_folders));
        QDir().mkpath(path);
        return path;
    }

    // root/<split>/<class>/<i>.png for classes a and b, gray 8×6, seeds that say which.
    QString twoClassFolder(bool withTest)
    {
        const QString root = freshFolder();
        for (const char *split : {"train", "test"}) {
            if (!withTest && QLatin1String(split) == QLatin1String("test"))
                continue;
            const int count = QLatin1String(split) == QLatin1String("train") ? 3 : 2;
            for (int c = 0; c < 2; ++c)
                for (int i = 0; i < count; ++i)
                    save(grayImage(8, 6, c * 10 + i),
                         QStringLiteral("%1/%2/%3/%4.png").arg(root, QLatin1String(split), c == 0 ? QStringLiteral("b_cat") : QStringLiteral("a_dog")).arg(i));
        }
        return root;
    }

    // A folder of `perClass` horizontal and as many vertical 8×8 stripes, as a job of kind images.
    JobSpec stripesJob(int perClass)
    {
        const QString root = freshFolder();
        for (int i = 0; i < perClass; ++i) {
            save(stripes(true, 8, i), root + QStringLiteral("/h/%1.png").arg(i));
            save(stripes(false, 8, i), root + QStringLiteral("/v/%1.png").arg(i));
        }
        JobSpec spec = JobSpec::defaultJob();
        spec.dataset.kind = QStringLiteral("images");
        spec.dataset.path = root;
        return spec;
    }

    static Result<ImageFolderData> load(const QString &root, const ImageFolderOptions &options = {})
    {
        return loadImageFolder(root, options);
    }

    static void expectError(const Result<ImageFolderData> &r, const QStringList &parts)
    {
        QVERIFY2(!r, "the folder was accepted");
        for (const QString &p : parts)
            QVERIFY2(r.error().contains(p), qPrintable(QStringLiteral("'%1' missing from: %2").arg(p, r.error())));
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void readsTrainAndTestSplitsAsBytes()
    {
        const QString root = twoClassFolder(true);
        auto r = load(root);
        QVERIFY2(r, qPrintable(r.error()));
        QVERIFY(r->hasTestSplit);
        // Classes in code-point order of their folder names: a_dog = 0, b_cat = 1.
        QCOMPARE(r->train.classNames, (QStringList{QStringLiteral("a_dog"), QStringLiteral("b_cat")}));
        QCOMPARE(r->train.numClasses, 2);
        QVERIFY(r->train.features.scalar_type() == torch::kUInt8);
        QCOMPARE(r->train.features.sizes().vec(), (std::vector<std::int64_t>{6, 1, 6, 8}));
        QCOMPARE(r->test.features.sizes().vec(), (std::vector<std::int64_t>{4, 1, 6, 8}));
        QCOMPARE(r->train.labels.sizes().vec(), (std::vector<std::int64_t>{6}));
        // a_dog's images are seeds 10, 11, 12, b_cat's 0, 1, 2: each row is one of them, pixel for pixel.
        QString wrong = rowsMatch(r->train, {{0, {10, 11, 12}}, {1, {0, 1, 2}}});
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        wrong = rowsMatch(r->test, {{0, {10, 11}}, {1, {0, 1}}});
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        QCOMPARE(r->skipped, qint64(0));
        // The order is shuffled by the seed (not class after class), the same for the same seed.
        auto again = load(root);
        QVERIFY(torch::equal(again->train.features, r->train.features));
        ImageFolderOptions reseeded;
        reseeded.orderSeed = 99;
        reseeded.trainLimit = 4;
        auto other = load(root, reseeded);
        QVERIFY2(other, qPrintable(other.error()));
        QCOMPARE(other->train.size(), std::int64_t(4)); // only 4 files decoded
        QCOMPARE(other->test.size(), std::int64_t(4));
    }

    void colourBecomesThreePlanesAndGrayOnRequest()
    {
        const QString root = freshFolder();
        QImage rgb(4, 3, QImage::Format_RGB888);
        for (int y = 0; y < 3; ++y)
            for (int x = 0; x < 4; ++x)
                rgb.setPixel(x, y, qRgb(10 * x, 50 + 20 * y, 200));
        save(rgb, root + QStringLiteral("/red/0.png"));
        save(rgb.mirrored(true, false), root + QStringLiteral("/red/1.bmp"));
        save(grayImage(4, 3, 1), root + QStringLiteral("/blue/0.png"));
        auto r = load(root);
        QVERIFY2(r, qPrintable(r.error()));
        QVERIFY(!r->hasTestSplit);
        // auto: one class's first image is in colour, so every image gets three channels.
        QCOMPARE(r->train.features.sizes().vec(), (std::vector<std::int64_t>{3, 3, 3, 4}));
        // red/0.png is in planes R, G, B; red/1.bmp is its mirror; blue/0.png, gray, has three equal planes.
        const torch::Tensor planes = torch::stack({torch::arange(4).mul(10).expand({3, 4}),
                                                   torch::arange(3).mul(20).add(50).unsqueeze(1).expand({3, 4}),
                                                   torch::full({3, 4}, 200, torch::kInt64)})
                                         .to(torch::kUInt8);
        QCOMPARE(r->train.classNames, (QStringList{QStringLiteral("blue"), QStringLiteral("red")}));
        int found = 0;
        for (int i = 0; i < 3; ++i) {
            const torch::Tensor image = r->train.features[i];
            if (r->train.labels[i].item<std::int64_t>() == 0) {
                QVERIFY(torch::equal(image[0], image[2]));
                ++found;
            } else {
                QVERIFY(torch::equal(image, planes) || torch::equal(image, planes.flip({2})));
                found += torch::equal(image, planes) ? 10 : 100;
            }
        }
        QCOMPARE(found, 111);
        ImageFolderOptions gray;
        gray.color = QStringLiteral("gray");
        auto g = load(root, gray);
        QVERIFY2(g, qPrintable(g.error()));
        QCOMPARE(g->train.features.sizes().vec(), (std::vector<std::int64_t>{3, 1, 3, 4}));
        QVERIFY(g->layout.contains(QStringLiteral("1×3×4")));
    }

    void resizesEveryFormatToTheImageSize()
    {
        const QString root = freshFolder();
        save(grayImage(20, 10, 1), root + QStringLiteral("/x/a.png"));
        save(grayImage(7, 9, 2), root + QStringLiteral("/x/b.JPG"));
        save(grayImage(16, 16, 3), root + QStringLiteral("/y/c.jpeg"));
        save(grayImage(5, 5, 4), root + QStringLiteral("/y/d.bmp"));
        test::writeFile(root + QStringLiteral("/y/notes.txt"), "not an image, ignored");
        ImageFolderOptions options;
        options.imageSize = 12;
        auto r = load(root, options);
        QVERIFY2(r, qPrintable(r.error()));
        QCOMPARE(r->train.features.sizes().vec(), (std::vector<std::int64_t>{4, 1, 12, 12}));
        QCOMPARE(r->train.labels.sum().item<std::int64_t>(), std::int64_t(2));
    }

    void mixedSizesAreAnError()
    {
        const QString root = freshFolder();
        save(grayImage(8, 8, 1), root + QStringLiteral("/x/a.png"));
        save(grayImage(8, 8, 2), root + QStringLiteral("/y/b.png"));
        save(grayImage(9, 8, 3), root + QStringLiteral("/y/odd.png"));
        expectError(load(root), {root + QStringLiteral("/y/odd.png"), QStringLiteral("9×8"), QStringLiteral("8×8"),
                                 QStringLiteral("mixed sizes"), QStringLiteral("--image-size")});
        // Mixed sizes are the folder's problem, not one file's: skipping does not hide them.
        ImageFolderOptions skip;
        skip.skipBadImages = true;
        expectError(load(root, skip), {QStringLiteral("mixed sizes")});
    }

    void emptyClassFolderIsAnError()
    {
        const QString root = twoClassFolder(true);
        QVERIFY(QDir().mkpath(root + QStringLiteral("/train/empty_class")));
        test::writeFile(root + QStringLiteral("/train/empty_class/readme.txt"), "no images here");
        expectError(load(root), {root + QStringLiteral("/train/empty_class"), QStringLiteral("empty"),
                                 QStringLiteral(".png")});
        const QString other = twoClassFolder(true);
        QVERIFY(QDir().mkpath(other + QStringLiteral("/test/a_dog/nested")));
        QVERIFY(QDir(other + QStringLiteral("/test/b_cat")).removeRecursively());
        QVERIFY(QDir().mkpath(other + QStringLiteral("/test/b_cat")));
        expectError(load(other), {other + QStringLiteral("/test/b_cat"), QStringLiteral("empty")});
    }

    void testClassMissingFromTrainIsAnError()
    {
        const QString root = twoClassFolder(true);
        save(grayImage(8, 6, 5), root + QStringLiteral("/test/zebra/0.png"));
        expectError(load(root), {QStringLiteral("test class 'zebra'"), root + QStringLiteral("/train"),
                                 QStringLiteral("a_dog, b_cat")});
    }

    void folderShapesThatCannotBeTrainedAreErrors()
    {
        const QString loose = freshFolder();
        save(grayImage(4, 4, 1), loose + QStringLiteral("/a.png"));
        expectError(load(loose), {QStringLiteral("no class folders"), QStringLiteral("1 loose files")});
        const QString single = freshFolder();
        save(grayImage(4, 4, 1), single + QStringLiteral("/only/a.png"));
        expectError(load(single), {QStringLiteral("one class folder ('only')")});
        const QString testOnly = freshFolder();
        save(grayImage(4, 4, 1), testOnly + QStringLiteral("/test/a/a.png"));
        expectError(load(testOnly), {QStringLiteral("no train folder")});
        expectError(load(m_dir.filePath(QStringLiteral("nowhere"))), {QStringLiteral("does not exist")});
    }

    void unreadableImageStopsWithItsPath()
    {
        const QString root = twoClassFolder(false);
        const QString bad = root + QStringLiteral("/train/a_dog/zz_broken.png");
        test::writeFile(bad, "this is not a PNG file at all");
        expectError(load(root), {bad, QStringLiteral("cannot be decoded"), QStringLiteral("--bad-images skip")});
    }

    void truncatedImagesAreCaughtInEveryFormat()
    {
        // Qt's readers decode a JPEG or a BMP cut short without a word; each must be named.
        // (a JPEG cut in its headers, a JPEG cut after its last few bytes of image data)
        for (const auto &[name, keep] : {std::pair{"cut.png", 0.6}, std::pair{"cut.png", -1.0}, std::pair{"cut.jpg", 0.3},
                                         std::pair{"cut.jpg", -5.0}, std::pair{"cut.bmp", 0.7}}) {
            const QString root = twoClassFolder(false);
            const QString path = root + QStringLiteral("/train/b_cat/") + QLatin1String(name);
            save(grayImage(8, 6, 9), path);
            QVERIFY2(truncationProblem(readAll(path)).isEmpty(), name); // whole: fine
            truncate(path, keep);
            expectError(load(root), {path, QStringLiteral("cut short")});
        }
        QVERIFY(!truncationProblem(QByteArray("BM\x10\x00", 4)).isEmpty());
    }

    void skippedImagesAreCountedAndLeaveNoHoles()
    {
        const QString root = twoClassFolder(true);
        const QString broken = root + QStringLiteral("/train/a_dog/0a.png");
        test::writeFile(broken, QByteArray("\x89PNG\r\n\x1a\n", 8) + "garbage");
        const QString cut = root + QStringLiteral("/train/b_cat/0a.jpg");
        save(grayImage(8, 6, 3), cut);
        truncate(cut, 0.8);
        ImageFolderOptions skip;
        skip.skipBadImages = true;
        auto r = load(root, skip);
        QVERIFY2(r, qPrintable(r.error()));
        QCOMPARE(r->skipped, qint64(2));
        QCOMPARE(r->skippedExamples.size(), qsizetype(2));
        QVERIFY2(r->skippedExamples.join(u' ').contains(broken), qPrintable(r->skippedExamples.join(u' ')));
        QVERIFY(r->skippedExamples.join(u' ').contains(cut));
        // The rows that remain are exactly the good images, each with its own label.
        const QString wrong = rowsMatch(r->train, {{0, {10, 11, 12}}, {1, {0, 1, 2}}});
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        // A class whose every image is unreadable is not trained silently without it.
        const QString hopeless = twoClassFolder(false);
        for (int i = 0; i < 3; ++i)
            test::writeFile(hopeless + QStringLiteral("/train/a_dog/%1.png").arg(i), "junk");
        expectError(load(hopeless, skip), {QStringLiteral("every image of class 'a_dog'")});
    }

    void oneFolderIsSplitAndNormalizedByTheJob()
    {
        JobSpec spec = stripesJob(20);
        spec.dataset.testFraction = 0.25;
        spec.training.shards = 4;
        auto data = loadJobData(spec);
        QVERIFY2(data, qPrintable(data.error()));
        QCOMPARE((*data)->train.size(), std::int64_t(30));
        QCOMPARE((*data)->test.size(), std::int64_t(10));
        QCOMPARE((*data)->inputShape, (std::vector<std::int64_t>{1, 8, 8}));
        QVERIFY((*data)->train.features.scalar_type() == torch::kUInt8);
        // Statistics of value / 255, applied to test batches the same way as to training's.
        const torch::Tensor unit = (*data)->train.features.to(torch::kFloat64) / 255.0;
        QVERIFY(std::abs((*data)->normalization.mean[0] - unit.mean().item<double>()) < 1e-5);
        QVERIFY(std::abs((*data)->normalization.stddev[0] - unit.std(false).item<double>()) < 1e-5);
        const Dataset &test = (*data)->test;
        const torch::Tensor evaluated = InputPipeline(test, torch::kCPU).rows(0, test.size());
        const torch::Tensor trained = InputPipeline(test, torch::kCPU)
                                          .trainingRows(torch::arange(test.size(), torch::kInt64), 42);
        QVERIFY(torch::equal(evaluated, trained)); // the test set is never augmented
        const torch::Tensor expected = (test.features.to(torch::kFloat32) / 255.0f - (*data)->normalization.mean[0])
                                       / (*data)->normalization.stddev[0];
        QVERIFY(torch::allclose(evaluated, expected, 1e-5, 1e-5));

        spec.dataset.cropPadding = 9;
        auto tooWide = loadJobData(spec);
        QVERIFY(!tooWide);
        QVERIFY2(tooWide.error().contains(QStringLiteral("'dataset.crop_padding' is 9")), qPrintable(tooWide.error()));
    }

    void augmentationIsASeededCropAndFlip()
    {
        torch::manual_seed(1);
        const torch::Tensor images = torch::randint(0, 256, {16, 3, 6, 7}, torch::kUInt8).to(torch::kFloat32);
        const Augmentation both{2, true};
        const torch::Tensor a = augmentImages(images, both, 1234);
        QVERIFY(torch::equal(a, augmentImages(images, both, 1234))); // same seed, same crops
        QVERIFY(!torch::equal(a, augmentImages(images, both, 1235)));
        QCOMPARE(a.sizes(), images.sizes());
        // Every output is a window of the zero-padded input, mirrored or not.
        const torch::Tensor padded = torch::constant_pad_nd(images, {2, 2, 2, 2}, 0.0);
        int flipped = 0;
        int moved = 0;
        for (int i = 0; i < 16; ++i) {
            bool found = false;
            for (int top = 0; top <= 4 && !found; ++top)
                for (int left = 0; left <= 4 && !found; ++left) {
                    const torch::Tensor window = padded[i].narrow(1, top, 6).narrow(2, left, 7);
                    if (torch::equal(a[i], window) || torch::equal(a[i], window.flip({2}))) {
                        found = true;
                        flipped += torch::equal(a[i], window) ? 0 : 1;
                        moved += (top != 2 || left != 2) ? 1 : 0;
                    }
                }
            QVERIFY2(found, qPrintable(QStringLiteral("image %1 is no window of its padded input").arg(i)));
        }
        QVERIFY2(flipped > 0 && flipped < 16, qPrintable(QString::number(flipped)));
        QVERIFY(moved > 0);
        // Flip alone keeps every pixel of the image.
        const torch::Tensor f = augmentImages(images, Augmentation{0, true}, 7);
        for (int i = 0; i < 16; ++i)
            QVERIFY(torch::equal(f[i], images[i]) || torch::equal(f[i], images[i].flip({2})));
    }

    void augmentedTrainingIsReproducible()
    {
        JobSpec spec = stripesJob(16);
        spec.dataset.cropPadding = 2;
        spec.dataset.horizontalFlip = true;
        spec.training.shards = 1;
        spec.model.kind = QStringLiteral("mlp");
        spec.model.hidden = {16};
        auto data = loadJobData(spec);
        QVERIFY2(data, qPrintable(data.error()));
        QVERIFY((*data)->train.augmentation.enabled());
        QVERIFY(!(*data)->test.augmentation.enabled());
        torch::manual_seed(3);
        auto model = createModel(spec.model, (*data)->inputShape, 2).value();
        const torch::Tensor start = model->flatWeights();
        TrainConfig config;
        config.batchSize = 8;
        config.localEpochs = 2;
        auto trainWith = [&](quint64 seed) {
            config.seed = seed;
            auto out = trainSubtask(*model, start, (*data)->train, config, torch::kCPU);
            return out ? out->weights : torch::Tensor();
        };
        const torch::Tensor first = trainWith(11);
        QVERIFY(first.defined());
        QVERIFY(torch::equal(first, trainWith(11)));
        QVERIFY(!torch::equal(first, trainWith(12)));
    }

    void trainCommandLearnsAnImageFolder()
    {
        // The real binary, a real folder: 2 classes of stripes with augmentation on.
        const QString root = freshFolder();
        for (int i = 0; i < 48; ++i) {
            save(stripes(true, 10, i), root + QStringLiteral("/train/horizontal/%1.png").arg(i));
            save(stripes(false, 10, i), root + QStringLiteral("/train/vertical/%1.bmp").arg(i));
        }
        for (int i = 0; i < 12; ++i) {
            save(stripes(true, 10, 100 + i), root + QStringLiteral("/test/horizontal/%1.png").arg(i));
            save(stripes(false, 10, 100 + i), root + QStringLiteral("/test/vertical/%1.png").arg(i));
        }
        const QString runDir = m_dir.filePath(QStringLiteral("run"));
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(test::flotillaBinary(),
                {QStringLiteral("train"), QStringLiteral("--dataset"), QStringLiteral("images"), QStringLiteral("--data"),
                 root, QStringLiteral("--model"), QStringLiteral("mlp"), QStringLiteral("--epochs"), QStringLiteral("6"),
                 QStringLiteral("--shards"), QStringLiteral("4"), QStringLiteral("--workers"), QStringLiteral("2"),
                 QStringLiteral("--batch-size"), QStringLiteral("8"), QStringLiteral("--lr"), QStringLiteral("0.05"),
                 QStringLiteral("--crop-padding"), QStringLiteral("1"), QStringLiteral("--hflip"),
                 QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--device"), QStringLiteral("cpu"),
                 QStringLiteral("--run-dir"), runDir, QStringLiteral("--quiet")});
        QVERIFY(p.waitForFinished(90000));
        const QString out = QString::fromUtf8(p.readAll());
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(out));
        auto store = Store::open(runDir + QStringLiteral("/flotilla.db"));
        QVERIFY(store);
        auto evaluations = (*store)->evaluations(1);
        QVERIFY(evaluations && !evaluations->empty());
        QVERIFY2(evaluations->back().accuracy >= 0.9, qPrintable(QString::number(evaluations->back().accuracy)));
        const QString wrong = test::verifyExactlyOnce(**store, std::vector<qint64>(4, 24), 6);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
        // Gray PNGs and gray (palette) BMPs make one channel; the load is logged with its figures.
        const QString log = QString::fromUtf8(readAll(runDir + QStringLiteral("/flotilla.log")));
        QVERIFY2(log.contains(QStringLiteral("loaded 96 training and 24 test samples of 1×10×10 (bytes")), qPrintable(log));
        const QJsonObject job = QJsonDocument::fromJson(readAll(runDir + QStringLiteral("/job.json"))).object();
        QCOMPARE(job.value(QStringLiteral("dataset")).toObject().value(QStringLiteral("kind")).toString(),
                 QStringLiteral("images"));
        QCOMPARE(job.value(QStringLiteral("dataset")).toObject().value(QStringLiteral("crop_padding")).toInt(), 1);

        // A bad folder fails before training, with the reason on standard error.
        save(grayImage(10, 10, 1), root + QStringLiteral("/test/zebra/0.png"));
        QProcess bad;
        bad.start(test::flotillaBinary(), {QStringLiteral("train"), QStringLiteral("--dataset"), QStringLiteral("images"),
                                           QStringLiteral("--data"), root, QStringLiteral("--run-dir"),
                                           m_dir.filePath(QStringLiteral("badrun")), QStringLiteral("--quiet")});
        QVERIFY(bad.waitForFinished(60000));
        QVERIFY(bad.exitCode() != 0);
        const QString err = QString::fromUtf8(bad.readAllStandardError());
        QVERIFY2(err.contains(QStringLiteral("test class 'zebra'")), qPrintable(err));
    }

    void remoteWorkerKeepsShardsAsBytesInABoundedCache()
    {
        // A real coordinator and a real remote worker over TLS on loopback. Four shards of 200
        // colour 32×32 images: 600 KiB each as bytes (2.4 MiB as float32), so a 1 MiB cache
        // holds one of them and must evict as the worker goes through the others.
        const QString root = freshFolder();
        for (int i = 0; i < 400; ++i) {
            QImage h = stripes(true, 32, i).convertToFormat(QImage::Format_RGB888);
            QImage v = stripes(false, 32, i).convertToFormat(QImage::Format_RGB888);
            h.setPixel(i % 32, 0, qRgb(250, 10, 10)); // some colour, so that auto picks rgb
            v.setPixel(i % 32, 0, qRgb(10, 10, 250));
            save(h, root + QStringLiteral("/train/h/%1.png").arg(i));
            save(v, root + QStringLiteral("/train/v/%1.png").arg(i));
        }
        for (int i = 0; i < 10; ++i) {
            save(stripes(true, 32, 500 + i).convertToFormat(QImage::Format_RGB888), root + QStringLiteral("/test/h/%1.png").arg(i));
            save(stripes(false, 32, 500 + i).convertToFormat(QImage::Format_RGB888), root + QStringLiteral("/test/v/%1.png").arg(i));
        }
        quint16 port = 0;
        {
            QTcpServer probe;
            QVERIFY(probe.listen(QHostAddress::LocalHost, 0));
            port = probe.serverPort();
        }
        const QString fleet = m_dir.filePath(QStringLiteral("fleet"));
        const QString tokenFile = fleet + QStringLiteral("/token");
        QProcess serve;
        serve.setProcessChannelMode(QProcess::MergedChannels);
        serve.start(test::flotillaBinary(),
                    {QStringLiteral("serve"), QStringLiteral("--run-dir"), fleet + QStringLiteral("/run"),
                     QStringLiteral("--identity-dir"), fleet + QStringLiteral("/identity"), QStringLiteral("--listen"),
                     QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                     QStringLiteral("--port"), QString::number(port), QStringLiteral("--token-file"), tokenFile,
                     QStringLiteral("--quiet"), QStringLiteral("--dataset"), QStringLiteral("images"),
                     QStringLiteral("--data"), root, QStringLiteral("--model"), QStringLiteral("mlp"),
                     QStringLiteral("--epochs"), QStringLiteral("2"), QStringLiteral("--shards"), QStringLiteral("4"),
                     QStringLiteral("--workers"), QStringLiteral("0"), QStringLiteral("--batch-size"),
                     QStringLiteral("32"), QStringLiteral("--hflip"), QStringLiteral("--preempt-mean"),
                     QStringLiteral("0"), QStringLiteral("--device"), QStringLiteral("cpu")});
        QTRY_VERIFY_WITH_TIMEOUT(!readAll(tokenFile).trimmed().isEmpty(), 60000);
        const QString state = fleet + QStringLiteral("/worker");
        QProcess worker;
        worker.setProcessChannelMode(QProcess::MergedChannels);
        worker.start(test::flotillaBinary(),
                     {QStringLiteral("worker"), QStringLiteral("--join"), QString::fromUtf8(readAll(tokenFile).trimmed()),
                      QStringLiteral("--state-dir"), state, QStringLiteral("--name"), QStringLiteral("w1"),
                      QStringLiteral("--shard-cache-mb"), QStringLiteral("1")});
        QVERIFY2(serve.waitForFinished(180000), qPrintable(QString::fromUtf8(serve.readAll())));
        QVERIFY2(serve.exitCode() == 0, qPrintable(QString::fromUtf8(serve.readAll())));
        QVERIFY(worker.waitForFinished(30000));
        QVERIFY2(worker.exitCode() == 0, qPrintable(QString::fromUtf8(worker.readAll())));
        auto store = Store::open(fleet + QStringLiteral("/run/flotilla.db"));
        QVERIFY(store);
        const QString wrong = test::verifyExactlyOnce(**store, std::vector<qint64>(4, 200), 2);
        QVERIFY2(wrong.isEmpty(), qPrintable(wrong));

        // What the worker kept: one shard (the budget's worth), stored as it came: one byte
        // per pixel, eight per label, two float32 per channel for the normalization.
        const QDir shards(state + QStringLiteral("/shards"));
        const QStringList kept = shards.entryList({QStringLiteral("*.bin")}, QDir::Files);
        QCOMPARE(kept.size(), qsizetype(1));
        QCOMPARE(QFileInfo(shards.filePath(kept.front())).size(), qint64(200 * 3 * 32 * 32 + 200 * 8 + 3 * 2 * 4));
        QString manifestName = kept.front();
        manifestName.replace(QStringLiteral(".bin"), QStringLiteral(".cbor"));
        const QCborMap manifest = QCborValue::fromCbor(readAll(shards.filePath(manifestName))).toMap();
        QCOMPARE(manifest.value(QStringLiteral("dtype")).toString(), QStringLiteral("uint8"));
        QCOMPARE(manifest.value(QStringLiteral("horizontal_flip")).toBool(), true);
        qint64 onDisk = 0;
        for (const QFileInfo &f : shards.entryInfoList(QDir::Files))
            onDisk += f.size();
        QVERIFY2(onDisk <= qint64(1) << 20, qPrintable(QString::number(onDisk)));
    }
};

QTEST_GUILESS_MAIN(TestImageFolder)
#include "tst_imagefolder.moc"
