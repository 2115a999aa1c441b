#include "net/Messages.h"

#include <QCborArray>

#include <functional>

namespace flotilla::net {

namespace {

// How a field of a message's list travels. Optional: absent means the struct's default.
// Required: the receiver cannot act without it. NonNegative: an integer that must not be
// negative. Sparse: written only when it differs from the struct's default, so that a peer
// that does not know the field never sees it.
enum FieldFlag : unsigned { Optional = 0, Required = 1, NonNegative = 2, Sparse = 4 };

QString key(const char *field)
{
    return QString::fromLatin1(field);
}

// Reads the fields of one message in turn; the first field that is missing or of the wrong
// type is the error, and the fields after it are not read.
class HeaderReader
{
public:
    HeaderReader(const QCborMap &header, MessageType type) : m_header(header), m_type(type) { }

    void read(const char *field, qint64 &out, unsigned flags)
    {
        take(field, out, flags, "an integer", &QCborValue::isInteger, [](const QCborValue &v) { return v.toInteger(); });
        if (!m_error && (flags & NonNegative) && out < 0)
            m_error = fail(QStringLiteral("malformed %1 message: '%2' must not be negative (it is %3)")
                               .arg(describe(m_type), QLatin1String(field))
                               .arg(out));
    }

    void read(const char *field, quint64 &out, unsigned flags)
    {
        qint64 value = qint64(out);
        read(field, value, flags);
        out = quint64(value);
    }

    void read(const char *field, double &out, unsigned flags)
    {
        take(
            field, out, flags, "a number", [](const QCborValue &v) { return v.isDouble() || v.isInteger(); },
            [](const QCborValue &v) { return v.toDouble(); });
    }

    void read(const char *field, bool &out, unsigned flags)
    {
        take(field, out, flags, "true or false", &QCborValue::isBool, [](const QCborValue &v) { return v.toBool(); });
    }

    void read(const char *field, QString &out, unsigned flags)
    {
        take(field, out, flags, "text", &QCborValue::isString, [](const QCborValue &v) { return v.toString(); });
    }

    void read(const char *field, QByteArray &out, unsigned flags)
    {
        take(field, out, flags, "bytes", &QCborValue::isByteArray,
            [](const QCborValue &v) { return v.toByteArray(); });
    }

    void read(const char *field, QCborMap &out, unsigned flags)
    {
        take(field, out, flags, "a map", &QCborValue::isMap, [](const QCborValue &v) { return v.toMap(); });
    }

