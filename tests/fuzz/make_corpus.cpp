// Writes the seed corpora (tests/fuzz/corpus/frame, tests/fuzz/corpus/json) and the
// dictionaries (tests/fuzz/frame.dict, tests/fuzz/json.dict) with Flotilla's own encoders, so
// that every seed is what a peer or a user really sends, or one step from it:
//     fuzz_make_corpus SOURCE_ROOT
// Frame seeds start with the fuzz target's control byte (see fuzz_frame.cpp). Run it again
// when the protocol or the job file changes; the keys and csr seeds change on every run.
#include "common/Crc32c.h"
#include "common/Sha256.h"
#include "job/JobSpec.h"
#include "net/Frame.h"
#include "net/Pki.h"
#include "net/TrustStore.h"

#include <QCborArray>
#include <QCborStreamWriter>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>

#include <cstdio>
#include <cstdlib>
#include <set>

using namespace flotilla;
using namespace flotilla::net;

namespace {

// A payload's check value as frames carry it.
QByteArray crc32c(const QByteArray &bytes)
{
    flotilla::Crc32c c;
    c.addData(bytes);
    return c.result();
}

QString g_root;

[[noreturn]] void die(const QString &what)
{
    std::fprintf(stderr, "fuzz_make_corpus: %s\n", qUtf8Printable(what));
    std::exit(1);
}

template <typename T>
T need(Result<T> r)
{
    if (!r)
        die(r.error());
    return std::move(r).value();
}

QString fuzzDir(const QString &sub = {})
{
    return QDir(g_root).filePath(QStringLiteral("tests/fuzz/") + sub);
}

void write(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(bytes) != bytes.size())
        die(QStringLiteral("cannot write %1: %2").arg(path, f.errorString()));
}

QByteArray readFile(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        die(QStringLiteral("cannot read %1: %2").arg(path, f.errorString()));
    return f.readAll();
}

// Empties a corpus folder of the files an earlier run wrote.
QString corpusDir(const QString &target)
{
    QDir dir(fuzzDir(QStringLiteral("corpus/") + target));
    if (!dir.mkpath(QStringLiteral(".")))
        die(QStringLiteral("cannot create %1").arg(dir.path()));
    for (const QString &name : dir.entryList(QDir::Files))
        dir.remove(name);
    return dir.path();
}

// ---- frames -------------------------------------------------------------------------------

// Control byte: bits 0-1 the payload limits (0 worker, 1 coordinator, 2 4 KiB, 3 none), bits
// 2-7 the seed of the cutting points.
enum Limits { Worker = 0, Coordinator = 1, Small = 2, NoPayload = 3 };

struct FrameSeeds
{
    QString dir;
    int count = 0;
    void add(const QString &name, int limits, const QByteArray &stream)
    {
        const char control = char((limits & 3) | ((count * 7 % 64) << 2));
        write(QDir(dir).filePath(name), QByteArray(1, control) + stream);
        ++count;
    }
};

QByteArray cbor(const QCborMap &map)
{
    return map.toCborValue().toCbor();
}

QByteArray frame(MessageType type, const QByteArray &header, const QByteArray &payload = {})
{
    return encodeFrame(kProtocolVersion, std::uint8_t(type), header, payload);
}

// A message whose payload follows in Chunk frames of chunkSize bytes (encodeMessage uses
// 1 MiB chunks, which would make seeds too large to mutate quickly). The digest travels in the
// frame that ends the payload, as encodeMessage puts it.
QByteArray chunked(MessageType type, QCborMap header, const QByteArray &payload, qsizetype chunkSize,
                   const QByteArray &sha = {})
{
    const QByteArray digest = sha.isEmpty() ? crc32c(payload) : sha;
    const QCborMap last{{QStringLiteral("payload_crc32c"), digest}};
    header.insert(QStringLiteral("payload_size"), qint64(payload.size()));
    if (payload.size() <= chunkSize)
        header.insert(QStringLiteral("payload_crc32c"), digest);
    QByteArray out = frame(type, cbor(header), payload.left(chunkSize));
    for (qsizetype at = chunkSize; at < payload.size(); at += chunkSize)
        out += frame(MessageType::Chunk, cbor(at + chunkSize >= payload.size() ? last : QCborMap()),
                     payload.mid(at, chunkSize));
    return out;
}

