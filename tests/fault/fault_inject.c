/* fault_inject.c — an LD_PRELOAD library for the fault tests (tests/fault/fault_*.sh): it watches the files
 * whose path contains $FSDP_FAULT_MATCH and, as configured by environment variables, kills the process
 * or fails writes at a chosen point, so a crash or a full disk can be placed exactly inside a
 * checkpoint save. Without FSDP_FAULT_MATCH it changes nothing.
 *   FSDP_FAULT_KILL_AT_WRITE=n  SIGKILL just before the n-th (1-based) write/pwrite to a watched file
 *   FSDP_FAULT_SIGNAL=n         the KILL_AT_* points raise signal n instead of SIGKILL, once (then the
 *                               process goes on: SIGTERM / SIGINT handling is what is tested)
 *   FSDP_FAULT_KILL_AT_RENAME=1 SIGKILL just before a rename whose source or target is watched
 *   FSDP_FAULT_ENOSPC_AFTER=b   watched files together take b bytes; then writes fail with ENOSPC
 *                               (the write that crosses the limit is short, as on a real full disk)
 *   FSDP_FAULT_TRUNCATE_AT_MMAP=n  just after the n-th (1-based) successful mmap of a watched file, the
 *                               file is truncated (truncate(2) on its path, as another process would)
 *                               to FSDP_FAULT_TRUNCATE_TO bytes (default 0), and "fault_inject:
 *                               truncated PATH" goes to stderr: a file that shrinks while mapped
 *   FSDP_FAULT_KILL_AT_OP=n     SIGKILL at the n-th watched file operation of any kind: just before a
 *                               write, unlink or rmdir, and just before and just after a rename or
 *                               renameat2 (two points each: the folder swap of prepare), so a loop over
 *                               n kills a command at every point of its writing */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 4096

static const char *match;          /* NULL: inactive */
static long kill_at_write = -1;    /* n-th watched write kills; -1: off */
static int kill_at_rename;         /* 1: a watched rename kills */
static long long enospc_left = -1; /* bytes watched files may still take; -1: unlimited */
static long writes_seen;
static long truncate_at_mmap = -1; /* n-th watched mmap truncates its file; -1: off */
static long long truncate_to;
static long mmaps_seen;
static long kill_at_op = -1; /* n-th watched operation kills; -1: off */
static long ops_seen;
static int fault_signal = SIGKILL;
static unsigned char watched[MAX_FD];

__attribute__((constructor)) static void fault_init(void) {
    match = getenv("FSDP_FAULT_MATCH");
    if (match && !*match) match = NULL;
    const char *v;
    if ((v = getenv("FSDP_FAULT_KILL_AT_WRITE"))) kill_at_write = atol(v);
    if ((v = getenv("FSDP_FAULT_KILL_AT_RENAME"))) kill_at_rename = atoi(v);
    if ((v = getenv("FSDP_FAULT_ENOSPC_AFTER"))) enospc_left = atoll(v);
    if ((v = getenv("FSDP_FAULT_TRUNCATE_AT_MMAP"))) truncate_at_mmap = atol(v);
    if ((v = getenv("FSDP_FAULT_TRUNCATE_TO"))) truncate_to = atoll(v);
    if ((v = getenv("FSDP_FAULT_KILL_AT_OP"))) kill_at_op = atol(v);
    if ((v = getenv("FSDP_FAULT_SIGNAL"))) fault_signal = atoi(v);
}

/* One watched operation (FSDP_FAULT_KILL_AT_OP). */
static void die(const char *what, const char *path);
static void op_point(const char *what, const char *path) {
    if (kill_at_op > 0 && ++ops_seen >= kill_at_op) die(what, path);
}

static int is_watched(const char *path) { return match && path && strstr(path, match) != NULL; }

static void die(const char *what, const char *path) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "fault_inject: pid %d killed by signal %d at %s %s\n", (int)getpid(),
                     fault_signal, what, path ? path : "");
    if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    kill_at_write = kill_at_op = -1; /* once */
    kill_at_rename = 0;
    raise(fault_signal);
}

static void note_open(int fd, const char *path) {
    if (fd >= 0 && fd < MAX_FD) watched[fd] = (unsigned char)is_watched(path);
}

