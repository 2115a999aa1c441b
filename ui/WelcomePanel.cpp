#include "ui/WelcomePanel.h"

#include <QAction>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

QString modelPhrase(const ModelSpec &model)
{
    if (model.kind == QLatin1String("cnn"))
        return QObject::tr("a small CNN");
    if (model.kind == QLatin1String("resnet"))
        return QObject::tr("a small residual net");
    if (model.kind == QLatin1String("mlp")) {
        QStringList widths;
        for (const int w : model.hidden)
            widths << QString::number(w);
        return widths.isEmpty() ? QObject::tr("a linear model")
                                : QObject::tr("an MLP (hidden layers %1)").arg(widths.join(QStringLiteral(", ")));
    }
    return QObject::tr("the TorchScript model %1").arg(QFileInfo(model.path).fileName());
}

QString datasetPhrase(const DatasetSpec &data)
{
    QString name;
    if (data.kind == QLatin1String("fashion-mnist"))
        name = QStringLiteral("Fashion-MNIST");
    else if (data.kind == QLatin1String("images"))
        name = QObject::tr("the images in %1").arg(QFileInfo(data.path).fileName());
    else if (data.kind == QLatin1String("idx"))
        name = QObject::tr("the IDX files in %1").arg(QFileInfo(data.path).fileName());
    else
        name = QFileInfo(data.path).fileName();
    if (data.trainLimit > 0)
        name += QObject::tr(" (its first %1 training samples)").arg(data.trainLimit);
    return name;
}

QString rulePhrase(const AggregationSpec &rule)
{
    const QString alpha = QString::number(rule.alpha, 'g', 3);
    if (rule.rule == QLatin1String("vc-asgd"))
        return QObject::tr("VC-ASGD (α = %1)").arg(alpha);
    if (rule.rule == QLatin1String("staleness-aware"))
        return QObject::tr("staleness-aware VC-ASGD (α = %1)").arg(alpha);
    if (rule.usesRounds()) {
        QString text = QObject::tr("rounds: the workers' changes from one version averaged");
        if (rule.outerScaledByFleet)
            text += QObject::tr(" and carried as far as the workers online, with outer momentum %1 (a worker alone "
                                "trains as the plain loop)")
                        .arg(rule.outerMomentum, 0, 'g', 3);
        return text;
    }
    if (rule.rule == QLatin1String("async-delta")) {
        QString text = rule.outerMomentum > 0
                           ? QObject::tr("asynchronous deltas with outer momentum %1").arg(rule.outerMomentum, 0, 'g', 3)
                           : QObject::tr("asynchronous deltas");
        if (rule.stalenessDamping > 0)
            text += QObject::tr(", a result s versions stale counting (1 + s)^-%1").arg(rule.stalenessDamping, 0, 'g', 3);
        return text;
    }
    return QObject::tr("synchronous averaging per round");
}

} // namespace

QString describeJob(const JobSpec &job)
{
    const QString epochs = job.training.epochs == 1 ? QObject::tr("1 epoch")
                                                    : QObject::tr("%1 epochs").arg(job.training.epochs);
    const QString shards = job.training.shards > 0 ? QObject::tr("%1 shards").arg(job.training.shards)
                                                   : QObject::tr("shards of at least 16 steps");
    QString text = QObject::tr("%1 on %2 for %3 of %4, folded into the global model with %5")
                       .arg(modelPhrase(job.model), datasetPhrase(job.dataset), epochs, shards)
                       .arg(rulePhrase(job.aggregation));
    if (job.aggregation.buffer == 0)
        text += QObject::tr(", as many results at a time as the square root of the workers online");
    else if (job.aggregation.buffer > 1)
        text += QObject::tr(", %1 results at a time").arg(job.aggregation.buffer);
    const double preempt = job.fleet.preemption.meanIntervalSeconds;
    if (preempt > 0)
        text += QObject::tr(", with a simulated preemption about every %1 s").arg(preempt, 0, 'g', 3);
    return text;
}

WelcomePanel::WelcomePanel(const QList<QAction *> &actions, QWidget *parent) : QWidget(parent)
{
    // One column no wider than a reader's eye follows, centred whatever the window's width;
    // a fixed width also lets the wrapped labels know their height.
    auto *column = new QWidget;
    column->setFixedWidth(fontMetrics().averageCharWidth() * 80);
    auto *layout = new QVBoxLayout(column);
    const QMargins margins = layout->contentsMargins();
    m_textWidth = column->width() - margins.left() - margins.right();
    m_headline = new QLabel;
    QFont big = m_headline->font();
    big.setPointSizeF(big.pointSizeF() * 1.6);
    big.setBold(true);
    m_headline->setFont(big);
    m_what = new QLabel;
    m_note = new QLabel;
    auto *hint = new QLabel(tr("Loss and accuracy, staleness, workers online, cost and throughput are drawn here as "
                               "results come in."));
    hint->setEnabled(false);
    for (QLabel *label : {m_what, m_note, hint}) {
        label->setWordWrap(true);
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    }
    fitHeight(hint);
    auto *buttons = new QHBoxLayout;
    for (QAction *action : actions) {
        auto *button = new QToolButton;
        button->setDefaultAction(action);
        button->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
        button->setIconSize(QSize(24, 24));
        buttons->addWidget(button);
    }
    buttons->addStretch();
    layout->addWidget(m_headline);
    layout->addSpacing(8);
    layout->addWidget(m_what);
    layout->addSpacing(4);
    layout->addWidget(m_note);
    layout->addSpacing(12);
    layout->addLayout(buttons);
    layout->addSpacing(12);
    layout->addWidget(hint);

    auto *outer = new QVBoxLayout(this);
    outer->addStretch(1);
    outer->addWidget(column, 0, Qt::AlignHCenter);
    outer->addStretch(2);
}

void WelcomePanel::setText(const QString &headline, const QString &what, const QString &note)
{
    m_headline->setText(headline);
    m_what->setText(what);
    m_note->setText(note);
    m_note->setVisible(!note.isEmpty());
    fitHeight(m_what);
    fitHeight(m_note);
}

void WelcomePanel::fitHeight(QLabel *label) const
{
    // A wrapped label's size hint assumes a width of its own choosing; at the column's it
    // needs this height, or its last lines are cut.
    label->setMinimumHeight(label->heightForWidth(m_textWidth));
}

QString WelcomePanel::text() const
{
    return QStringList{m_headline->text(), m_what->text(), m_note->text()}.join(u'\n');
}

} // namespace flotilla::ui
