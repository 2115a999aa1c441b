#include "engine/wire/ShardCache.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "engine/wire/WireFormat.h"

#include <QCborValue>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>

#include <torch/torch.h>

namespace flotilla {

qint64 shardMemoryBytes(const Dataset &shard)
{
    qint64 bytes = 0;
    for (const torch::Tensor *t : {&shard.features, &shard.labels})
        if (t->defined())
            bytes += t->numel() * qint64(t->element_size());
    return bytes + qint64(shard.normalization.mean.size()) * 8;
}

ShardCache::ShardCache(QString dir, qint64 diskBytes, qint64 memoryBytes)
    : m_dir(std::move(dir)), m_diskLimit(std::max<qint64>(0, diskBytes)), m_memoryLimit(std::max<qint64>(0, memoryBytes))
{
    scanDisk();
    evictDisk({});
}

QString ShardCache::dataPath(const QByteArray &digest) const
{
    return QDir(m_dir).filePath(QString::fromLatin1(digest.toHex()) + QStringLiteral(".bin"));
}

QString ShardCache::manifestPath(const QByteArray &digest) const
{
    return QDir(m_dir).filePath(QString::fromLatin1(digest.toHex()) + QStringLiteral(".cbor"));
}

void ShardCache::scanDisk()
{
    const QDir dir(m_dir);
    if (!dir.exists())
        return;
    // Only names this cache writes are touched: <sha256>.bin and .cbor, the temporary files
    // of a write cut short (<sha256>.bin.XXXXXX), and .json manifests of older versions.
    static const QRegularExpression ours(QStringLiteral("^([0-9a-f]{64})\\.(bin|cbor|json)(\\..+)?$"));
    for (const QFileInfo &info : dir.entryInfoList(QDir::Files)) {
        const auto match = ours.match(info.fileName());
        if (!match.hasMatch())
            continue;
        const QByteArray digest = QByteArray::fromHex(match.captured(1).toLatin1());
        const bool complete = match.captured(3).isEmpty();
        if (complete && match.captured(2) == QLatin1String("bin") && QFileInfo::exists(manifestPath(digest))) {
            DiskEntry e;
            e.bytes = info.size() + QFileInfo(manifestPath(digest)).size();
            e.lastUseMs = info.lastModified().toMSecsSinceEpoch();
            m_clock = std::max(m_clock, e.lastUseMs);
            m_disk[digest] = e;
            m_diskUsed += e.bytes;
        } else if (!complete || match.captured(2) == QLatin1String("json")
                   || (match.captured(2) == QLatin1String("bin") && !QFileInfo::exists(manifestPath(digest)))
                   || (match.captured(2) == QLatin1String("cbor") && !QFileInfo::exists(dataPath(digest)))) {
            QFile::remove(info.filePath());
        }
    }
}

void ShardCache::touchDisk(const QByteArray &digest)
{
    auto it = m_disk.find(digest);
    if (it == m_disk.end())
        return;
    // Strictly increasing, so that two uses within one tick of the clock keep their order.
    m_clock = std::max(m_clock + 1, QDateTime::currentMSecsSinceEpoch());
    it->second.lastUseMs = m_clock;
    QFile file(dataPath(digest));
    if (file.open(QIODevice::ReadOnly))
        file.setFileTime(QDateTime::fromMSecsSinceEpoch(m_clock), QFileDevice::FileModificationTime);
}

void ShardCache::removeFromDisk(const QByteArray &digest)
{
    QFile::remove(dataPath(digest));
    QFile::remove(manifestPath(digest));
    auto it = m_disk.find(digest);
    if (it != m_disk.end()) {
        m_diskUsed -= it->second.bytes;
        m_disk.erase(it);
    }
}

void ShardCache::evictDisk(const QByteArray &keep)
{
    while (m_diskUsed > m_diskLimit) {
        auto oldest = m_disk.end();
        for (auto it = m_disk.begin(); it != m_disk.end(); ++it)
            if (it->first != keep && (oldest == m_disk.end() || it->second.lastUseMs < oldest->second.lastUseMs))
                oldest = it;
        if (oldest == m_disk.end())
            return;
        qCInfo(lcData).noquote() << QStringLiteral("shard cache: evicted %1 from disk (%2 bytes) to stay within %3 bytes")
                                          .arg(QString::fromLatin1(oldest->first.toHex().left(12)))
                                          .arg(oldest->second.bytes)
                                          .arg(m_diskLimit);
        ++m_evictions;
        removeFromDisk(QByteArray(oldest->first));
    }
}

void ShardCache::remember(const QByteArray &digest, const Dataset &shard)
{
    auto it = m_memory.find(digest);
    if (it != m_memory.end()) {
        m_memoryRecency.splice(m_memoryRecency.begin(), m_memoryRecency, it->second.recency);
        return;
    }
    const qint64 bytes = shardMemoryBytes(shard);
    if (bytes > m_memoryLimit)
        return;
    m_memoryRecency.push_front(digest);
    m_memory[digest] = MemoryEntry{shard, bytes, m_memoryRecency.begin()};
    m_memoryUsed += bytes;
    while (m_memoryUsed > m_memoryLimit) {
        const QByteArray oldest = m_memoryRecency.back();
        m_memoryRecency.pop_back();
        m_memoryUsed -= m_memory[oldest].bytes;
        m_memory.erase(oldest);
    }
}

std::optional<Dataset> ShardCache::find(const QByteArray &digest)
{
    if (auto it = m_memory.find(digest); it != m_memory.end()) {
        m_memoryRecency.splice(m_memoryRecency.begin(), m_memoryRecency, it->second.recency);
        touchDisk(digest);
        return it->second.shard;
    }
    if (!m_disk.count(digest))
        return std::nullopt;
    QFile data(dataPath(digest));
    QFile manifestFile(manifestPath(digest));
    if (!data.open(QIODevice::ReadOnly) || !manifestFile.open(QIODevice::ReadOnly)) {
        removeFromDisk(digest);
        return std::nullopt;
    }
    const QByteArray bytes = data.readAll();
    const QCborMap manifest = QCborValue::fromCbor(manifestFile.readAll()).toMap();
    if (shardDigest(manifest, bytes) != digest) {
        qCWarning(lcData).noquote() << "shard cache: dropped" << data.fileName() << "- its content does not match its digest";
        removeFromDisk(digest);
        return std::nullopt;
    }
    auto shard = shardFromBytes(bytes, manifest);
    if (!shard) {
        qCWarning(lcData).noquote() << "shard cache: dropped" << data.fileName() << "-" << shard.error();
        removeFromDisk(digest);
        return std::nullopt;
    }
    touchDisk(digest);
    remember(digest, *shard);
    return std::move(shard).value();
}

void ShardCache::insert(const QByteArray &digest, const QCborMap &manifest, const QByteArray &bytes, const Dataset &shard)
{
    remember(digest, shard);
    const QByteArray manifestBytes = manifest.toCborValue().toCbor();
    const qint64 size = bytes.size() + manifestBytes.size();
    if (m_disk.count(digest)) {
        touchDisk(digest);
        return;
    }
    if (size > m_diskLimit)
        return;
    if (!QDir().mkpath(m_dir))
        return;
    // The manifest first: a data file without one is an orphan the next scan removes.
    if (!writeFileAtomically(manifestPath(digest), manifestBytes) || !writeFileAtomically(dataPath(digest), bytes)) {
        qCWarning(lcData).noquote() << "shard cache: cannot write to" << m_dir << "- the shard stays in memory only";
        QFile::remove(manifestPath(digest));
        return;
    }
    m_disk[digest] = DiskEntry{size, 0};
    m_diskUsed += size;
    touchDisk(digest);
    evictDisk(digest);
}

} // namespace flotilla
