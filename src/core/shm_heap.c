/* shm_heap.c — the host-shared heap: one arena per process, backed by an anonymous shared-memory file
 * (memfd), that the other ranks on the host map read-only (comm_shm.c opens it through /proc/PID/fd).
 * Buffers a collective reads from its peers (main_grad, the bf16 gradient wire, unsharded parameters)
 * come from here through fsdp_mem_alloc_shared, so a peer reads them with plain loads instead of a
 * kernel copy (process_vm_readv pins the pages and copies well below memory speed; a reduce-scatter
 * that reads its peers' blocks in place runs at memory speed: BENCHMARKS.md has the figures).
 *
 * The arena is reserved, not committed: the file is sized to the machine's memory divided by the ranks
 * on the host (sparse; pages exist only once written; FSDP_SHM_HEAP_MIB sets another size) and mapped
 * once per process, and once in every peer. A block that does not fit comes from the ordinary heap
 * (its collectives then copy through process_vm_readv). Tools that shadow every mapped byte
 * (valgrind) need a small FSDP_SHM_HEAP_MIB. Blocks are page-aligned
 * extents handed out first fit from the lowest address, so the same pages serve step after step and
 * the resident part stays near the high-water mark of the live blocks. Freed extents keep their pages
 * (like alloc.c's reuse park) until core_heap_trim (fsdp_mem_trim) punches them out of the file.
 *
 * The arena exists from the first core_heap_open (a communicator with the shared-memory transport) to
 * the process's end; blocks come from it while at least one opener is left, fsdp_mem_alloc's heap
 * otherwise. Everything here sits behind one mutex: an allocation is far rarer than the work on it. */
#define _GNU_SOURCE /* memfd_create, fallocate */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define HEAP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_ASAN 1
#endif
#endif
#ifdef HEAP_ASAN
#include <sanitizer/asan_interface.h>
#define HEAP_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define HEAP_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define HEAP_POISON(p, n)   ((void)(p), (void)(n))
#define HEAP_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HEAP_PAGE ((size_t)4096)

typedef struct {
    size_t off, len;
} heap_ext;

static pthread_mutex_t heap_mu = PTHREAD_MUTEX_INITIALIZER;
static int heap_fd = -1;
static char *heap_base;
static size_t heap_size;
static int heap_users;          /* core_heap_open minus core_heap_close */
static heap_ext *heap_free_ext; /* free extents, sorted by offset, never adjacent */
static size_t heap_nfree, heap_capfree;
static size_t heap_live;        /* bytes (page-rounded) handed out and not yet freed */
static size_t heap_hwm;         /* highest end offset handed out since the start or the last trim */
static size_t heap_cached_peak; /* most of heap_hwm - heap_live at once (freed pages still held) */

/* The arena's size: FSDP_SHM_HEAP_MIB, else the machine's memory divided among the `sharers` processes
 * that map each other's arenas (each maps them all: the address space reserved per process is the
 * machine's memory, whatever the number of ranks). */
static fsdp_status heap_size_wanted(int sharers, size_t *out) {
    long mib = -1;
    FSDP_TRY(fsdp_env_int("FSDP_SHM_HEAP_MIB", -1, &mib));
    if (mib >= 0) {
        *out = (size_t)mib << 20;
        return FSDP_OK;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) {
        *out = (size_t)1 << 34;
        return FSDP_OK;
    }
    size_t s = (size_t)pages * (size_t)psz / (size_t)(sharers > 1 ? sharers : 1);
    *out = s & ~(((size_t)2 << 20) - 1);
    return FSDP_OK;
}

/* Called with heap_mu held: creates the arena once. */
static fsdp_status heap_create_locked(int sharers) {
    if (heap_base != NULL) return FSDP_OK;
    size_t size = 0;
    FSDP_TRY(heap_size_wanted(sharers, &size));
    if (size < HEAP_PAGE) return FSDP_ERR(FSDP_EINVAL, "FSDP_SHM_HEAP_MIB must be a positive number of MiB");
    int fd = memfd_create("fsdp-shm-heap", MFD_CLOEXEC);
    if (fd < 0) return FSDP_ERR(FSDP_ENOMEM, "memfd_create for the shared heap failed: %s", strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return FSDP_ERR(FSDP_ENOMEM, "sizing the shared heap to %zu MiB failed: %s", size >> 20, strerror(e));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return FSDP_ERR(FSDP_ENOMEM, "mapping the shared heap (%zu MiB) failed: %s", size >> 20, strerror(e));
    }
    heap_free_ext = malloc(16 * sizeof *heap_free_ext);
    if (heap_free_ext == NULL) {
        munmap(p, size);
        close(fd);
        return FSDP_ERR(FSDP_ENOMEM, "shared heap: the free list");
    }
    heap_capfree = 16;
    heap_free_ext[0] = (heap_ext){0, size};
    heap_nfree = 1;
    heap_fd = fd;
    heap_base = p;
    heap_size = size; /* not poisoned as a whole: ASan's shadow of the reservation would be 1/8 of it */
    return FSDP_OK;
}

fsdp_status core_heap_open(int sharers, core_heap_info *out) {
    if (out == NULL) return FSDP_ERR(FSDP_EINVAL, "out must not be NULL");
    pthread_mutex_lock(&heap_mu);
    fsdp_status st = heap_create_locked(sharers);
    if (st == FSDP_OK) {
        heap_users++;
        *out = (core_heap_info){.fd = heap_fd, .base = heap_base, .size = heap_size};
    }
    pthread_mutex_unlock(&heap_mu);
    return st;
}

