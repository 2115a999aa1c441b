#pragma once
// A worker's cache of the shards it was sent: decoded in memory, and as they came (manifest
// and bytes) on disk so that a restarted worker need not download them again. Both parts
// are bounded in bytes and evict the least recently used shard first; on disk, "used" is
// the file's modification time, so the order survives restarts. A shard read back from
// disk is checked against its digest, and dropped if it does not match.
//
// Threads: one thread at a time (a remote worker's file thread, WorkerAgent::m_files).

#include "engine/data/Dataset.h"

#include <QByteArray>
#include <QCborMap>
#include <QString>

#include <list>
#include <map>
#include <optional>

namespace flotilla {

class ShardCache
{
public:
    // diskBytes: 0 keeps nothing on disk; memoryBytes: 0 keeps nothing decoded in memory.
    ShardCache(QString dir, qint64 diskBytes, qint64 memoryBytes);

    // The shard with this digest, from memory or else from disk; marks it as just used.
    std::optional<Dataset> find(const QByteArray &digest);
    // Keeps a shard whose digest the caller has checked; evicts what no longer fits.
    void insert(const QByteArray &digest, const QCborMap &manifest, const QByteArray &bytes, const Dataset &shard);

    qint64 diskBytes() const { return m_diskUsed; }
    qint64 memoryBytes() const { return m_memoryUsed; }
    int diskEntries() const { return int(m_disk.size()); }
    int memoryEntries() const { return int(m_memory.size()); }
    qint64 evictions() const { return m_evictions; }
    QString dataPath(const QByteArray &digest) const;

private:
    struct DiskEntry
    {
        qint64 bytes = 0;
        qint64 lastUseMs = 0;
    };
    struct MemoryEntry
    {
        Dataset shard;
        qint64 bytes = 0;
        std::list<QByteArray>::iterator recency;
    };

    QString manifestPath(const QByteArray &digest) const;
    void scanDisk();
    void touchDisk(const QByteArray &digest);
    void removeFromDisk(const QByteArray &digest);
    void evictDisk(const QByteArray &keep);
    void remember(const QByteArray &digest, const Dataset &shard);

    QString m_dir;
    qint64 m_diskLimit;
    qint64 m_memoryLimit;
    std::map<QByteArray, DiskEntry> m_disk;
    qint64 m_diskUsed = 0;
    std::map<QByteArray, MemoryEntry> m_memory;
    std::list<QByteArray> m_memoryRecency; // front: most recently used
    qint64 m_memoryUsed = 0;
    qint64 m_evictions = 0;
    qint64 m_clock = 0; // ties broken in use order when the file clock is coarse
};

// Bytes a decoded shard holds in memory.
qint64 shardMemoryBytes(const Dataset &shard);

} // namespace flotilla
