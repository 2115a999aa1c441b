#include "machine/WorkerSettings.h"

#include <QSettings>

namespace flotilla {

namespace {

QString groupOf(WorkerSettings::Role role)
{
    return role == WorkerSettings::Role::ControlCenter ? QStringLiteral("controlCenterPolicy")
                                                       : QStringLiteral("workerPolicy");
}

} // namespace

WorkerSettings WorkerSettings::defaults(Role role)
{
    WorkerSettings w;
    if (role == Role::ControlCenter)
        w.pauseWhenActive = false; // the person at the dashboard wants this machine to train
    return w;
}

WorkerSettings WorkerSettings::load(Role role)
{
    QSettings s;
    s.beginGroup(groupOf(role));
    WorkerSettings w = defaults(role);
    w.pauseWhenActive = s.value(QStringLiteral("pauseWhenActive"), w.pauseWhenActive).toBool();
    w.idleMinutes = std::max(1, s.value(QStringLiteral("idleMinutes"), w.idleMinutes).toInt());
    w.useWindow = s.value(QStringLiteral("useWindow"), w.useWindow).toBool();
    const QTime start = QTime::fromString(s.value(QStringLiteral("windowStart")).toString(), QStringLiteral("HH:mm"));
    const QTime end = QTime::fromString(s.value(QStringLiteral("windowEnd")).toString(), QStringLiteral("HH:mm"));
    if (start.isValid())
        w.windowStart = start;
    if (end.isValid())
        w.windowEnd = end;
    w.exclusivePrograms = s.value(QStringLiteral("exclusivePrograms")).toStringList();
    w.pauseOnBattery = s.value(QStringLiteral("pauseOnBattery"), w.pauseOnBattery).toBool();
    w.threads = std::max(1, s.value(QStringLiteral("threads"), w.threads).toInt());
    w.device = s.value(QStringLiteral("device"), w.device).toString();
    w.startAtLogin = s.value(QStringLiteral("startAtLogin"), w.startAtLogin).toBool();
    return w;
}

void WorkerSettings::save(Role role) const
{
    QSettings s;
    s.beginGroup(groupOf(role));
    s.setValue(QStringLiteral("pauseWhenActive"), pauseWhenActive);
    s.setValue(QStringLiteral("idleMinutes"), idleMinutes);
    s.setValue(QStringLiteral("useWindow"), useWindow);
    s.setValue(QStringLiteral("windowStart"), windowStart.toString(QStringLiteral("HH:mm")));
    s.setValue(QStringLiteral("windowEnd"), windowEnd.toString(QStringLiteral("HH:mm")));
    s.setValue(QStringLiteral("exclusivePrograms"), exclusivePrograms);
    s.setValue(QStringLiteral("pauseOnBattery"), pauseOnBattery);
    s.setValue(QStringLiteral("threads"), threads);
    s.setValue(QStringLiteral("device"), device);
    s.setValue(QStringLiteral("startAtLogin"), startAtLogin);
}

QList<RememberedFleet> rememberedFleets()
{
    QSettings s;
    QList<RememberedFleet> fleets;
    const int n = s.beginReadArray(QStringLiteral("fleets"));
    for (int i = 0; i < n; ++i) {
        s.setArrayIndex(i);
        RememberedFleet f{s.value(QStringLiteral("coordinator")).toString(), s.value(QStringLiteral("stateDir")).toString(),
                          s.value(QStringLiteral("joined")).toDateTime()};
        if (!f.stateDir.isEmpty())
            fleets.append(f);
    }
    s.endArray();
    return fleets;
}

void rememberFleet(const RememberedFleet &fleet)
{
    QList<RememberedFleet> fleets = rememberedFleets();
    fleets.removeIf([&](const RememberedFleet &f) { return f.stateDir == fleet.stateDir; });
    fleets.prepend(fleet);
    QSettings s;
    s.remove(QStringLiteral("fleets"));
    s.beginWriteArray(QStringLiteral("fleets"), int(fleets.size()));
    for (int i = 0; i < fleets.size(); ++i) {
        s.setArrayIndex(i);
        s.setValue(QStringLiteral("coordinator"), fleets[i].coordinator);
        s.setValue(QStringLiteral("stateDir"), fleets[i].stateDir);
        s.setValue(QStringLiteral("joined"), fleets[i].joined);
    }
    s.endArray();
}

} // namespace flotilla
