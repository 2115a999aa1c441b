// TorchScript interop with Python: a model scripted in Python is trained by Flotilla in C++
// and saved back; Python loads the result and finds it as accurate as Flotilla measured.
// The same for a built-in model, which is saved as TorchScript too. Uses Debian's python3-torch.
#include "TestSupport.h"
#include "engine/coordination/LocalFleet.h"
#include "engine/coordination/Store.h"

#include <QtTest>

using namespace flotilla;

namespace {

// Loads the first `limit` Fashion-MNIST test images, normalizes them as Flotilla did, and
// prints the accuracy of the TorchScript model in argv[1].
const char *const kEvaluate = R"PY(
import gzip, json, sys, numpy as np, torch
model_path, data_dir, norm_path, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with gzip.open(data_dir + "/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:limit]
with gzip.open(data_dir + "/t10k-labels-idx1-ubyte.gz") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)[:limit]
norm = json.load(open(norm_path))
x = (torch.tensor(images, dtype=torch.float32) / 255.0 - norm["mean"][0]) / norm["std"][0]
model = torch.jit.load(model_path)
assert not model.training, "model.pt must be saved in eval mode"
with torch.no_grad():
    predicted = model(x).argmax(1).numpy()
print("accuracy", float((predicted == labels).mean()))
)PY";

const char *const kScript = R"PY(
import sys, torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 64)
        self.fc2 = torch.nn.Linear(64, 10)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))
torch.manual_seed(0)
torch.jit.script(Net()).save(sys.argv[1])
)PY";

QString runPython(const QString &script, const QStringList &args)
{
    const test::ProcessRun run = test::runPython(script, args);
    if (!run.finished || run.exitCode != 0)
        return QStringLiteral("FAILED: ") + run.err;
    return run.out.trimmed();
}

// Trains the job in-process to the end; returns the final test accuracy Flotilla recorded.
double train(const JobSpec &job, const QString &runDir)
{
    auto fleet = LocalFleet::create(job, runDir);
    if (!fleet) {
        qWarning() << fleet.error();
        return -1;
    }
    QSignalSpy done(fleet->get(), &LocalFleet::finished);
    (*fleet)->start();
    if (!done.wait(240000) || !done.first().at(0).toBool())
        return -1;
    (*fleet)->stop();
    auto store = Store::open(runDir + QStringLiteral("/flotilla.db"));
    auto evaluations = (*store)->evaluations(1);
    return evaluations->empty() ? -1 : evaluations->back().accuracy;
}

JobSpec smallJob()
{
    JobSpec job = JobSpec::defaultJob();
    job.dataset.trainLimit = 6000;
    job.dataset.testLimit = 1000;
    job.training.epochs = 2;
    job.training.shards = 6;
    job.training.lrSchedule = QStringLiteral("constant");
    // The rate a plain loop does best with here: at 0.05 (with momentum 0.9, which the
    // workers keep from subtask to subtask) the loop itself only reaches 65% with the mlp.
    job.training.learningRate = 0.01;
    job.fleet.workers = 2;
    job.fleet.preemption.meanIntervalSeconds = 0;
    return job;
}

} // namespace

class TestTorchScript : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFileInfo::exists(test::python()), "Debian's python3 with python3-torch is needed");
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
    }

    void scriptedInPythonTrainedInCppLoadedInPython()
    {
        QTemporaryDir dir;
        const QString scripted = dir.filePath(QStringLiteral("net.pt"));
        const QString made = runPython(QString::fromLatin1(kScript), {scripted});
        QVERIFY2(!made.startsWith(QStringLiteral("FAILED")), qPrintable(made));

        JobSpec job = smallJob();
        job.model.kind = QStringLiteral("torchscript");
        job.model.path = scripted;
        const QString runDir = dir.filePath(QStringLiteral("run"));
        const double cppAccuracy = train(job, runDir);
        // Measured 80.9%.
        QVERIFY2(cppAccuracy > 0.70, qPrintable(QString::number(cppAccuracy)));

        const QString out = runPython(QString::fromLatin1(kEvaluate),
                                      {runDir + QStringLiteral("/model.pt"), test::fashionMnistDir(),
                                       runDir + QStringLiteral("/normalization.json"), QStringLiteral("1000")});
        QVERIFY2(out.startsWith(QStringLiteral("accuracy")), qPrintable(out));
        const double pyAccuracy = out.section(u' ', 1).toDouble();
        qInfo("accuracy: C++ %.4f, Python %.4f (chance 0.1)", cppAccuracy, pyAccuracy);
        QVERIFY(pyAccuracy > 0.70);
        // The file Python read is the model Flotilla evaluated.
        QVERIFY(qAbs(pyAccuracy - cppAccuracy) < 0.003);
    }

    void builtInModelLoadsInPythonWithTorchJitLoad()
    {
        QTemporaryDir dir;
        JobSpec job = smallJob();
        job.model.kind = QStringLiteral("mlp");
        job.model.hidden = {32};
        const QString runDir = dir.filePath(QStringLiteral("run"));
        const double cppAccuracy = train(job, runDir);
        QVERIFY2(cppAccuracy > 0.72, qPrintable(QString::number(cppAccuracy))); // measured 82.2%
        const QString out = runPython(QString::fromLatin1(kEvaluate),
                                      {runDir + QStringLiteral("/model.pt"), test::fashionMnistDir(),
                                       runDir + QStringLiteral("/normalization.json"), QStringLiteral("1000")});
        QVERIFY2(out.startsWith(QStringLiteral("accuracy")), qPrintable(out));
        QVERIFY(qAbs(out.section(u' ', 1).toDouble() - cppAccuracy) < 0.003);
    }

    void scriptWithWrongInputIsRefusedBeforeTraining()
    {
        QTemporaryDir dir;
        const QString scripted = dir.filePath(QStringLiteral("net.pt"));
        // Expects 100 features: cannot take 28×28 images.
        const QString script = QString::fromLatin1(kScript).replace(QStringLiteral("784"), QStringLiteral("100"));
        QVERIFY(!runPython(script, {scripted}).startsWith(QStringLiteral("FAILED")));
        JobSpec job = smallJob();
        job.model.kind = QStringLiteral("torchscript");
        job.model.path = scripted;
        auto fleet = LocalFleet::create(job, dir.filePath(QStringLiteral("run")));
        QVERIFY(!fleet);
        QVERIFY2(fleet.error().contains(QStringLiteral("1×28×28")), qPrintable(fleet.error()));
    }
};

QTEST_GUILESS_MAIN(TestTorchScript)
#include "tst_torchscript.moc"
