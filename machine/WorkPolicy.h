#pragma once
// When a worker on someone's desk may run: not while its owner uses the machine (idle for
// fewer than N minutes), only inside a daily time window, not while one of a list of
// programs runs, not on battery, not while the owner suspended it (for good, or for an hour).
// The one decider of it: the worker window's worker and Join a fleet… ask it. The policy
// looks every few seconds and says whether the worker may run and, if not, why; whoever owns
// the worker applies that through WorkerAgent::setSuspended, which hands in a partial result.
// The owner's own suspension is one of the policy's inputs, so a policy that would let the
// worker run never undoes it.
//
// Threads: UI thread; the desktop's idle time is asked over D-Bus without waiting for the
// answer (the policy uses the previous one).

#include "common/Clock.h"
#include "machine/WorkerSettings.h"

#include <QObject>
#include <QTimer>

#include <memory>
#include <optional>

namespace flotilla {

// How long the user has not touched keyboard or mouse. Tests give a fake one.
class IdleSource
{
public:
    virtual ~IdleSource() = default;
    // Nothing when this desktop does not say. Never blocks: a source that has to ask someone
    // answers with what it last heard.
    virtual std::optional<qint64> idleMs() = 0;
};

// The desktop's: the freedesktop/GNOME idle interfaces over D-Bus on Linux,
// GetLastInputInfo on Windows, HIDIdleTime on macOS.
std::unique_ptr<IdleSource> systemIdleSource();

// Whether the machine runs on its battery. Tests give a fake one.
class PowerSource
{
public:
    virtual ~PowerSource() = default;
    // Nothing when the machine has no battery or does not say.
    virtual std::optional<bool> onBattery() = 0;
};

// The machine's (machine/Power.h).
std::unique_ptr<PowerSource> systemPowerSource();

// Names of the programs running for any user of this machine (Linux: /proc/*/comm, which
// holds the first 15 characters of a name).
QStringList runningPrograms();

class WorkPolicy : public QObject
{
    Q_OBJECT

public:
    struct Decision
    {
        bool run = true;
        QString reason; // why it does not run, or a note when it does ("idle for 12 min")
        bool operator==(const Decision &o) const { return run == o.run && reason == o.reason; }
    };

    // idle, clock and power must outlive the policy; without a power source the battery is
    // not looked at.
    WorkPolicy(WorkerSettings settings, IdleSource *idle, const Clock *clock, PowerSource *power = nullptr,
               QObject *parent = nullptr);

    void setSettings(const WorkerSettings &settings);
    const WorkerSettings &settings() const { return m_settings; }

    // The owner's switch: stays until they turn it off.
    void setManualSuspended(bool suspended);
    bool manualSuspended() const { return m_manual; }
    // Suspended until now + ms, then runs again by itself (if nothing else holds it).
    void suspendFor(qint64 ms);
    void cancelTimedSuspension();
    qint64 suspendedUntilMs() const { return m_untilMs; }

    // Looks now; emits decisionChanged when the answer differs from the last one.
    Decision evaluate();
    Decision decision() const { return m_decision; }
    // Looks every intervalMs from now on.
    void start(int intervalMs = 5000);

Q_SIGNALS:
    void decisionChanged(bool run, const QString &reason);

private:
    Decision decide();

    WorkerSettings m_settings;
    IdleSource *m_idle;
    const Clock *m_clock;
    PowerSource *m_power;
    bool m_manual = false;
    qint64 m_untilMs = 0;
    Decision m_decision;
    bool m_evaluated = false;
    QTimer m_timer;
};

} // namespace flotilla
