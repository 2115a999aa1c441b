#include "ui/JobsView.h"

#include <QDateTime>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

enum Column { Id, Name, Submitter, State, Priority, Weight, WorkerTime, Submitted, Message, Columns };

bool ended(const QString &state)
{
    return state == QLatin1String("finished") || state == QLatin1String("failed")
           || state == QLatin1String("cancelled");
}

} // namespace

JobsView::JobsView(ControlSession *session, QWidget *parent) : QWidget(parent), m_session(session)
{
    m_table = new QTableWidget(0, Columns);
    m_table->setHorizontalHeaderLabels({tr("ID"), tr("Job"), tr("Submitter"), tr("State"), tr("Priority"), tr("Weight"),
                                        tr("Worker time"), tr("Submitted"), tr("Message")});
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_summary = new QLabel;
    m_summary->setWordWrap(true);

    auto *reload = new QPushButton(tr("Refresh"));
    m_pause = new QPushButton(tr("Pause"));
    m_resume = new QPushButton(tr("Resume"));
    m_cancel = new QPushButton(tr("Cancel job"));
    m_priority = new QPushButton(tr("Priority…"));
    m_weight = new QPushButton(tr("Weight…"));
    m_download = new QPushButton(tr("Download…"));
    m_pause->setToolTip(tr("Stop the job until it is resumed; a running job keeps its run folder"));
    m_cancel->setToolTip(tr("End the job for good"));
    m_priority->setToolTip(tr("Higher priorities start first"));
    m_weight->setToolTip(tr("Its share of the workers beside the other running jobs"));
    m_download->setToolTip(tr("The trained model (model.pt), metrics, log and a copy of the job's store"));
    auto *buttons = new QHBoxLayout;
    for (QPushButton *b : {reload, m_pause, m_resume, m_cancel, m_priority, m_weight, m_download})
        buttons->addWidget(b);
    buttons->addStretch(1);
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_summary);
    layout->addWidget(m_table, 1);
    layout->addLayout(buttons);

    askFolder = [this](const QString &title) { return QFileDialog::getExistingDirectory(this, title); };
    askNumber = [this](const QString &label, double current) -> std::optional<double> {
        bool ok = false;
        const double value = QInputDialog::getDouble(this, tr("Job"), label, current, -1e6, 1e6, 2, &ok);
        return ok ? std::optional<double>(value) : std::nullopt;
    };

    connect(reload, &QPushButton::clicked, this, &JobsView::refresh);
    connect(m_pause, &QPushButton::clicked, this, [this] { act(QStringLiteral("pause")); });
    connect(m_resume, &QPushButton::clicked, this, [this] { act(QStringLiteral("resume")); });
    connect(m_cancel, &QPushButton::clicked, this, [this] { act(QStringLiteral("cancel")); });
    connect(m_priority, &QPushButton::clicked, this, [this] { act(QStringLiteral("priority")); });
    connect(m_weight, &QPushButton::clicked, this, [this] { act(QStringLiteral("weight")); });
    connect(m_download, &QPushButton::clicked, this, [this] { act(QStringLiteral("download")); });
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &JobsView::updateButtons);
    connect(m_session, &ControlSession::jobsListed, this, &JobsView::setJobs);
    // A command's answer changes the queue: read it again.
    connect(m_session, &ControlSession::commandAnswered, this, [this] { QTimer::singleShot(300, this, &JobsView::refresh); });
    // Read every 3 s while the tab is in view.
    m_timer = new QTimer(this);
    m_timer->setInterval(3000);
    connect(m_timer, &QTimer::timeout, this, [this] {
        if (isVisible())
            refresh();
    });
    m_timer->start();
    m_summary->setText(tr("The fleet's jobs, read from the coordinator."));
    updateButtons();
}

void JobsView::showEvent(QShowEvent *event)
{
    QWidget::showEvent(event);
    refresh();
}

void JobsView::refresh()
{
    m_session->refreshJobs();
}

void JobsView::setJobs(const QList<QueueRow> &jobs)
{
    const qint64 selected = selectedJob();
    m_rows = jobs;
    m_table->setSortingEnabled(false);
    m_table->setRowCount(int(jobs.size()));
    int running = 0;
    int queued = 0;
    for (int row = 0; row < jobs.size(); ++row) {
        const QueueRow &j = jobs.at(row);
        running += j.state == QLatin1String("running");
        queued += j.state == QLatin1String("queued");
        auto set = [&](int column, const QString &text, const QVariant &sort = {}) {
            auto *item = new QTableWidgetItem(text);
            if (sort.isValid())
                item->setData(Qt::UserRole, sort);
            m_table->setItem(row, column, item);
        };
        set(Id, QString::number(j.id), j.id);
        set(Name, j.name);
        set(Submitter, j.submitter);
        set(State, j.state);
        set(Priority, QString::number(j.priority));
        set(Weight, QString::number(j.weight, 'g', 4));
        set(WorkerTime, tr("%1 min").arg(j.workerSeconds / 60.0, 0, 'f', 1));
        set(Submitted, QDateTime::fromMSecsSinceEpoch(j.submittedMs).toString(QStringLiteral("yyyy-MM-dd HH:mm")));
        set(Message, j.message);
    }
    m_summary->setText(tr("%n job(s) on this fleet: ", nullptr, int(jobs.size()))
                       + tr("%1 running, %2 queued.").arg(running).arg(queued));
    if (selected)
        selectJob(selected);
    updateButtons();
}

qint64 JobsView::selectedJob() const
{
    const auto rows = m_table->selectionModel()->selectedRows();
    if (rows.isEmpty())
        return 0;
    const QTableWidgetItem *item = m_table->item(rows.first().row(), Id);
    return item ? item->data(Qt::UserRole).toLongLong() : 0;
}

void JobsView::selectJob(qint64 id)
{
    for (int row = 0; row < m_table->rowCount(); ++row)
        if (const QTableWidgetItem *item = m_table->item(row, Id); item && item->data(Qt::UserRole).toLongLong() == id) {
            m_table->selectRow(row);
            return;
        }
}

const QueueRow *JobsView::selectedRow() const
{
    const qint64 id = selectedJob();
    for (const QueueRow &r : m_rows)
        if (r.id == id)
            return &r;
    return nullptr;
}

void JobsView::updateButtons()
{
    const QueueRow *row = selectedRow();
    const bool live = row && !ended(row->state);
    m_pause->setEnabled(live && row->state != QLatin1String("paused"));
    m_resume->setEnabled(live && row->state == QLatin1String("paused"));
    m_cancel->setEnabled(live);
    m_priority->setEnabled(row);
    m_weight->setEnabled(row);
    m_download->setEnabled(row && row->state != QLatin1String("queued"));
}

void JobsView::act(const QString &action)
{
    const QueueRow *row = selectedRow();
    if (!row)
        return;
    const qint64 id = row->id;
    if (action == QLatin1String("download")) {
        const QString folder = askFolder(tr("Download job %1 '%2' into").arg(id).arg(row->name));
        if (!folder.isEmpty())
            m_session->downloadJob(id, folder);
        return;
    }
    if (action == QLatin1String("priority") || action == QLatin1String("weight")) {
        const bool priority = action == QLatin1String("priority");
        const auto value = askNumber(priority ? tr("Priority of job %1 (higher starts first)").arg(id)
                                              : tr("Weight of job %1 (its share of the workers)").arg(id),
                                     priority ? double(row->priority) : row->weight);
        if (value)
            m_session->manageJob(id, action, *value);
        return;
    }
    m_session->manageJob(id, action);
}

} // namespace flotilla::ui
