#pragma once
// Connects the network to the coordinator: it owns the TLS endpoint, turns workers'
// messages into calls on the CoordinatorThread (weights decoded and checked on the way),
// and the coordinator's answers into messages. It is where bytes become tensors and back.
//
// Threads: lives on the network thread with its endpoint; the coordinator runs on its own
// thread and is reached only through the CoordinatorThread's asynchronous calls, whose answers come
// back as signals: the network thread never waits for the coordinator (nor for its disk).

#include "bridge/OperatorService.h"
#include "engine/CoordinatorThread.h"
#include "engine/Downlink.h"
#include "net/TlsListener.h"

#include <QHash>
#include <QMutex>
#include <QObject>

#include <map>
#include <memory>

namespace flotilla {

class FleetServer : public QObject
{
    Q_OBJECT

public:
    static Result<std::unique_ptr<FleetServer>> create(CoordinatorThread *coordinator,
                                                             const net::TlsListener::Options &options);
    ~FleetServer() override;

    Result<void> listen();
    quint16 port() const { return m_listener->port(); }
    QByteArray caFingerprint() const { return m_listener->caFingerprint(); }
    net::TlsListener &listener() { return *m_listener; }
    // Where a worker last connected from; any thread may ask.
    QString addressOf(qint64 workerId) const;
    // Control centers attached with an operator's certificate.
    OperatorService &operators() { return *m_operators; }

Q_SIGNALS:
    // An operator asked to stop the job: the process that serves it stops it.
    void stopRequested(const QString &byOperator);

private:
    struct ConnectedWorker
    {
        qint64 workerId = 0;
        QByteArray fingerprint;
        QString name;
    };

    // Asked of the coordinator, waiting for its answer.
    struct Pending
    {
        qint64 connectionId = 0;
        qint64 workerId = 0;
        qint64 leaseId = 0;
        net::PeerInfo peer; // joins
        bool takesChanges = false; // requests: how the worker can take the weights
        qint64 anchor = 0;
        bool closed = false; // the connection closed meanwhile
    };

    FleetServer() = default;
    void onHello(const net::PeerInfo &peer, const net::HelloMsg &hello);
    void onJoined(qint64 ticket, qint64 workerId, const QString &error);
    void onMessage(qint64 connectionId, const net::Message &message);
    void onAssigned(qint64 ticket, const std::optional<Assignment> &assignment, bool finished, bool dismissed);
    void sendShard(qint64 connectionId, const net::ShardRequestMsg &request);
    void receiveResult(qint64 connectionId, const ConnectedWorker &worker, const net::ResultMsg &header,
                       const QByteArray &payload);
    void onSubmitted(qint64 ticket, const SubmitReply &reply);
    void onClosed(qint64 connectionId);
    void onOverBudget(const net::PeerInfo &peer, const QString &reason, bool barred);
    // A shard as it goes on the wire: one encoded copy shared by every connection that asks
    // (the payload is implicitly shared, so queueing it for many costs no copy).
    struct EncodedShard
    {
        QCborMap manifest;
        QByteArray bytes;
        QByteArray sha;
        qint64 lastUsed = 0;
    };
    const EncodedShard &encodedShard(int shard);
    QByteArray shardSha(int shard);

    CoordinatorThread *m_coordinator = nullptr;
    std::unique_ptr<net::TlsListener> m_listener;
    OperatorService *m_operators = nullptr; // a child
    JobSpec m_spec;
    std::shared_ptr<const JobData> m_data;
    WeightLayout m_layout;
    QString m_modelSha256; // TorchScript jobs: the model file workers must hold
    std::map<qint64, ConnectedWorker> m_connected; // by connection
    std::map<qint64, Pending> m_joins;     // by ticket
    std::map<qint64, Pending> m_requests;
    std::map<qint64, Pending> m_results;
    std::map<int, QByteArray> m_shardSha;
    // Bounded: the least recently asked-for shards are encoded again when asked for.
    std::map<int, EncodedShard> m_shardCache;
    qint64 m_shardCacheBytes = 0;
    qint64 m_shardUses = 0;
    mutable QMutex m_addressMutex;
    QHash<qint64, QString> m_addresses;
    std::unique_ptr<DownlinkEncoder> m_downlink;
};

} // namespace flotilla
