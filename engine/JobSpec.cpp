#include "JobSpec.h"

#include "AtomicFile.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>

#include <cmath>
#include <limits>

namespace flotilla {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0; // 2^53

// Reads typed members of one JSON object, remembering the first error and rejecting keys
// it was never asked about.
class ObjectReader
{
public:
    ObjectReader(const QJsonObject &object, QString path) : m_object(object), m_path(std::move(path)) {}

    void read(const char *key, QString &out) { with(key, [&](const QJsonValue &v) {
        if (!v.isString()) return expected(key, "a string");
        out = v.toString(); return true; }); }
    void read(const char *key, double &out) { with(key, [&](const QJsonValue &v) {
        if (!v.isDouble()) return expected(key, "a number");
        out = v.toDouble(); return true; }); }
    void read(const char *key, bool &out) { with(key, [&](const QJsonValue &v) {
        if (!v.isBool()) return expected(key, "true or false");
        out = v.toBool(); return true; }); }
    // JSON numbers are doubles: integers are exact up to 2^53, so that is the limit here too.
    template <typename Int>
    void readInt(const char *key, Int &out) { with(key, [&](const QJsonValue &v) {
        const double d = v.toDouble(std::numeric_limits<double>::quiet_NaN());
        if (!v.isDouble() || d != std::floor(d) || std::abs(d) > kMaxExactInteger)
            return expected(key, "an integer (at most 2^53 in magnitude)");
        if (d < double(std::numeric_limits<Int>::min()) || d > double(std::numeric_limits<Int>::max()))
            return expected(key, std::is_signed_v<Int> ? "an integer in range" : "a non-negative integer in range");
        out = static_cast<Int>(d); return true; }); }
    void read(const char *key, QList<int> &out) { with(key, [&](const QJsonValue &v) {
        if (!v.isArray()) return expected(key, "an array of integers");
        QList<int> list;
        for (const auto &item : v.toArray()) {
            const double d = item.toDouble();
            if (!item.isDouble() || d != std::floor(d) || std::abs(d) > double(std::numeric_limits<int>::max()))
                return expected(key, "an array of integers");
            list << static_cast<int>(d);
        }
        out = list; return true; }); }
    template <typename F>
    void object(const char *key, F &&readInner) { with(key, [&](const QJsonValue &v) {
        if (!v.isObject()) return expected(key, "an object");
        ObjectReader inner(v.toObject(), qualified(key));
        readInner(inner);
        if (auto e = inner.finish(); !e.isEmpty()) { m_error = e; return false; }
        return true; }); }

    // The first error, or an empty string.
    QString finish()
    {
        if (!m_error.isEmpty())
            return m_error;
        for (auto it = m_object.begin(); it != m_object.end(); ++it)
            if (!m_known.contains(it.key())) {
                QStringList known(m_known.begin(), m_known.end());
                known.sort();
                return QStringLiteral("unknown key '%1' (known keys here: %2)")
                    .arg(qualified(it.key()), known.join(QStringLiteral(", ")));
            }
        return {};
    }

private:
    template <typename F>
    void with(const char *key, F &&f)
    {
        const QString k = QString::fromLatin1(key);
        m_known.insert(k);
        if (!m_error.isEmpty() || !m_object.contains(k))
            return;
        f(m_object.value(k));
    }
    bool expected(const char *key, const char *what)
    {
        m_error = QStringLiteral("'%1' must be %2").arg(qualified(QString::fromLatin1(key)), QString::fromLatin1(what));
        return false;
    }
    QString qualified(const QString &key) const { return m_path.isEmpty() ? key : m_path + u'.' + key; }
    QString qualified(const char *key) const { return qualified(QString::fromLatin1(key)); }

