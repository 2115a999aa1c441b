// The message structs without sockets: every one survives encode then decode with all its
// fields, writes exactly the field names docs/protocol.md lists, and a malformed header is
// refused with an error that names the message and the field.
#include "net/Dispatch.h"
#include "net/Messages.h"

#include <QCborArray>
#include <QtTest>

using namespace flotilla;
using namespace flotilla::net;

namespace {

QCborMap manifest()
{
    return QCborMap { { QStringLiteral("dtype"), QStringLiteral("float32") }, { QStringLiteral("numel"), 10 } };
}

QStringList keysOf(const QCborMap &map)
{
    QStringList keys;
    for (const QCborValue &k : map.keys())
        keys << k.toString();
    keys.sort();
    return keys;
}

QStringList sorted(std::initializer_list<const char *> names)
{
    QStringList list;
    for (const char *name : names)
        list << QString::fromLatin1(name);
    list.sort();
    return list;
}

// Every field set to something other than its default, so a field that encode or decode
// forgets shows.
HelloMsg hello()
{
    return HelloMsg { 7, QStringLiteral("box"), QStringLiteral("aws/c5.large"), QStringLiteral("spot"),
        QStringLiteral("cuda:0"), 8, 123.5 };
}

WelcomeMsg welcome()
{
    return WelcomeMsg { 9, QStringLiteral("mnist"), QStringLiteral("{\"kind\":\"mlp\"}"), QStringLiteral("ab12"),
        { 1, 28, 28 }, 10, QStringLiteral("layout"), manifest(), 0xfedcba9876543210ull, 1500, 20000 };
}

AssignMsg assign()
{
    return AssignMsg { 1, 2, 3, 4, 5, 6, 7, 8, 9, QByteArray(32, 's'), QStringLiteral("adam"), 0.5, 0.25, 0.125, 64, 2,
        100, 42 };
}

template<typename Msg> Msg roundTrip(const Msg &message)
{
    auto decoded = Msg::decode(message.encode());
    if (!decoded)
        qFatal("%s", qPrintable(decoded.error()));
    return *decoded;
}

// Decodes a header that must be refused and returns the error.
template<typename Msg> QString refusal(const QCborMap &header)
{
    auto decoded = Msg::decode(header);
    return decoded ? QString() : decoded.error();
}

} // namespace

