#include "job/JobSpec.h"

#include "job/Tasks.h"

#include "common/AtomicFile.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QSet>
#include <QStandardPaths>

#include <cmath>
#include <limits>

namespace flotilla {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0; // 2^53

// The one list of a job file's fields, by dotted path: reading, writing and the check for
// unknown keys all walk it, so they cannot disagree.
template <typename Job, typename Visit>
void forEachField(Job &job, Visit &&visit)
{
    visit("name", job.name);
    visit("dataset.kind", job.dataset.kind);
    visit("dataset.path", job.dataset.path);
    visit("dataset.label_column", job.dataset.labelColumn);
    visit("dataset.token_type", job.dataset.tokenType);
    visit("dataset.context", job.dataset.context);
    visit("dataset.test_fraction", job.dataset.testFraction);
    visit("dataset.train_limit", job.dataset.trainLimit);
    visit("dataset.test_limit", job.dataset.testLimit);
    visit("dataset.image_size", job.dataset.imageSize);
    visit("dataset.color", job.dataset.color);
    visit("dataset.bad_images", job.dataset.badImages);
    visit("dataset.crop_padding", job.dataset.cropPadding);
    visit("dataset.horizontal_flip", job.dataset.horizontalFlip);
    visit("model.kind", job.model.kind);
    visit("model.path", job.model.path);
    visit("model.dropout", job.model.dropout);
    visit("model.hidden", job.model.hidden);
    visit("training.epochs", job.training.epochs);
    visit("training.shards", job.training.shards);
    visit("training.local_epochs", job.training.localEpochs);
    visit("training.local_steps", job.training.localSteps);
    visit("training.batch_size", job.training.batchSize);
    visit("training.task", job.training.task);
    visit("training.regression_loss", job.training.regressionLoss);
    visit("training.optimizer", job.training.optimizer);
    visit("training.learning_rate", job.training.learningRate);
    visit("training.momentum", job.training.momentum);
    visit("training.nesterov", job.training.nesterov);
    visit("training.weight_decay", job.training.weightDecay);
    visit("training.beta1", job.training.beta1);
    visit("training.beta2", job.training.beta2);
    visit("training.eps", job.training.eps);
    visit("training.clip_grad_norm", job.training.clipGradNorm);
    visit("training.label_smoothing", job.training.labelSmoothing);
    visit("training.precision", job.training.precision);
    visit("training.lr_schedule", job.training.lrSchedule);
    visit("training.lr_step_epochs", job.training.lrStepEpochs);
    visit("training.lr_gamma", job.training.lrGamma);
    visit("training.lr_warmup_steps", job.training.lrWarmupSteps);
    visit("training.lr_floor", job.training.lrFloor);
    visit("training.carry_optimizer", job.training.carryOptimizer);
    visit("training.best_metric", job.training.bestMetric);
    visit("training.early_stop_after", job.training.earlyStopAfter);
    visit("training.seed", job.training.seed);
    visit("training.threads", job.training.threads);
    visit("training.device", job.training.device);
    visit("aggregation.rule", job.aggregation.rule);
    visit("aggregation.alpha", job.aggregation.alpha);
    visit("aggregation.staleness_exponent", job.aggregation.stalenessExponent);
    visit("aggregation.outer_learning_rate", job.aggregation.outerLearningRate);
    visit("aggregation.outer_momentum", job.aggregation.outerMomentum);
    visit("aggregation.nesterov", job.aggregation.nesterov);
    visit("aggregation.momentum_period", job.aggregation.momentumPeriod);
    visit("aggregation.staleness_damping", job.aggregation.stalenessDamping);
    visit("aggregation.buffer", job.aggregation.buffer);
    visit("aggregation.rounds", job.aggregation.rounds);
    visit("aggregation.round_steps", job.aggregation.roundSteps);
    visit("aggregation.outer_scaled_by_fleet", job.aggregation.outerScaledByFleet);
    visit("aggregation.largest_fleet_step", job.aggregation.largestFleetStep);
    visit("aggregation.adaptive_fleet_step", job.aggregation.adaptiveFleetStep);
    visit("aggregation.normalize_staleness", job.aggregation.normalizeStaleness);
    visit("aggregation.worker_momentum_scaled_by_fleet", job.aggregation.workerMomentumScaledByFleet);
    visit("fleet.workers", job.fleet.workers);
    visit("fleet.lease_timeout_s", job.fleet.leaseTimeoutSeconds);
    visit("fleet.target_subtask_s", job.fleet.targetSubtaskSeconds);
    visit("fleet.epochs_ahead", job.fleet.epochsAhead);
    visit("fleet.share_tail", job.fleet.shareTail);
    visit("fleet.speculate", job.fleet.speculate);
    visit("fleet.dismiss_idle", job.fleet.dismissIdle);
    visit("fleet.heartbeat_timeout_s", job.fleet.heartbeatTimeoutSeconds);
    visit("fleet.instance_type", job.fleet.instanceType);
    visit("fleet.price_class", job.fleet.priceClass);
    visit("fleet.price_table", job.fleet.priceTable);
    visit("fleet.screen_results", job.fleet.screenResults);
    visit("fleet.quarantine_after", job.fleet.quarantineAfter);
    visit("fleet.redundancy", job.fleet.redundancy);
    visit("fleet.redundancy_tolerance", job.fleet.redundancyTolerance);
    visit("fleet.compression", job.fleet.compression);
    visit("fleet.require_device", job.fleet.requireDevice);
    visit("fleet.require_memory_mb", job.fleet.requireMemoryMb);
    visit("fleet.preemption.mean_interval_s", job.fleet.preemption.meanIntervalSeconds);
    visit("fleet.preemption.notice_fraction", job.fleet.preemption.noticeFraction);
    visit("fleet.preemption.rejoin_delay_s", job.fleet.preemption.rejoinDelaySeconds);
}

// Converts one JSON value into a field; returns what it must be when it cannot.
const char *convert(const QJsonValue &v, QString &out)
{
    if (!v.isString())
        return "a string";
    out = v.toString();
    return nullptr;
}

const char *convert(const QJsonValue &v, double &out)
{
    if (!v.isDouble())
        return "a number";
    out = v.toDouble();
    return nullptr;
}

const char *convert(const QJsonValue &v, bool &out)
{
    if (!v.isBool())
        return "true or false";
    out = v.toBool();
    return nullptr;
}

// JSON numbers are doubles: integers are exact up to 2^53, so that is the limit here too.
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
const char *convert(const QJsonValue &v, Int &out)
{
    const double d = v.toDouble(std::numeric_limits<double>::quiet_NaN());
    if (!v.isDouble() || d != std::floor(d) || std::abs(d) > kMaxExactInteger)
        return "an integer (at most 2^53 in magnitude)";
    if (d < double(std::numeric_limits<Int>::min()) || d > double(std::numeric_limits<Int>::max()))
        return std::is_signed_v<Int> ? "an integer in range" : "a non-negative integer in range";
    out = static_cast<Int>(d);
    return nullptr;
}

const char *convert(const QJsonValue &v, QList<int> &out)
{
    if (!v.isArray())
        return "an array of integers";
    QList<int> list;
    for (const auto &item : v.toArray()) {
        const double d = item.toDouble();
        if (!item.isDouble() || d != std::floor(d) || std::abs(d) > double(std::numeric_limits<int>::max()))
            return "an array of integers";
        list << static_cast<int>(d);
    }
    out = list;
    return nullptr;
}

QJsonValue toJsonValue(const QString &v) { return v; }
QJsonValue toJsonValue(double v) { return v; }
QJsonValue toJsonValue(bool v) { return v; }
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
QJsonValue toJsonValue(Int v)
{
    return static_cast<qint64>(v);
}
QJsonValue toJsonValue(const QList<int> &v)
{
    QJsonArray a;
    for (const int x : v)
        a.append(x);
    return a;
}

void setPath(QJsonObject &object, const QStringList &keys, const QJsonValue &value)
{
    if (keys.size() == 1) {
        object.insert(keys.front(), value);
        return;
    }
    QJsonObject inner = object.value(keys.front()).toObject();
    setPath(inner, keys.mid(1), value);
    object.insert(keys.front(), inner);
}

// Any key the field list does not name is an error: a typo must not silently fall back to
// a default.
QString findUnknownKey(const QJsonObject &object, const QString &prefix, const QSet<QString> &known)
{
    for (auto it = object.begin(); it != object.end(); ++it) {
        const QString path = prefix.isEmpty() ? it.key() : prefix + u'.' + it.key();
        if (!known.contains(path)) {
            QStringList siblings;
            for (const QString &k : known)
                if (k.startsWith(prefix.isEmpty() ? QString() : prefix + u'.')
                    && !k.mid(prefix.isEmpty() ? 0 : prefix.size() + 1).contains(u'.'))
                    siblings << k.mid(prefix.isEmpty() ? 0 : prefix.size() + 1);
            siblings.sort();
            return QStringLiteral("unknown key '%1' (known keys here: %2)").arg(path, siblings.join(QStringLiteral(", ")));
        }
        if (it.value().isObject()) {
            if (const QString inner = findUnknownKey(it.value().toObject(), path, known); !inner.isEmpty())
                return inner;
        }
    }
    return {};
}

} // namespace

