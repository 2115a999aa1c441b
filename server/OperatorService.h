#pragma once
// A coordinator's service to its operators: control centers attached from elsewhere with a
// certificate issued by an operator token. Each one watches the job (Watch: the store's rows
// after its cursor, then every second what is new, with the latest snapshot and the join
// tokens) and commands it (Command: pause, resume, stop, join tokens, revocations, releases,
// the subtask list). An operator never trains: anything a worker sends is refused, as
// FleetServer refuses Watch and Command from workers.
//
// Threads: lives on the network thread with its FleetServer. The store is read on pool
// threads, one read at a time per operator, each operator with its own store connection;
// the coordinator is reached only through CoordinatorThread's asynchronous calls.

#include "engine/coordination/CoordinatorThread.h"
#include "job/SessionTypes.h"
#include "net/TlsListener.h"

#include <QObject>

#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace flotilla {

class OperatorService : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString runDir;   // the job's store is runDir/flotilla.db
        QString hostName; // the address join tokens name
        // The submitter whose job it is, in a fleet: it may command the job as an operator
        // may; empty (a job `flotilla serve` was started with): operators alone.
        QString owner;
        QString jobKey; // in a fleet: the job's key, which its Welcome names
        // Where a worker connects from, for the Workers tab.
        std::function<QString(const WorkerStatus &)> addressOf;
        int rowsPerUpdate = 2000; // of each kind; a long history comes in several updates
    };

    OperatorService(CoordinatorThread *coordinator, net::TlsListener &listener, Options options,
                    QObject *parent = nullptr);
    ~OperatorService() override;

    // A person (an operator or a submitter) said Hello: it is welcomed, and watches once it
    // says Watch. What it may command depends on its role (docs/security.md "Roles").
    void attach(const net::PeerInfo &peer);
    bool serves(qint64 connectionId) const { return m_operators.count(connectionId) != 0; }
    void onMessage(qint64 connectionId, const net::Message &message);
    void onClosed(qint64 connectionId);
    int operatorCount() const { return int(m_operators.size()); }
    // The fleet's commands (issue-token, revoke-token, revoke-worker), an operator's alone:
    // the answer, or nothing when the action is not one of them. A fleet that runs no job
    // answers them too.
    static std::optional<net::ReplyMsg> fleetCommand(net::TlsListener &listener, const QString &hostName,
                                                     const QString &by, net::Role role, const net::CommandMsg &c);
    std::vector<qint64> connections() const
    {
        std::vector<qint64> out;
        for (const auto &[connection, op] : m_operators)
            out.push_back(connection);
        return out;
    }

Q_SIGNALS:
    // An operator asked to stop the job (the process serving it decides how).
    void stopRequested(const QString &byOperator);
    // An operator released a worker from quarantine (the job's, and the fleet's).
    void releaseRequested(qint64 workerId, const QString &byOperator);

private:
    struct StoreSlot;
    struct Operator
    {
        QString name;
        net::Role role = net::Role::Operator;
        net::WatchCursor cursor;
        bool watching = false;
        bool reading = false;
        bool readAgain = false;
        bool listingSubtasks = false;
        QByteArray tokensSent; // the token list as last sent: sent again only when it changed
        std::shared_ptr<StoreSlot> store;
    };

    void onSnapshot(const JobProgress &progress, const std::vector<WorkerStatus> &workers);
    void read(qint64 connectionId);
    void command(qint64 connectionId, const net::CommandMsg &command);
    void reply(qint64 connectionId, const net::CommandMsg &command, const QString &error, const QString &text = {},
               const QByteArray &payload = {});
    QString storePath() const;

    CoordinatorThread *m_coordinator;
    net::TlsListener &m_listener;
    Options m_options;
    QString m_job;
    std::map<qint64, Operator> m_operators; // by connection
    std::optional<Snapshot> m_snapshot;
    QString m_state = QStringLiteral("running");
    QString m_stateMessage;
};

} // namespace flotilla
