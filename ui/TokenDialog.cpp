#include "ui/TokenDialog.h"

#include "ui/Dialogs.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QDateTime>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

enum Column { IdColumn, StateColumn, UsesColumn, ExpiresColumn, NoteColumn, ColumnCount };

} // namespace

TokenDialog::TokenDialog(ControlSession *session, QWidget *parent) : QDialog(parent), m_session(session)
{
    setWindowTitle(tr("Join tokens"));
    auto *layout = new QVBoxLayout(this);

    auto *issueBox = new QGroupBox(tr("Issue a token"));
    auto *issueLayout = new QVBoxLayout(issueBox);
    auto *form = new QFormLayout;
    m_uses = new QSpinBox;
    m_uses->setRange(1, 100000);
    m_uses->setValue(1);
    m_hours = new QSpinBox;
    m_hours->setRange(1, 24 * 365);
    m_hours->setValue(24);
    m_hours->setSuffix(tr(" h"));
    form->addRow(tr("Workers that may join with it"), m_uses);
    form->addRow(tr("Valid for"), m_hours);
    issueLayout->addLayout(form);
    m_text = new QPlainTextEdit;
    m_text->setReadOnly(true);
    m_text->setMinimumWidth(560);
    m_text->setMaximumHeight(80);
    m_info = new QLabel;
    m_info->setWordWrap(true);
    issueLayout->addWidget(m_text);
    issueLayout->addWidget(m_info);
    auto *issueButtons = new QHBoxLayout;
    auto *issueButton = new QPushButton(tr("Issue"));
    m_copy = new QPushButton(tr("Copy"));
    m_copy->setEnabled(false);
    issueButtons->addStretch();
    issueButtons->addWidget(issueButton);
    issueButtons->addWidget(m_copy);
    issueLayout->addLayout(issueButtons);
    layout->addWidget(issueBox);

    auto *listBox = new QGroupBox(tr("Tokens of this coordinator"));
    auto *listLayout = new QVBoxLayout(listBox);
    m_table = new QTableWidget(0, ColumnCount);
    m_table->setHorizontalHeaderLabels({tr("Id"), tr("State"), tr("Uses left"), tr("Expires"), tr("Issued for")});
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setStretchLastSection(true);
    listLayout->addWidget(m_table);
    m_listInfo = new QLabel;
    m_listInfo->setWordWrap(true);
    listLayout->addWidget(m_listInfo);
    auto *listButtons = new QHBoxLayout;
    m_showSpent = new QCheckBox(tr("Show used up, expired and revoked tokens"));
    m_revoke = new QPushButton(tr("Revoke"));
    m_revoke->setToolTip(tr("No worker can join with this token any more; workers that already joined stay"));
    listButtons->addWidget(m_showSpent);
    listButtons->addStretch();
    listButtons->addWidget(m_revoke);
    listLayout->addLayout(listButtons);
    layout->addWidget(listBox);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(issueButton, &QPushButton::clicked, this, &TokenDialog::issue);
    connect(m_copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(m_text->toPlainText()); });
    connect(m_revoke, &QPushButton::clicked, this, &TokenDialog::revokeSelected);
    connect(m_showSpent, &QCheckBox::toggled, this, &TokenDialog::refresh);
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &TokenDialog::updateButtons);
    // The session answers when it can: at once here, after a round trip when attached to a
    // coordinator elsewhere.
    connect(m_session, &ControlSession::tokenIssued, this, &TokenDialog::onIssued);
    connect(m_session, &ControlSession::tokensChanged, this, &TokenDialog::refresh);
    connect(m_session, &ControlSession::commandAnswered, this, [this](const QString &done, const QString &error) {
        m_listInfo->setText(error.isEmpty() ? done : error);
    });
    refresh();
}

void TokenDialog::issue()
{
    m_info->setText(tr("Issuing…"));
    m_session->issueToken(m_uses->value(), qint64(m_hours->value()) * 3600);
}

void TokenDialog::onIssued(const QString &token, const QString &error)
{
    if (!error.isEmpty()) {
        m_info->setText(error);
        return;
    }
    m_text->setPlainText(token);
    m_info->setText(tr("On the worker machine: flotilla worker --join TOKEN. %1 use(s), valid until %2; the worker "
                       "checks it reaches this coordinator (%3) by the CA fingerprint inside.")
                        .arg(m_uses->value())
                        .arg(QDateTime::currentDateTime().addSecs(qint64(m_hours->value()) * 3600).toString(Qt::ISODate),
                             m_session->endpoint()));
    m_copy->setEnabled(true);
}

void TokenDialog::refresh()
{
    auto tokens = m_session->joinTokens(m_showSpent->isChecked());
    m_table->setRowCount(0);
    if (!tokens) {
        m_listInfo->setText(tokens.error());
        updateButtons();
        return;
    }
    for (const JoinTokenRow &t : *tokens) {
        const int row = m_table->rowCount();
        m_table->insertRow(row);
        const QString expires = QDateTime::fromMSecsSinceEpoch(t.expiresMs).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
        const QString note = t.operatorRole ? tr("operator: %1").arg(t.note) : t.note;
        const QStringList cells{t.id, t.state, QStringLiteral("%1 of %2").arg(t.usesLeft).arg(t.usesTotal), expires,
                                note};
        for (int column = 0; column < ColumnCount; ++column) {
            auto *item = new QTableWidgetItem(cells.at(column));
            item->setData(Qt::UserRole, t.live);
            m_table->setItem(row, column, item);
        }
    }
    m_table->resizeColumnsToContents();
    if (tokens->isEmpty())
        m_listInfo->setText(m_showSpent->isChecked() ? tr("No tokens have been issued yet.")
                                                     : tr("No live tokens: issue one above."));
    else
        m_listInfo->setText(tr("A revoked token admits no one; workers that joined with it stay (revoke those from "
                               "the Workers tab)."));
    updateButtons();
}

void TokenDialog::revokeSelected()
{
    const QList<QTableWidgetItem *> selected = m_table->selectedItems();
    if (selected.isEmpty())
        return;
    const int row = selected.first()->row();
    const QString id = m_table->item(row, IdColumn)->text();
    const QString note = m_table->item(row, NoteColumn)->text();
    if (!dialogs::confirm(this, tr("Revoke join token %1%2? No worker can join with it any more.")
                             .arg(id, note.isEmpty() ? QString() : tr(" (issued for: %1)").arg(note))))
        return;
    m_session->revokeToken(id); // answered with commandAnswered, then tokensChanged
}

void TokenDialog::updateButtons()
{
    const QList<QTableWidgetItem *> selected = m_table->selectedItems();
    m_revoke->setEnabled(!selected.isEmpty() && selected.first()->data(Qt::UserRole).toBool());
}

} // namespace flotilla::ui
