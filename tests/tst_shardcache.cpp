// The worker's shard cache: bounded on disk and in memory, least recently used out first,
// the order kept across restarts, and a damaged file dropped rather than trained on.
#include "TestSupport.h"
#include "engine/wire/ShardCache.h"
#include "engine/wire/WireFormat.h"

#include <QDir>
#include <QFile>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

struct Encoded
{
    Dataset shard;
    QCborMap manifest;
    QByteArray bytes;
    QByteArray digest;
};

// A shard of 100 gray 10×10 images (10,000 bytes of pixels), different for every seed.
Encoded shard(int seed)
{
    torch::manual_seed(static_cast<std::uint64_t>(seed));
    Encoded e;
    e.shard.features = torch::randint(0, 256, {100, 1, 10, 10}, torch::kUInt8);
    e.shard.labels = torch::randint(0, 3, {100}, torch::kInt64);
    e.shard.numClasses = 3;
    e.shard.normalization.mean = {0.5f};
    e.shard.normalization.stddev = {0.25f};
    e.manifest = shardManifest(e.shard);
    e.manifest.insert(QStringLiteral("shard"), seed); // as the coordinator's header has it
    e.bytes = shardToBytes(e.shard);
    e.digest = shardDigest(e.manifest, e.bytes);
    return e;
}

qint64 onDisk(const Encoded &e)
{
    return e.bytes.size() + e.manifest.toCborValue().toCbor().size();
}

} // namespace

class TestShardCache : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void diskIsBoundedLeastRecentlyUsedFirst()
    {
        QTemporaryDir dir;
        const Encoded a = shard(1), b = shard(2), c = shard(3), d = shard(4);
        // Room for two shards and a half on disk, none in memory: every find reads the disk.
        const qint64 limit = onDisk(a) * 5 / 2;
        ShardCache cache(dir.path(), limit, 0);
        cache.insert(a.digest, a.manifest, a.bytes, a.shard);
        cache.insert(b.digest, b.manifest, b.bytes, b.shard);
        QCOMPARE(cache.diskEntries(), 2);
        QVERIFY(cache.find(a.digest)); // a is now the most recently used
        cache.insert(c.digest, c.manifest, c.bytes, c.shard);
        QCOMPARE(cache.diskEntries(), 2);
        QVERIFY(cache.diskBytes() <= limit);
        QCOMPARE(cache.evictions(), qint64(1));
        QVERIFY(!QFile::exists(cache.dataPath(b.digest))); // b was the least recently used
        QVERIFY(!cache.find(b.digest));
        auto back = cache.find(a.digest);
        QVERIFY(back);
        QVERIFY(torch::equal(back->features, a.shard.features));
        QCOMPARE(back->normalization.mean, a.shard.normalization.mean);

        // A restarted worker finds the same files, in the same order of use.
        ShardCache again(dir.path(), limit, 0);
        QCOMPARE(again.diskEntries(), 2);
        QCOMPARE(again.diskBytes(), cache.diskBytes());
        again.insert(d.digest, d.manifest, d.bytes, d.shard);
        QVERIFY(!QFile::exists(again.dataPath(c.digest))); // c was used before a's last find
        QVERIFY(again.find(a.digest));
        QVERIFY(again.find(d.digest));

        // A smaller limit at start-up evicts at once.
        ShardCache smaller(dir.path(), onDisk(a), 0);
        QCOMPARE(smaller.diskEntries(), 1);
        QVERIFY(smaller.find(d.digest));
        // A shard larger than the whole budget stays off the disk.
        ShardCache none(dir.path(), 0, 0);
        QCOMPARE(none.diskEntries(), 0);
        none.insert(a.digest, a.manifest, a.bytes, a.shard);
        QVERIFY(!QFile::exists(none.dataPath(a.digest)));
        QVERIFY(QDir(dir.path()).entryList(QDir::Files).isEmpty());
    }

    void memoryIsBoundedToo()
    {
        QTemporaryDir dir;
        const Encoded a = shard(1), b = shard(2), c = shard(3);
        const qint64 one = shardMemoryBytes(a.shard);
        QCOMPARE(one, qint64(100 * 100 + 100 * 8 + 8)); // bytes, not float32
        ShardCache cache(dir.path(), 0, one * 2);
        cache.insert(a.digest, a.manifest, a.bytes, a.shard);
        cache.insert(b.digest, b.manifest, b.bytes, b.shard);
        QVERIFY(cache.find(a.digest));
        cache.insert(c.digest, c.manifest, c.bytes, c.shard);
        QCOMPARE(cache.memoryEntries(), 2);
        QVERIFY(cache.memoryBytes() <= one * 2);
        QVERIFY(cache.find(a.digest));
        QVERIFY(!cache.find(b.digest)); // evicted from memory, and nothing on disk
        QVERIFY(cache.find(c.digest));
    }

    void damagedFilesAreDroppedNotTrainedOn()
    {
        QTemporaryDir dir;
        const Encoded a = shard(1), b = shard(2);
        {
            ShardCache cache(dir.path(), qint64(1) << 30, 0);
            cache.insert(a.digest, a.manifest, a.bytes, a.shard);
            cache.insert(b.digest, b.manifest, b.bytes, b.shard);
        }
        // One flipped pixel in a; a manifest of b that asks for other augmentation.
        const QString hex = QString::fromLatin1(a.digest.toHex());
        QByteArray flipped = a.bytes;
        flipped[10] = char(flipped[10] ^ 0x40);
        test::writeFile(dir.filePath(hex + QStringLiteral(".bin")), flipped);
        QCborMap otherAugmentation = b.manifest;
        otherAugmentation.insert(QStringLiteral("crop_padding"), 3);
        const QString bManifest = dir.filePath(QString::fromLatin1(b.digest.toHex()) + QStringLiteral(".cbor"));
        test::writeFile(bManifest, otherAugmentation.toCborValue().toCbor());
        // Leftovers of a killed write and of older versions go at start-up; other files stay.
        test::writeFile(dir.filePath(hex + QStringLiteral(".bin.Xy12Ab")), "partial");
        test::writeFile(dir.filePath(hex + QStringLiteral(".json")), "{}");
        test::writeFile(dir.filePath(QStringLiteral("notes.txt")), "mine");

        ShardCache cache(dir.path(), qint64(1) << 30, 0);
        QVERIFY(!QFile::exists(dir.filePath(hex + QStringLiteral(".bin.Xy12Ab"))));
        QVERIFY(!QFile::exists(dir.filePath(hex + QStringLiteral(".json"))));
        QVERIFY(QFile::exists(dir.filePath(QStringLiteral("notes.txt"))));
        QCOMPARE(cache.diskEntries(), 2);
        QVERIFY(!cache.find(a.digest));
        QVERIFY(!cache.find(b.digest));
        QCOMPARE(cache.diskEntries(), 0);
        QVERIFY(!QFile::exists(cache.dataPath(a.digest)));
        QVERIFY(!QFile::exists(bManifest));
    }
};

QTEST_GUILESS_MAIN(TestShardCache)
#include "tst_shardcache.moc"
