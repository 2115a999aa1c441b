#include "job/SessionTypes.h"

namespace flotilla {

QString describe(JobState state)
{
    switch (state) {
    case JobState::NoJob: return QStringLiteral("No job");
    case JobState::Loading: return QStringLiteral("Loading");
    case JobState::Running: return QStringLiteral("Running");
    case JobState::Paused: return QStringLiteral("Paused");
    case JobState::Finished: return QStringLiteral("Finished");
    case JobState::Failed: return QStringLiteral("Failed");
    case JobState::Stopped: return QStringLiteral("Stopped");
    }
    return {};
}

} // namespace flotilla
