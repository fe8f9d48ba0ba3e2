/* mlp.c — the shortest complete program that trains with fsdp.c directly: a two-layer MLP
 * (y = W2 relu(W1 x + b1) + b2, mean squared error against a fixed linear teacher), each layer one
 * FSDP unit, forward and backward written by hand around the unit hooks, gradients written into
 * main_grad with the first-touch flag, 2 micro-batches per step, clipping and AdamW.
 * Run: ./example_mlp   or   mpirun -np 2 ./example_mlp. Exits 1 if the loss does not fall. */
#include "fsdp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { IN = 8, HID = 32, OUT = 4, B = 8, MICRO = 2, STEPS = 40 };

static fsdp_comm_t *comm;
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((x) != FSDP_OK) {                                                                                \
            fprintf(stderr, "%s failed: %s\n", #x, fsdp_last_error());                                       \
            fsdp_comm_abort(comm, 1);                                                                        \
        }                                                                                                    \
    } while (0)

/* Sample i of (step, micro, rank): input x [IN] and the teacher's target t [OUT]. */
static void sample(int step, int micro, int rank, int i, float *x, float *t) {
    int id = ((step * MICRO + micro) * 64 + rank) * B + i;
    for (int k = 0; k < IN; k++)
        x[k] = sinf(1.7f * (float)k + 0.31f * (float)id);
    for (int j = 0; j < OUT; j++) {
        t[j] = 0;
        for (int k = 0; k < IN; k++)
            t[j] += 0.5f * cosf((float)(j + 2 * k)) * x[k];
    }
}

/* dst (=)+= src: the first-touch protocol (acc 0: overwrite, acc 1: accumulate). */
static void put(float *dst, int acc, const float *src, int n) {
    for (int k = 0; k < n; k++)
        dst[k] = acc ? dst[k] + src[k] : src[k];
}

