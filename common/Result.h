#pragma once
// Value-or-error returned across module boundaries. The error is a message meant for the
// user: it says what was wrong and, where it can, what to do about it.

#include <QString>

#include <optional>
#include <utility>

namespace flotilla {

struct Error
{
    QString message;
};

inline Error fail(QString message)
{
    return Error{std::move(message)};
}

template <typename T>
class [[nodiscard]] Result
{
public:
    Result(T value) : m_value(std::move(value)) {}
    Result(Error error) : m_error(std::move(error.message)) {}

    bool ok() const { return m_value.has_value(); }
    explicit operator bool() const { return ok(); }

    T &value() & { return *m_value; }
    const T &value() const & { return *m_value; }
    T &&value() && { return std::move(*m_value); }
    T *operator->() { return &*m_value; }
    const T *operator->() const { return &*m_value; }
    T &operator*() { return *m_value; }
    const T &operator*() const { return *m_value; }

    const QString &error() const { return m_error; }
    Error takeError() const { return Error{m_error}; }

private:
    std::optional<T> m_value;
    QString m_error;
};

template <>
class [[nodiscard]] Result<void>
{
public:
    Result() = default;
    Result(Error error) : m_failed(true), m_error(std::move(error.message)) {}

    bool ok() const { return !m_failed; }
    explicit operator bool() const { return ok(); }
    const QString &error() const { return m_error; }
    Error takeError() const { return Error{m_error}; }

private:
    bool m_failed = false;
    QString m_error;
};

} // namespace flotilla
