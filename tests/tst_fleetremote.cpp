// A fleet used from other machines, with real processes on loopback and real TLS: people
// with submitter and operator certificates (`flotilla token --submitter`, `--operator`)
// submit jobs whose data and model travel with them (`flotilla submit --coordinator`), list,
// manage and download them (`flotilla jobs --coordinator`), and a control center attached to
// the fleet service (offscreen) submits a job from its window, watches it run, and
// downloads its trained model from the Jobs tab. Roles are enforced per message, from the
// certificate: a submitter manages and downloads its own jobs, not another's; only an
// operator manages the fleet (join tokens) or any job; a submitter names no file of the
// coordinator's machine. The bundles that carry data and run folders refuse hostile paths
// and damaged input by name, and write nothing outside their folder.
#include "TestSupport.h"

#include "desktop/RemoteSession.h"
#include "engine/coordination/FleetQueue.h"
#include "engine/coordination/Store.h"
#include "net/TrustStore.h"
#include "server/FleetRequests.h"
#include "ui/JobsView.h"
#include "ui/MainWindow.h"
#include "ui/WelcomePanel.h"

#include <QtTest>

#include <QCborArray>
#include <QCborMap>
#include <QProcess>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>

#include <cmath>
#include <map>
#include <memory>

using namespace flotilla;

namespace {

struct Fleet
{
    QTemporaryDir dir;
    quint16 port = test::freeLoopbackPort();
    std::unique_ptr<QProcess> serve;
    std::unique_ptr<QProcess> worker;

    QString path(const QString &name) const { return dir.filePath(name); }
    QString identity() const { return path(QStringLiteral("identity")); }
    QString read(const QString &name) const
    {
        QFile f(path(name));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()).trimmed() : QString();
    }

    // A fleet service and one worker of its own.
    bool start(int concurrentJobs = 1)
    {
        if (!startServe(concurrentJobs))
            return false;
        startWorker();
        return true;
    }

    bool startServe(int concurrentJobs = 1)
    {
        QFile::remove(path(QStringLiteral("token")));
        serve = std::make_unique<QProcess>();
        serve->setProcessChannelMode(QProcess::MergedChannels);
        serve->setStandardOutputFile(path(QStringLiteral("serve.out")), QIODevice::Append);
        serve->start(test::flotillaBinary(),
                     {QStringLiteral("serve"), QStringLiteral("--identity-dir"), identity(), QStringLiteral("--listen"),
                      QStringLiteral("127.0.0.1"), QStringLiteral("--host"), QStringLiteral("127.0.0.1"),
                      QStringLiteral("--port"), QString::number(port), QStringLiteral("--token-file"),
                      path(QStringLiteral("token")), QStringLiteral("--concurrent-jobs"),
                      QString::number(concurrentJobs)});
        QElapsedTimer waited;
        waited.start();
        while (read(QStringLiteral("token")).isEmpty() && waited.elapsed() < 60000)
            QTest::qWait(100);
        return !read(QStringLiteral("token")).isEmpty();
    }

    void startWorker()
    {
        worker = std::make_unique<QProcess>();
        worker->setProcessChannelMode(QProcess::MergedChannels);
        worker->setStandardOutputFile(path(QStringLiteral("worker.out")), QIODevice::Append);
        worker->start(test::flotillaBinary(),
                      {QStringLiteral("worker"), QStringLiteral("--state-dir"), path(QStringLiteral("w1")),
                       QStringLiteral("--join"), read(QStringLiteral("token")), QStringLiteral("--name"),
                       QStringLiteral("w1"), QStringLiteral("--grace"), QStringLiteral("5")});
    }

    static void stop(QProcess &p)
    {
        if (p.state() == QProcess::NotRunning)
            return;
        p.terminate();
        if (!p.waitForFinished(20000)) {
            p.kill();
            p.waitForFinished(5000);
        }
    }

    ~Fleet()
    {
        for (QProcess *p : {worker.get(), serve.get()})
            if (p)
                stop(*p);
    }

    // A person's token: "--submitter" or "--operator".
    QString token(const QString &role) const
    {
        const test::ProcessRun run = test::runFlotilla(
            {QStringLiteral("token"), role, QStringLiteral("--identity-dir"), identity()}, 30000);
        return run.exitCode == 0 ? run.out.trimmed() : QString();
    }

