#include "desktop/RemoteSession.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "net/Dispatch.h"
#include "server/FleetRequests.h"
#include "server/WatchStream.h"

#include <QDateTime>
#include <QDir>
#include <QFutureWatcher>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtConcurrent>

namespace flotilla {

namespace {

std::optional<JobState> stateNamed(const QString &name)
{
    if (name == QLatin1String("running"))
        return JobState::Running;
    if (name == QLatin1String("paused"))
        return JobState::Paused;
    if (name == QLatin1String("finished"))
        return JobState::Finished;
    if (name == QLatin1String("failed"))
        return JobState::Failed;
    if (name == QLatin1String("stopped"))
        return JobState::Stopped;
    if (name == QLatin1String("idle"))
        return JobState::NoJob; // a fleet between jobs
    return std::nullopt;
}

} // namespace

RemoteSession::RemoteSession(Options options, QObject *parent)
    : ControlSession(parent),
      m_options(std::move(options)),
      m_client(net::WorkerClient::Options::forPerson(m_options.stateDir, m_options.name, m_options.maxBackoffMs))
{
    qRegisterMetaType<JobState>();
    qRegisterMetaType<Snapshot>();
    qRegisterMetaType<History>();
    connect(&m_client, &net::WorkerClient::welcomed, this, &RemoteSession::onWelcomed);
    connect(&m_client, &net::WorkerClient::messageReceived, this, &RemoteSession::onMessage);
    connect(&m_client, &net::WorkerClient::disconnected, this, [this](const QString &reason) {
        failPending(tr("the connection to %1 was lost before the coordinator answered (%2)").arg(endpoint(), reason));
        if (m_state == JobState::Stopped)
            return; // it was asked to go; it is found again when it starts
        setState(JobState::Loading, tr("reconnecting to %1 (%2)").arg(endpoint(), reason));
    });
    connect(&m_client, &net::WorkerClient::failed, this, [this](const QString &reason) {
        failPending(reason);
        setState(JobState::Failed, reason);
    });
}

RemoteSession::~RemoteSession()
{
    m_client.stop();
}

Result<void> RemoteSession::attach(const std::optional<net::JoinToken> &token)
{
    if (token && !net::isPerson(token->role))
        return fail(tr("this is a worker's join token: a control center attaches with an operator or submitter token "
                       "(on the coordinator: flotilla token --operator, or --submitter)"));
    if (auto r = m_client.configure(token); !r)
        return r;
    setState(JobState::Loading, tr("connecting to %1").arg(endpoint()));
    net::HelloMsg hello;
    hello.device = QStringLiteral("operator");
    m_client.start(hello);
    return {};
}

void RemoteSession::detach()
{
    m_client.stop();
    setState(JobState::Stopped, tr("detached from %1").arg(endpoint()));
}

void RemoteSession::setState(JobState state, const QString &message)
{
    if (state == m_state && message == m_stateMessage)
        return;
    m_state = state;
    m_stateMessage = message;
    Q_EMIT stateChanged(state, message);
}

void RemoteSession::onWelcomed(const QCborMap &welcome)
{
    m_queueRefused.clear(); // a new connection, perhaps to a coordinator started since as a fleet
    // A fleet's job is named by its key in the queue ("job-7"): what exportModel downloads.
    // A Welcome without one (the fleet between jobs) keeps the job the window still shows.
    if (const auto w = net::WelcomeMsg::decode(welcome); w && w->jobKey.startsWith(QLatin1String("job-")))
        m_fleetJob = w->jobKey.mid(4).toLongLong();
    // From where the last connection left off; the coordinator starts from the beginning
    // when the cursor is not its job's.
    m_client.send(net::WatchMsg{m_cursor});
}

void RemoteSession::onMessage(const net::Message &message)
{
    net::dispatch(
        message,
        net::Handlers{[&](const net::UpdateMsg &update) { onUpdate(update, message.payload); },
                      [&](const net::ReplyMsg &reply) { onReply(reply, message.payload); },
                      // A fleet's next job (or none): watch it from the cursor, which the
                      // coordinator resets when it is another job's.
                      [&](const net::WelcomeMsg &) { onWelcomed(message.header); }},
        [&](const net::Message &other) {
            m_client.reconnect(tr("the coordinator sent %1 to an operator").arg(net::describe(other.type)));
        },
        [&](const QString &why) { m_client.reconnect(why); });
}

void RemoteSession::onUpdate(const net::UpdateMsg &updateMsg, const QByteArray &payload)
{
    const net::UpdateMsg *update = &updateMsg;
    auto batch = decodeBatch(payload);
    if (!batch) {
        m_client.reconnect(batch.error());
        return;
    }
    ++m_updates;
    if (update->reset) {
        m_history = {};
        m_cost = {};
        m_catchingUp = true;
        if (batch->spec.isEmpty())
            m_job = JobSpec{}; // a fleet between jobs
        else if (auto spec = JobSpec::fromJson(QJsonDocument::fromJson(batch->spec.toUtf8()).object()))
            m_job = *spec;
        else
            qCWarning(lcDesktop).noquote() << "the coordinator's job settings cannot be read:" << spec.error();
    }
    const History &rows = batch->rows;
    QList<CostPoint> costs;
    for (const CostPoint &c : rows.costs) {
        m_cost.atMs = c.atMs;
        m_cost.spot += c.spot;
        m_cost.onDemand += c.onDemand;
        m_cost.actual += c.actual;
        m_cost.usefulSeconds += c.usefulSeconds;
        m_cost.wastedSeconds += c.wastedSeconds;
        costs << m_cost;
    }
    m_history.assimilations << rows.assimilations;
    m_history.evaluations << rows.evaluations;
    m_history.events << rows.events;
    m_history.costs << costs;
    m_cursor = update->cursor;
    if (m_catchingUp) {
        // A long history arrives in several updates: drawn once, when it is all here.
        if (!update->more) {
            m_catchingUp = false;
            Q_EMIT historyLoaded(m_history);
        }
    } else {
        for (const auto &a : rows.assimilations)
            Q_EMIT assimilated(a);
        for (const auto &e : rows.evaluations)
            Q_EMIT evaluated(e);
        // The curves are cumulative: the sum after this update's rows is all there is to draw
        // (a large fleet's ledger grows by tens of rows a second).
        if (!costs.isEmpty())
            Q_EMIT costUpdated(costs.last());
        for (const auto &e : rows.events)
            Q_EMIT eventAdded(e);
    }
    if (batch->tokens) {
        m_tokens = *batch->tokens;
        Q_EMIT tokensChanged();
    }
    if (const auto state = stateNamed(update->state))
        setState(*state, update->message);
    if (batch->snapshot && !m_catchingUp)
        Q_EMIT snapshot(*batch->snapshot);
}

void RemoteSession::onReply(const net::ReplyMsg &replyMsg, const QByteArray &payload)
{
    const net::ReplyMsg *reply = &replyMsg;
    const auto it = m_pending.find(reply->id);
    if (it == m_pending.end())
        return; // asked on a connection before this one
    const QString action = it->second;
    m_pending.erase(it);
    const QString error = reply->error;
    if (action == QLatin1String("jobs")) {
        if (!error.isEmpty()) {
            if (m_queueRefused.isEmpty())
                Q_EMIT commandAnswered({}, error);
            m_queueRefused = error;
            return;
        }
        auto jobs = decodeJobs(payload);
        if (!jobs) {
            Q_EMIT commandAnswered({}, jobs.error());
            return;
        }
        QList<QueueRow> rows;
        for (const QueuedJob &j : *jobs)
            rows << QueueRow{j.id,       j.name,   j.submitter,     j.state,       j.priority,
                                 j.weight,   j.workerSeconds,           j.submittedMs, j.message};
        Q_EMIT jobsListed(rows);
    } else if (action == QLatin1String("job-download")) {
        if (!error.isEmpty()) {
            m_downloads.erase(reply->id);
            m_exports.erase(reply->id);
            Q_EMIT commandAnswered({}, error);
            return;
        }
        if (const auto it = m_exports.find(reply->id); it != m_exports.end()) {
            const QString path = it->second;
            m_exports.erase(it);
            onModelDownloaded(path, payload);
        } else {
            onDownloaded(reply->id, payload);
        }
    } else if (action == QLatin1String("issue-token")) {
        Q_EMIT tokenIssued(error.isEmpty() ? reply->text : QString(), error);
    } else if (action == QLatin1String("subtasks")) {
        if (!error.isEmpty())
            return; // the list asked for before this one is still being read; the next refresh asks again
        auto rows = decodeSubtasks(payload);
        if (rows)
            Q_EMIT subtasksLoaded(*rows);
        else
            qCWarning(lcDesktop).noquote() << rows.error();
    } else {
        if (action == QLatin1String("stop") && error.isEmpty())
            setState(JobState::Stopped, tr("stopped by this operator; started again on %1, it resumes where it "
                                               "stopped")
                                                .arg(endpoint()));
        Q_EMIT commandAnswered(error.isEmpty() ? reply->text : QString(), error);
    }
}

void RemoteSession::failPending(const QString &error)
{
    // Asked on a connection that is gone: the answer will never come.
    const std::map<qint64, QString> pending = std::exchange(m_pending, {});
    m_downloads.clear();
    m_exports.clear();
    for (const auto &[id, action] : pending) {
        if (action == QLatin1String("issue-token"))
            Q_EMIT tokenIssued({}, error);
        else if (action != QLatin1String("subtasks") && action != QLatin1String("jobs"))
            Q_EMIT commandAnswered({}, error);
    }
}

qint64 RemoteSession::send(net::CommandMsg command, const QByteArray &payload)
{
    if (!m_client.isConnected()) {
        const QString error = tr("not connected to %1 now; try again once it is").arg(endpoint());
        if (command.action == QLatin1String("issue-token"))
            Q_EMIT tokenIssued({}, error);
        else if (command.action != QLatin1String("subtasks"))
            Q_EMIT commandAnswered({}, error);
        return 0;
    }
    command.id = m_nextCommand++;
    m_pending[command.id] = command.action;
    m_client.send(command, payload);
    return command.id;
}

void RemoteSession::refreshJobs()
{
    net::CommandMsg c;
    c.action = QStringLiteral("jobs");
    if (m_client.isConnected() && m_queueRefused.isEmpty())
        send(c);
}

void RemoteSession::submitJob(const JobSpec &job, int priority, double weight)
{
    // The model and the data are read here and sent with the job: on a pool thread, since a
    // data folder may be large.
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<QByteArray>>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, name = job.name] {
        watcher->deleteLater();
        const Result<QByteArray> &payload = *watcher->result();
        if (!payload) {
            Q_EMIT commandAnswered({}, tr("cannot submit '%1': %2").arg(name, payload.error()));
            return;
        }
        net::CommandMsg c;
        c.action = QStringLiteral("submit");
        send(c, *payload);
    });
    watcher->setFuture(QtConcurrent::run([job, priority, weight] {
        Submission s;
        s.spec = job;
        s.priority = priority;
        s.weight = weight;
        if (job.model.kind == QLatin1String("torchscript")) {
            QFile model(job.model.path);
            if (!model.open(QIODevice::ReadOnly))
                return std::make_shared<Result<QByteArray>>(
                    fail(tr("cannot read the TorchScript model '%1': %2").arg(job.model.path, model.errorString())));
            s.model = model.readAll();
        }
        if (!job.dataset.path.isEmpty()) {
            auto data = readBundle(job.dataset.path, FleetRequests::kMaxSubmissionBytes);
            if (!data)
                return std::make_shared<Result<QByteArray>>(data.takeError());
            s.data = std::move(data).value();
        }
        return std::make_shared<Result<QByteArray>>(encodeSubmission(s));
    }));
}