    void read(const char *field, std::vector<qint64> &out, unsigned flags)
    {
        const QCborValue v = find(field, flags);
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

    // The header less the fields read so far.
    QCborMap rest() const
    {
        QCborMap rest = m_header;
        for (const char *field : m_read)
            rest.remove(key(field));
        return rest;
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
    void take(const char *field, T &out, unsigned flags, const char *expected, Is is, Convert convert)
    {
        if (const QCborValue v = find(field, flags); !v.isUndefined() && check(std::invoke(is, v), field, expected))
            out = convert(v);
    }

    // The field's value; undefined when it is absent (an error if it is required) or when
    // an earlier field failed.
    QCborValue find(const char *field, unsigned flags)
    {
        if (m_error)
            return {};
        m_read.push_back(field);
        const QCborValue v = m_header.value(QLatin1String(field));
        if (v.isUndefined() && (flags & Required))
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
    std::vector<const char *> m_read;
    std::optional<Error> m_error;
};

QCborValue toCbor(const std::vector<qint64> &values)
{
    QCborArray array;
    for (const qint64 v : values)
        array.append(v);
    return array;
}

QCborValue toCbor(quint64 value)
{
    return qint64(value);
}

template<typename T> QCborValue toCbor(const T &value)
{
    return QCborValue(value);
}

// Each message's one list of fields, in the order the decoder checks them; the writer and
// the reader below both walk it. A field's condition (written only with a schedule, say)
// reads the message as far as it has been read.
template<typename Msg> struct Fields;

// Walks a list to write a message.
template<typename Msg> class Writer
{
public:
    Writer(const Msg &message, QCborMap &out) : m_message(message), m_out(out) { }

    const Msg &message() const { return m_message; }

    template<typename T> void operator()(const char *field, T Msg::*member, unsigned flags = Optional)
    {
        static const Msg defaults {};
        const T &value = m_message.*member;
        if ((flags & Sparse) && value == defaults.*member)
            return;
        m_out.insert(key(field), toCbor(value));
    }

    template<typename Part> void part(Part Msg::*member, unsigned flags)
    {
        Writer<Part> writer(m_message.*member, m_out);
        Fields<Part>::list(writer, flags);
    }

    // A map whose entries travel beside the listed fields (a listed field wins).
    void rest(QCborMap Msg::*member)
    {
        for (auto it = (m_message.*member).cbegin(); it != (m_message.*member).cend(); ++it)
            if (!m_out.contains(it.key()))
                m_out.insert(it.key(), it.value());
    }

private:
    const Msg &m_message;
    QCborMap &m_out;
};

// Walks a list to read a message.
template<typename Msg> class Reader
{
public:
    Reader(Msg &message, HeaderReader &reader) : m_message(message), m_reader(reader) { }

    const Msg &message() const { return m_message; }

    template<typename T> void operator()(const char *field, T Msg::*member, unsigned flags = Optional)
    {
        m_reader.read(field, m_message.*member, flags);
    }

    template<typename Part> void part(Part Msg::*member, unsigned flags)
    {
        Reader<Part> reader(m_message.*member, m_reader);
        Fields<Part>::list(reader, flags);
    }

    void rest(QCborMap Msg::*member) { m_message.*member = m_reader.rest(); }

private:
    Msg &m_message;
    HeaderReader &m_reader;
};

template<typename Msg> QCborMap writeFields(const Msg &message)
{
    QCborMap out;
    Writer<Msg> writer(message, out);
    Fields<Msg>::list(writer, Optional);
    return out;
}

template<typename Msg> Result<Msg> readFields(const QCborMap &header)
{
    Msg message;
    HeaderReader r(header, Msg::type);
    Reader<Msg> reader(message, r);
    Fields<Msg>::list(reader, Optional);
    return r.finish(std::move(message));
}

template<> struct Fields<HelloMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("protocol", &HelloMsg::protocol);
        f("name", &HelloMsg::name);
        f("instance_type", &HelloMsg::instanceType);
        f("price_class", &HelloMsg::priceClass);
        f("device", &HelloMsg::device);
        f("threads", &HelloMsg::threads);
        f("samples_per_second", &HelloMsg::samplesPerSecond);
        f("memory_mb", &HelloMsg::memoryMb, NonNegative);
    }
};

template<> struct Fields<WelcomeMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("worker_id", &WelcomeMsg::workerId, Required);
        f("job", &WelcomeMsg::job, Required);
        f("model", &WelcomeMsg::model, Required);
        f("model_sha256", &WelcomeMsg::modelSha256);
        f("input_shape", &WelcomeMsg::inputShape, Required);
        f("classes", &WelcomeMsg::classes, Required);
        f("layout", &WelcomeMsg::layout, Required);
        f("weights", &WelcomeMsg::weights, Required);
        f("seed", &WelcomeMsg::seed, Required);
        f("heartbeat_ms", &WelcomeMsg::heartbeatMs);
        f("heartbeat_timeout_ms", &WelcomeMsg::heartbeatTimeoutMs);
        f("compression", &WelcomeMsg::compression);
        f("job_key", &WelcomeMsg::jobKey);
        f("waiting", &WelcomeMsg::waiting);
        f("batch_size", &WelcomeMsg::batchSize);
        f("precision", &WelcomeMsg::precision);
        f("task", &WelcomeMsg::task);
    }
};

template<> struct Fields<RedeemMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("token_id", &RedeemMsg::tokenId, Required);
        f("secret", &RedeemMsg::secret, Required);
        f("name", &RedeemMsg::name);
    }
};

template<> struct Fields<EnrolledMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("name", &EnrolledMsg::name, Required);
        f("fingerprint", &EnrolledMsg::fingerprint, Required);
    }
};

template<> struct Fields<RequestMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("samples_per_second", &RequestMsg::samplesPerSecond);
        f("takes_changes", &RequestMsg::takesChanges, Sparse);
        f("anchor", &RequestMsg::anchor, NonNegative | Sparse);
    }
};

