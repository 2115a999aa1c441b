#include "machine/WorkPolicy.h"

#include "machine/Power.h"

#include <QDir>
#include <QFile>
#include <QSet>

#if defined(FLOTILLA_HAVE_DBUS)
#include <QDBusConnection>
#include <QDBusMessage>
#include <QDBusPendingCallWatcher>
#endif

#if defined(Q_OS_WIN)
#include <windows.h>
#include <tlhelp32.h>
#elif defined(Q_OS_MACOS)
#include <CoreFoundation/CoreFoundation.h>
#include <IOKit/IOKitLib.h>
#include <libproc.h>
#include <vector>
#endif

namespace flotilla {

namespace {

class SystemIdleSource final : public IdleSource
{
public:
    std::optional<qint64> idleMs() override
    {
#if defined(Q_OS_WIN)
        LASTINPUTINFO info{};
        info.cbSize = sizeof(info);
        if (!GetLastInputInfo(&info))
            return std::nullopt;
        return qint64(DWORD(GetTickCount() - info.dwTime)); // both wrap after 49 days, together
#elif defined(Q_OS_MACOS)
        io_iterator_t iterator = 0;
        if (IOServiceGetMatchingServices(0, IOServiceMatching("IOHIDSystem"), &iterator) != KERN_SUCCESS)
            return std::nullopt;
        const io_registry_entry_t entry = IOIteratorNext(iterator);
        IOObjectRelease(iterator);
        if (!entry)
            return std::nullopt;
        CFTypeRef value = IORegistryEntryCreateCFProperty(entry, CFSTR("HIDIdleTime"), kCFAllocatorDefault, 0);
        IOObjectRelease(entry);
        if (!value)
            return std::nullopt;
        SInt64 ns = 0;
        const bool ok = CFGetTypeID(value) == CFNumberGetTypeID()
                        && CFNumberGetValue(static_cast<CFNumberRef>(value), kCFNumberSInt64Type, &ns);
        CFRelease(value);
        return ok ? std::optional<qint64>(ns / 1000000) : std::nullopt;
#elif defined(FLOTILLA_HAVE_DBUS)
        // GNOME answers the first, KDE and most others the second. The question is asked
        // without waiting (a hung desktop service must not stall the window): this call returns
        // the last answer, at most one polling interval old, and sends the next question; an
        // interface that fails is left for the other one at the next call.
        struct Interface
        {
            const char *service, *path, *interface, *method;
        };
        static const Interface interfaces[] = {
            {"org.gnome.Mutter.IdleMonitor", "/org/gnome/Mutter/IdleMonitor/Core", "org.gnome.Mutter.IdleMonitor",
             "GetIdletime"},
            {"org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver", "org.freedesktop.ScreenSaver",
             "GetSessionIdleTime"},
        };
        QDBusConnection bus = QDBusConnection::sessionBus();
        if (!bus.isConnected())
            return std::nullopt;
        if (!m_asking) {
            const Interface &f = interfaces[m_working];
            const QDBusMessage call = QDBusMessage::createMethodCall(
                QLatin1String(f.service), QLatin1String(f.path), QLatin1String(f.interface), QLatin1String(f.method));
            auto *watcher = new QDBusPendingCallWatcher(bus.asyncCall(call, 2000), &m_context);
            m_asking = true;
            QObject::connect(watcher, &QDBusPendingCallWatcher::finished, &m_context, [this, watcher] {
                watcher->deleteLater();
                m_asking = false;
                const QDBusMessage reply = watcher->reply();
                bool ok = false;
                const qint64 ms = reply.type() == QDBusMessage::ReplyMessage && !reply.arguments().isEmpty()
                                      ? reply.arguments().constFirst().toLongLong(&ok)
                                      : 0;
                if (ok) {
                    m_last = ms;
                } else {
                    m_working = (m_working + 1) % 2;
                    if (++m_failures >= 2)
                        m_last.reset(); // neither interface answers: this desktop does not say
                    return;
                }
                m_failures = 0;
            });
        }
        return m_last;
#else
        return std::nullopt;
#endif
    }

private:
    int m_working = 0;
#if defined(FLOTILLA_HAVE_DBUS) && !defined(Q_OS_WIN) && !defined(Q_OS_MACOS)
    QObject m_context; // owns the questions in flight: none is answered after the source is gone
    bool m_asking = false;
    int m_failures = 0;
    std::optional<qint64> m_last;
#endif
};

QString normalized(QString name)
{
    name = name.trimmed().toLower();
    if (name.endsWith(QLatin1String(".exe")))
        name.chop(4);
    return name;
}

QString minutes(qint64 ms)
{
    const qint64 s = ms / 1000;
    return s < 60 ? QStringLiteral("%1 s").arg(s) : QStringLiteral("%1 min").arg(s / 60);
}

} // namespace

std::unique_ptr<PowerSource> systemPowerSource()
{
    class System : public PowerSource
    {
    public:
        std::optional<bool> onBattery() override { return systemOnBattery(); }
    };
    return std::make_unique<System>();
}

std::unique_ptr<IdleSource> systemIdleSource()
{
    return std::make_unique<SystemIdleSource>();
}

QStringList runningPrograms()
{
    QStringList names;
#if defined(Q_OS_WIN)
    const HANDLE snapshot = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
    if (snapshot == INVALID_HANDLE_VALUE)
        return names;
    PROCESSENTRY32W entry{};
    entry.dwSize = sizeof(entry);
    for (BOOL more = Process32FirstW(snapshot, &entry); more; more = Process32NextW(snapshot, &entry))
        names << QString::fromWCharArray(entry.szExeFile);
    CloseHandle(snapshot);
#elif defined(Q_OS_MACOS)
    const int bytes = proc_listpids(PROC_ALL_PIDS, 0, nullptr, 0);
    if (bytes <= 0)
        return names;
    std::vector<pid_t> pids(size_t(bytes) / sizeof(pid_t) + 64);
    const int got = proc_listpids(PROC_ALL_PIDS, 0, pids.data(), int(pids.size() * sizeof(pid_t)));
    for (int i = 0; i < got / int(sizeof(pid_t)); ++i) {
        char name[2 * MAXCOMLEN + 1] = {};
        if (pids[i] > 0 && proc_name(pids[i], name, sizeof(name)) > 0)
            names << QString::fromUtf8(name);
    }
#elif defined(Q_OS_LINUX)
    const QStringList pids = QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    for (const QString &pid : pids) {
        if (pid.isEmpty() || !pid.front().isDigit())
            continue;
        QFile comm(QStringLiteral("/proc/%1/comm").arg(pid));
        if (comm.open(QIODevice::ReadOnly)) // a process may end between the listing and here
            names << QString::fromUtf8(comm.readAll()).trimmed();
    }
#endif
    return names;
}

WorkPolicy::WorkPolicy(WorkerSettings settings, IdleSource *idle, const Clock *clock, PowerSource *power,
                       QObject *parent)
    : QObject(parent), m_settings(std::move(settings)), m_idle(idle), m_clock(clock), m_power(power)
{
    connect(&m_timer, &QTimer::timeout, this, &WorkPolicy::evaluate);
}

void WorkPolicy::setSettings(const WorkerSettings &settings)
{
    m_settings = settings;
    evaluate();
}

void WorkPolicy::setManualSuspended(bool suspended)
{
    m_manual = suspended;
    evaluate();
}

void WorkPolicy::suspendFor(qint64 ms)
{
    m_untilMs = m_clock->nowMs() + ms;
    evaluate();
}

void WorkPolicy::cancelTimedSuspension()
{
    m_untilMs = 0;
    evaluate();
}

void WorkPolicy::start(int intervalMs)
{
    m_timer.start(intervalMs);
    evaluate();
}

WorkPolicy::Decision WorkPolicy::evaluate()
{
    const Decision d = decide();
    if (!m_evaluated || !(d == m_decision)) {
        m_evaluated = true;
        m_decision = d;
        Q_EMIT decisionChanged(d.run, d.reason);
    }
    return d;
}

WorkPolicy::Decision WorkPolicy::decide()
{
    const qint64 now = m_clock->nowMs();
    if (m_manual)
        return {false, tr("suspended by you")};
    if (m_untilMs > now)
        return {false, tr("suspended by you until %1")
                           .arg(QDateTime::fromMSecsSinceEpoch(m_untilMs).time().toString(QStringLiteral("HH:mm")))};
    m_untilMs = 0;
    const WorkerSettings &s = m_settings;
    if (s.pauseOnBattery && m_power && m_power->onBattery().value_or(false))
        return {false, tr("on battery; runs again when the machine is plugged in")};
    if (s.useWindow && s.windowStart != s.windowEnd) {
        const QTime t = QDateTime::fromMSecsSinceEpoch(now).time();
        // A window that ends before it starts crosses midnight: 19:00–07:00.
        const bool inside = s.windowStart < s.windowEnd ? (t >= s.windowStart && t < s.windowEnd)
                                                        : (t >= s.windowStart || t < s.windowEnd);
        if (!inside)
            return {false, tr("outside the hours it may run (%1–%2)")
                               .arg(s.windowStart.toString(QStringLiteral("HH:mm")),
                                    s.windowEnd.toString(QStringLiteral("HH:mm")))};
    }
    if (!s.exclusivePrograms.isEmpty()) {
        QSet<QString> running;
        for (const QString &name : runningPrograms())
            running.insert(normalized(name));
        for (const QString &wanted : s.exclusivePrograms) {
            const QString name = normalized(wanted);
            // Linux keeps only the first 15 characters of a process's name.
            if (!name.isEmpty() && (running.contains(name) || (name.size() > 15 && running.contains(name.left(15)))))
                return {false, tr("%1 is running").arg(wanted.trimmed())};
        }
    }
    if (s.pauseWhenActive) {
        const std::optional<qint64> idle = m_idle ? m_idle->idleMs() : std::nullopt;
        if (!idle)
            return {true, tr("this desktop does not say how long it has been idle, so using it does not pause the "
                             "worker")};
        const qint64 needed = qint64(s.idleMinutes) * 60000;
        if (*idle < needed)
            return {false, tr("the machine is in use (input %1 ago); runs after %2 min without input")
                               .arg(minutes(*idle))
                               .arg(s.idleMinutes)};
    }
    return {true, QString()};
}

} // namespace flotilla
