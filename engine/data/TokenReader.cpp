#include "engine/data/TokenReader.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>

#include <torch/torch.h>

namespace flotilla {

namespace {

// The ids of one file, widened to int64.
Result<torch::Tensor> readIds(const QString &path, int width)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open the token file '%1': %2").arg(path, file.errorString()));
    const qint64 size = file.size();
    if (size % width != 0)
        return fail(QStringLiteral("the token file '%1' is %2 bytes, not a whole number of %3-byte ids; is "
                                   "'dataset.token_type' uint%4 what wrote it?")
                        .arg(path).arg(size).arg(width).arg(width * 8));
    uchar *mapped = size > 0 ? file.map(0, size) : nullptr;
    if (size > 0 && !mapped)
        return fail(QStringLiteral("cannot read the token file '%1': %2").arg(path, file.errorString()));
    const std::int64_t count = size / width;
    torch::Tensor ids;
    if (count > 0) {
        // Little-endian on every machine Flotilla runs on, as NumPy's tofile() wrote it.
        const torch::Tensor raw = torch::from_blob(mapped, {count}, width == 2 ? torch::kInt16 : torch::kInt32);
        ids = raw.to(torch::kInt64);
        ids.bitwise_and_(torch::Scalar(static_cast<std::int64_t>(width == 2 ? 0xFFFF : 0xFFFFFFFFLL))); // the ids are unsigned
    } else {
        ids = torch::empty({0}, torch::kInt64);
    }
    file.unmap(mapped);
    return ids;
}

// Contexts [count, context] and their targets, from consecutive ids.
Dataset contexts(const torch::Tensor &ids, int context, const QString &name)
{
    const std::int64_t count = (ids.size(0) - 1) / context;
    Dataset d;
    d.name = name;
    d.features = ids.narrow(0, 0, count * context).reshape({count, context}).contiguous();
    d.labels = ids.narrow(0, 1, count * context).reshape({count, context}).contiguous();
    return d;
}

} // namespace

Result<TokenFile> readTokenFile(const QString &path, const QString &type, int context, double testFraction)
{
    if (type != QLatin1String("uint16") && type != QLatin1String("uint32"))
        return fail(QStringLiteral("the token type '%1' is not uint16 or uint32").arg(type));
    if (context < 1)
        return fail(QStringLiteral("the context length %1 is not positive").arg(context));
    const int width = type == QLatin1String("uint16") ? 2 : 4;
    const QFileInfo info(path);
    if (!info.exists())
        return fail(QStringLiteral("the token file '%1' does not exist").arg(path));
    QString trainPath = path;
    QString testPath;
    if (info.isDir()) {
        const QDir dir(path);
        trainPath = dir.filePath(QStringLiteral("train.bin"));
        if (!QFileInfo::exists(trainPath))
            return fail(QStringLiteral("the folder '%1' holds no train.bin (a token file; val.bin, if there, is the "
                                       "test set)")
                            .arg(path));
        if (QFileInfo::exists(dir.filePath(QStringLiteral("val.bin"))))
            testPath = dir.filePath(QStringLiteral("val.bin"));
    }
    try {
        auto trainIds = readIds(trainPath, width);
        if (!trainIds)
            return trainIds.takeError();
        TokenFile out;
        const std::int64_t minimum = testPath.isEmpty() ? 2 * std::int64_t(context) + 1 : std::int64_t(context) + 1;
        if (trainIds->size(0) < minimum)
            return fail(QStringLiteral("the token file '%1' holds %2 tokens; contexts of %3 need at least %4")
                            .arg(trainPath).arg(trainIds->size(0)).arg(context).arg(minimum));
        const QString name = info.fileName();
        std::int64_t vocabulary = trainIds->max().item<std::int64_t>() + 1;
        if (testPath.isEmpty()) {
            Dataset all = contexts(*trainIds, context, name);
            const std::int64_t n = all.size();
            const std::int64_t held = std::clamp<std::int64_t>(std::int64_t(double(n) * testFraction), 1, n - 1);
            out.train = all;
            out.train.features = all.features.narrow(0, 0, n - held).contiguous();
            out.train.labels = all.labels.narrow(0, 0, n - held).contiguous();
            out.test = all;
            out.test.features = all.features.narrow(0, n - held, held).contiguous();
            out.test.labels = all.labels.narrow(0, n - held, held).contiguous();
        } else {
            auto testIds = readIds(testPath, width);
            if (!testIds)
                return testIds.takeError();
            if (testIds->size(0) < context + 1)
                return fail(QStringLiteral("the token file '%1' holds %2 tokens; contexts of %3 need at least %4")
                                .arg(testPath).arg(testIds->size(0)).arg(context).arg(context + 1));
            vocabulary = std::max(vocabulary, testIds->max().item<std::int64_t>() + 1);
            out.train = contexts(*trainIds, context, name);
            out.test = contexts(*testIds, context, name);
            out.hasTestFile = true;
        }
        if (vocabulary < 2)
            return fail(QStringLiteral("the token file '%1' holds only one token id; a language model needs at least two")
                            .arg(trainPath));
        if (vocabulary > (std::int64_t(1) << 24))
            return fail(QStringLiteral("the token file '%1' holds the id %2; vocabularies past 2^24 are not supported")
                            .arg(trainPath).arg(vocabulary - 1));
        out.train.numClasses = out.test.numClasses = int(vocabulary);
        return out;
    } catch (const std::exception &e) {
        return fail(QStringLiteral("cannot read the token file '%1': %2").arg(trainPath, QString::fromLocal8Bit(e.what())));
    }
}

} // namespace flotilla
