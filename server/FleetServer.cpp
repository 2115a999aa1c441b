#include "server/FleetServer.h"

#include "common/LogCategories.h"
#include "common/Sha256.h"
#include "engine/wire/WireFormat.h"
#include "net/Dispatch.h"
#include "protocol/TrainingFields.h"
#include "server/FleetRequests.h"
#include "server/WatchStream.h"

#include <QCryptographicHash>
#include <QFile>
#include <QJsonDocument>
#include <QRandomGenerator>
#include <QTimer>

namespace flotilla {

namespace {

using net::MessageType;

// Encoded shards kept for the next connection that asks, per job.
constexpr qint64 kShardCacheBytes = qint64(256) << 20;
// How long a job that dismissed an idle worker is left out of placement: long enough that a
// dismissed worker is not moved back at once, short enough that a job whose tail fails (a
// worker killed with its lease) gets workers again soon.
constexpr qint64 kDismissedClosedMs = 10000;
// How long a Request that found its job's round full waits for the round to fold.
constexpr int kParkedMs = 10000;
// A TorchScript model a fleet holds in memory and sends to its workers.
constexpr qint64 kModelBytes = qint64(512) << 20;

} // namespace

Result<std::unique_ptr<FleetServer>> FleetServer::create(const net::TlsListener::Options &options, bool fleet)
{
    std::unique_ptr<FleetServer> s(new FleetServer);
    if (auto r = s->setUp(options, fleet); !r)
        return r.takeError();
    return s;
}

Result<std::unique_ptr<FleetServer>> FleetServer::create(CoordinatorThread *coordinator,
                                                         const net::TlsListener::Options &options)
{
    auto s = create(options, false);
    if (!s)
        return s;
    QString name;
    coordinator->withCoordinator([&](Coordinator &c) { name = c.spec().name; });
    if (auto added = (*s)->addJob(name, coordinator); !added)
        return added.takeError();
    return s;
}

Result<void> FleetServer::setUp(const net::TlsListener::Options &options, bool fleet)
{
    auto endpoint = net::TlsListener::create(options);
    if (!endpoint)
        return endpoint.takeError();
    m_fleet = fleet;
    m_clock.start();
    m_options = options;
    m_listener = std::move(endpoint).value();
    // A fleet's quarantine outlives its jobs and the service's restarts, and `flotilla
    // release --identity-dir` changes it from outside: read again every two seconds.
    if (fleet) {
        auto quarantined = m_listener->trust().quarantined();
        if (!quarantined)
            return quarantined.takeError();
        m_quarantined = std::move(quarantined).value();
        auto *reread = new QTimer(this);
        connect(reread, &QTimer::timeout, this, &FleetServer::rereadQuarantine);
        reread->start(2000);
    }
    // A submission carries its job's model and data; only a person's certificate may send one.
    if (fleet)
        m_listener->setPersonPayloadLimit(MessageType::Command,
                                          std::uint64_t(FleetRequests::kMaxSubmissionBytes) + (std::uint64_t(1) << 20));
    connect(m_listener.get(), &net::TlsListener::helloReceived, this, &FleetServer::onHello);
    connect(m_listener.get(), &net::TlsListener::messageReceived, this, &FleetServer::onMessage);
    connect(m_listener.get(), &net::TlsListener::overBudget, this, &FleetServer::onOverBudget);
    connect(m_listener.get(), &net::TlsListener::connectionClosed, this,
            [this](qint64 connectionId, const QString &) { onClosed(connectionId); });
    return {};
}

Result<void> FleetServer::addJob(const QString &key, CoordinatorThread *coordinator, double weight,
                                 const QString &owner, bool quarantinesForFleet)
{
    if (m_jobs.count(key))
        return fail(QStringLiteral("the fleet already serves a job '%1'").arg(key));
    auto job = std::make_unique<Job>();
    job->key = key;
    job->coordinator = coordinator;
    job->weight = weight > 0 && std::isfinite(weight) ? weight : 1.0;
    job->order = ++m_jobsAdded;
    QString runDir;
    coordinator->withCoordinator([&](Coordinator &c) {
        job->spec = c.spec();
        job->data = c.data();
        job->layout = c.layout();
        runDir = c.runDir();
    });
    // Replicas of a subtask are compared with each other (fleet.redundancy): they must start
    // from the same weights bit for bit, not from two roundings of them.
    job->downlink = std::make_unique<DownlinkEncoder>(
        job->spec.fleet.redundancy > 0 ? Compression::None
                                       : compressionFromName(job->spec.fleet.compression).value_or(Compression::None),
        job->layout);
    if (job->spec.model.kind == QLatin1String("torchscript")) {
        QFile model(job->spec.model.path);
        if (!model.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("cannot read the TorchScript model '%1'").arg(job->spec.model.path));
        if (model.size() > kModelBytes)
            return fail(QStringLiteral("the TorchScript model '%1' is %2 MiB; a fleet sends models of up to %3 MiB")
                            .arg(job->spec.model.path)
                            .arg(model.size() >> 20)
                            .arg(kModelBytes >> 20));
        job->modelBytes = model.readAll();
        job->modelSha256 = QString::fromLatin1(
            QCryptographicHash::hash(job->modelBytes, QCryptographicHash::Sha256).toHex());
    }
    // A result carries exactly the model's weights; nothing larger is accepted. Jobs of one
    // fleet may differ: the largest of them bounds it.
    std::uint64_t largest = std::uint64_t(job->layout.totalNumel) * 4;
    for (const auto &[k, other] : m_jobs)
        largest = std::max<std::uint64_t>(largest, std::uint64_t(other->layout.totalNumel) * 4);
    m_listener->setPayloadLimit(MessageType::Result, largest);

    OperatorService::Options operatorOptions;
    operatorOptions.runDir = runDir;
    operatorOptions.owner = owner;
    operatorOptions.jobKey = m_fleet ? key : QString();
    operatorOptions.hostName = m_options.hostNames.value(0, QStringLiteral("127.0.0.1"));
    operatorOptions.addressOf = [this](const WorkerStatus &w) {
        return w.name.startsWith(QStringLiteral("local-")) ? QStringLiteral("the coordinator's machine")
                                                           : addressOf(w.id);
    };
    job->operators = new OperatorService(coordinator, *m_listener, std::move(operatorOptions), this);
    connect(job->operators, &OperatorService::stopRequested, this, [this, key](const QString &by) {
        if (m_fleet)
            Q_EMIT jobStopRequested(key, by);
        else
            Q_EMIT stopRequested(by);
    });
    connect(job->operators, &OperatorService::releaseRequested, this,
            [this](qint64 workerId, const QString &by) { releaseInFleet(workerId, QStringLiteral("operator %1").arg(by)); });
    // A job whose checks the fleet trusts (not a submitter's, who sets how strict they are)
    // quarantines for the fleet.
    if (m_fleet && quarantinesForFleet)
        job->connections.push_back(connect(coordinator, &CoordinatorThread::eventRecorded, this,
                                           [this](const EventRecord &e) {
                                               if (e.kind == eventName(EventKind::WorkerQuarantined))
                                                   quarantineInFleet(e.workerId, e.detail);
                                           }));
    // Workers the fleet released since this job last ran are released in it too.
    for (const qint64 released : m_released)
        coordinator->releaseAsync(released, QStringLiteral("the fleet's operators"));
    // Answers find their job by key and by the order it was added in: a job removed and
    // added again under its key numbers its tickets from 1 again.
    const qint64 order = job->order;
    auto find = [this, key, order]() -> Job * {
        const auto it = m_jobs.find(key);
        return it != m_jobs.end() && it->second->order == order ? it->second.get() : nullptr;
    };
    Job &j = *job;
    j.connections.push_back(connect(coordinator, &CoordinatorThread::joinAnswered, this,
                                    [this, find](qint64 ticket, qint64 workerId, const QString &error) {
                                        if (Job *job = find())
                                            onJoined(*job, ticket, workerId, error);
                                    }));
    j.connections.push_back(connect(coordinator, &CoordinatorThread::requestAnswered, this,
                                    [this, find](qint64 ticket, const std::optional<Assignment> &a, bool finished,
                                                 bool dismissed, bool roundFull) {
                                        if (Job *job = find())
                                            onAssigned(*job, ticket, a, finished, dismissed, roundFull);
                                    }));
    // A fold (of a round) is when parked Requests may be granted: asked again once per turn
    // of the event loop, however many results the fold assimilated.
    j.connections.push_back(connect(coordinator, &CoordinatorThread::assimilated, this, [this, find] {
        Job *job = find();
        if (!job || job->parked.empty() || job->unparkQueued)
            return;
        job->unparkQueued = true;
        QTimer::singleShot(0, this, [this, find] {
            if (Job *again = find()) {
                again->unparkQueued = false;
                unpark(*again);
            }
        });
    }));
    j.connections.push_back(connect(coordinator, &CoordinatorThread::submitAnswered, this,
                                    [this, find](qint64 ticket, const SubmitReply &reply) {
                                        if (Job *job = find())
                                            onSubmitted(*job, ticket, reply);
                                    }));
    j.connections.push_back(connect(coordinator, &CoordinatorThread::leaseSuperseded, this,
                                    [this, find](qint64 workerId, qint64 leaseId) {
                                        Job *job = find();
                                        if (!job)
                                            return;
                                        for (const auto &[connection, worker] : m_connected)
                                            if (worker.workerId == workerId && worker.job == job->key)
                                                m_listener->send(connection,
                                                                 net::CancelMsg{leaseId,
                                                                                QStringLiteral("another worker's result "
                                                                                               "completed the subtask"),
                                                                                false, job->key});
                                    }));
    // Told, not waited for: a worker that is training a copy, reconnecting or waiting out a
    // retry would otherwise ask only after the endpoint has gone, and wait for ever.
    j.connections.push_back(coordinator->whenEnded(this, [this, find](bool done, const QString &) {
        if (Job *job = find())
            onJobEnded(*job, done);
    }));
    m_jobs.emplace(key, std::move(job));
    qCInfo(lcScheduling).noquote() << "serving job" << key << "with weight" << j.weight;
    // People who waited for a job watch this one.
    for (const auto &[connection, person] : std::map<qint64, Person>(m_people))
        if (person.job.isEmpty())
            attachPerson(connection);
    // Workers waiting for a job take this one; the others come as their shares say, between
    // two of their subtasks.
    for (const auto &[connection, worker] : std::map<qint64, ConnectedWorker>(m_connected))
        if (worker.job.isEmpty() && worker.joining.isEmpty())
            place(connection);
    return {};
}

void FleetServer::removeJob(const QString &key)
{
    const auto it = m_jobs.find(key);
    if (it == m_jobs.end())
        return;
    std::unique_ptr<Job> job = std::move(it->second);
    m_jobs.erase(it);
    for (const auto &c : job->connections)
        disconnect(c);
    for (const qint64 connection : job->operators->connections()) {
        if (!m_fleet) {
            m_listener->close(connection,
                              QStringLiteral("the job '%1' is no longer served; attach again to watch another").arg(key),
                              false, false);
            continue;
        }
        // In a fleet, a person stays connected and watches the next job (or waits).
        job->operators->onClosed(connection);
        if (const auto it = m_people.find(connection); it != m_people.end())
            it->second.job.clear();
    }
    delete job->operators;
    for (const auto &[connection, person] : std::map<qint64, Person>(m_people))
        if (person.job.isEmpty())
            attachPerson(connection);
    qCInfo(lcScheduling).noquote() << "no longer serving job" << key;
    for (auto &[connection, worker] : m_connected) {
        if (worker.job == key || worker.joining == key) {
            worker.job.clear();
            worker.joining.clear();
        }
    }
    for (const auto &[connection, worker] : std::map<qint64, ConnectedWorker>(m_connected))
        if (worker.job.isEmpty() && worker.joining.isEmpty())
            place(connection, key);
}

void FleetServer::setJobWeight(const QString &key, double weight)
{
    if (const auto it = m_jobs.find(key); it != m_jobs.end() && weight > 0 && std::isfinite(weight))
        it->second->weight = weight;
}

void FleetServer::leaveJob(ConnectedWorker &worker, const QString &reason)
{
    if (const auto it = m_jobs.find(worker.job); it != m_jobs.end())
        it->second->coordinator->leave(worker.workerId, reason);
    worker.job.clear();
}

void FleetServer::sendWelcome(qint64 connectionId, const ConnectedWorker &worker, const Job *job,
                              const QString &waiting)
{
    net::WelcomeMsg welcome;
    welcome.workerId = worker.workerId;
    welcome.waiting = waiting;
    if (!job) {
        // Nothing to train: the worker waits, connected, for the next Welcome.
        welcome.heartbeatMs = 2000;
        welcome.heartbeatTimeoutMs = 30000;
        m_listener->send(connectionId, welcome);
        return;
    }
    const JobSpec &spec = job->spec;
    welcome.job = spec.name;
    welcome.jobKey = job->key;
    welcome.model = QString::fromUtf8(
        QJsonDocument(spec.toJson().value(QStringLiteral("model")).toObject()).toJson(QJsonDocument::Compact));
    welcome.modelSha256 = job->modelSha256;
    welcome.inputShape.assign(job->data->inputShape.begin(), job->data->inputShape.end());
    welcome.classes = job->data->numClasses;
    welcome.layout = job->layout.digest();
    welcome.weights = weightManifest(job->layout);
    welcome.seed = spec.training.seed;
    welcome.heartbeatMs = spec.fleet.heartbeatIntervalMs();
    welcome.heartbeatTimeoutMs = qint64(spec.fleet.heartbeatTimeoutSeconds * 1000.0);
    welcome.compression = spec.fleet.compression;
    welcome.batchSize = spec.training.batchSize;
    welcome.precision = spec.training.precision;
    welcome.task = spec.training.task;
    m_listener->send(connectionId, welcome);
}

void FleetServer::onJobEnded(Job &job, bool done)
{
    if (m_fleet)
        return; // the fleet service removes the job, and its workers go on to the next
    if (!done)
        return;
    for (const auto &[connection, worker] : m_connected)
        if (worker.job == job.key)
            m_listener->send(connection, net::NoWorkMsg{1000, true, false});
}

FleetServer::Job *FleetServer::jobFor(const ConnectedWorker &worker, const QString &named)
{
    const auto it = m_jobs.find(named.isEmpty() ? worker.job : named);
    return it != m_jobs.end() ? it->second.get() : nullptr;
}

FleetServer::~FleetServer() = default;

QString FleetServer::addressOf(qint64 workerId) const
{
    QMutexLocker lock(&m_addressMutex);
    return m_addresses.value(workerId);
}

Result<void> FleetServer::listen()
{
    return m_listener->listen();
}

bool FleetServer::isQueueAction(const QString &action)
{
    return action == QLatin1String("jobs") || action == QLatin1String("submit") || action.startsWith(QLatin1String("job-"));
}

void FleetServer::answer(qint64 connectionId, const QCborMap &reply, const QByteArray &payload)
{
    if (m_people.count(connectionId))
        m_listener->send(connectionId, net::MessageType::Reply, reply, payload);
}

void FleetServer::attachPerson(qint64 connectionId)
{
    const auto it = m_people.find(connectionId);
    if (it == m_people.end())
        return;
    Person &person = it->second;
    // A person watches the job served longest (the one job, outside a fleet).
    Job *first = nullptr;
    for (const auto &[key, job] : m_jobs)
        if (!first || job->order < first->order)
            first = job.get();
    if (first) {
        person.job = first->key;
        first->operators->attach(person.peer);
        return;
    }
    if (!m_fleet) {
        m_listener->close(connectionId, QStringLiteral("this coordinator serves no job now"), false, false);
        return;
    }
    // A fleet that runs no job: the person stays, may use the queue, and is welcomed again
    // (and so watches) when the next job starts.
    person.job.clear();
    m_listener->send(connectionId, net::WelcomeMsg{});
}

void FleetServer::onPersonMessage(qint64 connectionId, const net::Message &message)
{
    Person &person = m_people.at(connectionId);
    if (message.type == MessageType::Command) {
        auto command = net::CommandMsg::decode(message.header);
        if (!command) {
            m_listener->close(connectionId, command.error());
            return;
        }
        if (isQueueAction(command->action)) {
            if (!m_fleet) {
                m_listener->send(connectionId,
                                 net::ReplyMsg{command->id, command->action,
                                               QStringLiteral("this coordinator runs one job, not a fleet: it has no "
                                                              "queue (flotilla serve without a job runs a fleet)"),
                                               {}});
                return;
            }
            Q_EMIT queueCommand(connectionId, person.peer.workerName, person.peer.role == net::Role::Operator,
                                message.header, message.payload);
            return;
        }
    }
    if (const auto job = m_jobs.find(person.job); !person.job.isEmpty() && job != m_jobs.end()) {
        job->second->operators->onMessage(connectionId, message);
        return;
    }
    net::dispatch(
        message,
        net::Handlers{
            [&](const net::WatchMsg &) {
                net::UpdateMsg idle;
                idle.reset = true;
                idle.state = QStringLiteral("idle");
                idle.message = QStringLiteral("this fleet runs no job now; a submitted job starts when its turn comes");
                m_listener->send(connectionId, idle, encodeBatch({}));
            },
            [&](const net::CommandMsg &command) {
                const QString by = person.peer.workerName;
                if (auto answered = OperatorService::fleetCommand(
                        *m_listener, m_options.hostNames.value(0, QStringLiteral("127.0.0.1")), by, person.peer.role,
                        command)) {
                    m_listener->send(connectionId, *answered);
                    return;
                }
                if (command.action == QLatin1String("release")) {
                    const bool administrator = person.peer.role == net::Role::Operator;
                    if (administrator)
                        releaseInFleet(command.workerId, QStringLiteral("operator %1").arg(by));
                    m_listener->send(
                        connectionId,
                        net::ReplyMsg{command.id, command.action,
                                      administrator ? QString()
                                                    : QStringLiteral("%1 is a submitter: only an operator, the "
                                                                     "fleet's administrator, may release")
                                                          .arg(by),
                                      administrator ? QStringLiteral("released worker %1").arg(command.workerId)
                                                    : QString()});
                    return;
                }
                m_listener->send(connectionId,
                                 net::ReplyMsg{command.id, command.action,
                                               QStringLiteral("this fleet runs no job now: there is no job to %1")
                                                   .arg(command.action),
                                               {}});
            },
            [&](const net::EchoMsg &echo) { m_listener->send(connectionId, echo); },
            [&](const net::ByeMsg &) {
                m_listener->close(connectionId, QStringLiteral("%1 said goodbye").arg(person.peer.workerName), false,
                                  false);
            }},
        [&](const net::Message &other) {
            m_listener->close(connectionId,
                              QStringLiteral("%1 '%2' sent %3: a person's certificate watches and manages jobs, it "
                                             "never trains (a worker joins with a worker's token)")
                                  .arg(net::describe(person.peer.role), person.peer.workerName,
                                       net::describe(other.type)),
                              true);
        },
        [&](const QString &why) { m_listener->close(connectionId, why); });
}

void FleetServer::onHello(const net::PeerInfo &peer, const net::HelloMsg &hello)
{
    if (net::isPerson(peer.role)) {
        m_people[peer.connectionId] = Person{peer, {}};
        attachPerson(peer.connectionId);
        return;
    }
    ConnectedWorker worker;
    worker.workerId = peer.workerId;
    worker.fingerprint = peer.fingerprint;
    worker.name = peer.workerName;
    worker.info.name = peer.workerName;
    worker.info.instanceType = hello.instanceType;
    worker.info.priceClass = hello.priceClass;
    worker.info.device = hello.device.left(64);
    worker.info.threads = int(std::clamp<qint64>(hello.threads, 0, 4096));
    worker.info.samplesPerSecond = hello.samplesPerSecond;
    worker.memoryMb = std::clamp<qint64>(hello.memoryMb, 0, qint64(1) << 40);
    if (!std::isfinite(worker.info.samplesPerSecond) || worker.info.samplesPerSecond < 0)
        worker.info.samplesPerSecond = 0;
    // A worker connected twice (a reconnect racing the old connection): keep the newest.
    for (auto it = m_connected.begin(); it != m_connected.end();) {
        if (it->second.workerId == worker.workerId && it->first != peer.connectionId) {
            const qint64 old = it->first;
            it = m_connected.erase(it);
            m_listener->close(old, QStringLiteral("the worker connected again"));
        } else {
            ++it;
        }
    }
    m_connected[peer.connectionId] = worker;
    {
        QMutexLocker lock(&m_addressMutex);
        m_addresses.insert(worker.workerId, peer.address);
    }
    place(peer.connectionId);
}

void FleetServer::onClosed(qint64 connectionId)
{
    m_people.erase(connectionId);
    for (auto &[key, job] : m_jobs) {
        job->operators->onClosed(connectionId);
        job->parked.erase(connectionId);
        for (auto *pending : {&job->joins, &job->requests, &job->results})
            for (auto &[ticket, p] : *pending)
                if (p.connectionId == connectionId)
                    p.closed = true;
    }
    m_connected.erase(connectionId);
}

void FleetServer::onOverBudget(const net::PeerInfo &peer, const QString &reason, bool barred)
{
    if (net::isPerson(peer.role))
        return; // a person is not a worker of the job: the listener's log says it
    qint64 workerId = peer.workerId;
    QString key;
    if (const auto it = m_connected.find(peer.connectionId); it != m_connected.end()) {
        workerId = it->second.workerId;
        key = it->second.job.isEmpty() ? it->second.joining : it->second.job;
    }
    if (workerId == 0)
        return; // never joined: nothing of the job's to hold it against
    // The job it works for (or is joining) holds it against the worker; one between jobs,
    // or a connection closed before it was placed, answers to the job served longest.
    auto it = m_jobs.find(key);
    if (it == m_jobs.end())
        it = std::min_element(m_jobs.begin(), m_jobs.end(),
                              [](const auto &a, const auto &b) { return a.second->order < b.second->order; });
    if (it == m_jobs.end())
        return;
    CoordinatorThread *coordinator = it->second->coordinator;
    coordinator->recordEvent(EventKind::WorkerOverBudget, workerId,
                             QStringLiteral("%1's connection was closed: it %2").arg(peer.workerName, reason));
    if (barred) {
        const QString why =
            QStringLiteral("its connections went over their budgets again and again (the last: it %1)").arg(reason);
        coordinator->quarantineAsync(workerId, why);
        // What the fleet saw itself, whichever job's checks the worker was under.
        if (m_fleet)
            quarantineInFleet(workerId, why);
    }
}

void FleetServer::onJoined(Job &job, qint64 ticket, qint64 workerId, const QString &error)
{
    const auto it = job.joins.find(ticket);
    if (it == job.joins.end())
        return;
    const Pending pending = it->second;
    job.joins.erase(it);
    const auto connected = m_connected.find(pending.connectionId);
    if (pending.closed || connected == m_connected.end()) {
        if (error.isEmpty())
            job.coordinator->leave(workerId, QStringLiteral("its connection closed while it joined"));
        return;
    }
    ConnectedWorker &worker = connected->second;
    if (worker.joining != job.key) {
        // Placed elsewhere meanwhile (or quarantined): the job lets it go again.
        if (error.isEmpty() && worker.job != job.key)
            job.coordinator->leave(workerId, QStringLiteral("the fleet placed it elsewhere while it joined"));
        return;
    }
    worker.joining.clear();
    if (!error.isEmpty()) {
        if (!m_fleet || m_jobs.size() < 2) {
            m_listener->close(pending.connectionId, QStringLiteral("cannot join the job: %1").arg(error), true);
            return;
        }
        // Another job of the fleet may take it (this one quarantined it, say).
        qCInfo(lcScheduling).noquote() << worker.name << "cannot join job" << job.key << "-" << error;
        sendWelcome(pending.connectionId, worker, nullptr);
        return;
    }
    if (workerId != worker.workerId)
        qCWarning(lcScheduling).noquote() << "job" << job.key << "knows" << worker.name << "as worker" << workerId
                                      << "- the fleet as" << worker.workerId;
    worker.workerId = workerId;
    worker.job = job.key;
    sendWelcome(pending.connectionId, worker, &job);
    Q_EMIT workerPlaced(workerId, job.key);
}

void FleetServer::onMessage(qint64 connectionId, const net::Message &message)
{
    if (m_people.count(connectionId)) {
        onPersonMessage(connectionId, message);
        return;
    }
    const auto it = m_connected.find(connectionId);
    if (it == m_connected.end())
        return;
    ConnectedWorker &worker = it->second;
    const auto onlyForPeople = [&](const net::Message &m) {
        m_listener->close(connectionId,
                          QStringLiteral("worker '%1' sent %2, which only an operator may send (or a submitter): its "
                                         "certificate was issued to a worker (a person attaches with a token from "
                                         "flotilla token --operator or --submitter)")
                              .arg(worker.name, net::describe(m.type)),
                          true);
    };
    if (message.type == MessageType::Watch || message.type == MessageType::Command) {
        onlyForPeople(message);
        return;
    }
    net::dispatch(
        message,
        net::Handlers{
            [&](const net::RequestMsg &request) { onRequest(connectionId, worker, request); },
            [&](const net::ShardRequestMsg &request) { sendShard(connectionId, worker, request); },
            [&](const net::ModelRequestMsg &request) { sendModel(connectionId, request); },
            [&](const net::EchoMsg &echo) { m_listener->send(connectionId, echo); },
            [&](const net::HeartbeatMsg &beat) {
                // Every job it works or worked for hears it is alive: one it is not in any more
                // has let it go already.
                if (Job *job = jobFor(worker, beat.job))
                    job->coordinator->heartbeat(worker.workerId,
                                                beat.job.isEmpty() || beat.job == worker.job ? beat.lease : 0,
                                                beat.done, beat.planned);
            },
            [&](const net::ResultMsg &result) { receiveResult(connectionId, worker, result, message.payload); },
            [&](const net::HandBackMsg &handBack) {
                if (Job *job = jobFor(worker, handBack.job))
                    job->coordinator->handBack(worker.workerId, handBack.lease,
                                               QStringLiteral("handed back by the worker: %1").arg(handBack.reason.left(500)),
                                               handBack.failed);
            },
            [&](const net::ByeMsg &bye) {
                const QString reason = bye.reason.left(500);
                if (Job *job = jobFor(worker, {})) {
                    if (reason == QLatin1String("preempted"))
                        job->coordinator->recordEvent(EventKind::WorkerPreempted, worker.workerId,
                                                      QStringLiteral("preemption notice: the worker handed in its work "
                                                                     "and left"));
                    job->coordinator->leave(worker.workerId, QStringLiteral("the worker left: %1").arg(reason));
                }
                m_connected.erase(connectionId);
                m_listener->close(connectionId, QStringLiteral("goodbye"), false, false);
            }},
        [&](const net::Message &other) {
            m_listener->close(connectionId, QStringLiteral("sent an unexpected %1 message").arg(net::describe(other.type)));
        },
        // A header that does not decode closes the connection, as any other violation of the protocol.
        [&](const QString &why) { m_listener->close(connectionId, why); });
}

void FleetServer::onRequest(qint64 connectionId, ConnectedWorker &worker, const net::RequestMsg &request)
{
    Job *job = jobFor(worker, {});
    if (!job) {
        // Waiting, or joining a job: the Welcome that comes says what to do.
        if (worker.joining.isEmpty())
            sendWelcome(connectionId, worker, nullptr, waitingReason(worker));
        return;
    }
    // Between two subtasks is when a worker may go where the shares want it.
    if (const QString to = moveTarget(worker, job->key); !to.isEmpty()) {
        qCInfo(lcScheduling).noquote() << worker.name << "moves from job" << job->key << "to" << to;
        leaveJob(worker, QStringLiteral("moved to job %1 of the fleet").arg(to));
        Job &next = *m_jobs.at(to);
        worker.joining = to;
        Pending pending;
        pending.connectionId = connectionId;
        pending.workerId = worker.workerId;
        next.joins[next.coordinator->join(worker.info, worker.workerId)] = pending;
        return;
    }
    Pending pending;
    pending.connectionId = connectionId;
    pending.workerId = worker.workerId;
    pending.takesChanges = request.takesChanges;
    pending.anchor = request.anchor;
    job->requests[job->coordinator->request(worker.workerId, request.samplesPerSecond)] = pending;
}

const FleetServer::EncodedShard &FleetServer::encodedShard(Job &job, int shard)
{
    auto it = job.shardCache.find(shard);
    if (it == job.shardCache.end()) {
        const Dataset samples = job.data->train.select(job.data->plan.shard(shard));
        EncodedShard e;
        e.manifest = shardManifest(samples);
        e.bytes = shardToBytes(samples);
        e.sha = shardDigest(e.manifest, e.bytes);
        job.shardSha[shard] = e.sha;
        job.shardCacheBytes += e.bytes.size();
        it = job.shardCache.emplace(shard, std::move(e)).first;
        // The least recently used make way, never the one just made.
        while (job.shardCacheBytes > kShardCacheBytes && job.shardCache.size() > 1) {
            auto oldest = job.shardCache.end();
            for (auto c = job.shardCache.begin(); c != job.shardCache.end(); ++c)
                if (c->first != shard
                    && (oldest == job.shardCache.end() || c->second.lastUsed < oldest->second.lastUsed))
                    oldest = c;
            job.shardCacheBytes -= oldest->second.bytes.size();
            job.shardCache.erase(oldest);
        }
    }
    it->second.lastUsed = ++job.shardUses;
    return it->second;
}

QByteArray FleetServer::shardSha(Job &job, int shard)
{
    const auto it = job.shardSha.find(shard);
    return it != job.shardSha.end() ? it->second : encodedShard(job, shard).sha;
}

void FleetServer::unpark(Job &job)
{
    std::map<qint64, std::pair<Pending, qint64>> parked;
    parked.swap(job.parked);
    for (const auto &[connectionId, entry] : parked) {
        const auto connected = m_connected.find(connectionId);
        if (connected == m_connected.end() || connected->second.job != job.key)
            continue;
        job.requests[job.coordinator->request(entry.first.workerId, 0.0)] = entry.first;
    }
}

void FleetServer::onAssigned(Job &job, qint64 ticket, const std::optional<Assignment> &a, bool finished,
                             bool dismissed, bool roundFull)
{
    const auto it = job.requests.find(ticket);
    if (it == job.requests.end())
        return;
    const Pending pending = it->second;
    job.requests.erase(it);
    const qint64 connectionId = pending.connectionId;
    const auto connected = m_connected.find(connectionId);
    if (pending.closed || connected == m_connected.end() || connected->second.job != job.key) {
        if (a)
            job.coordinator->handBack(pending.workerId, a->leaseId,
                                      QStringLiteral("the worker's connection closed before the lease reached it"));
        return;
    }
    if (!a) {
        job.finished = job.finished || finished;
        if (dismissed)
            job.closedUntilMs = m_clock.elapsed() + kDismissedClosedMs;
        if (m_fleet && (finished || dismissed)) {
            // Nothing left here for this machine: the fleet has other work for it, or it waits.
            leaveJob(connected->second, finished ? QStringLiteral("the job is finished")
                                                 : QStringLiteral("dismissed: the job has no work left for it"));
            place(connectionId, job.key);
            return;
        }
        // The round is full: the Request waits for its fold, up to a while (a straggler's
        // lease expires meanwhile, or the worker gets NoWork and asks again, paced).
        if (roundFull && !finished && !dismissed) {
            const qint64 since = m_clock.elapsed();
            job.parked[connectionId] = {pending, since};
            const QString key = job.key;
            QTimer::singleShot(kParkedMs, this, [this, key, connectionId, since] {
                const auto it = m_jobs.find(key);
                if (it == m_jobs.end())
                    return;
                const auto parked = it->second->parked.find(connectionId);
                if (parked == it->second->parked.end() || parked->second.second != since)
                    return;
                it->second->parked.erase(parked);
                if (m_connected.count(connectionId))
                    m_listener->send(connectionId, net::NoWorkMsg{250, false, false});
            });
            return;
        }
        // Jittered, so that idle workers at an epoch's end do not all ask again at once.
        const int retryMs = 250 + int(QRandomGenerator::global()->bounded(500));
        m_listener->send(connectionId, net::NoWorkMsg{retryMs, finished, dismissed});
        return;
    }
    job.closedUntilMs = 0; // it has work again
    net::AssignMsg assign;
    assign.lease = a->leaseId;
    assign.subtask = a->subtaskId;
    assign.epoch = a->epoch;
    assign.shard = a->shard;
    assign.begin = a->begin;
    assign.end = a->end;
    assign.baseVersion = a->baseVersion;
    assign.deadlineMs = a->deadlineMs;
    assign.shardSamples = qint64(job.data->plan.shardSize(a->shard));
    assign.shardSha256 = shardSha(job, a->shard);
    writeTraining(a->config, assign);
    // A new anchor every 8 assimilations per worker connected: with about one assimilation per
    // subtask, a worker is sent an anchor whole once per 8 to 16 of its subtasks, and a change
    // from it for the others.
    const qint64 refresh = std::max<qint64>(32, 8 * qint64(m_connected.size()));
    const auto weights = job.downlink->encode(a->baseSeq, a->weights, pending.anchor, pending.takesChanges, refresh);
    assign.change = compressionName(weights.form.change);
    assign.anchor = weights.form.anchor;
    assign.anchorIncluded = weights.form.anchorIncluded;
    job.coordinator->countWeightsSent(weights.payload.size(), weights.form.change == Compression::None,
                                      weights.form.anchorIncluded);
    m_listener->send(connectionId, assign, weights.payload);
}

void FleetServer::sendShard(qint64 connectionId, const ConnectedWorker &worker, const net::ShardRequestMsg &request)
{
    Job *job = jobFor(worker, {});
    if (!job)
        return; // its job is no longer served: the Welcome it was sent tells it
    const qint64 shard = request.shard;
    if (shard >= job->data->plan.numShards()) {
        m_listener->close(connectionId, QStringLiteral("asked for shard %1, which this job does not have").arg(shard));
        return;
    }
    const EncodedShard &encoded = encodedShard(*job, int(shard));
    m_listener->send(connectionId, net::ShardDataMsg{shard, encoded.manifest}, encoded.bytes);
}

void FleetServer::sendModel(qint64 connectionId, const net::ModelRequestMsg &request)
{
    for (const auto &[key, job] : m_jobs)
        if (!job->modelSha256.isEmpty() && job->modelSha256 == request.sha256) {
            m_listener->send(connectionId, net::ModelDataMsg{job->modelSha256, {}}, job->modelBytes);
            return;
        }
    m_listener->send(connectionId,
                     net::ModelDataMsg{request.sha256.left(64),
                                       QStringLiteral("no job of this fleet trains a model with that SHA-256")});
}

void FleetServer::receiveResult(qint64 connectionId, const ConnectedWorker &worker, const net::ResultMsg &header,
                                const QByteArray &payload)
{
    Job *job = jobFor(worker, header.job);
    if (!job) {
        // Its job ended (or the worker was moved and that job then ended): nothing is owed.
        m_listener->send(connectionId, net::AckMsg{header.lease, QStringLiteral("duplicate"),
                                                   QStringLiteral("the job '%1' is no longer served").arg(header.job),
                                                   0, 0, header.job});
        return;
    }
    const WeightLayout &layout = job->layout;
    SubtaskResult r;
    r.leaseId = header.lease;
    r.meanLoss = header.loss;
    r.sampleSteps = header.sampleSteps;
    r.covered = header.covered;
    r.seconds = header.seconds;
    r.partial = header.partial;
    r.wireBytes = payload.size();
    // The manifest and the bytes are checked before the weights become a tensor; a delta is
    // decoded by the coordinator, which holds the base it is a change from.
    const auto encoding = compressionFromName(header.encoding);
    if (auto manifest = checkWeightManifest(header.weights, layout); !manifest) {
        r.invalidReason = manifest.error();
    } else if (!encoding) {
        r.invalidReason = QStringLiteral("the result is encoded as '%1', which is not none, fp16 or int8")
                              .arg(header.encoding.left(40));
    } else if (*encoding != Compression::None) {
        r.encoding = *encoding;
        r.update = payload;
    } else if (auto weights = weightsFromBytes(payload, layout); !weights) {
        r.invalidReason = weights.error();
    } else {
        r.weights = *weights;
    }
    Pending pending;
    pending.connectionId = connectionId;
    pending.workerId = worker.workerId;
    pending.leaseId = r.leaseId;
    job->results[job->coordinator->submit(worker.workerId, std::move(r))] = pending;
}

void FleetServer::onSubmitted(Job &job, qint64 ticket, const SubmitReply &reply)
{
    const auto it = job.results.find(ticket);
    if (it == job.results.end())
        return;
    const Pending pending = it->second;
    job.results.erase(it);
    if (pending.closed)
        return; // nobody to tell: a worker that reconnects and sends it again hears "duplicate"
    const qint64 connectionId = pending.connectionId;
    const QString status = reply.status == SubmitStatus::Assimilated ? QStringLiteral("assimilated")
                           : reply.status == SubmitStatus::Held      ? QStringLiteral("held")
                           : reply.status == SubmitStatus::Duplicate ? QStringLiteral("duplicate")
                                                                     : QStringLiteral("rejected");
    m_listener->send(connectionId,
                     net::AckMsg{pending.leaseId, status, reply.reason, reply.seq, reply.version, job.key});
    // A duplicate is what an honest worker sends after a reconnect; a rejected result is not.
    if (reply.status == SubmitStatus::Rejected)
        m_listener->close(connectionId, QStringLiteral("its result was rejected: %1").arg(reply.reason));
}

} // namespace flotilla
