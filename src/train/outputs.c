/* outputs.c — the run's output files: claiming and probing them before the run, the --metrics lines
 * (a failed write stops the run), the --report JSON and the --trace file. */
#define _GNU_SOURCE
#include "train/run.h"

#include "core/core.h"
#include "fsdp_model.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "train/model_load.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every rank can create, write, fsync and remove a small file in dir (a read-only or full file
 * system, a folder without write permission: found before the run, not at its first save). */
fsdp_status fsdp_train_probe_folder(const char *dir, int rank) {
    char *p = fsdp_strdupf("%s/.write-test.rank_%05d", dir, rank);
    if (!p) return FSDP_ERR(FSDP_ENOMEM, "no memory for a path");
    fsdp_status s = fsdp_out_check(p, "--checkpoint-dir");
    free(p);
    return s;
}

/* No output is an input or another output, nor among the checkpoint folder's, the --init-from folder's
 * or the --export-final folder's own entries (--report onto ck/latest, --report = --metrics,
 * --export-final inside a step folder): refused naming both flags, before anything is written. */
fsdp_status fsdp_train_claim_paths(const fsdp_train_config *c) {
    const unsigned D = FSDP_CLAIM_DIR, I = FSDP_CLAIM_IN, O = FSDP_CLAIM_OUT;
    FSDP_TRY(fsdp_io_claim(c->checkpoint_dir, "--checkpoint-dir", D | O | (c->resume ? I : 0),
                           fsdp_ckpt_managed_name));
    FSDP_TRY(fsdp_io_claim(c->init_from, "--init-from", D | I, NULL));
    FSDP_TRY(fsdp_io_claim(c->export_final, "--export-final", D | O, fsdp_export_managed_name));
    FSDP_TRY(fsdp_io_claim(c->metrics, "--metrics", O, NULL));
    FSDP_TRY(fsdp_io_claim(c->report, "--report", O, NULL));
    return fsdp_io_claim(c->trace, "--trace", O, NULL);
}

/* --metrics: appended to, so not replaced through a temporary; still a regular file or nothing,
 * never one of the run's inputs, and opened without blocking (a FIFO with no reader is refused). */
fsdp_status fsdp_train_open_metrics(const char *path, int *fd_out) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) return fsdp_io_symlink_error("--metrics", path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return fsdp_set_error(FSDP_EIO, "--metrics %s is %s, not a regular file: refusing to write to it",
                              path, fsdp_io_kind(st.st_mode));
    if (fsdp_io_is_input(path))
        return fsdp_set_error(FSDP_EIO, "--metrics %s is a file this run reads: choose another path", path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
    if (fd < 0 && errno == ELOOP) return fsdp_io_symlink_error("--metrics", path); /* made since the lstat */
    if (fd < 0)
        return fsdp_set_error(FSDP_EIO, "cannot open --metrics %s for appending: %s", path, strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return fsdp_set_error(FSDP_EIO, "--metrics %s is not a regular file: refusing to write to it", path);
    }
    *fd_out = fd;
    return FSDP_OK;
}

/* One metrics line; a failure (a full disk) is an error of the run, never a lost line. */
fsdp_status fsdp_train_write_metrics(int fd, const char *path, const char *line, int n) {
    if (n < 0) return FSDP_ERR(FSDP_EINTERNAL, "metrics line did not format");
    off_t before = lseek(fd, 0, SEEK_END);
    fsdp_status s = fsdp_io_write_all(fd, line, (size_t)n, path);
    if (s != FSDP_OK) {
        /* No half line at the end of a JSONL file (a full disk writes short first). */
        if (before >= 0) (void)!ftruncate(fd, before);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        return fsdp_set_error(s,
                              "--metrics: %s; the run stops rather than lose metrics (the last checkpoint "
                              "is intact: free space and --resume)",
                              msg);
    }
    return FSDP_OK;
}

/* --report through a temporary beside it, renamed over a regular file or nothing. */
fsdp_status fsdp_train_write_report(const char *path, const fsdp_plan *plan, const fsdp_mem_peaks *meas) {
    fsdp_out out;
    FSDP_TRY(fsdp_out_begin(&out, path, "--report", 0));
    close(out.fd); /* fsdp_plan_write_json writes by name */
    out.fd = -1;
    fsdp_status s = fsdp_plan_write_json(out.tmp, plan, meas);
    if (s != FSDP_OK) {
        fsdp_out_abort(&out);
        return s;
    }
    return fsdp_out_commit(&out);
}

/* --trace the same way. Collective: every rank's events go to rank 0, which writes. */
fsdp_status fsdp_train_write_trace(const char *path, fsdp_comm_t *comm) {
    fsdp_out out = {.fd = -1};
    fsdp_status s = FSDP_OK;
    const int rank0 = fsdp_comm_rank(comm) == 0;
    if (rank0) {
        s = fsdp_out_begin(&out, path, "--trace", 0);
        if (s == FSDP_OK) {
            close(out.fd);
            out.fd = -1;
        }
    }
    s = fsdp_comm_agree(comm, s, "creating the --trace file");
    if (s == FSDP_OK) s = fsdp_trace_write(rank0 ? out.tmp : path, comm); /* only rank 0 writes */
    if (rank0 && s == FSDP_OK) s = fsdp_out_commit(&out);
    fsdp_out_abort(&out);
    return fsdp_comm_agree(comm, s, "writing the --trace file");
}
