// The job store on files that cannot hold one: noise, text, SQLite's magic then garbage, a
// newer schema, a directory, an unwritable path or folder, a read-only file. Each is refused at
// open with a message that names the file and what is wrong with it.
#include "StoreFiles.h"
#include "TestFiles.h"

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <random>

using namespace flotilla;
using namespace flotilla::test;

class TestStoreFiles : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString path(const QString &name) const { return m_dir.filePath(name); }

private Q_SLOTS:
    void notAStoreFileIsRefused_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("reason");
        std::mt19937 random(20240607);
        QByteArray noise(8192, '\0');
        for (char &c : noise)
            c = char(random() & 0xff);
        QTest::newRow("random bytes") << noise << QStringLiteral("not a database");
        QTest::newRow("short text file") << QByteArray("epochs = 3\nalpha = 0.5\n") << QStringLiteral("not a database");
        QByteArray text;
        for (int i = 0; i < 300; ++i)
            text += "a plain text file where the job store was expected\n";
        QTest::newRow("long text file") << text << QStringLiteral("not a database");
        // SQLite's magic followed by garbage: a store whose header survived and nothing else.
        QByteArray header("SQLite format 3", 16);
        header += noise;
        QTest::newRow("sqlite magic then noise") << header << QStringLiteral("not a database");
    }

    void notAStoreFileIsRefused()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, reason);
        const QString p = path(QStringLiteral("not-a-store-%1.db").arg(QString::fromLatin1(QTest::currentDataTag())).replace(u' ', u'-'));
        writeFile(p, bytes);
        auto r = Store::open(p);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("cannot open job store '%1'").arg(p), reason});
        // Whatever the file was, it is left as it was.
        QCOMPARE(readFile(p), bytes);
    }

    void newerSchemaIsRefused()
    {
        const QString db = path(QStringLiteral("newer.db"));
        {
            auto store = openStore(db);
            QVERIFY(store);
            QVERIFY(store->createJob(QStringLiteral("from the future"), QStringLiteral("{}"), 1).ok());
        }
        QVERIFY(execFile(db, "UPDATE meta SET value = '99' WHERE key = 'schema'"));
        auto r = Store::open(db);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {db, QStringLiteral("newer"), QStringLiteral("99")});
        // Refusing it left it as it was.
        QCOMPARE(queryFile(db, "SELECT value FROM meta WHERE key = 'schema'"), QStringList{QStringLiteral("99")});
        QCOMPARE(queryFile(db, "SELECT name FROM jobs"), QStringList{QStringLiteral("from the future")});
    }

    void unwritablePathIsRefused_data()
    {
        QTest::addColumn<QString>("dbPath");
        QTest::newRow("missing directory") << path(QStringLiteral("no/such/dir/flotilla.db"));
        QTest::newRow("file as directory") << path(QStringLiteral("plain-file/flotilla.db"));
        QTest::newRow("a directory") << path(QStringLiteral("a-directory"));
#ifdef Q_OS_LINUX
        // No one may create files in /proc, root included.
        QTest::newRow("proc") << QStringLiteral("/proc/flotilla-test-store.db");
#endif
    }

    void unwritablePathIsRefused()
    {
        QFETCH(QString, dbPath);
        writeFile(path(QStringLiteral("plain-file")), "not a directory");
        QVERIFY(QDir(m_dir.path()).mkpath(QStringLiteral("a-directory")));
        auto r = Store::open(dbPath);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("cannot open job store '%1'").arg(dbPath)});
        QVERIFY(!QFileInfo(dbPath).isFile());
    }

    void readOnlyDirectoryIsRefused()
    {
        const QString dir = path(QStringLiteral("read-only"));
        QVERIFY(QDir().mkpath(dir));
        const QFileDevice::Permissions readOnly =
            QFileDevice::ReadOwner | QFileDevice::ExeOwner | QFileDevice::ReadGroup | QFileDevice::ExeGroup;
        QVERIFY(QFile::setPermissions(dir, readOnly));
        // Root ignores permission bits, so the directory is only read-only if a file cannot be
        // made in it.
        const QString probe = dir + QStringLiteral("/probe");
        QFile probeFile(probe);
        const bool enforced = !probeFile.open(QIODevice::WriteOnly);
        probeFile.close();
        QFile::remove(probe);
        if (!enforced) {
            QFile::setPermissions(dir, readOnly | QFileDevice::WriteOwner);
            QSKIP("this user can write into a read-only directory (root)");
        }
        const QString db = dir + QStringLiteral("/flotilla.db");
        auto r = Store::open(db);
        QFile::setPermissions(dir, readOnly | QFileDevice::WriteOwner);
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("cannot open job store '%1'").arg(db)});
    }

    // A store file the job cannot write: refused at open, by name, instead of failing at the
    // first assimilation. Root ignores permission bits, so the file is made immutable when
    // chattr can (root on ext4 and most Linux file systems), read-only otherwise.
    void readOnlyStoreFileIsRefused()
    {
        const QString db = path(QStringLiteral("locked.db"));
        {
            auto created = Store::open(db);
            QVERIFY(created);
        }
        const bool immutable = QProcess::execute(QStringLiteral("chattr"), {QStringLiteral("+i"), db}) == 0;
        if (!immutable)
            QVERIFY(QFile::setPermissions(db, QFileDevice::ReadOwner | QFileDevice::ReadGroup));
        const bool enforced = !QFile(db).open(QIODevice::ReadWrite);
        auto r = enforced ? Store::open(db) : Result<std::unique_ptr<Store>>(fail(QString()));
        if (immutable)
            QProcess::execute(QStringLiteral("chattr"), {QStringLiteral("-i"), db});
        QFile::setPermissions(db, QFileDevice::ReadOwner | QFileDevice::WriteOwner);
        if (!enforced)
            QSKIP("neither chattr nor permissions make a file read-only for this user");
        QVERIFY(!r.ok());
        expectErrorNaming(r.error(), {QStringLiteral("cannot open job store '%1'").arg(db), QStringLiteral("read-only")});
    }
};

QTEST_GUILESS_MAIN(TestStoreFiles)
#include "tst_storefiles.moc"
