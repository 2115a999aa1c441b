#include "machine/Power.h"

#include <QDir>
#include <QFile>

namespace flotilla {

std::optional<bool> systemOnBattery()
{
    const QDir supplies(QStringLiteral("/sys/class/power_supply"));
    if (!supplies.exists())
        return std::nullopt;
    bool sawBattery = false;
    for (const QString &name : supplies.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        QFile type(supplies.filePath(name + QStringLiteral("/type")));
        if (!type.open(QIODevice::ReadOnly) || type.readAll().trimmed() != "Battery")
            continue;
        sawBattery = true;
        QFile status(supplies.filePath(name + QStringLiteral("/status")));
        if (status.open(QIODevice::ReadOnly) && status.readAll().trimmed() == "Discharging")
            return true;
    }
    return sawBattery ? std::optional<bool>(false) : std::nullopt;
}

} // namespace flotilla