    QJsonObject m_object;
    QString m_path;
    QSet<QString> m_known;
    QString m_error;
};

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
    ObjectReader r(json, {});
    r.read("name", job.name);
    r.object("dataset", [&](ObjectReader &d) {
        d.read("kind", job.dataset.kind);
        d.read("path", job.dataset.path);
        d.read("label_column", job.dataset.labelColumn);
        d.read("test_fraction", job.dataset.testFraction);
        d.readInt("train_limit", job.dataset.trainLimit);
        d.readInt("test_limit", job.dataset.testLimit);
    });
    r.object("model", [&](ObjectReader &m) {
        m.read("kind", job.model.kind);
        m.read("path", job.model.path);
        m.read("dropout", job.model.dropout);
        m.read("hidden", job.model.hidden);
    });
    r.object("training", [&](ObjectReader &t) {
        t.readInt("epochs", job.training.epochs);
        t.readInt("shards", job.training.shards);
        t.readInt("local_epochs", job.training.localEpochs);
        t.readInt("local_steps", job.training.localSteps);
        t.readInt("batch_size", job.training.batchSize);
        t.read("optimizer", job.training.optimizer);
        t.read("learning_rate", job.training.learningRate);
        t.read("momentum", job.training.momentum);
        t.read("weight_decay", job.training.weightDecay);
        t.read("lr_schedule", job.training.lrSchedule);
        t.readInt("lr_step_epochs", job.training.lrStepEpochs);
        t.read("lr_gamma", job.training.lrGamma);
        t.readInt("seed", job.training.seed);
        t.readInt("threads", job.training.threads);
        t.read("device", job.training.device);
    });
    r.object("aggregation", [&](ObjectReader &a) {
        a.read("rule", job.aggregation.rule);
        a.read("alpha", job.aggregation.alpha);
        a.read("staleness_exponent", job.aggregation.stalenessExponent);
        a.read("outer_learning_rate", job.aggregation.outerLearningRate);
        a.read("outer_momentum", job.aggregation.outerMomentum);
        a.read("nesterov", job.aggregation.nesterov);
    });
    r.object("fleet", [&](ObjectReader &f) {
        f.readInt("workers", job.fleet.workers);
        f.read("lease_timeout_s", job.fleet.leaseTimeoutSeconds);
        f.read("instance_type", job.fleet.instanceType);
        f.read("price_class", job.fleet.priceClass);
        f.read("price_table", job.fleet.priceTable);
        f.object("preemption", [&](ObjectReader &p) {
            p.read("mean_interval_s", job.fleet.preemption.meanIntervalSeconds);
            p.read("notice_fraction", job.fleet.preemption.noticeFraction);
            p.read("rejoin_delay_s", job.fleet.preemption.rejoinDelaySeconds);
        });
    });
    if (const QString error = r.finish(); !error.isEmpty())
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
    QJsonArray hiddenArray;
    for (const int h : model.hidden)
        hiddenArray.append(h);
    return QJsonObject{
        {QStringLiteral("name"), name},
        {QStringLiteral("dataset"), QJsonObject{
             {QStringLiteral("kind"), dataset.kind},
             {QStringLiteral("path"), dataset.path},
             {QStringLiteral("label_column"), dataset.labelColumn},
             {QStringLiteral("test_fraction"), dataset.testFraction},
             {QStringLiteral("train_limit"), dataset.trainLimit},
             {QStringLiteral("test_limit"), dataset.testLimit}}},
        {QStringLiteral("model"), QJsonObject{
             {QStringLiteral("kind"), model.kind},
             {QStringLiteral("path"), model.path},
             {QStringLiteral("dropout"), model.dropout},
             {QStringLiteral("hidden"), hiddenArray}}},
        {QStringLiteral("training"), QJsonObject{
             {QStringLiteral("epochs"), training.epochs},
             {QStringLiteral("shards"), training.shards},
             {QStringLiteral("local_epochs"), training.localEpochs},
             {QStringLiteral("local_steps"), training.localSteps},
             {QStringLiteral("batch_size"), training.batchSize},
             {QStringLiteral("optimizer"), training.optimizer},
             {QStringLiteral("learning_rate"), training.learningRate},
             {QStringLiteral("momentum"), training.momentum},
             {QStringLiteral("weight_decay"), training.weightDecay},
             {QStringLiteral("lr_schedule"), training.lrSchedule},
             {QStringLiteral("lr_step_epochs"), training.lrStepEpochs},
             {QStringLiteral("lr_gamma"), training.lrGamma},
             {QStringLiteral("seed"), static_cast<qint64>(training.seed)},
             {QStringLiteral("threads"), training.threads},
             {QStringLiteral("device"), training.device}}},
        {QStringLiteral("aggregation"), QJsonObject{
             {QStringLiteral("rule"), aggregation.rule},
             {QStringLiteral("alpha"), aggregation.alpha},
             {QStringLiteral("staleness_exponent"), aggregation.stalenessExponent},
             {QStringLiteral("outer_learning_rate"), aggregation.outerLearningRate},
             {QStringLiteral("outer_momentum"), aggregation.outerMomentum},
             {QStringLiteral("nesterov"), aggregation.nesterov}}},
        {QStringLiteral("fleet"), QJsonObject{
             {QStringLiteral("workers"), fleet.workers},
             {QStringLiteral("lease_timeout_s"), fleet.leaseTimeoutSeconds},
             {QStringLiteral("instance_type"), fleet.instanceType},
             {QStringLiteral("price_class"), fleet.priceClass},
             {QStringLiteral("price_table"), fleet.priceTable},
             {QStringLiteral("preemption"), QJsonObject{
                  {QStringLiteral("mean_interval_s"), fleet.preemption.meanIntervalSeconds},
                  {QStringLiteral("notice_fraction"), fleet.preemption.noticeFraction},
                  {QStringLiteral("rejoin_delay_s"), fleet.preemption.rejoinDelaySeconds}}}}},
    };
}

