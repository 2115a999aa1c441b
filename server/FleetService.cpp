#include "server/FleetService.h"

#include "common/LogCategories.h"
#include "engine/coordination/Journal.h"
#include "server/FleetRequests.h"

#include <QDateTime>
#include <QDir>
#include <QFutureWatcher>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtConcurrent>

namespace flotilla {

namespace {

qint64 now()
{
    return QDateTime::currentMSecsSinceEpoch();
}

} // namespace

FleetService::FleetService(NetworkHost &network, std::unique_ptr<FleetQueue> queue, Options options, QObject *parent)
    : QObject(parent), m_network(network), m_queue(std::move(queue)), m_options(options)
{
    m_poll.setInterval(std::max(50, m_options.pollMs));
    connect(&m_poll, &QTimer::timeout, this, &FleetService::tick);
    if (FleetServer *server = m_network.server()) {
        connect(server, &FleetServer::queueCommand, this, &FleetService::onQueueCommand);
        connect(server, &FleetServer::jobStopRequested, this, [this](const QString &key, const QString &by) {
            for (const auto &[id, job] : m_running)
                if (keyOf(id) == key) {
                    (void)m_queue->setWanted(id, QStringLiteral("pause"),
                                             QStringLiteral("paused by operator %1").arg(by));
                    qCInfo(lcServer).noquote() << "operator" << by << "asked to stop job" << id << "- pausing it";
                }
        });
    }
}

void FleetService::onQueueCommand(qint64 connectionId, const QString &name, bool administrator,
                                  const QCborMap &header, const QByteArray &payload)
{
    auto command = net::CommandMsg::decode(header);
    if (!command)
        return; // the server decoded it before: it cannot happen
    const net::CommandMsg c = *command;
    const Requester by{name, administrator, true};
    auto answer = [this, connectionId, c, by](const QString &error, const QString &text, const QByteArray &bytes) {
        qCInfo(lcServer).noquote() << by.origin() << by.name << "asked" << c.action
                                   << (c.job ? QString::number(c.job) : QString()) << "-"
                                   << (error.isEmpty() ? (text.isEmpty() ? QStringLiteral("answered") : text) : error);
        m_network.answer(connectionId, net::ReplyMsg{c.id, c.action, error, text}.encode(), bytes);
    };
    FleetRequests requests(*m_queue, m_options.fleetDir);
    if (c.action == QLatin1String("jobs")) {
        auto jobs = requests.jobs();
        answer(jobs ? QString() : jobs.error(), {}, jobs ? encodeJobs(*jobs) : QByteArray());
        return;
    }
    const bool heavy = c.action == QLatin1String("submit") || c.action == QLatin1String("job-download");
    if (!heavy) {
        auto done = requests.manage(by, c.job, c.action.mid(4), c.value, now());
        answer(done ? QString() : done.error(), done ? *done : QString(), {});
        if (done)
            QTimer::singleShot(0, this, &FleetService::tick);
        return;
    }
    // A submission's files and a download are read and written on a pool thread, one at a
    // time per connection: the queue goes on meanwhile.
    if (!m_busy.insert(connectionId).second) {
        answer(QStringLiteral("your last submission or download is still being handled: wait for its answer"), {}, {});
        return;
    }
    auto finish = [this, connectionId, answer](const QString &error, const QString &text, const QByteArray &bytes) {
        m_busy.erase(connectionId);
        answer(error, text, bytes);
    };
    if (c.action == QLatin1String("job-download")) {
        auto job = requests.downloadable(by, c.job);
        if (!job) {
            finish(job.error(), {}, {});
            return;
        }
        auto *watcher = new QFutureWatcher<std::shared_ptr<Result<QByteArray>>>(this);
        connect(watcher, &QFutureWatcherBase::finished, this, [watcher, finish] {
            watcher->deleteLater();
            const Result<QByteArray> &bundle = *watcher->result();
            finish(bundle ? QString() : bundle.error(), {}, bundle ? *bundle : QByteArray());
        });
        watcher->setFuture(QtConcurrent::run([runDir = job->runDir] {
            auto bundle = FleetRequests::readRun(runDir);
            return std::make_shared<Result<QByteArray>>(bundle ? Result<QByteArray>(encodeBundle(*bundle))
                                                               : Result<QByteArray>(bundle.takeError()));
        }));
        return;
    }
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<Submission>>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, finish, by] {
        watcher->deleteLater();
        const Result<Submission> &kept = *watcher->result();
        if (!kept) {
            finish(kept.error(), {}, {});
            return;
        }
        FleetRequests requests(*m_queue, m_options.fleetDir);
        auto queued = requests.enqueue(by, *kept, now());
        if (!queued) {
            finish(queued.error(), {}, {});
            return;
        }
        finish({},
               QStringLiteral("job %1 '%2' queued for %3 (%4 queued ahead of it)")
                   .arg(queued->first.id)
                   .arg(queued->first.name, by.name)
                   .arg(queued->second),
               {});
        QTimer::singleShot(0, this, &FleetService::tick);
    });
    watcher->setFuture(QtConcurrent::run([payload, by, fleetDir = m_options.fleetDir] {
        auto submission = decodeSubmission(payload);
        if (!submission)
            return std::make_shared<Result<Submission>>(submission.takeError());
        return std::make_shared<Result<Submission>>(FleetRequests::keepFiles(fleetDir, by, std::move(submission).value()));
    }));
}

