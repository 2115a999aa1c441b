// The polite worker and joining from the desktop: the policy that says when a worker on
// someone's desk may run (idle time from a fake source and a fake clock, a daily window
// that may cross midnight, programs during which not to run, found among real processes,
// suspend for an hour), its decisions reaching a real WorkerAgent through the worker
// window's desk without undoing the owner's own suspension; the Join a fleet dialog with
// real tokens from a trust store; remembered fleets; the login entry under a temporary
// XDG_CONFIG_HOME; and a policy pause in the middle of a subtask from a real `flotilla serve`,
// which hands in the part trained.
#include "FakeClock.h"
#include "TestFiles.h"
#include "TestSupport.h"

#include "agent/WorkerAgent.h"
#include "desktop/AgentDesk.h"
#include "engine/coordination/Store.h"
#include "machine/Autostart.h"
#include "machine/WorkPolicy.h"
#include "net/TrustStore.h"
#include "ui/JoinDialog.h"
#include "ui/WorkerDesk.h"
#include "ui/WorkerSettingsDialog.h"

#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimeEdit>

using namespace flotilla;

namespace {

class FakeIdle final : public IdleSource
{
public:
    std::optional<qint64> idleMs() override { return value; }
    std::optional<qint64> value;
};

class FakePower final : public PowerSource
{
public:
    std::optional<bool> onBattery() override { return value; }
    std::optional<bool> value;
};

// Milliseconds since the epoch of a local time of day on a fixed date.
qint64 localTime(int hour, int minute = 0)
{
    return QDateTime(QDate(2026, 3, 4), QTime(hour, minute)).toMSecsSinceEpoch();
}

WorkerSettings noIdleRule()
{
    WorkerSettings s;
    s.pauseWhenActive = false;
    return s;
}

QByteArray fingerprint()
{
    return QByteArray(32, '\x5a');
}

} // namespace

