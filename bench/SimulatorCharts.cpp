#include "bench/SimulatorCharts.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPen>
#include <QPixmap>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <memory>

namespace flotilla {

namespace {

const QColor kRuleColors[] = { QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c),
    QColor(0xd6, 0x27, 0x28), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b) };

QColor ruleColor(std::size_t i)
{
    return kRuleColors[i % (sizeof(kRuleColors) / sizeof(kRuleColors[0]))];
}

// Simulated time is shown in the unit that keeps the numbers small.
struct TimeUnit
{
    double perMs;
    QString name;
};

TimeUnit timeUnit(qint64 spanMs)
{
    if (spanMs <= 10 * 60 * 1000)
        return { 1.0 / 1000.0, QStringLiteral("seconds") };
    if (spanMs <= 10 * 3600 * 1000)
        return { 1.0 / 60000.0, QStringLiteral("minutes") };
    return { 1.0 / 3600000.0, QStringLiteral("hours") };
}

// A bucket's label short enough for the axis: 0, 1, 2-3, …, 256-511, 512-1k, 1k-2k, …, 128k-256k.
QString compactBucketLabel(int bucket)
{
    if (bucket <= 9)
        return stalenessBucketLabel(bucket);
    const auto size = [](qint64 v) {
        if (v < 1024)
            return QString::number(v);
        return v >= (qint64(1) << 20) ? QStringLiteral("%1M").arg(v >> 20) : QStringLiteral("%1k").arg(v >> 10);
    };
    const qint64 low = qint64(1) << (bucket - 1);
    return size(low) + u'-' + size(2 * low);
}

QChart *newChart(const QString &title)
{
    auto *c = new QChart;
    c->setTitle(title);
    c->legend()->setAlignment(Qt::AlignBottom);
    c->setMargins(QMargins(8, 8, 16, 8));
    return c;
}

// An axis from 0 to just above high, in steps of 1, 2 or 5 times a power of ten.
QValueAxis *valueAxis(
    QChart *chart, Qt::Alignment where, const QString &title, double high, const QString &format = QStringLiteral("%g"))
{
    auto *a = new QValueAxis;
    a->setTitleText(title);
    a->setLabelFormat(format);
    high = std::max(high, 1e-9);
    const double raw = high / 6.0;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    double step = magnitude;
    for (const double m : { 1.0, 2.0, 2.5, 5.0, 10.0 })
        if (m * magnitude >= raw) {
            step = m * magnitude;
            break;
        }
    a->setTickType(QValueAxis::TicksDynamic);
    a->setTickAnchor(0);
    a->setTickInterval(step);
    a->setRange(0, std::ceil(high / step - 1e-9) * step);
    chart->addAxis(a, where);
    return a;
}

Result<QString> save(QChart *chart, const QString &dir, const QString &name)
{
    QChartView view(chart); // owns the chart from here
    view.setRenderHint(QPainter::Antialiasing);
    view.resize(960, 560);
    const QString path = QDir(dir).filePath(name);
    const QPixmap image = view.grab();
    if (image.isNull() || !image.save(path, "PNG"))
        return fail(QStringLiteral("cannot write the chart '%1'").arg(path));
    return path;
}

qint64 longestRun(const std::vector<SimulationResult> &results)
{
    qint64 span = 1;
    for (const auto &r : results)
        span = std::max(span, r.simulatedMs);
    return span;
}

QChart *stalenessChart(const std::vector<SimulationResult> &results)
{
    QChart *chart = newChart(QStringLiteral("Staleness of assimilations (share of each rule's assimilations)"));
    std::size_t buckets = 1;
    for (const auto &r : results)
        buckets = std::max(buckets, r.stalenessHistogram.size());
    auto *bars = new QBarSeries;
    double top = 0.0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const auto &r = results[i];
        auto *set = new QBarSet(r.rule);
        set->setColor(ruleColor(i));
        set->setBorderColor(ruleColor(i));
        for (std::size_t b = 0; b < buckets; ++b) {
            const qint64 n = b < r.stalenessHistogram.size() ? r.stalenessHistogram[b] : 0;
            const double share = r.assimilations > 0 ? 100.0 * double(n) / double(r.assimilations) : 0.0;
            set->append(share);
            top = std::max(top, share);
        }
        bars->append(set);
    }
    chart->addSeries(bars);
    auto *categories = new QBarCategoryAxis;
    for (std::size_t b = 0; b < buckets; ++b)
        categories->append(compactBucketLabel(int(b)));
    if (buckets > 12) {
        // Many buckets: each is named by its lower bound (it reaches up to twice that).
        categories->clear();
        for (std::size_t b = 0; b < buckets; ++b)
            categories->append(b < 2 ? QString::number(b) : compactBucketLabel(int(b)).section(u'-', 0, 0));
        categories->setLabelsAngle(-90);
        QFont small = categories->labelsFont();
        small.setPointSizeF(small.pointSizeF() * 0.85);
        categories->setLabelsFont(small);
    }
    categories->setTitleText(buckets > 12 ? QStringLiteral("staleness (versions between grant and assimilation; bucket "
                                                           "from its label to twice it)")
                                          : QStringLiteral("staleness (versions between grant and assimilation)"));
    chart->addAxis(categories, Qt::AlignBottom);
    bars->attachAxis(categories);
    QValueAxis *y = valueAxis(
        chart, Qt::AlignLeft, QStringLiteral("% of assimilations"), std::max(1.0, top), QStringLiteral("%.0f"));
    bars->attachAxis(y);
    return chart;
}

