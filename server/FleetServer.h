#pragma once
// Connects the network to the fleet's jobs: it owns the TLS endpoint, places each connected
// worker in one of the jobs it serves, turns the workers' messages into calls on that job's
// CoordinatorThread (weights decoded and checked on the way), and the coordinators' answers
// into messages. It is where bytes become tensors and back.
//
// Jobs: one (`flotilla serve` with a job, the control center), whose end ends its workers,
// or a fleet's several (`flotilla serve` as a fleet service, FleetService), added and removed
// while the workers stay connected. In a fleet, a worker is placed in the job furthest
// under its share of the connected workers (weight / sum of weights), is moved between two
// of its subtasks when its job is over its share by more than half a worker and another is
// under by as much, and goes to another job, or waits, when its job ends. docs/algorithms.md
// gives the policy. A worker's id is its certificate's, the same in every job.
//
// Threads: lives on the network thread with its endpoint; the coordinators run on their own
// threads and are reached only through the CoordinatorThread's asynchronous calls, whose
// answers come back as signals: the network thread never waits for a coordinator (nor for
// its disk), except in addJob(), which reads the job's description once.

#include "engine/coordination/CoordinatorThread.h"
#include "engine/wire/Downlink.h"
#include "net/TlsListener.h"
#include "server/OperatorService.h"

#include <QElapsedTimer>
#include <QHash>
#include <QMutex>
#include <QObject>

#include <map>
#include <memory>
#include <set>

namespace flotilla {

class FleetServer : public QObject
{
    Q_OBJECT

public:
    // fleet: workers stay between jobs (see above); otherwise the end of the one job is the
    // end of its workers.
    static Result<std::unique_ptr<FleetServer>> create(const net::TlsListener::Options &options, bool fleet);
    // One job's server, as before fleets: create(options, false) serving `coordinator`.
    static Result<std::unique_ptr<FleetServer>> create(CoordinatorThread *coordinator,
                                                       const net::TlsListener::Options &options);
    ~FleetServer() override;

    // Serves a job under a key of the fleet's (unique among the jobs served); workers are
    // placed in it at once. The coordinator must outlive removeJob(key).
    // owner: the submitter whose job it is (a fleet's); empty: only an operator commands it.
    // quarantinesForFleet: a worker this job quarantines is kept out of every job (false for
    // a submitter's job, whose settings say how strict its checks are).
    Result<void> addJob(const QString &key, CoordinatorThread *coordinator, double weight = 1.0,
                        const QString &owner = {}, bool quarantinesForFleet = true);
    // Stops serving a job: its workers go to another job, or wait. What they send for it
    // afterwards is answered as already done.
    void removeJob(const QString &key);
    void setJobWeight(const QString &key, double weight);
    // Workers connected to each job, by key; "" counts those waiting.
    std::map<QString, int> placement() const;
    // The jobs that no connected worker may be placed in, by key: why (what they require, or
    // the fleet's quarantine). A job with no worker connected at all is not listed.
    std::map<QString, QString> unmetRequirements() const;

    Result<void> listen();
    quint16 port() const { return m_listener->port(); }
    QByteArray caFingerprint() const { return m_listener->caFingerprint(); }
    net::TlsListener &listener() { return *m_listener; }
    // Where a worker last connected from; any thread may ask.
    QString addressOf(qint64 workerId) const;
    // Answers a person's queue command (queueCommand), if its connection is still open.
    void answer(qint64 connectionId, const QCborMap &reply, const QByteArray &payload);
    // Whether an action is one of a fleet's queue (jobs, submit, job-*), not the watched job's.
    static bool isQueueAction(const QString &action);

Q_SIGNALS:
    // An operator asked to stop the job: the process that serves it stops it.
    void stopRequested(const QString &byOperator);
    // The same, in a fleet: the job of `key`.
    void jobStopRequested(const QString &key, const QString &byOperator);
    // A worker was placed in a job ("" : it waits); for logs and tests.
    void workerPlaced(qint64 workerId, const QString &key);
    // A person (an operator or a submitter) asked something of the fleet's queue: the fleet
    // service answers it through answer(). header: the Command, as it came.
    void queueCommand(qint64 connectionId, const QString &name, bool administrator, const QCborMap &header,
                      const QByteArray &payload);

private:
    struct ConnectedWorker
    {
        qint64 workerId = 0; // the fleet's, from its certificate
        QByteArray fingerprint;
        QString name;
        WorkerInfo info; // as it said Hello: what it joins each job with
        qint64 memoryMb = 0; // its machine's, as it said Hello (0: not said)
        QString job;     // the job it works for; empty while it waits or joins one
        QString joining; // the job it is joining (its join not answered yet)
    };

    // Asked of a coordinator, waiting for its answer.
    struct Pending
    {
        qint64 connectionId = 0;
        qint64 workerId = 0;
        qint64 leaseId = 0;
        bool takesChanges = false; // requests: how the worker can take the weights
        qint64 anchor = 0;
        bool closed = false; // the connection closed meanwhile
    };

    // A shard as it goes on the wire: one encoded copy shared by every connection that asks
    // (the payload is implicitly shared, so queueing it for many costs no copy).
    struct EncodedShard
    {
        QCborMap manifest;
        QByteArray bytes;
        QByteArray sha;
        qint64 lastUsed = 0;
    };

