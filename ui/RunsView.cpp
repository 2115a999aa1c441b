#include "ui/RunsView.h"

#include "ui/Comparison.h"
#include "ui/Dashboard.h"
#include "ui/Dialogs.h"
#include "ui/Views.h"

#include <QDateTime>
#include <QFileDialog>
#include <QFileInfo>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QPushButton>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

constexpr int kReloadMs = 5000; // a run another process trains is reread this often

enum Column { Name, State, Rule, Model, Dataset, Accuracy, Wall, Cost, Savings, Started, Columns };

// A cell that sorts by a number of its own rather than by its text.
class SortItem : public QTableWidgetItem
{
public:
    SortItem(const QString &text, double key) : QTableWidgetItem(text), m_key(key)
    {
        setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    bool operator<(const QTableWidgetItem &other) const override
    {
        if (const auto *o = dynamic_cast<const SortItem *>(&other))
            return m_key < o->m_key;
        return QTableWidgetItem::operator<(other);
    }

private:
    double m_key;
};

QString describeModel(const JobSpec &job)
{
    if (job.model.kind == QLatin1String("torchscript"))
        return QStringLiteral("torchscript (%1)").arg(QFileInfo(job.model.path).fileName());
    return job.model.kind;
}

QString describeDataset(const JobSpec &job)
{
    if (job.dataset.path.isEmpty() || job.dataset.kind == QLatin1String("fashion-mnist"))
        return job.dataset.kind;
    return QStringLiteral("%1 (%2)").arg(job.dataset.kind, QFileInfo(job.dataset.path).fileName());
}

QString money(double usd)
{
    return QStringLiteral("$%1").arg(usd, 0, 'f', usd < 1.0 ? 4 : 2);
}

} // namespace

QString describeRule(const JobSpec &job)
{
    const AggregationSpec &a = job.aggregation;
    QString text = a.rule;
    if (a.rule == QLatin1String("vc-asgd") || a.rule == QLatin1String("staleness-aware"))
        text += QStringLiteral(" (α %1)").arg(a.alpha);
    if (a.buffer != 1)
        text += a.buffer == 0 ? QStringLiteral(", buffer auto") : QStringLiteral(", buffer %1").arg(a.buffer);
    return text;
}

// ---------------------------------------------------------------------------------------------

RunWindow::RunWindow(RunCatalog *catalog, const RunSummary &run, QWidget *parent)
    : QWidget(parent, Qt::Window), m_catalog(catalog), m_run(run)
{
    setWindowTitle(tr("%1 — Flotilla").arg(run.name));
    setAttribute(Qt::WA_DeleteOnClose);
    m_headline = new QLabel;
    m_headline->setWordWrap(true);
    m_headline->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_dashboard = new Dashboard;
    m_events = new EventsView;
    auto *tabs = new QTabWidget;
    tabs->addTab(m_dashboard, tr("Dashboard"));
    tabs->addTab(m_events, tr("Events"));
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_headline);
    layout->addWidget(tabs, 1);
    m_headline->setText(headline());

    connect(catalog, &RunCatalog::historyLoaded, this, &RunWindow::onHistory);
    connect(catalog, &RunCatalog::historyFailed, this, [this](const QString &dir, const QString &message) {
        if (dir == m_run.dir)
            m_headline->setText(headline() + u'\n' + tr("Cannot read this run: %1").arg(message));
    });
    catalog->loadHistory(run.dir);
    if (run.state == QLatin1String("running")) {
        m_reload = new QTimer(this);
        m_reload->setInterval(kReloadMs);
        connect(m_reload, &QTimer::timeout, this, [this] { m_catalog->loadHistory(m_run.dir); });
        m_reload->start();
    }
}