void RemoteSession::manageJob(qint64 id, const QString &action, double value)
{
    net::CommandMsg c;
    c.action = QStringLiteral("job-") + action;
    c.job = id;
    c.value = value;
    send(c);
}

void RemoteSession::downloadJob(qint64 id, const QString &folder)
{
    net::CommandMsg c;
    c.action = QStringLiteral("job-download");
    c.job = id;
    if (const qint64 sent = send(c))
        m_downloads[sent] = folder;
}

void RemoteSession::onDownloaded(qint64 commandId, const QByteArray &payload)
{
    const QString folder = m_downloads[commandId];
    m_downloads.erase(commandId);
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<QString>>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
        watcher->deleteLater();
        const Result<QString> &written = *watcher->result();
        if (written)
            Q_EMIT commandAnswered(tr("downloaded the job's run folder to %1").arg(*written), {});
        else
            Q_EMIT commandAnswered({}, written.error());
    });
    watcher->setFuture(QtConcurrent::run([payload, folder] {
        auto bundle = decodeBundle(payload);
        if (!bundle)
            return std::make_shared<Result<QString>>(bundle.takeError());
        return std::make_shared<Result<QString>>(writeBundle(*bundle, folder));
    }));
}

void RemoteSession::start(const JobSpec &job, const QString &)
{
    // A job started from an attached window is queued on the coordinator's fleet.
    submitJob(job, 0, 1.0);
}

