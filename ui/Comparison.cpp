#include "ui/Comparison.h"

#include "ui/Dialogs.h"

#include "common/AtomicFile.h"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLineSeries>
#include <QPushButton>
#include <QSignalBlocker>
#include <QValueAxis>
#include <QVBoxLayout>

#include <cmath>

namespace flotilla::ui {

namespace {

// The most points a run's training-loss curve draws; longer runs are thinned evenly.
constexpr qsizetype kMaxLossPoints = 1500;
// The most settings a legend entry names.
constexpr qsizetype kLegendPhrases = 3;

struct TimeUnit
{
    double msPer;
    QString name;
};

TimeUnit timeUnitFor(double seconds)
{
    if (seconds < 180)
        return {1000.0, QObject::tr("seconds since the run started")};
    if (seconds < 3 * 3600)
        return {60000.0, QObject::tr("minutes since the run started")};
    return {3600000.0, QObject::tr("hours since the run started")};
}

QString metricTitle(ComparisonWindow::Metric m)
{
    switch (m) {
    case ComparisonWindow::Metric::TestAccuracy:
        return QObject::tr("test accuracy (%)");
    case ComparisonWindow::Metric::TestLoss:
        return QObject::tr("test loss");
    case ComparisonWindow::Metric::TrainingLoss:
        return QObject::tr("training loss (moving average)");
    case ComparisonWindow::Metric::Named:
        break;
    }
    return {};
}

} // namespace

ComparisonWindow::ComparisonWindow(RunCatalog *catalog, const QList<RunSummary> &runs, QWidget *parent)
    : QWidget(parent, Qt::Window), m_catalog(catalog), m_runs(runs)
{
    QStringList names;
    QList<JobSpec> jobs;
    for (const RunSummary &r : runs) {
        names << r.name;
        jobs << r.job;
    }
    m_differences = differences(jobs);
    setWindowTitle(tr("Compare %1 — Flotilla").arg(names.join(QStringLiteral(", "))));

    m_metricBox = new QComboBox;
    m_metricBox->addItems({tr("Test accuracy"), tr("Test loss"), tr("Training loss")});
    m_axisBox = new QComboBox;
    m_axisBox->addItems({tr("against time"), tr("against version")});
    auto *png = new QPushButton(tr("Export PNG…"));
    auto *csv = new QPushButton(tr("Export CSV…"));
    auto *bar = new QHBoxLayout;
    bar->addWidget(m_metricBox);
    bar->addWidget(m_axisBox);
    bar->addStretch();
    bar->addWidget(png);
    bar->addWidget(csv);

    m_chart = new QChart;
    m_chart->legend()->setAlignment(Qt::AlignBottom);
    m_chart->legend()->setShowToolTips(true);
    m_x = new QValueAxis;
    m_y = new QValueAxis;
    m_x->setLabelFormat(QStringLiteral("%g"));
    m_y->setLabelFormat(QStringLiteral("%g"));
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    m_view = new QChartView(m_chart);
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setMinimumSize(640, 360);
    m_note = new QLabel;
    m_note->setWordWrap(true);

    auto *layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(m_view, 1);
    layout->addWidget(m_note);

    connect(m_metricBox, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (i >= int(Metric::Named))
            setNamedMetric(m_named.value(i - int(Metric::Named)));
        else
            setMetric(Metric(i));
    });
    connect(m_axisBox, &QComboBox::currentIndexChanged, this, [this](int i) { setAxis(Axis(i)); });
    const auto save = [this](bool asPng) {
        const QString path = dialogs::savePath(this, asPng ? tr("Save the comparison chart") : tr("Save the compared curves"),
                                         asPng ? QStringLiteral("comparison.png") : QStringLiteral("comparison.csv"),
                                         asPng ? tr("PNG image (*.png)") : tr("CSV (*.csv)"));
        if (path.isEmpty())
            return;
        const Result<void> r = asPng ? exportPng(path) : exportCsv(path);
        m_note->setText(r ? tr("Saved %1").arg(path) : r.error());
    };
    connect(png, &QPushButton::clicked, this, [save] { save(true); });
    connect(csv, &QPushButton::clicked, this, [save] { save(false); });
    connect(catalog, &RunCatalog::historyLoaded, this, &ComparisonWindow::onHistory);
    connect(catalog, &RunCatalog::historyFailed, this, &ComparisonWindow::onFailure);

