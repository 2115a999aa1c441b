#include "engine/coordination/Checkpoint.h"

#include "common/AtomicFile.h"
#include "common/Cbor.h"

#include <QCborArray>
#include <QCborMap>
#include <QCborValue>
#include <QFile>
#include <QtEndian>

#include <torch/torch.h>

#include <cstring>

static_assert(Q_BYTE_ORDER == Q_LITTLE_ENDIAN, "checkpoint buffers are stored as little-endian float32");

namespace flotilla {

namespace {

constexpr char kMagic[8] = {'F', 'L', 'T', 'C', 'K', 'P', 'T', '1'};
constexpr qint64 kMaxHeader = 1 << 20;
// Outer steps enough that any momentum's warm start has ended (0.99^1000 < 1e-4).
constexpr qint64 kWarmOuterSteps = 1000;

} // namespace

Result<QString> writeCheckpoint(const QString &path, const Checkpoint &c)
{
    const std::pair<const char *, torch::Tensor> tensors[] = {
        {"weights", c.state.weights}, {"momentum", c.state.momentum}, {"round_sum", c.state.roundSum},
        {"period_sum", c.state.periodSum}};
    QCborArray entries;
    qint64 payload = 0;
    for (const auto &[name, t] : tensors) {
        if (!t.defined())
            continue;
        entries.append(QCborMap{{QStringLiteral("name"), QString::fromLatin1(name)},
                                {QStringLiteral("numel"), static_cast<qint64>(t.numel())}});
        payload += t.numel() * 4;
    }
    const QByteArray header = QCborMap{{QStringLiteral("seq"), c.seq},
                                       {QStringLiteral("version"), c.version},
                                       {QStringLiteral("layout"), c.layoutDigest},
                                       {QStringLiteral("round_credit"), c.state.roundCredit},
                                       {QStringLiteral("round_results"), c.state.roundResults},
                                       {QStringLiteral("period_results"), c.state.periodResults},
                                       {QStringLiteral("outer_steps"), c.state.outerSteps},
                                       {QStringLiteral("folded_credit"), c.state.foldedCredit},
                                       {QStringLiteral("tensors"), entries}}
                                  .toCborValue()
                                  .toCbor();
    QByteArray bytes;
    bytes.reserve(static_cast<qsizetype>(sizeof kMagic + 4 + header.size() + payload));
    bytes.append(kMagic, sizeof kMagic);
    const quint32 headerSize = qToLittleEndian(static_cast<quint32>(header.size()));
    bytes.append(reinterpret_cast<const char *>(&headerSize), 4);
    bytes.append(header);
    for (const auto &[name, t] : tensors) {
        if (!t.defined())
            continue;
        const torch::Tensor flat = t.to(torch::kCPU, torch::kFloat32).contiguous();
        bytes.append(reinterpret_cast<const char *>(flat.data_ptr<float>()),
                     static_cast<qsizetype>(flat.numel() * 4));
    }
    if (auto written = writeFileAtomically(path, bytes); !written)
        return written.takeError();
    return sha256Hex(bytes);
}

Result<Checkpoint> readCheckpoint(const QString &path, const QString &expectedSha256)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open checkpoint '%1': %2").arg(path, file.errorString()));
    const QByteArray bytes = file.readAll();
    if (!expectedSha256.isEmpty() && sha256Hex(bytes) != expectedSha256)
        return fail(QStringLiteral("checkpoint '%1' is corrupt: its SHA-256 does not match the one recorded "
                                   "when it was written")
                        .arg(path));
    const qsizetype prefix = sizeof kMagic + 4;
    if (bytes.size() < prefix || std::memcmp(bytes.constData(), kMagic, sizeof kMagic) != 0)
        return fail(QStringLiteral("'%1' is not a Flotilla checkpoint").arg(path));
    const quint32 headerSize = qFromLittleEndian<quint32>(bytes.constData() + sizeof kMagic);
    if (headerSize > kMaxHeader || prefix + qsizetype(headerSize) > bytes.size())
        return fail(QStringLiteral("checkpoint '%1' is truncated or corrupt (header of %2 bytes)").arg(path).arg(headerSize));
    QCborParserError error{};
    const QCborValue headerValue = QCborValue::fromCbor(bytes.mid(prefix, headerSize), &error);
    if (error.error != QCborError::NoError || !headerValue.isMap())
        return fail(QStringLiteral("checkpoint '%1' has a corrupt header: %2").arg(path, error.errorString()));
    const QCborMap header = headerValue.toMap();

    Checkpoint c;
    c.seq = cborInteger(header.value(QStringLiteral("seq")));
    c.version = cborInteger(header.value(QStringLiteral("version")));
    c.layoutDigest = header.value(QStringLiteral("layout")).toString();
    c.state.roundCredit = header.value(QStringLiteral("round_credit")).toDouble();
    c.state.roundResults = static_cast<int>(cborInteger(header.value(QStringLiteral("round_results"))));
    c.state.periodResults = static_cast<int>(cborInteger(header.value(QStringLiteral("period_results"))));
    // Written before outer steps were counted: a momentum buffer in it is long warm.
    c.state.outerSteps = header.contains(QStringLiteral("outer_steps"))
                             ? cborInteger(header.value(QStringLiteral("outer_steps")))
                             : kWarmOuterSteps;
    c.state.foldedCredit = header.contains(QStringLiteral("folded_credit"))
                               ? header.value(QStringLiteral("folded_credit")).toDouble()
                               : double(kWarmOuterSteps);
    qsizetype offset = prefix + headerSize;
    for (const auto &entryValue : header.value(QStringLiteral("tensors")).toArray()) {
        const QCborMap entry = entryValue.toMap();
        const QString name = entry.value(QStringLiteral("name")).toString();
        const qint64 numel = cborInteger(entry.value(QStringLiteral("numel")));
        if (numel < 0 || numel > (bytes.size() - offset) / 4)
            return fail(QStringLiteral("checkpoint '%1' is truncated: tensor '%2' needs %3 values").arg(path, name).arg(numel));
        torch::Tensor t = torch::empty({numel}, torch::kFloat32);
        std::memcpy(t.data_ptr<float>(), bytes.constData() + offset, static_cast<std::size_t>(numel) * 4);
        offset += numel * 4;
        if (name == QLatin1String("weights"))
            c.state.weights = t;
        else if (name == QLatin1String("momentum"))
            c.state.momentum = t;
        else if (name == QLatin1String("round_sum"))
            c.state.roundSum = t;
        else if (name == QLatin1String("period_sum"))
            c.state.periodSum = t;
        else
            return fail(QStringLiteral("checkpoint '%1' holds an unknown tensor '%2'").arg(path, name));
    }
    if (offset != bytes.size())
        return fail(QStringLiteral("checkpoint '%1' has %2 unexpected bytes at its end").arg(path).arg(bytes.size() - offset));
    if (!c.state.weights.defined())
        return fail(QStringLiteral("checkpoint '%1' holds no weights").arg(path));
    return c;
}

} // namespace flotilla
