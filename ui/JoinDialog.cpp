#include "ui/JoinDialog.h"

#include <QDialogButtonBox>
#include <QFile>
#include <QFileDialog>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

// A token is about 150 characters; anything much longer is not one.
constexpr qint64 kMaxTokenFile = 4096;

} // namespace

JoinDialog::JoinDialog(Validator validate, const QList<RememberedFleet> &fleets, QWidget *parent)
    : QDialog(parent), m_validate(std::move(validate)), m_remembered(fleets)
{
    setWindowTitle(tr("Join a fleet"));
    auto *layout = new QVBoxLayout(this);
    auto *intro = new QLabel(tr("Paste the join token the fleet's owner gave you (it starts with flt1.), or open the "
                                "file it came in. This machine's worker then trains for that fleet."));
    intro->setWordWrap(true);
    layout->addWidget(intro);
    m_text = new QPlainTextEdit;
    m_text->setPlaceholderText(QStringLiteral("flt1.…"));
    m_text->setMaximumHeight(80);
    layout->addWidget(m_text);
    auto *row = new QHBoxLayout;
    auto *open = new QPushButton(tr("Open token file…"));
    row->addWidget(open);
    row->addStretch();
    layout->addLayout(row);
    m_message = new QLabel;
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_message);

    auto *box = new QGroupBox(tr("Fleets this machine has joined"));
    auto *boxLayout = new QVBoxLayout(box);
    m_fleets = new QListWidget;
    for (const RememberedFleet &f : fleets)
        m_fleets->addItem(tr("%1 · joined %2").arg(f.coordinator, QLocale().toString(f.joined, QLocale::ShortFormat)));
    m_fleets->setMaximumHeight(100);
    boxLayout->addWidget(m_fleets);
    m_start = new QPushButton(tr("Start the worker for this fleet"));
    m_start->setEnabled(false);
    boxLayout->addWidget(m_start, 0, Qt::AlignLeft);
    box->setVisible(!fleets.isEmpty());
    layout->addWidget(box);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Cancel);
    m_join = buttons->addButton(tr("Join"), QDialogButtonBox::AcceptRole);
    m_join->setEnabled(false);
    layout->addWidget(buttons);

    askOpenPath = [this] {
        return QFileDialog::getOpenFileName(this, tr("Open a join token file"), QString(),
                                            tr("Token files (*.token *.txt);;All files (*)"));
    };
    connect(open, &QPushButton::clicked, this, &JoinDialog::openTokenFile);
    connect(m_text, &QPlainTextEdit::textChanged, this, &JoinDialog::check);
    connect(buttons, &QDialogButtonBox::accepted, this, [this] {
        if (m_join->isEnabled()) {
            m_chosen.reset();
            accept();
        }
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_fleets, &QListWidget::currentRowChanged, this, [this](int r) { m_start->setEnabled(r >= 0); });
    connect(m_start, &QPushButton::clicked, this, [this] {
        const int r = m_fleets->currentRow();
        if (r < 0 || r >= m_remembered.size())
            return;
        m_chosen = m_remembered[r];
        m_text->clear();
        accept();
    });
    resize(560, sizeHint().height());
}

QString JoinDialog::token() const
{
    return m_chosen ? QString() : m_text->toPlainText().trimmed();
}

void JoinDialog::openTokenFile()
{
    const QString path = askOpenPath ? askOpenPath() : QString();
    if (!path.isEmpty())
        loadTokenFile(path);
}

bool JoinDialog::loadTokenFile(const QString &path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        m_message->setText(tr("Could not read %1: %2").arg(path, file.errorString()));
        return false;
    }
    if (file.size() > kMaxTokenFile) {
        m_message->setText(tr("%1 is %2 bytes, too big to hold a join token; open the token file itself")
                               .arg(path)
                               .arg(file.size()));
        return false;
    }
    m_text->setPlainText(QString::fromUtf8(file.readAll()).trimmed());
    return true;
}

void JoinDialog::check()
{
    const QString text = m_text->toPlainText().trimmed();
    if (text.isEmpty()) {
        m_message->clear();
        m_join->setEnabled(false);
        return;
    }
    const Result<QString> checked = m_validate ? m_validate(text) : Result<QString>(QString());
    if (!checked) {
        m_message->setText(tr("Not usable: %1.").arg(checked.error()));
        m_message->setStyleSheet(QStringLiteral("color: #b3261e;"));
        m_join->setEnabled(false);
        return;
    }
    m_message->setText(*checked);
    m_message->setStyleSheet(QString());
    m_join->setEnabled(true);
}

} // namespace flotilla::ui
