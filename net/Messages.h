#pragma once
// One struct per protocol message, each with the one encode and the one decode of its CBOR
// header: the worker, the coordinator and the load generator write and read headers only
// through these. Both walk the message's one list of fields (net/Messages.cpp), which says
// each field's name on the wire, whether it is required and whether it travels only when
// set. docs/protocol.md describes the fields; Chunk has no header and no struct.
//
// decode() checks the type of every field that is present and that the required ones are
// there; its error names the message and the field. A field is required when the receiver
// cannot act without it (a lease, a shard, a token); an absent optional field means what
// its default says, as it always has on the wire. Ranges the receiver alone can judge (a
// shard of this job, a sane retry delay) are its own to check.
// Threads: plain values, safe on any thread.

#include "common/Result.h"
#include "net/Frame.h"

#include <QByteArray>
#include <QCborMap>
#include <QString>

#include <vector>

namespace flotilla::net {

struct HelloMsg
{
    static constexpr MessageType type = MessageType::Hello;
    qint64 protocol = kProtocolVersion;
    QString name; // empty: the name the certificate was issued to
    QString instanceType;
    QString priceClass;
    QString device;
    qint64 threads = 0;
    double samplesPerSecond = 0;
    qint64 memoryMb = 0; // the machine's physical memory; 0: not said

    QCborMap encode() const;
    static Result<HelloMsg> decode(const QCborMap &header);
};

struct WelcomeMsg
{
    static constexpr MessageType type = MessageType::Welcome;
    qint64 workerId = 0;
    QString job;
    QString model; // the job's model section, JSON
    QString modelSha256;
    std::vector<qint64> inputShape;
    qint64 classes = 0;
    QString layout; // digest of the weights' names and shapes
    QCborMap weights; // the manifest, which the engine writes and checks
    quint64 seed = 0;
    // What an older coordinator that says nothing means.
    qint64 heartbeatMs = 2000;
    qint64 heartbeatTimeoutMs = 30000;
    // How the job wants results: none (the weights), fp16 or int8 (a delta from the lease's
    // base). A worker that does not know the field sends the weights, which are always taken.
    QString compression = QStringLiteral("none");
    // Which of the fleet's jobs this is: the worker's results, hand-backs and heartbeats name
    // it, so that one of a job the worker was moved from (or that ended) is not taken as the
    // next job's. A Welcome may come again on the same connection: the worker now works for
    // that job. An empty job (and key) says the fleet runs no job the worker could take:
    // it waits, connected, for the next Welcome.
    QString jobKey = {};
    // With no job: why this worker waits, when it is not for want of a job (quarantined by
    // the fleet, say).
    QString waiting = {};
    // The job's batch size, precision and task, for the worker's speed probe.
    qint64 batchSize = 32;
    QString precision = QStringLiteral("fp32");
    QString task = QStringLiteral("classification");

    QCborMap encode() const;
    static Result<WelcomeMsg> decode(const QCborMap &header);
};

// Payload: a certificate request (PEM).
struct RedeemMsg
{
    static constexpr MessageType type = MessageType::Redeem;
    QByteArray tokenId;
    QByteArray secret;
    QString name; // the coordinator refuses an empty one itself, and counts it as a failed join

    QCborMap encode() const;
    static Result<RedeemMsg> decode(const QCborMap &header);
};

// Payload: the client certificate (PEM).
struct EnrolledMsg
{
    static constexpr MessageType type = MessageType::Enrolled;
    QString name;
    QByteArray fingerprint;

    QCborMap encode() const;
    static Result<EnrolledMsg> decode(const QCborMap &header);
};

struct RequestMsg
{
    static constexpr MessageType type = MessageType::Request;
    double samplesPerSecond = 0;
    // The worker takes the global weights as a change from an anchor it holds (0: none);
    // an older worker says neither and is sent the weights whole.
    bool takesChanges = false;
    qint64 anchor = 0;

