#include "net/Messages.h"

#include <QCborArray>

namespace flotilla::net {

namespace {

enum class Need { Optional, Required };

// Reads one message's fields in turn; the first field that is missing or of the wrong type
// is the error, and the fields after it are not read.
class HeaderReader
{
public:
    HeaderReader(const QCborMap &header, MessageType type) : m_header(header), m_type(type) { }

    void integer(const char *field, qint64 &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "an integer", [](const QCborValue &v) { return v.isInteger(); },
            [](const QCborValue &v) { return v.toInteger(); });
    }

    void nonNegative(const char *field, qint64 &out, Need need = Need::Optional)
    {
        integer(field, out, need);
        if (!m_error && out < 0)
            m_error = fail(QStringLiteral("malformed %1 message: '%2' must not be negative (it is %3)")
                               .arg(describe(m_type), QLatin1String(field))
                               .arg(out));
    }

    void unsignedInteger(const char *field, quint64 &out, Need need = Need::Optional)
    {
        qint64 value = qint64(out);
        integer(field, value, need);
        out = quint64(value);
    }

    void number(const char *field, double &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "a number", [](const QCborValue &v) { return v.isDouble() || v.isInteger(); },
            [](const QCborValue &v) { return v.toDouble(); });
    }

    void boolean(const char *field, bool &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "true or false", [](const QCborValue &v) { return v.isBool(); },
            [](const QCborValue &v) { return v.toBool(); });
    }

    void text(const char *field, QString &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "text", [](const QCborValue &v) { return v.isString(); },
            [](const QCborValue &v) { return v.toString(); });
    }

    void bytes(const char *field, QByteArray &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "bytes", [](const QCborValue &v) { return v.isByteArray(); },
            [](const QCborValue &v) { return v.toByteArray(); });
    }

    void map(const char *field, QCborMap &out, Need need = Need::Optional)
    {
        read(
            field, out, need, "a map", [](const QCborValue &v) { return v.isMap(); },
            [](const QCborValue &v) { return v.toMap(); });
    }

    void integers(const char *field, std::vector<qint64> &out, Need need = Need::Optional)
    {
        const QCborValue v = find(field, need);
        if (v.isUndefined() || !check(v.isArray(), field, "a list of integers"))
            return;
        std::vector<qint64> values;
        for (const QCborValue &item : v.toArray()) {
            if (!check(item.isInteger(), field, "a list of integers"))
                return;
            values.push_back(item.toInteger());
        }
        out = std::move(values);
    }

    template<typename Msg> Result<Msg> finish(Msg message) const
    {
        if (m_error)
            return *m_error;
        return message;
    }

private:
    // Stores the field when it is present and of the expected type.
    template<typename T, typename Is, typename Convert>
    void read(const char *field, T &out, Need need, const char *expected, Is is, Convert convert)
    {
        if (const QCborValue v = find(field, need); !v.isUndefined() && check(is(v), field, expected))
            out = convert(v);
    }

    // The field's value; undefined when it is absent (an error if it is required) or when
    // an earlier field failed.
    QCborValue find(const char *field, Need need)
    {
        if (m_error)
            return {};
        const QCborValue v = m_header.value(QLatin1String(field));
        if (v.isUndefined() && need == Need::Required)
            m_error = fail(
                QStringLiteral("malformed %1 message: '%2' is missing").arg(describe(m_type), QLatin1String(field)));
        return v;
    }

    bool check(bool ok, const char *field, const char *expected)
    {
        if (!ok && !m_error)
            m_error = fail(QStringLiteral("malformed %1 message: '%2' must be %3")
                               .arg(describe(m_type), QLatin1String(field), QLatin1String(expected)));
        return ok && !m_error;
    }

    const QCborMap &m_header;
    MessageType m_type;
    std::optional<Error> m_error;
};

QString key(const char *field)
{
    return QString::fromLatin1(field);
}

} // namespace

QCborMap HelloMsg::encode() const
{
    return QCborMap { { key("protocol"), protocol }, { key("name"), name }, { key("instance_type"), instanceType },
        { key("price_class"), priceClass }, { key("device"), device }, { key("threads"), threads },
        { key("samples_per_second"), samplesPerSecond }, { key("memory_mb"), memoryMb } };
}

