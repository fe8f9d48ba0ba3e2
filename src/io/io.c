/* io.c — POSIX file helpers shared by the trainer's readers and writers (see io.h). Every failure
 * becomes an fsdp_status whose message names the path and the system's reason. */
#define _GNU_SOURCE /* renameat2 */
#include "io/io.h"

#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static fsdp_status io_err(const char *what, const char *path, int err) {
    return fsdp_set_error(FSDP_EIO, "%s %s: %s%s", what, path, strerror(err),
                          err == ENOSPC || err == EDQUOT || err == EFBIG
                              ? " (disk full or file size limit: free space and retry)"
                              : "");
}

fsdp_status fsdp_io_write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return io_err("cannot write", path, errno);
        }
        p += w;
        n -= (size_t)w;
    }
    return FSDP_OK;
}

fsdp_status fsdp_io_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return io_err("cannot read", path, errno);
        }
        if (r == 0)
            return fsdp_set_error(FSDP_EFORMAT, "%s is truncated: wanted %zu more bytes at offset %llu", path,
                                  n, (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return FSDP_OK;
}

/* ---------------------------------------------------------------- inputs */

/* The files this command reads (device, inode), so that none of its outputs replaces one. */
typedef struct {
    dev_t dev;
    ino_t ino;
} file_id;
static file_id *inputs;
static size_t n_inputs, cap_inputs;

static void claims_reset(void);

void fsdp_io_inputs_reset(void) {
    claims_reset();
    free(inputs);
    inputs = NULL;
    n_inputs = cap_inputs = 0;
}

static void note_input(const struct stat *st) {
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino) return;
    if (n_inputs == cap_inputs) {
        size_t cap = cap_inputs ? 2 * cap_inputs : 16;
        file_id *p = realloc(inputs, cap * sizeof *p);
        if (!p) return; /* out of memory: the set only protects, it never decides a read */
        inputs = p;
        cap_inputs = cap;
    }
    inputs[n_inputs++] = (file_id){st->st_dev, st->st_ino};
}

static int stat_is_input(const struct stat *st) {
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino) return 1;
    return 0;
}

void fsdp_io_note_input(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) note_input(&st);
}

int fsdp_io_is_input(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && stat_is_input(&st);
}

/* ---------------------------------------------------------------- claims */

/* The paths a command names (flags), so that no output is an input or another output, or inside a
 * folder another of them owns. */
typedef struct {
    char *path;                /* normalised: realpath of the longest existing prefix + the rest, lexically */
    char what[64], given[256]; /* the flag and its path as given, for messages */
    unsigned kind;
    int (*managed)(const char *name);
    int exists;
    dev_t dev;
    ino_t ino;
} claim;
static claim *claims;
static size_t n_claims;

static void claims_reset(void) {
    for (size_t i = 0; i < n_claims; i++)
        free(claims[i].path);
    free(claims);
    claims = NULL;
    n_claims = 0;
}

/* Appends the components of rest to out (an absolute, normalised path), resolving "." and ".."
 * lexically; 0 when it does not fit. */
static int append_lexical(char *out, size_t cap, const char *rest) {
    while (*rest) {
        size_t n = strcspn(rest, "/");
        if (n == 1 && rest[0] == '.') {
        } else if (n == 2 && rest[0] == '.' && rest[1] == '.') {
            char *sl = strrchr(out, '/');
            if (sl) sl[sl == out ? 1 : 0] = '\0';
        } else if (n > 0) {
            size_t l = strlen(out);
            if (l + n + 2 > cap) return 0;
            if (l == 0 || out[l - 1] != '/') out[l++] = '/';
            memcpy(out + l, rest, n);
            out[l + n] = '\0';
        }
        rest += n;
        while (*rest == '/')
            rest++;
    }
    return 1;
}

