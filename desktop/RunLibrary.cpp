#include "desktop/RunLibrary.h"

#include "common/LogCategories.h"
#include "engine/coordination/Store.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QJsonDocument>
#include <QLockFile>
#include <QSettings>
#include <QtConcurrent>

namespace flotilla {

namespace {

const QString kStoreFile = QStringLiteral("flotilla.db");
const QString kOpenedKey = QStringLiteral("runs/opened");
// A store that says "running" but has recorded nothing for this long belongs to a
// coordinator that was stopped or killed: the run is resumable, not running. Only where the
// run folder's lock cannot tell (a folder this user cannot write).
constexpr qint64 kSilentMs = 90 * 1000;

// Whether a live coordinator holds the run folder's lock (engine/coordination/Coordinator.cpp); nullopt
// where that cannot be told.
std::optional<bool> lockedByCoordinator(const QString &dir)
{
    QLockFile lock(QDir(dir).filePath(QStringLiteral("flotilla.lock")));
    lock.setStaleLockTime(0);
    if (lock.tryLock(0)) {
        lock.unlock();
        return false;
    }
    if (lock.error() == QLockFile::LockFailedError)
        return true;
    return std::nullopt;
}

QString storeOf(const QString &dir)
{
    return QDir(dir).filePath(kStoreFile);
}

QString canonical(const QString &dir)
{
    const QFileInfo info(dir);
    const QString path = info.canonicalFilePath();
    return path.isEmpty() ? QDir::cleanPath(info.absoluteFilePath()) : path;
}

} // namespace

ui::RunSummary readRunSummary(const QString &dir, qint64 nowMs)
{
    ui::RunSummary s;
    s.dir = dir;
    s.name = QFileInfo(dir).fileName();
    s.state = QStringLiteral("unreadable");
    const auto unreadable = [&s](const QString &why) {
        s.error = why;
        return s;
    };
    if (!QFileInfo::exists(storeOf(dir)))
        return unreadable(QStringLiteral("the folder holds no job store (%1)").arg(kStoreFile));
    auto store = Store::open(storeOf(dir));
    if (!store)
        return unreadable(store.error());
    auto job = (*store)->latestJob();
    if (!job)
        return unreadable(job.error());
    if (!job->has_value())
        return unreadable(QStringLiteral("the store holds no job yet"));
    const JobRecord &record = **job;
    const QJsonDocument json = QJsonDocument::fromJson(record.spec.toUtf8());
    if (auto spec = JobSpec::fromJson(json.object()))
        s.job = *spec;
    else
        return unreadable(QStringLiteral("its job settings cannot be read: %1").arg(spec.error()));
    s.createdMs = record.createdMs;
    if (auto evaluations = (*store)->evaluations(record.id)) {
        s.epochsDone = int(evaluations->size());
        for (const auto &e : *evaluations)
            s.bestAccuracy = std::max(s.bestAccuracy, e.accuracy);
    }
    if (auto totals = (*store)->ledgerTotals(record.id)) {
        s.cost = totals->costActual;
        s.savingsPercent = totals->savingsPercent();
    }
    const auto lastEvent = (*store)->lastEventMs(record.id);
    const qint64 last = lastEvent ? *lastEvent : 0;
    const qint64 end = record.finishedMs > 0 ? record.finishedMs : std::max(last, record.createdMs);
    s.wallMs = std::max<qint64>(0, end - record.createdMs);
    if (record.state == QLatin1String("running")) {
        const std::optional<bool> locked = lockedByCoordinator(dir);
        const bool running = locked ? *locked : nowMs - std::max(last, record.createdMs) < kSilentMs;
        s.state = running ? QStringLiteral("running") : QStringLiteral("stopped");
    } else {
        s.state = record.state;
    }
    return s;
}

RunLibrary::RunLibrary(QString root, QObject *parent) : ui::RunCatalog(parent), m_root(std::move(root))
{
    qRegisterMetaType<ui::RunSummary>();
    qRegisterMetaType<QList<ui::RunSummary>>();
    qRegisterMetaType<History>();
}

QStringList RunLibrary::openedFolders() const
{
    return QSettings().value(kOpenedKey).toStringList();
}

void RunLibrary::setOpenedFolders(const QStringList &dirs)
{
    QSettings().setValue(kOpenedKey, dirs);
}

void RunLibrary::setCurrentRun(const QString &dir)
{
    m_current = dir.isEmpty() ? QString() : canonical(dir);
}

void RunLibrary::refresh()
{
    const int generation = ++m_generation;
    const QString root = m_root;
    const QStringList opened = openedFolders();
    const QString current = m_current;
    auto *watcher = new QFutureWatcher<QList<ui::RunSummary>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation == m_generation)
            Q_EMIT runsListed(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run([root, opened, current] {
        // The data location's runs first, then the folders opened from elsewhere; a folder
        // reachable both ways is listed once.
        QStringList dirs;
        QSet<QString> external;
        for (const QFileInfo &d : QDir(root).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
            if (QFileInfo::exists(storeOf(d.filePath())))
                dirs << canonical(d.filePath());
        for (const QString &d : opened) {
            const QString c = canonical(d);
            if (!dirs.contains(c) && QFileInfo(c).isDir()) {
                dirs << c;
                external.insert(c);
            }
        }
        const qint64 now = QDateTime::currentMSecsSinceEpoch();
        QList<ui::RunSummary> runs;
        for (const QString &d : dirs) {
            ui::RunSummary s = readRunSummary(d, now);
            s.external = external.contains(d);
            s.current = d == current;
            if (s.current && s.state == QLatin1String("stopped"))
                s.state = QStringLiteral("running");
            runs << s;
        }
        return runs;
    }));
}

void RunLibrary::loadHistory(const QString &dir)
{
    auto *watcher = new QFutureWatcher<Result<History>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, dir] {
        watcher->deleteLater();
        const Result<History> &h = watcher->future().result();
        if (h)
            Q_EMIT historyLoaded(dir, *h);
        else
            Q_EMIT historyFailed(dir, h.error());
    });
    const QString db = storeOf(dir);
    watcher->setFuture(QtConcurrent::run([db] { return readRunHistory(db); }));
}