namespace {

// A command to the coordinator; send() gives it its id.
net::CommandMsg command(const QString &action, const QString &target = {})
{
    net::CommandMsg c;
    c.action = action;
    c.target = target;
    return c;
}

} // namespace

void RemoteSession::setPaused(bool paused)
{
    send(command(paused ? QStringLiteral("pause") : QStringLiteral("resume")));
}

void RemoteSession::stop()
{
    send(command(QStringLiteral("stop")));
}

void RemoteSession::issueToken(int uses, qint64 validSeconds)
{
    net::CommandMsg c = command(QStringLiteral("issue-token"));
    c.uses = uses;
    c.validSeconds = validSeconds;
    send(c);
}

Result<QList<JoinTokenRow>> RemoteSession::joinTokens(bool includeSpent)
{
    QList<JoinTokenRow> rows;
    for (const auto &t : m_tokens)
        if (includeSpent || t.live)
            rows << t;
    return rows;
}

void RemoteSession::revokeToken(const QString &id)
{
    send(command(QStringLiteral("revoke-token"), id));
}

void RemoteSession::revoke(const QString &workerName)
{
    send(command(QStringLiteral("revoke-worker"), workerName));
}

void RemoteSession::release(qint64 workerId)
{
    net::CommandMsg c = command(QStringLiteral("release"));
    c.workerId = workerId;
    send(c);
}

