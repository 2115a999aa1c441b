// Many hostile peers at once, from many loopback addresses: hundreds of idle TCP
// connections, floods of stalled handshakes, too many from one address, token guessing,
// insiders with valid certificates that flood or do not read. The endpoint keeps accepting,
// bounds what it holds, closes the oldest first, and a worker still joins or comes back within
// 2 s (tests/testsupport/ListenerFixture.h: the endpoint and its steady worker).

#include "ListenerFixture.h"

class TestListenerFloods : public ListenerFixture
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { setUpCase(); }
    // A fresh coordinator for every test, and a steady worker joined to it with a token.
    void init() { setUp(); }
    void cleanup() { tearDown(); }

    // 12. Hundreds of idle TCP connections: 30 used to lock the coordinator out for good.
    void idleConnectionsDoNotLockTheCoordinatorOut()
    {
        constexpr int kIdle = 300;
        std::vector<std::unique_ptr<RawClient>> idle;
        for (int i = 0; i < kIdle; ++i) {
            idle.push_back(std::make_unique<RawClient>(QByteArray()));
            idle.back()->connectTo(m_listener->port(), loopback(2 + i % 10));
        }
        // Every one is accepted (none waits in the kernel's queue), and held.
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->unauthenticatedCount(), kIdle, 10000);
        QCOMPARE(m_listener->connectionCount(), kIdle + 1);
        VERIFY_FLEET_EXCEPT_COUNT();

        // A new machine joins (three TLS handshakes: probe, enrollment, Hello) within 2 s...
        auto joinToken = token(2);
        REQUIRE_OK(joinToken);
        QString why;
        auto fresh = newWorker(QStringLiteral("fresh"));
        qint64 ms = timeToWelcome(*fresh, *joinToken, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("%1 ms: %2").arg(ms).arg(why)));
        // ...and one that restarts, as a preempted spot instance does, comes back within 2 s.
        fresh.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), kIdle + 1, 5000);
        auto restarted = newWorker(QStringLiteral("fresh"));
        ms = timeToWelcome(*restarted, std::nullopt, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("%1 ms: %2").arg(ms).arg(why)));
        restarted.reset();
        // No idle connection had to make way for them.
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), kIdle + 1, 5000);
        QCOMPARE(refusalsWith(QStringLiteral("made way")), 0);

        // The idle connections go: their slots are freed, and workers still get in.
        idle.clear();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->unauthenticatedCount(), 0, 10000);
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        auto late = newWorker(QStringLiteral("late"));
        ms = timeToWelcome(*late, *joinToken, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("%1 ms: %2").arg(ms).arg(why)));
        late.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // 13. More stalled handshakes than the endpoint holds (here 50): the oldest make way, what
    // it holds stays bounded, and a worker still joins within 2 s.
    void stalledFloodMakesWayForWorkers_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::newRow("part of a ClientHello, then silence") << QStringLiteral("partial");
        QTest::newRow("TLS without a certificate, then neither Redeem nor Hello") << QStringLiteral("tls");
        QTest::newRow("TLS with a certificate, then no Hello") << QStringLiteral("certificate");
    }

    void stalledFloodMakesWayForWorkers()
    {
        QFETCH(QString, kind);
        constexpr int kHeld = 50;
        constexpr int kFlood = 80;
        Credentials credentials;
        if (kind == QLatin1String("certificate")) {
            auto issued = issueClient(m_identity.ca, QStringLiteral("staller"), &m_listener->trust());
            REQUIRE_OK(issued);
            credentials = *issued;
        }
        std::vector<std::unique_ptr<RawClient>> flood;
        for (int i = 0; i < kFlood; ++i) {
            if (kind == QLatin1String("partial"))
                flood.push_back(std::make_unique<RawClient>(QByteArray()));
            else
                flood.push_back(std::make_unique<RawClient>(
                    m_identity.ca.certificatePem, credentials.certificatePem, credentials.keyPem));
            RawClient *client = flood.back().get();
            if (kind == QLatin1String("partial"))
                QObject::connect(&client->m_socket, &QAbstractSocket::connected, &client->m_socket,
                    [client] { client->send(partialClientHello()); });
            client->connectTo(m_listener->port(), loopback(2 + i % 8));
        }
        // Every client got as far as it wanted to, or was closed to make room.
        const auto settled = [&] {
            int closed = 0;
            for (const auto &c : flood) {
                if (c->closed())
                    ++closed;
                else if (kind != QLatin1String("partial") && !c->m_socket.isEncrypted())
                    return -1;
                else if (kind == QLatin1String("partial") && c->m_socket.bytesToWrite() > 0)
                    return -1;
            }
            return closed;
        };
        QTRY_VERIFY_WITH_TIMEOUT(settled() == kFlood - kHeld && m_listener->unauthenticatedCount() == kHeld, 20000);
        QCOMPARE(refusalsWith(QStringLiteral("made way for a newer connection")), kFlood - kHeld);
        VERIFY_FLEET_EXCEPT_COUNT();

        // A worker joins through it: each of its connections makes way for itself.
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        QString why;
        auto worker = newWorker(QStringLiteral("through"));
        const qint64 ms = timeToWelcome(*worker, *joinToken, &why);
        QVERIFY2(ms >= 0 && ms < 2000, qPrintable(QStringLiteral("%1 ms: %2").arg(ms).arg(why)));
        QVERIFY(m_listener->unauthenticatedCount() <= kHeld);
        // The worker's probe and enrollment connections hang up; what is left is it, the
        // steady worker and the stalled flood.
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 2 + m_listener->unauthenticatedCount(), 5000);
        worker.reset();
        flood.clear();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 10000);
        QCOMPARE(m_listener->unauthenticatedCount(), 0);
        VERIFY_FLEET();
    }

    // A stalled handshake is closed at the deadline, which counts from the accept.
    void partialClientHelloIsClosedAtTheDeadline()
    {
        RawClient client { QByteArray() };
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.state() == QAbstractSocket::ConnectedState, 5000);
        QElapsedTimer timer;
        timer.start();
        const quint16 localPort = client.m_socket.localPort();
        client.send(partialClientHello());
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->unauthenticatedCount(), 1, 5000);
        const QString expected = QStringLiteral("the TLS handshake did not finish within 2 s");
        VERIFY_REFUSED(expected, 5000);
        QVERIFY2(timer.elapsed() >= 1000, qPrintable(QString::number(timer.elapsed())));
        QVERIFY2(refusedFrom(localPort, expected), qPrintable(refusals()));
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QCOMPARE(m_listener->unauthenticatedCount(), 0);
        VERIFY_FLEET();
    }

    // 14. One address holds at most 5 (here) connections that have not authenticated: its
    // oldest makes way, and other addresses are not touched.
    void perSourceLimitClosesThatSourcesOldest()
    {
        const QHostAddress busy = loopback(2);
        const QHostAddress other = loopback(3);
        std::vector<std::unique_ptr<RawClient>> fromBusy;
        std::vector<std::unique_ptr<RawClient>> fromOther;
        // One at a time, so that the order of their accepts is known.
        const auto open = [&](std::vector<std::unique_ptr<RawClient>> &into, const QHostAddress &from) {
            const int before = m_listener->unauthenticatedCount();
            into.push_back(std::make_unique<RawClient>(QByteArray()));
            into.back()->connectTo(m_listener->port(), from);
            return QTest::qWaitFor(
                [&] {
                    return into.back()->m_socket.state() == QAbstractSocket::ConnectedState
                        && (m_listener->unauthenticatedCount() > before || !m_refused.isEmpty());
                },
                5000);
        };
        for (int i = 0; i < 5; ++i) {
            QVERIFY(open(fromBusy, busy));
            QVERIFY(open(fromOther, other));
        }
        QCOMPARE(m_listener->unauthenticatedCount(), 10);
        QVERIFY(m_refused.isEmpty());
        const quint16 oldestPort = fromBusy.front()->m_socket.localPort();

        QVERIFY(open(fromBusy, busy));
        QTRY_VERIFY_WITH_TIMEOUT(fromBusy.front()->closed(), 5000);
        const QString expected = QStringLiteral("made way for a newer connection from 127.0.0.2");
        VERIFY_REFUSED(expected, 5000);
        QVERIFY2(refusedFrom(oldestPort, expected, busy), qPrintable(refusals()));
        QCOMPARE(m_refused.size(), 1);
        for (std::size_t i = 1; i < fromBusy.size(); ++i)
            QVERIFY(!fromBusy[i]->closed());
        for (const auto &c : fromOther)
            QVERIFY(!c->closed());
        QCOMPARE(m_listener->unauthenticatedCount(), 10);
        VERIFY_FLEET_EXCEPT_COUNT();
        fromBusy.clear();
        fromOther.clear();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // 15. When the endpoint holds as many unauthenticated connections as it may (here 10),
    // the oldest makes way for each new one; authenticated workers are never counted.
    void oldestUnauthenticatedMakesWayWhenFull()
    {
        std::vector<std::unique_ptr<RawClient>> idle;
        for (int i = 0; i < 13; ++i) {
            const int before = m_listener->unauthenticatedCount();
            const int refusedBefore = int(m_refused.size());
            idle.push_back(std::make_unique<RawClient>(QByteArray()));
            idle.back()->connectTo(m_listener->port(), loopback(2 + i));
            QTRY_VERIFY_WITH_TIMEOUT(m_listener->unauthenticatedCount() > before || int(m_refused.size()) > refusedBefore,
                5000);
            QCOMPARE(m_listener->unauthenticatedCount(), std::min(i + 1, 10));
            // The ones that made way are exactly the oldest.
            for (int j = 0; j <= i; ++j) {
                const bool shouldBeClosed = j < i + 1 - 10;
                QTRY_COMPARE_WITH_TIMEOUT(idle[j]->closed(), shouldBeClosed, 5000);
            }
        }
        QCOMPARE(refusalsWith(QStringLiteral("made way for a newer connection: the coordinator already held 10")), 3);
        QCOMPARE(m_listener->connectionCount(), 11);
        VERIFY_FLEET_EXCEPT_COUNT();
        idle.clear();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // 16. Token guessing: after 3 (here) failed joins from one address in the window, its
    // Redeems are refused unread, even with a good token, until the window has passed;
    // other addresses are not held back.
    void failedJoinsAreLimitedPerSource()
    {
        auto joinToken = token(2);
        REQUIRE_OK(joinToken);
        const QHostAddress guesser = loopback(2);
        const QHostAddress neighbour = loopback(3);
        // Redeems from an address; the client once it is closed (or enrolled).
        const auto attempt = [&](const QHostAddress &from, const QByteArray &secret, const QString &name) {
            auto client = std::make_unique<RawClient>(m_identity.ca.certificatePem);
            client->connectTo(m_listener->port(), from);
            if (QTest::qWaitFor([&] { return client->m_socket.isEncrypted() || client->closed(); }, 5000)
                && client->m_socket.isEncrypted())
                client->send(redeem(joinToken->id, secret, name));
            (void)QTest::qWaitFor([&] { return client->closed(); }, 5000);
            return client;
        };
        QElapsedTimer window;
        window.start();
        for (int i = 0; i < 3; ++i) {
            auto guess = attempt(guesser, QByteArray(16, char('a' + i)), QStringLiteral("guess"));
            VERIFY_CLIENT_READ_ERROR(*guess, QStringLiteral("secret is wrong"), true);
        }
        // Now even the right secret is refused, and costs the token nothing.
        auto blocked = attempt(guesser, joinToken->secret, QStringLiteral("guess"));
        VERIFY_CLIENT_READ_ERROR(*blocked, QStringLiteral("3 failed join attempts from 127.0.0.2 in the last 3 s"), false);
        QVERIFY(!blocked->received(MessageType::Enrolled));
        QCOMPARE((*m_listener->trust().token(joinToken->id))->usesLeft, 2);
        if (window.elapsed() >= 3000)
            QSKIP("this machine took longer than the 3 s window to make four attempts");

        // Another address is not held back.
        auto neighbourly = attempt(neighbour, joinToken->secret, QStringLiteral("neighbour"));
        QVERIFY2(neighbourly->received(MessageType::Enrolled), qPrintable(refusals()));
        QCOMPARE((*m_listener->trust().token(joinToken->id))->usesLeft, 1);

        // Once the window has passed since those failures, the guesser may try again.
        std::unique_ptr<RawClient> again;
        QVERIFY(QTest::qWaitFor(
            [&] {
                again = attempt(guesser, joinToken->secret, QStringLiteral("patient"));
                return again->received(MessageType::Enrolled);
            },
            15000));
        // The first failure came after the window's timer started: no sooner than 3 s after it.
        QVERIFY2(window.elapsed() >= 3000, qPrintable(QString::number(window.elapsed())));
        QCOMPARE((*m_listener->trust().token(joinToken->id))->usesLeft, 0);
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // The coordinator shuts down with workers connected: every connection is closed, the
    // workers notice, and nothing crashes. Last, because a crash here ends the run.
    // Insiders: a certificate obtained with a valid token, and the protocol spoken by hand.
    // Floods of each kind of message, from ten certificates at once: each connection is
    // closed at its kind's budget with the budget named, the coordinator sees no more than
    // the burst of any of them, and the steady worker never notices.
    void insiderFloodsAreClosedAtTheirBudget_data()
    {
        QTest::addColumn<int>("type");
        for (const MessageType t : { MessageType::ShardRequest, MessageType::Request, MessageType::Heartbeat,
                 MessageType::HandBack, MessageType::Command, MessageType::Watch })
            QTest::newRow(qPrintable(describe(t))) << int(t);
    }
    void insiderFloodsAreClosedAtTheirBudget()
    {
        QFETCH(int, type);
        const MessageType kind = MessageType(type);
        const MessageRate rate = defaultMessageRates().at(kind);
        constexpr int kInsiders = 10;
        QSignalSpy overBudget(m_listener.get(), &TlsListener::overBudget);
        std::vector<std::unique_ptr<RawClient>> clients;
        std::vector<qint64> ids;
        QByteArray flood;
        for (int i = 0; i < int(rate.burst) + 100; ++i)
            flood += encodeMessage(kind, QCborMap { { QStringLiteral("shard"), 0 }, { QStringLiteral("seq"), i } });
        for (int i = 0; i < kInsiders; ++i) {
            const QString name = QStringLiteral("insider%1").arg(i);
            auto credentials = issueClient(m_identity.ca, name, &m_listener->trust());
            REQUIRE_OK(credentials);
            clients.push_back(std::make_unique<RawClient>(
                m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem));
            const qint64 id = insiderHello(*clients.back(), name, loopback(20 + i));
            QVERIFY2(id != 0, qPrintable(closures() + QLatin1String(" / ") + refusals()));
            ids.push_back(id);
        }
        for (auto &client : clients)
            client->send(flood);
        for (int i = 0; i < kInsiders; ++i) {
            QTRY_VERIFY2_WITH_TIMEOUT(!closureOf(ids[i]).isNull(), qPrintable(closures()), 10000);
            const QString expected = QStringLiteral("sent more than %1 %2 messages in a burst")
                                         .arg(rate.burst)
                                         .arg(describe(kind));
            QVERIFY2(closureOf(ids[i]).contains(expected), qPrintable(closureOf(ids[i])));
            QTRY_VERIFY_WITH_TIMEOUT(clients[i]->closed(), 5000);
            VERIFY_CLIENT_READ_ERROR(*clients[i], expected, false);
            // What reached the coordinator's logic: at most the burst (and what refilled).
            int seen = 0;
            for (const auto &[from, m] : std::as_const(m_messages))
                seen += from == ids[i] ? 1 : 0;
            QVERIFY2(seen <= int(rate.burst) + 5, qPrintable(QString::number(seen)));
            QVERIFY2(seen >= int(rate.burst) - 1, qPrintable(QString::number(seen)));
        }
        QCOMPARE(overBudget.size(), kInsiders);
        QCOMPARE(overBudget.first().at(2).toBool(), false); // once is not yet barred
        VERIFY_FLEET();
    }

    // A peer that asks and never reads: what waits for it is bounded, and it is closed with
    // what it left unread, while the coordinator answers the steady worker at once.
    void aPeerThatDoesNotReadIsClosed()
    {
        // The test's coordinator answers every ShardRequest with 1 MiB.
        const QByteArray shard(1 << 20, 's');
        connect(m_listener.get(), &TlsListener::messageReceived, this, [this, shard](qint64 id, const Message &m) {
            if (m.type == MessageType::ShardRequest)
                m_listener->send(id, MessageType::ShardData, QCborMap { { QStringLiteral("shard"), 0 } }, shard);
        });
        auto credentials = issueClient(m_identity.ca, QStringLiteral("sponge"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient client(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        const qint64 id = insiderHello(client, QStringLiteral("sponge"));
        QVERIFY(id != 0);
        // From now on it reads at most 16 KiB: the rest waits in the kernel and the endpoint.
        client.m_socket.setReadBufferSize(16 * 1024);
        QObject::disconnect(&client.m_socket, &QIODevice::readyRead, nullptr, nullptr);
        QByteArray asks;
        for (int i = 0; i < 150; ++i)
            asks += encodeMessage(MessageType::ShardRequest, QCborMap { { QStringLiteral("shard"), 0 } });
        client.send(asks);
        QTRY_VERIFY2_WITH_TIMEOUT(!closureOf(id).isNull(), qPrintable(closures()), 10000);
        QVERIFY2(closureOf(id).contains(QLatin1String("does not read what it is sent")), qPrintable(closureOf(id)));
        QVERIFY2(closureOf(id).contains(QLatin1String("the most is 4.0 MiB")), qPrintable(closureOf(id)));
        QVERIFY(m_listener->pendingBytes(id) == 0);
        VERIFY_FLEET();
    }

    // The budget is on what piles up unread, not on one message: a shard larger than it
    // reaches a worker that reads.
    void oneMessageLargerThanTheBudgetReachesAReader()
    {
        const QByteArray shard(6 << 20, 'b');
        connect(m_listener.get(), &TlsListener::messageReceived, this, [this, shard](qint64 id, const Message &m) {
            if (m.type == MessageType::ShardRequest)
                m_listener->send(id, MessageType::ShardData, QCborMap { { QStringLiteral("shard"), 0 } }, shard);
        });
        m_steady->send(MessageType::ShardRequest, QCborMap { { QStringLiteral("shard"), 0 } });
        QTRY_VERIFY_WITH_TIMEOUT(std::any_of(m_steadyReceived.cbegin(), m_steadyReceived.cend(),
                                     [&](const Message &m) { return m.type == MessageType::ShardData && m.payload == shard; }),
            10000);
        VERIFY_FLEET();
    }

    // A storm of sessions under one certificate: never more than the budget at once, new
    // sessions past the burst are closed, and after the fifth such closing the certificate
    // is refused for the window; another certificate joins meanwhile as if nothing happened.
    void sessionStormUnderOneCertificateIsBounded()
    {
        QSignalSpy overBudget(m_listener.get(), &TlsListener::overBudget);
        auto credentials = issueClient(m_identity.ca, QStringLiteral("storm"), &m_listener->trust());
        REQUIRE_OK(credentials);
        constexpr int kSessions = 64;
        std::vector<std::unique_ptr<RawClient>> clients;
        for (int i = 0; i < kSessions; ++i) {
            clients.push_back(std::make_unique<RawClient>(
                m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem));
            clients.back()->connectTo(m_listener->port(), loopback(100 + i));
        }
        // Every session ends up either closed or encrypted, and no more than 8 are held.
        QTRY_VERIFY_WITH_TIMEOUT(std::all_of(clients.begin(), clients.end(),
                                     [](const auto &c) { return c->closed() || c->m_socket.isEncrypted(); }),
            15000);
        QTRY_VERIFY2_WITH_TIMEOUT(m_listener->connectionCount() <= 1 + 8, qPrintable(QString::number(m_listener->connectionCount())), 5000);
        VERIFY_REFUSED(QStringLiteral("opened more than 10 sessions in a burst"), 5000);
        VERIFY_REFUSED(QStringLiteral("made way for a newer session of the same certificate"), 5000);
        VERIFY_REFUSED(QStringLiteral("is refused for another"), 5000);
        QVERIFY(overBudget.size() >= 5);
        bool barred = false;
        for (const auto &signal : std::as_const(overBudget))
            barred = barred || signal.at(2).toBool();
        QVERIFY(barred);
        // Barred: even a calm new session of that certificate is refused, saying why.
        clearRecords();
        RawClient late(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        late.connectTo(m_listener->port());
        VERIFY_REFUSED(QStringLiteral("its connections were closed 5 times"), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(late.closed(), 5000);
        VERIFY_CLIENT_READ_ERROR(late, QStringLiteral("is refused for another"), false);
        // Another worker joins within the usual time.
        QString why;
        auto fresh = newWorker(QStringLiteral("calm"));
        auto t = token();
        REQUIRE_OK(t);
        QVERIFY2(timeToWelcome(*fresh, *t, &why) >= 0, qPrintable(why));
        clients.clear();
        fresh.reset();
        VERIFY_FLEET_EXCEPT_COUNT();
    }

    void destroyingTheEndpointWithLiveConnections()
    {
        std::vector<std::unique_ptr<RawClient>> clients;
        for (int i = 0; i < 4; ++i) {
            const QString name = QStringLiteral("live-%1").arg(i);
            auto credentials = issueClient(m_identity.ca, name, &m_listener->trust());
            REQUIRE_OK(credentials);
            clients.push_back(std::make_unique<RawClient>(
                m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem));
            RawClient &client = *clients.back();
            client.connectTo(m_listener->port());
            QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
            QVERIFY(client.m_socket.isEncrypted());
            // Half of them have said Hello, half are still between handshake and Hello.
            if (i % 2 == 0) {
                client.send(encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), name } }));
                QTRY_VERIFY_WITH_TIMEOUT(client.received(MessageType::Welcome), 5000);
            }
        }
        // And one without a certificate, about to redeem a token.
        clients.push_back(std::make_unique<RawClient>(m_identity.ca.certificatePem));
        clients.back()->connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(clients.back()->m_socket.isEncrypted(), 5000);
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 6, 5000);
        VERIFY_FLEET_EXCEPT_COUNT();

        QSignalSpy steadyLost(m_steady.get(), &WorkerClient::disconnected);
        m_listener.reset();
        for (const auto &client : clients)
            QTRY_VERIFY_WITH_TIMEOUT(client->closed(), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(!steadyLost.isEmpty(), 5000);
        QVERIFY(!m_steady->isConnected());
    }
};

QTEST_GUILESS_MAIN(TestListenerFloods)
#include "tst_listenerfloods.moc"
