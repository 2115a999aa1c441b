#pragma once
// What the control center shows, as plain values: the facade (ControlSession) fills them
// from the engine and the network; the widgets know nothing else of either.

#include "job/Records.h"

#include <QList>
#include <QMetaType>
#include <QString>

namespace flotilla {

enum class JobState { NoJob, Loading, Running, Paused, Finished, Failed, Stopped };
QString describe(JobState state);

struct WorkerRow
{
    qint64 id = 0;
    QString name;
    QString address; // where a remote worker connects from; "this process" for local ones
    QString device;
    int threads = 0;
    bool online = false;
    double samplesPerSecond = 0.0;
    QString subtask;        // "epoch 3, shard 7, 0–2000", empty when idle
    double progress = -1.0; // of the current subtask, 0..1; -1 when idle
    int leasesCompleted = 0;
    int leasesLost = 0;
    int preemptions = 0;
    QString instanceType;
    QString priceClass;
    double cost = 0.0;         // what it costs at its price class
    double costOnDemand = 0.0; // what it would cost on demand
    double trust = 1.0;        // 0..1: halved by each rejected result (docs/security.md)
    int rejected = 0;          // results refused by validation or screening
    bool quarantined = false;  // gets no subtasks until released
    QString quarantineReason;
};

struct Snapshot
{
    QString job;
    int epochsDone = 0;
    int epochs = 0;
    qint64 version = 0;
    double lossEma = -1.0;
    double testAccuracy = -1.0;
    int workersOnline = 0;
    double staleness = 0.0;
    double savingsPercent = 0.0;
    qint64 elapsedMs = 0;
    bool paused = false;
    bool finished = false;
    QString stalled; // why no worker trains now (none connected, all quarantined or failing); empty while it trains
    qint64 atMs = 0;
    QList<WorkerRow> workers;
};

// Cumulative cost up to a moment.
struct CostPoint
{
    qint64 atMs = 0;
    double spot = 0.0;
    double onDemand = 0.0;
    double actual = 0.0;
    double usefulSeconds = 0.0;
    double wastedSeconds = 0.0;
};

struct SubtaskRow
{
    qint64 id = 0;
    int epoch = 0;
    int shard = 0;
    qint64 begin = 0;
    qint64 end = 0;
    QString state;
    int attempts = 0;
    qint64 assimilatedSeq = 0;
    QString history; // "lease 12 (worker 3): expired; lease 19 (worker 1): completed"
};

// A job of a fleet's queue, as the Jobs view lists it.
struct QueueRow
{
    qint64 id = 0;
    QString name;
    QString submitter;
    QString state; // queued, running, paused, finished, failed, cancelled
    int priority = 0;
    double weight = 1.0;
    double workerSeconds = 0;
    qint64 submittedMs = 0;
    QString message;
};

// Everything recorded so far, for a job opened again after the app restarted.
struct History
{
    QList<AssimilationRecord> assimilations;
    QList<EvaluationRecord> evaluations;
    QList<CostPoint> costs;
    QList<EventRecord> events;
};

// A join token as the token dialog lists it (its secret is never kept, so never shown).
struct JoinTokenRow
{
    QString id;    // 16 hex digits
    QString state; // "live", "expired", "used up", "revoked"
    bool live = false;
    int usesLeft = 0;
    int usesTotal = 0;
    qint64 createdMs = 0;
    qint64 expiresMs = 0;
    QString note; // what it was issued for
    bool operatorRole = false; // issues operator certificates (a control center attached from elsewhere)
};

} // namespace flotilla

Q_DECLARE_METATYPE(flotilla::JobState)
Q_DECLARE_METATYPE(flotilla::Snapshot)
Q_DECLARE_METATYPE(flotilla::CostPoint)
Q_DECLARE_METATYPE(flotilla::History)
