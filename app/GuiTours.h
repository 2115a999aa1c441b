#pragma once
// What `flotilla gui` does for the docs' pictures and for measurements, apart from being the
// control center: the start-up time to the first painted window, the time until the Runs
// tab has listed every run, the UI thread's longest stall, and the screenshot tours of
// docs/screenshots. Each watches the window it is given and quits the application when it
// is done; none runs unless its option is given (scripts/screenshots.sh, bench).
//
// Threads: UI thread.

#include "desktop/DesktopSession.h"
#include "job/JobSpec.h"

#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QObject>

#include <memory>

namespace flotilla {

namespace ui {
class MainWindow;
}

// Milliseconds since main() began (startupMode() starts it).
QElapsedTimer &sinceMain();

class GuiTours : public QObject
{
public:
    static QList<QCommandLineOption> options();

    explicit GuiTours(const QCommandLineParser &parser);
    ~GuiTours() override;

    // --screenshots runs a short job of its own, in an identity folder of its own.
    bool runsItsOwnJob() const;
    void prepare(JobSpec &job, DesktopSession::Options &options) const;

    // Before the window shows: first paint, runs listed, the runs tour.
    void watchWindow(ui::MainWindow &window);
    // A window attached to a coordinator elsewhere: its picture, its stalls.
    void watchAttached(ui::MainWindow *attached);
    // The local job's tours (stalls, screenshots). Returns whether one started the job.
    bool watchJob(ui::MainWindow &window, DesktopSession &session);
    // The application's loop has ended: a worker the tour started hands its lease back.
    void finish();

private:
    struct Tour;
    void measureStalls();
    const QCommandLineParser &m_parser;
    std::unique_ptr<QObject> m_firstPaint;
    std::unique_ptr<QObject> m_stalls;
    std::unique_ptr<Tour> m_tour;
};

} // namespace flotilla
