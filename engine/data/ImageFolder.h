#pragma once
// Image folders as torchvision's ImageFolder reads them: one sub-folder per class, its
// images (.png, .jpg, .jpeg, .bmp, in any depth below it) decoded with Qt's image readers,
// converted to grayscale or RGB, resized, and kept as bytes [N, C, H, W].
//
//   DIR/train/<class>/…  and  DIR/test/<class>/…   a training and a test split
//   DIR/train/<class>/…  alone, or DIR/<class>/…    one set; the caller holds out a test share
//
// Classes are the training folder's sub-folders in code-point order of their names, so the
// labels are the same on every machine. Decoding runs on the global thread pool.

#include "common/Result.h"
#include "engine/data/Dataset.h"

#include <QString>
#include <QStringList>

namespace flotilla {

struct ImageFolderOptions
{
    int imageSize = 0;                    // resize to size×size; 0 = as stored (all must agree)
    // gray, rgb, or auto: rgb if the first image of any class has colour in it, else gray
    QString color = QStringLiteral("auto");
    bool skipBadImages = false;           // skip (and count) unreadable or truncated files, else stop
    // The samples come in an order shuffled with this seed (files are found in class order,
    // so the first N of them would be one class).
    quint64 orderSeed = 1;
    // With a test folder: decode only the first this many of each split's shuffled files
    // (0 = all). Without one the caller holds out a test share first and limits after.
    qint64 trainLimit = 0;
    qint64 testLimit = 0;
};

struct ImageFolderData
{
    Dataset train;
    Dataset test;         // empty when the folder has no test split: hold one out
    bool hasTestSplit = false;
    qint64 skipped = 0;   // unreadable or truncated files left out (skipBadImages)
    QStringList skippedExamples; // "path: reason" for the first few of them
    QString layout;       // what was read, for the log ("DIR/train and DIR/test, 10 classes, 1×28×28")
};

Result<ImageFolderData> loadImageFolder(const QString &root, const ImageFolderOptions &options);

// Why a file's bytes are not a whole image, or empty if they look whole. Qt's readers accept a
// JPEG cut short (the missing part comes out grey) and a BMP cut short (black): the end of a
// file is checked here instead (PNG: its IEND chunk; JPEG: an end-of-image marker after the
// last scan; BMP: as many bytes as its header announces).
QString truncationProblem(const QByteArray &bytes);

// The file name extensions read as images, lower case.
QStringList imageFileExtensions();

} // namespace flotilla
