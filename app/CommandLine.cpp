#include "app/CommandLine.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QTextStream>

#include <cstdio>

namespace flotilla {

namespace {

QString usage(const QString &program, const QList<Command> &commands, bool windows)
{
    QString text;
    QTextStream out(&text);
    out << "Flotilla " << FLOTILLA_VERSION
        << " trains deep-learning models on fleets of unreliable machines (VC-ASGD).\n\n"
        << "Usage: " << program << " [<command>] [options]\n"
        << "       " << program << " <command> --help    options of one command\n\n"
        << "Commands:\n";
    for (const auto &c : commands)
        out << "  " << QString::fromLatin1(c.name).leftJustified(10) << c.summary << '\n';
    if (windows)
        out << "  " << QStringLiteral("gui").leftJustified(10)
            << "The control center window (what flotilla without a command opens).\n";
    out << "\nOptions:\n"
        << "  -h, --help      Show this help.\n"
        << "  -v, --version   Show the version.\n\n";
    if (!windows) {
        out << "This is Flotilla without windows, for servers, containers and fleets of workers.\n"
            << "'" << program << " train' without options trains the default job: a small CNN on\n"
            << "Fashion-MNIST with four local workers and simulated preemptions.\n";
        return text;
    }
    out << "Without a command, flotilla opens the control center (where there is a display; else it\n"
        << "trains the default job headless). 'flotilla gui --help' lists the window's options;\n"
        << "'flotilla --join TOKEN' opens the worker-only window.\n"
        << "'flotilla train' without options trains the default job: a small CNN on Fashion-MNIST\n"
        << "with four local workers and simulated preemptions.\n";
    return text;
}

} // namespace

int runCommandLine(const QStringList &arguments, const QList<Command> &commands, bool windows)
{
    QCoreApplication::setApplicationName(QStringLiteral("flotilla"));
    QCoreApplication::setOrganizationName(QStringLiteral("Flotilla"));
    QCoreApplication::setApplicationVersion(QStringLiteral(FLOTILLA_VERSION));
    const QString program = QFileInfo(arguments.value(0, QStringLiteral("flotilla"))).completeBaseName();
    const QString first = arguments.value(1);
    if (first.isEmpty() || first == QLatin1String("-h") || first == QLatin1String("--help")
        || first == QLatin1String("help")) {
        std::fputs(usage(program, commands, windows).toUtf8().constData(), stdout);
        return first.isEmpty() ? ExitUsage : ExitOk;
    }
    if (first == QLatin1String("-v") || first == QLatin1String("--version")) {
        std::printf("%s %s\n", program.toUtf8().constData(), FLOTILLA_VERSION);
        return ExitOk;
    }
    for (const auto &c : commands)
        if (first == QLatin1String(c.name))
            return c.run(arguments.mid(1));
    std::fprintf(stderr, "%s: unknown command '%s'\n\n", program.toUtf8().constData(), first.toUtf8().constData());
    std::fputs(usage(program, commands, windows).toUtf8().constData(), stderr);
    return ExitUsage;
}

} // namespace flotilla
