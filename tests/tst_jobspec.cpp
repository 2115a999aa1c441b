// Job files: the default job, JSON round trips, the shipped default.json, and the errors for
// unknown keys, wrong types, values out of range, broken JSON and missing files, each of
// which must name the field or the file.
#include "job/EventKind.h"
#include "job/JobSpec.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>
#include <QTemporaryDir>
#include <QtTest>

using namespace flotilla;

namespace {

QJsonObject readJsonObject(const QString &path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

// A job that differs from the default in every field.
JobSpec customJob()
{
    JobSpec j;
    j.name = QStringLiteral("custom-csv-mlp");
    j.dataset.kind = QStringLiteral("csv");
    j.dataset.path = QStringLiteral("/data/iris.csv");
    j.dataset.labelColumn = QStringLiteral("species");
    j.dataset.testFraction = 0.25;
    j.dataset.trainLimit = 1000;
    j.dataset.testLimit = 100;
    j.model.kind = QStringLiteral("mlp");
    j.model.path = QStringLiteral("/unused.pt");
    j.model.dropout = 0.2;
    j.model.hidden = {64, 32, 16};
    j.training.epochs = 3;
    j.training.shards = 12;
    j.training.localEpochs = 2;
    j.training.localSteps = 50;
    j.training.batchSize = 8;
    j.training.optimizer = QStringLiteral("adam");
    j.training.learningRate = 0.001;
    j.training.momentum = 0.5;
    j.training.weightDecay = 1e-4;
    j.training.lrSchedule = QStringLiteral("step");
    j.training.lrStepEpochs = 2;
    j.training.lrGamma = 0.1;
    j.training.seed = 123456789;
    j.training.threads = 3;
    j.training.device = QStringLiteral("cpu");
    j.aggregation.rule = QStringLiteral("async-delta");
    j.aggregation.alpha = 0.25;
    j.aggregation.stalenessExponent = 1.5;
    j.aggregation.outerLearningRate = 0.7;
    j.aggregation.outerMomentum = 0.9;
    j.aggregation.nesterov = false;
    j.aggregation.buffer = 16;
    j.aggregation.largestFleetStep = 6;
    j.aggregation.adaptiveFleetStep = true;
    j.fleet.workers = 7;
    j.fleet.leaseTimeoutSeconds = 45.5;
    j.fleet.epochsAhead = 3;
    j.fleet.shareTail = true;
    j.fleet.speculate = true;
    j.fleet.dismissIdle = true;
    j.fleet.instanceType = QStringLiteral("gcp/e2-standard-4");
    j.fleet.priceClass = QStringLiteral("on-demand");
    j.fleet.priceTable = QStringLiteral("/etc/prices.json");
    j.fleet.preemption.meanIntervalSeconds = 33;
    j.fleet.preemption.noticeFraction = 0.1;
    j.fleet.preemption.rejoinDelaySeconds = 9;
    return j;
}

// The default job's JSON with one value replaced; key is dotted, e.g. "training.epochs".
QJsonObject withValue(const QString &key, const QJsonValue &value)
{
    const QStringList parts = key.split(u'.');
    std::function<QJsonObject(QJsonObject, int)> set = [&](QJsonObject o, int i) {
        if (i == parts.size() - 1)
            o.insert(parts[i], value);
        else
            o.insert(parts[i], set(o.value(parts[i]).toObject(), i + 1));
        return o;
    };
    return set(JobSpec::defaultJob().toJson(), 0);
}

void expectError(const Result<JobSpec> &r, const QStringList &parts)
{
    QVERIFY2(!r.ok(), "the job should have been refused");
    for (const QString &part : parts)
        QVERIFY2(r.error().contains(part), qPrintable(QStringLiteral("'%1' missing from: %2").arg(part, r.error())));
}

} // namespace

class TestJobSpec : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void defaultJob()
    {
        const JobSpec d = JobSpec::defaultJob();
        QVERIFY(d.validate().ok());
        QCOMPARE(d.name, QStringLiteral("fashion-mnist-cnn"));
        QCOMPARE(d.dataset.kind, QStringLiteral("fashion-mnist"));
        QCOMPARE(d.model.kind, QStringLiteral("cnn"));
        QCOMPARE(d.fleet.workers, 4);
        QCOMPARE(d.fleet.preemption.meanIntervalSeconds, 20.0); // preemptions on
        QCOMPARE(d.aggregation.rule, QStringLiteral("async-delta"));
        QCOMPARE(d.training.shards, 0);           // from the data
        QVERIFY(d.training.carryOptimizer);
    }

