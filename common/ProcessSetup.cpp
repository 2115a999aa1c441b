#include "common/ProcessSetup.h"

#include <QThread>
#include <QtGlobal>

#include <algorithm>
#include <cstdlib> // defines __GLIBC__ where the C library is glibc
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#ifdef Q_OS_UNIX
#include <pthread.h>
#include <sys/resource.h>
#endif
#ifdef Q_OS_MACOS
#include <climits>
#endif
#ifdef Q_OS_LINUX
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef Q_OS_MACOS
#include <mach-o/dyld.h>
#include <sys/sysctl.h>
#include <unistd.h>
#endif
#ifdef Q_OS_WIN
#include <windows.h>
#endif

namespace flotilla {

void keepLargeBuffersForReuse()
{
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
#endif
}

const char *raiseOpenFileLimit()
{
#ifdef Q_OS_UNIX
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) != 0)
        return "getrlimit(RLIMIT_NOFILE) failed";
    if (files.rlim_cur >= files.rlim_max)
        return "";
    files.rlim_cur = files.rlim_max;
#ifdef Q_OS_MACOS
    files.rlim_cur = std::min<rlim_t>(files.rlim_cur, OPEN_MAX);
#endif
    if (setrlimit(RLIMIT_NOFILE, &files) != 0)
        return "setrlimit(RLIMIT_NOFILE) failed";
#endif
    return "";
}

void waitPassivelyInThreadPools(char *argv[])
{
#if defined(Q_OS_LINUX) || defined(Q_OS_MACOS)
    for (const char *chosen : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"})
        if (std::getenv(chosen))
            return; // the user's choice, or this is the restarted program
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0)
        return;
#if defined(Q_OS_LINUX)
    execv("/proc/self/exe", argv);
#else
    char path[PATH_MAX];
    uint32_t size = sizeof(path);
    if (_NSGetExecutablePath(path, &size) == 0)
        execv(path, argv);
#endif
    // Still here: the restart failed. Train with the runtime's defaults rather than not at all.
#else
    Q_UNUSED(argv);
#endif
}

void yieldCpuToOtherWork()
{
#ifdef Q_OS_LINUX
    // Linux's niceness is per thread; QThread's priorities do nothing under SCHED_OTHER.
    // Never less nice than the thread already is (a process started under nice keeps it).
    const id_t thread = id_t(syscall(SYS_gettid));
    setpriority(PRIO_PROCESS, thread, std::max(10, getpriority(PRIO_PROCESS, thread)));
#else
    QThread::currentThread()->setPriority(QThread::LowestPriority);
#endif
}

void nameThisThread(const char *name)
{
#if defined(Q_OS_LINUX)
    char shortName[16] = {};
    std::strncpy(shortName, name, sizeof(shortName) - 1); // the kernel's limit: 15 and the NUL
    pthread_setname_np(pthread_self(), shortName);
#elif defined(Q_OS_MACOS)
    pthread_setname_np(name);
#else
    Q_UNUSED(name);
#endif
}

long long physicalMemoryMb()
{
#if defined(Q_OS_LINUX)
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long pageSize = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && pageSize > 0 ? (long long)pages * pageSize / (1024 * 1024) : 0;
#elif defined(Q_OS_MACOS)
    unsigned long long bytes = 0;
    size_t size = sizeof(bytes);
    return sysctlbyname("hw.memsize", &bytes, &size, nullptr, 0) == 0 ? (long long)(bytes >> 20) : 0;
#elif defined(Q_OS_WIN)
    MEMORYSTATUSEX status{};
    status.dwLength = sizeof(status);
    return GlobalMemoryStatusEx(&status) ? (long long)(status.ullTotalPhys >> 20) : 0;
#else
    return 0;
#endif
}

} // namespace flotilla
