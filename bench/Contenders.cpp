#include "bench/Contenders.h"

#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>

#ifdef Q_OS_UNIX
#include <csignal>
#include <fcntl.h>
#include <unistd.h>
#endif
#ifdef Q_OS_LINUX
#include <sys/prctl.h>
#endif

#include <memory>

namespace flotilla {

Spread spread(std::vector<double> v)
{
    if (v.empty())
        return {};
    std::sort(v.begin(), v.end());
    return {v.front(), v[v.size() / 2], v.back()};
}

void joinCgroupFromChild(const char *procsFile)
{
#ifdef Q_OS_UNIX
    char digits[24];
    int n = 0;
    for (long pid = long(::getpid()); pid > 0 && n < 23; pid /= 10)
        digits[n++] = char('0' + pid % 10);
    char text[24];
    for (int i = 0; i < n; ++i)
        text[i] = digits[n - 1 - i];
    text[n] = '\n';
    const int fd = ::open(procsFile, O_WRONLY);
    if (fd < 0)
        ::_exit(126);
    const bool ok = ::write(fd, text, std::size_t(n + 1)) == n + 1;
    ::close(fd);
    if (!ok)
        ::_exit(126);
#else
    Q_UNUSED(procsFile);
#endif
}

Contender::Contender(const QString &program, const QStringList &arguments, const QString &logFile,
                     const QString &machine)
{
#ifdef Q_OS_UNIX
    // A session of its own, so that stop() ends its whole tree (DDP's ranks); and it dies with
    // the process that started it, which a process group cannot promise.
    const auto procs = std::make_shared<QByteArray>(machine.toLocal8Bit());
    m_process.setChildProcessModifier([procs] {
        ::setsid();
#ifdef Q_OS_LINUX
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        if (!procs->isEmpty())
            joinCgroupFromChild(procs->constData());
    });
#else
    Q_UNUSED(machine);
#endif
    m_process.setProcessChannelMode(QProcess::MergedChannels);
    if (!logFile.isEmpty())
        m_process.setStandardOutputFile(logFile);
    m_timer.start();
    m_process.start(program, arguments);
}

Contender::~Contender()
{
    stop();
}

void Contender::stop()
{
    if (m_process.state() == QProcess::NotRunning)
        return;
#ifdef Q_OS_UNIX
    ::kill(-static_cast<pid_t>(m_process.processId()), SIGKILL);
#endif
    m_process.kill();
    m_process.waitForFinished(10000);
}

Outcome runLines(const QString &program, const QStringList &arguments, double target, double maxSeconds,
                 std::vector<EpochLine> *epochs, const QString &machine, const std::function<void(double)> &tick,
                 AtTarget atTarget)
{
    Contender c(program, arguments, {}, machine);
    Outcome out;
    QByteArray pending;
    QByteArray tail;
    while (c.seconds() < maxSeconds) {
        c.process().waitForReadyRead(200);
        if (tick)
            tick(c.seconds());
        pending += c.process().readAll();
        qsizetype newline;
        while ((newline = pending.indexOf('\n')) >= 0) {
            const QByteArray line = pending.left(newline).trimmed();
            pending.remove(0, newline + 1);
            tail = line;
            const QJsonObject o = QJsonDocument::fromJson(line).object();
            if (o.contains(QStringLiteral("failed"))) {
                out.note = QStringLiteral("failed after %1 s: %2")
                               .arg(o.value(QStringLiteral("seconds")).toDouble(), 0, 'f', 0)
                               .arg(o.value(QStringLiteral("failed")).toString());
                return out;
            }
            if (!o.contains(QStringLiteral("epoch")))
                continue;
            const EpochLine e{o.value(QStringLiteral("epoch")).toInt(), o.value(QStringLiteral("accuracy")).toDouble(),
                              o.value(QStringLiteral("seconds")).toDouble(),
                              o.value(QStringLiteral("eval_seconds")).toDouble()};
            if (epochs)
                epochs->push_back(e);
            // The rest of the curve is read on (for the record) without moving the epoch
            // that reached the target.
            if (out.seconds < 0)
                out.epoch = e.epoch;
            if (e.accuracy >= target && out.seconds < 0) {
                out.seconds = c.seconds() - e.evalSeconds;
                if (!epochs || atTarget == AtTarget::Stop)
                    return out;
            }
        }
        if (!c.running() && pending.isEmpty() && c.process().bytesAvailable() == 0) {
            if ((out.seconds < 0 && target <= 1.0) || c.process().exitCode() != 0)
                out.note = QStringLiteral("ended (exit %1) %2after %3 epochs; last output: %4")
                               .arg(c.process().exitCode())
                               .arg(out.seconds < 0 ? QStringLiteral("without reaching the target ") : QString())
                               .arg(out.epoch)
                               .arg(QString::fromUtf8(tail.left(200)));
            return out;
        }
    }
    out.note = QStringLiteral("not reached in %1 s (%2 epochs)").arg(maxSeconds).arg(out.epoch);
    return out;
}

} // namespace flotilla
