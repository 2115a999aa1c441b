#include "bench/CpuQuota.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>

#include <cmath>

namespace flotilla {

namespace {

Result<void> writeText(const QString &path, const QByteArray &text)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size() || !f.flush())
        return fail(QStringLiteral("cannot write '%1' to %2: %3").arg(QString::fromLatin1(text.trimmed()), path,
                                                                     f.errorString()));
    return {};
}

} // namespace

Result<std::unique_ptr<CpuQuota>> CpuQuota::create(const QString &root, qint64 periodUs)
{
    // The kernel takes periods of 1 ms to 1 s.
    if (periodUs < 1000 || periodUs > 1000000)
        return fail(QStringLiteral("a CPU quota's period must be 1 to 1000 ms, not %1 ms").arg(double(periodUs) / 1000.0));
    std::unique_ptr<CpuQuota> q(new CpuQuota);
    q->m_periodUs = periodUs;
    const QString name = QStringLiteral("flotilla-bench-%1").arg(QCoreApplication::applicationPid());
    // cgroup v2: the unified hierarchy with the cpu controller; v1: the cpu controller's own.
    QStringList tried;
    const QStringList v2roots = root.isEmpty()
        ? QStringList{QStringLiteral("/sys/fs/cgroup"), QStringLiteral("/sys/fs/cgroup/unified")}
        : QStringList{root};
    for (const QString &v2root : v2roots) {
        QFile controllers(v2root + QStringLiteral("/cgroup.controllers"));
        if (!controllers.open(QIODevice::ReadOnly)) {
            if (!root.isEmpty())
                tried << QStringLiteral("%1 (no cgroup.controllers: not a cgroup v2 folder)").arg(v2root);
            continue;
        }
        if (!QString::fromLatin1(controllers.readAll()).split(u' ', Qt::SkipEmptyParts).contains(QStringLiteral("cpu"))) {
            tried << QStringLiteral("%1 (cgroup v2 without the cpu controller)").arg(v2root);
            continue;
        }
        const QString group = v2root + u'/' + name;
        if (!QDir().mkpath(group)) {
            tried << QStringLiteral("%1 (cannot create a group there)").arg(v2root);
            continue;
        }
        if (auto r = writeText(group + QStringLiteral("/cgroup.subtree_control"), "+cpu"); !r) {
            QDir().rmdir(group);
            tried << r.error();
            continue;
        }
        q->m_v2 = true;
        q->m_root = group;
        return q;
    }
    const QString v1 = root.isEmpty() ? QStringLiteral("/sys/fs/cgroup/cpu") : root;
    if (QFileInfo::exists(v1 + QStringLiteral("/cpu.cfs_quota_us"))) {
        const QString group = v1 + u'/' + name;
        if (QDir().mkpath(group)) {
            q->m_root = group;
            return q;
        }
        tried << QStringLiteral("%1 (cannot create a group there: run as root)").arg(v1);
    } else {
        tried << QStringLiteral("%1 (no cgroup v1 cpu controller)").arg(v1);
    }
    return fail(QStringLiteral("cannot make CPU quotas for emulated machines: %1").arg(tried.join(QStringLiteral("; "))));
}

CpuQuota::~CpuQuota()
{
    for (const QString &m : m_machines)
        QDir().rmdir(m);
    QDir().rmdir(m_root);
}

Result<int> CpuQuota::addMachine(const QString &name, double cores)
{
    const QString dir = m_root + u'/' + name;
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("cannot create the cgroup '%1'").arg(dir));
    // The kernel's least quota is 1 ms: a machine too small for that in one period gets a
    // longer period of its own, not more CPU.
    const qint64 period = std::max<qint64>(m_periodUs, qint64(std::ceil(1000.0 / cores - 1e-6)));
    const qint64 quota = std::max<qint64>(1000, qint64(std::llround(cores * double(period))));
    if (m_v2) {
        if (auto r = writeText(dir + QStringLiteral("/cpu.max"), QByteArray::number(quota) + ' '
                                                                    + QByteArray::number(period) + '\n');
            !r)
            return r.takeError();
    } else {
        if (auto r = writeText(dir + QStringLiteral("/cpu.cfs_period_us"), QByteArray::number(period) + '\n'); !r)
            return r.takeError();
        if (auto r = writeText(dir + QStringLiteral("/cpu.cfs_quota_us"), QByteArray::number(quota) + '\n'); !r)
            return r.takeError();
    }
    m_machines.push_back(dir);
    return int(m_machines.size()) - 1;
}

QString CpuQuota::procsFile(int index) const
{
    return m_machines.at(std::size_t(index)) + QStringLiteral("/cgroup.procs");
}

Result<void> CpuQuota::moveThread(int index, qint64 threadId) const
{
    if (m_v2)
        return fail(QStringLiteral("cgroup v2 moves a single thread only inside a threaded subtree; the emulated "
                                   "machines are whole processes"));
    return writeText(m_machines.at(std::size_t(index)) + QStringLiteral("/tasks"), QByteArray::number(threadId) + '\n');
}

QString CpuQuota::describe() const
{
    return QStringLiteral("%1 at %2, period %3 ms")
        .arg(m_v2 ? QStringLiteral("cgroup v2") : QStringLiteral("cgroup v1"), m_root)
        .arg(double(m_periodUs) / 1000.0);
}

} // namespace flotilla
