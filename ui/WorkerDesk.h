#pragma once
// The worker-only window, for a machine that contributes to someone else's coordinator:
// which job and coordinator, what it is doing, how far the current subtask is, how much it
// has given today and in all, why it is paused; a suspend/resume switch, "suspend for 1
// hour", the worker's settings; a tray icon where the desktop has a tray. It reads a
// WorkerDesk, which the application implements around its worker.
//
// Threads: UI thread. The settings dialog goes through a seam that tests replace (editSettings).

#include "machine/WorkerSettings.h"

#include <QObject>
#include <QWidget>

#include <functional>
#include <optional>

class QLabel;
class QProgressBar;
class QPushButton;
class QSystemTrayIcon;

namespace flotilla::ui {

struct WorkerDeskStatus
{
    QString state;       // connecting, training, idle, suspended, finished, failed
    QString coordinator; // host:port
    QString job;
    QString subtask;
    double progress = -1.0;
    double hoursContributed = 0.0; // all runs on this machine
    double hoursToday = 0.0;
    int subtasksDone = 0;          // this run
    QString message;
    QString policy; // why the worker is paused, or a note about when it runs
};

class WorkerDesk : public QObject
{
    Q_OBJECT

public:
    using QObject::QObject;
    virtual WorkerDeskStatus status() const = 0;
    virtual void setSuspended(bool suspended) = 0;
    virtual bool suspended() const = 0;
    // Suspended now, running again by itself after this long (unless something else holds it).
    virtual void suspendFor(int minutes) = 0;
    virtual WorkerSettings settings() const = 0;
    virtual void setSettings(const WorkerSettings &settings) = 0;
    // What the device choice offers: "auto", "cpu", then "cuda:N" for each GPU found.
    virtual QStringList deviceChoices() const = 0;

Q_SIGNALS:
    void statusChanged();
};

class WorkerWindow : public QWidget
{
    Q_OBJECT

public:
    explicit WorkerWindow(WorkerDesk *desk, QWidget *parent = nullptr);
    QString stateText() const;
    QString policyText() const;
    QString contributionText() const;
    QPushButton *suspendButton() const { return m_suspend; }
    QPushButton *suspendHourButton() const { return m_suspendHour; }
    QPushButton *settingsButton() const { return m_settings; }

    // Seam for tests: shows the settings dialog and returns what the user chose, or nothing.
    std::function<std::optional<WorkerSettings>(const WorkerSettings &current, const QStringList &devices)>
        editSettings;

private:
    void refresh();

    WorkerDesk *m_desk;
    QLabel *m_state = nullptr;
    QLabel *m_coordinator = nullptr;
    QLabel *m_job = nullptr;
    QLabel *m_policy = nullptr;
    QLabel *m_subtask = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_hours = nullptr;
    QLabel *m_message = nullptr;
    QPushButton *m_suspend = nullptr;
    QPushButton *m_suspendHour = nullptr;
    QPushButton *m_settings = nullptr;
    QSystemTrayIcon *m_tray = nullptr;
};

} // namespace flotilla::ui
