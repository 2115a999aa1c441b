#pragma once
// Dishonest workers, for the tests and benchmarks of result screening (docs/security.md).
// An attacker is an ordinary `flotilla worker` process whose finished results pass through
// one of these transformations before they are sent; honest worker code has no attack
// branch, only WorkerAgent::Options::resultHook, which is empty for real workers.
//
//   scale:K       returns the weights its subtask started from, times K
//   sign-flip     returns base − (trained − base): its update reversed
//   noise:SIGMA   adds Gaussian noise of standard deviation SIGMA to every value
//   stale-replay  returns the first model it was ever given, as if it were new work
//   free-rider    returns its base unchanged while claiming the whole subtask's work
//   nan           puts a NaN among the weights
//
// Started by `flotilla bench attack-worker --attack KIND [worker options]`, and by
// `flotilla demo --attack KIND`.

#include "common/Result.h"
#include "engine/training/Trainer.h"

#include <QString>
#include <QStringList>

#include <functional>

namespace flotilla {

struct Attack
{
    QString kind;
    double parameter = 0.0;

    static Result<Attack> parse(const QString &text);
    static QStringList kinds();
    QString describe() const;
};

using ResultHook = std::function<void(TrainOutcome &outcome, const torch::Tensor &base)>;

// The transformation; stateful where the attack needs memory (stale-replay).
ResultHook attackHook(const Attack &attack, quint64 seed);

// `flotilla bench attack-worker --attack KIND ...`: the rest of the arguments are a
// `flotilla worker` command line.
int runAttackWorker(const QStringList &arguments);

} // namespace flotilla
