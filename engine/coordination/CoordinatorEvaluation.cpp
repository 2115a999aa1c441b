// The coordinator's evaluations of the global model, the best model kept beside the last, and
// the run's exports when the job ends (metrics.csv, confusion.csv, model.pt).
#include "engine/coordination/Coordinator.h"
#include "engine/coordination/CoordinatorLimits.h"

#include "job/Tasks.h"

#include "common/AtomicFile.h"
#include "common/LogCategories.h"
#include "engine/coordination/RunBoard.h"
#include "engine/training/Device.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <torch/torch.h>

#include <cmath>

namespace flotilla {

using namespace coordinator_limits;

namespace {

// The confusion matrix of one evaluation as CSV: a row per true class, a column per predicted
// class, and each class's accuracy last.
QByteArray confusionCsv(const EvaluationDetail &d, const QStringList &names)
{
    const auto name = [&](int c) {
        QString n = c < names.size() ? names[c] : QString::number(c);
        return n.contains(u',') || n.contains(u'"') ? u'"' + n.replace(u'"', QStringLiteral("\"\"")) + u'"' : n;
    };
    QByteArray csv = "true\\predicted";
    for (int p = 0; p < d.classes; ++p)
        csv += ',' + name(p).toUtf8();
    csv += ",accuracy\n";
    const std::vector<double> accuracy = d.classAccuracy();
    for (int t = 0; t < d.classes; ++t) {
        csv += name(t).toUtf8();
        for (int p = 0; p < d.classes; ++p)
            csv += ',' + QByteArray::number(d.confusion[std::size_t(t * d.classes + p)]);
        csv += ',' + (accuracy[std::size_t(t)] >= 0 ? QByteArray::number(accuracy[std::size_t(t)], 'f', 5) : QByteArray())
               + '\n';
    }
    return csv;
}

// Renames `from` over `to`: at once where the system can (POSIX rename replaces), else by
// removing `to` first.
bool replaceFile(const QString &from, const QString &to)
{
    if (std::rename(QFile::encodeName(from).constData(), QFile::encodeName(to).constData()) == 0)
        return true;
    QFile::remove(to);
    return QFile::rename(from, to);
}

// The class a classification predicted for every one of its test samples, or -1 (another
// task, or more than one class predicted).
int predictedForEverySample(const EvaluationDetail &d)
{
    if (d.classes < 2 || d.confusion.size() != std::size_t(d.classes) * std::size_t(d.classes))
        return -1;
    std::int64_t total = 0;
    std::vector<std::int64_t> predicted(std::size_t(d.classes), 0);
    for (int t = 0; t < d.classes; ++t)
        for (int p = 0; p < d.classes; ++p) {
            predicted[std::size_t(p)] += d.confusion[std::size_t(t * d.classes + p)];
            total += d.confusion[std::size_t(t * d.classes + p)];
        }
    for (int p = 0; p < d.classes; ++p)
        if (total > 0 && predicted[std::size_t(p)] == total)
            return p;
    return -1;
}

} // namespace

void Coordinator::requestEvaluation(int epoch)
{
    if (epoch <= m_requestedEpoch)
        return;
    m_requestedEpoch = epoch;
    dispatchEvaluation(EvaluationRequest{epoch, m_core->version(), m_core->seq(), m_core->state().weights.clone()});
}

void Coordinator::dispatchEvaluation(EvaluationRequest request)
{
    if (m_hooks.evaluate) {
        m_hooks.evaluate(std::move(request));
        return;
    }
    auto device = request.onCpu ? Result<torch::Device>(torch::Device(torch::kCPU)) : selectDevice(m_spec.training.device);
    if (!device) {
        evaluationFailed(request, device.error());
        return;
    }
    auto ev = evaluate(*m_evalModel, request.weights, m_data->test, *device, taskLoss(m_spec.training));
    if (!ev) {
        evaluationFailed(request, ev.error());
        return;
    }
    recordEvaluation(request, *ev);
}

void Coordinator::evaluationFailed(const EvaluationRequest &request, const QString &error)
{
    if (m_finished || request.epoch <= m_evaluatedEpoch)
        return;
    const bool again = request.attempt < kEvaluationAttempts;
    EvaluationRequest retry = request;
    ++retry.attempt;
    // The last attempt runs on the CPU: a GPU that ran out of memory or lost its driver
    // should not cost the job its accuracy figure.
    retry.onCpu = retry.attempt == kEvaluationAttempts && m_spec.training.device != QLatin1String("cpu");
    const qint64 delayMs = kEvaluationRetryMs * request.attempt;
    m_lastEvaluationError = error;
    event(EventKind::EvaluationFailed, 0, 0, 0,
          QStringLiteral("epoch %1, version %2, attempt %3 of %4: %5; %6")
              .arg(request.epoch + 1).arg(request.version).arg(request.attempt).arg(kEvaluationAttempts)
              .arg(error,
                   again ? QStringLiteral("trying again%1%2")
                               .arg(m_hooks.evaluate ? QStringLiteral(" in %1 s").arg(double(delayMs) / 1000.0) : QString())
                               .arg(retry.onCpu ? QStringLiteral(" on the CPU") : QString())
                         : QStringLiteral("giving up on this evaluation; training goes on")));
    if (again) {
        if (m_hooks.evaluate)
            m_evaluationRetries.push_back({m_clock->nowMs() + delayMs, std::move(retry)});
        else
            dispatchEvaluation(std::move(retry));
        return;
    }
    // Nothing waits for an evaluation that will not come: the last epoch's ends the job.
    if (m_scheduler->finished() && request.epoch == m_spec.training.epochs - 1 && !m_finished) {
        if (auto r = finalize(); !r)
            setFatal(r.error());
    }
}

void Coordinator::recordEvaluation(const EvaluationRequest &request, const Evaluation &evaluation)
{
    if (!std::isfinite(evaluation.loss) || !std::isfinite(evaluation.accuracy)) {
        evaluationFailed(request, QStringLiteral("the test loss of the global model at version %1 is %2: its "
                                                 "outputs on the test set are not finite")
                                      .arg(request.version)
                                      .arg(evaluation.loss));
        return;
    }
    EvaluationRecord record{request.epoch, request.version, request.seq, evaluation.accuracy, evaluation.loss,
                            m_clock->nowMs()};
    const EvaluationDetail detail{request.epoch, request.seq, evaluation.top5Accuracy, evaluation.classes,
                                  {evaluation.confusion.begin(), evaluation.confusion.end()}};
    if (auto r = store().addEvaluation(m_jobId, record); !r) {
        setFatal(r.error());
        return;
    }
    if (auto r = store().addEvaluationDetail(m_jobId, detail); !r) {
        setFatal(r.error());
        return;
    }
    std::vector<std::pair<QString, double>> metrics = evaluation.metrics;
    const std::vector<double> perClass = detail.classAccuracy();
    for (std::size_t c = 0; c < perClass.size() && c < kNamedClasses; ++c)
        if (perClass[c] >= 0)
            metrics.emplace_back(QStringLiteral("class_accuracy/%1").arg(c < std::size_t(m_data->test.classNames.size())
                                                                          ? m_data->test.classNames[qsizetype(c)]
                                                                          : QString::number(c)),
                                 perClass[c]);
    for (std::size_t l = 0; l < evaluation.labelF1.size() && l < kNamedClasses; ++l)
        metrics.emplace_back(QStringLiteral("f1/%1").arg(l < std::size_t(m_data->test.classNames.size())
                                                            ? m_data->test.classNames[qsizetype(l)]
                                                            : QString::number(l)),
                             evaluation.labelF1[l]);
    if (auto r = store().addEvaluationMetrics(m_jobId, request.epoch, request.seq, metrics); !r) {
        setFatal(r.error());
        return;
    }
    if (request.epoch > m_evaluatedEpoch) {
        m_evaluatedEpoch = request.epoch;
        m_lastAccuracy = evaluation.accuracy;
        m_lastTestLoss = evaluation.loss;
    }
    QString further;
    for (const auto &[name, value] : evaluation.metrics)
        if (name != QLatin1String("top5_accuracy"))
            further += QStringLiteral(", %1 %2").arg(name).arg(value, 0, 'g', 5);
    // A model that predicts one class for every test sample has collapsed: the workers'
    // updates then follow their shards' label mix, not a common direction, and the screen
    // stops judging directions until an evaluation of the newest version shows otherwise.
    if (m_screen && request.epoch >= m_evaluatedEpoch) {
        const int one = predictedForEverySample(detail);
        if ((one >= 0) == m_screen->judgesDirections()) {
            m_screen->setDirectionsJudged(one < 0);
            further += one >= 0
                ? QStringLiteral("; it predicts class %1 for every test sample (the training collapsed; a lower "
                                 "learning rate may help): the results' directions are not judged until it does not")
                      .arg(one < int(m_data->test.classNames.size()) ? m_data->test.classNames[one] : QString::number(one))
                : QStringLiteral("; it no longer predicts one class for every test sample: the results' directions "
                                 "are judged again");
            qCWarning(lcEngine).noquote() << QStringLiteral("the evaluation of epoch %1:").arg(request.epoch + 1)
                                          << further.mid(2);
        }
    }
    event(EventKind::Evaluation, 0, 0, 0,
          QStringLiteral("epoch %1, version %2: %3, loss %4%5")
              .arg(request.epoch + 1).arg(request.version)
              .arg(QString(QStringLiteral("test ") + scoreText(m_spec.training.task, evaluation.accuracy)))
              .arg(evaluation.loss, 0, 'f', 4)
              .arg(further));
    if (m_board)
        m_board->evaluation(record, metrics, double(m_clock->nowMs()) / 1000.0);
    if (m_hooks.evaluated)
        m_hooks.evaluated(record);
    if (m_finished)
        return;
    const BestModelWatch::Verdict verdict = m_best.observe(request.epoch, evaluation.accuracy, evaluation.loss);
    if (verdict.improved) {
        // The best so far, beside the last: written whole, then renamed over the last best.
        const QString best = m_runDir + QStringLiteral("/model-best.pt");
        auto saved = m_evalModel->loadFlatWeights(request.weights);
        if (saved)
            saved = m_evalModel->save(best + QStringLiteral(".part"));
        if (saved && !replaceFile(best + QStringLiteral(".part"), best))
            saved = Result<void>(fail(QStringLiteral("cannot replace '%1'").arg(best)));
        if (!saved)
            qCWarning(lcEngine).noquote() << "the best model so far could not be kept:" << saved.error();
    }
    if (verdict.stop && !m_scheduler->finished()) {
        m_stoppedEarly = QStringLiteral("stopped early after epoch %1 of %2: no better test %3 in %4 evaluations "
                                        "(the best, %5 at epoch %6, is model-best.pt)")
                             .arg(request.epoch + 1)
                             .arg(m_spec.training.epochs)
                             .arg(m_best.metric())
                             .arg(m_best.patience())
                             .arg(m_best.metric() == QLatin1String("loss")
                                      ? QString::number(m_best.best(), 'f', 4)
                                      : QStringLiteral("%1%").arg(100.0 * m_best.best(), 0, 'f', 2))
                             .arg(m_best.bestEpoch() + 1);
        if (auto r = finalize(); !r)
            setFatal(r.error());
        return;
    }
    if (m_scheduler->finished() && request.epoch == m_spec.training.epochs - 1 && !m_finished) {
        if (auto r = finalize(); !r)
            setFatal(r.error());
    }
}

Result<void> Coordinator::finalize()
{
    // The final model, in a form Python loads, and the metrics as CSV.
    if (auto r = m_evalModel->loadFlatWeights(m_core->state().weights); !r)
        return r;
    if (auto r = m_evalModel->save(m_runDir + QStringLiteral("/model.pt")); !r)
        return r;
    QJsonArray mean;
    QJsonArray stddev;
    for (const float v : m_data->normalization.mean)
        mean.append(double(v));
    for (const float v : m_data->normalization.stddev)
        stddev.append(double(v));
    const QJsonObject norm{{QStringLiteral("mean"), mean}, {QStringLiteral("std"), stddev},
                           {QStringLiteral("about"), QStringLiteral("inputs are scaled to [0,1] (images), then "
                                                                    "(x - mean) / std per channel or feature")}};
    if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/normalization.json"), QJsonDocument(norm).toJson()); !r)
        return r;

    auto assimilations = store().assimilations(m_jobId);
    auto evaluations = store().evaluations(m_jobId);
    if (!assimilations || !evaluations)
        return fail(QStringLiteral("cannot read the metrics back from the store"));
    auto details = store().evaluationDetails(m_jobId);
    if (!details)
        return details.takeError();
    auto named = store().evaluationMetrics(m_jobId);
    if (!named)
        return named.takeError();
    // The task's metrics by seq, then name (older stores kept only the top-5 accuracy, in the details).
    std::map<qint64, std::map<QString, double>> further;
    for (const auto &d : *details)
        if (d.top5Accuracy >= 0)
            further[d.seq][QStringLiteral("top5_accuracy")] = d.top5Accuracy;
    for (const auto &m : *named)
        further[m.seq][m.name] = m.value;
    const TaskInfo &task = taskInfo(m_spec.training.task);
    QByteArray csv = "seq,version,epoch,shard,worker,staleness,credit,samples,train_loss,train_seconds,at_ms,test_"
                     + task.scoreKey.toUtf8() + ",test_loss";
    for (const QString &name : task.metrics)
        csv += ",test_" + name.toUtf8();
    csv += '\n';
    std::size_t e = 0;
    for (const auto &a : *assimilations) {
        QString tested = u',' + QString(u',');
        for (qsizetype m = 0; m < task.metrics.size(); ++m)
            tested += u',';
        while (e < evaluations->size() && (*evaluations)[e].seq <= a.seq) {
            if ((*evaluations)[e].seq == a.seq) {
                tested = u',' + QString::number((*evaluations)[e].accuracy, 'f', 5) + u','
                         + QString::number((*evaluations)[e].loss, 'f', 5);
                const auto values = further.find(a.seq);
                for (const QString &name : task.metrics) {
                    tested += u',';
                    if (values != further.end())
                        if (const auto v = values->second.find(name); v != values->second.end())
                            tested += QString::number(v->second, 'g', 6);
                }
            }
            ++e;
        }
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11")
                   .arg(a.seq).arg(a.version).arg(a.epoch).arg(a.shard).arg(a.workerId).arg(a.staleness)
                   .arg(a.credit, 0, 'f', 4).arg(a.samples).arg(a.loss, 0, 'f', 5).arg(a.trainSeconds, 0, 'f', 3)
                   .arg(a.atMs)
                   .toUtf8()
               + tested.toUtf8() + '\n';
    }
    if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/metrics.csv"), csv); !r)
        return r;
    if (!details->empty() && details->back().classes > 0) {
        if (auto r = writeFileAtomically(m_runDir + QStringLiteral("/confusion.csv"),
                                         confusionCsv(details->back(), m_data->test.classNames));
            !r)
            return r;
    }
    if (m_board)
        m_board->flush();
    const qint64 now = m_clock->nowMs();
    if (auto r = store().setJobState(m_jobId, QStringLiteral("finished"), now); !r)
        return r;
    m_finished = true;
    const QString accuracy = m_evaluatedEpoch == m_spec.training.epochs - 1 || !m_stoppedEarly.isEmpty()
                                 ? QString(QStringLiteral("test ") + scoreText(m_spec.training.task, m_lastAccuracy))
                                 : QStringLiteral("test %1 unknown (the final evaluation failed: %2)")
                                       .arg(taskInfo(m_spec.training.task).score, m_lastEvaluationError);
    event(EventKind::JobFinished, 0, 0, 0,
          m_stoppedEarly.isEmpty()
              ? QStringLiteral("%1 epochs, version %2, %3; model saved to %4/model.pt")
                    .arg(m_spec.training.epochs).arg(m_core->version()).arg(accuracy, m_runDir)
              : QStringLiteral("%1; version %2, %3; model saved to %4/model.pt")
                    .arg(m_stoppedEarly).arg(m_core->version()).arg(accuracy, m_runDir));
    if (m_hooks.finished)
        m_hooks.finished();
    return {};
}

} // namespace flotilla
