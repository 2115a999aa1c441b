#include "bench/Contenders.h"

#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>

#ifdef Q_OS_UNIX
#include <csignal>
#include <unistd.h>
#endif

namespace flotilla {

Spread spread(std::vector<double> v)
{
    if (v.empty())
        return {};
    std::sort(v.begin(), v.end());
    return {v.front(), v[v.size() / 2], v.back()};
}

Contender::Contender(const QString &program, const QStringList &arguments, const QString &logFile)
{
#ifdef Q_OS_UNIX
    m_process.setChildProcessModifier([] { ::setsid(); });
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
                 std::vector<EpochLine> *epochs)
{
    Contender c(program, arguments, {});
    Outcome out;
    QByteArray pending;
    QByteArray tail;
    while (c.seconds() < maxSeconds) {
        c.process().waitForReadyRead(200);
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
            out.epoch = e.epoch;
            if (e.accuracy >= target && out.seconds < 0) {
                out.seconds = c.seconds() - e.evalSeconds;
                if (!epochs)
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
