#include "app/GuiCommand.h"

#include "agent/WorkerAgent.h"
#include "app/CommandLine.h"
#include "app/GuiTours.h"
#include "app/JobOptions.h"
#include "app/NetworkCommands.h"
#include "common/LogCategories.h"
#include "common/LogSink.h"
#include "desktop/AgentDesk.h"
#include "desktop/DesktopSession.h"
#include "desktop/RemoteSession.h"
#include "desktop/RunLibrary.h"
#include "machine/WorkPolicy.h"

#include "ui/AppIcon.h"
#include "ui/JoinDialog.h"
#include "ui/MainWindow.h"
#include "ui/WorkerDesk.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QHostInfo>
#include <QInputDialog>
#include <QMessageBox>
#include <QSettings>
#include <QStandardPaths>

#include <cstdio>
#include <cstring>

namespace flotilla {

namespace {

// A worker started from the desktop: the agent, the policy that says when it may run, and
// its window. Members are destroyed bottom up: the window before the desk before the agent.
struct DesktopWorker
{
    SystemClock clock;
    std::unique_ptr<IdleSource> idle = systemIdleSource();
    std::unique_ptr<PowerSource> power = systemPowerSource();
    std::unique_ptr<WorkerAgent> agent;
    std::unique_ptr<WorkPolicy> policy;
    std::unique_ptr<AgentDesk> desk;
    std::unique_ptr<ui::WorkerWindow> window;
};

// Each fleet's worker keeps its identity and shard cache in a folder of its own, named after
// the fleet's CA, so that joining a second fleet does not end the first one's enrollment.
QString fleetStateDir(const net::JoinToken &token)
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/fleets/")
           + QString::fromLatin1(token.caFingerprint.left(8).toHex());
}

// Starts this machine's worker in stateDir: joining with the token, or, without one, for
// the fleet it joined before. threads/device: from the worker settings unless given.
Result<std::unique_ptr<DesktopWorker>> startDesktopWorker(const std::optional<net::JoinToken> &token,
                                                          const QString &stateDir, int threads = 0)
{
    const WorkerSettings settings = WorkerSettings::load();
    auto w = std::make_unique<DesktopWorker>();
    WorkerAgent::Options options;
    options.stateDir = stateDir;
    options.name = QHostInfo::localHostName();
    options.threads = threads > 0 ? threads : std::max(1, settings.threads);
    options.device = settings.device;
    w->agent = std::make_unique<WorkerAgent>(options);
    w->policy = std::make_unique<WorkPolicy>(settings, w->idle.get(), &w->clock, w->power.get());
    if (auto started = w->agent->start(token); !started)
        return started.takeError();
    if (token)
        rememberFleet({QStringLiteral("%1:%2").arg(token->host).arg(token->port), stateDir,
                           QDateTime::currentDateTime()});
    w->desk = std::make_unique<AgentDesk>(w->agent.get(), w->policy.get(), stateDir);
    w->policy->start();
    w->window = std::make_unique<ui::WorkerWindow>(w->desk.get());
    w->window->show();
    return w;
}

// Asks for a join token or a fleet joined before and starts the worker for it; nothing when
// the user cancels.
Result<std::unique_ptr<DesktopWorker>> joinFromDialog(QWidget *parent)
{
    ui::JoinDialog dialog([](const QString &text) { return describeJoinToken(text, QDateTime::currentMSecsSinceEpoch()); },
                          rememberedFleets(), parent);
    if (dialog.exec() != QDialog::Accepted)
        return std::unique_ptr<DesktopWorker>();
    if (const auto fleet = dialog.fleet())
        return startDesktopWorker(std::nullopt, fleet->stateDir);
    auto token = net::JoinToken::decode(dialog.token());
    if (!token)
        return token.takeError();
    return startDesktopWorker(*token, fleetStateDir(*token));
}

// An operator's identity for each coordinator it attached to, in a folder of its own named
// after the coordinator's CA; the settings remember which folder belongs to which address.
QString operatorStateDir(const net::JoinToken &token)
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinators/")
           + QString::fromLatin1(token.caFingerprint.left(8).toHex());
}

const QString kCoordinatorsKey = QStringLiteral("operator/coordinators"); // "address\tstate folder" each

