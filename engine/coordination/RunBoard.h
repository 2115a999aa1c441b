#pragma once
// A run's TensorBoard log: <run dir>/tensorboard/events.out.tfevents.*, so that
// `tensorboard --logdir runs/` shows Flotilla runs beside a user's other experiments.
// Written as the job goes: every assimilated result (training loss, staleness, learning
// rate, workers online, cost and savings) and every evaluation, stepped by the global
// model's seq; the job's settings as text. A log that cannot be written costs the run
// nothing but the log: the failure is said once in the log and the board goes quiet.
//
// Threads: the coordinator's.

#include "engine/coordination/Store.h"
#include "job/JobSpec.h"

#include <memory>

namespace flotilla {

class TensorBoardWriter;

class RunBoard
{
public:
    // Null, with a warning, when the folder or the file cannot be made.
    static std::unique_ptr<RunBoard> open(const QString &runDir, const JobSpec &spec, double wallSeconds);
    ~RunBoard();

    void result(const AssimilationRecord &a, double learningRate, int workersOnline, const LedgerTotals &cost,
                double wallSeconds);
    // The score under the task's name (test/accuracy, test/r2, …), the loss and the
    // evaluation's named metrics (the task's, and each class's accuracy or label's F1, as the
    // coordinator names them: test/class_accuracy/shirt, test/f1/cat).
    void evaluation(const EvaluationRecord &e, const std::vector<std::pair<QString, double>> &metrics,
                    double wallSeconds);
    // Hands what is buffered to the file (readers see it); at most every few seconds is enough.
    void flush();

    static QString folder(const QString &runDir);

private:
    RunBoard() = default;
    std::unique_ptr<TensorBoardWriter> m_writer;
    QString m_scoreKey = QStringLiteral("accuracy");
    bool m_failed = false;
};

} // namespace flotilla
