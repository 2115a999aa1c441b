#pragma once
// TensorBoard event files (events.out.tfevents.*) written with Qt Core alone: records framed
// as TFRecords (length, masked CRC-32C, data, masked CRC-32C), each holding a tensorflow.Event
// encoded by hand. Scalars use the classic simple_value that every TensorBoard reads; text
// uses the text plugin's string tensor. A writer is used by one thread at a time, the one that
// owns it; any process may read its file while it grows.

#include "common/Result.h"

#include <QByteArrayView>
#include <QFile>
#include <QList>
#include <QPair>
#include <QString>

#include <cstdint>
#include <memory>
#include <optional>

namespace flotilla {

class TensorBoardWriter
{
public:
    // Creates a new event file in dir (made if missing), named
    // events.out.tfevents.<unix seconds>.<host name><fileSuffix>, with ".<n>" added when a file
    // of that name already exists, and writes its first event (file_version "brain.Event:2").
    static Result<std::unique_ptr<TensorBoardWriter>> open(const QString &dir, const QString &fileSuffix = {});
    ~TensorBoardWriter(); // flushes; a failure then is lost, so call flush() to learn of it

    TensorBoardWriter(const TensorBoardWriter &) = delete;
    TensorBoardWriter &operator=(const TensorBoardWriter &) = delete;

    // Records are buffered; they reach the file on flush() or when the buffer grows large.
    // Values are stored as float32, NaN and infinities as they are. Wall times are seconds
    // since the epoch, as the caller's clock gives them.
    void addScalar(const QString &tag, qint64 step, double value, double wallTimeSeconds);
    // Several scalars of one step in one event.
    void addScalars(qint64 step, const QList<QPair<QString, double>> &values, double wallTimeSeconds);
    // Markdown for the text dashboard, stored as UTF-8.
    void addText(const QString &tag, qint64 step, const QString &markdown, double wallTimeSeconds);

    // Hands the buffered records to the operating system, without fsync: readers see them at
    // once, a power cut may still lose them. Reports the first write error since the last call.
    Result<void> flush();

    QString path() const { return m_file.fileName(); }

    // The masked CRC-32C of TFRecord framing: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
    static std::uint32_t maskedCrc32c(QByteArrayView data);

private:
    explicit TensorBoardWriter(const QString &path) : m_file(path) { }
    void appendRecord(const QByteArray &event);
    void writePending();

    QFile m_file;
    QByteArray m_pending;
    QString m_error; // the first write error not yet reported by flush()
};

// One Summary.Value as read back: a scalar has simpleValue; a text value has pluginName
// "text" and text (the tensor's first string, UTF-8).
struct TensorBoardValue
{
    QString tag;
    std::optional<float> simpleValue;
    QString pluginName;
    std::optional<QString> text;
};

struct TensorBoardEvent
{
    double wallTime = 0;
    qint64 step = 0;
    QString fileVersion;
    QList<TensorBoardValue> values;
};

// Reads every event of an event file, checking both CRCs of every record; fields other than
// those above are skipped. A damaged or cut-short record fails the read, naming the file and
// the record's index.
Result<QList<TensorBoardEvent>> readTensorBoardEvents(const QString &path);

} // namespace flotilla
