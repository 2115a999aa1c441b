// Compressed results: the fp16 and int8 codecs round trip within their precision, error
// feedback carries what rounding dropped into the next result, bad bytes are refused with a
// reason, and a coordinator decodes deltas against each lease's own base and rejects corrupt
// or mismatched ones without touching the global model.
#include "FakeClock.h"
#include "TestSupport.h"
#include "engine/coordination/Coordinator.h"
#include "engine/wire/Compression.h"
#include "engine/wire/Downlink.h"
#include "engine/wire/WireFormat.h"

#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

#include <cstring>
#include <limits>

using namespace flotilla;
using flotilla::test::FakeClock;

namespace {

torch::Tensor randomWeights(qint64 n, double scale = 1.0)
{
    return torch::randn({n}) * scale;
}

// A flat layout of `parameters` values followed by `buffers` running statistics and
// `counters` batch counters, as a model with BatchNorm has.
WeightLayout layoutOf(qint64 parameters, qint64 buffers = 0, qint64 counters = 0)
{
    WeightLayout layout;
    const auto add = [&](const char *name, qint64 numel, TensorKind kind) {
        if (numel > 0)
            layout.entries.push_back({name, {numel}, layout.totalNumel, numel, kind});
        layout.totalNumel += numel;
    };
    add("weight", parameters, TensorKind::Parameter);
    add("running_mean", buffers, TensorKind::Buffer);
    add("num_batches_tracked", counters, TensorKind::Counter);
    return layout;
}

// A trained-looking result of lease `a`, moved by `step` everywhere, compressed as `kind`.
SubtaskResult compressedResult(const Assignment &a, Compression kind, UpdateEncoder &encoder, float step = 0.01f)
{
    TrainOutcome outcome;
    outcome.weights = a.weights + step;
    outcome.meanLoss = 0.5;
    outcome.covered = a.end - a.begin;
    outcome.sampleSteps = outcome.covered;
    outcome.seconds = 1.0;
    return SubtaskResult::fromOutcome(a.leaseId, outcome, kind, encoder, a.weights);
}

struct Fixture
{
    QTemporaryDir dir;
    FakeClock clock;
    std::shared_ptr<const JobData> data = test::blobs(240, 4, 6);
    JobSpec spec = test::blobsJob(6, 2);

    std::unique_ptr<Coordinator> open(const QString &compression)
    {
        spec.fleet.compression = compression;
        auto c = Coordinator::open(spec, dir.path(), &clock, data);
        if (!c)
            qWarning() << c.error();
        return c ? std::move(c).value() : nullptr;
    }
};

} // namespace

class TestCompression : public QObject
{
    Q_OBJECT

