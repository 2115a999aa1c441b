#pragma once
// The facade the control center works through: it starts, pauses and stops a job, runs this
// machine's embedded worker, hands out join tokens, and reports what happens as plain values.
// The application implements it with the engine and the network layer.
//
// Threads: lives on the UI thread. No method blocks on training, hashing, disk-heavy work
// or the network; long work (loading data, reading history) happens elsewhere and comes
// back as signals.

#include "common/Result.h"
#include "job/JobSpec.h"
#include "job/SessionTypes.h"

#include <QObject>

namespace flotilla::ui {

class ControlSession : public QObject
{
    Q_OBJECT

public:
    using QObject::QObject;

    virtual JobState state() const = 0;
    virtual JobSpec job() const = 0;
    virtual QString runDir() const = 0;
    // Where workers reach this coordinator ("host:port"), empty before a job runs.
    virtual QString endpoint() const = 0;
    // Whether the coordinator runs elsewhere (a control center attached with an operator's
    // certificate): it starts no job here, and this machine does not train for it.
    virtual bool remote() const { return false; }

    // Opens (or resumes, if runDir holds an unfinished job) and starts a job; the answer
    // comes as stateChanged (Loading, then Running or Failed with the reason).
    virtual void start(const JobSpec &job, const QString &runDir) = 0;
    virtual void setPaused(bool paused) = 0;
    // Stops the job; it can be resumed later from its run directory.
    virtual void stop() = 0;

    // This machine's own worker: on or off, and how many LibTorch threads it may use.
    virtual void setContributing(bool on, int threads) = 0;
    virtual bool contributing() const = 0;

    // A worker's join token; the answer is tokenIssued.
    virtual void issueToken(int uses, qint64 validSeconds) = 0;
    // The coordinator's join tokens (all of them, or only those a worker could still use):
    // a small file read here, the list of the last update when attached; tokensChanged says
    // when to ask again.
    virtual Result<QList<JoinTokenRow>> joinTokens(bool includeSpent) = 0;
    // Bars a join token from further joins; workers that joined with it stay. The answer is
    // commandAnswered.
    virtual void revokeToken(const QString &id) = 0;
    // Revokes a worker's certificates; the answer is commandAnswered.
    virtual void revoke(const QString &workerName) = 0;
    // Lifts a worker's quarantine; the answer is a worker-released event.
    virtual void release(qint64 workerId) = 0;
    virtual void refreshSubtasks() = 0; // answer: subtasksLoaded
    virtual Result<void> exportMetrics(const QString &path) = 0;
    // Writes the trained model; a session attached to a fleet downloads it (the answer is
    // then commandAnswered).
    virtual Result<void> exportModel(const QString &path) = 0;

    // A fleet's queue, where the session has one (a control center attached to a fleet
    // service): list its jobs (answer: jobsListed), submit one with its model and data,
    // cancel, pause, resume, reprioritize or reweight one, download a job's trained model
    // and run folder into a folder here (answers: commandAnswered). Who may do what is the
    // coordinator's to say, from this session's certificate.
    virtual bool hasQueue() const { return false; }
    virtual void refreshJobs() { }
    virtual void submitJob(const JobSpec &, int /*priority*/, double /*weight*/) { Q_EMIT commandAnswered({}, noQueue()); }
    // action: cancel, pause, resume, priority or weight (value: the new priority or weight).
    virtual void manageJob(qint64, const QString &, double /*value*/ = 0) { Q_EMIT commandAnswered({}, noQueue()); }
    virtual void downloadJob(qint64, const QString & /*folder*/) { Q_EMIT commandAnswered({}, noQueue()); }

Q_SIGNALS:
    void stateChanged(flotilla::JobState state, const QString &message);
    void historyLoaded(const flotilla::History &history);
    void snapshot(const flotilla::Snapshot &snapshot);
    void assimilated(const flotilla::AssimilationRecord &point);
    void evaluated(const flotilla::EvaluationRecord &point);
    void costUpdated(const flotilla::CostPoint &point);
    void eventAdded(const flotilla::EventRecord &event);
    void subtasksLoaded(const QList<flotilla::SubtaskRow> &subtasks);
    // error is empty when the token was issued.
    void tokenIssued(const QString &token, const QString &error);
    // What a command did (revoking a token or a worker), or why it could not.
    void commandAnswered(const QString &done, const QString &error);
    void tokensChanged();
    void jobsListed(const QList<flotilla::QueueRow> &jobs);

protected:
    static QString noQueue()
    {
        return tr("this control center runs its own job: a fleet's queue is used from a window attached to a fleet "
                  "service (File > Connect to coordinator…)");
    }
};

} // namespace flotilla::ui
