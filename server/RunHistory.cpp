#include "server/RunHistory.h"

#include <QFileInfo>
#include <QPair>

#include <map>

namespace flotilla {

Result<History> readRunHistory(const QString &dbPath)
{
    if (!QFileInfo::exists(dbPath))
        return fail(QStringLiteral("'%1' does not exist: the run folder holds no job store").arg(dbPath));
    auto store = Store::open(dbPath);
    if (!store)
        return store.takeError();
    auto job = (*store)->latestJob();
    if (!job)
        return job.takeError();
    History h;
    if (!job->has_value())
        return h;
    const qint64 id = (*job)->id;
    auto assimilations = (*store)->assimilations(id);
    auto evaluations = (*store)->evaluations(id);
    auto events = (*store)->events(id);
    auto ledger = (*store)->ledger(id);
    for (const QString &error : {assimilations.error(), evaluations.error(), events.error(), ledger.error()})
        if (!error.isEmpty())
            return fail(QStringLiteral("cannot read '%1': %2").arg(dbPath, error));
    for (const auto &a : *assimilations)
        h.assimilations << a;
    // Each evaluation's named metrics, by the seq of the model it evaluated (a store from
    // before they were kept has only the top-5 accuracy, in the details).
    std::map<qint64, QList<QPair<QString, double>>> named;
    if (auto details = (*store)->evaluationDetails(id))
        for (const auto &d : *details)
            if (d.top5Accuracy >= 0)
                named[d.seq] << qMakePair(QStringLiteral("top5_accuracy"), d.top5Accuracy);
    if (auto metrics = (*store)->evaluationMetrics(id))
        for (const auto &m : *metrics)
            if (!named[m.seq].contains(qMakePair(m.name, m.value)) && m.name != QLatin1String("top5_accuracy"))
                named[m.seq] << qMakePair(m.name, m.value);
    for (const auto &e : *evaluations) {
        h.evaluations << e;
        if (const auto it = named.find(e.seq); it != named.end())
            h.evaluations.last().metrics = it->second;
    }
    for (const auto &e : *events)
        h.events << e;
    CostPoint sum;
    for (const auto &l : *ledger) {
        sum.atMs = l.atMs;
        sum.spot += l.costSpot;
        sum.onDemand += l.costOnDemand;
        sum.actual += l.costActual;
        (l.kind == QLatin1String("wasted") ? sum.wastedSeconds : sum.usefulSeconds) += l.seconds;
        h.costs << sum;
    }
    return h;
}

} // namespace flotilla
