#include "ui/WorkerSettingsDialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QThread>
#include <QTimeEdit>
#include <QVBoxLayout>

namespace flotilla::ui {

WorkerSettingsDialog::WorkerSettingsDialog(const WorkerSettings &settings, const QStringList &devices, QWidget *parent)
    : QDialog(parent)
{
    setWindowTitle(tr("Worker settings"));
    auto *layout = new QVBoxLayout(this);

    auto *when = new QGroupBox(tr("When the worker may run"));
    auto *whenForm = new QFormLayout(when);
    m_pauseWhenActive = new QCheckBox(tr("Pause while I use this machine"));
    m_pauseWhenActive->setChecked(settings.pauseWhenActive);
    m_idleMinutes = new QSpinBox;
    m_idleMinutes->setRange(1, 240);
    m_idleMinutes->setSuffix(tr(" min"));
    m_idleMinutes->setValue(settings.idleMinutes);
    whenForm->addRow(m_pauseWhenActive);
    whenForm->addRow(tr("Run after no input for"), m_idleMinutes);
    m_pauseOnBattery = new QCheckBox(tr("Pause while on battery"));
    m_pauseOnBattery->setChecked(settings.pauseOnBattery);
    whenForm->addRow(m_pauseOnBattery);
    m_useWindow = new QCheckBox(tr("Only between"));
    m_useWindow->setChecked(settings.useWindow);
    m_windowStart = new QTimeEdit(settings.windowStart);
    m_windowEnd = new QTimeEdit(settings.windowEnd);
    for (QTimeEdit *t : {m_windowStart, m_windowEnd})
        t->setDisplayFormat(QStringLiteral("HH:mm"));
    auto *window = new QHBoxLayout;
    window->addWidget(m_windowStart);
    window->addWidget(new QLabel(tr("and")));
    window->addWidget(m_windowEnd);
    window->addStretch();
    whenForm->addRow(m_useWindow, window);
    auto *windowNote = new QLabel(tr("A window that ends before it starts runs through midnight (19:00 and 07:00: "
                                     "every night)."));
    windowNote->setWordWrap(true);
    whenForm->addRow(windowNote);
    m_programs = new QPlainTextEdit(settings.exclusivePrograms.join(u'\n'));
    m_programs->setPlaceholderText(tr("one program name a line, e.g. blender"));
    m_programs->setMaximumHeight(90);
    whenForm->addRow(tr("Not while these run"), m_programs);
    layout->addWidget(when);

    auto *how = new QGroupBox(tr("How much of this machine"));
    m_how = how;
    auto *howForm = new QFormLayout(how);
    m_threads = new QSpinBox;
    m_threads->setRange(1, std::max(1, QThread::idealThreadCount()));
    m_threads->setValue(settings.threads);
    m_threads->setSuffix(tr(" of %1").arg(QThread::idealThreadCount()));
    howForm->addRow(tr("CPU threads"), m_threads);
    m_device = new QComboBox;
    m_device->setEditable(true);
    m_device->addItems(devices);
    if (m_device->findText(settings.device) < 0)
        m_device->addItem(settings.device);
    m_device->setCurrentText(settings.device);
    m_device->setToolTip(tr("auto: the first GPU where there is one, else the CPU; cuda:N: that GPU only"));
    howForm->addRow(tr("Train on"), m_device);
    auto *howNote = new QLabel(tr("Threads and device apply from the worker's next start."));
    howNote->setWordWrap(true);
    howForm->addRow(howNote);
    layout->addWidget(how);

    m_startAtLogin = new QCheckBox(tr("Start the worker at login"));
    m_startAtLogin->setChecked(settings.startAtLogin);
    layout->addWidget(m_startAtLogin);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);

    connect(m_pauseWhenActive, &QCheckBox::toggled, this, &WorkerSettingsDialog::updateEnabled);
    connect(m_useWindow, &QCheckBox::toggled, this, &WorkerSettingsDialog::updateEnabled);
    updateEnabled();
}

void WorkerSettingsDialog::updateEnabled()
{
    m_idleMinutes->setEnabled(m_pauseWhenActive->isChecked());
    m_windowStart->setEnabled(m_useWindow->isChecked());
    m_windowEnd->setEnabled(m_useWindow->isChecked());
}

void WorkerSettingsDialog::showWhenOnly()
{
    setWindowTitle(tr("When this machine trains"));
    m_how->hide();
    m_startAtLogin->hide();
    adjustSize();
}

WorkerSettings WorkerSettingsDialog::settings() const
{
    WorkerSettings s;
    s.pauseWhenActive = m_pauseWhenActive->isChecked();
    s.idleMinutes = m_idleMinutes->value();
    s.pauseOnBattery = m_pauseOnBattery->isChecked();
    s.useWindow = m_useWindow->isChecked();
    s.windowStart = m_windowStart->time();
    s.windowEnd = m_windowEnd->time();
    for (const QString &line : m_programs->toPlainText().split(u'\n')) {
        if (!line.trimmed().isEmpty())
            s.exclusivePrograms << line.trimmed();
    }
    s.threads = m_threads->value();
    s.device = m_device->currentText().trimmed().isEmpty() ? QStringLiteral("auto") : m_device->currentText().trimmed();
    s.startAtLogin = m_startAtLogin->isChecked();
    return s;
}

} // namespace flotilla::ui
