#include "server/FleetClient.h"

#include <QEventLoop>
#include <QTimer>

namespace flotilla {

FleetClient::FleetClient(Options options, QObject *parent)
    : QObject(parent),
      m_options(std::move(options)),
      m_client(net::WorkerClient::Options::forPerson(m_options.stateDir, m_options.name, 2000))
{
}

FleetClient::~FleetClient()
{
    m_client.stop();
}

Result<void> FleetClient::configure(const std::optional<net::JoinToken> &token)
{
    if (token && !net::isPerson(token->role))
        return fail(tr("this is a worker's join token: a person attaches with an operator or submitter token (on the "
                       "coordinator: flotilla token --submitter)"));
    return m_client.configure(token);
}

Result<FleetClient::Answer> FleetClient::request(net::CommandMsg command, const QByteArray &payload)
{
    QEventLoop loop;
    Result<Answer> out = fail(tr("no answer from the coordinator at %1 within %2 s")
                                  .arg(coordinatorAddress())
                                  .arg(m_options.timeoutMs / 1000));
    bool sent = false;
    command.id = 1;
    QList<QMetaObject::Connection> connections;
    connections << connect(&m_client, &net::WorkerClient::welcomed, this, [&](const QCborMap &) {
        if (std::exchange(sent, true))
            return; // welcomed again (a job started): the command went already
        m_client.send(command, payload);
    });
    connections << connect(&m_client, &net::WorkerClient::messageReceived, this, [&](const net::Message &message) {
        if (message.type != net::MessageType::Reply)
            return; // the job stream's Welcome and Updates are not asked for here
        auto reply = net::ReplyMsg::decode(message.header);
        if (!reply)
            out = fail(tr("the coordinator's answer is damaged: %1").arg(reply.error()));
        else if (reply->id != command.id)
            return;
        else if (!reply->error.isEmpty())
            out = fail(reply->error);
        else
            out = Answer{reply->text, message.payload};
        loop.quit();
    });
    connections << connect(&m_client, &net::WorkerClient::disconnected, this, [&](const QString &reason) {
        if (!sent)
            return; // not yet connected: it tries again
        out = fail(tr("the connection to %1 was lost before the coordinator answered (%2); flotilla jobs "
                      "--coordinator shows whether it was done")
                       .arg(coordinatorAddress(), reason));
        loop.quit();
    });
    connections << connect(&m_client, &net::WorkerClient::failed, this, [&](const QString &reason) {
        out = fail(reason);
        loop.quit();
    });
    QTimer::singleShot(m_options.timeoutMs, &loop, &QEventLoop::quit);
    net::HelloMsg hello;
    hello.device = QStringLiteral("operator");
    m_client.start(hello);
    loop.exec();
    for (const auto &c : connections)
        disconnect(c);
    m_client.stop();
    return out;
}

} // namespace flotilla
