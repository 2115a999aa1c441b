#pragma once
// Statistical screening of results from workers that may not be honest. A result's update
// (its weights minus the weights its subtask started from) is compared with the recent
// updates that were accepted: its size, normalized by the learning rate and the share of a
// shard it trained, and its direction against the fleet's recent consensus. Robust
// statistics (median, median absolute deviation) over a window of accepted updates keep a
// minority of bad results from moving the thresholds; a result is refused as too small only
// when it is small against what every worker sends now too (a converging model's updates all
// shrink).
//
// Everything is computed on a fixed random sample of the parameters (at most
// Config::sampleSize of them), so screening costs a few microseconds per result and the
// weights a result started from can be remembered cheaply. Buffers and counters are not
// screened: they are folded convexly or by max (see Aggregation.h).
//
// No clock, no disk, no events: the coordinator (or the simulator) owns one, calls judge()
// before folding a result in and accepted() after, and decides what a rejection means for
// the worker. Used from one thread.

#include "common/Statistics.h"
#include "engine/training/Model.h"

#include <QString>

#include <deque>

namespace flotilla {

class ResultScreen
{
public:
    struct Config
    {
        std::int64_t sampleSize = 16384;
        int window = 64;          // accepted updates the statistics are taken over
        int warmup = 8;           // before this many, sizes are judged by the absolute checks only
        int directionWarmup = 1;  // cosines needed before directions are judged
        double maxRelative = 3.0; // an update larger than 3× the model it started from
        double sizeSpread = 6.0;  // robust z-score (log size) beyond which a size is an outlier
        double minLogSpread = 0.25;
        double maxSizeRatio = 100.0;  // larger than the median by this much: refused whatever its direction
        double directionSpread = 4.0; // robust z-score of the cosine, for results pointing backwards
        double alignedSpread = 2.0;   // a large update this close to the typical cosine is plausible
        double minCosineSpread = 0.05;
        double smallFraction = 0.25;  // below this credit a result's size is not judged small
        // Every judged result's size, accepted or not (observed()): a result is "barely
        // trained" only when it is small against these too, so that a fleet whose updates
        // all shrink (a model that converges) is not refused result after result while the
        // accepted window, which only accepted results move, stays behind.
        int seenWindow = 16;
        int seenWarmup = 4;
        double consensusDecay = 0.9;  // the consensus direction's exponential average
    };

    // What judge() measured, and its verdict.
    struct Verdict
    {
        bool reject = false;
        QString reason;    // why, in words a user can act on; empty when accepted
        double size = 0.0; // update norm / (learning rate · √credit), on the sample
        double cosine = 0.0; // against the consensus direction; 0 before there is one
        double sizeScore = 0.0;      // robust z-score of log(size); 0 during warm-up
        double directionScore = 0.0; // robust z-score of the cosine; 0 during warm-up
        // The sample did not move at all. Where the sample is every parameter, nothing was
        // trained (refused when the result claims a fair share of a shard). Where it is not,
        // the sample cannot tell an idle result from one whose training moved only
        // parameters it does not hold (a collapsed network whose only live gradients are a
        // few biases, frozen layers, embedding rows it missed): judge() refuses nothing then,
        // and the caller compares the whole weights with the base (unchangedWork()).
        bool unchangedSample = false;
    };

    ResultScreen(const WeightSegments &segments, quint64 seed, Config config);
    ResultScreen(const WeightSegments &segments, quint64 seed) : ResultScreen(segments, seed, Config()) {}

    // The sampled parameter values of a flat weight buffer: what is kept of a base.
    torch::Tensor sample(const torch::Tensor &flat) const;

    // result and base are sample()s. learningRate and credit are the subtask's.
    Verdict judge(const torch::Tensor &result, const torch::Tensor &base, double learningRate,
                  double credit) const;
    // The reason for a result whose whole weights are its base's, or empty where that is
    // allowed: its credit is too small to say it should have trained (a lease preempted at
    // once). For the caller of a verdict with unchangedSample.
    QString unchangedWork(double credit) const;
    // Whether two whole flat weight buffers hold the same parameters (the buffers and
    // counters after them are not compared: they move without training).
    bool sameParameters(const torch::Tensor &result, const torch::Tensor &base) const;
    // The result behind a verdict was folded in: it joins the statistics.
    void accepted(const torch::Tensor &result, const torch::Tensor &base, const Verdict &verdict);
    // Every judged result, accepted or refused: its size joins what the fleet sends now.
    void observed(const Verdict &verdict);

    // While the global model is degenerate (it predicts one class for every test sample: a
    // network that collapsed), an update carries little but the label mix of the shard it
    // trained, and honest workers that keep their shards point against each other round after
    // round (measured: an honest worker's ten updates at a mean cosine of -0.67 against a
    // typical 0.32, on the image folder at lr x 4). Directions are not judged meanwhile, for
    // single results or a worker's average; sizes still are. The coordinator sets it from its
    // evaluations.
    void setDirectionsJudged(bool judged) { m_judgeDirections = judged; }
    bool judgesDirections() const { return m_judgeDirections; }

    bool warmedUp() const { return int(m_sizes.size()) >= m_config.warmup; }
    bool directionsKnown() const { return int(m_cosines.size()) >= m_config.directionWarmup; }
    // The fleet's typical cosine and its spread (for the per-worker test), once warmed up.
    double medianCosine() const;
    double cosineSpread() const;
    const Config &config() const { return m_config; }

private:
    Config m_config;
    torch::Tensor m_indices; // int64, sorted
    bool m_all = false;      // the sample is every parameter
    std::int64_t m_parameters = -1; // with m_all: how many (-1: the whole buffer)
    std::int64_t m_parameterCount = -1; // the parameters at the buffer's start (-1: all of it)
    torch::Tensor m_consensus;
    std::deque<double> m_sizes; // log sizes
    std::deque<double> m_cosines;
    std::deque<double> m_seen; // log sizes of every judged result
    bool m_judgeDirections = true;
};

} // namespace flotilla
