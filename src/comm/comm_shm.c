/* comm_shm.c — all-gather, reduce-scatter and all-reduce between the ranks of one host through one
 * shared-memory segment (MPI-3 MPI_Win_allocate_shared on the node communicator). Open MPI's generic
 * collectives move large buffers between the ranks of a host far below memory speed (BENCHMARKS.md);
 * this transport moves the same bytes at memory speed with plain copies and reduces in fp32 in rank order
 * (deterministic, one rounding for bf16, the same bits as the MPI all-to-all path).
 *
 * Each rank owns a segment: a control line and two slots of shm_slot bytes. A collective is a series of
 * rounds, numbered for the communicator's whole life (every rank runs the same collectives in the same
 * order, so round numbers agree). In round R every rank writes its contribution into its slot R % 2 and
 * publishes pub = R + 1; then it reads the round from every rank's slot (all-gather: copy; reductions:
 * sum in rank order) and records done = R + 1. Slot R % 2 is written again in round R + 2 only once
 * every rank's done >= R + 1, so a writer never overwrites what a reader still needs, and the write of
 * round R + 1 overlaps the peers' reads of round R. Nothing blocks here: shm_progress advances a request
 * as far as the peers allow and returns; comm.c's wait loop supplies the deadline, so a rank that died
 * or stalled ends in the usual FSDP_ETIMEOUT. Requests are processed in the order they were started
 * (comm.c keeps them in a list), since rounds must complete in order.
 *
 * Single copy. Through the slots every byte is copied twice (into the sender's slot, out of it). Where
 * the kernel lets a process read its peers' memory (Linux cross-memory attach, process_vm_readv; probed
 * at start-up on every rank, FSDP_COMM_SHM_CMA=0 turns it off), all-gathers and reduce-scatters whose
 * per-rank block is at least shm_cma_min bytes take one round instead: each rank publishes its send
 * buffer's address, reads what it needs straight from the peers' buffers (all-gather: into recv;
 * reduce-scatter: tile by tile into a small scratch, summed in rank order as above), records done, and
 * completes once every rank has read its buffer (so the caller may reuse it). An in-place
 * reduce-scatter into the rank's own block (recv = send + rank*count) writes its result there; one
 * with recv == send, on rank r > 0, writes it to the front of its buffer tile by tile, each tile once
 * rank 0 has read it (cma_reduce). Buffers in the peer's shared heap are read with plain loads instead
 * of process_vm_readv (heap_src). */
#define _GNU_SOURCE /* process_vm_readv */
#include "comm/comm_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/* Control line at the start of each rank's segment; the slots follow at SHM_HDR. */
typedef struct {
    uint64_t pub;       /* rounds this rank has published (into its slots, or its address) */
    uint64_t addr;      /* single-copy round: the address of this rank's send buffer */
    uint64_t pid;       /* this process (peers read its memory with process_vm_readv) */
    uint64_t probe;     /* the address of a value peers read at start-up to check they can */
    uint64_t heap_off;  /* single-copy round: 1 + the send buffer's offset in the shared heap, or 0 */
    uint64_t heap_fd;   /* the shared heap's memfd in this process (peers open /proc/PID/fd/FD) */
    uint64_t heap_size; /* its size in bytes; 0: no heap */
    uint64_t prog;      /* single-copy reduce-scatter: (round << 32) + tiles of its block summed */
    uint64_t done;      /* rounds this rank has finished reading */
    char pad1[56];
} shm_ctl;

#define SHM_TILE ((size_t)64 << 10) /* single-copy reduce-scatter: bytes per rank per tile */

#define SHM_HDR 4096 /* bytes before slot 0 (keeps the slots page-aligned) */

