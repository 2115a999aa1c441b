#include "ui/WorkerDesk.h"

#include "ui/AppIcon.h"

#include <QApplication>
#include <QFormLayout>
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
    m_subtask = new QLabel;
    m_progress = new QProgressBar;
    m_progress->setRange(0, 100);
    m_hours = new QLabel;
    m_message = new QLabel;
    m_message->setWordWrap(true);
    form->addRow(tr("Status"), m_state);
    form->addRow(tr("Coordinator"), m_coordinator);
    form->addRow(tr("Current subtask"), m_subtask);
    form->addRow(tr("Progress"), m_progress);
    form->addRow(tr("Contributed"), m_hours);
    layout->addLayout(form);
    layout->addWidget(m_message);
    m_suspend = new QPushButton(tr("Suspend"));
    layout->addWidget(m_suspend);
    connect(m_suspend, &QPushButton::clicked, this, [this] { m_desk->setSuspended(!m_desk->suspended()); });
    connect(m_desk, &WorkerDesk::statusChanged, this, &WorkerWindow::refresh);

    if (QSystemTrayIcon::isSystemTrayAvailable()) {
        m_tray = new QSystemTrayIcon(appIcon(), this);
        auto *menu = new QMenu(this);
        menu->addAction(tr("Show"), this, [this] {
            show();
            raise();
        });
        menu->addAction(tr("Suspend / resume"), this, [this] { m_desk->setSuspended(!m_desk->suspended()); });
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

void WorkerWindow::refresh()
{
    const WorkerDeskStatus s = m_desk->status();
    m_state->setText(s.state);
    m_coordinator->setText(s.coordinator);
    m_subtask->setText(s.subtask.isEmpty() ? tr("none") : s.subtask);
    m_progress->setValue(s.progress < 0 ? 0 : int(100 * s.progress));
    m_progress->setEnabled(s.progress >= 0);
    m_hours->setText(tr("%1 hours on this machine · %2 subtasks this session").arg(s.hoursContributed, 0, 'f', 2)
                         .arg(s.subtasksDone));
    m_message->setText(s.message);
    m_suspend->setText(m_desk->suspended() ? tr("Resume") : tr("Suspend"));
    if (m_tray)
        m_tray->setToolTip(tr("Flotilla worker: %1").arg(s.state));
}

} // namespace flotilla::ui
