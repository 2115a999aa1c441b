// A built-in model's model.pt is TorchScript that Python loads with torch.jit.load alone: in
// eval mode, with every parameter and buffer under the names Flotilla uses, computing what
// the C++ model computes (in eval and in training mode). And the README's snippet evaluates
// a real run's model.pt on new data with Flotilla's accuracy. Uses Debian's python3-torch.
#include "TestSupport.h"
#include "engine/training/Model.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QtTest>

using namespace flotilla;

namespace {

// argv: model.pt, expected.pt (a dict of tensors written by the test: the input, Flotilla's
// output on it, "state/NAME" for every tensor, "train/NAME" for every buffer after one more
// forward pass in training mode). Prints one JSON report.
const char *const kCompare = R"PY(
import json, sys, torch
model = torch.jit.load(sys.argv[1])
expected = torch.load(sys.argv[2])
state = model.state_dict()
names = {k[len("state/"):] for k in expected if k.startswith("state/")}
report = {"training": model.training, "missing": sorted(names - state.keys()), "extra": sorted(state.keys() - names)}
common = sorted(names & state.keys())
report["dtypes"] = [n for n in common if state[n].dtype != expected["state/" + n].dtype]
report["state_diff"] = max([(state[n].double() - expected["state/" + n].double()).abs().max().item() for n in common] + [0])
report["counters"] = {n: int(v.item()) for n, v in state.items() if not v.is_floating_point()}
with torch.no_grad():
    report["output_diff"] = (model(expected["input"]) - expected["output"]).abs().max().item()
    model.train()
    report["training_after_train"] = model.training
    model(expected["input"])
after = model.state_dict()
report["train_diff"] = max([(after[k[len("train/"):]].double() - v.double()).abs().max().item()
                            for k, v in expected.items() if k.startswith("train/")] + [0])
print(json.dumps(report))
)PY";

std::unique_ptr<Model> builtIn(const QString &kind)
{
    ModelSpec spec;
    spec.kind = kind;
    spec.hidden = {32, 16};
    spec.dropout = 0.25; // on in training, off in eval: the saved model must be in eval mode
    auto m = createModel(spec, {1, 28, 28}, 10);
    if (!m)
        qWarning() << m.error();
    return m ? std::move(m).value() : nullptr;
}

QJsonObject parseReport(const test::ProcessRun &run)
{
    if (!run.finished || run.exitCode != 0)
        qWarning().noquote() << run.err;
    return QJsonDocument::fromJson(run.out.trimmed().toUtf8()).object();
}

} // namespace