QByteArray bytes(int n, char fill)
{
    QByteArray b(n, fill);
    for (int i = 0; i < n; ++i)
        b[i] = char(fill + i);
    return b;
}

QCborMap weightManifest()
{
    return QCborMap{{QStringLiteral("dtype"), QStringLiteral("float32")},
                    {QStringLiteral("numel"), 6},
                    {QStringLiteral("tensors"),
                     QCborArray{QCborMap{{QStringLiteral("name"), QStringLiteral("fc.weight")},
                                         {QStringLiteral("shape"), QCborArray{2, 2}}},
                                QCborMap{{QStringLiteral("name"), QStringLiteral("fc.bias")},
                                         {QStringLiteral("shape"), QCborArray{2}}}}}};
}

QByteArray floats(int n)
{
    QByteArray b;
    for (int i = 0; i < n; ++i) {
        const float f = 0.25f * float(i) - 0.5f;
        b.append(reinterpret_cast<const char *>(&f), sizeof f);
    }
    return b;
}

void writeFrameSeeds()
{
    FrameSeeds s{corpusDir(QStringLiteral("frame"))};
    const CertificateAuthority ca = need(createCertificateAuthority(QStringLiteral("Seed CA"), 30));
    const QByteArray key = need(generatePrivateKeyPem());
    const QByteArray csr = need(createCertificateRequest(key, QStringLiteral("worker-1")));
    const QByteArray certificate = need(signCertificateRequest(ca, csr, QStringLiteral("worker-1"), 365));

    const QCborMap hello{{QStringLiteral("protocol"), 1},
                         {QStringLiteral("name"), QStringLiteral("worker-1")},
                         {QStringLiteral("instance_type"), QStringLiteral("aws/c5.large")},
                         {QStringLiteral("price_class"), QStringLiteral("spot")},
                         {QStringLiteral("device"), QStringLiteral("cpu")},
                         {QStringLiteral("threads"), 2},
                         {QStringLiteral("samples_per_second"), 850.5}};
    const QByteArray model = QJsonDocument(JobSpec::defaultJob().toJson().value(QStringLiteral("model")).toObject())
                                 .toJson(QJsonDocument::Compact);
    const QCborMap welcome{{QStringLiteral("worker_id"), 3},
                           {QStringLiteral("job"), QStringLiteral("fashion-mnist-cnn")},
                           {QStringLiteral("model"), QString::fromUtf8(model)},
                           {QStringLiteral("model_sha256"), Sha256::hash("model")},
                           {QStringLiteral("input_shape"), QCborArray{1, 28, 28}},
                           {QStringLiteral("classes"), 10},
                           {QStringLiteral("layout"), Sha256::hash("layout")},
                           {QStringLiteral("weights"), weightManifest()},
                           {QStringLiteral("seed"), 1},
                           {QStringLiteral("heartbeat_ms"), 2000}};
    const QCborMap redeem{{QStringLiteral("token_id"), bytes(8, 'i')},
                          {QStringLiteral("secret"), bytes(16, 's')},
                          {QStringLiteral("name"), QStringLiteral("worker-1")}};
    const QCborMap assign{{QStringLiteral("lease"), 7},
                          {QStringLiteral("subtask"), 21},
                          {QStringLiteral("epoch"), 1},
                          {QStringLiteral("shard"), 4},
                          {QStringLiteral("begin"), 0},
                          {QStringLiteral("end"), 2},
                          {QStringLiteral("base_version"), 40},
                          {QStringLiteral("deadline_ms"), qint64(1767225600000)},
                          {QStringLiteral("shard_samples"), 2},
                          {QStringLiteral("shard_sha256"), Sha256::hash("shard")},
                          {QStringLiteral("optimizer"), QStringLiteral("sgd")},
                          {QStringLiteral("learning_rate"), 0.03},
                          {QStringLiteral("momentum"), 0.9},
                          {QStringLiteral("weight_decay"), 0.0},
                          {QStringLiteral("batch_size"), 32},
                          {QStringLiteral("local_epochs"), 1},
                          {QStringLiteral("local_steps"), 0},
                          {QStringLiteral("seed"), 99}};
    const QCborMap shardData{{QStringLiteral("shard"), 4},
                             {QStringLiteral("samples"), 2},
                             {QStringLiteral("sample_shape"), QCborArray{1, 2, 2}},
                             {QStringLiteral("classes"), 10}};
    QByteArray shardBytes = floats(8);
    for (qint64 label : {qint64(3), qint64(7)})
        shardBytes.append(reinterpret_cast<const char *>(&label), sizeof label);
    const QCborMap result{{QStringLiteral("lease"), 7},
                          {QStringLiteral("loss"), 0.42},
                          {QStringLiteral("sample_steps"), 64},
                          {QStringLiteral("covered"), 2},
                          {QStringLiteral("seconds"), 1.5},
                          {QStringLiteral("partial"), false},
                          {QStringLiteral("weights"), weightManifest()}};
    const QCborMap ack{{QStringLiteral("lease"), 7},
                       {QStringLiteral("status"), QStringLiteral("assimilated")},
                       {QStringLiteral("reason"), QString()},
                       {QStringLiteral("seq"), 12},
                       {QStringLiteral("version"), 41}};
    const QCborMap reason{{QStringLiteral("lease"), 7}, {QStringLiteral("reason"), QStringLiteral("preempted")}};
    JoinToken token;
    token.host = QStringLiteral("coordinator.example");
    token.port = 7441;
    token.caFingerprint = Sha256::hash("ca");
    token.id = bytes(8, 'i');
    token.secret = bytes(16, 's');
    token.expiresMs = 1767225600000;
    const QByteArray tokenCbor = QByteArray::fromBase64(token.encode().mid(5).toLatin1(), QByteArray::Base64UrlEncoding);

    // Every message type, as peers send them.
    s.add(QStringLiteral("hello"), Coordinator, encodeMessage(MessageType::Hello, hello));
    s.add(QStringLiteral("welcome"), Worker, encodeMessage(MessageType::Welcome, welcome));
    s.add(QStringLiteral("redeem"), Coordinator, encodeMessage(MessageType::Redeem, redeem, csr));
    s.add(QStringLiteral("enrolled"), Worker,
          encodeMessage(MessageType::Enrolled,
                        QCborMap{{QStringLiteral("name"), QStringLiteral("worker-1")},
                                 {QStringLiteral("fingerprint"), certificateFingerprint(certificate)}},
                        certificate));
    s.add(QStringLiteral("request"), Coordinator,
          encodeMessage(MessageType::Request, QCborMap{{QStringLiteral("samples_per_second"), 900.0}}));
    s.add(QStringLiteral("assign-chunked"), Worker, chunked(MessageType::Assign, assign, floats(6), 8));
    s.add(QStringLiteral("nowork"), Worker,
          encodeMessage(MessageType::NoWork,
                        QCborMap{{QStringLiteral("retry_ms"), 500}, {QStringLiteral("finished"), false}}));
    s.add(QStringLiteral("shardrequest"), Coordinator,
          encodeMessage(MessageType::ShardRequest, QCborMap{{QStringLiteral("shard"), 4}}));
    s.add(QStringLiteral("sharddata-chunked"), Small, chunked(MessageType::ShardData, shardData, shardBytes, 10));
    s.add(QStringLiteral("heartbeat"), Coordinator,
          encodeMessage(MessageType::Heartbeat, QCborMap{{QStringLiteral("lease"), 7},
                                                         {QStringLiteral("done"), 100},
                                                         {QStringLiteral("planned"), 400}}));
    s.add(QStringLiteral("result-chunked"), Coordinator, chunked(MessageType::Result, result, floats(6), 7));
    s.add(QStringLiteral("result-one-frame"), Small, encodeMessage(MessageType::Result, result, floats(6)));
    s.add(QStringLiteral("ack"), Worker, encodeMessage(MessageType::Ack, ack));
    s.add(QStringLiteral("handback"), Coordinator, encodeMessage(MessageType::HandBack, reason));
    s.add(QStringLiteral("cancel"), Worker, encodeMessage(MessageType::Cancel, reason));
    s.add(QStringLiteral("error"), Worker,
          encodeMessage(MessageType::Error, QCborMap{{QStringLiteral("reason"), QStringLiteral("revoked")},
                                                     {QStringLiteral("fatal"), true}}));
    s.add(QStringLiteral("bye"), NoPayload,
          encodeMessage(MessageType::Bye, QCborMap{{QStringLiteral("reason"), QStringLiteral("preempted")}}));
    s.add(QStringLiteral("bye-carrying-a-join-token"), Worker, frame(MessageType::Bye, tokenCbor));
    // Conversations: several messages back to back, as one connection carries them.
    s.add(QStringLiteral("worker-session"), Coordinator,
          encodeMessage(MessageType::Hello, hello)
              + encodeMessage(MessageType::Request, QCborMap{{QStringLiteral("samples_per_second"), 900.0}})
              + encodeMessage(MessageType::Heartbeat, QCborMap{{QStringLiteral("lease"), 7}})
              + chunked(MessageType::Result, result, floats(6), 5)
              + encodeMessage(MessageType::Bye, QCborMap{{QStringLiteral("reason"), QStringLiteral("done")}}));
    s.add(QStringLiteral("coordinator-session"), Worker,
          encodeMessage(MessageType::Welcome, welcome) + chunked(MessageType::Assign, assign, floats(6), 16)
              + chunked(MessageType::ShardData, shardData, shardBytes, 24)
              + encodeMessage(MessageType::Ack, ack) + encodeMessage(MessageType::Cancel, reason));

    // Near misses: each one step from a valid stream.
    const QByteArray bye = encodeMessage(MessageType::Bye, QCborMap{{QStringLiteral("reason"), QStringLiteral("x")}});
    s.add(QStringLiteral("bad-magic"), Worker, QByteArray("FX") + bye.mid(2));
    s.add(QStringLiteral("bad-version"), Worker, encodeFrame(2, std::uint8_t(MessageType::Bye), cbor({}), {}));
    s.add(QStringLiteral("type-0"), Worker, encodeFrame(kProtocolVersion, 0, cbor({}), {}));
    s.add(QStringLiteral("type-22"), Worker, encodeFrame(kProtocolVersion, 22, cbor({}), {}));
    QByteArray longHeader = bye.left(kFrameHeaderSize);
    longHeader[4] = 0, longHeader[5] = 1, longHeader[6] = 0, longHeader[7] = 1; // 64 KiB + 1
    s.add(QStringLiteral("header-too-long"), Worker, longHeader);
    QByteArray longPayload = bye.left(kFrameHeaderSize);
    longPayload[8] = 0, longPayload[9] = 0x10, longPayload[10] = 0, longPayload[11] = 1; // 1 MiB + 1
    s.add(QStringLiteral("payload-too-long"), Worker, longPayload);
    s.add(QStringLiteral("header-not-a-map"), Worker,
          frame(MessageType::Hello, QCborValue(QCborArray{1, 2}).toCbor()));
    s.add(QStringLiteral("header-cut-cbor"), Worker, frame(MessageType::Hello, cbor(hello).chopped(3)));
    s.add(QStringLiteral("payload-unannounced"), Worker, frame(MessageType::Result, cbor(result), floats(6)));
    s.add(QStringLiteral("check-mismatch"), Worker,
          chunked(MessageType::Result, result, floats(6), 8, crc32c("something else")));
    s.add(QStringLiteral("check-3-bytes"), Worker,
          chunked(MessageType::Result, result, floats(6), 8, crc32c("x").left(3)));
    QCborMap negative = result;
    negative.insert(QStringLiteral("payload_size"), -1);
    negative.insert(QStringLiteral("payload_crc32c"), crc32c(""));
    s.add(QStringLiteral("payload-size-negative"), Worker, frame(MessageType::Result, cbor(negative)));
    QCborMap textSize = result;
    textSize.insert(QStringLiteral("payload_size"), QStringLiteral("24"));
    textSize.insert(QStringLiteral("payload_crc32c"), crc32c(floats(6)));
    s.add(QStringLiteral("payload-size-text"), Worker, frame(MessageType::Result, cbor(textSize), floats(6)));
    s.add(QStringLiteral("payload-above-limit"), Coordinator,
          chunked(MessageType::Request, QCborMap{{QStringLiteral("samples_per_second"), 1.0}}, floats(6), 8));
    s.add(QStringLiteral("chunk-alone"), Worker, frame(MessageType::Chunk, cbor({}), floats(2)));
    const QByteArray assignWire = chunked(MessageType::Assign, assign, floats(6), 8);
    const qsizetype chunkFrame = kFrameHeaderSize + cbor({}).size() + 8;
    s.add(QStringLiteral("hello-inside-a-payload"), Worker,
          assignWire.chopped(2 * chunkFrame) + encodeMessage(MessageType::Hello, hello) + assignWire.right(2 * chunkFrame));
    s.add(QStringLiteral("chunk-after-the-end"), Worker, assignWire + frame(MessageType::Chunk, cbor({}), floats(1)));
    s.add(QStringLiteral("chunk-past-announced-size"), Worker,
          assignWire.chopped(chunkFrame) + frame(MessageType::Chunk, cbor({}), floats(4)));
    s.add(QStringLiteral("cut-mid-payload"), Worker, chunked(MessageType::ShardData, shardData, shardBytes, 10).chopped(13));
    QByteArray alteredCsr = csr;
    alteredCsr[csr.indexOf('\n') + 40] = alteredCsr[csr.indexOf('\n') + 40] == 'A' ? 'B' : 'A';
    s.add(QStringLiteral("redeem-altered-csr"), Coordinator, encodeMessage(MessageType::Redeem, redeem, alteredCsr));
    QCborMap nameless = redeem;
    nameless.insert(QStringLiteral("name"), QString());
    s.add(QStringLiteral("redeem-no-name"), Coordinator, encodeMessage(MessageType::Redeem, nameless, csr));
    s.add(QStringLiteral("redeem-not-pem"), Coordinator, encodeMessage(MessageType::Redeem, redeem, "-----BEGIN"));
    s.add(QStringLiteral("enrolled-not-pem"), Worker,
          encodeMessage(MessageType::Enrolled, QCborMap{{QStringLiteral("name"), QStringLiteral("w")}}, "not a PEM"));
    // Headers other peers' CBOR encoders may write: a key twice, half floats, indefinite lengths.
    QByteArray raw;
    {
        QCborStreamWriter w(&raw);
        w.startMap(3);
        w.append(QLatin1String("payload_size"));
        w.append(qint64(0));
        w.append(QLatin1String("payload_size"));
        w.append(qint64(4));
        w.append(QLatin1String("payload_crc32c"));
        w.append(crc32c(""));
        w.endMap();
    }
    s.add(QStringLiteral("duplicate-keys"), Worker, frame(MessageType::Result, raw));
    // {_ "loss": 0.5 as a half float, "seconds": 1.5 as a float, (_ "re", "ason"): [_ simple(99), 1(1700000000)]}
    raw = QByteArray::fromHex("bf646c6f7373f93800677365636f6e6473fa3fc000007f627265646173"
                              "6f6eff9ff863c11a6553f100ffff");
    s.add(QStringLiteral("indefinite-lengths"), Worker, frame(MessageType::Result, raw));
    std::printf("frame: %d seeds\n", s.count);
}

