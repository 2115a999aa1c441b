#pragma once
// Reader for tabular data: numeric feature columns and one label column, comma (or other
// delimiter) separated, with an optional header row.

#include "common/Result.h"
#include "engine/Dataset.h"

#include <QChar>
#include <QString>

namespace flotilla {

struct CsvOptions
{
    // The label column: a header name, or a 1-based column number; empty means the last.
    QString labelColumn;
    QChar delimiter = QLatin1Char(',');
};

// Labels that are all integers are used as class indices; any other labels are sorted and
// numbered, and their names kept in Dataset::classNames.
Result<Dataset> readCsvDataset(const QString &path, const CsvOptions &options = {});

} // namespace flotilla
