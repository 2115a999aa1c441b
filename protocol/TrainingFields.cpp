#include "protocol/TrainingFields.h"

namespace flotilla {

namespace {

// Each setting with its field, in one list; copy moves a value one way or the other.
template<typename Copy> void eachSetting(TrainConfig &c, net::AssignMsg &a, Copy copy)
{
    copy(c.optimizer, a.optimizer);
    copy(c.learningRate, a.learningRate);
    copy(c.momentum, a.momentum);
    copy(c.weightDecay, a.weightDecay);
    copy(c.nesterov, a.nesterov);
    copy(c.beta1, a.beta1);
    copy(c.beta2, a.beta2);
    copy(c.eps, a.eps);
    copy(c.clipGradNorm, a.clipGradNorm);
    copy(c.labelSmoothing, a.labelSmoothing);
    copy(c.precision, a.precision);
    copy(c.task, a.task);
    copy(c.regressionLoss, a.regressionLoss);
    copy(c.batchSize, a.batchSize);
    copy(c.localEpochs, a.localEpochs);
    copy(c.localSteps, a.localSteps);
    copy(c.seed, a.seed);
    copy(c.freshOptimizer, a.freshOptimizer);
}

// The learning-rate schedule's, which travel only when there is one (lr_total_steps > 0).
template<typename Copy> void eachScheduleSetting(TrainConfig &c, net::AssignMsg &a, Copy copy)
{
    copy(c.schedule.kind, a.lrSchedule);
    copy(c.schedule.base, a.lrBase);
    copy(c.schedule.totalSteps, a.lrTotalSteps);
    copy(c.schedule.warmupSteps, a.lrWarmupSteps);
    copy(c.schedule.floor, a.lrFloor);
    copy(c.schedule.stepEvery, a.lrStepEvery);
    copy(c.schedule.gamma, a.lrGamma);
    copy(c.firstStep, a.firstStep);
}

} // namespace

void writeTraining(const TrainConfig &config, net::AssignMsg &assign)
{
    TrainConfig c = config;
    const auto toMessage = [](auto &setting, auto &field) { field = std::decay_t<decltype(field)>(setting); };
    eachSetting(c, assign, toMessage);
    if (c.schedule.active())
        eachScheduleSetting(c, assign, toMessage);
}

TrainConfig readTraining(const net::AssignMsg &assign)
{
    TrainConfig c;
    net::AssignMsg a = assign;
    const auto fromMessage = [](auto &setting, auto &field) { setting = std::decay_t<decltype(setting)>(field); };
    eachSetting(c, a, fromMessage);
    if (a.lrTotalSteps > 0)
        eachScheduleSetting(c, a, fromMessage);
    return c;
}

} // namespace flotilla
