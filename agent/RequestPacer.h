#pragma once
// How soon a worker may ask its coordinator for work again. Every path that asks again goes
// through it (after a result, a NoWork, a Welcome that moved it, a lease it had to hand back,
// a reconnect), so that no answer, and no loop between the worker and a coordinator, can
// make an honest worker send Requests faster than a few a second: the coordinator's
// per-certificate budgets (docs/security.md) are for attackers, and an honest worker stays
// far below them whatever it is answered.
//
// Two rules, both on the worker's own clock:
// - Backoff: a Request that did not end in training (answered by a Welcome, a lease it could
//   not train, a refused assignment) makes the next wait longer: from initialMs, doubling up
//   to maxMs, with jitter in [0.5, 1.5) of it, so that a fleet does not ask in lockstep. A
//   lease it trains resets the backoff. A NoWork waits what the coordinator says (it knows
//   when work comes back: the next epoch, a round's close), but never less than minNoWorkMs.
// - A ceiling: at most `perSecond` Requests a second on average, in bursts of at most
//   `burst`, whatever the answers: a token bucket under every path.
//
// Threads: a plain value; the agent's thread owns it.

#include <QtGlobal>

#include <cstdint>
#include <deque>

namespace flotilla {

class RequestPacer
{
public:
    struct Options
    {
        int initialMs = 200;
        int maxMs = 5000;
        int minNoWorkMs = 200;
        int maxNoWorkMs = 10000;
        double perSecond = 10.0;
        double burst = 20.0;
        std::uint64_t seed = 0; // the jitter's; 0: from the process's random source
    };

    RequestPacer();
    explicit RequestPacer(Options options);

    // Milliseconds to wait from nowMs before the next Request may go (0: now).
    qint64 delayMs(qint64 nowMs) const;
    // A Request went at nowMs.
    void asked(qint64 nowMs);
    // The worker was given a lease and trains it: the backoff starts again from nothing.
    void trained();
    // The answer held nothing to train (a Welcome, a lease handed back, an assignment that
    // could not be used): the next Request waits the backoff, which then doubles.
    void answeredWithout(qint64 nowMs);
    // A NoWork asking to come back in retryMs.
    void noWork(qint64 nowMs, qint64 retryMs);

    // Requests since the pacer was made, and the most in any one second (a sliding window
    // of 1 s ending at a Request): what the worker reports and tests check.
    qint64 requests() const { return m_requests; }
    int peakPerSecond() const { return m_peak; }
    // The backoff the next unproductive answer starts from, without jitter (tests).
    qint64 currentBackoffMs() const { return m_backoffMs; }

private:
    double jitter();

    Options m_options;
    std::uint64_t m_state;
    qint64 m_notBeforeMs = 0; // the backoff's: no Request before this
    qint64 m_backoffMs = 0;   // 0: no backoff, the next unproductive answer starts it
    double m_tokens = 0.0;
    qint64 m_tokensAtMs = -1;
    qint64 m_requests = 0;
    int m_peak = 0;
    std::deque<qint64> m_lastSecond; // the times of the Requests of the last second
};

} // namespace flotilla