bool isDeviceName(const QString &device)
{
    if (device == QLatin1String("auto") || device == QLatin1String("cpu") || device == QLatin1String("cuda"))
        return true;
    if (!device.startsWith(QLatin1String("cuda:")))
        return false;
    bool ok = false;
    const int index = device.mid(5).toInt(&ok);
    return ok && index >= 0 && index < 256 && device.mid(5) == QString::number(index);
}

const QStringList &aggregationRuleNames()
{
    static const QStringList names{QStringLiteral("vc-asgd"), QStringLiteral("staleness-aware"),
                                   QStringLiteral("async-delta"), QStringLiteral("sync-average")};
    return names;
}

const QStringList &precisionNames()
{
    static const QStringList names{QStringLiteral("fp32"), QStringLiteral("bf16"), QStringLiteral("fp16")};
    return names;
}

const QStringList &compressionNames()
{
    static const QStringList names{QStringLiteral("none"), QStringLiteral("fp16"), QStringLiteral("int8")};
    return names;
}

const QStringList &priceClassNames()
{
    static const QStringList names{QStringLiteral("spot"), QStringLiteral("on-demand"), QStringLiteral("volunteer")};
    return names;
}

QStringList deviceList(const QString &device)
{
    QStringList devices;
    for (const QString &part : device.split(u','))
        devices << part.trimmed();
    for (const QString &d : devices)
        if (!isDeviceName(d) || (devices.size() > 1 && !d.startsWith(QLatin1String("cuda"))))
            return {};
    return devices;
}

