/* io.c — POSIX file helpers shared by the trainer's readers and writers (see io.h). Every failure
 * becomes an fsdp_status whose message names the path and the system's reason. */
#include "train/io.h"

#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

fsdp_status fsdp_io_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_err("cannot open", path, errno);
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

fsdp_status fsdp_io_write_file_atomic(const char *path, const void *data, size_t n) {
    char *tmp = fsdp_strdupf("%s.tmp", path);
    if (!tmp) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = FSDP_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = io_err("cannot create", tmp, errno);
        goto done;
    }
    s = fsdp_io_write_all(fd, data, n, tmp);
    fsdp_status s2 = fsdp_io_close_sync(fd, tmp);
    if (s == FSDP_OK) s = s2;
    if (s != FSDP_OK) {
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        s = io_err("cannot rename to", path, errno);
        unlink(tmp);
        goto done;
    }
    char dir[4096];
    fsdp_path_dirname(path, dir, sizeof dir);
    s = fsdp_fsync_dir(dir);
done:
    free(tmp);
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

void fsdp_rm_tree1(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *f = fsdp_strdupf("%s/%s", dir, e->d_name);
            if (f) unlink(f);
            free(f);
        }
        closedir(d);
    }
    rmdir(dir);
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
