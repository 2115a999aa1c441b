#include "ui/Views.h"

#include <QColor>
#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

constexpr int kMaxEvents = 20000;

QTableWidget *makeTable(const QStringList &headers)
{
    auto *t = new QTableWidget(0, int(headers.size()));
    t->setHorizontalHeaderLabels(headers);
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->setSelectionMode(QAbstractItemView::SingleSelection);
    t->verticalHeader()->hide();
    t->horizontalHeader()->setStretchLastSection(true);
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    t->setAlternatingRowColors(true);
    return t;
}

QTableWidgetItem *cell(const QString &text)
{
    return new QTableWidgetItem(text);
}

QTableWidgetItem *number(double value, int decimals = 0)
{
    auto *item = new QTableWidgetItem(QString::number(value, 'f', decimals));
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

QString clock(qint64 ms)
{
    return QDateTime::fromMSecsSinceEpoch(ms).toString(QStringLiteral("HH:mm:ss.zzz"));
}

} // namespace

WorkersView::WorkersView(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *bar = new QHBoxLayout;
    m_revoke = new QPushButton(tr("Revoke…"));
    m_revoke->setToolTip(tr("Refuse this worker's certificate from now on and close its connection"));
    m_release = new QPushButton(tr("Release"));
    m_release->setToolTip(tr("Give this quarantined worker subtasks again (its results are still screened)"));
    m_release->setEnabled(false);
    auto *token = new QPushButton(tr("Join token…"));
    bar->addWidget(token);
    bar->addWidget(m_revoke);
    bar->addWidget(m_release);
    bar->addStretch();
    layout->addLayout(bar);
    m_table = makeTable({tr("Name"), tr("Address"), tr("Device"), tr("Threads"), tr("Samples/s"), tr("Current subtask"),
                     tr("Progress"), tr("Leases done"), tr("Leases lost"), tr("Preemptions"), tr("Instance type"),
                     tr("Price class"), tr("Cost (USD)"), tr("Trust"), tr("Rejected"), tr("Status")});
    layout->addWidget(m_table);
    connect(token, &QPushButton::clicked, this, &WorkersView::tokenRequested);
    connect(m_revoke, &QPushButton::clicked, this, [this] {
        if (!selectedWorker().isEmpty())
            Q_EMIT revokeRequested(selectedWorker());
    });
    connect(m_release, &QPushButton::clicked, this, [this] {
        const QString name = selectedWorker();
        for (const WorkerRow &w : std::as_const(m_rows))
            if (w.name == name && w.quarantined)
                Q_EMIT releaseRequested(w.id);
    });
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &WorkersView::updateButtons);
}

void WorkersView::updateButtons()
{
    const QString name = selectedWorker();
    bool quarantined = false;
    for (const WorkerRow &w : std::as_const(m_rows))
        quarantined = quarantined || (w.name == name && w.quarantined);
    m_revoke->setEnabled(!m_rows.isEmpty());
    m_release->setEnabled(quarantined);
}

QString WorkersView::selectedWorker() const
{
    const auto rows = m_table->selectionModel()->selectedRows();
    return rows.isEmpty() ? QString() : m_table->item(rows.first().row(), 0)->text();
}