QString RunWindow::headline() const
{
    const RunSummary &r = m_run;
    QString text = tr("<b>%1</b> · %2 · %3 on %4 · %5 epochs of %6 shards · %7 workers")
                       .arg(r.name.toHtmlEscaped(), r.state, describeModel(r.job).toHtmlEscaped(),
                            describeDataset(r.job).toHtmlEscaped())
                       .arg(r.job.training.epochs)
                       .arg(r.job.training.shards)
                       .arg(r.job.fleet.workers);
    text += u'\n' + tr("%1 · best accuracy %2 · %3 · cost %4 (%5% saved) · %6")
                        .arg(describeRule(r.job),
                             r.bestAccuracy >= 0 ? QStringLiteral("%1%").arg(100.0 * r.bestAccuracy, 0, 'f', 2)
                                                 : QStringLiteral("—"),
                             formatDuration(r.wallMs), money(r.cost))
                        .arg(r.savingsPercent, 0, 'f', 0)
                        .arg(r.dir.toHtmlEscaped());
    if (r.state == QLatin1String("running"))
        text += u'\n' + tr("Another process is training this run: its charts are reread every %1 s.").arg(kReloadMs / 1000);
    return text.replace(u'\n', QStringLiteral("<br>"));
}

void RunWindow::onHistory(const QString &dir, const History &history)
{
    if (dir != m_run.dir)
        return;
    m_dashboard->reset();
    m_dashboard->loadHistory(history);
    m_events->clear();
    m_events->addEvents(history.events);
    // A run that finished meanwhile stops being reread.
    if (m_reload && !history.events.isEmpty() && history.events.last().is(EventKind::JobFinished))
        m_reload->stop();
    if (!m_loaded) {
        m_loaded = true;
        Q_EMIT loadedOnce();
    }
}

// ---------------------------------------------------------------------------------------------

RunsView::RunsView(RunCatalog *catalog, QWidget *parent) : QWidget(parent), m_catalog(catalog)
{
    askText = [this](const QString &title, const QString &label, const QString &initial) {
        return QInputDialog::getText(this, title, label, QLineEdit::Normal, initial);
    };
    askFolder = [this] { return QFileDialog::getExistingDirectory(this, tr("Open a run folder")); };

    m_open = new QPushButton(tr("Open"));
    m_open->setToolTip(tr("Show the run's dashboard and events from its store (Enter, or double-click)"));
    m_compare = new QPushButton(tr("Compare"));
    m_compare->setToolTip(tr("Select two or more runs (Ctrl- or Shift-click) to draw their curves on one chart"));
    m_rename = new QPushButton(tr("Rename…"));
    m_delete = new QPushButton(tr("Delete…"));
    auto *add = new QPushButton(tr("Add run folder…"));
    add->setToolTip(tr("List a run folder from elsewhere (another disk, a colleague's copy)"));
    auto *reload = new QPushButton(tr("Refresh"));
    auto *bar = new QHBoxLayout;
    for (QPushButton *b : {m_open, m_compare, m_rename, m_delete})
        bar->addWidget(b);
    bar->addStretch();
    bar->addWidget(add);
    bar->addWidget(reload);

    m_table = new QTableWidget(0, Columns);
    m_table->setHorizontalHeaderLabels({tr("Run"), tr("State"), tr("Rule"), tr("Model"), tr("Data set"),
                                        tr("Best accuracy"), tr("Wall time"), tr("Cost"), tr("Savings"), tr("Started")});
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setAlternatingRowColors(true);
    m_table->setSortingEnabled(true);
    m_status = new QLabel;

    auto *layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(m_table, 1);
    layout->addWidget(m_status);

    connect(m_catalog, &RunCatalog::runsListed, this, &RunsView::onListed);
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &RunsView::updateButtons);
    connect(m_table, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
        if (QTableWidgetItem *item = m_table->item(row, Name))
            open(item->data(Qt::UserRole).toString());
    });
    connect(m_open, &QPushButton::clicked, this, [this] {
        for (const QString &dir : selectedDirs())
            open(dir);
    });
    connect(m_compare, &QPushButton::clicked, this, [this] { compare(selectedDirs()); });
    connect(m_rename, &QPushButton::clicked, this, [this] {
        if (selectedDirs().size() == 1)
            report(renameRun(selectedDirs().first()));
    });
    connect(m_delete, &QPushButton::clicked, this, [this] {
        for (const QString &dir : selectedDirs())
            if (auto r = deleteRun(dir); !r) {
                report(r);
                break;
            }
    });
    connect(add, &QPushButton::clicked, this, [this] {
        const QString dir = askFolder();
        if (!dir.isEmpty())
            report(addFolder(dir));
    });
    connect(reload, &QPushButton::clicked, this, &RunsView::refresh);
    updateButtons();
}