Result<void> JobSpec::save(const QString &path) const
{
    return writeFileAtomically(path, QJsonDocument(toJson()).toJson(QJsonDocument::Indented));
}

Result<void> JobSpec::validate() const
{
    const std::initializer_list<Result<void>> checks = {
        name.trimmed().isEmpty() ? Result<void>(fail(QStringLiteral("'name' must not be empty"))) : Result<void>(),
        oneOf(QStringLiteral("dataset.kind"), dataset.kind,
              {QStringLiteral("fashion-mnist"), QStringLiteral("idx"), QStringLiteral("csv")}),
        (dataset.kind != QLatin1String("fashion-mnist") && dataset.path.isEmpty())
            ? Result<void>(fail(QStringLiteral("'dataset.path' is required for a dataset of kind '%1'").arg(dataset.kind)))
            : Result<void>(),
        inRange(QStringLiteral("dataset.test_fraction"), dataset.testFraction, 0.01, 0.9),
        inRange<qint64>(QStringLiteral("dataset.train_limit"), dataset.trainLimit, 0, qint64(1) << 40),
        inRange<qint64>(QStringLiteral("dataset.test_limit"), dataset.testLimit, 0, qint64(1) << 40),
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
        inRange(QStringLiteral("training.shards"), training.shards, 1, 1000000),
        inRange(QStringLiteral("training.local_epochs"), training.localEpochs, 1, 1000),
        inRange(QStringLiteral("training.local_steps"), training.localSteps, 0, 10000000),
        inRange(QStringLiteral("training.batch_size"), training.batchSize, 1, 65536),
        oneOf(QStringLiteral("training.optimizer"), training.optimizer, {QStringLiteral("sgd"), QStringLiteral("adam")}),
        inRange(QStringLiteral("training.learning_rate"), training.learningRate, 1e-8, 10.0),
        inRange(QStringLiteral("training.momentum"), training.momentum, 0.0, 0.999),
        inRange(QStringLiteral("training.weight_decay"), training.weightDecay, 0.0, 1.0),
        oneOf(QStringLiteral("training.lr_schedule"), training.lrSchedule,
              {QStringLiteral("constant"), QStringLiteral("step"), QStringLiteral("cosine")}),
        inRange(QStringLiteral("training.lr_step_epochs"), training.lrStepEpochs, 1, 100000),
        inRange(QStringLiteral("training.lr_gamma"), training.lrGamma, 1e-6, 1.0),
        inRange(QStringLiteral("training.threads"), training.threads, 1, 1024),
        inRange<quint64>(QStringLiteral("training.seed"), training.seed, 0, (quint64(1) << 53) - 1),
        oneOf(QStringLiteral("training.device"), training.device,
              {QStringLiteral("auto"), QStringLiteral("cpu"), QStringLiteral("cuda")}),
        oneOf(QStringLiteral("aggregation.rule"), aggregation.rule,
              {QStringLiteral("vc-asgd"), QStringLiteral("staleness-aware"), QStringLiteral("async-delta"),
               QStringLiteral("sync-average")}),
        inRange(QStringLiteral("aggregation.alpha"), aggregation.alpha, 0.0, 0.999),
        inRange(QStringLiteral("aggregation.staleness_exponent"), aggregation.stalenessExponent, 0.0, 10.0),
        inRange(QStringLiteral("aggregation.outer_learning_rate"), aggregation.outerLearningRate, 1e-6, 10.0),
        inRange(QStringLiteral("aggregation.outer_momentum"), aggregation.outerMomentum, 0.0, 0.999),
        inRange(QStringLiteral("fleet.workers"), fleet.workers, 1, 256),
        inRange(QStringLiteral("fleet.lease_timeout_s"), fleet.leaseTimeoutSeconds, 1.0, 7.0 * 24 * 3600),
        oneOf(QStringLiteral("fleet.price_class"), fleet.priceClass,
              {QStringLiteral("spot"), QStringLiteral("on-demand"), QStringLiteral("volunteer")}),
        inRange(QStringLiteral("fleet.preemption.mean_interval_s"), fleet.preemption.meanIntervalSeconds, 0.0, 1e7),
        inRange(QStringLiteral("fleet.preemption.notice_fraction"), fleet.preemption.noticeFraction, 0.0, 1.0),
        inRange(QStringLiteral("fleet.preemption.rejoin_delay_s"), fleet.preemption.rejoinDelaySeconds, 0.0, 1e6),
    };
    for (const auto &check : checks)
        if (!check)
            return check;
    return {};
}

} // namespace flotilla
