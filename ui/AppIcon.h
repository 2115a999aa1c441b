#pragma once
// The application's icon (window, task bar, tray), from the PNG sizes built into the binary.

#include <QIcon>

namespace flotilla {

QIcon appIcon();

} // namespace flotilla
