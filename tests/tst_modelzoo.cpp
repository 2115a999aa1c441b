// Models written in Python the way users write them (BatchNorm, LayerNorm and GELU, a
// residual add, dropout), each trained by `flotilla train` under every aggregation rule with
// two local workers. Python loads each model.pt and finds it as accurate as Flotilla
// measured, in eval mode, with running statistics that moved and counters that counted.
// Models with float64 or float16 tensors are refused with a way out. The models are made at
// test time by tests/modelzoo.py with Debian's python3-torch.
#include "TestSupport.h"

#include <QCryptographicHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

using namespace flotilla;

namespace {

const QStringList kRules{QStringLiteral("vc-asgd"), QStringLiteral("staleness-aware"),
                         QStringLiteral("async-delta"), QStringLiteral("sync-average")};
const QString kTestLimit = QStringLiteral("1000");

struct ZooModel
{
    QString name;
    int buffers; // floating-point and integer, as torch's named_buffers() lists them
};

// BatchNorm keeps three buffers: running_mean, running_var, num_batches_tracked.
const ZooModel kZoo[] = {
    {QStringLiteral("bn-cnn"), 2 * 3},
    {QStringLiteral("norm-mlp"), 0},
    {QStringLiteral("resnet"), 5 * 3},
    {QStringLiteral("dropout-cnn"), 0},
};

QString zooScript()
{
    QFile file(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/modelzoo.py"));
    return file.open(QIODevice::ReadOnly) ? QString::fromUtf8(file.readAll()) : QString();
}

// A short job: 3,000 training samples, 2 epochs of 4 shards, 2 local workers, no preemptions.
JobSpec zooJob(const QString &rule)
{
    JobSpec job = JobSpec::defaultJob();
    job.dataset.trainLimit = 3000;
    job.dataset.testLimit = kTestLimit.toLongLong();
    job.training.epochs = 2;
    job.training.shards = 4;
    job.fleet.workers = 2;
    job.fleet.preemption.meanIntervalSeconds = 0;
    job.aggregation.rule = rule;
    // scripts/gpu-check.sh runs this test on a GPU with FLOTILLA_TEST_DEVICE=cuda.
    if (qEnvironmentVariableIsSet("FLOTILLA_TEST_DEVICE"))
        job.training.device = qEnvironmentVariable("FLOTILLA_TEST_DEVICE");
    return job;
}

} // namespace

class TestModelZoo : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    QString modelFile(const QString &name) const { return m_dir.filePath(name + QStringLiteral(".pt")); }
    QString jobFile(const QString &rule) const { return m_dir.filePath(rule + QStringLiteral(".json")); }

    // `flotilla train` as a user runs it: a job file, a model file made in Python.
    test::ProcessRun train(const QString &model, const QString &rule, const QString &runDir, int timeoutMs)
    {
        return test::runFlotilla({QStringLiteral("train"), QStringLiteral("--job"), jobFile(rule),
                                  QStringLiteral("--model-file"), modelFile(model), QStringLiteral("--run-dir"), runDir,
                                  QStringLiteral("--quiet")},
                                 timeoutMs);
    }

