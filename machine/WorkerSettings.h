#pragma once
// What the owner of a worker machine decides about it: when the worker may run (not while
// they use the machine, only in a daily window, not while some programs run, not on battery), how much of
// the machine it gets, whether it starts at login; and the fleets this machine has joined,
// so that the worker starts again without a token. Both are kept in QSettings.
//
// Threads: UI thread (QSettings is read and written there).

#include <QDateTime>
#include <QList>
#include <QString>
#include <QStringList>
#include <QTime>

namespace flotilla {

struct WorkerSettings
{
    bool pauseWhenActive = true;
    int idleMinutes = 5; // the user must have been away this long
    bool useWindow = false;
    QTime windowStart = QTime(19, 0); // may cross midnight: 19:00–07:00
    QTime windowEnd = QTime(7, 0);
    QStringList exclusivePrograms; // process names, as `ps -e` shows them
    bool pauseOnBattery = true;    // not while the machine runs on its battery
    int threads = 1;
    QString device = QStringLiteral("auto"); // auto, cpu, cuda, cuda:N
    bool startAtLogin = false;

    // Whose rules: the worker window's and Join a fleet…'s, or the control center's own worker's
    // (kept apart; by default it trains while its user works at the machine).
    enum class Role { WorkerWindow, ControlCenter };
    static WorkerSettings defaults(Role role);
    static WorkerSettings load(Role role = Role::WorkerWindow);
    void save(Role role = Role::WorkerWindow) const;
};

struct RememberedFleet
{
    QString coordinator; // host:port
    QString stateDir;    // the worker's identity and shard cache for this fleet
    QDateTime joined;
};

// Most recently joined first.
QList<RememberedFleet> rememberedFleets();
// Adds the fleet, or moves the one with the same state folder to the front with the new details.
void rememberFleet(const RememberedFleet &fleet);

} // namespace flotilla