namespace {

Result<void> oneOf(const QString &field, const QString &value, const QStringList &allowed)
{
    if (allowed.contains(value))
        return {};
    return fail(QStringLiteral("'%1' is '%2'; it must be one of: %3").arg(field, value, allowed.join(QStringLiteral(", "))));
}

template <typename T>
Result<void> inRange(const QString &field, T value, T lo, T hi)
{
    if (value >= lo && value <= hi && !(std::is_floating_point_v<T> && std::isnan(double(value))))
        return {};
    return fail(QStringLiteral("'%1' is %2; it must be between %3 and %4").arg(field).arg(value).arg(lo).arg(hi));
}

Result<void> imagesOnly(const DatasetSpec &dataset, const QString &key, bool set, const QString &value)
{
    if (!set || dataset.kind == QLatin1String("images"))
        return {};
    return fail(QStringLiteral("'dataset.%1' is %2, but it applies only to data sets of kind 'images' (this one is '%3')")
                    .arg(key, value, dataset.kind));
}

// Which data and models each task can have: a problem named, never a job that trains on
// labels it reads as something else.
Result<void> taskFitsData(const DatasetSpec &dataset, const ModelSpec &model, const TrainingSpec &training)
{
    const QString &task = training.task;
    const bool tokens = dataset.kind == QLatin1String("tokens");
    if (tokens != (task == QLatin1String("next-token")))
        return fail(tokens ? QStringLiteral("'training.task' is '%1', but a data set of kind 'tokens' is for the "
                                            "next-token task")
                                 .arg(task)
                           : QStringLiteral("'training.task' next-token needs a data set of kind 'tokens' (a "
                                            "file of token ids); this one is '%1'")
                                 .arg(dataset.kind));
    if (tokens && model.kind != QLatin1String("torchscript"))
        return fail(QStringLiteral("'model.kind' is '%1', but the next-token task needs a TorchScript model that maps "
                                   "[batch, context] token ids to [batch, context, vocabulary] logits")
                        .arg(model.kind));
    if (tokens && (dataset.cropPadding > 0 || dataset.horizontalFlip))
        return fail(QStringLiteral("'dataset.crop_padding' and 'dataset.horizontal_flip' augment images; a token file "
                                   "has none"));
    const bool numericTargets = task == QLatin1String("regression") || task == QLatin1String("multi-label");
    if (numericTargets && dataset.kind != QLatin1String("csv") && dataset.kind != QLatin1String("npy"))
        return fail(QStringLiteral("'training.task' %1 needs targets a '%2' data set does not have; use a csv (target "
                                   "columns) or npy (y.npy) data set")
                        .arg(task, dataset.kind));
    if (training.labelSmoothing > 0 && numericTargets)
        return fail(QStringLiteral("'training.label_smoothing' is %1, but it smooths class targets and the task is %2; "
                                   "set it to 0")
                        .arg(training.labelSmoothing)
                        .arg(task));
    if (training.regressionLoss != QLatin1String("mse") && task != QLatin1String("regression"))
        return fail(QStringLiteral("'training.regression_loss' is '%1', but the task is %2; it applies to regression")
                        .arg(training.regressionLoss, task));
    if (dataset.labelColumn.contains(u',') && !numericTargets)
        return fail(QStringLiteral("'dataset.label_column' names several columns ('%1'); only regression and "
                                   "multi-label jobs have several targets")
                        .arg(dataset.labelColumn));
    return {};
}

} // namespace

