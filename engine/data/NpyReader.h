#pragma once
// Reader for NumPy's .npy arrays and .npz archives of them, without Python. A .npy file is a
// magic string, a header written as a Python dict literal (dtype, memory order, shape) and
// the raw little-endian array; a .npz is a zip of .npy files, stored or deflated.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html describes both.
// Large .npy files are memory-mapped instead of read. The functions share no state: any
// thread may call them.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "job/Tasks.h"

#include <QString>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/types.h>
#endif

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace flotilla {

struct NpyArray
{
    QString path;   // the file, or "archive.npz:name.npy" for an entry of an archive
    QString dtype;  // NumPy's descr, e.g. "<f4"
    std::vector<std::int64_t> shape;
    // Contiguous, of the same shape. Holds the dtype itself, except uint16 and uint32, which
    // LibTorch lacks: they are widened to int32 and int64.
    torch::Tensor tensor;
    bool mapped = false; // the tensor reads the file's memory mapping, not a copy
};

// Parses the bytes of one .npy file; `origin` names the source in error messages.
Result<NpyArray> parseNpy(const QByteArray &bytes, const QString &origin);
Result<NpyArray> readNpy(const QString &path);

// The .npy entries of a .npz archive, keyed by their names without ".npy" ("x.npy" -> "x").
Result<std::map<QString, NpyArray>> readNpz(const QString &path);

// `--dataset npy`: a folder holding x.npy and y.npy, or a .npz archive (or a folder holding
// exactly one) with arrays x and y. x becomes the features: uint8 N×H×W or N×C×H×W stays
// bytes as images (N×1×H×W for the former), anything else becomes float32 (N×F for tables).
// y holds, by task: one integer class index per row (a float array of whole numbers will
// do); regression: one number per row (N,) or T of them (N, T); multi-label: a 0/1 per label
// (N, L). Numeric targets become float32.
Result<Dataset> readNpyDataset(const QString &dirOrFile, Task task = Task::Classification);

// The same with a test split of its own where the data set has one: x_test.npy and
// y_test.npy beside x.npy and y.npy, or arrays x_test and y_test in the .npz. Its samples and
// labels must have the training set's shapes and types.
struct NpySplits
{
    Dataset train;
    std::optional<Dataset> test;
};
Result<NpySplits> readNpySplits(const QString &dirOrFile, Task task = Task::Classification);

} // namespace flotilla
