#pragma once
// Reader for tabular data: numeric feature columns and one label column, comma (or other
// delimiter) separated, with an optional header row.

#include "common/Result.h"
#include "engine/data/Dataset.h"
#include "job/Tasks.h"

#include <QChar>
#include <QString>

namespace flotilla {

struct CsvOptions
{
    // The label column: a header name, or a 1-based column number; empty means the last.
    // Regression and multi-label: one or several, separated by commas.
    QString labelColumn;
    QChar delimiter = QLatin1Char(',');
    Task task = Task::Classification;
};

// Classification: labels that are all integers are used as class indices; any other labels
// are sorted and numbered, and their names kept in Dataset::classNames. Regression: the
// label columns are numbers, float32 [N] (one column) or [N, T]; multi-label: each is 0 or
// 1, float32 [N, L], and the columns' names are kept in Dataset::classNames.
Result<Dataset> readCsvDataset(const QString &path, const CsvOptions &options = {});

} // namespace flotilla
