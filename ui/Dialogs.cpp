#include "ui/Dialogs.h"

#include <QCoreApplication>
#include <QFileDialog>
#include <QMessageBox>

namespace flotilla::ui::dialogs {

namespace {

ConfirmAnswer &confirmAnswer()
{
    static ConfirmAnswer answer;
    return answer;
}

SavePathAnswer &savePathAnswer()
{
    static SavePathAnswer answer;
    return answer;
}

} // namespace

bool confirm(QWidget *parent, const QString &question)
{
    if (confirmAnswer())
        return confirmAnswer()(question);
    return QMessageBox::question(parent, QCoreApplication::translate("flotilla", "Flotilla"), question)
           == QMessageBox::Yes;
}

QString savePath(QWidget *parent, const QString &title, const QString &suggested, const QString &filter)
{
    if (savePathAnswer())
        return savePathAnswer()(title, suggested, filter);
    return QFileDialog::getSaveFileName(parent, title, suggested, filter);
}

void answerConfirmations(ConfirmAnswer answer)
{
    confirmAnswer() = std::move(answer);
}

void answerSavePaths(SavePathAnswer answer)
{
    savePathAnswer() = std::move(answer);
}

} // namespace flotilla::ui::dialogs