char *fsdp_io_normalise(const char *path) {
    char buf[PATH_MAX], res[PATH_MAX];
    if (!path || !*path || strlen(path) >= sizeof buf) return NULL;
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    /* The longest prefix of folders that exists, resolved; the last component never is. */
    char *cut = strrchr(buf, '/');
    for (;;) {
        const char *head = cut ? (cut == buf ? "/" : buf) : ".";
        if (cut) *cut = '\0';
        int ok = realpath(head, res) != NULL;
        if (cut) *cut = '/';
        if (ok) break;
        if (!cut) return NULL;
        char *prev = cut;
        *prev = '\0';
        cut = strrchr(buf, '/');
        *prev = '/';
        if (cut == NULL && prev == buf) return NULL;
    }
    if (!append_lexical(res, sizeof res, cut ? cut + 1 : buf)) return NULL;
    return fsdp_strdupf("%s", res);
}

/* 1 if b lies inside folder a; *first = the component of b just below a. */
static int inside(const char *a, const char *b, char *first, size_t cap) {
    size_t n = strlen(a);
    if (strncmp(a, b, n) != 0) return 0;
    const char *r = b + n;
    if (n > 1) {
        if (*r != '/') return 0;
        r++;
    }
    if (!*r) return 0;
    size_t m = strcspn(r, "/");
    snprintf(first, cap, "%.*s", (int)m, r);
    return 1;
}

fsdp_status fsdp_io_claim(const char *path, const char *what, unsigned kind,
                          int (*managed)(const char *name)) {
    if (!path || !*path) return FSDP_OK;
    claim c = {.kind = kind, .managed = managed};
    snprintf(c.what, sizeof c.what, "%s", what ? what : "a path");
    snprintf(c.given, sizeof c.given, "%s", path);
    c.path = fsdp_io_normalise(path);
    if (!c.path) return fsdp_set_error(FSDP_EIO, "%s %s: cannot resolve the path", c.what, path);
    struct stat st;
    if (lstat(c.path, &st) == 0) {
        c.exists = 1;
        c.dev = st.st_dev;
        c.ino = st.st_ino;
    }
    if ((kind & FSDP_CLAIM_OUT) && !(kind & FSDP_CLAIM_IN) && c.exists && stat_is_input(&st)) {
        free(c.path); /* the file itself was read (a shard, a manifest): say so, whichever flag named it */
        return fsdp_set_error(FSDP_EIO,
                              "%s %s is a file this command reads: writing it would replace its own input; "
                              "choose another path",
                              c.what, path);
    }
    for (size_t i = 0; i < n_claims; i++) {
        const claim *e = &claims[i];
        const int out = (kind & FSDP_CLAIM_OUT) || (e->kind & FSDP_CLAIM_OUT);
        if (!out) continue; /* two inputs may be one file */
        char first[256];
        const int same =
            !strcmp(e->path, c.path) || (c.exists && e->exists && e->dev == c.dev && e->ino == c.ino);
        fsdp_status s = FSDP_OK;
        if (same) {
            s = fsdp_set_error(FSDP_EINVAL, "%s %s is the same %s as %s %s: %s; choose another path", c.what,
                               path, (kind & FSDP_CLAIM_DIR) ? "folder" : "file", e->what, e->given,
                               (kind & e->kind & FSDP_CLAIM_OUT) ? "each output needs a path of its own"
                                                                 : "an output may not be one of the inputs");
        } else if ((e->kind & FSDP_CLAIM_DIR) && inside(e->path, c.path, first, sizeof first) &&
                   (!e->managed || e->managed(first))) {
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s %s is inside %s %s's own entries (%s): %s; choose another path", c.what,
                               path, e->what, e->given, first,
                               (e->kind & FSDP_CLAIM_OUT) ? "the command writes or removes them"
                                                          : "an output may not replace its input");
        } else if ((kind & FSDP_CLAIM_DIR) && inside(c.path, e->path, first, sizeof first) &&
                   (!managed || managed(first))) {
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s %s is inside %s %s's own entries (%s): %s; choose another path", e->what,
                               e->given, c.what, path, first,
                               (kind & FSDP_CLAIM_OUT) ? "the command writes or removes them"
                                                       : "an output may not replace its input");
        }
        if (s != FSDP_OK) {
            free(c.path);
            return s;
        }
    }
    claim *p = realloc(claims, (n_claims + 1) * sizeof *p);
    if (!p) {
        free(c.path);
        return FSDP_ERR(FSDP_ENOMEM, "no memory for the list of paths");
    }
    claims = p;
    claims[n_claims++] = c;
    return FSDP_OK;
}

