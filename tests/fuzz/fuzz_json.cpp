// libFuzzer target: the JSON files Flotilla reads. Each input is read both as a job file
// (JobSpec::load, from a file, as `flotilla train --job` and the job wizard do) and as a price
// table (PriceTable::parse, what PriceTable::load does with a file's bytes). Then:
//   - a refused file has an error that names it;
//   - an accepted job has no problems, and comes back the same when written as JSON text
//     (what JobSpec::save writes) and read again;
//   - an accepted price table answers for every instance it lists, at every price class,
//     with per-second rates that are non-negative and spot <= on-demand, and refuses an
//     unknown price class.
// Any broken expectation aborts, which libFuzzer reports as a crash with the input.
#include "FuzzExpect.h"
#include "job/JobSpec.h"
#include "job/PriceTable.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QTemporaryDir>

using namespace flotilla;
using flotilla::fuzz::broken;
using flotilla::fuzz::expect;

namespace {

// The job file each input is written to: one file, rewritten for every input.
const QString &jobPath()
{
    static QTemporaryDir dir(QDir::temp().filePath(QStringLiteral("flotilla-fuzz-json-XXXXXX")));
    static const QString path = [] {
        if (!dir.isValid())
            broken("cannot create a temporary folder:", dir.errorString());
        return dir.filePath(QStringLiteral("job.json"));
    }();
    return path;
}

void checkJob(const QByteArray &bytes)
{
    QFile file(jobPath());
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(bytes) != bytes.size())
        broken("cannot write", jobPath());
    file.close();
    auto job = JobSpec::load(jobPath());
    if (!job) {
        expect(job.error().startsWith(QStringLiteral("job file '%1'").arg(jobPath())),
               "a job file's error does not name the file:", job.error());
        return;
    }
    expect(job->problems().isEmpty(), "an accepted job has problems:", job->problems().join(u'\n'));
    const QJsonObject json = job->toJson();
    const QByteArray text = QJsonDocument(json).toJson(QJsonDocument::Indented);
    auto fromText = JobSpec::fromJson(QJsonDocument::fromJson(text).object());
    expect(fromText.ok(), "an accepted job saved as text is refused:", fromText.error());
    expect(fromText->toJson() == json, "an accepted job changed through JSON text:", QString::fromUtf8(text));
}

void checkPriceTable(const QByteArray &bytes)
{
    const QString origin = QStringLiteral("fuzz.json");
    auto table = PriceTable::parse(bytes, origin);
    if (!table) {
        expect(table.error().startsWith(QStringLiteral("price table '%1'").arg(origin)),
               "a price table's error does not name the table:", table.error());
        return;
    }
    expect(!table->instances().isEmpty(), "an accepted price table lists no instances");
    for (const InstancePrice &p : table->instances()) {
        expect(table->find(p.name) == &p, "an instance is not found by its name:", p.name);
        expect(p.spotPerHour >= 0 && p.spotPerHour <= p.onDemandPerHour, "an accepted price is negative or inverted:",
               p.name);
        for (const QString &priceClass :
             {QStringLiteral("spot"), QStringLiteral("on-demand"), QStringLiteral("volunteer")}) {
            auto rates = table->rates(p.name, priceClass);
            expect(rates.ok(), "no rates for a listed instance:", rates.error());
            expect(rates->spotPerSecond >= 0 && rates->spotPerSecond <= rates->onDemandPerSecond
                       && rates->actualPerSecond >= 0 && rates->actualPerSecond <= rates->onDemandPerSecond,
                   "rates out of order for", p.name);
        }
        auto unknownClass = table->rates(p.name, QStringLiteral("reserved"));
        expect(!unknownClass.ok() && unknownClass.error().contains(QStringLiteral("reserved")),
               "an unknown price class was accepted or not named");
    }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
    jobPath();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const QByteArray bytes(reinterpret_cast<const char *>(data), qsizetype(size));
    checkJob(bytes);
    checkPriceTable(bytes);
    return 0;
}
