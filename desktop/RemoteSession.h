#pragma once
// The control center's facade over a coordinator that runs elsewhere (`flotilla serve` on a
// lab server): it attaches with an operator's or a submitter's certificate (enrolling with
// such a token the first time), follows the job through the operator's stream (rows after a
// cursor, then what is new each second; server/WatchStream.h; in a fleet, the next job when
// one ends) and sends the buttons' commands; with a fleet service, it also submits jobs with
// their model and data, and lists, manages and downloads the fleet's jobs (the Jobs tab). The
// connection is the worker's client: mutual TLS, the coordinator's CA pinned by the token,
// reconnecting with backoff. A coordinator that restarts is found again, and the stream
// goes on from the cursor: nothing is shown twice, nothing is missed.
//
// Threads: lives on the UI thread; the socket is event-driven on the same thread, and
// nothing here waits for the network.

#include "net/WorkerClient.h"
#include "ui/ControlSession.h"

#include <map>

namespace flotilla {

class RemoteSession : public ui::ControlSession
{
    Q_OBJECT

public:
    struct Options
    {
        QString stateDir; // the operator's key, certificate and the coordinator's CA
        QString name;     // the operator's name, shown in the coordinator's log
        int maxBackoffMs = 5000;
    };

    explicit RemoteSession(Options options, QObject *parent = nullptr);
    ~RemoteSession() override;

    // Attaches: with an operator token the first time, later from the state folder alone.
    // A worker's token is refused: its certificate could train, not watch.
    Result<void> attach(const std::optional<net::JoinToken> &token);
    void detach();
    const net::WatchCursor &cursor() const { return m_cursor; }
    // Everything received so far, as the charts have it.
    const History &history() const { return m_history; }
    int updatesReceived() const { return m_updates; }

    JobState state() const override { return m_state; }
    JobSpec job() const override { return m_job; }
    QString runDir() const override { return {}; }
    QString endpoint() const override { return m_client.coordinatorAddress(); }
    bool remote() const override { return true; }
    void start(const JobSpec &job, const QString &runDir) override;
    void setPaused(bool paused) override;
    void stop() override;
    void setContributing(bool, int) override { }
    bool contributing() const override { return false; }
    void issueToken(int uses, qint64 validSeconds) override;
    Result<QList<JoinTokenRow>> joinTokens(bool includeSpent) override;
    void revokeToken(const QString &id) override;
    void revoke(const QString &workerName) override;
    void release(qint64 workerId) override;
    void refreshSubtasks() override;
    Result<void> exportMetrics(const QString &path) override;
    Result<void> exportModel(const QString &path) override;
    bool hasQueue() const override { return true; }
    void refreshJobs() override;
    void submitJob(const JobSpec &job, int priority, double weight) override;
    void manageJob(qint64 id, const QString &action, double value = 0) override;
    void downloadJob(qint64 id, const QString &folder) override;

private:
    void setState(JobState state, const QString &message = {});
    void onWelcomed(const QCborMap &welcome);
    void onMessage(const net::Message &message);
    void onUpdate(const net::UpdateMsg &update, const QByteArray &payload);
    void onReply(const net::ReplyMsg &reply, const QByteArray &payload);
    // Returns the command's id, or 0 when it could not be sent (the answer says why).
    qint64 send(net::CommandMsg command, const QByteArray &payload = {});
    void onDownloaded(qint64 commandId, const QByteArray &payload);
    void onModelDownloaded(const QString &path, const QByteArray &payload);
    void failPending(const QString &error);

    Options m_options;
    net::WorkerClient m_client;
    JobState m_state = JobState::NoJob;
    QString m_stateMessage;
    JobSpec m_job;
    net::WatchCursor m_cursor;
    History m_history;
    CostPoint m_cost;      // the running sum of the ledger's rows
    bool m_catchingUp = true;  // rows are gathered and shown at once when the stream catches up
    int m_updates = 0;
    QList<JoinTokenRow> m_tokens;
    std::map<qint64, QString> m_pending; // commands sent, by id: their action
    std::map<qint64, QString> m_downloads; // job-download commands sent, by id: the folder to write to
    std::map<qint64, QString> m_exports;   // ... for the trained model alone, by id: the file to write
    qint64 m_fleetJob = 0; // the queue's id of the fleet job watched last (0: not a fleet's)
    // The coordinator's refusal of "jobs" (a single job's coordinator has no queue): said once,
    // and the queue not asked for again on this connection (the Jobs tab refreshes on every
    // answer, and would ask three times a second).
    QString m_queueRefused;
    qint64 m_nextCommand = 1;
};

} // namespace flotilla