    // `flotilla ARGS --coordinator <person's folder>`, enrolling with the token the first time.
    test::ProcessRun as(const QString &person, const QStringList &args, const QString &token = {}) const
    {
        QStringList all = args;
        all << QStringLiteral("--coordinator") << path(QStringLiteral("people/") + person);
        if (!token.isEmpty())
            all << QStringLiteral("--token") << token << QStringLiteral("--name") << person;
        return test::runFlotilla(all, 120000);
    }

    std::map<qint64, QueuedJob> queue() const
    {
        std::map<qint64, QueuedJob> out;
        auto q = FleetQueue::open(QDir(identity()).filePath(QStringLiteral("fleet.db")));
        if (q)
            if (auto jobs = (*q)->jobs())
                for (const QueuedJob &j : *jobs)
                    out[j.id] = j;
        return out;
    }
    QString stateOf(qint64 id) const
    {
        const auto jobs = queue();
        return jobs.count(id) ? jobs.at(id).state : QString();
    }
    QString log(const QString &who = QStringLiteral("serve"), int tail = 4000) const
    {
        QFile f(path(who + QStringLiteral(".out")));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()).right(tail) : QString();
    }
};

// A table of 4 numeric features whose label a small MLP learns: (a + b > c + d).
QString writeCsv(const QString &file)
{
    QFile f(file);
    if (!f.open(QIODevice::WriteOnly))
        return {};
    QTextStream out(&f);
    out << "a,b,c,d,label\n";
    QRandomGenerator random(7);
    for (int i = 0; i < 600; ++i) {
        double v[4];
        for (double &x : v)
            x = random.generateDouble() * 2 - 1;
        out << v[0] << ',' << v[1] << ',' << v[2] << ',' << v[3] << ',' << ((v[0] + v[1] > v[2] + v[3]) ? 1 : 0) << '\n';
    }
    return file;
}

JobSpec csvJob(const QString &name, const QString &csv)
{
    JobSpec job = JobSpec::defaultJob();
    job.name = name;
    job.dataset.kind = QStringLiteral("csv");
    job.dataset.path = csv;
    job.model.kind = QStringLiteral("mlp");
    job.training.epochs = 2;
    job.training.shards = 2;
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    job.fleet.heartbeatTimeoutSeconds = 6;
    return job;
}

// A short Fashion-MNIST job for a fleet: 1000 samples, one epoch, two shards.
JobSpec smallJob(const QString &name)
{
    JobSpec job = JobSpec::defaultJob();
    job.name = name;
    job.dataset.trainLimit = 1000;
    job.dataset.testLimit = 200;
    job.training.epochs = 1;
    job.training.shards = 2;
    job.fleet.workers = 0;
    job.fleet.preemption.meanIntervalSeconds = 0;
    return job;
}

qint64 queuedId(const QString &text)
{
    const auto match = QRegularExpression(QStringLiteral("job (\\d+) '")).match(text);
    return match.hasMatch() ? match.captured(1).toLongLong() : 0;
}

QString bundleError(const FileBundle &bundle)
{
    auto decoded = decodeBundle(encodeBundle(bundle));
    return decoded ? QString() : decoded.error();
}

} // namespace

