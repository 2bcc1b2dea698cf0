/*
 * cronrd's single-file launcher: the first part of dist/cronrd.
 *
 * dist/cronrd = this program + a payload (the PyInstaller one-directory build
 * of cronrd, each file zlib-compressed) + a 64-byte trailer. On the first
 * run the payload is unpacked once into a private cache directory; every run
 * then execv()s the unpacked program in place, so
 *
 *   - start-up after the first run costs one open, one pread, one stat and
 *     one execve on top of the unpacked program's own start-up;
 *   - there is no parent process: the daemon keeps the PID systemd started,
 *     so Type=notify with NotifyAccess=main, the watchdog, ExecReload's
 *     `kill -HUP $MAINPID` and every signal reach Python directly (a
 *     bootstrap that forks and waits, as onefile builds of PyInstaller and
 *     Nuitka do, breaks all of these);
 *   - unpacking is atomic: a private temporary directory is filled, then
 *     renamed into place, so parallel first runs never see a half-written
 *     tree, and an interrupted unpacking leaves only a temporary directory.
 *
 * Where the cache lives (the directory must be owned by the caller and not
 * writable by group or others; otherwise the next candidate is tried):
 *   1. $CRONRD_CACHE_DIR, if set;
 *   2. for root: /var/cache/cronrd (HOME and XDG_* are ignored, so root never
 *      executes files from a directory another user controls);
 *   3. otherwise $XDG_CACHE_HOME/cronrd, else $HOME/.cache/cronrd, else the
 *      passwd entry's home + /.cache/cronrd;
 *   4. last: ${TMPDIR:-/tmp}/cronrd-UID.
 * Inside it, one directory per build, named VERSION-HASH (the payload's
 * SHA-256 prefix), so upgrades never reuse a stale tree.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "CRDLNCH1"
#define TRAILER_SIZE 64
#define NAME_SIZE 40
#define PROGRAM "cronrd"
#define MARKER ".complete"

struct trailer {
    char magic[8];
    uint64_t offset; /* little-endian: start of the payload */
    uint64_t length; /* payload bytes */
    char name[NAME_SIZE]; /* VERSION-HASH, NUL-padded */
};

static const char *self_path = "/proc/self/exe";
static int self_fd = -1;

__attribute__((noreturn))
static void die(const char *fmt, const char *arg, int err) {
    fprintf(stderr, "cronrd: ");
    fprintf(stderr, fmt, arg);
    if (err)
        fprintf(stderr, ": %s", strerror(err));
    fprintf(stderr, "\n");
    exit(1);
}

/* snprintf that refuses to truncate. */
__attribute__((format(printf, 3, 4)))
static void fmt_path(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n)
        die("path too long: %s", out, 0);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int read_full(int fd, void *buf, size_t n, off_t at) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, at + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

static void read_trailer(struct trailer *t) {
    struct stat st;
    unsigned char raw[TRAILER_SIZE];
    self_fd = open(self_path, O_RDONLY | O_CLOEXEC);
    if (self_fd < 0 || fstat(self_fd, &st) != 0)
        die("cannot open %s", self_path, errno);
    if (st.st_size < TRAILER_SIZE ||
        read_full(self_fd, raw, TRAILER_SIZE, st.st_size - TRAILER_SIZE) != 0 ||
        memcmp(raw, MAGIC, 8) != 0)
        die("%s carries no payload (a damaged or stripped binary? rebuild it "
            "with packaging/build-binary)", self_path, 0);
    memcpy(t->magic, raw, 8);
    t->offset = le64(raw + 8);
    t->length = le64(raw + 16);
    memcpy(t->name, raw + 24, NAME_SIZE);
    t->name[NAME_SIZE - 1] = 0;
    if (t->offset + t->length + TRAILER_SIZE != (uint64_t)st.st_size || !t->name[0] ||
        strchr(t->name, '/') || t->name[0] == '.')
        die("%s has a damaged payload trailer", self_path, 0);
}

/* mkdir -p for the cache root; only the last component gets mode 0700. */
static int make_dirs(const char *path) {
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf)
        return -1;
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* A usable cache root: a real directory we own that nobody else can write. */
static int usable_root(const char *path) {
    struct stat st;
    if (!path || path[0] != '/' || make_dirs(path) != 0)
        return 0;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022) != 0 || access(path, W_OK | X_OK) != 0)
        return 0;
    return 1;
}

