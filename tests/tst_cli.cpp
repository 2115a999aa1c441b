// The `flotilla` command line, run as a real process: help, version, usage errors with exit
// code 2 that name the bad flag, field or file, and --save-job writing the effective job.
// Nothing here trains to the end: every `train` run fails on its arguments, stops at
// --save-job, or is killed once it has started.
#include "TestSupport.h"
#include "job/JobSpec.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;

namespace {

using Run = test::ProcessRun;

QJsonObject readJsonObject(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

} // namespace

class TestCli : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    QString path(const char *name) const { return m_dir.filePath(QString::fromLatin1(name)); }

    Run run(const QStringList &arguments) { return test::runFlotilla(arguments, 60000, m_dir.path()); }

    // Runs and checks the exit code; on a mismatch the output is shown.
    Run expectExit(const QStringList &arguments, int code)
    {
        const Run r = run(arguments);
        if (!r.finished || r.exitCode != code)
            qWarning().noquote() << "flotilla" << arguments.join(u' ') << "exited with" << r.exitCode
                                 << "\nstdout:" << r.out << "\nstderr:" << r.err;
        return r;
    }

    static void expectText(const QString &text, const QStringList &parts)
    {
        for (const QString &part : parts)
            QVERIFY2(text.contains(part), qPrintable(QStringLiteral("'%1' missing from:\n%2").arg(part, text)));
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        QVERIFY2(QFileInfo(test::flotillaBinary()).isExecutable(), qPrintable(test::flotillaBinary()));
    }

    void helpListsTheTrainCommand()
    {
        const Run r = expectExit({QStringLiteral("--help")}, 0);
        QVERIFY(r.finished);
        QCOMPARE(r.exitCode, 0);
        expectText(r.out, {QStringLiteral("Usage: flotilla [<command>] [options]"), QStringLiteral("Commands:"),
                           QStringLiteral("  train "), QStringLiteral("Train a job"), QStringLiteral("--version")});
    }

    // flotilla-headless: every command that needs no window, none that does, and no window
    // library linked (what a server, a container or a worker without a display runs).
    void headlessBinaryHasTheCommandsWithoutWindows()
    {
        const QString headless = test::headlessBinary();
        QVERIFY2(QFileInfo(headless).isExecutable(), qPrintable(headless));
        const Run help = test::runProgram(headless, {QStringLiteral("--help")}, 60000, m_dir.path());
        QCOMPARE(help.exitCode, 0);
        expectText(help.out, {QStringLiteral("Usage: flotilla-headless [<command>] [options]")});
        for (const char *command : {"train", "serve", "submit", "jobs", "worker", "token", "revoke", "release", "demo",
                                    "bench"})
            expectText(help.out, {QStringLiteral("  %1 ").arg(QLatin1String(command))});
        QVERIFY2(!help.out.contains(QLatin1String("  simulate ")) && !help.out.contains(QLatin1String("  gui ")),
                 qPrintable(help.out));
        const Run version = test::runProgram(headless, {QStringLiteral("--version")}, 60000, m_dir.path());
        QCOMPARE(version.out, QStringLiteral("flotilla-headless " FLOTILLA_VERSION "\n"));
        // A window asked of it is refused with where to find one.
        const Run gui = test::runProgram(headless, {QStringLiteral("gui")}, 60000, m_dir.path());
        QCOMPARE(gui.exitCode, 2);
        expectText(gui.err, {QStringLiteral("has no windows"), QStringLiteral("flotilla-headless worker --join")});
        // It trains: a short job from the headless binary.
        const Run train = test::runProgram(
            headless,
            {QStringLiteral("train"), QStringLiteral("--model"), QStringLiteral("mlp"), QStringLiteral("--epochs"),
             QStringLiteral("1"), QStringLiteral("--shards"), QStringLiteral("4"), QStringLiteral("--workers"),
             QStringLiteral("2"), QStringLiteral("--train-limit"), QStringLiteral("2000"), QStringLiteral("--test-limit"),
             QStringLiteral("500"), QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--run-dir"),
             path("headless-run")},
            120000, m_dir.path());
        QVERIFY2(train.exitCode == 0, qPrintable(train.err));
        QVERIFY(QFileInfo::exists(path("headless-run") + QStringLiteral("/model.pt")));
#ifdef Q_OS_LINUX
        // What the dynamic linker loads: no Qt Widgets, Charts or OpenGL.
        const Run ldd = test::runProgram(QStringLiteral("ldd"), {headless}, 60000, m_dir.path());
        QCOMPARE(ldd.exitCode, 0);
        for (const char *library : {"libQt6Widgets", "libQt6Charts", "libQt6OpenGL"})
            QVERIFY2(!ldd.out.contains(QLatin1String(library)), qPrintable(ldd.out));
        const Run full = test::runProgram(QStringLiteral("ldd"), {test::flotillaBinary()}, 60000, m_dir.path());
        QVERIFY2(full.out.contains(QLatin1String("libQt6Charts")), "the check would not see a linked library");
#endif
    }