void RemoteSession::refreshSubtasks()
{
    send(command(QStringLiteral("subtasks")));
}

Result<void> RemoteSession::exportMetrics(const QString &path)
{
    if (m_history.assimilations.isEmpty() && m_history.evaluations.isEmpty())
        return fail(tr("nothing has been received from %1 yet").arg(endpoint()));
    return writeFileAtomically(path, metricsCsv(m_history));
}

Result<void> RemoteSession::exportModel(const QString &path)
{
    if (m_fleetJob <= 0)
        return fail(tr("the trained model is on the coordinator's machine (%1): model.pt in its run folder; a "
                       "fleet service's jobs can be downloaded from here")
                        .arg(endpoint()));
    // Downloaded from the fleet: the answer is commandAnswered.
    net::CommandMsg c;
    c.action = QStringLiteral("job-download");
    c.job = m_fleetJob;
    const qint64 sent = send(c);
    if (sent == 0)
        return fail(tr("not connected to %1 now; try again once it is").arg(endpoint()));
    m_exports[sent] = path;
    return {};
}

void RemoteSession::onModelDownloaded(const QString &path, const QByteArray &payload)
{
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<void>>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, path] {
        watcher->deleteLater();
        const Result<void> &written = *watcher->result();
        if (written)
            Q_EMIT commandAnswered(tr("saved the trained model to %1").arg(path), {});
        else
            Q_EMIT commandAnswered({}, written.error());
    });
    watcher->setFuture(QtConcurrent::run([payload, path] {
        auto bundle = decodeBundle(payload);
        if (!bundle)
            return std::make_shared<Result<void>>(bundle.takeError());
        for (const auto &[file, bytes] : bundle->files)
            if (file == QLatin1String("model.pt"))
                return std::make_shared<Result<void>>(writeFileAtomically(path, bytes));
        return std::make_shared<Result<void>>(
            fail(tr("the job has no trained model yet: model.pt is written when it finishes")));
    }));
}

} // namespace flotilla