static int try_root(char *out, size_t n, const char *a, const char *b) {
    if (!a || !*a || a[0] != '/')
        return 0;
    if ((size_t)snprintf(out, n, "%s%s", a, b) >= n)
        return 0;
    return usable_root(out);
}

static void cache_root(char *out, size_t n) {
    const char *env = getenv("CRONRD_CACHE_DIR");
    if (env && *env) {
        if (try_root(out, n, env, ""))
            return;
        die("CRONRD_CACHE_DIR=%s is not a directory that this user owns and only "
            "this user can write", env, 0);
    }
    if (geteuid() == 0) {
        if (try_root(out, n, "/var/cache/cronrd", ""))
            return;
    } else {
        if (try_root(out, n, getenv("XDG_CACHE_HOME"), "/cronrd"))
            return;
        if (try_root(out, n, getenv("HOME"), "/.cache/cronrd"))
            return;
        struct passwd *pw = getpwuid(geteuid());
        if (pw && try_root(out, n, pw->pw_dir, "/.cache/cronrd"))
            return;
    }
    const char *tmp = getenv("TMPDIR");
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/cronrd-%u", (unsigned)geteuid());
    if (try_root(out, n, (tmp && tmp[0] == '/') ? tmp : "/tmp", suffix))
        return;
    if (tmp && try_root(out, n, "/tmp", suffix))
        return;
    die("found no private cache directory to unpack into (set CRONRD_CACHE_DIR to a "
        "directory you own, mode 0700)%s", "", 0);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static void remove_tree(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The payload, read sequentially from the binary. */
struct reader {
    off_t at, end;
    const char *where;
};

static void take(struct reader *r, void *buf, size_t n) {
    if (r->at + (off_t)n > r->end || read_full(self_fd, buf, n, r->at) != 0)
        die("%s: truncated payload", self_path, 0);
    r->at += (off_t)n;
}

static uint64_t take_u(struct reader *r, int bytes) {
    unsigned char b[8] = {0};
    take(r, b, (size_t)bytes);
    return le64(b);
}

static void take_string(struct reader *r, char *buf, size_t n) {
    uint64_t len = take_u(r, 2);
    if (len == 0 || len >= n)
        die("%s: bad name in payload", self_path, 0);
    take(r, buf, (size_t)len);
    buf[len] = 0;
    if (strlen(buf) != len)
        die("%s: bad name in payload", self_path, 0);
}

/* A path inside the tree: relative, no "." or ".." components. */
static void take_path(struct reader *r, char *buf, size_t n) {
    take_string(r, buf, n);
    if (buf[0] == '/')
        die("refusing payload entry %s", buf, 0);
    for (const char *c = buf; c && *c;) {
        size_t len = strcspn(c, "/");
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            die("refusing payload entry %s", buf, 0);
        c = c[len] ? c + len + 1 : NULL;
    }
}

/* Leftovers of unpackings that were killed midway, older than an hour. */
static void remove_stale(const char *root) {
    char path[PATH_MAX];
    struct stat st;
    DIR *d = opendir(root);
    if (!d)
        return;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, ".tmp-", 5) != 0 && strncmp(e->d_name, ".old-", 5) != 0)
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", root, e->d_name) < sizeof path &&
            lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && now - st.st_mtime > 3600)
            remove_tree(path);
    }
    closedir(d);
}

static int write_file(const char *path, mode_t mode, struct reader *r, uint64_t raw_size,
                      uint64_t comp_size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0755);
    if (fd < 0)
        return -1;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK)
        die("zlib: %s", "inflateInit failed", 0);
    unsigned char in[1 << 16], out[1 << 16];
    uint64_t left = comp_size, written = 0;
    int zr = Z_OK;
    while (left > 0 && zr != Z_STREAM_END) {
        size_t chunk = left < sizeof in ? (size_t)left : sizeof in;
        take(r, in, chunk);
        left -= chunk;
        z.next_in = in;
        z.avail_in = (uInt)chunk;
        do {
            z.next_out = out;
            z.avail_out = sizeof out;
            zr = inflate(&z, Z_NO_FLUSH);
            if (zr != Z_OK && zr != Z_STREAM_END)
                die("%s: corrupt payload data", path, 0);
            size_t have = sizeof out - z.avail_out;
            for (size_t off = 0; off < have;) {
                ssize_t w = write(fd, out + off, have - off);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w < 0) {
                    int e = errno;
                    inflateEnd(&z);
                    close(fd);
                    errno = e;
                    return -1;
                }
                off += (size_t)w;
            }
            written += have;
        } while (z.avail_out == 0);
    }
    inflateEnd(&z);
    r->at += (off_t)left; /* skip nothing in a well-formed payload */
    if (zr != Z_STREAM_END || written != raw_size)
        die("%s: payload size mismatch", path, 0);
    if (fchmod(fd, mode & 0755) != 0 || close(fd) != 0)
        return -1;
    return 0;
}

