// The coordinator's endpoint and the worker's client on loopback: joining with a token,
// coming back from the state folder, and every kind of bad peer — wrong pins, spent, expired
// or revoked tokens, plain TCP, garbage and forged frames, missing, foreign, unknown or
// revoked certificates, TLS 1.2, a Hello under another name. Each bad peer must get a clear
// reason (in the endpoint's signal and, where it can read one, in the Error sent to it), lose
// its connection, and leave the rest of the fleet working: a steady worker stays connected
// through every test and exchanges a message with the coordinator after the bad peer is gone.

#include "ListenerFixture.h"

class TestListener : public ListenerFixture
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { setUpCase(); }
    // A fresh coordinator for every test, and a steady worker joined to it with a token.
    void init() { setUp(); }
    void cleanup() { tearDown(); }

    // 1. Joining with a token, then coming back from the state folder without one.
    void workerJoinsWithTokenThenReconnectsWithoutOne()
    {
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        // The worker is given the token as text, as a user pastes it.
        auto pasted = JoinToken::decode(joinToken->encode());
        REQUIRE_OK(pasted);

        const QString name = QStringLiteral("lab-pc-7");
        const QString dir = stateDir(name);
        auto worker = newWorker(name);
        QSignalSpy joined(worker.get(), &WorkerClient::joined);
        QSignalSpy welcomed(worker.get(), &WorkerClient::welcomed);
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*pasted));
        QVERIFY(!worker->hasIdentity());
        QCOMPARE(worker->coordinatorAddress(), QStringLiteral("127.0.0.1:%1").arg(m_listener->port()));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        QCOMPARE(joined.size(), 1);
        QCOMPARE(joined.first().first().toString(), name);
        QCOMPARE(welcomed.size(), 1);
        QCOMPARE(welcomed.first().first().value<QCborMap>().value(QStringLiteral("worker_id")).toInteger(), qint64(1));
        QVERIFY(worker->isConnected());
        QVERIFY(worker->hasIdentity());

        // The identity in the state folder: the key private, the certificate ours.
        for (const char *file : { "key.pem", "cert.pem", "ca.pem", "coordinator.json" })
            QVERIFY2(QFileInfo::exists(QDir(dir).filePath(QString::fromLatin1(file))), file);
#ifdef Q_OS_UNIX
        QCOMPARE(fileMode(QDir(dir).filePath(QStringLiteral("key.pem"))), 0600);
