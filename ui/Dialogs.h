#pragma once
// The windows' yes-or-no questions and save dialogs, in one place: a window asks here, and a
// test answers here instead of a person (as KeePassXC's MessageBox::setNextAnswer does), so
// that no window keeps a seam and a default of its own.
//
// Threads: UI thread.

#include <QString>

#include <functional>

class QWidget;

namespace flotilla::ui::dialogs {

// Yes or no, asked over parent; true for yes.
bool confirm(QWidget *parent, const QString &question);
// The file to save to, asked over parent; empty when cancelled.
QString savePath(QWidget *parent, const QString &title, const QString &suggested, const QString &filter);

// For tests: from now on the dialogs are not shown and these answer instead; an empty
// function shows them again.
using ConfirmAnswer = std::function<bool(const QString &question)>;
using SavePathAnswer = std::function<QString(const QString &title, const QString &suggested, const QString &filter)>;
void answerConfirmations(ConfirmAnswer answer);
void answerSavePaths(SavePathAnswer answer);

} // namespace flotilla::ui::dialogs
