#include "bench/Attacks.h"

#include "agent/WorkerAgent.h"
#include "app/CommandLine.h"

#include <torch/torch.h>

#include <cstdio>
#include <limits>
#include <memory>

namespace flotilla {

QStringList Attack::kinds()
{
    return {QStringLiteral("scale:K"),    QStringLiteral("sign-flip"),  QStringLiteral("noise:SIGMA"),
            QStringLiteral("stale-replay"), QStringLiteral("free-rider"), QStringLiteral("nan")};
}

Result<Attack> Attack::parse(const QString &text)
{
    Attack a;
    const qsizetype colon = text.indexOf(u':');
    a.kind = colon < 0 ? text : text.left(colon);
    const bool parameterized = a.kind == QLatin1String("scale") || a.kind == QLatin1String("noise");
    if (parameterized) {
        bool ok = false;
        a.parameter = colon < 0 ? 0.0 : text.mid(colon + 1).toDouble(&ok);
        if (!ok || !std::isfinite(a.parameter) || a.parameter <= 0)
            return fail(QStringLiteral("attack '%1' needs a positive number after the colon, e.g. %2")
                            .arg(text, a.kind == QLatin1String("scale") ? QStringLiteral("scale:50")
                                                                        : QStringLiteral("noise:0.1")));
        return a;
    }
    if (colon >= 0 || !kinds().contains(a.kind))
        return fail(QStringLiteral("unknown attack '%1' (known: %2)").arg(text, kinds().join(QStringLiteral(", "))));
    return a;
}

QString Attack::describe() const
{
    return parameter > 0 ? QStringLiteral("%1:%2").arg(kind).arg(parameter) : kind;
}

ResultHook attackHook(const Attack &attack, quint64 seed)
{
    const QString kind = attack.kind;
    const double p = attack.parameter;
    auto firstBase = std::make_shared<torch::Tensor>();
    auto generator = std::make_shared<torch::Generator>(at::detail::createCPUGenerator(seed));
    return [kind, p, firstBase, generator](TrainOutcome &out, const torch::Tensor &base) {
        torch::NoGradGuard noGrad;
        if (!firstBase->defined())
            *firstBase = base.clone();
        if (kind == QLatin1String("scale")) {
            out.weights = base * float(p);
        } else if (kind == QLatin1String("sign-flip")) {
            out.weights = base * 2.0f - out.weights;
        } else if (kind == QLatin1String("noise")) {
            out.weights = out.weights + torch::randn(out.weights.sizes(), *generator) * float(p);
        } else if (kind == QLatin1String("stale-replay")) {
            out.weights = firstBase->clone();
        } else if (kind == QLatin1String("free-rider")) {
            out.weights = base.clone();
            out.sampleSteps = out.plannedSampleSteps;
            out.partial = false;
        } else if (kind == QLatin1String("nan")) {
            out.weights = out.weights.clone();
            out.weights[out.weights.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
        }
        out.weights = out.weights.contiguous();
    };
}

int runAttackWorker(const QStringList &arguments)
{
    // arguments: "attack-worker", "--attack", KIND, then worker options.
    QStringList rest = arguments.mid(1);
    const qsizetype at = rest.indexOf(QStringLiteral("--attack"));
    if (at < 0 || at + 1 >= rest.size()) {
        std::fprintf(stderr, "flotilla bench attack-worker: --attack KIND is required (%s)\n",
                     Attack::kinds().join(QStringLiteral(", ")).toUtf8().constData());
        return ExitUsage;
    }
    auto attack = Attack::parse(rest.at(at + 1));
    if (!attack) {
        std::fprintf(stderr, "flotilla bench attack-worker: %s\n", attack.error().toUtf8().constData());
        return ExitUsage;
    }
    rest.remove(at, 2);
    rest.prepend(QStringLiteral("worker"));
    std::printf("attacker: %s\n", attack->describe().toUtf8().constData());
    std::fflush(stdout);
    return runWorker(rest, attackHook(*attack, 0xA77AC4));
}

} // namespace flotilla
