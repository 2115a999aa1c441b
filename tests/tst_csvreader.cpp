// The CSV reader: headers, numeric and text labels, the label column by name and number,
// delimiters and line endings, and the errors that must name the file, line and column.
#include "TestSupport.h"
#include "engine/data/CsvReader.h"

#include <QTemporaryDir>
#include <QtTest>

#ifndef Q_MOC_RUN // moc need not parse LibTorch: seconds a file
#include <torch/torch.h>
#endif

using namespace flotilla;

namespace {

std::vector<float> floats(const torch::Tensor &t)
{
    const torch::Tensor c = t.contiguous();
    return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

std::vector<std::int64_t> longs(const torch::Tensor &t)
{
    const torch::Tensor c = t.contiguous();
    return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

} // namespace

class TestCsvReader : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    QString write(const char *name, const char *content)
    {
        const QString p = m_dir.filePath(QString::fromLatin1(name));
        test::writeFile(p, QByteArray(content));
        return p;
    }

    static Result<Dataset> read(const QString &path, const QString &labelColumn = {})
    {
        CsvOptions options;
        options.labelColumn = labelColumn;
        return readCsvDataset(path, options);
    }

    // The error of reading path, which must fail and contain every one of parts.
    static void expectError(const Result<Dataset> &r, const QStringList &parts)
    {
        QVERIFY2(!r.ok(), "the read should have failed");
        for (const QString &part : parts)
            QVERIFY2(r.error().contains(part),
                     qPrintable(QStringLiteral("'%1' missing from: %2").arg(part, r.error())));
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void headerNumericFeaturesIntegerLabels()
    {
        const QString p = write("numbers.csv",
                                "sepal,petal,label\n"
                                "1.5,2,0\n"
                                "3,4.25,1\n"
                                "-1,1e-3,2\n");
        auto d = read(p);
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(d->name, QStringLiteral("numbers.csv"));
        QCOMPARE(d->features.sizes().vec(), (std::vector<std::int64_t>{3, 2}));
        QVERIFY(d->features.scalar_type() == torch::kFloat32);
        QCOMPARE(floats(d->features), (std::vector<float>{1.5f, 2.f, 3.f, 4.25f, -1.f, 1e-3f}));
        QVERIFY(d->labels.scalar_type() == torch::kInt64);
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{0, 1, 2}));
        QCOMPARE(d->numClasses, 3);
        QVERIFY(d->classNames.isEmpty());
    }