const char *fsdp_io_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a folder";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

fsdp_status fsdp_io_open_input(const char *path, int *fd_out) {
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO without a writer (or some devices) would block forever. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        fsdp_status s = io_err("cannot open", path, err);
        errno = err; /* callers may add advice for ENOENT */
        return s;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fsdp_status s = io_err("cannot stat", path, errno);
        close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return fsdp_set_error(FSDP_EIO, "%s is %s, not a regular file: only regular files are read", path,
                              fsdp_io_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        fsdp_status s = io_err("cannot set the flags of", path, errno);
        close(fd);
        return s;
    }
    note_input(&st);
    *fd_out = fd;
    return FSDP_OK;
}

fsdp_status fsdp_io_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    int fd;
    FSDP_TRY(fsdp_io_open_input(path, &fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fsdp_status s = io_err("cannot stat", path, errno);
        close(fd);
        return s;
    }
    size_t n = (size_t)st.st_size;
    char *buf = NULL;
    fsdp_status s = fsdp_mem_alloc((void **)&buf, n + 1, FSDP_MEM_OTHER);
    if (s != FSDP_OK) goto fail;
    s = fsdp_io_pread_all(fd, buf, n, 0, path);
    if (s != FSDP_OK) goto fail;
    buf[n] = '\0';
    close(fd);
    *data = buf;
    *len = n;
    return FSDP_OK;
fail:
    fsdp_mem_free(buf);
    close(fd);
    return s;
}

fsdp_status fsdp_io_close_sync(int fd, const char *path) {
    fsdp_status s = FSDP_OK;
    if (fsync(fd) != 0) s = io_err("cannot fsync", path, errno);
    if (close(fd) != 0 && s == FSDP_OK) s = io_err("cannot close", path, errno);
    return s;
}

/* ---------------------------------------------------------------- outputs */

/* Creates path.tmp.XXXXXX (O_EXCL, mode 0644 less the umask) beside path; *tmp malloc'd. */
static fsdp_status create_temp(const char *path, char **tmp, int *fd) {
    static unsigned counter;
    *tmp = NULL;
    *fd = -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned x = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL) ^ (++counter * 40503u);
        char *t = fsdp_strdupf("%s.tmp.%06x", path, x & 0xffffffu);
        if (!t) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        int f = open(t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
        if (f >= 0) {
            *tmp = t;
            *fd = f;
            return FSDP_OK;
        }
        int err = errno;
        if (err != EEXIST) {
            char dir[4096];
            fsdp_path_dirname(path, dir, sizeof dir);
            fsdp_status s = err == ENOENT ? fsdp_set_error(FSDP_EIO,
                                                           "cannot create %s: folder %s does not exist: "
                                                           "create it or choose another path",
                                                           t, dir)
                                          : io_err("cannot create", t, err);
            free(t);
            return s;
        }
        free(t);
    }
    return fsdp_set_error(FSDP_EIO, "cannot create a temporary file beside %s: 100 names taken", path);
}

fsdp_status fsdp_io_symlink_error(const char *what, const char *path) {
    return fsdp_set_error(FSDP_EIO,
                          "%s%s%s is a symbolic link: outputs are opened with O_NOFOLLOW and never written "
                          "or replaced through a link (it could point at any file); give the real path",
                          what ? what : "output", " ", path);
}