QChart *curveChart(const std::vector<SimulationResult> &results, bool accuracy)
{
    QChart *chart = newChart(accuracy ? QStringLiteral("Test accuracy against simulated time")
                                      : QStringLiteral("Test loss against simulated time"));
    const TimeUnit unit = timeUnit(longestRun(results));
    double low = 1e300, high = 0.0, tEnd = 0.0;
    std::vector<QLineSeries *> lines;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const auto &r = results[i];
        auto *line = new QLineSeries;
        line->setName(QStringLiteral("%1 (final %2)")
                          .arg(r.rule,
                              accuracy ? QString::number(100.0 * r.finalAccuracy(), 'f', 1) + u'%'
                                       : QString::number(r.finalLoss(), 'f', 3)));
        QPen pen(ruleColor(i));
        pen.setWidthF(2.0);
        line->setPen(pen);
        for (const auto &e : r.evaluations) {
            const double v = accuracy ? 100.0 * e.accuracy : e.loss;
            const double t = double(e.atMs) * unit.perMs;
            line->append(t, v);
            low = std::min(low, v);
            high = std::max(high, v);
            tEnd = std::max(tEnd, t);
        }
        chart->addSeries(line);
        lines.push_back(line);
    }
    QValueAxis *x = valueAxis(chart, Qt::AlignBottom, QStringLiteral("simulated %1").arg(unit.name), tEnd);
    if (accuracy) {
        QValueAxis *y
            = valueAxis(chart, Qt::AlignLeft, QStringLiteral("test accuracy (%)"), 100, QStringLiteral("%.0f"));
        for (auto *l : lines) {
            l->attachAxis(x);
            l->attachAxis(y);
        }
        return chart;
    }
    // Losses of rules that diverge span decades: a log axis keeps every line readable.
    if (low > 0 && high / low > 20.0) {
        auto *y = new QLogValueAxis;
        y->setTitleText(QStringLiteral("test loss (cross-entropy, log scale)"));
        y->setLabelFormat(QStringLiteral("%g"));
        y->setBase(10);
        y->setRange(std::pow(10.0, std::floor(std::log10(low))), std::pow(10.0, std::ceil(std::log10(high))));
        chart->addAxis(y, Qt::AlignLeft);
        for (auto *l : lines) {
            l->attachAxis(x);
            l->attachAxis(y);
        }
        return chart;
    }
    QValueAxis *y = valueAxis(chart, Qt::AlignLeft, QStringLiteral("test loss (cross-entropy)"), high);
    for (auto *l : lines) {
        l->attachAxis(x);
        l->attachAxis(y);
    }
    return chart;
}