int main(int argc, char **argv) {
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "comm: %s\n", fsdp_last_error());
        return 1;
    }
    int rank = fsdp_comm_rank(comm);

    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.compute_dtype = FSDP_F32; /* BF16 (the default) hands out fsdp_bf16 views instead */
    fsdp_engine_t *eng;
    TRY(fsdp_engine_init(&eng, comm, &ec));
    fsdp_tensor_spec l1[] = {
        {.name = "w", .ndim = 2, .shape = {HID, IN}, .init = FSDP_INIT_NORMAL, .std = 0.35f}, /* (HID, IN) */
        {.name = "b", .ndim = 1, .shape = {HID}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    };
    fsdp_tensor_spec l2[] = {
        {.name = "w",
         .ndim = 2,
         .shape = {OUT, HID},
         .init = FSDP_INIT_NORMAL,
         .std = 0.18f}, /* (OUT, HID) */
        {.name = "b", .ndim = 1, .shape = {OUT}, .init = FSDP_INIT_ZEROS, .no_decay = 1},
    };
    fsdp_unit_t *u1, *u2;
    TRY(fsdp_engine_add_unit(eng, "layer1", l1, 2, NULL, &u1));
    TRY(fsdp_engine_add_unit(eng, "layer2", l2, 2, NULL, &u2));
    TRY(fsdp_engine_init_params(eng));
    fsdp_adamw_config oc = fsdp_adamw_config_default();
    oc.lr = 1e-2f;

    float first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        TRY(fsdp_engine_begin_step(eng, MICRO));
        float loss = 0;
        for (int m = 0; m < MICRO; m++) {
            TRY(fsdp_engine_begin_micro(eng, m));
            float x[B][IN], t[B][OUT], z[B][HID], h[B][HID], dy[B][OUT];
            for (int i = 0; i < B; i++)
                sample(step, m, rank, i, x[i], t[i]);
            /* forward */
            float *w1, *b1, *w2, *b2;
            TRY(fsdp_unit_pre_forward(u1)); /* all-gather layer1 */
            TRY(fsdp_unit_param(u1, 0, (void **)&w1));
            TRY(fsdp_unit_param(u1, 1, (void **)&b1));
            for (int i = 0; i < B; i++)
                for (int j = 0; j < HID; j++) {
                    z[i][j] = b1[j];
                    for (int k = 0; k < IN; k++)
                        z[i][j] += w1[j * IN + k] * x[i][k];
                    h[i][j] = z[i][j] > 0 ? z[i][j] : 0;
                }
            TRY(fsdp_unit_post_forward(u1)); /* FULL_SHARD: layer1's full params freed */
            TRY(fsdp_unit_pre_forward(u2));
            TRY(fsdp_unit_param(u2, 0, (void **)&w2));
            TRY(fsdp_unit_param(u2, 1, (void **)&b2));
            for (int i = 0; i < B; i++)
                for (int j = 0; j < OUT; j++) {
                    float y = b2[j];
                    for (int k = 0; k < HID; k++)
                        y += w2[j * HID + k] * h[i][k];
                    loss += (y - t[i][j]) * (y - t[i][j]) / (B * OUT * MICRO);
                    dy[i][j] = 2 * (y - t[i][j]) / (B * OUT); /* d(mean loss of this micro-batch)/dy */
                }
            TRY(fsdp_unit_post_forward(u2));
            /* backward, last unit first */
            float gw2[OUT * HID] = {0}, gb2[OUT] = {0}, dh[B][HID], gw1[HID * IN] = {0}, gb1[HID] = {0};
            TRY(fsdp_unit_pre_backward(u2)); /* params back, main_grad allocated (uninitialised) */
            TRY(fsdp_unit_param(u2, 0, (void **)&w2));
            for (int i = 0; i < B; i++) {
                for (int j = 0; j < OUT; j++) {
                    gb2[j] += dy[i][j];
                    for (int k = 0; k < HID; k++)
                        gw2[j * HID + k] += dy[i][j] * h[i][k];
                }
                for (int k = 0; k < HID; k++) {
                    dh[i][k] = 0;
                    for (int j = 0; j < OUT; j++)
                        dh[i][k] += w2[j * HID + k] * dy[i][j];
                }
            }
            float *g;
            int acc;
            TRY(fsdp_unit_main_grad(u2, 0, &g, &acc)); /* a GEMM would take beta = acc */
            put(g, acc, gw2, OUT * HID);
            TRY(fsdp_unit_grad_from_f32(u2, 1, gb2)); /* the same rule, done by the library */
            TRY(fsdp_unit_post_backward(u2));         /* reduce-scatter into the fp32 grad shard, free */
            TRY(fsdp_unit_pre_backward(u1));
            for (int i = 0; i < B; i++)
                for (int j = 0; j < HID; j++) {
                    float dz = z[i][j] > 0 ? dh[i][j] : 0;
                    gb1[j] += dz;
                    for (int k = 0; k < IN; k++)
                        gw1[j * IN + k] += dz * x[i][k];
                }
            TRY(fsdp_unit_main_grad(u1, 0, &g, &acc));
            put(g, acc, gw1, HID * IN);
            TRY(fsdp_unit_grad_from_f32(u1, 1, gb1));
            TRY(fsdp_unit_post_backward(u1));
        }
        float norm;
        TRY(fsdp_engine_clip_grad_norm(eng, 1.0f, &norm));
        TRY(fsdp_engine_adamw_step(eng, &oc));
        TRY(fsdp_comm_all_reduce(comm, &loss, &loss, 1, FSDP_F32, FSDP_AVG));
        if (step == 0) first = loss;
        last = loss;
        if (rank == 0 && (step % 5 == 0 || step == STEPS - 1))
            printf("step %2d  loss %.5f  grad norm %.4f\n", step, (double)loss, (double)norm);
    }
    fsdp_engine_free(eng);
    fsdp_comm_free(comm);
    if (!(last < 0.5f * first)) {
        if (rank == 0) fprintf(stderr, "loss did not fall: %.5f -> %.5f\n", (double)first, (double)last);
        return 1;
    }
    return 0;
}
