#pragma once
// The worker-only window, for a machine that contributes to someone else's coordinator:
// what it is doing, how far the current subtask is, how many hours it has given, and a
// suspend/resume switch; a tray icon where the desktop has a tray. It reads a WorkerDesk,
// which the application implements around its worker.
//
// Threads: UI thread.

#include <QObject>
#include <QWidget>

class QLabel;
class QProgressBar;
class QPushButton;
class QSystemTrayIcon;

namespace flotilla::ui {

struct WorkerDeskStatus
{
    QString state;       // connecting, training, idle, suspended, finished, failed
    QString coordinator; // host:port
    QString subtask;
    double progress = -1.0;
    double hoursContributed = 0.0; // all runs on this machine
    int subtasksDone = 0;          // this run
    QString message;
};

class WorkerDesk : public QObject
{
    Q_OBJECT

public:
    using QObject::QObject;
    virtual WorkerDeskStatus status() const = 0;
    virtual void setSuspended(bool suspended) = 0;
    virtual bool suspended() const = 0;

Q_SIGNALS:
    void statusChanged();
};

class WorkerWindow : public QWidget
{
    Q_OBJECT

public:
    explicit WorkerWindow(WorkerDesk *desk, QWidget *parent = nullptr);
    QString stateText() const;
    QPushButton *suspendButton() const { return m_suspend; }

private:
    void refresh();

    WorkerDesk *m_desk;
    QLabel *m_state = nullptr;
    QLabel *m_coordinator = nullptr;
    QLabel *m_subtask = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_hours = nullptr;
    QLabel *m_message = nullptr;
    QPushButton *m_suspend = nullptr;
    QSystemTrayIcon *m_tray = nullptr;
};

} // namespace flotilla::ui