QStringList rememberedCoordinators()
{
    return QSettings().value(kCoordinatorsKey).toStringList();
}

void rememberCoordinator(const QString &address, const QString &stateDir)
{
    QStringList list = rememberedCoordinators();
    const QString entry = address + QLatin1Char('\t') + stateDir;
    list.removeAll(entry);
    list.prepend(entry);
    QSettings().setValue(kCoordinatorsKey, list.mid(0, 20));
}

// Opens a control-center window attached to a coordinator elsewhere: with an operator token
// the first time, then from the state folder alone. The window owns its session.
Result<ui::MainWindow *> openRemoteWindow(const std::optional<net::JoinToken> &token, const QString &stateDir)
{
    auto session = std::make_unique<RemoteSession>(
        RemoteSession::Options{stateDir, QHostInfo::localHostName() + QStringLiteral("-operator")});
    if (auto attached = session->attach(token); !attached)
        return attached.takeError();
    rememberCoordinator(session->endpoint(), stateDir);
    auto *window = new ui::MainWindow(session.get(), JobSpec::defaultJob(), QString());
    window->setAttribute(Qt::WA_DeleteOnClose);
    QObject::connect(window, &QObject::destroyed, session.release(), &QObject::deleteLater);
    window->resize(1500, 900);
    window->show();
    return window;
}

// Connect to coordinator…: a coordinator attached to before, or a new operator token.
Result<ui::MainWindow *> connectFromDialog(QWidget *parent)
{
    const QStringList remembered = rememberedCoordinators();
    const QString pasteNew = QObject::tr("A new operator token…");
    QStringList items;
    for (const QString &entry : remembered)
        items << entry.section(QLatin1Char('\t'), 0, 0);
    items << pasteNew;
    bool ok = true;
    const QString choice = remembered.isEmpty()
                               ? pasteNew
                               : QInputDialog::getItem(parent, QObject::tr("Connect to coordinator"),
                                                       QObject::tr("Coordinator"), items, 0, false, &ok);
    if (!ok)
        return static_cast<ui::MainWindow *>(nullptr);
    if (const qsizetype i = items.indexOf(choice); choice != pasteNew && i >= 0)
        return openRemoteWindow(std::nullopt, remembered.at(i).section(QLatin1Char('\t'), 1));
    const QString text = QInputDialog::getMultiLineText(
        parent, QObject::tr("Connect to coordinator"),
        QObject::tr("Paste an operator token. On the coordinator's machine, flotilla token --operator prints one."),
        QString(), &ok);
    if (!ok || text.trimmed().isEmpty())
        return static_cast<ui::MainWindow *>(nullptr);
    auto token = net::JoinToken::decode(text);
    if (!token)
        return token.takeError();
    return openRemoteWindow(*token, operatorStateDir(*token));
}

QString identityDir()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/coordinator");
}

} // namespace

bool displayAvailable()
{
#if defined(Q_OS_WIN) || defined(Q_OS_MACOS)
    return true;
#else
    return !qEnvironmentVariableIsEmpty("DISPLAY") || !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")
           || !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
#endif
}

StartupMode startupMode(int argc, char **argv)
{
    sinceMain().start();
    if (argc < 2)
        return displayAvailable() ? StartupMode::ControlCenter : StartupMode::HeadlessDefault;
    if (std::strcmp(argv[1], "gui") == 0)
        return StartupMode::ControlCenter;
    if (std::strcmp(argv[1], "--join") == 0)
        return StartupMode::WorkerWindow;
    if (std::strcmp(argv[1], "simulate") == 0)
        for (int i = 2; i < argc; ++i)
            if (std::strncmp(argv[i], "--charts", 8) == 0)
                return StartupMode::CommandLineDrawing;
    if (std::strcmp(argv[1], "bench") == 0 && argc > 2 && std::strcmp(argv[2], "scaling") == 0)
        for (int i = 3; i < argc; ++i)
            if (std::strncmp(argv[i], "--plot", 6) == 0)
                return StartupMode::CommandLineDrawing;
    return StartupMode::CommandLine;
}

