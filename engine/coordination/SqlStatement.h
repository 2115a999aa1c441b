#pragma once
// A prepared SQLite statement with positional binding and typed column access, and the loop
// that reads its rows: what the job store and the fleet's queue are written with.
// Threads: one statement, one thread (its connection's).

#include "common/Result.h"

#include <QString>

#include <sqlite3.h>

#include <type_traits>
#include <vector>

namespace flotilla {

// A prepared statement with positional binding and typed column access.
class Statement
{
public:
    // what: the database, as errors name it ("job store").
    Statement(sqlite3 *db, const char *sql, const char *what = "job store") : m_db(db), m_what(what)
    {
        m_rc = sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr);
    }
    ~Statement() { sqlite3_finalize(m_stmt); }
    Statement(const Statement &) = delete;
    Statement &operator=(const Statement &) = delete;

    Statement &bind(qint64 v) { return check(sqlite3_bind_int64(m_stmt, ++m_index, v)); }
    Statement &bind(int v) { return check(sqlite3_bind_int64(m_stmt, ++m_index, v)); }
    Statement &bind(double v) { return check(sqlite3_bind_double(m_stmt, ++m_index, v)); }
    Statement &bind(const QString &v)
    {
        const QByteArray utf8 = v.toUtf8();
        return check(sqlite3_bind_text(m_stmt, ++m_index, utf8.constData(), static_cast<int>(utf8.size()),
                                       SQLITE_TRANSIENT));
    }

    // Runs a statement that returns no rows.
    Result<void> run()
    {
        if (m_rc != SQLITE_OK)
            return error();
        const int rc = sqlite3_step(m_stmt);
        if (rc != SQLITE_DONE) {
            m_rc = rc;
            return error();
        }
        return {};
    }
    // Runs an UPDATE that must change exactly one row: one that matches none names what it
    // looked for, rather than succeeding without effect.
    Result<void> runOne(const QString &what)
    {
        if (auto r = run(); !r)
            return r;
        if (sqlite3_changes(m_db) != 1)
            return fail(QStringLiteral("%1 error: there is no %2").arg(QLatin1String(m_what), what));
        return {};
    }
    // Steps to the next row; false at the end or on error (then ok() is false).
    bool next()
    {
        if (m_rc != SQLITE_OK)
            return false;
        const int rc = sqlite3_step(m_stmt);
        if (rc == SQLITE_ROW)
            return true;
        if (rc != SQLITE_DONE)
            m_rc = rc;
        return false;
    }
    bool ok() const { return m_rc == SQLITE_OK; }
    Error error() const
    {
        return fail(QStringLiteral("%1 error: %2").arg(QLatin1String(m_what), QString::fromUtf8(sqlite3_errmsg(m_db))));
    }

    qint64 i64(int col) const { return sqlite3_column_int64(m_stmt, col); }
    int i32(int col) const { return sqlite3_column_int(m_stmt, col); }
    double f64(int col) const { return sqlite3_column_double(m_stmt, col); }
    QString text(int col) const
    {
        return QString::fromUtf8(reinterpret_cast<const char *>(sqlite3_column_text(m_stmt, col)),
                                 sqlite3_column_bytes(m_stmt, col));
    }

private:
    Statement &check(int rc)
    {
        if (m_rc == SQLITE_OK && rc != SQLITE_OK)
            m_rc = rc;
        return *this;
    }

    sqlite3 *m_db;
    const char *m_what;
    sqlite3_stmt *m_stmt = nullptr;
    int m_rc = SQLITE_OK;
    int m_index = 0;
};

// Reads every row with row(q), which returns T, or Result<T> when a row can be refused (a
// value the code does not know: the first such row's error is the answer).
template <typename T, typename F>
Result<std::vector<T>> collect(Statement &q, F &&row)
{
    std::vector<T> out;
    while (q.next()) {
        if constexpr (std::is_same_v<std::invoke_result_t<F &, Statement &>, Result<T>>) {
            Result<T> r = row(q);
            if (!r)
                return r.takeError();
            out.push_back(std::move(*r));
        } else {
            out.push_back(row(q));
        }
    }
    if (!q.ok())
        return q.error();
    return out;
}

} // namespace flotilla