    QCborMap encode() const;
    static Result<RequestMsg> decode(const QCborMap &header);
};

// Payload: the global weights (raw float32); or, when `change` is fp16 or int8, the change
// from anchor `anchor` in that form, preceded by the anchor's float32 weights when
// `anchor_included` (engine/wire/Downlink.h).
struct AssignMsg
{
    static constexpr MessageType type = MessageType::Assign;
    qint64 lease = 0;
    qint64 subtask = 0;
    qint64 epoch = 0;
    qint64 shard = 0;
    qint64 begin = 0;
    qint64 end = 0;
    qint64 baseVersion = 0;
    qint64 deadlineMs = 0;
    qint64 shardSamples = 0;
    QByteArray shardSha256;
    QString optimizer;
    double learningRate = 0;
    double momentum = 0;
    double weightDecay = 0;
    qint64 batchSize = 0;
    qint64 localEpochs = 0;
    qint64 localSteps = 0;
    quint64 seed = 0;
    // Absent from older coordinators' leases: the defaults below are what those trained.
    bool nesterov = false;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double clipGradNorm = 0;
    double labelSmoothing = 0;
    QString precision = QStringLiteral("fp32");
    // What the worker trains for (sent only when not classification with MSE's default).
    QString task = QStringLiteral("classification");
    QString regressionLoss = QStringLiteral("mse");
    // The job's learning-rate schedule per optimizer step (absent when lrTotalSteps is 0:
    // learningRate throughout) and the subtask's first step in it.
    QString lrSchedule = QStringLiteral("constant");
    double lrBase = 0;
    qint64 lrTotalSteps = 0;
    qint64 lrWarmupSteps = 0;
    double lrFloor = 0;
    qint64 lrStepEvery = 0;
    double lrGamma = 1;
    qint64 firstStep = 0;
    bool freshOptimizer = false; // start from no optimizer state (replicas to compare)
    QString change = QStringLiteral("none");
    qint64 anchor = 0; // whole weights: keep them under this id (0: don't); a change: its anchor
    bool anchorIncluded = false;

    QCborMap encode() const;
    static Result<AssignMsg> decode(const QCborMap &header);
};

struct NoWorkMsg
{
    static constexpr MessageType type = MessageType::NoWork;
    qint64 retryMs = 0;
    bool finished = false;
    bool dismissed = false; // none will come: the worker is to stop (fleet.dismiss_idle)

    QCborMap encode() const;
    static Result<NoWorkMsg> decode(const QCborMap &header);
};

struct ShardRequestMsg
{
    static constexpr MessageType type = MessageType::ShardRequest;
    qint64 shard = 0;

    QCborMap encode() const;
    static Result<ShardRequestMsg> decode(const QCborMap &header);
};

// Payload: the shard's bytes. Its manifest (samples, shapes, dtype, normalization,
// augmentation) is the engine's to write and check, and what the shard's digest covers; the
// header is that manifest plus the shard's number.
struct ShardDataMsg
{
    static constexpr MessageType type = MessageType::ShardData;
    qint64 shard = 0;
    QCborMap manifest;

    QCborMap encode() const;
    static Result<ShardDataMsg> decode(const QCborMap &header);
};

struct HeartbeatMsg
{
    static constexpr MessageType type = MessageType::Heartbeat;
    qint64 lease = 0; // 0 when idle
    qint64 done = 0; // sample-steps
    qint64 planned = 0;
    QString job = {}; // the Welcome's job key; empty: the connection's job

    QCborMap encode() const;
    static Result<HeartbeatMsg> decode(const QCborMap &header);
};

// Payload: the new weights (raw float32), or, with an encoding other than none, the change of
// the parameters from the lease's base weights in that form, then the buffers and counters as
// float32 (engine/wire/Compression.h).
struct ResultMsg
{
    static constexpr MessageType type = MessageType::Result;
    qint64 lease = 0;
    double loss = 0;
    qint64 sampleSteps = 0;
    qint64 covered = 0;
    double seconds = 0;
    bool partial = false;
    QCborMap weights; // the manifest; an absent one is refused with the result, not here
    QString encoding = QStringLiteral("none"); // none, fp16, int8: as Welcome asked
    QString job = {}; // the job key of the Welcome the lease came under; empty: the connection's job

    QCborMap encode() const;
    static Result<ResultMsg> decode(const QCborMap &header);
};

struct AckMsg
{
    static constexpr MessageType type = MessageType::Ack;
    qint64 lease = 0;
    QString status; // assimilated, held, duplicate, rejected
    QString reason;
    qint64 seq = 0;
    qint64 version = 0;
    QString job = {}; // the result's job key, as it came

    QCborMap encode() const;
    static Result<AckMsg> decode(const QCborMap &header);
};

// HandBack (a worker gives a lease up) and Cancel (the coordinator takes one back): the
// same fields, and why. failed (HandBack): the worker could not train it (an error, not a
// cancellation or a shutdown).
template<MessageType Type> struct LeaseReasonMsg
{
    static constexpr MessageType type = Type;
    qint64 lease = 0;
    QString reason;
    bool failed = false;
    QString job = {}; // the lease's job key; empty: the connection's job

    QCborMap encode() const;
    static Result<LeaseReasonMsg> decode(const QCborMap &header);
};
using HandBackMsg = LeaseReasonMsg<MessageType::HandBack>;
using CancelMsg = LeaseReasonMsg<MessageType::Cancel>;
extern template struct LeaseReasonMsg<MessageType::HandBack>;
extern template struct LeaseReasonMsg<MessageType::Cancel>;

// A TorchScript job's model, asked for by its SHA-256 (Welcome's model_sha256) by a worker
// that does not hold it; ModelData's payload is the file, which the worker checks against
// the digest before it keeps or loads it.
struct ModelRequestMsg
{
    static constexpr MessageType type = MessageType::ModelRequest;
    QString sha256;

