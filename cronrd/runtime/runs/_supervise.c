/*
 * The run supervisor in C: the same process, records and news as
 * supervisor.py's _Supervisor, without a Python process per run.
 *
 * The fork server (supervisor.py, in Python) calls spawn() for each run. It
 * converts the request in the fork server, then fork()s; the child runs
 * supervise() below, plain C that never returns into Python, and _exit()s.
 * A Python child costs ~5 ms of CPU per run (copy-on-write faults over the
 * interpreter's heap, imports, json, teardown); this one costs a fraction of
 * a millisecond, which is what lets a hundred runs released by one gate
 * start within the time the kernel needs to exec them.
 *
 * Keep the two implementations in step: tests/unit/runtime/runs/
 * test_supervisor.py runs every test against both. Where a run's job must
 * switch its ids itself (no setpriv on the host), the fork server uses the
 * Python supervisor.
 *
 * What the child does, in order (see supervisor.py for why):
 *   setsid; open the record (O_APPEND, O_NOFOLLOW, 0600); start the job with
 *   posix_spawn in a session of its own (stdin the gate; stdout the stdout
 *   pipe, or the env memfd with the stdout pipe as 3; stderr the stderr
 *   pipe), or with fork to write why it cannot start into the log; nice +10;
 *   record and announce "spawned"; then copy the output into the log, its
 *   index and its tail (output.py: files and format), record "started" at the
 *   STARTED marker, announce "ready" at the READY marker, record and announce
 *   "exited" with the raw wait status, and record "closed" once every writer
 *   of the output pipe is gone.
 */
#ifdef CRONRD_ZYGOTE_PROGRAM
#define _GNU_SOURCE  /* Python.h defines it for the module */
#else
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_MARK 0x01
#define STARTED_MARK 0x02
#define READ_CHUNK 65536
#define NOTIFY_TIMEOUT_S 2
#define EXIT_NOTIFY_TRIES 5
#define SUPERVISOR_NICE 10
#define LINE_MAX_BYTES 4096
#define EXIT_LINGER_MIN 0.05  /* seconds; supervisor.py EXIT_LINGER */
#define EXIT_LINGER_MAX 1.0
/* output.py: the record, the streams, the tail ring */
#define REC_SIZE 32
#define S_ALL 0
#define S_STDOUT 1
#define S_STDERR 2
#define S_CRONRD 3
#define TAIL_HEADER 0xFE
#define MERGE_WINDOW 0.1
#define MAX_STRETCH (1LL << 30)

enum phase { PHASE_READY, PHASE_GATE, PHASE_RUN };

/* One index record being grown (output.py MERGE_WINDOW). */
struct stretch {
    int valid, stream;
    long long off, pos, len, at;
    double time;
};

struct sup {
    const char *key, *notify, *record, *boot, *cwd, *log_name;
    char *const *argv;
    char *const *envp;
    char *const *controls;  /* launch.controls(): applied before the job's exec */
    long ncontrols;
    long long cap, head, tail, pos, idx_len, seq, slots;
    int gate_fd, log_fd, dir_fd, env_fd, rec, sock, out, err;
    int idx, ring, tidx;  /* the sidecars, -1 until opened (or when they cannot be) */
    int ring_tried;
    char last_byte;
    struct stretch last[2];  /* [0] the head's, [1] the tail's */
    enum phase phase;
    pid_t pid;
};

/* -- a line of JSON, bounded ------------------------------------------- */

struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
    int overflow;
};

static void put(struct line *l, const char *fmt, ...)
{
    va_list ap;
    size_t room = sizeof(l->buf) - l->len;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(l->buf + l->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        l->overflow = 1;
    else
        l->len += (size_t)n;
}

/* A JSON string: the key and boot id are ours, but nothing unescaped goes out. */
static void put_str(struct line *l, const char *s)
{
    put(l, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(l, "\\%c", c);
        else if (c < 0x20)
            put(l, "\\u%04x", c);
        else
            put(l, "%c", c);
    }
    put(l, "\"");
}

static void put_ticks(struct line *l, const char *name, long long ticks)
{
    if (ticks < 0)
        put(l, ",\"%s\":null", name);
    else
        put(l, ",\"%s\":%lld", name, ticks);
}

static double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The process's start time in clock ticks since boot (/proc/PID/stat field
 * 22), or -1. */
static long long start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    int fd, field;
    ssize_t n;
    char *p, *end;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    /* Fields after the command: state is field 3, starttime field 22. */
    for (field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
        if (!*p)
            return -1;
    }
    while (*p == ' ')
        p++;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno)
        return -1;
    return v;
}

/* -- record and news ---------------------------------------------------- */

static void record_line(struct sup *s, struct line *l)
{
    put(l, ",\"at\":%.6f}\n", now_wall());
    if (!l->overflow)
        (void)write_all(s->rec, l->buf, l->len);  /* a full disk must not stop the run */
}

static void disconnect(struct sup *s)
{
    if (s->sock >= 0) {
        close(s->sock);
        s->sock = -1;
    }
}

enum sent { SENT, TIMED_OUT, BROKEN };

