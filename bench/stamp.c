/* stamp: record when this process started, for bench/fire_precision.py.
 *
 *   stamp OUTFILE JOBNAME
 *
 * The very first thing it does is read CLOCK_REALTIME, so the time is taken
 * by the job itself, not by the scheduler that started it. It then reads the
 * scheduled fire time from CRONRD_FIRE_TIME (ISO 8601 UTC, as cronrd sets it:
 * "2026-11-29T19:38:30Z", optionally with ".250" milliseconds) and appends
 *
 *   <job> <fire_time_epoch_s> <start_time_epoch_s.ns>\n
 *
 * to OUTFILE with a single write(2) on an O_APPEND descriptor, so lines from
 * concurrent runs never interleave. Exit status 0 on success, 2 on misuse.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int parse_iso_utc(const char *s, double *out)
{
    struct tm tm;
    int ms = 0;
    memset(&tm, 0, sizeof tm);
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return -1;
    const char *dot = strchr(s, '.');
    if (dot != NULL && sscanf(dot + 1, "%3d", &ms) != 1)
        ms = 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *out = (double)t + ms / 1000.0;
    return 0;
}

int main(int argc, char **argv)
{
    struct timespec start;
    clock_gettime(CLOCK_REALTIME, &start); /* first thing */

    if (argc < 3) {
        fprintf(stderr, "usage: stamp OUTFILE JOBNAME  (fire time in CRONRD_FIRE_TIME)\n");
        return 2;
    }
    const char *fire_text = getenv("CRONRD_FIRE_TIME");
    double fire = -1.0;
    if (fire_text == NULL || parse_iso_utc(fire_text, &fire) != 0) {
        fprintf(stderr, "stamp: CRONRD_FIRE_TIME missing or not ISO 8601: %s\n",
                fire_text ? fire_text : "(unset)");
        fire = -1.0;
    }
    char line[512];
    int n = snprintf(line, sizeof line, "%s %.3f %lld.%09ld\n", argv[2], fire,
                     (long long)start.tv_sec, start.tv_nsec);
    if (n <= 0 || (size_t)n >= sizeof line)
        return 2;
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror("stamp: open");
        return 2;
    }
    if (write(fd, line, (size_t)n) != n) {
        perror("stamp: write");
        return 2;
    }
    close(fd);
    return 0;
}
