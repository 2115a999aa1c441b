// The price table: the built-in copy compiled into the engine agrees with
// resources/prices.json, rates per second for each price class, and the errors for unknown
// instance types and price classes and for malformed tables.
#include "job/PriceTable.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;

namespace {

QJsonObject sourceTable()
{
    QFile f(QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/prices.json"));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

QJsonObject sourceEntry(const QString &name)
{
    const QJsonArray instances = sourceTable().value(QStringLiteral("instances")).toArray();
    for (const auto &v : instances)
        if (v.toObject().value(QStringLiteral("name")).toString() == name)
            return v.toObject();
    return {};
}

QByteArray table(const QJsonArray &instances)
{
    return QJsonDocument(QJsonObject{{QStringLiteral("compiled"), QStringLiteral("2030-01")},
                                     {QStringLiteral("instances"), instances}})
        .toJson();
}

QJsonObject entry(const QString &name, const QJsonValue &onDemand, const QJsonValue &spot)
{
    QJsonObject o{{QStringLiteral("name"), name}, {QStringLiteral("provider"), QStringLiteral("test")},
                  {QStringLiteral("vcpus"), 4}, {QStringLiteral("gpu"), QString()}};
    if (!onDemand.isUndefined())
        o.insert(QStringLiteral("on_demand_per_hour"), onDemand);
    if (!spot.isUndefined())
        o.insert(QStringLiteral("spot_per_hour"), spot);
    return o;
}

void expectError(const Result<PriceTable> &r, const QStringList &parts)
{
    QVERIFY2(!r.ok(), "the table should have been refused");
    for (const QString &part : parts)
        QVERIFY2(r.error().contains(part), qPrintable(QStringLiteral("'%1' missing from: %2").arg(part, r.error())));
}

} // namespace

class TestPriceTable : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void builtinTableLoads()
    {
        auto t = PriceTable::builtin();
        QVERIFY2(t.ok(), qPrintable(t.error()));
        QVERIFY(!t->compiled().isEmpty());
        QCOMPARE(t->compiled(), sourceTable().value(QStringLiteral("compiled")).toString());
        QCOMPARE(t->compiled(), QStringLiteral("2024-06"));
        QCOMPARE(t->instances().size(), sourceTable().value(QStringLiteral("instances")).toArray().size());
        QVERIFY(t->instances().size() >= 10);

        // load() with an empty path is the same built-in table.
        auto viaLoad = PriceTable::load({});
        QVERIFY2(viaLoad.ok(), qPrintable(viaLoad.error()));
        QCOMPARE(viaLoad->instances().size(), t->instances().size());
    }

    void c5LargeEntryMatchesTheJson()
    {
        auto t = PriceTable::builtin();
        QVERIFY2(t.ok(), qPrintable(t.error()));
        const QJsonObject json = sourceEntry(QStringLiteral("aws/c5.large"));
        QVERIFY(!json.isEmpty());
        const InstancePrice *p = t->find(QStringLiteral("aws/c5.large"));
        QVERIFY(p != nullptr);
        QCOMPARE(p->provider, QStringLiteral("aws"));
        QCOMPARE(p->vcpus, 2);
        QCOMPARE(p->onDemandPerHour, json.value(QStringLiteral("on_demand_per_hour")).toDouble());
        QCOMPARE(p->spotPerHour, json.value(QStringLiteral("spot_per_hour")).toDouble());
        QCOMPARE(p->onDemandPerHour, 0.085);
        QCOMPARE(p->spotPerHour, 0.032);
        QCOMPARE(t->find(QStringLiteral("aws/g4dn.xlarge"))->gpu, QStringLiteral("NVIDIA T4"));
        QVERIFY(t->find(QStringLiteral("aws/c5.huge")) == nullptr);
    }

    void ratesPerPriceClass()
    {
        auto t = PriceTable::builtin();
        QVERIFY2(t.ok(), qPrintable(t.error()));
        const QJsonObject json = sourceEntry(QStringLiteral("aws/c5.large"));
        const double spot = json.value(QStringLiteral("spot_per_hour")).toDouble() / 3600.0;
        const double onDemand = json.value(QStringLiteral("on_demand_per_hour")).toDouble() / 3600.0;
        QVERIFY(spot > 0 && onDemand > spot);

        auto s = t->rates(QStringLiteral("aws/c5.large"), QStringLiteral("spot"));
        QVERIFY2(s.ok(), qPrintable(s.error()));
        QCOMPARE(s->spotPerSecond, spot);
        QCOMPARE(s->onDemandPerSecond, onDemand);
        QCOMPARE(s->actualPerSecond, spot);

        auto od = t->rates(QStringLiteral("aws/c5.large"), QStringLiteral("on-demand"));
        QVERIFY2(od.ok(), qPrintable(od.error()));
        QCOMPARE(od->spotPerSecond, spot);
        QCOMPARE(od->onDemandPerSecond, onDemand);
        QCOMPARE(od->actualPerSecond, onDemand);

        auto v = t->rates(QStringLiteral("aws/c5.large"), QStringLiteral("volunteer"));
        QVERIFY2(v.ok(), qPrintable(v.error()));
        QCOMPARE(v->spotPerSecond, spot);
        QCOMPARE(v->onDemandPerSecond, onDemand);
        QCOMPARE(v->actualPerSecond, 0.0);

        // An hour of spot c5.large: 0.032 USD.
        QVERIFY(qAbs(s->actualPerSecond * 3600.0 - 0.032) < 1e-12);
    }

    void unknownInstanceTypeListsKnownOnes()
    {
        auto t = PriceTable::builtin();
        QVERIFY2(t.ok(), qPrintable(t.error()));
        auto r = t->rates(QStringLiteral("aws/c5.huge"), QStringLiteral("spot"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("'aws/c5.huge' is not in the price table")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("aws/c5.large")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("gcp/e2-standard-4")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("azure/Standard_D4s_v5")), qPrintable(r.error()));
    }

    void unknownPriceClass()
    {
        auto t = PriceTable::builtin();
        QVERIFY2(t.ok(), qPrintable(t.error()));
        auto r = t->rates(QStringLiteral("aws/c5.large"), QStringLiteral("reserved"));
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("price class 'reserved' is unknown")), qPrintable(r.error()));
        QVERIFY2(r.error().contains(QLatin1String("on-demand")), qPrintable(r.error()));
    }

    void parsesACustomTable()
    {
        auto t = PriceTable::parse(table({entry(QStringLiteral("lab/desktop"), 0.5, 0.25)}), QStringLiteral("mine.json"));
        QVERIFY2(t.ok(), qPrintable(t.error()));
        QCOMPARE(t->compiled(), QStringLiteral("2030-01"));
        QCOMPARE(int(t->instances().size()), 1);
        auto r = t->rates(QStringLiteral("lab/desktop"), QStringLiteral("on-demand"));
        QVERIFY2(r.ok(), qPrintable(r.error()));
        QCOMPARE(r->actualPerSecond, 0.5 / 3600.0);
        QCOMPARE(r->spotPerSecond, 0.25 / 3600.0);
    }

    void loadsATableFromAFile()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("prices.json"));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(table({entry(QStringLiteral("a"), 1.0, 0.5), entry(QStringLiteral("b"), 2.0, 0.0)}));
        f.close();
        auto t = PriceTable::load(path);
        QVERIFY2(t.ok(), qPrintable(t.error()));
        QCOMPARE(int(t->instances().size()), 2);
        QCOMPARE(t->find(QStringLiteral("b"))->onDemandPerHour, 2.0);

        const QString missing = dir.filePath(QStringLiteral("none.json"));
        expectError(PriceTable::load(missing), {QStringLiteral("cannot open price table '%1'").arg(missing)});
    }

    void malformedTablesAreRefused()
    {
        const QString origin = QStringLiteral("bad.json");
        expectError(PriceTable::parse(table({entry(QStringLiteral("ok"), 1.0, 0.5),
                                             entry(QStringLiteral("no-spot"), 1.0, QJsonValue(QJsonValue::Undefined))}),
                                      origin),
                    {QStringLiteral("'bad.json', instance 2"), QStringLiteral("spot_per_hour")});
        expectError(PriceTable::parse(table({entry(QStringLiteral("no-od"), QJsonValue(QJsonValue::Undefined), 0.5)}),
                                      origin),
                    {QStringLiteral("instance 1"), QStringLiteral("on_demand_per_hour")});
        expectError(PriceTable::parse(table({entry(QStringLiteral("negative"), 1.0, -0.1)}), origin),
                    {QStringLiteral("'bad.json', instance 1"), QStringLiteral("non-negative")});
        expectError(PriceTable::parse(table({entry(QStringLiteral("text"), QStringLiteral("1.0"), 0.5)}), origin),
                    {QStringLiteral("instance 1"), QStringLiteral("numbers")});
        expectError(PriceTable::parse(table({entry(QString(), 1.0, 0.5)}), origin),
                    {QStringLiteral("instance 1"), QStringLiteral("needs a name")});
        expectError(PriceTable::parse(table({}), origin), {QStringLiteral("'bad.json' lists no instances")});
        expectError(PriceTable::parse("{\"compiled\": \"x\"}", origin), {QStringLiteral("lists no instances")});
        expectError(PriceTable::parse("[1, 2, 3]", origin), {QStringLiteral("'bad.json' must hold a JSON object")});
        expectError(PriceTable::parse("{\"instances\": [", origin), {QStringLiteral("'bad.json' is not valid JSON")});
        expectError(PriceTable::parse("", origin), {QStringLiteral("'bad.json'")});
    }

    void duplicateAndInvertedPricesAreRefused()
    {
        const QString origin = QStringLiteral("bad.json");
        expectError(PriceTable::parse(table({entry(QStringLiteral("a"), 1.0, 0.5), entry(QStringLiteral("a"), 2.0, 0.5)}),
                                      origin),
                    {QStringLiteral("'a' twice")});
        expectError(PriceTable::parse(table({entry(QStringLiteral("odd"), 1.0, 1.5)}), origin),
                    {QStringLiteral("'odd'"), QStringLiteral("spot price (1.5 $/h) is above the on-demand price (1 $/h)")});
    }
};

QTEST_GUILESS_MAIN(TestPriceTable)
#include "tst_pricetable.moc"
