#include "TestSupport.h"

#include "engine/coordination/RunAudit.h"

#include <QTcpServer>

#include <QDeadlineTimer>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryFile>
#include <QTest>
#include <QtEndian>

#include <torch/torch.h>

#include <zlib.h>

#include <map>
#include <stdexcept>

namespace flotilla::test {

std::shared_ptr<const JobData> blobs(int samples, int features, int shards, quint64 seed, int testSamples)
{
    torch::manual_seed(static_cast<std::uint64_t>(seed));
    auto make = [&](int n) {
        Dataset d;
        d.name = QStringLiteral("blobs");
        d.labels = torch::randint(0, 2, {n}, torch::kInt64);
        d.features = torch::randn({n, features}) * 0.5 + (d.labels.to(torch::kFloat32) * 2 - 1).unsqueeze(1);
        d.numClasses = 2;
        return d;
    };
    auto data = std::make_shared<JobData>();
    data->train = make(samples);
    data->test = make(testSamples);
    data->numClasses = 2;
    data->inputShape = {features};
    data->plan = ShardPlan(samples, shards, seed);
    return data;
}

WorkerInfo spotWorker(const QString &name)
{
    WorkerInfo w;
    w.name = name;
    w.instanceType = QStringLiteral("aws/c5.large");
    w.priceClass = QStringLiteral("spot");
    return w;
}

JobSpec blobsJob(int shards, int epochs)
{
    JobSpec job;
    job.name = QStringLiteral("blobs");
    job.dataset.kind = QStringLiteral("csv");
    job.dataset.path = QStringLiteral("(synthetic)");
    job.model.kind = QStringLiteral("mlp");
    job.model.hidden = {8};
    job.training.epochs = epochs;
    job.training.shards = shards;
    job.training.batchSize = 16;
    job.training.learningRate = 0.05;
    job.training.lrSchedule = QStringLiteral("constant");
    job.training.device = QStringLiteral("cpu");
    job.fleet.workers = 2;
    job.fleet.leaseTimeoutSeconds = 60;
    job.fleet.preemption.meanIntervalSeconds = 0;
    // async-delta as it was before rounds: each result its own version, the outer step the
    // result's change, as the lease, trust and store tests count and compute them. Rounds and
    // the outer settings that follow the fleet (the defaults) have tests that turn them on.
    job.aggregation.rounds = false;
    job.aggregation.roundSteps = 0;
    job.aggregation.outerScaledByFleet = false;
    job.aggregation.outerMomentum = 0.0;
    return job;
}

QByteArray idxBytes(quint8 type, const QList<int> &dims, const QByteArray &payload)
{
    QByteArray out;
    out.append(char(0)).append(char(0)).append(char(type)).append(char(dims.size()));
    for (const int d : dims) {
        const quint32 be = qToBigEndian(static_cast<quint32>(d));
        out.append(reinterpret_cast<const char *>(&be), 4);
    }
    return out + payload;
}

QByteArray gzip(const QByteArray &raw)
{
    z_stream zs{};
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("deflateInit2 failed");
    QByteArray out(static_cast<qsizetype>(deflateBound(&zs, static_cast<uLong>(raw.size()))), Qt::Uninitialized);
    zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(raw.constData()));
    zs.avail_in = static_cast<uInt>(raw.size());
    zs.next_out = reinterpret_cast<Bytef *>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(static_cast<qsizetype>(zs.total_out));
    deflateEnd(&zs);
    return out;
}

QString verifyExactlyOnce(Store &store, const std::vector<qint64> &shardSizes, int epochs)
{
    return auditExactlyOnce(store, shardSizes, epochs);
}

qint64 assimilations(const QString &db)
{
    if (!QFileInfo::exists(db))
        return 0;
    auto store = Store::open(db);
    if (!store)
        return 0;
    auto job = (*store)->latestJob();
    if (!job || !job->has_value())
        return 0;
    auto rows = (*store)->assimilations((*job)->id);
    return rows ? qint64(rows->size()) : 0;
}

QString flotillaBinary()
{
    return QStringLiteral(FLOTILLA_BINARY);
}

QString headlessBinary()
{
    return QStringLiteral(FLOTILLA_HEADLESS_BINARY);
}

quint16 freeLoopbackPort()
{
    QTcpServer probe;
    probe.listen(QHostAddress::LocalHost, 0);
    return probe.serverPort();
}

QString python()
{
    return QStringLiteral(FLOTILLA_PYTHON);
}

QString fashionMnistDir()
{
    return defaultFashionMnistDir();
}

namespace {

ProcessRun runProcess(const QString &program, const QStringList &args, int timeoutMs, const QString &workingDir = {})
{
    QProcess p;
    if (!workingDir.isEmpty())
        p.setWorkingDirectory(workingDir);
    p.start(program, args);
    ProcessRun r;
    if (!p.waitForStarted(10000)) {
        r.err = QStringLiteral("cannot start %1: %2").arg(program, p.errorString());
        return r;
    }
    r.finished = p.waitForFinished(timeoutMs) && p.exitStatus() == QProcess::NormalExit;
    if (!r.finished) {
        p.kill();
        p.waitForFinished(5000);
    }
    r.exitCode = p.exitCode();
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    if (!r.finished)
        r.err += QStringLiteral("\n(killed after %1 s)").arg(timeoutMs / 1000);
    return r;
}

} // namespace

ProcessRun runProgram(const QString &program, const QStringList &args, int timeoutMs, const QString &workingDir)
{
    return runProcess(program, args, timeoutMs, workingDir);
}

ProcessRun runFlotilla(const QStringList &args, int timeoutMs, const QString &workingDir)
{
    return runProcess(flotillaBinary(), args, timeoutMs, workingDir);
}

ProcessRun runPython(const QString &script, const QStringList &args, int timeoutMs)
{
    QTemporaryFile file(QDir::tempPath() + QStringLiteral("/flotilla-XXXXXX.py"));
    if (!file.open())
        return ProcessRun{false, -1, {}, QStringLiteral("cannot write the Python script")};
    file.write(script.toUtf8());
    file.flush();
    return runProcess(python(), QStringList{file.fileName()} + args, timeoutMs);
}

QList<double> testAccuracies(const QString &runDir)
{
    QList<double> out;
    QFile file(runDir + QStringLiteral("/metrics.csv"));
    if (!file.open(QIODevice::ReadOnly))
        return out;
    const QList<QByteArray> header = file.readLine().trimmed().split(',');
    const qsizetype column = header.indexOf("test_accuracy");
    while (!file.atEnd()) {
        const QList<QByteArray> fields = file.readLine().trimmed().split(',');
        if (column >= 0 && column < fields.size() && !fields[column].isEmpty())
            out << fields[column].toDouble();
    }
    return out;
}

double finalTestAccuracy(const QString &runDir)
{
    const QList<double> all = testAccuracies(runDir);
    return all.isEmpty() ? -1 : all.last();
}

bool waitUntil(int timeoutMs, const std::function<bool()> &ready)
{
    const QDeadlineTimer deadline(timeoutMs);
    for (;;) {
        if (ready())
            return true;
        if (deadline.hasExpired())
            return false;
        QTest::qWait(200);
    }
}

} // namespace flotilla::test