/* The row's communicator state (c->state[COMM_ROW_SHM]; NULL: the row is off). */
typedef struct {
    MPI_Win win;            /* the window holding every rank's segment */
    char **seg;             /* (size) each rank's segment as mapped here */
    const void **src;       /* (size) scratch: one round's contributions */
    size_t slot;            /* bytes per slot (two per rank) */
    uint64_t round;         /* rounds handed out so far */
    int cma;                /* peers' memory readable with process_vm_readv (single-copy path) */
    size_t cma_min;         /* bytes per rank block from which the single-copy path is used */
    int *pid;               /* (size) each rank's process id */
    char *tile;             /* (size x SHM_TILE bytes) reduce-scatter: one tile of every rank's block */
    int heap;               /* every rank maps every peer's shared heap (core_heap_open): direct reads */
    const char **heap_peer; /* (size) each rank's heap as mapped here (read-only for peers) */
    size_t *heap_size;      /* (size) its size */
} shm_state;

/* A request's state (r->priv; zero before the start). */
typedef struct {
    uint64_t round0;   /* its first round */
    size_t chunk;      /* elements per round (reduce-scatter: per rank block) */
    size_t nchunks, k; /* rounds in all, rounds read */
    int wrote;         /* round k published, not yet read */
    int cma;           /* single copy: one round, peers read this rank's buffer directly */
    int read;          /* single copy: this rank has read every peer's part */
    size_t tiles;      /* single-copy reduce-scatter: tiles of this rank's block summed so far */
} shm_req;
_Static_assert(sizeof(shm_req) <= COMM_REQ_PRIV_BYTES, "shm_req must fit fsdp_comm_req.priv");

static shm_state *sh(const fsdp_comm_t *c) { return c->state[COMM_ROW_SHM]; }
static shm_req *rq(fsdp_comm_req_t *r) { return (shm_req *)(void *)r->priv; }

static shm_ctl *ctl_of(const fsdp_comm_t *c, int r) { return (shm_ctl *)sh(c)->seg[r]; }
static char *slot_of(const fsdp_comm_t *c, int r, uint64_t round) {
    return sh(c)->seg[r] + SHM_HDR + (size_t)(round & 1) * sh(c)->slot;
}

int fsdp_comm_shm_active(const fsdp_comm_t *c) { return c != NULL && sh(c) != NULL; }

void comm_shm_test_info(const fsdp_comm_t *c, int *cma, int *heap) {
    *cma = sh(c) ? sh(c)->cma : 0;
    *heap = sh(c) ? sh(c)->heap : 0;
}

