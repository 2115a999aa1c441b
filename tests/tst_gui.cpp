// The control center, offscreen: the wizard's messages, a short job with the embedded worker
// until every chart has points, pause and resume, a remote worker revoked, join tokens
// listed and revoked in the token dialog, a chart exported, and a job reopened after the app
// "restarted" continuing its charts from the store.
#include "FakeClock.h"
#include "TestSupport.h"
#include "agent/WorkerAgent.h"
#include "desktop/DesktopSession.h"
#include "machine/WorkPolicy.h"
#include "ui/Dashboard.h"
#include "ui/Dialogs.h"
#include "ui/JobWizard.h"
#include "ui/MainWindow.h"
#include "ui/TokenDialog.h"
#include "ui/Views.h"

#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDialogButtonBox>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QtTest>

#include <algorithm>

using namespace flotilla;

namespace {

JobSpec shortJob()
{
    JobSpec job = JobSpec::defaultJob();
    job.dataset.trainLimit = 4000;
    job.dataset.testLimit = 500;
    job.training.epochs = 40; // long enough not to finish during the test
    job.training.shards = 8;
    job.fleet.preemption.meanIntervalSeconds = 0;
    return job;
}

int columnNamed(QTableWidget *t, const QString &header)
{
    for (int c = 0; c < t->columnCount(); ++c)
        if (t->horizontalHeaderItem(c) && t->horizontalHeaderItem(c)->text() == header)
            return c;
    return -1;
}

int rowOf(QTableWidget *t, const QString &name)
{
    for (int r = 0; r < t->rowCount(); ++r)
        if (t->item(r, 0) && t->item(r, 0)->text() == name)
            return r;
    return -1;
}

class FakePower final : public PowerSource
{
public:
    std::optional<bool> onBattery() override { return value; }
    std::optional<bool> value = false;
};

class FakeIdle final : public IdleSource
{
public:
    std::optional<qint64> idleMs() override { return value; }
    std::optional<qint64> value = 0; // the user is at the machine
};

bool hasName(QTableWidget *t, const QString &name, const QString &status = {})
{
    const int r = rowOf(t, name);
    const int c = columnNamed(t, QStringLiteral("Status"));
    return r >= 0 && (status.isEmpty() || (t->item(r, c) && t->item(r, c)->text() == status));
}

} // namespace

class TestGui : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::unique_ptr<DesktopSession> m_session;
    std::unique_ptr<ui::MainWindow> m_window;
    QString m_runDir;

    DesktopSession::Options options() const
    {
        return DesktopSession::Options{m_dir.filePath(QStringLiteral("identity")), 0,
                                       {QStringLiteral("127.0.0.1"), QStringLiteral("localhost")}};
    }

