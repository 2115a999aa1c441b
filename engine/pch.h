#pragma once
// Precompiled header of the engine, reused by the application (the tests build it at -O0): LibTorch's headers
// dominate compile time, so they are parsed once.

#include <torch/torch.h>
#include <torch/script.h>

#include <QByteArray>
#include <QHash>
#include <QList>
#include <QString>
#include <QVector>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <vector>
