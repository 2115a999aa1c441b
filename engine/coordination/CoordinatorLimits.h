#pragma once
// The coordinator's limits and intervals, shared by the files its class is written in
// (Coordinator.cpp: workers, leases and the job's life; CoordinatorResults.cpp: results and
// their folding; CoordinatorTrust.cpp: replicas, screening and quarantine;
// CoordinatorEvaluation.cpp: evaluations, the best model and the run's exports). Not part of
// the engine's interface.

#include <QString>

#include <cstddef>

namespace flotilla::coordinator_limits {

inline constexpr int kEvaluationAttempts = 3;
inline constexpr qint64 kEvaluationRetryMs = 2000; // times the attempt number
inline constexpr qint64 kScreenedBases = 256;      // recent versions whose samples are kept
inline constexpr std::ptrdiff_t kOldBaseSampleSlack = 64; // older ones kept until this many gather
inline constexpr int kVerdictWindow = 10;          // a worker's recent results that quarantine looks at
// Per-class accuracies and per-label F1 of at most this many classes or labels are kept as
// named metrics of each evaluation (the confusion matrix keeps every class's).
inline constexpr std::size_t kNamedClasses = 100;
inline constexpr int kFailuresToStall = 3;         // subtasks in a row a worker failed: it cannot train this job
inline constexpr qint64 kNoWorkerGraceMs = 10'000; // no worker online for this long: the job says it waits
inline constexpr int kCosineWindow = 10; // a worker's recent accepted updates the direction test averages
inline constexpr qint64 kOperatorPollMs = 2000;
inline constexpr double kNormFactor = 1000.0;
inline const QString kLockFile = QStringLiteral("flotilla.lock");

} // namespace flotilla::coordinator_limits