void WorkersView::setWorkers(const QList<WorkerRow> &workers)
{
    const QString selected = selectedWorker();
    m_table->setRowCount(int(workers.size()));
    for (int r = 0; r < workers.size(); ++r) {
        const WorkerRow &w = workers[r];
        m_table->setItem(r, 0, cell(w.name));
        m_table->setItem(r, 1, cell(w.address));
        m_table->setItem(r, 2, cell(w.device));
        m_table->setItem(r, 3, number(w.threads));
        m_table->setItem(r, 4, number(w.samplesPerSecond));
        m_table->setItem(r, 5, cell(w.subtask.isEmpty() ? tr("idle") : w.subtask));
        auto *bar = qobject_cast<QProgressBar *>(m_table->cellWidget(r, 6));
        if (!bar) {
            bar = new QProgressBar;
            bar->setRange(0, 100);
            m_table->setCellWidget(r, 6, bar);
        }
        bar->setValue(w.progress < 0 ? 0 : int(100 * w.progress));
        bar->setEnabled(w.progress >= 0);
        m_table->setItem(r, 7, number(w.leasesCompleted));
        m_table->setItem(r, 8, number(w.leasesLost));
        m_table->setItem(r, 9, number(w.preemptions));
        m_table->setItem(r, 10, cell(w.instanceType));
        m_table->setItem(r, 11, cell(w.priceClass));
        auto *cost = number(w.cost, 6);
        cost->setToolTip(tr("$%1 at on-demand prices").arg(w.costOnDemand, 0, 'f', 6));
        m_table->setItem(r, 12, cost);
        auto *trust = number(w.trust, 2);
        trust->setToolTip(tr("Starts at 1; each rejected result halves it, each accepted one adds 0.05"));
        m_table->setItem(r, 13, trust);
        m_table->setItem(r, 14, number(w.rejected));
        auto *status = cell(w.quarantined ? tr("quarantined") : w.online ? tr("online") : tr("offline"));
        if (w.quarantined) {
            status->setToolTip(w.quarantineReason);
            status->setForeground(QColor(0xb0, 0x30, 0x20));
        }
        m_table->setItem(r, 15, status);
        if (w.name == selected)
            m_table->selectRow(r);
    }
    m_rows = workers;
    updateButtons();
}

SubtasksView::SubtasksView(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *bar = new QHBoxLayout;
    m_state = new QComboBox;
    m_state->addItems({tr("all states"), QStringLiteral("queued"), QStringLiteral("leased"), QStringLiteral("done")});
    m_filter = new QLineEdit;
    m_filter->setPlaceholderText(tr("filter: epoch, shard or text in the history"));
    auto *refresh = new QPushButton(tr("Refresh"));
    bar->addWidget(m_state);
    bar->addWidget(m_filter);
    bar->addWidget(refresh);
    layout->addLayout(bar);
    m_table = makeTable({tr("Subtask"), tr("Epoch"), tr("Shard"), tr("Positions"), tr("State"), tr("Attempts"),
                     tr("Assimilation"), tr("History")});
    layout->addWidget(m_table);
    connect(refresh, &QPushButton::clicked, this, &SubtasksView::refreshRequested);
    connect(m_filter, &QLineEdit::textChanged, this, &SubtasksView::apply);
    connect(m_state, &QComboBox::currentIndexChanged, this, &SubtasksView::apply);
}

void SubtasksView::setSubtasks(const QList<SubtaskRow> &subtasks)
{
    m_rows = subtasks;
    m_table->setRowCount(int(subtasks.size()));
    for (int r = 0; r < subtasks.size(); ++r) {
        const SubtaskRow &s = subtasks[r];
        m_table->setItem(r, 0, number(double(s.id)));
        m_table->setItem(r, 1, number(s.epoch + 1));
        m_table->setItem(r, 2, number(s.shard));
        m_table->setItem(r, 3, cell(QStringLiteral("%1–%2").arg(s.begin).arg(s.end)));
        m_table->setItem(r, 4, cell(s.state));
        m_table->setItem(r, 5, number(s.attempts));
        m_table->setItem(r, 6, cell(s.assimilatedSeq > 0 ? QString::number(s.assimilatedSeq) : QString()));
        m_table->setItem(r, 7, cell(s.history));
    }
    apply();
}

void SubtasksView::apply()
{
    const QString text = m_filter->text().trimmed();
    const QString state = m_state->currentIndex() == 0 ? QString() : m_state->currentText();
    for (int r = 0; r < m_rows.size(); ++r) {
        const SubtaskRow &s = m_rows[r];
        const bool stateOk = state.isEmpty() || s.state == state;
        const bool textOk = text.isEmpty() || QString::number(s.epoch + 1) == text || QString::number(s.shard) == text
                            || s.history.contains(text, Qt::CaseInsensitive);
        m_table->setRowHidden(r, !(stateOk && textOk));
    }
}

