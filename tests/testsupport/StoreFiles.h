#pragma once
// Helpers of the job store tests (tst_store, tst_storefiles): open a store, and read or write
// its file on a connection of its own, so that what is checked is what reached the file.

#include "engine/coordination/Store.h"

#include <QFile>
#include <QStringList>
#include <QtTest>

#include <sqlite3.h>

#include <memory>

namespace store_files {

using namespace flotilla;

inline std::unique_ptr<Store> openStore(const QString &path)
{
    auto s = Store::open(path);
    if (!s) {
        qWarning().noquote() << s.error();
        return nullptr;
    }
    return std::move(s).value();
}

// The first column of every row of a query, run on a connection of its own, so that what is
// checked is what reached the file rather than what the store's connection believes.
inline QStringList queryFile(const QString &path, const char *sql)
{
    QStringList rows;
    sqlite3 *db = nullptr;
    if (sqlite3_open_v2(QFile::encodeName(path).constData(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        rows << QStringLiteral("error: ") + QString::fromUtf8(sqlite3_errmsg(db));
        sqlite3_close(db);
        return rows;
    }
    sqlite3_stmt *stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK) {
        while (sqlite3_step(stmt) == SQLITE_ROW)
            rows << QString::fromUtf8(reinterpret_cast<const char *>(sqlite3_column_text(stmt, 0)));
    } else {
        rows << QStringLiteral("error: ") + QString::fromUtf8(sqlite3_errmsg(db));
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return rows;
}

inline bool execFile(const QString &path, const char *sql)
{
    sqlite3 *db = nullptr;
    const bool ok = sqlite3_open(QFile::encodeName(path).constData(), &db) == SQLITE_OK
                    && sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
    sqlite3_close(db);
    return ok;
}

inline void expectErrorNaming(const QString &error, const QStringList &parts)
{
    QVERIFY2(!error.isEmpty(), "an error was expected");
    for (const QString &part : parts)
        QVERIFY2(error.contains(part, Qt::CaseInsensitive),
                 qPrintable(QStringLiteral("'%1' missing from: %2").arg(part, error)));
}

} // namespace store_files

using namespace store_files;