#endif
        const QSslCertificate ca(readFile(QDir(dir).filePath(QStringLiteral("ca.pem"))));
        QCOMPARE(ca.digest(QCryptographicHash::Sha256), m_listener->caFingerprint());
        const QByteArray certPem = readFile(QDir(dir).filePath(QStringLiteral("cert.pem")));
        const QSslCertificate cert(certPem);
        QVERIFY(!cert.isNull());
        QCOMPARE(cert.subjectInfo(QSslCertificate::CommonName), QStringList { name });
        QCOMPARE(cert.issuerInfo(QSslCertificate::CommonName), ca.subjectInfo(QSslCertificate::CommonName));
        QVERIFY(!QSslKey(readFile(QDir(dir).filePath(QStringLiteral("key.pem"))), QSsl::Ec).isNull());
        const QJsonObject coordinator
            = QJsonDocument::fromJson(readFile(QDir(dir).filePath(QStringLiteral("coordinator.json")))).object();
        QCOMPARE(coordinator.value(QStringLiteral("host")).toString(), kLocalHost);
        QCOMPARE(coordinator.value(QStringLiteral("port")).toInt(), int(m_listener->port()));
        const QByteArray fingerprint = cert.digest(QCryptographicHash::Sha256);

        // The coordinator recorded the certificate and spent the token.
        auto record = m_listener->trust().certificate(fingerprint);
        REQUIRE_OK(record);
        QVERIFY(record->has_value());
        QCOMPARE((*record)->workerName, name);
        QVERIFY(!(*record)->revoked());
        auto tokens = m_listener->trust().tokens();
        REQUIRE_OK(tokens);
        bool spent = false;
        for (const TokenRecord &t : *tokens)
            spent |= t.id == joinToken->id && t.usesLeft == 0;
        QVERIFY(spent);

        // The Hello carried the worker's fields, its name and the certificate it connected with.
        const PeerInfo *peer = helloFrom(name);
        QVERIFY(peer);
        QCOMPARE(peer->fingerprint, fingerprint);
        QVERIFY(peer->address.startsWith(kLocalHost + QLatin1Char(':')));
        const qint64 firstId = peer->connectionId;
        QCOMPARE(m_listener->connectionCount(), 2);

        // The worker goes away: the coordinator says so.
        worker.reset();
        QTRY_VERIFY_WITH_TIMEOUT(!closureOf(firstId).isNull(), 5000);
        QVERIFY2(closureOf(firstId).contains(QLatin1String("disconnected")), qPrintable(closureOf(firstId)));
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);

        // Back from the state folder alone, under the fleet's id for its certificate.
        const qint64 fleetId = (*record)->workerId;
        QVERIFY(fleetId > 0);
        QCOMPARE(peer->workerId, fleetId);
        m_hellos.clear();
        auto again = newWorker(name);
        QSignalSpy joinedAgain(again.get(), &WorkerClient::joined);
        QSignalSpy welcomedAgain(again.get(), &WorkerClient::welcomed);
        QSignalSpy failedAgain(again.get(), &WorkerClient::failed);
        REQUIRE_OK(again->configure(std::nullopt));
        QVERIFY(again->hasIdentity());
        again->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomedAgain.isEmpty() || !failedAgain.isEmpty(), 10000);
        QVERIFY2(failedAgain.isEmpty(), qPrintable(failedAgain.value(0).value(0).toString()));
        QCOMPARE(joinedAgain.size(), 0);
        const PeerInfo *back = helloFrom(name);
        QVERIFY(back);
        QCOMPARE(back->fingerprint, fingerprint);
        QCOMPARE(back->workerId, fleetId);
        QVERIFY(back->connectionId != firstId);
        QCOMPARE(readFile(QDir(dir).filePath(QStringLiteral("cert.pem"))), certPem);

        // It talks like any worker.
        again->send(MessageType::Heartbeat, QCborMap { { QStringLiteral("seq"), 1000 } });
        QSignalSpy received(again.get(), &WorkerClient::messageReceived);
        QTRY_VERIFY_WITH_TIMEOUT(!received.isEmpty(), 5000);
        QCOMPARE(received.first().first().value<Message>().type, MessageType::Ack);
        again.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);

        // With neither a token nor an identity there is nothing to start from.
        auto blank = newWorker(QStringLiteral("blank"));
        REQUIRE_ERROR(blank->configure(std::nullopt), QStringLiteral("holds no worker identity"));
        VERIFY_FLEET();
    }

    // 2. A token that pins another CA than the one the coordinator presents.
    void tokenPinningAnotherCaIsRefusedBeforeTheSecretIsSent_data()
    {
        QTest::addColumn<bool>("impostor");
        QTest::newRow("token pins a foreign CA") << false;
        QTest::newRow("impostor coordinator at the token's address") << true;
    }

    void tokenPinningAnotherCaIsRefusedBeforeTheSecretIsSent()
    {
        QFETCH(bool, impostor);
        std::unique_ptr<TlsListener> other;
        JoinToken joinToken;
        if (impostor) {
            // The token is this coordinator's, but something else answers at its address.
            auto created = TlsListener::create(options(m_dir->filePath(QStringLiteral("impostor"))));
            REQUIRE_OK(created);
            other = std::move(*created);
            REQUIRE_OK(other->listen());
            auto t = m_listener->trust().issueToken(
                kLocalHost, other->port(), m_listener->caFingerprint(), 600, 1, nowMs());
            REQUIRE_OK(t);
            joinToken = *t;
        } else {
            auto foreignCa = createCertificateAuthority(QStringLiteral("Someone else's CA"), 30);
            REQUIRE_OK(foreignCa);
            auto t = m_listener->trust().issueToken(
                kLocalHost, m_listener->port(), certificateFingerprint(foreignCa->certificatePem), 600, 1, nowMs());
            REQUIRE_OK(t);
            joinToken = *t;
        }

        auto worker = newWorker(QStringLiteral("careful"));
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        QSignalSpy joined(worker.get(), &WorkerClient::joined);
        REQUIRE_OK(worker->configure(joinToken));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), 5000);
        const QString reason = failed.first().first().toString();
        QVERIFY2(reason.contains(QLatin1String("pins")), qPrintable(reason));
        QVERIFY2(reason.contains(QString::fromLatin1(joinToken.caFingerprint.toHex().left(16))), qPrintable(reason));
        QCOMPARE(joined.size(), 0);
        QVERIFY(!worker->hasIdentity());
        QVERIFY(!QFileInfo::exists(QDir(stateDir(QStringLiteral("careful"))).filePath(QStringLiteral("cert.pem"))));

        // The secret never left the worker: the token is unspent and no join was refused.
        auto tokens = m_listener->trust().tokens();
        REQUIRE_OK(tokens);
        bool unspent = false;
        for (const TokenRecord &t : *tokens)
            unspent |= t.id == joinToken.id && t.usesLeft == 1;
        QVERIFY(unspent);
        QVERIFY2(refusalWith(QStringLiteral("join refused")).isNull(), qPrintable(refusals()));
        // And it does not try again.
        QTest::qWait(300);
        QCOMPARE(failed.size(), 1);
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        if (other)
            QTRY_COMPARE_WITH_TIMEOUT(other->connectionCount(), 0, 5000);
        VERIFY_FLEET();
    }

    void aJoinedWorkerRefusesAnImpostorAtItsCoordinatorsAddress()
    {
        // A worker that joined pins its coordinator's CA. Sent (by a token of that very
        // coordinator) to an address where another coordinator answers, it stops at the TLS
        // handshake, says why, and never says Hello there.
        auto created = TlsListener::create(options(m_dir->filePath(QStringLiteral("impostor-2"))));
        REQUIRE_OK(created);
        std::unique_ptr<TlsListener> impostor = std::move(*created);
        REQUIRE_OK(impostor->listen());
        QSignalSpy impostorHellos(impostor.get(), &TlsListener::helloReceived);
        auto t = m_listener->trust().issueToken(kLocalHost, impostor->port(), m_listener->caFingerprint(), 600, 1, nowMs());
        REQUIRE_OK(t);
        auto worker = newWorker(QStringLiteral("steady"));
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*t));
        QVERIFY(worker->hasIdentity()); // same CA: the identity is kept, the address is the token's
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), 5000);
        const QString reason = failed.first().first().toString();
        QVERIFY2(reason.contains(QLatin1String("failed verification against the pinned CA")), qPrintable(reason));
        QVERIFY2(reason.contains(QLatin1String("certificate")), qPrintable(reason));
        QTest::qWait(300);
        QCOMPARE(impostorHellos.size(), 0);
        QCOMPARE(failed.size(), 1);
    }

    // 3. Expired and used-up tokens.
    void spentTokensAreRefused_data()
    {
        QTest::addColumn<bool>("expired");
        QTest::addColumn<QString>("expected");
        QTest::newRow("expired") << true << QStringLiteral("expired");
        QTest::newRow("used up") << false << QStringLiteral("used up");
    }

    void spentTokensAreRefused()
    {
        QFETCH(bool, expired);
        QFETCH(QString, expected);
        JoinToken joinToken;
        if (expired) {
            // Issued an hour ago for one minute.
            auto t = token(1, 60, nowMs() - 3600 * 1000);
            REQUIRE_OK(t);
            joinToken = *t;
        } else {
            auto t = token(1);
            REQUIRE_OK(t);
            joinToken = *t;
            auto first = newWorker(QStringLiteral("first"));
            QSignalSpy welcomed(first.get(), &WorkerClient::welcomed);
            QSignalSpy failed(first.get(), &WorkerClient::failed);
            REQUIRE_OK(first->configure(joinToken));
            first->start({});
            QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
            QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
            first.reset();
            QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
            clearRecords();
        }

        auto worker = newWorker(QStringLiteral("late"));
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        QSignalSpy joined(worker.get(), &WorkerClient::joined);
        REQUIRE_OK(worker->configure(joinToken));
        worker->start({});
        // The coordinator refuses the join with the reason...
        VERIFY_REFUSED(QStringLiteral("join refused"), 5000);
        const QString refusal = refusalWith(QStringLiteral("join refused"));
        QVERIFY2(refusal.contains(expected), qPrintable(refusal));
        QVERIFY(refusedAddressIsLoopback(QStringLiteral("join refused")));
        // ...and the worker hears it and gives up, rather than retrying a dead token.
        const bool gaveUp = QTest::qWaitFor([&] { return !failed.isEmpty(); }, 1500);
        const QString refusedTimes = QString::number(m_refused.size());
        worker.reset();
        QCOMPARE(joined.size(), 0);
        QVERIFY(!QFileInfo::exists(QDir(stateDir(QStringLiteral("late"))).filePath(QStringLiteral("cert.pem"))));
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
        QVERIFY2(gaveUp,
            qPrintable(QStringLiteral("the worker never gave up: it was refused %1 times in 1.5 s (\"%2\") and kept "
                                      "retrying, so the coordinator's Error never reached it")
                           .arg(refusedTimes, refusal)));
        const QString reason = failed.first().first().toString();
        QVERIFY2(reason.contains(expected), qPrintable(reason));
    }

    // 4. Not TLS at all.
    void plainTcpGarbageFailsTheHandshake_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::newRow("HTTP request") << QByteArray("GET / HTTP/1.0\r\n\r\n");
        QTest::newRow("Flotilla frame without TLS") << encodeMessage(MessageType::Hello, QCborMap {});
        // A TLS handshake record header followed by nonsense.
        QTest::newRow("TLS record of garbage") << QByteArray("\x16\x03\x01\x00\x10"
                                                             "0123456789abcdef",
            21);
    }

    void plainTcpGarbageFailsTheHandshake()
    {
        QFETCH(QByteArray, bytes);
        RawClient client { QByteArray() };
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.state() == QAbstractSocket::ConnectedState, 5000);
        const quint16 localPort = client.m_socket.localPort();
        client.send(bytes);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QCOMPARE(m_listener->connectionCount(), 1);
        VERIFY_FLEET();
        // The coordinator says why, naming the peer.
        VERIFY_REFUSED(QStringLiteral("TLS handshake failed"), 500);
        QVERIFY2(refusedFrom(localPort, QStringLiteral("TLS handshake failed")), qPrintable(refusals()));
    }

    // A TCP connection that never starts TLS is not kept open forever.
    void silentTcpConnectionIsClosedAfterTheHandshakeTimeout()
    {
        RawClient client { QByteArray() };
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.state() == QAbstractSocket::ConnectedState, 5000);
        const quint16 localPort = client.m_socket.localPort();
        QElapsedTimer timer;
        timer.start();
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QVERIFY2(timer.elapsed() >= 1000, qPrintable(QString::number(timer.elapsed())));
        QCOMPARE(m_listener->connectionCount(), 1);
        VERIFY_FLEET();
        // The refusal names the peer and says what went wrong.
        VERIFY_REFUSED(QStringLiteral("TLS handshake"), 1000);
        const QString reason = refusalWith(QStringLiteral("TLS handshake"));
        QVERIFY2(!reason.contains(QLatin1String("Unknown error")), qPrintable(reason));
        QVERIFY2(refusedFrom(localPort, QStringLiteral("TLS handshake")), qPrintable(refusals()));
    }

    // 5. A worker with a good certificate that then sends something malformed.
    void malformedInputClosesOnlyThatConnection_data()
    {
        QTest::addColumn<bool>("afterHello");
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("expected");

        const QByteArray heartbeat = encodeMessage(MessageType::Heartbeat, QCborMap { { QStringLiteral("seq"), 1 } });
        const QByteArray welcome = encodeMessage(MessageType::Welcome, QCborMap { { QStringLiteral("worker_id"), 9 } });
        const QByteArray hello
            = encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("raw") } });
        const QByteArray wrongVersion
            = encodeFrame(kProtocolVersion + 1, std::uint8_t(MessageType::Heartbeat), cbor({}), {});
        const QByteArray unknownType = encodeFrame(kProtocolVersion, 99, cbor({}), {});
        const QByteArray tooLargePayload = frameAnnouncing(MessageType::Result, 0, Limits::maxFramePayload + 1);
        const QByteArray tooLargeHeader = frameAnnouncing(MessageType::Heartbeat, Limits::maxHeader + 1, 0);
        const QByteArray notAMap = encodeFrame(
            kProtocolVersion, std::uint8_t(MessageType::Heartbeat), QCborValue(QStringLiteral("header")).toCbor(), {});
        const QByteArray strayChunk = encodeFrame(kProtocolVersion, std::uint8_t(MessageType::Chunk), cbor({}), "abc");
        const QByteArray unwantedPayload = encodeMessage(MessageType::Heartbeat, QCborMap {}, QByteArray(10, 'p'));
        const QByteArray truncated = heartbeat.left(heartbeat.size() - 3);

        for (const bool after : { false, true }) {
            const char *when = after ? "after Hello" : "before Hello";
            QTest::addRow("garbage, %s", when)
                << after << QByteArray("XXXXXXXX") << QStringLiteral("not a Flotilla frame");
            QTest::addRow("payload above the frame limit, %s", when)
                << after << tooLargePayload << QStringLiteral("limit");
            QTest::addRow("header above the limit, %s", when) << after << tooLargeHeader << QStringLiteral("limit");
            QTest::addRow("unknown message type, %s", when)
                << after << unknownType << QStringLiteral("unknown message type");
            QTest::addRow("wrong protocol version, %s", when)
                << after << wrongVersion << QStringLiteral("protocol version");
            QTest::addRow("truncated frame then silence, %s", when)
                << after << truncated << QStringLiteral("went silent");
            QTest::addRow("Welcome from a worker, %s", when)
                << after << welcome << QStringLiteral("only a coordinator sends");
            QTest::addRow("header not a CBOR map, %s", when) << after << notAMap << QStringLiteral("not a CBOR map");
            QTest::addRow("Chunk with nothing to continue, %s", when)
                << after << strayChunk << QStringLiteral("no message to continue");
            QTest::addRow("payload on a Heartbeat, %s", when)
                << after << unwantedPayload << QStringLiteral("at most 0");
        }
        QTest::newRow("Heartbeat before Hello") << false << heartbeat << QStringLiteral("before Hello");
        QTest::newRow("Hello twice") << true << hello << QStringLiteral("Hello twice");
    }

    void malformedInputClosesOnlyThatConnection()
    {
        QFETCH(bool, afterHello);
        QFETCH(QByteArray, bytes);
        QFETCH(QString, expected);

        auto credentials = issueClient(m_identity.ca, QStringLiteral("raw"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient client(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
        QVERIFY2(client.m_socket.isEncrypted(), qPrintable(client.m_socket.errorString()));
        qint64 id = 0;
        if (afterHello) {
            client.send(
                encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("raw") } }));
            QTRY_VERIFY_WITH_TIMEOUT(client.received(MessageType::Welcome), 5000);
            const PeerInfo *peer = helloFrom(QStringLiteral("raw"));
            QVERIFY(peer);
            id = peer->connectionId;
            QCOMPARE(peer->fingerprint, credentials->fingerprint);
        }
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 2, 5000);
        const quint16 localPort = client.m_socket.localPort();

        client.send(bytes);
        if (afterHello) {
            QTRY_VERIFY2_WITH_TIMEOUT(
                !closureOf(id).isNull(), qPrintable(closures() + QLatin1String(" / ") + refusals()), 5000);
            QVERIFY2(closureOf(id).contains(expected), qPrintable(closureOf(id)));
        } else {
            VERIFY_REFUSED(expected, 5000);
            QVERIFY2(refusedFrom(localPort, expected), qPrintable(refusals()));
        }
        QCOMPARE(m_listener->connectionCount(), 1);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        // None of it reached the coordinator's logic.
        for (const auto &[from, m] : std::as_const(m_messages))
            QVERIFY(from != id || id == 0);
        VERIFY_FLEET();
        VERIFY_CLIENT_READ_ERROR(client, expected, false);
    }

    // A worker that completes the TLS handshake but never says Hello.
    void silenceAfterTheHandshakeIsClosed()
    {
        auto credentials = issueClient(m_identity.ca, QStringLiteral("mute"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient client(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
        QVERIFY(client.m_socket.isEncrypted());
        VERIFY_REFUSED(QStringLiteral("neither Hello nor Redeem"), 5000);
        QCOMPARE(m_listener->connectionCount(), 1);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        VERIFY_FLEET();
        VERIFY_CLIENT_READ_ERROR(client, QStringLiteral("neither Hello nor Redeem"), false);
    }

    // Payload limits per message type, and chunked payloads through the endpoint.
    void payloadLimitsArePerMessageType()
    {
        m_listener->setPayloadLimit(MessageType::Result, 3u << 20);
        QByteArray weights(2500 * 1024, Qt::Uninitialized);
        for (qsizetype i = 0; i < weights.size(); ++i)
            weights[i] = char(i * 7);
        m_steady->send(MessageType::Result, QCborMap { { QStringLiteral("subtask"), 5 } }, weights);
        QTRY_VERIFY_WITH_TIMEOUT(!m_messages.isEmpty(), 5000);
        QCOMPARE(m_messages.first().first, m_steadyId);
        QCOMPARE(m_messages.first().second.type, MessageType::Result);
        QCOMPARE(m_messages.first().second.payload.size(), weights.size());
        QVERIFY(m_messages.first().second.payload == weights);

        // Announcing more than the limit is refused before any of it arrives.
        auto credentials = issueClient(m_identity.ca, QStringLiteral("greedy"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient client(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
        client.send(
            encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("greedy") } }));
        QTRY_VERIFY_WITH_TIMEOUT(client.received(MessageType::Welcome), 5000);
        const qint64 id = helloFrom(QStringLiteral("greedy"))->connectionId;
        const QCborMap announce { { QStringLiteral("payload_size"), qint64(4) << 20 } };
        client.send(
            encodeFrame(kProtocolVersion, std::uint8_t(MessageType::Result), cbor(announce), QByteArray(16, 'w')));
        QTRY_VERIFY_WITH_TIMEOUT(!closureOf(id).isNull(), 5000);
        QVERIFY2(closureOf(id).contains(QLatin1String("at most 3145728")), qPrintable(closureOf(id)));
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        VERIFY_FLEET();
    }

    // 6. No client certificate: only Redeem is allowed.
    void withoutCertificateOnlyRedeemIsAllowed_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("expected");
        QTest::addColumn<bool>("fatal");
        QTest::newRow("Hello") << encodeMessage(
            MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("anon") } })
                               << QStringLiteral("without a client certificate") << true;
        QTest::newRow("Heartbeat") << encodeMessage(MessageType::Heartbeat, QCborMap {})
                                   << QStringLiteral("without a client certificate") << true;
        // The request is checked before the token, so that a malformed one costs no use.
        QTest::newRow("Redeem of an unknown token") << encodeMessage(MessageType::Redeem,
            QCborMap { { QStringLiteral("token_id"), QByteArray(8, 'i') },
                { QStringLiteral("secret"), QByteArray(16, 's') }, { QStringLiteral("name"), QStringLiteral("anon") } },
            createCertificateRequest(generatePrivateKeyPem().value(), QStringLiteral("anon")).value())
                                                    << QStringLiteral("unknown to this coordinator") << true;
        QTest::newRow("Redeem with a malformed request") << encodeMessage(MessageType::Redeem,
            QCborMap { { QStringLiteral("token_id"), QByteArray(8, 'i') },
                { QStringLiteral("secret"), QByteArray(16, 's') }, { QStringLiteral("name"), QStringLiteral("anon") } },
            QByteArray("not a CSR")) << QStringLiteral("not a PEM certificate request") << true;
        QTest::newRow("Redeem without a name") << encodeMessage(MessageType::Redeem,
            QCborMap {
                { QStringLiteral("token_id"), QByteArray(8, 'i') }, { QStringLiteral("secret"), QByteArray(16, 's') } })
                                               << QStringLiteral("without a worker name") << true;
        QTest::newRow("garbage") << QByteArray("XXXXXXXX") << QStringLiteral("not a Flotilla frame") << false;
        // Weights may not even be announced without a certificate: refused at the first
        // frame's header, before anything is allocated for them.
        QTest::newRow("Result announced without a certificate")
            << encodeFrame(kProtocolVersion, std::uint8_t(MessageType::Result),
                           cbor(QCborMap { { QStringLiteral("payload_size"), qint64(1) << 20 } }), QByteArray(16, 'w'))
            << QStringLiteral("at most 0 are accepted") << false;
    }

    void withoutCertificateOnlyRedeemIsAllowed()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, expected);
        QFETCH(bool, fatal);
        // As a coordinator sets it for its model's results: a limit for workers, not for
        // connections without a certificate.
        m_listener->setPayloadLimit(MessageType::Result, 3u << 20);
        RawClient client(m_identity.ca.certificatePem);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
        QVERIFY2(client.m_socket.isEncrypted(), qPrintable(client.m_socket.errorString()));
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 2, 5000);
        const quint16 localPort = client.m_socket.localPort();
        client.send(bytes);
        VERIFY_REFUSED(expected, 5000);
        QVERIFY2(refusedFrom(localPort, expected), qPrintable(refusals()));
        QCOMPARE(m_listener->connectionCount(), 1);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QVERIFY(m_hellos.isEmpty());
        VERIFY_FLEET();
        VERIFY_CLIENT_READ_ERROR(client, expected, fatal);
    }

    // A valid token with a request that is not a CSR: refused, the fleet unaffected.
    void redeemWithABadRequestIsRefused()
    {
        auto joinToken = token(2);
        REQUIRE_OK(joinToken);
        RawClient client(m_identity.ca.certificatePem);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(client.m_socket.isEncrypted() || client.closed(), 5000);
        QVERIFY(client.m_socket.isEncrypted());
        client.send(encodeMessage(MessageType::Redeem,
            QCborMap { { QStringLiteral("token_id"), joinToken->id }, { QStringLiteral("secret"), joinToken->secret },
                { QStringLiteral("name"), QStringLiteral("forger") } },
            QByteArray("-----BEGIN CERTIFICATE REQUEST-----\ngarbage\n-----END CERTIFICATE REQUEST-----\n")));
        VERIFY_REFUSED(QStringLiteral("join refused"), 5000);
        QCOMPARE(m_listener->connectionCount(), 1);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QVERIFY(!client.received(MessageType::Enrolled));
        auto certificates = m_listener->trust().certificates();
        REQUIRE_OK(certificates);
        for (const CertificateRecord &c : *certificates)
            QVERIFY(c.workerName != QLatin1String("forger"));
        VERIFY_FLEET();
        VERIFY_CLIENT_READ_ERROR(client, QStringLiteral("join refused"), true);
    }

    // 7. Certificates this coordinator did not issue, or issued but never recorded.
    void unknownCertificatesAreRefused_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("expected");
        QTest::newRow("signed by a foreign CA") << QStringLiteral("foreign") << QStringLiteral("did not issue");
        QTest::newRow("the coordinator's server certificate")
            << QStringLiteral("server") << QStringLiteral("did not issue");
        QTest::newRow("signed by our CA, never recorded")
            << QStringLiteral("unrecorded") << QStringLiteral("no record");
    }

    void unknownCertificatesAreRefused()
    {
        QFETCH(QString, kind);
        QFETCH(QString, expected);
        Credentials credentials;
        if (kind == QLatin1String("foreign")) {
            auto foreignCa = createCertificateAuthority(QStringLiteral("Intruder CA"), 30);
            REQUIRE_OK(foreignCa);
            auto c = issueClient(*foreignCa, QStringLiteral("steady"), nullptr);
            REQUIRE_OK(c);
            credentials = *c;
        } else if (kind == QLatin1String("server")) {
            credentials = Credentials { m_identity.serverCertificatePem, m_identity.serverKeyPem,
                certificateFingerprint(m_identity.serverCertificatePem) };
        } else {
            auto c = issueClient(m_identity.ca, QStringLiteral("steady"), nullptr);
            REQUIRE_OK(c);
            credentials = *c;
        }
        RawClient client(m_identity.ca.certificatePem, credentials.certificatePem, credentials.keyPem);
        client.connectTo(m_listener->port());
        // It says Hello as soon as it can, under the name of a real worker.
        QObject::connect(&client.m_socket, &QSslSocket::encrypted, &client.m_socket, [&client] {
            client.send(
                encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("steady") } }));
        });
        VERIFY_REFUSED(expected, 5000);
        QVERIFY2(refusedAddressIsLoopback(expected), qPrintable(refusals()));
        QCOMPARE(m_listener->connectionCount(), 1);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QVERIFY(m_hellos.isEmpty());
        VERIFY_FLEET();
        VERIFY_CLIENT_READ_ERROR(client, expected, true);
    }

    // 8. Revocation while connected, and on the way back in.
    void revokedWorkerIsDisconnectedAndRefused_data()
    {
        QTest::addColumn<bool>("byFingerprint");
        QTest::newRow("by name") << false;
        QTest::newRow("by fingerprint prefix") << true;
    }

    void revokedWorkerIsDisconnectedAndRefused()
    {
        QFETCH(bool, byFingerprint);
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        const QString name = QStringLiteral("doomed");
        auto worker = newWorker(name);
        QSignalSpy welcomed(worker.get(), &WorkerClient::welcomed);
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*joinToken));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        const PeerInfo *peer = helloFrom(name);
        QVERIFY(peer);
        const qint64 id = peer->connectionId;
        const QByteArray fingerprint = peer->fingerprint;
        QCOMPARE(m_listener->connectionCount(), 2);

        // `flotilla revoke` runs beside the coordinator: another TrustStore on the same folder.
        TrustStore cli(m_dir->filePath(QStringLiteral("coordinator")));
        QString key = name;
        if (byFingerprint)
            key = QString::fromLatin1(fingerprint.toHex().left(12));
        QElapsedTimer timer;
        timer.start();
        auto revoked = cli.revoke(key, QStringLiteral("stolen laptop"), nowMs());
        REQUIRE_OK(revoked);
        QCOMPARE(*revoked, 1);
        QTRY_VERIFY_WITH_TIMEOUT(!closureOf(id).isNull(), 3000);
        QVERIFY2(timer.elapsed() < 1500, qPrintable(QStringLiteral("closed after %1 ms").arg(timer.elapsed())));
        QVERIFY2(closureOf(id).contains(QLatin1String("revoked")), qPrintable(closureOf(id)));
        QVERIFY2(closureOf(id).contains(QLatin1String("stolen laptop")), qPrintable(closureOf(id)));
        QTRY_VERIFY_WITH_TIMEOUT(!worker->isConnected(), 3000);

        // Coming back with the revoked certificate is refused, by the live worker retrying
        // or by a restart from its state folder.
        worker.reset();
        auto again = newWorker(name);
        QSignalSpy failedAgain(again.get(), &WorkerClient::failed);
        QSignalSpy welcomedAgain(again.get(), &WorkerClient::welcomed);
        REQUIRE_OK(again->configure(std::nullopt));
        again->start({});
        VERIFY_REFUSED(QStringLiteral("revoked"), 5000);
        const QString refusal = refusalWith(QStringLiteral("revoked"));
        QVERIFY2(refusal.contains(QLatin1String("stolen laptop")), qPrintable(refusals()));
        const bool gaveUp = QTest::qWaitFor([&] { return !failedAgain.isEmpty(); }, 1500);
        const QString refusedTimes = QString::number(m_refused.size());
        QCOMPARE(welcomedAgain.size(), 0);
        again.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
        QVERIFY2(gaveUp,
            qPrintable(QStringLiteral("the revoked worker never gave up: it was refused %1 times in 1.5 s (\"%2\") and "
                                      "kept retrying, so the coordinator's Error never reached it")
                           .arg(refusedTimes, refusal)));
        const QString reason = failedAgain.first().first().toString();
        QVERIFY2(reason.contains(QLatin1String("revoked")), qPrintable(reason));
    }

    // The live worker is told why it was cut off, and gives up.
    void revokedWorkerIsToldWhy()
    {
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        auto worker = newWorker(QStringLiteral("told"));
        QSignalSpy welcomed(worker.get(), &WorkerClient::welcomed);
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*joinToken));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        REQUIRE_OK(TrustStore(m_dir->filePath(QStringLiteral("coordinator")))
                       .revoke(QStringLiteral("told"), QStringLiteral("retired"), nowMs()));
        QTRY_VERIFY2_WITH_TIMEOUT(!failed.isEmpty(),
            qPrintable(
                QStringLiteral("the worker never gave up; refusals: %1; closures: %2").arg(refusals(), closures())),
            3000);
        const QString reason = failed.first().first().toString();
        QVERIFY2(reason.contains(QLatin1String("revoked")), qPrintable(reason));
        QVERIFY2(reason.contains(QLatin1String("retired")), qPrintable(reason));
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // The coordinator closes a worker's connection for its own reasons: the worker is told,
    // and comes back by itself.
    void closedWorkerIsToldWhyAndReconnects()
    {
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        auto worker = newWorker(QStringLiteral("bouncer"));
        QSignalSpy welcomed(worker.get(), &WorkerClient::welcomed);
        QSignalSpy disconnected(worker.get(), &WorkerClient::disconnected);
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*joinToken));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
        QVERIFY(failed.isEmpty());
        const qint64 id = helloFrom(QStringLiteral("bouncer"))->connectionId;
        m_listener->close(id, QStringLiteral("draining for maintenance"), false, false);
        QVERIFY2(closureOf(id).contains(QLatin1String("draining")), qPrintable(closures()));
        QTRY_COMPARE_WITH_TIMEOUT(welcomed.size(), 2, 5000);
        QVERIFY(failed.isEmpty());
        QVERIFY(worker->isConnected());
        QCOMPARE(m_listener->connectionCount(), 2);
        worker.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
        QVERIFY(!disconnected.isEmpty());
        const QString reason = disconnected.first().first().toString();
        QVERIFY2(reason.contains(QLatin1String("draining for maintenance")), qPrintable(reason));
    }

    // A message larger than the socket's window goes out in slices; closing the connection
    // right after it still delivers all of it, and the reason after it, never in between.
    void largeMessageThenCloseArriveWholeAndInOrder()
    {
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        auto worker = newWorker(QStringLiteral("bulk"));
        QList<Message> received;
        QStringList events; // in the order the worker saw them
        connect(worker.get(), &WorkerClient::messageReceived, this, [&](const Message &m) {
            received << m;
            events << QStringLiteral("message");
        });
        connect(worker.get(), &WorkerClient::disconnected, this,
                [&](const QString &reason) { events << QStringLiteral("closed: ") + reason; });
        QSignalSpy welcomed(worker.get(), &WorkerClient::welcomed);
        QSignalSpy failed(worker.get(), &WorkerClient::failed);
        REQUIRE_OK(worker->configure(*joinToken));
        worker->start({});
        QTRY_VERIFY_WITH_TIMEOUT(!welcomed.isEmpty() || !failed.isEmpty(), 10000);
        QVERIFY(failed.isEmpty());
        const qint64 id = helloFrom(QStringLiteral("bulk"))->connectionId;

        QByteArray payload(700 * 1024 + 123, Qt::Uninitialized); // many slices and a short tail
        for (qsizetype i = 0; i < payload.size(); ++i)
            payload[i] = char((i * 131) ^ (i >> 9));
        m_listener->send(id, MessageType::ShardData, QCborMap{{QStringLiteral("shard"), 3}}, payload);
        m_listener->close(id, QStringLiteral("closed right after a large message"), false, false);

        QTRY_VERIFY_WITH_TIMEOUT(events.size() >= 2, 10000);
        QCOMPARE(events.first(), QStringLiteral("message"));
        QVERIFY2(events.at(1).contains(QLatin1String("closed right after a large message")), qPrintable(events.join(u'|')));
        QCOMPARE(received.size(), 1);
        QCOMPARE(received.first().type, MessageType::ShardData);
        QCOMPARE(received.first().payload.size(), payload.size());
        QVERIFY(received.first().payload == payload);
        worker.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // 9. TLS 1.2 is not spoken.
    void tls12ClientCannotConnect()
    {
        auto credentials = issueClient(m_identity.ca, QStringLiteral("old"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient client(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem, QSsl::TlsV1_2);
        QSignalSpy encrypted(&client.m_socket, &QSslSocket::encrypted);
        client.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(!client.m_errors.isEmpty(), 5000);
        QVERIFY(client.m_errors.contains(QAbstractSocket::SslHandshakeFailedError)
            || client.m_errors.contains(QAbstractSocket::RemoteHostClosedError));
        QVERIFY(encrypted.isEmpty());
        QVERIFY(!client.m_socket.isEncrypted());
        VERIFY_REFUSED(QStringLiteral("TLS handshake failed"), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(client.closed(), 5000);
        QCOMPARE(m_listener->connectionCount(), 1);
        QVERIFY(m_hellos.isEmpty());
        VERIFY_FLEET();
    }

    // 10. Identity is the certificate: a Hello may not rename a worker.
    void helloUnderAnotherNameIsRefused()
    {
        auto credentials = issueClient(m_identity.ca, QStringLiteral("alpha"), &m_listener->trust());
        REQUIRE_OK(credentials);
        RawClient impostor(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
        impostor.connectTo(m_listener->port());
        QTRY_VERIFY_WITH_TIMEOUT(impostor.m_socket.isEncrypted() || impostor.closed(), 5000);
        QVERIFY(impostor.m_socket.isEncrypted());
        impostor.send(encodeMessage(MessageType::Hello, QCborMap { { QStringLiteral("name"), QStringLiteral("beta") } }));
        const QString expected = QStringLiteral("said Hello as 'beta', but its certificate was issued to worker 'alpha'");
        VERIFY_REFUSED(expected, 5000);
        QTRY_VERIFY_WITH_TIMEOUT(impostor.closed(), 5000);
        QVERIFY(m_hellos.isEmpty());
        VERIFY_CLIENT_READ_ERROR(impostor, expected, true);

        // Without a name, or with its own, it is known by its certificate's name.
        for (const QCborMap &hello : { QCborMap {}, QCborMap { { QStringLiteral("name"), QStringLiteral("alpha") } } }) {
            m_hellos.clear();
            RawClient honest(m_identity.ca.certificatePem, credentials->certificatePem, credentials->keyPem);
            honest.connectTo(m_listener->port());
            QTRY_VERIFY_WITH_TIMEOUT(honest.m_socket.isEncrypted() || honest.closed(), 5000);
            honest.send(encodeMessage(MessageType::Hello, hello));
            QTRY_VERIFY_WITH_TIMEOUT(honest.received(MessageType::Welcome), 5000);
            QCOMPARE(m_hellos.size(), 1);
            QCOMPARE(m_hellos.first().workerName, QStringLiteral("alpha"));
            QCOMPARE(m_hellos.first().fingerprint, credentials->fingerprint);
        }
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);

        // A real worker restarted under another --name with the same state folder is told
        // why, and stops instead of retrying.
        auto joinToken = token();
        REQUIRE_OK(joinToken);
        QString why;
        auto first = newWorker(QStringLiteral("lab-1"));
        QVERIFY2(timeToWelcome(*first, *joinToken, &why) >= 0, qPrintable(why));
        first.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        WorkerClient::Options o;
        o.stateDir = stateDir(QStringLiteral("lab-1"));
        o.name = QStringLiteral("lab-2");
        o.initialBackoffMs = 50;
        WorkerClient renamed(o);
        QCOMPARE(timeToWelcome(renamed, std::nullopt, &why), qint64(-1));
        QVERIFY2(why.contains(QLatin1String("issued to worker 'lab-1'")), qPrintable(why));
        QVERIFY2(why.contains(QLatin1String("leave out --name")), qPrintable(why));
        renamed.stop();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

    // 11. A revoked token admits no one, and is not spent by trying.
    void revokedTokenIsRefusedAtRedeem()
    {
        auto joinToken = token(3);
        REQUIRE_OK(joinToken);
        // `flotilla token --revoke` runs beside the coordinator, with a prefix of the id.
        TrustStore cli(m_dir->filePath(QStringLiteral("coordinator")));
        auto revoked = cli.revokeToken(QString::fromLatin1(joinToken->id.toHex().left(6)), nowMs());
        REQUIRE_OK(revoked);
        QCOMPARE(revoked->id, joinToken->id);
        auto worker = newWorker(QStringLiteral("too-late"));
        QString why;
        QCOMPARE(timeToWelcome(*worker, *joinToken, &why), qint64(-1));
        QVERIFY2(why.contains(QLatin1String("revoked")), qPrintable(why));
        VERIFY_REFUSED(QStringLiteral("join refused: the join token was revoked"), 5000);
        auto record = m_listener->trust().token(joinToken->id);
        REQUIRE_OK(record);
        QCOMPARE((*record)->usesLeft, 3);
        QVERIFY(!worker->hasIdentity());
        worker.reset();
        QTRY_COMPARE_WITH_TIMEOUT(m_listener->connectionCount(), 1, 5000);
        VERIFY_FLEET();
    }

};

QTEST_GUILESS_MAIN(TestListener)
#include "tst_listener.moc"
