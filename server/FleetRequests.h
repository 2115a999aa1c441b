#pragma once
// What people ask of a fleet's queue, and who may ask it: submit a job (with its TorchScript
// model and its data, which the fleet keeps by their SHA-256), list the jobs, cancel, pause,
// resume, reprioritize or reweight one, and download a job's trained model and run folder.
// A submitter manages and downloads its own jobs; an administrator (an operator's
// certificate, or `--admin` on the coordinator's machine) any. The command line on the
// coordinator's machine (`flotilla submit`, `flotilla jobs`) and the fleet service's answer
// to a remote person's Command both go through here, so the rules are written once.
// docs/security.md "Roles" has the table.
//
// Also the two payloads that travel with queue commands: a submission (the job, its model,
// its data as a bundle of files) and a bundle of files (a data set up, a run folder down).
// Their decoders take bytes from the network: every size, count and path is checked before
// anything is written.
//
// Threads: one FleetRequests per thread, with the FleetQueue it was given (the main thread
// of `flotilla serve`, or of a command).

#include "common/Result.h"
#include "engine/coordination/FleetQueue.h"
#include "job/JobSpec.h"

#include <QByteArray>
#include <QString>

#include <optional>
#include <utility>
#include <vector>

namespace flotilla {

// Who asks: a user of the coordinator's machine, or a certificate's name, and whether it is
// the fleet's administrator.
struct Requester
{
    QString name;
    bool administrator = false;
    bool remote = false; // from another machine: may name no file of the coordinator's

    // As the queue records it (QueuedJob::origin): local, operator or submitter.
    QString origin() const;
    // Whether a job of the queue is this requester's own: the same name, the same kind of
    // identity (a certificate named like a local user is not that user).
    bool owns(const QueuedJob &job) const;
};

// Files under one name: a data set (a file or a folder) or a job's run folder. Paths are
// relative, '/'-separated, without '.' or '..' parts.
struct FileBundle
{
    QString name; // the file's or folder's own name
    bool folder = false;
    std::vector<std::pair<QString, QByteArray>> files;

    qint64 bytes() const;
};

// A bundle read from disk; maxBytes bounds the sum of its files.
Result<FileBundle> readBundle(const QString &path, qint64 maxBytes);
// Writes a bundle under `parent` (parent/<name>, created whole or not at all) and returns
// the path of what was written. One there already is kept (a content-addressed folder), or
// with `replace` given way to the new one (a download made again).
Result<QString> writeBundle(const FileBundle &bundle, const QString &parent, bool replace = false);
QByteArray encodeBundle(const FileBundle &bundle);
Result<FileBundle> decodeBundle(const QByteArray &bytes);

struct Submission
{
    JobSpec spec;
    QByteArray model;                // a TorchScript job's model file
    std::optional<FileBundle> data;  // a data set sent with the job
    int priority = 0;
    double weight = 1.0;
};

QByteArray encodeSubmission(const Submission &submission);
Result<Submission> decodeSubmission(const QByteArray &bytes);

// The queue's rows as they go to a remote person (`flotilla jobs --coordinator`, the Jobs view).
QByteArray encodeJobs(const std::vector<QueuedJob> &jobs);
Result<std::vector<QueuedJob>> decodeJobs(const QByteArray &bytes);

class FleetRequests
{
public:
    // The most a submission's files may hold, and a download (the model, the store's copy).
    static constexpr qint64 kMaxSubmissionBytes = qint64(256) << 20;
    static constexpr qint64 kMaxDownloadBytes = qint64(256) << 20;

    // fleetDir: the identity folder; models/, data/ and runs/ are kept in it.
    FleetRequests(FleetQueue &queue, QString fleetDir);

    // Queues a job: keepFiles(), then enqueue().
    Result<std::pair<QueuedJob, int>> submit(const Requester &by, Submission submission, qint64 nowMs);
    // A submission's checks, and its model and data written into the fleet's folder, named
    // by their SHA-256; the job then names them there. Touches no queue: any thread.
    static Result<Submission> keepFiles(const QString &fleetDir, const Requester &by, Submission submission);
    // Queues a job whose files are kept. Returns the queued row and how many jobs are queued
    // ahead of it.
    Result<std::pair<QueuedJob, int>> enqueue(const Requester &by, const Submission &submission, qint64 nowMs);
    // cancel, pause, resume, priority, weight; returns what was done, in a sentence.
    Result<QString> manage(const Requester &by, qint64 id, const QString &action, double value, qint64 nowMs);
    Result<std::vector<QueuedJob>> jobs();
    // download(): the job, if the requester may download it (downloadable()), then its run
    // folder read (readRun(), any thread): the trained model (model.pt, when it has one),
    // job.json, metrics.csv, normalization.json, the end of flotilla.log and a consistent copy
    // of its store, at most maxBytes, checked before anything is read.
    Result<FileBundle> download(const Requester &by, qint64 id);
    Result<QueuedJob> downloadable(const Requester &by, qint64 id);
    static Result<FileBundle> readRun(const QString &runDir, qint64 maxBytes = kMaxDownloadBytes);

private:
    Result<QueuedJob> owned(const Requester &by, qint64 id, const QString &what);

    FleetQueue &m_queue;
    QString m_fleetDir;
};

} // namespace flotilla
