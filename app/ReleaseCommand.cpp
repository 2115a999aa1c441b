// `flotilla release`: lifts a worker's quarantine in a job, running or not, or in a fleet. The
// request is written to the job's store (or the fleet's trust database); a running
// coordinator or fleet service picks it up within two seconds, a stopped one when it resumes.
#include "app/CommandLine.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"

#include "engine/coordination/Store.h"
#include "net/TrustStore.h"

#include <QCommandLineParser>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>

#include <cstdio>

namespace flotilla {

int runReleaseCommand(const QStringList &arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Release a quarantined worker: a worker whose results were rejected repeatedly gets no subtasks until an\n"
        "operator releases it. Run it beside `flotilla serve` with the same --run-dir (a job), or the same\n"
        "--identity-dir (a fleet service, which keeps a quarantined worker out of every job); the coordinator\n"
        "picks the request up within two seconds (or when it next starts)."));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("worker"), QStringLiteral("The worker's name, as the workers view shows it."));
    parser.addOption({QStringLiteral("run-dir"), QStringLiteral("The coordinator's run directory."), QStringLiteral("dir")});
    parser.addOption({QStringLiteral("identity-dir"), QStringLiteral("A fleet service's folder: release it in the fleet."),
                      QStringLiteral("dir")});
    if (const auto stop = parseOrExit(parser, arguments, QStringLiteral("release")))
        return *stop;
    if (parser.positionalArguments().size() != 1
        || parser.isSet(QStringLiteral("run-dir")) == parser.isSet(QStringLiteral("identity-dir"))) {
        std::fprintf(stderr, "flotilla release: name one worker and the coordinator's --run-dir or the fleet's "
                             "--identity-dir\n");
        return ExitUsage;
    }
    const QString name = parser.positionalArguments().first();
    if (parser.isSet(QStringLiteral("identity-dir"))) {
        net::TrustStore trust(parser.value(QStringLiteral("identity-dir")));
        auto certificates = trust.certificates();
        auto quarantined = trust.quarantined();
        if (!certificates || !quarantined) {
            std::fprintf(stderr, "flotilla release: %s\n",
                         (certificates ? quarantined.error() : certificates.error()).toUtf8().constData());
            return ExitFailure;
        }
        QStringList held;
        for (const auto &c : *certificates)
            if (quarantined->count(c.workerId)) {
                if (c.workerName == name) {
                    if (auto r = trust.release(c.workerId); !r) {
                        std::fprintf(stderr, "flotilla release: %s\n", r.error().toUtf8().constData());
                        return ExitFailure;
                    }
                    std::printf("Released '%s' in the fleet; a running fleet service lets it train within 2 s.\n",
                                name.toUtf8().constData());
                    return ExitOk;
                }
                held << c.workerName;
            }
        held.removeDuplicates();
        std::fprintf(stderr, "flotilla release: the fleet holds no worker called '%s' in quarantine; quarantined now: %s\n",
                     name.toUtf8().constData(), held.isEmpty() ? "none" : held.join(QStringLiteral(", ")).toUtf8().constData());
        return ExitFailure;
    }
    const QString db = QDir(parser.value(QStringLiteral("run-dir"))).filePath(QStringLiteral("flotilla.db"));
    if (!QFileInfo::exists(db)) {
        std::fprintf(stderr, "flotilla release: there is no job in '%s' (no flotilla.db)\n",
                     parser.value(QStringLiteral("run-dir")).toUtf8().constData());
        return ExitFailure;
    }
    auto store = Store::open(db);
    if (!store) {
        std::fprintf(stderr, "flotilla release: %s\n", store.error().toUtf8().constData());
        return ExitFailure;
    }
    auto job = (*store)->latestJob();
    if (!job || !job->has_value()) {
        std::fprintf(stderr, "flotilla release: the store in '%s' holds no job\n", db.toUtf8().constData());
        return ExitFailure;
    }
    const qint64 jobId = (**job).id;
    auto workers = (*store)->workers(jobId);
    auto trust = (*store)->workerTrust(jobId);
    if (!workers || !trust) {
        std::fprintf(stderr, "flotilla release: cannot read the workers of the job\n");
        return ExitFailure;
    }
    QStringList quarantined;
    bool known = false;
    for (const auto &w : *workers) {
        known = known || w.name == name;
        for (const auto &t : *trust)
            if (t.workerId == w.id && t.quarantined)
                quarantined << w.name;
    }
    if (!quarantined.contains(name)) {
        std::fprintf(stderr, "flotilla release: %s '%s'; quarantined now: %s\n",
                     known ? "no quarantined worker is called" : "the job has no worker called",
                     name.toUtf8().constData(),
                     quarantined.isEmpty() ? "none" : quarantined.join(QStringLiteral(", ")).toUtf8().constData());
        return ExitFailure;
    }
    if (auto r = (*store)->addOperatorRequest(jobId, QStringLiteral("release"), name, QDateTime::currentMSecsSinceEpoch()); !r) {
        std::fprintf(stderr, "flotilla release: %s\n", r.error().toUtf8().constData());
        return ExitFailure;
    }
    std::printf("Asked the coordinator to release '%s'; a running coordinator does within 2 s.\n", name.toUtf8().constData());
    return ExitOk;
}

} // namespace flotilla
