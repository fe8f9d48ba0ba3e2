/* trace_impl.h — the trace recorder's internals that the layer above uses: core cannot call the
 * communicator, so fsdp_trace_write (src/comm/comm_trace.c) gathers what these produce. */
#ifndef FSDP_TRACE_IMPL_H
#define FSDP_TRACE_IMPL_H

#include "core/core.h"

/* This rank's events as JSON records, each followed by ",\n"; *text is malloc'd (free it). */
fsdp_status core_trace_serialise(char **text, size_t *len);
/* Writes body (records as core_trace_serialise makes them, any number of ranks' joined) to path as
 * one Chrome-trace JSON file. FSDP_EIO naming the path. */
fsdp_status core_trace_write_file(const char *path, const char *body, size_t len);

#endif