static enum sent try_send(struct sup *s, const char *msg, size_t len)
{
    if (s->sock < 0) {
        struct sockaddr_un addr;
        struct timeval tv = {NOTIFY_TIMEOUT_S, 0};
        if (strlen(s->notify) >= sizeof(addr.sun_path))
            return BROKEN;
        s->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s->sock < 0)
            return BROKEN;
        setsockopt(s->sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        memset(&addr, 0, sizeof(addr));
        addr.sun_family = AF_UNIX;
        strcpy(addr.sun_path, s->notify);
        while (connect(s->sock, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
            if (errno == EINTR)
                continue;
            return (errno == EAGAIN || errno == EINPROGRESS) ? TIMED_OUT : BROKEN;
        }
    }
    while (len > 0) {
        ssize_t w = send(s->sock, msg, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? TIMED_OUT : BROKEN;
        }
        msg += w;
        len -= (size_t)w;
    }
    return SENT;
}

/* One line of news to the daemon. A connection broken by a daemon restart is
 * made again (to the new daemon) once; with no daemon listening the news is
 * dropped: the record says it all. */
static void notify(struct sup *s, struct line *l, int tries)
{
    int reconnected = 0;
    put(l, "}\n");
    if (l->overflow)
        return;
    while (tries > 0) {
        int fresh = s->sock < 0;
        switch (try_send(s, l->buf, l->len)) {
        case SENT:
            return;
        case TIMED_OUT:
            tries--;  /* the daemon is busy */
            disconnect(s);
            break;
        case BROKEN:
            disconnect(s);
            if (fresh || reconnected)
                return;  /* no daemon listening */
            reconnected = 1;  /* the daemon restarted: tell the new one */
            break;
        }
    }
}

static void news(struct line *l, struct sup *s, const char *event)
{
    l->len = 0;
    l->overflow = 0;
    put(l, "{\"key\":");
    put_str(l, s->key);
    put(l, ",\"event\":\"%s\"", event);
}

static void event(struct line *l, const char *event)
{
    l->len = 0;
    l->overflow = 0;
    put(l, "{\"event\":\"%s\"", event);
}

/* -- the job's output (output.py) -------------------------------------- */

static void le(unsigned char *b, unsigned long long v, int n)
{
    int i;
    for (i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static void pack(unsigned char *b, long long off, long long pos, long long len, int stream,
                 double t)
{
    unsigned long long tb;
    memcpy(&tb, &t, sizeof(tb));
    le(b, (unsigned long long)off, 8);
    le(b + 8, (unsigned long long)pos, 8);
    le(b + 16, (unsigned long long)len, 4);
    b[20] = (unsigned char)stream;
    b[21] = b[22] = b[23] = 0;
    le(b + 24, tb, 8);
}

static unsigned long long unle(const unsigned char *b, int n)
{
    unsigned long long v = 0;
    int i;
    for (i = n - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static int open_side(struct sup *s, const char *suffix, int flags)
{
    char name[4096];
    if (snprintf(name, sizeof(name), "%s%s", s->log_name, suffix) >= (int)sizeof(name))
        return -1;
    return openat(s->dir_fd, name, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
}

static void unlink_side(struct sup *s, const char *suffix)
{
    char name[4096];
    if (snprintf(name, sizeof(name), "%s%s", s->log_name, suffix) < (int)sizeof(name))
        unlinkat(s->dir_fd, name, 0);
}

static void pwrite_all(int fd, const char *p, size_t n, long long at)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
        at += w;
    }
}

static void index_stretch(struct sup *s, int which, int fd, long long off, long long pos,
                          long long n, int stream, double now)
{
    struct stretch *l = &s->last[which];
    unsigned char b[REC_SIZE];
    int full = which == 0 && s->idx_len >= REC_SIZE * (64 + s->head / 256);  /* head_records */
    if (l->valid && l->pos + l->len == pos && l->len + n <= MAX_STRETCH &&
        (full || (l->stream == stream && now - l->time < MERGE_WINDOW))) {
        l->len += n;
        if (l->stream != stream)
            l->stream = S_ALL;  /* past head_records: the streams are no longer told apart */
    } else {
        l->valid = 1;
        l->stream = stream;
        l->off = off;
        l->pos = pos;
        l->len = n;
        l->time = now;
        if (which == 0) {
            l->at = s->idx_len;
            s->idx_len += REC_SIZE;
        } else {
            l->at = REC_SIZE * (1 + s->seq % s->slots);
            s->seq++;
        }
    }
    if (fd >= 0) {
        pack(b, l->off, l->pos, l->len, l->stream, l->time);
        pwrite_all(fd, (const char *)b, REC_SIZE, l->at);
    }
}

static void write_output(struct sup *s, int stream, const char *data, size_t n)
{
    double now = now_wall();
    if (s->pos == 0 && s->idx < 0)  /* a silent run has no index */
        s->idx = open_side(s, ".idx", O_WRONLY | O_TRUNC);
    if (s->pos < s->head) {
        size_t k = (long long)n < s->head - s->pos ? n : (size_t)(s->head - s->pos);
        (void)write_all(s->log_fd, data, k);
        index_stretch(s, 0, s->idx, s->pos, s->pos, (long long)k, stream, now);
        s->pos += (long long)k;
        s->last_byte = data[k - 1];
        data += k;
        n -= k;
    }
    if (n == 0)
        return;
    if (s->tail == 0) {
        s->pos += (long long)n;
        return;
    }
    if (!s->ring_tried) {  /* once: without it the tail is dropped, the run goes on */
        unsigned char b[REC_SIZE];
        s->ring_tried = 1;
        s->ring = open_side(s, ".tail", O_RDWR | O_TRUNC);
        s->tidx = open_side(s, ".tidx", O_RDWR | O_TRUNC);
        if (s->tidx >= 0) {
            pack(b, s->head, s->tail, s->slots, TAIL_HEADER, now);
            pwrite_all(s->tidx, (const char *)b, REC_SIZE, 0);
        }
    }
    if ((long long)n > s->tail) {  /* only its last bytes can stay */
        s->pos += (long long)n - s->tail;
        data += (long long)n - s->tail;
        n = (size_t)s->tail;
    }
    {
        long long pos = s->pos;
        size_t left = n;
        const char *p = data;
        while (left > 0 && s->ring >= 0) {
            long long at = (pos - s->head) % s->tail;
            size_t k = (long long)left < s->tail - at ? left : (size_t)(s->tail - at);
            pwrite_all(s->ring, p, k, at);
            p += k;
            left -= k;
            pos += (long long)k;
        }
    }
    index_stretch(s, 1, s->tidx, 0, s->pos, (long long)n, stream, now);
    s->pos += (long long)n;
}

static long long dropped(struct sup *s)
{
    long long d = s->pos - s->head - s->tail;
    return d > 0 ? d : 0;
}

static const char *size_text(long long n, char *buf, size_t len)
{
    static const char *units[] = {"GiB", "MiB", "KiB"};
    static const long long sizes[] = {1LL << 30, 1LL << 20, 1LL << 10};
    int i;
    for (i = 0; i < 3; i++)
        if (n >= sizes[i] && n % sizes[i] == 0) {
            snprintf(buf, len, "%lld%s", n / sizes[i], units[i]);
            return buf;
        }
    snprintf(buf, len, "%lld bytes", n);
    return buf;
}

static int by_pos(const void *a, const void *b)
{
    long long x = (long long)unle((const unsigned char *)a + 8, 8);
    long long y = (long long)unle((const unsigned char *)b + 8, 8);
    return x < y ? -1 : x > y;
}

/* Move the tail into the log (output.py). */
static void finish_output(struct sup *s)
{
    double now = now_wall();
    long long kept, start, off = s->head;
    unsigned char rec[REC_SIZE];
    if (s->pos <= s->head)
        return;
    kept = s->pos - s->head < s->tail ? s->pos - s->head : s->tail;
    start = s->pos - kept;
    if (start > s->head) {
        char note[300], a[32], b[32], c[32];
        int k = snprintf(note, sizeof(note),
                         "%scronrd: %lld bytes dropped here (max_log_bytes %s keeps the first %s "
                         "and the last %s)\n", s->last_byte != '\n' ? "\n" : "",
                         start - s->head, size_text(s->cap, a, sizeof(a)),
                         size_text(s->head, b, sizeof(b)), size_text(s->tail, c, sizeof(c)));
        if (k > 0 && (size_t)k < sizeof(note)) {
            (void)write_all(s->log_fd, note, (size_t)k);
            pack(rec, off, start, k, S_CRONRD, now);
            if (s->idx >= 0)
                pwrite_all(s->idx, (const char *)rec, REC_SIZE, s->idx_len);
            s->idx_len += REC_SIZE;
            off += k;
        }
    }
    if (s->ring >= 0 && kept > 0) {
        static char buf[READ_CHUNK];
        long long pos = start;
        while (pos < s->pos) {
            long long at = (pos - s->head) % s->tail, want = READ_CHUNK;
            ssize_t r;
            if (want > s->tail - at)
                want = s->tail - at;
            if (want > s->pos - pos)
                want = s->pos - pos;
            r = pread(s->ring, buf, (size_t)want, (off_t)at);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            (void)write_all(s->log_fd, buf, (size_t)r);
            pos += r;
        }
        if (s->tidx >= 0) {
            size_t size = (size_t)s->slots * REC_SIZE;
            unsigned char *table = malloc(size);
            ssize_t got = table ? pread(s->tidx, table, size, REC_SIZE) : -1;
            if (got > 0) {
                size_t i, n = (size_t)got / REC_SIZE;
                qsort(table, n, REC_SIZE, by_pos);
                for (i = 0; i < n; i++) {
                    unsigned char *r = table + i * REC_SIZE;
                    long long rpos = (long long)unle(r + 8, 8), len = (long long)unle(r + 16, 4);
                    long long lo = rpos > start ? rpos : start;
                    long long hi = rpos + len < s->pos ? rpos + len : s->pos;
                    double t;
                    unsigned long long tb = unle(r + 24, 8);
                    if (len <= 0 || (r[20] != S_STDOUT && r[20] != S_STDERR) || hi <= lo)
                        continue;
                    memcpy(&t, &tb, sizeof(t));
                    pack(rec, off + lo - start, lo, hi - lo, r[20], t);
                    if (s->idx >= 0)
                        pwrite_all(s->idx, (const char *)rec, REC_SIZE, s->idx_len);
                    s->idx_len += REC_SIZE;
                }
            }
            free(table);
        }
    }
    unlink_side(s, ".tail");  /* the ring without LOG.tail is a finished one */
    unlink_side(s, ".tidx");
}

static void output(struct sup *s, int stream, const char *data, size_t n)
{
    struct line l;
    while (n > 0 && s->phase != PHASE_RUN && stream == S_STDOUT) {
        char marker = s->phase == PHASE_READY ? READY_MARK : STARTED_MARK;
        if (data[0] != marker)
            break;  /* output before the marker: why the run could not start */
        data++;
        n--;
        if (s->phase == PHASE_READY) {
            s->phase = PHASE_GATE;
            news(&l, s, "ready");
            notify(s, &l, 1);
        } else {
            s->phase = PHASE_RUN;
            event(&l, "started");
            record_line(s, &l);
        }
    }
    if (n > 0)
        write_output(s, stream, data, n);
}

/* Copy what the pipe holds now (one read if once); 0 once it is closed. */
static int drain(struct sup *s, int fd, int stream, int once)
{
    static char buf[READ_CHUNK];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            return 0;
        }
        if (n == 0)
            return 0;
        output(s, stream, buf, (size_t)n);
        if (once)
            return 1;
    }
}

/* -- starting the job --------------------------------------------------- */

static const int job_signals[] = {SIGPIPE, SIGXFSZ, SIGINT, SIGHUP, SIGTERM, SIGCHLD, SIGQUIT};
#define N_JOB_SIGNALS (sizeof(job_signals) / sizeof(job_signals[0]))

/* The job's process controls, in order (supervisor.py apply_controls does
 * the same): 0, or -1 with the reason in msg. */
static int apply_controls(struct sup *s, char *msg, size_t size)
{
    long i;
    for (i = 0; i < s->ncontrols; i++) {
        const char *c = s->controls[i];
        const char *what = "a control";
        char label[64] = "";
        unsigned long long soft, hard;
        long long v;
        int res, n = 0, ok;
        errno = EINVAL;
        if (sscanf(c, "rlimit %d %llu %llu %63s%n", &res, &soft, &hard, label, &n) == 4 &&
            c[n] == '\0') {
            struct rlimit rl;
            rl.rlim_cur = (rlim_t)soft;
            rl.rlim_max = (rlim_t)hard;
            what = label;
            ok = setrlimit(res, &rl) == 0;
        } else if (sscanf(c, "nice %lld%n", &v, &n) == 1 && c[n] == '\0') {
            what = "nice";
            ok = setpriority(PRIO_PROCESS, 0, (int)v) == 0;
        } else if (sscanf(c, "ioprio %lld%n", &v, &n) == 1 && c[n] == '\0') {
            what = "ioclass/ioprio";
            ok = syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, (int)v) == 0;
        } else if (strncmp(c, "cgroup /", 8) == 0) {
            char path[4096];
            int fd, k = snprintf(path, sizeof(path), "%s/cgroup.procs", c + 7);
            what = "limits (the run's cgroup)";
            fd = k > 0 && (size_t)k < sizeof(path) ? open(path, O_WRONLY | O_CLOEXEC) : -1;
            ok = fd >= 0 && write(fd, "0", 1) == 1;
            if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
            }
        } else if (sscanf(c, "umask %lld%n", &v, &n) == 1 && c[n] == '\0') {
            what = "umask";
            umask((mode_t)v);
            ok = 1;
        } else {
            ok = 0;
        }
        if (!ok) {
            snprintf(msg, size, "cronrd: run not started: cannot apply %s (%s): %s\n", what, c,
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The job's descriptors (supervisor.py _job_fds): stdin the gate, stdout
 * and stderr the two pipes; a job that switches users reads its environment
 * from stdout (the memfd) and finds the stdout pipe as 3. Returns how many. */
static int job_fds(struct sup *s, int out_fd, int err_fd, int from[4])
{
    from[0] = s->gate_fd;
    from[1] = s->env_fd >= 0 ? s->env_fd : out_fd;
    from[2] = err_fd;
    from[3] = out_fd;
    return s->env_fd >= 0 ? 4 : 3;
}

static void exec_job(struct sup *s, int out_fd, int err_fd)
{
    /* In a fork of the supervisor: never returns. */
    size_t i;
    char msg[512];
    const char *why = NULL;
    int from[4], n = job_fds(s, out_fd, err_fd, from), k;
    for (i = 0; i < N_JOB_SIGNALS; i++)
        signal(job_signals[i], SIG_DFL);
    setsid();
    for (k = 0; k < n && !why; k++)
        if (dup2(from[k], k) < 0)
            why = strerror(errno);
    if (!why && chdir(s->cwd) < 0)
        why = strerror(errno);
    if (!why && apply_controls(s, msg, sizeof(msg)) < 0) {
        (void)write_all(2, msg, strnlen(msg, sizeof(msg)));
        _exit(127);
    }
    if (!why) {
        syscall(SYS_close_range, (unsigned)n, ~0U, 0U);  /* only 0-2 (3) go to the job */
        execve(s->argv[0], s->argv, s->envp);
        why = strerror(errno);
    }
    k = snprintf(msg, sizeof(msg), "cronrd: cannot start the run: %s\n", why);
    if (k > 0)
        (void)write_all(2, msg, (size_t)k < sizeof(msg) ? (size_t)k : sizeof(msg) - 1);
    _exit(127);
}

static pid_t spawn_job(struct sup *s, int out_fd, int err_fd)
{
    pid_t pid = -1;
    /* posix_spawn cannot apply the controls: those jobs fork. */
    if (s->ncontrols == 0 && chdir(s->cwd) == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        sigset_t def;
        size_t i;
        int rc, from[4], n = job_fds(s, out_fd, err_fd, from), k;
        sigemptyset(&def);
        for (i = 0; i < N_JOB_SIGNALS; i++)
            sigaddset(&def, job_signals[i]);
        posix_spawn_file_actions_init(&fa);
        for (k = 0; k < n; k++)
            posix_spawn_file_actions_adddup2(&fa, from[k], k);
        posix_spawnattr_init(&at);
        posix_spawnattr_setsigdefault(&at, &def);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF);
        rc = posix_spawn(&pid, s->argv[0], &fa, &at, s->argv, s->envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (rc == 0)
            return pid;
    }
    pid = fork();
    if (pid == 0)
        exec_job(s, out_fd, err_fd);
    return pid;
}

/* -- the supervisor ------------------------------------------------------ */

/* All said and recorded: before it ends, the supervisor yields the CPU
 * (SCHED_IDLE) and waits a random EXIT_LINGER_MIN..MAX seconds
 * (supervisor.py says why: ending is costly when a hundred end at once). */
static void linger(void)
{
    struct sched_param idle = {0};
    struct timespec ts;
    unsigned int r = 0;
    long span = (long)((EXIT_LINGER_MAX - EXIT_LINGER_MIN) * 1e6);
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
        r = (unsigned int)getpid() * 2654435761u;
    long us = (long)(EXIT_LINGER_MIN * 1e6) + (long)(r % (unsigned long)span);
    sched_setscheduler(0, SCHED_IDLE, &idle);
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000;
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int supervise(struct sup *s)
{
    struct line l;
    int out[2], err[2], pidfd, status = 0, have_status = 0, open_pipes = 2, i;
    struct pollfd pf[3];
    static const int streams[2] = {S_STDOUT, S_STDERR};

    prctl(PR_SET_NAME, "cronrd-sup", 0, 0, 0);  /* what ps -o comm and top show */
    signal(SIGCHLD, SIG_DFL);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    setsid();
    s->rec = open(s->record, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->rec < 0)
        return 1;
    /* Received over a socket, so not close-on-exec: only the job's dup2s
     * may carry them into the job. */
    fcntl(s->gate_fd, F_SETFD, FD_CLOEXEC);
    fcntl(s->log_fd, F_SETFD, FD_CLOEXEC);
    fcntl(s->dir_fd, F_SETFD, FD_CLOEXEC);
    if (s->env_fd >= 0)
        fcntl(s->env_fd, F_SETFD, FD_CLOEXEC);
    s->head = s->cap - s->cap / 2;
    s->tail = s->cap / 2;
    s->slots = s->tail / 4096 < 64 ? 64 : s->tail / 4096 > 4096 ? 4096 : s->tail / 4096;
    s->last_byte = '\n';
    s->ring = s->tidx = s->idx = -1;  /* the index is opened at the first output */
    /* Pipe ends above the job's descriptors 0-3, so no dup2 meets one in place. */
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
        return 1;
    for (i = 0; i < 2; i++) {
        int *p = i ? err : out, k;
        for (k = 0; k < 2; k++) {
            int high = fcntl(p[k], F_DUPFD_CLOEXEC, 10);
            if (high < 0)
                return 1;
            close(p[k]);
            p[k] = high;
        }
    }
    s->pid = spawn_job(s, out[1], err[1]);
    close(out[1]);
    close(err[1]);
    if (s->pid < 0)
        return 1;
    s->out = out[0];
    s->err = err[0];
    /* The job has its priority; the supervisor yields to it (supervisor.py). */
    errno = 0;
    int prio = getpriority(PRIO_PROCESS, 0);
    if (errno == 0)
        setpriority(PRIO_PROCESS, 0, prio + SUPERVISOR_NICE > 19 ? 19 : prio + SUPERVISOR_NICE);
    close(s->gate_fd);
    if (s->env_fd >= 0)
        close(s->env_fd);

    event(&l, "spawned");
    put(&l, ",\"boot\":");
    put_str(&l, s->boot);
    put(&l, ",\"sup\":%d", (int)getpid());
    put_ticks(&l, "sup_start", start_ticks(getpid()));
    put(&l, ",\"pid\":%d", (int)s->pid);
    put_ticks(&l, "pid_start", start_ticks(s->pid));
    record_line(s, &l);
    news(&l, s, "spawned");
    put(&l, ",\"pid\":%d", (int)s->pid);
    notify(s, &l, 1);

    fcntl(s->out, F_SETFL, fcntl(s->out, F_GETFL) | O_NONBLOCK);
    fcntl(s->err, F_SETFL, fcntl(s->err, F_GETFL) | O_NONBLOCK);
    pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
    if (pidfd < 0)
        return 1;
    pf[0].fd = s->out;
    pf[0].events = POLLIN;
    pf[1].fd = s->err;
    pf[1].events = POLLIN;
    pf[2].fd = pidfd;
    pf[2].events = POLLIN;
    while (open_pipes > 0 || !have_status) {
        if (poll(pf, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        /* One read per ready pipe and turn: the two streams interleave in the
         * order they came, as closely as two pipes can tell. */
        for (i = 0; i < 2; i++)
            if (pf[i].fd >= 0 && pf[i].revents && !drain(s, pf[i].fd, streams[i], 1)) {
                pf[i].fd = -1;
                open_pipes--;
            }
        if (!have_status && pf[2].revents) {
            pid_t w;
            while ((w = waitpid(s->pid, &status, 0)) < 0 && errno == EINTR)
                ;
            if (w < 0)
                return 1;  /* no status to record: the daemon calls the run lost */
            have_status = 1;
            pf[2].fd = -1;
            pf[2].revents = 0;
            close(pidfd);
            for (i = 0; i < 2; i++)
                if (pf[i].fd >= 0 && !drain(s, pf[i].fd, streams[i], 0)) {
                    pf[i].fd = -1;
                    open_pipes--;
                }
            int started = s->phase == PHASE_RUN;
            event(&l, "exited");
            put(&l, ",\"status\":%d,\"started\":%s,\"written\":%lld,\"truncated\":%s",
                status, started ? "true" : "false", s->pos,
                dropped(s) > 0 ? "true" : "false");
            record_line(s, &l);
            news(&l, s, "exited");
            put(&l, ",\"status\":%d,\"started\":%s,\"written\":%lld", status,
                started ? "true" : "false", s->pos);
            notify(s, &l, EXIT_NOTIFY_TRIES);
        }
    }
    /* Grandchildren that kept the output open have closed it too. */
    finish_output(s);
    event(&l, "closed");
    put(&l, ",\"written\":%lld,\"dropped\":%lld", s->pos, dropped(s));
    record_line(s, &l);
    linger();
    return 0;
}

/* Fork the supervisor of ``s``: its pidfd (and *pid), or -1 with errno
 * set (*what names the step). The child closes close_fd and waits for a go,
 * sent once its pidfd is taken: a supervisor that would end at once cannot
 * be reaped (its pid reused) first, and one whose pidfd cannot be taken
 * never starts a job. */
static int fork_supervisor(struct sup *s, int close_fd, pid_t *pid, const char **what)
{
    int go[2], pidfd, err;
    *what = "pipe";
    if (pipe2(go, O_CLOEXEC) < 0)
        return -1;
    *what = "fork";
    *pid = fork();
    if (*pid == 0) {
        /* The supervisor: plain C from here on, never back into Python. */
        char c = 0;
        ssize_t r;
        if (close_fd >= 0)
            close(close_fd);
        close(go[1]);
        while ((r = read(go[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (r != 1 || c != 'g')
            _exit(1);
        close(go[0]);
        _exit(supervise(s));
    }
    err = errno;
    close(go[0]);
    if (*pid < 0) {
        close(go[1]);
        errno = err;
        return -1;
    }
    *what = "pidfd_open";
    pidfd = (int)syscall(SYS_pidfd_open, *pid, 0);
    if (pidfd < 0) {
        err = errno;
        close(go[1]);  /* the supervisor ends without starting anything */
        errno = err;
        return -1;
    }
    *what = "write";
    if (write(go[1], "g", 1) != 1) {
        err = errno;
        close(go[1]);
        close(pidfd);
        errno = err;
        return -1;
    }
    close(go[1]);
    return pidfd;
}

#ifndef CRONRD_ZYGOTE_PROGRAM
/* -- the Python side: spawn() in the fork server -------------------------- */

/* str -> bytes in the filesystem encoding, without NUL; appended to keep. */
static const char *fs_bytes(PyObject *keep, PyObject *str, const char *what)
{
    PyObject *b;
    if (!PyUnicode_Check(str)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return NULL;
    }
    b = PyUnicode_EncodeFSDefault(str);
    if (!b)
        return NULL;
    if (PyList_Append(keep, b) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    Py_DECREF(b);
    if ((size_t)PyBytes_GET_SIZE(b) != strlen(PyBytes_AS_STRING(b))) {
        PyErr_Format(PyExc_ValueError, "%s contains a NUL byte", what);
        return NULL;
    }
    return PyBytes_AS_STRING(b);
}

static PyObject *py_spawn(PyObject *self, PyObject *args)
{
    PyObject *key, *notify_path, *record, *boot, *cwd, *log_name, *argv, *env, *ctl = NULL,
             *keep = NULL;
    long long cap;
    int ready, gate_fd, log_fd, dir_fd, env_fd, close_fd, pidfd;
    const char *what;
    char **cargv = NULL, **cenv = NULL, **cctl = NULL;
    struct sup s;
    Py_ssize_t n, i, pos = 0;
    PyObject *k, *v, *result = NULL;
    pid_t pid;

    (void)self;
    if (!PyArg_ParseTuple(args, "UUUUUUO!O!Lpiiiii|O!", &key, &notify_path, &record, &boot,
                          &cwd, &log_name, &PyList_Type, &argv, &PyDict_Type, &env, &cap,
                          &ready, &gate_fd, &log_fd, &dir_fd, &env_fd, &close_fd, &PyList_Type,
                          &ctl))
        return NULL;
    if (!PyUnicode_IS_ASCII(key) || !PyUnicode_IS_ASCII(boot)) {
        PyErr_SetString(PyExc_ValueError, "key and boot id must be ASCII");
        return NULL;
    }
    memset(&s, 0, sizeof(s));
    keep = PyList_New(0);
    if (!keep)
        return NULL;
    if (!(s.key = fs_bytes(keep, key, "key")) ||
        !(s.notify = fs_bytes(keep, notify_path, "notify")) ||
        !(s.record = fs_bytes(keep, record, "record")) ||
        !(s.boot = fs_bytes(keep, boot, "boot")) || !(s.cwd = fs_bytes(keep, cwd, "cwd")) ||
        !(s.log_name = fs_bytes(keep, log_name, "log_name")))
        goto done;
    n = PyList_GET_SIZE(argv);
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "argv is empty");
        goto done;
    }
    cargv = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    cenv = PyMem_Calloc((size_t)PyDict_GET_SIZE(env) + 1, sizeof(char *));
    if (!cargv || !cenv) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++)
        if (!(cargv[i] = (char *)fs_bytes(keep, PyList_GET_ITEM(argv, i), "argv")))
            goto done;
    i = 0;
    while (PyDict_Next(env, &pos, &k, &v)) {
        const char *ck = fs_bytes(keep, k, "environment name");
        const char *cv = ck ? fs_bytes(keep, v, "environment value") : NULL;
        PyObject *kv;
        if (!cv)
            goto done;
        if (!*ck || strchr(ck, '=')) {
            PyErr_Format(PyExc_ValueError, "illegal environment variable name %R", k);
            goto done;
        }
        kv = PyBytes_FromFormat("%s=%s", ck, cv);
        if (!kv || PyList_Append(keep, kv) < 0) {
            Py_XDECREF(kv);
            goto done;
        }
        Py_DECREF(kv);
        cenv[i++] = PyBytes_AS_STRING(kv);
    }
    if (ctl && PyList_GET_SIZE(ctl) > 0) {
        Py_ssize_t nc = PyList_GET_SIZE(ctl);
        cctl = PyMem_Calloc((size_t)nc + 1, sizeof(char *));
        if (!cctl) {
            PyErr_NoMemory();
            goto done;
        }
        for (i = 0; i < nc; i++)
            if (!(cctl[i] = (char *)fs_bytes(keep, PyList_GET_ITEM(ctl, i), "controls")))
                goto done;
        s.controls = cctl;
        s.ncontrols = (long)nc;
    }
    s.argv = cargv;
    s.envp = cenv;
    s.cap = cap;
    s.phase = ready ? PHASE_READY : PHASE_GATE;
    s.gate_fd = gate_fd;
    s.log_fd = log_fd;
    s.dir_fd = dir_fd;
    s.env_fd = env_fd;
    s.sock = -1;
    s.out = s.err = -1;
    pidfd = fork_supervisor(&s, close_fd, &pid, &what);
    if (pidfd < 0) {
        PyErr_Format(PyExc_OSError, "%s: %s", what, strerror(errno));
        goto done;
    }
    result = Py_BuildValue("(ii)", (int)pid, pidfd);
done:
    PyMem_Free(cargv);
    PyMem_Free(cenv);
    PyMem_Free(cctl);
    Py_DECREF(keep);
    return result;
}


#endif /* !CRONRD_ZYGOTE_PROGRAM */

/* -- the zygote: supervisors forked from a process that runs no Python ---- */

/* Forking the Python fork server for each run costs it ~240 copy-on-write
 * faults per run afterwards (every object it touches sits on a page now
 * shared with the child): more than the fork. So the fork server forks one
 * zygote at its start, a process that runs only this C; the fork server
 * hands it each run (in the form below) and the zygote forks the
 * supervisor, touching a handful of pages.
 *
 * A request: the fields as NUL-terminated strings, in this order:
 *   key, notify, record, cwd, log_name, cap, ready ("0"/"1"), argc, argv..., envc,
 *   env..., and, for a job with process controls, ctlc, controls...
 * (env entries "NAME=value"), with the gate, log, log directory and optional
 * environment descriptors attached. The fork server has checked it (check_request).
 * The reply: "ok PID" with the supervisor's pidfd attached, or
 * "error TEXT". */

#define ZYGOTE_MAX_REQUEST (96 * 1024)

static char *next_field(char **p, char *end)
{
    char *s = *p, *nul;
    if (s >= end)
        return NULL;
    nul = memchr(s, '\0', (size_t)(end - s));
    if (!nul)
        return NULL;
    *p = nul + 1;
    return s;
}

static void zygote_reply(int sock, const char *text, int fd)
{
    struct msghdr mh;
    struct iovec iov;
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(&mh, 0, sizeof(mh));
    iov.iov_base = (void *)text;
    iov.iov_len = strlen(text);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        struct cmsghdr *c;
        memset(cbuf, 0, sizeof(cbuf));
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/* One request: fork its supervisor. Returns the pidfd (or -1, *why set). */
static int zygote_spawn(int sock, char *buf, size_t len, int *fds, int nfds, const char *boot,
                        pid_t *pid_out, const char **why)
{
    char *p = buf, *end = buf + len, *f;
    struct sup s;
    long argc, envc, ctlc = 0, i;
    char **argv = NULL, **envp = NULL, **ctl = NULL;
    int pidfd = -1;
    pid_t pid;

    memset(&s, 0, sizeof(s));
    *why = "malformed request";
    if (nfds < 3)
        return -1;
    if (!(s.key = next_field(&p, end)) || !(s.notify = next_field(&p, end)) ||
        !(s.record = next_field(&p, end)) || !(s.cwd = next_field(&p, end)) ||
        !(s.log_name = next_field(&p, end)))
        return -1;
    if (!(f = next_field(&p, end)))
        return -1;
    s.cap = atoll(f);
    if (!(f = next_field(&p, end)))
        return -1;
    s.phase = f[0] == '1' ? PHASE_READY : PHASE_GATE;
    if (!(f = next_field(&p, end)) || (argc = atol(f)) < 1 || argc > 65536)
        return -1;
    argv = calloc((size_t)argc + 1, sizeof(char *));
    if (!argv)
        return -1;
    for (i = 0; i < argc; i++)
        if (!(argv[i] = next_field(&p, end)))
            goto fail;
    if (!(f = next_field(&p, end)) || (envc = atol(f)) < 0 || envc > 65536)
        goto fail;
    envp = calloc((size_t)envc + 1, sizeof(char *));
    if (!envp)
        goto fail;
    for (i = 0; i < envc; i++)
        if (!(envp[i] = next_field(&p, end)))
            goto fail;
    if (p < end) {
        if (!(f = next_field(&p, end)) || (ctlc = atol(f)) < 1 || ctlc > 64)
            goto fail;
        ctl = calloc((size_t)ctlc + 1, sizeof(char *));
        if (!ctl)
            goto fail;
        for (i = 0; i < ctlc; i++)
            if (!(ctl[i] = next_field(&p, end)))
                goto fail;
    }
    s.controls = ctl;
    s.ncontrols = ctlc;
    s.boot = boot;
    s.argv = argv;
    s.envp = envp;
    s.gate_fd = fds[0];
    s.log_fd = fds[1];
    s.dir_fd = fds[2];
    s.env_fd = nfds > 3 ? fds[3] : -1;
    s.sock = -1;
    s.out = s.err = -1;
    pidfd = fork_supervisor(&s, sock, &pid, why);
    if (pidfd < 0) {
        *why = strerror(errno);
        goto fail;
    }
    *pid_out = pid;
fail:
    free(argv);
    free(envp);
    free(ctl);
    return pidfd;
}

static void zygote_reap(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

static void zygote_serve(int sock, const char *boot)
{
    static char buf[ZYGOTE_MAX_REQUEST + 1];
    struct sigaction sa;
    prctl(PR_SET_NAME, "cronrd-zygote", 0, 0, 0);
    /* Supervisors are reaped here (their CPU then counts as the zygote's
     * children's, as it did the fork server's); the go pipe keeps one from
     * being reaped before its pidfd is taken. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = zygote_reap;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    for (;;) {
        struct msghdr mh;
        struct iovec iov;
        char cbuf[CMSG_SPACE(4 * sizeof(int))];
        int fds[4], nfds = 0, pidfd, i;
        pid_t pid = 0;
        const char *why = "";
        ssize_t n;
        char reply[300];
        memset(&mh, 0, sizeof(mh));
        iov.iov_base = buf;
        iov.iov_len = ZYGOTE_MAX_REQUEST;
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0);  /* the fork server is gone */
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                for (i = 0; i < k; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                    if (nfds < 4)
                        fds[nfds++] = fd;
                    else
                        close(fd);
                }
            }
        }
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
            why = "request too large";
            pidfd = -1;
        } else {
            pidfd = zygote_spawn(sock, buf, (size_t)n, fds, nfds, boot, &pid, &why);
        }
        for (i = 0; i < nfds; i++)
            close(fds[i]);
        if (pidfd >= 0) {
            snprintf(reply, sizeof(reply), "ok %d", (int)pid);
            zygote_reply(sock, reply, pidfd);
            close(pidfd);
        } else {
            snprintf(reply, sizeof(reply), "error %s", why);
            zygote_reply(sock, reply, -1);
        }
    }
}

#ifdef CRONRD_ZYGOTE_PROGRAM
int main(int argc, char **argv)
{
    if (argc != 3 || !argv[1][0] || strspn(argv[1], "0123456789") != strlen(argv[1])) {
        fprintf(stderr, "usage: cronrd-zygote FD BOOT_ID (started by cronrd's fork server)\n");
        return 2;
    }
    zygote_serve(atoi(argv[1]), argv[2]);
    return 0;
}
#else
static PyObject *py_start_zygote(PyObject *self, PyObject *args)
{
    const char *boot, *program = NULL;
    int close_fd, sv[2];
    pid_t pid;
    (void)self;
    if (!PyArg_ParseTuple(args, "si|z", &boot, &close_fd, &program))
        return NULL;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    pid = fork();
    if (pid == 0) {
        /* Plain C from here on, never back into Python. */
        close(sv[0]);
        if (close_fd >= 0)
            close(close_fd);
        if (program) {
            char fd[16];
            int keep = fcntl(sv[1], F_GETFD);
            snprintf(fd, sizeof(fd), "%d", sv[1]);
            if (keep >= 0 && fcntl(sv[1], F_SETFD, keep & ~FD_CLOEXEC) == 0)
                execl(program, "cronrd-zygote", fd, boot, (char *)NULL);
            /* no program: serve from this copy of the fork server */
        }
        zygote_serve(sv[1], boot);
        _exit(0);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(ii)", (int)pid, sv[0]);
}

static PyMethodDef methods[] = {
    {"spawn", py_spawn, METH_VARARGS,
     "spawn(key, notify, record, boot, cwd, log_name, argv, env, cap, ready, gate_fd, log_fd, "
     "dir_fd, env_fd, close_fd[, controls]) -> (pid, pidfd)\n\nFork one run supervisor (see supervisor.py); close_fd is closed "
     "in the child (the fork server's socket)."},
    {"start_zygote", py_start_zygote, METH_VARARGS,
     "start_zygote(boot, close_fd) -> (pid, fd)\n\nFork the zygote (see above): it serves "
     "spawn requests on fd, a SOCK_SEQPACKET socket, until that closes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_supervise", "The run supervisor in C (see supervisor.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__supervise(void)
{
    return PyModule_Create(&module);
}
#endif /* CRONRD_ZYGOTE_PROGRAM */