Result<void> RunLibrary::addFolder(const QString &dir)
{
    const QString c = canonical(dir);
    if (!QFileInfo(c).isDir())
        return fail(tr("'%1' is not a folder").arg(dir));
    if (!QFileInfo::exists(storeOf(c)))
        return fail(tr("'%1' is not a run folder: it holds no job store (%2)").arg(dir, kStoreFile));
    QStringList opened = openedFolders();
    if (!opened.contains(c) && canonical(QFileInfo(c).path()) != canonical(m_root)) {
        opened << c;
        setOpenedFolders(opened);
    }
    qCInfo(lcStore).noquote() << "run folder added to the runs view:" << c;
    return {};
}

Result<void> RunLibrary::refuseBusy(const QString &dir, const QString &what) const
{
    const QString c = canonical(dir);
    if (!m_current.isEmpty() && c == m_current)
        return fail(tr("cannot %1 '%2': it is the job this control center runs; stop it first").arg(what, QFileInfo(c).fileName()));
    const ui::RunSummary s = readRunSummary(c, QDateTime::currentMSecsSinceEpoch());
    if (s.state == QLatin1String("running"))
        return fail(tr("cannot %1 '%2': another Flotilla process is training it").arg(what, s.name));
    return {};
}

Result<QString> RunLibrary::rename(const QString &dir, const QString &newName)
{
    const QString name = newName.trimmed();
    if (name.isEmpty() || name == QLatin1String(".") || name == QLatin1String("..") || name.contains(u'/')
        || name.contains(u'\\'))
        return fail(tr("'%1' cannot name a run folder: use letters, digits, '-' or '_', without '/'").arg(newName));
    if (auto busy = refuseBusy(dir, tr("rename")); !busy)
        return busy.takeError();
    const QString from = canonical(dir);
    const QString to = QDir(QFileInfo(from).path()).filePath(name);
    if (QFileInfo::exists(to))
        return fail(tr("cannot rename '%1' to '%2': a file or folder of that name is already there").arg(QFileInfo(from).fileName(), name));
    if (!QDir().rename(from, to))
        return fail(tr("cannot rename '%1' to '%2' (check the folder's permissions)").arg(from, to));
    QStringList opened = openedFolders();
    if (const qsizetype i = opened.indexOf(from); i >= 0) {
        opened[i] = to;
        setOpenedFolders(opened);
    }
    // The control center resumes its last unfinished job from this key.
    QSettings settings;
    if (canonical(settings.value(QStringLiteral("job/runDir")).toString()) == from)
        settings.setValue(QStringLiteral("job/runDir"), to);
    qCInfo(lcStore).noquote() << "run renamed:" << from << "->" << to;
    return to;
}

Result<void> RunLibrary::remove(const QString &dir)
{
    if (auto busy = refuseBusy(dir, tr("delete")); !busy)
        return busy;
    const QString c = canonical(dir);
    if (!QFileInfo::exists(storeOf(c)))
        return fail(tr("'%1' is not a run folder (it holds no %2); nothing was deleted").arg(dir, kStoreFile));
    if (!QDir(c).removeRecursively())
        return fail(tr("'%1' could not be deleted completely (check its permissions); what is left stays listed").arg(c));
    QStringList opened = openedFolders();
    if (opened.removeAll(c) > 0)
        setOpenedFolders(opened);
    qCInfo(lcStore).noquote() << "run deleted:" << c;
    return {};
}

} // namespace flotilla