template<> struct Fields<AssignMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("lease", &AssignMsg::lease, Required);
        f("subtask", &AssignMsg::subtask, Required);
        f("epoch", &AssignMsg::epoch, Required);
        f("shard", &AssignMsg::shard, Required);
        f("begin", &AssignMsg::begin, Required);
        f("end", &AssignMsg::end, Required);
        f("base_version", &AssignMsg::baseVersion, Required);
        f("deadline_ms", &AssignMsg::deadlineMs, Required);
        f("shard_samples", &AssignMsg::shardSamples, Required);
        f("shard_sha256", &AssignMsg::shardSha256, Required);
        f("optimizer", &AssignMsg::optimizer, Required);
        f("learning_rate", &AssignMsg::learningRate, Required);
        f("momentum", &AssignMsg::momentum, Required);
        f("weight_decay", &AssignMsg::weightDecay, Required);
        f("batch_size", &AssignMsg::batchSize, Required);
        f("local_epochs", &AssignMsg::localEpochs, Required);
        f("local_steps", &AssignMsg::localSteps, Required);
        f("seed", &AssignMsg::seed, Required);
        f("nesterov", &AssignMsg::nesterov);
        f("beta1", &AssignMsg::beta1);
        f("beta2", &AssignMsg::beta2);
        f("eps", &AssignMsg::eps);
        f("clip_grad_norm", &AssignMsg::clipGradNorm);
        f("label_smoothing", &AssignMsg::labelSmoothing);
        f("precision", &AssignMsg::precision);
        f("task", &AssignMsg::task, Sparse);
        f("regression_loss", &AssignMsg::regressionLoss, Sparse);
        f("lr_total_steps", &AssignMsg::lrTotalSteps, NonNegative | Sparse);
        if (f.message().lrTotalSteps > 0) {
            f("lr_schedule", &AssignMsg::lrSchedule, Required);
            f("lr_base", &AssignMsg::lrBase, Required);
            f("lr_warmup_steps", &AssignMsg::lrWarmupSteps, NonNegative | Required);
            f("lr_floor", &AssignMsg::lrFloor, Required);
            f("lr_step_every", &AssignMsg::lrStepEvery, NonNegative | Required);
            f("lr_gamma", &AssignMsg::lrGamma, Required);
            f("first_step", &AssignMsg::firstStep, NonNegative | Required);
        }
        f("fresh_optimizer", &AssignMsg::freshOptimizer, Sparse);
        f("change", &AssignMsg::change, Sparse);
        f("anchor", &AssignMsg::anchor, NonNegative | Sparse);
        f("anchor_included", &AssignMsg::anchorIncluded, Sparse);
    }
};

template<> struct Fields<NoWorkMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("retry_ms", &NoWorkMsg::retryMs, Required);
        f("finished", &NoWorkMsg::finished);
        f("dismissed", &NoWorkMsg::dismissed, Sparse);
    }
};

template<> struct Fields<ShardRequestMsg>
{
    template<typename F> static void list(F &f, unsigned) { f("shard", &ShardRequestMsg::shard, NonNegative | Required); }
};

// The header is the engine's manifest plus the shard's number.
template<> struct Fields<ShardDataMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("shard", &ShardDataMsg::shard, NonNegative | Required);
        f.rest(&ShardDataMsg::manifest);
    }
};

template<> struct Fields<HeartbeatMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("lease", &HeartbeatMsg::lease, Required);
        f("done", &HeartbeatMsg::done);
        f("planned", &HeartbeatMsg::planned);
        f("job", &HeartbeatMsg::job, Sparse);
    }
};

template<> struct Fields<ResultMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("lease", &ResultMsg::lease, Required);
        f("loss", &ResultMsg::loss);
        f("sample_steps", &ResultMsg::sampleSteps);
        f("covered", &ResultMsg::covered);
        f("seconds", &ResultMsg::seconds);
        f("partial", &ResultMsg::partial);
        f("weights", &ResultMsg::weights);
        f("encoding", &ResultMsg::encoding);
        f("job", &ResultMsg::job, Sparse);
    }
};

template<> struct Fields<AckMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("lease", &AckMsg::lease, Required);
        f("status", &AckMsg::status, Required);
        f("reason", &AckMsg::reason);
        f("seq", &AckMsg::seq);
        f("version", &AckMsg::version);
        f("job", &AckMsg::job, Sparse);
    }
};

template<MessageType Type> struct Fields<LeaseReasonMsg<Type>>
{
    using Msg = LeaseReasonMsg<Type>;

    template<typename F> static void list(F &f, unsigned)
    {
        f("lease", &Msg::lease, Required);
        f("reason", &Msg::reason);
        f("failed", &Msg::failed, Sparse);
        f("job", &Msg::job, Sparse);
    }
};

template<> struct Fields<ModelRequestMsg>
{
    template<typename F> static void list(F &f, unsigned) { f("sha256", &ModelRequestMsg::sha256, Required); }
};

template<> struct Fields<ModelDataMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("sha256", &ModelDataMsg::sha256, Required);
        f("error", &ModelDataMsg::error, Sparse);
    }
};

template<> struct Fields<ErrorMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("reason", &ErrorMsg::reason);
        f("fatal", &ErrorMsg::fatal);
        f("retry_after_ms", &ErrorMsg::retryAfterMs, NonNegative | Sparse);
    }
};

