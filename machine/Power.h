#pragma once
// Whether this machine runs on its battery: what a worker on a laptop pauses for. Linux reads
// /sys/class/power_supply (a supply of type Battery that is Discharging); elsewhere, and on
// machines without a battery, nothing is known.

#include <optional>

namespace flotilla {

// true: on battery; false: a battery that is charging or full; nothing: no battery, or not known.
std::optional<bool> systemOnBattery();

} // namespace flotilla
