#pragma once
// Helpers shared by the tests: synthetic data sets, IDX file writers, and where the binaries
// and data under test are.

#include "TestFiles.h"
#include "engine/coordination/Coordinator.h"
#include "engine/coordination/Store.h"
#include "engine/data/JobData.h"
#include "job/JobSpec.h"

#include <QByteArray>
#include <QString>
#include <QStringList>

#include <functional>
#include <memory>

namespace flotilla::test {

// Two Gaussian blobs in `features` dimensions: an easy problem an MLP learns in a few steps.
std::shared_ptr<const JobData> blobs(int samples, int features, int shards, quint64 seed = 7, int testSamples = 200);

// A small MLP job on that data, with no preemptions.
JobSpec blobsJob(int shards, int epochs);

// A worker on an aws/c5.large spot instance, as the coordinator's tests join them.
WorkerInfo spotWorker(const QString &name);

// IDX bytes: magic, big-endian dims, payload.
QByteArray idxBytes(quint8 type, const QList<int> &dims, const QByteArray &payload);
QByteArray gzip(const QByteArray &raw);

// Checks the job in the store finished with every shard of every epoch assimilated exactly
// once (the assimilated pieces tile each shard) and with contiguous sequence numbers and
// versions. Returns what is wrong, or an empty string.
QString verifyExactlyOnce(Store &store, const std::vector<qint64> &shardSizes, int epochs);

// Assimilations of the latest job in a store that may still be being written (WAL lets a
// reader in beside the writer); 0 while there is no store or job yet.
qint64 assimilations(const QString &db);

QString flotillaBinary();
// flotilla-headless: the same commands without windows.
QString headlessBinary();
QString python();
// A TCP port on 127.0.0.1 that was free a moment ago, for a `flotilla serve` to listen on.
quint16 freeLoopbackPort();
// Fashion-MNIST's folder; tests that need it fail with a clear message when it is missing.
QString fashionMnistDir();

// A finished (or killed) process: its exit code and what it wrote.
struct ProcessRun
{
    bool finished = false; // exited by itself within the time allowed
    int exitCode = -1;
    QString out;
    QString err;
};

// Runs `flotilla ARGS...` to the end (in workingDir, if given), killing it after timeoutMs.
ProcessRun runFlotilla(const QStringList &args, int timeoutMs, const QString &workingDir = {});
ProcessRun runProgram(const QString &program, const QStringList &args, int timeoutMs, const QString &workingDir = {});

// Runs python() on a script given as text; it is written to a real file first, because
// torch.jit.script reads the source of the classes it scripts.
ProcessRun runPython(const QString &script, const QStringList &args, int timeoutMs = 120000);

// Waits until ready() holds or timeoutMs of the clock have passed, serving events between
// looks; true when it held. For conditions that take time to evaluate (they run a process):
// QTRY_VERIFY counts its 50 ms steps, not the time, and a look of a second each stretches its
// timeout twenty times over.
bool waitUntil(int timeoutMs, const std::function<bool()> &ready);

// Every test accuracy in a run's metrics.csv, in order.
QList<double> testAccuracies(const QString &runDir);
// The last test accuracy in a finished run's metrics.csv, or -1 when it has none.
double finalTestAccuracy(const QString &runDir);

} // namespace flotilla::test
