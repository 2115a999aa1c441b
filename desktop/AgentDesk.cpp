#include "desktop/AgentDesk.h"

#include "common/LogCategories.h"
#include "engine/data/JobData.h"
#include "engine/training/Device.h"

#include <QCoreApplication>
#include <QDate>
#include <QLocale>
#include <QSettings>

namespace flotilla {

namespace {

const QString kTotal = QStringLiteral("worker/hoursContributed");
const QString kToday = QStringLiteral("worker/hoursToday");
const QString kTodayDate = QStringLiteral("worker/hoursTodayDate");

double hoursToday(const QSettings &settings)
{
    return settings.value(kTodayDate).toDate() == QDate::currentDate() ? settings.value(kToday, 0.0).toDouble() : 0.0;
}

} // namespace

AutostartEntry workerAutostart(const QString &stateDir)
{
    return AutostartEntry{QStringLiteral("org.flotilla.FlotillaWorker"), QStringLiteral("Flotilla worker"),
                          QCoreApplication::applicationFilePath(),
                          {QStringLiteral("--join"), QStringLiteral("--state-dir"), stateDir}};
}

Result<QString> describeJoinToken(const QString &text, qint64 nowMs)
{
    auto token = net::JoinToken::decode(text);
    if (!token)
        return fail(token.error());
    const QString expiry = QLocale().toString(QDateTime::fromMSecsSinceEpoch(token->expiresMs), QLocale::ShortFormat);
    if (token->expiresMs <= nowMs)
        return fail(QStringLiteral("the join token expired on %1; ask the fleet's owner for a new one").arg(expiry));
    return QStringLiteral("Coordinator %1:%2, token valid until %3.").arg(token->host).arg(token->port).arg(expiry);
}

AgentDesk::AgentDesk(WorkerAgent *agent, WorkPolicy *policy, QString stateDir, QObject *parent)
    : ui::WorkerDesk(parent), m_agent(agent), m_policy(policy), m_stateDir(std::move(stateDir))
{
    connect(agent, &WorkerAgent::statusChanged, this, [this] {
        account();
        Q_EMIT statusChanged();
    });
    connect(policy, &WorkPolicy::decisionChanged, this, &AgentDesk::apply);
    const WorkPolicy::Decision d = policy->evaluate();
    apply(d.run, d.reason);
}

void AgentDesk::apply(bool run, const QString &reason)
{
    m_reason = reason;
    if (run == m_agent->suspended())
        qCInfo(lcDesktop).noquote() << (run ? "resuming" : "suspending:") << reason;
    m_agent->setSuspended(!run);
    Q_EMIT statusChanged();
}

// The hours trained since the last look, added to today's and to the total.
void AgentDesk::account()
{
    const double seconds = m_agent->status().secondsTrained;
    const double delta = seconds - m_secondsSeen;
    if (delta <= 0)
        return;
    m_secondsSeen = seconds;
    QSettings settings;
    settings.setValue(kTotal, settings.value(kTotal, 0.0).toDouble() + delta / 3600.0);
    settings.setValue(kToday, hoursToday(settings) + delta / 3600.0);
    settings.setValue(kTodayDate, QDate::currentDate());
}

ui::WorkerDeskStatus AgentDesk::status() const
{
    const WorkerAgent::Status s = m_agent->status();
    const QSettings settings;
    ui::WorkerDeskStatus d;
    d.state = s.state;
    d.coordinator = s.coordinator;
    d.job = s.job;
    d.subtask = s.subtask;
    d.progress = s.progress;
    d.hoursContributed = settings.value(kTotal, 0.0).toDouble();
    d.hoursToday = hoursToday(settings);
    d.subtasksDone = s.subtasksDone;
    d.message = m_settingsError.isEmpty() ? s.message : m_settingsError;
    d.policy = m_reason;
    return d;
}

void AgentDesk::setSuspended(bool suspended)
{
    if (!suspended)
        m_policy->cancelTimedSuspension();
    m_policy->setManualSuspended(suspended);
}

bool AgentDesk::suspended() const
{
    return m_policy->manualSuspended() || m_policy->suspendedUntilMs() > 0;
}

void AgentDesk::suspendFor(int minutes)
{
    m_policy->suspendFor(qint64(minutes) * 60000);
}

WorkerSettings AgentDesk::settings() const
{
    WorkerSettings s = m_policy->settings();
    s.startAtLogin = autostartEnabled(workerAutostart(m_stateDir).id);
    return s;
}

void AgentDesk::setSettings(const WorkerSettings &settings)
{
    settings.save();
    m_settingsError.clear();
    if (settings.startAtLogin != autostartEnabled(workerAutostart(m_stateDir).id)) {
        if (auto r = setAutostart(workerAutostart(m_stateDir), settings.startAtLogin); !r)
            m_settingsError = r.error();
    }
    m_policy->setSettings(settings);
    Q_EMIT statusChanged();
}

QStringList AgentDesk::deviceChoices() const
{
    QStringList choices{QStringLiteral("auto"), QStringLiteral("cpu")};
    // The engine says which GPUs it can train on; the first one it refuses ends the list.
    for (int i = 0; i < 64; ++i) {
        const QString name = QStringLiteral("cuda:%1").arg(i);
        if (!selectDevice(name))
            break;
        choices << name;
    }
    return choices;
}

} // namespace flotilla
