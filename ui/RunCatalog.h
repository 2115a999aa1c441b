#pragma once
// The runs this control center knows: every run folder under its data location, plus the
// run folders the user opened from elsewhere. The runs view lists them, opens one's
// dashboard from its store, and compares several; the application implements the facade
// with the job store.
//
// Threads: lives on the UI thread. Listing and reading a run's history happen on pool
// threads and come back as signals; renaming and deleting are single file operations.

#include "common/Result.h"
#include "job/JobSpec.h"
#include "job/SessionTypes.h"

#include <QObject>

namespace flotilla::ui {

struct RunSummary
{
    QString dir;   // the run folder (its identity)
    QString name;  // the folder's name, which Rename changes
    QString state; // running, finished, failed, stopped; "unreadable" with error set
    QString error; // why the store could not be read
    JobSpec job;   // the job as the store recorded it
    double bestAccuracy = -1.0; // best test accuracy of any evaluation; -1 before the first
    int epochsDone = 0;         // evaluations recorded
    qint64 createdMs = 0;
    qint64 wallMs = 0;      // from creation to the last thing recorded (or finishing)
    double cost = 0.0;      // what the fleet's price classes paid
    double savingsPercent = 0.0; // against the same worker-seconds on demand
    bool current = false;   // the job this control center runs now
    bool external = false;  // opened from outside the data location
};

class RunCatalog : public QObject
{
    Q_OBJECT

public:
    using QObject::QObject;

    // Lists the runs again; the answer is runsListed.
    virtual void refresh() = 0;
    // Reads one run's recorded history; the answer is historyLoaded (with an empty History and
    // a message in historyFailed when the store cannot be read).
    virtual void loadHistory(const QString &dir) = 0;
    // Remembers a run folder outside the data location (it must hold a job store).
    virtual Result<void> addFolder(const QString &dir) = 0;
    // Renames the run's folder; the answer is its new path.
    virtual Result<QString> rename(const QString &dir, const QString &newName) = 0;
    // Deletes the run's folder with everything in it (store, checkpoints, model).
    virtual Result<void> remove(const QString &dir) = 0;
    // The run folder of the job this control center runs now (empty when none): it is
    // neither renamed nor deleted.
    virtual void setCurrentRun(const QString &dir) = 0;

Q_SIGNALS:
    void runsListed(const QList<flotilla::ui::RunSummary> &runs);
    void historyLoaded(const QString &dir, const flotilla::History &history);
    void historyFailed(const QString &dir, const QString &message);
};

// The settings in which the runs differ, as "key value" phrases per run, in the order of
// `runs` ("vc-asgd, α 0.5, lr 0.03, 4 workers"): what a comparison's legend names.
QList<QStringList> differences(const QList<JobSpec> &jobs);

// "1 h 02 min", "4 min 05 s", "12 s".
QString formatDuration(qint64 ms);

} // namespace flotilla::ui

Q_DECLARE_METATYPE(flotilla::ui::RunSummary)
