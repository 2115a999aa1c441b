// Linked into every test executable (an object library, so nothing needs to call it): no
// process a test starts outlives the test, even when the test aborts (QtTest's function
// watchdog, a failed assertion in a helper, a crash), so a `flotilla serve` of a test that
// timed out cannot hold a port or a CPU into the next test.
//
// How: before main(), the test moves into a process group of its own, and forks a reaper
// that stays in that group and waits on a pipe whose only writer is the test (close-on-exec,
// so the processes the test starts do not hold it). However the test ends, the kernel closes
// the pipe; the reaper then SIGKILLs the whole group, which is every process the test
// started, and their children, unless one left the group itself (setsid: the bench's
// contenders, which die with their parent instead).
//
// A test already leading its own process group (started by an interactive shell, perhaps in
// a pipeline with `tee`) is left alone: that group is the shell's job, not the test's. CTest
// starts tests inside its own group, so under `ctest` every test is covered.

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <initializer_list>
#include <sys/types.h>
#include <unistd.h>

namespace {

struct ProcessReaper
{
    ProcessReaper()
    {
        if (::getpgrp() == ::getpid() || ::setpgid(0, 0) != 0)
            return;
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0)
            return;
        const pid_t group = ::getpgrp();
        const pid_t pid = ::fork();
        if (pid < 0) {
            ::close(fds[0]);
            ::close(fds[1]);
            return;
        }
        if (pid == 0) {
            // The reaper: only async-signal-safe calls from here on.
            ::close(fds[1]);
            // It must not hold the test's output open (CTest reads it until every writer is gone).
            const int null = ::open("/dev/null", O_RDWR);
            if (null >= 0) {
                ::dup2(null, 0);
                ::dup2(null, 1);
                ::dup2(null, 2);
            }
            // A signal to the group, or to every process of the test's name (pkill), ends the
            // test; the reaper stays to clean up after it.
            for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGUSR1, SIGUSR2, SIGPIPE})
                ::signal(signal, SIG_IGN);
            char byte = 0;
            while (::read(fds[0], &byte, 1) < 0 && errno == EINTR) {
            }
            ::kill(-group, SIGKILL);
            ::_exit(0);
        }
        ::close(fds[0]);
        // fds[1] stays open for the life of the test: its closing is the reaper's signal.
    }
};

const ProcessReaper reaper;

} // namespace