// ---- JSON files ---------------------------------------------------------------------------

QByteArray json(const QJsonObject &o)
{
    return QJsonDocument(o).toJson(QJsonDocument::Indented);
}

QJsonObject withValue(QJsonObject o, const QStringList &keys, const QJsonValue &value)
{
    if (keys.size() == 1) {
        o.insert(keys.front(), value);
        return o;
    }
    o.insert(keys.front(), withValue(o.value(keys.front()).toObject(), keys.mid(1), value));
    return o;
}

QJsonObject withValue(const QString &dotted, const QJsonValue &value)
{
    return withValue(JobSpec::defaultJob().toJson(), dotted.split(u'.'), value);
}

void writeJsonSeeds()
{
    const QString dir = corpusDir(QStringLiteral("json"));
    int count = 0;
    auto add = [&](const QString &name, const QByteArray &bytes) {
        write(QDir(dir).filePath(name), bytes);
        ++count;
    };
    const QByteArray defaultJob = readFile(QDir(g_root).filePath(QStringLiteral("resources/jobs/default.json")));
    const QByteArray prices = readFile(QDir(g_root).filePath(QStringLiteral("resources/prices.json")));
    add(QStringLiteral("default-job.json"), defaultJob);
    add(QStringLiteral("prices.json"), prices);

    JobSpec custom;
    custom.name = QStringLiteral("custom-csv-mlp");
    custom.dataset.kind = QStringLiteral("csv");
    custom.dataset.path = QStringLiteral("/data/iris.csv");
    custom.dataset.labelColumn = QStringLiteral("species");
    custom.dataset.testFraction = 0.25;
    custom.dataset.trainLimit = 1000;
    custom.model.kind = QStringLiteral("mlp");
    custom.model.dropout = 0.2;
    custom.model.hidden = {64, 32, 16};
    custom.training.localSteps = 50;
    custom.training.optimizer = QStringLiteral("adam");
    custom.training.lrSchedule = QStringLiteral("step");
    custom.training.seed = (quint64(1) << 53) - 1;
    custom.training.device = QStringLiteral("cpu");
    custom.aggregation.rule = QStringLiteral("async-delta");
    custom.aggregation.outerMomentum = 0.9;
    custom.aggregation.nesterov = false;
    custom.fleet.workers = 0;
    custom.fleet.priceClass = QStringLiteral("volunteer");
    custom.fleet.priceTable = QStringLiteral("/etc/flotilla/prices.json");
    add(QStringLiteral("custom-job.json"), json(custom.toJson()));
    JobSpec torchscript = JobSpec::defaultJob();
    torchscript.dataset.kind = QStringLiteral("idx");
    torchscript.dataset.path = QStringLiteral("/data/mnist");
    torchscript.model.kind = QStringLiteral("torchscript");
    torchscript.model.path = QStringLiteral("/models/resnet.pt");
    torchscript.aggregation.rule = QStringLiteral("staleness-aware");
    add(QStringLiteral("torchscript-job.json"), json(torchscript.toJson()));
    add(QStringLiteral("partial-job.json"), "{\"training\": {\"epochs\": 2, \"learning_rate\": 1e-3}, \"fleet\": {}}");
    add(QStringLiteral("empty-object.json"), "{}");

    // Near misses of a job file.
    add(QStringLiteral("unknown-key.json"), json(withValue(QStringLiteral("training.epoch"), 3)));
    add(QStringLiteral("unknown-section.json"), json(withValue(QStringLiteral("trainig"), QJsonObject{})));
    add(QStringLiteral("section-not-object.json"), "{\"training\": 5}");
    add(QStringLiteral("epochs-zero.json"), json(withValue(QStringLiteral("training.epochs"), 0)));
    add(QStringLiteral("epochs-fraction.json"), json(withValue(QStringLiteral("training.epochs"), 2.5)));
    add(QStringLiteral("seed-2p53.json"), json(withValue(QStringLiteral("training.seed"), 9007199254740992.0)));
    add(QStringLiteral("seed-negative.json"), json(withValue(QStringLiteral("training.seed"), -1)));
    add(QStringLiteral("rate-as-text.json"), json(withValue(QStringLiteral("training.learning_rate"), QStringLiteral("0.1"))));
    add(QStringLiteral("alpha-one.json"), json(withValue(QStringLiteral("aggregation.alpha"), 1.0)));
    add(QStringLiteral("rule-unknown.json"), json(withValue(QStringLiteral("aggregation.rule"), QStringLiteral("fedavg"))));
    add(QStringLiteral("hidden-fraction.json"), json(withValue(QStringLiteral("model.hidden"), QJsonArray{64, 1.5})));
    add(QStringLiteral("hidden-empty.json"), json(withValue(QStringLiteral("model.hidden"), QJsonArray{})));
    add(QStringLiteral("nesterov-number.json"), json(withValue(QStringLiteral("aggregation.nesterov"), 1)));
    add(QStringLiteral("csv-without-path.json"), json(withValue(QStringLiteral("dataset.kind"), QStringLiteral("csv"))));
    add(QStringLiteral("truncated.json"), defaultJob.left(defaultJob.size() / 2));
    add(QStringLiteral("top-level-array.json"), "[{\"name\": \"x\"}]");
    add(QStringLiteral("empty-file.json"), QByteArray());

    // Price tables and their near misses.
    auto entry = [](const QString &name, const QJsonValue &onDemand, const QJsonValue &spot) {
        return QJsonObject{{QStringLiteral("name"), name},
                           {QStringLiteral("provider"), QStringLiteral("test")},
                           {QStringLiteral("vcpus"), 4},
                           {QStringLiteral("gpu"), QString()},
                           {QStringLiteral("on_demand_per_hour"), onDemand},
                           {QStringLiteral("spot_per_hour"), spot}};
    };
    auto table = [](const QJsonArray &instances) {
        return QJsonObject{{QStringLiteral("compiled"), QStringLiteral("2030-01")}, {QStringLiteral("instances"), instances}};
    };
    add(QStringLiteral("prices-small.json"), json(table({entry(QStringLiteral("a/x"), 0.2, 0.05), entry(QStringLiteral("b/y"), 1, 1)})));
    add(QStringLiteral("prices-duplicate.json"), json(table({entry(QStringLiteral("a/x"), 0.2, 0.05), entry(QStringLiteral("a/x"), 0.3, 0.1)})));
    add(QStringLiteral("prices-inverted.json"), json(table({entry(QStringLiteral("a/x"), 0.2, 0.5)})));
    add(QStringLiteral("prices-negative.json"), json(table({entry(QStringLiteral("a/x"), -0.2, -0.5)})));
    add(QStringLiteral("prices-as-text.json"), json(table({entry(QStringLiteral("a/x"), QStringLiteral("0.2"), 0.1)})));
    add(QStringLiteral("prices-no-name.json"), json(table({entry(QString(), 0.2, 0.1)})));
    add(QStringLiteral("prices-empty.json"), json(table({})));
    add(QStringLiteral("prices-not-array.json"), "{\"instances\": {\"name\": \"a/x\"}}");
    std::printf("json: %d seeds\n", count);
}