    struct Job
    {
        QString key;
        CoordinatorThread *coordinator = nullptr;
        double weight = 1.0;
        qint64 order = 0; // the order jobs were added in: ties go to the older
        JobSpec spec;
        std::shared_ptr<const JobData> data;
        WeightLayout layout;
        QString modelSha256; // TorchScript jobs: the model file workers must hold
        QByteArray modelBytes; // ... sent to those that do not
        std::map<qint64, Pending> joins; // by ticket
        std::map<qint64, Pending> requests;
        std::map<qint64, Pending> results;
        // Rounds: Requests that found the round full, by connection, asked again as soon as
        // the round folds (an assimilation) instead of answered NoWork to ask again later; a
        // worker otherwise idled up to the NoWork wait in every round. With the time parked.
        std::map<qint64, std::pair<Pending, qint64>> parked;
        bool unparkQueued = false;
        std::map<int, QByteArray> shardSha;
        // Bounded: the least recently asked-for shards are encoded again when asked for.
        std::map<int, EncodedShard> shardCache;
        qint64 shardCacheBytes = 0;
        qint64 shardUses = 0;
        std::unique_ptr<DownlinkEncoder> downlink;
        // Its coordinator answered a Request with "finished": no worker is placed or moved
        // here again (the fleet service removes the job a moment later).
        bool finished = false;
        // It dismissed an idle worker (fleet.dismiss_idle): nothing is queued at its tail, so
        // no worker is placed or moved here until this time on m_clock, or until it grants a
        // lease again. Without it a dismissed worker was placed in another job, moved back
        // here by the shares at its next Request, dismissed again, and so on, Requests in a
        // tight loop.
        qint64 closedUntilMs = 0;
        OperatorService *operators = nullptr; // a child of the server
        std::vector<QMetaObject::Connection> connections;
    };

    // A person's connection: the job whose stream it watches ("" while the fleet runs none).
    struct Person
    {
        net::PeerInfo peer;
        QString job;
    };

    FleetServer() = default;
    void attachPerson(qint64 connectionId);
    void onPersonMessage(qint64 connectionId, const net::Message &message);
    Result<void> setUp(const net::TlsListener::Options &options, bool fleet);
    void onHello(const net::PeerInfo &peer, const net::HelloMsg &hello);
    void onJoined(Job &job, qint64 ticket, qint64 workerId, const QString &error);
    void onMessage(qint64 connectionId, const net::Message &message);
    void onRequest(qint64 connectionId, ConnectedWorker &worker, const net::RequestMsg &request);
    void onAssigned(Job &job, qint64 ticket, const std::optional<Assignment> &assignment, bool finished,
                    bool dismissed, bool roundFull);
    // Asks again, for every parked Request of a job, after its round folded; a Request parked
    // longer than a while is answered NoWork.
    void unpark(Job &job);
    void sendShard(qint64 connectionId, const ConnectedWorker &worker, const net::ShardRequestMsg &request);
    void sendModel(qint64 connectionId, const net::ModelRequestMsg &request);
    void receiveResult(qint64 connectionId, const ConnectedWorker &worker, const net::ResultMsg &header,
                       const QByteArray &payload);
    void onSubmitted(Job &job, qint64 ticket, const SubmitReply &reply);
    void onClosed(qint64 connectionId);
    void onOverBudget(const net::PeerInfo &peer, const QString &reason, bool barred);
    void onJobEnded(Job &job, bool done);

    // The job a message names (or the worker's own when it names none); null when that job
    // is not served (any more).
    Job *jobFor(const ConnectedWorker &worker, const QString &named);
    // Places a worker that works for no job: it joins the job furthest under its share, or
    // is told to wait. `except`: a job it is not to go to (the one it just left).
    void place(qint64 connectionId, const QString &except = {});
    // The job a worker of `from` should move to (empty: none), by the shares.
    QString moveTarget(const ConnectedWorker &worker, const QString &from) const;
    // What a job needs (fleet.require_device, fleet.require_memory_mb) that the worker lacks;
    // empty when it may be placed there.
    static QString lacks(const ConnectedWorker &worker, const Job &job);
    // Why a worker that no job takes waits: the fleet's quarantine, or what the running jobs
    // need; empty when no job runs or one it could train has nothing for it now.
    QString waitingReason(const ConnectedWorker &worker) const;
    void leaveJob(ConnectedWorker &worker, const QString &reason);
    // The fleet's quarantine: a worker one job quarantined is placed in none until released.
    void quarantineInFleet(qint64 workerId, const QString &reason);
    void releaseInFleet(qint64 workerId, const QString &by);
    // The quarantine as the trust database has it now (flotilla release --identity-dir).
    void rereadQuarantine();
    void sendWelcome(qint64 connectionId, const ConnectedWorker &worker, const Job *job, const QString &waiting = {});
    // Whether workers may be placed in or moved to a job (not finished, not dismissing).
    bool takesWorkers(const Job &job) const;
    // The shares of the jobs that take workers.
    std::map<QString, double> targets() const;
    std::map<QString, int> counts() const;
    const EncodedShard &encodedShard(Job &job, int shard);
    QByteArray shardSha(Job &job, int shard);

    bool m_fleet = false;
    QElapsedTimer m_clock;
    qint64 m_jobsAdded = 0;
    std::unique_ptr<net::TlsListener> m_listener;
    net::TlsListener::Options m_options;
    std::map<QString, std::unique_ptr<Job>> m_jobs;
    std::map<qint64, ConnectedWorker> m_connected; // by connection
    std::map<qint64, Person> m_people;             // by connection
    std::map<qint64, QString> m_quarantined;       // the fleet's, by worker id: why
    std::set<qint64> m_released;                   // released since the service started: told to each new job
    mutable QMutex m_addressMutex;
    QHash<qint64, QString> m_addresses;
};

} // namespace flotilla
