#include "ui/RunCatalog.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <map>

namespace flotilla::ui {

namespace {

// Every leaf of a job file as "section.key" -> its value as text.
void flatten(const QJsonObject &object, const QString &prefix, std::map<QString, QString> &out)
{
    for (auto it = object.begin(); it != object.end(); ++it) {
        const QString key = prefix.isEmpty() ? it.key() : prefix + u'.' + it.key();
        const QJsonValue v = it.value();
        if (v.isObject())
            flatten(v.toObject(), key, out);
        else if (v.isArray())
            out[key] = QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
        else if (v.isDouble())
            out[key] = QString::number(v.toDouble(), 'g', 6);
        else if (v.isBool())
            out[key] = v.toBool() ? QStringLiteral("on") : QStringLiteral("off");
        else
            out[key] = v.toString();
    }
}

// How a legend says one setting: the words people use for the common ones.
QString phrase(const QString &key, const QString &value)
{
    static const std::map<QString, QString> words{
        {QStringLiteral("aggregation.alpha"), QStringLiteral("α %1")},
        {QStringLiteral("aggregation.buffer"), QStringLiteral("buffer %1")},
        {QStringLiteral("training.learning_rate"), QStringLiteral("lr %1")},
        {QStringLiteral("training.batch_size"), QStringLiteral("batch %1")},
        {QStringLiteral("training.epochs"), QStringLiteral("%1 epochs")},
        {QStringLiteral("training.shards"), QStringLiteral("%1 shards")},
        {QStringLiteral("fleet.workers"), QStringLiteral("%1 workers")},
        {QStringLiteral("fleet.preemption.mean_interval_s"), QStringLiteral("preemption every %1 s")},
    };
    // Values that name themselves: a rule, a model, a data set, an optimizer.
    static const QStringList self{QStringLiteral("aggregation.rule"), QStringLiteral("model.kind"),
                                  QStringLiteral("dataset.kind"), QStringLiteral("training.optimizer")};
    if (self.contains(key))
        return value;
    if (auto it = words.find(key); it != words.end())
        return it->second.arg(value);
    QString name = key.section(u'.', -1);
    name.replace(u'_', u' ');
    return QStringLiteral("%1 %2").arg(name, value.isEmpty() ? QStringLiteral("(none)") : value);
}

} // namespace

QList<QStringList> differences(const QList<JobSpec> &jobs)
{
    std::vector<std::map<QString, QString>> flat(jobs.size());
    std::map<QString, int> keys; // every key, in the job file's order of sections
    for (qsizetype i = 0; i < jobs.size(); ++i) {
        flatten(jobs[i].toJson(), {}, flat[i]);
        for (const auto &kv : flat[i])
            keys.emplace(kv.first, 0);
    }
    // The rule and its settings first, then training, the fleet, the model, the data.
    const QStringList order{QStringLiteral("aggregation"), QStringLiteral("training"), QStringLiteral("fleet"),
                            QStringLiteral("model"), QStringLiteral("dataset")};
    std::vector<QString> differing;
    for (const auto &kv : keys) {
        if (kv.first == QLatin1String("name"))
            continue; // each run is named anyway
        bool same = true;
        for (size_t i = 1; i < flat.size() && same; ++i)
            same = flat[i][kv.first] == flat[0][kv.first];
        if (!same)
            differing.push_back(kv.first);
    }
    // The rule itself leads; then by section.
    const auto rank = [&order](const QString &key) {
        return key == QLatin1String("aggregation.rule") ? -1 : int(order.indexOf(key.section(u'.', 0, 0)));
    };
    std::stable_sort(differing.begin(), differing.end(),
                     [&rank](const QString &a, const QString &b) { return rank(a) < rank(b); });
    QList<QStringList> out;
    for (size_t i = 0; i < flat.size(); ++i) {
        QStringList phrases;
        for (const QString &key : differing)
            phrases << phrase(key, flat[i][key]);
        out << phrases;
    }
    return out;
}

QString formatDuration(qint64 ms)
{
    const qint64 s = std::max<qint64>(0, ms / 1000);
    if (s >= 3600)
        return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QLatin1Char('0'));
    if (s >= 60)
        return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
    return QStringLiteral("%1 s").arg(s);
}

} // namespace flotilla::ui
