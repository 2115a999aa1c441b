#include "job/PriceTable.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace flotilla {

Result<PriceTable> PriceTable::builtin()
{
    return load({});
}

Result<PriceTable> PriceTable::load(const QString &path)
{
    const QString source = path.isEmpty() ? QStringLiteral(":/flotilla/prices.json") : path;
    QFile file(source);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open price table '%1': %2").arg(source, file.errorString()));
    return parse(file.readAll(), source);
}

Result<PriceTable> PriceTable::parse(const QByteArray &json, const QString &origin)
{
    QJsonParseError error{};
    const QJsonDocument doc = QJsonDocument::fromJson(json, &error);
    if (error.error != QJsonParseError::NoError)
        return fail(QStringLiteral("price table '%1' is not valid JSON at offset %2: %3")
                        .arg(origin).arg(error.offset).arg(error.errorString()));
    if (!doc.isObject())
        return fail(QStringLiteral("price table '%1' must hold a JSON object with an \"instances\" array").arg(origin));
    PriceTable table;
    table.m_compiled = doc.object().value(QStringLiteral("compiled")).toString();
    const QJsonArray instances = doc.object().value(QStringLiteral("instances")).toArray();
    if (instances.isEmpty())
        return fail(QStringLiteral("price table '%1' lists no instances").arg(origin));
    for (int i = 0; i < instances.size(); ++i) {
        const QJsonObject o = instances.at(i).toObject();
        InstancePrice p;
        p.name = o.value(QStringLiteral("name")).toString();
        p.provider = o.value(QStringLiteral("provider")).toString();
        p.vcpus = o.value(QStringLiteral("vcpus")).toInt();
        p.gpu = o.value(QStringLiteral("gpu")).toString();
        const QJsonValue onDemand = o.value(QStringLiteral("on_demand_per_hour"));
        const QJsonValue spot = o.value(QStringLiteral("spot_per_hour"));
        if (p.name.isEmpty() || !onDemand.isDouble() || !spot.isDouble() || onDemand.toDouble() < 0
            || spot.toDouble() < 0)
            return fail(QStringLiteral("price table '%1', instance %2: each entry needs a name and non-negative "
                                       "on_demand_per_hour and spot_per_hour numbers")
                            .arg(origin).arg(i + 1));
        p.onDemandPerHour = onDemand.toDouble();
        p.spotPerHour = spot.toDouble();
        if (p.spotPerHour > p.onDemandPerHour)
            return fail(QStringLiteral("price table '%1', instance '%2': the spot price (%3 $/h) is above the "
                                       "on-demand price (%4 $/h)")
                            .arg(origin, p.name).arg(p.spotPerHour).arg(p.onDemandPerHour));
        if (table.find(p.name))
            return fail(QStringLiteral("price table '%1' lists instance '%2' twice").arg(origin, p.name));
        table.m_instances << p;
    }
    return table;
}

const InstancePrice *PriceTable::find(const QString &instanceType) const
{
    for (const auto &p : m_instances)
        if (p.name == instanceType)
            return &p;
    return nullptr;
}

Result<CostRates> PriceTable::rates(const QString &instanceType, const QString &priceClass) const
{
    const InstancePrice *p = find(instanceType);
    if (!p) {
        QStringList names;
        for (const auto &i : m_instances)
            names << i.name;
        return fail(QStringLiteral("instance type '%1' is not in the price table (known: %2)")
                        .arg(instanceType, names.join(QStringLiteral(", "))));
    }
    CostRates r;
    r.spotPerSecond = p->spotPerHour / 3600.0;
    r.onDemandPerSecond = p->onDemandPerHour / 3600.0;
    if (priceClass == QLatin1String("spot"))
        r.actualPerSecond = r.spotPerSecond;
    else if (priceClass == QLatin1String("on-demand"))
        r.actualPerSecond = r.onDemandPerSecond;
    else if (priceClass == QLatin1String("volunteer"))
        r.actualPerSecond = 0.0;
    else
        return fail(QStringLiteral("price class '%1' is unknown (spot, on-demand, volunteer)").arg(priceClass));
    return r;
}

} // namespace flotilla
