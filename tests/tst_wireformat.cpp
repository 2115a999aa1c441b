// Weights and shard data as bytes: round trips, and every mismatch a peer could send.
#include "TestSupport.h"
#include "engine/wire/WireFormat.h"

#include <QCborArray>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

WeightLayout mlpLayout(int hidden)
{
    ModelSpec spec;
    spec.kind = QStringLiteral("mlp");
    spec.hidden = {hidden};
    return createModel(spec, {4}, 2).value()->layout();
}

// Four RGB images of 5×6 as bytes, with the normalization and augmentation of their job.
Dataset imageShard()
{
    torch::manual_seed(5);
    Dataset d;
    d.features = torch::randint(0, 256, {4, 3, 5, 6}, torch::kUInt8);
    d.labels = torch::tensor(std::vector<std::int64_t>{0, 2, 1, 2});
    d.numClasses = 3;
    d.normalization.mean = {0.1f, 0.2f, 0.3f};
    d.normalization.stddev = {0.5f, 0.6f, 0.7f};
    d.augmentation = Augmentation{2, true};
    return d;
}

} // namespace

class TestWireFormat : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void weightsRoundTrip()
    {
        const WeightLayout layout = mlpLayout(8);
        const torch::Tensor w = torch::randn({layout.totalNumel});
        const QByteArray bytes = weightsToBytes(w);
        QCOMPARE(bytes.size(), qsizetype(layout.totalNumel * 4));
        QVERIFY(checkWeightManifest(weightManifest(layout), layout));
        auto back = weightsFromBytes(bytes, layout);
        QVERIFY(back);
        QVERIFY(torch::equal(*back, w));
    }

    void manifestMismatchesAreNamed()
    {
        const WeightLayout mine = mlpLayout(8);
        auto other = checkWeightManifest(weightManifest(mlpLayout(9)), mine);
        QVERIFY(!other);
        QVERIFY2(other.error().contains(QStringLiteral("tensor 0 of the weights is 'layers.0.weight' [9, 4]; the model's "
                                                       "is 'layers.0.weight' [8, 4]")),
                 qPrintable(other.error()));
        QCborMap doubles = weightManifest(mine);
        doubles.insert(QStringLiteral("dtype"), QStringLiteral("float64"));
        QVERIFY(checkWeightManifest(doubles, mine).error().contains(QStringLiteral("float64")));
        QCborMap fewer = weightManifest(mine);
        QCborArray tensors = fewer.value(QStringLiteral("tensors")).toArray();
        tensors.removeLast();
        fewer.insert(QStringLiteral("tensors"), tensors);
        QVERIFY(checkWeightManifest(fewer, mine).error().contains(QStringLiteral("3 tensors; the model has 4")));
        QVERIFY(!checkWeightManifest(QCborMap{}, mine));
    }

    void wrongByteCountIsRefused()
    {
        const WeightLayout layout = mlpLayout(8);
        auto r = weightsFromBytes(QByteArray(int(layout.totalNumel * 4 - 4), '\0'), layout);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("bytes")), qPrintable(r.error()));
    }

    void shardRoundTrip()
    {
        const auto data = test::blobs(50, 3, 1);
        const Dataset shard = data->train.select({4, 9, 2});
        const QByteArray bytes = shardToBytes(shard);
        auto back = shardFromBytes(bytes, shardManifest(shard));
        QVERIFY2(back, qPrintable(back.error()));
        QVERIFY(torch::equal(back->features, shard.features));
        QVERIFY(torch::equal(back->labels, shard.labels));
        QCOMPARE(back->numClasses, 2);
    }

    void imageShardsTravelAsBytes()
    {
        const Dataset shard = imageShard();
        const QByteArray bytes = shardToBytes(shard);
        // One byte per pixel, eight per label, two float32 per channel: never float32 pixels.
        QCOMPARE(bytes.size(), qsizetype(4 * 3 * 5 * 6 + 4 * 8 + 3 * 2 * 4));
        const QCborMap manifest = shardManifest(shard);
        QCOMPARE(manifest.value(QStringLiteral("dtype")).toString(), QStringLiteral("uint8"));
        auto back = shardFromBytes(bytes, manifest);
        QVERIFY2(back, qPrintable(back.error()));
        QVERIFY(back->features.scalar_type() == torch::kUInt8);
        QVERIFY(torch::equal(back->features, shard.features));
        QVERIFY(torch::equal(back->labels, shard.labels));
        QCOMPARE(back->normalization.mean, shard.normalization.mean);
        QCOMPARE(back->normalization.stddev, shard.normalization.stddev);
        QCOMPARE(back->augmentation.cropPadding, 2);
        QVERIFY(back->augmentation.horizontalFlip);
    }

    void shardDigestCoversWhatTrainingReads()
    {
        const Dataset shard = imageShard();
        const QCborMap manifest = shardManifest(shard);
        const QByteArray bytes = shardToBytes(shard);
        const QByteArray digest = shardDigest(manifest, bytes);
        QCOMPARE(digest.size(), qsizetype(32));
        // What the network layer adds to a header does not change the shard's identity.
        QCborMap header = manifest;
        header.insert(QStringLiteral("shard"), 3);
        header.insert(QStringLiteral("payload_size"), qint64(bytes.size()));
        QCOMPARE(shardDigest(header, bytes), digest);
        // The same pixels under another job's normalization or augmentation are another shard.
        Dataset otherNorm = shard;
        otherNorm.normalization.mean[1] = 0.25f;
        QVERIFY(shardDigest(shardManifest(otherNorm), shardToBytes(otherNorm)) != digest);
        QCborMap noFlip = manifest;
        noFlip.insert(QStringLiteral("horizontal_flip"), false);
        QVERIFY(shardDigest(noFlip, bytes) != digest);
        QByteArray flipped = bytes;
        flipped[7] = char(flipped[7] ^ 1);
        QVERIFY(shardDigest(manifest, flipped) != digest);
    }

    void mismatchedImageShardsAreRefused()
    {
        const Dataset shard = imageShard();
        const QByteArray bytes = shardToBytes(shard);
        const QCborMap manifest = shardManifest(shard);
        struct Case
        {
            const char *what;
            QByteArray bytes;
            QCborMap manifest;
            const char *expected;
        };
        const auto with = [&](const char *key, const QCborValue &value) {
            QCborMap m = manifest;
            if (value.isUndefined())
                m.remove(QLatin1String(key));
            else
                m.insert(QLatin1String(key), value);
            return m;
        };
        Dataset zeroStd = shard;
        zeroStd.normalization.stddev[2] = 0.0f;
        Dataset nanMean = shard;
        nanMean.normalization.mean[0] = std::numeric_limits<float>::quiet_NaN();
        const auto table = test::blobs(20, 3, 1)->train.select({0, 1});
        QCborMap tableFlip = shardManifest(table);
        tableFlip.insert(QStringLiteral("horizontal_flip"), true);
        const Case cases[] = {
            // Bytes announced as float32: the size cannot match.
            {"bytes as float32", bytes, with("dtype", QStringLiteral("float32")), "need"},
            {"float64", bytes, with("dtype", QStringLiteral("float64")), "'float64'"},
            {"short", bytes.left(bytes.size() - 4), manifest, "need"},
            {"flat bytes", bytes, with("sample_shape", QCborArray{90}), "must be images"},
            {"channels", bytes, with("normalization", 2), "2 normalization values"},
            {"zero std", shardToBytes(zeroStd), manifest, "normalization 2 is unusable"},
            {"NaN mean", shardToBytes(nanMean), manifest, "normalization 0 is unusable"},
            {"wide crop", bytes, with("crop_padding", 6), "crop padding 6"},
            {"no flip key", bytes, with("horizontal_flip", QCborValue()), "augmentation is malformed"},
            {"flipped table", shardToBytes(table), tableFlip, "cannot have"},
            // Counts as floating-point numbers: converting 1e300 or NaN to an integer is
            // undefined behaviour, so they are refused as malformed, never converted.
            {"float count", bytes, with("samples", 1e300), "malformed"},
            {"integral float count", bytes, with("samples", 3.0), "malformed"},
            {"NaN dimension", bytes, with("sample_shape", QCborArray{1, std::nan(""), 3}), "malformed"},
            {"infinite normalization", bytes, with("normalization", std::numeric_limits<double>::infinity()),
             "-1 normalization values"},
        };
        for (const Case &c : cases) {
            auto r = shardFromBytes(c.bytes, c.manifest);
            QVERIFY2(!r, c.what);
            QVERIFY2(r.error().contains(QLatin1String(c.expected)), qPrintable(QLatin1String(c.what) + u':' + r.error()));
        }
    }

    void malformedShardsAreRefused()
    {
        const auto data = test::blobs(50, 3, 1);
        const Dataset shard = data->train.select({0, 1, 2, 3});
        const QByteArray bytes = shardToBytes(shard);
        QCborMap manifest = shardManifest(shard);
        QVERIFY(shardFromBytes(bytes.left(bytes.size() - 1), manifest).error().contains(QStringLiteral("bytes")));
        QCborMap huge = manifest;
        huge.insert(QStringLiteral("samples"), qint64(1) << 50);
        QVERIFY(!shardFromBytes(bytes, huge));
        QCborMap noShape = manifest;
        noShape.remove(QStringLiteral("sample_shape"));
        QVERIFY(shardFromBytes(bytes, noShape).error().contains(QStringLiteral("malformed")));
        QCborMap fewClasses = manifest;
        fewClasses.insert(QStringLiteral("classes"), 1);
        QVERIFY(!shardFromBytes(bytes, fewClasses));

        Dataset poisoned = shard;
        poisoned.features = shard.features.clone();
        poisoned.features[1][2] = std::numeric_limits<float>::quiet_NaN();
        QVERIFY(shardFromBytes(shardToBytes(poisoned), manifest).error().contains(QStringLiteral("NaN")));
        Dataset badLabel = shard;
        badLabel.labels = torch::tensor(std::vector<std::int64_t>{0, 1, 7, 0});
        QVERIFY(shardFromBytes(shardToBytes(badLabel), manifest).error().contains(QStringLiteral("outside [0, 2)")));
    }
};

QTEST_GUILESS_MAIN(TestWireFormat)
#include "tst_wireformat.moc"