int runControlCenter(const QStringList &arguments)
{
    QApplication::setApplicationName(QStringLiteral("flotilla"));
    QApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QApplication::setApplicationVersion(QStringLiteral(FLOTILLA_VERSION));
    QApplication::setWindowIcon(appIcon());
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "The control center: start and watch jobs, hand out join tokens, contribute this machine."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("job"), QStringLiteral("Job file the Start button starts (default: the default job)."),
         QStringLiteral("file")},
        {QStringLiteral("run-dir"), QStringLiteral("Run directory (an unfinished job there resumes)."), QStringLiteral("dir")},
        {QStringLiteral("identity-dir"), QStringLiteral("The coordinator's CA and trust list."), QStringLiteral("dir"),
         identityDir()},
        {QStringLiteral("port"), QStringLiteral("Port remote workers connect to (busy: any free one)."),
         QStringLiteral("port"), QStringLiteral("7441")},
        {QStringLiteral("host"), QStringLiteral("Name remote workers reach this machine by (repeatable)."),
         QStringLiteral("name")},
        {QStringLiteral("start"), QStringLiteral("Start the job at once.")},
        {QStringLiteral("runs"),
         QStringLiteral("Folder whose run folders the Runs tab lists (default: the data location's runs folder)."),
         QStringLiteral("dir")},
        {QStringLiteral("connect"),
         QStringLiteral("Watch and command a coordinator that runs elsewhere: an operator token (flotilla token "
                        "--operator), or a file holding one."),
         QStringLiteral("token")},
        {QStringLiteral("operator-state"),
         QStringLiteral("With --connect: the operator's identity folder (default: one per coordinator); without a "
                        "token, attach again from it."),
         QStringLiteral("dir")},
    });
    parser.addOptions(GuiTours::options());
    if (const auto stop = parseOrExit(parser, arguments.mid(1).isEmpty() ? QStringList{QStringLiteral("gui")}
                                                                          : arguments.mid(arguments.value(1) == QLatin1String("gui") ? 1 : 0),
                                      QStringLiteral("gui")))
        return *stop;
    installLogSink(false);

    JobSpec job = JobSpec::defaultJob();
    if (parser.isSet(QStringLiteral("job"))) {
        auto loaded = JobSpec::load(parser.value(QStringLiteral("job")));
        if (!loaded) {
            std::fprintf(stderr, "flotilla gui: %s\n", loaded.error().toUtf8().constData());
            return ExitUsage;
        }
        job = *loaded;
    }
    GuiTours tours(parser);
    QSettings settings;
    QString runDir = parser.value(QStringLiteral("run-dir"));
    if (runDir.isEmpty() && !tours.runsItsOwnJob()) {
        // The last job, if it did not finish, resumes with its charts.
        const QString last = settings.value(QStringLiteral("job/runDir")).toString();
        if (!last.isEmpty() && QFile::exists(last + QStringLiteral("/flotilla.db"))
            && !QFile::exists(last + QStringLiteral("/model.pt")))
            runDir = last;
    }
    QStringList hosts = parser.values(QStringLiteral("host"));
    if (hosts.isEmpty())
        hosts = {QHostInfo::localHostName(), QStringLiteral("localhost"), QStringLiteral("127.0.0.1")};
    DesktopSession::Options options{parser.value(QStringLiteral("identity-dir")),
                                    quint16(parser.value(QStringLiteral("port")).toUInt()), hosts};
    tours.prepare(job, options);
    DesktopSession session(options);
    RunLibrary runs(parser.isSet(QStringLiteral("runs"))
                        ? parser.value(QStringLiteral("runs"))
                        : QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs"));
    ui::MainWindow window(&session, job, runDir, &runs);
    tours.watchWindow(window);
    window.resize(1500, 900);
    QObject::connect(&window, &ui::MainWindow::connectRequested, &window, [&window] {
        if (auto opened = connectFromDialog(&window); !opened)
            QMessageBox::warning(&window, QObject::tr("Connect to coordinator"), opened.error());
    });

    const bool attach = parser.isSet(QStringLiteral("connect")) || parser.isSet(QStringLiteral("operator-state"));
    ui::MainWindow *attached = nullptr;
    if (attach) {
        // Only the attached window: the local control center stays closed.
        std::optional<net::JoinToken> token;
        if (parser.isSet(QStringLiteral("connect"))) {
            auto decoded = tokenArgument(parser.value(QStringLiteral("connect")));
            if (!decoded) {
                std::fprintf(stderr, "flotilla gui: --connect: %s\n", decoded.error().toUtf8().constData());
                return ExitUsage;
            }
            token = *decoded;
        }
        const QString stateDir = parser.isSet(QStringLiteral("operator-state"))
                                     ? parser.value(QStringLiteral("operator-state"))
                                     : operatorStateDir(*token);
        auto opened = openRemoteWindow(token, stateDir);
        if (!opened) {
            std::fprintf(stderr, "flotilla gui: %s\n", opened.error().toUtf8().constData());
            return ExitFailure;
        }
        attached = *opened;
        tours.watchAttached(attached);
    } else {
        window.show();
    }

    if (!attach && !tours.watchJob(window, session) && parser.isSet(QStringLiteral("start")))
        window.startJob();

    // Join a fleet…: this machine's worker for someone else's coordinator, in its own window.
    std::unique_ptr<DesktopWorker> joined;
    QObject::connect(&window, &ui::MainWindow::joinFleetRequested, &window, [&] {
        const QString state = joined ? joined->agent->status().state : QString();
        if (joined && state != QLatin1String("finished") && state != QLatin1String("failed")) {
            joined->window->show();
            joined->window->raise();
            return;
        }
        auto started = joinFromDialog(&window);
        if (!started)
            QMessageBox::warning(&window, QObject::tr("Join a fleet"), started.error());
        else if (*started)
            joined = std::move(started).value();
    });

    const int code = QApplication::exec();
    tours.finish();
    if (joined)
        joined->agent->preemptionNotice();
    return code;
}