Result<HelloMsg> HelloMsg::decode(const QCborMap &header)
{
    HelloMsg m;
    HeaderReader r(header, type);
    r.integer("protocol", m.protocol);
    r.text("name", m.name);
    r.text("instance_type", m.instanceType);
    r.text("price_class", m.priceClass);
    r.text("device", m.device);
    r.integer("threads", m.threads);
    r.number("samples_per_second", m.samplesPerSecond);
    r.nonNegative("memory_mb", m.memoryMb);
    return r.finish(std::move(m));
}

QCborMap WelcomeMsg::encode() const
{
    QCborArray shape;
    for (const qint64 d : inputShape)
        shape.append(d);
    return QCborMap { { key("worker_id"), workerId }, { key("job"), job }, { key("model"), model },
        { key("model_sha256"), modelSha256 }, { key("input_shape"), shape }, { key("classes"), classes },
        { key("layout"), layout }, { key("weights"), weights }, { key("seed"), qint64(seed) },
        { key("heartbeat_ms"), heartbeatMs }, { key("heartbeat_timeout_ms"), heartbeatTimeoutMs },
        { key("compression"), compression }, { key("job_key"), jobKey }, { key("waiting"), waiting },
        { key("batch_size"), batchSize }, { key("precision"), precision }, { key("task"), task } };
}

Result<WelcomeMsg> WelcomeMsg::decode(const QCborMap &header)
{
    WelcomeMsg m;
    HeaderReader r(header, type);
    r.integer("worker_id", m.workerId, Need::Required);
    r.text("job", m.job, Need::Required);
    r.text("model", m.model, Need::Required);
    r.text("model_sha256", m.modelSha256);
    r.integers("input_shape", m.inputShape, Need::Required);
    r.integer("classes", m.classes, Need::Required);
    r.text("layout", m.layout, Need::Required);
    r.map("weights", m.weights, Need::Required);
    r.unsignedInteger("seed", m.seed, Need::Required);
    r.integer("heartbeat_ms", m.heartbeatMs);
    r.integer("heartbeat_timeout_ms", m.heartbeatTimeoutMs);
    r.text("compression", m.compression);
    r.text("job_key", m.jobKey);
    r.text("waiting", m.waiting);
    r.integer("batch_size", m.batchSize);
    r.text("precision", m.precision);
    r.text("task", m.task);
    return r.finish(std::move(m));
}

QCborMap RedeemMsg::encode() const
{
    return QCborMap { { key("token_id"), tokenId }, { key("secret"), secret }, { key("name"), name } };
}

Result<RedeemMsg> RedeemMsg::decode(const QCborMap &header)
{
    RedeemMsg m;
    HeaderReader r(header, type);
    r.bytes("token_id", m.tokenId, Need::Required);
    r.bytes("secret", m.secret, Need::Required);
    r.text("name", m.name);
    return r.finish(std::move(m));
}

QCborMap EnrolledMsg::encode() const
{
    return QCborMap { { key("name"), name }, { key("fingerprint"), fingerprint } };
}

Result<EnrolledMsg> EnrolledMsg::decode(const QCborMap &header)
{
    EnrolledMsg m;
    HeaderReader r(header, type);
    r.text("name", m.name, Need::Required);
    r.bytes("fingerprint", m.fingerprint, Need::Required);
    return r.finish(std::move(m));
}

QCborMap RequestMsg::encode() const
{
    QCborMap m { { key("samples_per_second"), samplesPerSecond } };
    if (takesChanges) {
        m.insert(key("takes_changes"), true);
        m.insert(key("anchor"), anchor);
    }
    return m;
}

Result<RequestMsg> RequestMsg::decode(const QCborMap &header)
{
    RequestMsg m;
    HeaderReader r(header, type);
    r.number("samples_per_second", m.samplesPerSecond);
    r.boolean("takes_changes", m.takesChanges);
    r.nonNegative("anchor", m.anchor);
    return r.finish(std::move(m));
}