/* The destination is a regular file or absent, and (unless allowed) none of this command's inputs. */
static fsdp_status check_dest(const char *path, const char *what, unsigned flags) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return FSDP_OK;
        return io_err(what ? what : "cannot stat output", path, errno);
    }
    if (S_ISLNK(st.st_mode)) return fsdp_io_symlink_error(what, path);
    if (!S_ISREG(st.st_mode))
        return fsdp_set_error(FSDP_EIO, "%s%s%s is %s, not a regular file: refusing to replace it",
                              what ? what : "", what ? " " : "", path, fsdp_io_kind(st.st_mode));
    if (!(flags & FSDP_OUT_MAY_REPLACE_INPUT) && stat_is_input(&st))
        return fsdp_set_error(FSDP_EIO,
                              "%s%s%s is a file this command reads: writing it would replace its own input; "
                              "choose another path",
                              what ? what : "", what ? " " : "", path);
    return FSDP_OK;
}

fsdp_status fsdp_out_check(const char *path, const char *what) {
    if (!path || !*path) return fsdp_set_error(FSDP_EINVAL, "%s: empty path", what ? what : "output");
    FSDP_TRY(check_dest(path, what, 0));
    char *tmp = NULL;
    int fd = -1;
    FSDP_TRY(create_temp(path, &tmp, &fd));
    fsdp_status s = fsdp_io_write_all(fd, "\n", 1, tmp);
    fsdp_status s2 = fsdp_io_close_sync(fd, tmp);
    if (s == FSDP_OK) s = s2;
    unlink(tmp);
    free(tmp);
    return s;
}

fsdp_status fsdp_out_check_dest(const char *path, const char *what) {
    if (!path || !*path) return fsdp_set_error(FSDP_EINVAL, "%s: empty path", what ? what : "output");
    return check_dest(path, what, 0);
}

fsdp_status fsdp_out_begin(fsdp_out *o, const char *path, const char *what, unsigned flags) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!path || !*path) return fsdp_set_error(FSDP_EINVAL, "%s: empty path", what ? what : "output");
    FSDP_TRY(check_dest(path, what, flags));
    o->path = fsdp_strdupf("%s", path);
    if (!o->path) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    o->flags = flags;
    fsdp_status s = create_temp(path, &o->tmp, &o->fd);
    if (s != FSDP_OK) fsdp_out_abort(o);
    return s;
}

void fsdp_out_abort(fsdp_out *o) {
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

fsdp_status fsdp_out_commit(fsdp_out *o) {
    fsdp_status s = FSDP_OK;
    if (!o->tmp) return FSDP_ERR(FSDP_ESTATE, "commit of an output that was not begun");
    if (o->fd < 0) {
        o->fd = open(o->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (o->fd < 0) s = io_err("cannot reopen", o->tmp, errno);
    }
    if (s == FSDP_OK) {
        s = fsdp_io_close_sync(o->fd, o->tmp);
        o->fd = -1;
    }
    /* Again at the rename: the destination may have changed while the output was written. */
    if (s == FSDP_OK) s = check_dest(o->path, NULL, o->flags);
    if (s == FSDP_OK && rename(o->tmp, o->path) != 0) s = io_err("cannot rename to", o->path, errno);
    if (s != FSDP_OK) {
        fsdp_out_abort(o);
        return s;
    }
    char dir[4096];
    fsdp_path_dirname(o->path, dir, sizeof dir);
    s = fsdp_fsync_dir(dir);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return s;
}

fsdp_status fsdp_io_write_file_atomic(const char *path, const void *data, size_t n, unsigned flags) {
    fsdp_out o;
    FSDP_TRY(fsdp_out_begin(&o, path, NULL, flags));
    fsdp_status s = fsdp_io_write_all(o.fd, data, n, o.tmp);
    if (s != FSDP_OK) {
        fsdp_out_abort(&o);
        return s;
    }
    return fsdp_out_commit(&o);
}

fsdp_status fsdp_io_copy_file(const char *src, const char *dst) {
    struct stat ss, sd;
    if (stat(src, &ss) == 0 && stat(dst, &sd) == 0 && ss.st_dev == sd.st_dev && ss.st_ino == sd.st_ino)
        return FSDP_OK;
    char *data = NULL;
    size_t n = 0;
    fsdp_status s = fsdp_io_read_file(src, &data, &n);
    if (s == FSDP_OK) s = fsdp_io_write_file_atomic(dst, data, n, 0);
    fsdp_mem_free(data);
    return s;
}

fsdp_status fsdp_mkdirs(const char *path) {
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            fsdp_status s = io_err("cannot create folder", p, errno);
            free(p);
            return s;
        }
        p[i] = c;
    }
    struct stat st;
    fsdp_status s = FSDP_OK;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        s = fsdp_set_error(FSDP_EIO, "%s exists but is not a folder: choose another path", path);
    free(p);
    return s;
}

