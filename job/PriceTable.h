#pragma once
// Instance prices for cost accounting: on-demand and spot $/h per instance type. The
// built-in table (resources/prices.json) is dated and approximate; users point a job at
// their own copy for their region.

#include "common/Result.h"

#include <QList>
#include <QString>

namespace flotilla {

struct InstancePrice
{
    QString name;     // e.g. "aws/c5.large"
    QString provider;
    int vcpus = 0;
    QString gpu;
    double onDemandPerHour = 0.0;
    double spotPerHour = 0.0;
};

// What one second of a worker costs: at spot prices, at on-demand prices, and what it
// actually costs given its price class (volunteers cost nothing).
struct CostRates
{
    double spotPerSecond = 0.0;
    double onDemandPerSecond = 0.0;
    double actualPerSecond = 0.0;
};

class PriceTable
{
public:
    static Result<PriceTable> builtin();
    static Result<PriceTable> load(const QString &path); // empty path: the built-in table
    static Result<PriceTable> parse(const QByteArray &json, const QString &origin);

    const InstancePrice *find(const QString &instanceType) const;
    Result<CostRates> rates(const QString &instanceType, const QString &priceClass) const;
    QString compiled() const { return m_compiled; }
    const QList<InstancePrice> &instances() const { return m_instances; }

private:
    QString m_compiled;
    QList<InstancePrice> m_instances;
};

} // namespace flotilla
