#pragma once
// Time as the scheduler sees it: milliseconds since the Unix epoch. Lease deadlines are
// stored in the job's store, so they must survive a restart of the process; tests swap in
// a clock they move by hand.

#include <QDateTime>

namespace flotilla {

class Clock
{
public:
    virtual ~Clock() = default;
    virtual qint64 nowMs() const = 0;
};

class SystemClock final : public Clock
{
public:
    qint64 nowMs() const override { return QDateTime::currentMSecsSinceEpoch(); }
};

} // namespace flotilla
