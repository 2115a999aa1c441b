// The logging categories, declared in one place (common/LogCategories.h): each concern can be
// quieted on its own with QT_LOGGING_RULES, in this process and in a real `flotilla train`,
// whose flotilla.log names every line's category.
#include "TestSupport.h"
#include "common/LogCategories.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;

namespace {

// The categories of a run's flotilla.log lines ("<time> <level> <category>: <message>").
QSet<QString> categoriesIn(const QString &log)
{
    QFile f(log);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    QSet<QString> out;
    while (!f.atEnd()) {
        const QList<QByteArray> parts = f.readLine().split(' ');
        if (parts.size() > 3 && parts[2].endsWith(':'))
            out << QString::fromUtf8(parts[2].chopped(1));
    }
    return out;
}

} // namespace

class TestLogCategories : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void everyConcernHasItsOwnCategory()
    {
        const QStringList names{QLatin1String(lcEngine().categoryName()),     QLatin1String(lcNet().categoryName()),
                                QLatin1String(lcServer().categoryName()),     QLatin1String(lcAgent().categoryName()),
                                QLatin1String(lcDesktop().categoryName()),    QLatin1String(lcUi().categoryName()),
                                QLatin1String(lcApp().categoryName()),        QLatin1String(lcEvents().categoryName()),
                                QLatin1String(lcStore().categoryName()),      QLatin1String(lcData().categoryName()),
                                QLatin1String(lcEnrolment().categoryName()), QLatin1String(lcScheduling().categoryName())};
        QCOMPARE(QSet<QString>(names.begin(), names.end()).size(), names.size());
        for (const QString &name : names)
            QVERIFY2(name.startsWith(QLatin1String("flotilla.")), qPrintable(name));
        QVERIFY(lcData().isInfoEnabled());
        QVERIFY(!lcScheduling().isDebugEnabled());
        QLoggingCategory::setFilterRules(QStringLiteral("flotilla.data.info=false\nflotilla.scheduling.debug=true"));
        QVERIFY(!lcData().isInfoEnabled());
        QVERIFY(lcData().isWarningEnabled());
        QVERIFY(lcEvents().isInfoEnabled());
        QVERIFY(lcScheduling().isDebugEnabled());
        QLoggingCategory::setFilterRules(QString());
        QVERIFY(lcData().isInfoEnabled());
    }

    void aRunsLogCanLeaveOneConcernOut()
    {
        QTemporaryDir dir;
        QFile csv(dir.filePath(QStringLiteral("t.csv")));
        QVERIFY(csv.open(QIODevice::WriteOnly));
        csv.write("a,b,label\n");
        for (int i = 0; i < 200; ++i)
            csv.write(QByteArray::number(i % 7) + ',' + QByteArray::number(i % 3) + ',' + QByteArray::number(i % 2) + '\n');
        csv.close();
        const auto train = [&](const QString &run) {
            return test::runFlotilla({QStringLiteral("train"), QStringLiteral("--dataset"), QStringLiteral("csv"),
                                      QStringLiteral("--data"), csv.fileName(), QStringLiteral("--model"),
                                      QStringLiteral("mlp"), QStringLiteral("--epochs"), QStringLiteral("1"),
                                      QStringLiteral("--workers"), QStringLiteral("1"), QStringLiteral("--preempt-mean"),
                                      QStringLiteral("0"), QStringLiteral("--run-dir"), dir.filePath(run),
                                      QStringLiteral("--quiet")},
                                     60000);
        };
        const auto all = train(QStringLiteral("all"));
        QVERIFY2(all.finished && all.exitCode == 0, qPrintable(all.out + all.err));
        const QSet<QString> logged = categoriesIn(dir.filePath(QStringLiteral("all/flotilla.log")));
        QVERIFY2(logged.contains(QStringLiteral("flotilla.events")) && logged.contains(QStringLiteral("flotilla.data")),
                 qPrintable(QStringList(logged.begin(), logged.end()).join(u' ')));

        qputenv("QT_LOGGING_RULES", "flotilla.events.info=false");
        const auto quiet = train(QStringLiteral("quiet"));
        qunsetenv("QT_LOGGING_RULES");
        QVERIFY2(quiet.finished && quiet.exitCode == 0, qPrintable(quiet.out + quiet.err));
        const QSet<QString> left = categoriesIn(dir.filePath(QStringLiteral("quiet/flotilla.log")));
        QVERIFY2(!left.contains(QStringLiteral("flotilla.events")) && left.contains(QStringLiteral("flotilla.data")),
                 qPrintable(QStringList(left.begin(), left.end()).join(u' ')));
    }
};

QTEST_GUILESS_MAIN(TestLogCategories)
#include "tst_logcategories.moc"
