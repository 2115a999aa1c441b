#pragma once
// A remote worker: it takes subtasks from a coordinator over the network client, fetches
// the shards they name (and caches them by digest, in memory and on disk, both bounded), trains them on a training thread, and
// returns the results. A result whose upload was cut off is sent again after reconnecting;
// a preemption notice (SIGTERM) stops the training, uploads the partial result within a
// grace period, and leaves.
//
// Threads: the agent and the client live on the main thread; training runs on one thread
// of the agent's pool and owns the WorkerJob while it runs.

#include "agent/RequestPacer.h"
#include "engine/training/WorkerJob.h"
#include "engine/wire/Compression.h"
#include "engine/wire/Downlink.h"
#include "engine/wire/ShardCache.h"
#include "net/WorkerClient.h"

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QObject>
#include <QThreadPool>
#include <QTimer>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace flotilla {

class WorkerAgent : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString stateDir;
        QString name;
        QString instanceType = QStringLiteral("local");
        QString priceClass = QStringLiteral("volunteer");
        QString device = QStringLiteral("auto");
        int threads = 1;
        QString modelFile;   // TorchScript jobs: this machine's copy of the model
        // TorchScript jobs whose model this machine does not hold: ask the coordinator for it
        // (the model is code; docs/security.md), or refuse the job.
        bool acceptModels = true;
        qint64 modelCacheBytes = qint64(2048) << 20; // models kept, under stateDir/models
        int graceMs = 20000; // after a preemption notice
        double slowdown = 1.0; // benchmarks: train this many times slower (WorkerJob::setSlowdown)
        // Sees every finished result before it is sent, with the weights its subtask started
        // from. Empty for every real worker; the bench tool's attackers (app/Attacks.h) use
        // it to play a dishonest worker without a branch of their own in this class.
        std::function<void(TrainOutcome &outcome, const torch::Tensor &base)> resultHook;
        qint64 shardCacheBytes = qint64(4096) << 20;  // on disk, under stateDir/shards
        qint64 shardMemoryBytes = qint64(1024) << 20; // decoded, in memory
    };

    WorkerAgent(Options options, QObject *parent = nullptr);
    ~WorkerAgent() override;

    Result<void> start(const std::optional<net::JoinToken> &token);
    // A preemption notice: stop training, hand in what was trained, leave.
    void preemptionNotice();
    // Suspended: hands in what the current subtask trained and takes no more until resumed.
    void setSuspended(bool suspended);
    bool suspended() const { return m_suspended; }

    struct Status
    {
        // connecting, waiting (the fleet runs no job for it), preparing (building the job's
        // model, measuring this machine's speed), training, idle, suspended, finished, failed
        QString state;
        QString coordinator;
        QString job; // as the coordinator's welcome names it
        QString subtask;
        double progress = -1.0;
        int subtasksDone = 0;
        double secondsTrained = 0.0;
        QString message;
    };
    Status status() const;
    // The name it works under: its certificate's once start() has read its identity.
    QString name() const;

Q_SIGNALS:
    void finished(int exitCode, const QString &message);
    // For tests and logs: a subtask started training.
    void trainingStarted(qint64 leaseId);
    void statusChanged();

