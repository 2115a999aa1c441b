#include "server/NetworkHost.h"

#include <QPointer>

namespace flotilla {

NetworkHost::NetworkHost() : m_context(std::make_unique<QObject>())
{
    m_thread.setObjectName(QStringLiteral("network"));
    m_context->moveToThread(&m_thread);
    m_thread.start();
}

NetworkHost::~NetworkHost()
{
    stop();
    QObject *context = m_context.release();
    QMetaObject::invokeMethod(context, [context] { delete context; }, Qt::BlockingQueuedConnection);
    m_thread.quit();
    m_thread.wait();
}

Result<void> NetworkHost::start(CoordinatorThread *coordinator, net::TlsListener::Options options,
                                const QList<quint16> &ports)
{
    return listenOn(options, ports, [coordinator](const net::TlsListener::Options &o) {
        return FleetServer::create(coordinator, o);
    });
}

Result<void> NetworkHost::startFleet(net::TlsListener::Options options, const QList<quint16> &ports)
{
    return listenOn(options, ports, [](const net::TlsListener::Options &o) { return FleetServer::create(o, true); });
}

Result<void> NetworkHost::listenOn(
    net::TlsListener::Options options, const QList<quint16> &ports,
    const std::function<Result<std::unique_ptr<FleetServer>>(const net::TlsListener::Options &)> &make)
{
    stop();
    if (ports.isEmpty())
        return fail(QStringLiteral("no port to listen on was given"));
    QString error;
    QMetaObject::invokeMethod(m_context.get(), [&] {
        for (const quint16 port : ports) {
            options.port = port;
            auto created = make(options);
            if (!created) {
                error = created.error(); // the identity or the job, not the port: no other port helps
                return;
            }
            if (auto listening = (*created)->listen(); !listening) {
                error = listening.error();
                continue;
            }
            m_server = std::move(created).value();
            return;
        }
    }, Qt::BlockingQueuedConnection);
    if (!m_server)
        return fail(error);
    m_port = m_server->port();
    m_caFingerprint = m_server->caFingerprint();
    return {};
}

Result<void> NetworkHost::addJob(const QString &key, CoordinatorThread *coordinator, double weight,
                                 const QString &owner, bool quarantinesForFleet)
{
    if (!m_server)
        return fail(QStringLiteral("the coordinator's endpoint is not open"));
    Result<void> r;
    QMetaObject::invokeMethod(
        m_context.get(), [&] { r = m_server->addJob(key, coordinator, weight, owner, quarantinesForFleet); },
        Qt::BlockingQueuedConnection);
    return r;
}

void NetworkHost::answer(qint64 connectionId, const QCborMap &reply, const QByteArray &payload)
{
    if (m_server)
        QMetaObject::invokeMethod(
            m_context.get(), [this, connectionId, reply, payload] {
                // Run on the network thread, where the server is reset: it may be gone.
                if (m_server)
                    m_server->answer(connectionId, reply, payload);
            },
            Qt::QueuedConnection);
}

void NetworkHost::removeJob(const QString &key)
{
    if (m_server)
        QMetaObject::invokeMethod(m_context.get(), [&] { m_server->removeJob(key); }, Qt::BlockingQueuedConnection);
}

void NetworkHost::setJobWeight(const QString &key, double weight)
{
    if (m_server)
        QMetaObject::invokeMethod(m_context.get(), [&] { m_server->setJobWeight(key, weight); },
                                  Qt::BlockingQueuedConnection);
}

std::map<QString, int> NetworkHost::placement() const
{
    std::map<QString, int> out;
    if (m_server)
        QMetaObject::invokeMethod(m_context.get(), [&] { out = m_server->placement(); }, Qt::BlockingQueuedConnection);
    return out;
}

void NetworkHost::askUnmetRequirements(QObject *receiver,
                                       std::function<void(const std::map<QString, QString> &)> answer)
{
    if (!m_server)
        return;
    QMetaObject::invokeMethod(
        m_context.get(),
        [this, receiver = QPointer<QObject>(receiver), answer = std::move(answer)] {
            if (!m_server || !receiver)
                return;
            QMetaObject::invokeMethod(
                receiver.data(), [answer, unmet = m_server->unmetRequirements()] { answer(unmet); },
                Qt::QueuedConnection);
        },
        Qt::QueuedConnection);
}

void NetworkHost::stop()
{
    if (!m_server)
        return;
    // The server and its sockets belong to the network thread: they are deleted there.
    QMetaObject::invokeMethod(m_context.get(), [this] { m_server.reset(); }, Qt::BlockingQueuedConnection);
    m_port = 0;
    m_caFingerprint.clear();
}

QString NetworkHost::addressOf(qint64 workerId) const
{
    return m_server ? m_server->addressOf(workerId) : QString();
}

} // namespace flotilla
