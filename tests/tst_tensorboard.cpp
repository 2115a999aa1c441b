// TensorBoard event files: scalars and text read back by a reader of this test's own (its own
// CRC-32C, framing and protobuf decoding, so a mistake shared by the writer and the product's
// reader cannot hide), the first record, damaged records, unique file names, and TensorBoard
// itself where Python has it.
#include "common/Crc32c.h"
#include "common/TensorBoardWriter.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QSysInfo>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#ifndef FLOTILLA_PYTHON
#define FLOTILLA_PYTHON "/usr/bin/python3"
#endif

using namespace flotilla;

namespace {

// CRC-32C one bit at a time (RFC 3720), and TFRecord's mask over it.
quint32 crc32cBitwise(const QByteArray &bytes)
{
    quint32 c = 0xFFFFFFFFu;
    for (const char byte : bytes) {
        c ^= quint8(byte);
        for (int k = 0; k < 8; ++k)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

quint32 mask(quint32 crc)
{
    const quint64 rotated = ((crc >> 15) | (quint64(crc) << 17)) & 0xFFFFFFFFu;
    return quint32((rotated + 0xA282EAD8u) & 0xFFFFFFFFu);
}

quint64 littleEndian(const QByteArray &bytes, int offset, int size)
{
    quint64 v = 0;
    for (int i = size - 1; i >= 0; --i)
        v = (v << 8) | quint8(bytes.at(offset + i));
    return v;
}

// The records of a file, or the reason they cannot be trusted.
struct Records
{
    QList<QByteArray> data;
    QList<qint64> offsets; // where each record starts in the file
    QString error;
};

Records readRecords(const QByteArray &file)
{
    Records r;
    int pos = 0;
    while (pos < file.size()) {
        const int index = int(r.data.size());
        if (file.size() - pos < 12) {
            r.error = QStringLiteral("record %1: truncated header").arg(index);
            return r;
        }
        const QByteArray lengthBytes = file.mid(pos, 8);
        if (quint32(littleEndian(file, pos + 8, 4)) != mask(crc32cBitwise(lengthBytes))) {
            r.error = QStringLiteral("record %1: length CRC mismatch").arg(index);
            return r;
        }
        const quint64 length = littleEndian(file, pos, 8);
        if (length > quint64(file.size() - pos - 16)) {
            r.error = QStringLiteral("record %1: truncated data").arg(index);
            return r;
        }
        const QByteArray data = file.mid(pos + 12, int(length));
        if (quint32(littleEndian(file, pos + 12 + int(length), 4)) != mask(crc32cBitwise(data))) {
            r.error = QStringLiteral("record %1: data CRC mismatch").arg(index);
            return r;
        }
        r.offsets.append(pos);
        r.data.append(data);
        pos += 16 + int(length);
    }
    return r;
}

// A protobuf message as its fields in order; ok is false when it is malformed.
struct Pb
{
    int number = 0;
    int wire = 0;
    quint64 varint = 0;
    QByteArray bytes; // length-delimited, fixed32 and fixed64 fields
};

QList<Pb> fields(const QByteArray &m, bool &ok)
{
    QList<Pb> out;
    int i = 0;
    const auto varint = [&](quint64 &v) {
        v = 0;
        for (int shift = 0; i < m.size(); shift += 7) {
            if (shift > 63)
                return false;
            const quint8 b = quint8(m.at(i++));
            v |= quint64(b & 0x7F) << shift;
            if ((b & 0x80) == 0)
                return true;
        }
        return false;
    };
    while (i < m.size()) {
        Pb f;
        quint64 key = 0;
        if (!varint(key)) {
            ok = false;
            return out;
        }
        f.number = int(key >> 3);
        f.wire = int(key & 7);
        quint64 size = 0;
        switch (f.wire) {
        case 0:
            if (!varint(f.varint)) {
                ok = false;
                return out;
            }
            out.append(f);
            continue;
        case 1:
            size = 8;
            break;
        case 5:
            size = 4;
            break;
        case 2:
            if (!varint(size)) {
                ok = false;
                return out;
            }
            break;
        default:
            ok = false;
            return out;
        }
        if (size > quint64(m.size() - i)) {
            ok = false;
            return out;
        }
        f.bytes = m.mid(i, int(size));
        i += int(size);
        out.append(f);
    }
    return out;
}

struct Value
{
    QString tag;
    bool hasSimpleValue = false;
    float simpleValue = 0;
    QString pluginName;
    bool hasTensor = false;
    qint64 dtype = 0;
    bool hasShape = false;
    int shapeDims = 0;
    QList<QByteArray> strings;
};

struct Event
{
    double wallTime = 0;
    qint64 step = 0;
    bool hasFileVersion = false;
    QString fileVersion;
    bool hasSummary = false;
    QList<Value> values;
};

double doubleFrom(const QByteArray &b)
{
    const quint64 bits = littleEndian(b, 0, 8);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}

float floatFrom(const QByteArray &b)
{
    const auto bits = quint32(littleEndian(b, 0, 4));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

Value decodeValue(const QByteArray &m, bool &ok)
{
    Value v;
    for (const Pb &f : fields(m, ok)) {
        if (f.number == 1 && f.wire == 2) {
            v.tag = QString::fromUtf8(f.bytes);
        } else if (f.number == 2 && f.wire == 5) {
            v.hasSimpleValue = true;
            v.simpleValue = floatFrom(f.bytes);
        } else if (f.number == 9 && f.wire == 2) {
            for (const Pb &pd : fields(f.bytes, ok))
                if (pd.number == 1 && pd.wire == 2)
                    for (const Pb &p : fields(pd.bytes, ok))
                        if (p.number == 1 && p.wire == 2)
                            v.pluginName = QString::fromUtf8(p.bytes);
        } else if (f.number == 8 && f.wire == 2) {
            v.hasTensor = true;
            for (const Pb &t : fields(f.bytes, ok)) {
                if (t.number == 1 && t.wire == 0)
                    v.dtype = qint64(t.varint);
                else if (t.number == 2 && t.wire == 2) {
                    v.hasShape = true;
                    for (const Pb &d : fields(t.bytes, ok))
                        v.shapeDims += d.number == 2 ? 1 : 0; // TensorShapeProto.dim = 2
                } else if (t.number == 8 && t.wire == 2)
                    v.strings.append(t.bytes);
            }
        }
    }
    return v;
}

// Every event of a file, through this test's own reader; fails the test on any damage.
QList<Event> readEvents(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        qWarning("cannot open %s", qPrintable(path));
        return {};
    }
    const Records records = readRecords(file.readAll());
    if (!records.error.isEmpty()) {
        qWarning("%s: %s", qPrintable(path), qPrintable(records.error));
        return {};
    }
    QList<Event> events;
    for (const QByteArray &data : records.data) {
        bool ok = true;
        Event e;
        for (const Pb &f : fields(data, ok)) {
            if (f.number == 1 && f.wire == 1) {
                e.wallTime = doubleFrom(f.bytes);
            } else if (f.number == 2 && f.wire == 0) {
                e.step = qint64(f.varint);
            } else if (f.number == 3 && f.wire == 2) {
                e.hasFileVersion = true;
                e.fileVersion = QString::fromUtf8(f.bytes);
            } else if (f.number == 5 && f.wire == 2) {
                e.hasSummary = true;
                for (const Pb &v : fields(f.bytes, ok))
                    if (v.number == 1 && v.wire == 2)
                        e.values.append(decodeValue(v.bytes, ok));
            }
        }
        if (!ok) {
            qWarning("%s: record %d is not a valid protobuf message", qPrintable(path), int(events.size()));
            return {};
        }
        events.append(e);
    }
    return events;
}

QByteArray fileBytes(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeBytes(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY2(f.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    QCOMPARE(f.write(bytes), bytes.size());
}

} // namespace

class TestTensorBoard : public QObject
{
    Q_OBJECT

private:
    std::unique_ptr<QTemporaryDir> m_dir;

    std::unique_ptr<TensorBoardWriter> openWriter(const QString &dir, const QString &suffix = {})
    {
        auto w = TensorBoardWriter::open(dir, suffix);
        if (!w.ok()) {
            qWarning("%s", qPrintable(w.error()));
            return nullptr;
        }
        return std::move(w).value();
    }

    // A file with one scalar and one text event after its first record.
    QString writeSample()
    {
        auto w = openWriter(m_dir->path());
        if (!w)
            return {};
        w->addScalar(QStringLiteral("loss"), 1, 0.5, 1000.0);
        w->addText(QStringLiteral("notes"), 2, QStringLiteral("some *notes*"), 1001.0);
        if (!w->flush().ok())
            return {};
        return w->path();
    }

private Q_SLOTS:
    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
    }

    void maskedCrcKnownAnswer()
    {
        const QByteArray check("123456789");
        QCOMPARE(crc32cBitwise(check), 0xE3069283u);
        QCOMPARE(Crc32c::of(check), 0xE3069283u);
        // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8, in 32 bits.
        QCOMPARE(mask(0xE3069283u), 0xC78AB0E5u);
        QCOMPARE(TensorBoardWriter::maskedCrc32c(check), 0xC78AB0E5u);
        // A value whose rotation carries out of 32 bits when the delta is added.
        const QByteArray other("flotilla");
        QCOMPARE(TensorBoardWriter::maskedCrc32c(other), mask(crc32cBitwise(other)));
    }

    void firstRecordIsFileVersion()
    {
        const double before = double(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
        auto w = openWriter(m_dir->path());
        QVERIFY(w);
        const double after = double(QDateTime::currentMSecsSinceEpoch()) / 1000.0;

        const QString name = QFileInfo(w->path()).fileName();
        const QRegularExpression pattern(QStringLiteral("^events\\.out\\.tfevents\\.(\\d+)\\.(.+)$"));
        const QRegularExpressionMatch match = pattern.match(name);
        QVERIFY2(match.hasMatch(), qPrintable(name));
        const qint64 seconds = match.captured(1).toLongLong();
        QVERIFY(seconds >= qint64(std::floor(before)) && seconds <= qint64(std::floor(after)));
        if (!QSysInfo::machineHostName().isEmpty())
            QVERIFY2(match.captured(2).startsWith(QSysInfo::machineHostName()), qPrintable(name));
        QCOMPARE(QFileInfo(w->path()).absolutePath(), QDir(m_dir->path()).absolutePath());

        // Already on disk after open(), before any flush().
        const QList<Event> events = readEvents(w->path());
        QCOMPARE(events.size(), 1);
        QVERIFY(events[0].hasFileVersion);
        QCOMPARE(events[0].fileVersion, QStringLiteral("brain.Event:2"));
        QVERIFY(events[0].wallTime >= before - 0.001 && events[0].wallTime <= after + 0.001);
        QCOMPARE(events[0].step, 0);
        QVERIFY(!events[0].hasSummary);
    }

    void scalarsRoundTrip()
    {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const float inf = std::numeric_limits<float>::infinity();
        QString path;
        {
            auto w = openWriter(m_dir->path());
            QVERIFY(w);
            path = w->path();
            w->addScalar(QStringLiteral("loss"), 1, 0.5, 1700000000.25);
            w->addScalar(QStringLiteral("loss"), 2, -3.75, 1700000001.5);
            w->addScalar(QStringLiteral("loss"), 3, double(nan), 1700000002.0);
            w->addScalar(QStringLiteral("train/accuracy"), 0, 0.1, 1700000003.0);
            w->addScalar(QStringLiteral("big"), qint64(1) << 40, 1e300, 1700000004.0);
            w->addScalar(QStringLiteral("negative step"), -5, -inf, 1700000005.0);
            w->addScalars(7,
                { { QStringLiteral("a"), 1.0 }, { QStringLiteral("b"), -2.0 }, { QStringLiteral("c"), 3e9 } },
                1700000006.125);
            w->addScalars(8, {}, 1700000007.0); // nothing to write
            const Result<void> flushed = w->flush();
            QVERIFY2(flushed.ok(), qPrintable(flushed.error()));
        }
        const QList<Event> events = readEvents(path);
        QCOMPARE(events.size(), 8);
        struct Expected
        {
            qint64 step;
            double wallTime;
            QString tag;
            float value;
        };
        const QList<Expected> singles = {
            { 1, 1700000000.25, QStringLiteral("loss"), 0.5f },
            { 2, 1700000001.5, QStringLiteral("loss"), -3.75f },
            { 3, 1700000002.0, QStringLiteral("loss"), nan },
            { 0, 1700000003.0, QStringLiteral("train/accuracy"), 0.1f },
            { qint64(1) << 40, 1700000004.0, QStringLiteral("big"), inf },
            { -5, 1700000005.0, QStringLiteral("negative step"), -inf },
        };
        for (int i = 0; i < singles.size(); ++i) {
            const Event &e = events[i + 1];
            const Expected &x = singles[i];
            QVERIFY(!e.hasFileVersion);
            QCOMPARE(e.step, x.step);
            QCOMPARE(e.wallTime, x.wallTime);
            QCOMPARE(e.values.size(), 1);
            QCOMPARE(e.values[0].tag, x.tag);
            QVERIFY(e.values[0].hasSimpleValue);
            QVERIFY(!e.values[0].hasTensor);
            QVERIFY(e.values[0].pluginName.isEmpty());
            if (std::isnan(x.value))
                QVERIFY(std::isnan(e.values[0].simpleValue));
            else
                QCOMPARE(e.values[0].simpleValue, x.value);
        }
        const Event &several = events[7];
        QCOMPARE(several.step, 7);
        QCOMPARE(several.wallTime, 1700000006.125);
        QCOMPARE(several.values.size(), 3);
        QCOMPARE(several.values[0].tag, QStringLiteral("a"));
        QCOMPARE(several.values[0].simpleValue, 1.0f);
        QCOMPARE(several.values[1].tag, QStringLiteral("b"));
        QCOMPARE(several.values[1].simpleValue, -2.0f);
        QCOMPARE(several.values[2].tag, QStringLiteral("c"));
        QCOMPARE(several.values[2].simpleValue, 3e9f);
    }

    void textRoundTrip()
    {
        const QString markdown = QStringLiteral("**Ünïcödé** — 日本語 🚀\n\n| a | b |\n|---|---|\n| 1 | 2 |");
        auto w = openWriter(m_dir->path());
        QVERIFY(w);
        w->addText(QStringLiteral("run/notes"), 12, markdown, 1700000100.5);
        w->addText(QStringLiteral("empty"), 13, QString(), 1700000101.0);
        QVERIFY(w->flush().ok());

        const QList<Event> events = readEvents(w->path());
        QCOMPARE(events.size(), 3);
        const Event &e = events[1];
        QCOMPARE(e.step, 12);
        QCOMPARE(e.wallTime, 1700000100.5);
        QCOMPARE(e.values.size(), 1);
        const Value &v = e.values[0];
        QCOMPARE(v.tag, QStringLiteral("run/notes"));
        QVERIFY(!v.hasSimpleValue);
        QCOMPARE(v.pluginName, QStringLiteral("text"));
        QVERIFY(v.hasTensor);
        QCOMPARE(v.dtype, 7); // DT_STRING
        QVERIFY(v.hasShape);
        QCOMPARE(v.shapeDims, 0); // a scalar
        QCOMPARE(v.strings.size(), 1);
        QCOMPARE(v.strings[0], markdown.toUtf8());
        QCOMPARE(QString::fromUtf8(v.strings[0]), markdown);

        QCOMPARE(events[2].values.size(), 1);
        QCOMPARE(events[2].values[0].strings, QList<QByteArray> { QByteArray() });
    }

    // A reader (TensorBoard polls the file) sees every flushed record while the writer is open.
    void readableWhileWritten()
    {
        auto w = openWriter(m_dir->path());
        QVERIFY(w);
        for (int step = 1; step <= 3; ++step) {
            w->addScalar(QStringLiteral("loss"), step, 1.0 / step, 1700000200.0 + step);
            QVERIFY(w->flush().ok());
            const QList<Event> events = readEvents(w->path());
            QCOMPARE(events.size(), 1 + step);
            QCOMPARE(events.last().step, step);
        }
        // Many records pass the buffer's limit and reach the file without flush().
        const QString tag = QStringLiteral("a rather long tag, so that records are large").repeated(20);
        const qint64 before = QFileInfo(w->path()).size();
        for (int step = 4; step < 4000; ++step)
            w->addScalar(tag, step, step, 1700000300.0);
        QVERIFY(QFileInfo(w->path()).size() > before);
        QVERIFY(w->flush().ok());
        QCOMPARE(readEvents(w->path()).size(), 4000);
    }

    void flippedByteFailsTheCrc()
    {
        const QString path = writeSample();
        QVERIFY(!path.isEmpty());
        const QByteArray good = fileBytes(path);
        const Records records = readRecords(good);
        QVERIFY2(records.error.isEmpty(), qPrintable(records.error));
        QCOMPARE(records.data.size(), 3);

        // A byte in the middle of the second record's data.
        QByteArray bad = good;
        const qint64 inData = records.offsets[1] + 12 + records.data[1].size() / 2;
        bad[inData] = char(bad[inData] ^ 0x01);
        Records r = readRecords(bad);
        QCOMPARE(r.error, QStringLiteral("record 1: data CRC mismatch"));

        // A byte of the third record's length.
        bad = good;
        bad[records.offsets[2] + 1] = char(bad[records.offsets[2] + 1] ^ 0x40);
        r = readRecords(bad);
        QCOMPARE(r.error, QStringLiteral("record 2: length CRC mismatch"));

        // A byte of the first record's data CRC.
        bad = good;
        const qint64 crcAt = records.offsets[1] - 1;
        bad[crcAt] = char(bad[crcAt] ^ 0x80);
        r = readRecords(bad);
        QCOMPARE(r.error, QStringLiteral("record 0: data CRC mismatch"));
    }

    void productReaderRoundTrip()
    {
        QString path;
        const QString markdown = QStringLiteral("résumé ✓");
        {
            auto w = openWriter(m_dir->path());
            QVERIFY(w);
            path = w->path();
            w->addScalars(3, { { QStringLiteral("x"), -1.5 }, { QStringLiteral("y"), std::nan("") } }, 1700000400.5);
            w->addText(QStringLiteral("t"), -2, markdown, 1700000401.0);
        } // the destructor flushes
        const Result<QList<TensorBoardEvent>> events = readTensorBoardEvents(path);
        QVERIFY2(events.ok(), qPrintable(events.error()));
        QCOMPARE(events->size(), 3);
        QCOMPARE(events->at(0).fileVersion, QStringLiteral("brain.Event:2"));
        QVERIFY(events->at(0).values.isEmpty());
        const TensorBoardEvent &s = events->at(1);
        QCOMPARE(s.step, 3);
        QCOMPARE(s.wallTime, 1700000400.5);
        QCOMPARE(s.values.size(), 2);
        QCOMPARE(s.values[0].tag, QStringLiteral("x"));
        QCOMPARE(s.values[0].simpleValue, std::optional<float>(-1.5f));
        QVERIFY(s.values[1].simpleValue && std::isnan(*s.values[1].simpleValue));
        QVERIFY(!s.values[0].text);
        const TensorBoardEvent &t = events->at(2);
        QCOMPARE(t.step, -2);
        QCOMPARE(t.values.size(), 1);
        QCOMPARE(t.values[0].pluginName, QStringLiteral("text"));
        QCOMPARE(t.values[0].text, std::optional<QString>(markdown));
        QVERIFY(!t.values[0].simpleValue);
    }

    void productReaderRefusesDamage()
    {
        const QString path = writeSample();
        QVERIFY(!path.isEmpty());
        const QByteArray good = fileBytes(path);
        const Records records = readRecords(good);
        QCOMPARE(records.data.size(), 3);

        QByteArray bad = good;
        const qint64 inData = records.offsets[2] + 14;
        bad[inData] = char(bad[inData] ^ 0x10);
        writeBytes(path, bad);
        auto r = readTensorBoardEvents(path);
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(path) && r.error().contains(QStringLiteral("record 2")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QStringLiteral("CRC")), qPrintable(r.error()));

        writeBytes(path, good.left(good.size() - 3)); // cut inside the last record
        r = readTensorBoardEvents(path);
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(path) && r.error().contains(QStringLiteral("record 2")), qPrintable(r.error()));

        // A length whose CRC is right but which claims more than the file holds.
        bad = good.left(records.offsets[1]);
        QByteArray header(8, '\0');
        header[7] = char(0x7F);
        bad += header;
        const quint32 crc = mask(crc32cBitwise(header));
        for (int i = 0; i < 4; ++i)
            bad += char((crc >> (8 * i)) & 0xFF);
        writeBytes(path, bad);
        r = readTensorBoardEvents(path);
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QStringLiteral("record 1")), qPrintable(r.error()));

        // A record whose CRCs are right but whose data is not an Event.
        const QByteArray junk("\x0a\x7f", 2); // field 1, bytes, 127 long, in a 2-byte message
        bad = good.left(records.offsets[1]);
        QByteArray length(8, '\0');
        length[0] = char(junk.size());
        bad += length;
        for (int i = 0, c = int(mask(crc32cBitwise(length))); i < 4; ++i)
            bad += char((quint32(c) >> (8 * i)) & 0xFF);
        bad += junk;
        for (int i = 0, c = int(mask(crc32cBitwise(junk))); i < 4; ++i)
            bad += char((quint32(c) >> (8 * i)) & 0xFF);
        writeBytes(path, bad);
        QVERIFY(readRecords(bad).error.isEmpty());
        r = readTensorBoardEvents(path);
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QStringLiteral("record 1")), qPrintable(r.error()));

        writeBytes(path, good);
        QVERIFY(readTensorBoardEvents(path).ok());
        QVERIFY(!readTensorBoardEvents(m_dir->filePath(QStringLiteral("missing"))).ok());
    }

    void distinctFilesInOneSecond()
    {
        // Names the next writers would take in the coming seconds are taken already.
        const QString host
            = QSysInfo::machineHostName().isEmpty() ? QStringLiteral("localhost") : QSysInfo::machineHostName();
        const qint64 now = QDateTime::currentSecsSinceEpoch();
        QStringList taken;
        for (qint64 s = now; s <= now + 2; ++s) {
            taken.append(m_dir->filePath(QStringLiteral("events.out.tfevents.%1.%2").arg(s).arg(host)));
            writeBytes(taken.last(), "someone else's");
        }
        QStringList paths;
        std::vector<std::unique_ptr<TensorBoardWriter>> writers;
        for (int i = 0; i < 3; ++i) {
            writers.push_back(openWriter(m_dir->path()));
            QVERIFY(writers.back());
            paths.append(writers.back()->path());
        }
        QCOMPARE(QSet<QString>(paths.begin(), paths.end()).size(), 3);
        for (const QString &p : paths) {
            QVERIFY2(!taken.contains(p), qPrintable(p));
            QVERIFY2(std::any_of(taken.begin(), taken.end(),
                         [&](const QString &t) { return p.startsWith(t + QLatin1Char('.')); }),
                qPrintable(p));
            QCOMPARE(readEvents(p).size(), 1);
        }
        for (const QString &t : taken)
            QCOMPARE(fileBytes(t), QByteArray("someone else's"));
    }

    void suffixAndMissingFolder()
    {
        const QString dir = m_dir->filePath(QStringLiteral("runs/a/b"));
        auto w = openWriter(dir, QStringLiteral(".worker-3"));
        QVERIFY(w);
        QVERIFY(QFileInfo(w->path()).fileName().endsWith(QStringLiteral(".worker-3")));
        QCOMPARE(QFileInfo(w->path()).absolutePath(), QDir(dir).absolutePath());

        // A folder path that is a file cannot hold a log: the error names it.
        const QString file = m_dir->filePath(QStringLiteral("plain"));
        writeBytes(file, "x");
        const auto failed = TensorBoardWriter::open(file + QStringLiteral("/logs"));
        QVERIFY(!failed.ok());
        QVERIFY2(failed.error().contains(file), qPrintable(failed.error()));
    }

    // TensorBoard's own reader, where this machine's Python has it.
    void tensorboardReadsTheFile()
    {
        const QString python = QStringLiteral(FLOTILLA_PYTHON);
        QProcess probe;
        probe.setProcessChannelMode(QProcess::MergedChannels);
        probe.start(python,
            { QStringLiteral("-c"),
                QStringLiteral("from tensorboard.backend.event_processing import event_accumulator") });
        if (!probe.waitForFinished(60000) || probe.exitStatus() != QProcess::NormalExit || probe.exitCode() != 0)
            QSKIP("this machine's Python has no tensorboard module");
        const QString markdown = QStringLiteral("**bold** ünï 🚀");
        {
            auto w = openWriter(m_dir->path());
            QVERIFY(w);
            w->addScalar(QStringLiteral("loss"), 1, 0.5, 1700000500.5);
            w->addScalar(QStringLiteral("loss"), 2, -0.25, 1700000501.0);
            w->addScalars(
                3, { { QStringLiteral("loss"), std::nan("") }, { QStringLiteral("acc"), 0.75 } }, 1700000502.0);
            w->addText(QStringLiteral("notes"), 4, markdown, 1700000503.0);
        }
        const QString script = QStringLiteral(R"(
import json, math, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
num = lambda v: "nan" if math.isnan(v) else v
print(json.dumps({
    "scalars": {t: [[e.step, num(e.value), e.wall_time] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]},
    "text": {t: [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(t)]
             for t in acc.Tags()["tensors"]},
}))
)");
        QProcess p;
        p.start(python, { QStringLiteral("-c"), script, m_dir->path() });
        QVERIFY(p.waitForFinished(60000));
        const QByteArray out = p.readAllStandardOutput();
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const QJsonObject o = QJsonDocument::fromJson(out.trimmed().split('\n').last()).object();
        const QJsonObject scalars = o.value(QStringLiteral("scalars")).toObject();
        const QJsonArray loss = scalars.value(QStringLiteral("loss")).toArray();
        QCOMPARE(loss.size(), 3);
        QCOMPARE(loss[0].toArray()[0].toInt(), 1);
        QCOMPARE(loss[0].toArray()[1].toDouble(), 0.5);
        QCOMPARE(loss[0].toArray()[2].toDouble(), 1700000500.5);
        QCOMPARE(loss[1].toArray()[1].toDouble(), -0.25);
        QCOMPARE(loss[2].toArray()[1].toString(), QStringLiteral("nan"));
        const QJsonArray acc = scalars.value(QStringLiteral("acc")).toArray();
        QCOMPARE(acc.size(), 1);
        QCOMPARE(acc[0].toArray()[0].toInt(), 3);
        QCOMPARE(acc[0].toArray()[1].toDouble(), 0.75);
        const QJsonArray notes = o.value(QStringLiteral("text")).toObject().value(QStringLiteral("notes")).toArray();
        QCOMPARE(notes.size(), 1);
        QCOMPARE(notes[0].toArray()[0].toInt(), 4);
        QCOMPARE(notes[0].toArray()[1].toString(), markdown);
    }
};

QTEST_GUILESS_MAIN(TestTensorBoard)
#include "tst_tensorboard.moc"
