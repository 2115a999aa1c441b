#pragma once
// The worker window's view of a WorkerAgent: its status with the job, the coordinator, the
// hours given today and in all (kept in QSettings across runs), and the policy that says
// when it may run. The owner's suspend switch and "suspend for 1 hour" go to the policy; the
// policy's decision goes to WorkerAgent::setSuspended, so a suspension always hands in the
// current subtask's partial result, and the policy never resumes what the owner suspended.
//
// Threads: UI thread, with the agent and the policy.

#include "agent/WorkerAgent.h"
#include "machine/Autostart.h"
#include "machine/WorkPolicy.h"
#include "ui/WorkerDesk.h"

namespace flotilla {

// The login entry that starts this machine's worker again for the fleet in stateDir.
AutostartEntry workerAutostart(const QString &stateDir);

// What a pasted join token names ("Coordinator lab:7441, valid until …"), or what is wrong
// with it: the Join a fleet dialog's validator.
Result<QString> describeJoinToken(const QString &text, qint64 nowMs);

class AgentDesk : public ui::WorkerDesk
{
    Q_OBJECT

public:
    // stateDir: the fleet's, for the login entry. agent and policy must outlive the desk.
    AgentDesk(WorkerAgent *agent, WorkPolicy *policy, QString stateDir, QObject *parent = nullptr);

    ui::WorkerDeskStatus status() const override;
    // The owner's switch.
    void setSuspended(bool suspended) override;
    bool suspended() const override;
    void suspendFor(int minutes) override;
    WorkerSettings settings() const override;
    // Saves them, hands them to the policy, and writes or removes the login entry.
    void setSettings(const WorkerSettings &settings) override;
    QStringList deviceChoices() const override;

private:
    void apply(bool run, const QString &reason);
    void account();

    WorkerAgent *m_agent;
    WorkPolicy *m_policy;
    QString m_stateDir;
    QString m_reason;
    QString m_settingsError;
    double m_secondsSeen = 0.0;
};

} // namespace flotilla