EventsView::EventsView(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *bar = new QHBoxLayout;
    m_kind = new QComboBox;
    m_kind->addItem(tr("all events"));
    // Every kind a job records (job/EventKind.h), each with its meaning as a tooltip.
    for (const EventKind k : jobEventKinds()) {
        m_kind->addItem(eventName(k));
        m_kind->setItemData(m_kind->count() - 1, eventInfo(k).meaning, Qt::ToolTipRole);
    }
    m_filter = new QLineEdit;
    m_filter->setPlaceholderText(tr("filter: text in the event"));
    bar->addWidget(m_kind);
    bar->addWidget(m_filter);
    layout->addLayout(bar);
    m_table = makeTable({tr("Time"), tr("Event"), tr("Worker"), tr("Subtask"), tr("Lease"), tr("Detail")});
    layout->addWidget(m_table);
    auto reapply = [this] {
        for (int r = 0; r < m_table->rowCount(); ++r)
            apply(r);
    };
    connect(m_filter, &QLineEdit::textChanged, this, reapply);
    connect(m_kind, &QComboBox::currentIndexChanged, this, reapply);
}

void EventsView::clear()
{
    m_table->setRowCount(0);
}

void EventsView::addEvent(const EventRecord &e)
{
    if (m_table->rowCount() >= kMaxEvents)
        m_table->removeRow(0);
    const int r = m_table->rowCount();
    m_table->insertRow(r);
    fillRow(r, e);
}

void EventsView::addEvents(const QList<EventRecord> &events)
{
    const QList<EventRecord> kept = events.mid(std::max<qsizetype>(0, events.size() - kMaxEvents));
    const int drop = std::max(0, m_table->rowCount() + int(kept.size()) - kMaxEvents);
    m_table->setUpdatesEnabled(false);
    if (drop > 0)
        m_table->model()->removeRows(0, std::min(drop, m_table->rowCount()));
    const int first = m_table->rowCount();
    m_table->setRowCount(first + int(kept.size()));
    for (int i = 0; i < kept.size(); ++i)
        fillRow(first + i, kept[i]);
    m_table->setUpdatesEnabled(true);
}

void EventsView::fillRow(int r, const EventRecord &e)
{
    m_table->setItem(r, 0, cell(clock(e.atMs)));
    m_table->setItem(r, 1, cell(e.kind));
    m_table->setItem(r, 2, cell(e.workerId ? QString::number(e.workerId) : QString()));
    m_table->setItem(r, 3, cell(e.subtaskId ? QString::number(e.subtaskId) : QString()));
    m_table->setItem(r, 4, cell(e.leaseId ? QString::number(e.leaseId) : QString()));
    m_table->setItem(r, 5, cell(e.detail));
    const std::optional<EventKind> kind = eventKindNamed(e.kind);
    if (kind && eventInfo(*kind).level == EventLevel::Trouble)
        m_table->item(r, 1)->setForeground(QColor(0xc0, 0x39, 0x2b));
    apply(r);
}

void EventsView::setFilter(const QString &kind, const QString &text)
{
    const int index = m_kind->findText(kind);
    m_kind->setCurrentIndex(index < 0 ? 0 : index);
    m_filter->setText(text);
}

int EventsView::visibleRows() const
{
    int n = 0;
    for (int r = 0; r < m_table->rowCount(); ++r)
        n += m_table->isRowHidden(r) ? 0 : 1;
    return n;
}

void EventsView::apply(int r)
{
    const QString kind = m_kind->currentIndex() == 0 ? QString() : m_kind->currentText();
    const QString text = m_filter->text().trimmed();
    bool show = kind.isEmpty() || m_table->item(r, 1)->text() == kind;
    if (show && !text.isEmpty()) {
        bool any = false;
        for (int c = 0; c < m_table->columnCount() && !any; ++c)
            any = m_table->item(r, c) && m_table->item(r, c)->text().contains(text, Qt::CaseInsensitive);
        show = any;
    }
    m_table->setRowHidden(r, !show);
}

} // namespace flotilla::ui
