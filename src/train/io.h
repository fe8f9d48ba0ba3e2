/* io.h — small POSIX file helpers for the trainer's files (token files, checkpoints, exports):
 * whole writes and positional reads that retry short transfers and report errno with the path,
 * mkdir -p, and directory fsync for crash-safe renames. */
#ifndef FSDP_TRAIN_IO_H
#define FSDP_TRAIN_IO_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* write(2) until done; FSDP_EIO naming path and errno (ENOSPC: "disk full") otherwise. */
fsdp_status fsdp_io_write_all(int fd, const void *buf, size_t n, const char *path);
/* pread(2) exactly n bytes at off; FSDP_EFORMAT if the file ends first ("truncated"), FSDP_EIO else. */
fsdp_status fsdp_io_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);
/* Whole file into a fsdp_mem_alloc(OTHER) buffer with a NUL after it (*len excludes it). */
fsdp_status fsdp_io_read_file(const char *path, char **data, size_t *len);
/* Writes data to path atomically: path.tmp, fsync, rename, fsync of the folder. */
fsdp_status fsdp_io_write_file_atomic(const char *path, const void *data, size_t n);
/* fsync + close; reports either failure (a full disk may only show up here). */
fsdp_status fsdp_io_close_sync(int fd, const char *path);
/* mkdir -p. */
fsdp_status fsdp_mkdirs(const char *path);
/* fsync of a directory, so a rename inside it survives a crash. */
fsdp_status fsdp_fsync_dir(const char *path);
/* Folder part of a path ("a/b" -> "a", "b" -> "."), into out (cap bytes). */
void fsdp_path_dirname(const char *path, char *out, size_t cap);
/* Removes a folder and the plain files in it (one level; best effort, for temporary folders). */
void fsdp_rm_tree1(const char *dir);
/* malloc'd printf (small strings: paths, names); NULL on failure. */
char *fsdp_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