    // A slow worker's lease expires; the model moves past the two checkpoints kept on disk;
    // its late result comes, in `kind`: dropped as a duplicate, the model as it was, nobody's
    // record marked.
    static void lateResultWhoseBaseIsGone(Compression kind)
    {
        Fixture f;
        f.spec.fleet.leaseTimeoutSeconds = 10;
        auto c = f.open(compressionName(kind));
        QVERIFY(c);
        const qint64 slow = c->workerJoined(test::spotWorker(QStringLiteral("slow"))).value();
        const qint64 fast = c->workerJoined(test::spotWorker(QStringLiteral("fast"))).value();
        const qint64 other = c->workerJoined(test::spotWorker(QStringLiteral("other"))).value();
        auto late = c->requestSubtask(slow); // from version 0
        auto first = c->requestSubtask(fast);
        f.clock.advance(10'000);
        c->tick(); // both leases expire; version 0 is no longer an active lease's base
        UpdateEncoder e;
        QCOMPARE(c->submitResult(fast, compressedResult(*first, kind, e)).status, SubmitStatus::Assimilated);
        // The late subtask goes to another worker, which keeps it while the model moves on.
        QCOMPARE(c->requestSubtask(other)->subtaskId, late->subtaskId);
        for (int i = 0; i < 4; ++i) // past the two checkpoints kept on disk
            QCOMPARE(c->submitResult(fast, compressedResult(*c->requestSubtask(fast), kind, e)).status,
                     SubmitStatus::Assimilated);
        const torch::Tensor before = c->globalWeights().clone();
        UpdateEncoder mine;
        const SubmitReply reply = c->submitResult(slow, compressedResult(*late, kind, mine));
        QCOMPARE(reply.status, SubmitStatus::Duplicate);
        QVERIFY2(reply.reason.contains(QStringLiteral("no longer kept")), qPrintable(reply.reason));
        QVERIFY(torch::equal(before, c->globalWeights()));
        QCOMPARE(c->progress().rejected, qint64(0));
    }

private Q_SLOTS:
    void initTestCase() { torch::manual_seed(7); }

    void namesRoundTrip()
    {
        for (const auto kind : {Compression::None, Compression::Fp16, Compression::Int8})
            QCOMPARE(compressionFromName(compressionName(kind)), std::optional<Compression>(kind));
        QVERIFY(!compressionFromName(QStringLiteral("int4")));
        QVERIFY(!compressionFromName(QString()));
    }

    void fp16RoundTripsWithinHalfPrecision()
    {
        const qint64 n = 1000;
        const torch::Tensor base = randomWeights(n);
        const torch::Tensor weights = base + randomWeights(n, 0.01);
        UpdateEncoder encoder;
        const QByteArray bytes = encoder.encode(Compression::Fp16, weights, base);
        QCOMPARE(bytes.size(), qsizetype(2 * n));
        QCOMPARE(encodedBytes(Compression::Fp16, n), 2 * n);
        auto back = decodeUpdate(Compression::Fp16, bytes, base);
        QVERIFY2(back, qPrintable(back.error()));
        // Half precision keeps 11 significant bits of each delta (relative error ≤ 2^-11).
        const torch::Tensor delta = weights - base;
        const double worst = ((*back - weights).abs() / (delta.abs() + 1e-6)).max().item<double>();
        QVERIFY2(worst < 1e-3, qPrintable(QString::number(worst)));
        // What rounding dropped is what the encoder keeps.
        QVERIFY(torch::allclose(*back + encoder.residual(), weights, 1e-6, 1e-6));
    }

    void int8RoundTripsWithinHalfAStepPerBlock()
    {
        const qint64 n = 1000; // three whole blocks and a short one
        const torch::Tensor base = randomWeights(n);
        torch::Tensor delta = randomWeights(n, 0.01);
        delta.narrow(0, 600, 200).mul_(100.0); // one block far larger than the others
        UpdateEncoder encoder;
        const QByteArray bytes = encoder.encode(Compression::Int8, base + delta, base);
        QCOMPARE(bytes.size(), qsizetype(n + 4 * 4));
        QCOMPARE(encodedBytes(Compression::Int8, n), n + 16);
        auto back = decodeUpdate(Compression::Int8, bytes, base);
        QVERIFY2(back, qPrintable(back.error()));
        const torch::Tensor error = (*back - (base + delta)).abs();
        for (qint64 b = 0; b * kInt8Block < n; ++b) {
            const qint64 len = std::min(kInt8Block, n - b * kInt8Block);
            const double step = delta.narrow(0, b * kInt8Block, len).abs().max().item<double>() / 127.0;
            const double worst = error.narrow(0, b * kInt8Block, len).max().item<double>();
            // Half a step, plus float rounding of base + delta.
            QVERIFY2(worst <= step / 2 + 1e-5, qPrintable(QStringLiteral("block %1: %2 > %3").arg(b).arg(worst).arg(step / 2)));
        }
        // The small blocks keep their own precision: a scale per block, not per tensor.
        QVERIFY(error.narrow(0, 0, 256).max().item<double>() < 0.01 * 5 / 127.0);
    }

    void errorFeedbackDeliversWhatRoundingDrops()
    {
        // One large value per block sets the step at 1/127; values of 0.001 round to 0 in
        // every single result. With the residual carried over they arrive over the results.
        const qint64 n = 512;
        torch::Tensor delta = torch::full({n}, 0.001f);
        delta[0] = 1.0f;
        delta[256] = 1.0f;
        const torch::Tensor base = torch::zeros({n});
        UpdateEncoder feedback;
        torch::Tensor withFeedback = torch::zeros({n});
        torch::Tensor withoutFeedback = torch::zeros({n});
        const int results = 40;
        for (int i = 0; i < results; ++i) {
            withFeedback += decodeUpdate(Compression::Int8, feedback.encode(Compression::Int8, delta, base), base).value();
            UpdateEncoder fresh;
            withoutFeedback += decodeUpdate(Compression::Int8, fresh.encode(Compression::Int8, delta, base), base).value();
        }
        const torch::Tensor trained = delta * results;
        // Without feedback the small values never arrive; with it they are off by less than a step.
        QCOMPARE(withoutFeedback[5].item<float>(), 0.0f);
        const double lag = (withFeedback - trained).abs().max().item<double>();
        QVERIFY2(lag <= 1.0 / 127.0 + 1e-5, qPrintable(QString::number(lag)));
        // Exactly: what arrived plus what is still held is what was trained.
        QVERIFY(torch::allclose(withFeedback + feedback.residual(), trained, 1e-5, 1e-5));
        feedback.reset();
        QVERIFY(!feedback.residual().defined());
    }

    void badBytesAreRefusedWithAReason()
    {
        const qint64 n = 300;
        const torch::Tensor base = randomWeights(n);
        UpdateEncoder encoder;
        const QByteArray fp16 = encoder.encode(Compression::Fp16, base + 0.01f, base);
        const QByteArray int8 = encoder.encode(Compression::Int8, base + 0.01f, base);

        auto shortFp16 = decodeUpdate(Compression::Fp16, QByteArrayView(fp16).first(fp16.size() - 2), base);
        QVERIFY(!shortFp16);
        QVERIFY2(shortFp16.error().contains(QStringLiteral("598 bytes")), qPrintable(shortFp16.error()));
        // An int8 update read as fp16 has the wrong size for the model.
        QVERIFY(!decodeUpdate(Compression::Fp16, int8, base));
        QVERIFY(!decodeUpdate(Compression::Int8, QByteArray(), base));

        QByteArray nan = fp16;
        const quint16 halfNaN = 0x7e00;
        std::memcpy(nan.data() + 10, &halfNaN, 2);
        auto nanResult = decodeUpdate(Compression::Fp16, nan, base);
        QVERIFY(!nanResult);
        QVERIFY2(nanResult.error().contains(QStringLiteral("NaN")), qPrintable(nanResult.error()));

        for (const float scale : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
            QByteArray bad = int8;
            std::memcpy(bad.data() + 4, &scale, 4);
            auto r = decodeUpdate(Compression::Int8, bad, base);
            QVERIFY(!r);
            QVERIFY2(r.error().contains(QStringLiteral("scales")), qPrintable(r.error()));
        }
        // A finite scale so large that a value overflows is caught on the decoded delta.
        QByteArray huge = int8;
        const float big = std::numeric_limits<float>::max();
        std::memcpy(huge.data(), &big, 4);
        huge[int(2 * 4)] = char(127); // first value of the first block
        auto overflow = decodeUpdate(Compression::Int8, huge, base);
        QVERIFY(!overflow);
        QVERIFY2(overflow.error().contains(QStringLiteral("infinite")), qPrintable(overflow.error()));
        QVERIFY(!decodeUpdate(Compression::None, fp16, base));
    }

    void coordinatorDecodesAgainstEachLeasesOwnBase()
    {
        Fixture f;
        f.spec.aggregation.rule = QStringLiteral("vc-asgd");
        auto c = f.open(QStringLiteral("int8"));
        QVERIFY(c);
        const qint64 w1 = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const qint64 w2 = c->workerJoined(test::spotWorker(QStringLiteral("b"))).value();
        auto stale = c->requestSubtask(w1); // both start at version 0
        auto fresh = c->requestSubtask(w2);
        UpdateEncoder e1;
        UpdateEncoder e2;
        const SubtaskResult first = compressedResult(*fresh, Compression::Int8, e2);
        QCOMPARE(first.update.size(), qsizetype(encodedBytes(Compression::Int8, fresh->weights.numel())));
        QCOMPARE(c->submitResult(w2, first).status, SubmitStatus::Assimilated);
        const torch::Tensor between = c->globalWeights().clone();
        // The stale worker's delta is from version 0, not from the model as it is now.
        const SubmitReply r = c->submitResult(w1, compressedResult(*stale, Compression::Int8, e1));
        QCOMPARE(r.status, SubmitStatus::Assimilated);
        const double alpha = f.spec.aggregation.alpha;
        const torch::Tensor expected = alpha * between + (1 - alpha) * (stale->weights + 0.01f);
        QVERIFY(torch::allclose(c->globalWeights(), expected, 0, 1e-4));
        const JobProgress p = c->progress();
        QCOMPARE(p.resultsReceived, qint64(2));
        QCOMPARE(p.resultBytes, 2 * encodedBytes(Compression::Int8, fresh->weights.numel()));

        // The rest of the job, every result compressed.
        for (int guard = 0; guard < 10000 && !c->finished(); ++guard)
            for (const qint64 w : {w1, w2})
                if (auto a = c->requestSubtask(w))
                    c->submitResult(w, compressedResult(*a, Compression::Int8, w == w1 ? e1 : e2));
        QVERIFY(c->finished());
        QCOMPARE(c->progress().rejected, qint64(0));
    }

    void lateDeltaWhoseBaseIsGoneIsDroppedNotHeldAgainstItsWorker() { lateResultWhoseBaseIsGone(Compression::Int8); }

    // The same with whole weights: the base is needed at the fold, not at decoding, and a late
    // result whose base was collected is dropped there, as a duplicate, not a rejection.
    void lateWholeResultWhoseBaseIsGoneIsDroppedNotHeldAgainstItsWorker() { lateResultWhoseBaseIsGone(Compression::None); }

    void corruptOrMismatchedDeltasAreRejectedAndTheModelKept()
    {
        Fixture f;
        f.spec.fleet.quarantineAfter = 0; // four bad results in a row from one worker, on purpose
        auto c = f.open(QStringLiteral("fp16"));
        QVERIFY(c);
        const qint64 w = c->workerJoined(test::spotWorker(QStringLiteral("a"))).value();
        const torch::Tensor before = c->globalWeights().clone();
        UpdateEncoder encoder;
        const auto expectRejected = [&](SubtaskResult r, const QString &why) {
            const SubmitReply reply = c->submitResult(w, std::move(r));
            QCOMPARE(reply.status, SubmitStatus::Rejected);
            QVERIFY2(reply.reason.contains(why), qPrintable(reply.reason));
            QVERIFY(torch::equal(before, c->globalWeights()));
        };
        // The job takes fp16; an int8 delta is not what was negotiated.
        auto a = c->requestSubtask(w);
        expectRejected(compressedResult(*a, Compression::Int8, encoder), QStringLiteral("compressed as int8"));
        a = c->requestSubtask(w);
        SubtaskResult truncated = compressedResult(*a, Compression::Fp16, encoder);
        truncated.update.chop(2);
        expectRejected(truncated, QStringLiteral("bytes"));
        a = c->requestSubtask(w);
        SubtaskResult nan = compressedResult(*a, Compression::Fp16, encoder);
        const quint16 halfNaN = 0x7e00;
        std::memcpy(nan.update.data(), &halfNaN, 2);
        expectRejected(nan, QStringLiteral("NaN"));
        // A delta that decodes to an absurd model is caught by the checks every result gets.
        a = c->requestSubtask(w);
        expectRejected(compressedResult(*a, Compression::Fp16, encoder, 60000.0f), QStringLiteral("norm"));
        QCOMPARE(c->progress().seq, qint64(0));
        // Full float32 weights are always taken, whatever the job's compression.
        a = c->requestSubtask(w);
        UpdateEncoder unused;
        QCOMPARE(c->submitResult(w, compressedResult(*a, Compression::None, unused)).status, SubmitStatus::Assimilated);
    }

    // A result of a model with BatchNorm: its parameters are a rounded change with error
    // feedback, its running statistics and counters arrive exact, and the residual covers the
    // parameters only.
    void resultsCarryStatisticsAndCountersExactly()
    {
        const WeightLayout layout = layoutOf(600, 100, 3);
        const qint64 n = layout.totalNumel;
        const qint64 parameters = layout.segments().parameterEnd;
        QCOMPARE(parameters, qint64(600));
        const torch::Tensor base = randomWeights(n);
        torch::Tensor trained = base.clone();
        trained.narrow(0, 0, 600).add_(randomWeights(600, 0.01));
        trained.narrow(0, 600, 100).add_(randomWeights(100, 0.001));
        trained.narrow(0, 700, 3).add_(3000.0f);
        for (const auto kind : {Compression::Fp16, Compression::Int8}) {
            UpdateEncoder encoder;
            const QByteArray bytes = encoder.encode(kind, trained, base, parameters);
            QCOMPARE(qint64(bytes.size()), encodedBytes(kind, n, parameters));
            QCOMPARE(encodedBytes(kind, n, parameters), encodedBytes(kind, 600) + 4 * 103);
            QCOMPARE(encoder.residual().numel(), qint64(600));
            auto back = decodeUpdate(kind, bytes, base, parameters);
            QVERIFY2(back, qPrintable(back.error()));
            QVERIFY(torch::equal(back->narrow(0, 600, 103), trained.narrow(0, 600, 103)));
            QVERIFY(torch::allclose(back->narrow(0, 0, 600) + encoder.residual(), trained.narrow(0, 0, 600), 1e-5, 1e-5));
            // Decoded as if every value were rounded, the same bytes are the wrong size.
            const auto wrong = decodeUpdate(kind, bytes, base);
            QVERIFY(!wrong);
            QVERIFY2(wrong.error().contains(QStringLiteral("bytes")), qPrintable(wrong.error()));
            // A NaN among the exact values is refused like one among the rounded.
            QByteArray nanStatistic = bytes;
            const float nan = std::numeric_limits<float>::quiet_NaN();
            std::memcpy(nanStatistic.data() + nanStatistic.size() - 4 * 50, &nan, 4);
            const auto refused = decodeUpdate(kind, nanStatistic, base, parameters);
            QVERIFY(!refused);
            QVERIFY2(refused.error().contains(QStringLiteral("NaN")), qPrintable(refused.error()));
        }
    }

    // Global weights on their way to workers: a change from an anchor the worker holds, which
    // never adds one rounding to the next; the anchor whole for a worker that has none.
    void downlinkSendsChangesFromAnAnchorTheWorkerHolds()
    {
        const qint64 n = 1000;
        const WeightLayout layout = layoutOf(n);
        DownlinkEncoder encoder(Compression::Int8, layout);
        DownlinkDecoder worker;
        const qint64 refresh = 1000;

        // No anchor yet: the weights travel whole and become the anchor.
        torch::Tensor global = randomWeights(n);
        const torch::Tensor first = global.clone();
        auto sent = encoder.encode(0, global, worker.anchor(), true, refresh);
        QCOMPARE(sent.form.change, Compression::None);
        QVERIFY(sent.form.anchor != 0);
        QCOMPARE(sent.payload.size(), qsizetype(4 * n));
        auto got = worker.decode(sent.form, sent.payload, layout);
        QVERIFY2(got, qPrintable(got.error()));
        QVERIFY(torch::equal(*got, global));
        const qint64 anchor = worker.anchor();
        QCOMPARE(anchor, sent.form.anchor);

        // Fifty versions later, each a change from the same anchor: the error stays one
        // rounding of the distance from the anchor (half an int8 step per block), not fifty.
        for (qint64 seq = 1; seq <= 50; ++seq) {
            global = global + randomWeights(n, 0.01);
            sent = encoder.encode(seq, global, worker.anchor(), true, refresh);
            QCOMPARE(sent.form.change, Compression::Int8);
            QCOMPARE(sent.form.anchor, anchor);
            QVERIFY(!sent.form.anchorIncluded);
            QCOMPARE(sent.payload.size(), qsizetype(encodedBytes(Compression::Int8, n)));
            got = worker.decode(sent.form, sent.payload, layout);
            QVERIFY2(got, qPrintable(got.error()));
        }
        for (qint64 b = 0; b * kInt8Block < n; ++b) {
            const qint64 len = std::min(kInt8Block, n - b * kInt8Block);
            const double halfStep = (global - first).narrow(0, b * kInt8Block, len).abs().max().item<double>() / 254.0;
            const double error = (*got - global).narrow(0, b * kInt8Block, len).abs().max().item<double>();
            QVERIFY2(error <= halfStep + 1e-5, qPrintable(QStringLiteral("block %1: %2 > %3").arg(b).arg(error).arg(halfStep)));
        }
        const double halfStep = (global - first).abs().max().item<double>() / 254.0;
        QCOMPARE(worker.anchor(), anchor);

        // A worker without the anchor gets it whole followed by the change, and keeps it.
        DownlinkDecoder newcomer;
        sent = encoder.encode(50, global, newcomer.anchor(), true, refresh);
        QCOMPARE(sent.form.change, Compression::Int8);
        QVERIFY(sent.form.anchorIncluded);
        QCOMPARE(sent.payload.size(), qsizetype(4 * n + encodedBytes(Compression::Int8, n)));
        got = newcomer.decode(sent.form, sent.payload, layout);
        QVERIFY2(got, qPrintable(got.error()));
        QVERIFY((*got - global).abs().max().item<double>() <= halfStep + 1e-5);
        QCOMPARE(newcomer.anchor(), anchor);

        // An older worker, or a job that does not compress: the weights whole, kept by nobody.
        sent = encoder.encode(50, global, 0, false, refresh);
        QCOMPARE(sent.form.change, Compression::None);
        QCOMPARE(sent.form.anchor, qint64(0));
        QCOMPARE(sent.payload.size(), qsizetype(4 * n));
        DownlinkEncoder plain(Compression::None, layout);
        sent = plain.encode(50, global, anchor, true, refresh);
        QCOMPARE(sent.form.change, Compression::None);
        QCOMPARE(sent.form.anchor, qint64(0));
        QVERIFY(torch::equal(weightsFromBytes(sent.payload, layout).value(), global));
    }

    void downlinkAnchorsAreRefreshedAndOnlyTwoKept()
    {
        const qint64 n = 300;
        const WeightLayout layout = layoutOf(n);
        DownlinkEncoder encoder(Compression::Fp16, layout);
        DownlinkDecoder early;
        DownlinkDecoder late;
        const qint64 refresh = 10;
        const auto expectClose = [&](DownlinkDecoder &worker, const DownlinkEncoder::Encoded &sent,
                                     const torch::Tensor &expected) {
            const auto got = worker.decode(sent.form, sent.payload, layout);
            QVERIFY2(got, qPrintable(got.error()));
            QVERIFY2(torch::allclose(*got, expected, 0, 2e-3), "decoded weights differ from the lease's");
        };
        torch::Tensor w = randomWeights(n);
        auto sent = encoder.encode(0, w, 0, true, refresh);
        QVERIFY(torch::equal(weightsFromBytes(sent.payload, layout).value(), w));
        expectClose(early, sent, w);
        const qint64 a0 = early.anchor();
        // Ten assimilations on, a new anchor is made from the lease's weights, which travel
        // whole to a worker without one; the first worker still gets changes from its own.
        w = w + 0.1;
        sent = encoder.encode(10, w, late.anchor(), true, refresh);
        QCOMPARE(sent.form.change, Compression::None);
        QVERIFY(sent.form.anchor != a0);
        QVERIFY(torch::equal(weightsFromBytes(sent.payload, layout).value(), w));
        expectClose(late, sent, w);
        const qint64 a1 = late.anchor();
        QCOMPARE(encoder.anchorsKept(), 2);
        // At one version, a holder of each anchor gets the change from its own anchor.
        const torch::Tensor w11 = w + randomWeights(n, 0.05);
        const auto fromA0 = encoder.encode(11, w11, a0, true, refresh);
        const auto fromA1 = encoder.encode(11, w11, a1, true, refresh);
        QCOMPARE(fromA0.form.anchor, a0);
        QCOMPARE(fromA1.form.anchor, a1);
        QVERIFY(!fromA0.form.anchorIncluded && !fromA1.form.anchorIncluded);
        QVERIFY(fromA0.payload != fromA1.payload);
        expectClose(early, fromA0, w11);
        expectClose(late, fromA1, w11);
        expectClose(early, encoder.encode(11, w11, a0, true, refresh), w11); // from the cache
        // A third anchor drops the first: its holder is sent the newest whole.
        w = w11 + 0.1;
        sent = encoder.encode(25, w, late.anchor(), true, refresh);
        QCOMPARE(encoder.anchorsKept(), 2);
        QCOMPARE(sent.form.anchor, a1);
        QVERIFY(!sent.form.anchorIncluded);
        expectClose(late, sent, w);
        sent = encoder.encode(25, w, early.anchor(), true, refresh);
        QVERIFY(sent.form.anchor != a0 && sent.form.anchor != a1);
        QCOMPARE(sent.form.change, Compression::None); // the lease's weights are the newest anchor
        auto got = early.decode(sent.form, sent.payload, layout);
        QVERIFY(got && torch::equal(*got, w));
        QCOMPARE(early.anchor(), sent.form.anchor);
    }

    // BatchNorm's running statistics are not additive, and a counter's change would set the
    // int8 scale of the statistics in its block: everything but the parameters arrives exact.
    void downlinkSendsBuffersAndCountersExactly()
    {
        const WeightLayout layout = layoutOf(600, 100, 3);
        const qint64 n = layout.totalNumel;
        DownlinkEncoder encoder(Compression::Int8, layout);
        DownlinkDecoder worker;
        torch::Tensor w = randomWeights(n);
        w.narrow(0, 700, 3).fill_(1000.0f);
        auto sent = encoder.encode(0, w, 0, true, 100);
        QVERIFY(worker.decode(sent.form, sent.payload, layout));
        // Statistics move a little, the counters by thousands of batches.
        torch::Tensor next = w.clone();
        next.narrow(0, 0, 600).add_(randomWeights(600, 0.01));
        next.narrow(0, 600, 100).add_(randomWeights(100, 0.001));
        next.narrow(0, 700, 3).add_(5000.0f);
        sent = encoder.encode(1, next, worker.anchor(), true, 100);
        QCOMPARE(sent.payload.size(), qsizetype(encodedBytes(Compression::Int8, 600) + 4 * 103));
        QCOMPARE(qint64(sent.payload.size()), changeBytes(Compression::Int8, layout));
        const auto got = worker.decode(sent.form, sent.payload, layout);
        QVERIFY2(got, qPrintable(got.error()));
        QVERIFY(torch::equal(got->narrow(0, 600, 103), next.narrow(0, 600, 103)));
        QVERIFY((*got - next).narrow(0, 0, 600).abs().max().item<double>() < 0.01);
    }

    void downlinkDecoderRefusesWhatItCannotUse()
    {
        const qint64 n = 512;
        const WeightLayout layout = layoutOf(n);
        DownlinkEncoder encoder(Compression::Int8, layout);
        DownlinkDecoder worker;
        const torch::Tensor w0 = randomWeights(n);
        auto whole = encoder.encode(0, w0, 0, true, 100);
        QVERIFY(worker.decode(whole.form, whole.payload, layout));
        const qint64 anchor = worker.anchor();
        const torch::Tensor w1 = w0 + randomWeights(n, 0.01);
        const auto change = encoder.encode(1, w1, anchor, true, 100);
        QVERIFY(!change.form.anchorIncluded);

        auto expectRefused = [&](const WeightsForm &form, const QByteArray &payload, const QString &why) {
            const auto got = worker.decode(form, payload, layout);
            QVERIFY2(!got, "decoded what it should have refused");
            QVERIFY2(got.error().contains(why), qPrintable(got.error()));
            QCOMPARE(worker.anchor(), anchor); // a refusal never replaces the anchor
        };
        // A change from an anchor this worker does not hold.
        expectRefused(WeightsForm{Compression::Int8, anchor + 1, false}, change.payload, QStringLiteral("does not hold"));
        // Bytes of the wrong size, a NaN scale, a change in another form than it was made in.
        expectRefused(change.form, change.payload.left(change.payload.size() - 1), QStringLiteral("bytes"));
        QByteArray nanScale = change.payload;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(nanScale.data(), &nan, 4);
        expectRefused(change.form, nanScale, QStringLiteral("NaN"));
        expectRefused(WeightsForm{Compression::Fp16, anchor, false}, change.payload, QStringLiteral("bytes"));
        // An included anchor that is cut short, or not finite.
        WeightsForm withAnchor{Compression::Int8, 77, true};
        QByteArray anchorAndChange = weightsToBytes(w0) + change.payload;
        expectRefused(withAnchor, anchorAndChange.left(4 * n - 4), QStringLiteral("fewer than"));
        QByteArray nanAnchor = anchorAndChange;
        std::memcpy(nanAnchor.data() + 8, &nan, 4);
        expectRefused(withAnchor, nanAnchor, QStringLiteral("anchor's weights"));
        // Whole weights that are not finite, and a change that overflows its anchor.
        QByteArray nanWhole = weightsToBytes(w0);
        std::memcpy(nanWhole.data() + 40, &nan, 4);
        expectRefused(WeightsForm{Compression::None, 99, false}, nanWhole, QStringLiteral("NaN or infinite"));
        // An anchor of finite values and a change of finite values whose sum is not: 3e38 + 3e38.
        torch::Tensor huge = w0.clone();
        huge[3] = 3e38f;
        QByteArray overflow(int(encodedBytes(Compression::Int8, n)), '\0');
        const float scales[2] = {3e38f / 127.0f, 0.0f};
        std::memcpy(overflow.data(), scales, sizeof scales);
        overflow[8 + 3] = char(127);
        expectRefused(withAnchor, weightsToBytes(huge) + overflow, QStringLiteral("NaN or infinite"));
        // What the coordinator sent is still taken after all that.
        const auto got = worker.decode(change.form, change.payload, layout);
        QVERIFY2(got, qPrintable(got.error()));
        QVERIFY((*got - w1).abs().max().item<double>() < 0.01);
    }
};

QTEST_GUILESS_MAIN(TestCompression)
#include "tst_compression.moc"
