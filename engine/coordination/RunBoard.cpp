#include "engine/coordination/RunBoard.h"

#include "job/Tasks.h"

#include "common/LogCategories.h"
#include "common/TensorBoardWriter.h"

#include <QJsonDocument>

namespace flotilla {

QString RunBoard::folder(const QString &runDir)
{
    return runDir + QStringLiteral("/tensorboard");
}

std::unique_ptr<RunBoard> RunBoard::open(const QString &runDir, const JobSpec &spec, double wallSeconds)
{
    auto writer = TensorBoardWriter::open(folder(runDir));
    if (!writer) {
        qCWarning(lcEngine).noquote() << "no TensorBoard log for this run:" << writer.error();
        return nullptr;
    }
    std::unique_ptr<RunBoard> board(new RunBoard);
    board->m_writer = std::move(writer).value();
    board->m_scoreKey = taskInfo(spec.training.task).scoreKey;
    const QString settings = QString::fromUtf8(QJsonDocument(spec.toJson()).toJson(QJsonDocument::Indented));
    // Markdown: four spaces make a code block that keeps the JSON's indentation.
    QString markdown;
    for (const QString &line : settings.split(u'\n'))
        markdown += QStringLiteral("    ") + line + u'\n';
    board->m_writer->addText(QStringLiteral("job/settings"), 0, markdown, wallSeconds);
    board->flush();
    return board;
}

RunBoard::~RunBoard() = default;

void RunBoard::result(const AssimilationRecord &a, double learningRate, int workersOnline, const LedgerTotals &cost,
                      double wallSeconds)
{
    if (m_failed)
        return;
    m_writer->addScalars(a.seq,
                         {{QStringLiteral("train/loss"), a.loss},
                          {QStringLiteral("train/staleness"), double(a.staleness)},
                          {QStringLiteral("train/learning_rate"), learningRate},
                          {QStringLiteral("train/epoch"), double(a.epoch)},
                          {QStringLiteral("fleet/workers_online"), double(workersOnline)},
                          {QStringLiteral("cost/actual"), cost.costActual},
                          {QStringLiteral("cost/on_demand"), cost.costOnDemand},
                          {QStringLiteral("cost/savings_percent"), cost.savingsPercent()}},
                         wallSeconds);
}

void RunBoard::evaluation(const EvaluationRecord &e, const std::vector<std::pair<QString, double>> &metrics,
                          double wallSeconds)
{
    if (m_failed)
        return;
    QList<QPair<QString, double>> values{{QStringLiteral("test/") + m_scoreKey, e.accuracy},
                                         {QStringLiteral("test/loss"), e.loss}};
    for (const auto &[name, value] : metrics)
        values.append({QStringLiteral("test/") + name, value});
    m_writer->addScalars(e.seq, values, wallSeconds);
    flush();
}

void RunBoard::flush()
{
    if (m_failed)
        return;
    if (auto r = m_writer->flush(); !r) {
        m_failed = true;
        qCWarning(lcEngine).noquote() << "the TensorBoard log stops:" << r.error();
    }
}

} // namespace flotilla
