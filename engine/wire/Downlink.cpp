#include "engine/wire/Downlink.h"

#include "engine/wire/WireFormat.h"

#include <QRandomGenerator>

namespace flotilla {

namespace {

qint64 newAnchorId()
{
    qint64 id = 0;
    while (id == 0)
        id = qint64(QRandomGenerator::system()->generate64() >> 1);
    return id;
}

// The float32 bytes as a tensor, without a copy; valid while `bytes` lives unchanged.
torch::Tensor viewOf(const QByteArray &bytes)
{
    return torch::from_blob(const_cast<char *>(bytes.constData()), {bytes.size() / 4}, torch::kFloat32);
}

} // namespace

qint64 changeBytes(Compression kind, const WeightLayout &layout)
{
    return encodedBytes(kind, layout.totalNumel, layout.segments().parameterEnd);
}

DownlinkEncoder::DownlinkEncoder(Compression kind, const WeightLayout &layout)
    : m_kind(kind), m_quantized(layout.segments().parameterEnd)
{
}

const QByteArray &DownlinkEncoder::whole(qint64 seq, const torch::Tensor &weights)
{
    for (const Anchor &a : m_anchors)
        if (a.seq == seq)
            return a.bytes;
    if (m_wholeSeq != seq) {
        m_wholeBytes = weightsToBytes(weights);
        m_wholeSeq = seq;
    }
    return m_wholeBytes;
}

DownlinkEncoder::Encoded DownlinkEncoder::encode(qint64 seq, const torch::Tensor &weights, qint64 workerAnchor,
                                                 bool takesChanges, qint64 refresh)
{
    if (m_kind == Compression::None || !takesChanges)
        return {WeightsForm{}, whole(seq, weights)};
    if (m_anchors.empty() || seq - m_anchors.back().seq >= std::max<qint64>(1, refresh)) {
        Anchor anchor;
        anchor.id = newAnchorId();
        anchor.seq = seq;
        anchor.bytes = weightsToBytes(weights);
        m_anchors.push_back(std::move(anchor));
        while (int(m_anchors.size()) > kAnchors)
            m_anchors.pop_front();
    }
    Anchor *from = nullptr;
    for (Anchor &a : m_anchors)
        if (workerAnchor != 0 && a.id == workerAnchor)
            from = &a;
    Anchor &newest = m_anchors.back();
    if (!from && newest.seq == seq)
        return {WeightsForm{Compression::None, newest.id, false}, newest.bytes};
    Anchor &base = from ? *from : newest;
    if (base.changeSeq != seq) {
        base.change = encodeChange(m_kind, weights, viewOf(base.bytes), m_quantized);
        base.changeSeq = seq;
    }
    if (from)
        return {WeightsForm{m_kind, base.id, false}, base.change};
    return {WeightsForm{m_kind, base.id, true}, base.bytes + base.change};
}

Result<torch::Tensor> DownlinkDecoder::decode(const WeightsForm &form, const QByteArray &payload,
                                              const WeightLayout &layout)
{
    m_included = torch::Tensor();
    auto weights = decodeWeights(form, payload, layout);
    if (!weights)
        return weights;
    if (!torch::isfinite(*weights).all().item<bool>())
        return fail(QStringLiteral("the weights sent contain NaN or infinite values"));
    if (form.anchor != 0 && (form.change == Compression::None || form.anchorIncluded)) {
        m_anchor = form.anchor;
        m_weights = form.change == Compression::None ? *weights : m_included;
    }
    m_included = torch::Tensor();
    return weights;
}

Result<torch::Tensor> DownlinkDecoder::decodeWeights(const WeightsForm &form, const QByteArray &payload,
                                                     const WeightLayout &layout)
{
    if (form.change == Compression::None)
        return weightsFromBytes(payload, layout);
    torch::Tensor base;
    QByteArray change = payload;
    const qint64 wholeSize = layout.totalNumel * 4;
    if (form.anchorIncluded) {
        if (payload.size() < wholeSize)
            return fail(QStringLiteral("the weights came as an anchor and a change in %1 bytes, fewer than the "
                                       "anchor's %2 alone")
                            .arg(payload.size()).arg(wholeSize));
        auto anchor = weightsFromBytes(QByteArray::fromRawData(payload.constData(), wholeSize), layout);
        if (!anchor)
            return anchor;
        base = *anchor;
        if (!torch::isfinite(base).all().item<bool>())
            return fail(QStringLiteral("the anchor's weights contain NaN or infinite values"));
        m_included = base;
        change = QByteArray::fromRawData(payload.constData() + wholeSize, payload.size() - wholeSize);
    } else if (form.anchor == 0 || form.anchor != m_anchor) {
        return fail(QStringLiteral("the weights came as a change from anchor %1, which this worker does not hold (%2)")
                        .arg(form.anchor)
                        .arg(m_anchor == 0 ? QStringLiteral("it holds none") : QStringLiteral("it holds %1").arg(m_anchor)));
    } else {
        base = m_weights;
    }
    auto weights = decodeUpdate(form.change, change, base, layout.segments().parameterEnd);
    if (!weights)
        return fail(QStringLiteral("the weights' change from anchor %1: %2").arg(form.anchor).arg(weights.error()));
    return weights;
}

void DownlinkDecoder::reset()
{
    m_anchor = 0;
    m_weights = torch::Tensor();
}

} // namespace flotilla