FleetService::~FleetService()
{
    stop();
}

Result<void> FleetService::start()
{
    auto jobs = m_queue->jobs();
    if (!jobs)
        return jobs.takeError();
    // What ran when the service was killed resumes first (startOrder: a job that started
    // before goes ahead of those that never did).
    for (const QueuedJob &j : *jobs)
        if (j.state == QLatin1String("running"))
            if (auto r = m_queue->setState(j.id, QStringLiteral("queued"),
                                           QStringLiteral("resuming: the fleet service stopped while it ran"), now());
                !r)
                return r;
    m_sinceTick.start();
    m_poll.start();
    QTimer::singleShot(0, this, &FleetService::tick);
    return {};
}

void FleetService::stop()
{
    m_stopping = true;
    m_poll.stop();
    for (auto &[id, job] : m_running) {
        m_network.removeJob(keyOf(id));
        job.fleet->stop();
        (void)m_queue->setState(id, QStringLiteral("queued"),
                                QStringLiteral("resuming: the fleet service stopped while it ran"), now());
    }
    m_running.clear();
}

void FleetService::writeState(qint64 id, const QString &state, const QString &message)
{
    m_unwritten.erase(id);
    if (auto r = m_queue->setState(id, state, message, now()); !r) {
        // Kept, and written at the next tick: a queue that says "running" for a job that ended
        // would start it again after a restart (and call it failed), or never end it.
        qCWarning(lcStore).noquote() << "cannot write that job" << id << "is" << state << "- trying again:" << r.error();
        m_unwritten[id] = {state, message};
    }
}

void FleetService::record(qint64 id, const QString &name, const QString &state, const QString &message)
{
    qCInfo(lcScheduling).noquote() << "job" << id << name << state << (message.isEmpty() ? QString() : u"- " + message);
    Q_EMIT jobChanged(id, name, state, message);
}

void FleetService::tick()
{
    if (m_stopping)
        return;
    const double seconds = double(m_sinceTick.restart()) / 1000.0;
    // The workers each running job held since the last tick: its usage, for the fair share.
    const auto placement = m_network.placement();
    for (const auto &[id, job] : m_running)
        if (const auto it = placement.find(keyOf(id)); it != placement.end() && it->second > 0)
            (void)m_queue->addWorkerSeconds(id, it->second * seconds);

    for (const auto &[id, unwritten] : std::map<qint64, std::pair<QString, QString>>(m_unwritten))
        writeState(id, unwritten.first, unwritten.second);
    auto jobs = m_queue->jobs();
    if (!jobs) {
        qCWarning(lcStore).noquote() << "cannot read the fleet queue:" << jobs.error();
        return;
    }
    for (const QueuedJob &row : *jobs) {
        const auto it = m_running.find(row.id);
        if (it == m_running.end() || it->second.ending)
            continue;
        if (row.wanted == QLatin1String("cancel"))
            endJob(row.id, QStringLiteral("cancelled"), row.message);
        else if (row.wanted == QLatin1String("pause"))
            endJob(row.id, QStringLiteral("paused"), row.message);
        else if (row.weight != it->second.weight) {
            it->second.weight = row.weight;
            m_network.setJobWeight(keyOf(row.id), row.weight);
        }
    }
    // A job that no connected worker may train (its requirements, the fleet's quarantine) says
    // so, rather than wait in silence. Asked of the network thread, answered a moment later.
    m_network.askUnmetRequirements(this, [this](const std::map<QString, QString> &unmet) {
        for (auto &[id, job] : m_running) {
            const auto it = unmet.find(keyOf(id));
            const QString why = it == unmet.end() ? QString() : it->second;
            if (why == job.unmet || job.ending)
                continue;
            job.unmet = why;
            const QString message = why.isEmpty() ? job.message : QStringLiteral("waiting: %1").arg(why);
            (void)m_queue->setMessage(id, message);
            record(id, job.name, QStringLiteral("running"), message);
        }
    });
    if (int(m_running.size()) >= m_options.concurrentJobs)
        return;
    auto order = m_queue->startOrder(now(), m_options.fairShareHalfLifeMs);
    if (!order) {
        qCWarning(lcStore).noquote() << "cannot read the fleet queue:" << order.error();
        return;
    }
    for (const QueuedJob &job : *order) {
        if (int(m_running.size()) >= m_options.concurrentJobs)
            break;
        // Queued in the file but running here (its "running" is not written yet), or ended here
        // with that not written yet: never started twice.
        if (m_running.count(job.id) || m_unwritten.count(job.id))
            continue;
        startJob(job);
    }
}

