#include "agent/RequestPacer.h"

#include "common/Random.h"

#include <QRandomGenerator>

#include <algorithm>
#include <cmath>

namespace flotilla {

RequestPacer::RequestPacer() : RequestPacer(Options{}) {}

RequestPacer::RequestPacer(Options options)
    : m_options(options),
      m_state(options.seed ? options.seed : QRandomGenerator::global()->generate64()),
      m_tokens(options.burst)
{
}

double RequestPacer::jitter()
{
    SplitMix64 g(m_state);
    m_state = g.next();
    return 0.5 + g.uniform();
}

qint64 RequestPacer::delayMs(qint64 nowMs) const
{
    qint64 wait = std::max<qint64>(0, m_notBeforeMs - nowMs);
    if (m_tokensAtMs >= 0) {
        const double tokens =
            std::min(m_options.burst, m_tokens + double(nowMs - m_tokensAtMs) * m_options.perSecond / 1000.0);
        if (tokens < 1.0)
            wait = std::max<qint64>(wait, qint64(std::ceil((1.0 - tokens) * 1000.0 / m_options.perSecond)));
    }
    return wait;
}

void RequestPacer::asked(qint64 nowMs)
{
    if (m_tokensAtMs >= 0)
        m_tokens = std::min(m_options.burst, m_tokens + double(nowMs - m_tokensAtMs) * m_options.perSecond / 1000.0);
    m_tokensAtMs = nowMs;
    m_tokens = std::max(0.0, m_tokens - 1.0);
    ++m_requests;
    m_lastSecond.push_back(nowMs);
    while (!m_lastSecond.empty() && m_lastSecond.front() <= nowMs - 1000)
        m_lastSecond.pop_front();
    m_peak = std::max(m_peak, int(m_lastSecond.size()));
}

void RequestPacer::trained()
{
    m_backoffMs = 0;
    m_notBeforeMs = 0;
}

void RequestPacer::answeredWithout(qint64 nowMs)
{
    m_backoffMs = m_backoffMs == 0 ? m_options.initialMs : std::min<qint64>(m_options.maxMs, m_backoffMs * 2);
    m_notBeforeMs = std::max(m_notBeforeMs, nowMs + qint64(double(m_backoffMs) * jitter()));
}

void RequestPacer::noWork(qint64 nowMs, qint64 retryMs)
{
    const qint64 wait = std::clamp<qint64>(retryMs, m_options.minNoWorkMs, m_options.maxNoWorkMs);
    m_notBeforeMs = std::max(m_notBeforeMs, nowMs + wait);
}

} // namespace flotilla