private:
    struct Current
    {
        qint64 leaseId = 0;
        QString jobKey; // the job the lease is of
        int shard = 0;
        QByteArray shardSha;
        qint64 shardSamples = 0;
        Dataset samples; // the shard's, set once they are here
        SubtaskWork work;
        torch::Tensor weights;
    };
    struct Pending
    {
        qint64 leaseId = 0;
        net::ResultMsg header;
        QByteArray payload;
    };

    // A job's model, built and its speed measured off the agent's thread.
    struct Prepared
    {
        std::unique_ptr<WorkerJob> session;
        double speed = 0.0;
        QString error;
    };

    void onWelcomed(const QCborMap &welcome);
    void onWelcome(const net::WelcomeMsg &welcome);
    // Works for the job of a Welcome: builds its model unless it is the one held already.
    // Building and the speed probe run on the training pool (the agent's thread, a window's
    // in the desktop app, never waits for them); onPrepared goes on from there.
    void adopt(const net::WelcomeMsg &welcome, const QString &modelPath);
    void onPrepared();
    // Goes on with a Welcome's TorchScript model once the candidates' hashes are known: the
    // cached copy, the --model-file, or asks the coordinator for it.
    void resolveModel(const QString &sha, const QString &cached, const QString &cachedSha, const QString &own,
                      const QString &ownSha);
    void onModel(const net::ModelDataMsg &model, const QByteArray &payload);
    // Drops the subtask under way, if any (its lease handed back to its job).
    void dropCurrent(const QString &reason);
    QString modelCachePath(const QString &sha256) const;
    void onMessage(const net::Message &message);
    // Asks for work when the worker may (RequestPacer: now, or later by the retry timer).
    void requestWork();
    // What it was answered held nothing to train: the pacer backs off, then it asks again.
    void answeredWithout();
    void onAssign(const net::AssignMsg &assign, const QByteArray &payload);
    void onShard(const net::ShardDataMsg &shard, const QByteArray &payload);
    void train();
    void onTrained();
    void sendPending();
    void finish(int code, const QString &message);

    Options m_options;
    std::unique_ptr<net::WorkerClient> m_client;
    std::unique_ptr<WorkerJob> m_session;
    QString m_layout;
    QString m_job;
    QString m_jobKey;   // the Welcome's: what results, hand-backs and heartbeats name
    QString m_modelKey; // what the model in m_session was built from
    bool m_waiting = false; // welcomed with no job: the fleet has none for it now
    std::optional<net::WelcomeMsg> m_awaitingModel; // asked for the model of this Welcome
    double m_speed = 0.0;
    quint64 m_jobSeed = 0;
    Compression m_compression = Compression::None; // as the coordinator's Welcome asked
    UpdateEncoder m_encoder;
    DownlinkDecoder m_downlink; // the anchor the global weights come as changes from
    ShardCache m_shards;
    std::optional<Current> m_current;
    std::optional<Pending> m_pending;
    // A Request is on its way and not answered (Assign or NoWork) on this connection yet: the
    // coordinator takes a second one as the worker dropping the lease the first one got.
    bool m_asked = false;
    RequestPacer m_pacer;
    QElapsedTimer m_paceClock;
    bool m_welcomedBefore = false;
    bool m_trainedSinceWelcome = false;
    QThreadPool m_pool;
    // Hashing, reading and writing files (the job's model, shards and the shard cache) run on
    // this one thread, never on the agent's (a window's, in the desktop app).
    QThreadPool m_files;
    quint64 m_welcomes = 0; // counts Welcomes: a file answer for an older one is dropped
    QFutureWatcher<std::shared_ptr<Result<TrainOutcome>>> m_training;
    QFutureWatcher<std::shared_ptr<Prepared>> m_preparing;
    QString m_preparingKey;    // the model key and layout of the model being prepared
    QString m_preparingLayout;
    std::atomic<bool> m_cancel{false};
    std::atomic<qint64> m_done{0};
    std::atomic<qint64> m_planned{0};
    bool m_superseded = false;
    bool m_preempting = false;
    bool m_finished = false;
    bool m_suspended = false;
    bool m_failed = false;
    int m_subtasksDone = 0;
    double m_secondsTrained = 0.0;
    QString m_message;
    QElapsedTimer m_sinceStart;
    bool m_firstStarted = false;
    QTimer m_heartbeat;
    QTimer m_retry;
    QTimer m_grace;
};

// `flotilla worker` with its options parsed from arguments (arguments[0] is the command);
// resultHook as in WorkerAgent::Options.
int runWorker(const QStringList &arguments,
              const std::function<void(TrainOutcome &, const torch::Tensor &)> &resultHook = {});

} // namespace flotilla