static uint64_t load_acq(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store_rel(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static void heap_init(fsdp_comm_t *c, MPI_Comm node, int allowed);

/* The transport's environment knobs (core/env.c, docs/ENV.md), read before anything is set up so that
 * a bad value is an error on every rank alike: FSDP_COMM_SHM=0 turns the transport off (MPI's
 * collectives then run on one host too); FSDP_COMM_SHM_SLOT_KIB the slot size (default 4096: two 4 MiB
 * slots per rank); FSDP_COMM_SHM_CMA=0 the single-copy path, FSDP_COMM_SHM_CMA_MIN_KIB the block size
 * from which it is used; FSDP_COMM_SHM_HEAP=0 the direct reads. */
typedef struct {
    int on, cma, heap;
    long slot_kib, cma_min_kib;
} shm_knobs;

static fsdp_status read_knobs(shm_knobs *k) {
    FSDP_TRY(fsdp_env_bool("FSDP_COMM_SHM", 1, &k->on));
    FSDP_TRY(fsdp_env_int("FSDP_COMM_SHM_SLOT_KIB", 4096, &k->slot_kib));
    FSDP_TRY(fsdp_env_bool("FSDP_COMM_SHM_CMA", 1, &k->cma));
    FSDP_TRY(fsdp_env_int("FSDP_COMM_SHM_CMA_MIN_KIB", 64, &k->cma_min_kib));
    FSDP_TRY(fsdp_env_bool("FSDP_COMM_SHM_HEAP", 1, &k->heap));
    return FSDP_OK;
}

fsdp_status comm_shm_init(fsdp_comm_t *c, MPI_Comm node, int node_size) {
    shm_knobs k;
    FSDP_TRY(read_knobs(&k));
    if (!c->shm_allowed || !k.on) return FSDP_OK;
    if (node_size != c->size || c->size < 2) return FSDP_OK; /* several hosts (or one rank): MPI */
    shm_state *S = calloc(1, sizeof *S);
    if (S == NULL) return FSDP_ERR(FSDP_ENOMEM, "the shared-memory row's state");
    S->win = MPI_WIN_NULL;
    c->state[COMM_ROW_SHM] = S;
    sh(c)->slot = (size_t)k.slot_kib * 1024;
    sh(c)->seg = calloc((size_t)c->size, sizeof *sh(c)->seg);
    sh(c)->src = calloc((size_t)c->size, sizeof *sh(c)->src);
    if (sh(c)->seg == NULL || sh(c)->src == NULL) {
        comm_shm_free(c);
        return FSDP_ERR(FSDP_ENOMEM, "shared-memory segment table (%d ranks)", c->size);
    }
    char *base = NULL;
    MPI_Aint bytes = (MPI_Aint)(SHM_HDR + 2 * sh(c)->slot);
    int rc = MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node, &base, &sh(c)->win);
    if (rc != MPI_SUCCESS) {
        /* Not fatal: the MPI collectives still work. Every rank sees the same failure (the call is
         * collective), so every rank falls back together. */
        sh(c)->win = MPI_WIN_NULL;
        comm_shm_free(c);
        return FSDP_OK;
    }
    memset(base, 0, SHM_HDR);                                  /* pub = done = 0 */
    static const uint64_t probe_value = 0x66736470636d6121ull; /* "fsdpcma!" */
    ((shm_ctl *)base)->pid = (uint64_t)getpid();
    ((shm_ctl *)base)->probe = (uint64_t)(uintptr_t)&probe_value;
    int node_rank = 0;
    MPI_Comm_rank(node, &node_rank);
    for (int r = 0; r < c->size && rc == MPI_SUCCESS; r++) {
        MPI_Aint sz = 0;
        int du = 0;
        char *p = NULL;
        /* node ranks were split with key = world rank, so node rank r is world rank r */
        rc = MPI_Win_shared_query(sh(c)->win, r, &sz, &du, &p);
        sh(c)->seg[r] = p;
    }
    if (rc == MPI_SUCCESS) rc = MPI_Barrier(node); /* every control line zeroed before first use */
    if (rc != MPI_SUCCESS || node_rank != c->rank) {
        comm_shm_free(c);
        return FSDP_ERR(FSDP_ECOMM, "rank %d: setting up the shared-memory segment failed", c->rank);
    }
    /* Single copy where every rank can read every peer's memory (a container or a hardened kernel may
     * forbid it): each rank reads each peer's probe value; all ranks must agree. */
    int can = k.cma;
    sh(c)->pid = calloc((size_t)c->size, sizeof *sh(c)->pid);
    if (sh(c)->pid == NULL) can = 0;
    for (int r = 0; can && r < c->size; r++) {
        const shm_ctl *pc = (const shm_ctl *)sh(c)->seg[r];
        sh(c)->pid[r] = (int)pc->pid;
        uint64_t v = 0;
        struct iovec lo = {&v, sizeof v}, re = {(void *)(uintptr_t)pc->probe, sizeof v};
        if (r != c->rank &&
            (process_vm_readv((pid_t)pc->pid, &lo, 1, &re, 1, 0) != (ssize_t)sizeof v || v != probe_value))
            can = 0;
    }
    int all = 0;
    if (MPI_Allreduce(&can, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) all = 0;
    if (all) {
        sh(c)->tile = malloc((size_t)c->size * SHM_TILE);
        all = sh(c)->tile != NULL;
    }
    /* every rank ran the same checks; a failed malloc on one rank alone must not split them */
    int agreed = 0;
    if (MPI_Allreduce(&all, &agreed, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) agreed = 0;
    sh(c)->cma = agreed;
    if (agreed) heap_init(c, node, k.heap);
    sh(c)->cma_min = (size_t)k.cma_min_kib * 1024;
    comm_rows_prepend(c, &comm_transport_shm); /* on: it carries what it takes, before the backend */
    return FSDP_OK;
}

/* Direct reads: every rank maps every peer's shared heap (shm_heap.c) read-only, through the peer's
 * memfd in /proc, so buffers from fsdp_mem_alloc_shared are read with plain loads. Like the
 * single-copy path this needs a kernel that lets a rank see its peers (a hardened one may refuse);
 * all ranks must succeed, or none uses it. FSDP_COMM_SHM_HEAP=0 turns it off. */
static void heap_unmap(fsdp_comm_t *c) {
    for (int r = 0; sh(c)->heap_peer != NULL && r < c->size; r++)
        if (r != c->rank && sh(c)->heap_peer[r] != NULL)
            munmap((void *)sh(c)->heap_peer[r], sh(c)->heap_size[r]);
    free(sh(c)->heap_peer);
    free(sh(c)->heap_size);
    sh(c)->heap_peer = NULL;
    sh(c)->heap_size = NULL;
}

static void heap_init(fsdp_comm_t *c, MPI_Comm node, int allowed) {
    int ok = allowed, opened = 0;
    core_heap_info hi = {.fd = -1};
    shm_ctl *me = ctl_of(c, c->rank);
    sh(c)->heap_peer = calloc((size_t)c->size, sizeof *sh(c)->heap_peer);
    sh(c)->heap_size = calloc((size_t)c->size, sizeof *sh(c)->heap_size);
    if (sh(c)->heap_peer == NULL || sh(c)->heap_size == NULL) ok = 0;
    if (ok) ok = opened = core_heap_open(c->size, &hi) == FSDP_OK; /* not fatal: the single-copy path stays */
    me->heap_fd = ok ? (uint64_t)hi.fd : 0;
    me->heap_size = ok ? (uint64_t)hi.size : 0;
    if (MPI_Barrier(node) != MPI_SUCCESS) ok = 0; /* every rank's heap published */
    for (int r = 0; ok && r < c->size; r++) {
        const shm_ctl *pc = ctl_of(c, r);
        if (r == c->rank) {
            sh(c)->heap_peer[r] = hi.base;
            sh(c)->heap_size[r] = hi.size;
            continue;
        }
        if (pc->heap_size == 0 || pc->heap_fd > INT32_MAX) {
            ok = 0;
            break;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", sh(c)->pid[r], (int)pc->heap_fd);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            ok = 0;
            break;
        }
        void *p = mmap(NULL, (size_t)pc->heap_size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            ok = 0;
            break;
        }
        sh(c)->heap_peer[r] = p;
        sh(c)->heap_size[r] = (size_t)pc->heap_size;
    }
    int all = 0;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) all = 0;
    sh(c)->heap = all;
    if (!all) {
        heap_unmap(c);
        if (opened) core_heap_close();
    }
}

void comm_shm_free(fsdp_comm_t *c) {
    if (sh(c) == NULL) return;
    if (sh(c)->heap) core_heap_close();
    heap_unmap(c);
    sh(c)->heap = 0;
    if (sh(c)->win != MPI_WIN_NULL) MPI_Win_free(&sh(c)->win);
    sh(c)->win = MPI_WIN_NULL;
    free(sh(c)->seg);
    sh(c)->seg = NULL;
    free(sh(c)->src);
    sh(c)->src = NULL;
    free(sh(c)->pid);
    sh(c)->pid = NULL;
    free(sh(c)->tile);
    free(sh(c));
    c->state[COMM_ROW_SHM] = NULL;
}

/* F32/BF16 only: the integer and byte types are small control values (sizes, ids, texts) that Open
 * MPI's collectives carry well enough, and the transport's reductions are floating-point ones. */
static int comm_shm_eligible(const fsdp_comm_req_t *r) {
    return (r->t == FSDP_F32 || r->t == FSDP_BF16) &&
           (r->coll == COLL_ALL_GATHER || r->coll == COLL_REDUCE_SCATTER || r->coll == COLL_ALL_REDUCE);
}

/* Splits the request into rounds: all-gather and all-reduce move `chunk` elements of the buffer per
 * round; reduce-scatter moves `chunk` elements of every rank's block (world sub-blocks per slot). */
static void comm_shm_start(fsdp_comm_req_t *r) {
    fsdp_comm_t *c = r->c;
    size_t es = fsdp_dtype_size(r->t), per = sh(c)->slot / es;
    rq(r)->k = 0;
    rq(r)->wrote = 0;
    rq(r)->read = 0;
    rq(r)->tiles = 0;
    if (sh(c)->cma && r->coll != COLL_ALL_REDUCE && r->count * es >= sh(c)->cma_min) {
        rq(r)->cma = 1;
        rq(r)->nchunks = 1;
        rq(r)->round0 = sh(c)->round++;
        return;
    }
    rq(r)->cma = 0;
    if (r->coll == COLL_REDUCE_SCATTER) per /= (size_t)c->size;
    if (per > 64) per -= per % 16; /* sub-blocks start on 64-byte lines */
    if (per == 0) per = 1;
    rq(r)->chunk = per;
    rq(r)->nchunks = (r->count + per - 1) / per;
    rq(r)->round0 = sh(c)->round;
    sh(c)->round += rq(r)->nchunks;
}

static int all_at_least(const fsdp_comm_t *c, size_t field, uint64_t v) {
    for (int s = 0; s < c->size; s++) {
        const uint64_t *p = (const uint64_t *)((const char *)ctl_of(c, s) + field);
        if (load_acq(p) < v) return 0;
    }
    return 1;
}

/* Reads n bytes at the peer's address into dst (process_vm_readv may move less than asked). */
static fsdp_status cma_read(const fsdp_comm_t *c, int peer, void *dst, uint64_t src, size_t n) {
    while (n > 0) {
        struct iovec lo = {dst, n}, re = {(void *)(uintptr_t)src, n};
        ssize_t got = process_vm_readv((pid_t)sh(c)->pid[peer], &lo, 1, &re, 1, 0);
        if (got <= 0)
            return FSDP_ERR(FSDP_ECOMM, "rank %d: reading %zu bytes of rank %d's buffer failed: %s", c->rank,
                            n, peer, got < 0 ? strerror(errno) : "nothing read");
        dst = (char *)dst + got;
        src += (uint64_t)got;
        n -= (size_t)got;
    }
    return FSDP_OK;
}

/* Where peer's send buffer lies in its shared heap: that buffer as mapped here, at byte `at` of it, for
 * n bytes (NULL when it is not in the heap). A peer's offset is checked against its heap's size. */
static fsdp_status heap_src(const fsdp_comm_t *c, int peer, size_t at, size_t n, const char **out) {
    *out = NULL;
    if (!sh(c)->heap) return FSDP_OK;
    uint64_t ho = __atomic_load_n(&ctl_of(c, peer)->heap_off, __ATOMIC_ACQUIRE);
    if (ho == 0) return FSDP_OK;
    size_t size = sh(c)->heap_size[peer];
    if (ho - 1 > size || at > size - (ho - 1) || n > size - (ho - 1) - at)
        return FSDP_ERR(FSDP_ECOMM,
                        "rank %d: rank %d published a buffer at offset %llu of its %zu-byte shared heap, "
                        "outside it (a corrupted control line)",
                        c->rank, peer, (unsigned long long)(ho - 1), size);
    *out = sh(c)->heap_peer[peer] + (ho - 1) + at;
    return FSDP_OK;
}

/* Single-copy reduce-scatter: this rank's block, tile by tile, every rank's contribution (its own
 * straight from its buffer, a peer's straight from its shared heap where it lies there, the others'
 * through the scratch) summed in rank order. Each tile done is published in prog.
 * In place on rank > 0 the result goes to the front of the buffer, its block 0, which rank 0 reads
 * (tile by tile, as this rank reads its own block): tile t is written once rank 0's prog says it has
 * summed tile t, so rank 0 never reads a result instead of a contribution; until then this returns
 * with *finished = 0 and the next progress call goes on from the same tile. Before, the result went
 * to the rank's own block and was moved to the front once every peer was done: a second pass over
 * the block (estimated at ~40% of a 16 MiB bf16 reduce-scatter at 2 ranks). A caller that takes the
 * result in its own block (recv = send + rank*count, as the engine does) needs neither: no peer reads
 * that block, so it is written at once. */
static fsdp_status cma_reduce(fsdp_comm_req_t *r, char *dst, int *finished) {
    fsdp_comm_t *c = r->c;
    const size_t es = fsdp_dtype_size(r->t), per = SHM_TILE / es, blk = (size_t)c->rank * r->count * es;
    const char *mine = (const char *)r->send + blk;
    const uint64_t round = rq(r)->round0;
    const int front = r->in_place && c->rank > 0;
    shm_ctl *me = ctl_of(c, c->rank), *first = ctl_of(c, 0);
    *finished = 0;
    for (size_t off = rq(r)->tiles * per; off < r->count; off += per) {
        size_t len = r->count - off < per ? r->count - off : per;
        if (front && load_acq(&first->prog) < (round << 32) + rq(r)->tiles + 1 &&
            load_acq(&first->done) < round + 1)
            return FSDP_OK; /* rank 0 still reads this tile of block 0 */
        for (int s = 0; s < c->size; s++) {
            if (s == c->rank) {
                sh(c)->src[s] = mine + off * es;
                continue;
            }
            const char *direct = NULL;
            FSDP_TRY(heap_src(c, s, blk + off * es, len * es, &direct));
            if (direct != NULL) {
                sh(c)->src[s] = direct;
                continue;
            }
            char *tile = sh(c)->tile + (size_t)s * SHM_TILE;
            uint64_t at = __atomic_load_n(&ctl_of(c, s)->addr, __ATOMIC_ACQUIRE) + blk + off * es;
            FSDP_TRY(cma_read(c, s, tile, at, len * es));
            sh(c)->src[s] = tile;
        }
        comm_req_reduce(r, dst + off * es, sh(c)->src, len);
        rq(r)->tiles++;
        store_rel(&me->prog, (round << 32) + rq(r)->tiles);
    }
    *finished = 1;
    return FSDP_OK;
}

static fsdp_status cma_progress(fsdp_comm_req_t *r, int *done) {
    fsdp_comm_t *c = r->c;
    shm_ctl *me = ctl_of(c, c->rank);
    const uint64_t round = rq(r)->round0;
    const size_t es = fsdp_dtype_size(r->t), n = r->count * es;
    *done = 0;
    if (!rq(r)->wrote) {
        if (me->done != round) return FSDP_OK; /* an earlier round of this rank is not finished */
        /* every rank is done with this rank's previous round: the address may change */
        if (round >= 1 && !all_at_least(c, offsetof(shm_ctl, done), round)) return FSDP_OK;
        __atomic_store_n(&me->addr, (uint64_t)(uintptr_t)r->send, __ATOMIC_RELAXED);
        size_t send_bytes = r->coll == COLL_ALL_GATHER ? n : n * (size_t)c->size;
        __atomic_store_n(&me->heap_off, sh(c)->heap ? core_heap_offset(r->send, send_bytes) : 0,
                         __ATOMIC_RELAXED);
        store_rel(&me->pub, round + 1);
        rq(r)->wrote = 1;
    }
    if (!rq(r)->read) {
        if (!all_at_least(c, offsetof(shm_ctl, pub), round + 1)) return FSDP_OK;
        if (r->coll == COLL_ALL_GATHER) {
            char *recv = r->recv;
            for (int s = 0; s < c->size; s++) {
                char *dst = recv + (size_t)s * n;
                if (s == c->rank) {
                    if (!r->in_place) memcpy(dst, r->send, n);
                    continue;
                }
                const char *direct = NULL;
                FSDP_TRY(heap_src(c, s, 0, n, &direct));
                if (direct != NULL)
                    memcpy(dst, direct, n);
                else
                    FSDP_TRY(cma_read(c, s, dst, __atomic_load_n(&ctl_of(c, s)->addr, __ATOMIC_ACQUIRE), n));
            }
        } else { /* reduce-scatter; in place on rank > 0 too, the result goes to the front */
            int finished = 0;
            FSDP_TRY(cma_reduce(r, r->recv, &finished));
            if (!finished) return FSDP_OK;
        }
        store_rel(&me->done, round + 1);
        rq(r)->read = 1;
    }
    if (!all_at_least(c, offsetof(shm_ctl, done), round + 1)) return FSDP_OK; /* peers still read */
    rq(r)->k = 1;
    *done = 1;
    return FSDP_OK;
}

/* Advances r as far as the peers allow; *done = 1 once its last round is read. */
static fsdp_status comm_shm_progress(fsdp_comm_req_t *r, int *done) {
    if (rq(r)->cma) return cma_progress(r, done);
    fsdp_comm_t *c = r->c;
    const size_t es = fsdp_dtype_size(r->t), w = (size_t)c->size;
    shm_ctl *me = ctl_of(c, c->rank);
    while (rq(r)->k < rq(r)->nchunks) {
        uint64_t round = rq(r)->round0 + rq(r)->k;
        if (me->done != round) break; /* an earlier round of this rank is not finished */
        size_t off = rq(r)->k * rq(r)->chunk;
        size_t len = r->count - off < rq(r)->chunk ? r->count - off : rq(r)->chunk;
        if (!rq(r)->wrote) {
            /* The slot was last used by round - 2: every rank must have read it. */
            if (round >= 2 && !all_at_least(c, offsetof(shm_ctl, done), round - 1)) break;
            char *slot = slot_of(c, c->rank, round);
            const char *send = r->send;
            switch (r->coll) {
            case COLL_ALL_GATHER:
                memcpy(slot, send + off * es, len * es);
                if (!r->in_place)
                    memcpy((char *)r->recv + ((size_t)c->rank * r->count + off) * es, send + off * es,
                           len * es);
                break;
            case COLL_REDUCE_SCATTER:
                for (size_t s = 0; s < w; s++)
                    memcpy(slot + s * rq(r)->chunk * es, send + (s * r->count + off) * es, len * es);
                break;
            case COLL_ALL_REDUCE: memcpy(slot, send + off * es, len * es); break;
            default: break;
            }
            store_rel(&me->pub, round + 1);
            rq(r)->wrote = 1;
        }
        if (!all_at_least(c, offsetof(shm_ctl, pub), round + 1)) break;
        char *recv = r->recv;
        switch (r->coll) {
        case COLL_ALL_GATHER:
            for (size_t s = 0; s < w; s++)
                if (s != (size_t)c->rank)
                    memcpy(recv + (s * r->count + off) * es, slot_of(c, (int)s, round), len * es);
            break;
        case COLL_REDUCE_SCATTER:
        case COLL_ALL_REDUCE: {
            const void **src = sh(c)->src;
            size_t sub = r->coll == COLL_REDUCE_SCATTER ? (size_t)c->rank * rq(r)->chunk * es : 0;
            for (size_t s = 0; s < w; s++)
                src[s] = slot_of(c, (int)s, round) + sub;
            comm_req_reduce(r, recv + off * es, src, len);
            break;
        }
        default: break;
        }
        store_rel(&me->done, round + 1);
        rq(r)->wrote = 0;
        rq(r)->k++;
    }
    *done = rq(r)->k == rq(r)->nchunks;
    return FSDP_OK;
}

static fsdp_status shm_start(fsdp_comm_req_t *r) {
    comm_shm_start(r);
    return FSDP_OK;
}

/* Every round is published as the request reaches it, in start order: nothing is ever deferred. */
static int shm_posted_all(const fsdp_comm_req_t *r) {
    (void)r;
    return 1;
}

const comm_transport comm_transport_shm = {
    .name = "shm",
    .id = COMM_ROW_SHM,
    .caps = COMM_CAP_ACCUMULATE | COMM_CAP_HOST_POLL, /* no staging: ranks read each other's buffers */
    .takes = comm_shm_eligible,
    .start = shm_start,
    .progress = comm_shm_progress,
    .posted_all = shm_posted_all,
};
