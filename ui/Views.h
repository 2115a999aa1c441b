#pragma once
// The tables of the control center: workers (with revoke), subtasks with their history,
// and the event log with filters.
//
// Threads: UI thread.

#include "job/SessionTypes.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;

namespace flotilla::ui {

class WorkersView : public QWidget
{
    Q_OBJECT

public:
    explicit WorkersView(QWidget *parent = nullptr);
    void setWorkers(const QList<WorkerRow> &workers);
    QTableWidget *table() const { return m_table; }
    QString selectedWorker() const;

Q_SIGNALS:
    void revokeRequested(const QString &name);
    void releaseRequested(qint64 workerId);
    void tokenRequested();

private:
    QTableWidget *m_table = nullptr;
    QPushButton *m_revoke = nullptr;
    QPushButton *m_release = nullptr;
    QList<WorkerRow> m_rows;
    void updateButtons();
};

class SubtasksView : public QWidget
{
    Q_OBJECT

public:
    explicit SubtasksView(QWidget *parent = nullptr);
    void setSubtasks(const QList<SubtaskRow> &subtasks);
    QTableWidget *table() const { return m_table; }

Q_SIGNALS:
    void refreshRequested();

private:
    QTableWidget *m_table = nullptr;
    QLineEdit *m_filter = nullptr;
    QComboBox *m_state = nullptr;
    QList<SubtaskRow> m_rows;
    void apply();
};

class EventsView : public QWidget
{
    Q_OBJECT

public:
    explicit EventsView(QWidget *parent = nullptr);
    void clear();
    void addEvent(const EventRecord &e);
    // Many at once (a history): the table is laid out once.
    void addEvents(const QList<EventRecord> &events);
    QTableWidget *table() const { return m_table; }
    void setFilter(const QString &kind, const QString &text);
    int visibleRows() const;

private:
    void apply(int row);
    void fillRow(int row, const EventRecord &e);
    QTableWidget *m_table = nullptr;
    QLineEdit *m_filter = nullptr;
    QComboBox *m_kind = nullptr;
};

} // namespace flotilla::ui
