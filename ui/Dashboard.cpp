#include "ui/Dashboard.h"

#include "job/Tasks.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QScatterSeries>
#include <QTimer>
#include <QVBoxLayout>
#include <QValueAxis>

#include <cmath>

namespace flotilla::ui {

namespace {

constexpr int kHistogramBuckets = 9; // 0..7 and 8+
constexpr int kMaxWorkerLines = 6;
// The staleness scatter keeps one graphics item per point: the most recent ones are drawn,
// and the histogram beside it counts them all.
constexpr qsizetype kMaxStalenessPoints = 5000;
constexpr int kFlushMs = 1000;

// Whole-number ticks only (counts, versions), about five of them, from 0 to at least top:
// a count of 0 or 1 must not read "0 0 0 0 1".
void integerRange(QValueAxis *a, double top)
{
    const int ceiling = std::max(1, int(std::ceil(top)));
    const int step = std::max(1, (ceiling + 4) / 5);
    a->setTickType(QValueAxis::TicksDynamic);
    a->setTickAnchor(0);
    a->setTickInterval(step);
    a->setLabelFormat(QStringLiteral("%d"));
    a->setRange(0, ((ceiling + step - 1) / step) * step);
}

// From 0 to just above top in round steps, with as many decimals as a step needs: enough
// that neighbouring ticks never read the same, and no more.
void realRange(QValueAxis *a, double top)
{
    a->setTickType(QValueAxis::TicksFixed);
    a->setTickCount(5); // what the nice numbers aim for; they set their own count each time
    a->setRange(0, top > 0 ? top * 1.05 : 1.0);
    a->applyNiceNumbers();
    const double step = (a->max() - a->min()) / std::max(1, a->tickCount() - 1);
    int decimals = 0;
    for (double scaled = step; decimals < 9 && std::abs(scaled - std::round(scaled)) > 1e-6 * scaled; scaled *= 10)
        ++decimals;
    a->setLabelFormat(QStringLiteral("%.%1f").arg(decimals));
}

enum class Scale { Integer, Real };

QValueAxis *axis(QChart *chart, Qt::Alignment where, const QString &title, Scale scale = Scale::Real)
{
    auto *a = new QValueAxis;
    a->setTitleText(title);
    if (scale == Scale::Integer)
        integerRange(a, 1);
    else
        realRange(a, 0);
    chart->addAxis(a, where);
    return a;
}

template <typename Series>
Series *series(QChart *chart, const QString &name, QValueAxis *x, QValueAxis *y)
{
    auto *s = new Series;
    s->setName(name);
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
    return s;
}

QChart *chart(const QString &title)
{
    auto *c = new QChart;
    c->setTitle(title);
    c->legend()->setAlignment(Qt::AlignBottom);
    c->setMargins(QMargins(4, 4, 4, 4));
    return c;
}

} // namespace

Dashboard::Dashboard(QWidget *parent) : QWidget(parent)
{
    m_flushTimer = new QTimer(this);
    m_flushTimer->setSingleShot(true);
    m_flushTimer->setInterval(kFlushMs);
    connect(m_flushTimer, &QTimer::timeout, this, &Dashboard::flushAssimilations);
    auto *grid = new QGridLayout(this);

    // Loss and test accuracy.
    QChart *loss = chart(tr("Training loss and test accuracy"));
    m_lossChart = loss;
    m_lossX = axis(loss, Qt::AlignBottom, timeTitle());
    m_lossY = axis(loss, Qt::AlignLeft, tr("training loss"));
    m_accuracyY = axis(loss, Qt::AlignRight, tr("test accuracy (%)"));
    m_accuracyY->setRange(0, 100);
    m_accuracyY->setLabelFormat(QStringLiteral("%.0f"));
    m_loss = series<QLineSeries>(loss, tr("training loss (average)"), m_lossX, m_lossY);
    m_accuracy = series<QLineSeries>(loss, tr("test accuracy"), m_lossX, m_accuracyY);
    m_accuracy->setPointsVisible(true);
    auto *lossPanel = new QWidget;
    auto *lossLayout = new QVBoxLayout(lossPanel);
    lossLayout->setContentsMargins(0, 0, 0, 0);
    auto *lossBar = new QHBoxLayout;
    m_lossAxis = new QComboBox;
    m_lossAxis->addItems({tr("against time"), tr("against version")});
    lossBar->addWidget(new QLabel(tr("Plot")));
    lossBar->addWidget(m_lossAxis);
    lossBar->addStretch();
    m_lastEvaluation = new QLabel;
    m_lastEvaluation->setTextInteractionFlags(Qt::TextSelectableByMouse);
    lossBar->addWidget(m_lastEvaluation);
    lossLayout->addLayout(lossBar);
    lossLayout->addWidget(makeView(loss));
    connect(m_lossAxis, &QComboBox::currentIndexChanged, this, [this] { rebuildLossChart(); });
    grid->addWidget(lossPanel, 0, 0);

    // Staleness of every assimilation.
    QChart *stale = chart(tr("Staleness of each assimilation"));
    m_stalenessX = axis(stale, Qt::AlignBottom, tr("global model version"), Scale::Integer);
    m_stalenessY = axis(stale, Qt::AlignLeft, tr("staleness (versions)"), Scale::Integer);
    m_staleness = series<QScatterSeries>(stale, tr("assimilation"), m_stalenessX, m_stalenessY);
    m_staleness->setMarkerSize(6);
    grid->addWidget(makeView(stale), 0, 1);

    // Its histogram.
    QChart *histogram = chart(tr("Staleness histogram"));
    auto *bars = new QBarSeries;
    m_histogram = new QBarSet(tr("assimilations"));
    QStringList categories;
    for (int i = 0; i < kHistogramBuckets; ++i) {
        *m_histogram << 0;
        m_histogramCounts << 0;
        categories << (i + 1 == kHistogramBuckets ? QStringLiteral("%1+").arg(i) : QString::number(i));
    }
    bars->append(m_histogram);
    histogram->addSeries(bars);
    auto *categoryAxis = new QBarCategoryAxis;
    categoryAxis->append(categories);
    categoryAxis->setTitleText(tr("staleness (versions)"));
    histogram->addAxis(categoryAxis, Qt::AlignBottom);
    bars->attachAxis(categoryAxis);
    m_histogramY = axis(histogram, Qt::AlignLeft, tr("assimilations"), Scale::Integer);
    bars->attachAxis(m_histogramY);
    grid->addWidget(makeView(histogram), 0, 2);

    // Node churn.
    QChart *churn = chart(tr("Workers online"));
    m_churnX = axis(churn, Qt::AlignBottom, timeTitle());
    m_churnY = axis(churn, Qt::AlignLeft, tr("workers"), Scale::Integer);
    m_online = series<QLineSeries>(churn, tr("online"), m_churnX, m_churnY);
    m_joins = series<QScatterSeries>(churn, tr("join"), m_churnX, m_churnY);
    m_joins->setColor(QColor(0x2e, 0x9d, 0x3a));
    m_joins->setMarkerSize(9);
    m_preemptions = series<QScatterSeries>(churn, tr("preemption"), m_churnX, m_churnY);
    m_preemptions->setColor(QColor(0xd6, 0x27, 0x28));
    m_preemptions->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
    m_preemptions->setMarkerSize(9);
    m_departures = series<QScatterSeries>(churn, tr("departure"), m_churnX, m_churnY);
    m_departures->setColor(QColor(0x7f, 0x7f, 0x7f));
    m_departures->setMarkerSize(9);
    grid->addWidget(makeView(churn), 1, 0);

    // Spot savings.
    m_costChart = chart(tr("Cost"));
    m_costX = axis(m_costChart, Qt::AlignBottom, timeTitle());
    m_costY = axis(m_costChart, Qt::AlignLeft, tr("cumulative cost (USD)"));
    m_onDemand = series<QLineSeries>(m_costChart, tr("on-demand"), m_costX, m_costY);
    m_spot = series<QLineSeries>(m_costChart, tr("spot"), m_costX, m_costY);
    m_paid = series<QLineSeries>(m_costChart, tr("paid"), m_costX, m_costY);
    QPen dashed = m_paid->pen();
    dashed.setStyle(Qt::DashLine);
    dashed.setWidth(2);
    m_paid->setPen(dashed); // spot workers pay spot prices: the two lines coincide
    grid->addWidget(makeView(m_costChart), 1, 1);

    // Throughput.
    m_throughputChart = chart(tr("Throughput"));
    m_throughputX = axis(m_throughputChart, Qt::AlignBottom, timeTitle());
    m_throughputY = axis(m_throughputChart, Qt::AlignLeft, tr("samples per second"));
    m_fleetThroughput = series<QLineSeries>(m_throughputChart, tr("fleet"), m_throughputX, m_throughputY);
    grid->addWidget(makeView(m_throughputChart), 1, 2);
}

QChartView *Dashboard::makeView(QChart *c)
{
    auto *view = new QChartView(c);
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumSize(360, 260);
    m_views << view;
    return view;
}

QStringList Dashboard::chartNames() const
{
    QStringList names;
    for (auto *v : m_views)
        names << v->chart()->title();
    return names;
}

QChartView *Dashboard::chartView(int index) const
{
    return m_views.value(index);
}

bool Dashboard::isEmpty() const
{
    if (!m_pendingLoss.isEmpty() || !m_pendingStaleness.isEmpty() || !m_pendingSpot.isEmpty())
        return false;
    for (const int n : m_histogramCounts)
        if (n > 0)
            return false;
    for (const QChartView *view : m_views)
        for (const QAbstractSeries *s : view->chart()->series())
            if (const auto *xy = qobject_cast<const QXYSeries *>(s); xy && xy->count() > 0)
                return false;
    return true;
}

bool Dashboard::everyChartHasData() const
{
    int histogramTotal = 0;
    for (const int n : m_histogramCounts)
        histogramTotal += n;
    return m_loss->count() > 0 && m_accuracy->count() > 0 && m_staleness->count() > 0 && histogramTotal > 0
           && m_online->count() > 0 && m_spot->count() > 0 && m_fleetThroughput->count() > 0;
}

Result<void> Dashboard::exportChart(int index, const QString &path) const
{
    QChartView *view = chartView(index);
    if (!view)
        return fail(tr("there is no chart %1").arg(index));
    const QPixmap image = view->grab();
    if (image.isNull() || !image.save(path, "PNG"))
        return fail(tr("cannot write the chart to '%1'").arg(path));
    return {};
}

void Dashboard::reset()
{
    m_lastEvaluation->clear();
    m_lastEvaluation->setToolTip(QString());
    m_flushTimer->stop();
    m_pendingLoss.clear();
    m_pendingStaleness.clear();
    m_pendingSpot.clear();
    m_pendingOnDemand.clear();
    m_pendingPaid.clear();
    m_loadQueue.clear();
    m_histogramDirty = false;
    m_originMs = 0;
    m_assimilations.clear();
    m_evaluations.clear();
    m_lossEma = -1.0;
    m_loss->clear();
    m_accuracy->clear();
    m_staleness->clear();
    for (int i = 0; i < kHistogramBuckets; ++i) {
        m_histogramCounts[i] = 0;
        m_histogram->replace(i, 0);
    }
    m_online->clear();
    m_joins->clear();
    m_preemptions->clear();
    m_departures->clear();
    m_lastOnline = 0;
    m_haveSnapshot = false;
    m_spot->clear();
    m_onDemand->clear();
    m_paid->clear();
    m_fleetThroughput->clear();
    for (auto *s : std::as_const(m_workerThroughput)) {
        m_throughputChart->removeSeries(s);
        delete s;
    }
    m_workerThroughput.clear();
    m_axisMax.clear();
    for (QValueAxis *a : {m_lossX, m_lossY, m_stalenessX, m_stalenessY, m_histogramY, m_churnX, m_churnY, m_costX,
                          m_costY, m_throughputX, m_throughputY}) {
        if (a->tickType() == QValueAxis::TicksDynamic)
            integerRange(a, 1);
        else
            realRange(a, 0);
    }
    m_msPerUnit = 1000.0;
    for (QValueAxis *a : timeAxes())
        a->setTitleText(timeTitle());
    m_costChart->setTitle(tr("Cost"));
}

double Dashboard::timeX(qint64 atMs)
{
    if (m_originMs == 0 || atMs < m_originMs)
        m_originMs = atMs;
    const double ms = double(atMs - m_originMs);
    fitTimeUnit(ms / 1000.0);
    return ms / m_msPerUnit;
}

void Dashboard::fitTimeUnit(double seconds)
{
    // Seconds for the first two minutes, minutes for the first two hours, hours after.
    const double unit = seconds <= 120 ? 1000.0 : seconds <= 7200 ? 60000.0 : 3600000.0;
    if (unit <= m_msPerUnit)
        return;
    flushAssimilations(); // the queued points are in the old unit too
    const double factor = m_msPerUnit / unit;
    m_msPerUnit = unit;
    for (QValueAxis *a : timeAxes()) {
        a->setTitleText(timeTitle());
        for (const QChartView *view : std::as_const(m_views)) {
            for (QAbstractSeries *s : view->chart()->series()) {
                auto *xy = qobject_cast<QXYSeries *>(s);
                if (!xy || !s->attachedAxes().contains(a))
                    continue;
                QList<QPointF> points = xy->points();
                for (QPointF &p : points)
                    p.rx() *= factor;
                xy->replace(points);
            }
        }
        if (const auto top = m_axisMax.find(a); top != m_axisMax.end()) {
            *top *= factor;
            realRange(a, *top);
        }
    }
}

QString Dashboard::timeTitle() const
{
    return m_msPerUnit >= 3600000.0 ? tr("hours since the job started")
           : m_msPerUnit >= 60000.0 ? tr("minutes since the job started")
                                    : tr("seconds since the job started");
}

QList<QValueAxis *> Dashboard::timeAxes() const
{
    QList<QValueAxis *> axes{m_churnX, m_costX, m_throughputX};
    if (m_lossAxis && m_lossAxis->currentIndex() == 0)
        axes << m_lossX;
    return axes;
}

void Dashboard::extend(QValueAxis *a, double value, bool integer)
{
    // Each axis spans from zero to just above the largest value seen, in round steps.
    double &top = m_axisMax[a];
    const bool fitted = top > 0;
    if (value <= top && fitted)
        return;
    top = std::max(top, value);
    // An axis ends on a round number above the largest value: one that still falls inside
    // changes nothing (laying a chart out again for every point is what a large fleet's
    // stream of points cannot afford).
    if (fitted && value <= a->max())
        return;
    if (integer)
        integerRange(a, top);
    else
        realRange(a, top);
}

void Dashboard::plot(QXYSeries *series, double x, double y)
{
    if (m_loading)
        m_loadQueue[series] << QPointF(x, y);
    else
        series->append(x, y);
}

void Dashboard::loadHistory(const History &history)
{
    reset();
    m_loading = true; // every point is queued, and each series laid out once at the end
    for (const auto *list : {&history.events})
        for (const auto &e : *list)
            if (m_originMs == 0 || e.atMs < m_originMs)
                m_originMs = e.atMs;
    for (const auto &a : history.assimilations)
        addAssimilation(a);
    for (const auto &e : history.evaluations)
        addEvaluation(e);
    for (const auto &c : history.costs)
        addCost(c);
    m_replaying = true;
    for (const auto &e : history.events)
        addEvent(e);
    m_replaying = false;
    m_loading = false;
    flushAssimilations();
}

void Dashboard::rebuildLossChart()
{
    flushAssimilations();
    m_loss->clear();
    m_accuracy->clear();
    const bool byTime = m_lossAxis->currentIndex() == 0;
    m_axisMax.remove(m_lossX);
    if (byTime)
        realRange(m_lossX, 0);
    else
        integerRange(m_lossX, 1);
    m_lossX->setTitleText(byTime ? timeTitle() : tr("global model version"));
    const QList<AssimilationRecord> assimilations = m_assimilations;
    const QList<EvaluationRecord> evaluations = m_evaluations;
    m_assimilations.clear();
    m_evaluations.clear();
    m_lossEma = -1.0;
    // Only the loss line and the accuracy points change; the staleness charts stay as they are.
    for (const auto &a : assimilations)
        addLossPoint(a);
    for (const auto &e : evaluations)
        addEvaluation(e);
    flushAssimilations();
}

void Dashboard::addLossPoint(const AssimilationRecord &p)
{
    m_assimilations << p;
    const bool byTime = m_lossAxis->currentIndex() == 0;
    const double x = byTime ? timeX(p.atMs) : double(p.version);
    if (!byTime)
        timeX(p.atMs);
    m_lossEma = m_lossEma < 0 ? p.loss : 0.9 * m_lossEma + 0.1 * p.loss;
    m_pendingLoss << QPointF(x, m_lossEma);
    extend(m_lossX, x, !byTime);
    extend(m_lossY, m_lossEma);
}

void Dashboard::addAssimilation(const AssimilationRecord &p)
{
    addLossPoint(p);
    m_pendingStaleness << QPointF(double(p.version), double(p.staleness));
    extend(m_stalenessX, double(p.version), true);
    extend(m_stalenessY, double(p.staleness) + 1, true);
    const int bucket = int(std::min<qint64>(p.staleness, kHistogramBuckets - 1));
    ++m_histogramCounts[bucket];
    m_histogramDirty = true;
    extend(m_histogramY, m_histogramCounts[bucket], true);
    if (!m_flushTimer->isActive())
        m_flushTimer->start();
}

void Dashboard::flushAssimilations()
{
    m_flushTimer->stop();
    // replace() lays a series out once; append() would do it for every point.
    for (auto it = m_loadQueue.begin(); it != m_loadQueue.end(); ++it)
        it.key()->replace(it.key()->points() + it.value());
    m_loadQueue.clear();
    if (!m_pendingLoss.isEmpty()) {
        m_loss->replace(m_loss->points() + m_pendingLoss);
        m_pendingLoss.clear();
    }
    if (!m_pendingStaleness.isEmpty()) {
        QList<QPointF> points = m_staleness->points() + m_pendingStaleness;
        if (points.size() > kMaxStalenessPoints)
            points.remove(0, points.size() - kMaxStalenessPoints);
        m_staleness->replace(points);
        m_pendingStaleness.clear();
    }
    for (auto [series, pending] : {std::pair{m_spot, &m_pendingSpot}, std::pair{m_onDemand, &m_pendingOnDemand},
                                   std::pair{m_paid, &m_pendingPaid}}) {
        if (pending->isEmpty())
            continue;
        series->replace(series->points() + *pending);
        pending->clear();
    }
    if (m_histogramDirty) {
        for (int i = 0; i < kHistogramBuckets; ++i)
            if (m_histogram->at(i) != m_histogramCounts[i])
                m_histogram->replace(i, m_histogramCounts[i]);
        m_histogramDirty = false;
    }
}

void Dashboard::addEvaluation(const EvaluationRecord &p)
{
    m_evaluations << p;
    const bool byTime = m_lossAxis->currentIndex() == 0;
    const double x = byTime ? timeX(p.atMs) : double(p.version);
    plot(m_accuracy, x, 100.0 * p.accuracy);
    extend(m_lossX, x, !byTime);
    // The task's metrics on one line; those of each label or class (named "f1/cat",
    // "class_accuracy/shirt") in the tooltip.
    QStringList line{tr("epoch %1: test %2 %3").arg(p.epoch + 1).arg(m_scoreName,
                                                                   m_scorePercent ? QStringLiteral("%1%").arg(100.0 * p.accuracy, 0, 'f', 2)
                                                                                  : QString::number(p.accuracy, 'f', 4)),
                     tr("loss %1").arg(p.loss, 0, 'f', 4)};
    QStringList each;
    for (const auto &[name, value] : p.metrics)
        (name.contains(u'/') ? each : line) << QStringLiteral("%1 %2").arg(name).arg(value, 0, 'g', 4);
    m_lastEvaluation->setText(line.join(QStringLiteral(" · ")));
    m_lastEvaluation->setToolTip(each.join(u'\n'));
}

void Dashboard::setScore(const QString &task)
{
    const TaskInfo &info = taskInfo(task);
    const bool percent = info.scoreKey.endsWith(QLatin1String("accuracy"));
    m_lossChart->setTitle(tr("Training loss and test %1").arg(info.score));
    m_accuracyY->setTitleText(percent ? tr("test %1 (%)").arg(info.score) : tr("test %1 (× 100)").arg(info.score));
    m_accuracy->setName(tr("test %1").arg(info.score));
    m_scoreName = info.score;
    m_scorePercent = percent;
}

QString Dashboard::lastEvaluationText() const
{
    return m_lastEvaluation->text();
}

QString Dashboard::lastEvaluationDetails() const
{
    return m_lastEvaluation->toolTip();
}

void Dashboard::addCost(const CostPoint &p)
{
    const double x = timeX(p.atMs);
    m_pendingSpot << QPointF(x, p.spot);
    m_pendingOnDemand << QPointF(x, p.onDemand);
    m_pendingPaid << QPointF(x, p.actual);
    if (!m_flushTimer->isActive())
        m_flushTimer->start();
    extend(m_costX, x);
    const double top = std::max({p.spot, p.onDemand, p.actual});
    extend(m_costY, top);
    const double total = p.usefulSeconds + p.wastedSeconds;
    const QString title = tr("Cost: %1% saved vs on-demand, %2% of time wasted")
                              .arg(p.onDemand > 0 ? 100.0 * (1.0 - p.actual / p.onDemand) : 0.0, 0, 'f', 0)
                              .arg(total > 0 ? 100.0 * p.wastedSeconds / total : 0.0, 0, 'f', 1);
    if (m_costChart->title() != title) // a new title lays the chart out again
        m_costChart->setTitle(title);
}

void Dashboard::addEvent(const EventRecord &e)
{
    const double x = timeX(e.atMs);
    // Live, the line follows the coordinator's count (snapshots); from history, or before
    // the first snapshot, the events.
    const bool counting = m_replaying || !m_haveSnapshot;
    if (e.is(EventKind::WorkerJoined)) {
        if (counting)
            ++m_lastOnline;
        plot(m_joins, x, m_lastOnline);
    } else if (e.is(EventKind::WorkerPreempted)) {
        plot(m_preemptions, x, m_lastOnline);
    } else if (e.is(EventKind::WorkerLeft)) {
        if (counting)
            m_lastOnline = std::max(0, m_lastOnline - 1);
        plot(m_departures, x, m_lastOnline);
    } else {
        return;
    }
    if (counting)
        plot(m_online, x, m_lastOnline);
    extend(m_churnX, x);
    extend(m_churnY, m_lastOnline + 1, true);
}

void Dashboard::addSnapshot(const Snapshot &s)
{
    const double x = timeX(s.atMs);
    // The coordinator's own count corrects the one drawn from events.
    m_haveSnapshot = true;
    m_lastOnline = s.workersOnline;
    m_online->append(x, s.workersOnline);
    extend(m_churnX, x);
    extend(m_churnY, s.workersOnline + 1, true);

    double fleet = 0;
    for (const auto &w : s.workers) {
        if (!w.online)
            continue;
        fleet += w.samplesPerSecond;
        QLineSeries *line = m_workerThroughput.value(w.id);
        if (!line && m_workerThroughput.size() < kMaxWorkerLines) {
            line = series<QLineSeries>(m_throughputChart, w.name, m_throughputX, m_throughputY);
            m_workerThroughput.insert(w.id, line);
        }
        if (line)
            line->append(x, w.samplesPerSecond);
    }
    m_fleetThroughput->append(x, fleet);
    extend(m_throughputX, x);
    extend(m_throughputY, fleet);
}

} // namespace flotilla::ui