class TestWorkPolicy : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_config; // XDG_CONFIG_HOME: QSettings and the login entry live here

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_config.isValid());
        qputenv("XDG_CONFIG_HOME", m_config.path().toUtf8());
        QCoreApplication::setOrganizationName(QStringLiteral("FlotillaTest"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_workpolicy"));
        QSettings().clear();
    }

    void pausesWhileTheUserIsActive()
    {
        FakeIdle idle;
        test::FakeClock clock(localTime(12));
        WorkerSettings s;
        s.pauseWhenActive = true;
        s.idleMinutes = 5;
        WorkPolicy policy(s, &idle, &clock);
        QSignalSpy changes(&policy, &WorkPolicy::decisionChanged);

        idle.value = 30'000; // typed 30 s ago
        WorkPolicy::Decision d = policy.evaluate();
        QVERIFY(!d.run);
        QVERIFY2(d.reason.contains(QLatin1String("in use")) && d.reason.contains(QLatin1String("5 min")),
                 qPrintable(d.reason));
        QCOMPARE(changes.size(), 1);
        QCOMPARE(changes.last().at(0).toBool(), false);

        idle.value = 5 * 60'000 - 1; // one millisecond short
        QVERIFY(!policy.evaluate().run);
        idle.value = 6 * 60'000;
        d = policy.evaluate();
        QVERIFY2(d.run, qPrintable(d.reason));
        QCOMPARE(changes.last().at(0).toBool(), true);

        // A desktop that does not say: the worker runs, and the reason says why it does not pause.
        idle.value.reset();
        d = policy.evaluate();
        QVERIFY(d.run);
        QVERIFY2(d.reason.contains(QLatin1String("does not say")), qPrintable(d.reason));

        // The rule off: activity does not matter.
        idle.value = 0;
        s.pauseWhenActive = false;
        policy.setSettings(s);
        QVERIFY(policy.decision().run);
    }

    // A laptop's worker stops when it is unplugged and goes on when it is plugged in again,
    // in the worker window as in Join a fleet… (one decider for both).
    void pausesOnBattery()
    {
        FakePower power;
        test::FakeClock clock(localTime(12));
        WorkerSettings s;
        s.pauseWhenActive = false;
        QVERIFY(s.pauseOnBattery); // by default
        WorkPolicy policy(s, nullptr, &clock, &power);
        power.value = false; // plugged in
        QVERIFY(policy.evaluate().run);
        power.value = true;
        const WorkPolicy::Decision d = policy.evaluate();
        QVERIFY(!d.run);
        QVERIFY2(d.reason.contains(QLatin1String("battery")), qPrintable(d.reason));
        power.value = false;
        QVERIFY(policy.evaluate().run);
        // A machine without a battery, or the rule off: the worker runs.
        power.value.reset();
        QVERIFY(policy.evaluate().run);
        power.value = true;
        s.pauseOnBattery = false;
        policy.setSettings(s);
        QVERIFY(policy.evaluate().run);
        // The owner's own suspension still wins over being plugged in.
        s.pauseOnBattery = true;
        policy.setSettings(s);
        power.value = false;
        policy.setManualSuspended(true);
        QVERIFY(!policy.evaluate().run);
    }

    void honoursADailyWindow()
    {
        test::FakeClock clock(localTime(12));
        WorkerSettings s = noIdleRule();
        s.useWindow = true;
        s.windowStart = QTime(9, 0);
        s.windowEnd = QTime(17, 0);
        WorkPolicy policy(s, nullptr, &clock);
        QVERIFY(policy.evaluate().run);
        clock.advance(6 * 3600'000); // 18:00
        const WorkPolicy::Decision d = policy.evaluate();
        QVERIFY(!d.run);
        QVERIFY2(d.reason.contains(QStringLiteral("09:00–17:00")), qPrintable(d.reason));

        // 19:00–07:00 crosses midnight: evenings and nights run, days do not, the end is excluded.
        s.windowStart = QTime(19, 0);
        s.windowEnd = QTime(7, 0);
        policy.setSettings(s);
        const struct
        {
            int hour, minute;
            bool run;
        } cases[] = {{23, 30, true}, {0, 0, true}, {3, 0, true}, {6, 59, true}, {7, 0, false},
                     {12, 0, false}, {18, 59, false}, {19, 0, true}};
        for (const auto &c : cases) {
            test::FakeClock moment(localTime(c.hour, c.minute));
            WorkPolicy p(s, nullptr, &moment);
            QVERIFY2(p.evaluate().run == c.run, qPrintable(QStringLiteral("%1:%2").arg(c.hour).arg(c.minute)));
        }
        // Unticked, the window does not matter.
        s.useWindow = false;
        test::FakeClock noon(localTime(12));
        QVERIFY(WorkPolicy(s, nullptr, &noon).evaluate().run);
    }

    void pausesWhileAnExclusiveProgramRuns()
    {
#ifndef Q_OS_LINUX
        QSKIP("the test starts a renamed copy of /bin/sleep");
#endif
        // A name longer than the 15 characters Linux keeps of it, unique to this run.
        const QString name = QStringLiteral("flotilla-busy-%1").arg(QCoreApplication::applicationPid() % 100000);
        QVERIFY(name.size() > 15);
        QTemporaryDir dir;
        const QString program = dir.filePath(name);
        QVERIFY(QFile::copy(QStringLiteral("/bin/sleep"), program));
        QVERIFY(QFile::setPermissions(program, QFile::ReadOwner | QFile::ExeOwner));

        test::FakeClock clock(localTime(12));
        WorkerSettings s = noIdleRule();
        s.exclusivePrograms = {QStringLiteral("some-other-program"), name};
        WorkPolicy policy(s, nullptr, &clock);
        QVERIFY2(policy.evaluate().run, qPrintable(policy.decision().reason));

        QProcess busy;
        busy.start(program, {QStringLiteral("60")});
        QVERIFY(busy.waitForStarted());
        QTRY_VERIFY(runningPrograms().contains(name.left(15)));
        const WorkPolicy::Decision d = policy.evaluate();
        QVERIFY(!d.run);
        QCOMPARE(d.reason, QStringLiteral("%1 is running").arg(name));

        busy.kill();
        QVERIFY(busy.waitForFinished());
        QTRY_VERIFY(policy.evaluate().run);
    }

    void suspensionForAnHourEndsByItself()
    {
        FakeIdle idle;
        idle.value = 3600'000;
        test::FakeClock clock(localTime(12));
        WorkPolicy policy(WorkerSettings(), &idle, &clock);
        policy.start(20); // looks every 20 ms; the fake clock decides when the hour is over
        QVERIFY(policy.decision().run);
        policy.suspendFor(3600'000);
        QVERIFY(!policy.decision().run);
        QVERIFY2(policy.decision().reason.contains(QLatin1String("until 13:00")), qPrintable(policy.decision().reason));
        clock.advance(3600'000 - 1000);
        QTest::qWait(100);
        QVERIFY(!policy.decision().run);
        clock.advance(1000);
        QTRY_VERIFY(policy.decision().run);
        QCOMPARE(policy.suspendedUntilMs(), 0);
    }

    // Through the worker window's desk to a real WorkerAgent (not connected to anything: its
    // suspension is its own state).
    void policyNeverUndoesTheOwnersSuspension()
    {
        QTemporaryDir state;
        WorkerAgent::Options options;
        options.stateDir = state.path();
        options.name = QStringLiteral("desk");
        WorkerAgent agent(options);
        FakeIdle idle;
        idle.value = 10 * 60'000;
        test::FakeClock clock(localTime(12));
        WorkPolicy policy(WorkerSettings(), &idle, &clock);
        AgentDesk desk(&agent, &policy, state.path());
        ui::WorkerWindow window(&desk);
        QVERIFY(!agent.suspended());

        // The user comes back: the policy suspends the agent, and the window says why.
        idle.value = 2000;
        policy.evaluate();
        QVERIFY(agent.suspended());
        QVERIFY(!desk.suspended()); // not by the owner
        QCOMPARE(window.stateText(), QStringLiteral("suspended"));
        QVERIFY2(window.policyText().contains(QLatin1String("in use")), qPrintable(window.policyText()));
        QCOMPARE(window.suspendButton()->text(), QStringLiteral("Suspend"));

        // The owner suspends; the user leaves; the policy would run, and does not.
        window.suspendButton()->click();
        QVERIFY(desk.suspended());
        idle.value = 60 * 60'000;
        policy.evaluate();
        QVERIFY(agent.suspended());
        QCOMPARE(window.policyText(), QStringLiteral("suspended by you"));
        QCOMPARE(window.suspendButton()->text(), QStringLiteral("Resume"));

        // A timed suspension that ends does not end the owner's.
        policy.suspendFor(60'000);
        clock.advance(120'000);
        policy.evaluate();
        QVERIFY(agent.suspended());

        // Resume: it runs again.
        window.suspendButton()->click();
        QVERIFY(!desk.suspended());
        QVERIFY(!agent.suspended());

        // Suspend for 1 hour from the window, and the hour passes.
        window.suspendHourButton()->click();
        QVERIFY(agent.suspended());
        QVERIFY(window.policyText().contains(QLatin1String("until")));
        clock.advance(3600'000 + 1);
        policy.evaluate();
        QVERIFY(!agent.suspended());
    }

    // A real coordinator, a real agent: the user comes back while a subtask trains, and the
    // policy's pause hands in what was trained (a result, not a lease left to expire), takes
    // no new subtask, and training goes on when the user leaves again.
    void policyPauseHandsInThePartialResult()
    {
        QTemporaryDir dir;
        QProcess serve;
        serve.setProcessChannelMode(QProcess::MergedChannels);
        serve.setStandardOutputFile(dir.filePath(QStringLiteral("serve.out")));
        const QString tokenFile = dir.filePath(QStringLiteral("token"));
        // Few, large shards trained for several local epochs: a subtask lasts seconds.
        serve.start(test::flotillaBinary(),
                    {QStringLiteral("serve"), QStringLiteral("--run-dir"), dir.filePath(QStringLiteral("run")),
                     QStringLiteral("--identity-dir"), dir.filePath(QStringLiteral("identity")),
                     QStringLiteral("--listen"), QStringLiteral("127.0.0.1"), QStringLiteral("--host"),
                     QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QStringLiteral("0"),
                     QStringLiteral("--token-file"), tokenFile, QStringLiteral("--quiet"),
                     QStringLiteral("--train-limit"), QStringLiteral("8000"), QStringLiteral("--test-limit"),
                     QStringLiteral("200"), QStringLiteral("--shards"), QStringLiteral("2"),
                     QStringLiteral("--local-epochs"), QStringLiteral("4"), QStringLiteral("--epochs"),
                     QStringLiteral("20"), QStringLiteral("--preempt-mean"), QStringLiteral("0")});
        QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(tokenFile) && QFileInfo(tokenFile).size() > 0, 120000);
        QFile file(tokenFile);
        QVERIFY(file.open(QIODevice::ReadOnly));
        auto token = net::JoinToken::decode(QString::fromUtf8(file.readAll()));
        QVERIFY2(token, qPrintable(token.error()));

        WorkerAgent::Options options;
        options.stateDir = dir.filePath(QStringLiteral("worker"));
        options.name = QStringLiteral("desk");
        options.device = QStringLiteral("cpu");
        WorkerAgent agent(options);
        FakeIdle idle;
        idle.value = 3600'000; // away
        test::FakeClock clock(localTime(12));
        WorkPolicy policy(WorkerSettings(), &idle, &clock);
        AgentDesk desk(&agent, &policy, options.stateDir);
        QSignalSpy started(&agent, &WorkerAgent::trainingStarted);
        QVERIFY(agent.start(*token));
        QTRY_VERIFY_WITH_TIMEOUT(!started.isEmpty(), 60000);
        QTRY_VERIFY_WITH_TIMEOUT(agent.status().progress > 0.05, 60000);
        const double progress = agent.status().progress;
        QVERIFY2(progress < 0.9, qPrintable(QString::number(progress))); // caught in the middle
        QCOMPARE(agent.status().subtasksDone, 0);

        idle.value = 1000; // the user is back
        policy.evaluate();
        QVERIFY(agent.suspended());
        // The part trained is handed in as a result of its own...
        QTRY_COMPARE_WITH_TIMEOUT(agent.status().subtasksDone, 1, 30000);
        QCOMPARE(agent.status().state, QStringLiteral("suspended"));
        QVERIFY(agent.status().subtask.isEmpty());
        // The window: which job, which coordinator, what was given today and in all, why it waits.
        ui::WorkerWindow window(&desk);
        const ui::WorkerDeskStatus shown = desk.status();
        QCOMPARE(shown.job, QStringLiteral("fashion-mnist-cnn"));
        QVERIFY2(shown.coordinator.startsWith(QLatin1String("127.0.0.1:")), qPrintable(shown.coordinator));
        QVERIFY(shown.hoursToday > 0);
        QCOMPARE(shown.hoursContributed, shown.hoursToday); // the first hours this machine gave
        QVERIFY2(window.contributionText().contains(QLatin1String("h today")), qPrintable(window.contributionText()));
        QVERIFY(window.policyText().contains(QLatin1String("in use")));
        // ...and nothing new is taken while the user works.
        const qsizetype before = started.size();
        QTest::qWait(1500);
        QCOMPARE(started.size(), before);

        idle.value = 3600'000; // away again
        policy.evaluate();
        QVERIFY(!agent.suspended());
        QTRY_VERIFY_WITH_TIMEOUT(started.size() > before, 30000);

        agent.preemptionNotice();
        serve.terminate();
        QVERIFY(serve.waitForFinished(30000));
        // The coordinator took the first result as part of a subtask, not the whole of it.
        auto store = Store::open(dir.filePath(QStringLiteral("run/flotilla.db")));
        QVERIFY2(store, qPrintable(store.error()));
        auto job = (*store)->latestJob();
        QVERIFY(job && job->has_value());
        auto partial = (*store)->events((*job)->id, EventKind::ResultPartial);
        QVERIFY(partial);
        QVERIFY2(!partial->empty(), "no partial result was folded in");
    }

    void joinDialogNamesWhatIsWrongWithAToken()
    {
        const qint64 now = QDateTime::currentMSecsSinceEpoch();
        QTemporaryDir trust;
        net::TrustStore store(trust.path());
        auto live = store.issueToken(QStringLiteral("lab-server"), 7441, fingerprint(), 3600, 1, now);
        QVERIFY2(live, qPrintable(live.error()));
        auto expired = store.issueToken(QStringLiteral("lab-server"), 7441, fingerprint(), 60, 1, now - 3600'000);
        QVERIFY(expired);

        ui::JoinDialog dialog([now](const QString &text) { return describeJoinToken(text, now); }, {});
        QVERIFY(!dialog.joinButton()->isEnabled());
        const struct
        {
            QString text;
            QString named;
        } bad[] = {
            {QStringLiteral("hello"), QStringLiteral("it should start with 'flt1.'")},
            {QStringLiteral("flt1.***"), QStringLiteral("not base64url")},
            {live->encode().left(40), QStringLiteral("damaged")},
            {expired->encode(), QStringLiteral("expired")},
        };
        for (const auto &b : bad) {
            dialog.tokenText()->setPlainText(b.text);
            QVERIFY2(dialog.message()->text().contains(b.named), qPrintable(dialog.message()->text()));
            QVERIFY(!dialog.joinButton()->isEnabled());
        }

        // A real one, from a file with a trailing newline as `flotilla token` writes it.
        QTemporaryDir files;
        const QString path = files.filePath(QStringLiteral("lab.token"));
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(live->encode().toUtf8() + "\n");
        file.close();
        dialog.askOpenPath = [path] { return path; };
        dialog.openTokenFile();
        QCOMPARE(dialog.tokenText()->toPlainText(), live->encode());
        QVERIFY2(dialog.message()->text().contains(QLatin1String("lab-server:7441")), qPrintable(dialog.message()->text()));
        QVERIFY(dialog.joinButton()->isEnabled());
        dialog.show();
        dialog.joinButton()->click();
        QCOMPARE(dialog.result(), int(QDialog::Accepted));
        QCOMPARE(dialog.token(), live->encode());
        QVERIFY(!dialog.fleet());

        // A file far too big to be a token is refused by its size.
        QFile big(files.filePath(QStringLiteral("big")));
        QVERIFY(big.open(QIODevice::WriteOnly));
        big.write(QByteArray(100000, 'x'));
        big.close();
        QVERIFY(!dialog.loadTokenFile(big.fileName()));
        QVERIFY(dialog.message()->text().contains(QLatin1String("too big")));
    }

    void remembersFleets()
    {
        QSettings().remove(QStringLiteral("fleets"));
        const QDateTime monday(QDate(2026, 3, 2), QTime(9, 0));
        rememberFleet({QStringLiteral("a:7441"), QStringLiteral("/tmp/fleet-a"), monday});
        rememberFleet({QStringLiteral("b:7441"), QStringLiteral("/tmp/fleet-b"), monday.addDays(1)});
        rememberFleet({QStringLiteral("a2:7441"), QStringLiteral("/tmp/fleet-a"), monday.addDays(2)}); // a moved
        const QList<RememberedFleet> fleets = rememberedFleets();
        QCOMPARE(fleets.size(), 2);
        QCOMPARE(fleets[0].coordinator, QStringLiteral("a2:7441"));
        QCOMPARE(fleets[0].joined, monday.addDays(2));
        QCOMPARE(fleets[1].stateDir, QStringLiteral("/tmp/fleet-b"));

        ui::JoinDialog dialog({}, fleets);
        QCOMPARE(dialog.fleetList()->count(), 2);
        QVERIFY(dialog.fleetList()->item(1)->text().contains(QLatin1String("b:7441")));
        QVERIFY(!dialog.startButton()->isEnabled());
        dialog.fleetList()->setCurrentRow(1);
        dialog.show();
        dialog.startButton()->click();
        QCOMPARE(dialog.result(), int(QDialog::Accepted));
        QVERIFY(dialog.fleet());
        QCOMPARE(dialog.fleet()->stateDir, QStringLiteral("/tmp/fleet-b"));
        QVERIFY(dialog.token().isEmpty());
    }

    void loginEntryWrittenAndRemoved()
    {
#if defined(Q_OS_WIN) || defined(Q_OS_MACOS)
        QSKIP("the XDG autostart entry is Linux's");
#endif
        const QString stateDir = m_config.filePath(QStringLiteral("my fleets/lab"));
        const AutostartEntry entry = workerAutostart(stateDir);
        const QString path = m_config.filePath(QStringLiteral("autostart/org.flotilla.FlotillaWorker.desktop"));
        QCOMPARE(autostartLocation(entry.id), path);
        QVERIFY(!QFile::exists(path));

        // Through the desk, as the settings dialog's OK does.
        WorkerAgent::Options options;
        options.stateDir = stateDir;
        WorkerAgent agent(options);
        test::FakeClock clock(localTime(12));
        WorkPolicy policy(noIdleRule(), nullptr, &clock);
        AgentDesk desk(&agent, &policy, stateDir);
        QVERIFY(!desk.settings().startAtLogin);
        WorkerSettings s = desk.settings();
        s.startAtLogin = true;
        s.idleMinutes = 17;
        desk.setSettings(s);
        QVERIFY(QFile::exists(path));
        QVERIFY(desk.settings().startAtLogin);
        QCOMPARE(WorkerSettings::load().idleMinutes, 17); // saved

        QFile file(path);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(file.readAll());
        QVERIFY2(text.contains(QStringLiteral("Exec=%1 --join --state-dir \"%2\"\n")
                                   .arg(QCoreApplication::applicationFilePath(), stateDir)),
                 qPrintable(text));
        const QString validator = QStandardPaths::findExecutable(QStringLiteral("desktop-file-validate"));
        if (!validator.isEmpty()) {
            QProcess validate;
            validate.start(validator, {path});
            QVERIFY(validate.waitForFinished());
            QVERIFY2(validate.exitCode() == 0, validate.readAllStandardOutput().constData());
        }

        s.startAtLogin = false;
        desk.setSettings(s);
        QVERIFY(!QFile::exists(path));
        QVERIFY(!desk.settings().startAtLogin);
        QVERIFY(setAutostart(entry, false)); // removing an absent entry is fine
    }

    void settingsDialogRoundTrip()
    {
        WorkerSettings s;
        s.pauseWhenActive = false;
        s.idleMinutes = 12;
        s.useWindow = true;
        s.windowStart = QTime(20, 30);
        s.windowEnd = QTime(6, 15);
        s.exclusivePrograms = {QStringLiteral("blender"), QStringLiteral("steam")};
        s.threads = 1;
        s.device = QStringLiteral("cuda:3"); // not among the choices: kept
        s.startAtLogin = true;
        s.pauseOnBattery = false;
        ui::WorkerSettingsDialog dialog(s, {QStringLiteral("auto"), QStringLiteral("cpu")});
        QVERIFY(!dialog.idleMinutes()->isEnabled());
        WorkerSettings back = dialog.settings();
        QCOMPARE(back.idleMinutes, 12);
        QCOMPARE(back.windowStart, QTime(20, 30));
        QCOMPARE(back.windowEnd, QTime(6, 15));
        QCOMPARE(back.exclusivePrograms, s.exclusivePrograms);
        QCOMPARE(back.device, QStringLiteral("cuda:3"));
        QVERIFY(back.useWindow && !back.pauseWhenActive && back.startAtLogin && !back.pauseOnBattery);

        dialog.pauseWhenActive()->setChecked(true);
        QVERIFY(dialog.idleMinutes()->isEnabled());
        dialog.programs()->setPlainText(QStringLiteral("  blender \n\n obs\n"));
        dialog.device()->setCurrentText(QStringLiteral("cpu"));
        back = dialog.settings();
        QCOMPARE(back.exclusivePrograms, (QStringList{QStringLiteral("blender"), QStringLiteral("obs")}));
        QCOMPARE(back.device, QStringLiteral("cpu"));
        back.save();
        const WorkerSettings loaded = WorkerSettings::load();
        QCOMPARE(loaded.exclusivePrograms, back.exclusivePrograms);
        QCOMPARE(loaded.windowStart, QTime(20, 30));
        QVERIFY(loaded.pauseWhenActive);
        QVERIFY(!loaded.pauseOnBattery);
    }
};

QTEST_MAIN(TestWorkPolicy)
#include "tst_workpolicy.moc"