// ---- dictionaries -------------------------------------------------------------------------

QByteArray dictEntry(const QByteArray &value)
{
    QByteArray out = "\"";
    for (const char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\')
            out += '\\', out += c;
        else if (u < 0x20 || u >= 0x7f)
            out += "\\x" + QByteArray::number(u, 16).rightJustified(2, '0');
        else
            out += c;
    }
    return out + "\"\n";
}

void writeDictionary(const QString &name, const QByteArray &comment, const std::set<QByteArray> &entries)
{
    QByteArray text = comment;
    for (const QByteArray &e : entries)
        text += dictEntry(e);
    write(fuzzDir(name), text);
    std::printf("%s: %zu entries\n", qUtf8Printable(name), entries.size());
}

void collectKeys(const QJsonObject &o, std::set<QByteArray> &keys)
{
    for (auto it = o.begin(); it != o.end(); ++it) {
        keys.insert('"' + it.key().toUtf8() + '"');
        if (it.value().isObject())
            collectKeys(it.value().toObject(), keys);
    }
}

void writeDictionaries()
{
    std::set<QByteArray> frame{QByteArray("FL\x01", 3), QByteArray("\xa0", 1), QByteArray("\xbf", 1),
                               QByteArray("\xff", 1), QByteArray("\x58\x20", 2), QByteArray("\xf4", 1),
                               QByteArray("\xf5", 1), QByteArray("\xf9", 1), QByteArray("\xfb", 1),
                               QByteArray("\x1b", 1), QByteArray("\x9f", 1), QByteArray("\x7f", 1),
                               "-----BEGIN CERTIFICATE REQUEST-----\n", "-----END CERTIFICATE REQUEST-----\n",
                               "-----BEGIN CERTIFICATE-----\n", "-----END CERTIFICATE-----\n"};
    for (const char *key : {"payload_size", "payload_crc32c", "protocol", "name", "instance_type", "price_class",
                            "device", "threads", "samples_per_second", "worker_id", "job", "model", "model_sha256",
                            "input_shape", "classes", "layout", "weights", "seed", "heartbeat_ms", "token_id",
                            "secret", "fingerprint", "lease", "subtask", "epoch", "shard", "begin", "end",
                            "base_version", "deadline_ms", "shard_samples", "shard_sha256", "retry_ms", "finished",
                            "samples", "sample_shape", "done", "planned", "loss", "sample_steps", "covered", "seconds",
                            "partial", "status", "reason", "seq", "version", "fatal", "dtype", "numel", "tensors",
                            "shape", "h", "p", "f", "i", "s", "e"})
        frame.insert(QCborValue(QString::fromLatin1(key)).toCbor());
    writeDictionary(QStringLiteral("frame.dict"),
                    "# libFuzzer dictionary for fuzz_frame, written by fuzz_make_corpus: the frame magic,\n"
                    "# CBOR markers, every header key as CBOR text, PEM armour.\n",
                    frame);

    std::set<QByteArray> json{"true", "false", "null", "{}", "[]", "9007199254740993", "1e308", "-0", "0.5"};
    const QJsonObject job = JobSpec::defaultJob().toJson();
    collectKeys(job, json);
    // Every value a string field accepts, taken from the error that lists them.
    const QRegularExpression oneOf(QStringLiteral("must be one of: (.*)$"));
    std::function<void(const QJsonObject &, const QStringList &)> walk = [&](const QJsonObject &o,
                                                                           const QStringList &path) {
        for (auto it = o.begin(); it != o.end(); ++it) {
            const QStringList here = path + QStringList{it.key()};
            if (it.value().isObject()) {
                walk(it.value().toObject(), here);
                continue;
            }
            if (!it.value().isString())
                continue;
            auto refused = JobSpec::fromJson(withValue(job, here, QStringLiteral("\x01")));
            const auto match = oneOf.match(refused.error());
            if (match.hasMatch())
                for (const QString &v : match.captured(1).split(QStringLiteral(", ")))
                    json.insert('"' + v.toUtf8() + '"');
        }
    };
    walk(job, {});
    for (const char *key : {"compiled", "instances", "name", "provider", "vcpus", "gpu", "on_demand_per_hour",
                            "spot_per_hour"})
        json.insert('"' + QByteArray(key) + '"');
    writeDictionary(QStringLiteral("json.dict"),
                    "# libFuzzer dictionary for fuzz_json, written by fuzz_make_corpus: JSON words, every key of\n"
                    "# a job file and a price table, every value a job file's string fields accept.\n",
                    json);
}

} // namespace

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    if (argc != 2)
        die(QStringLiteral("usage: fuzz_make_corpus SOURCE_ROOT"));
    g_root = QString::fromLocal8Bit(argv[1]);
    if (!QFile::exists(QDir(g_root).filePath(QStringLiteral("net/Frame.h"))))
        die(QStringLiteral("%1 is not Flotilla's source tree").arg(g_root));
    writeFrameSeeds();
    writeJsonSeeds();
    writeDictionaries();
    return 0;
}
