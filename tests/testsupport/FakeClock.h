#pragma once
// A clock the test moves by hand, for lease deadlines and expiry.

#include "common/Clock.h"

namespace flotilla::test {

class FakeClock final : public Clock
{
public:
    explicit FakeClock(qint64 startMs = 1'700'000'000'000) : m_now(startMs) {}
    qint64 nowMs() const override { return m_now; }
    void advance(qint64 ms) { m_now += ms; }

private:
    qint64 m_now;
};

} // namespace flotilla::test
