// A fleet's placement of its workers: which job each serves (by the jobs' weights, what each
// job requires of a machine), why a worker waits, and the fleet's own quarantine.
#include "server/FleetServer.h"

#include "common/LogCategories.h"

#include <QDateTime>
#include <QRegularExpression>

namespace flotilla {

std::map<QString, int> FleetServer::placement() const
{
    std::map<QString, int> out = counts();
    int waiting = 0;
    for (const auto &[connection, worker] : m_connected)
        if (worker.job.isEmpty() && worker.joining.isEmpty())
            ++waiting;
    out[QString()] = waiting;
    return out;
}

std::map<QString, int> FleetServer::counts() const
{
    std::map<QString, int> out;
    for (const auto &[key, job] : m_jobs)
        out[key] = 0;
    for (const auto &[connection, worker] : m_connected) {
        const QString &key = worker.joining.isEmpty() ? worker.job : worker.joining;
        if (!key.isEmpty() && out.count(key))
            ++out[key];
    }
    return out;
}

bool FleetServer::takesWorkers(const Job &job) const
{
    return !job.finished && m_clock.elapsed() >= job.closedUntilMs;
}

std::map<QString, double> FleetServer::targets() const
{
    double total = 0;
    for (const auto &[key, job] : m_jobs)
        if (takesWorkers(*job))
            total += job->weight;
    // Shares of the workers that may train: the fleet's quarantine holds the others.
    double workers = 0;
    for (const auto &[connection, worker] : m_connected)
        workers += m_quarantined.count(worker.workerId) ? 0.0 : 1.0;
    std::map<QString, double> out;
    for (const auto &[key, job] : m_jobs)
        if (takesWorkers(*job))
            out[key] = total > 0 ? workers * job->weight / total : 0.0;
    return out;
}

QString FleetServer::lacks(const ConnectedWorker &worker, const Job &job)
{
    QStringList missing;
    // fp16 autocast trains only on a GPU: such a job needs one whatever it says.
    const QString device = job.spec.training.precision == QLatin1String("fp16") ? QStringLiteral("cuda")
                                                                                 : job.spec.fleet.requireDevice;
    const bool cuda = worker.info.device.startsWith(QLatin1String("cuda"));
    if ((device == QLatin1String("cuda") && !cuda) || (device == QLatin1String("cpu") && cuda))
        missing << QStringLiteral("a %1 device (it has %2)").arg(device, worker.info.device.isEmpty()
                                                                            ? QStringLiteral("none said")
                                                                            : worker.info.device.left(40));
    // bf16 autocast on a GPU needs compute capability 8.0 (Ampere) or newer; the worker says
    // its GPU's ("cuda:0 (NVIDIA T4, 15 GiB, compute 7.5)").
    static const QRegularExpression compute(QStringLiteral("compute (\\d+)\\.(\\d+)"));
    if (const auto m = compute.match(worker.info.device);
        cuda && m.hasMatch() && job.spec.training.precision == QLatin1String("bf16") && m.captured(1).toInt() < 8)
        missing << QStringLiteral("a GPU of compute capability 8.0 or newer for bf16 (it has %1.%2); use fp16 or fp32 "
                                  "for this job, or other workers")
                       .arg(m.captured(1), m.captured(2));
    const qint64 memory = job.spec.fleet.requireMemoryMb;
    if (memory > 0 && worker.memoryMb < memory)
        missing << QStringLiteral("%1 MiB of memory (it has %2)")
                       .arg(memory)
                       .arg(worker.memoryMb > 0 ? QStringLiteral("%1 MiB").arg(worker.memoryMb) : QStringLiteral("none said"));
    return missing.join(QStringLiteral(" and "));
}

QString FleetServer::waitingReason(const ConnectedWorker &worker) const
{
    if (const auto q = m_quarantined.find(worker.workerId); q != m_quarantined.end())
        return QStringLiteral("quarantined by the fleet (%1); an operator releases it").arg(q->second.left(300));
    QStringList needs;
    for (const auto &[key, job] : m_jobs) {
        const QString missing = lacks(worker, *job);
        if (missing.isEmpty())
            return {}; // a job it could train has nothing for it now
        needs << QStringLiteral("%1 needs %2").arg(key, missing);
    }
    return needs.isEmpty() ? QString() : QStringLiteral("no running job this machine can train: ") + needs.join(QStringLiteral("; "));
}

std::map<QString, QString> FleetServer::unmetRequirements() const
{
    // The workers the fleet holds back: those connected that it quarantined, and those refused
    // for now for going over their budgets (not connected, then).
    const std::vector<net::TlsListener::Barred> barred = m_listener->barred();
    std::map<QString, QString> out;
    for (const auto &[key, job] : m_jobs) {
        int connected = 0;
        int quarantined = 0;
        QString example;
        bool someone = false;
        std::map<qint64, std::pair<QString, QString>> held; // by worker id: name, and why
        for (const auto &[connection, worker] : m_connected) {
            ++connected;
            if (const auto q = m_quarantined.find(worker.workerId); q != m_quarantined.end()) {
                ++quarantined;
                held[worker.workerId] = {worker.name,
                                         QStringLiteral("%1 is quarantined (%2)").arg(worker.name, q->second.left(200))};
                continue;
            }
            const QString missing = lacks(worker, *job);
            someone = someone || missing.isEmpty();
            if (example.isEmpty() && !missing.isEmpty())
                example = QStringLiteral("%1 lacks %2").arg(worker.name, missing);
        }
        for (const net::TlsListener::Barred &b : barred)
            if (!held.count(b.workerId))
                held[b.workerId] = {b.workerName,
                                    QStringLiteral("%1 is refused for another %2 min for going over its budgets (%3)")
                                        .arg(b.workerName)
                                        .arg((b.remainingMs + 59999) / 60000)
                                        .arg(b.reason.left(200))};
        // No worker connected or held back at all: the job's own progress says so.
        if (someone || (connected == 0 && held.empty()))
            continue;
        QStringList heldText;
        QStringList names;
        for (const auto &[id, h] : held) {
            names << h.first;
            heldText << h.second;
        }
        const QString release = QStringLiteral("; `flotilla release NAME --identity-dir %1` lets one train again (%2)")
                                    .arg(m_options.identityDir, names.join(QStringLiteral(", ")));
        if (connected > quarantined) {
            const FleetSpec &f = job->spec.fleet;
            out[key] = QStringLiteral("no connected worker meets its requirements (fleet.require_device %1, "
                                      "fleet.require_memory_mb %2): %3")
                           .arg(f.requireDevice)
                           .arg(f.requireMemoryMb)
                           .arg(example)
                       + (held.empty() ? QString() : u"; and " + heldText.join(QStringLiteral("; ")) + release);
            continue;
        }
        out[key] = QStringLiteral("every worker is held back by the fleet: %1%2").arg(heldText.join(QStringLiteral("; ")), release);
    }
    return out;
}

QString FleetServer::moveTarget(const ConnectedWorker &worker, const QString &from) const
{
    if (!m_fleet || m_jobs.size() < 2)
        return {};
    const auto target = targets();
    const auto count = counts();
    const auto f = target.find(from);
    if (f == target.end() || double(count.at(from)) - f->second <= 0.5)
        return {};
    QString best;
    double most = 0.5;
    for (const auto &[key, t] : target) {
        const double under = t - double(count.at(key));
        if (key != from && under > most && lacks(worker, *m_jobs.at(key)).isEmpty()) {
            most = under;
            best = key;
        }
    }
    return best;
}

void FleetServer::place(qint64 connectionId, const QString &except)
{
    const auto it = m_connected.find(connectionId);
    if (it == m_connected.end())
        return;
    ConnectedWorker &worker = it->second;
    if (m_quarantined.count(worker.workerId)) {
        sendWelcome(connectionId, worker, nullptr, waitingReason(worker));
        Q_EMIT workerPlaced(worker.workerId, QString());
        return;
    }
    const auto target = targets();
    const auto count = counts();
    const Job *best = nullptr;
    double most = -1e300;
    for (const auto &[key, job] : m_jobs) {
        if ((key == except && m_jobs.size() > 1) || !takesWorkers(*job) || !lacks(worker, *job).isEmpty())
            continue;
        const double under = target.at(key) - double(count.at(key));
        if (!best || under > most + 1e-9 || (std::abs(under - most) <= 1e-9 && job->order < best->order)) {
            best = job.get();
            most = under;
        }
    }
    if (!best || best->key == except) {
        sendWelcome(connectionId, worker, nullptr, waitingReason(worker));
        Q_EMIT workerPlaced(worker.workerId, QString());
        return;
    }
    Job &job = *m_jobs.at(best->key);
    worker.joining = job.key;
    Pending pending;
    pending.connectionId = connectionId;
    pending.workerId = worker.workerId;
    job.joins[job.coordinator->join(worker.info, worker.workerId)] = pending;
}

void FleetServer::quarantineInFleet(qint64 workerId, const QString &reason)
{
    if (workerId <= 0 || m_quarantined.count(workerId))
        return;
    m_quarantined[workerId] = reason;
    m_released.erase(workerId);
    if (auto r = m_listener->trust().quarantine(workerId, reason, QDateTime::currentMSecsSinceEpoch()); !r)
        qCWarning(lcServer).noquote() << "cannot record the fleet's quarantine of worker" << workerId << "-" << r.error();
    qCWarning(lcServer).noquote() << "worker" << workerId << "is quarantined in the fleet: no job gets it until an "
                                                             "operator releases it -"
                                  << reason;
    // Out of its job at once, and into none.
    for (auto &[connection, worker] : m_connected)
        if (worker.workerId == workerId) {
            leaveJob(worker, QStringLiteral("quarantined: %1").arg(reason));
            worker.joining.clear();
            place(connection);
        }
}

void FleetServer::rereadQuarantine()
{
    auto now = m_listener->trust().quarantined();
    if (!now) {
        qCWarning(lcServer).noquote() << "cannot read the fleet's quarantine:" << now.error();
        return;
    }
    std::vector<qint64> released;
    for (const auto &[id, reason] : m_quarantined)
        if (!now->count(id))
            released.push_back(id);
    for (const qint64 id : released)
        releaseInFleet(id, QStringLiteral("flotilla release"));
    for (const auto &[id, reason] : *now)
        if (!m_quarantined.count(id))
            quarantineInFleet(id, reason);
}

void FleetServer::releaseInFleet(qint64 workerId, const QString &by)
{
    m_released.insert(workerId);
    // Released means released: a bar for budgets is lifted too.
    m_listener->forgive(workerId);
    const bool wasQuarantined = m_quarantined.erase(workerId) > 0;
    // Every job that quarantined it lets it go too, in the fleet's quarantine or not.
    for (const auto &[key, job] : m_jobs)
        job->coordinator->releaseAsync(workerId, by);
    if (!wasQuarantined)
        return;
    if (auto r = m_listener->trust().release(workerId); !r)
        qCWarning(lcServer).noquote() << "cannot record the release of worker" << workerId << "-" << r.error();
    qCInfo(lcServer).noquote() << "worker" << workerId << "released from the fleet's quarantine by" << by;
    for (const auto &[connection, worker] : std::map<qint64, ConnectedWorker>(m_connected))
        if (worker.workerId == workerId && worker.job.isEmpty() && worker.joining.isEmpty())
            place(connection);
}

} // namespace flotilla