void core_heap_close(void) {
    pthread_mutex_lock(&heap_mu);
    if (heap_users > 0) heap_users--;
    pthread_mutex_unlock(&heap_mu);
}

void *core_heap_alloc(size_t bytes) {
    if (bytes == 0 || bytes > SIZE_MAX - HEAP_PAGE) return NULL;
    size_t len = (bytes + HEAP_PAGE - 1) & ~(HEAP_PAGE - 1);
    void *p = NULL;
    pthread_mutex_lock(&heap_mu);
    for (size_t i = 0; heap_users > 0 && i < heap_nfree; i++) {
        heap_ext *e = &heap_free_ext[i];
        if (e->len < len) continue;
        p = heap_base + e->off;
        if (e->off + len > heap_hwm) heap_hwm = e->off + len;
        e->off += len;
        e->len -= len;
        if (e->len == 0) {
            memmove(e, e + 1, (heap_nfree - i - 1) * sizeof *e);
            heap_nfree--;
        }
        heap_live += len;
        break;
    }
    pthread_mutex_unlock(&heap_mu);
    if (p != NULL) HEAP_UNPOISON(p, bytes);
    return p;
}

uint64_t core_heap_offset(const void *p, size_t bytes) {
    const char *c = p;
    pthread_mutex_lock(&heap_mu);
    uint64_t off = 0;
    if (heap_base != NULL && c >= heap_base && c < heap_base + heap_size &&
        bytes <= (size_t)(heap_base + heap_size - c))
        off = (uint64_t)(c - heap_base) + 1;
    pthread_mutex_unlock(&heap_mu);
    return off;
}

fsdp_status core_heap_free(void *p, size_t bytes) {
    char *c = p;
    size_t len = (bytes + HEAP_PAGE - 1) & ~(HEAP_PAGE - 1);
    pthread_mutex_lock(&heap_mu);
    if (heap_base == NULL || c < heap_base || (size_t)(c - heap_base) % HEAP_PAGE != 0 ||
        len > heap_size - (size_t)(c - heap_base) || len > heap_live) {
        pthread_mutex_unlock(&heap_mu);
        return FSDP_ERR(FSDP_EINVAL, "%p (%zu bytes) is not a block of the shared heap", p, bytes);
    }
    size_t off = (size_t)(c - heap_base), i = 0;
    while (i < heap_nfree && heap_free_ext[i].off < off)
        i++;
    /* a block overlapping a free extent was freed twice */
    if ((i < heap_nfree && heap_free_ext[i].off < off + len) ||
        (i > 0 && heap_free_ext[i - 1].off + heap_free_ext[i - 1].len > off)) {
        pthread_mutex_unlock(&heap_mu);
        return FSDP_ERR(FSDP_EINVAL, "%p (%zu bytes) overlaps free space of the shared heap", p, bytes);
    }
    int join_prev = i > 0 && heap_free_ext[i - 1].off + heap_free_ext[i - 1].len == off;
    int join_next = i < heap_nfree && heap_free_ext[i].off == off + len;
    if (join_prev && join_next) {
        heap_free_ext[i - 1].len += len + heap_free_ext[i].len;
        memmove(&heap_free_ext[i], &heap_free_ext[i + 1], (heap_nfree - i - 1) * sizeof *heap_free_ext);
        heap_nfree--;
    } else if (join_prev) {
        heap_free_ext[i - 1].len += len;
    } else if (join_next) {
        heap_free_ext[i].off = off;
        heap_free_ext[i].len += len;
    } else {
        if (heap_nfree == heap_capfree) {
            heap_ext *g = realloc(heap_free_ext, 2 * heap_capfree * sizeof *g);
            if (g == NULL) { /* the extent is lost to the arena, not to correctness */
                heap_live -= len;
                pthread_mutex_unlock(&heap_mu);
                return FSDP_OK;
            }
            heap_free_ext = g;
            heap_capfree *= 2;
        }
        memmove(&heap_free_ext[i + 1], &heap_free_ext[i], (heap_nfree - i) * sizeof *heap_free_ext);
        heap_free_ext[i] = (heap_ext){off, len};
        heap_nfree++;
    }
    heap_live -= len;
    if (heap_hwm - heap_live > heap_cached_peak) heap_cached_peak = heap_hwm - heap_live;
    pthread_mutex_unlock(&heap_mu);
    HEAP_POISON(c, len);
    return FSDP_OK;
}

size_t core_heap_live(void) {
    pthread_mutex_lock(&heap_mu);
    size_t v = heap_live;
    pthread_mutex_unlock(&heap_mu);
    return v;
}

void core_heap_cached(size_t *cur, size_t *peak) {
    pthread_mutex_lock(&heap_mu);
    *cur = heap_hwm - heap_live;
    *peak = heap_cached_peak;
    pthread_mutex_unlock(&heap_mu);
}

void core_heap_trim(void) {
    pthread_mutex_lock(&heap_mu);
    for (size_t i = 0; heap_base != NULL && i < heap_nfree; i++)
        (void)fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)heap_free_ext[i].off,
                        (off_t)heap_free_ext[i].len);
    /* the free extents hold no pages now; the live blocks' end bounds what is left */
    heap_hwm =
        heap_nfree > 0 && heap_free_ext[heap_nfree - 1].off + heap_free_ext[heap_nfree - 1].len == heap_size
            ? heap_free_ext[heap_nfree - 1].off
            : heap_size;
    if (heap_base == NULL) heap_hwm = 0;
    heap_cached_peak = heap_hwm - heap_live;
    pthread_mutex_unlock(&heap_mu);
}
