#pragma once
// What a fuzz target does when an expectation breaks: say which, and abort, which libFuzzer
// reports as a crash and saves the input for.

#include <QString>

#include <cstdio>
#include <cstdlib>

namespace flotilla::fuzz {

[[noreturn]] inline void broken(const char *what, const QString &detail = {})
{
    std::fprintf(stderr, "broken expectation: %s %s\n", what, qUtf8Printable(detail));
    std::abort();
}

inline void expect(bool condition, const char *what, const QString &detail = {})
{
    if (!condition)
        broken(what, detail);
}

} // namespace flotilla::fuzz
