#include "ui/AppIcon.h"

namespace flotilla {

QIcon appIcon()
{
    QIcon icon;
    for (const int size : {16, 32, 48, 64, 128, 256})
        icon.addFile(QStringLiteral(":/flotilla/icons/flotilla-%1.png").arg(size), QSize(size, size));
    return icon;
}

} // namespace flotilla
