/* time.c — the library's one clock: monotonic seconds for timings, timelines and timeouts.
 * CLOCK_MONOTONIC never jumps with wall-clock changes, so differences are safe to report. */
#include "core/core.h"

#include <time.h>

double fsdp_time_s(void) {
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux for a valid timespec pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
