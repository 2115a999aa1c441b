// Preemption notices from the clouds' instance metadata services, each faked on loopback in
// its own format: GCE's instance/preempted, AWS's spot/instance-action behind an IMDSv2
// token, Azure's Scheduled Events. No real metadata address is ever contacted.
#include "FakeMetadata.h"
#include "net/PreemptionWatcher.h"

#include <QSignalSpy>
#include <QtTest>

using flotilla::net::PreemptionWatcher;
using flotilla::test::FakeMetadata;
using flotilla::test::Request;

class TestPreemption : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void cloudNames()
    {
        QVERIFY(PreemptionWatcher::cloudFromName(QStringLiteral("gce")) == PreemptionWatcher::Cloud::Gce);
        QVERIFY(PreemptionWatcher::cloudFromName(QStringLiteral("aws")) == PreemptionWatcher::Cloud::Aws);
        QVERIFY(PreemptionWatcher::cloudFromName(QStringLiteral("azure")) == PreemptionWatcher::Cloud::Azure);
        QVERIFY(!PreemptionWatcher::cloudFromName(QStringLiteral("ibm")));
        QCOMPARE(PreemptionWatcher::defaultBase(PreemptionWatcher::Cloud::Aws).host(), QStringLiteral("169.254.169.254"));
    }

    void gce()
    {
        FakeMetadata server;
        bool preempted = false;
        server.handler = [&](const Request &r) -> std::pair<int, QByteArray> {
            if (r.target != "/computeMetadata/v1/instance/preempted" || r.headers.value("metadata-flavor") != "Google")
                return {403, "missing Metadata-Flavor"};
            return {200, preempted ? "TRUE" : "FALSE"};
        };
        PreemptionWatcher watcher(PreemptionWatcher::Cloud::Gce, server.base(), 50);
        QSignalSpy noticed(&watcher, &PreemptionWatcher::noticed);
        watcher.start();
        QTRY_VERIFY(server.requests.size() >= 3);
        QVERIFY(noticed.isEmpty());
        preempted = true;
        QTRY_COMPARE(noticed.size(), 1);
        QVERIFY(noticed.first().first().toString().contains(QStringLiteral("preempted")));
        const auto asked = server.requests.size();
        QTest::qWait(300);
        QCOMPARE(server.requests.size(), asked); // it stops asking once told
    }

    void awsWithImdsV2Token()
    {
        FakeMetadata server;
        bool action = false;
        server.handler = [&](const Request &r) -> std::pair<int, QByteArray> {
            if (r.method == "PUT" && r.target == "/latest/api/token") {
                if (!r.headers.contains("x-aws-ec2-metadata-token-ttl-seconds"))
                    return {400, ""};
                return {200, "session-token-1"};
            }
            if (r.method == "GET" && r.target == "/latest/meta-data/spot/instance-action") {
                if (r.headers.value("x-aws-ec2-metadata-token") != "session-token-1")
                    return {401, ""};
                if (!action)
                    return {404, "Not Found"};
                return {200, R"({"action": "terminate", "time": "2026-11-30T12:00:00Z"})"};
            }
            return {404, ""};
        };
        PreemptionWatcher watcher(PreemptionWatcher::Cloud::Aws, server.base(), 50);
        QSignalSpy noticed(&watcher, &PreemptionWatcher::noticed);
        QSignalSpy unreachable(&watcher, &PreemptionWatcher::unreachable);
        watcher.start();
        QTRY_VERIFY(server.requests.size() >= 6);
        QVERIFY(noticed.isEmpty());
        QVERIFY(unreachable.isEmpty()); // 404 is the normal answer, not a failure
        action = true;
        QTRY_COMPARE(noticed.size(), 1);
        QVERIFY(noticed.first().first().toString().contains(QStringLiteral("terminate")));
        QVERIFY(noticed.first().first().toString().contains(QStringLiteral("2026-11-30T12:00:00Z")));
    }

    void azureScheduledEvents()
    {
        FakeMetadata server;
        QByteArray events = R"({"DocumentIncarnation": 1, "Events": []})";
        server.handler = [&](const Request &r) -> std::pair<int, QByteArray> {
            if (!r.target.startsWith("/metadata/scheduledevents?api-version=") || r.headers.value("metadata") != "true")
                return {400, ""};
            return {200, events};
        };
        PreemptionWatcher watcher(PreemptionWatcher::Cloud::Azure, server.base(), 50);
        QSignalSpy noticed(&watcher, &PreemptionWatcher::noticed);
        watcher.start();
        QTRY_VERIFY(server.requests.size() >= 3);
        // A reboot is scheduled: not a preemption.
        events = R"({"DocumentIncarnation": 2, "Events": [{"EventId": "a", "EventType": "Reboot", "NotBefore": "x"}]})";
        const auto seen = server.requests.size();
        QTRY_VERIFY(server.requests.size() >= seen + 2); // the watcher read the new document
        QVERIFY(noticed.isEmpty());
        events = R"({"DocumentIncarnation": 3, "Events": [{"EventId": "b", "EventType": "Preempt",
                     "NotBefore": "Mon, 30 Nov 2026 12:00:30 GMT"}]})";
        QTRY_COMPARE(noticed.size(), 1);
        QVERIFY(noticed.first().first().toString().contains(QStringLiteral("Preempt")));
    }

    void malformedAnswersAreNotNotices()
    {
        FakeMetadata server;
        int n = 0;
        server.handler = [&](const Request &) -> std::pair<int, QByteArray> {
            ++n;
            return n % 2 ? std::pair<int, QByteArray>{500, "oops"} : std::pair<int, QByteArray>{200, "{not json"};
        };
        for (auto cloud : {PreemptionWatcher::Cloud::Gce, PreemptionWatcher::Cloud::Azure}) {
            PreemptionWatcher watcher(cloud, server.base(), 30);
            QSignalSpy noticed(&watcher, &PreemptionWatcher::noticed);
            QSignalSpy unreachable(&watcher, &PreemptionWatcher::unreachable);
            const int before = n;
            watcher.start();
            QTRY_VERIFY(n >= before + 4); // both kinds of bad answer, twice
            QVERIFY(noticed.isEmpty());
            QVERIFY(!unreachable.isEmpty()); // the 500s are reported
        }
    }

    void unreachableServiceIsReportedOnce()
    {
        quint16 closed = 0;
        {
            QTcpServer probe;
            probe.listen(QHostAddress::LocalHost, 0);
            closed = probe.serverPort();
        }
        PreemptionWatcher watcher(PreemptionWatcher::Cloud::Gce,
                                  QUrl(QStringLiteral("http://127.0.0.1:%1").arg(closed)), 30);
        QSignalSpy unreachable(&watcher, &PreemptionWatcher::unreachable);
        watcher.start();
        QTRY_COMPARE(unreachable.size(), 1);
        QTest::qWait(300);
        QCOMPARE(unreachable.size(), 1);
    }
};

QTEST_GUILESS_MAIN(TestPreemption)
#include "tst_preemption.moc"
