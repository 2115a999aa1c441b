#include "bridge/FleetServer.h"

#include "bridge/BridgeLog.h"
#include "common/Sha256.h"
#include "engine/WireFormat.h"

#include <QCryptographicHash>
#include <QFile>
#include <QJsonDocument>
#include <QRandomGenerator>

namespace flotilla {

namespace {

using net::MessageType;

// Encoded shards kept for the next connection that asks.
constexpr qint64 kShardCacheBytes = qint64(256) << 20;

// The header as its message's struct, or nothing when it is malformed: then the connection
// is closed, as for any other violation of the protocol.
template <typename Msg>
std::optional<Msg> decoded(net::TlsListener &endpoint, qint64 connectionId, const net::Message &message)
{
    auto m = Msg::decode(message.header);
    if (m)
        return std::move(m).value();
    endpoint.close(connectionId, m.error());
    return std::nullopt;
}

} // namespace

Result<std::unique_ptr<FleetServer>> FleetServer::create(CoordinatorThread *coordinator,
                                                                     const net::TlsListener::Options &options)
{
    auto endpoint = net::TlsListener::create(options);
    if (!endpoint)
        return endpoint.takeError();
    std::unique_ptr<FleetServer> s(new FleetServer);
    s->m_coordinator = coordinator;
    s->m_listener = std::move(endpoint).value();
    coordinator->withCoordinator([&](Coordinator &c) {
        s->m_spec = c.spec();
        s->m_data = c.data();
        s->m_layout = c.layout();
    });
    // Replicas of a subtask are compared with each other (fleet.redundancy): they must start
    // from the same weights bit for bit, not from two roundings of them.
    s->m_downlink = std::make_unique<DownlinkEncoder>(
        s->m_spec.fleet.redundancy > 0 ? Compression::None
                                       : compressionFromName(s->m_spec.fleet.compression).value_or(Compression::None),
        s->m_layout);
    if (s->m_spec.model.kind == QLatin1String("torchscript")) {
        QFile model(s->m_spec.model.path);
        if (!model.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("cannot read the TorchScript model '%1'").arg(s->m_spec.model.path));
        QCryptographicHash hash(QCryptographicHash::Sha256);
        hash.addData(&model);
        s->m_modelSha256 = QString::fromLatin1(hash.result().toHex());
    }
    // A result carries exactly the model's weights; nothing larger is accepted.
    s->m_listener->setPayloadLimit(MessageType::Result, std::uint64_t(s->m_layout.totalNumel) * 4);

    FleetServer *self = s.get();
    OperatorService::Options operatorOptions;
    coordinator->withCoordinator([&](Coordinator &c) { operatorOptions.runDir = c.runDir(); });
    operatorOptions.hostName = options.hostNames.value(0, QStringLiteral("127.0.0.1"));
    operatorOptions.addressOf = [self](const WorkerStatus &w) {
        return w.name.startsWith(QStringLiteral("local-")) ? QStringLiteral("the coordinator's machine")
                                                           : self->addressOf(w.id);
    };
    self->m_operators = new OperatorService(coordinator, *self->m_listener, std::move(operatorOptions), self);
    connect(self->m_operators, &OperatorService::stopRequested, self, &FleetServer::stopRequested);
    connect(self->m_listener.get(), &net::TlsListener::helloReceived, self, &FleetServer::onHello);
    connect(self->m_listener.get(), &net::TlsListener::messageReceived, self, &FleetServer::onMessage);
    connect(self->m_listener.get(), &net::TlsListener::overBudget, self, &FleetServer::onOverBudget);
    connect(self->m_listener.get(), &net::TlsListener::connectionClosed, self,
            [self](qint64 connectionId, const QString &) { self->onClosed(connectionId); });
    connect(coordinator, &CoordinatorThread::joinAnswered, self, &FleetServer::onJoined);
    connect(coordinator, &CoordinatorThread::requestAnswered, self, &FleetServer::onAssigned);
    connect(coordinator, &CoordinatorThread::submitAnswered, self, &FleetServer::onSubmitted);
    connect(coordinator, &CoordinatorThread::leaseSuperseded, self, [self](qint64 workerId, qint64 leaseId) {
        for (const auto &[connection, worker] : self->m_connected)
            if (worker.workerId == workerId)
                self->m_listener->send(
                    connection,
                    net::CancelMsg{leaseId, QStringLiteral("another worker's result completed the subtask")});
    });
    // Told, not waited for: a worker that is training a copy, reconnecting or waiting out a
    // retry would otherwise ask only after the endpoint has gone, and wait for ever.
    connect(coordinator, &CoordinatorThread::jobEnded, self, [self](bool done, const QString &) {
        if (!done)
            return;
        for (const auto &[connection, worker] : self->m_connected)
            self->m_listener->send(connection, net::NoWorkMsg{1000, true, false});
    });
    return s;
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

void FleetServer::onHello(const net::PeerInfo &peer, const net::HelloMsg &hello)
{
    if (peer.role == net::Role::Operator) {
        m_operators->attach(peer);
        return;
    }
    WorkerInfo info;
    info.name = peer.workerName;
    info.instanceType = hello.instanceType;
    info.priceClass = hello.priceClass;
    info.device = hello.device.left(16);
    info.threads = int(std::clamp<qint64>(hello.threads, 0, 4096));
    info.samplesPerSecond = hello.samplesPerSecond;
    if (!std::isfinite(info.samplesPerSecond) || info.samplesPerSecond < 0)
        info.samplesPerSecond = 0;
    Pending pending;
    pending.connectionId = peer.connectionId;
    pending.peer = peer;
    m_joins[m_coordinator->join(info, peer.workerId)] = pending;
}

void FleetServer::onClosed(qint64 connectionId)
{
    m_operators->onClosed(connectionId);
    m_connected.erase(connectionId);
    for (auto *pending : {&m_joins, &m_requests, &m_results})
        for (auto &[ticket, p] : *pending)
            if (p.connectionId == connectionId)
                p.closed = true;
}

void FleetServer::onOverBudget(const net::PeerInfo &peer, const QString &reason, bool barred)
{
    if (peer.role == net::Role::Operator)
        return; // an operator is not a worker of the job: the listener's log says it
    qint64 workerId = peer.workerId;
    if (const auto it = m_connected.find(peer.connectionId); it != m_connected.end())
        workerId = it->second.workerId;
    if (workerId == 0)
        return; // never joined: nothing of the job's to hold it against
    m_coordinator->recordEvent(EventKind::WorkerOverBudget, workerId,
                               QStringLiteral("%1's connection was closed: it %2").arg(peer.workerName, reason));
    if (barred)
        m_coordinator->quarantineAsync(workerId,
                                       QStringLiteral("its connections went over their budgets again and again (the "
                                                      "last: it %1)")
                                           .arg(reason));
}

void FleetServer::onJoined(qint64 ticket, qint64 workerId, const QString &error)
{
    const auto it = m_joins.find(ticket);
    if (it == m_joins.end())
        return; // another server's
    const Pending pending = it->second;
    m_joins.erase(it);
    const net::PeerInfo &peer = pending.peer;
    if (!error.isEmpty()) {
        if (!pending.closed)
            m_listener->close(peer.connectionId, QStringLiteral("cannot join the job: %1").arg(error), true);
        return;
    }
    if (pending.closed) {
        m_coordinator->leave(workerId, QStringLiteral("its connection closed while it joined"));
        return;
    }
    if (workerId != peer.workerId) {
        if (auto r = m_listener->setWorkerId(peer.fingerprint, workerId); !r)
            qCWarning(lcBridge).noquote() << r.error();
    }
    // A worker connected twice (a reconnect racing the old connection): keep the newest.
    for (auto it = m_connected.begin(); it != m_connected.end();) {
        if (it->second.workerId == workerId && it->first != peer.connectionId) {
            const qint64 old = it->first;
            it = m_connected.erase(it);
            m_listener->close(old, QStringLiteral("the worker connected again"));
        } else {
            ++it;
        }
    }
    m_connected[peer.connectionId] = ConnectedWorker{workerId, peer.fingerprint, peer.workerName};
    {
        QMutexLocker lock(&m_addressMutex);
        m_addresses.insert(workerId, peer.address);
    }

    net::WelcomeMsg welcome;
    welcome.workerId = workerId;
    welcome.job = m_spec.name;
    welcome.model = QString::fromUtf8(
        QJsonDocument(m_spec.toJson().value(QStringLiteral("model")).toObject()).toJson(QJsonDocument::Compact));
    welcome.modelSha256 = m_modelSha256;
    welcome.inputShape.assign(m_data->inputShape.begin(), m_data->inputShape.end());
    welcome.classes = m_data->numClasses;
    welcome.layout = m_layout.digest();
    welcome.weights = weightManifest(m_layout);
    welcome.seed = m_spec.training.seed;
    welcome.heartbeatMs = m_spec.fleet.heartbeatIntervalMs();
    welcome.heartbeatTimeoutMs = qint64(m_spec.fleet.heartbeatTimeoutSeconds * 1000.0);
    welcome.compression = m_spec.fleet.compression;
    m_listener->send(peer.connectionId, welcome);
}

void FleetServer::onMessage(qint64 connectionId, const net::Message &message)
{
    if (m_operators->serves(connectionId)) {
        m_operators->onMessage(connectionId, message);
        return;
    }
    const auto it = m_connected.find(connectionId);
    if (it == m_connected.end())
        return;
    const ConnectedWorker worker = it->second;
    switch (message.type) {
    case MessageType::Watch:
    case MessageType::Command:
        m_listener->close(connectionId,
                          QStringLiteral("worker '%1' sent %2, which only an operator may send: its certificate was "
                                         "issued to a worker (an operator attaches with a token from flotilla token "
                                         "--operator)")
                              .arg(worker.name, net::describe(message.type)),
                          true);
        return;
    case MessageType::Request: {
        const auto request = decoded<net::RequestMsg>(*m_listener, connectionId, message);
        if (!request)
            return;
        Pending pending;
        pending.connectionId = connectionId;
        pending.workerId = worker.workerId;
        pending.takesChanges = request->takesChanges;
        pending.anchor = request->anchor;
        m_requests[m_coordinator->request(worker.workerId, request->samplesPerSecond)] = pending;
        return;
    }
    case MessageType::ShardRequest:
        if (const auto request = decoded<net::ShardRequestMsg>(*m_listener, connectionId, message))
            sendShard(connectionId, *request);
        return;
    case MessageType::Echo:
        if (const auto echo = decoded<net::EchoMsg>(*m_listener, connectionId, message))
            m_listener->send(connectionId, *echo);
        return;
    case MessageType::Heartbeat:
        if (const auto beat = decoded<net::HeartbeatMsg>(*m_listener, connectionId, message))
            m_coordinator->heartbeat(worker.workerId, beat->lease, beat->done, beat->planned);
        return;
    case MessageType::Result:
        if (const auto result = decoded<net::ResultMsg>(*m_listener, connectionId, message))
            receiveResult(connectionId, worker, *result, message.payload);
        return;
    case MessageType::HandBack:
        if (const auto handBack = decoded<net::HandBackMsg>(*m_listener, connectionId, message))
            m_coordinator->handBack(worker.workerId, handBack->lease,
                                    QStringLiteral("handed back by the worker: %1").arg(handBack->reason.left(500)),
                                    handBack->failed);
        return;
    case MessageType::Bye: {
        const auto bye = decoded<net::ByeMsg>(*m_listener, connectionId, message);
        if (!bye)
            return;
        const QString reason = bye->reason.left(500);
        if (reason == QLatin1String("preempted"))
            m_coordinator->recordEvent(EventKind::WorkerPreempted, worker.workerId,
                                       QStringLiteral("preemption notice: the worker handed in its work and left"));
        m_coordinator->leave(worker.workerId, QStringLiteral("the worker left: %1").arg(reason));
        m_connected.erase(connectionId);
        m_listener->close(connectionId, QStringLiteral("goodbye"), false, false);
        return;
    }
    default:
        m_listener->close(connectionId, QStringLiteral("sent an unexpected %1 message").arg(net::describe(message.type)));
    }
}

const FleetServer::EncodedShard &FleetServer::encodedShard(int shard)
{
    auto it = m_shardCache.find(shard);
    if (it == m_shardCache.end()) {
        const Dataset samples = m_data->train.select(m_data->plan.shard(shard));
        EncodedShard e;
        e.manifest = shardManifest(samples);
        e.bytes = shardToBytes(samples);
        e.sha = shardDigest(e.manifest, e.bytes);
        m_shardSha[shard] = e.sha;
        m_shardCacheBytes += e.bytes.size();
        it = m_shardCache.emplace(shard, std::move(e)).first;
        // The least recently used make way, never the one just made.
        while (m_shardCacheBytes > kShardCacheBytes && m_shardCache.size() > 1) {
            auto oldest = m_shardCache.end();
            for (auto c = m_shardCache.begin(); c != m_shardCache.end(); ++c)
                if (c->first != shard && (oldest == m_shardCache.end() || c->second.lastUsed < oldest->second.lastUsed))
                    oldest = c;
            m_shardCacheBytes -= oldest->second.bytes.size();
            m_shardCache.erase(oldest);
        }
    }
    it->second.lastUsed = ++m_shardUses;
    return it->second;
}

QByteArray FleetServer::shardSha(int shard)
{
    const auto it = m_shardSha.find(shard);
    return it != m_shardSha.end() ? it->second : encodedShard(shard).sha;
}

void FleetServer::onAssigned(qint64 ticket, const std::optional<Assignment> &a, bool finished, bool dismissed)
{
    const auto it = m_requests.find(ticket);
    if (it == m_requests.end())
        return;
    const Pending pending = it->second;
    m_requests.erase(it);
    const qint64 connectionId = pending.connectionId;
    if (pending.closed) {
        if (a)
            m_coordinator->handBack(pending.workerId, a->leaseId,
                                QStringLiteral("the worker's connection closed before the lease reached it"));
        return;
    }
    if (!a) {
        // Jittered, so that idle workers at an epoch's end do not all ask again at once.
        const int retryMs = 250 + int(QRandomGenerator::global()->bounded(500));
        m_listener->send(connectionId, net::NoWorkMsg{retryMs, finished, dismissed});
        return;
    }
    const TrainConfig &c = a->config;
    net::AssignMsg assign;
    assign.lease = a->leaseId;
    assign.subtask = a->subtaskId;
    assign.epoch = a->epoch;
    assign.shard = a->shard;
    assign.begin = a->begin;
    assign.end = a->end;
    assign.baseVersion = a->baseVersion;
    assign.deadlineMs = a->deadlineMs;
    assign.shardSamples = qint64(m_data->plan.shardSize(a->shard));
    assign.shardSha256 = shardSha(a->shard);
    assign.optimizer = c.optimizer;
    assign.learningRate = c.learningRate;
    assign.momentum = c.momentum;
    assign.weightDecay = c.weightDecay;
    assign.batchSize = c.batchSize;
    assign.localEpochs = c.localEpochs;
    assign.localSteps = c.localSteps;
    assign.seed = c.seed;
    if (c.schedule.active()) {
        assign.lrSchedule = c.schedule.kind;
        assign.lrBase = c.schedule.base;
        assign.lrTotalSteps = c.schedule.totalSteps;
        assign.lrWarmupSteps = c.schedule.warmupSteps;
        assign.lrFloor = c.schedule.floor;
        assign.lrStepEvery = c.schedule.stepEvery;
        assign.lrGamma = c.schedule.gamma;
        assign.firstStep = c.firstStep;
    }
    assign.freshOptimizer = c.freshOptimizer;
    // A new anchor every 8 assimilations per worker connected: with about one assimilation per
    // subtask, a worker is sent an anchor whole once per 8 to 16 of its subtasks, and a change
    // from it for the others.
    const qint64 refresh = std::max<qint64>(32, 8 * qint64(m_connected.size()));
    const auto weights = m_downlink->encode(a->baseSeq, a->weights, pending.anchor, pending.takesChanges, refresh);
    assign.change = compressionName(weights.form.change);
    assign.anchor = weights.form.anchor;
    assign.anchorIncluded = weights.form.anchorIncluded;
    m_coordinator->countWeightsSent(weights.payload.size(), weights.form.change == Compression::None,
                                    weights.form.anchorIncluded);
    m_listener->send(connectionId, assign, weights.payload);
}

void FleetServer::sendShard(qint64 connectionId, const net::ShardRequestMsg &request)
{
    const qint64 shard = request.shard;
    if (shard >= m_data->plan.numShards()) {
        m_listener->close(connectionId, QStringLiteral("asked for shard %1, which this job does not have").arg(shard));
        return;
    }
    const EncodedShard &encoded = encodedShard(int(shard));
    m_listener->send(connectionId, net::ShardDataMsg{shard, encoded.manifest}, encoded.bytes);
}

void FleetServer::receiveResult(qint64 connectionId, const ConnectedWorker &worker, const net::ResultMsg &header,
                                      const QByteArray &payload)
{
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
    if (auto manifest = checkWeightManifest(header.weights, m_layout); !manifest) {
        r.invalidReason = manifest.error();
    } else if (!encoding) {
        r.invalidReason = QStringLiteral("the result is encoded as '%1', which is not none, fp16 or int8")
                              .arg(header.encoding.left(40));
    } else if (*encoding != Compression::None) {
        r.encoding = *encoding;
        r.update = payload;
    } else if (auto weights = weightsFromBytes(payload, m_layout); !weights) {
        r.invalidReason = weights.error();
    } else {
        r.weights = *weights;
    }
    Pending pending;
    pending.connectionId = connectionId;
    pending.workerId = worker.workerId;
    pending.leaseId = r.leaseId;
    m_results[m_coordinator->submit(worker.workerId, std::move(r))] = pending;
}

void FleetServer::onSubmitted(qint64 ticket, const SubmitReply &reply)
{
    const auto it = m_results.find(ticket);
    if (it == m_results.end())
        return;
    const Pending pending = it->second;
    m_results.erase(it);
    if (pending.closed)
        return; // nobody to tell: a worker that reconnects and sends it again hears "duplicate"
    const qint64 connectionId = pending.connectionId;
    const QString status = reply.status == SubmitStatus::Assimilated ? QStringLiteral("assimilated")
                           : reply.status == SubmitStatus::Held      ? QStringLiteral("held")
                           : reply.status == SubmitStatus::Duplicate ? QStringLiteral("duplicate")
                                                                     : QStringLiteral("rejected");
    m_listener->send(connectionId, net::AckMsg{pending.leaseId, status, reply.reason, reply.seq, reply.version});
    // A duplicate is what an honest worker sends after a reconnect; a rejected result is not.
    if (reply.status == SubmitStatus::Rejected)
        m_listener->close(connectionId, QStringLiteral("its result was rejected: %1").arg(reply.reason));
}

} // namespace flotilla
