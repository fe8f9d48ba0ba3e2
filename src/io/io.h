/* io.h — small POSIX file helpers for the trainer's files (token files, checkpoints, exports):
 * whole writes and positional reads that retry short transfers and report errno with the path,
 * regular-file-only inputs and outputs (docs/DESIGN.md section 7), mkdir -p, and directory fsync for
 * crash-safe renames. */
#ifndef FSDP_IO_IO_H
#define FSDP_IO_IO_H

#include "fsdp.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* write(2) until done; FSDP_EIO naming path and errno (ENOSPC: "disk full") otherwise. */
fsdp_status fsdp_io_write_all(int fd, const void *buf, size_t n, const char *path);
/* pread(2) exactly n bytes at off; FSDP_EFORMAT if the file ends first ("truncated"), FSDP_EIO else. */
fsdp_status fsdp_io_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);

/* ---- inputs: regular files only, and remembered so no output of the same command replaces them */

/* Opens path for reading (*fd, O_CLOEXEC) only if it is a regular file. The open itself is
 * non-blocking, so a FIFO or a device never blocks (it is refused: FSDP_EIO naming path and what it
 * is); O_NONBLOCK is cleared again before returning. The file's identity joins this process's input
 * set (fsdp_io_inputs_reset). */
fsdp_status fsdp_io_open_input(const char *path, int *fd);
/* Whole file (through fsdp_io_open_input) into a fsdp_mem_alloc(OTHER) buffer with a NUL after it
 * (*len excludes it). */
fsdp_status fsdp_io_read_file(const char *path, char **data, size_t *len);
/* Adds path (when it exists) to the input set without reading it: a file of the command's input
 * data set that this run happens not to read (val.bin without evaluation) is still not an output. */
void fsdp_io_note_input(const char *path);
/* Forgets the input set and the claims: every command calls it when it starts. (The set is process-wide and
 * not locked: the trainer's file I/O runs on one thread.) */
void fsdp_io_inputs_reset(void);
/* 1 if path exists and is one of the input set's files (the same device and inode). */
int fsdp_io_is_input(const char *path);

/* ---- claims: the paths a command's flags name, so that no output is one of its inputs or another
 * of its outputs, or lies among the entries of a folder another flag owns */

#define FSDP_CLAIM_IN  1u /* the command reads it */
#define FSDP_CLAIM_OUT 2u /* the command writes it (both: a checkpoint folder on --resume) */
#define FSDP_CLAIM_DIR                                                                                       \
    4u /* a folder; managed (NULL: every entry) says which entries below it are its own                      \
        */

/* Records path (skipped when NULL or empty) as what ("--report"), after checking it against the paths
 * claimed before (since fsdp_io_inputs_reset): when either is an output, the two may not be the same
 * (by normalised path, or device and inode when both exist), and neither may lie inside a claimed
 * folder's own entries. FSDP_EINVAL naming both flags and both paths otherwise. */
fsdp_status fsdp_io_claim(const char *path, const char *what, unsigned kind,
                          int (*managed)(const char *name));
/* malloc'd absolute form of path: realpath of its longest existing folder prefix, then the rest with
 * "." and ".." resolved lexically; the last component is never resolved (a symlink stays itself).
 * NULL when nothing of it resolves. */
char *fsdp_io_normalise(const char *path);

/* ---- outputs: a temporary in the destination's folder, renamed over a regular file or nothing */

typedef struct {
    char *path; /* the destination */
    char *tmp;  /* DIR/.NAME.XXXXXX, created by fsdp_out_begin */
    int fd;     /* open on tmp (write only); -1 once closed */
    unsigned flags;
} fsdp_out;

/* fsdp_out_begin flag: the destination may be one of the input set's files (only the checkpoint
 * protocol's own `latest` pointer, which a resume reads and the next save replaces). */
#define FSDP_OUT_MAY_REPLACE_INPUT 1u

/* The error of an output path whose last component is a symbolic link (what, e.g. "--metrics", opens
 * the message; NULL: "output"). Links in the folders above it are followed as given. */
fsdp_status fsdp_io_symlink_error(const char *what, const char *path);
/* Checks, without writing anything at path, that an output can be written there: the destination is
 * a regular file or absent (a symbolic link is refused, fsdp_io_symlink_error), is not one of the input set's
 * files, and its folder exists and takes a new file (one is created and removed). what ("--report") opens the
 * messages; NULL: "output". */
fsdp_status fsdp_out_check(const char *path, const char *what);
/* The destination checks of fsdp_out_check alone, writing nothing (a destination inside a folder that
 * fsdp_io_dir_stage replaces: the new folder is where the files are written). */
fsdp_status fsdp_out_check_dest(const char *path, const char *what);
/* fsdp_out_check, then creates the temporary (mode 0644) in path's folder; o->fd is open on it. */
fsdp_status fsdp_out_begin(fsdp_out *o, const char *path, const char *what, unsigned flags);
/* fsync + close of the temporary (if o->fd is still open; else it is reopened for the fsync), a
 * recheck of the destination, rename over it, fsync of the folder. On any failure the temporary is
 * removed. Always frees o's strings. */
