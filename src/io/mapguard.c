/* mapguard.c — a SIGBUS handler scoped to guarded reads of a mapping (mapguard.h): sigsetjmp before
 * the read, siglongjmp out of the handler when the fault lies in the guarded range. */
#include "io/mapguard.h"

#include "core/core.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

typedef struct guard {
    sigjmp_buf jb;
    const char *lo, *hi;
    const char *volatile addr; /* set by the handler */
    struct guard *prev;        /* this thread's enclosing guard */
} guard;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int users;                /* guarded calls running, all threads */
static struct sigaction before;  /* the disposition while users == 0 */
static _Thread_local guard *cur; /* this thread's innermost guard */

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    guard *g = cur;
    const char *a = (const char *)si->si_addr;
    if (g != NULL && a >= g->lo && a < g->hi) {
        g->addr = a;
        siglongjmp(g->jb, 1);
    }
    /* Not a guarded read: what would have happened without us. */
    if ((before.sa_flags & SA_SIGINFO) && before.sa_sigaction != NULL) {
        before.sa_sigaction(sig, si, ctx);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        before.sa_handler(sig);
    } else {
        /* the default action (death by SIGBUS): a fault repeats on return, a sent signal is pending */
        signal(SIGBUS, SIG_DFL);
        raise(SIGBUS);
    }
}

fsdp_status fsdp_io_map_guard(const void *base, size_t len, const char *path, void (*fn)(void *arg),
                              void *arg) {
    guard g;
    g.lo = (const char *)base;
    g.hi = g.lo + len;
    g.addr = NULL;
    g.prev = cur;
    int failed = 0;
    pthread_mutex_lock(&mu);
    if (users == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        failed = sigaction(SIGBUS, &sa, &before) != 0;
    }
    if (!failed) users++;
    pthread_mutex_unlock(&mu);
    if (failed) return fsdp_set_error(FSDP_EIO, "cannot install a SIGBUS handler to read %s", path);
    int faulted = 0;
    /* 0: the mask is not saved (a system call per read saved); the jump leaves SIGBUS blocked, so the
     * fault path unblocks it. */
    if (sigsetjmp(g.jb, 0) == 0) {
        cur = &g;
        fn(arg);
    } else {
        faulted = 1;
        sigset_t m;
        sigemptyset(&m);
        sigaddset(&m, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &m, NULL);
    }
    cur = g.prev;
    pthread_mutex_lock(&mu);
    if (--users == 0) sigaction(SIGBUS, &before, NULL);
    pthread_mutex_unlock(&mu);
    if (faulted)
        return fsdp_set_error(FSDP_EIO,
                              "%s shrank while it was being read (SIGBUS at byte %zu of %zu mapped): another "
                              "process truncated or rewrote it; use it when it is complete",
                              path, (size_t)(g.addr - g.lo), len);
    return FSDP_OK;
}
