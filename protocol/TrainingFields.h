#pragma once
// A subtask's training settings (TrainConfig) in an Assign message: each setting's field of
// AssignMsg is named once, in TrainingFields.cpp, for both ways. The coordinator's server
// writes them into the lease it sends; the worker's agent reads them back.
// Threads: plain functions, safe on any thread.

#include "engine/training/Trainer.h"
#include "net/Messages.h"

namespace flotilla {

void writeTraining(const TrainConfig &config, net::AssignMsg &assign);
// The settings the lease carries; what is the worker's own to say (its threads) keeps its
// default.
TrainConfig readTraining(const net::AssignMsg &assign);

} // namespace flotilla
