#pragma once
// The Jobs tab of a window attached to a fleet service: the fleet's queue (every job, whose
// it is, its state, priority, weight and the worker time it has had), and the buttons that
// manage a job — pause, resume, cancel, priority, weight — and download its trained model
// and run folder. What a button asks goes to the session; the coordinator decides whether
// this person may (its own jobs, or any for an operator) and the answer comes back as a
// message in the window's status bar.
//
// Threads: UI thread.

#include "ui/ControlSession.h"

#include <QWidget>

#include <functional>
#include <optional>

class QLabel;
class QPushButton;
class QTableWidget;
class QTimer;

namespace flotilla::ui {

class JobsView : public QWidget
{
    Q_OBJECT

public:
    explicit JobsView(ControlSession *session, QWidget *parent = nullptr);
    QTableWidget *table() const { return m_table; }
    // The id of the selected job, 0 when none is.
    qint64 selectedJob() const;
    void selectJob(qint64 id);

    // Seams for tests: what the dialogs would answer (a folder; a number, or nothing).
    std::function<QString(const QString &title)> askFolder;
    std::function<std::optional<double>(const QString &label, double current)> askNumber;

public Q_SLOTS:
    void refresh();
    void setJobs(const QList<flotilla::QueueRow> &jobs);

protected:
    void showEvent(QShowEvent *event) override;

private:
    void act(const QString &action);
    void updateButtons();
    const QueueRow *selectedRow() const;

    ControlSession *m_session;
    QTableWidget *m_table = nullptr;
    QLabel *m_summary = nullptr;
    QPushButton *m_pause = nullptr;
    QPushButton *m_resume = nullptr;
    QPushButton *m_cancel = nullptr;
    QPushButton *m_priority = nullptr;
    QPushButton *m_weight = nullptr;
    QPushButton *m_download = nullptr;
    QTimer *m_timer = nullptr;
    QList<QueueRow> m_rows;
};

} // namespace flotilla::ui
