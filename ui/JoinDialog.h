#pragma once
// "Join a fleet…": paste a join token or open a token file, or start the worker of a fleet
// this machine joined before. The token is checked as it is typed, by a validator the
// application gives (the ui does not read tokens itself), and a bad one is named.
//
// Threads: UI thread. The file dialog goes through a seam that tests replace (askOpenPath).

#include "common/Result.h"
#include "machine/WorkerSettings.h"

#include <QDialog>

#include <functional>
#include <optional>

class QLabel;
class QListWidget;
class QPlainTextEdit;
class QPushButton;

namespace flotilla::ui {

class JoinDialog : public QDialog
{
    Q_OBJECT

public:
    // What a token's text names ("coordinator lab-server:7441, valid until …"), or what is
    // wrong with it.
    using Validator = std::function<Result<QString>(const QString &text)>;

    JoinDialog(Validator validate, const QList<RememberedFleet> &fleets, QWidget *parent = nullptr);

    // After Join: the token, trimmed. After Start: empty.
    QString token() const;
    // After Start: the remembered fleet chosen.
    std::optional<RememberedFleet> fleet() const { return m_chosen; }

    // Seam for tests: the file the open dialog would return (empty: cancelled).
    std::function<QString()> askOpenPath;

    QPlainTextEdit *tokenText() const { return m_text; }
    QLabel *message() const { return m_message; }
    QPushButton *joinButton() const { return m_join; }
    QListWidget *fleetList() const { return m_fleets; }
    QPushButton *startButton() const { return m_start; }

public Q_SLOTS:
    void openTokenFile();
    // Reads a token file into the text field; false (and the reason shown) when it cannot.
    bool loadTokenFile(const QString &path);

private:
    void check();

    Validator m_validate;
    QList<RememberedFleet> m_remembered;
    std::optional<RememberedFleet> m_chosen;
    QPlainTextEdit *m_text = nullptr;
    QLabel *m_message = nullptr;
    QPushButton *m_join = nullptr;
    QListWidget *m_fleets = nullptr;
    QPushButton *m_start = nullptr;
};

} // namespace flotilla::ui
