#pragma once
// The coordinator tests' fixture (tst_coordinator, tst_coordinatortrust): a coordinator with a
// fake clock and a real store in a temporary run directory, fake results, and helpers that
// run a job to its end and read its events.

#include "FakeClock.h"
#include "TestSupport.h"
#include "common/TensorBoardWriter.h"
#include "engine/coordination/Checkpoint.h"
#include "engine/coordination/Coordinator.h"

#include <QDir>
#include <QSet>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <limits>
#include <map>
#include <set>

using namespace flotilla;
using flotilla::test::FakeClock;

namespace coordinator_fixture {


struct Fixture
{
    QTemporaryDir dir;
    FakeClock clock;
    std::shared_ptr<const JobData> data = test::blobs(240, 4, 6);
    JobSpec spec = test::blobsJob(6, 2);

    std::unique_ptr<Coordinator> open()
    {
        auto c = Coordinator::open(spec, dir.path(), &clock, data);
        if (!c)
            qWarning() << c.error();
        return c ? std::move(c).value() : nullptr;
    }
};

// Evaluations asked for, kept to be recorded by the test (as the service's pool would).
inline void keepEvaluationRequests(Coordinator &c, std::vector<EvaluationRequest> &asked)
{
    CoordinatorHooks hooks;
    hooks.evaluate = [&asked](EvaluationRequest r) { asked.push_back(std::move(r)); };
    c.setHooks(hooks);
}

// A result that moves every weight a little, as training would, without training.
inline SubtaskResult fakeResult(const Assignment &a, qint64 covered = -1)
{
    SubtaskResult r;
    r.leaseId = a.leaseId;
    r.weights = a.weights + 0.01f;
    r.covered = covered < 0 ? a.end - a.begin : covered;
    r.sampleSteps = r.covered;
    r.meanLoss = 0.5;
    r.seconds = 1.0;
    r.partial = covered >= 0;
    return r;
}

// Runs the job to the end with well-behaved workers; returns the number of assimilations.
inline int runToEnd(Coordinator &c, const std::vector<qint64> &workers)
{
    int n = 0;
    for (int guard = 0; guard < 10000 && !c.finished(); ++guard) {
        for (const qint64 w : workers) {
            auto a = c.requestSubtask(w);
            if (!a)
                continue;
            if (c.submitResult(w, fakeResult(*a)).status == SubmitStatus::Assimilated)
                ++n;
        }
    }
    return n;
}

// Whether every (epoch, shard) of the assimilations was assimilated exactly once, in `shards`
// distinct pieces: an empty string, or what is wrong.
inline QString eachShardOnce(const std::vector<AssimilationRecord> &rows, int shards)
{
    std::map<std::pair<int, int>, int> perShard;
    for (const auto &a : rows)
        ++perShard[{a.epoch, a.shard}];
    if (int(perShard.size()) != shards)
        return QStringLiteral("%1 shards assimilated, expected %2").arg(perShard.size()).arg(shards);
    for (const auto &[key, count] : perShard)
        if (count != 1)
            return QStringLiteral("epoch %1, shard %2 assimilated %3 times").arg(key.first + 1).arg(key.second).arg(count);
    return {};
}

inline int countEvents(Coordinator &c, const QString &kind)
{
    auto e = c.store().events(1, kind);
    return e ? int(e->size()) : -1;
}

inline QString lastEventDetail(Coordinator &c, const QString &kind)
{
    auto e = c.store().events(1, kind);
    return e && !e->empty() ? e->back().detail : QString();
}

// A TorchScript classifier for the blobs data (4 features, 2 classes), made here with
// LibTorch's own compiler: weights filled with `scale`, and a forward pass whose body is
// given (it sees x, already flattened, and may refuse or spoil large batches — evaluation
// batches are the only ones over 100 samples).
inline QString scriptModel(const QString &folder, float scale, const std::string &body)
{
    torch::jit::Module m("__torch__.TestNet");
    m.register_parameter("weight", torch::full({2, 4}, scale).requires_grad_(true), false);
    m.register_parameter("bias", torch::zeros({2}).requires_grad_(true), false);
    try {
        m.define("def forward(self, x):\n"
                 "    x = x.flatten(1)\n"
                 "    y = torch.matmul(x, self.weight.t()) + self.bias\n" + body +
                 "    return y\n");
    } catch (const std::exception &e) {
        qWarning() << "cannot compile the test model:" << e.what();
        return {};
    }
    const QString path = folder + QStringLiteral("/net.pt");
    m.save(path.toStdString());
    return path;
}

// Weights of 1e36 are legal; an update 100× the model (within the norm bound) folded with an
// outer learning rate of 10 overflows float32.
inline void makeOverflowing(Fixture &f)
{
    f.spec.model.kind = QStringLiteral("torchscript");
    f.spec.model.path = scriptModel(f.dir.path(), 1e36f, {});
    f.spec.aggregation.rule = QStringLiteral("async-delta");
    f.spec.aggregation.outerLearningRate = 10.0;
    f.spec.aggregation.outerMomentum = 0.0;
}

} // namespace coordinator_fixture

using namespace coordinator_fixture;
