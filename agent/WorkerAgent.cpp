#include "agent/WorkerAgent.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "common/ProcessSetup.h"
#include "engine/data/JobData.h"
#include "engine/training/Device.h"
#include "engine/training/Precision.h"
#include "engine/wire/WireFormat.h"
#include "net/Dispatch.h"
#include "protocol/TrainingFields.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QtConcurrent>

#include <algorithm>
#include <cstdio>
#include <type_traits>

namespace flotilla {

namespace {

using net::MessageType;

// The SHA-256 of a file, lower-case hex; empty when it cannot be read.
QString fileSha(const QString &path)
{
    QFile file(path);
    QCryptographicHash hash(QCryptographicHash::Sha256);
    if (path.isEmpty() || !file.open(QIODevice::ReadOnly) || !hash.addData(&file))
        return QString();
    return QString::fromLatin1(hash.result().toHex());
}

// Runs `work` on `pool` and then `then` with its result on the context's thread; nothing runs
// when the context is gone by then.
template<typename Work, typename Then>
void offThread(QObject *context, QThreadPool *pool, Work work, Then then)
{
    using R = std::invoke_result_t<Work>;
    auto *watcher = new QFutureWatcher<R>(context);
    QObject::connect(watcher, &QFutureWatcherBase::finished, context, [watcher, then = std::move(then)]() mutable {
        watcher->deleteLater();
        then(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run(pool, std::move(work)));
}

} // namespace

WorkerAgent::WorkerAgent(Options options, QObject *parent)
    : QObject(parent), m_options(std::move(options)),
      m_shards(QDir(m_options.stateDir).filePath(QStringLiteral("shards")), m_options.shardCacheBytes,
               m_options.shardMemoryBytes)
{
    m_pool.setMaxThreadCount(1);
    m_files.setMaxThreadCount(1);
    m_paceClock.start();
    m_client = std::make_unique<net::WorkerClient>(net::WorkerClient::Options{m_options.stateDir, m_options.name});
    connect(m_client.get(), &net::WorkerClient::welcomed, this, &WorkerAgent::onWelcomed);
    connect(m_client.get(), &net::WorkerClient::messageReceived, this, &WorkerAgent::onMessage);
    connect(m_client.get(), &net::WorkerClient::failed, this, [this](const QString &reason) { finish(1, reason); });
    connect(m_client.get(), &net::WorkerClient::disconnected, this, [this](const QString &reason) {
        qCInfo(lcAgent).noquote() << "disconnected:" << reason << "(reconnecting; training goes on)";
        m_message = reason;
        m_asked = false; // a request on the lost connection is answered to nobody
        Q_EMIT statusChanged();
    });
    connect(&m_training, &QFutureWatcher<std::shared_ptr<Result<TrainOutcome>>>::finished, this, &WorkerAgent::onTrained);
    connect(&m_preparing, &QFutureWatcher<std::shared_ptr<Prepared>>::finished, this, &WorkerAgent::onPrepared);
    m_heartbeat.setInterval(2000);
    connect(&m_heartbeat, &QTimer::timeout, this, [this] {
        Q_EMIT statusChanged();
        if (m_client->isConnected())
            m_client->send(net::HeartbeatMsg{m_current ? m_current->leaseId : 0, m_done.load(), m_planned.load(),
                                             m_current ? m_current->jobKey : m_jobKey});
    });
    m_retry.setSingleShot(true);
    connect(&m_retry, &QTimer::timeout, this, &WorkerAgent::requestWork);
    m_grace.setSingleShot(true);
    connect(&m_grace, &QTimer::timeout, this, [this] {
        finish(0, QStringLiteral("the grace period ended before the coordinator confirmed the partial result"));
    });
}

WorkerAgent::~WorkerAgent()
{
    m_cancel = true;
    m_training.waitForFinished();
    m_files.waitForDone(); // its tasks use the shard cache
}

Result<void> WorkerAgent::start(const std::optional<net::JoinToken> &token)
{
    m_sinceStart.start();
    if (auto r = m_client->configure(token); !r)
        return r;
    auto device = selectDevice(m_options.device);
    if (!device)
        return device.takeError();
    net::HelloMsg hello;
    hello.instanceType = m_options.instanceType;
    hello.priceClass = m_options.priceClass;
    hello.device = deviceDescription(*device);
    hello.threads = m_options.threads;
    hello.memoryMb = physicalMemoryMb();
    hello.samplesPerSecond = m_speed;
    m_client->start(hello);
    m_heartbeat.start();
    return {};
}

void WorkerAgent::onWelcomed(const QCborMap &header)
{
    auto welcome = net::WelcomeMsg::decode(header);
    if (!welcome) {
        finish(1, QStringLiteral("the coordinator's welcome cannot be read: %1").arg(welcome.error()));
        return;
    }
    onWelcome(*welcome);
}

void WorkerAgent::onWelcome(const net::WelcomeMsg &w)
{
    m_asked = false;
    // Welcome after Welcome with nothing trained between (moved from job to job, or told to
    // wait and then not): the next Request waits longer each time.
    if (m_welcomedBefore && !m_trainedSinceWelcome)
        m_pacer.answeredWithout(m_paceClock.elapsed());
    m_welcomedBefore = true;
    m_trainedSinceWelcome = false;
    m_awaitingModel.reset();
    const quint64 generation = ++m_welcomes;
    // The coordinator says how often to beat; a value that would miss its own timeout (or an
    // older coordinator that says nothing) falls back to a safe one.
    const qint64 timeoutMs = w.heartbeatTimeoutMs;
    qint64 intervalMs = w.heartbeatMs;
    if (intervalMs < 100 || timeoutMs <= 0 || intervalMs * 2 > timeoutMs) {
        const qint64 safe = std::clamp<qint64>(timeoutMs / 4, 100, 2000);
        qCWarning(lcAgent).noquote() << "the coordinator's heartbeat interval" << intervalMs << "ms does not fit its"
                                   << timeoutMs << "ms timeout; beating every" << safe << "ms";
        intervalMs = safe;
    }
    m_heartbeat.setInterval(int(std::min<qint64>(intervalMs, 60000)));
    if (w.job.isEmpty()) {
        // A fleet with no job for this machine now: it stays connected and waits for one.
        if (w.waiting.isEmpty())
            qCInfo(lcAgent).noquote() << "connected to" << m_client->coordinatorAddress() << "as worker"
                                       << w.workerId << "- no job runs; waiting for one";
        else
            qCWarning(lcAgent).noquote() << "connected to" << m_client->coordinatorAddress() << "as worker"
                                          << w.workerId << "- waiting:" << w.waiting.left(500);
        dropCurrent(QStringLiteral("the fleet moved the worker off the job"));
        m_waiting = true;
        m_job.clear();
        m_jobKey.clear();
        // A result still owed is held, not sent: a fleet service that restarted has not yet
        // resumed its jobs, nor taken results of any size, and would close the connection.
        // It goes when the fleet next gives this worker a job (onPrepared).
        Q_EMIT statusChanged();
        return;
    }
    m_waiting = false;
    qCInfo(lcAgent).noquote() << "connected to" << m_client->coordinatorAddress() << "for job" << w.job
                               << "as worker" << w.workerId;
    if (w.jobKey != m_jobKey)
        dropCurrent(QStringLiteral("the fleet moved the worker to job %1").arg(w.job));
    const QJsonObject model = QJsonDocument::fromJson(w.model.toUtf8()).object();
    if (model.value(QStringLiteral("kind")).toString() != QLatin1String("torchscript")) {
        adopt(w, {});
        return;
    }
    // TorchScript is code: it is loaded only from a file on this machine that has the job's
    // SHA-256: the models this worker was sent before, its --model-file, or one it asks for.
    const QString sha = w.modelSha256.toLower();
    const bool shaWellFormed = sha.size() == 64 && std::all_of(sha.begin(), sha.end(), [](QChar c) {
        return (c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f');
    });
    if (!shaWellFormed) {
        finish(1, QStringLiteral("the coordinator names the job's model by '%1', which is not a SHA-256")
                      .arg(w.modelSha256.left(80)));
        return;
    }
    // Hashing the candidates reads whole files: on the file thread. Meanwhile the worker asks
    // for no work (m_awaitingModel); a later Welcome makes this one's answer moot.
    m_awaitingModel = w;
    const QString cached = modelCachePath(sha);
    const QString own = m_options.modelFile;
    offThread(this, &m_files, [cached, own] { return QStringList{fileSha(cached), fileSha(own)}; },
              [this, generation, sha, cached, own](const QStringList &hashes) {
                  if (generation == m_welcomes && !m_finished)
                      resolveModel(sha, cached, hashes[0], own, hashes[1]);
              });
    Q_EMIT statusChanged();
}

void WorkerAgent::resolveModel(const QString &sha, const QString &cached, const QString &cachedSha, const QString &own,
                               const QString &ownSha)
{
    const net::WelcomeMsg welcome = *m_awaitingModel;
    if (cachedSha == sha) {
        m_awaitingModel.reset();
        adopt(welcome, cached);
        return;
    }
    if (!own.isEmpty()) {
        if (ownSha == sha) {
            m_awaitingModel.reset();
            adopt(welcome, own);
            return;
        }
        if (!m_options.acceptModels) {
            finish(1, ownSha.isEmpty() ? QStringLiteral("cannot read the model file '%1'").arg(own)
                                       : QStringLiteral("'%1' is not the job's model: its SHA-256 is %2, the job's %3")
                                             .arg(own, ownSha, sha));
            return;
        }
    }
    if (!m_options.acceptModels) {
        finish(1, QStringLiteral("the job trains a TorchScript model (SHA-256 %1) and this worker accepts no models "
                                 "(--accept-models none): start the worker with --model-file pointing to a copy of it")
                      .arg(sha));
        return;
    }
    qCInfo(lcAgent).noquote() << "asking the coordinator for the job's model" << sha.left(16);
    m_client->send(net::ModelRequestMsg{sha});
    Q_EMIT statusChanged();
}

QString WorkerAgent::modelCachePath(const QString &sha256) const
{
    return QDir(m_options.stateDir).filePath(QStringLiteral("models/%1.pt").arg(sha256));
}

void WorkerAgent::onModel(const net::ModelDataMsg &model, const QByteArray &payload)
{
    const net::ModelDataMsg *data = &model;
    if (!m_awaitingModel || data->sha256 != m_awaitingModel->modelSha256.toLower())
        return;
    if (!data->error.isEmpty()) {
        finish(1, QStringLiteral("the coordinator cannot send the job's model: %1").arg(data->error.left(500)));
        return;
    }
    // Hashing and keeping it (a model may be hundreds of MiB) run on the file thread.
    const quint64 generation = m_welcomes;
    const QString path = modelCachePath(data->sha256);
    const qint64 cacheBytes = m_options.modelCacheBytes;
    const QString expected = data->sha256;
    offThread(
        this, &m_files,
        [payload, path, cacheBytes, expected]() -> QString {
            const QString sha =
                QString::fromLatin1(QCryptographicHash::hash(payload, QCryptographicHash::Sha256).toHex());
            if (sha != expected)
                return QStringLiteral("sha");
            // Bounded: the models used longest ago make way (a model is a few MiB; the bound is
            // for a fleet that runs many).
            QDir dir(QFileInfo(path).absolutePath());
            dir.mkpath(QStringLiteral("."));
            const QFileInfoList kept = dir.entryInfoList({QStringLiteral("*.pt")}, QDir::Files, QDir::Time);
            qint64 total = payload.size();
            for (const QFileInfo &f : kept) {
                total += f.size();
                if (total > cacheBytes)
                    QFile::remove(f.absoluteFilePath());
            }
            if (auto written = writeFileAtomically(path, payload); !written)
                return written.error();
            return QString();
        },
        [this, generation, path](const QString &problem) {
            if (generation != m_welcomes || m_finished || !m_awaitingModel)
                return;
            if (problem == QLatin1String("sha")) {
                m_client->reconnect(QStringLiteral("the model the coordinator sent does not have its SHA-256"));
                return;
            }
            if (!problem.isEmpty()) {
                finish(1, QStringLiteral("cannot keep the job's model: %1").arg(problem));
                return;
            }
            const net::WelcomeMsg welcome = *m_awaitingModel;
            m_awaitingModel.reset();
            adopt(welcome, path);
        });
}

void WorkerAgent::dropCurrent(const QString &reason)
{
    if (m_training.isRunning()) {
        m_superseded = true; // what it trained is not sent
        m_cancel = true;
        m_training.waitForFinished();
    }
    if (m_current) {
        if (m_client->isConnected())
            m_client->send(net::HandBackMsg{m_current->leaseId, reason, false, m_current->jobKey});
        m_current.reset();
    }
}

void WorkerAgent::adopt(const net::WelcomeMsg &welcome, const QString &modelPath)
{
    const QString layout = welcome.layout;
    const bool newJob = welcome.jobKey != m_jobKey;
    m_job = welcome.job;
    m_jobKey = welcome.jobKey;
    m_jobSeed = welcome.seed;
    // A form this worker does not know is answered with the weights, which every coordinator takes.
    const auto compression = compressionFromName(welcome.compression);
    if (!compression)
        qCWarning(lcAgent).noquote() << "the coordinator asks for results as" << welcome.compression
                                      << "which this worker does not know; sending the weights";
    m_compression = compression.value_or(Compression::None);
    QStringList shapeText;
    for (const qint64 d : welcome.inputShape)
        shapeText << QString::number(d);
    const QString modelKey = welcome.model + u'|' + welcome.modelSha256 + u'|' + layout + u'|'
                             + shapeText.join(u',') + u'|' + QString::number(welcome.classes);
    if (newJob) {
        // Another job's weights: no anchor, error feedback or optimizer state of the last one
        // applies (the same model is kept, its momentum is not).
        m_encoder.reset();
        m_downlink.reset();
        if (m_session)
            m_session->forgetOptimizer();
    }
    if (!m_session || modelKey != m_modelKey) {
        m_encoder.reset();
        m_downlink.reset();
        dropCurrent(QStringLiteral("the job's model changed"));
        auto spec = JobSpec::defaultJob();
        const QJsonObject model = QJsonDocument::fromJson(welcome.model.toUtf8()).object();
        const bool script = model.value(QStringLiteral("kind")).toString() == QLatin1String("torchscript");
        auto parsed = JobSpec::fromJson(QJsonObject{{QStringLiteral("model"), model}});
        if (!parsed && !script) {
            finish(1, QStringLiteral("the coordinator's model description cannot be read: %1").arg(parsed.error()));
            return;
        }
        ModelSpec modelSpec = parsed ? parsed->model : spec.model;
        if (script) {
            modelSpec.kind = QStringLiteral("torchscript");
            modelSpec.path = modelPath;
        }
        const std::vector<std::int64_t> shape(welcome.inputShape.begin(), welcome.inputShape.end());
        m_session.reset();
        m_modelKey.clear();
        m_preparingKey = modelKey;
        m_preparingLayout = layout;
        // How fast this machine is, so the coordinator can size its subtasks and deadlines:
        // measured where the model is built, on the pool that trains. A Welcome that comes
        // meanwhile starts another preparation; the watcher then reports only that one.
        m_preparing.setFuture(QtConcurrent::run(
            &m_pool, [modelSpec, shape, classes = int(welcome.classes), device = m_options.device, layout,
                      batch = int(welcome.batchSize), threads = m_options.threads, precision = welcome.precision,
                      task = welcome.task, slowdown = m_options.slowdown] {
                auto out = std::make_shared<Prepared>();
                auto session = WorkerJob::create(modelSpec, shape, classes, device, layout);
                if (!session) {
                    out->error = session.error();
                    return out;
                }
                out->session = std::move(session).value();
                out->speed = out->session->measureThroughput(batch, threads, 0.5, precision, task) / std::max(1.0, slowdown);
                out->session->setSlowdown(slowdown);
                return out;
            }));
        Q_EMIT statusChanged();
        return;
    }
    m_asked = false;
    Q_EMIT statusChanged();
    sendPending();
    requestWork();
}

void WorkerAgent::onPrepared()
{
    const std::shared_ptr<Prepared> prepared = m_preparing.result();
    if (!prepared || m_finished)
        return;
    if (!prepared->session) {
        finish(1, prepared->error);
        return;
    }
    m_session = std::move(prepared->session);
    m_layout = m_preparingLayout;
    m_modelKey = m_preparingKey;
    m_speed = prepared->speed;
    qCInfo(lcAgent).noquote() << "measured" << qRound(m_speed) << "samples/s on" << m_options.device;
    m_asked = false;
    Q_EMIT statusChanged();
    sendPending();
    requestWork();
}

QString WorkerAgent::name() const
{
    return m_client->name();
}

WorkerAgent::Status WorkerAgent::status() const
{
    Status s;
    s.coordinator = m_client->coordinatorAddress();
    s.job = m_job;
    s.subtasksDone = m_subtasksDone;
    s.secondsTrained = m_secondsTrained;
    s.message = m_message;
    if (m_finished)
        s.state = m_failed ? QStringLiteral("failed") : QStringLiteral("finished");
    else if (m_suspended)
        s.state = QStringLiteral("suspended");
    else if (!m_client->isConnected())
        s.state = QStringLiteral("connecting");
    else if (m_waiting)
        s.state = QStringLiteral("waiting");
    else if (m_current)
        s.state = QStringLiteral("training");
    else if (m_preparing.isRunning())
        s.state = QStringLiteral("preparing");
    else
        s.state = QStringLiteral("idle");
    if (m_current) {
        s.subtask = QStringLiteral("epoch %1, shard %2, positions %3–%4")
                        .arg(m_current->work.epoch + 1).arg(m_current->shard).arg(m_current->work.begin).arg(m_current->work.end);
        const qint64 planned = m_planned.load();
        s.progress = planned > 0 ? double(m_done.load()) / double(planned) : 0.0;
    }
    return s;
}

void WorkerAgent::setSuspended(bool suspended)
{
    if (suspended == m_suspended || m_finished)
        return;
    m_suspended = suspended;
    if (suspended && m_current && m_training.isRunning())
        m_cancel = true; // onTrained hands in the partial result
    if (!suspended)
        requestWork();
    Q_EMIT statusChanged();
}

// Also while a result waits for its Ack: the coordinator reads a connection's messages in
// order, so the result is folded before the request is granted, and the new lease's weights
// already hold it. Asking only after the Ack cost a round trip per subtask, idle.
void WorkerAgent::requestWork()
{
    if (m_preempting || m_finished || m_suspended || m_current || m_asked || m_waiting || m_awaitingModel
        || !m_session || !m_client->isConnected())
        return;
    const qint64 now = m_paceClock.elapsed();
    if (const qint64 wait = m_pacer.delayMs(now); wait > 0) {
        // The retry timer asks again; a sooner one already set stays.
        if (!m_retry.isActive() || m_retry.remainingTime() > wait)
            m_retry.start(int(std::min<qint64>(wait, 60000)));
        return;
    }
    m_retry.stop();
    m_asked = true;
    m_pacer.asked(now);
    qCDebug(lcAgent).noquote() << "asking for work (request" << m_pacer.requests() << "- at most"
                               << m_pacer.peakPerSecond() << "in a second so far)";
    m_client->send(net::RequestMsg{m_speed, true, m_downlink.anchor()});
}

void WorkerAgent::answeredWithout()
{
    m_pacer.answeredWithout(m_paceClock.elapsed());
    requestWork();
}

void WorkerAgent::onMessage(const net::Message &message)
{
    net::dispatch(
        message,
        net::Handlers{
            // The fleet moved this worker to another job, or has none for it.
            [&](const net::WelcomeMsg &welcome) { onWelcome(welcome); },
            [&](const net::ModelDataMsg &model) { onModel(model, message.payload); },
            [&](const net::AssignMsg &assign) { onAssign(assign, message.payload); },
            [&](const net::ShardDataMsg &shard) { onShard(shard, message.payload); },
            [&](const net::NoWorkMsg &noWork) {
                m_asked = false;
                if (noWork.finished) {
                    m_client->send(net::ByeMsg{QStringLiteral("the job is finished")});
                    finish(0, QStringLiteral("the job is finished"));
                    return;
                }
                if (noWork.dismissed) {
                    // The job's tail: nothing is left for this machine, and its owner stops paying.
                    m_client->send(net::ByeMsg{QStringLiteral("dismissed")});
                    finish(0, QStringLiteral("dismissed: the job has no work left for this machine (its last subtasks "
                                             "are with other workers)"));
                    return;
                }
                m_pacer.noWork(m_paceClock.elapsed(), noWork.retryMs);
                requestWork();
            },
            [&](const net::AckMsg &ack) {
                if (m_pending && m_pending->leaseId == ack.lease && (ack.job.isEmpty() || ack.job == m_pending->header.job))
                    m_pending.reset();
                // "held": kept for comparison with another worker's result of the same subtask, or in
                // the aggregation buffer until it is folded with others.
                if (ack.status != QLatin1String("assimilated") && ack.status != QLatin1String("held"))
                    qCWarning(lcAgent).noquote() << "result of lease" << ack.lease << "was" << ack.status << "-"
                                                 << ack.reason;
                if (m_preempting) {
                    m_client->send(net::ByeMsg{QStringLiteral("preempted")});
                    finish(0, QStringLiteral("preempted: the partial result was handed in"));
                    return;
                }
                requestWork();
            },
            [&](const net::CancelMsg &cancel) {
                if (m_current && m_current->leaseId == cancel.lease
                    && (cancel.job.isEmpty() || cancel.job == m_current->jobKey)) {
                    m_superseded = true;
                    m_cancel = true;
                }
            }},
        [&](const net::Message &other) {
            qCWarning(lcAgent).noquote() << "ignored an unexpected" << net::describe(other.type) << "message";
        },
        // A header that does not decode: the client reconnects, as it does for a malformed frame.
        [&](const QString &why) {
            m_client->reconnect(QStringLiteral("the coordinator sent something malformed: %1").arg(why));
        });
}

void WorkerAgent::onAssign(const net::AssignMsg &a, const QByteArray &payload)
{
    m_asked = false;
    if (!m_session || m_current) {
        m_client->send(net::HandBackMsg{a.lease, QStringLiteral("the worker was not ready")});
        m_pacer.answeredWithout(m_paceClock.elapsed());
        return;
    }
    const auto change = compressionFromName(a.change);
    if (!change) {
        m_client->send(net::HandBackMsg{
            a.lease, QStringLiteral("the weights came as '%1', which is not none, fp16 or int8").arg(a.change.left(40))});
        answeredWithout();
        return;
    }
    auto weights = m_downlink.decode(WeightsForm{*change, a.anchor, a.anchorIncluded}, payload,
                                     m_session->layout());
    if (!weights) {
        // The next request says which anchor this worker holds (none, if that was the trouble),
        // and the coordinator sends what it can use.
        qCWarning(lcAgent).noquote() << "handing back lease" << a.lease << "-" << weights.error();
        m_downlink.reset();
        m_client->send(net::HandBackMsg{a.lease, weights.error()});
        answeredWithout();
        return;
    }
    Current c;
    c.leaseId = a.lease;
    c.jobKey = m_jobKey;
    c.shard = int(a.shard);
    c.shardSha = a.shardSha256;
    c.shardSamples = a.shardSamples;
    c.work.shard = c.shard;
    c.work.epoch = int(a.epoch);
    c.work.begin = a.begin;
    c.work.end = a.end;
    c.work.jobSeed = m_jobSeed;
    c.work.config = readTraining(a);
    c.work.config.threads = m_options.threads;
    QString problem = c.work.config.problem();
    if (problem.isEmpty() && m_session) {
        if (auto precision = precisionOn(a.precision, m_session->device()); !precision)
            problem = precision.error();
    }
    if (!problem.isEmpty()) {
        qCWarning(lcAgent).noquote() << "handing back lease" << a.lease << "-" << problem;
        // As a failure: a worker that can never train these settings counts against the job,
        // which then says that no connected worker can train it instead of waiting unseen.
        m_client->send(net::HandBackMsg{a.lease, problem, true});
        answeredWithout();
        return;
    }
    c.weights = *weights;
    m_current = c;
    // The shard cache reads and checks files: on the file thread.
    const QByteArray digest = c.shardSha;
    offThread(this, &m_files, [this, digest] { return m_shards.find(digest); },
              [this, lease = c.leaseId](const std::optional<Dataset> &cached) {
                  if (!m_current || m_current->leaseId != lease || m_finished)
                      return;
                  if (cached) {
                      qCInfo(lcData).noquote() << "shard" << m_current->shard << "read from the cache";
                      m_current->samples = *cached;
                      train();
                      return;
                  }
                  qCInfo(lcData).noquote() << "downloading shard" << m_current->shard;
                  m_client->send(net::ShardRequestMsg{m_current->shard});
              });
}

void WorkerAgent::onShard(const net::ShardDataMsg &shardData, const QByteArray &payload)
{
    if (!m_current)
        return;
    const net::ShardDataMsg *data = &shardData;
    // Its digest, decoding and a copy in the cache run on the file thread. The digest covers
    // the manifest's normalization and augmentation too, not only the bytes.
    const QByteArray expected = m_current->shardSha;
    const QCborMap manifest = data->manifest;
    offThread(
        this, &m_files,
        [this, expected, manifest, payload]() -> std::shared_ptr<Result<Dataset>> {
            const QByteArray sha = shardDigest(manifest, payload);
            if (sha != expected)
                return std::make_shared<Result<Dataset>>(fail(QStringLiteral("the shard data does not match its SHA-256")));
            auto shard = shardFromBytes(payload, manifest);
            if (shard)
                m_shards.insert(sha, manifest, payload, *shard);
            return std::make_shared<Result<Dataset>>(std::move(shard));
        },
        [this, lease = m_current->leaseId](const std::shared_ptr<Result<Dataset>> &shard) {
            if (!m_current || m_current->leaseId != lease || m_finished)
                return;
            if (!*shard) {
                m_client->send(net::HandBackMsg{m_current->leaseId, shard->error(), false, m_current->jobKey});
                m_current.reset();
                answeredWithout();
                return;
            }
            m_current->samples = std::move(*shard).value();
            train();
        });
}

void WorkerAgent::train()
{
    const Current c = *m_current;
    if (!m_firstStarted) {
        m_firstStarted = true;
        // From start-up through joining, the speed probe and the shard download.
        std::printf("first subtask running %.2f s after start\n", double(m_sinceStart.nsecsElapsed()) / 1e9);
        std::fflush(stdout);
    }
    Q_EMIT trainingStarted(c.leaseId);
    Q_EMIT statusChanged();
    m_pacer.trained();
    m_trainedSinceWelcome = true;
    m_cancel = false;
    m_superseded = false;
    m_done = 0;
    m_planned = 0;
    WorkerJob *session = m_session.get();
    m_training.setFuture(QtConcurrent::run(&m_pool, [this, session, c] {
        return std::make_shared<Result<TrainOutcome>>(
            session->train(c.samples, c.work, c.weights, &m_cancel, [this](std::int64_t done, std::int64_t planned) {
                m_done = done;
                m_planned = planned;
            }));
    }));
}

void WorkerAgent::onTrained()
{
    if (!m_current)
        return;
    const Current c = *m_current;
    m_current.reset();
    const Result<TrainOutcome> outcome = *m_training.result();
    if (m_superseded) {
        m_superseded = false;
        requestWork();
        return;
    }
    if (!outcome) {
        qCWarning(lcAgent).noquote() << "subtask failed:" << outcome.error();
        m_client->send(net::HandBackMsg{c.leaseId, outcome.error(), true, c.jobKey});
        if (m_preempting)
            finish(0, QStringLiteral("preempted"));
        else
            answeredWithout();
        return;
    }
    if (outcome->covered == 0) {
        m_client->send(net::HandBackMsg{c.leaseId, QStringLiteral("preempted before the first batch"), false, c.jobKey});
        if (m_preempting) {
            m_client->send(net::ByeMsg{QStringLiteral("preempted")});
            finish(0, QStringLiteral("preempted before training anything"));
        }
        return;
    }
    ++m_subtasksDone;
    m_secondsTrained += outcome->seconds;
    Q_EMIT statusChanged();
    TrainOutcome result = *outcome;
    if (m_options.resultHook)
        m_options.resultHook(result, c.weights);
    net::ResultMsg header{c.leaseId, result.meanLoss, qint64(result.sampleSteps), qint64(result.covered),
                          result.seconds, result.partial, weightManifest(m_session->layout())};
    header.job = c.jobKey;
    QByteArray payload;
    if (m_compression == Compression::None) {
        payload = weightsToBytes(result.weights);
    } else {
        header.encoding = compressionName(m_compression);
        payload = m_encoder.encode(m_compression, result.weights, c.weights,
                                   m_session->layout().segments().parameterEnd);
    }
    m_pending = Pending{c.leaseId, std::move(header), std::move(payload)};
    sendPending();
    requestWork();
}

void WorkerAgent::sendPending()
{
    if (m_pending && m_client->isConnected())
        m_client->send(m_pending->header, m_pending->payload);
}

void WorkerAgent::preemptionNotice()
{
    if (m_preempting || m_finished)
        return;
    m_preempting = true;
    qCInfo(lcAgent).noquote() << "preemption notice: handing in the current work within" << m_options.graceMs / 1000 << "s";
    m_grace.start(m_options.graceMs);
    if (m_current && m_training.isRunning()) {
        m_cancel = true; // onTrained uploads the partial result, the Ack ends the worker
        return;
    }
    if (m_pending) {
        sendPending();
        return;
    }
    if (m_current) {
        // Leased but not training yet (the shard was still on its way): give it back at once.
        m_client->send(net::HandBackMsg{m_current->leaseId, QStringLiteral("preempted before training"), false,
                                        m_current->jobKey});
        m_current.reset();
    }
    m_client->send(net::ByeMsg{QStringLiteral("preempted")});
    finish(0, QStringLiteral("preempted while idle"));
}

void WorkerAgent::finish(int code, const QString &message)
{
    if (m_finished)
        return;
    m_finished = true;
    m_failed = code != 0;
    m_message = message;
    m_heartbeat.stop();
    m_retry.stop();
    m_grace.stop();
    m_cancel = true;
    Q_EMIT statusChanged();
    Q_EMIT finished(code, message);
}

} // namespace flotilla
