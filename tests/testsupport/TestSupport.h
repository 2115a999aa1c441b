#pragma once
// Helpers shared by the tests: synthetic data sets, IDX file writers, and where the binaries
// and data under test are.

#include "JobData.h"
#include "JobSpec.h"
#include "Store.h"

#include <QByteArray>
#include <QString>

#include <memory>

namespace flotilla::test {

// Two Gaussian blobs in `features` dimensions: an easy problem an MLP learns in a few steps.
std::shared_ptr<const JobData> blobs(int samples, int features, int shards, quint64 seed = 7, int testSamples = 200);

// A small MLP job on that data, with no preemptions.
JobSpec blobsJob(int shards, int epochs);

// IDX bytes: magic, big-endian dims, payload.
QByteArray idxBytes(quint8 type, const QList<int> &dims, const QByteArray &payload);
QByteArray gzip(const QByteArray &raw);
void writeFile(const QString &path, const QByteArray &bytes);

// Checks the job in the store finished with every shard of every epoch assimilated exactly
// once (the assimilated pieces tile each shard) and with contiguous sequence numbers and
// versions. Returns what is wrong, or an empty string.
QString verifyExactlyOnce(Store &store, const std::vector<qint64> &shardSizes, int epochs);

// Assimilations of the latest job in a store that may still be being written (WAL lets a
// reader in beside the writer); 0 while there is no store or job yet.
qint64 assimilations(const QString &db);

QString flotillaBinary();
QString python();
// Fashion-MNIST's folder; tests that need it fail with a clear message when it is missing.
QString fashionMnistDir();

} // namespace flotilla::test
