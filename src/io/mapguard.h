/* mapguard.h — reading a mapped file that may shrink under us: another process truncating a file we
 * have mapped makes the next access past its new end raise SIGBUS, which would kill the process. */
#ifndef FSDP_IO_MAPGUARD_H
#define FSDP_IO_MAPGUARD_H

#include "fsdp.h"

#include <stddef.h>

/* Runs fn(arg) and turns a SIGBUS that an access to [base, base + len) raises (a mapped file that
 * shrank) into FSDP_EIO naming path and the byte, instead of the signal's death. The handler is the
 * process's only while a guarded call runs (counted across threads, and put back exactly as it was
 * when the last one returns); a SIGBUS outside the range, or on a thread outside a guarded call, goes
 * to the disposition there was before. fn is abandoned at the fault: it must only read the mapping
 * and write memory it was given (no allocation, no lock, no I/O). */
fsdp_status fsdp_io_map_guard(const void *base, size_t len, const char *path, void (*fn)(void *arg),
                              void *arg);

#endif
