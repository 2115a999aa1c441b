#include "job/EventKind.h"

namespace flotilla {

const QList<EventKindInfo> &eventKinds()
{
    static const QList<EventKindInfo> kinds = {
#define FLOTILLA_EVENT_INFO(id, name, level, by, meaning)                                                              \
    { EventKind::id, QStringLiteral(name), EventLevel::level, EventSource::by, QStringLiteral(meaning) },
        FLOTILLA_EVENT_KINDS(FLOTILLA_EVENT_INFO)
#undef FLOTILLA_EVENT_INFO
    };
    return kinds;
}

const EventKindInfo &eventInfo(EventKind kind)
{
    return eventKinds()[int(kind)];
}

std::optional<EventKind> eventKindNamed(QStringView name)
{
    for (const EventKindInfo &k : eventKinds()) {
        if (k.name == name)
            return k.kind;
    }
    return std::nullopt;
}

QList<EventKind> jobEventKinds()
{
    QList<EventKind> kinds;
    for (const EventKindInfo &k : eventKinds()) {
        if (k.recordedBy != EventSource::Sim)
            kinds.append(k.kind);
    }
    return kinds;
}

QString levelName(EventLevel level)
{
    switch (level) {
    case EventLevel::Routine:
        return QStringLiteral("routine");
    case EventLevel::Notice:
        return QStringLiteral("notice");
    case EventLevel::Trouble:
        return QStringLiteral("trouble");
    }
    return {};
}

QString sourceName(EventSource source)
{
    switch (source) {
    case EventSource::Job:
        return QStringLiteral("coordinator");
    case EventSource::Sim:
        return QStringLiteral("simulator");
    case EventSource::Both:
        return QStringLiteral("both");
    }
    return {};
}

} // namespace flotilla