fsdp_status fsdp_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_err("cannot open folder", path, errno);
    fsdp_status s = FSDP_OK;
    if (fsync(fd) != 0 && errno != EINVAL) s = io_err("cannot fsync folder", path, errno);
    close(fd);
    return s;
}

void fsdp_path_dirname(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, cap, ".");
    } else if (slash == path) {
        snprintf(out, cap, "/");
    } else {
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
    }
}

/* Removes the entry name of the folder dirfd: a folder with everything in it (depth levels of
 * subfolders at most), anything else (a symlink included) by unlinking the name itself. A folder is
 * opened with O_NOFOLLOW|O_DIRECTORY, so an entry swapped for a symlink after the fstatat is never
 * followed: its open fails and the link itself is unlinked. */
static void rm_at(int dirfd, const char *name, int depth) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (!S_ISDIR(st.st_mode) || depth <= 0) {
        if (!S_ISDIR(st.st_mode)) unlinkat(dirfd, name, 0);
        return;
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR) unlinkat(dirfd, name, 0);
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) rm_at(fd, e->d_name, depth - 1);
    closedir(d); /* closes fd */
    unlinkat(dirfd, name, AT_REMOVEDIR);
}

void fsdp_rm_tree1(const char *path) {
    if (!path || !*path) return;
    char *p = fsdp_strdupf("%s", path);
    if (!p) return;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    /* The folders above the entry are followed as given (a symlinked parent is the caller's choice);
     * the entry itself never is. */
    int dirfd = AT_FDCWD;
    if (slash) {
        *slash = '\0';
        dirfd = open(slash == p ? "/" : p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (dirfd != -1 && strcmp(base, ".") && strcmp(base, "..") && *base) rm_at(dirfd, base, 8);
    if (dirfd >= 0) close(dirfd);
    free(p);
}

char *fsdp_strdupf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- folders as one unit */

/* Removes what a run killed outright left beside the folder: PARENT/.BASE.TAG.XXXXXX (mkdtemp's six
 * letters and digits), nothing else. */
static void stage_remove_stale(const char *parent, const char *base, const char *tag) {
    char *prefix = fsdp_strdupf(".%s.%s.", base, tag);
    DIR *d = prefix ? opendir(parent) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t k = strlen(prefix);
        const char *x = e->d_name + k;
        static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        if (strncmp(e->d_name, prefix, k) || strlen(x) != 6 || strspn(x, alnum) != 6) continue;
        char *p = fsdp_strdupf("%s/%s", parent, e->d_name);
        fsdp_rm_tree1(p);
        free(p);
    }
    if (d) closedir(d);
    free(prefix);
}

/* st->exists: out is a folder to replace, holding only what own() calls its own (io.h). */
static fsdp_status stage_check_old(fsdp_dir_stage *st, const char *cmd, const char *what,
                                   unsigned (*own)(const char *, void *), void *arg) {
    const char *out = st->out;
    struct stat sb;
    if (lstat(out, &sb) != 0) {
        if (errno == ENOENT) return FSDP_OK;
        return fsdp_set_error(FSDP_EIO, "%s %s %s: %s", cmd, what, out, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return fsdp_set_error(FSDP_EINVAL,
                              "%s %s %s is a symbolic link: %s replaces the folder as one unit and never "
                              "through a link; pass the folder it points to",
                              cmd, what, out, cmd);
    if (!S_ISDIR(sb.st_mode))
        return fsdp_set_error(FSDP_EINVAL, "%s %s %s exists and is %s, not a folder", cmd, what, out,
                              fsdp_io_kind(sb.st_mode));
    DIR *d = opendir(out);
    if (!d)
        return fsdp_set_error(FSDP_EIO, "%s %s %s: cannot read the folder: %s", cmd, what, out,
                              strerror(errno));
    fsdp_status s = FSDP_OK;
    struct dirent *e;
    while (s == FSDP_OK && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = fsdp_strdupf("%s/%s", out, e->d_name);
        unsigned k = own(e->d_name, arg);
        struct stat es = {0};
        if (!p)
            s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
        else if (!(k & FSDP_STAGE_OWN))
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s %s %s holds %s, which %s does not write: %s replaces the folder as one "
                               "unit; move it away or choose another folder",
                               cmd, what, out, e->d_name, cmd, cmd);
        else if (lstat(p, &es) != 0 || !S_ISREG(es.st_mode))
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s %s %s: %s is %s, not a regular file: %s replaces the folder as one unit "
                               "and would remove it; move it away or choose another folder",
                               cmd, what, out, p, fsdp_io_kind(es.st_mode), cmd);
        else if (!(k & FSDP_STAGE_MAY_BE_INPUT) && fsdp_io_is_input(p))
            s = fsdp_set_error(FSDP_EINVAL,
                               "%s %s %s: %s is a file this command reads (one of its inputs): replacing "
                               "the folder would remove it",
                               cmd, what, out, p);
        free(p);
    }
    closedir(d);
    st->exists = s == FSDP_OK;
    return s;
}

fsdp_status fsdp_io_dir_check(const char *out, const char *cmd, const char *what,
                              unsigned (*own)(const char *name, void *arg), void *arg) {
    fsdp_dir_stage st = {0};
    if (!(st.out = fsdp_strdupf("%s", out))) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = stage_check_old(&st, cmd, what, own, arg);
    free(st.out);
    return s;
}

/* The output's lock (io.h): flock'ed without waiting; the file is the lock only while it is still the
 * one at its path (a releasing writer unlinks it, so a lock taken on an unlinked file is retried). */
static fsdp_status stage_lock(fsdp_dir_stage *st, const char *base, const char *tag, const char *cmd,
                              const char *what) {
    char *p = fsdp_strdupf("%s/.%s.%s.lock", st->parent, base, tag);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
        if (fd < 0) {
            fsdp_status s =
                fsdp_set_error(FSDP_EIO, "%s: cannot open the lock %s: %s", cmd, p, strerror(errno));
            free(p);
            return s;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            char holder[32] = "";
            ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
            holder[n > 0 ? n : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            close(fd);
            fsdp_status s =
                e == EWOULDBLOCK
                    ? fsdp_set_error(
                          FSDP_EINVAL,
                          "%s %s %s: another %s is writing this folder now (pid %s, lock %s): wait "
                          "for it to end, or choose another folder",
                          cmd, what, st->out, cmd, holder[0] ? holder : "unknown", p)
                    : fsdp_set_error(FSDP_EIO, "%s: cannot lock %s: %s", cmd, p, strerror(e));
            free(p);
            return s;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            char pid[32];
            const int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, pid, (size_t)n, 0); /* only for the messages */
            st->lock = p;
            st->lock_fd = fd;
            return FSDP_OK;
        }
        close(fd); /* its holder released and unlinked it between our open and flock: again */
    }
    fsdp_status s = fsdp_set_error(FSDP_EIO, "%s: the lock %s keeps changing under us", cmd, p);
    free(p);
    return s;
}

