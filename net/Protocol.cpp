#include "net/Protocol.h"

namespace flotilla::net {

const char *messageName(std::uint8_t code)
{
    switch (code) {
#define FLOTILLA_NAME(name, value, dir) \
    case value:                         \
        return #name;
        FLOTILLA_MESSAGES(FLOTILLA_NAME)
#undef FLOTILLA_NAME
    default:
        return nullptr;
    }
}

QString describe(MessageType type)
{
    const char *name = messageName(static_cast<std::uint8_t>(type));
    return name ? QString::fromLatin1(name) : QStringLiteral("message %1").arg(int(type));
}

} // namespace flotilla::net
