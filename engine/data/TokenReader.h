#pragma once
// Reader for token files, as nanoGPT's prepare.py writes them: a flat little-endian array of
// token ids (uint16, or uint32 for vocabularies past 65,536), no header. The file is cut
// into contexts of `context` tokens, one after the other; each sample is a context and its
// targets, the same tokens shifted on by one.

#include "common/Result.h"
#include "engine/data/Dataset.h"

#include <QString>

namespace flotilla {

struct TokenFile
{
    Dataset train;
    Dataset test;
    bool hasTestFile = false; // a folder's val.bin; otherwise the file's last contexts are held out
};

// `path`: a token file (its last `testFraction` of contexts held out, the tail, so that no
// test context overlaps a training one), or a folder holding train.bin and, optionally,
// val.bin. Features and labels are int64 [contexts, context]; numClasses is the vocabulary,
// the largest id in either file plus one. Errors name the file: a size that is not a whole
// number of ids, a file too short for one context, no train.bin.
Result<TokenFile> readTokenFile(const QString &path, const QString &type, int context, double testFraction);

} // namespace flotilla
