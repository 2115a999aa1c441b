// The worker's pacing of its Requests (agent/RequestPacer), on a clock the test moves: the
// backoff after answers with nothing to train, a NoWork's wait, and the ceiling under every
// path, checked against numbers worked out by hand and against the coordinator's budget
// (50 Requests a second, bursts of 200).
#include "agent/RequestPacer.h"

#include <QtTest>

using namespace flotilla;

namespace {

RequestPacer::Options seeded()
{
    RequestPacer::Options o;
    o.seed = 42;
    return o;
}

// Sends Requests as soon as the pacer lets them go, from 0 to untilMs; `answer` is called
// after each with the time and says what the Request was answered with. Returns the count.
template <typename Answer>
int drive(RequestPacer &pacer, qint64 untilMs, Answer answer)
{
    qint64 now = 0;
    int sent = 0;
    while (now < untilMs) {
        if (const qint64 wait = pacer.delayMs(now); wait > 0) {
            now += wait;
            continue;
        }
        pacer.asked(now);
        ++sent;
        now = answer(pacer, now);
    }
    return sent;
}

} // namespace

class TestRequestPacer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void theFirstRequestGoesAtOnce()
    {
        RequestPacer pacer(seeded());
        QCOMPARE(pacer.delayMs(0), qint64(0));
        QCOMPARE(pacer.delayMs(123456), qint64(0));
    }

    // 200 ms, then doubling to the 5 s cap, each within [0.5, 1.5) of itself.
    void answersWithNothingToTrainBackOff()
    {
        RequestPacer pacer(seeded());
        qint64 now = 0;
        const qint64 expected[] = {200, 400, 800, 1600, 3200, 5000, 5000};
        for (const qint64 backoff : expected) {
            pacer.asked(now);
            pacer.answeredWithout(now);
            QCOMPARE(pacer.currentBackoffMs(), backoff);
            const qint64 wait = pacer.delayMs(now);
            QVERIFY2(wait >= backoff / 2 && wait < backoff * 3 / 2,
                     qPrintable(QStringLiteral("waited %1 for a backoff of %2").arg(wait).arg(backoff)));
            now += wait;
            QCOMPARE(pacer.delayMs(now), qint64(0));
        }
        // A lease trained: the next unproductive answer starts from 200 ms again.
        pacer.trained();
        QCOMPARE(pacer.currentBackoffMs(), qint64(0));
        QCOMPARE(pacer.delayMs(now), qint64(0));
        pacer.asked(now);
        pacer.answeredWithout(now);
        QCOMPARE(pacer.currentBackoffMs(), qint64(200));
    }

    // The coordinator's hint, but never under 200 ms nor over 10 s; it does not grow the backoff.
    void aNoWorkWaitsWhatTheCoordinatorSays()
    {
        RequestPacer pacer(seeded());
        pacer.asked(0);
        pacer.noWork(0, 600);
        QCOMPARE(pacer.delayMs(0), qint64(600));
        QCOMPARE(pacer.delayMs(600), qint64(0));
        pacer.asked(600);
        pacer.noWork(600, 0);
        QCOMPARE(pacer.delayMs(600), qint64(200));
        pacer.asked(800);
        pacer.noWork(800, 3600000);
        QCOMPARE(pacer.delayMs(800), qint64(10000));
        QCOMPARE(pacer.currentBackoffMs(), qint64(0));
    }

    // Whatever the answers, at most 20 at once and 10 a second after: the bucket under every
    // path. Here the answers come at once and each is "nothing to train" that the backoff
    // would slow, but a trained lease resets it each time: only the ceiling holds it.
    void theCeilingHoldsWhateverTheAnswers()
    {
        RequestPacer pacer(seeded());
        const int sent = drive(pacer, 10000, [](RequestPacer &p, qint64 now) {
            p.trained();
            return now + 1;
        });
        // 20 at once, then one per 100 ms for the rest of the 10 s.
        QVERIFY2(sent >= 115 && sent <= 121, qPrintable(QString::number(sent)));
        QVERIFY2(pacer.peakPerSecond() <= 30, qPrintable(QString::number(pacer.peakPerSecond())));
        QCOMPARE(pacer.requests(), qint64(sent));
    }

    // The loop the fleet used to make: each Request answered at once by a Welcome that moves
    // the worker to another job (nothing trained). Over a minute the worker asks about a
    // dozen times, not thousands, and never near the coordinator's budget.
    void aWelcomeLoopSlowsToAFewRequestsAMinute()
    {
        RequestPacer pacer(seeded());
        const int sent = drive(pacer, 60000, [](RequestPacer &p, qint64 now) {
            p.answeredWithout(now + 2);
            return now + 2;
        });
        QVERIFY2(sent <= 25, qPrintable(QString::number(sent)));
        QVERIFY2(pacer.peakPerSecond() <= 5, qPrintable(QString::number(pacer.peakPerSecond())));
    }

    // An honest worker training subtasks of 2 s asks once per subtask, never delayed.
    void trainingWorkersAreNeverDelayed()
    {
        RequestPacer pacer(seeded());
        qint64 now = 0;
        for (int i = 0; i < 100; ++i) {
            QCOMPARE(pacer.delayMs(now), qint64(0));
            pacer.asked(now);
            pacer.trained();
            now += 2000;
        }
        QCOMPARE(pacer.peakPerSecond(), 1);
    }
};

QTEST_GUILESS_MAIN(TestRequestPacer)
#include "tst_requestpacer.moc"
