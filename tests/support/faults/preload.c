/* The fault-injection suite's LD_PRELOAD library, preloaded before
 * libfaketime.
 *
 * Slow fsync: fsync(2) and fdatasync(2) wait the number of milliseconds
 * written in the file named by $CRONRD_FAULT_FSYNC_FILE (read at every call,
 * so the suite turns it on and off while the daemon runs; 0, empty or
 * missing: no wait).
 *
 * A libfaketime 0.9.10 bug worked around: with FAKETIME_DONT_FAKE_MONOTONIC
 * its clock_nanosleep() fails with EINVAL for an absolute CLOCK_MONOTONIC
 * deadline, which is how Python's time.sleep() waits (so a daemon under
 * faketime crashed in Popen.wait(timeout)). A host whose wall clock is off
 * has no such bug, so CLOCK_MONOTONIC sleeps go straight to the kernel. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long delay_ms(void)
{
    const char *path = getenv("CRONRD_FAULT_FSYNC_FILE");
    char buf[32];
    ssize_t n;
    int fd;

    if (path == NULL || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

static void slow_down(void)
{
    long ms = delay_ms();
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
        ;
}

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                    struct timespec *rem)
{
    static int (*real)(clockid_t, int, const struct timespec *, struct timespec *);

    if (clock == CLOCK_MONOTONIC)
        return syscall(SYS_clock_nanosleep, clock, flags, req, rem) == 0 ? 0 : errno;
    if (real == NULL)
        real = (int (*)(clockid_t, int, const struct timespec *, struct timespec *))
            dlsym(RTLD_NEXT, "clock_nanosleep");
    return real(clock, flags, req, rem);
}

int fsync(int fd)
{
    static int (*real)(int);

    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow_down();
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);

    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow_down();
    return real(fd);
}
