// The tasks a job may train (training.task): each loss against values worked out by hand,
// each task's training step against one computed from its hand-written loss, the
// evaluation's metrics (R², RMSE, MAE; per-label and mean F1; perplexity) against hand
// counts, the readers of numeric targets and token files on good and bad input (each bad
// case named in its error), shards of every kind of target on the wire, the job file's
// checks of tasks against data and models, and regression and multi-label jobs run by the
// real binary whose scores a wrong loss would miss.
#include "TestSupport.h"
#include "engine/data/CsvReader.h"
#include "engine/data/JobData.h"
#include "engine/data/NpyReader.h"
#include "engine/data/TokenReader.h"
#include "engine/training/Trainer.h"
#include "engine/wire/WireFormat.h"
#include "job/Tasks.h"

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <cmath>

using namespace flotilla;

namespace {

torch::Tensor rows(std::initializer_list<std::initializer_list<float>> values)
{
    std::vector<float> flat;
    std::int64_t width = 0;
    for (const auto &row : values) {
        width = std::int64_t(row.size());
        flat.insert(flat.end(), row.begin(), row.end());
    }
    return torch::tensor(flat).reshape({std::int64_t(values.size()), width});
}

void writeFile(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY2(f.open(QIODevice::WriteOnly), qPrintable(path));
    f.write(bytes);
}

QByteArray uint16s(const std::vector<int> &ids)
{
    QByteArray out;
    for (const int id : ids) {
        out += char(id & 0xFF);
        out += char((id >> 8) & 0xFF);
    }
    return out;
}

// A little-endian float32 .npy file of the given shape, as numpy.save writes it.
QByteArray npyFloats(const std::vector<std::int64_t> &shape, const std::vector<float> &values)
{
    QByteArray dims = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
        dims += QByteArray::number(qint64(shape[i])) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
    QByteArray header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + dims + "), }";
    while ((10 + header.size() + 1) % 64 != 0)
        header += ' ';
    header += '\n';
    QByteArray out("\x93NUMPY\x01\x00", 8);
    out += char(header.size() & 0xFF);
    out += char(header.size() >> 8);
    out += header;
    out.append(reinterpret_cast<const char *>(values.data()), qsizetype(values.size() * 4));
    return out;
}

// A table whose targets are linear in its features (plus a little noise): a model trained
// with a regression loss explains nearly all of their variance.
QString regressionCsv(const QString &dir, int rowsWanted)
{
    QByteArray csv = "f1,f2,f3,f4,height,weight\n";
    torch::manual_seed(3);
    const torch::Tensor x = torch::randn({rowsWanted, 4});
    const torch::Tensor noise = torch::randn({rowsWanted, 2}) * 0.05;
    for (int i = 0; i < rowsWanted; ++i) {
        const auto v = [&](int c) { return x[i][c].item<double>(); };
        const double a = 2.0 * v(0) - 1.5 * v(1) + 0.5 * v(2) + 3.0 + noise[i][0].item<double>();
        const double b = -v(0) + v(3) * 2.0 - 1.0 + noise[i][1].item<double>();
        csv += QByteArray::number(v(0), 'g', 6) + ',' + QByteArray::number(v(1), 'g', 6) + ','
               + QByteArray::number(v(2), 'g', 6) + ',' + QByteArray::number(v(3), 'g', 6) + ','
               + QByteArray::number(a, 'g', 6) + ',' + QByteArray::number(b, 'g', 6) + '\n';
    }
    const QString path = dir + QStringLiteral("/table.csv");
    writeFile(path, csv);
    return path;
}

// The last value of a column of a run's metrics.csv that has one, or NaN.
QList<double> column(const QString &runDir, const QByteArray &name)
{
    QFile f(runDir + QStringLiteral("/metrics.csv"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    const QList<QByteArray> header = f.readLine().trimmed().split(',');
    const auto at = header.indexOf(name);
    QList<double> values;
    while (at >= 0 && !f.atEnd()) {
        const QList<QByteArray> cells = f.readLine().trimmed().split(',');
        if (at < cells.size() && !cells[at].isEmpty())
            values << cells[at].toDouble();
    }
    return values;
}

} // namespace

class TestTasks : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void theTableNamesEveryTaskOnce()
    {
        QCOMPARE(taskNames(), (QStringList{QStringLiteral("classification"), QStringLiteral("regression"),
                                           QStringLiteral("multi-label"), QStringLiteral("next-token")}));
        for (const QString &name : taskNames()) {
            auto task = taskFromName(name);
            QVERIFY2(task, qPrintable(name));
            QCOMPARE(taskName(*task), name);
        }
        auto unknown = taskFromName(QStringLiteral("segmentation"));
        QVERIFY(!unknown);
        QVERIFY2(unknown.error().contains(QStringLiteral("segmentation")), qPrintable(unknown.error()));
        QCOMPARE(taskInfo(QStringLiteral("regression")).scoreKey, QStringLiteral("r2"));
    }

    void lossesAreTheValuesWorkedOutByHand()
    {
        // Regression: errors 1, 0, -2, 3.
        const torch::Tensor out = rows({{1, 2}, {3, 4}});
        const torch::Tensor target = rows({{0, 2}, {5, 1}});
        const TaskLoss mse{Task::Regression, false, 0};
        const TaskLoss l1{Task::Regression, true, 0};
        QCOMPARE(mse(out, target).item<double>(), (1.0 + 0 + 4 + 9) / 4);
        QCOMPARE(l1(out, target).item<double>(), (1.0 + 0 + 2 + 3) / 4);
        // One target per row: a model's [B, 1] against targets [B].
        QCOMPARE(mse(rows({{1}, {3}}), torch::tensor({0.0f, 5.0f})).item<double>(), (1.0 + 4.0) / 2);
        // Multi-label: σ(0) = 1/2 for a present label, σ(ln 3) = 3/4 for an absent one:
        // -ln(1/2) and -ln(1/4).
        const double ln2 = std::log(2.0);
        const TaskLoss bce{Task::MultiLabel, false, 0};
        QVERIFY(std::abs(bce(rows({{0.0f, float(std::log(3.0))}}), rows({{1, 0}})).item<double>() - (ln2 + 2 * ln2) / 2)
                < 1e-6);
        // Next-token: two positions of a vocabulary of two; the first has uniform logits
        // (−ln 1/2), the second gives its target 1 a share of 1/(3 + 1) (−ln 1/4).
        const torch::Tensor logits = torch::tensor({0.0f, 0.0f, float(std::log(3.0)), 0.0f}).reshape({1, 2, 2});
        const torch::Tensor next = torch::tensor({0, 1}, torch::kInt64).reshape({1, 2});
        const TaskLoss perToken{Task::NextToken, false, 0};
        QVERIFY(std::abs(perToken(logits, next).item<double>() - (ln2 + 2 * ln2) / 2) < 1e-6);
        // Classification as before: uniform logits over four classes cost ln 4.
        const TaskLoss classes;
        QVERIFY(std::abs(classes(torch::zeros({3, 4}), torch::tensor({0, 1, 3}, torch::kInt64)).item<double>() - 2 * ln2)
                < 1e-6);
    }

    void eachTaskTrainsAStepOfItsOwnLoss_data()
    {
        QTest::addColumn<QString>("task");
        QTest::addColumn<QString>("regressionLoss");
        QTest::newRow("regression mse") << QStringLiteral("regression") << QStringLiteral("mse");
        QTest::newRow("regression l1") << QStringLiteral("regression") << QStringLiteral("l1");
        QTest::newRow("multi-label") << QStringLiteral("multi-label") << QStringLiteral("mse");
    }

    void eachTaskTrainsAStepOfItsOwnLoss()
    {
        QFETCH(QString, task);
        QFETCH(QString, regressionLoss);
        // An MLP of 3 outputs; targets of three numbers, or three 0/1 labels.
        torch::manual_seed(11);
        Dataset d;
        d.features = torch::randn({16, 5});
        d.labels = task == QLatin1String("regression") ? torch::randn({16, 3}) * 2.0
                                                       : torch::randint(0, 2, {16, 3}).to(torch::kFloat);
        d.numClasses = 3;
        ModelSpec spec;
        spec.kind = QStringLiteral("mlp");
        spec.hidden = {6};
        auto model = createModel(spec, {5}, 3).value();
        const torch::Tensor start = model->flatWeights();

        // The step by hand: the loss written out, its gradient, w − lr · g.
        const double lr = 0.1;
        auto reference = createModel(spec, {5}, 3).value();
        QVERIFY(reference->loadFlatWeights(start));
        const torch::Tensor o = reference->forward(d.features);
        torch::Tensor loss;
        if (task == QLatin1String("multi-label")) {
            const torch::Tensor p = torch::sigmoid(o);
            loss = -(d.labels * torch::log(p) + (1 - d.labels) * torch::log(1 - p)).mean();
        } else {
            loss = regressionLoss == QLatin1String("l1") ? (o - d.labels).abs().mean() : (o - d.labels).square().mean();
        }
        loss.backward();
        std::vector<torch::Tensor> stepped;
        for (const auto &p : reference->parameters())
            stepped.push_back((p - lr * p.grad()).detach().reshape({-1}));

        TrainConfig config;
        config.task = task;
        config.regressionLoss = regressionLoss;
        config.learningRate = lr;
        config.momentum = 0;
        config.batchSize = 16;
        config.localSteps = 1;
        auto out = trainSubtask(*model, start, d, config, torch::kCPU);
        QVERIFY2(out, out ? "" : qPrintable(out.error()));
        QVERIFY(model->loadFlatWeights(out->weights));
        std::size_t i = 0;
        for (const auto &p : model->parameters())
            QVERIFY2(torch::allclose(p.detach().reshape({-1}), stepped[i++], 1e-5, 1e-6), qPrintable(task));
        QVERIFY(std::abs(out->meanLoss - loss.item<double>()) < 1e-5);
    }

    void aWorkerRefusesATaskItDoesNotKnow()
    {
        TrainConfig config;
        config.task = QStringLiteral("segmentation");
        QVERIFY(config.problem().contains(QStringLiteral("segmentation")));
        config.task = QStringLiteral("regression");
        config.regressionLoss = QStringLiteral("huber");
        QVERIFY(config.problem().contains(QStringLiteral("huber")));
        config.regressionLoss = QStringLiteral("l1");
        QVERIFY2(config.problem().isEmpty(), qPrintable(config.problem()));
    }

    void regressionMetricsAreTheHandCounts()
    {
        // Targets 1, 2, 3, 4 (mean 2.5, total sum of squares 5); predictions off by 1 once.
        TaskMetrics m(Task::Regression, false);
        m.add(rows({{1}, {2}}), torch::tensor({1.0f, 2.0f}));
        m.add(rows({{3}, {5}}), torch::tensor({3.0f, 4.0f}));
        const Evaluation ev = m.finish(4);
        QVERIFY(std::abs(ev.accuracy - (1.0 - 1.0 / 5.0)) < 1e-9); // R²
        QVERIFY(std::abs(ev.loss - 0.25) < 1e-9);                  // MSE
        QCOMPARE(ev.metrics.size(), std::size_t(2));
        QCOMPARE(ev.metrics[0].first, QStringLiteral("rmse"));
        QVERIFY(std::abs(ev.metrics[0].second - 0.5) < 1e-9);
        QVERIFY(std::abs(ev.metrics[1].second - 0.25) < 1e-9); // MAE
        // Predicting the mean explains nothing: R² 0.
        TaskMetrics mean(Task::Regression, true);
        mean.add(rows({{2.5}, {2.5}, {2.5}, {2.5}}), torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}));
        const Evaluation flat = mean.finish(4);
        QVERIFY(std::abs(flat.accuracy) < 1e-9);
        QVERIFY(std::abs(flat.loss - 1.0) < 1e-9); // L1: (1.5 + 0.5 + 0.5 + 1.5) / 4
    }

    void multiLabelMetricsAreTheHandCounts()
    {
        // Label 0: predicted for rows 0 and 1, present in rows 0 and 2 → tp 1, fp 1, fn 1: F1 1/2.
        // Label 1: predicted for row 2 only, present in row 2 only → F1 1.
        // Label 2: never predicted, never present → 1 (nothing to get wrong).
        const torch::Tensor logits = rows({{3, -1, -2}, {2, -3, -1}, {-1, 4, -5}});
        const torch::Tensor truth = rows({{1, 0, 0}, {0, 0, 0}, {1, 1, 0}});
        TaskMetrics m(Task::MultiLabel, false);
        m.add(logits, truth);
        const Evaluation ev = m.finish(3);
        QCOMPARE(ev.labelF1.size(), std::size_t(3));
        QVERIFY(std::abs(ev.labelF1[0] - 0.5) < 1e-9);
        QVERIFY(std::abs(ev.labelF1[1] - 1.0) < 1e-9);
        QVERIFY(std::abs(ev.labelF1[2] - 1.0) < 1e-9);
        QVERIFY(std::abs(ev.accuracy - 2.5 / 3.0) < 1e-9); // mean F1
        // Micro: tp 2, fp 1, fn 1 → 4 / 6; exact rows: row 0 only (row 1 predicts label 0 wrongly,
        // row 2 misses label 0).
        QCOMPARE(ev.metrics[0].first, QStringLiteral("f1_micro"));
        QVERIFY(std::abs(ev.metrics[0].second - 4.0 / 6.0) < 1e-9);
        QVERIFY(std::abs(ev.metrics[1].second - 1.0 / 3.0) < 1e-9);
    }

    void nextTokenMetricsArePerToken()
    {
        // The case worked out above: mean loss 1.5 ln 2, perplexity e^(1.5 ln 2) = 2^1.5; the
        // first position's argmax (a tie: 0) is right, the second's (0) is not.
        const torch::Tensor logits = torch::tensor({0.0f, 0.0f, float(std::log(3.0)), 0.0f}).reshape({1, 2, 2});
        TaskMetrics m(Task::NextToken, false);
        m.add(logits, torch::tensor({0, 1}, torch::kInt64).reshape({1, 2}));
        const Evaluation ev = m.finish(1);
        QVERIFY(std::abs(ev.loss - 1.5 * std::log(2.0)) < 1e-6);
        QVERIFY(std::abs(ev.metrics[0].second - std::pow(2.0, 1.5)) < 1e-5);
        QVERIFY(std::abs(ev.accuracy - 0.5) < 1e-9);
    }

    void csvReadsSeveralNumericTargets()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("t.csv"));
        writeFile(path, "a,b,y1,c,y2\n1,2,0.5,3,-4\n4,5,1.5,6,7e2\n");
        CsvOptions options;
        options.task = Task::Regression;
        options.labelColumn = QStringLiteral("y1, y2");
        auto d = readCsvDataset(path, options);
        QVERIFY2(d, d ? "" : qPrintable(d.error()));
        QCOMPARE(d->features.sizes().vec(), (std::vector<std::int64_t>{2, 3}));
        QVERIFY(torch::equal(d->features, rows({{1, 2, 3}, {4, 5, 6}})));
        QVERIFY(torch::equal(d->labels, rows({{0.5f, -4}, {1.5f, 700}})));
        QCOMPARE(d->numClasses, 2);
        QCOMPARE(d->classNames, (QStringList{QStringLiteral("y1"), QStringLiteral("y2")}));

        // One target: [N], by column number.
        options.labelColumn = QStringLiteral("3");
        auto one = readCsvDataset(path, options);
        QVERIFY2(one, one ? "" : qPrintable(one.error()));
        QCOMPARE(one->labels.sizes().vec(), (std::vector<std::int64_t>{2}));
        QCOMPARE(one->features.size(1), 4);

        // A numeric label that is not a class: a regression reads 2.5 as 2.5.
        options.labelColumn.clear();
        auto last = readCsvDataset(path, options);
        QVERIFY(last);
        QCOMPARE(last->labels[1].item<float>(), 700.0f);
    }

    void csvTargetErrorsNameTheCell()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("t.csv"));
        writeFile(path, "a,b,cat,dog\n1,2,1,0\n4,5,0,2\n");
        CsvOptions options;
        options.task = Task::MultiLabel;
        options.labelColumn = QStringLiteral("cat,dog");
        auto bad = readCsvDataset(path, options);
        QVERIFY(!bad);
        QVERIFY2(bad.error().contains(QStringLiteral("line 3")) && bad.error().contains(QStringLiteral("'dog'"))
                     && bad.error().contains(QStringLiteral("0 or 1")),
                 qPrintable(bad.error()));

        options.task = Task::Classification;
        auto two = readCsvDataset(path, options);
        QVERIFY(!two);
        QVERIFY2(two.error().contains(QStringLiteral("classification")), qPrintable(two.error()));

        options.task = Task::Regression;
        options.labelColumn = QStringLiteral("a,b,cat,dog");
        auto all = readCsvDataset(path, options);
        QVERIFY(!all);
        QVERIFY2(all.error().contains(QStringLiteral("feature column")), qPrintable(all.error()));

        writeFile(path, "a,y\n1,2\n3,high\n");
        options.labelColumn = QStringLiteral("y");
        auto text = readCsvDataset(path, options);
        QVERIFY(!text);
        QVERIFY2(text.error().contains(QStringLiteral("line 3")) && text.error().contains(QStringLiteral("'high'")),
                 qPrintable(text.error()));
    }

    void npyReadsTargetsAndNamesBadOnes()
    {
        QTemporaryDir dir;
        writeFile(dir.filePath(QStringLiteral("x.npy")), npyFloats({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
        writeFile(dir.filePath(QStringLiteral("y.npy")), npyFloats({4, 2}, {0.5f, 1, 1.5f, 0, 2, 1, 3.25f, 0}));
        auto regression = readNpyDataset(dir.path(), Task::Regression);
        QVERIFY2(regression, regression ? "" : qPrintable(regression.error()));
        QCOMPARE(regression->labels.scalar_type(), torch::kFloat32);
        QCOMPARE(regression->labels[3][0].item<float>(), 3.25f);
        QCOMPARE(regression->numClasses, 2);
        // 0.5 is not a label one may have or not.
        auto multi = readNpyDataset(dir.path(), Task::MultiLabel);
        QVERIFY(!multi);
        QVERIFY2(multi.error().contains(QStringLiteral("y.npy")) && multi.error().contains(QStringLiteral("0 or 1"))
                     && multi.error().contains(QStringLiteral("row 0")),
                 qPrintable(multi.error()));
        writeFile(dir.filePath(QStringLiteral("y.npy")), npyFloats({4, 2}, {0, 1, 1, 0, 1, 1, 0, 0}));
        auto labels = readNpyDataset(dir.path(), Task::MultiLabel);
        QVERIFY2(labels, labels ? "" : qPrintable(labels.error()));
        QCOMPARE(labels->labels.sizes().vec(), (std::vector<std::int64_t>{4, 2}));
        writeFile(dir.filePath(QStringLiteral("y.npy")), npyFloats({4, 1, 2}, {0, 1, 1, 0, 1, 1, 0, 0}));
        auto shaped = readNpyDataset(dir.path(), Task::Regression);
        QVERIFY(!shaped);
        QVERIFY2(shaped.error().contains(QStringLiteral("shape")), qPrintable(shaped.error()));
        writeFile(dir.filePath(QStringLiteral("y.npy")), npyFloats({4}, {1, std::nanf(""), 2, 3}));
        auto nan = readNpyDataset(dir.path(), Task::Regression);
        QVERIFY(!nan);
        QVERIFY2(nan.error().contains(QStringLiteral("row 1")), qPrintable(nan.error()));
    }

    void npyBringsItsOwnTestSplit()
    {
        QTemporaryDir dir;
        std::vector<float> x(20 * 3), y(20 * 2), xt(6 * 3), yt(6 * 2);
        for (std::size_t i = 0; i < x.size(); ++i)
            x[i] = float(i % 7);
        for (std::size_t i = 0; i < y.size(); ++i)
            y[i] = float(i % 5) * 0.5f;
        writeFile(dir.filePath(QStringLiteral("x.npy")), npyFloats({20, 3}, x));
        writeFile(dir.filePath(QStringLiteral("y.npy")), npyFloats({20, 2}, y));
        writeFile(dir.filePath(QStringLiteral("x_test.npy")), npyFloats({6, 3}, xt));
        JobSpec job = JobSpec::defaultJob();
        job.dataset.kind = QStringLiteral("npy");
        job.dataset.path = dir.path();
        job.training.task = QStringLiteral("regression");
        job.model.kind = QStringLiteral("mlp");
        // Half a split is named, not ignored.
        auto half = loadJobData(job);
        QVERIFY(!half);
        QVERIFY2(half.error().contains(QStringLiteral("y_test.npy")), qPrintable(half.error()));
        writeFile(dir.filePath(QStringLiteral("y_test.npy")), npyFloats({6, 2}, yt));
        auto data = loadJobData(job);
        QVERIFY2(data, data ? "" : qPrintable(data.error()));
        QCOMPARE((*data)->train.size(), 20);
        QCOMPARE((*data)->test.size(), 6);
        QCOMPARE((*data)->targetShape, (std::vector<std::int64_t>{2}));
        // A test split of other targets than the training set's is refused.
        writeFile(dir.filePath(QStringLiteral("y_test.npy")), npyFloats({6, 3}, std::vector<float>(18, 1.0f)));
        auto mismatched = loadJobData(job);
        QVERIFY(!mismatched);
        QVERIFY2(mismatched.error().contains(QStringLiteral("must match")), qPrintable(mismatched.error()));
    }

    void tokenFilesBecomeContextsAndTheirNextTokens()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("train.bin"));
        std::vector<int> ids;
        for (int i = 0; i < 41; ++i)
            ids.push_back((i * 7) % 13 + (i == 40 ? 60000 : 0));
        writeFile(file, uint16s(ids));
        auto tokens = readTokenFile(file, QStringLiteral("uint16"), 4, 0.2);
        QVERIFY2(tokens, tokens ? "" : qPrintable(tokens.error()));
        // 40 usable ids (the last only as a target): 10 contexts, the last 2 held out.
        QCOMPARE(tokens->train.size(), 8);
        QCOMPARE(tokens->test.size(), 2);
        QCOMPARE(tokens->train.features.scalar_type(), torch::kInt64);
        QCOMPARE(tokens->train.features[1][0].item<std::int64_t>(), std::int64_t(ids[4]));
        QCOMPARE(tokens->train.labels[1][0].item<std::int64_t>(), std::int64_t(ids[5]));
        QCOMPARE(tokens->test.labels[1][3].item<std::int64_t>(), std::int64_t(ids[40])); // past 32,767: read unsigned
        QCOMPARE(tokens->train.numClasses, ids[40] + 1);

        // A folder with train.bin and val.bin: the second is the test set.
        writeFile(dir.filePath(QStringLiteral("val.bin")), uint16s({1, 2, 3, 4, 5}));
        auto split = readTokenFile(dir.path(), QStringLiteral("uint16"), 4, 0.2);
        QVERIFY2(split, split ? "" : qPrintable(split.error()));
        QVERIFY(split->hasTestFile);
        QCOMPARE(split->train.size(), 10);
        QCOMPARE(split->test.size(), 1);
    }

    void badTokenFilesAreNamed()
    {
        QTemporaryDir dir;
        const QString odd = dir.filePath(QStringLiteral("odd.bin"));
        writeFile(odd, QByteArray(11, '\1'));
        auto r = readTokenFile(odd, QStringLiteral("uint16"), 2, 0.1);
        QVERIFY(!r);
        QVERIFY2(r.error().contains(odd) && r.error().contains(QStringLiteral("11 bytes")), qPrintable(r.error()));
        auto wide = readTokenFile(odd, QStringLiteral("uint32"), 2, 0.1);
        QVERIFY(!wide);
        const QString tiny = dir.filePath(QStringLiteral("tiny.bin"));
        writeFile(tiny, uint16s({1, 2, 3}));
        auto shortFile = readTokenFile(tiny, QStringLiteral("uint16"), 8, 0.1);
        QVERIFY(!shortFile);
        QVERIFY2(shortFile.error().contains(QStringLiteral("3 tokens")), qPrintable(shortFile.error()));
        auto noTrain = readTokenFile(dir.path(), QStringLiteral("uint16"), 2, 0.1);
        QVERIFY(!noTrain);
        QVERIFY2(noTrain.error().contains(QStringLiteral("train.bin")), qPrintable(noTrain.error()));
        auto missing = readTokenFile(dir.filePath(QStringLiteral("none.bin")), QStringLiteral("uint16"), 2, 0.1);
        QVERIFY(!missing);
        QVERIFY2(missing.error().contains(QStringLiteral("none.bin")), qPrintable(missing.error()));
        const QString one = dir.filePath(QStringLiteral("one.bin"));
        writeFile(one, uint16s(std::vector<int>(20, 0)));
        auto single = readTokenFile(one, QStringLiteral("uint16"), 2, 0.1);
        QVERIFY(!single);
        QVERIFY2(single.error().contains(QStringLiteral("one token id")), qPrintable(single.error()));
    }

    void shardsOfEveryTargetTravel()
    {
        torch::manual_seed(2);
        Dataset regression;
        regression.features = torch::randn({5, 3});
        regression.labels = torch::randn({5, 2});
        regression.numClasses = 2;
        Dataset tokens;
        tokens.features = torch::randint(0, 50, {4, 6}, torch::kInt64);
        tokens.labels = torch::randint(0, 50, {4, 6}, torch::kInt64);
        tokens.numClasses = 50;
        for (const Dataset *d : {&regression, &tokens}) {
            const QCborMap manifest = shardManifest(*d);
            auto back = shardFromBytes(shardToBytes(*d), manifest);
            QVERIFY2(back, back ? "" : qPrintable(back.error()));
            QVERIFY(torch::equal(back->features, d->features));
            QVERIFY(torch::equal(back->labels, d->labels));
            QCOMPARE(back->numClasses, d->numClasses);
        }
        // Class labels keep the manifest (and digest) older workers know.
        Dataset classes;
        classes.features = torch::randn({3, 2});
        classes.labels = torch::tensor({0, 1, 1}, torch::kInt64);
        classes.numClasses = 2;
        QVERIFY(!shardManifest(classes).contains(QStringLiteral("label_dtype")));
        // A token id past the vocabulary, a non-finite target: refused, named.
        QCborMap small = shardManifest(tokens);
        small.insert(QStringLiteral("classes"), 10);
        auto outside = shardFromBytes(shardToBytes(tokens), small);
        QVERIFY(!outside);
        QVERIFY2(outside.error().contains(QStringLiteral("vocabulary")), qPrintable(outside.error()));
        Dataset nan = regression;
        nan.labels = regression.labels.clone();
        nan.labels[2][1] = std::nanf("");
        auto notFinite = shardFromBytes(shardToBytes(nan), shardManifest(nan));
        QVERIFY(!notFinite);
        QVERIFY2(notFinite.error().contains(QStringLiteral("targets")), qPrintable(notFinite.error()));
        // Bytes short of what the label shape needs.
        QByteArray cut = shardToBytes(regression);
        cut.chop(4);
        QVERIFY(!shardFromBytes(cut, shardManifest(regression)));
    }

    void theJobFileChecksTasksAgainstDataAndModel()
    {
        const auto problem = [](const std::function<void(JobSpec &)> &change) {
            JobSpec job = JobSpec::defaultJob();
            change(job);
            auto r = job.validate();
            return r ? QString() : r.error();
        };
        QVERIFY(problem([](JobSpec &j) { j.training.task = QStringLiteral("ranking"); })
                    .contains(QStringLiteral("'training.task'")));
        QVERIFY(problem([](JobSpec &j) { j.training.task = QStringLiteral("regression"); })
                    .contains(QStringLiteral("fashion-mnist")));
        QVERIFY(problem([](JobSpec &j) {
                    j.training.task = QStringLiteral("next-token");
                    j.dataset.kind = QStringLiteral("tokens");
                    j.dataset.path = QStringLiteral("/data/train.bin");
                }).contains(QStringLiteral("TorchScript")));
        QVERIFY(problem([](JobSpec &j) {
                    j.dataset.kind = QStringLiteral("tokens");
                    j.dataset.path = QStringLiteral("/data/train.bin");
                }).contains(QStringLiteral("next-token")));
        QVERIFY(problem([](JobSpec &j) {
                    j.training.task = QStringLiteral("regression");
                    j.dataset.kind = QStringLiteral("csv");
                    j.dataset.path = QStringLiteral("/data/t.csv");
                    j.training.labelSmoothing = 0.1;
                }).contains(QStringLiteral("'training.label_smoothing'")));
        QVERIFY(problem([](JobSpec &j) { j.training.regressionLoss = QStringLiteral("l1"); })
                    .contains(QStringLiteral("'training.regression_loss'")));
        QVERIFY(problem([](JobSpec &j) {
                    j.dataset.kind = QStringLiteral("csv");
                    j.dataset.path = QStringLiteral("/data/t.csv");
                    j.dataset.labelColumn = QStringLiteral("a,b");
                }).contains(QStringLiteral("'dataset.label_column'")));
        QVERIFY(problem([](JobSpec &j) {
                    j.training.task = QStringLiteral("multi-label");
                    j.dataset.kind = QStringLiteral("npy");
                    j.dataset.path = QStringLiteral("/data/x");
                }).isEmpty());
    }

    void aRegressionJobExplainsItsTargets()
    {
        // Through the real binary, two workers: a wrong loss (cross-entropy, no loss at all,
        // or one of the wrong sign) leaves R² near or below 0, not above 0.95.
        QTemporaryDir dir;
        const QString csv = regressionCsv(dir.path(), 1200);
        const QString run = dir.filePath(QStringLiteral("run"));
        const auto r = test::runFlotilla({QStringLiteral("train"), QStringLiteral("--dataset"), QStringLiteral("csv"),
                                          QStringLiteral("--data"), csv, QStringLiteral("--task"),
                                          QStringLiteral("regression"), QStringLiteral("--label-column"),
                                          QStringLiteral("height,weight"), QStringLiteral("--model"),
                                          QStringLiteral("mlp"), QStringLiteral("--optimizer"), QStringLiteral("adam"),
                                          QStringLiteral("--lr"), QStringLiteral("0.005"), QStringLiteral("--epochs"),
                                          QStringLiteral("6"), QStringLiteral("--workers"), QStringLiteral("2"),
                                          QStringLiteral("--preempt-mean"), QStringLiteral("0"),
                                          QStringLiteral("--run-dir"), run, QStringLiteral("--quiet")},
                                         180000);
        QVERIFY2(r.finished && r.exitCode == 0, qPrintable(r.out + r.err));
        const QList<double> r2 = column(run, "test_r2");
        const QList<double> rmse = column(run, "test_rmse");
        QVERIFY2(r2.size() == 6 && rmse.size() == 6, qPrintable(QStringLiteral("%1 evaluations").arg(r2.size())));
        QVERIFY2(r2.last() > 0.95, qPrintable(QStringLiteral("R² %1").arg(r2.last())));
        QVERIFY2(rmse.last() < rmse.first(), qPrintable(QStringLiteral("RMSE %1 → %2").arg(rmse.first()).arg(rmse.last())));
        QVERIFY(!QFileInfo::exists(run + QStringLiteral("/confusion.csv")));
    }

    void aRemoteWorkerTrainsARegression()
    {
        // The task and the targets travel: the Welcome names the task for the speed probe,
        // each lease names it and its loss, shards carry float32 targets [N, 2]; one worker
        // process over TLS.
        QTemporaryDir dir;
        const QString csv = regressionCsv(dir.path(), 800);
        const QString run = dir.filePath(QStringLiteral("run"));
        const QString token = dir.filePath(QStringLiteral("token"));
        QProcess serve;
        serve.setProcessChannelMode(QProcess::MergedChannels);
        serve.start(test::flotillaBinary(),
                    {QStringLiteral("serve"), QStringLiteral("--run-dir"), run, QStringLiteral("--identity-dir"),
                     dir.filePath(QStringLiteral("identity")), QStringLiteral("--listen"), QStringLiteral("127.0.0.1"),
                     QStringLiteral("--host"), QStringLiteral("127.0.0.1"), QStringLiteral("--port"),
                     QString::number(test::freeLoopbackPort()), QStringLiteral("--token-file"), token,
                     QStringLiteral("--quiet"), QStringLiteral("--dataset"), QStringLiteral("csv"),
                     QStringLiteral("--data"), csv, QStringLiteral("--task"), QStringLiteral("regression"),
                     QStringLiteral("--regression-loss"), QStringLiteral("l1"), QStringLiteral("--label-column"),
                     QStringLiteral("height,weight"), QStringLiteral("--model"), QStringLiteral("mlp"),
                     QStringLiteral("--optimizer"), QStringLiteral("adam"), QStringLiteral("--lr"),
                     QStringLiteral("0.005"), QStringLiteral("--epochs"), QStringLiteral("5"), QStringLiteral("--workers"),
                     QStringLiteral("0"), QStringLiteral("--preempt-mean"), QStringLiteral("0")});
        QVERIFY(serve.waitForStarted(10000));
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo(token).size() > 0, 30000);
        QFile tokenFile(token);
        QVERIFY(tokenFile.open(QIODevice::ReadOnly));
        QProcess worker;
        worker.setProcessChannelMode(QProcess::MergedChannels);
        worker.start(test::flotillaBinary(),
                     {QStringLiteral("worker"), QStringLiteral("--state-dir"), dir.filePath(QStringLiteral("w1")),
                      QStringLiteral("--join"), QString::fromUtf8(tokenFile.readAll()).trimmed(), QStringLiteral("--name"),
                      QStringLiteral("w1"), QStringLiteral("--grace"), QStringLiteral("5")});
        QVERIFY(worker.waitForStarted(10000));
        const bool ended = serve.waitForFinished(150000);
        worker.waitForFinished(20000);
        if (worker.state() != QProcess::NotRunning)
            worker.kill();
        const QString log = QString::fromUtf8(serve.readAll() + worker.readAll());
        QVERIFY2(ended && serve.exitCode() == 0, qPrintable(log));
        const QList<double> r2 = column(run, "test_r2");
        const QList<double> mae = column(run, "test_mae");
        QVERIFY2(r2.size() == 5 && r2.last() > 0.95, qPrintable(QStringLiteral("R² %1; %2").arg(r2.value(4)).arg(log)));
        // The L1 loss was the one trained and evaluated: the test loss is the mean absolute error.
        QVERIFY(std::abs(column(run, "test_loss").last() - mae.last()) < 1e-4);
    }

    void aMultiLabelJobFindsItsLabels()
    {
        // Three labels, each a threshold of its own feature: a model trained with binary
        // cross-entropy gets nearly every label right; cross-entropy over the labels as
        // classes, or none, cannot reach a mean F1 of 0.9.
        QTemporaryDir dir;
        torch::manual_seed(4);
        const torch::Tensor x = torch::randn({1500, 6});
        const torch::Tensor y = (x.narrow(1, 0, 3) > 0.3).to(torch::kFloat);
        const torch::Tensor xc = x.contiguous(), yc = y.contiguous();
        writeFile(dir.filePath(QStringLiteral("x.npy")),
                  npyFloats({1500, 6}, std::vector<float>(xc.data_ptr<float>(), xc.data_ptr<float>() + xc.numel())));
        writeFile(dir.filePath(QStringLiteral("y.npy")),
                  npyFloats({1500, 3}, std::vector<float>(yc.data_ptr<float>(), yc.data_ptr<float>() + yc.numel())));
        const QString run = dir.filePath(QStringLiteral("run"));
        const auto r = test::runFlotilla({QStringLiteral("train"), QStringLiteral("--dataset"), QStringLiteral("npy"),
                                          QStringLiteral("--data"), dir.path(), QStringLiteral("--task"),
                                          QStringLiteral("multi-label"), QStringLiteral("--model"), QStringLiteral("mlp"),
                                          QStringLiteral("--optimizer"), QStringLiteral("adam"), QStringLiteral("--lr"),
                                          QStringLiteral("0.005"), QStringLiteral("--epochs"), QStringLiteral("5"),
                                          QStringLiteral("--workers"), QStringLiteral("2"),
                                          QStringLiteral("--preempt-mean"), QStringLiteral("0"),
                                          QStringLiteral("--run-dir"), run, QStringLiteral("--quiet")},
                                         180000);
        QVERIFY2(r.finished && r.exitCode == 0, qPrintable(r.out + r.err));
        const QList<double> f1 = column(run, "test_f1_macro");
        QVERIFY2(!f1.isEmpty() && f1.last() > 0.9, qPrintable(QStringLiteral("mean F1 %1").arg(f1.value(f1.size() - 1))));
        QVERIFY(!column(run, "test_exact_match").isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestTasks)
#include "tst_tasks.moc"
