// Built-in models: shapes, flat weights, layouts, and the model/data mismatch check.
#include "engine/training/Model.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

std::unique_ptr<Model> make(const QString &kind, std::vector<std::int64_t> shape, int classes = 10)
{
    ModelSpec spec;
    spec.kind = kind;
    auto m = createModel(spec, shape, classes);
    if (!m)
        qWarning() << m.error();
    return m ? std::move(m).value() : nullptr;
}

} // namespace

class TestModels : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void cnnHasTheDesignedLayers()
    {
        auto m = make(QStringLiteral("cnn"), {1, 28, 28});
        QVERIFY(m);
        const WeightLayout l = m->layout();
        std::vector<std::string> names;
        for (const auto &e : l.entries)
            names.push_back(e.name);
        QCOMPARE(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                  "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
        QCOMPARE(l.entries[0].shape, (std::vector<std::int64_t>{32, 1, 3, 3}));
        QCOMPARE(l.entries[2].shape, (std::vector<std::int64_t>{64, 32, 3, 3}));
        QCOMPARE(l.entries[4].shape, (std::vector<std::int64_t>{128, 1600}));
        QCOMPARE(l.entries[6].shape, (std::vector<std::int64_t>{10, 128}));
        // 32·9+32 + 64·32·9+64 + 1600·128+128 + 128·10+10
        QCOMPARE(l.totalNumel, qint64(320 + 18496 + 204928 + 1290));
        QVERIFY(checkModelFitsData(*m, {1, 28, 28}, 10));
    }

    void everyBuiltInModelFitsImages()
    {
        for (const char *kind : {"mlp", "cnn", "resnet"}) {
            auto m = make(QString::fromLatin1(kind), {1, 28, 28});
            QVERIFY2(m, kind);
            QVERIFY2(checkModelFitsData(*m, {1, 28, 28}, 10), kind);
            const torch::Tensor out = m->forward(torch::zeros({3, 1, 28, 28}));
            QCOMPARE(out.sizes().vec(), (std::vector<std::int64_t>{3, 10}));
        }
    }

    void resnetKeepsBatchNormStatisticsInItsWeights()
    {
        auto m = make(QStringLiteral("resnet"), {3, 16, 16});
        bool runningMean = false;
        for (const auto &e : m->layout().entries)
            runningMean = runningMean || e.name.find("running_mean") != std::string::npos;
        QVERIFY(runningMean);
    }

    void layoutPutsParametersThenBuffersThenCounters()
    {
        auto m = make(QStringLiteral("resnet"), {3, 16, 16});
        const WeightLayout l = m->layout();
        int counters = 0;
        TensorKind previous = TensorKind::Parameter;
        for (const auto &e : l.entries) {
            QVERIFY2(int(e.kind) >= int(previous), e.name.c_str()); // kinds never go back
            previous = e.kind;
            const bool isCounter = e.name.find("num_batches_tracked") != std::string::npos;
            const bool isStatistic = e.name.find("running_") != std::string::npos;
            QCOMPARE(e.kind == TensorKind::Counter, isCounter);
            QCOMPARE(e.kind == TensorKind::Buffer, isStatistic);
            counters += isCounter ? 1 : 0;
        }
        QCOMPARE(counters, 9); // one per BatchNorm: stem 1, two per block (6), two projections
        const WeightSegments s = l.segments();
        QVERIFY(s.parameterEnd > 0 && s.parameterEnd < s.bufferEnd && s.bufferEnd < s.total);
        QCOMPARE(s.total - s.bufferEnd, std::int64_t(counters));
        QVERIFY(!s.onlyParameters());
        QVERIFY(make(QStringLiteral("cnn"), {1, 28, 28})->layout().segments().onlyParameters());
    }

    void countersSurviveTheFlatBuffer()
    {
        // BatchNorm's num_batches_tracked travels as a float32 value and comes back exact.
        auto a = make(QStringLiteral("resnet"), {3, 16, 16});
        a->setTraining(true);
        for (int i = 0; i < 3; ++i)
            a->forward(torch::randn({4, 3, 16, 16}));
        const torch::Tensor flat = a->flatWeights();
        const WeightSegments s = a->layout().segments();
        QCOMPARE(flat.narrow(0, s.bufferEnd, s.total - s.bufferEnd).min().item<float>(), 3.0f);
        auto b = make(QStringLiteral("resnet"), {3, 16, 16});
        QVERIFY(b->loadFlatWeights(flat + 0.0f));
        for (const auto &t : b->state())
            if (t.kind == TensorKind::Counter) {
                QCOMPARE(t.tensor.scalar_type(), torch::kInt64);
                QCOMPARE(t.tensor.item<std::int64_t>(), std::int64_t(3));
            }
        // Large counts are exact up to 2^24.
        torch::Tensor big = flat.clone();
        big.narrow(0, s.bufferEnd, s.total - s.bufferEnd).fill_(16777215.0f);
        QVERIFY(b->loadFlatWeights(big));
        for (const auto &t : b->state())
            if (t.kind == TensorKind::Counter)
                QCOMPARE(t.tensor.item<std::int64_t>(), std::int64_t(16777215));
    }

    void flatWeightsRoundTrip()
    {
        auto a = make(QStringLiteral("cnn"), {1, 28, 28});
        auto b = make(QStringLiteral("cnn"), {1, 28, 28});
        const torch::Tensor wa = a->flatWeights();
        QVERIFY(!torch::equal(wa, b->flatWeights())); // different random initializations
        QVERIFY(b->loadFlatWeights(wa));
        QVERIFY(torch::equal(wa, b->flatWeights()));
        const torch::Tensor x = torch::randn({2, 1, 28, 28});
        a->setTraining(false);
        b->setTraining(false);
        QVERIFY(torch::allclose(a->forward(x), b->forward(x)));
        auto c = a->clone();
        QVERIFY(torch::equal(wa, c->flatWeights()));
        QCOMPARE(c->layout().digest(), a->layout().digest());
    }

    void wrongSizedWeightsAreRefused()
    {
        auto m = make(QStringLiteral("mlp"), {8});
        auto r = m->loadFlatWeights(torch::zeros({7}));
        QVERIFY(!r);
        QVERIFY(r.error().contains(QStringLiteral("7")));
    }

    void layoutDigestDiffersBetweenArchitectures()
    {
        QVERIFY(make(QStringLiteral("cnn"), {1, 28, 28})->layout().digest()
                != make(QStringLiteral("mlp"), {1, 28, 28})->layout().digest());
        QCOMPARE(make(QStringLiteral("cnn"), {1, 28, 28})->layout().digest(),
                 make(QStringLiteral("cnn"), {1, 28, 28})->layout().digest());
    }

    void cnnOnTabularDataIsAClearError()
    {
        ModelSpec spec;
        spec.kind = QStringLiteral("cnn");
        auto m = createModel(spec, {8}, 3);
        QVERIFY(!m);
        QVERIFY2(m.error().contains(QStringLiteral("[8]")), qPrintable(m.error()));
        QVERIFY(m.error().contains(QStringLiteral("mlp")));
    }

    void cnnOnTinyImagesIsAClearError()
    {
        ModelSpec spec;
        spec.kind = QStringLiteral("cnn");
        auto m = createModel(spec, {1, 6, 6}, 3);
        QVERIFY(!m);
        QVERIFY2(m.error().contains(QStringLiteral("1×6×6")), qPrintable(m.error()));
    }

    void wrongNumberOfClassesIsCaughtBeforeTraining()
    {
        auto m = make(QStringLiteral("mlp"), {1, 28, 28}, 10);
        auto r = checkModelFitsData(*m, {1, 28, 28}, 5);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("5 classes")), qPrintable(r.error()));
    }

    void mismatchedInputIsCaughtBeforeTraining()
    {
        // An MLP built for 784 inputs cannot take 3×32×32 images.
        auto m = make(QStringLiteral("mlp"), {1, 28, 28}, 10);
        auto r = checkModelFitsData(*m, {3, 32, 32}, 10);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(QStringLiteral("3×32×32")), qPrintable(r.error()));
    }

    void missingTorchScriptFileIsAClearError()
    {
        ModelSpec spec;
        spec.kind = QStringLiteral("torchscript");
        spec.path = QStringLiteral("/nonexistent/model.pt");
        auto m = createModel(spec, {1, 28, 28}, 10);
        QVERIFY(!m);
        QVERIFY(m.error().contains(QStringLiteral("/nonexistent/model.pt")));
    }

    void garbageTorchScriptFileIsAClearError()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("bad.pt"));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("this is not a TorchScript archive");
        f.close();
        ModelSpec spec;
        spec.kind = QStringLiteral("torchscript");
        spec.path = path;
        auto m = createModel(spec, {1, 28, 28}, 10);
        QVERIFY(!m);
        QVERIFY2(m.error().contains(QStringLiteral("cannot load TorchScript")), qPrintable(m.error()));
    }
};

QTEST_GUILESS_MAIN(TestModels)
#include "tst_models.moc"