    void integerLabelsAreClassIndices()
    {
        // Labels 1 and 4: indices are kept as they are, so there are 5 classes.
        auto d = read(write("gaps.csv", "1,2,4\n3,4,1\n5,6,4\n"));
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{4, 1, 4}));
        QCOMPARE(d->numClasses, 5);
    }

    void textLabelsBecomeSortedClassIndices()
    {
        const QString p = write("species.csv",
                                "a,b,species\n"
                                "1,2,versicolor\n"
                                "3,4,setosa\n"
                                "5,6,virginica\n"
                                "7,8,setosa\n");
        auto d = read(p);
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(d->classNames,
                 (QStringList{QStringLiteral("setosa"), QStringLiteral("versicolor"), QStringLiteral("virginica")}));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{1, 0, 2, 0}));
        QCOMPARE(d->numClasses, 3);
        QCOMPARE(floats(d->features), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
    }

    void labelColumnByName()
    {
        const QString p = write("middle.csv",
                                "x,kind,y\n"
                                "1,dog,2\n"
                                "3,cat,4\n"
                                "5,dog,6\n");
        auto d = read(p, QStringLiteral("kind"));
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(d->features.sizes().vec(), (std::vector<std::int64_t>{3, 2}));
        QCOMPARE(floats(d->features), (std::vector<float>{1, 2, 3, 4, 5, 6}));
        QCOMPARE(d->classNames, (QStringList{QStringLiteral("cat"), QStringLiteral("dog")}));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{1, 0, 1}));
    }

    void labelColumnByNumber()
    {
        const QString p = write("first.csv",
                                "label,f1,f2\n"
                                "1,0.5,0.25\n"
                                "0,1.5,1.25\n");
        auto d = read(p, QStringLiteral("1"));
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(floats(d->features), (std::vector<float>{0.5f, 0.25f, 1.5f, 1.25f}));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{1, 0}));
        QCOMPARE(d->numClasses, 2);

        // Column 2 of the same file: 'f1' becomes the (text) label.
        auto second = read(p, QStringLiteral("2"));
        QVERIFY2(second.ok(), qPrintable(second.error()));
        QCOMPARE(second->classNames, (QStringList{QStringLiteral("0.5"), QStringLiteral("1.5")}));
        QCOMPARE(floats(second->features), (std::vector<float>{1, 0.25f, 0, 1.25f}));
    }

    void noHeader()
    {
        auto d = read(write("bare.csv", "1,2,0\n3,4,1\n5,6,1\n"));
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(d->size(), std::int64_t(3)); // the first row is data, not a header
        QCOMPARE(floats(d->features), (std::vector<float>{1, 2, 3, 4, 5, 6}));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{0, 1, 1}));
    }

    void delimiterQuotesCrlfAndBlankLines()
    {
        const QString p = write("semi.csv",
                                "\"w\";\"h\";\"class\"\r\n"
                                "\r\n"
                                " 1 ; \"2\" ; \"yes\" \r\n"
                                "3;4;no\r\n");
        CsvOptions options;
        options.delimiter = QLatin1Char(';');
        auto d = readCsvDataset(p, options);
        QVERIFY2(d.ok(), qPrintable(d.error()));
        QCOMPARE(floats(d->features), (std::vector<float>{1, 2, 3, 4}));
        QCOMPARE(d->classNames, (QStringList{QStringLiteral("no"), QStringLiteral("yes")}));
        QCOMPARE(longs(d->labels), (std::vector<std::int64_t>{1, 0}));
    }

    void nonNumericCellNamesFileLineColumnAndHeader()
    {
        const QString p = write("bad-cell.csv",
                                "height,weight,label\n"
                                "1,2,0\n"
                                "\n"
                                "3,heavy,1\n");
        expectError(read(p), {p, QStringLiteral("line 4"), QStringLiteral("column 2"), QStringLiteral("'weight'"),
                              QStringLiteral("'heavy' is not a number")});

        // Without a header there is no column name, but still the line and column.
        const QString bare = write("bad-bare.csv", "1,2,0\n1,2,1\n5,x,0\n");
        expectError(read(bare), {bare, QStringLiteral("line 3"), QStringLiteral("column 2"), QStringLiteral("'x'")});

        // Not finite is not a number either.
        const QString inf = write("inf.csv", "a,b,c\n1,inf,0\n2,3,1\n");
        expectError(read(inf), {QStringLiteral("line 2"), QStringLiteral("column 2"), QStringLiteral("('b')")});
    }

    void raggedRowIsRefused()
    {
        const QString p = write("ragged.csv", "a,b,c\n1,2,0\n3,4,5,1\n");
        expectError(read(p), {p, QStringLiteral("line 3 has 4 columns, expected 3")});

        const QString shortRow = write("short.csv", "1,2,0\n3,1\n");
        expectError(read(shortRow), {QStringLiteral("line 2 has 2 columns, expected 3")});
    }

    void emptyLabelIsRefused()
    {
        const QString p = write("nolabel.csv", "a,b,c\n1,2,0\n3,4,\n");
        expectError(read(p), {p, QStringLiteral("line 3"), QStringLiteral("column 3"), QStringLiteral("label is empty")});
    }

    void missingFile()
    {
        const QString p = m_dir.filePath(QStringLiteral("nowhere.csv"));
        expectError(read(p), {p, QStringLiteral("does not exist")});
    }

    void unknownLabelColumn()
    {
        const QString p = write("named.csv", "a,b,c\n1,2,0\n3,4,1\n");
        expectError(read(p, QStringLiteral("target")), {p, QStringLiteral("no column named 'target'")});
        expectError(read(p, QStringLiteral("4")), {p, QStringLiteral("label column 4 does not exist"),
                                                   QStringLiteral("3 columns")});
        expectError(read(p, QStringLiteral("0")), {QStringLiteral("label column 0 does not exist")});
    }

    void singleColumnIsRefused()
    {
        const QString p = write("one.csv", "value\n1\n2\n");
        expectError(read(p), {p, QStringLiteral("line 1"), QStringLiteral("found 1 column"),
                              QStringLiteral("delimiter")});
    }

    void onlyOneClassIsRefused()
    {
        const QString p = write("oneclass.csv", "a,b,c\n1,2,cat\n3,4,cat\n");
        expectError(read(p), {p, QStringLiteral("only one class")});
        const QString zeros = write("zeros.csv", "1,2,0\n3,4,0\n");
        expectError(read(zeros), {zeros, QStringLiteral("only one class")});
    }

    void emptyFileIsRefused()
    {
        const QString p = write("empty.csv", "");
        expectError(read(p), {p, QStringLiteral("no data rows")});
        const QString blank = write("blank.csv", "\n\n  \n");
        expectError(read(blank), {blank, QStringLiteral("no data rows")});
        const QString headerOnly = write("header.csv", "a,b,label\n");
        expectError(read(headerOnly), {headerOnly, QStringLiteral("no data rows")});
    }

    void byteOrderMarkIsIgnored()
    {
        // Spreadsheet exports often start with a UTF-8 byte-order mark.
        auto plain = read(write("bom.csv", "\xEF\xBB\xBF" "1,2,0\n3,4,1\n5,6,1\n"));
        QVERIFY2(plain.ok(), qPrintable(plain.error()));
        QCOMPARE(plain->size(), std::int64_t(3));
        auto named = read(write("bom-header.csv", "\xEF\xBB\xBF" "species,x,y\na,1,2\nb,3,4\n"), QStringLiteral("species"));
        QVERIFY2(named.ok(), qPrintable(named.error()));
        QCOMPARE(named->classNames, (QStringList{QStringLiteral("a"), QStringLiteral("b")}));
    }

    void quotedCellsMayHoldTheDelimiter()
    {
        auto r = read(write("quoted.csv", "name,x,label\n\"Smith, J\",1,0\n\"say \"\"hi\"\"\",2,1\n"),
                      QStringLiteral("label"));
        // The name column is text, so it is a non-numeric feature: the error names it, which
        // shows the quoted comma did not split the cell.
        expectError(r, {QStringLiteral("line 2, column 1"), QStringLiteral("'Smith, J' is not a number")});
        auto commaDecimal = read(write("quoted-numbers.csv", "\"1\",2\n\"1,5\",1\n\"7\",0\n"));
        expectError(commaDecimal, {QStringLiteral("line 2, column 1"), QStringLiteral("'1,5' is not a number")});
        auto fine = read(write("quoted-fine.csv", "\"1.5\",\"2\",0\n\"3\",\"4\",1\n"));
        QVERIFY2(fine.ok(), qPrintable(fine.error()));
        QCOMPARE(floats(fine->features), (std::vector<float>{1.5f, 2.f, 3.f, 4.f}));
    }
};

QTEST_GUILESS_MAIN(TestCsvReader)
#include "tst_csvreader.moc"
