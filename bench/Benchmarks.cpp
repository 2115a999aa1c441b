#include "bench/Benchmarks.h"

#include "engine/coordination/Aggregation.h"
#include "engine/data/JobData.h"
#include "engine/training/Model.h"
#include "engine/training/Trainer.h"

#include <QElapsedTimer>

#include <cstring>

namespace flotilla {

namespace {

// The built-in cnn written out as a user would, with no Flotilla code in the loop.
struct BareCnn : torch::nn::Module
{
    BareCnn()
    {
        conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
        conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
        fc1 = register_module("fc1", torch::nn::Linear(1600, 128));
        fc2 = register_module("fc2", torch::nn::Linear(128, 10));
    }
    torch::Tensor forward(torch::Tensor x)
    {
        x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
        x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
        return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
    }
    torch::nn::Conv2d conv1{nullptr};
    torch::nn::Conv2d conv2{nullptr};
    torch::nn::Linear fc1{nullptr};
    torch::nn::Linear fc2{nullptr};
};

Result<std::shared_ptr<const JobData>> fashionMnist(const QString &dir, int trainLimit)
{
    JobSpec spec = JobSpec::defaultJob();
    spec.dataset.path = dir;
    spec.dataset.trainLimit = trainLimit;
    spec.training.shards = 1;
    return loadJobData(spec);
}

// One pass of a bare loop over x in its given order.
void bareEpoch(BareCnn &model, torch::optim::SGD &optimizer, const torch::Tensor &x, const torch::Tensor &y, int batch)
{
    model.train();
    const std::int64_t n = x.size(0);
    for (std::int64_t i = 0; i < n; i += batch) {
        const std::int64_t take = std::min<std::int64_t>(batch, n - i);
        optimizer.zero_grad();
        torch::nn::functional::cross_entropy(model.forward(x.narrow(0, i, take)), y.narrow(0, i, take)).backward();
        optimizer.step();
    }
}

double seconds(const QElapsedTimer &t) { return double(t.nsecsElapsed()) / 1e9; }

// What a bare loop trains on: the whole set normalized once, as float32, the way such
// loops are written (Flotilla's trainer normalizes each batch of stored bytes instead).
torch::Tensor normalizedFloats(const Dataset &d)
{
    return InputPipeline(d, torch::kCPU).rows(0, d.size()).contiguous();
}

} // namespace

Result<PairedRates> benchTrainer(const TrainerBenchConfig &config)
{
    auto data = fashionMnist(config.dataDir, config.samples);
    if (!data)
        return data.takeError();
    const Dataset &train = (*data)->train;
    auto model = createModel(JobSpec::defaultJob().model, (*data)->inputShape, (*data)->numClasses);
    if (!model)
        return model.takeError();
    const torch::Tensor start = (**model).flatWeights();

    TrainConfig tc;
    tc.learningRate = config.learningRate;
    tc.batchSize = config.batchSize;
    tc.threads = config.threads;
    at::set_num_threads(config.threads);
    const double n = double(train.size());
    const torch::Tensor bareFeatures = normalizedFloats(train);

    PairedRates rates;
    for (int r = 0; r < config.repeats; ++r) {
        const auto runFlotilla = [&]() -> Result<void> {
            QElapsedTimer t;
            t.start();
            auto out = trainSubtask(**model, start, train, tc, torch::kCPU);
            if (!out)
                return out.takeError();
            rates.flotilla.push_back(n / seconds(t));
            return {};
        };
        const auto runBare = [&] {
            torch::manual_seed(1);
            BareCnn bare;
            {
                // The same start weights, parameter by parameter (same order and shapes).
                torch::NoGradGuard noGrad;
                auto params = bare.parameters();
                std::int64_t offset = 0;
                for (auto &p : params) {
                    p.copy_(start.narrow(0, offset, p.numel()).view_as(p));
                    offset += p.numel();
                }
            }
            torch::optim::SGD optimizer(bare.parameters(),
                                        torch::optim::SGDOptions(config.learningRate).momentum(0.9));
            QElapsedTimer t;
            t.start();
            bareEpoch(bare, optimizer, bareFeatures, train.labels, config.batchSize);
            rates.peer.push_back(n / seconds(t));
        };
        // Alternate who goes first, so neither always meets a warmer cache.
        if (r % 2 == 0) {
            if (auto ok = runFlotilla(); !ok)
                return ok.takeError();
            runBare();
        } else {
            runBare();
            if (auto ok = runFlotilla(); !ok)
                return ok.takeError();
        }
    }
    return rates;
}

PairedRates benchAggregation(std::int64_t parameters, int repeats, int inner)
{
    at::set_num_threads(1); // memcpy is one thread; so is the comparison
    torch::manual_seed(1);
    AggregationState state;
    state.weights = torch::randn({parameters});
    Contribution c;
    c.result = torch::randn({parameters});
    AggregationSpec spec;
    spec.rule = QStringLiteral("vc-asgd");
    spec.alpha = 0.5;
    auto rule = createAggregationRule(spec);
    std::vector<float> destination(static_cast<std::size_t>(parameters));
    const float *source = c.result.data_ptr<float>();
    const std::size_t bytes = destination.size() * sizeof(float);

    PairedRates times;
    for (int r = 0; r < repeats; ++r) {
        double bestAssimilate = 1e9;
        double bestCopy = 1e9;
        for (int i = 0; i < inner; ++i) {
            QElapsedTimer t;
            t.start();
            (*rule)->assimilate(state, c);
            bestAssimilate = std::min(bestAssimilate, seconds(t));
            t.restart();
            std::memcpy(destination.data(), source, bytes);
            bestCopy = std::min(bestCopy, seconds(t));
        }
        times.flotilla.push_back(bestAssimilate);
        times.peer.push_back(bestCopy);
    }
    // Keep the copy observable so it cannot be optimized away.
    if (destination[0] != source[0])
        times.peer.clear();
    return times;
}

Result<void> runBareLoop(const BareLoopConfig &config, const std::function<bool(int, double, double)> &epochDone)
{
    auto data = fashionMnist(config.dataDir, config.trainLimit);
    if (!data)
        return data.takeError();
    at::set_num_threads(config.threads);
    torch::manual_seed(static_cast<std::uint64_t>(config.seed));
    BareCnn model;
    torch::optim::SGD optimizer(model.parameters(),
                                torch::optim::SGDOptions(config.learningRate).momentum(config.momentum));
    const Dataset &train = (*data)->train;
    const Dataset &test = (*data)->test;
    const torch::Tensor trainFeatures = normalizedFloats(train);
    const torch::Tensor testFeatures = normalizedFloats(test);
    for (int epoch = 1; epoch <= config.epochs; ++epoch) {
        const torch::Tensor order = torch::randperm(train.size(), torch::kInt64);
        bareEpoch(model, optimizer, trainFeatures.index_select(0, order), train.labels.index_select(0, order),
                  config.batchSize);
        QElapsedTimer evaluation;
        evaluation.start();
        torch::NoGradGuard noGrad;
        model.eval();
        std::int64_t correct = 0;
        for (std::int64_t i = 0; i < test.size(); i += 1000) {
            const std::int64_t take = std::min<std::int64_t>(1000, test.size() - i);
            correct += model.forward(testFeatures.narrow(0, i, take)).argmax(1).eq(test.labels.narrow(0, i, take))
                           .sum().item<std::int64_t>();
        }
        if (!epochDone(epoch, double(correct) / double(test.size()), double(evaluation.nsecsElapsed()) / 1e9))
            break;
    }
    return {};
}

} // namespace flotilla
