#include "net/PreemptionWatcher.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkProxy>
#include <QNetworkReply>
#include <QUrlQuery>

namespace flotilla::net {

namespace {

constexpr int kRequestTimeoutMs = 2000;

} // namespace

std::optional<PreemptionWatcher::Cloud> PreemptionWatcher::cloudFromName(const QString &name)
{
    if (name == QLatin1String("gce") || name == QLatin1String("gcp"))
        return Cloud::Gce;
    if (name == QLatin1String("aws"))
        return Cloud::Aws;
    if (name == QLatin1String("azure"))
        return Cloud::Azure;
    return std::nullopt;
}

QUrl PreemptionWatcher::defaultBase(Cloud cloud)
{
    return cloud == Cloud::Gce ? QUrl(QStringLiteral("http://metadata.google.internal"))
                               : QUrl(QStringLiteral("http://169.254.169.254"));
}

PreemptionWatcher::PreemptionWatcher(Cloud cloud, QUrl base, int intervalMs, QObject *parent)
    : QObject(parent), m_cloud(cloud), m_base(std::move(base))
{
    // The metadata service is link-local: a proxy would never reach it.
    m_network.setProxy(QNetworkProxy::NoProxy);
    m_timer.setInterval(intervalMs);
    connect(&m_timer, &QTimer::timeout, this, &PreemptionWatcher::poll);
}

void PreemptionWatcher::start()
{
    m_timer.start();
    poll();
}

void PreemptionWatcher::stop()
{
    m_timer.stop();
}

QNetworkRequest PreemptionWatcher::request(const QString &path) const
{
    QUrl url = m_base;
    url.setPath(path);
    QNetworkRequest r(url);
    r.setTransferTimeout(kRequestTimeoutMs);
    r.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::ManualRedirectPolicy);
    return r;
}

void PreemptionWatcher::poll()
{
    if (m_busy || m_noticed)
        return;
    m_busy = true;
    if (m_cloud != Cloud::Aws) {
        ask({});
        return;
    }
    // IMDSv2: a session token first, then the question.
    QNetworkRequest r = request(QStringLiteral("/latest/api/token"));
    r.setRawHeader("X-aws-ec2-metadata-token-ttl-seconds", "300");
    QNetworkReply *reply = m_network.put(r, QByteArray());
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        if (reply->error() != QNetworkReply::NoError) {
            m_busy = false;
            if (!m_complained) {
                m_complained = true;
                Q_EMIT unreachable(QStringLiteral("AWS instance metadata token: %1").arg(reply->errorString()));
            }
            return;
        }
        ask(reply->readAll().trimmed());
    });
}

void PreemptionWatcher::ask(const QByteArray &token)
{
    QNetworkRequest r;
    switch (m_cloud) {
    case Cloud::Gce:
        r = request(QStringLiteral("/computeMetadata/v1/instance/preempted"));
        r.setRawHeader("Metadata-Flavor", "Google");
        break;
    case Cloud::Aws:
        r = request(QStringLiteral("/latest/meta-data/spot/instance-action"));
        r.setRawHeader("X-aws-ec2-metadata-token", token);
        break;
    case Cloud::Azure: {
        r = request(QStringLiteral("/metadata/scheduledevents"));
        QUrl url = r.url();
        url.setQuery(QUrlQuery{{QStringLiteral("api-version"), QStringLiteral("2020-07-01")}});
        r.setUrl(url);
        r.setRawHeader("Metadata", "true");
        break;
    }
    }
    QNetworkReply *reply = m_network.get(r);
    connect(reply, &QNetworkReply::finished, this, [this, reply] { answered(reply); });
}

void PreemptionWatcher::answered(QNetworkReply *reply)
{
    reply->deleteLater();
    m_busy = false;
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    const QByteArray body = reply->readAll();
    // AWS answers 404 until there is an instance action: that is the normal case.
    if (m_cloud == Cloud::Aws && status == 404) {
        m_complained = false;
        return;
    }
    if (reply->error() != QNetworkReply::NoError) {
        if (!m_complained) {
            m_complained = true;
            Q_EMIT unreachable(QStringLiteral("instance metadata at %1: %2").arg(reply->url().toString(), reply->errorString()));
        }
        return;
    }
    m_complained = false;
    QString notice;
    switch (m_cloud) {
    case Cloud::Gce:
        if (body.trimmed().toUpper() == "TRUE")
            notice = QStringLiteral("GCE: instance/preempted is TRUE");
        break;
    case Cloud::Aws: {
        const QJsonObject o = QJsonDocument::fromJson(body).object();
        const QString action = o.value(QStringLiteral("action")).toString();
        if (action == QLatin1String("terminate") || action == QLatin1String("stop")
            || action == QLatin1String("hibernate"))
            notice = QStringLiteral("AWS: spot instance-action '%1' at %2")
                         .arg(action, o.value(QStringLiteral("time")).toString());
        break;
    }
    case Cloud::Azure:
        for (const auto &e : QJsonDocument::fromJson(body).object().value(QStringLiteral("Events")).toArray()) {
            const QString type = e.toObject().value(QStringLiteral("EventType")).toString();
            if (type == QLatin1String("Preempt") || type == QLatin1String("Terminate"))
                notice = QStringLiteral("Azure: scheduled event '%1' (not before %2)")
                             .arg(type, e.toObject().value(QStringLiteral("NotBefore")).toString());
        }
        break;
    }
    if (!notice.isEmpty() && !m_noticed) {
        m_noticed = true;
        m_timer.stop();
        Q_EMIT noticed(notice); // the worker reports it
    }
}

} // namespace flotilla::net