int runWorkerWindow(const QStringList &arguments)
{
    QApplication::setApplicationName(QStringLiteral("flotilla"));
    QApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QApplication::setWindowIcon(appIcon());
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Contribute this machine to a coordinator, in a window. --join without a token asks for one (or for a fleet "
        "joined before); with --state-dir and no token, the worker starts again for the fleet it joined there."));
    parser.addHelpOption();
    parser.addOptions({
        {QStringLiteral("join"), QStringLiteral("Join token."), QStringLiteral("token")},
        {QStringLiteral("state-dir"),
         QStringLiteral("This worker's identity and shard cache (default: a folder per fleet)."), QStringLiteral("dir")},
        {QStringLiteral("threads"), QStringLiteral("CPU threads to give (default: as the worker settings say)."),
         QStringLiteral("n")},
    });
    // `flotilla --join` alone (the desktop entry's action, the login entry): no token to parse.
    QStringList args = arguments;
    for (int i = 1; i < args.size(); ++i) {
        if (args[i] == QLatin1String("--join") && (i + 1 == args.size() || args[i + 1].startsWith(QLatin1String("--")))) {
            args.removeAt(i);
            break;
        }
    }
    if (const auto stop = parseOrExit(parser, args, QStringLiteral("--join")))
        return *stop;
    installLogSink(false);
    const int threads = parser.isSet(QStringLiteral("threads")) ? std::max(1, parser.value(QStringLiteral("threads")).toInt()) : 0;
    QString stateDir = parser.value(QStringLiteral("state-dir"));
    Result<std::unique_ptr<DesktopWorker>> worker = std::unique_ptr<DesktopWorker>();
    if (parser.isSet(QStringLiteral("join"))) {
        auto decoded = net::JoinToken::decode(parser.value(QStringLiteral("join")));
        if (!decoded) {
            std::fprintf(stderr, "flotilla: %s\n", decoded.error().toUtf8().constData());
            return ExitUsage;
        }
        worker = startDesktopWorker(*decoded, stateDir.isEmpty() ? fleetStateDir(*decoded) : stateDir, threads);
    } else if (!stateDir.isEmpty()) {
        worker = startDesktopWorker(std::nullopt, stateDir, threads);
    } else {
        worker = joinFromDialog(nullptr);
        if (worker && !*worker)
            return 0; // cancelled
    }
    if (!worker) {
        std::fprintf(stderr, "flotilla: %s\n", worker.error().toUtf8().constData());
        return ExitUsage;
    }
    const int code = QApplication::exec();
    (*worker)->agent->preemptionNotice();
    return code;
}

} // namespace flotilla
