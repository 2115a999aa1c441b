#pragma once
// The control center's catalog of runs (ui::RunCatalog) over run folders on disk: every
// folder holding a job store under the data location's runs folder, plus folders the user
// opened (remembered in the settings). Summaries and histories are read on pool threads,
// each with its own store connection, so a run another process is training can be listed.
//
// Threads: lives on the UI thread.

#include "server/RunHistory.h"
#include "ui/RunCatalog.h"

#include <QStringList>

namespace flotilla {

// What the runs view shows of one run folder; never fails (an unreadable store comes back
// with state "unreadable" and the reason in error).
ui::RunSummary readRunSummary(const QString &dir, qint64 nowMs);

class RunLibrary : public ui::RunCatalog
{
    Q_OBJECT

public:
    // root: the folder new runs go into (<data location>/runs); settingsKey: where the
    // folders opened from elsewhere are remembered.
    explicit RunLibrary(QString root, QObject *parent = nullptr);

    void refresh() override;
    void loadHistory(const QString &dir) override;
    Result<void> addFolder(const QString &dir) override;
    Result<QString> rename(const QString &dir, const QString &newName) override;
    Result<void> remove(const QString &dir) override;
    void setCurrentRun(const QString &dir) override;

    QString root() const { return m_root; }
    QStringList openedFolders() const;

private:
    void setOpenedFolders(const QStringList &dirs);
    Result<void> refuseBusy(const QString &dir, const QString &what) const;

    QString m_root;
    QString m_current;
    int m_generation = 0; // a listing overtaken by a newer one is dropped
};

} // namespace flotilla
