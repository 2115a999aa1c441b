#pragma once
// `flotilla bench parity`: Flotilla against the plain single-process loop a user already has
// (same model, optimizer, batch, schedule and epochs) and against PyTorch DDP, on several
// jobs off the default path: Fashion-MNIST with the built-in CNN, a generated image folder,
// a generated CSV, a Python TorchScript model with BatchNorm and, where python3-torchvision
// is installed, a torchvision ResNet-18. 1, 2 and 4 workers, any rules. It prints accuracy
// after equal epochs, epochs and seconds to a target (min/median/max over repeats) and writes
// every epoch of every run to a CSV.
//
// `flotilla bench parity-loop --job FILE --threads N` is the plain loop itself, as a process
// of its own: one JSON line per epoch.

#include "common/Result.h"
#include "job/JobSpec.h"

#include <QStringList>

#include <functional>
#include <map>
#include <vector>

namespace flotilla {

// One job of the suite: its spec at Flotilla's defaults (rule and workers set per run).
struct ParityJob
{
    QString name;
    QString description;
    JobSpec spec;
    bool python = false; // its model is made by bench/parity_models.py
};

// The suite's jobs (fashion, shapes, table, bn-cnn, resnet18), their data sets and models
// generated into dataDir when not there yet; a Python job whose model Python cannot make is
// left out, saying so. `bench parity` and `bench scaling` share it.
struct ParitySuiteOptions
{
    QStringList jobs;
    QString dataDir;
    QString python = QStringLiteral("/usr/bin/python3");
    bool quick = false;
    qint64 fashionLimit = 0;
    double warmupEpochs = 0; // a warmup of the learning rate over this many of the loop's epochs
    std::map<QString, int> epochs; // by job; 0 or missing: the job's own
    std::function<void(JobSpec &)> adjust; // last changes to each job, before it is checked
};
Result<std::vector<ParityJob>> paritySuite(const ParitySuiteOptions &options);

// A rule as --rules names it: a rule's name, then settings of its own after slashes, e.g.
// async-delta/damping=0 or async-delta/rounds=1/round-steps=8/outer-lr=1.25; lr-times=N
// multiplies the job's learning rate (the linear scaling rule's grid).
Result<void> applyParityRule(JobSpec &job, const QString &text);

// A file of bench/ (a Python peer), found beside the build or the working folder; empty when none.
QString findBenchFile(const QString &name);
// The data as the loop and Flotilla see it (standardized) as .npy files, and the initial
// model as TorchScript, for the Python peers.
Result<void> exportForPython(const JobSpec &spec, const QString &dir);

int runBenchParity(const QStringList &arguments);
int runBenchParityLoop(const QStringList &arguments);

} // namespace flotilla