void RunsView::refresh()
{
    m_listing.start();
    m_status->setText(tr("Reading the run folders…"));
    m_catalog->refresh();
}

void RunsView::onListed(const QList<RunSummary> &runs)
{
    const QStringList selected = selectedDirs();
    m_runs = runs;
    m_table->setSortingEnabled(false);
    m_table->setRowCount(0);
    m_table->setRowCount(int(runs.size()));
    for (int row = 0; row < runs.size(); ++row) {
        const RunSummary &r = runs[row];
        auto *name = new QTableWidgetItem(r.name);
        name->setData(Qt::UserRole, r.dir);
        name->setToolTip(r.dir);
        if (r.current) {
            QFont bold = name->font();
            bold.setBold(true);
            name->setFont(bold);
            name->setToolTip(tr("%1\nThe job this window runs").arg(r.dir));
        }
        m_table->setItem(row, Name, name);
        auto *state = new QTableWidgetItem(r.state);
        if (!r.error.isEmpty())
            state->setToolTip(r.error);
        m_table->setItem(row, State, state);
        if (!r.error.isEmpty()) {
            auto *why = new QTableWidgetItem(r.error);
            m_table->setItem(row, Rule, why);
            continue;
        }
        m_table->setItem(row, Rule, new QTableWidgetItem(describeRule(r.job)));
        m_table->setItem(row, Model, new QTableWidgetItem(describeModel(r.job)));
        m_table->setItem(row, Dataset, new QTableWidgetItem(describeDataset(r.job)));
        m_table->setItem(row, Accuracy,
                         new SortItem(r.bestAccuracy >= 0 ? QStringLiteral("%1%").arg(100.0 * r.bestAccuracy, 0, 'f', 2)
                                                          : QStringLiteral("—"),
                                      r.bestAccuracy));
        m_table->setItem(row, Wall, new SortItem(formatDuration(r.wallMs), double(r.wallMs)));
        m_table->setItem(row, Cost, new SortItem(money(r.cost), r.cost));
        m_table->setItem(row, Savings, new SortItem(QStringLiteral("%1%").arg(r.savingsPercent, 0, 'f', 0), r.savingsPercent));
        m_table->setItem(row, Started,
                         new QTableWidgetItem(QDateTime::fromMSecsSinceEpoch(r.createdMs).toString(QStringLiteral("yyyy-MM-dd HH:mm"))));
    }
    m_table->setSortingEnabled(true);
    m_table->sortItems(Started, Qt::DescendingOrder);
    select(selected);
    m_lastListingMs = m_listing.isValid() ? m_listing.elapsed() : -1;
    m_status->setText(m_message.isEmpty() ? statusText() : m_message + QStringLiteral(" · ") + statusText());
    m_message.clear();
    updateButtons();
    Q_EMIT listed(int(runs.size()));
}

QString RunsView::statusText() const
{
    QString text = runs().isEmpty() ? tr("No runs yet: a job started with Start, or `flotilla train`, is listed here.")
                                    : m_runs.size() == 1 ? tr("1 run") : tr("%1 runs").arg(m_runs.size());
    if (m_lastListingMs >= 0 && !m_runs.isEmpty())
        text += tr(", read in %1 ms").arg(m_lastListingMs);
    return text;
}

QStringList RunsView::selectedDirs() const
{
    QStringList dirs;
    for (const QModelIndex &index : m_table->selectionModel()->selectedRows(Name))
        dirs << m_table->item(index.row(), Name)->data(Qt::UserRole).toString();
    return dirs;
}

