#pragma once
// Message dispatch generated from the message table (FLOTILLA_MESSAGES in net/Protocol.h), as
// Mumble generates its handlers from its message list: for each type the header is decoded into
// that type's struct (net/Messages.h) and handed to the handler's overload for that struct. A
// place that takes messages (FleetServer, WorkerAgent, OperatorService, RemoteSession) writes
// only the overloads it takes; the switch, the decoding and what a malformed header or a type
// it does not take leads to are written here once, so no handler can use a header that did
// not decode.
//
//   net::dispatch(message,
//                 net::Handlers{[&](const net::RequestMsg &r) { ... },
//                               [&](const net::ByeMsg &b) { ... }},
//                 [&](const net::Message &m) { /* a type it does not take */ },
//                 [&](const QString &why) { /* a header that does not decode */ });

#include "net/Frame.h"
#include "net/Messages.h"
#include "net/Protocol.h"

#include <type_traits>

namespace flotilla::net {

// A Chunk continues another message's payload: the frame layer joins them, so it never
// arrives as a message of its own. Its struct exists for the table's sake and never decodes.
struct ChunkMsg
{
    static Result<ChunkMsg> decode(const QCborMap &)
    {
        return fail(QStringLiteral("a Chunk continues another message and never stands alone"));
    }
};

// An overload set of lambdas, one per message struct a place takes.
template<typename... Fs>
struct Handlers : Fs...
{
    using Fs::operator()...;
};
template<typename... Fs>
Handlers(Fs...) -> Handlers<Fs...>;

namespace detail {

template<typename Msg, typename Handler, typename Unhandled, typename Malformed>
void deliver(const Message &message, Handler &handler, Unhandled &unhandled, Malformed &malformed)
{
    if constexpr (std::is_invocable_v<Handler &, const Msg &>) {
        auto decoded = Msg::decode(message.header);
        if (!decoded) {
            malformed(decoded.error()); // names the message and the field
            return;
        }
        handler(*decoded);
    } else {
        unhandled(message);
    }
}

} // namespace detail

// Decodes the message's header into its type's struct and calls handler with it when handler
// takes that struct; unhandled(message) when it does not; malformed(reason) when the header
// does not decode (the reason names the message, the field and what is wrong with it).
template<typename Handler, typename Unhandled, typename Malformed>
void dispatch(const Message &message, Handler &&handler, Unhandled &&unhandled, Malformed &&malformed)
{
    switch (message.type) {
#define FLOTILLA_DISPATCH(name, code, dir)                                                                             \
    case MessageType::name:                                                                                           \
        detail::deliver<name##Msg>(message, handler, unhandled, malformed);                                           \
        return;
        FLOTILLA_MESSAGES(FLOTILLA_DISPATCH)
#undef FLOTILLA_DISPATCH
    }
    unhandled(message);
}

} // namespace flotilla::net