template<> struct Fields<EchoMsg>
{
    template<typename F> static void list(F &f, unsigned) { f("seq", &EchoMsg::seq, Required); }
};

template<> struct Fields<ByeMsg>
{
    template<typename F> static void list(F &f, unsigned) { f("reason", &ByeMsg::reason); }
};

// The cursor travels as fields of Watch and Update; its job is required where the message
// says so (an Update names its job, a first Watch may not).
template<> struct Fields<WatchCursor>
{
    template<typename F> static void list(F &f, unsigned jobFlags)
    {
        f("job", &WatchCursor::job, jobFlags);
        f("event", &WatchCursor::eventId, NonNegative);
        f("assimilation", &WatchCursor::assimilationSeq, NonNegative);
        f("evaluation", &WatchCursor::evaluationId, NonNegative);
        f("ledger", &WatchCursor::ledgerId, NonNegative);
    }
};

template<> struct Fields<WatchMsg>
{
    template<typename F> static void list(F &f, unsigned) { f.part(&WatchMsg::cursor, Optional); }
};

template<> struct Fields<UpdateMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f.part(&UpdateMsg::cursor, Required);
        f("reset", &UpdateMsg::reset);
        f("more", &UpdateMsg::more);
        f("state", &UpdateMsg::state, Required);
        f("message", &UpdateMsg::message);
    }
};

template<> struct Fields<CommandMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("id", &CommandMsg::id, Required);
        f("action", &CommandMsg::action, Required);
        f("target", &CommandMsg::target);
        f("worker", &CommandMsg::workerId, NonNegative);
        f("uses", &CommandMsg::uses, NonNegative);
        f("valid_seconds", &CommandMsg::validSeconds, NonNegative);
        f("job", &CommandMsg::job, NonNegative);
        f("value", &CommandMsg::value);
    }
};

template<> struct Fields<ReplyMsg>
{
    template<typename F> static void list(F &f, unsigned)
    {
        f("id", &ReplyMsg::id, Required);
        f("action", &ReplyMsg::action);
        f("error", &ReplyMsg::error);
        f("text", &ReplyMsg::text);
    }
};

} // namespace

// Every message's encode and decode walk its list.
#define FLOTILLA_MESSAGE_FIELDS(Msg)                                                                                  \
    QCborMap Msg::encode() const { return writeFields(*this); }                                                        \
    Result<Msg> Msg::decode(const QCborMap &header) { return readFields<Msg>(header); }

FLOTILLA_MESSAGE_FIELDS(HelloMsg)
FLOTILLA_MESSAGE_FIELDS(WelcomeMsg)
FLOTILLA_MESSAGE_FIELDS(RedeemMsg)
FLOTILLA_MESSAGE_FIELDS(EnrolledMsg)
FLOTILLA_MESSAGE_FIELDS(RequestMsg)
FLOTILLA_MESSAGE_FIELDS(AssignMsg)
FLOTILLA_MESSAGE_FIELDS(NoWorkMsg)
FLOTILLA_MESSAGE_FIELDS(ShardRequestMsg)
FLOTILLA_MESSAGE_FIELDS(ShardDataMsg)
FLOTILLA_MESSAGE_FIELDS(HeartbeatMsg)
FLOTILLA_MESSAGE_FIELDS(ResultMsg)
FLOTILLA_MESSAGE_FIELDS(AckMsg)
FLOTILLA_MESSAGE_FIELDS(ModelRequestMsg)
FLOTILLA_MESSAGE_FIELDS(ModelDataMsg)
FLOTILLA_MESSAGE_FIELDS(ErrorMsg)
FLOTILLA_MESSAGE_FIELDS(EchoMsg)
FLOTILLA_MESSAGE_FIELDS(ByeMsg)
FLOTILLA_MESSAGE_FIELDS(WatchMsg)
FLOTILLA_MESSAGE_FIELDS(UpdateMsg)
FLOTILLA_MESSAGE_FIELDS(CommandMsg)
FLOTILLA_MESSAGE_FIELDS(ReplyMsg)

#undef FLOTILLA_MESSAGE_FIELDS

template<MessageType Type> QCborMap LeaseReasonMsg<Type>::encode() const
{
    return writeFields(*this);
}

template<MessageType Type> Result<LeaseReasonMsg<Type>> LeaseReasonMsg<Type>::decode(const QCborMap &header)
{
    return readFields<LeaseReasonMsg>(header);
}

template struct LeaseReasonMsg<MessageType::HandBack>;
template struct LeaseReasonMsg<MessageType::Cancel>;

} // namespace flotilla::net