JobSpec JobSpec::defaultJob()
{
    JobSpec job;
    job.fleet.preemption.meanIntervalSeconds = 20.0;
    return job;
}

Result<JobSpec> JobSpec::fromJson(const QJsonObject &json)
{
    JobSpec job;
    // A job file written before rounds (an aggregation section without "rounds") trains as it
    // was written to: what it leaves out of its aggregation takes the defaults of that time.
    if (const QJsonValue a = json.value(QStringLiteral("aggregation"));
        a.isObject() && !a.toObject().contains(QStringLiteral("rounds"))) {
        job.aggregation.rounds = false;
        job.aggregation.roundSteps = 0;
        job.aggregation.outerScaledByFleet = false;
        job.aggregation.outerMomentum = 0.0;
    }
    // One written with rounds before the adaptive fleet step keeps the fixed factor.
    if (const QJsonValue a = json.value(QStringLiteral("aggregation"));
        a.isObject() && !a.toObject().contains(QStringLiteral("adaptive_fleet_step")))
        job.aggregation.adaptiveFleetStep = false;
    QSet<QString> known;
    QString error;
    forEachField(job, [&](const char *path, auto &field) {
        const QString name = QString::fromLatin1(path);
        const QStringList keys = name.split(u'.');
        for (int i = 1; i <= keys.size(); ++i)
            known.insert(keys.mid(0, i).join(u'.'));
        if (!error.isEmpty())
            return;
        // Walk to the value; a section that is not an object is an error of its own.
        QJsonValue value = json;
        for (int i = 0; i < keys.size(); ++i) {
            if (!value.isObject()) {
                error = QStringLiteral("'%1' must be an object").arg(keys.mid(0, i).join(u'.'));
                return;
            }
            const QJsonObject object = value.toObject();
            if (!object.contains(keys[i]))
                return;
            value = object.value(keys[i]);
        }
        if (const char *expected = convert(value, field))
            error = QStringLiteral("'%1' must be %2").arg(name, QString::fromLatin1(expected));
    });
    if (error.isEmpty())
        error = findUnknownKey(json, {}, known);
    if (!error.isEmpty())
        return fail(error);
    if (auto valid = job.validate(); !valid)
        return valid.takeError();
    return job;
}