/* real_NAME: libc's NAME, looked up once. */
#define REAL(name)                                                                                           \
    static __typeof__(name) *real_##name;                                                                    \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

int __open_2(const char *path, int flags); /* glibc's fortified open(), declared only under fortify */

/* Applies the configured fault to a write of n bytes on fd; returns the bytes to really write, or -1
 * with errno set for a failed write. */
static ssize_t before_write(int fd, size_t n) {
    if (!match || fd < 0 || fd >= MAX_FD || !watched[fd]) return (ssize_t)n;
    writes_seen++;
    op_point("write", match);
    if (kill_at_write > 0 && writes_seen >= kill_at_write) die("write", match);
    if (enospc_left >= 0) {
        if (enospc_left == 0 || n == 0) {
            if (n == 0) return 0;
            errno = ENOSPC;
            return -1;
        }
        if ((long long)n > enospc_left) n = (size_t)enospc_left;
        enospc_left -= (long long)n;
    }
    return (ssize_t)n;
}

int open(const char *path, int flags, ...) {
    REAL(open);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    int fd = real_open(path, flags, mode);
    note_open(fd, path);
    return fd;
}
int open64(const char *path, int flags, ...) {
    REAL(open64);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    int fd = real_open64(path, flags, mode);
    note_open(fd, path);
    return fd;
}
int openat(int dirfd, const char *path, int flags, ...) {
    REAL(openat);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    int fd = real_openat(dirfd, path, flags, mode);
    note_open(fd, path);
    return fd;
}
int __open_2(const char *path, int flags) {
    REAL(__open_2);
    int fd = real___open_2(path, flags);
    note_open(fd, path);
    return fd;
}
int close(int fd) {
    REAL(close);
    if (fd >= 0 && fd < MAX_FD) watched[fd] = 0;
    return real_close(fd);
}
ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    ssize_t k = before_write(fd, n);
    return k < 0 ? -1 : real_write(fd, buf, (size_t)k);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite);
    ssize_t k = before_write(fd, n);
    return k < 0 ? -1 : real_pwrite(fd, buf, (size_t)k, off);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite64);
    ssize_t k = before_write(fd, n);
    return k < 0 ? -1 : real_pwrite64(fd, buf, (size_t)k, off);
}
int rename(const char *from, const char *to) {
    REAL(rename);
    if (kill_at_rename && (is_watched(from) || is_watched(to))) die("rename", from);
    int w = is_watched(from) || is_watched(to);
    if (w) op_point("rename (before)", from);
    int r = real_rename(from, to);
    if (w) op_point("rename (after)", from);
    return r;
}
int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags) {
    REAL(renameat2);
    int w = is_watched(from) || is_watched(to);
    if (w) op_point("renameat2 (before)", from);
    int r = real_renameat2(fromfd, from, tofd, to, flags);
    if (w) op_point("renameat2 (after)", from);
    return r;
}
int unlink(const char *path) {
    REAL(unlink);
    if (is_watched(path)) op_point("unlink", path);
    return real_unlink(path);
}
int rmdir(const char *path) {
    REAL(rmdir);
    if (is_watched(path)) op_point("rmdir", path);
    return real_rmdir(path);
}

/* A watched file's n-th mapping: truncate the file behind it (FSDP_FAULT_TRUNCATE_AT_MMAP). */
static void after_mmap(void *p, int fd) {
    if (p == MAP_FAILED || !match || fd < 0 || fd >= MAX_FD || !watched[fd] || truncate_at_mmap < 1) return;
    if (++mmaps_seen != truncate_at_mmap) return;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = '\0';
    if (truncate(path, (off_t)truncate_to) != 0) return;
    char msg[4200];
    int k = snprintf(msg, sizeof msg, "fault_inject: truncated %s to %lld bytes\n", path, truncate_to);
    if (k > 0) (void)!write(2, msg, (size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1);
}
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    REAL(mmap);
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    after_mmap(p, fd);
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    REAL(mmap64);
    void *p = real_mmap64(addr, len, prot, flags, fd, off);
    after_mmap(p, fd);
    return p;
}