/* Unpack into a fresh private directory under root; return its path. */
static void unpack(const char *root, const struct trailer *t, char *tmpdir, size_t n) {
    fmt_path(tmpdir, n, "%s/.tmp-%s-XXXXXX", root, t->name);
    if (!mkdtemp(tmpdir))
        die("cannot create a directory in %s", root, errno);
    struct reader r = {(off_t)t->offset, (off_t)(t->offset + t->length), self_path};
    char rel[PATH_MAX], path[PATH_MAX], target[PATH_MAX];
    for (;;) {
        int type = (int)take_u(&r, 1);
        if (type == 0)
            break;
        mode_t mode = (mode_t)take_u(&r, 4);
        take_path(&r, rel, sizeof rel);
        fmt_path(path, sizeof path, "%s/%s", tmpdir, rel);
        int err = 0;
        if (type == 'd') {
            if (mkdir(path, 0700) != 0 || chmod(path, mode & 0755) != 0)
                err = errno;
        } else if (type == 'l') {
            take_string(&r, target, sizeof target);
            if (target[0] == '/')
                die("refusing absolute symlink %s", target, 0);
            if (symlink(target, path) != 0)
                err = errno;
        } else if (type == 'f') {
            uint64_t raw_size = take_u(&r, 8), comp_size = take_u(&r, 8);
            if (write_file(path, mode, &r, raw_size, comp_size) != 0)
                err = errno;
        } else {
            die("%s: unknown payload entry", self_path, 0);
        }
        if (err) {
            remove_tree(tmpdir);
            die("cannot unpack into %s", path, err);
        }
    }
    fmt_path(path, sizeof path, "%s/" MARKER, tmpdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || close(fd) != 0) {
        int e = errno;
        remove_tree(tmpdir);
        die("cannot write %s", path, e);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    struct trailer t;
    char root[PATH_MAX], dir[PATH_MAX], exe[PATH_MAX], marker[PATH_MAX], tmp[PATH_MAX];
    struct stat st;

    read_trailer(&t);
    cache_root(root, sizeof root);
    fmt_path(dir, sizeof dir, "%s/%s", root, t.name);
    fmt_path(exe, sizeof exe, "%s/" PROGRAM, dir);
    fmt_path(marker, sizeof marker, "%s/" MARKER, dir);

    for (int attempt = 0; attempt < 3; attempt++) {
        if (stat(marker, &st) == 0) {
            close(self_fd);
            execv(exe, argv);
            die("cannot execute %s (on a noexec mount? point CRONRD_CACHE_DIR at a "
                "directory where programs may run)", exe, errno);
        }
        /* A directory without the marker is left over from tampering: move it
         * aside (atomically) before unpacking again. */
        if (lstat(dir, &st) == 0) {
            fmt_path(tmp, sizeof tmp, "%s/.old-%s-XXXXXX", root, t.name);
            if (mkdtemp(tmp) && rename(dir, tmp) == 0)
                remove_tree(tmp);
            else if (tmp[0])
                rmdir(tmp);
        }
        remove_stale(root);
        unpack(root, &t, tmp, sizeof tmp);
        if (rename(tmp, dir) != 0) {
            int e = errno;
            remove_tree(tmp);
            /* Another process unpacked the same build first: use its copy. */
            if (e != EEXIST && e != ENOTEMPTY)
                die("cannot move the unpacked program to %s", dir, e);
        }
    }
    die("could not unpack into %s", dir, 0);
    return 1;
}
