/* Slow fsync for the fault-injection suite: an LD_PRELOAD library that makes
 * fsync(2) and fdatasync(2) wait the number of milliseconds written in the
 * file named by $CRONRD_FAULT_FSYNC_FILE (read at every call, so the suite
 * turns it on and off while the daemon runs; 0, empty or missing: no wait).
 * The wait is a raw clock_nanosleep(CLOCK_MONOTONIC) system call, so it is
 * not moved by libfaketime preloaded beside it. */
#define _GNU_SOURCE
#include <dlfcn.h>
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
