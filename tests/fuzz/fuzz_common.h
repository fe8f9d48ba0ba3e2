/* fuzz_common.h — helpers the libFuzzer targets share: one private scratch folder per fuzzing process
 * (the parsers under test read files by path, so every input is written to a file first) and small
 * file utilities. A helper failure aborts: it is a broken fuzzing setup, not a finding. */
#ifndef FSDP_FUZZ_COMMON_H
#define FSDP_FUZZ_COMMON_H

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_[256];

/* Removes the scratch folder and the plain files in it (one level, subfolders one level more). */
static inline void fuzz_rm_(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int len = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof p) continue;
        if (unlink(p) != 0 && depth > 0) fuzz_rm_(p, depth - 1);
    }
    closedir(d);
    rmdir(dir);
}
static inline void fuzz_cleanup_(void) {
    if (fuzz_dir_[0]) fuzz_rm_(fuzz_dir_, 2);
}

/* The scratch folder: in /dev/shm when it exists (no disk traffic), else $TMPDIR or /tmp. */
static inline const char *fuzz_dir(void) {
    if (fuzz_dir_[0]) return fuzz_dir_;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : getenv("TMPDIR")            ? getenv("TMPDIR")
                                                     : "/tmp";
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/fsdp_fuzz_XXXXXX", base);
    if (!mkdtemp(fuzz_dir_)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_cleanup_);
    return fuzz_dir_;
}

/* path := fuzz_dir()/name (cap bytes). */
static inline void fuzz_path(char *path, size_t cap, const char *name) {
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
}

/* Replaces path's contents with data[0..n). */
static inline void fuzz_write(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* Whole file into a malloc'd buffer (NUL-terminated; *n excludes it). */
static inline char *fuzz_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) abort();
    buf[len] = '\0';
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* A property the parser must keep broke: report it as a crash so libFuzzer saves the input. */
#define FUZZ_REQUIRE(cond)                                                                                   \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "fuzz: property violated at %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

#endif
