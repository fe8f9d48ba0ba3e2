/* comm_trace.c — the collective half of the trace recorder: fsdp_trace_write gathers every rank's
 * events to rank 0, which writes one file (core/trace.c records and serialises; core sits below the
 * communicator, so the gather lives here). Lengths travel as I64, the texts as U8 bytes. */
#include "comm/comm_impl.h"
#include "core/trace_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The communicator has no gather: every rank receives every rank's text (padded to the longest) and
 * rank 0 writes. The buffers are plain malloc on purpose: writing a trace must not change the memory
 * figures. */
static fsdp_status gather_and_write(const char *path, fsdp_comm_t *comm, const char *text, size_t len) {
    int world = fsdp_comm_size(comm), rank = fsdp_comm_rank(comm);
    int64_t mine = (int64_t)len, *lens = malloc((size_t)world * sizeof *lens);
    char *pad = NULL, *all = NULL, *joined = NULL;
    fsdp_status st = FSDP_OK;
    if (lens == NULL) return FSDP_ERR(FSDP_ENOMEM, "trace lengths of %d ranks", world);
    fsdp_comm_set_label(comm, "trace write: lengths");
    if ((st = fsdp_comm_all_gather(comm, &mine, lens, 1, FSDP_I64)) != FSDP_OK) goto done;
    size_t longest = 1, sum = 0; /* >= 1 byte: a count of 0 would be a no-op that leaves all unset */
    for (int r = 0; r < world; r++) {
        if (lens[r] < 0 || (uint64_t)lens[r] > SIZE_MAX - sum) {
            st = FSDP_ERR(FSDP_EFORMAT, "rank %d sent a trace length of %lld bytes", r, (long long)lens[r]);
            goto done;
        }
        if ((size_t)lens[r] > longest) longest = (size_t)lens[r];
        sum += (size_t)lens[r];
    }
    size_t bytes;
    if (!fsdp_mul_ok((size_t)world, longest, &bytes) || sum == SIZE_MAX) {
        st = FSDP_ERR(FSDP_EINVAL, "trace texts of %d ranks (up to %zu bytes each) overflow", world, longest);
        goto done;
    }
    pad = calloc(1, longest);
    all = malloc(bytes);
    joined = malloc(sum + 1);
    if (pad == NULL || all == NULL || joined == NULL) {
        st = FSDP_ERR(FSDP_ENOMEM, "trace gather buffers: %zu bytes x %d ranks", longest, world);
        goto done;
    }
    if (len) memcpy(pad, text, len);
    fsdp_comm_set_label(comm, "trace write: events");
    if ((st = fsdp_comm_all_gather(comm, pad, all, longest, FSDP_U8)) != FSDP_OK) goto done;
    if (rank == 0) {
        size_t at = 0;
        for (int r = 0; r < world; r++) {
            memcpy(joined + at, all + (size_t)r * longest, (size_t)lens[r]);
            at += (size_t)lens[r];
        }
        st = core_trace_write_file(path, joined, at);
    }
done:
    free(joined);
    free(all);
    free(pad);
    free(lens);
    return st;
}

fsdp_status fsdp_trace_write(const char *path, fsdp_comm_t *comm) {
    if (path == NULL || path[0] == '\0') return FSDP_ERR(FSDP_EINVAL, "trace path must not be empty");
    char *text = NULL;
    size_t len = 0;
    FSDP_TRY(core_trace_serialise(&text, &len));
    fsdp_status st = comm == NULL || fsdp_comm_size(comm) == 1 ? core_trace_write_file(path, text, len)
                                                               : gather_and_write(path, comm, text, len);
    free(text);
    return st;
}
