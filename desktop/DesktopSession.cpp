#include "desktop/DesktopSession.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "desktop/RunLibrary.h"
#include "engine/coordination/Store.h"
#include "server/WatchStream.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QThread>
#include <QTimer>
#include <QtConcurrent>

namespace flotilla {

namespace {

// What the store holds of a job, read on a pool thread with its own connection; a store
// that cannot be read yet (a job still loading) has no history.
History readHistory(const QString &db)
{
    auto h = readRunHistory(db);
    return h ? *h : History{};
}

} // namespace

DesktopSession::DesktopSession(Options options, QObject *parent) : ControlSession(parent), m_options(std::move(options))
{
    qRegisterMetaType<JobState>();
    qRegisterMetaType<Snapshot>();
    qRegisterMetaType<History>();
}

DesktopSession::~DesktopSession()
{
    stopNetwork();
    if (m_fleet)
        m_fleet->stop();
}

void DesktopSession::setState(JobState state, const QString &message)
{
    m_state = state;
    Q_EMIT stateChanged(state, message);
}

void DesktopSession::start(const JobSpec &job, const QString &runDir)
{
    if (m_state == JobState::Loading || m_state == JobState::Running || m_state == JobState::Paused)
        return;
    if (m_fleet) {
        stopNetwork();
        m_fleet->stop();
        m_fleet.reset();
    }
    m_job = job;
    m_runDir = runDir.isEmpty() ? defaultRunDir(job) : runDir;
    QDir().mkpath(m_runDir);
    setLogFile(QDir(m_runDir).filePath(QStringLiteral("flotilla.log")));
    setState(JobState::Loading, tr("loading the data and the model"));
    const int generation = ++m_generation;
    // Loading Fashion-MNIST and building the model take a second: not on this thread.
    auto *watcher = new QFutureWatcher<std::shared_ptr<Result<std::unique_ptr<LocalFleet>>>>(this);
    QThread *ui = thread();
    const JobSpec spec = m_job;
    const QString dir = m_runDir;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation == m_generation)
            started(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run([spec, dir, ui] {
        auto created = LocalFleet::create(spec, dir, 0);
        if (created)
            (*created)->moveToThread(ui);
        return std::make_shared<Result<std::unique_ptr<LocalFleet>>>(std::move(created));
    }));
}

void DesktopSession::started(std::shared_ptr<Result<std::unique_ptr<LocalFleet>>> created)
{
    if (!*created) {
        setState(JobState::Failed, created->error());
        return;
    }
    m_fleet = std::move(*created).value();
    m_job = m_fleet->spec();
    CoordinatorThread *coordinator = m_fleet->coordinator();
    connect(coordinator, &CoordinatorThread::snapshot, this,
            [this](const JobProgress &p, const std::vector<WorkerStatus> &workers) {
                const Snapshot s = toSnapshot(p, workers, [this](const WorkerStatus &w) {
                    return w.name.startsWith(QStringLiteral("local-")) ? QStringLiteral("this machine")
                                                                       : m_network.addressOf(w.id);
                });
                Q_EMIT snapshot(s);
                Q_EMIT costUpdated(CostPoint{s.atMs, p.cost.costSpot, p.cost.costOnDemand, p.cost.costActual,
                                                 p.cost.usefulSeconds, p.cost.wastedSeconds});
            });
    connect(coordinator, &CoordinatorThread::assimilated, this, &DesktopSession::assimilated);
    connect(coordinator, &CoordinatorThread::evaluated, this, &DesktopSession::evaluated);
    connect(coordinator, &CoordinatorThread::eventRecorded, this, &DesktopSession::eventAdded);
    connect(m_fleet.get(), &LocalFleet::finished, this, [this](bool ok, const QString &message) {
        setState(ok ? JobState::Finished : JobState::Failed,
                 ok ? tr("the model is in %1").arg(QDir(m_runDir).filePath(QStringLiteral("model.pt"))) : message);
    });
    loadHistory();
    m_fleet->start();
    m_fleet->setLocalWorkers(m_contributing ? 1 : 0, m_threads);
    startNetwork();
    setState(JobState::Running, m_fleet->resumed() ? tr("resumed from %1").arg(m_runDir) : QString());
}

void DesktopSession::loadHistory()
{
    const QString db = QDir(m_runDir).filePath(QStringLiteral("flotilla.db"));
    auto *watcher = new QFutureWatcher<History>(this);
    const int generation = m_generation;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation == m_generation)
            Q_EMIT historyLoaded(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run([db] { return readHistory(db); }));
}

void DesktopSession::startNetwork()
{
    net::TlsListener::Options options;
    options.identityDir = m_options.identityDir;
    options.hostNames = m_options.hostNames;
    // A busy port (another Flotilla, say) falls back to any free one.
    if (auto serving = m_network.start(m_fleet->coordinator(), options, {m_options.port, quint16(0)}); !serving) {
        qCWarning(lcDesktop).noquote() << "remote workers cannot join:" << serving.error();
        m_endpoint.clear();
        return;
    }
    m_endpoint = QStringLiteral("%1:%2").arg(m_options.hostNames.value(0, QStringLiteral("127.0.0.1"))).arg(m_network.port());
    // An operator attached from elsewhere may stop the job, as the Stop button does.
    connect(m_network.server(), &FleetServer::stopRequested, this, [this](const QString &by) {
        // Once the operator's answer has had a moment to leave.
        const int generation = m_generation;
        QTimer::singleShot(500, this, [this, by, generation] {
            if (!m_fleet || generation != m_generation)
                return;
            stop();
            setState(JobState::Stopped, tr("stopped by operator %1; start it again to resume").arg(by));
        });
    });
}