fsdp_status fsdp_io_dir_stage(fsdp_dir_stage *st, const char *out, const char *cmd, const char *what,
                              const char *tag, unsigned (*own)(const char *name, void *arg), void *arg) {
    memset(st, 0, sizeof *st);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    char parent[4096];
    st->out = fsdp_strdupf("%.*s", (int)n, out);
    if (!st->out) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_path_dirname(st->out, parent, sizeof parent);
    const char *base = strrchr(st->out, '/') ? strrchr(st->out, '/') + 1 : st->out;
    fsdp_status s = FSDP_OK;
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        s = fsdp_set_error(FSDP_EINVAL,
                           "%s %s %s: %s replaces the folder as one unit, so it needs a folder named by "
                           "its own name (not %s)",
                           cmd, what, out, cmd, *base ? base : "/");
    if (s == FSDP_OK && !(st->parent = fsdp_strdupf("%s", parent)))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK) s = fsdp_mkdirs(parent);
    if (s == FSDP_OK) s = stage_lock(st, base, tag, cmd, what);
    if (s == FSDP_OK) stage_remove_stale(parent, base, tag);
    if (s == FSDP_OK) s = stage_check_old(st, cmd, what, own, arg);
    if (s == FSDP_OK && !(st->tmp = fsdp_strdupf("%s/.%s.%s.XXXXXX", parent, base, tag)))
        s = FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    if (s == FSDP_OK && !mkdtemp(st->tmp)) { /* mkdir: the name is new, never an existing one */
        s = fsdp_set_error(FSDP_EIO, "%s: cannot create a folder beside %s: %s", cmd, st->out,
                           strerror(errno));
        free(st->tmp);
        st->tmp = NULL;
    }
    if (s == FSDP_OK && chmod(st->tmp, 0755) != 0)
        s = fsdp_set_error(FSDP_EIO, "%s: cannot chmod %s: %s", cmd, st->tmp, strerror(errno));
    if (s != FSDP_OK) fsdp_io_dir_abort(st);
    return s;
}

