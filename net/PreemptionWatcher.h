#pragma once
// Watches a cloud's instance metadata service for a preemption notice: GCE's
// instance/preempted, AWS's spot/instance-action (IMDSv2, with a session token) and Azure's
// Scheduled Events (Preempt). On a notice the worker hands in its partial result before the
// machine goes. The metadata address is configurable (tests use a fake server on loopback);
// requests never go through a proxy.
//
// Threads: lives on the thread that created it.

#include <QNetworkAccessManager>
#include <QObject>
#include <QTimer>
#include <QUrl>

#include <optional>

namespace flotilla::net {

class PreemptionWatcher : public QObject
{
    Q_OBJECT

public:
    enum class Cloud { Gce, Aws, Azure };
    static std::optional<Cloud> cloudFromName(const QString &name); // gce, aws, azure
    // The real metadata service's base address for a cloud.
    static QUrl defaultBase(Cloud cloud);

    PreemptionWatcher(Cloud cloud, QUrl base, int intervalMs = 5000, QObject *parent = nullptr);
    void start();
    void stop();

Q_SIGNALS:
    // The platform announced that this machine is about to go.
    void noticed(const QString &what);
    // The metadata service could not be asked (said once, until it answers again).
    void unreachable(const QString &why);

private:
    void poll();
    void ask(const QByteArray &token);
    QNetworkRequest request(const QString &path) const;
    void answered(QNetworkReply *reply);

    Cloud m_cloud;
    QUrl m_base;
    QNetworkAccessManager m_network;
    QTimer m_timer;
    bool m_noticed = false;
    bool m_complained = false;
    bool m_busy = false;
};

} // namespace flotilla::net