QStringList RunsView::shownDirs() const
{
    QStringList dirs;
    for (int row = 0; row < m_table->rowCount(); ++row)
        dirs << m_table->item(row, Name)->data(Qt::UserRole).toString();
    return dirs;
}

void RunsView::select(const QStringList &dirs)
{
    m_table->clearSelection();
    const auto mode = m_table->selectionMode();
    m_table->setSelectionMode(QAbstractItemView::MultiSelection);
    for (int row = 0; row < m_table->rowCount(); ++row)
        if (dirs.contains(m_table->item(row, Name)->data(Qt::UserRole).toString()))
            m_table->selectRow(row);
    m_table->setSelectionMode(mode);
}

void RunsView::updateButtons()
{
    const int n = int(selectedDirs().size());
    m_open->setEnabled(n >= 1);
    m_compare->setEnabled(n >= 2);
    m_rename->setEnabled(n == 1);
    m_delete->setEnabled(n >= 1);
}

void RunsView::report(const Result<void> &r)
{
    if (!r)
        m_status->setText(r.error());
}

const RunSummary *RunsView::find(const QString &dir) const
{
    for (const RunSummary &r : m_runs)
        if (r.dir == dir)
            return &r;
    return nullptr;
}

RunWindow *RunsView::open(const QString &dir)
{
    const RunSummary *run = find(dir);
    if (!run)
        return nullptr;
    if (run->current) {
        Q_EMIT currentRunRequested();
        return nullptr;
    }
    if (!run->error.isEmpty()) {
        m_status->setText(tr("Cannot open '%1': %2").arg(run->name, run->error));
        return nullptr;
    }
    QPointer<RunWindow> &window = m_windows[dir];
    if (!window) {
        window = new RunWindow(m_catalog, *run, this);
        window->resize(1300, 850);
    }
    window->show();
    window->raise();
    window->activateWindow();
    return window;
}

ComparisonWindow *RunsView::compare(const QStringList &dirs)
{
    QList<RunSummary> runs;
    for (const QString &dir : dirs)
        if (const RunSummary *r = find(dir); r && r->error.isEmpty())
            runs << *r;
    if (runs.size() < 2) {
        m_status->setText(tr("Select two or more readable runs to compare them."));
        return nullptr;
    }
    auto *window = new ComparisonWindow(m_catalog, runs, this);
    window->setAttribute(Qt::WA_DeleteOnClose);
    window->resize(1100, 700);
    window->show();
    return window;
}

Result<void> RunsView::addFolder(const QString &dir)
{
    auto r = m_catalog->addFolder(dir);
    if (r) {
        m_message = tr("Added %1").arg(dir);
        refresh();
    }
    return r;
}

Result<void> RunsView::renameRun(const QString &dir)
{
    const RunSummary *run = find(dir);
    if (!run)
        return fail(tr("'%1' is not listed").arg(dir));
    const QString name = askText(tr("Rename run"), tr("New name of the run folder:"), run->name);
    if (name.isEmpty() || name == run->name)
        return {};
    auto renamed = m_catalog->rename(dir, name);
    if (!renamed)
        return renamed.takeError();
    if (QPointer<RunWindow> w = m_windows[dir])
        w->close();
    m_windows.erase(dir);
    m_message = tr("Renamed to %1").arg(name);
    refresh();
    return {};
}

Result<void> RunsView::deleteRun(const QString &dir)
{
    const RunSummary *run = find(dir);
    if (!run)
        return fail(tr("'%1' is not listed").arg(dir));
    if (!dialogs::confirm(this, tr("Delete the run '%1'?\n\nIts folder %2 and everything in it (store, checkpoints, trained "
                            "model) are deleted; this cannot be undone.")
                             .arg(run->name, run->dir)))
        return {};
    if (auto r = m_catalog->remove(dir); !r)
        return r;
    if (QPointer<RunWindow> w = m_windows[dir])
        w->close();
    m_windows.erase(dir);
    m_message = tr("Deleted %1").arg(run->name);
    refresh();
    return {};
}

} // namespace flotilla::ui
