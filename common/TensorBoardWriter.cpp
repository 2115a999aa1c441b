#include "common/TensorBoardWriter.h"

#include "common/Crc32c.h"

#include <QDateTime>
#include <QDir>
#include <QSysInfo>
#include <QtEndian>

#include <cmath>
#include <limits>
#include <utility>

namespace flotilla {

namespace {

// Field numbers of tensorflow.Event, Summary.Value and their parts (event.proto,
// summary.proto, tensor.proto).
enum : int { kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5, kSummaryValue = 1 };
enum : int { kValueTag = 1, kValueSimpleValue = 2, kValueTensor = 8, kValueMetadata = 9 };
enum : int { kMetadataPluginData = 1, kPluginName = 1, kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8 };
enum : int { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };
constexpr int kDtString = 7;

// Buffered records go to the file once they pass this size, flush() or not.
constexpr qsizetype kPendingLimit = 1 << 20;

void putVarint(QByteArray &out, quint64 v)
{
    while (v >= 0x80) {
        out.append(char((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.append(char(v));
}

void putTag(QByteArray &out, int field, int wireType)
{
    putVarint(out, quint64(field) << 3 | quint64(wireType));
}

void putBytes(QByteArray &out, int field, QByteArrayView bytes)
{
    putTag(out, field, kBytes);
    putVarint(out, quint64(bytes.size()));
    out.append(bytes);
}

template<typename T> void putLittleEndian(QByteArray &out, T v)
{
    char buf[sizeof(T)];
    qToLittleEndian(v, buf);
    out.append(buf, sizeof(T));
}

QByteArray eventHeader(double wallTime, qint64 step)
{
    QByteArray out;
    putTag(out, kEventWallTime, kFixed64);
    putLittleEndian(out, wallTime);
    if (step != 0) { // proto3 leaves a zero out
        putTag(out, kEventStep, kVarint);
        putVarint(out, quint64(step)); // a negative int64 takes ten bytes, as protobuf writes it
    }
    return out;
}

QByteArray scalarValue(const QString &tag, double value)
{
    // A finite double beyond float's range becomes an infinity, not undefined behaviour.
    constexpr double kMax = std::numeric_limits<float>::max();
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const float f = std::isfinite(value) && std::abs(value) > kMax ? (value > 0 ? kInf : -kInf) : float(value);
    QByteArray out;
    putBytes(out, kValueTag, tag.toUtf8());
    putTag(out, kValueSimpleValue, kFixed32);
    putLittleEndian(out, f);
    return out;
}

QByteArray withSummary(QByteArray event, const QList<QByteArray> &values)
{
    QByteArray summary;
    for (const QByteArray &v : values)
        putBytes(summary, kSummaryValue, v);
    putBytes(event, kEventSummary, summary);
    return event;
}

// One field of a message being decoded: a varint, or the bytes of any other wire type.
struct Field
{
    int number = 0;
    int wireType = 0;
    quint64 varint = 0;
    QByteArrayView bytes;

    bool is(int n, int w) const { return number == n && wireType == w; }
};

bool readVarint(QByteArrayView in, qsizetype &pos, quint64 &v)
{
    v = 0;
    for (int shift = 0; shift < 64 && pos < in.size(); shift += 7) {
        const auto byte = quint8(in[pos++]);
        v |= quint64(byte & 0x7F) << shift;
        if (!(byte & 0x80))
            return true;
    }
    return false;
}

// Calls onField for each field of a message; false if the message is malformed or
// onField returned false.
template<typename F> bool forEachField(QByteArrayView in, F &&onField)
{
    for (qsizetype pos = 0; pos < in.size();) {
        Field f;
        quint64 tag = 0;
        if (!readVarint(in, pos, tag))
            return false;
        f.number = int(tag >> 3);
        f.wireType = int(tag & 7);
        quint64 n = 0;
        if (f.wireType == kVarint) {
            if (!readVarint(in, pos, f.varint))
                return false;
        } else if (f.wireType == kFixed64 || f.wireType == kFixed32) {
            n = f.wireType == kFixed64 ? 8 : 4;
        } else if (f.wireType != kBytes || !readVarint(in, pos, n)) {
            return false;
        }
        if (n > quint64(in.size() - pos))
            return false;
        f.bytes = in.sliced(pos, qsizetype(n));
        pos += qsizetype(n);
        if (!onField(f))
            return false;
    }
    return true;
}

// The bytes of the first field of the given number in a message, or nullopt.
std::optional<QByteArrayView> firstBytes(QByteArrayView message, int number, bool &ok)
{
    std::optional<QByteArrayView> found;
    ok = ok && forEachField(message, [&](const Field &f) {
        if (!found && f.is(number, kBytes))
            found = f.bytes;
        return true;
    });
    return found;
}

bool decodeValue(QByteArrayView bytes, TensorBoardValue &value)
{
    bool ok = true; // false once a nested message is malformed
    const bool parsed = forEachField(bytes, [&](const Field &f) {
        if (f.is(kValueTag, kBytes)) {
            value.tag = QString::fromUtf8(f.bytes);
        } else if (f.is(kValueSimpleValue, kFixed32)) {
            value.simpleValue = qFromLittleEndian<float>(f.bytes.data());
        } else if (f.is(kValueMetadata, kBytes)) {
            if (const auto plugin = firstBytes(f.bytes, kMetadataPluginData, ok))
                if (const auto name = firstBytes(*plugin, kPluginName, ok))
                    value.pluginName = QString::fromUtf8(*name);
        } else if (f.is(kValueTensor, kBytes)) {
            if (const auto s = firstBytes(f.bytes, kTensorStringVal, ok))
                value.text = QString::fromUtf8(*s);
        }
        return ok;
    });
    return parsed && ok;
}

bool decodeEvent(QByteArrayView bytes, TensorBoardEvent &event)
{
    return forEachField(bytes, [&](const Field &f) {
        if (f.is(kEventWallTime, kFixed64))
            event.wallTime = qFromLittleEndian<double>(f.bytes.data());
        else if (f.is(kEventStep, kVarint))
            event.step = qint64(f.varint);
        else if (f.is(kEventFileVersion, kBytes))
            event.fileVersion = QString::fromUtf8(f.bytes);
        else if (f.is(kEventSummary, kBytes))
            return forEachField(f.bytes, [&](const Field &v) {
                if (!v.is(kSummaryValue, kBytes))
                    return true;
                TensorBoardValue value;
                if (!decodeValue(v.bytes, value))
                    return false;
                event.values.append(value);
                return true;
            });
        return true;
    });
}

} // namespace

std::uint32_t TensorBoardWriter::maskedCrc32c(QByteArrayView data)
{
    const std::uint32_t crc = Crc32c::of(data);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const QString &dir, const QString &fileSuffix)
{
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("cannot create the TensorBoard log folder '%1': check that its parent exists "
                                   "and is writable")
                        .arg(dir));
    const qint64 nowMs = QDateTime::currentMSecsSinceEpoch();
    QString host = QSysInfo::machineHostName();
    host.replace(QLatin1Char('/'), QLatin1Char('_')).replace(QLatin1Char('\\'), QLatin1Char('_'));
    if (host.isEmpty())
        host = QStringLiteral("localhost");
    const QString base
        = QDir(dir).filePath(QStringLiteral("events.out.tfevents.%1.%2%3").arg(nowMs / 1000).arg(host, fileSuffix));

    std::unique_ptr<TensorBoardWriter> writer;
    for (int n = 0;; ++n) {
        const QString path = n == 0 ? base : base + QLatin1Char('.') + QString::number(n);
        writer.reset(new TensorBoardWriter(path));
        // NewOnly: a writer opened in the same second by another run or process keeps its file.
        if (writer->m_file.open(QIODevice::WriteOnly | QIODevice::NewOnly))
            break;
        if (!QFile::exists(path) || n == 999)
            return fail(QStringLiteral("cannot create the TensorBoard log '%1': %2. Check that the folder is "
                                       "writable and the disk has space")
                            .arg(path, writer->m_file.errorString()));
    }
    QByteArray first = eventHeader(double(nowMs) / 1000.0, 0);
    putBytes(first, kEventFileVersion, "brain.Event:2");
    writer->appendRecord(first);
    if (Result<void> flushed = writer->flush(); !flushed)
        return flushed.takeError();
    return writer;
}

TensorBoardWriter::~TensorBoardWriter()
{
    writePending();
}

void TensorBoardWriter::addScalar(const QString &tag, qint64 step, double value, double wallTimeSeconds)
{
    appendRecord(withSummary(eventHeader(wallTimeSeconds, step), { scalarValue(tag, value) }));
}

void TensorBoardWriter::addScalars(qint64 step, const QList<QPair<QString, double>> &values, double wallTimeSeconds)
{
    if (values.isEmpty())
        return;
    QList<QByteArray> encoded;
    encoded.reserve(values.size());
    for (const auto &[tag, value] : values)
        encoded.append(scalarValue(tag, value));
    appendRecord(withSummary(eventHeader(wallTimeSeconds, step), encoded));
}

void TensorBoardWriter::addText(const QString &tag, qint64 step, const QString &markdown, double wallTimeSeconds)
{
    // The text plugin's content is an empty TextPluginData (version 0).
    QByteArray pluginData;
    putBytes(pluginData, kPluginName, "text");
    QByteArray metadata;
    putBytes(metadata, kMetadataPluginData, pluginData);
    QByteArray tensor;
    putTag(tensor, kTensorDtype, kVarint);
    putVarint(tensor, kDtString);
    putBytes(tensor, kTensorShape, {}); // no dimensions: a scalar
    putBytes(tensor, kTensorStringVal, markdown.toUtf8());
    QByteArray value;
    putBytes(value, kValueTag, tag.toUtf8());
    putBytes(value, kValueMetadata, metadata);
    putBytes(value, kValueTensor, tensor);
    appendRecord(withSummary(eventHeader(wallTimeSeconds, step), { value }));
}

Result<void> TensorBoardWriter::flush()
{
    writePending();
    if (m_error.isEmpty())
        return {};
    return fail(std::exchange(m_error, QString()));
}

void TensorBoardWriter::appendRecord(const QByteArray &event)
{
    char length[8];
    qToLittleEndian(quint64(event.size()), length);
    m_pending.append(length, sizeof length);
    putLittleEndian(m_pending, maskedCrc32c(QByteArrayView(length, sizeof length)));
    m_pending.append(event);
    putLittleEndian(m_pending, maskedCrc32c(event));
    if (m_pending.size() >= kPendingLimit)
        writePending();
}

void TensorBoardWriter::writePending()
{
    if (m_pending.isEmpty())
        return;
    const bool written = m_file.write(m_pending) == m_pending.size() && m_file.flush();
    m_pending.clear();
    if (!written && m_error.isEmpty())
        m_error = QStringLiteral("cannot write the TensorBoard log '%1': %2. Check that the disk has space")
                      .arg(m_file.fileName(), m_file.errorString());
}

Result<QList<TensorBoardEvent>> readTensorBoardEvents(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read the TensorBoard log '%1': %2").arg(path, file.errorString()));
    const auto damaged = [&](qsizetype index, const QString &what) {
        return fail(QStringLiteral("the TensorBoard log '%1' is damaged at record %2 (%3): copy the file "
                                   "again, or delete it if its run is not needed")
                        .arg(path, QString::number(index), what));
    };
    const auto cutShort = [&](qsizetype index) {
        return fail(QStringLiteral("the TensorBoard log '%1' ends inside record %2: if a run is still writing it, "
                                   "read it again later; if not, the file was cut short (copy it again)")
                        .arg(path, QString::number(index)));
    };
    QList<TensorBoardEvent> events;
    for (qsizetype index = 0;; ++index) {
        const QByteArray header = file.read(12);
        if (header.isEmpty())
            return events;
        if (header.size() < 12)
            return cutShort(index);
        if (qFromLittleEndian<quint32>(header.constData() + 8) != TensorBoardWriter::maskedCrc32c(header.first(8)))
            return damaged(index, QStringLiteral("its length fails its CRC check"));
        const auto length = qFromLittleEndian<quint64>(header.constData());
        // Checked against what the file holds before anything is allocated.
        if (length > quint64(file.size() - file.pos()) || file.size() - file.pos() - qint64(length) < 4)
            return cutShort(index);
        const QByteArray data = file.read(qint64(length) + 4);
        if (data.size() != qsizetype(length) + 4)
            return fail(QStringLiteral("cannot read the TensorBoard log '%1': %2").arg(path, file.errorString()));
        const QByteArrayView body = QByteArrayView(data).first(qsizetype(length));
        if (qFromLittleEndian<quint32>(data.constData() + length) != TensorBoardWriter::maskedCrc32c(body))
            return damaged(index, QStringLiteral("its data fails its CRC check"));
        TensorBoardEvent event;
        if (!decodeEvent(body, event))
            return damaged(index, QStringLiteral("not a valid tensorflow.Event"));
        events.append(event);
    }
}

} // namespace flotilla