Result<JobSpec> JobSpec::load(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open job file '%1': %2").arg(path, file.errorString()));
    QJsonParseError parseError{};
    const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &parseError);
    if (parseError.error != QJsonParseError::NoError)
        return fail(QStringLiteral("job file '%1' is not valid JSON at offset %2: %3")
                        .arg(path).arg(parseError.offset).arg(parseError.errorString()));
    if (!doc.isObject())
        return fail(QStringLiteral("job file '%1' must hold a JSON object").arg(path));
    auto job = fromJson(doc.object());
    if (!job)
        return fail(QStringLiteral("job file '%1': %2").arg(path, job.error()));
    return job;
}

QJsonObject JobSpec::toJson() const
{
    QJsonObject json;
    forEachField(*this, [&](const char *path, const auto &field) {
        setPath(json, QString::fromLatin1(path).split(u'.'), toJsonValue(field));
    });
    return json;
}

Result<void> JobSpec::save(const QString &path) const
{
    return writeFileAtomically(path, QJsonDocument(toJson()).toJson(QJsonDocument::Indented));
}

Result<void> JobSpec::validate() const
{
    const QStringList found = problems();
    if (found.isEmpty())
        return {};
    return fail(found.first());
}

QStringList JobSpec::problems() const
{
    const std::initializer_list<Result<void>> checks = {
        name.trimmed().isEmpty() ? Result<void>(fail(QStringLiteral("'name' must not be empty"))) : Result<void>(),
        oneOf(QStringLiteral("dataset.kind"), dataset.kind,
              {QStringLiteral("fashion-mnist"), QStringLiteral("idx"), QStringLiteral("csv"), QStringLiteral("images"),
               QStringLiteral("npy"), QStringLiteral("tokens")}),
        (dataset.kind != QLatin1String("fashion-mnist") && dataset.path.isEmpty())
            ? Result<void>(fail(QStringLiteral("'dataset.path' is required for a dataset of kind '%1'").arg(dataset.kind)))
            : Result<void>(),
        inRange(QStringLiteral("dataset.test_fraction"), dataset.testFraction, 0.01, 0.9),
        inRange<qint64>(QStringLiteral("dataset.train_limit"), dataset.trainLimit, 0, qint64(1) << 40),
        inRange<qint64>(QStringLiteral("dataset.test_limit"), dataset.testLimit, 0, qint64(1) << 40),
        inRange(QStringLiteral("dataset.image_size"), dataset.imageSize, 0, 4096),
        oneOf(QStringLiteral("dataset.color"), dataset.color,
              {QStringLiteral("auto"), QStringLiteral("gray"), QStringLiteral("rgb")}),
        oneOf(QStringLiteral("dataset.bad_images"), dataset.badImages, {QStringLiteral("stop"), QStringLiteral("skip")}),
        // Settings of image folders on another kind would be ignored: say so instead.
        imagesOnly(dataset, QStringLiteral("image_size"), dataset.imageSize != 0, QString::number(dataset.imageSize)),
        imagesOnly(dataset, QStringLiteral("color"), dataset.color != QLatin1String("auto"), u'\'' + dataset.color + u'\''),
        imagesOnly(dataset, QStringLiteral("bad_images"), dataset.badImages != QLatin1String("stop"),
                   u'\'' + dataset.badImages + u'\''),
        inRange(QStringLiteral("dataset.crop_padding"), dataset.cropPadding, 0, 1024),
        (dataset.kind == QLatin1String("csv") && (dataset.cropPadding > 0 || dataset.horizontalFlip))
            ? Result<void>(fail(QStringLiteral("'dataset.%1' augments images, but a csv data set is a table; turn it off")
                                    .arg(dataset.cropPadding > 0 ? QStringLiteral("crop_padding")
                                                                 : QStringLiteral("horizontal_flip"))))
            : Result<void>(),
        oneOf(QStringLiteral("dataset.token_type"), dataset.tokenType, {QStringLiteral("uint16"), QStringLiteral("uint32")}),
        inRange(QStringLiteral("dataset.context"), dataset.context, 1, 65536),
        oneOf(QStringLiteral("training.task"), training.task, taskNames()),
        oneOf(QStringLiteral("training.regression_loss"), training.regressionLoss,
              {QStringLiteral("mse"), QStringLiteral("l1")}),
        taskFitsData(dataset, model, training),
        oneOf(QStringLiteral("model.kind"), model.kind,
              {QStringLiteral("mlp"), QStringLiteral("cnn"), QStringLiteral("resnet"), QStringLiteral("torchscript")}),
        (model.kind == QLatin1String("torchscript") && model.path.isEmpty())
            ? Result<void>(fail(QStringLiteral("'model.path' must name the TorchScript .pt file")))
            : Result<void>(),
        inRange(QStringLiteral("model.dropout"), model.dropout, 0.0, 0.9),
        [&]() -> Result<void> {
            if (model.hidden.isEmpty())
                return fail(QStringLiteral("'model.hidden' must list at least one layer width"));
            for (const int h : model.hidden)
                if (auto r = inRange(QStringLiteral("model.hidden"), h, 1, 65536); !r)
                    return r;
            return {};
        }(),
        inRange(QStringLiteral("training.epochs"), training.epochs, 1, 100000),
        inRange(QStringLiteral("training.shards"), training.shards, 0, 1000000),
        inRange(QStringLiteral("training.local_epochs"), training.localEpochs, 1, 1000),
        inRange(QStringLiteral("training.local_steps"), training.localSteps, 0, 10000000),
        inRange(QStringLiteral("training.batch_size"), training.batchSize, 1, 65536),
        oneOf(QStringLiteral("training.optimizer"), training.optimizer,
              {QStringLiteral("sgd"), QStringLiteral("adam"), QStringLiteral("adamw")}),
        inRange(QStringLiteral("training.learning_rate"), training.learningRate, 1e-8, 10.0),
        inRange(QStringLiteral("training.momentum"), training.momentum, 0.0, 0.999),
        [&]() -> Result<void> {
            if (!training.nesterov || (training.optimizer == QLatin1String("sgd") && training.momentum > 0))
                return {};
            return fail(QStringLiteral("'training.nesterov' needs the sgd optimizer with a momentum above 0 (it has "
                                       "%1 with momentum %2)")
                            .arg(training.optimizer)
                            .arg(training.momentum));
        }(),
        inRange(QStringLiteral("training.weight_decay"), training.weightDecay, 0.0, 1.0),
        inRange(QStringLiteral("training.beta1"), training.beta1, 0.0, 0.9999),
        inRange(QStringLiteral("training.beta2"), training.beta2, 0.0, 0.99999),
        inRange(QStringLiteral("training.eps"), training.eps, 1e-12, 1.0),
        inRange(QStringLiteral("training.clip_grad_norm"), training.clipGradNorm, 0.0, 1e6),
        inRange(QStringLiteral("training.label_smoothing"), training.labelSmoothing, 0.0, 0.99),
        oneOf(QStringLiteral("training.precision"), training.precision, precisionNames()),
        [&]() -> Result<void> {
            if (training.precision != QLatin1String("fp16") || training.device != QLatin1String("cpu"))
                return {};
            return fail(QStringLiteral("'training.precision' fp16 needs a CUDA GPU, but 'training.device' is cpu; "
                                       "use bf16 on a CPU, or fp32"));
        }(),
        oneOf(QStringLiteral("training.lr_schedule"), training.lrSchedule,
              {QStringLiteral("constant"), QStringLiteral("step"), QStringLiteral("cosine")}),
        inRange(QStringLiteral("training.lr_step_epochs"), training.lrStepEpochs, 1, 100000),
        inRange(QStringLiteral("training.lr_gamma"), training.lrGamma, 1e-6, 1.0),
        inRange(QStringLiteral("training.lr_warmup_steps"), training.lrWarmupSteps, 0, 100000000),
        inRange(QStringLiteral("training.lr_floor"), training.lrFloor, 0.0, 1.0),
        inRange(QStringLiteral("training.threads"), training.threads, 1, 1024),
        oneOf(QStringLiteral("training.best_metric"), training.bestMetric,
              {QStringLiteral("accuracy"), QStringLiteral("score"), QStringLiteral("loss")}),
        inRange(QStringLiteral("training.early_stop_after"), training.earlyStopAfter, 0, 100000),
        inRange<quint64>(QStringLiteral("training.seed"), training.seed, 0, (quint64(1) << 53) - 1),
        [&]() -> Result<void> {
            if (!deviceList(training.device).isEmpty())
                return {};
            return fail(QStringLiteral("'training.device' is '%1'; it must be auto, cpu, cuda, cuda:N (N: the "
                                       "GPU's index, from 0) or a list of GPUs such as cuda:0,cuda:1")
                            .arg(training.device));
        }(),
        oneOf(QStringLiteral("aggregation.rule"), aggregation.rule, aggregationRuleNames()),
        inRange(QStringLiteral("aggregation.alpha"), aggregation.alpha, 0.0, 0.999),
        inRange(QStringLiteral("aggregation.staleness_exponent"), aggregation.stalenessExponent, 0.0, 10.0),
        inRange(QStringLiteral("aggregation.outer_learning_rate"), aggregation.outerLearningRate, 1e-6, 10.0),
        inRange(QStringLiteral("aggregation.outer_momentum"), aggregation.outerMomentum, 0.0, 0.999),
        inRange(QStringLiteral("aggregation.momentum_period"), aggregation.momentumPeriod, 0, 100000),
        inRange(QStringLiteral("aggregation.staleness_damping"), aggregation.stalenessDamping, 0.0, 10.0),
        inRange(QStringLiteral("aggregation.buffer"), aggregation.buffer, 0, 100000),
        inRange(QStringLiteral("aggregation.round_steps"), aggregation.roundSteps, 0, 1000000),
        inRange(QStringLiteral("aggregation.largest_fleet_step"), aggregation.largestFleetStep, 1, 256),
        [&]() -> Result<void> {
            if (aggregation.buffer == 1 || aggregation.rule != QLatin1String("sync-average"))
                return {};
            return fail(QStringLiteral("'aggregation.buffer' is %1, but sync-average already folds whole rounds; a "
                                       "buffer applies to the asynchronous rules (leave it at 1)")
                            .arg(aggregation.buffer));
        }(),
        inRange(QStringLiteral("fleet.workers"), fleet.workers, 0, 256),
        inRange(QStringLiteral("fleet.lease_timeout_s"), fleet.leaseTimeoutSeconds, 1.0, 7.0 * 24 * 3600),
        inRange(QStringLiteral("fleet.target_subtask_s"), fleet.targetSubtaskSeconds, 0.0, 7.0 * 24 * 3600),
        inRange(QStringLiteral("fleet.epochs_ahead"), fleet.epochsAhead, 1, 64),
        inRange(QStringLiteral("fleet.heartbeat_timeout_s"), fleet.heartbeatTimeoutSeconds, 1.0, 24.0 * 3600),
        inRange(QStringLiteral("fleet.quarantine_after"), fleet.quarantineAfter, 0, 10),
        inRange(QStringLiteral("fleet.redundancy"), fleet.redundancy, 0.0, 1.0),
        inRange(QStringLiteral("fleet.redundancy_tolerance"), fleet.redundancyTolerance, 1e-6, 10.0),
        oneOf(QStringLiteral("fleet.price_class"), fleet.priceClass, priceClassNames()),
        oneOf(QStringLiteral("fleet.compression"), fleet.compression, compressionNames()),
        oneOf(QStringLiteral("fleet.require_device"), fleet.requireDevice,
              {QStringLiteral("any"), QStringLiteral("cpu"), QStringLiteral("cuda")}),
        inRange<qint64>(QStringLiteral("fleet.require_memory_mb"), fleet.requireMemoryMb, 0, qint64(1) << 30),
        inRange(QStringLiteral("fleet.preemption.mean_interval_s"), fleet.preemption.meanIntervalSeconds, 0.0, 1e7),
        inRange(QStringLiteral("fleet.preemption.notice_fraction"), fleet.preemption.noticeFraction, 0.0, 1.0),
        inRange(QStringLiteral("fleet.preemption.rejoin_delay_s"), fleet.preemption.rejoinDelaySeconds, 0.0, 1e6),
    };
    QStringList found;
    for (const auto &check : checks)
        if (!check)
            found << check.error();
    return found;
}

