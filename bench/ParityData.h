#pragma once
// Data sets that `flotilla bench parity` (and its test) generate at run time, so that the
// comparison with a plain loop runs off the default path on any machine, with nothing to
// download:
//   shapes  an image folder as torchvision's ImageFolder reads it: coloured circles,
//           squares, triangles and crosses on noisy backgrounds, RGB PNGs;
//   table   a CSV of numeric features on very different scales, a label column, classes
//           that no straight line separates, and a few percent of labels flipped.
// Both are deterministic in their seed. No LibTorch here: Qt's image writers only.

#include "common/Result.h"

#include <QString>

namespace flotilla {

struct ShapesFolderConfig
{
    int trainPerClass = 600;
    int testPerClass = 150;
    int size = 32;
    quint64 seed = 7;
};

// Writes DIR/train/<class>/NNNN.png and DIR/test/<class>/NNNN.png for the four classes
// circle, cross, square, triangle.
Result<void> writeShapesFolder(const QString &dir, const ShapesFolderConfig &config);

struct TableConfig
{
    int rows = 6000;
    int features = 12;  // the first few carry the classes, the rest are noise
    int classes = 3;
    double labelNoise = 0.03; // share of labels replaced by a random class
    quint64 seed = 11;
};

// A header row (f1..fN,label) and `rows` rows.
Result<void> writeTableCsv(const QString &file, const TableConfig &config);

} // namespace flotilla
