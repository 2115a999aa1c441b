#pragma once
// The join-token dialog: issues a token for other machines, lists the coordinator's tokens
// (what each was issued for, uses left, expiry) and revokes one. It works through the
// ControlSession facade only.
//
// Threads: UI thread. The question before a revocation goes through ui/Dialogs.h.

#include "ui/ControlSession.h"

#include <QDialog>

#include <functional>

class QCheckBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace flotilla::ui {

class TokenDialog : public QDialog
{
    Q_OBJECT

public:
    explicit TokenDialog(ControlSession *session, QWidget *parent = nullptr);

    QSpinBox *uses() const { return m_uses; }
    QSpinBox *hours() const { return m_hours; }
    QPlainTextEdit *tokenText() const { return m_text; }
    QLabel *info() const { return m_info; }
    QTableWidget *table() const { return m_table; }
    QCheckBox *showSpent() const { return m_showSpent; }

public Q_SLOTS:
    void issue();
    // Revokes the token in the selected row (after asking).
    void revokeSelected();
    void refresh();

private:
    void onIssued(const QString &token, const QString &error);
    void updateButtons();

    ControlSession *m_session;
    QSpinBox *m_uses = nullptr;
    QSpinBox *m_hours = nullptr;
    QPlainTextEdit *m_text = nullptr;
    QLabel *m_info = nullptr;
    QPushButton *m_copy = nullptr;
    QTableWidget *m_table = nullptr;
    QCheckBox *m_showSpent = nullptr;
    QPushButton *m_revoke = nullptr;
    QLabel *m_listInfo = nullptr;
};

} // namespace flotilla::ui