    m_pending = int(runs.size());
    m_note->setText(tr("Reading the runs' stores…"));
    for (const RunSummary &r : runs)
        catalog->loadHistory(r.dir);
}

void ComparisonWindow::onHistory(const QString &dir, const History &history)
{
    const bool ours = std::any_of(m_runs.begin(), m_runs.end(), [&dir](const RunSummary &r) { return r.dir == dir; });
    if (!ours || m_histories.count(dir) > 0)
        return;
    m_histories[dir] = history;
    for (const EvaluationRecord &e : history.evaluations)
        for (const auto &[name, value] : e.metrics)
            if (!m_named.contains(name)) {
                m_named << name;
                const QSignalBlocker quiet(m_metricBox);
                m_metricBox->addItem(tr("Test %1").arg(name));
            }
    --m_pending;
    rebuild();
    if (loaded())
        Q_EMIT allLoaded();
}

void ComparisonWindow::onFailure(const QString &dir, const QString &message)
{
    const bool ours = std::any_of(m_runs.begin(), m_runs.end(), [&dir](const RunSummary &r) { return r.dir == dir; });
    if (!ours || m_histories.count(dir) > 0)
        return;
    m_histories[dir] = History{};
    m_failures << message;
    --m_pending;
    rebuild();
    if (loaded())
        Q_EMIT allLoaded();
}

void ComparisonWindow::setMetric(Metric metric)
{
    m_metric = metric;
    if (m_metricBox->currentIndex() != int(metric))
        m_metricBox->setCurrentIndex(int(metric));
    rebuild();
}

bool ComparisonWindow::setNamedMetric(const QString &name)
{
    const qsizetype index = m_named.indexOf(name);
    if (index < 0)
        return false;
    m_metric = Metric::Named;
    m_namedMetric = name;
    if (m_metricBox->currentIndex() != int(Metric::Named) + index) {
        const QSignalBlocker quiet(m_metricBox);
        m_metricBox->setCurrentIndex(int(Metric::Named) + int(index));
    }
    rebuild();
    return true;
}

void ComparisonWindow::setAxis(Axis axis)
{
    m_axis = axis;
    if (m_axisBox->currentIndex() != int(axis))
        m_axisBox->setCurrentIndex(int(axis));
    rebuild();
}

QString ComparisonWindow::note() const
{
    return m_note->text();
}