void FleetService::startJob(const QueuedJob &job)
{
    const qint64 id = job.id;
    QJsonParseError parseError;
    const QJsonDocument document = QJsonDocument::fromJson(job.spec.toUtf8(), &parseError);
    auto spec = document.isObject() ? JobSpec::fromJson(document.object())
                                    : Result<JobSpec>(fail(QStringLiteral("its job file is not a JSON object: %1")
                                                               .arg(parseError.errorString())));
    if (!spec) {
        writeState(id, QStringLiteral("failed"), spec.error());
        record(id, job.name, QStringLiteral("failed"), spec.error());
        return;
    }
    // The service was killed between the job's last fold and the queue's update: its run
    // folder says it finished, and so does the queue now. It is not started again (its
    // coordinator would refuse a finished run folder, and the queue would call it failed).
    const auto stored = Journal::storedJob(job.runDir);
    if (!stored) {
        qCWarning(lcStore).noquote() << "cannot read the store of job" << id << "in" << job.runDir << "-"
                                     << stored.error();
    } else if (*stored && (*stored)->state == QLatin1String("finished")) {
        const QString why = QStringLiteral("finished (its run folder says so: the fleet service stopped before the "
                                           "queue noted it)");
        writeState(id, QStringLiteral("finished"), why);
        record(id, job.name, QStringLiteral("finished"), why);
        return;
    }
    if (!QDir().mkpath(job.runDir)) {
        const QString why = QStringLiteral("cannot create its run folder '%1'").arg(job.runDir);
        writeState(id, QStringLiteral("failed"), why);
        record(id, job.name, QStringLiteral("failed"), why);
        return;
    }
    auto fleet = LocalFleet::create(*spec, job.runDir, 0);
    if (!fleet) {
        writeState(id, QStringLiteral("failed"), fleet.error());
        record(id, job.name, QStringLiteral("failed"), fleet.error());
        return;
    }
    LocalFleet *f = fleet->get();
    if (auto added = m_network.addJob(keyOf(id), f->coordinator(), job.weight, job.submitter,
                                      job.origin != QLatin1String("submitter"));
        !added) {
        writeState(id, QStringLiteral("failed"), added.error());
        record(id, job.name, QStringLiteral("failed"), added.error());
        return;
    }
    connect(f, &LocalFleet::finished, this, [this, id](bool ok, const QString &message) {
        // Not from inside the fleet's own signal: ending it deletes it.
        QTimer::singleShot(0, this, [this, id, ok, message] {
            endJob(id, ok ? QStringLiteral("finished") : QStringLiteral("failed"), message);
        });
    });
    connect(f, &LocalFleet::progressed, this,
            [this, id](const JobProgress &progress, int) { Q_EMIT jobProgressed(id, progress); });
    const QString message = f->resumed() ? QStringLiteral("resumed in %1").arg(job.runDir)
                                         : QStringLiteral("started in %1").arg(job.runDir);
    writeState(id, QStringLiteral("running"), message);
    m_running[id] = Running{job.name, std::move(fleet).value(), job.weight, false, message, {}};
    record(id, job.name, QStringLiteral("running"), message);
    f->start();
}

void FleetService::endJob(qint64 id, const QString &state, const QString &message)
{
    const auto it = m_running.find(id);
    if (it == m_running.end() || it->second.ending)
        return;
    it->second.ending = true;
    // The server lets go of the coordinator before it goes; the workers go on to the next job.
    m_network.removeJob(keyOf(id));
    it->second.fleet->stop();
    const QString name = it->second.name;
    m_running.erase(it);
    writeState(id, state, message);
    record(id, name, state, message);
    if (!m_stopping)
        QTimer::singleShot(0, this, &FleetService::tick);
}

} // namespace flotilla