QString JobSpec::fieldOf(const QString &problem)
{
    if (!problem.startsWith(u'\''))
        return {};
    return problem.mid(1, problem.indexOf(u'\'', 1) - 1);
}

QStringList JobSpec::cautions() const
{
    QStringList out;
    // The fleet's step is min(N, L) times one worker's; outer momentum is what spreads it over
    // rounds. Without it the whole step lands at once, and on Fashion-MNIST with 4 workers the
    // loss climbed from 0.93 to 1.79 within one epoch (docs/algorithms.md).
    if (aggregation.rule == QLatin1String("async-delta") && aggregation.outerScaledByFleet
        && aggregation.outerMomentum == 0.0 && aggregation.largestFleetStep > 1)
        out << QStringLiteral("'aggregation.outer_momentum' is 0 while 'aggregation.outer_scaled_by_fleet' is on: "
                              "with several workers each step is up to %1 times one worker's with no momentum to "
                              "spread it, which diverged on Fashion-MNIST with 4 workers; keep outer_momentum at "
                              "0.9, or turn outer_scaled_by_fleet off (--outer-scaled off) for plain changes")
                   .arg(aggregation.largestFleetStep);
    return out;
}

QString JobSpec::describedName() const
{
    const auto stem = [](const QString &path) {
        const QFileInfo info(QDir::cleanPath(path));
        return info.isDir() || info.suffix().isEmpty() ? info.fileName() : info.completeBaseName();
    };
    QString data = dataset.kind;
    if (dataset.kind != QLatin1String("fashion-mnist") && !dataset.path.isEmpty() && !stem(dataset.path).isEmpty())
        data = stem(dataset.path);
    QString net = model.kind;
    if (model.kind == QLatin1String("torchscript") && !model.path.isEmpty() && !stem(model.path).isEmpty())
        net = stem(model.path);
    QString out = (data + u'-' + net).toLower();
    out.replace(QRegularExpression(QStringLiteral("[^a-z0-9._-]+")), QStringLiteral("-"));
    return out.left(60);
}

QString defaultRunDir(const JobSpec &job)
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs/") + job.name
           + u'-' + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
}

} // namespace flotilla
