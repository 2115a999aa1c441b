#include "engine/data/CsvReader.h"

#include <QFile>
#include <QFileInfo>
#include <QMap>

#include <torch/torch.h>

#include <cmath>

namespace flotilla {

namespace {

// Splits one line into cells. A cell in double quotes may hold the delimiter, and "" stands
// for a quote inside it (RFC 4180); quotes are removed and cells trimmed.
QList<QByteArray> splitRow(const QByteArray &line, char delimiter)
{
    QList<QByteArray> cells;
    QByteArray cell;
    bool quoted = false;
    for (qsizetype i = 0; i < line.size(); ++i) {
        const char ch = line[i];
        if (quoted) {
            if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                cell += '"';
                ++i;
            } else if (ch == '"') {
                quoted = false;
            } else {
                cell += ch;
            }
        } else if (ch == '"' && cell.trimmed().isEmpty()) {
            cell.clear();
            quoted = true;
        } else if (ch == delimiter) {
            cells << cell.trimmed();
            cell.clear();
        } else {
            cell += ch;
        }
    }
    cells << cell.trimmed();
    return cells;
}

bool isNumber(const QByteArray &cell)
{
    bool ok = false;
    cell.toDouble(&ok);
    return ok;
}

} // namespace

Result<Dataset> readCsvDataset(const QString &path, const CsvOptions &options)
{
    if (!QFileInfo::exists(path))
        return fail(QStringLiteral("'%1' does not exist").arg(path));
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot open '%1': %2").arg(path, file.errorString()));
    const char delimiter = options.delimiter.toLatin1();

    QList<QByteArray> header;
    std::vector<float> values;
    QList<QByteArray> rawLabels;
    int columns = -1;
    int labelIndex = -1;
    QList<int> labelColumns; // all of them, in the order named; labelIndex is the first
    const bool numericTargets = options.task == Task::Regression || options.task == Task::MultiLabel;
    std::vector<float> targets; // regression, multi-label: rows × labelColumns
    int lineNumber = 0;
    std::int64_t rows = 0;

    while (!file.atEnd()) {
        QByteArray line = file.readLine();
        ++lineNumber;
        if (line.endsWith('\n'))
            line.chop(1);
        if (line.endsWith('\r'))
            line.chop(1);
        if (lineNumber == 1 && line.startsWith("\xEF\xBB\xBF")) // UTF-8 byte-order mark
            line.remove(0, 3);
        if (line.trimmed().isEmpty())
            continue;
        const QList<QByteArray> cells = splitRow(line, delimiter);

        if (columns < 0) {
            columns = static_cast<int>(cells.size());
            if (columns < 2)
                return fail(QStringLiteral("'%1' line %2: found %3 column; a data set needs at least "
                                           "one feature column and a label column (is the delimiter '%4'?)")
                                .arg(path).arg(lineNumber).arg(columns).arg(options.delimiter));
            const QStringList named = options.labelColumn.isEmpty()
                                          ? QStringList()
                                          : options.labelColumn.split(u',', Qt::SkipEmptyParts);
            if (named.isEmpty())
                labelColumns = {columns - 1};
            for (const QString &rawName : named) {
                const QString name = rawName.trimmed();
                bool isIndex = false;
                const int number = name.toInt(&isIndex);
                int index = -1;
                if (isIndex) {
                    if (number < 1 || number > columns)
                        return fail(QStringLiteral("'%1': label column %2 does not exist (the file has %3 columns)")
                                        .arg(path).arg(number).arg(columns));
                    index = number - 1;
                } else {
                    index = static_cast<int>(cells.indexOf(name.toUtf8()));
                    if (index < 0)
                        return fail(QStringLiteral("'%1': no column named '%2' in the first row").arg(path, name));
                }
                if (labelColumns.contains(index))
                    return fail(QStringLiteral("'%1': the label column '%2' is named twice").arg(path, name));
                labelColumns << index;
            }
            if (labelColumns.size() >= columns)
                return fail(QStringLiteral("'%1': all %2 columns are labels; a data set needs at least one feature column")
                                .arg(path).arg(columns));
            if (labelColumns.size() > 1 && options.task == Task::Classification)
                return fail(QStringLiteral("'%1': %2 label columns are named, but a classification has one; several "
                                           "are for regression or multi-label tasks")
                                .arg(path).arg(labelColumns.size()));
            labelIndex = labelColumns.first();
            // The first row is a header if the label column was named, or if a feature cell
            // in it is not a number (labels may be text in any row).
            bool headerRow = labelIndex >= 0 && !options.labelColumn.isEmpty()
                             && !options.labelColumn.at(0).isDigit();
            for (int c = 0; c < columns && !headerRow; ++c)
                headerRow = (!labelColumns.contains(c) || numericTargets) && !isNumber(cells[c]);
            if (headerRow) {
                header = cells;
                continue;
            }
        }

        if (cells.size() != columns)
            return fail(QStringLiteral("'%1' line %2 has %3 columns, expected %4")
                            .arg(path).arg(lineNumber).arg(cells.size()).arg(columns));
        for (const int c : labelColumns) {
            if (!numericTargets)
                break;
            bool ok = false;
            const double v = cells[c].toDouble(&ok);
            const bool fits = ok && std::isfinite(v) && std::abs(v) < 3e38
                              && (options.task != Task::MultiLabel || v == 0.0 || v == 1.0);
            if (!fits) {
                const QString columnName = header.isEmpty() ? QString()
                                                            : QStringLiteral(" ('%1')").arg(QString::fromUtf8(header[c]));
                return fail(QStringLiteral("'%1' line %2, column %3%4: the target '%5' is not %6")
                                .arg(path).arg(lineNumber).arg(c + 1)
                                .arg(columnName, QString::fromUtf8(cells[c]),
                                     options.task == Task::MultiLabel ? QStringLiteral("0 or 1 (a multi-label target)")
                                                                      : QStringLiteral("a number")));
            }
            targets.push_back(static_cast<float>(v));
        }
        for (int c = 0; c < columns; ++c) {
            if (numericTargets && labelColumns.contains(c))
                continue;
            if (c == labelIndex) {
                if (cells[c].isEmpty())
                    return fail(QStringLiteral("'%1' line %2, column %3: the label is empty")
                                    .arg(path).arg(lineNumber).arg(c + 1));
                rawLabels << cells[c];
                continue;
            }
            bool ok = false;
            const double v = cells[c].toDouble(&ok);
            if (!ok || !std::isfinite(v)) {
                const QString columnName = header.isEmpty()
                    ? QString()
                    : QStringLiteral(" ('%1')").arg(QString::fromUtf8(header[c]));
                return fail(QStringLiteral("'%1' line %2, column %3%4: '%5' is not a number")
                                .arg(path).arg(lineNumber).arg(c + 1).arg(columnName,
                                                                       QString::fromUtf8(cells[c])));
            }
            values.push_back(static_cast<float>(v));
        }
        ++rows;
    }
    if (rows == 0)
        return fail(QStringLiteral("'%1' has no data rows").arg(path));

    Dataset data;
    data.name = QFileInfo(path).fileName();
    const std::int64_t features = columns - (numericTargets ? labelColumns.size() : 1);
    data.features = torch::from_blob(values.data(), {rows, features}, torch::kFloat32).clone();
    if (numericTargets) {
        const auto perRow = static_cast<std::int64_t>(labelColumns.size());
        data.labels = torch::from_blob(targets.data(), {rows, perRow}, torch::kFloat32).clone();
        if (perRow == 1 && options.task == Task::Regression)
            data.labels = data.labels.reshape({rows});
        data.numClasses = int(perRow);
        for (const int c : labelColumns)
            data.classNames << (header.isEmpty() ? QStringLiteral("column %1").arg(c + 1) : QString::fromUtf8(header[c]));
        return data;
    }

    // Integer labels are class indices; anything else is a class name.
    bool allIntegers = true;
    for (const auto &label : rawLabels) {
        bool ok = false;
        const qlonglong v = label.toLongLong(&ok);
        allIntegers = allIntegers && ok && v >= 0 && v < 100000;
    }
    std::vector<std::int64_t> labels;
    labels.reserve(static_cast<std::size_t>(rows));
    if (allIntegers) {
        std::int64_t maxLabel = 0;
        for (const auto &label : rawLabels) {
            labels.push_back(label.toLongLong());
            maxLabel = std::max(maxLabel, labels.back());
        }
        data.numClasses = static_cast<int>(maxLabel) + 1;
    } else {
        QMap<QByteArray, int> classes;
        for (const auto &label : rawLabels)
            classes.insert(label, 0);
        int next = 0;
        for (auto it = classes.begin(); it != classes.end(); ++it) {
            it.value() = next++;
            data.classNames << QString::fromUtf8(it.key());
        }
        for (const auto &label : rawLabels)
            labels.push_back(classes.value(label));
        data.numClasses = next;
    }
    data.labels = torch::tensor(labels, torch::kInt64);
    if (data.numClasses < 2)
        return fail(QStringLiteral("'%1': the label column has only one class; a classifier needs at least two")
                        .arg(path));
    return data;
}

} // namespace flotilla
