#include "engine/coordination/RunAudit.h"

#include <QFileInfo>

#include <sqlite3.h>

#include <algorithm>
#include <map>

namespace flotilla {

QString auditExactlyOnce(Store &store, const std::vector<qint64> &shardSizes, int epochs)
{
    auto job = store.latestJob();
    if (!job)
        return job.error();
    if (!job->has_value())
        return QStringLiteral("no job in the store");
    const qint64 jobId = (*job)->id;
    if ((*job)->state != QLatin1String("finished"))
        return QStringLiteral("the job is '%1', not finished").arg((*job)->state);
    auto rows = store.assimilations(jobId);
    if (!rows)
        return rows.error();
    std::map<std::pair<int, int>, std::vector<std::pair<qint64, qint64>>> pieces;
    qint64 expectedSeq = 1;
    qint64 lastVersion = 0;
    for (const auto &a : *rows) {
        if (a.seq != expectedSeq++)
            return QStringLiteral("assimilation %1 follows %2").arg(a.seq).arg(expectedSeq - 2);
        if (a.version < lastVersion || a.version > lastVersion + 1)
            return QStringLiteral("version jumps from %1 to %2 at seq %3").arg(lastVersion).arg(a.version).arg(a.seq);
        lastVersion = a.version;
        pieces[{a.epoch, a.shard}].push_back({a.begin, a.coveredEnd});
    }
    if (int(pieces.size()) != epochs * int(shardSizes.size()))
        return QStringLiteral("%1 (epoch, shard) pairs assimilated, expected %2")
            .arg(pieces.size())
            .arg(epochs * int(shardSizes.size()));
    for (auto &[key, ranges] : pieces) {
        if (key.second < 0 || key.second >= int(shardSizes.size()))
            return QStringLiteral("epoch %1 names shard %2, which the job does not have").arg(key.first).arg(key.second);
        std::sort(ranges.begin(), ranges.end());
        qint64 at = 0;
        for (const auto &[b, e] : ranges) {
            if (b != at || e <= b)
                return QStringLiteral("epoch %1 shard %2: piece [%3, %4) after position %5 (gap or overlap)")
                    .arg(key.first)
                    .arg(key.second)
                    .arg(b)
                    .arg(e)
                    .arg(at);
            at = e;
        }
        if (at != shardSizes[std::size_t(key.second)])
            return QStringLiteral("epoch %1 shard %2 covered up to %3 of %4")
                .arg(key.first)
                .arg(key.second)
                .arg(at)
                .arg(shardSizes[std::size_t(key.second)]);
    }
    return {};
}

QString auditSqliteIntegrity(const QString &path)
{
    if (!QFileInfo::exists(path))
        return QStringLiteral("'%1' does not exist").arg(path);
    sqlite3 *db = nullptr;
    if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        const QString why = db ? QString::fromUtf8(sqlite3_errmsg(db)) : QStringLiteral("out of memory");
        sqlite3_close(db);
        return QStringLiteral("cannot open '%1': %2").arg(path, why);
    }
    sqlite3_busy_timeout(db, 5000);
    QStringList problems;
    sqlite3_stmt *statement = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &statement, nullptr) != SQLITE_OK) {
        problems << QString::fromUtf8(sqlite3_errmsg(db));
    } else {
        int step = SQLITE_ROW;
        while ((step = sqlite3_step(statement)) == SQLITE_ROW) {
            const QString line = QString::fromUtf8(reinterpret_cast<const char *>(sqlite3_column_text(statement, 0)));
            if (line != QLatin1String("ok"))
                problems << line;
        }
        if (step != SQLITE_DONE)
            problems << QString::fromUtf8(sqlite3_errmsg(db));
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return problems.isEmpty() ? QString()
                              : QStringLiteral("'%1' fails SQLite's integrity check: %2")
                                    .arg(path, problems.mid(0, 5).join(QStringLiteral("; ")));
}

qint64 countAssimilations(const QString &path)
{
    if (!QFileInfo::exists(path))
        return -1;
    sqlite3 *db = nullptr;
    qint64 count = -1;
    if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 1000);
        sqlite3_stmt *statement = nullptr;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM assimilations", -1, &statement, nullptr) == SQLITE_OK &&
            sqlite3_step(statement) == SQLITE_ROW)
            count = sqlite3_column_int64(statement, 0);
        sqlite3_finalize(statement);
    }
    sqlite3_close(db);
    return count;
}

} // namespace flotilla
