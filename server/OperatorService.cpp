#include "server/OperatorService.h"

#include "common/LogCategories.h"
#include "engine/coordination/Store.h"
#include "net/Dispatch.h"
#include "server/WatchStream.h"

#include <QDateTime>
#include <QDir>
#include <QFutureWatcher>
#include <QtConcurrent>

namespace flotilla {


namespace {

// Updates are optional traffic: while this much waits for an operator that reads slowly (or
// not at all), no more is queued for it; the next snapshot tries again.
constexpr qint64 kMaxQueuedBytes = 1 << 20;

} // namespace

// One operator's store connection, used by one pool read at a time.
struct OperatorService::StoreSlot
{
    std::unique_ptr<Store> store;
};

OperatorService::OperatorService(CoordinatorThread *coordinator, net::TlsListener &listener, Options options,
                                 QObject *parent)
    : QObject(parent), m_coordinator(coordinator), m_listener(listener), m_options(std::move(options))
{
    coordinator->withCoordinator([this](Coordinator &c) { m_job = c.spec().name; });
    connect(coordinator, &CoordinatorThread::snapshot, this, &OperatorService::onSnapshot);
    coordinator->whenEnded(this, [this](bool ok, const QString &message) {
        if (m_state == QLatin1String("stopped"))
            return;
        m_state = ok ? QStringLiteral("finished") : QStringLiteral("failed");
        m_stateMessage = message;
        for (const auto &[connection, op] : m_operators)
            if (op.watching)
                read(connection);
    });
}

OperatorService::~OperatorService() = default;

QString OperatorService::storePath() const
{
    return QDir(m_options.runDir).filePath(QStringLiteral("flotilla.db"));
}

void OperatorService::attach(const net::PeerInfo &peer)
{
    Operator op;
    op.name = peer.workerName;
    op.role = peer.role;
    op.store = std::make_shared<StoreSlot>();
    m_operators[peer.connectionId] = std::move(op);
    qCInfo(lcServer).noquote() << "operator" << peer.workerName << "attached from" << peer.address;
    net::WelcomeMsg welcome;
    welcome.job = m_job;
    welcome.jobKey = m_options.jobKey;
    m_listener.send(peer.connectionId, welcome);
}

void OperatorService::onClosed(qint64 connectionId)
{
    const auto it = m_operators.find(connectionId);
    if (it == m_operators.end())
        return;
    qCInfo(lcServer).noquote() << "operator" << it->second.name << "detached";
    m_operators.erase(it);
}

void OperatorService::onMessage(qint64 connectionId, const net::Message &message)
{
    const auto it = m_operators.find(connectionId);
    if (it == m_operators.end())
        return;
    Operator &op = it->second;
    net::dispatch(
        message,
        net::Handlers{[&](const net::WatchMsg &watch) {
                          op.cursor = watch.cursor;
                          op.watching = true;
                          op.tokensSent.clear();
                          read(connectionId);
                      },
                      [&](const net::CommandMsg &c) { command(connectionId, c); },
                      [&](const net::ByeMsg &) {
                          m_listener.close(connectionId, QStringLiteral("the operator said goodbye"), false, false);
                      }},
        [&](const net::Message &other) {
            m_listener.close(connectionId,
                             QStringLiteral("operator '%1' sent %2: an operator's certificate watches and commands the "
                                            "job, it never trains (a worker joins with a worker's token)")
                                 .arg(op.name, net::describe(other.type)),
                             true);
        },
        [&](const QString &why) { m_listener.close(connectionId, why); });
}

void OperatorService::onSnapshot(const JobProgress &progress, const std::vector<WorkerStatus> &workers)
{
    m_snapshot = toSnapshot(progress, workers, m_options.addressOf);
    if (m_state == QLatin1String("running") || m_state == QLatin1String("paused"))
        m_state = progress.finished ? QStringLiteral("finished")
                                    : progress.paused ? QStringLiteral("paused") : QStringLiteral("running");
    for (const auto &[connection, op] : m_operators)
        if (op.watching)
            read(connection);
}

void OperatorService::read(qint64 connectionId)
{
    const auto it = m_operators.find(connectionId);
    if (it == m_operators.end())
        return;
    Operator &op = it->second;
    if (op.reading) {
        op.readAgain = true;
        return;
    }
    if (m_listener.pendingBytes(connectionId) > kMaxQueuedBytes)
        return;
    op.reading = true;
    op.readAgain = false;
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<WatchRead>>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, connectionId] {
        watcher->deleteLater();
        const auto found = m_operators.find(connectionId);
        if (found == m_operators.end())
            return; // it hung up meanwhile
        Operator &op = found->second;
        op.reading = false;
        const Result<WatchRead> &result = *watcher->result();
        if (!result) {
            // The coordinator's trouble (a busy disk), not the operator's: it tries again.
            qCWarning(lcServer).noquote() << "cannot read the job's store for operator" << op.name << "-"
                                          << result.error();
            return;
        }
        WatchRead r = *result;
        r.batch.snapshot = m_snapshot;
        if (auto tokens = m_listener.trust().tokens()) {
            const auto rows = tokenRows(*tokens, QDateTime::currentMSecsSinceEpoch(), true);
            WatchBatch only;
            only.tokens = rows;
            const QByteArray encoded = encodeBatch(only);
            if (encoded != op.tokensSent) {
                r.batch.tokens = rows;
                op.tokensSent = encoded;
            }
        }
        net::UpdateMsg update;
        update.cursor = r.cursor;
        update.reset = r.reset;
        update.more = r.more;
        update.state = m_state;
        update.message = m_stateMessage;
        op.cursor = r.cursor;
        m_listener.send(connectionId, update, encodeBatch(r.batch));
        if (r.more || op.readAgain)
            read(connectionId);
    });
    const std::shared_ptr<StoreSlot> slot = op.store;
    const net::WatchCursor from = op.cursor;
    const QString path = storePath();
    const int limit = m_options.rowsPerUpdate;
    watcher->setFuture(QtConcurrent::run([slot, from, path, limit] {
        if (!slot->store) {
            auto opened = Store::open(path);
            if (!opened)
                return std::make_shared<Result<WatchRead>>(opened.takeError());
            slot->store = std::move(opened).value();
        }
        return std::make_shared<Result<WatchRead>>(readAfter(*slot->store, from, limit));
    }));
}

