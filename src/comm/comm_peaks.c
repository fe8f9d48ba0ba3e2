/* comm_peaks.c — the allocator's measured peaks of this rank, and their maximum over ranks (one I64
 * all-reduce: sizes travel as exact 64-bit integers). The memory plan's printer compares them with its
 * prediction. */
#include "comm/comm_impl.h"

#include <stdint.h>

void fsdp_mem_peaks_local(fsdp_mem_peaks *out) {
    if (out == NULL) return;
    for (int c = 0; c < FSDP_MEM_NCAT; c++)
        out->peak[c] = fsdp_mem_peak((fsdp_mem_cat)c);
    out->total = fsdp_mem_total_peak();
}

#define PEAK_VALS (FSDP_MEM_NCAT + 1) /* every category, then the total */

fsdp_status fsdp_mem_peaks_max(fsdp_comm_t *c, fsdp_mem_peaks *inout) {
    if (c == NULL || inout == NULL) return FSDP_ERR(FSDP_EINVAL, "comm and inout must not be NULL");
    int64_t v[PEAK_VALS];
    for (int k = 0; k < PEAK_VALS; k++) /* allocations are below PTRDIFF_MAX: they fit */
        v[k] = (int64_t)(k < FSDP_MEM_NCAT ? inout->peak[k] : inout->total);
    fsdp_comm_set_label(c, "memory peaks max over ranks");
    FSDP_TRY(fsdp_comm_all_reduce(c, v, v, PEAK_VALS, FSDP_I64, FSDP_MAX));
    for (int k = 0; k < PEAK_VALS; k++) {
        if (v[k] < 0)
            return FSDP_ERR(FSDP_EFORMAT, "a rank sent a negative memory peak (%lld)", (long long)v[k]);
        if (k < FSDP_MEM_NCAT)
            inout->peak[k] = (size_t)v[k];
        else
            inout->total = (size_t)v[k];
    }
    return FSDP_OK;
}
