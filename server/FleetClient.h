#pragma once
// A person's requests to a fleet's queue from another machine (`flotilla submit
// --coordinator`, `flotilla jobs --coordinator`): it connects with the person's certificate
// (enrolling with an operator or submitter token the first time), sends one queue command
// and gives its answer. A submission is never sent twice: a connection lost before the
// answer is an error that says to look at the queue.
//
// Threads: lives on the thread that made it; request() runs that thread's event loop until
// the answer comes.

#include "net/WorkerClient.h"

#include <QObject>

namespace flotilla {

class FleetClient : public QObject
{
    Q_OBJECT

public:
    struct Options
    {
        QString stateDir; // the person's key, certificate and the coordinator's CA
        QString name;     // the name to enrol under the first time; empty: this machine's
        int timeoutMs = 10 * 60 * 1000;
    };

    struct Answer
    {
        QString text;
        QByteArray payload;
    };

    explicit FleetClient(Options options, QObject *parent = nullptr);
    ~FleetClient() override;

    // With a token the first time, later from the state folder alone. A worker's token is
    // refused: its certificate may train, not manage jobs.
    Result<void> configure(const std::optional<net::JoinToken> &token);
    QString coordinatorAddress() const { return m_client.coordinatorAddress(); }
    QString name() const { return m_client.name(); }

    // Sends the command once connected and waits for its answer; the coordinator's refusal
    // is the error.
    Result<Answer> request(net::CommandMsg command, const QByteArray &payload = {});

private:
    Options m_options;
    net::WorkerClient m_client;
};

} // namespace flotilla