void OperatorService::reply(qint64 connectionId, const net::CommandMsg &command, const QString &error,
                            const QString &text, const QByteArray &payload)
{
    m_listener.send(connectionId, net::ReplyMsg{command.id, command.action, error, text}, payload);
}

std::optional<net::ReplyMsg> OperatorService::fleetCommand(net::TlsListener &listener, const QString &hostName,
                                                           const QString &by, net::Role role, const net::CommandMsg &c)
{
    const QString &action = c.action;
    if (action != QLatin1String("issue-token") && action != QLatin1String("revoke-token")
        && action != QLatin1String("revoke-worker"))
        return std::nullopt;
    net::ReplyMsg reply{c.id, action, {}, {}};
    if (role != net::Role::Operator) {
        reply.error = QStringLiteral("%1 is a %2: only an operator, the fleet's administrator, may %3")
                          .arg(by, net::describe(role), action);
        return reply;
    }
    const qint64 now = QDateTime::currentMSecsSinceEpoch();
    if (action == QLatin1String("issue-token")) {
        if (c.uses < 1 || c.uses > 100000 || c.validSeconds < 60 || c.validSeconds > 366LL * 86400) {
            reply.error = QStringLiteral("a join token needs 1 to 100000 uses and a lifetime of a minute to a year");
            return reply;
        }
        auto token = listener.trust().issueToken(hostName, listener.port(), listener.caFingerprint(), c.validSeconds,
                                                 int(c.uses), now, QStringLiteral("operator %1").arg(by));
        if (token)
            reply.text = token->encode();
        else
            reply.error = token.error();
    } else if (action == QLatin1String("revoke-token")) {
        auto revoked = listener.trust().revokeToken(c.target, now);
        if (revoked)
            reply.text = QStringLiteral("revoked join token %1").arg(revoked->idHex());
        else
            reply.error = revoked.error();
    } else {
        // Workers only: another operator is revoked on the coordinator's machine.
        auto revoked = listener.trust().revoke(c.target, QStringLiteral("revoked by operator %1").arg(by), now,
                                               net::Role::Worker);
        if (revoked)
            reply.text = QStringLiteral("revoked '%1' (%2 certificate(s))").arg(c.target).arg(*revoked);
        else
            reply.error = revoked.error();
    }
    return reply;
}