void DesktopSession::stopNetwork()
{
    m_network.stop();
    m_endpoint.clear();
}

void DesktopSession::setPaused(bool paused)
{
    if (!m_fleet || (m_state != JobState::Running && m_state != JobState::Paused))
        return;
    m_fleet->coordinator()->setPausedAsync(paused);
    setState(paused ? JobState::Paused : JobState::Running);
}

void DesktopSession::stop()
{
    if (!m_fleet)
        return;
    ++m_generation;
    stopNetwork();
    m_fleet->stop();
    m_fleet.reset();
    setState(JobState::Stopped, tr("start it again to resume from %1").arg(m_runDir));
}

void DesktopSession::setContributing(bool on, int threads)
{
    m_contributing = on;
    m_threads = std::max(1, threads);
    if (m_fleet && (m_state == JobState::Running || m_state == JobState::Paused))
        m_fleet->setLocalWorkers(on ? 1 : 0, m_threads);
}

void DesktopSession::issueToken(int uses, qint64 validSeconds)
{
    auto token = issueTokenNow(uses, validSeconds);
    Q_EMIT tokenIssued(token ? *token : QString(), token ? QString() : token.error());
    if (token)
        Q_EMIT tokensChanged();
}

Result<QString> DesktopSession::issueTokenNow(int uses, qint64 validSeconds)
{
    if (!m_network.serving())
        return fail(tr("start a job first: tokens name the coordinator's address"));
    net::TrustStore trust(m_options.identityDir);
    auto token = trust.issueToken(m_options.hostNames.value(0, QStringLiteral("127.0.0.1")), m_network.port(), m_network.caFingerprint(),
                                  validSeconds, uses, QDateTime::currentMSecsSinceEpoch(),
                                  QStringLiteral("control center"));
    if (!token)
        return token.takeError();
    return token->encode();
}

Result<QList<JoinTokenRow>> DesktopSession::joinTokens(bool includeSpent)
{
    auto tokens = net::TrustStore(m_options.identityDir).tokens();
    if (!tokens)
        return tokens.takeError();
    return tokenRows(*tokens, QDateTime::currentMSecsSinceEpoch(), includeSpent);
}

void DesktopSession::revokeToken(const QString &id)
{
    auto revoked = net::TrustStore(m_options.identityDir).revokeToken(id, QDateTime::currentMSecsSinceEpoch());
    Q_EMIT commandAnswered(revoked ? tr("Revoked token %1.").arg(revoked->idHex()) : QString(),
                           revoked ? QString() : revoked.error());
    if (revoked)
        Q_EMIT tokensChanged();
}

void DesktopSession::revoke(const QString &workerName)
{
    if (workerName.startsWith(QStringLiteral("local-"))) {
        Q_EMIT commandAnswered({}, tr("'%1' is this app's own worker: switch off \"Contribute this machine\" instead")
                                       .arg(workerName));
        return;
    }
    auto revoked = net::TrustStore(m_options.identityDir)
                       .revoke(workerName, tr("revoked from the control center"), QDateTime::currentMSecsSinceEpoch());
    Q_EMIT commandAnswered(revoked ? tr("Revoked worker '%1'").arg(workerName) : QString(),
                           revoked ? QString() : revoked.error());
}

void DesktopSession::release(qint64 workerId)
{
    if (m_fleet)
        m_fleet->coordinator()->releaseAsync(workerId, tr("the operator at the control center"));
}

void DesktopSession::refreshSubtasks()
{
    if (m_runDir.isEmpty())
        return;
    const QString db = QDir(m_runDir).filePath(QStringLiteral("flotilla.db"));
    auto *watcher = new QFutureWatcher<QList<SubtaskRow>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
        watcher->deleteLater();
        Q_EMIT subtasksLoaded(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run([db] { return readSubtasks(db); }));
}

Result<void> DesktopSession::exportMetrics(const QString &path)
{
    if (m_runDir.isEmpty())
        return fail(tr("there is no job to export the metrics of"));
    const History h = readHistory(QDir(m_runDir).filePath(QStringLiteral("flotilla.db")));
    const QByteArray csv = metricsCsv(h);
    return writeFileAtomically(path, csv);
}

Result<void> DesktopSession::exportModel(const QString &path)
{
    const QString model = QDir(m_runDir).filePath(QStringLiteral("model.pt"));
    if (m_runDir.isEmpty() || !QFile::exists(model))
        return fail(tr("the trained model is written when the job finishes"));
    QFile::remove(path);
    if (!QFile::copy(model, path))
        return fail(tr("cannot copy the model to '%1'").arg(path));
    return {};
}

} // namespace flotilla