QCborMap AssignMsg::encode() const
{
    QCborMap m { { key("lease"), lease }, { key("subtask"), subtask }, { key("epoch"), epoch },
        { key("shard"), shard }, { key("begin"), begin }, { key("end"), end }, { key("base_version"), baseVersion },
        { key("deadline_ms"), deadlineMs }, { key("shard_samples"), shardSamples },
        { key("shard_sha256"), shardSha256 }, { key("optimizer"), optimizer }, { key("learning_rate"), learningRate },
        { key("momentum"), momentum }, { key("weight_decay"), weightDecay }, { key("batch_size"), batchSize },
        { key("local_epochs"), localEpochs }, { key("local_steps"), localSteps }, { key("seed"), qint64(seed) },
        { key("nesterov"), nesterov }, { key("beta1"), beta1 }, { key("beta2"), beta2 }, { key("eps"), eps },
        { key("clip_grad_norm"), clipGradNorm }, { key("label_smoothing"), labelSmoothing },
        { key("precision"), precision } };
    if (lrTotalSteps > 0) {
        m.insert(key("lr_schedule"), lrSchedule);
        m.insert(key("lr_base"), lrBase);
        m.insert(key("lr_total_steps"), lrTotalSteps);
        m.insert(key("lr_warmup_steps"), lrWarmupSteps);
        m.insert(key("lr_floor"), lrFloor);
        m.insert(key("lr_step_every"), lrStepEvery);
        m.insert(key("lr_gamma"), lrGamma);
        m.insert(key("first_step"), firstStep);
    }
    if (task != QLatin1String("classification"))
        m.insert(key("task"), task);
    if (regressionLoss != QLatin1String("mse"))
        m.insert(key("regression_loss"), regressionLoss);
    if (freshOptimizer)
        m.insert(key("fresh_optimizer"), true);
    if (change != QLatin1String("none"))
        m.insert(key("change"), change);
    if (anchor != 0)
        m.insert(key("anchor"), anchor);
    if (anchorIncluded)
        m.insert(key("anchor_included"), true);
    return m;
}

Result<AssignMsg> AssignMsg::decode(const QCborMap &header)
{
    AssignMsg m;
    HeaderReader r(header, type);
    r.integer("lease", m.lease, Need::Required);
    r.integer("subtask", m.subtask, Need::Required);
    r.integer("epoch", m.epoch, Need::Required);
    r.integer("shard", m.shard, Need::Required);
    r.integer("begin", m.begin, Need::Required);
    r.integer("end", m.end, Need::Required);
    r.integer("base_version", m.baseVersion, Need::Required);
    r.integer("deadline_ms", m.deadlineMs, Need::Required);
    r.integer("shard_samples", m.shardSamples, Need::Required);
    r.bytes("shard_sha256", m.shardSha256, Need::Required);
    r.text("optimizer", m.optimizer, Need::Required);
    r.number("learning_rate", m.learningRate, Need::Required);
    r.number("momentum", m.momentum, Need::Required);
    r.number("weight_decay", m.weightDecay, Need::Required);
    r.integer("batch_size", m.batchSize, Need::Required);
    r.integer("local_epochs", m.localEpochs, Need::Required);
    r.integer("local_steps", m.localSteps, Need::Required);
    r.unsignedInteger("seed", m.seed, Need::Required);
    r.boolean("nesterov", m.nesterov);
    r.number("beta1", m.beta1);
    r.number("beta2", m.beta2);
    r.number("eps", m.eps);
    r.number("clip_grad_norm", m.clipGradNorm);
    r.number("label_smoothing", m.labelSmoothing);
    r.text("precision", m.precision);
    r.text("task", m.task);
    r.text("regression_loss", m.regressionLoss);
    r.nonNegative("lr_total_steps", m.lrTotalSteps);
    if (m.lrTotalSteps > 0) {
        r.text("lr_schedule", m.lrSchedule, Need::Required);
        r.number("lr_base", m.lrBase, Need::Required);
        r.nonNegative("lr_warmup_steps", m.lrWarmupSteps, Need::Required);
        r.number("lr_floor", m.lrFloor, Need::Required);
        r.nonNegative("lr_step_every", m.lrStepEvery, Need::Required);
        r.number("lr_gamma", m.lrGamma, Need::Required);
        r.nonNegative("first_step", m.firstStep, Need::Required);
    }
    r.boolean("fresh_optimizer", m.freshOptimizer);
    r.text("change", m.change);
    r.nonNegative("anchor", m.anchor);
    r.boolean("anchor_included", m.anchorIncluded);
    return r.finish(std::move(m));
}

QCborMap NoWorkMsg::encode() const
{
    QCborMap m { { key("retry_ms"), retryMs }, { key("finished"), finished } };
    if (dismissed)
        m.insert(key("dismissed"), true);
    return m;
}

Result<NoWorkMsg> NoWorkMsg::decode(const QCborMap &header)
{
    NoWorkMsg m;
    HeaderReader r(header, type);
    r.integer("retry_ms", m.retryMs, Need::Required);
    r.boolean("finished", m.finished);
    r.boolean("dismissed", m.dismissed);
    return r.finish(std::move(m));
}

