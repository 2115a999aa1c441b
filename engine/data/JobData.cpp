#include "engine/data/JobData.h"


#include "common/LogCategories.h"
#include "common/Random.h"
#include "engine/data/CsvReader.h"
#include "engine/data/IdxReader.h"
#include "engine/data/ImageFolder.h"
#include "engine/data/NpyReader.h"
#include "engine/data/TokenReader.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>

#include <torch/torch.h>

#include <numeric>

namespace flotilla {

namespace {

// "train-images-idx3-ubyte" or the same with ".gz".
QString findIdx(const QDir &dir, const QString &stem)
{
    const QString candidates[] = {stem + QStringLiteral(".gz"), stem};
    for (const QString &name : candidates)
        if (QFileInfo::exists(dir.filePath(name)))
            return dir.filePath(name);
    return {};
}

std::pair<Dataset, Dataset> holdOut(const Dataset &all, double fraction, quint64 seed)
{
    std::vector<std::int64_t> order(static_cast<std::size_t>(all.size()));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    deterministicShuffle(order, mixSeed(seed, 0x7E57));
    const auto testCount = std::max<std::size_t>(1, static_cast<std::size_t>(double(order.size()) * fraction));
    const std::vector<std::int64_t> test(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(testCount));
    const std::vector<std::int64_t> train(order.begin() + static_cast<std::ptrdiff_t>(testCount), order.end());
    return {all.select(train), all.select(test)};
}

Dataset firstRows(const Dataset &d, qint64 limit)
{
    if (limit <= 0 || limit >= d.size())
        return d;
    Dataset out = d;
    out.features = d.features.narrow(0, 0, limit).contiguous();
    out.labels = d.labels.narrow(0, 0, limit).contiguous();
    return out;
}

Result<std::pair<Dataset, Dataset>> loadImages(const DatasetSpec &spec, quint64 seed)
{
    ImageFolderOptions options;
    options.imageSize = spec.imageSize;
    options.color = spec.color;
    options.skipBadImages = spec.badImages == QLatin1String("skip");
    options.orderSeed = seed;
    options.trainLimit = spec.trainLimit;
    options.testLimit = spec.testLimit;
    auto loaded = loadImageFolder(spec.path, options);
    if (!loaded)
        return loaded.takeError();
    qCInfo(lcData).noquote() << "read" << loaded->layout;
    if (loaded->skipped > 0)
        qCWarning(lcData).noquote() << "skipped" << loaded->skipped << "unreadable or truncated images; the first:"
                                      << loaded->skippedExamples.join(QStringLiteral("; "));
    if (loaded->hasTestSplit)
        return std::make_pair(std::move(loaded->train), std::move(loaded->test));
    if (loaded->train.size() < 4)
        return fail(QStringLiteral("image folder '%1' has only %2 images; it needs enough for a training and a test split")
                        .arg(spec.path).arg(loaded->train.size()));
    qCInfo(lcData).noquote() << "no test folder: holding out" << spec.testFraction << "of the images for testing";
    return holdOut(loaded->train, spec.testFraction, seed);
}

Result<std::pair<Dataset, Dataset>> loadIdxFolder(const QString &folder, const QString &name, const DatasetSpec &spec,
                                                  quint64 seed)
{
    const QDir dir(folder);
    if (!dir.exists())
        return fail(QStringLiteral("data set folder '%1' does not exist%2")
                        .arg(folder, name == QLatin1String("fashion-mnist")
                                         ? QStringLiteral(" (install Debian's dataset-fashion-mnist package, or set "
                                                          "FLOTILLA_FASHION_MNIST to a folder of its IDX files)")
                                         : QString()));
    const QString trainImages = findIdx(dir, QStringLiteral("train-images-idx3-ubyte"));
    const QString trainLabels = findIdx(dir, QStringLiteral("train-labels-idx1-ubyte"));
    if (trainImages.isEmpty() || trainLabels.isEmpty())
        return fail(QStringLiteral("folder '%1' has no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]")
                        .arg(folder));
    auto train = loadIdxDataset(trainImages, trainLabels, name);
    if (!train)
        return train.takeError();
    const QString testImages = findIdx(dir, QStringLiteral("t10k-images-idx3-ubyte"));
    const QString testLabels = findIdx(dir, QStringLiteral("t10k-labels-idx1-ubyte"));
    if (testImages.isEmpty() || testLabels.isEmpty())
        return holdOut(*train, spec.testFraction, seed);
    auto test = loadIdxDataset(testImages, testLabels, name);
    if (!test)
        return test.takeError();
    if (test->sampleShape() != train->sampleShape())
        return fail(QStringLiteral("'%1' holds %2 images but '%3' holds %4 images")
                        .arg(testImages, shapeToString(test->sampleShape()), trainImages,
                             shapeToString(train->sampleShape())));
    return std::make_pair(std::move(train).value(), std::move(test).value());
}

} // namespace

QString defaultFashionMnistDir()
{
    const QString fromEnv = qEnvironmentVariable("FLOTILLA_FASHION_MNIST");
    return fromEnv.isEmpty() ? QStringLiteral("/usr/share/datasets/fashion-mnist") : fromEnv;
}

Result<std::shared_ptr<const JobData>> loadJobData(const JobSpec &spec)
{
    QElapsedTimer timer;
    timer.start();
    const DatasetSpec &ds = spec.dataset;
    auto task = taskFromName(spec.training.task);
    if (!task)
        return fail(QStringLiteral("'training.task': %1").arg(task.error()));
    Result<std::pair<Dataset, Dataset>> splits = fail(QString());
    if (ds.kind == QLatin1String("fashion-mnist"))
        splits = loadIdxFolder(ds.path.isEmpty() ? defaultFashionMnistDir() : ds.path, ds.kind, ds, spec.training.seed);
    else if (ds.kind == QLatin1String("idx"))
        splits = loadIdxFolder(ds.path, QFileInfo(ds.path).fileName(), ds, spec.training.seed);
    else if (ds.kind == QLatin1String("csv") || ds.kind == QLatin1String("npy")) {
        // One set of samples with the test share held out, unless NumPy arrays bring their own
        // test split.
        CsvOptions options;
        options.labelColumn = ds.labelColumn;
        options.task = *task;
        Result<NpySplits> all = fail(QString());
        if (ds.kind == QLatin1String("csv")) {
            auto table = readCsvDataset(ds.path, options);
            all = table ? Result<NpySplits>(NpySplits{std::move(table).value(), std::nullopt})
                        : Result<NpySplits>(table.takeError());
        } else {
            all = readNpySplits(ds.path, *task);
        }
        if (!all)
            return all.takeError();
        if (all->test) {
            qCInfo(lcData).noquote() << "the NumPy data set's own test split:" << all->test->size() << "samples";
            splits = std::make_pair(std::move(all->train), std::move(*all->test));
        } else {
            if (all->train.size() < 4)
                return fail(QStringLiteral("'%1' has only %2 samples; it needs enough for a training and a test split")
                                .arg(ds.path).arg(all->train.size()));
            splits = holdOut(all->train, ds.testFraction, spec.training.seed);
        }
    } else if (ds.kind == QLatin1String("images")) {
        splits = loadImages(ds, spec.training.seed);
    } else if (ds.kind == QLatin1String("tokens")) {
        auto tokens = readTokenFile(ds.path, ds.tokenType, ds.context, ds.testFraction);
        if (!tokens)
            return tokens.takeError();
        qCInfo(lcData).noquote() << QStringLiteral("%1 contexts of %2 tokens, vocabulary %3; test: %4")
                                          .arg(tokens->train.size()).arg(ds.context).arg(tokens->train.numClasses)
                                          .arg(tokens->hasTestFile ? QStringLiteral("val.bin")
                                                                   : QStringLiteral("the file's last %1 contexts")
                                                                         .arg(tokens->test.size()));
        splits = std::make_pair(std::move(tokens->train), std::move(tokens->test));
    }
    else
        return fail(QStringLiteral("unknown data set kind '%1'").arg(ds.kind));
    if (!splits)
        return splits.takeError();

    auto data = std::make_shared<JobData>();
    data->train = firstRows(splits->first, ds.trainLimit);
    data->test = firstRows(splits->second, ds.testLimit);
    data->numClasses = std::max(data->train.numClasses, data->test.numClasses);
    data->train.numClasses = data->test.numClasses = data->numClasses;
    data->inputShape = data->train.sampleShape();
    data->targetShape = {data->train.labels.sizes().begin() + 1, data->train.labels.sizes().end()};
    // The samples stay as stored; every batch is normalized as it is made (InputPipeline).
    data->normalization = Normalization::fit(data->train);
    data->train.normalization = data->test.normalization = data->normalization;
    data->train.augmentation = Augmentation{ds.cropPadding, ds.horizontalFlip};
    if (data->train.augmentation.enabled() && !data->train.isImages())
        return fail(QStringLiteral("'dataset.crop_padding' and 'dataset.horizontal_flip' augment images, but '%1' holds "
                                   "samples of shape %2")
                        .arg(ds.path, shapeToString(data->inputShape)));
    if (ds.cropPadding > 0 && data->train.isImages()
        && ds.cropPadding > std::min(data->inputShape[1], data->inputShape[2]))
        return fail(QStringLiteral("'dataset.crop_padding' is %1, more than the side of the images (%2); use a "
                                   "fraction of the side, such as %3")
                        .arg(ds.cropPadding).arg(shapeToString(data->inputShape))
                        .arg(std::max<std::int64_t>(1, std::min(data->inputShape[1], data->inputShape[2]) / 8)));
    if (spec.training.shards > data->train.size())
        return fail(QStringLiteral("'training.shards' is %1 but the training set has only %2 samples; use at most "
                                   "one shard per sample")
                        .arg(spec.training.shards).arg(data->train.size()));
    const TrainingSpec &t = spec.training;
    const int shards = shardCount(t.shards, data->train.size(), t.batchSize, t.localEpochs, t.localSteps);
    data->plan = ShardPlan(data->train.size(), shards, t.seed);
    const std::int64_t steps = subtaskSteps(data->train.size() / shards, t.batchSize, t.localEpochs, t.localSteps);
    if (t.shards == 0)
        qCInfo(lcData).noquote() << QStringLiteral("%1 shards of about %2 samples: %3 optimizer steps per subtask "
                                                     "(training.shards 0 chooses them from the data and the batch)")
                                          .arg(shards).arg(data->train.size() / shards).arg(steps);
    else if (steps < kMinSubtaskSteps)
        qCWarning(lcData).noquote()
            << QStringLiteral("'training.shards' is %1: each subtask trains only %2 optimizer step(s) (%3 samples at batch "
                              "%4), fewer than the %5 a subtask should have; its fixed costs will dominate. Use "
                              "training.shards 0 to choose the count from the data (%6 here)")
                   .arg(t.shards).arg(steps).arg(data->train.size() / shards).arg(t.batchSize).arg(kMinSubtaskSteps)
                   .arg(shardCount(0, data->train.size(), t.batchSize, t.localEpochs, t.localSteps));
    const auto mib = [](const Dataset &d) { return double(d.features.numel() * d.features.element_size()) / double(1 << 20); };
    qCInfo(lcData).noquote() << QStringLiteral("loaded %1 training and %2 test samples of %3 (%4, %5 MiB in memory) in %6 s")
                                      .arg(data->train.size()).arg(data->test.size())
                                      .arg(shapeToString(data->inputShape),
                                           data->train.features.scalar_type() == torch::kUInt8   ? QStringLiteral("bytes")
                                           : data->train.features.scalar_type() == torch::kInt64 ? QStringLiteral("token ids")
                                                                                                 : QStringLiteral("float32"))
                                      .arg(mib(data->train) + mib(data->test), 0, 'f', 1)
                                      .arg(double(timer.nsecsElapsed()) / 1e9, 0, 'f', 2);
    return std::shared_ptr<const JobData>(std::move(data));
}

} // namespace flotilla