void OperatorService::command(qint64 connectionId, const net::CommandMsg &c)
{
    const Operator &asking = m_operators.at(connectionId);
    const QString by = asking.name;
    const QString action = c.action;
    qCInfo(lcServer).noquote() << net::describe(asking.role) << by << "asked to" << action << c.target;
    // Roles, per message, from the certificate: the fleet is its operators'; a job is its
    // submitter's and its operators'; anyone attached may look.
    const bool administrator = asking.role == net::Role::Operator;
    const bool jobAction = action == QLatin1String("pause") || action == QLatin1String("resume")
                           || action == QLatin1String("stop");
    if (action == QLatin1String("release") && !administrator) {
        reply(connectionId, c,
              QStringLiteral("%1 is a submitter: only an operator, the fleet's administrator, may %2").arg(by, action));
        return;
    }
    if (jobAction && !administrator && (m_options.owner.isEmpty() || by != m_options.owner)) {
        reply(connectionId, c,
              m_options.owner.isEmpty()
                  ? QStringLiteral("%1 is a submitter: only an operator may %2 this coordinator's job").arg(by, action)
                  : QStringLiteral("the job '%1' was submitted by %2, not %3: a submitter may %4 only its own jobs")
                        .arg(m_job, m_options.owner, by, action));
        return;
    }
    if (action == QLatin1String("pause") || action == QLatin1String("resume")) {
        if (m_state != QLatin1String("running") && m_state != QLatin1String("paused")) {
            reply(connectionId, c, QStringLiteral("the job is %1").arg(m_state));
            return;
        }
        const bool pause = action == QLatin1String("pause");
        m_coordinator->setPausedAsync(pause);
        m_state = pause ? QStringLiteral("paused") : QStringLiteral("running");
        reply(connectionId, c, {}, pause ? QStringLiteral("paused the job") : QStringLiteral("resumed the job"));
    } else if (action == QLatin1String("stop")) {
        m_state = QStringLiteral("stopped");
        m_stateMessage = QStringLiteral("stopped by operator %1").arg(by);
        reply(connectionId, c, {}, QStringLiteral("stopping the coordinator; started again, it resumes where it stopped"));
        Q_EMIT stopRequested(by);
    } else if (auto answered = fleetCommand(m_listener, m_options.hostName, by, asking.role, c)) {
        m_listener.send(connectionId, *answered);
    } else if (action == QLatin1String("release")) {
        m_coordinator->releaseAsync(c.workerId, QStringLiteral("operator %1").arg(by));
        Q_EMIT releaseRequested(c.workerId, by);
        reply(connectionId, c, {}, QStringLiteral("released worker %1").arg(c.workerId));
    } else if (action == QLatin1String("subtasks")) {
        // One list at a time per operator: each reads the whole table.
        Operator &op = m_operators.at(connectionId);
        if (op.listingSubtasks) {
            reply(connectionId, c, QStringLiteral("the subtask list is still being read"));
            return;
        }
        op.listingSubtasks = true;
        auto *watcher = new QFutureWatcher<QList<SubtaskRow>>(this);
        connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, connectionId, c] {
            watcher->deleteLater();
            const auto found = m_operators.find(connectionId);
            if (found == m_operators.end())
                return;
            found->second.listingSubtasks = false;
            reply(connectionId, c, {}, {}, encodeSubtasks(watcher->result()));
        });
        watcher->setFuture(QtConcurrent::run([path = storePath()] { return readSubtasks(path); }));
    } else {
        reply(connectionId, c, QStringLiteral("'%1' is not a command this coordinator knows").arg(action.left(40)));
    }
}

} // namespace flotilla