void ComparisonWindow::rebuild()
{
    m_chart->removeAllSeries();
    m_series.clear();

    // One time unit for every run, fitted to the longest.
    double longestSeconds = 0;
    for (const RunSummary &r : std::as_const(m_runs))
        longestSeconds = std::max(longestSeconds, double(r.wallMs) / 1000.0);
    const TimeUnit unit = timeUnitFor(longestSeconds);

    QValueAxis *x = m_x;
    QValueAxis *y = m_y;
    x->setTitleText(m_axis == Axis::Time ? unit.name : tr("version (assimilations folded in)"));
    y->setTitleText(m_metric == Metric::Named ? tr("test %1").arg(m_namedMetric) : metricTitle(m_metric));
    double minX = 0, maxX = 1, minY = std::numeric_limits<double>::max(), maxY = std::numeric_limits<double>::lowest();

    for (qsizetype i = 0; i < m_runs.size(); ++i) {
        const RunSummary &run = m_runs[i];
        const auto it = m_histories.find(run.dir);
        if (it == m_histories.end())
            continue;
        const History &h = it->second;
        auto *s = new QLineSeries;
        // The legend names the first few differences; the note below lists them all.
        QStringList diff = m_differences.value(i);
        if (diff.size() > kLegendPhrases)
            diff = diff.mid(0, kLegendPhrases) << QStringLiteral("…");
        s->setName(diff.isEmpty() ? run.name : QStringLiteral("%1: %2").arg(run.name, diff.join(QStringLiteral(", "))));
        const auto place = [&](qint64 atMs, qint64 version, double value) {
            const double px = m_axis == Axis::Time ? double(atMs - run.createdMs) / unit.msPer : double(version);
            s->append(px, value);
            maxX = std::max(maxX, px);
            minY = std::min(minY, value);
            maxY = std::max(maxY, value);
        };
        if (m_metric == Metric::TrainingLoss) {
            const qsizetype step = std::max<qsizetype>(1, (h.assimilations.size() + kMaxLossPoints - 1) / kMaxLossPoints);
            double ema = -1;
            for (qsizetype k = 0; k < h.assimilations.size(); ++k) {
                const AssimilationRecord &a = h.assimilations[k];
                ema = ema < 0 ? a.loss : 0.9 * ema + 0.1 * a.loss;
                if (k % step == 0 || k + 1 == h.assimilations.size())
                    place(a.atMs, a.version, ema);
            }
        } else if (m_metric == Metric::Named) {
            for (const EvaluationRecord &e : h.evaluations)
                for (const auto &[name, value] : e.metrics)
                    if (name == m_namedMetric)
                        place(e.atMs, e.version, value);
        } else {
            for (const EvaluationRecord &e : h.evaluations)
                place(e.atMs, e.version, m_metric == Metric::TestAccuracy ? 100.0 * e.accuracy : e.loss);
        }
        s->setPointsVisible(m_metric != Metric::TrainingLoss);
        m_chart->addSeries(s);
        s->attachAxis(x);
        s->attachAxis(y);
        m_series << s;
    }
    x->setRange(minX, maxX);
    if (minY > maxY) {
        y->setRange(0, 1);
    } else if (m_metric == Metric::TestAccuracy) {
        // Ticks every 5 or 10 points of accuracy.
        const double low = std::max(0.0, std::floor(minY / 5.0) * 5.0);
        const double high = std::min(100.0, std::max(low + 5.0, std::ceil(maxY / 5.0) * 5.0));
        const double step = high - low > 50 ? 10.0 : 5.0;
        y->setRange(low, low + std::ceil((high - low) / step) * step);
        y->setTickCount(int(std::ceil((high - low) / step)) + 1);
    } else {
        const double pad = std::max(1e-3, 0.05 * (maxY - minY));
        y->setRange(minY >= 0 ? std::max(0.0, minY - pad) : minY - pad, maxY + pad);
    }
    x->applyNiceNumbers();

    QStringList lines;
    if (m_pending > 0)
        lines << tr("Reading %1 more run(s)…").arg(m_pending);
    const bool anyDifference = std::any_of(m_differences.begin(), m_differences.end(),
                                           [](const QStringList &d) { return !d.isEmpty(); });
    if (anyDifference) {
        lines << tr("The runs differ in these settings; all others are the same:");
        for (qsizetype i = 0; i < m_runs.size(); ++i)
            lines << QStringLiteral("  %1: %2").arg(m_runs[i].name, m_differences.value(i).join(QStringLiteral(", ")));
    } else {
        lines << tr("These runs have the same settings.");
    }
    lines << m_failures;
    m_note->setText(lines.join(u'\n'));
}

Result<void> ComparisonWindow::exportPng(const QString &path) const
{
    if (!m_view->grab().save(path, "PNG"))
        return fail(tr("cannot write '%1' (check the folder exists and is writable)").arg(path));
    return {};
}

Result<void> ComparisonWindow::exportCsv(const QString &path) const
{
    QByteArray csv = "run,settings,series,version,seconds,value\n";
    const auto quoted = [](QString text) {
        text.replace(u'"', QStringLiteral("\"\""));
        return QStringLiteral("\"%1\"").arg(text);
    };
    for (qsizetype i = 0; i < m_runs.size(); ++i) {
        const RunSummary &run = m_runs[i];
        const auto it = m_histories.find(run.dir);
        if (it == m_histories.end())
            continue;
        const QString head = quoted(run.name) + u',' + quoted(m_differences.value(i).join(QStringLiteral("; ")));
        const auto row = [&](const QString &series, qint64 version, qint64 atMs, double value) {
            csv += QStringLiteral("%1,%2,%3,%4,%5\n")
                       .arg(head, series)
                       .arg(version)
                       .arg(double(atMs - run.createdMs) / 1000.0, 0, 'f', 3)
                       .arg(value, 0, 'g', 8)
                       .toUtf8();
        };
        for (const EvaluationRecord &e : it->second.evaluations) {
            row(QStringLiteral("test_accuracy"), e.version, e.atMs, e.accuracy);
            row(QStringLiteral("test_loss"), e.version, e.atMs, e.loss);
            for (const auto &[name, value] : e.metrics)
                row(QStringLiteral("test_") + name, e.version, e.atMs, value);
        }
        for (const AssimilationRecord &a : it->second.assimilations)
            row(QStringLiteral("training_loss"), a.version, a.atMs, a.loss);
    }
    return writeFileAtomically(path, csv);
}

} // namespace flotilla::ui