    void defaultJobRoundTrips()
    {
        const QJsonObject json = JobSpec::defaultJob().toJson();
        auto back = JobSpec::fromJson(json);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->toJson(), json);
        QCOMPARE(back->fleet.preemption.meanIntervalSeconds, 20.0);
        QCOMPARE(back->model.hidden, (QList<int>{256, 128}));
    }

    void imageFolderFieldsRoundTrip()
    {
        // The fields customJob() cannot have: a csv job takes no image settings.
        JobSpec job = JobSpec::defaultJob();
        job.dataset.kind = QStringLiteral("images");
        job.dataset.path = QStringLiteral("/data/photos");
        job.dataset.imageSize = 32;
        job.dataset.color = QStringLiteral("rgb");
        job.dataset.badImages = QStringLiteral("skip");
        job.dataset.cropPadding = 4;
        job.dataset.horizontalFlip = true;
        QVERIFY2(job.validate().ok(), qPrintable(job.validate().error()));
        auto back = JobSpec::fromJson(job.toJson());
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->toJson(), job.toJson());
        QCOMPARE(back->dataset.imageSize, 32);
        QCOMPARE(back->dataset.color, QStringLiteral("rgb"));
        QCOMPARE(back->dataset.badImages, QStringLiteral("skip"));
        QCOMPARE(back->dataset.cropPadding, 4);
        QVERIFY(back->dataset.horizontalFlip);
        // Augmentation of a table is refused by name.
        job.dataset.kind = QStringLiteral("csv");
        job.dataset.imageSize = 0;
        job.dataset.color = QStringLiteral("auto");
        job.dataset.badImages = QStringLiteral("stop");
        QVERIFY2(job.validate().error().contains(QStringLiteral("'dataset.crop_padding' augments images")),
                 qPrintable(job.validate().error()));
    }

    void everyFieldRoundTrips()
    {
        const JobSpec job = customJob();
        QVERIFY2(job.validate().ok(), qPrintable(job.validate().error()));
        const QJsonObject json = job.toJson();
        QVERIFY(json != JobSpec::defaultJob().toJson());
        auto back = JobSpec::fromJson(json);
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->toJson(), json);
        // Spot checks of fields the JSON comparison would also catch, by name.
        QCOMPARE(back->dataset.labelColumn, QStringLiteral("species"));
        QCOMPARE(back->dataset.trainLimit, qint64(1000));
        QCOMPARE(back->model.hidden, (QList<int>{64, 32, 16}));
        QCOMPARE(back->training.seed, quint64(123456789));
        QCOMPARE(back->training.weightDecay, 1e-4);
        QCOMPARE(back->aggregation.nesterov, false);
        QCOMPARE(back->aggregation.largestFleetStep, 6);
        QVERIFY(back->aggregation.adaptiveFleetStep);
        QCOMPARE(back->fleet.leaseTimeoutSeconds, 45.5);
        QCOMPARE(back->fleet.preemption.rejoinDelaySeconds, 9.0);
        QCOMPARE(json.value(QStringLiteral("training")).toObject().value(QStringLiteral("batch_size")).toInt(), 8);
    }

    void missingKeysKeepTheirDefaults()
    {
        auto job = JobSpec::fromJson(QJsonObject{{QStringLiteral("training"), QJsonObject{{QStringLiteral("epochs"), 2}}}});
        QVERIFY2(job.ok(), qPrintable(job.error()));
        QCOMPARE(job->training.epochs, 2);
        QCOMPARE(job->training.shards, JobSpec().training.shards);
        QCOMPARE(job->name, JobSpec().name);
        auto empty = JobSpec::fromJson(QJsonObject{});
        QVERIFY2(empty.ok(), qPrintable(empty.error()));
        QCOMPARE(empty->toJson(), JobSpec().toJson());
    }

    // A job file trains as it was written to: one whose aggregation section predates rounds
    // keeps the damped rule, one that predates the adaptive fleet step keeps the fixed factor.
    void olderJobFilesKeepTheAggregationTheyWereWrittenFor()
    {
        const auto withAggregation = [](const QJsonObject &a) {
            return JobSpec::fromJson(QJsonObject{{QStringLiteral("aggregation"), a}});
        };
        auto damped = withAggregation(QJsonObject{{QStringLiteral("rule"), QStringLiteral("async-delta")}});
        QVERIFY2(damped.ok(), qPrintable(damped.error()));
        QVERIFY(!damped->aggregation.rounds);
        QVERIFY(!damped->aggregation.outerScaledByFleet);
        QCOMPARE(damped->aggregation.outerMomentum, 0.0);
        QVERIFY(!damped->aggregation.adaptiveFleetStep);
        auto fixed = withAggregation(QJsonObject{{QStringLiteral("rounds"), true}});
        QVERIFY2(fixed.ok(), qPrintable(fixed.error()));
        QVERIFY(fixed->aggregation.rounds);
        QVERIFY(fixed->aggregation.outerScaledByFleet);
        QVERIFY(!fixed->aggregation.adaptiveFleetStep);
        auto current = withAggregation(QJsonObject{{QStringLiteral("rounds"), true},
                                                   {QStringLiteral("adaptive_fleet_step"), true}});
        QVERIFY2(current.ok(), qPrintable(current.error()));
        QCOMPARE(current->toJson(), JobSpec().toJson());
        // No aggregation section at all: today's defaults.
        QVERIFY(JobSpec::fromJson(QJsonObject{})->aggregation.adaptiveFleetStep);
    }

    void shippedDefaultFileIsTheDefaultJob()
    {
        const QString path = QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/jobs/default.json");
        auto job = JobSpec::load(path);
        QVERIFY2(job.ok(), qPrintable(job.error()));
        QCOMPARE(job->toJson(), JobSpec::defaultJob().toJson());
        // The file itself, not only what loading makes of it: no key is missing from it.
        QCOMPARE(readJsonObject(path), JobSpec::defaultJob().toJson());
        // The copy compiled into the engine is the same file.
        QCOMPARE(readJsonObject(QStringLiteral(":/flotilla/jobs/default.json")), JobSpec::defaultJob().toJson());
    }

    void unknownKeysAreNamed()
    {
        QJsonObject top = JobSpec::defaultJob().toJson();
        top.insert(QStringLiteral("trainig"), QJsonObject{});
        expectError(JobSpec::fromJson(top), {QStringLiteral("unknown key 'trainig'"), QStringLiteral("training")});

        expectError(JobSpec::fromJson(withValue(QStringLiteral("training.epoch"), 3)),
                    {QStringLiteral("unknown key 'training.epoch'"), QStringLiteral("epochs")});
        expectError(JobSpec::fromJson(withValue(QStringLiteral("fleet.preemption.mean"), 3)),
                    {QStringLiteral("unknown key 'fleet.preemption.mean'"), QStringLiteral("mean_interval_s")});
    }

    void wrongTypesAreNamed_data()
    {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QJsonValue>("value");
        QTest::addColumn<QString>("message");
        QTest::newRow("epochs text") << QStringLiteral("training.epochs") << QJsonValue(QStringLiteral("ten"))
                                     << QStringLiteral("'training.epochs' must be an integer");
        QTest::newRow("epochs fraction") << QStringLiteral("training.epochs") << QJsonValue(2.5)
                                         << QStringLiteral("'training.epochs' must be an integer");
        QTest::newRow("epochs too big for int") << QStringLiteral("training.epochs") << QJsonValue(1e12)
                                                << QStringLiteral("'training.epochs' must be an integer");
        QTest::newRow("negative seed") << QStringLiteral("training.seed") << QJsonValue(-1)
                                       << QStringLiteral("'training.seed' must be a non-negative integer");
        QTest::newRow("lr text") << QStringLiteral("training.learning_rate") << QJsonValue(QStringLiteral("0.1"))
                                 << QStringLiteral("'training.learning_rate' must be a number");
        QTest::newRow("path number") << QStringLiteral("dataset.path") << QJsonValue(5)
                                     << QStringLiteral("'dataset.path' must be a string");
        QTest::newRow("nesterov text") << QStringLiteral("aggregation.nesterov") << QJsonValue(QStringLiteral("yes"))
                                       << QStringLiteral("'aggregation.nesterov' must be true or false");
        QTest::newRow("hidden fractions") << QStringLiteral("model.hidden") << QJsonValue(QJsonArray{64, 1.5})
                                          << QStringLiteral("'model.hidden' must be an array of integers");
        QTest::newRow("hidden number") << QStringLiteral("model.hidden") << QJsonValue(64)
                                       << QStringLiteral("'model.hidden' must be an array of integers");
        QTest::newRow("hidden huge") << QStringLiteral("model.hidden") << QJsonValue(QJsonArray{64, 1e10})
                                     << QStringLiteral("'model.hidden' must be an array of integers");
        QTest::newRow("seed past 2^53") << QStringLiteral("training.seed") << QJsonValue(9007199254740994.0)
                                        << QStringLiteral("'training.seed' must be an integer (at most 2^53");
        QTest::newRow("seed 2^64") << QStringLiteral("training.seed") << QJsonValue(18446744073709551616.0)
                                   << QStringLiteral("'training.seed' must be an integer (at most 2^53");
        QTest::newRow("train_limit 2^63") << QStringLiteral("dataset.train_limit") << QJsonValue(9223372036854775808.0)
                                          << QStringLiteral("'dataset.train_limit' must be an integer");
        QTest::newRow("training not object") << QStringLiteral("training") << QJsonValue(3)
                                             << QStringLiteral("'training' must be an object");
        QTest::newRow("preemption not object") << QStringLiteral("fleet.preemption") << QJsonValue(QJsonArray{})
                                               << QStringLiteral("'fleet.preemption' must be an object");
        QTest::newRow("name null") << QStringLiteral("name") << QJsonValue(QJsonValue::Null)
                                   << QStringLiteral("'name' must be a string");
    }
    void wrongTypesAreNamed()
    {
        QFETCH(QString, key);
        QFETCH(QJsonValue, value);
        QFETCH(QString, message);
        expectError(JobSpec::fromJson(withValue(key, value)), {message});
    }

    void outOfRangeValuesAreNamed_data()
    {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QJsonValue>("value");
        QTest::addColumn<QString>("message");
        QTest::newRow("epochs 0") << QStringLiteral("training.epochs") << QJsonValue(0)
                                  << QStringLiteral("'training.epochs' is 0; it must be between 1 and 100000");
        QTest::newRow("shards -3") << QStringLiteral("training.shards") << QJsonValue(-3)
                                   << QStringLiteral("'training.shards' is -3");
        QTest::newRow("batch 0") << QStringLiteral("training.batch_size") << QJsonValue(0)
                                 << QStringLiteral("'training.batch_size' is 0");
        QTest::newRow("lr 0") << QStringLiteral("training.learning_rate") << QJsonValue(0)
                              << QStringLiteral("'training.learning_rate' is 0");
        QTest::newRow("alpha 1") << QStringLiteral("aggregation.alpha") << QJsonValue(1.0)
                                 << QStringLiteral("'aggregation.alpha' is 1; it must be between 0 and 0.999");
        QTest::newRow("buffer -1") << QStringLiteral("aggregation.buffer") << QJsonValue(-1)
                                   << QStringLiteral("'aggregation.buffer' is -1; it must be between 0 and 100000");
        QTest::newRow("largest fleet step 0")
            << QStringLiteral("aggregation.largest_fleet_step") << QJsonValue(0)
            << QStringLiteral("'aggregation.largest_fleet_step' is 0; it must be between 1 and 256");
        QTest::newRow("epochs ahead 0") << QStringLiteral("fleet.epochs_ahead") << QJsonValue(0)
                                        << QStringLiteral("'fleet.epochs_ahead' is 0; it must be between 1 and 64");
        QTest::newRow("workers 300") << QStringLiteral("fleet.workers") << QJsonValue(300)
                                     << QStringLiteral("'fleet.workers' is 300; it must be between 0 and 256");
        QTest::newRow("notice 1.5") << QStringLiteral("fleet.preemption.notice_fraction") << QJsonValue(1.5)
                                    << QStringLiteral("'fleet.preemption.notice_fraction' is 1.5");
        QTest::newRow("test fraction") << QStringLiteral("dataset.test_fraction") << QJsonValue(0.95)
                                       << QStringLiteral("'dataset.test_fraction' is 0.95");
        QTest::newRow("hidden 0") << QStringLiteral("model.hidden") << QJsonValue(QJsonArray{64, 0})
                                  << QStringLiteral("'model.hidden' is 0");
        QTest::newRow("hidden empty") << QStringLiteral("model.hidden") << QJsonValue(QJsonArray{})
                                      << QStringLiteral("'model.hidden' must list at least one layer width");
        QTest::newRow("optimizer") << QStringLiteral("training.optimizer") << QJsonValue(QStringLiteral("rmsprop"))
                                   << QStringLiteral("'training.optimizer' is 'rmsprop'; it must be one of: sgd, adam");
        QTest::newRow("rule") << QStringLiteral("aggregation.rule") << QJsonValue(QStringLiteral("fedprox"))
                              << QStringLiteral("'aggregation.rule' is 'fedprox'");
        QTest::newRow("price class") << QStringLiteral("fleet.price_class") << QJsonValue(QStringLiteral("reserved"))
                                     << QStringLiteral("'fleet.price_class' is 'reserved'");
        QTest::newRow("dataset kind") << QStringLiteral("dataset.kind") << QJsonValue(QStringLiteral("parquet"))
                                      << QStringLiteral("'dataset.kind' is 'parquet'");
        QTest::newRow("csv without path") << QStringLiteral("dataset.kind") << QJsonValue(QStringLiteral("csv"))
                                          << QStringLiteral("'dataset.path' is required for a dataset of kind 'csv'");
        QTest::newRow("torchscript without path") << QStringLiteral("model.kind")
                                                  << QJsonValue(QStringLiteral("torchscript"))
                                                  << QStringLiteral("'model.path'");
        QTest::newRow("blank name") << QStringLiteral("name") << QJsonValue(QStringLiteral("  "))
                                    << QStringLiteral("'name' must not be empty");
        QTest::newRow("images without path") << QStringLiteral("dataset.kind") << QJsonValue(QStringLiteral("images"))
                                             << QStringLiteral("'dataset.path' is required for a dataset of kind 'images'");
        QTest::newRow("image size") << QStringLiteral("dataset.image_size") << QJsonValue(5000)
                                    << QStringLiteral("'dataset.image_size' is 5000; it must be between 0 and 4096");
        QTest::newRow("image size elsewhere") << QStringLiteral("dataset.image_size") << QJsonValue(32)
                                              << QStringLiteral("applies only to data sets of kind 'images' (this one "
                                                                "is 'fashion-mnist')");
        QTest::newRow("color") << QStringLiteral("dataset.color") << QJsonValue(QStringLiteral("cmyk"))
                               << QStringLiteral("'dataset.color' is 'cmyk'; it must be one of: auto, gray, rgb");
        QTest::newRow("bad images") << QStringLiteral("dataset.bad_images") << QJsonValue(QStringLiteral("ignore"))
                                    << QStringLiteral("'dataset.bad_images' is 'ignore'; it must be one of: stop, skip");
        QTest::newRow("crop padding") << QStringLiteral("dataset.crop_padding") << QJsonValue(-1)
                                      << QStringLiteral("'dataset.crop_padding' is -1");
        QTest::newRow("flip type") << QStringLiteral("dataset.horizontal_flip") << QJsonValue(1)
                                   << QStringLiteral("'dataset.horizontal_flip' must be true or false");
    }
    void outOfRangeValuesAreNamed()
    {
        QFETCH(QString, key);
        QFETCH(QJsonValue, value);
        QFETCH(QString, message);
        expectError(JobSpec::fromJson(withValue(key, value)), {message});
    }

    void bufferIsForAsynchronousRules()
    {
        JobSpec job = JobSpec::defaultJob();
        job.aggregation.rule = QStringLiteral("sync-average");
        job.aggregation.buffer = 8;
        QVERIFY2(job.validate().error().contains(QStringLiteral("'aggregation.buffer' is 8, but sync-average already folds "
                                                                "whole rounds")),
                 qPrintable(job.validate().error()));
        job.aggregation.buffer = 1;
        QVERIFY2(job.validate().ok(), qPrintable(job.validate().error()));
        job.aggregation.rule = QStringLiteral("staleness-aware");
        job.aggregation.buffer = 8;
        QVERIFY2(job.validate().ok(), qPrintable(job.validate().error()));
    }

    // Outer momentum 0 under a fleet-scaled step is valid but diverged: a caution names both
    // fields and the cure; the default job and plain changes have none.
    void aFleetStepWithoutOuterMomentumIsCautioned()
    {
        JobSpec job = JobSpec::defaultJob();
        QVERIFY2(job.cautions().isEmpty(), qPrintable(job.cautions().join(u'\n')));
        job.aggregation.outerMomentum = 0.0;
        QVERIFY(job.validate().ok());
        QCOMPARE(job.cautions().size(), 1);
        const QString caution = job.cautions().constFirst();
        QVERIFY2(caution.startsWith(QLatin1String("'aggregation.outer_momentum' is 0")), qPrintable(caution));
        QVERIFY2(caution.contains(QLatin1String("outer_scaled_by_fleet")), qPrintable(caution));
        QVERIFY2(caution.contains(QLatin1String("4 times")), qPrintable(caution));
        job.aggregation.outerScaledByFleet = false;
        QVERIFY(job.cautions().isEmpty());
        job.aggregation.outerScaledByFleet = true;
        job.aggregation.largestFleetStep = 1;
        QVERIFY(job.cautions().isEmpty());
    }

    void validateNamesTheField()
    {
        JobSpec job = JobSpec::defaultJob();
        job.training.momentum = 1.0;
        const auto r = job.validate();
        QVERIFY(!r.ok());
        QVERIFY2(r.error().contains(QLatin1String("'training.momentum' is 1")), qPrintable(r.error()));
        job.training.momentum = 0.9;
        job.fleet.leaseTimeoutSeconds = 0.5;
        QVERIFY2(job.validate().error().contains(QLatin1String("'fleet.lease_timeout_s' is 0.5")),
                 qPrintable(job.validate().error()));
    }

    void invalidJsonNamesTheOffset()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("broken.json"));
        // The error is at the unquoted value 'oops', 12 bytes in.
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        const QByteArray text("{\"name\": \"x\", \"training\": oops}");
        f.write(text);
        f.close();
        QJsonParseError expected{};
        QJsonDocument::fromJson(text, &expected);
        QVERIFY(expected.error != QJsonParseError::NoError);
        QVERIFY(expected.offset > 20); // somewhere at 'oops', not at the start
        auto r = JobSpec::load(path);
        expectError(r, {path, QStringLiteral("not valid JSON"),
                        QStringLiteral("at offset %1:").arg(expected.offset), expected.errorString()});

        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write("[1, 2]");
        f.close();
        expectError(JobSpec::load(path), {path, QStringLiteral("must hold a JSON object")});
    }

    void loadErrorsNameTheFile()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("typo.json"));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QJsonDocument(withValue(QStringLiteral("training.epoch"), 3)).toJson());
        f.close();
        expectError(JobSpec::load(path), {QStringLiteral("job file '%1'").arg(path),
                                          QStringLiteral("unknown key 'training.epoch'")});
    }

    void loadMissingFile()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("missing.json"));
        expectError(JobSpec::load(path), {QStringLiteral("cannot open job file '%1'").arg(path)});
    }

    void saveAndLoadRoundTrip()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("job.json"));
        const JobSpec job = customJob();
        const auto saved = job.save(path);
        QVERIFY2(saved.ok(), qPrintable(saved.error()));
        QCOMPARE(readJsonObject(path), job.toJson());
        auto loaded = JobSpec::load(path);
        QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
        QCOMPARE(loaded->toJson(), job.toJson());
        QCOMPARE(loaded->fleet.instanceType, QStringLiteral("gcp/e2-standard-4"));

        // Saving again replaces the file.
        JobSpec other = job;
        other.training.epochs = 99;
        QVERIFY(other.save(path).ok());
        auto reloaded = JobSpec::load(path);
        QVERIFY2(reloaded.ok(), qPrintable(reloaded.error()));
        QCOMPARE(reloaded->training.epochs, 99);

        const auto nowhere = job.save(dir.filePath(QStringLiteral("no/such/dir/job.json")));
        QVERIFY(!nowhere.ok());
        QVERIFY2(nowhere.error().contains(QLatin1String("no/such/dir/job.json")), qPrintable(nowhere.error()));
    }
    // The event kinds: names unique and found again by name, and docs/architecture.md's
    // table the same as the header's, row for row.
    void eventKindsAreOneTable()
    {
        QSet<QString> names;
        for (const EventKindInfo &k : eventKinds()) {
            QVERIFY2(!names.contains(k.name), qPrintable(k.name));
            names.insert(k.name);
            QCOMPARE(&eventInfo(k.kind), &k);
            QCOMPARE(eventKindNamed(k.name), std::optional<EventKind>(k.kind));
            QVERIFY2(!k.meaning.isEmpty(), qPrintable(k.name));
        }
        QVERIFY(!eventKindNamed(u"lease-granted ").has_value());
        QVERIFY(!eventKindNamed(u"no-such-event").has_value());
        QCOMPARE(eventName(EventKind::LeaseGranted), QStringLiteral("lease-granted"));
        QVERIFY(!jobEventKinds().contains(EventKind::WorkerUp));
        QVERIFY(jobEventKinds().contains(EventKind::WorkerPreempted));

        QFile doc(QStringLiteral(FLOTILLA_SOURCE_DIR "/docs/architecture.md"));
        QVERIFY2(doc.open(QIODevice::ReadOnly | QIODevice::Text), qPrintable(doc.fileName()));
        QStringList rows;
        bool inTable = false;
        while (!doc.atEnd()) {
            const QString line = QString::fromUtf8(doc.readLine()).trimmed();
            if (line == QLatin1String("| Kind | Level | Recorded by | Meaning |"))
                inTable = true;
            else if (inTable && line.startsWith(QLatin1String("| `")))
                rows.append(line);
            else if (inTable && !line.startsWith(u'|'))
                break;
        }
        QCOMPARE(rows.size(), eventKinds().size());
        for (qsizetype i = 0; i < rows.size(); ++i) {
            const EventKindInfo &k = eventKinds()[i];
            const QString expected = QStringLiteral("| `%1` | %2 | %3 | %4 |")
                                         .arg(k.name, levelName(k.level), sourceName(k.recordedBy), k.meaning);
            QCOMPARE(rows[i], expected);
        }
    }
};

QTEST_GUILESS_MAIN(TestJobSpec)
#include "tst_jobspec.moc"