QCborMap ShardRequestMsg::encode() const
{
    return QCborMap { { key("shard"), shard } };
}

Result<ShardRequestMsg> ShardRequestMsg::decode(const QCborMap &header)
{
    ShardRequestMsg m;
    HeaderReader r(header, type);
    r.nonNegative("shard", m.shard, Need::Required);
    return r.finish(std::move(m));
}

QCborMap ShardDataMsg::encode() const
{
    QCborMap header = manifest;
    header.insert(key("shard"), shard);
    return header;
}

Result<ShardDataMsg> ShardDataMsg::decode(const QCborMap &header)
{
    ShardDataMsg m;
    HeaderReader r(header, type);
    r.nonNegative("shard", m.shard, Need::Required);
    m.manifest = header;
    m.manifest.remove(key("shard"));
    return r.finish(std::move(m));
}

QCborMap HeartbeatMsg::encode() const
{
    QCborMap m { { key("lease"), lease }, { key("done"), done }, { key("planned"), planned } };
    if (!job.isEmpty())
        m.insert(key("job"), job);
    return m;
}

Result<HeartbeatMsg> HeartbeatMsg::decode(const QCborMap &header)
{
    HeartbeatMsg m;
    HeaderReader r(header, type);
    r.integer("lease", m.lease, Need::Required);
    r.integer("done", m.done);
    r.integer("planned", m.planned);
    r.text("job", m.job);
    return r.finish(std::move(m));
}

QCborMap ResultMsg::encode() const
{
    QCborMap m { { key("lease"), lease }, { key("loss"), loss }, { key("sample_steps"), sampleSteps },
        { key("covered"), covered }, { key("seconds"), seconds }, { key("partial"), partial },
        { key("weights"), weights }, { key("encoding"), encoding } };
    if (!job.isEmpty())
        m.insert(key("job"), job);
    return m;
}

Result<ResultMsg> ResultMsg::decode(const QCborMap &header)
{
    ResultMsg m;
    HeaderReader r(header, type);
    r.integer("lease", m.lease, Need::Required);
    r.number("loss", m.loss);
    r.integer("sample_steps", m.sampleSteps);
    r.integer("covered", m.covered);
    r.number("seconds", m.seconds);
    r.boolean("partial", m.partial);
    r.map("weights", m.weights);
    r.text("encoding", m.encoding);
    r.text("job", m.job);
    return r.finish(std::move(m));
}

QCborMap AckMsg::encode() const
{
    QCborMap m { { key("lease"), lease }, { key("status"), status }, { key("reason"), reason },
        { key("seq"), seq }, { key("version"), version } };
    if (!job.isEmpty())
        m.insert(key("job"), job);
    return m;
}

Result<AckMsg> AckMsg::decode(const QCborMap &header)
{
    AckMsg m;
    HeaderReader r(header, type);
    r.integer("lease", m.lease, Need::Required);
    r.text("status", m.status, Need::Required);
    r.text("reason", m.reason);
    r.integer("seq", m.seq);
    r.integer("version", m.version);
    r.text("job", m.job);
    return r.finish(std::move(m));
}

template<MessageType Type> QCborMap LeaseReasonMsg<Type>::encode() const
{
    QCborMap m { { key("lease"), lease }, { key("reason"), reason } };
    if (failed)
        m.insert(key("failed"), true);
    if (!job.isEmpty())
        m.insert(key("job"), job);
    return m;
}

template<MessageType Type> Result<LeaseReasonMsg<Type>> LeaseReasonMsg<Type>::decode(const QCborMap &header)
{
    LeaseReasonMsg m;
    HeaderReader r(header, type);
    r.integer("lease", m.lease, Need::Required);
    r.text("reason", m.reason);
    r.boolean("failed", m.failed);
    r.text("job", m.job);
    return r.finish(std::move(m));
}

template struct LeaseReasonMsg<MessageType::HandBack>;
template struct LeaseReasonMsg<MessageType::Cancel>;

QCborMap ModelRequestMsg::encode() const
{
    return QCborMap { { key("sha256"), sha256 } };
}

Result<ModelRequestMsg> ModelRequestMsg::decode(const QCborMap &header)
{
    ModelRequestMsg m;
    HeaderReader r(header, type);
    r.text("sha256", m.sha256, Need::Required);
    return r.finish(std::move(m));
}

QCborMap ModelDataMsg::encode() const
{
    QCborMap m { { key("sha256"), sha256 } };
    if (!error.isEmpty())
        m.insert(key("error"), error);
    return m;
}

