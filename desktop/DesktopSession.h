#pragma once
// The control center's facade over the engine and the network: it runs a job's coordinator
// (and this machine's embedded worker) with LocalFleet, opens the TLS endpoint for remote
// workers on a network thread, and turns what the coordinator reports into the UI's plain
// values. Loading data and reading the store's history happen on pool threads.
//
// Threads: lives on the UI thread.

#include "ui/ControlSession.h"

#include "engine/coordination/LocalFleet.h"
#include "server/NetworkHost.h"

#include <QFutureWatcher>

#include <memory>

namespace flotilla {

class DesktopSession : public ui::ControlSession
{
    Q_OBJECT

public:
    struct Options
    {
        QString identityDir;  // the coordinator's CA, keys and trust list
        quint16 port = 7441;  // 0: any free port; a busy port falls back to any free one
        QStringList hostNames;
    };

    explicit DesktopSession(Options options, QObject *parent = nullptr);
    ~DesktopSession() override;

    JobState state() const override { return m_state; }
    JobSpec job() const override { return m_job; }
    QString runDir() const override { return m_runDir; }
    QString endpoint() const override { return m_endpoint; }
    void start(const JobSpec &job, const QString &runDir) override;
    void setPaused(bool paused) override;
    void stop() override;
    void setContributing(bool on, int threads) override;
    bool contributing() const override { return m_contributing; }
    void issueToken(int uses, qint64 validSeconds) override;
    // The same, answered here and now (the session's own coordinator: a small file write).
    Result<QString> issueTokenNow(int uses, qint64 validSeconds);
    Result<QList<JoinTokenRow>> joinTokens(bool includeSpent) override;
    void revokeToken(const QString &id) override;
    void revoke(const QString &workerName) override;
    void release(qint64 workerId) override;
    void refreshSubtasks() override;
    Result<void> exportMetrics(const QString &path) override;
    Result<void> exportModel(const QString &path) override;

private:
    void setState(JobState state, const QString &message = {});
    void started(std::shared_ptr<Result<std::unique_ptr<LocalFleet>>> created);
    void startNetwork();
    void stopNetwork();
    void loadHistory();

    Options m_options;
    JobState m_state = JobState::NoJob;
    JobSpec m_job;
    QString m_runDir;
    QString m_endpoint;
    bool m_contributing = true;
    int m_threads = 1;
    std::unique_ptr<LocalFleet> m_fleet;
    NetworkHost m_network; // declared after m_fleet: the server goes before the coordinator it serves
    int m_generation = 0; // answers for a job that was stopped meanwhile are ignored
};

} // namespace flotilla