    QCborMap encode() const;
    static Result<ModelRequestMsg> decode(const QCborMap &header);
};

struct ModelDataMsg
{
    static constexpr MessageType type = MessageType::ModelData;
    QString sha256;
    QString error = {}; // set, with no payload, when the coordinator has no such model

    QCborMap encode() const;
    static Result<ModelDataMsg> decode(const QCborMap &header);
};

struct ErrorMsg
{
    static constexpr MessageType type = MessageType::Error;
    QString reason;
    bool fatal = false; // the peer must not come back with the same credentials
    // Not before this many milliseconds (a connection closed for going over a budget, or a
    // certificate refused for a while): a worker waits at least this long to reconnect.
    qint64 retryAfterMs = 0;

    QCborMap encode() const;
    static Result<ErrorMsg> decode(const QCborMap &header);
};

// Answered by the coordinator with the same seq, at once and by its network thread alone: a
// round trip that costs what a heartbeat costs (bench scale times heartbeats with it).
struct EchoMsg
{
    static constexpr MessageType type = MessageType::Echo;
    qint64 seq = 0;

    QCborMap encode() const;
    static Result<EchoMsg> decode(const QCborMap &header);
};

struct ByeMsg
{
    static constexpr MessageType type = MessageType::Bye;
    QString reason;

    QCborMap encode() const;
    static Result<ByeMsg> decode(const QCborMap &header);
};

// Operators: a control center attached to a remote coordinator (its certificate was issued
// with an operator token). It watches the job and commands it; it never trains.

// Where an operator's record of the job ends: it asks for what comes after. The job key
// names the job the cursor belongs to; a cursor of another job (or none) starts from the
// beginning.
struct WatchCursor
{
    QString job;
    qint64 eventId = 0;         // the last event seen
    qint64 assimilationSeq = 0; // the last assimilation seen
    qint64 evaluationId = 0;    // the last evaluation seen (its row, in the order recorded)
    qint64 ledgerId = 0;        // the last cost ledger row seen
};

struct WatchMsg
{
    static constexpr MessageType type = MessageType::Watch;
    WatchCursor cursor;

    QCborMap encode() const;
    static Result<WatchMsg> decode(const QCborMap &header);
};

// Payload: the rows after the operator's cursor and the latest snapshot, as CBOR (their
// form is the application's: server/WatchStream.h). The cursor is where these rows end.
struct UpdateMsg
{
    static constexpr MessageType type = MessageType::Update;
    WatchCursor cursor;
    bool reset = false; // the rows start from the job's beginning: forget what came before
    bool more = false;  // more rows follow at once
    QString state;      // running, paused, finished, failed, stopped
    QString message;    // why, for failed and stopped

    QCborMap encode() const;
    static Result<UpdateMsg> decode(const QCborMap &header);
};

struct CommandMsg
{
    static constexpr MessageType type = MessageType::Command;
    qint64 id = 0;  // the reply carries it
    // The watched job: pause, resume, stop, subtasks. The fleet: issue-token, revoke-token,
    // revoke-worker, release. A fleet's queue (docs/protocol.md "Queue commands"): jobs,
    // submit, job-cancel, job-pause, job-resume, job-priority, job-weight, job-download.
    QString action;
    QString target; // revoke-token: the token's id; revoke-worker: the worker's name
    qint64 workerId = 0; // release
    qint64 uses = 0;     // issue-token
    qint64 validSeconds = 0;
    qint64 job = 0;      // job-*: the queue's id of the job
    double value = 0;    // job-priority, job-weight (a submission carries both in its payload)

    QCborMap encode() const;
    static Result<CommandMsg> decode(const QCborMap &header);
};

// Payload: the answer's rows as CBOR (subtasks, jobs), a job's files (job-download), or
// nothing.
struct ReplyMsg
{
    static constexpr MessageType type = MessageType::Reply;
    qint64 id = 0;
    QString action;
    QString error; // empty: done
    QString text;  // issue-token: the token; otherwise what was done

    QCborMap encode() const;
    static Result<ReplyMsg> decode(const QCborMap &header);
};

// The whole message on the wire: a message struct, its type and its payload.
template<typename Msg> QByteArray encodeMessage(const Msg &message, const QByteArray &payload = {})
{
    return encodeMessage(Msg::type, message.encode(), payload);
}

} // namespace flotilla::net