Result<ModelDataMsg> ModelDataMsg::decode(const QCborMap &header)
{
    ModelDataMsg m;
    HeaderReader r(header, type);
    r.text("sha256", m.sha256, Need::Required);
    r.text("error", m.error);
    return r.finish(std::move(m));
}

QCborMap ErrorMsg::encode() const
{
    return QCborMap { { key("reason"), reason }, { key("fatal"), fatal } };
}

Result<ErrorMsg> ErrorMsg::decode(const QCborMap &header)
{
    ErrorMsg m;
    HeaderReader r(header, type);
    r.text("reason", m.reason);
    r.boolean("fatal", m.fatal);
    return r.finish(std::move(m));
}

QCborMap EchoMsg::encode() const
{
    return QCborMap { { key("seq"), seq } };
}

Result<EchoMsg> EchoMsg::decode(const QCborMap &header)
{
    EchoMsg m;
    HeaderReader r(header, type);
    r.integer("seq", m.seq, Need::Required);
    return r.finish(std::move(m));
}

QCborMap ByeMsg::encode() const
{
    return QCborMap { { key("reason"), reason } };
}

Result<ByeMsg> ByeMsg::decode(const QCborMap &header)
{
    ByeMsg m;
    HeaderReader r(header, type);
    r.text("reason", m.reason);
    return r.finish(std::move(m));
}

namespace {

void encodeCursor(QCborMap &map, const WatchCursor &c)
{
    map.insert(key("job"), c.job);
    map.insert(key("event"), c.eventId);
    map.insert(key("assimilation"), c.assimilationSeq);
    map.insert(key("evaluation"), c.evaluationId);
    map.insert(key("ledger"), c.ledgerId);
}

void decodeCursor(HeaderReader &r, WatchCursor &c)
{
    r.text("job", c.job);
    r.nonNegative("event", c.eventId);
    r.nonNegative("assimilation", c.assimilationSeq);
    r.nonNegative("evaluation", c.evaluationId);
    r.nonNegative("ledger", c.ledgerId);
}

} // namespace

QCborMap WatchMsg::encode() const
{
    QCborMap m;
    encodeCursor(m, cursor);
    return m;
}

Result<WatchMsg> WatchMsg::decode(const QCborMap &header)
{
    WatchMsg m;
    HeaderReader r(header, type);
    decodeCursor(r, m.cursor);
    return r.finish(std::move(m));
}

QCborMap UpdateMsg::encode() const
{
    QCborMap m{{key("reset"), reset}, {key("more"), more}, {key("state"), state}, {key("message"), message}};
    encodeCursor(m, cursor);
    return m;
}

Result<UpdateMsg> UpdateMsg::decode(const QCborMap &header)
{
    UpdateMsg m;
    HeaderReader r(header, type);
    r.text("job", m.cursor.job, Need::Required);
    decodeCursor(r, m.cursor);
    r.boolean("reset", m.reset);
    r.boolean("more", m.more);
    r.text("state", m.state, Need::Required);
    r.text("message", m.message);
    return r.finish(std::move(m));
}

QCborMap CommandMsg::encode() const
{
    return QCborMap{{key("id"), id},           {key("action"), action}, {key("target"), target},
                    {key("worker"), workerId}, {key("uses"), uses},     {key("valid_seconds"), validSeconds},
                    {key("job"), job},         {key("value"), value}};
}

Result<CommandMsg> CommandMsg::decode(const QCborMap &header)
{
    CommandMsg m;
    HeaderReader r(header, type);
    r.integer("id", m.id, Need::Required);
    r.text("action", m.action, Need::Required);
    r.text("target", m.target);
    r.nonNegative("worker", m.workerId);
    r.nonNegative("uses", m.uses);
    r.nonNegative("valid_seconds", m.validSeconds);
    r.nonNegative("job", m.job);
    r.number("value", m.value);
    return r.finish(std::move(m));
}

QCborMap ReplyMsg::encode() const
{
    return QCborMap{{key("id"), id}, {key("action"), action}, {key("error"), error}, {key("text"), text}};
}

Result<ReplyMsg> ReplyMsg::decode(const QCborMap &header)
{
    ReplyMsg m;
    HeaderReader r(header, type);
    r.integer("id", m.id, Need::Required);
    r.text("action", m.action);
    r.text("error", m.error);
    r.text("text", m.text);
    return r.finish(std::move(m));
}

} // namespace flotilla::net