fsdp_status fsdp_out_commit(fsdp_out *o);
/* Closes and removes the temporary and frees o (a no-op on a zeroed or finished o). */
void fsdp_out_abort(fsdp_out *o);
/* Writes data to path through fsdp_out_begin / fsdp_out_commit (flags as there). */
fsdp_status fsdp_io_write_file_atomic(const char *path, const void *data, size_t n, unsigned flags);
/* Copies the file src to dst (atomically, as fsdp_io_write_file_atomic); nothing to do when dst already
 * is src (the same file, by device and inode). */
fsdp_status fsdp_io_copy_file(const char *src, const char *dst);

/* ---- folders as one unit: every file into a new folder beside the destination, then swapped in */

typedef struct {
    char *out;    /* the destination folder, without trailing slashes */
    char *parent; /* the folder it lies in */
    char *tmp;    /* PARENT/.NAME.TAG.XXXXXX (mkdtemp), where the files go; NULL once committed */
    int exists;   /* out is an existing folder that the commit swaps with tmp */
    char *lock;   /* PARENT/.NAME.TAG.lock, flock'ed by this writer from stage to commit or abort */
    int lock_fd;  /* its descriptor while held (lock != NULL) */
} fsdp_dir_stage;

/* What own(name, arg) says of an entry of the old folder: the command writes it (it is replaced), and
 * whether it may also be one of the command's inputs (a tokenizer, copied into tmp before the swap). */
#define FSDP_STAGE_OWN          1u
#define FSDP_STAGE_MAY_BE_INPUT 2u

/* Starts writing folder out as one unit: creates out's parent folders, takes the output's lock
 * (PARENT/.NAME.TAG.lock, an exclusive flock held until commit or abort: a second writer of the same
 * folder is refused at once, naming the folder and the holder's pid), removes what an earlier run of
 * the same command killed outright left there (folders named .NAME.TAG.XXXXXX, nothing else: under the
 * lock, no live writer's), checks
 * the old out and creates st->tmp (mode 0755). An existing out must be a folder, not a symbolic link,
 * holding only regular files that own() calls its own and that are not inputs (fsdp_io_is_input) unless
 * own() says they may be; anything else is refused naming it, since the commit removes the old folder.
 * cmd ("prepare") and what ("--out") open the messages. */
fsdp_status fsdp_io_dir_stage(fsdp_dir_stage *st, const char *out, const char *cmd, const char *what,
                              const char *tag, unsigned (*own)(const char *name, void *arg), void *arg);
/* The check of an existing out alone (fsdp_io_dir_stage's), nothing created: for a check before the work. */
fsdp_status fsdp_io_dir_check(const char *out, const char *cmd, const char *what,
                              unsigned (*own)(const char *name, void *arg), void *arg);
/* fsync of tmp, then tmp takes out's place: renameat2(RENAME_EXCHANGE) with an existing folder (whose
 * old contents, now at tmp, are removed), a plain rename when there was none; fsync of the parent. On
 * failure tmp is removed and the old folder is untouched. Always frees st's strings. */
fsdp_status fsdp_io_dir_commit(fsdp_dir_stage *st);
/* Removes tmp and frees st (a no-op on a zeroed or finished st). */
void fsdp_io_dir_abort(fsdp_dir_stage *st);

/* fsync + close; reports either failure (a full disk may only show up here). */
fsdp_status fsdp_io_close_sync(int fd, const char *path);
/* mkdir -p. */
fsdp_status fsdp_mkdirs(const char *path);
/* fsync of a directory, so a rename inside it survives a crash. */
fsdp_status fsdp_fsync_dir(const char *path);
/* Folder part of a path ("a/b" -> "a", "b" -> "."), into out (cap bytes). */
void fsdp_path_dirname(const char *path, char *out, size_t cap);
/* Removes path, best effort (temporary and set-aside folders): a folder with everything in it (up to 8
 * levels deep), anything else by unlinking it. Symbolic links are never followed: a symlink, at path
 * or anywhere inside, is removed itself and its target is untouched (openat / fstatat with
 * AT_SYMLINK_NOFOLLOW / unlinkat on folder descriptors opened O_DIRECTORY|O_NOFOLLOW). The folders
 * above path's last component are followed as given. */
void fsdp_rm_tree1(const char *path);
/* malloc'd printf (small strings: paths, names); NULL on failure. */
char *fsdp_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What a stat mode is, for messages: "a FIFO", "a folder", "a character device", ... */
const char *fsdp_io_kind(unsigned mode);

/* CRC32C (Castagnoli) of n bytes, continuing crc (start with crc = 0). */
uint32_t fsdp_crc32c(uint32_t crc, const void *data, size_t n);

#endif
