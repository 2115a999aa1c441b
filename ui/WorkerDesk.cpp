#include "ui/WorkerDesk.h"

#include "ui/AppIcon.h"
#include "ui/WorkerSettingsDialog.h"

#include <QApplication>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QPainter>
#include <QPixmap>
#include <QProgressBar>
#include <QPushButton>
#include <QStyle>
#include <QSystemTrayIcon>
#include <QVBoxLayout>

namespace flotilla::ui {

WorkerWindow::WorkerWindow(WorkerDesk *desk, QWidget *parent) : QWidget(parent), m_desk(desk)
{
    setWindowTitle(tr("Flotilla — worker"));
    auto *layout = new QVBoxLayout(this);
    auto *form = new QFormLayout;
    m_state = new QLabel;
    QFont big = m_state->font();
    big.setPointSizeF(big.pointSizeF() * 1.3);
    big.setBold(true);
    m_state->setFont(big);
    m_coordinator = new QLabel;
    m_job = new QLabel;
    m_policy = new QLabel;
    m_policy->setWordWrap(true);
    m_subtask = new QLabel;
    m_progress = new QProgressBar;
    m_progress->setRange(0, 100);
    m_hours = new QLabel;
    m_message = new QLabel;
    m_message->setWordWrap(true);
    form->addRow(tr("Status"), m_state);
    form->addRow(tr("Coordinator"), m_coordinator);
    form->addRow(tr("Job"), m_job);
    form->addRow(tr("When it runs"), m_policy);
    form->addRow(tr("Current subtask"), m_subtask);
    form->addRow(tr("Progress"), m_progress);
    form->addRow(tr("Contributed"), m_hours);
    layout->addLayout(form);
    layout->addWidget(m_message);
    m_suspend = new QPushButton(tr("Suspend"));
    m_suspendHour = new QPushButton(tr("Suspend for 1 hour"));
    m_settings = new QPushButton(tr("Settings…"));
    auto *buttons = new QHBoxLayout;
    buttons->addWidget(m_suspend);
    buttons->addWidget(m_suspendHour);
    buttons->addStretch();
    buttons->addWidget(m_settings);
    layout->addLayout(buttons);
    connect(m_suspend, &QPushButton::clicked, this, [this] { m_desk->setSuspended(!m_desk->suspended()); });
    connect(m_suspendHour, &QPushButton::clicked, this, [this] { m_desk->suspendFor(60); });
    editSettings = [this](const WorkerSettings &current, const QStringList &devices) -> std::optional<WorkerSettings> {
        WorkerSettingsDialog dialog(current, devices, this);
        if (dialog.exec() != QDialog::Accepted)
            return std::nullopt;
        return dialog.settings();
    };
    connect(m_settings, &QPushButton::clicked, this, [this] {
        if (const auto chosen = editSettings(m_desk->settings(), m_desk->deviceChoices()))
            m_desk->setSettings(*chosen);
    });
    connect(m_desk, &WorkerDesk::statusChanged, this, &WorkerWindow::refresh);

    if (QSystemTrayIcon::isSystemTrayAvailable()) {
        m_tray = new QSystemTrayIcon(appIcon(), this);
        auto *menu = new QMenu(this);
        menu->addAction(tr("Show"), this, [this] {
            show();
            raise();
        });
        menu->addAction(tr("Suspend / resume"), this, [this] { m_desk->setSuspended(!m_desk->suspended()); });
        menu->addAction(tr("Suspend for 1 hour"), this, [this] { m_desk->suspendFor(60); });
        menu->addAction(tr("Quit"), qApp, &QApplication::quit);
        m_tray->setContextMenu(menu);
        m_tray->show();
    }
    refresh();
}

QString WorkerWindow::stateText() const
{
    return m_state->text();
}

QString WorkerWindow::policyText() const
{
    return m_policy->text();
}

QString WorkerWindow::contributionText() const
{
    return m_hours->text();
}

void WorkerWindow::refresh()
{
    const WorkerDeskStatus s = m_desk->status();
    m_state->setText(s.state);
    m_coordinator->setText(s.coordinator);
    m_job->setText(s.job.isEmpty() ? tr("not known yet") : s.job);
    m_policy->setText(s.policy.isEmpty() ? tr("now") : s.policy);
    m_subtask->setText(s.subtask.isEmpty() ? tr("none") : s.subtask);
    m_progress->setValue(s.progress < 0 ? 0 : int(100 * s.progress));
    m_progress->setEnabled(s.progress >= 0);
    m_hours->setText(tr("%1 h today · %2 h in all on this machine · %3 subtasks this session")
                         .arg(s.hoursToday, 0, 'f', 2)
                         .arg(s.hoursContributed, 0, 'f', 2)
                         .arg(s.subtasksDone));
    m_message->setText(s.message);
    m_suspend->setText(m_desk->suspended() ? tr("Resume") : tr("Suspend"));
    if (m_tray)
        m_tray->setToolTip(s.policy.isEmpty() || s.state != QLatin1String("suspended") ? tr("Flotilla worker: %1").arg(s.state)
                                                                       : tr("Flotilla worker: %1 (%2)").arg(s.state, s.policy));
}

} // namespace flotilla::ui
