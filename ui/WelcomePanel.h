#pragma once
// What the dashboard shows before a job has drawn anything: what Start will do, in words,
// and the buttons that get a job going (the window's own actions, so that their state,
// icons and shortcuts stay the toolbar's).
//
// Threads: UI thread.

#include "job/JobSpec.h"

#include <QWidget>

class QAction;
class QLabel;

namespace flotilla::ui {

// The job in one sentence: model, data set, length, rule and simulated preemptions
// ("a small CNN on Fashion-MNIST for 20 epochs of 30 shards, …").
QString describeJob(const JobSpec &job);

class WelcomePanel : public QWidget
{
    Q_OBJECT

public:
    explicit WelcomePanel(const QList<QAction *> &actions, QWidget *parent = nullptr);

    // headline: the state in a few words; what: what Start does; note: anything else
    // (this machine's part, why the last attempt failed).
    void setText(const QString &headline, const QString &what, const QString &note);
    // Everything the panel says, as one text (for tests).
    QString text() const;

private:
    void fitHeight(QLabel *label) const;

    int m_textWidth = 0;
    QLabel *m_headline = nullptr;
    QLabel *m_what = nullptr;
    QLabel *m_note = nullptr;
};

} // namespace flotilla::ui