class TestMessages : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void helloRoundTrip()
    {
        const HelloMsg m = roundTrip(hello());
        QCOMPARE(m.protocol, qint64(7));
        QCOMPARE(m.name, QStringLiteral("box"));
        QCOMPARE(m.instanceType, QStringLiteral("aws/c5.large"));
        QCOMPARE(m.priceClass, QStringLiteral("spot"));
        QCOMPARE(m.device, QStringLiteral("cuda:0"));
        QCOMPARE(m.threads, qint64(8));
        QCOMPARE(m.samplesPerSecond, 123.5);
        QCOMPARE(keysOf(hello().encode()),
            sorted({ "protocol", "name", "instance_type", "price_class", "device", "threads", "samples_per_second",
                "memory_mb" }));
        HelloMsg big = hello();
        big.memoryMb = 65536;
        QCOMPARE(roundTrip(big).memoryMb, qint64(65536));
    }

    void welcomeRoundTrip()
    {
        const WelcomeMsg m = roundTrip(welcome());
        QCOMPARE(m.workerId, qint64(9));
        QCOMPARE(m.job, QStringLiteral("mnist"));
        QCOMPARE(m.model, QStringLiteral("{\"kind\":\"mlp\"}"));
        QCOMPARE(m.modelSha256, QStringLiteral("ab12"));
        QCOMPARE(m.inputShape, (std::vector<qint64> { 1, 28, 28 }));
        QCOMPARE(m.classes, qint64(10));
        QCOMPARE(m.layout, QStringLiteral("layout"));
        QCOMPARE(m.weights, manifest());
        QCOMPARE(m.seed, 0xfedcba9876543210ull); // a seed past qint64's range survives
        QCOMPARE(m.heartbeatMs, qint64(1500));
        QCOMPARE(m.heartbeatTimeoutMs, qint64(20000));
        QCOMPARE(m.compression, QStringLiteral("none"));
        WelcomeMsg compressed = welcome();
        compressed.compression = QStringLiteral("int8");
        QCOMPARE(roundTrip(compressed).compression, QStringLiteral("int8"));
        WelcomeMsg keyed = welcome();
        keyed.jobKey = QStringLiteral("job-7");
        QCOMPARE(roundTrip(keyed).jobKey, QStringLiteral("job-7"));
        WelcomeMsg waiting;
        waiting.waiting = QStringLiteral("quarantined by the fleet");
        QCOMPARE(roundTrip(waiting).waiting, QStringLiteral("quarantined by the fleet"));
        QCOMPARE(keysOf(welcome().encode()),
            sorted({ "worker_id", "job", "model", "model_sha256", "input_shape", "classes", "layout", "weights", "seed",
                "heartbeat_ms", "heartbeat_timeout_ms", "compression", "job_key", "waiting", "batch_size", "precision", "task" }));
    }

    void redeemAndEnrolledRoundTrip()
    {
        const RedeemMsg r = roundTrip(RedeemMsg { QByteArray(8, 'i'), QByteArray(16, 's'), QStringLiteral("w1") });
        QCOMPARE(r.tokenId, QByteArray(8, 'i'));
        QCOMPARE(r.secret, QByteArray(16, 's'));
        QCOMPARE(r.name, QStringLiteral("w1"));
        QCOMPARE(keysOf(r.encode()), sorted({ "token_id", "secret", "name" }));
        const EnrolledMsg e = roundTrip(EnrolledMsg { QStringLiteral("w1"), QByteArray(32, 'f') });
        QCOMPARE(e.name, QStringLiteral("w1"));
        QCOMPARE(e.fingerprint, QByteArray(32, 'f'));
        QCOMPARE(keysOf(e.encode()), sorted({ "name", "fingerprint" }));
    }

    void assignRoundTrip()
    {
        const AssignMsg m = roundTrip(assign());
        QCOMPARE(m.lease, qint64(1));
        QCOMPARE(m.subtask, qint64(2));
        QCOMPARE(m.epoch, qint64(3));
        QCOMPARE(m.shard, qint64(4));
        QCOMPARE(m.begin, qint64(5));
        QCOMPARE(m.end, qint64(6));
        QCOMPARE(m.baseVersion, qint64(7));
        QCOMPARE(m.deadlineMs, qint64(8));
        QCOMPARE(m.shardSamples, qint64(9));
        QCOMPARE(m.shardSha256, QByteArray(32, 's'));
        QCOMPARE(m.optimizer, QStringLiteral("adam"));
        QCOMPARE(m.learningRate, 0.5);
        QCOMPARE(m.momentum, 0.25);
        QCOMPARE(m.weightDecay, 0.125);
        QCOMPARE(m.batchSize, qint64(64));
        QCOMPARE(m.localEpochs, qint64(2));
        QCOMPARE(m.localSteps, qint64(100));
        QCOMPARE(m.seed, quint64(42));
        QCOMPARE(keysOf(assign().encode()),
            sorted({ "lease", "subtask", "epoch", "shard", "begin", "end", "base_version", "deadline_ms",
                "shard_samples", "shard_sha256", "optimizer", "learning_rate", "momentum", "weight_decay", "batch_size",
                "local_epochs", "local_steps", "seed", "nesterov", "beta1", "beta2", "eps", "clip_grad_norm",
                "label_smoothing", "precision" }));
        // The optimizer's further settings and the precision; a lease from an older coordinator
        // without them means what it trained then.
        AssignMsg tuned = assign();
        tuned.optimizer = QStringLiteral("adamw");
        tuned.nesterov = true;
        tuned.beta1 = 0.8;
        tuned.beta2 = 0.95;
        tuned.eps = 1e-6;
        tuned.clipGradNorm = 2.5;
        tuned.labelSmoothing = 0.1;
        tuned.precision = QStringLiteral("bf16");
        const AssignMsg t = roundTrip(tuned);
        QCOMPARE(t.optimizer, QStringLiteral("adamw"));
        QVERIFY(t.nesterov);
        QCOMPARE(t.beta1, 0.8);
        QCOMPARE(t.beta2, 0.95);
        QCOMPARE(t.eps, 1e-6);
        QCOMPARE(t.clipGradNorm, 2.5);
        QCOMPARE(t.labelSmoothing, 0.1);
        QCOMPARE(t.precision, QStringLiteral("bf16"));
        QCborMap older = assign().encode();
        for (const char *k : { "nesterov", "beta1", "beta2", "eps", "clip_grad_norm", "label_smoothing", "precision" })
            older.remove(QString::fromLatin1(k));
        const auto old = AssignMsg::decode(older);
        QVERIFY(old);
        QVERIFY(!old->nesterov);
        QCOMPARE(old->beta1, 0.9);
        QCOMPARE(old->beta2, 0.999);
        QCOMPARE(old->eps, 1e-8);
        QCOMPARE(old->clipGradNorm, 0.0);
        QCOMPARE(old->precision, QStringLiteral("fp32"));
        // Whole weights kept by nobody say nothing of changes or anchors, as before.
        QCOMPARE(m.change, QStringLiteral("none"));
        QCOMPARE(m.anchor, qint64(0));
        QVERIFY(!m.anchorIncluded);
        AssignMsg change = assign();
        change.change = QStringLiteral("int8");
        change.anchor = 1234567890123;
        change.anchorIncluded = true;
        const AssignMsg back = roundTrip(change);
        QCOMPARE(back.change, QStringLiteral("int8"));
        QCOMPARE(back.anchor, qint64(1234567890123));
        QVERIFY(back.anchorIncluded);
        QVERIFY(keysOf(change.encode()).contains(QStringLiteral("anchor_included")));

        // The schedule per step and the fresh-optimizer flag travel only when set.
        QVERIFY(!m.freshOptimizer);
        QCOMPARE(m.lrTotalSteps, qint64(0));
        AssignMsg scheduled = assign();
        scheduled.lrSchedule = QStringLiteral("cosine");
        scheduled.lrBase = 0.03;
        scheduled.lrTotalSteps = 9000;
        scheduled.lrWarmupSteps = 100;
        scheduled.lrFloor = 0.05;
        scheduled.lrStepEvery = 450;
        scheduled.lrGamma = 0.5;
        scheduled.firstStep = 1234;
        scheduled.freshOptimizer = true;
        const AssignMsg s = roundTrip(scheduled);
        QCOMPARE(s.lrSchedule, QStringLiteral("cosine"));
        QCOMPARE(s.lrBase, 0.03);
        QCOMPARE(s.lrTotalSteps, qint64(9000));
        QCOMPARE(s.lrWarmupSteps, qint64(100));
        QCOMPARE(s.lrFloor, 0.05);
        QCOMPARE(s.lrStepEvery, qint64(450));
        QCOMPARE(s.lrGamma, 0.5);
        QCOMPARE(s.firstStep, qint64(1234));
        QVERIFY(s.freshOptimizer);
        QCborMap noFirstStep = scheduled.encode();
        noFirstStep.remove(QStringLiteral("first_step"));
        QVERIFY(refusal<AssignMsg>(noFirstStep).contains(QStringLiteral("first_step")));
        QCborMap negativeSteps = scheduled.encode();
        negativeSteps.insert(QStringLiteral("lr_warmup_steps"), -5);
        QVERIFY(refusal<AssignMsg>(negativeSteps).contains(QStringLiteral("lr_warmup_steps")));
    }

    void smallMessagesRoundTrip()
    {
        QCOMPARE(roundTrip(RequestMsg { 12.5 }).samplesPerSecond, 12.5);
        QCOMPARE(keysOf(RequestMsg {}.encode()), sorted({ "samples_per_second" }));
        const RequestMsg takes = roundTrip(RequestMsg { 3.0, true, 99 });
        QVERIFY(takes.takesChanges);
        QCOMPARE(takes.anchor, qint64(99));
        QCOMPARE(keysOf(takes.encode()), sorted({ "samples_per_second", "takes_changes", "anchor" }));

        const NoWorkMsg noWork = roundTrip(NoWorkMsg { 750, true });
        QCOMPARE(noWork.retryMs, qint64(750));
        QVERIFY(noWork.finished);
        QCOMPARE(keysOf(noWork.encode()), sorted({ "retry_ms", "finished" }));
        // Dismissed only when it is: an older worker's decoder never sees the key otherwise.
        const NoWorkMsg dismissed = roundTrip(NoWorkMsg { 500, false, true });
        QVERIFY(dismissed.dismissed && !dismissed.finished);
        QCOMPARE(keysOf(dismissed.encode()), sorted({ "retry_ms", "finished", "dismissed" }));

        QCOMPARE(roundTrip(ShardRequestMsg { 3 }).shard, qint64(3));
        QCOMPARE(keysOf(ShardRequestMsg {}.encode()), sorted({ "shard" }));

        const HeartbeatMsg beat = roundTrip(HeartbeatMsg { 5, 60, 120 });
        QCOMPARE(beat.lease, qint64(5));
        QCOMPARE(beat.done, qint64(60));
        QCOMPARE(beat.planned, qint64(120));
        QCOMPARE(keysOf(beat.encode()), sorted({ "lease", "done", "planned" }));
        // The fleet's job key travels only when it is set: one job's peers never see it.
        const HeartbeatMsg keyed = roundTrip(HeartbeatMsg { 5, 60, 120, QStringLiteral("job-2") });
        QCOMPARE(keyed.job, QStringLiteral("job-2"));
        QCOMPARE(keysOf(keyed.encode()), sorted({ "lease", "done", "planned", "job" }));
        QCOMPARE(roundTrip(AckMsg { 5, QStringLiteral("duplicate"), {}, 0, 0, QStringLiteral("job-1") }).job,
                 QStringLiteral("job-1"));
        QCOMPARE(roundTrip(HandBackMsg { 9, QStringLiteral("moved"), false, QStringLiteral("job-3") }).job,
                 QStringLiteral("job-3"));

        const QString sha(64, u'a');
        QCOMPARE(roundTrip(ModelRequestMsg { sha }).sha256, sha);
        QCOMPARE(keysOf(ModelRequestMsg { sha }.encode()), sorted({ "sha256" }));
        QVERIFY(!ModelRequestMsg::decode(QCborMap {}));
        const ModelDataMsg missing = roundTrip(ModelDataMsg { sha, QStringLiteral("no such model") });
        QCOMPARE(missing.error, QStringLiteral("no such model"));
        QCOMPARE(keysOf(ModelDataMsg { sha }.encode()), sorted({ "sha256" }));

        const AckMsg ack = roundTrip(AckMsg { 5, QStringLiteral("held"), QStringLiteral("why"), 11, 12 });
        QCOMPARE(ack.lease, qint64(5));
        QCOMPARE(ack.status, QStringLiteral("held"));
        QCOMPARE(ack.reason, QStringLiteral("why"));
        QCOMPARE(ack.seq, qint64(11));
        QCOMPARE(ack.version, qint64(12));
        QCOMPARE(keysOf(ack.encode()), sorted({ "lease", "status", "reason", "seq", "version" }));

        const HandBackMsg handBack = roundTrip(HandBackMsg { 6, QStringLiteral("not ready") });
        QCOMPARE(handBack.lease, qint64(6));
        QCOMPARE(handBack.reason, QStringLiteral("not ready"));
        QCOMPARE(keysOf(handBack.encode()), sorted({ "lease", "reason" }));

        const CancelMsg cancel = roundTrip(CancelMsg { 7, QStringLiteral("done elsewhere") });
        QCOMPARE(cancel.lease, qint64(7));
        QCOMPARE(cancel.reason, QStringLiteral("done elsewhere"));
        QCOMPARE(keysOf(cancel.encode()), sorted({ "lease", "reason" }));

        const ErrorMsg error = roundTrip(ErrorMsg { QStringLiteral("revoked"), true });
        QCOMPARE(error.reason, QStringLiteral("revoked"));
        QVERIFY(error.fatal);
        QCOMPARE(keysOf(error.encode()), sorted({ "reason", "fatal" }));

        QCOMPARE(roundTrip(ByeMsg { QStringLiteral("preempted") }).reason, QStringLiteral("preempted"));
        QCOMPARE(keysOf(ByeMsg {}.encode()), sorted({ "reason" }));
        QCOMPARE(roundTrip(EchoMsg { 1234567890123 }).seq, qint64(1234567890123));
        QCOMPARE(keysOf(EchoMsg {}.encode()), sorted({ "seq" }));
    }

    void resultRoundTrip()
    {
        const ResultMsg m = roundTrip(ResultMsg { 8, 0.75, 640, 320, 2.5, true, manifest() });
        QCOMPARE(m.lease, qint64(8));
        QCOMPARE(m.loss, 0.75);
        QCOMPARE(m.sampleSteps, qint64(640));
        QCOMPARE(m.covered, qint64(320));
        QCOMPARE(m.seconds, 2.5);
        QVERIFY(m.partial);
        QCOMPARE(m.weights, manifest());
        QCOMPARE(m.encoding, QStringLiteral("none"));
        ResultMsg delta { 8, 0.75, 640, 320, 2.5, true, manifest() };
        delta.encoding = QStringLiteral("fp16");
        QCOMPARE(roundTrip(delta).encoding, QStringLiteral("fp16"));
        QCOMPARE(keysOf(m.encode()),
            sorted({ "lease", "loss", "sample_steps", "covered", "seconds", "partial", "weights", "encoding" }));
    }

    // The header is the engine's manifest plus the shard's number; the manifest comes back
    // without it, as the shard's digest is computed.
    void shardDataRoundTrip()
    {
        const QCborMap shardManifest { { QStringLiteral("dtype"), QStringLiteral("uint8") },
            { QStringLiteral("samples"), 4 } };
        const QCborMap header = ShardDataMsg { 2, shardManifest }.encode();
        QCOMPARE(keysOf(header), sorted({ "dtype", "samples", "shard" }));
        const ShardDataMsg m = roundTrip(ShardDataMsg { 2, shardManifest });
        QCOMPARE(m.shard, qint64(2));
        QCOMPARE(m.manifest, shardManifest);
    }

    // What the wire carries: a message struct through a frame and back.
    void throughFrames()
    {
        MessageReader reader;
        reader.feed(encodeMessage(assign(), QByteArray("weights")));
        auto message = reader.next();
        QVERIFY2(message, qPrintable(message.error()));
        QVERIFY(message->has_value());
        QVERIFY((*message)->type == MessageType::Assign);
        QCOMPARE((*message)->payload, QByteArray("weights"));
        auto decoded = AssignMsg::decode((*message)->header);
        QVERIFY2(decoded, qPrintable(decoded.error()));
        QCOMPARE(decoded->encode(), assign().encode());
    }

    // Dispatch from the message table: each type's header reaches the handler as its own struct;
    // a type the handler does not take (here Bye, and a Chunk on its own) goes to `unhandled`;
    // a header that does not decode goes to `malformed` with the type named, and no handler runs.
    void dispatchHandsEachTypeItsStruct()
    {
        QStringList seen;
        const auto run = [&](const Message &m) {
            dispatch(
                m,
                Handlers{[&](const HeartbeatMsg &h) { seen << QStringLiteral("heartbeat %1/%2").arg(h.done).arg(h.planned); },
                         [&](const AssignMsg &a) { seen << QStringLiteral("assign %1").arg(a.lease); },
                         [&](const CancelMsg &c) { seen << QStringLiteral("cancel %1").arg(c.lease); },
                         [&](const HandBackMsg &h) { seen << QStringLiteral("hand-back %1").arg(h.lease); }},
                [&](const Message &other) { seen << QStringLiteral("unhandled ") + describe(other.type); },
                [&](const QString &why) { seen << QStringLiteral("malformed ") + why; });
        };
        run(Message{MessageType::Heartbeat, HeartbeatMsg{7, 3, 9}.encode(), {}});
        run(Message{MessageType::Assign, assign().encode(), QByteArray("weights")});
        run(Message{MessageType::Cancel, CancelMsg{11, QStringLiteral("done elsewhere")}.encode(), {}});
        run(Message{MessageType::HandBack, HandBackMsg{12, QStringLiteral("cannot")}.encode(), {}});
        run(Message{MessageType::Bye, ByeMsg{QStringLiteral("bye")}.encode(), {}});
        run(Message{MessageType::Heartbeat, QCborMap{{QStringLiteral("lease"), QStringLiteral("not a number")}}, {}});
        run(Message{MessageType::Chunk, {}, QByteArray("rest")});
        QCOMPARE(seen.size(), 7);
        QCOMPARE(seen[0], QStringLiteral("heartbeat 3/9"));
        QCOMPARE(seen[1], QStringLiteral("assign %1").arg(assign().lease));
        QCOMPARE(seen[2], QStringLiteral("cancel 11")); // Cancel and HandBack share a layout, not a handler
        QCOMPARE(seen[3], QStringLiteral("hand-back 12"));
        QCOMPARE(seen[4], QStringLiteral("unhandled ") + describe(MessageType::Bye));
        QVERIFY2(seen[5].startsWith(QLatin1String("malformed ")) && seen[5].contains(describe(MessageType::Heartbeat))
                     && seen[5].contains(QLatin1String("'lease'")),
                 qPrintable(seen[5]));
        QCOMPARE(seen[6], QStringLiteral("unhandled ") + describe(MessageType::Chunk));
    }

    // Absent optional fields mean what they always meant: a Hello that says little, a
    // Request without a speed, a Welcome from an older coordinator without heartbeats.
    void absentOptionalFieldsTakeTheirDefaults()
    {
        auto empty = HelloMsg::decode(QCborMap {});
        QVERIFY2(empty, qPrintable(empty.error()));
        QCOMPARE(empty->name, QString());
        QCOMPARE(empty->threads, qint64(0));
        QVERIFY(RequestMsg::decode(QCborMap {}));
        QVERIFY(ErrorMsg::decode(QCborMap {}));
        QCborMap older = welcome().encode();
        older.remove(QStringLiteral("heartbeat_ms"));
        older.remove(QStringLiteral("heartbeat_timeout_ms"));
        auto w = WelcomeMsg::decode(older);
        QVERIFY2(w, qPrintable(w.error()));
        QCOMPARE(w->heartbeatMs, qint64(2000));
        QCOMPARE(w->heartbeatTimeoutMs, qint64(30000));
        older.remove(QStringLiteral("compression"));
        QCOMPARE(WelcomeMsg::decode(older)->compression, QStringLiteral("none")); // an older coordinator wants weights
        auto redeem = RedeemMsg::decode(QCborMap {
            { QStringLiteral("token_id"), QByteArray(8, 'i') }, { QStringLiteral("secret"), QByteArray(16, 's') } });
        QVERIFY2(redeem, qPrintable(redeem.error()));
        QVERIFY(redeem->name.isEmpty()); // the coordinator refuses it itself, counting a failed join
        // A number may come as an integer.
        auto speed = RequestMsg::decode(QCborMap { { QStringLiteral("samples_per_second"), 40 } });
        QVERIFY(speed);
        QCOMPARE(speed->samplesPerSecond, 40.0);
    }

    void malformedHeadersNameTheMessageAndField_data()
    {
        QTest::addColumn<QString>("error");
        QTest::addColumn<QString>("field");
        QTest::addColumn<QString>("message");
        const auto row = [](const char *name, const QString &error, const char *field, const char *message) {
            QTest::newRow(name) << error << QString::fromLatin1(field) << QString::fromLatin1(message);
        };
        row("Heartbeat without a lease", refusal<HeartbeatMsg>(QCborMap { { QStringLiteral("done"), 1 } }), "lease",
            "Heartbeat");
        row("Heartbeat with a text lease",
            refusal<HeartbeatMsg>(QCborMap { { QStringLiteral("lease"), QStringLiteral("7") } }), "lease", "Heartbeat");
        row("Heartbeat with a fractional count",
            refusal<HeartbeatMsg>(QCborMap { { QStringLiteral("lease"), 1 }, { QStringLiteral("done"), 1e300 } }),
            "done", "Heartbeat");
        row("ShardRequest without a shard", refusal<ShardRequestMsg>(QCborMap {}), "shard", "ShardRequest");
        row("ShardRequest for a negative shard", refusal<ShardRequestMsg>(QCborMap { { QStringLiteral("shard"), -1 } }),
            "shard", "ShardRequest");
        row("Result with a text loss",
            refusal<ResultMsg>(
                QCborMap { { QStringLiteral("lease"), 1 }, { QStringLiteral("loss"), QStringLiteral("low") } }),
            "loss", "Result");
        row("Result with weights that are not a map",
            refusal<ResultMsg>(QCborMap { { QStringLiteral("lease"), 1 }, { QStringLiteral("weights"), 3 } }),
            "weights", "Result");
        row("Result with a partial that is not a boolean",
            refusal<ResultMsg>(QCborMap { { QStringLiteral("lease"), 1 }, { QStringLiteral("partial"), 1 } }),
            "partial", "Result");
        row("Redeem with a text secret",
            refusal<RedeemMsg>(QCborMap { { QStringLiteral("token_id"), QByteArray(8, 'i') },
                { QStringLiteral("secret"), QStringLiteral("s") } }),
            "secret", "Redeem");
        row("Redeem without a token",
            refusal<RedeemMsg>(QCborMap { { QStringLiteral("secret"), QByteArray(16, 's') } }), "token_id", "Redeem");
        row("Hello with a text thread count",
            refusal<HelloMsg>(QCborMap { { QStringLiteral("threads"), QStringLiteral("4") } }), "threads", "Hello");
        QCborMap noLayout = welcome().encode();
        noLayout.remove(QStringLiteral("layout"));
        row("Welcome without a layout", refusal<WelcomeMsg>(noLayout), "layout", "Welcome");
        QCborMap badShape = welcome().encode();
        badShape.insert(QStringLiteral("input_shape"), QCborArray { 1, QStringLiteral("28") });
        row("Welcome with a shape of text", refusal<WelcomeMsg>(badShape), "input_shape", "Welcome");
        QCborMap noSeed = assign().encode();
        noSeed.remove(QStringLiteral("seed"));
        row("Assign without a seed", refusal<AssignMsg>(noSeed), "seed", "Assign");
        QCborMap textRate = assign().encode();
        textRate.insert(QStringLiteral("learning_rate"), QStringLiteral("0.1"));
        row("Assign with a text learning rate", refusal<AssignMsg>(textRate), "learning_rate", "Assign");
        QCborMap textAnchor = assign().encode();
        textAnchor.insert(QStringLiteral("anchor"), QStringLiteral("7"));
        row("Assign with a text anchor", refusal<AssignMsg>(textAnchor), "anchor", "Assign");
        QCborMap negativeAnchor = assign().encode();
        negativeAnchor.insert(QStringLiteral("anchor"), -7);
        row("Assign with a negative anchor", refusal<AssignMsg>(negativeAnchor), "anchor", "Assign");
        QCborMap numericChange = assign().encode();
        numericChange.insert(QStringLiteral("change"), 8);
        row("Assign with a change that is not text", refusal<AssignMsg>(numericChange), "change", "Assign");
        row("Request with a takes_changes that is not a boolean", refusal<RequestMsg>(QCborMap { { QStringLiteral("takes_changes"), 1 } }),
            "takes_changes", "Request");
        row("Ack without a status", refusal<AckMsg>(QCborMap { { QStringLiteral("lease"), 1 } }), "status", "Ack");
        row("NoWork with a text retry",
            refusal<NoWorkMsg>(QCborMap { { QStringLiteral("retry_ms"), QStringLiteral("1") } }), "retry_ms", "NoWork");
        row("Cancel without a lease", refusal<CancelMsg>(QCborMap {}), "lease", "Cancel");
        row("HandBack with a text lease",
            refusal<HandBackMsg>(QCborMap { { QStringLiteral("lease"), QStringLiteral("x") } }), "lease", "HandBack");
        row("ShardData without a shard", refusal<ShardDataMsg>(QCborMap { { QStringLiteral("samples"), 4 } }), "shard",
            "ShardData");
        row("Enrolled without a fingerprint",
            refusal<EnrolledMsg>(QCborMap { { QStringLiteral("name"), QStringLiteral("w") } }), "fingerprint",
            "Enrolled");
        row("Error with a fatal that is not a boolean", refusal<ErrorMsg>(QCborMap { { QStringLiteral("fatal"), 1 } }),
            "fatal", "Error");
        row("Bye with a reason that is not text", refusal<ByeMsg>(QCborMap { { QStringLiteral("reason"), 1 } }),
            "reason", "Bye");
        row("Echo without its seq", refusal<EchoMsg>(QCborMap {}), "seq", "Echo");
    }

    void malformedHeadersNameTheMessageAndField()
    {
        QFETCH(QString, error);
        QFETCH(QString, field);
        QFETCH(QString, message);
        QVERIFY2(!error.isEmpty(), "the header was accepted");
        QVERIFY2(error.contains(QStringLiteral("'%1'").arg(field)), qPrintable(error));
        QVERIFY2(error.contains(message), qPrintable(error));
    }
};

QTEST_APPLESS_MAIN(TestMessages)
#include "tst_messages.moc"
