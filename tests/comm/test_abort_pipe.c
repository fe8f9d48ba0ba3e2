/* test_abort_pipe.c — an abort ends the process in bounded time even when its output cannot be
 * written (issue 39, item 2): a rank's stdout and stderr are pipes to its launcher's daemon, and a
 * daemon that stops reading (stuck behind a cut link) leaves them full; the flush before MPI_Abort, the
 * program's last error message and the watchdogs' own messages then block for as long as it does.
 * fsdp_comm_abort arms a deadline thread first (fsdp_comm_abort_arm), whose message is written with a
 * bound (fsdp_write_bounded), and ends the process with the abort's status.
 * Here a child process's stdout and stderr are one pipe that nobody reads, filled to the brim, with
 * unflushed output in stdio's buffer; it aborts with status 7 and must be gone within the deadline
 * (before the fix: blocked in fflush until killed). Also fsdp_write_bounded itself on a full and an
 * empty pipe. */
#include "comm/comm_impl.h"
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Fills the pipe's write end w until it takes no more (non-blocking), then makes it blocking again. */
static void fill_pipe(int w) {
    int fl = fcntl(w, F_GETFL);
    fcntl(w, F_SETFL, fl | O_NONBLOCK);
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    while (write(w, buf, sizeof buf) > 0) {
    }
    while (write(w, buf, 1) > 0) { /* the last bytes of a partly filled page */
    }
    fcntl(w, F_SETFL, fl);
}

/* Runs one child that aborts with its output blocked; *elapsed: seconds until it was gone. Returns its
 * wait status, or -1 if it was still alive after limit_s (then killed). */
static int run_child(int arm_first, double limit_s, double *elapsed) {
    int p[2];
    if (pipe(p) != 0) return -2;
    double t0 = fsdp_time_s();
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]); /* nobody reads: the launcher's daemon that stopped */
        fill_pipe(p[1]);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        static char obuf[1 << 16]; /* glibc sizes its own buffer for a pipe at a page: give it room */
        setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
        for (int i = 0; i < 1000; i++) /* buffered, unflushed: the flush before MPI_Abort blocks */
            printf("step %d: loss 1.234\n", i);
        fsdp_comm_t *c = NULL;
        fsdp_comm_config cfg = fsdp_comm_config_default();
        cfg.backend = FSDP_COMM_SELF;
        if (fsdp_comm_init(&c, &cfg, NULL, NULL) != FSDP_OK) _exit(90);
        if (arm_first) { /* as fsdp-train does: armed, then its last message (blocks), then the abort */
            fsdp_comm_abort_arm(c, 7);
            fprintf(stderr, "fsdp-train: rank 0: the run failed; aborting\n");
        }
        fsdp_comm_abort(c, 7);
        _exit(91); /* not reached */
    }
    close(p[1]);
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        *elapsed = fsdp_time_s() - t0;
        if (w == pid) break;
        if (*elapsed > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    close(p[0]);
    return st;
}

int main(void) {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMI_SIZE");

    /* fsdp_write_bounded: a full pipe takes nothing and the call returns after its bound */
    int p[2];
    CHECK(pipe(p) == 0);
    fill_pipe(p[1]);
    double t0 = fsdp_time_s();
    size_t w = fsdp_write_bounded(p[1], "abc", 3, 150);
    double dt = fsdp_time_s() - t0;
    CHECKF(w == 0 && dt >= 0.1 && dt < 2.0, "full pipe: wrote %zu in %.3f s", w, dt);
    char drain[4096];
    CHECK(read(p[0], drain, sizeof drain) > 0);  /* one page free: room for the next write */
    w = fsdp_write_bounded(p[1], "abc", 3, 150); /* room again */
    CHECK(w == 3);
    close(p[0]);
    close(p[1]);

    for (int arm = 0; arm < 2; arm++) {
        double el = 0;
        int st = run_child(arm, 15.0, &el);
        CHECKF(st != -1, "arm %d: the aborting process was still alive after %.1f s (blocked on its output)",
               arm, el);
        CHECKF(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 7, "arm %d: wait status %d", arm, st);
        CHECKF(el < FSDP_ABORT_GRACE_S + 3.0, "arm %d: ended after %.2f s (deadline %d s)", arm, el,
               FSDP_ABORT_GRACE_S);
        if (st >= 0 && WIFEXITED(st))
            fprintf(stderr,
                    "arm %d: aborting process with a full output pipe ended with status %d after %.2f s\n",
                    arm, WEXITSTATUS(st), el);
    }
    return TEST_MAIN_END();
}
