#pragma once
// Which evaluation of a job was the best so far, by the metric the job chose
// (training.best_metric: the highest test accuracy or the lowest test loss), and whether the
// job has gone long enough without a better one to stop early (training.early_stop_after
// evaluations; 0: never). The coordinator keeps the best model beside the last
// (model-best.pt) and ends a job this says to stop.

#include <QString>

#include <cmath>
#include <limits>

namespace flotilla {

class BestModelWatch
{
public:
    BestModelWatch() = default;
    BestModelWatch(QString metric, int patience) : m_metric(std::move(metric)), m_patience(patience) {}

    struct Verdict
    {
        bool improved = false; // the best so far: keep this model
        bool stop = false;     // `patience` evaluations in a row without improving on the best
    };

    Verdict observe(int epoch, double accuracy, double loss)
    {
        const double score = m_metric == QLatin1String("loss") ? -loss : accuracy;
        Verdict v;
        if (!std::isfinite(score))
            return v;
        if (m_bestEpoch < 0 || score > m_best) {
            m_best = score;
            m_bestEpoch = epoch;
            m_since = 0;
            v.improved = true;
        } else {
            ++m_since;
        }
        v.stop = m_patience > 0 && m_since >= m_patience;
        return v;
    }

    const QString &metric() const { return m_metric; }
    int patience() const { return m_patience; }
    int bestEpoch() const { return m_bestEpoch; } // -1 before the first evaluation
    // The best accuracy, or the best (lowest) loss.
    double best() const { return m_metric == QLatin1String("loss") ? -m_best : m_best; }
    int sinceBest() const { return m_since; }

private:
    QString m_metric = QStringLiteral("accuracy");
    int m_patience = 0;
    double m_best = -std::numeric_limits<double>::infinity();
    int m_bestEpoch = -1;
    int m_since = 0;
};

} // namespace flotilla