QChart *fleetChart(const std::vector<SimulationResult> &results, int workers)
{
    QChart *chart = newChart(QStringLiteral("Workers online and busy"));
    const TimeUnit unit = timeUnit(longestRun(results));
    // The fleet is the same for every rule (same seed or trace); the longest run shows most.
    const auto longest = std::max_element(
        results.begin(), results.end(), [](const auto &a, const auto &b) { return a.simulatedMs < b.simulatedMs; });
    std::vector<QLineSeries *> lines;
    double tEnd = 0.0;
    const auto plot = [&](const std::vector<SimulationResult::FleetSample> &samples, bool online, const QString &name,
                          const QColor &color, Qt::PenStyle style) {
        auto *line = new QLineSeries;
        line->setName(name);
        QPen pen(color);
        pen.setWidthF(online ? 2.5 : 1.5);
        pen.setStyle(style);
        line->setPen(pen);
        const std::size_t stride = std::max<std::size_t>(1, samples.size() / 600);
        for (std::size_t i = 0; i < samples.size(); i += stride) {
            const double t = double(samples[i].atMs) * unit.perMs;
            line->append(t, online ? samples[i].online : samples[i].busy);
            tEnd = std::max(tEnd, t);
        }
        if (!samples.empty()) {
            const double t = double(samples.back().atMs) * unit.perMs;
            line->append(t, online ? samples.back().online : samples.back().busy);
            tEnd = std::max(tEnd, t);
        }
        chart->addSeries(line);
        lines.push_back(line);
    };
    plot(longest->fleet, true, QStringLiteral("online"), QColor(0x33, 0x33, 0x33), Qt::SolidLine);
    // Rules whose schedules do not depend on the weights keep the fleet equally busy: one
    // line for each distinct schedule, named after all its rules.
    std::vector<bool> drawn(results.size(), false);
    for (std::size_t i = 0; i < results.size(); ++i) {
        if (drawn[i])
            continue;
        QStringList names { results[i].rule };
        for (std::size_t j = i + 1; j < results.size(); ++j) {
            const auto &a = results[i].fleet;
            const auto &b = results[j].fleet;
            const bool same
                = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto &p, const auto &q) {
                      return p.atMs == q.atMs && p.online == q.online && p.busy == q.busy;
                  });
            if (same) {
                drawn[j] = true;
                names << results[j].rule;
            }
        }
        plot(results[i].fleet, false, QStringLiteral("busy: %1").arg(names.join(QStringLiteral(", "))), ruleColor(i),
            Qt::SolidLine);
    }
    QValueAxis *x = valueAxis(chart, Qt::AlignBottom, QStringLiteral("simulated %1").arg(unit.name), tEnd);
    QValueAxis *y = valueAxis(
        chart, Qt::AlignLeft, QStringLiteral("workers"), std::max(1.0, double(workers)), QStringLiteral("%.0f"));
    for (auto *l : lines) {
        l->attachAxis(x);
        l->attachAxis(y);
    }
    return chart;
}

} // namespace

Result<QStringList> writeSimulationCharts(const SimulationConfig &config, const std::vector<SimulationResult> &results,
    const QString &dir, const QString &prefix)
{
    if (results.empty())
        return fail(QStringLiteral("there are no runs to chart"));
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("cannot create the folder '%1' for the charts").arg(dir));
    QStringList written;
    const std::pair<QChart *, QString> charts[] = {
        { stalenessChart(results), prefix + QStringLiteral("staleness.png") },
        { curveChart(results, false), prefix + QStringLiteral("loss.png") },
        { curveChart(results, true), prefix + QStringLiteral("accuracy.png") },
        { fleetChart(results, config.workers), prefix + QStringLiteral("fleet.png") },
    };
    QString error;
    for (const auto &[chart, name] : charts) {
        if (!error.isEmpty()) {
            delete chart;
            continue;
        }
        auto path = save(chart, dir, name);
        if (!path)
            error = path.error();
        else
            written << *path;
    }
    if (!error.isEmpty())
        return fail(error);
    return written;
}

Result<void> writeSpeedupChart(const std::vector<SpeedupSeries> &series, const QString &title, const QString &path)
{
    QChart *chart = newChart(title);
    int most = 1;
    double highest = 1.0;
    for (const SpeedupSeries &s : series) {
        most = std::max(most, s.largestFleet);
        for (const auto &[w, speedup] : s.points) {
            most = std::max(most, w);
            highest = std::max(highest, speedup);
        }
    }
    auto *ideal = new QLineSeries;
    ideal->setName(QStringLiteral("ideal (S = W)"));
    ideal->append(1, 1);
    ideal->append(most, most);
    QPen dashed(Qt::gray);
    dashed.setStyle(Qt::DashLine);
    dashed.setWidth(2);
    ideal->setPen(dashed);
    chart->addSeries(ideal);
    std::vector<QLineSeries *> lines{ideal};
    for (std::size_t i = 0; i < series.size(); ++i) {
        if (series[i].points.empty())
            continue;
        auto *line = new QLineSeries;
        line->setName(series[i].name);
        line->setPointsVisible(true);
        QPen pen(ruleColor(i));
        pen.setWidth(2);
        if (series[i].name.endsWith(QLatin1String("ddp")))
            pen.setStyle(Qt::DotLine);
        line->setPen(pen);
        for (const auto &[w, speedup] : series[i].points)
            line->append(w, speedup);
        chart->addSeries(line);
        lines.push_back(line);
    }
    QValueAxis *x = valueAxis(chart, Qt::AlignBottom, QStringLiteral("machines W"), double(most));
    QValueAxis *y = valueAxis(chart, Qt::AlignLeft, QStringLiteral("speedup over the plain loop on one machine"),
                              std::max(highest, double(most)));
    for (QLineSeries *line : lines) {
        line->attachAxis(x);
        line->attachAxis(y);
    }
    const QFileInfo info(path);
    auto saved = save(chart, info.absolutePath(), info.fileName());
    if (!saved)
        return saved.takeError();
    return {};
}

} // namespace flotilla
