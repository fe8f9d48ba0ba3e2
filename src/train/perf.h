/* perf.h — the trainer's speed figures: the MFU arithmetic (its denominator, the GEMM peak, is the
 * kernels layer's fsdp_gemm_peak), and the running statistics of the
 * outlier guard (--skip-update-z: an llm.c-style skip of an update whose loss or grad norm is far
 * outside its recent values). Library code: status codes, no output. */
#ifndef FSDP_TRAIN_PERF_H
#define FSDP_TRAIN_PERF_H

#include "fsdp.h"

/* Model FLOPs per second of a step that trained `tokens` tokens with flops_per_token each (the family's
 * forward + backward count: recompute is not counted, as MFU counts) in dt seconds; and that as a
 * share of peak_flops (the sum over ranks of each rank's peak, FLOP/s). 0 when an argument is <= 0. */
double fsdp_train_model_flops(double flops_per_token, double tokens, double dt);
double fsdp_train_mfu(double flops_per_token, double tokens, double dt, double peak_flops);

/* The outlier guard's window: the last `window` finite values of the step loss and of the grad norm. */
#define FSDP_OUTLIER_MAX_WINDOW 4096
typedef struct {
    int window, n, head;                    /* capacity; values held (<= window); next slot */
    double val[2][FSDP_OUTLIER_MAX_WINDOW]; /* [0] loss, [1] grad norm */
} fsdp_outlier;

/* window in 2..FSDP_OUTLIER_MAX_WINDOW. */
fsdp_status fsdp_outlier_init(fsdp_outlier *o, int window);
/* The z-score (x - mean) / std (population std) of x against the window's values of kind k (0 loss,
 * 1 grad norm), before x is added; NAN until the window is full or when x is not finite. A window of
 * equal values gives 0 for x equal to them and +-INFINITY otherwise. */
double fsdp_outlier_z(const fsdp_outlier *o, int k, double x);
/* Adds one step's loss and grad norm (non-finite values are not added; llm.c's rule: a skipped
 * step's values enter the window too, so a lasting shift of the loss is not skipped forever). */
void fsdp_outlier_push(fsdp_outlier *o, double loss, double norm);

#endif