private Q_SLOTS:
    // A test's answers to the windows' dialogs end with it (they may hold its locals).
    void cleanup()
    {
        ui::dialogs::answerConfirmations({});
        ui::dialogs::answerSavePaths({});
    }

    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
        m_runDir = m_dir.filePath(QStringLiteral("run"));
    }

    void wizardShowsEachProblemNextToItsField()
    {
        ui::JobWizard wizard(JobSpec::defaultJob(), 1);
        QPushButton *start = wizard.findChild<QDialogButtonBox *>()->button(QDialogButtonBox::Ok);
        QVERIFY(wizard.problems().isEmpty());
        QVERIFY(start->isEnabled());

        qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("training.epochs")))->setValue(0);
        QVERIFY2(wizard.problemText(QStringLiteral("training.epochs")).contains(QStringLiteral("between 1 and")),
                 qPrintable(wizard.problemText(QStringLiteral("training.epochs"))));
        QVERIFY(!start->isEnabled());

        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("dataset.kind")))->setCurrentText(QStringLiteral("csv"));
        QVERIFY(wizard.problemText(QStringLiteral("dataset.path")).contains(QStringLiteral("required")));
        qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("dataset.path")))->setText(QStringLiteral("/no/such.csv"));
        QVERIFY(wizard.problemText(QStringLiteral("dataset.path")).contains(QStringLiteral("does not exist")));

        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("model.kind")))->setCurrentText(QStringLiteral("torchscript"));
        qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("model.path")))->setText(QStringLiteral("/no/net.pt"));
        QVERIFY(wizard.problemText(QStringLiteral("model.path")).contains(QStringLiteral("does not exist")));

        qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("training.learning_rate")))->setText(QStringLiteral("fast"));
        QVERIFY(wizard.problemText(QStringLiteral("training.learning_rate")).contains(QStringLiteral("positive number")));
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("fleet.instance_type")))->setCurrentText(QStringLiteral("aws/x9.mega"));
        QVERIFY(wizard.problemText(QStringLiteral("fleet.instance_type")).contains(QStringLiteral("not in the price table")));
        QVERIFY(wizard.problems().size() >= 5);

        // Put it right: every message goes, Start comes back.
        qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("training.epochs")))->setValue(4);
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("dataset.kind")))->setCurrentText(QStringLiteral("fashion-mnist"));
        qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("dataset.path")))->clear();
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("model.kind")))->setCurrentText(QStringLiteral("mlp"));
        qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("training.learning_rate")))->setText(QStringLiteral("0.05"));
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("fleet.instance_type")))->setCurrentText(QStringLiteral("gcp/n2-standard-4"));
        QVERIFY2(wizard.problems().isEmpty(), qPrintable(QStringList(wizard.problems().values()).join(u'|')));
        QVERIFY(start->isEnabled());
        QCOMPARE(wizard.problemText(QStringLiteral("training.epochs")), QString());

        // A job file round trip.
        const QString file = m_dir.filePath(QStringLiteral("job.json"));
        QVERIFY(wizard.saveJobFile(file));
        ui::JobWizard other(JobSpec::defaultJob(), 1);
        QVERIFY(other.loadJobFile(file));
        QCOMPARE(other.job().toJson(), wizard.job().toJson());
        QCOMPARE(other.job().training.epochs, 4);
        QCOMPARE(other.job().model.kind, QStringLiteral("mlp"));
        QFile broken(m_dir.filePath(QStringLiteral("broken.json")));
        QVERIFY(broken.open(QIODevice::WriteOnly));
        broken.write("{\"training\": {\"epochs\": \"many\"}}");
        broken.close();
        auto refused = other.loadJobFile(broken.fileName());
        QVERIFY(!refused);
        QVERIFY(refused.error().contains(QStringLiteral("training.epochs")));
    }

    // The goodput policies of the fleet page reach the job and come back from a job file.
    void wizardOffersTheFleetPolicies()
    {
        ui::JobWizard wizard(JobSpec::defaultJob(), 1);
        const JobSpec before = wizard.job();
        QVERIFY(!before.fleet.dismissIdle && !before.fleet.speculate && !before.fleet.shareTail);
        qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("fleet.epochs_ahead")))->setValue(2);
        qobject_cast<QCheckBox *>(wizard.field(QStringLiteral("fleet.share_tail")))->setChecked(true);
        qobject_cast<QCheckBox *>(wizard.field(QStringLiteral("fleet.speculate")))->setChecked(true);
        qobject_cast<QCheckBox *>(wizard.field(QStringLiteral("fleet.dismiss_idle")))->setChecked(true);
        const JobSpec job = wizard.job();
        QCOMPARE(job.fleet.epochsAhead, 2);
        QVERIFY(job.fleet.shareTail && job.fleet.speculate && job.fleet.dismissIdle);
        const QString file = m_dir.filePath(QStringLiteral("policies.json"));
        QVERIFY(wizard.saveJobFile(file));
        ui::JobWizard other(JobSpec::defaultJob(), 1);
        QVERIFY(!qobject_cast<QCheckBox *>(other.field(QStringLiteral("fleet.dismiss_idle")))->isChecked());
        QVERIFY(other.loadJobFile(file));
        QVERIFY(qobject_cast<QCheckBox *>(other.field(QStringLiteral("fleet.dismiss_idle")))->isChecked());
        QVERIFY(other.job().fleet.dismissIdle && other.job().fleet.speculate);
    }

    // The optimizer's settings, the precision, the best model, early stopping, NumPy data and
    // a fleet's requirements go into the wizard from a job and come out the same.
    void wizardCarriesTheTrainingSettings()
    {
        JobSpec job = JobSpec::defaultJob();
        job.dataset.kind = QStringLiteral("npy");
        job.dataset.path = m_dir.filePath(QStringLiteral("arrays"));
        job.training.bestMetric = QStringLiteral("loss");
        job.dataset.context = 32;
        job.dataset.tokenType = QStringLiteral("uint32");
        job.training.precision = QStringLiteral("bf16");
        job.training.optimizer = QStringLiteral("adamw");
        job.training.labelSmoothing = 0.05;
        job.training.clipGradNorm = 2.0;
        job.training.weightDecay = 0.01;
        job.training.eps = 1e-7;
        job.training.beta2 = 0.95;
        job.training.beta1 = 0.8;
        job.training.earlyStopAfter = 3;
        job.fleet.requireDevice = QStringLiteral("cuda");
        job.fleet.requireMemoryMb = 8192;
        job.fleet.workers = 1; // the wizard shows this machine's own workers
        ui::JobWizard wizard(job, 1);
        const QJsonObject shown = wizard.job().toJson();
        const QJsonObject given = job.toJson();
        for (const QString &section : given.keys())
            if (shown.value(section) != given.value(section))
                qWarning().noquote() << section << QJsonDocument(shown.value(section).toObject()).toJson(QJsonDocument::Compact)
                                     << "vs" << QJsonDocument(given.value(section).toObject()).toJson(QJsonDocument::Compact);
        QCOMPARE(shown, given);
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("training.optimizer")))->setCurrentText(QStringLiteral("sgd"));
        qobject_cast<QCheckBox *>(wizard.field(QStringLiteral("training.nesterov")))->setChecked(true);
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("training.precision")))->setCurrentText(QStringLiteral("fp16"));
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("training.task")))->setCurrentText(QStringLiteral("regression"));
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("training.regression_loss")))->setCurrentText(QStringLiteral("l1"));
        // Smoothing class targets means nothing for numbers: the job would be refused with it.
        qobject_cast<QDoubleSpinBox *>(wizard.field(QStringLiteral("training.label_smoothing")))->setValue(0);
        const JobSpec changed = wizard.job();
        QCOMPARE(changed.training.task, QStringLiteral("regression"));
        QCOMPARE(changed.training.regressionLoss, QStringLiteral("l1"));
        ui::JobWizard again(changed, 1);
        QCOMPARE(again.job().toJson(), changed.toJson());
        QCOMPARE(changed.training.optimizer, QStringLiteral("sgd"));
        QVERIFY(changed.training.nesterov);
        QCOMPARE(changed.training.precision, QStringLiteral("fp16"));
        QVERIFY(changed.validate());
    }

    void wizardOffersImageFolders()
    {
        ui::JobWizard wizard(JobSpec::defaultJob(), 1);
        auto *kind = qobject_cast<QComboBox *>(wizard.field(QStringLiteral("dataset.kind")));
        QVERIFY(kind->findText(QStringLiteral("images")) >= 0);
        // Image settings are greyed out until the data set is an image folder.
        QVERIFY(!wizard.field(QStringLiteral("dataset.image_size"))->isEnabled());
        kind->setCurrentText(QStringLiteral("images"));
        QVERIFY(wizard.field(QStringLiteral("dataset.image_size"))->isEnabled());
        auto *path = qobject_cast<QLineEdit *>(wizard.field(QStringLiteral("dataset.path")));
        path->setText(m_dir.filePath(QStringLiteral("no-such-folder")));
        QVERIFY(wizard.problemText(QStringLiteral("dataset.path")).contains(QStringLiteral("the folder")));
        path->setText(m_dir.path());
        qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("dataset.image_size")))->setValue(32);
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("dataset.color")))->setCurrentText(QStringLiteral("rgb"));
        qobject_cast<QComboBox *>(wizard.field(QStringLiteral("dataset.bad_images")))->setCurrentText(QStringLiteral("skip"));
        qobject_cast<QSpinBox *>(wizard.field(QStringLiteral("dataset.crop_padding")))->setValue(4);
        qobject_cast<QCheckBox *>(wizard.field(QStringLiteral("dataset.horizontal_flip")))->setChecked(true);
        QVERIFY2(wizard.problems().isEmpty(), qPrintable(QStringList(wizard.problems().values()).join(u'|')));
        const JobSpec job = wizard.job();
        QCOMPARE(job.dataset.kind, QStringLiteral("images"));
        QCOMPARE(job.dataset.imageSize, 32);
        QCOMPARE(job.dataset.color, QStringLiteral("rgb"));
        QCOMPARE(job.dataset.badImages, QStringLiteral("skip"));
        QCOMPARE(job.dataset.cropPadding, 4);
        QVERIFY(job.dataset.horizontalFlip);
        // Back to Fashion-MNIST with an image size left over: the wizard says what is wrong.
        kind->setCurrentText(QStringLiteral("fashion-mnist"));
        path->clear();
        QVERIFY2(wizard.problemText(QStringLiteral("dataset.image_size")).contains(QStringLiteral("only to data sets of kind 'images'")),
                 qPrintable(wizard.problemText(QStringLiteral("dataset.image_size"))));
        QVERIFY(wizard.field(QStringLiteral("dataset.image_size"))->isEnabled()); // so that it can be fixed
    }

    void jobRunsAndEveryChartGetsPoints()
    {
        m_session = std::make_unique<DesktopSession>(options());
        m_window = std::make_unique<ui::MainWindow>(m_session.get(), shortJob(), m_runDir);
        m_window->resize(1400, 900);
        m_window->show();
        QSignalSpy states(m_session.get(), &ui::ControlSession::stateChanged);
        m_window->startJob();
        QTRY_VERIFY_WITH_TIMEOUT(m_session->state() == JobState::Running, 60000);
        // The embedded worker trains; the UI thread keeps turning meanwhile.
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->everyChartHasData(), 120000);
        QVERIFY(m_window->statusText().contains(QStringLiteral("epoch")));
        QVERIFY(hasName(m_window->workers()->table(), QStringLiteral("local-1")));

        const QString png = m_dir.filePath(QStringLiteral("loss.png"));
        QVERIFY(m_window->dashboard()->exportChart(0, png));
        const QImage image(png);
        QVERIFY(!image.isNull());
        QVERIFY(image.width() > 300 && image.height() > 200);
        const QString metrics = m_dir.filePath(QStringLiteral("metrics.csv"));
        ui::dialogs::answerSavePaths([&](const QString &, const QString &, const QString &) { return metrics; });
        m_window->exportMetrics();
        QFile csv(metrics);
        QVERIFY(csv.open(QIODevice::ReadOnly));
        QVERIFY(csv.readAll().count('\n') > 3);
    }

    void pauseStopsNewWorkAndResumeRestartsIt()
    {
        QSignalSpy assimilated(m_session.get(), &ui::ControlSession::assimilated);
        Snapshot latest;
        const auto watch = connect(m_session.get(), &ui::ControlSession::snapshot, this,
                                   [&](const Snapshot &s) { latest = s; });
        m_window->togglePause();
        QCOMPARE(m_session->state(), JobState::Paused);
        // The subtasks in flight finish: a snapshot after the pause shows every worker idle.
        QTRY_VERIFY_WITH_TIMEOUT(latest.paused && std::all_of(latest.workers.begin(), latest.workers.end(),
                                                              [](const WorkerRow &w) { return w.subtask.isEmpty(); }),
                                 30000);
        disconnect(watch);
        const int before = int(assimilated.size());
        QTest::qWait(1500);
        QCOMPARE(int(assimilated.size()), before);
        m_window->togglePause();
        QCOMPARE(m_session->state(), JobState::Running);
        QTRY_VERIFY_WITH_TIMEOUT(assimilated.size() > before, 30000);
    }

    // The control center's own worker is decided by the same work policy as the worker
    // window's: unplugged, it pauses (and leaves the job at once, not at the heartbeat
    // timeout); plugged in, it comes back as the same worker. Its user at the machine does
    // not pause it by default (the control center's own rules).
    void theMachinesWorkerFollowsTheWorkPolicy()
    {
        FakePower power;
        FakeIdle idle;
        test::FakeClock clock(QDateTime(QDate(2026, 3, 4), QTime(12, 0)).toMSecsSinceEpoch());
        WorkPolicy policy(WorkerSettings::defaults(WorkerSettings::Role::ControlCenter), &idle, &clock, &power);
        m_window->setWorkPolicy(&policy);
        QVERIFY2(!m_window->machineStatusText().startsWith(QLatin1String("paused")),
                 qPrintable(m_window->machineStatusText()));
        QTRY_VERIFY_WITH_TIMEOUT(hasName(m_window->workers()->table(), QStringLiteral("local-1"), QStringLiteral("online")),
                                 30000);

        power.value = true;
        policy.evaluate();
        QVERIFY2(m_window->machineStatusText().contains(QLatin1String("battery")),
                 qPrintable(m_window->machineStatusText()));
        // Gone from the job within seconds: the heartbeat timeout is 30 s.
        QElapsedTimer left;
        left.start();
        QTRY_VERIFY_WITH_TIMEOUT(hasName(m_window->workers()->table(), QStringLiteral("local-1"), QStringLiteral("offline")),
                                 15000);
        QVERIFY2(left.elapsed() < 15000, qPrintable(QString::number(left.elapsed())));

        power.value = false;
        policy.evaluate();
        QTRY_VERIFY_WITH_TIMEOUT(hasName(m_window->workers()->table(), QStringLiteral("local-1"), QStringLiteral("online")),
                                 30000);
        QVERIFY(!hasName(m_window->workers()->table(), QStringLiteral("local-2")));
        QVERIFY2(!m_window->machineStatusText().startsWith(QLatin1String("paused")),
                 qPrintable(m_window->machineStatusText()));
        m_window->setWorkPolicy(nullptr); // the policy ends with this test; the window goes on
    }

    // Building the job's model and the half-second speed probe run on the training pool: the
    // thread the agent lives on (a window's, in the app) keeps turning its event loop.
    void aJoiningWorkerKeepsItsThreadResponsive()
    {
        auto token = m_session->issueTokenNow(1, 600);
        QVERIFY2(token, qPrintable(token.error()));
        WorkerAgent::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("responsive"));
        o.name = QStringLiteral("lab-9");
        WorkerAgent agent(o);
        QStringList states;
        connect(&agent, &WorkerAgent::statusChanged, this, [&] {
            if (states.isEmpty() || states.last() != agent.status().state)
                states << agent.status().state;
        });
        QElapsedTimer sinceTick;
        qint64 longestGapMs = 0;
        QTimer tick;
        tick.setInterval(10);
        connect(&tick, &QTimer::timeout, this, [&] {
            longestGapMs = std::max(longestGapMs, sinceTick.restart());
        });
        QVERIFY(agent.start(net::JoinToken::decode(*token).value()));
        sinceTick.start();
        tick.start();
        // Through the preparation and out of it (to idle or training).
        QTRY_VERIFY2_WITH_TIMEOUT(states.contains(QStringLiteral("preparing"))
                                      && states.last() != QLatin1String("preparing"),
                                  qPrintable(states.join(u',')), 60000);
        tick.stop();
        QVERIFY2(longestGapMs < 450, qPrintable(QStringLiteral("the agent's thread stood still for %1 ms (states %2)")
                                                    .arg(longestGapMs).arg(states.join(u','))));
    }

    // Hashing a model file (here the worker's own --model-file, 300 MiB and not the job's),
    // hashing and writing the model it is then sent, and its shards: on the agent's file
    // thread, never on the thread it lives on (a window's, in the app).
    void aWorkerHashingFilesKeepsItsThreadResponsive()
    {
        // The job's model: a TorchScript file, as `flotilla train` exports one.
        const QString run = m_dir.filePath(QStringLiteral("script-run"));
        const auto trained = test::runFlotilla(
            {QStringLiteral("train"), QStringLiteral("--model"), QStringLiteral("mlp"), QStringLiteral("--epochs"),
             QStringLiteral("1"), QStringLiteral("--shards"), QStringLiteral("2"), QStringLiteral("--workers"),
             QStringLiteral("1"), QStringLiteral("--train-limit"), QStringLiteral("600"), QStringLiteral("--test-limit"),
             QStringLiteral("100"), QStringLiteral("--preempt-mean"), QStringLiteral("0"), QStringLiteral("--run-dir"), run},
            120000);
        QVERIFY2(trained.exitCode == 0, qPrintable(trained.err));
        // A large file that is not the job's model: the worker hashes all of it before asking.
        const QString other = m_dir.filePath(QStringLiteral("other.pt"));
        {
            QFile f(other);
            QVERIFY(f.open(QIODevice::WriteOnly));
            const QByteArray block(1 << 20, 'x');
            for (int i = 0; i < 300; ++i)
                QCOMPARE(f.write(block), qint64(block.size()));
        }
        const quint16 port = test::freeLoopbackPort();
        const QString tokenFile = m_dir.filePath(QStringLiteral("script-token"));
        QProcess serve;
        serve.setProcessChannelMode(QProcess::MergedChannels);
        serve.start(test::flotillaBinary(),
                    {QStringLiteral("serve"), QStringLiteral("--run-dir"), m_dir.filePath(QStringLiteral("script-serve")),
                     QStringLiteral("--identity-dir"), m_dir.filePath(QStringLiteral("script-identity")),
                     QStringLiteral("--listen"), QStringLiteral("127.0.0.1"), QStringLiteral("--host"),
                     QStringLiteral("127.0.0.1"), QStringLiteral("--port"), QString::number(port),
                     QStringLiteral("--token-file"), tokenFile, QStringLiteral("--model"), QStringLiteral("torchscript"),
                     QStringLiteral("--model-file"), run + QStringLiteral("/model.pt"), QStringLiteral("--epochs"),
                     QStringLiteral("50"), QStringLiteral("--train-limit"), QStringLiteral("600"),
                     QStringLiteral("--test-limit"), QStringLiteral("100"), QStringLiteral("--preempt-mean"),
                     QStringLiteral("0")});
        QVERIFY(serve.waitForStarted());
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo(tokenFile).size() > 0, 60000);
        QFile tokenText(tokenFile);
        QVERIFY(tokenText.open(QIODevice::ReadOnly));
        auto token = net::JoinToken::decode(QString::fromUtf8(tokenText.readAll()).trimmed());
        QVERIFY2(token, qPrintable(token.error()));

        WorkerAgent::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("hashing"));
        o.name = QStringLiteral("lab-11");
        o.modelFile = other;
        WorkerAgent agent(o);
        QElapsedTimer sinceTick;
        qint64 longestGapMs = 0;
        QTimer tick;
        tick.setInterval(10);
        connect(&tick, &QTimer::timeout, this, [&] { longestGapMs = std::max(longestGapMs, sinceTick.restart()); });
        QVERIFY(agent.start(*token));
        sinceTick.start();
        tick.start();
        // Until it trains the job's model, which it had to ask for and keep.
        QTRY_VERIFY2_WITH_TIMEOUT(agent.status().state == QLatin1String("training") || agent.status().subtasksDone > 0,
                                  qPrintable(agent.status().state + QLatin1Char(' ') + agent.status().message), 120000);
        tick.stop();
        QVERIFY(!QDir(o.stateDir + QStringLiteral("/models")).entryList({QStringLiteral("*.pt")}).isEmpty());
        serve.terminate();
        QVERIFY(serve.waitForFinished(30000));
        QVERIFY2(longestGapMs < 450,
                 qPrintable(QStringLiteral("the agent's thread stood still for %1 ms").arg(longestGapMs)));
    }

    void remoteWorkerIsRevoked()
    {
        auto token = m_session->issueTokenNow(1, 600);
        QVERIFY2(token, qPrintable(token.error()));
        WorkerAgent::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("remote"));
        o.name = QStringLiteral("lab-7");
        WorkerAgent agent(o);
        QSignalSpy finished(&agent, &WorkerAgent::finished);
        QVERIFY(agent.start(net::JoinToken::decode(*token).value()));
        m_window->tabs()->setCurrentWidget(m_window->workers());
        QTRY_VERIFY_WITH_TIMEOUT(hasName(m_window->workers()->table(), QStringLiteral("lab-7"), QStringLiteral("online")),
                                 60000);
        ui::dialogs::answerConfirmations([](const QString &) { return true; });
        m_window->revokeWorker(QStringLiteral("lab-7"));
        QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty(), 30000);
        QCOMPARE(finished.first().at(0).toInt(), 1);
        QVERIFY2(finished.first().at(1).toString().contains(QStringLiteral("revoked")),
                 qPrintable(finished.first().at(1).toString()));
        QTRY_VERIFY_WITH_TIMEOUT(hasName(m_window->workers()->table(), QStringLiteral("lab-7"), QStringLiteral("offline")),
                                 60000);
        // A local worker cannot be revoked; it is switched off instead.
        QSignalSpy answered(m_session.get(), &ui::ControlSession::commandAnswered);
        m_session->revoke(QStringLiteral("local-1"));
        QCOMPARE(answered.size(), 1);
        QVERIFY2(answered.first().at(1).toString().contains(QStringLiteral("Contribute this machine")),
                 qPrintable(answered.first().at(1).toString()));
    }

    void tokenDialogListsAndRevokesTokens()
    {
        ui::TokenDialog dialog(m_session.get());
        QStringList asked;
        ui::dialogs::answerConfirmations([&](const QString &question) {
            asked << question;
            return true;
        });
        const auto rowOf = [&](const QString &id) {
            for (int r = 0; r < dialog.table()->rowCount(); ++r)
                if (dialog.table()->item(r, 0)->text() == id)
                    return r;
            return -1;
        };
        dialog.uses()->setValue(3);
        dialog.issue();
        auto token = net::JoinToken::decode(dialog.tokenText()->toPlainText());
        QVERIFY2(token, qPrintable(dialog.info()->text()));
        const QString id = QString::fromLatin1(token->id.toHex());
        const int row = rowOf(id);
        QVERIFY2(row >= 0, qPrintable(id));
        QCOMPARE(dialog.table()->item(row, 1)->text(), QStringLiteral("live"));
        QCOMPARE(dialog.table()->item(row, 2)->text(), QStringLiteral("3 of 3"));
        QCOMPARE(dialog.table()->item(row, 4)->text(), QStringLiteral("control center"));
        // The token the revoked worker used up is not live: it is listed only on request.
        for (int r = 0; r < dialog.table()->rowCount(); ++r)
            QCOMPARE(dialog.table()->item(r, 1)->text(), QStringLiteral("live"));
        dialog.showSpent()->setChecked(true);
        QStringList states;
        for (int r = 0; r < dialog.table()->rowCount(); ++r)
            states << dialog.table()->item(r, 1)->text();
        QVERIFY2(states.contains(QStringLiteral("used up")), qPrintable(states.join(u',')));
        dialog.showSpent()->setChecked(false);

        dialog.table()->selectRow(rowOf(id));
        dialog.revokeSelected();
        QCOMPARE(asked.size(), 1);
        QVERIFY2(asked.first().contains(id), qPrintable(asked.first()));
        QCOMPARE(rowOf(id), -1);
        dialog.showSpent()->setChecked(true);
        QVERIFY(rowOf(id) >= 0);
        QCOMPARE(dialog.table()->item(rowOf(id), 1)->text(), QStringLiteral("revoked"));

        // A machine given that token is refused.
        WorkerAgent::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("too-late"));
        o.name = QStringLiteral("too-late");
        WorkerAgent agent(o);
        QSignalSpy finished(&agent, &WorkerAgent::finished);
        QVERIFY(agent.start(*token));
        QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty(), 30000);
        QCOMPARE(finished.first().at(0).toInt(), 1);
        QVERIFY2(finished.first().at(1).toString().contains(QStringLiteral("revoked")),
                 qPrintable(finished.first().at(1).toString()));
    }

    void quarantinedWorkerIsShownAndReleased()
    {
        // A remote worker that returns its base model scaled by 50 is screened out, quarantined
        // after its third rejected result and shown so; the operator releases it with a click.
        auto token = m_session->issueTokenNow(1, 600);
        QVERIFY2(token, qPrintable(token.error()));
        WorkerAgent::Options o;
        o.stateDir = m_dir.filePath(QStringLiteral("attacker"));
        o.name = QStringLiteral("attacker-1");
        o.resultHook = [](TrainOutcome &outcome, const torch::Tensor &base) { outcome.weights = base * 50.0f; };
        WorkerAgent agent(o);
        QVERIFY(agent.start(net::JoinToken::decode(*token).value()));
        m_window->tabs()->setCurrentWidget(m_window->workers());
        QTableWidget *table = m_window->workers()->table();
        QTRY_VERIFY_WITH_TIMEOUT(hasName(table, QStringLiteral("attacker-1"), QStringLiteral("quarantined")), 120000);
        const int r = rowOf(table, QStringLiteral("attacker-1"));
        QVERIFY(table->item(r, columnNamed(table, QStringLiteral("Rejected")))->text().toInt() >= 3);
        QVERIFY(table->item(r, columnNamed(table, QStringLiteral("Trust")))->text().toDouble() < 0.2);
        QVERIFY2(table->item(r, columnNamed(table, QStringLiteral("Status")))->toolTip().contains(QStringLiteral("rejected")),
                 qPrintable(table->item(r, columnNamed(table, QStringLiteral("Status")))->toolTip()));
        // Honest workers are untouched.
        for (int row = 0; row < table->rowCount(); ++row)
            if (row != r)
                QCOMPARE(table->item(row, columnNamed(table, QStringLiteral("Rejected")))->text(), QStringLiteral("0"));

        QPushButton *release = nullptr;
        for (auto *b : m_window->workers()->findChildren<QPushButton *>())
            if (b->text() == QLatin1String("Release"))
                release = b;
        QVERIFY(release);
        QVERIFY(!release->isEnabled()); // nothing quarantined is selected yet
        table->selectRow(rowOf(table, QStringLiteral("attacker-1")));
        QVERIFY(release->isEnabled());
        // (It may well be quarantined again soon after: it keeps attacking.)
        QSignalSpy events(m_session.get(), &ui::ControlSession::eventAdded);
        release->click();
        auto released = [&] {
            for (const auto &e : events)
                if (e.at(0).value<EventRecord>().is(EventKind::WorkerReleased))
                    return true;
            return false;
        };
        QTRY_VERIFY_WITH_TIMEOUT(released(), 30000);
    }

    void reopenedJobContinuesItsCharts()
    {
        m_session->stop();
        QCOMPARE(m_session->state(), JobState::Stopped);
        m_window.reset();
        m_session.reset();
        // As after a restart of the app: a new session on the same run directory.
        m_session = std::make_unique<DesktopSession>(options());
        m_window = std::make_unique<ui::MainWindow>(m_session.get(), shortJob(), m_runDir);
        m_window->show();
        QSignalSpy history(m_session.get(), &ui::ControlSession::historyLoaded);
        m_session->setContributing(false, 1); // no new points: what shows comes from the store
        m_window->startJob();
        QTRY_VERIFY_WITH_TIMEOUT(!history.isEmpty(), 60000);
        const auto h = history.first().at(0).value<History>();
        QVERIFY(!h.assimilations.isEmpty());
        QVERIFY(!h.evaluations.isEmpty());
        auto *loss = qobject_cast<QLineSeries *>(m_window->dashboard()->chartView(0)->chart()->series().at(0));
        QCOMPARE(loss->count(), int(h.assimilations.size()));
        QVERIFY(m_window->events()->table()->rowCount() >= int(h.events.size()));
        m_session->stop();
    }
};

QTEST_MAIN(TestGui)
#include "tst_gui.moc"