    void noArgumentsOpensTheControlCenter()
    {
        // With a display (here the offscreen platform), the window opens and paints.
        QProcess gui;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        env.insert(QStringLiteral("XDG_DATA_HOME"), m_dir.filePath(QStringLiteral("data")));
        env.insert(QStringLiteral("XDG_CONFIG_HOME"), m_dir.filePath(QStringLiteral("config")));
        gui.setProcessEnvironment(env);
        gui.start(test::flotillaBinary(), {QStringLiteral("gui"), QStringLiteral("--exit-after-paint")});
        QVERIFY(gui.waitForFinished(60000));
        QCOMPARE(gui.exitCode(), 0);
        QVERIFY2(gui.readAllStandardOutput().contains("first window painted"), "the window was not painted");
    }

    void noArgumentsWithoutADisplayTrainsHeadless()
    {
        QProcess headless;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        for (const char *name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
            env.remove(QString::fromLatin1(name));
        env.insert(QStringLiteral("XDG_DATA_HOME"), m_dir.filePath(QStringLiteral("data")));
        headless.setProcessEnvironment(env);
        headless.setProcessChannelMode(QProcess::MergedChannels);
        headless.start(test::flotillaBinary(), QStringList());
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += headless.readAll()).contains("Starting job"), 60000);
        QVERIFY2(seen.contains("no display: training the default job headless"), seen.constData());
        headless.kill(); // the default job takes minutes; that it started is enough here
        headless.waitForFinished();
        // Without a display the worker window says what to use instead...
        QProcess noWindow;
        noWindow.setProcessEnvironment(env);
        noWindow.start(test::flotillaBinary(), {QStringLiteral("--join"), QStringLiteral("flt1.x")});
        QVERIFY(noWindow.waitForFinished(30000));
        QCOMPARE(noWindow.exitCode(), 2);
        expectText(QString::fromUtf8(noWindow.readAllStandardError()), {QStringLiteral("flotilla worker --join TOKEN")});
        // ...and with one it refuses a damaged token before opening.
        QProcess window;
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        window.setProcessEnvironment(env);
        window.start(test::flotillaBinary(), {QStringLiteral("--join"), QStringLiteral("flt1.x")});
        QVERIFY(window.waitForFinished(30000));
        QCOMPARE(window.exitCode(), 2);
        expectText(QString::fromUtf8(window.readAllStandardError()), {QStringLiteral("join token is damaged")});
    }

    // LibTorch's thread pool reads its wait policy when it loads: the program starts itself
    // again, in place, with passive waits unless the user chose a policy (ProcessSetup.h).
    void threadPoolsWaitPassivelyUnlessTheUserChose()
    {
#ifndef Q_OS_LINUX
        QSKIP("reads /proc/PID/environ");
#else
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
        const auto environmentOfTraining = [&](const QString &chosen) {
            QProcess train;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            for (const char *name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"})
                env.remove(QString::fromLatin1(name));
            if (!chosen.isEmpty())
                env.insert(chosen.section(u'=', 0, 0), chosen.section(u'=', 1));
            train.setProcessEnvironment(env);
            train.setProcessChannelMode(QProcess::MergedChannels);
            train.start(test::flotillaBinary(), {QStringLiteral("train"), QStringLiteral("--run-dir"),
                                                 m_dir.filePath(QStringLiteral("wait-") + QString::number(qHash(chosen))),
                                                 QStringLiteral("--quiet")});
            QByteArray seen;
            [&] { QTRY_VERIFY_WITH_TIMEOUT((seen += train.readAll()).contains("Starting job"), 60000); }();
            // The process that trains is the one started: the same id, now with the policy.
            QFile environ(QStringLiteral("/proc/%1/environ").arg(train.processId()));
            const QList<QByteArray> variables = environ.open(QIODevice::ReadOnly) ? environ.readAll().split('\0')
                                                                                 : QList<QByteArray>();
            train.kill();
            train.waitForFinished();
            return variables;
        };
        const QList<QByteArray> ours = environmentOfTraining({});
        QVERIFY2(ours.contains("OMP_WAIT_POLICY=PASSIVE"), "training ran with the runtime's spinning waits");
        const QList<QByteArray> theirs = environmentOfTraining(QStringLiteral("GOMP_SPINCOUNT=1000"));
        QVERIFY2(!theirs.isEmpty(), "the second run's environment could not be read");
        QVERIFY2(theirs.contains("GOMP_SPINCOUNT=1000"), "the user's own choice was lost");
        QVERIFY2(!theirs.contains("OMP_WAIT_POLICY=PASSIVE"), "the user's choice was overridden");
#endif
    }

    void version()
    {
        const QString expected = QStringLiteral("flotilla " FLOTILLA_VERSION "\n");
        QVERIFY(QStringLiteral(FLOTILLA_VERSION).contains(u'.'));
        const Run r = expectExit({QStringLiteral("--version")}, 0);
        QCOMPARE(r.exitCode, 0);
        QCOMPARE(r.out, expected);
        // The version is the project's, as CMakeLists.txt declares it.
        QFile cmake(QStringLiteral(FLOTILLA_SOURCE_DIR "/CMakeLists.txt"));
        QVERIFY(cmake.open(QIODevice::ReadOnly));
        const auto match = QRegularExpression(QStringLiteral("project\\(Flotilla\\s+VERSION\\s+([0-9.]+)"))
                               .match(QString::fromUtf8(cmake.readAll()));
        QVERIFY(match.hasMatch());
        QCOMPARE(r.out, QStringLiteral("flotilla %1\n").arg(match.captured(1)));
    }

    void trainHelpMentionsEveryFlag()
    {
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--help")}, 0);
        QVERIFY(r.finished);
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.out.startsWith(QLatin1String("Usage: ")), qPrintable(r.out));
        // The usage line names the command as a user types it.
        QVERIFY2(r.out.startsWith(QLatin1String("Usage: flotilla train [options]")), qPrintable(r.out.section(u'\n', 0, 0)));
        const char *const flags[] = {
            "--job", "--run-dir", "--save-job", "--workers", "--epochs", "--shards", "--local-epochs",
            "--local-steps", "--batch-size", "--optimizer", "--lr", "--momentum", "--lr-schedule", "--seed",
            "--threads", "--device", "--model", "--model-file", "--dropout", "--dataset", "--data",
            "--label-column", "--train-limit", "--test-limit", "--rule", "--alpha", "--lease-timeout",
            "--preempt-mean", "--preempt-notice", "--rejoin-delay", "--instance-type", "--price-class",
            "--price-table", "--quiet", "--verbose"};
        for (const char *flag : flags)
            expectText(r.out, {QString::fromLatin1(flag).append(u' ')});
        // Value names are shown, so a user knows what a flag takes.
        expectText(r.out, {QStringLiteral("--epochs <n>"), QStringLiteral("--rule <name>"),
                           QStringLiteral("--price-class <class>"), QStringLiteral("--save-job <file>")});
    }

    void unknownCommand()
    {
        const Run r = expectExit({QStringLiteral("frobnicate")}, 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {QStringLiteral("unknown command 'frobnicate'"), QStringLiteral("Usage: flotilla")});
        QVERIFY(r.out.isEmpty());
    }

    void unknownOptionAndStrayArgument()
    {
        const QString saved = path("stray.json");
        Run r = expectExit({QStringLiteral("train"), QStringLiteral("--epochz"), QStringLiteral("3"),
                            QStringLiteral("--save-job"), saved},
                           2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {QStringLiteral("flotilla train:"), QStringLiteral("epochz")});
        r = expectExit({QStringLiteral("train"), QStringLiteral("extra"), QStringLiteral("--save-job"), saved}, 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {QStringLiteral("unexpected argument 'extra'")});
        QVERIFY(!QFile::exists(saved));
    }

    void nonIntegerEpochs()
    {
        // --save-job keeps the run short should the flag ever be accepted.
        const QString saved = path("abc.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--epochs"), QStringLiteral("abc"),
                                  QStringLiteral("--save-job"), saved},
                                 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {QStringLiteral("--epochs"), QStringLiteral("integer"), QStringLiteral("'abc'")});
        QVERIFY(!QFile::exists(saved));

        const Run lr = expectExit({QStringLiteral("train"), QStringLiteral("--lr"), QStringLiteral("fast"),
                                   QStringLiteral("--save-job"), saved},
                                  2);
        QCOMPARE(lr.exitCode, 2);
        expectText(lr.err, {QStringLiteral("--lr needs a number, got 'fast'")});
    }

    void invalidRuleNamesTheField()
    {
        const QString saved = path("fedprox.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--rule"), QStringLiteral("fedprox"),
                                  QStringLiteral("--save-job"), saved},
                                 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {QStringLiteral("aggregation.rule"), QStringLiteral("'fedprox'"), QStringLiteral("vc-asgd")});
        QVERIFY(!QFile::exists(saved));
    }

    void missingJobFile()
    {
        const QString missing = path("missing.json");
        const QString saved = path("from-missing.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--job"), missing,
                                  QStringLiteral("--save-job"), saved},
                                 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {missing});
        QVERIFY(!QFile::exists(saved));
    }

    void jobFileWithUnknownKey()
    {
        QJsonObject json = JobSpec::defaultJob().toJson();
        QJsonObject training = json.value(QStringLiteral("training")).toObject();
        training.insert(QStringLiteral("epoch"), 3);
        json.insert(QStringLiteral("training"), training);
        const QString job = path("typo.json");
        test::writeFile(job, QJsonDocument(json).toJson());
        const QString saved = path("from-typo.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--job"), job,
                                  QStringLiteral("--save-job"), saved},
                                 2);
        QCOMPARE(r.exitCode, 2);
        expectText(r.err, {job, QStringLiteral("unknown key 'training.epoch'")});
        QVERIFY(!QFile::exists(saved));
    }

    void saveJobWritesTheEffectiveJob()
    {
        const QString saved = path("effective.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--save-job"), saved,
                                  QStringLiteral("--epochs"), QStringLiteral("3"),
                                  QStringLiteral("--workers"), QStringLiteral("2")},
                                 0);
        QCOMPARE(r.exitCode, 0);
        const QJsonObject json = readJsonObject(saved);
        QVERIFY2(!json.isEmpty(), qPrintable(saved));
        QCOMPARE(json.value(QStringLiteral("training")).toObject().value(QStringLiteral("epochs")).toInt(-1), 3);
        QCOMPARE(json.value(QStringLiteral("fleet")).toObject().value(QStringLiteral("workers")).toInt(-1), 2);
        // Everything else is the default job.
        JobSpec expected = JobSpec::defaultJob();
        expected.training.epochs = 3;
        expected.fleet.workers = 2;
        QCOMPARE(json, expected.toJson());
        // And the file is a job file the command accepts back.
        auto loaded = JobSpec::load(saved);
        QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
        QCOMPARE(loaded->training.epochs, 3);
    }

    void flagsOverrideTheJobFile()
    {
        JobSpec base = JobSpec::defaultJob();
        base.name = QStringLiteral("from-file");
        base.training.epochs = 7;
        base.training.shards = 11;
        base.aggregation.rule = QStringLiteral("sync-average");
        const QString job = path("base.json");
        QVERIFY(base.save(job).ok());
        const QString saved = path("merged.json");
        const Run r = expectExit({QStringLiteral("train"), QStringLiteral("--job"), job,
                                  QStringLiteral("--epochs"), QStringLiteral("2"),
                                  QStringLiteral("--rule"), QStringLiteral("staleness-aware"),
                                  QStringLiteral("--alpha"), QStringLiteral("0.75"),
                                  QStringLiteral("--preempt-mean"), QStringLiteral("0"),
                                  QStringLiteral("--price-class"), QStringLiteral("volunteer"),
                                  QStringLiteral("--dataset"), QStringLiteral("csv"),
                                  QStringLiteral("--data"), QStringLiteral("table.csv"),
                                  QStringLiteral("--save-job"), saved},
                                 0);
        QCOMPARE(r.exitCode, 0);
        auto loaded = JobSpec::load(saved);
        QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
        QCOMPARE(loaded->name, QStringLiteral("from-file"));
        QCOMPARE(loaded->training.shards, 11); // from the file
        QCOMPARE(loaded->training.epochs, 2);  // from the flags
        QCOMPARE(loaded->aggregation.rule, QStringLiteral("staleness-aware"));
        QCOMPARE(loaded->aggregation.alpha, 0.75);
        QCOMPARE(loaded->fleet.preemption.meanIntervalSeconds, 0.0);
        QCOMPARE(loaded->fleet.priceClass, QStringLiteral("volunteer"));
        QCOMPARE(loaded->dataset.kind, QStringLiteral("csv"));
        // A relative data path is made absolute against the working directory.
        QCOMPARE(loaded->dataset.path, QFileInfo(m_dir.filePath(QStringLiteral("table.csv"))).absoluteFilePath());
    }

    void outOfRangeIntegersAreRefused()
    {
        const QString saved = path("range.json");
        Run r = expectExit({QStringLiteral("train"), QStringLiteral("--epochs"), QStringLiteral("4294967297"),
                            QStringLiteral("--save-job"), saved},
                           2);
        expectText(r.err, {QStringLiteral("--epochs is out of range")});
        r = expectExit({QStringLiteral("train"), QStringLiteral("--seed"), QStringLiteral("-1"),
                        QStringLiteral("--save-job"), saved},
                       2);
        expectText(r.err, {QStringLiteral("--seed is out of range")});
        QVERIFY(!QFile::exists(saved));
    }

    void bufferFlagsAreCheckedAndSaved()
    {
        const QString saved = path("buffer.json");
        Run r = expectExit({QStringLiteral("train"), QStringLiteral("--buffer"), QStringLiteral("lots"),
                            QStringLiteral("--save-job"), saved},
                           2);
        expectText(r.err, {QStringLiteral("--buffer needs an integer, got 'lots'")});
        r = expectExit({QStringLiteral("train"), QStringLiteral("--rule"), QStringLiteral("sync-average"),
                        QStringLiteral("--buffer"), QStringLiteral("4"), QStringLiteral("--save-job"), saved},
                       2);
        expectText(r.err, {QStringLiteral("'aggregation.buffer' is 4, but sync-average already folds whole rounds")});
        QVERIFY(!QFile::exists(saved));
        expectExit({QStringLiteral("train"), QStringLiteral("--buffer"), QStringLiteral("auto"),
                    QStringLiteral("--epochs-ahead"), QStringLiteral("3"), QStringLiteral("--share-tail"),
                    QStringLiteral("--speculate"), QStringLiteral("--save-job"), saved},
                   0);
        auto loaded = JobSpec::load(saved);
        QVERIFY2(loaded, qPrintable(loaded.error()));
        QCOMPARE(loaded->aggregation.buffer, 0);
        QCOMPARE(loaded->fleet.epochsAhead, 3);
        QVERIFY(loaded->fleet.shareTail);
        QVERIFY(loaded->fleet.speculate);
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