    // What Python found in one run's model.pt against what Flotilla measured: the problems.
    static QStringList checkReport(const QJsonObject &r, const QString &label, double flotilla, int expectedBuffers)
    {
        QStringList problems;
        const double python = r.value(QStringLiteral("accuracy")).toDouble(-1);
        const QJsonObject counters = r.value(QStringLiteral("counters")).toObject();
        QStringList counts;
        for (auto it = counters.begin(); it != counters.end(); ++it)
            counts << QString::number(it.value().toInt());
        qInfo("%-28s Flotilla %.4f  Python %.4f  num_batches_tracked %s", qPrintable(label), flotilla, python,
              qPrintable(counts.isEmpty() ? QStringLiteral("-") : counts.join(u' ')));

        if (flotilla < 0)
            problems << label + QStringLiteral(": metrics.csv has no final test accuracy");
        // Chance is 0.1; a short run of any of these models gets past 0.4 (the ResNet is the
        // slowest), and stale or broken running statistics bring it back near 0.1.
        if (flotilla < 0.3)
            problems << QStringLiteral("%1: Flotilla's accuracy %2 is near chance").arg(label).arg(flotilla);
        if (qAbs(python - flotilla) > 0.003)
            problems << QStringLiteral("%1: Python's accuracy on model.pt is %2, Flotilla's %3")
                            .arg(label).arg(python).arg(flotilla);
        if (r.value(QStringLiteral("training")).toBool(true))
            problems << label + QStringLiteral(": model.pt is in training mode");
        const int buffers = r.value(QStringLiteral("buffers")).toArray().size();
        if (buffers != expectedBuffers)
            problems << QStringLiteral("%1: model.pt has %2 buffers, the model %3").arg(label).arg(buffers).arg(expectedBuffers);
        // Running statistics that still hold their initial values were never folded in;
        // non-finite ones or a variance <= 0 make evaluation meaningless.
        for (const char *key : {"unchanged", "invalid"}) {
            const QByteArray names = QJsonDocument(r.value(QLatin1String(key)).toArray()).toJson(QJsonDocument::Compact);
            if (names != "[]")
                problems << QStringLiteral("%1: %2 buffers %3").arg(label, QLatin1String(key), QString::fromUtf8(names));
        }
        // Every BatchNorm layer sees every batch, and counters are folded by max: one count.
        counts.removeDuplicates();
        if (counts.size() > 1)
            problems << QStringLiteral("%1: the layers' num_batches_tracked differ: %2").arg(label, counts.join(u' '));
        for (auto it = counters.begin(); it != counters.end(); ++it)
            if (it.value().toInt() <= 0)
                problems << QStringLiteral("%1: %2 is %3").arg(label, it.key()).arg(it.value().toInt());
        return problems;
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::python()), "Debian's python3 with python3-torch is needed");
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
        const QString script = zooScript();
        QVERIFY2(!script.isEmpty(), "tests/modelzoo.py is missing");
        const test::ProcessRun made = test::runPython(script, {QStringLiteral("make"), m_dir.path()});
        QVERIFY2(made.finished && made.exitCode == 0, qPrintable(made.err));
        for (const QString &rule : kRules) {
            const Result<void> saved = zooJob(rule).save(jobFile(rule));
            QVERIFY2(saved, qPrintable(saved ? QString() : saved.error()));
        }
    }

    void everyModelTrainsUnderEveryRule()
    {
        QStringList problems;
        QStringList runs;
        QHash<QString, QString> labelOf;
        QHash<QString, double> flotillaAccuracy;
        QHash<QString, int> expectedBuffers;
        for (const ZooModel &model : kZoo) {
            for (const QString &rule : kRules) {
                const QString label = model.name + u'/' + rule;
                const QString runDir = m_dir.filePath(model.name + u'-' + rule);
                const test::ProcessRun r = train(model.name, rule, runDir, 300000);
                if (!r.finished || r.exitCode != 0) {
                    problems << QStringLiteral("%1: flotilla train failed (exit %2): %3")
                                    .arg(label).arg(r.exitCode).arg(r.err.trimmed().right(400));
                    continue;
                }
                runs << runDir + u'=' + modelFile(model.name);
                labelOf[runDir] = label;
                flotillaAccuracy[runDir] = test::finalTestAccuracy(runDir);
                expectedBuffers[runDir] = model.buffers;
            }
        }

        // One Python process evaluates every run: importing torch is the slow part.
        const test::ProcessRun evaluated =
            test::runPython(zooScript(), QStringList{QStringLiteral("evaluate"), test::fashionMnistDir(), kTestLimit} + runs,
                            600000);
        QVERIFY2(evaluated.finished && evaluated.exitCode == 0, qPrintable(evaluated.err));
        int reports = 0;
        for (const QString &line : evaluated.out.split(u'\n', Qt::SkipEmptyParts)) {
            const QJsonObject r = QJsonDocument::fromJson(line.toUtf8()).object();
            const QString runDir = r.value(QStringLiteral("run")).toString();
            if (!labelOf.contains(runDir)) {
                problems << QStringLiteral("unexpected output from modelzoo.py: ") + line;
                continue;
            }
            ++reports;
            problems << checkReport(r, labelOf[runDir], flotillaAccuracy[runDir], expectedBuffers[runDir]);
        }
        if (reports != runs.size())
            problems << QStringLiteral("modelzoo.py reported on %1 of %2 runs").arg(reports).arg(runs.size());
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(u'\n')));
    }

    void nonFloat32ModelsAreRefused_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("dtype");
        QTest::newRow("float64") << QStringLiteral("bn-cnn-float64") << QStringLiteral("Double");
        QTest::newRow("float16") << QStringLiteral("bn-cnn-float16") << QStringLiteral("Half");
    }

    // Flotilla trains float32; a model in another precision is refused before training, with
    // the tensor named and the conversion that fixes it.
    void nonFloat32ModelsAreRefused()
    {
        QFETCH(QString, file);
        QFETCH(QString, dtype);
        const QString runDir = m_dir.filePath(file + QStringLiteral("-run"));
        const test::ProcessRun r = train(file, kRules[0], runDir, 120000);
        QVERIFY2(r.finished, qPrintable(r.err));
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains(dtype) && r.err.contains(QStringLiteral("'features.0.weight'"))
                     && r.err.contains(QStringLiteral("model.float()")),
                 qPrintable(r.err));
        QVERIFY(!QFileInfo::exists(runDir + QStringLiteral("/model.pt")));
    }
    void aUsersModelTrainsOverTheNetworkInInt8_data()
    {
        QTest::addColumn<QString>("rule");
        QTest::newRow("vc-asgd") << QStringLiteral("vc-asgd");
        QTest::newRow("async-delta") << QStringLiteral("async-delta");
    }

    // The way a lab runs a user's model: a coordinator and two worker processes over TLS
    // (`flotilla demo`), each worker loading its own copy of the model file, results and
    // global weights in int8. BatchNorm's running statistics and counters travel exact beside
    // the rounded parameters; Python must find model.pt as accurate as Flotilla did, its
    // statistics moved and its counters counted, under a blending rule and the delta rule.
    void aUsersModelTrainsOverTheNetworkInInt8()
    {
        QFETCH(QString, rule);
        const QString demoDir = m_dir.filePath(QStringLiteral("net-") + rule);
        const test::ProcessRun r = test::runFlotilla(
            {QStringLiteral("demo"), QStringLiteral("--job"), jobFile(rule), QStringLiteral("--model-file"),
             modelFile(QStringLiteral("bn-cnn")), QStringLiteral("--run-dir"), demoDir, QStringLiteral("--chaos-mean"),
             QStringLiteral("0"), QStringLiteral("--compression"), QStringLiteral("int8")},
            300000);
        QVERIFY2(r.finished && r.exitCode == 0, qPrintable(r.out + r.err));
        QVERIFY2(!r.err.contains(QStringLiteral("stopped (exit")), qPrintable(r.err));
        // Every result was taken (none refused by size or as corrupt)...
        QVERIFY2(QRegularExpression(QStringLiteral("honest results +[1-9]\\d* assimilated, 0 rejected")).match(r.out).hasMatch(),
                 qPrintable(r.out));
        // ... and some leases went out as int8 changes from an anchor, not all as float32 weights.
        QFile coordinator(demoDir + QStringLiteral("/coordinator.out"));
        QVERIFY(coordinator.open(QIODevice::ReadOnly));
        const QString log = QString::fromUtf8(coordinator.readAll());
        static const QRegularExpression sent(QStringLiteral("global weights .*mean of (\\d+): (\\d+) whole, (\\d+) as a change"));
        const QRegularExpressionMatch m = sent.match(log);
        QVERIFY2(m.hasMatch(), qPrintable(log.right(1500)));
        QVERIFY2(m.captured(3).toInt() > 0, qPrintable(m.captured(0)));

        const QString runDir = demoDir + QStringLiteral("/coordinator");
        const test::ProcessRun evaluated = test::runPython(
            zooScript(), {QStringLiteral("evaluate"), test::fashionMnistDir(), kTestLimit,
                          runDir + u'=' + modelFile(QStringLiteral("bn-cnn"))},
            300000);
        QVERIFY2(evaluated.finished && evaluated.exitCode == 0, qPrintable(evaluated.err));
        const QJsonObject report = QJsonDocument::fromJson(evaluated.out.trimmed().toUtf8()).object();
        QCOMPARE(report.value(QStringLiteral("run")).toString(), runDir);
        const QStringList problems = checkReport(report, QStringLiteral("bn-cnn/%1/int8 over TLS").arg(rule),
                                                 test::finalTestAccuracy(runDir), kZoo[0].buffers);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(u'\n')));
    }

    // A worker joining a job that trains a TorchScript model must bring its own copy of the
    // model: without one, or with another model, it is told which file the job needs (by its
    // SHA-256) and stops with an error instead of training something else.
    void aWorkerWithoutTheJobsModelIsToldWhichItNeeds()
    {
        const QString dir = m_dir.filePath(QStringLiteral("serve-torchscript"));
        const QString tokenFile = dir + QStringLiteral("/token");
        QProcess serve;
        serve.setProcessChannelMode(QProcess::MergedChannels);
        serve.start(test::flotillaBinary(),
                    {QStringLiteral("serve"), QStringLiteral("--job"), jobFile(kRules[0]), QStringLiteral("--model-file"),
                     modelFile(QStringLiteral("bn-cnn")), QStringLiteral("--run-dir"), dir + QStringLiteral("/run"),
                     QStringLiteral("--identity-dir"), dir + QStringLiteral("/identity"), QStringLiteral("--listen"),
                     QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                     QStringLiteral("--port"), QStringLiteral("0"), QStringLiteral("--token-file"), tokenFile,
                     QStringLiteral("--token-uses"), QStringLiteral("10"), QStringLiteral("--quiet")});
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(tokenFile) || serve.state() == QProcess::NotRunning, 60000);
        QFile token(tokenFile);
        QVERIFY2(token.open(QIODevice::ReadOnly), serve.readAll().constData());
        const QString join = QString::fromUtf8(token.readAll()).trimmed();
        QFile model(modelFile(QStringLiteral("bn-cnn")));
        QVERIFY(model.open(QIODevice::ReadOnly));
        const QString sha = QString::fromLatin1(QCryptographicHash::hash(model.readAll(), QCryptographicHash::Sha256).toHex());

        // Workers that accept no models from the coordinator (by default they are sent it:
        // tst_fleetjobs).
        const auto worker = [&](const QString &name, const QStringList &extra) {
            return test::runFlotilla(QStringList{QStringLiteral("worker"), QStringLiteral("--join"), join,
                                                 QStringLiteral("--state-dir"), dir + u'/' + name, QStringLiteral("--name"), name,
                                                 QStringLiteral("--accept-models"), QStringLiteral("none")}
                                         + extra,
                                     60000);
        };
        const test::ProcessRun without = worker(QStringLiteral("no-model"), {});
        const test::ProcessRun other = worker(QStringLiteral("other-model"),
                                              {QStringLiteral("--model-file"), modelFile(QStringLiteral("norm-mlp"))});
        const test::ProcessRun missing = worker(QStringLiteral("missing-model"),
                                                {QStringLiteral("--model-file"), dir + QStringLiteral("/nowhere.pt")});
        serve.kill();
        serve.waitForFinished(10000);

        // Each must stop with an error whose words name what is wrong.
        const auto check = [](const test::ProcessRun &run, const QStringList &words) {
            const QString said = run.out + run.err;
            QVERIFY2(run.finished && run.exitCode == 1, qPrintable(said));
            for (const QString &w : words)
                QVERIFY2(said.contains(w), qPrintable(QStringLiteral("'%1' not in: %2").arg(w, said)));
        };
        check(without, {QStringLiteral("start the worker with --model-file"), sha});
        check(other, {QStringLiteral("is not the job's model"), sha});
        check(missing, {QStringLiteral("cannot read the model file"), QStringLiteral("nowhere.pt")});
    }
};

QTEST_GUILESS_MAIN(TestModelZoo)
#include "tst_modelzoo.moc"
