#include "server/FleetRequests.h"

#include "common/AtomicFile.h"
#include "engine/coordination/Store.h"

#include <QCborArray>
#include <QCborMap>
#include <QCborValue>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QUuid>

#include <cmath>

namespace flotilla {

namespace {

constexpr int kMaxBundleFiles = 100000;
constexpr int kMaxPathLength = 1024;
// The end of a long log is what a submitter looks at.
constexpr qint64 kMaxLogBytes = qint64(16) << 20;

// A name of one part of a path: no separators, nothing that climbs out of its folder.
bool plainPart(const QString &part)
{
    return !part.isEmpty() && part != QLatin1String(".") && part != QLatin1String("..") && part.size() <= 255
           && !part.contains(QLatin1Char('/')) && !part.contains(QLatin1Char('\\')) && !part.contains(QChar(0))
           && !part.contains(QLatin1Char(':'));
}

Result<void> checkPath(const QString &path)
{
    if (path.isEmpty() || path.size() > kMaxPathLength)
        return fail(QStringLiteral("a file of the bundle has an empty or over-long path"));
    for (const QString &part : path.split(QLatin1Char('/')))
        if (!plainPart(part))
            return fail(QStringLiteral("a file of the bundle has the path '%1', which is not a plain relative path "
                                       "(no '..', no absolute paths, no empty parts)")
                            .arg(path.left(200)));
    return {};
}

bool validWeight(double weight)
{
    return std::isfinite(weight) && weight > 0 && weight <= 1e6;
}

QCborMap bundleMap(const FileBundle &bundle)
{
    QCborArray files;
    for (const auto &[path, bytes] : bundle.files)
        files.append(QCborArray{path, bytes});
    return QCborMap{{QStringLiteral("n"), bundle.name}, {QStringLiteral("d"), bundle.folder},
                    {QStringLiteral("f"), files}};
}

Result<FileBundle> bundleFrom(const QCborValue &value)
{
    if (!value.isMap())
        return fail(QStringLiteral("the bundle of files is not a CBOR map"));
    const QCborMap map = value.toMap();
    FileBundle bundle;
    bundle.name = map.value(QStringLiteral("n")).toString();
    bundle.folder = map.value(QStringLiteral("d")).toBool();
    if (!plainPart(bundle.name))
        return fail(QStringLiteral("the bundle's name '%1' is not a plain file name").arg(bundle.name.left(200)));
    const QCborValue files = map.value(QStringLiteral("f"));
    if (!files.isArray())
        return fail(QStringLiteral("the bundle holds no list of files"));
    const QCborArray list = files.toArray();
    if (list.size() > kMaxBundleFiles)
        return fail(QStringLiteral("the bundle holds %1 files; at most %2 travel in one").arg(list.size()).arg(kMaxBundleFiles));
    qint64 total = 0;
    for (const QCborValue &entry : list) {
        const QCborArray pair = entry.toArray();
        if (pair.size() != 2 || !pair.at(0).isString() || !pair.at(1).isByteArray())
            return fail(QStringLiteral("a file of the bundle is not a path and its bytes"));
        const QString path = pair.at(0).toString();
        if (auto ok = checkPath(path); !ok)
            return ok.takeError();
        QByteArray bytes = pair.at(1).toByteArray();
        total += bytes.size();
        if (total > FleetRequests::kMaxSubmissionBytes)
            return fail(QStringLiteral("the bundle holds more than %1 MiB").arg(FleetRequests::kMaxSubmissionBytes >> 20));
        bundle.files.emplace_back(path, std::move(bytes));
    }
    if (!bundle.folder && (bundle.files.size() != 1 || bundle.files.front().first != bundle.name))
        return fail(QStringLiteral("a bundle of one file must hold exactly that file"));
    if (bundle.files.empty())
        return fail(QStringLiteral("the bundle '%1' holds no files").arg(bundle.name));
    return bundle;
}

QCborMap jobMap(const QueuedJob &j)
{
    return QCborMap{{QStringLiteral("id"), j.id},
                    {QStringLiteral("name"), j.name},
                    {QStringLiteral("submitter"), j.submitter},
                    {QStringLiteral("priority"), j.priority},
                    {QStringLiteral("weight"), j.weight},
                    {QStringLiteral("state"), j.state},
                    {QStringLiteral("submitted_ms"), j.submittedMs},
                    {QStringLiteral("started_ms"), j.startedMs},
                    {QStringLiteral("ended_ms"), j.endedMs},
                    {QStringLiteral("worker_seconds"), j.workerSeconds},
                    {QStringLiteral("message"), j.message}};
}

} // namespace

qint64 FileBundle::bytes() const
{
    qint64 total = 0;
    for (const auto &[path, data] : files)
        total += data.size();
    return total;
}

Result<FileBundle> readBundle(const QString &path, qint64 maxBytes)
{
    const QFileInfo info(path);
    if (!info.exists())
        return fail(QStringLiteral("'%1' does not exist").arg(path));
    FileBundle bundle;
    bundle.name = info.fileName();
    bundle.folder = info.isDir();
    auto add = [&](const QString &file, const QString &relative) -> Result<void> {
        QFile f(file);
        if (!f.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("cannot read '%1': %2").arg(file, f.errorString()));
        if (bundle.bytes() + f.size() > maxBytes)
            return fail(QStringLiteral("'%1' holds more than %2 MiB, the most that travels with a job; put the data on "
                                       "the coordinator's machine, where an operator names it (--data-on-coordinator)")
                            .arg(path)
                            .arg(maxBytes >> 20));
        if (int(bundle.files.size()) >= kMaxBundleFiles)
            return fail(QStringLiteral("'%1' holds more than %2 files, the most that travel with a job")
                            .arg(path)
                            .arg(kMaxBundleFiles));
        bundle.files.emplace_back(relative, f.readAll());
        return {};
    };
    if (!bundle.folder) {
        if (auto r = add(info.absoluteFilePath(), bundle.name); !r)
            return r.takeError();
        return bundle;
    }
    const QDir root(info.absoluteFilePath());
    QDirIterator it(root.absolutePath(), QDir::Files | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString file = it.next();
        if (auto r = add(file, root.relativeFilePath(file)); !r)
            return r.takeError();
    }
    if (bundle.files.empty())
        return fail(QStringLiteral("the folder '%1' holds no files").arg(path));
    return bundle;
}

Result<QString> writeBundle(const FileBundle &bundle, const QString &parent, bool replace)
{
    if (!plainPart(bundle.name))
        return fail(QStringLiteral("'%1' is not a plain file name").arg(bundle.name));
    for (const auto &[path, bytes] : bundle.files)
        if (auto ok = checkPath(path); !ok)
            return ok.takeError();
    const QString target = QDir(parent).filePath(bundle.name);
    if (QFileInfo::exists(target) && !replace)
        return target; // named by its content: written before
    if (!QDir().mkpath(parent))
        return fail(QStringLiteral("cannot create the folder '%1'").arg(parent));
    // Written beside its place and renamed into it: a crash leaves no half of it there. The
    // files are not synced one by one (a data set of thousands of images): the rename is
    // what makes the whole appear.
    const QString unique = QUuid::createUuid().toString(QUuid::WithoutBraces);
    const QString partial = QDir(parent).filePath(QStringLiteral(".partial-%1").arg(unique));
    auto remove = [](const QString &path) {
        QFileInfo(path).isDir() ? (void)QDir(path).removeRecursively() : (void)QFile::remove(path);
    };
    for (const auto &[path, bytes] : bundle.files) {
        const QString file = bundle.folder ? QDir(partial).filePath(path) : partial;
        QFile out(file);
        if (!QDir().mkpath(QFileInfo(file).absolutePath()) || !out.open(QIODevice::WriteOnly)
            || out.write(bytes) != bytes.size() || !out.flush()) {
            const QString why = out.errorString();
            remove(partial);
            return fail(QStringLiteral("cannot write '%1': %2").arg(file, why));
        }
    }
    const QString old = QDir(parent).filePath(QStringLiteral(".replaced-%1").arg(unique));
    const bool replacing = replace && QFileInfo::exists(target);
    if (replacing && !QDir().rename(target, old)) {
        remove(partial);
        return fail(QStringLiteral("cannot replace '%1'").arg(target));
    }
    if (!QDir().rename(partial, target)) {
        remove(partial);
        if (replacing)
            (void)QDir().rename(old, target);
        else if (QFileInfo::exists(target))
            return target; // the same content, written meanwhile
        return fail(QStringLiteral("cannot move the received files into '%1'").arg(target));
    }
    if (replacing)
        remove(old);
    return target;
}

QByteArray encodeBundle(const FileBundle &bundle)
{
    return QCborValue(bundleMap(bundle)).toCbor();
}

Result<FileBundle> decodeBundle(const QByteArray &bytes)
{
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(bytes, &error);
    if (error.error != QCborError::NoError)
        return fail(QStringLiteral("the bundle of files is damaged: %1").arg(error.errorString()));
    return bundleFrom(value);
}

QByteArray encodeSubmission(const Submission &s)
{
    QCborMap map{{QStringLiteral("spec"),
                  QString::fromUtf8(QJsonDocument(s.spec.toJson()).toJson(QJsonDocument::Compact))},
                 {QStringLiteral("priority"), s.priority},
                 {QStringLiteral("weight"), s.weight}};
    if (!s.model.isEmpty())
        map.insert(QStringLiteral("model"), s.model);
    if (s.data)
        map.insert(QStringLiteral("data"), bundleMap(*s.data));
    return QCborValue(map).toCbor();
}

Result<Submission> decodeSubmission(const QByteArray &bytes)
{
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(bytes, &error);
    if (error.error != QCborError::NoError || !value.isMap())
        return fail(QStringLiteral("the submission is damaged (not a CBOR map)"));
    const QCborMap map = value.toMap();
    Submission s;
    QJsonParseError jsonError{};
    const QJsonDocument document =
        QJsonDocument::fromJson(map.value(QStringLiteral("spec")).toString().toUtf8(), &jsonError);
    if (!document.isObject())
        return fail(QStringLiteral("the submitted job file is not a JSON object: %1").arg(jsonError.errorString()));
    auto spec = JobSpec::fromJson(document.object());
    if (!spec)
        return fail(QStringLiteral("the submitted job: %1").arg(spec.error()));
    s.spec = std::move(spec).value();
    const QCborValue priority = map.value(QStringLiteral("priority"));
    const QCborValue weight = map.value(QStringLiteral("weight"));
    if (!priority.isInteger() || std::abs(priority.toInteger()) > 1000000)
        return fail(QStringLiteral("the submission's priority must be a whole number between -1000000 and 1000000"));
    s.priority = int(priority.toInteger());
    s.weight = weight.isDouble() || weight.isInteger() ? weight.toDouble() : 0.0;
    if (!validWeight(s.weight))
        return fail(QStringLiteral("the submission's weight must be a positive number up to 1000000"));
    const QCborValue model = map.value(QStringLiteral("model"));
    if (!model.isUndefined() && !model.isByteArray())
        return fail(QStringLiteral("the submission's model is not a file's bytes"));
    s.model = model.toByteArray();
    if (const QCborValue data = map.value(QStringLiteral("data")); !data.isUndefined()) {
        auto bundle = bundleFrom(data);
        if (!bundle)
            return fail(QStringLiteral("the submission's data: %1").arg(bundle.error()));
        s.data = std::move(bundle).value();
    }
    return s;
}

QByteArray encodeJobs(const std::vector<QueuedJob> &jobs)
{
    QCborArray list;
    for (const QueuedJob &j : jobs)
        list.append(jobMap(j));
    return QCborValue(list).toCbor();
}

Result<std::vector<QueuedJob>> decodeJobs(const QByteArray &bytes)
{
    QCborParserError error{};
    const QCborValue value = QCborValue::fromCbor(bytes, &error);
    if (error.error != QCborError::NoError || !value.isArray())
        return fail(QStringLiteral("the list of jobs is damaged"));
    std::vector<QueuedJob> out;
    for (const QCborValue &v : value.toArray()) {
        const QCborMap m = v.toMap();
        QueuedJob j;
        j.id = m.value(QStringLiteral("id")).toInteger();
        j.name = m.value(QStringLiteral("name")).toString();
        j.submitter = m.value(QStringLiteral("submitter")).toString();
        j.priority = int(m.value(QStringLiteral("priority")).toInteger());
        j.weight = m.value(QStringLiteral("weight")).toDouble();
        j.state = m.value(QStringLiteral("state")).toString();
        j.submittedMs = m.value(QStringLiteral("submitted_ms")).toInteger();
        j.startedMs = m.value(QStringLiteral("started_ms")).toInteger();
        j.endedMs = m.value(QStringLiteral("ended_ms")).toInteger();
        j.workerSeconds = m.value(QStringLiteral("worker_seconds")).toDouble();
        j.message = m.value(QStringLiteral("message")).toString();
        out.push_back(std::move(j));
    }
    return out;
}

QString Requester::origin() const
{
    return !remote ? QStringLiteral("local") : administrator ? QStringLiteral("operator") : QStringLiteral("submitter");
}

bool Requester::owns(const QueuedJob &job) const
{
    return job.submitter == name && (job.origin == QLatin1String("local")) == !remote;
}

FleetRequests::FleetRequests(FleetQueue &queue, QString fleetDir) : m_queue(queue), m_fleetDir(std::move(fleetDir)) { }

Result<std::pair<QueuedJob, int>> FleetRequests::submit(const Requester &by, Submission s, qint64 nowMs)
{
    auto kept = keepFiles(m_fleetDir, by, std::move(s));
    if (!kept)
        return kept.takeError();
    return enqueue(by, *kept, nowMs);
}

Result<Submission> FleetRequests::keepFiles(const QString &fleetDir, const Requester &by, Submission s)
{
    if (by.name.isEmpty())
        return fail(QStringLiteral("a job needs a submitter's name"));
    if (!validWeight(s.weight) || std::abs(s.priority) > 1000000)
        return fail(QStringLiteral("the priority must be a whole number between -1000000 and 1000000 and the weight a "
                                   "positive number up to 1000000"));
    JobSpec &spec = s.spec;
    // A submitter from elsewhere names no file of the coordinator's: what the job reads
    // comes with it, or is the fleet's default data set. An administrator may.
    const bool mayNameFiles = !by.remote || by.administrator;
    if (!mayNameFiles && !spec.fleet.priceTable.isEmpty())
        return fail(QStringLiteral("a submitter's job cannot name a price table on the coordinator's machine "
                                   "(fleet.price_table): leave it empty for the built-in table"));
    if (spec.model.kind == QLatin1String("torchscript")) {
        QByteArray model = s.model;
        if (model.isEmpty() && !by.remote) {
            QFile file(spec.model.path);
            if (!file.open(QIODevice::ReadOnly))
                return fail(QStringLiteral("cannot read the TorchScript model '%1': %2")
                                .arg(spec.model.path, file.errorString()));
            model = file.readAll();
        }
        if (model.isEmpty())
            return fail(QStringLiteral("the job's TorchScript model did not come with it (--model-file)"));
        const QString kept = QDir(fleetDir).filePath(QStringLiteral("models/%1.pt").arg(sha256Hex(model)));
        if (!QFileInfo::exists(kept)) {
            QDir().mkpath(QFileInfo(kept).absolutePath());
            if (auto written = writeFileAtomically(kept, model); !written)
                return written.takeError();
        }
        spec.model.path = kept;
        s.model.clear();
    } else if (!s.model.isEmpty()) {
        return fail(QStringLiteral("a model file came with a job whose model is '%1', not torchscript")
                        .arg(spec.model.kind));
    }
    if (s.data) {
        const QString parent = QDir(fleetDir).filePath(QStringLiteral("data/%1").arg(sha256Hex(encodeBundle(*s.data))));
        auto written = writeBundle(*s.data, parent);
        if (!written)
            return fail(QStringLiteral("cannot keep the job's data: %1").arg(written.error()));
        spec.dataset.path = *written;
        s.data.reset();
    } else if (!spec.dataset.path.isEmpty()) {
        if (!mayNameFiles)
            return fail(QStringLiteral("the job names the data '%1' on the coordinator's machine; a submitter sends "
                                       "its data with the job (flotilla submit --data DIR), or an operator names it")
                            .arg(spec.dataset.path));
        spec.dataset.path = QFileInfo(spec.dataset.path).absoluteFilePath();
        if (!QFileInfo::exists(spec.dataset.path))
            return fail(QStringLiteral("the job's data '%1' does not exist on the coordinator's machine")
                            .arg(spec.dataset.path));
    }
    return s;
}

Result<std::pair<QueuedJob, int>> FleetRequests::enqueue(const Requester &by, const Submission &s, qint64 nowMs)
{
    QueuedJob entry;
    entry.name = s.spec.name;
    entry.submitter = by.name;
    entry.origin = by.origin();
    entry.spec = QString::fromUtf8(QJsonDocument(s.spec.toJson()).toJson(QJsonDocument::Compact));
    entry.priority = s.priority;
    entry.weight = s.weight;
    auto id = m_queue.submit(entry, QDir(m_fleetDir).filePath(QStringLiteral("runs")), nowMs);
    if (!id)
        return id.takeError();
    auto row = m_queue.job(*id);
    if (!row || !row->has_value())
        return fail(QStringLiteral("the queued job %1 cannot be read back").arg(*id));
    int ahead = 0;
    if (auto order = m_queue.startOrder(nowMs))
        for (const QueuedJob &j : *order) {
            if (j.id == *id)
                break;
            ++ahead;
        }
    return std::make_pair(**row, ahead);
}

Result<std::vector<QueuedJob>> FleetRequests::jobs()
{
    return m_queue.jobs();
}

Result<QueuedJob> FleetRequests::owned(const Requester &by, qint64 id, const QString &what)
{
    auto found = m_queue.job(id);
    if (!found)
        return found.takeError();
    if (!found->has_value())
        return fail(QStringLiteral("the queue has no job %1").arg(id));
    const QueuedJob &job = **found;
    if (!by.owns(job) && !by.administrator) {
        if (job.submitter == by.name)
            return fail(QStringLiteral("job %1 was submitted by %2 %3, not by %4 %2: a submitter may %5 only its own "
                                       "jobs (an operator may %5 any)")
                            .arg(id)
                            .arg(job.submitter,
                                 job.origin == QLatin1String("local") ? QStringLiteral("on the coordinator's machine")
                                                                      : QStringLiteral("with a certificate"),
                                 by.remote ? QStringLiteral("the certificate") : QStringLiteral("the user"), what));
        return fail(QStringLiteral("job %1 was submitted by %2, not %3: a submitter may %4 only its own jobs (an "
                                   "operator, the fleet's administrator, may %4 any)")
                        .arg(id)
                        .arg(job.submitter, by.name, what));
    }
    return job;
}

Result<QString> FleetRequests::manage(const Requester &by, qint64 id, const QString &action, double value, qint64 nowMs)
{
    const bool known = action == QLatin1String("cancel") || action == QLatin1String("pause")
                       || action == QLatin1String("resume") || action == QLatin1String("priority")
                       || action == QLatin1String("weight");
    if (!known)
        return fail(QStringLiteral("'%1' is not something a job can be asked (cancel, pause, resume, priority, weight)")
                        .arg(action.left(40)));
    auto found = owned(by, id, action);
    if (!found)
        return found.takeError();
    const QueuedJob &job = *found;
    if (action == QLatin1String("priority")) {
        if (!std::isfinite(value) || value != std::floor(value) || std::abs(value) > 1000000)
            return fail(QStringLiteral("a priority is a whole number between -1000000 and 1000000"));
        if (auto r = m_queue.setPriority(id, int(value)); !r)
            return r.takeError();
        return QStringLiteral("job %1's priority is now %2").arg(id).arg(int(value));
    }
    if (action == QLatin1String("weight")) {
        if (!validWeight(value))
            return fail(QStringLiteral("a weight is a positive number up to 1000000"));
        if (auto r = m_queue.setWeight(id, value); !r)
            return r.takeError();
        return QStringLiteral("job %1's weight is now %2").arg(id).arg(value);
    }
    if (job.ended())
        return fail(QStringLiteral("job %1 is %2 already").arg(id).arg(job.state));
    if (action == QLatin1String("resume")) {
        if (job.state != QLatin1String("paused"))
            return fail(QStringLiteral("job %1 is %2, not paused").arg(id).arg(job.state));
        if (auto r = m_queue.setState(id, QStringLiteral("queued"), QStringLiteral("resumed by %1").arg(by.name), nowMs);
            !r)
            return r.takeError();
        return QStringLiteral("job %1 is queued again; it resumes where it stopped").arg(id);
    }
    const QString state = action == QLatin1String("cancel") ? QStringLiteral("cancelled") : QStringLiteral("paused");
    const QString message = QStringLiteral("%1 by %2").arg(state, by.name);
    if (job.state == QLatin1String("running")) {
        // The fleet service stops it within a second.
        if (auto r = m_queue.setWanted(id, action, message); !r)
            return r.takeError();
        return QStringLiteral("asked the fleet service to %1 job %2").arg(action).arg(id);
    }
    if (action == QLatin1String("pause") && job.state == QLatin1String("paused"))
        return QStringLiteral("job %1 is paused already").arg(id);
    if (auto r = m_queue.setState(id, state, message, nowMs); !r)
        return r.takeError();
    return QStringLiteral("job %1 is %2").arg(id).arg(state);
}

Result<FileBundle> FleetRequests::download(const Requester &by, qint64 id)
{
    auto job = downloadable(by, id);
    if (!job)
        return job.takeError();
    return readRun(job->runDir);
}

Result<QueuedJob> FleetRequests::downloadable(const Requester &by, qint64 id)
{
    auto found = owned(by, id, QStringLiteral("download"));
    if (!found)
        return found.takeError();
    if (found->runDir.isEmpty() || !QDir(found->runDir).exists())
        return fail(QStringLiteral("job %1 has not started yet: it has nothing to download").arg(id));
    return found;
}

Result<FileBundle> FleetRequests::readRun(const QString &runDir, qint64 maxBytes)
{
    const QDir run(runDir);
    const QStringList names{QStringLiteral("model.pt"), QStringLiteral("job.json"), QStringLiteral("metrics.csv"),
                            QStringLiteral("normalization.json"), QStringLiteral("flotilla.log")};
    const QString store = run.filePath(QStringLiteral("flotilla.db"));
    // Sized before anything is read: the store's copy is at most the store and its log.
    qint64 total = 0;
    for (const QString &name : names)
        total += name == QLatin1String("flotilla.log") ? std::min(QFileInfo(run.filePath(name)).size(), kMaxLogBytes)
                                                        : QFileInfo(run.filePath(name)).size();
    total += QFileInfo(store).size() + QFileInfo(store + QStringLiteral("-wal")).size();
    if (total > maxBytes)
        return fail(QStringLiteral("the run folder holds %1 MiB, more than the %2 MiB a download carries; copy it from "
                                   "the coordinator's machine (%3)")
                        .arg(total >> 20)
                        .arg(maxBytes >> 20)
                        .arg(runDir));
    FileBundle bundle;
    bundle.name = QFileInfo(runDir).fileName();
    bundle.folder = true;
    for (const QString &name : names) {
        QFile file(run.filePath(name));
        if (!file.open(QIODevice::ReadOnly))
            continue; // not written (yet): a job that has not finished has no model
        if (name == QLatin1String("flotilla.log") && file.size() > kMaxLogBytes)
            file.seek(file.size() - kMaxLogBytes);
        bundle.files.emplace_back(name, file.read(maxBytes));
    }
    if (QFileInfo::exists(store)) {
        auto opened = Store::open(store);
        if (!opened)
            return opened.takeError();
        // Copied beside the store, on the same disk, and removed once read.
        const QString copy = run.filePath(QStringLiteral(".download-%1.db").arg(
            QUuid::createUuid().toString(QUuid::WithoutBraces)));
        auto copied = (*opened)->copyTo(copy);
        QFile file(copy);
        if (copied && file.open(QIODevice::ReadOnly))
            bundle.files.emplace_back(QStringLiteral("flotilla.db"), file.read(maxBytes));
        file.close();
        QFile::remove(copy);
        if (!copied)
            return copied.takeError();
    }
    return bundle;
}

} // namespace flotilla