fsdp_status fsdp_io_dir_commit(fsdp_dir_stage *st) {
    fsdp_status s = fsdp_fsync_dir(st->tmp);
    if (s == FSDP_OK && st->exists) {
        if (renameat2(AT_FDCWD, st->tmp, AT_FDCWD, st->out, RENAME_EXCHANGE) !=
            0) /* then tmp is the old one */
            s = fsdp_set_error(FSDP_EIO,
                               "cannot swap %s into the place of %s (renameat2 RENAME_EXCHANGE: %s): the old "
                               "folder is untouched",
                               st->tmp, st->out, strerror(errno));
    } else if (s == FSDP_OK && rename(st->tmp, st->out) != 0) {
        s = fsdp_set_error(FSDP_EIO, "cannot rename %s to %s: %s", st->tmp, st->out, strerror(errno));
    } else if (s == FSDP_OK) {
        free(st->tmp);
        st->tmp = NULL; /* it is out now */
    }
    if (s == FSDP_OK) s = fsdp_fsync_dir(st->parent);
    fsdp_io_dir_abort(st); /* the new folder after a failure, or the old one after the swap */
    return s;
}

void fsdp_io_dir_abort(fsdp_dir_stage *st) {
    if (st->tmp) fsdp_rm_tree1(st->tmp);
    if (st->lock) { /* unlinked while held: a writer that opened it meanwhile sees another inode, retries */
        unlink(st->lock);
        close(st->lock_fd);
        free(st->lock);
    }
    free(st->tmp);
    free(st->parent);
    free(st->out);
    memset(st, 0, sizeof *st);
}