class TestScriptExport : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::python()), "Debian's python3 with python3-torch is needed");
    }

    void builtInModelLoadsInPythonAndComputesTheSame_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<int>("batchNorms");
        QTest::newRow("mlp") << QStringLiteral("mlp") << 0;
        QTest::newRow("cnn") << QStringLiteral("cnn") << 0;
        // stem, three blocks of two, and the projections of the two that change shape
        QTest::newRow("resnet") << QStringLiteral("resnet") << 9;
    }

    void builtInModelLoadsInPythonAndComputesTheSame()
    {
        QFETCH(QString, kind);
        QFETCH(int, batchNorms);
        torch::manual_seed(5);
        auto model = builtIn(kind);
        QVERIFY(model);
        // Three batches in training mode move the running statistics and count to 3.
        {
            torch::NoGradGuard noGrad;
            model->setTraining(true);
            for (int i = 0; i < 3; ++i)
                model->forward(torch::randn({8, 1, 28, 28}) * 2 + 0.5);
        }
        QTemporaryDir dir;
        const QString saved = dir.filePath(QStringLiteral("model.pt"));
        const Result<void> written = model->save(saved);
        QVERIFY2(written, qPrintable(written ? QString() : written.error()));

        c10::Dict<std::string, torch::Tensor> expected;
        const torch::Tensor input = torch::randn({6, 1, 28, 28});
        torch::NoGradGuard noGrad;
        model->setTraining(false);
        expected.insert("input", input);
        expected.insert("output", model->forward(input));
        int counters = 0;
        for (const auto &t : model->state()) {
            expected.insert("state/" + t.name, t.tensor.clone());
            counters += t.kind == TensorKind::Counter;
        }
        QCOMPARE(counters, batchNorms);
        model->setTraining(true);
        model->forward(input);
        for (const auto &t : model->state())
            if (t.kind != TensorKind::Parameter)
                expected.insert("train/" + t.name, t.tensor.clone());
        const std::vector<char> bytes = torch::pickle_save(c10::IValue(expected));
        test::writeFile(dir.filePath(QStringLiteral("expected.pt")), QByteArray(bytes.data(), qsizetype(bytes.size())));

        const QJsonObject r = parseReport(
            test::runPython(QString::fromLatin1(kCompare), {saved, dir.filePath(QStringLiteral("expected.pt"))}));
        QVERIFY2(!r.isEmpty(), "the comparison script printed no report");
        qInfo().noquote() << kind << QJsonDocument(r).toJson(QJsonDocument::Compact);
        QCOMPARE(r.value(QStringLiteral("training")).toBool(true), false);
        QCOMPARE(r.value(QStringLiteral("missing")).toArray(), QJsonArray());
        QCOMPARE(r.value(QStringLiteral("extra")).toArray(), QJsonArray());
        QCOMPARE(r.value(QStringLiteral("dtypes")).toArray(), QJsonArray()); // counters stay int64
        QCOMPARE(r.value(QStringLiteral("state_diff")).toDouble(-1), 0.0);
        QVERIFY(r.value(QStringLiteral("output_diff")).toDouble(1) < 1e-5);
        QCOMPARE(r.value(QStringLiteral("training_after_train")).toBool(), true);
        // The running statistics and counters move in Python's training mode as in Flotilla's.
        QVERIFY(r.value(QStringLiteral("train_diff")).toDouble(1) < 1e-5);
        const QJsonObject counted = r.value(QStringLiteral("counters")).toObject();
        QCOMPARE(counted.size(), batchNorms);
        for (auto it = counted.begin(); it != counted.end(); ++it)
            QVERIFY2(it.value().toInt() == 3, qPrintable(it.key()));
    }

    // A built-in model's model.pt is also a TorchScript model Flotilla can go on training:
    // the same tensors in the same order, the same outputs, every parameter trainable.
    void builtInModelPtLoadsBackAsTorchScript()
    {
        for (const QString &kind : {QStringLiteral("mlp"), QStringLiteral("cnn"), QStringLiteral("resnet")}) {
            torch::manual_seed(9);
            auto model = builtIn(kind);
            QVERIFY(model);
            {
                torch::NoGradGuard noGrad;
                model->setTraining(true);
                model->forward(torch::randn({4, 1, 28, 28}));
            }
            QTemporaryDir dir;
            ModelSpec spec;
            spec.kind = QStringLiteral("torchscript");
            spec.path = dir.filePath(QStringLiteral("model.pt"));
            QVERIFY(model->save(spec.path));
            auto loaded = createModel(spec, {1, 28, 28}, 10);
            QVERIFY2(loaded, qPrintable(loaded ? QString() : loaded.error()));
            QCOMPARE((*loaded)->layout().digest(), model->layout().digest());
            QVERIFY2(torch::equal((*loaded)->flatWeights(), model->flatWeights()), qPrintable(kind));
            QCOMPARE((*loaded)->parameters().size(), model->parameters().size());
            torch::NoGradGuard noGrad;
            model->setTraining(false);
            (*loaded)->setTraining(false);
            const torch::Tensor input = torch::randn({3, 1, 28, 28});
            QVERIFY2(torch::allclose((*loaded)->forward(input), model->forward(input), 1e-5, 1e-6), qPrintable(kind));
        }
    }

    void readmeSnippetEvaluatesARun()
    {
        // The snippet in the README, as a user copies it, on a real run of the default model.
        QFile readme(QStringLiteral(FLOTILLA_SOURCE_DIR "/README.md"));
        QVERIFY(readme.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(readme.readAll());
        const auto match = QRegularExpression(QStringLiteral("<!-- model.pt snippet -->\\s*```python\\n(.*?)```"),
                                              QRegularExpression::DotMatchesEverythingOption)
                               .match(text);
        QVERIFY2(match.hasMatch(), "README.md has no Python block after '<!-- model.pt snippet -->'");
        QString snippet = match.captured(1);
        QVERIFY(snippet.contains(QStringLiteral("\"runs/mine\"")));
        QVERIFY(snippet.contains(QStringLiteral("\"/usr/share/datasets/fashion-mnist\"")));

        QTemporaryDir dir;
        const QString runDir = dir.filePath(QStringLiteral("run"));
        const test::ProcessRun train = test::runFlotilla(
            {QStringLiteral("train"), QStringLiteral("--model"), QStringLiteral("cnn"), QStringLiteral("--epochs"),
             QStringLiteral("1"), QStringLiteral("--workers"), QStringLiteral("2"), QStringLiteral("--shards"),
             QStringLiteral("4"), QStringLiteral("--train-limit"), QStringLiteral("3000"),
             QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--run-dir"), runDir,
             QStringLiteral("--quiet")},
            240000);
        QVERIFY2(train.finished && train.exitCode == 0, qPrintable(train.err));
        const double flotilla = test::finalTestAccuracy(runDir);
        // Measured 66.1% after this one epoch; two asynchronous workers vary it by a few points.
        QVERIFY2(flotilla > 0.58, qPrintable(QString::number(flotilla)));

        snippet.replace(QStringLiteral("\"runs/mine\""), u'"' + runDir + u'"');
        snippet.replace(QStringLiteral("\"/usr/share/datasets/fashion-mnist\""), u'"' + test::fashionMnistDir() + u'"');
        const test::ProcessRun run = test::runPython(snippet, {});
        QVERIFY2(run.finished && run.exitCode == 0, qPrintable(run.err));
        const QString out = run.out.trimmed();
        QVERIFY2(out.startsWith(QStringLiteral("accuracy ")), qPrintable(out));
        const double python = out.section(u' ', 1).toDouble();
        qInfo("full test set: Flotilla %.5f, the README's snippet %.5f", flotilla, python);
        QVERIFY(qAbs(python - flotilla) < 0.003);
    }
};

QTEST_GUILESS_MAIN(TestScriptExport)
#include "tst_scriptexport.moc"
