#pragma once
// Reading integers from CBOR that came from outside (a peer's message, a file on disk).

#include <QCborValue>

namespace flotilla {

// The value when it is a CBOR integer, else fallback. QCborValue::toInteger() also converts
// a floating-point value, and converting one out of qint64's range (1e300, NaN, infinity) is
// undefined behaviour: a peer must not be able to cause that with a header field.
inline qint64 cborInteger(const QCborValue &value, qint64 fallback = 0)
{
    return value.isInteger() ? value.toInteger() : fallback;
}

} // namespace flotilla