class TestFleetRemote : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        QVERIFY2(QFileInfo::exists(test::fashionMnistDir()), "Debian's dataset-fashion-mnist is needed");
    }

    // What a hostile or broken peer may send in a bundle is refused by name; nothing is
    // written outside the bundle's own folder.
    void bundlesRefuseHostileInput()
    {
        QTemporaryDir dir;
        FileBundle good{QStringLiteral("set"), true,
                        {{QStringLiteral("train/a.csv"), QByteArray("1,2\n")}, {QStringLiteral("b.csv"), "3"}}};
        QCOMPARE(bundleError(good), QString());
        for (const QString &bad : {QStringLiteral("../../evil"), QStringLiteral("/etc/passwd"),
                                   QStringLiteral("a//b"), QStringLiteral("a/./b"), QStringLiteral("a\\..\\b"),
                                   QStringLiteral("c:/x")}) {
            FileBundle b{QStringLiteral("set"), true, {{bad, QByteArray("x")}}};
            const QString error = bundleError(b);
            QVERIFY2(error.contains(QLatin1String("not a plain relative path")), qPrintable(bad + QStringLiteral(": ") + error));
            QVERIFY(!writeBundle(b, dir.filePath(QStringLiteral("out"))));
        }
        QVERIFY(!QFileInfo::exists(dir.filePath(QStringLiteral("evil"))));
        QVERIFY(bundleError(FileBundle{QStringLiteral(".."), true, {{QStringLiteral("a"), "x"}}})
                    .contains(QLatin1String("not a plain file name")));
        QVERIFY(bundleError(FileBundle{QStringLiteral("one.csv"), false, {{QStringLiteral("other.csv"), "x"}}})
                    .contains(QLatin1String("exactly that file")));
        QVERIFY(bundleError(FileBundle{QStringLiteral("empty"), true, {}}).contains(QLatin1String("no files")));
        const QByteArray encoded = encodeBundle(good);
        QVERIFY(decodeBundle(encoded.left(encoded.size() / 2)).error().contains(QLatin1String("damaged")));
        QVERIFY(decodeBundle(QCborValue(QCborArray{1, 2}).toCbor()).error().contains(QLatin1String("not a CBOR map")));

        // A folder read and written back is the same, byte for byte, under its name.
        QDir().mkpath(dir.filePath(QStringLiteral("src/set/train")));
        for (const auto &[path, bytes] : good.files) {
            QFile f(dir.filePath(QStringLiteral("src/set/") + path));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(bytes);
        }
        auto read = readBundle(dir.filePath(QStringLiteral("src/set")), 1 << 20);
        QVERIFY2(read, qPrintable(read.error()));
        auto written = writeBundle(*decodeBundle(encodeBundle(*read)), dir.filePath(QStringLiteral("copy")));
        QVERIFY2(written, qPrintable(written.error()));
        QFile copied(dir.filePath(QStringLiteral("copy/set/train/a.csv")));
        QVERIFY(copied.open(QIODevice::ReadOnly));
        QCOMPARE(copied.readAll(), QByteArray("1,2\n"));
        QVERIFY(readBundle(dir.filePath(QStringLiteral("src/set")), 2).error().contains(QLatin1String("MiB")));

        // Submissions: the job, the priority and the weight are checked and named.
        Submission s;
        s.spec = JobSpec::defaultJob();
        QVERIFY(decodeSubmission(encodeSubmission(s)));
        s.weight = std::nan("");
        QVERIFY(decodeSubmission(encodeSubmission(s)).error().contains(QLatin1String("weight")));
        s.weight = 1;
        s.priority = 2000000;
        QVERIFY(decodeSubmission(encodeSubmission(s)).error().contains(QLatin1String("priority")));
        s.priority = 0;
        s.spec.training.epochs = -3;
        QVERIFY2(decodeSubmission(encodeSubmission(s)).error().contains(QLatin1String("epochs")),
                 qPrintable(decodeSubmission(encodeSubmission(s)).error()));
        QVERIFY(decodeSubmission("not cbor").error().contains(QLatin1String("damaged")));
    }

    // Alice submits a CSV job from "her machine": the data travels with it and the fleet's
    // worker trains it. Bob, another submitter, may look but not cancel or download it, and
    // may not name a file of the coordinator's machine as his data; an operator may reweight
    // anyone's job. Alice downloads her trained model and run folder.
    void peopleSubmitFromElsewhere()
    {
        Fleet fleet;
        QVERIFY2(fleet.start(), qPrintable(fleet.log()));
        const QString alice = fleet.token(QStringLiteral("--submitter"));
        const QString bob = fleet.token(QStringLiteral("--submitter"));
        const QString admin = fleet.token(QStringLiteral("--operator"));
        QVERIFY(!alice.isEmpty() && !bob.isEmpty() && !admin.isEmpty());
        QCOMPARE(net::JoinToken::decode(alice)->role, net::Role::Submitter);

        QVERIFY(QDir().mkpath(fleet.path(QStringLiteral("mine"))));
        const QString csv = writeCsv(fleet.path(QStringLiteral("mine/table.csv")));
        QVERIFY(!csv.isEmpty());
        const QString jobFile = fleet.path(QStringLiteral("table.json"));
        QVERIFY(csvJob(QStringLiteral("table"), csv).save(jobFile));
        const test::ProcessRun submitted = fleet.as(QStringLiteral("alice"), {QStringLiteral("submit"), jobFile}, alice);
        QVERIFY2(submitted.exitCode == 0, qPrintable(submitted.out + submitted.err + fleet.log()));
        const qint64 id = queuedId(submitted.out);
        QVERIFY2(id > 0, qPrintable(submitted.out));
        QVERIFY2(submitted.out.contains(QLatin1String("queued for alice")), qPrintable(submitted.out));
        // The fleet keeps its own copy of the data, named by its content.
        const QString keptData = QJsonDocument::fromJson(fleet.queue().at(id).spec.toUtf8())
                                     .object()
                                     .value(QStringLiteral("dataset"))
                                     .toObject()
                                     .value(QStringLiteral("path"))
                                     .toString();
        QVERIFY2(keptData.startsWith(QDir(fleet.identity()).filePath(QStringLiteral("data/"))), qPrintable(keptData));
        QVERIFY(QFileInfo::exists(keptData));

        // Bob sees the queue, but Alice's job is hers.
        const test::ProcessRun list = fleet.as(QStringLiteral("bob"), {QStringLiteral("jobs")}, bob);
        QVERIFY2(list.exitCode == 0 && list.out.contains(QLatin1String("alice")), qPrintable(list.out + list.err));
        const test::ProcessRun cancel =
            fleet.as(QStringLiteral("bob"), {QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(id)});
        QCOMPARE(cancel.exitCode, 1);
        QVERIFY2(cancel.err.contains(QLatin1String("submitted by alice, not bob")), qPrintable(cancel.err));
        const test::ProcessRun steal = fleet.as(
            QStringLiteral("bob"), {QStringLiteral("jobs"), QStringLiteral("download"), QString::number(id),
                                    fleet.path(QStringLiteral("stolen"))});
        QCOMPARE(steal.exitCode, 1);
        QVERIFY2(steal.err.contains(QLatin1String("may download only its own jobs")), qPrintable(steal.err));
        QVERIFY(!QFileInfo::exists(fleet.path(QStringLiteral("stolen"))));
        // A submitter cannot make the coordinator read its own files.
        const test::ProcessRun snoop = fleet.as(
            QStringLiteral("bob"), {QStringLiteral("submit"), QStringLiteral("--dataset"), QStringLiteral("csv"),
                                    QStringLiteral("--data"), QStringLiteral("/etc/passwd"),
                                    QStringLiteral("--data-on-coordinator")});
        QCOMPARE(snoop.exitCode, 1);
        QVERIFY2(snoop.err.contains(QLatin1String("a submitter sends its data with the job")), qPrintable(snoop.err));
        // Nobody enrols under a name another certificate holds: a job is its submitter's name's.
        const test::ProcessRun impostor = fleet.as(QStringLiteral("mallory"),
                                                   {QStringLiteral("jobs")},
                                                   fleet.token(QStringLiteral("--submitter")));
        QCOMPARE(impostor.exitCode, 0); // mallory, enrolled as herself
        const test::ProcessRun asAlice = test::runFlotilla(
            {QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(id), QStringLiteral("--coordinator"),
             fleet.path(QStringLiteral("people/mallory-as-alice")), QStringLiteral("--token"),
             fleet.token(QStringLiteral("--submitter")), QStringLiteral("--name"), QStringLiteral("alice")},
            60000);
        QVERIFY(asAlice.exitCode != 0);
        QVERIFY2(asAlice.err.contains(QLatin1String("the name 'alice' belongs to another certificate")),
                 qPrintable(asAlice.err));
        QVERIFY(fleet.stateOf(id) != QLatin1String("cancelled"));
        // A user of the coordinator's machine named alice is not alice's certificate, nor the
        // other way round.
        const test::ProcessRun local = test::runFlotilla(
            {QStringLiteral("submit"), QStringLiteral("--as"), QStringLiteral("alice"), QStringLiteral("--epochs"),
             QStringLiteral("1"), QStringLiteral("--train-limit"), QStringLiteral("500"), QStringLiteral("--priority"),
             QStringLiteral("-5"), QStringLiteral("--identity-dir"), fleet.identity()},
            30000);
        QCOMPARE(local.exitCode, 0);
        const qint64 localId = QRegularExpression(QStringLiteral("^Job (\\d+) ")).match(local.out).captured(1).toLongLong();
        QVERIFY(localId > 0);
        const test::ProcessRun crossed = fleet.as(
            QStringLiteral("alice"), {QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(localId)});
        QCOMPARE(crossed.exitCode, 1);
        QVERIFY2(crossed.err.contains(QLatin1String("on the coordinator's machine")), qPrintable(crossed.err));
        QVERIFY(test::runFlotilla({QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(localId),
                                   QStringLiteral("--as"), QStringLiteral("alice"), QStringLiteral("--identity-dir"),
                                   fleet.identity()},
                                  30000)
                    .exitCode
                == 0);
        // The operator manages any job.
        const test::ProcessRun weight = fleet.as(
            QStringLiteral("root"), {QStringLiteral("jobs"), QStringLiteral("weight"), QString::number(id),
                                     QStringLiteral("3")},
            admin);
        QVERIFY2(weight.exitCode == 0, qPrintable(weight.err));
        QCOMPARE(fleet.queue().at(id).weight, 3.0);
        QCOMPARE(fleet.queue().at(id).submitter, QStringLiteral("alice"));

        QTRY_VERIFY2_WITH_TIMEOUT(fleet.stateOf(id) == QLatin1String("finished"), qPrintable(fleet.log()), 120000);
        const test::ProcessRun download = fleet.as(
            QStringLiteral("alice"), {QStringLiteral("jobs"), QStringLiteral("download"), QString::number(id),
                                      fleet.path(QStringLiteral("downloads"))});
        QVERIFY2(download.exitCode == 0, qPrintable(download.out + download.err));
        const QDir run(QDir(fleet.path(QStringLiteral("downloads")))
                           .filePath(QFileInfo(fleet.queue().at(id).runDir).fileName()));
        for (const char *file : {"model.pt", "job.json", "metrics.csv", "flotilla.db", "normalization.json"})
            QVERIFY2(QFileInfo(run.filePath(QLatin1String(file))).size() > 0, file);
        // The downloaded store is the job's, finished, with every assimilation the fleet has.
        auto store = Store::open(run.filePath(QStringLiteral("flotilla.db")));
        QVERIFY(store);
        auto job = (*store)->latestJob();
        QVERIFY(job && job->has_value());
        QCOMPARE((*job)->state, QStringLiteral("finished"));
        auto original = Store::open(QDir(fleet.queue().at(id).runDir).filePath(QStringLiteral("flotilla.db")));
        QVERIFY(original);
        QCOMPARE((*store)->assimilations((*job)->id)->size(), (*original)->assimilations((*job)->id)->size());
        QVERIFY((*store)->evaluations((*job)->id)->size() >= 2);
        QVERIFY2((*store)->evaluations((*job)->id)->back().accuracy > 0.8,
                 qPrintable(QString::number((*store)->evaluations((*job)->id)->back().accuracy)));
    }

    // A data scientist's control center, attached to the fleet service with a submitter's
    // certificate: New job… sends the job to the fleet, the window watches it run, the Jobs
    // tab lists it and downloads its model. The fleet's tokens are not a submitter's to give.
    void aControlCenterSubmitsAndDownloads()
    {
        Fleet fleet;
        QVERIFY2(fleet.start(), qPrintable(fleet.log()));
        auto token = net::JoinToken::decode(fleet.token(QStringLiteral("--submitter")));
        QVERIFY(token);
        RemoteSession session({fleet.path(QStringLiteral("carol")), QStringLiteral("carol"), 1000});
        QVERIFY(session.attach(*token));
        ui::MainWindow window(&session, JobSpec::defaultJob(), QString());
        QVERIFY(window.jobs());
        window.show();
        // An idle fleet: the window says so rather than waiting for ever.
        QTRY_COMPARE_WITH_TIMEOUT(session.state(), JobState::NoJob, 30000);
        QTRY_VERIFY2_WITH_TIMEOUT(window.welcome()->text().contains(QLatin1String("No job runs on this fleet now")),
                                  qPrintable(window.welcome()->text()), 10000);

        QSignalSpy answered(&session, &ui::ControlSession::commandAnswered);
        const JobSpec job = smallJob(QStringLiteral("carols-cnn"));
        session.submitJob(job, 0, 1.0);
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 30000);
        QVERIFY2(answered.first().at(1).toString().isEmpty(), qPrintable(answered.first().at(1).toString()));
        const qint64 id = queuedId(answered.first().at(0).toString());
        QVERIFY2(id > 0, qPrintable(answered.first().at(0).toString()));
        QVERIFY(answered.first().at(0).toString().contains(QLatin1String("queued for carol")));

        // The window follows the fleet's job as it runs, and the Jobs tab lists it.
        QTRY_VERIFY_WITH_TIMEOUT(session.job().name == QLatin1String("carols-cnn"), 60000);
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.stateOf(id) == QLatin1String("finished"), qPrintable(fleet.log()), 120000);
        ui::JobsView *jobs = window.jobs();
        jobs->refresh();
        QTRY_VERIFY_WITH_TIMEOUT(jobs->table()->rowCount() == 1 && jobs->table()->item(0, 3)->text() == QLatin1String("finished"), 20000);
        QCOMPARE(jobs->table()->item(0, 2)->text(), QStringLiteral("carol"));

        // Tokens are the fleet's administrator's.
        QSignalSpy issued(&session, &ui::ControlSession::tokenIssued);
        session.issueToken(1, 3600);
        QTRY_VERIFY_WITH_TIMEOUT(!issued.isEmpty(), 20000);
        QVERIFY2(issued.first().at(1).toString().contains(QLatin1String("only an operator")),
                 qPrintable(issued.first().at(1).toString()));

        // Download… from the Jobs tab.
        answered.clear();
        jobs->selectJob(id);
        QCOMPARE(jobs->selectedJob(), id);
        const QString into = fleet.path(QStringLiteral("carol-downloads"));
        jobs->askFolder = [into](const QString &) { return into; };
        QPushButton *download = nullptr;
        for (QPushButton *b : jobs->findChildren<QPushButton *>())
            if (b->text().startsWith(QLatin1String("Download")))
                download = b;
        QVERIFY(download && download->isEnabled());
        download->click();
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 30000);
        QVERIFY2(answered.first().at(1).toString().isEmpty(), qPrintable(answered.first().at(1).toString()));
        const QString runName = QFileInfo(fleet.queue().at(id).runDir).fileName();
        QVERIFY(QFileInfo(QDir(into).filePath(runName + QStringLiteral("/model.pt"))).size() > 0);

        // Export > Trained model…: the model of the job the window showed, from the fleet.
        answered.clear();
        const QString exported = fleet.path(QStringLiteral("exported.pt"));
        QVERIFY(session.exportModel(exported));
        QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 30000);
        QVERIFY2(answered.first().at(1).toString().isEmpty(), qPrintable(answered.first().at(1).toString()));
        QCOMPARE(QFileInfo(exported).size(), QFileInfo(QDir(into).filePath(runName + QStringLiteral("/model.pt"))).size());
        session.detach();
    }

    // A worker one job quarantined is the fleet's to keep out: no job of the fleet gets it,
    // across a restart of the service, and the worker is told why; an operator's release
    // (from a control center) lets it train again, and the waiting job finishes.
    void aQuarantineIsTheFleets()
    {
        Fleet fleet;
        QVERIFY2(fleet.start(), qPrintable(fleet.log()));
        QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(fleet.path(QStringLiteral("w1/cert.pem"))), 30000);
        net::TrustStore trust(fleet.identity());
        qint64 workerId = 0;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                const auto certificates = trust.certificates();
                for (const auto &c : certificates ? *certificates : QList<net::CertificateRecord>())
                    if (c.workerName == QLatin1String("w1"))
                        workerId = c.workerId;
                return workerId > 0;
            }(),
            30000);
        const QString admin = fleet.token(QStringLiteral("--operator"));
        Fleet::stop(*fleet.serve);
        // Quarantined as a job's screen would have it; the service finds it when it starts.
        QVERIFY(trust.quarantine(workerId, QStringLiteral("its results failed the screen"), 1000));
        QVERIFY2(fleet.startServe(), qPrintable(fleet.log()));
        const JobSpec job = smallJob(QStringLiteral("held"));
        QVERIFY(job.save(fleet.path(QStringLiteral("held.json"))));
        const test::ProcessRun submitted = test::runFlotilla(
            {QStringLiteral("submit"), fleet.path(QStringLiteral("held.json")), QStringLiteral("--identity-dir"),
             fleet.identity()},
            30000);
        QCOMPARE(submitted.exitCode, 0);
        const qint64 id = fleet.queue().begin()->first;
        QTRY_COMPARE_WITH_TIMEOUT(fleet.stateOf(id), QStringLiteral("running"), 30000);
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.log(QStringLiteral("worker")).contains(QLatin1String("quarantined by the fleet")),
                                  qPrintable(fleet.log(QStringLiteral("worker"))), 30000);
        // The job says why it waits, who, and the remedy.
        const auto saysWhy = [&] {
            const QString m = fleet.queue().at(id).message;
            return m.contains(QLatin1String("every worker is held back by the fleet"))
                   && m.contains(QLatin1String("w1 is quarantined")) && m.contains(QLatin1String("flotilla release"));
        };
        QTRY_VERIFY2_WITH_TIMEOUT(saysWhy(), qPrintable(fleet.queue().at(id).message), 20000);
        QCOMPARE(fleet.stateOf(id), QStringLiteral("running"));
        {
            auto store = Store::open(QDir(fleet.queue().at(id).runDir).filePath(QStringLiteral("flotilla.db")));
            QVERIFY(store);
            QCOMPARE(int((*store)->assimilations(1)->size()), 0);
        }

        // An operator releases it from the window's Workers tab (the session's release()).
        RemoteSession session({fleet.path(QStringLiteral("admin")), QStringLiteral("admin"), 1000});
        QVERIFY(session.attach(net::JoinToken::decode(admin).value()));
        QTRY_COMPARE_WITH_TIMEOUT(session.state(), JobState::Running, 30000);
        session.release(workerId);
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.stateOf(id) == QLatin1String("finished"),
                                  qPrintable(fleet.log() + fleet.log(QStringLiteral("worker"))), 120000);
        QTRY_VERIFY_WITH_TIMEOUT(trust.quarantined()->empty(), 10000);
        session.detach();

        // On the coordinator's machine: the quarantine written from outside while the service
        // runs holds the next job back; `flotilla release --identity-dir` lets it go.
        auto told = [&] { return fleet.log(QStringLiteral("worker"), -1).count(QLatin1String("quarantined by the fleet")); };
        const qsizetype before = told();
        QVERIFY(trust.quarantine(workerId, QStringLiteral("held by hand"), 2000));
        // The service reads it within two seconds and tells the (waiting) worker why it waits.
        QTRY_VERIFY_WITH_TIMEOUT(told() > before, 20000);
        QVERIFY(smallJob(QStringLiteral("second")).save(fleet.path(QStringLiteral("second.json"))));
        QCOMPARE(test::runFlotilla({QStringLiteral("submit"), fleet.path(QStringLiteral("second.json")),
                                    QStringLiteral("--identity-dir"), fleet.identity()},
                                   30000)
                     .exitCode,
                 0);
        const qint64 second = fleet.queue().rbegin()->first;
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.queue().at(second).message.contains(QLatin1String("is held back by the fleet")),
                                  qPrintable(fleet.stateOf(second) + QStringLiteral(": ") + fleet.queue().at(second).message
                                             + QStringLiteral("\n") + fleet.log() + fleet.log(QStringLiteral("worker"))),
                                  30000);
        const test::ProcessRun unknown = test::runFlotilla(
            {QStringLiteral("release"), QStringLiteral("nobody"), QStringLiteral("--identity-dir"), fleet.identity()},
            30000);
        QCOMPARE(unknown.exitCode, 1);
        QVERIFY2(unknown.err.contains(QLatin1String("quarantined now: w1")), qPrintable(unknown.err));
        const test::ProcessRun release = test::runFlotilla(
            {QStringLiteral("release"), QStringLiteral("w1"), QStringLiteral("--identity-dir"), fleet.identity()},
            30000);
        QVERIFY2(release.exitCode == 0, qPrintable(release.err));
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.stateOf(second) == QLatin1String("finished"),
                                  qPrintable(fleet.log() + fleet.log(QStringLiteral("worker"))), 120000);
    }

    // A job may require a device or memory: a worker is placed only in jobs it can serve. A
    // job no connected worker can serve does not wait in silence: the queue says why, and the
    // worker's log says what the job needs; cancelled, it ends.
    void aJobRequiresWhatAWorkerHas()
    {
        Fleet fleet;
        QVERIFY2(fleet.start(2), qPrintable(fleet.log()));
        auto submit = [&](const QString &name, const QString &device, qint64 memoryMb) {
            JobSpec job = smallJob(name);
            job.fleet.requireDevice = device;
            job.fleet.requireMemoryMb = memoryMb;
            const QString file = fleet.path(name + QStringLiteral(".json"));
            if (!job.save(file))
                return qint64(0);
            const test::ProcessRun run = test::runFlotilla(
                {QStringLiteral("submit"), file, QStringLiteral("--identity-dir"), fleet.identity()}, 30000);
            const auto match = QRegularExpression(QStringLiteral("^Job (\\d+) ")).match(run.out);
            return match.hasMatch() ? match.captured(1).toLongLong() : qint64(0);
        };
        const qint64 gpu = submit(QStringLiteral("gpu-only"), QStringLiteral("cuda"), 0);
        const qint64 small = submit(QStringLiteral("small"), QStringLiteral("any"), 64);
        QVERIFY(gpu > 0 && small > 0);
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.stateOf(small) == QLatin1String("finished"), qPrintable(fleet.log()), 120000);
        QCOMPARE(fleet.stateOf(gpu), QStringLiteral("running"));
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.queue().at(gpu).message.contains(QLatin1String("no connected worker meets")),
                                  qPrintable(fleet.queue().at(gpu).message), 20000);
        QVERIFY2(fleet.queue().at(gpu).message.contains(QLatin1String("w1 lacks a cuda device")),
                 qPrintable(fleet.queue().at(gpu).message));
        QTRY_VERIFY2_WITH_TIMEOUT(fleet.log(QStringLiteral("worker")).contains(QLatin1String("needs a cuda device")),
                                  qPrintable(fleet.log(QStringLiteral("worker"))), 20000);
        {
            auto store = Store::open(QDir(fleet.queue().at(gpu).runDir).filePath(QStringLiteral("flotilla.db")));
            QVERIFY(store);
            QCOMPARE(int((*store)->assimilations(1)->size()), 0);
        }
        // A job that asks for more memory than the number of a 64-bit machine's is refused.
        JobSpec huge = JobSpec::defaultJob();
        huge.fleet.requireMemoryMb = -1;
        QVERIFY(huge.problems().join(QLatin1Char(' ')).contains(QLatin1String("fleet.require_memory_mb")));
        huge.fleet.requireMemoryMb = 0;
        huge.fleet.requireDevice = QStringLiteral("tpu");
        QVERIFY(huge.problems().join(QLatin1Char(' ')).contains(QLatin1String("fleet.require_device")));
        const test::ProcessRun cancel = test::runFlotilla(
            {QStringLiteral("jobs"), QStringLiteral("cancel"), QString::number(gpu), QStringLiteral("--admin"),
             QStringLiteral("--identity-dir"), fleet.identity()},
            30000);
        QCOMPARE(cancel.exitCode, 0);
        QTRY_COMPARE_WITH_TIMEOUT(fleet.stateOf(gpu), QStringLiteral("cancelled"), 20000);
    }
};

QTEST_MAIN(TestFleetRemote)
#include "tst_fleetremote.moc"
