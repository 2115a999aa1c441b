#pragma once
// The worker's settings: pause while the machine is in use, a daily window, programs during
// which not to run, CPU threads and device, start at login.
//
// Threads: UI thread.

#include "machine/WorkerSettings.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QTimeEdit;

namespace flotilla::ui {

class WorkerSettingsDialog : public QDialog
{
    Q_OBJECT

public:
    // devices: the device choices offered ("auto", "cpu", "cuda:0", …); the current one is
    // kept even when it is not among them.
    WorkerSettingsDialog(const WorkerSettings &settings, const QStringList &devices, QWidget *parent = nullptr);

    WorkerSettings settings() const;
    // Only the rules of when it may run: the control center's own worker takes its threads and
    // device from the control center and does not start at login.
    void showWhenOnly();

    QCheckBox *pauseWhenActive() const { return m_pauseWhenActive; }
    QSpinBox *idleMinutes() const { return m_idleMinutes; }
    QCheckBox *useWindow() const { return m_useWindow; }
    QTimeEdit *windowStart() const { return m_windowStart; }
    QTimeEdit *windowEnd() const { return m_windowEnd; }
    QPlainTextEdit *programs() const { return m_programs; }
    QSpinBox *threads() const { return m_threads; }
    QComboBox *device() const { return m_device; }
    QCheckBox *startAtLogin() const { return m_startAtLogin; }

private:
    void updateEnabled();

    QCheckBox *m_pauseWhenActive = nullptr;
    QCheckBox *m_pauseOnBattery = nullptr;
    QSpinBox *m_idleMinutes = nullptr;
    QCheckBox *m_useWindow = nullptr;
    QTimeEdit *m_windowStart = nullptr;
    QTimeEdit *m_windowEnd = nullptr;
    QPlainTextEdit *m_programs = nullptr;
    QSpinBox *m_threads = nullptr;
    QComboBox *m_device = nullptr;
    QCheckBox *m_startAtLogin = nullptr;
    QWidget *m_how = nullptr;
};

} // namespace flotilla::ui
