#pragma once
// Engine-side measurements for `flotilla bench`, each against a peer written here and run in
// the same process, alternating the two so both see the same machine:
//   trainer      Flotilla's local trainer vs a bare LibTorch loop over the same CNN, batch,
//                threads and in-memory data (samples per second);
//   aggregation  one VC-ASGD assimilation of a ResNet-18-sized weight vector vs a memcpy of
//                the same bytes (seconds);
//   bare loop    the single-process LibTorch baseline of the time-to-accuracy comparison.
// No LibTorch types in this header: the app calls it with plain values.

#include "common/Result.h"

#include <QString>

#include <functional>
#include <vector>

namespace flotilla {

struct TrainerBenchConfig
{
    QString dataDir;          // Fashion-MNIST IDX folder; empty: the default
    int samples = 6000;       // training samples per run (one pass)
    int batchSize = 32;
    int threads = 1;
    int repeats = 5;
    double learningRate = 0.03;
};

struct PairedRates
{
    std::vector<double> flotilla; // per repeat
    std::vector<double> peer;
};

// Samples per second of each contender, per repeat.
Result<PairedRates> benchTrainer(const TrainerBenchConfig &config);

// Seconds of one assimilation (vc-asgd, α = 0.5) and of one memcpy of `parameters` floats,
// per repeat (the best of `inner` tries each).
PairedRates benchAggregation(std::int64_t parameters, int repeats, int inner);

struct BareLoopConfig
{
    QString dataDir;
    int epochs = 10;
    int batchSize = 32;
    double learningRate = 0.03;
    double momentum = 0.9;
    int threads = 2;
    int trainLimit = 0;
    quint64 seed = 1;
};

// Trains the CNN with a plain loop over the whole training set, evaluating on the test set
// after each epoch; `epochDone(epoch, accuracy, seconds the evaluation took)` returns false
// to stop.
Result<void> runBareLoop(const BareLoopConfig &config, const std::function<bool(int, double, double)> &epochDone);

} // namespace flotilla
