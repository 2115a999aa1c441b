// Weights and shard data as bytes: round trips, and every mismatch a peer could send.
#include "TestSupport.h"
#include "WireFormat.h"

#include <QCborArray>
#include <QtTest>

#include <torch/torch.h>

using namespace flotilla;

namespace {

WeightLayout mlpLayout(int hidden)
{
    ModelSpec spec;
    spec.kind = QStringLiteral("mlp");
    spec.hidden = {hidden};
    return createModel(spec, {4}, 2).value()->layout();
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
