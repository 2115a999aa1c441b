#pragma once
// Hosts a job's FleetServer on a network thread of its own, so that hashing, encrypting and
// copying weights never wait for the UI or the coordinator, nor the other way round. The one
// place that starts and stops the coordinator's TLS endpoint: `flotilla serve` and the
// control center both use it.
//
// Threads: the host lives on the thread that made it (the UI or main thread); the server and
// its listener live on the network thread. start() and stop() wait for that thread to load
// or make the coordinator's identity and bind (or close) the port; nothing here waits for the
// coordinator or its disk. The server's signals may be connected to from any thread.

#include "server/FleetServer.h"

#include <QThread>

#include <functional>
#include <memory>

namespace flotilla {

class NetworkHost
{
public:
    NetworkHost();
    ~NetworkHost();
    NetworkHost(const NetworkHost &) = delete;
    NetworkHost &operator=(const NetworkHost &) = delete;

    // Serves the job of `coordinator` on the first of `ports` that can be bound
    // (options.port is ignored; 0 means any free port). Stops what was served before.
    Result<void> start(CoordinatorThread *coordinator, net::TlsListener::Options options,
                       const QList<quint16> &ports);
    // Serves a fleet: no job yet; addJob() and removeJob() bring and take them while the
    // workers stay connected (FleetServer).
    Result<void> startFleet(net::TlsListener::Options options, const QList<quint16> &ports);
    // On the network thread, waited for. The coordinator must outlive removeJob(key).
    Result<void> addJob(const QString &key, CoordinatorThread *coordinator, double weight = 1.0,
                        const QString &owner = {}, bool quarantinesForFleet = true);
    // Answers a person's queue command on the network thread; not waited for.
    void answer(qint64 connectionId, const QCborMap &reply, const QByteArray &payload);
    void removeJob(const QString &key);
    void setJobWeight(const QString &key, double weight);
    // FleetServer::unmetRequirements(), asked on the network thread and answered on the
    // receiver's thread; nothing waits.
    void askUnmetRequirements(QObject *receiver, std::function<void(const std::map<QString, QString> &)> answer);
    std::map<QString, int> placement() const;
    // Closes every connection and the port; the network thread stays for the next start().
    void stop();

    bool serving() const { return m_server != nullptr; }
    quint16 port() const { return m_port; }
    QByteArray caFingerprint() const { return m_caFingerprint; }
    // Where a worker last connected from; empty when not serving or not known.
    QString addressOf(qint64 workerId) const;
    // Lives on the network thread: connect to its and its listener's signals, call only its
    // thread-safe members. Null when not serving.
    FleetServer *server() const { return m_server.get(); }

private:
    Result<void> listenOn(net::TlsListener::Options options, const QList<quint16> &ports,
                          const std::function<Result<std::unique_ptr<FleetServer>>(const net::TlsListener::Options &)> &make);
    QThread m_thread;
    std::unique_ptr<QObject> m_context; // lives on m_thread; runs the blocking steps there
    std::unique_ptr<FleetServer> m_server;
    quint16 m_port = 0;
    QByteArray m_caFingerprint;
};

} // namespace flotilla
