/* test_softmax_ce.c — fused softmax + cross-entropy over padded-vocab logits against float64: losses,
 * mean, dlogits (also against finite differences of the double mean loss); padded columns holding
 * huge/inf/NaN values change nothing and get exactly zero gradient; in-place dlogits; ignored targets
 * (FSDP_IGNORE_INDEX) against the masked double mean; sampling softmax. */
#include "kernels/kernels.h"

#include "kref.h"

#include <omp.h>

enum { N = 6, V = 13, VP = 16 };

/* Double mean loss over the real columns. */
static double mean_loss_ref(const double *x, const int *tg, double *losses) {
    double tot = 0;
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            mx = x[n * VP + j] > mx ? x[n * VP + j] : mx;
        for (int j = 0; j < V; j++)
            s += exp(x[n * VP + j] - mx);
        double l = log(s) + mx - x[n * VP + tg[n]];
        if (losses) losses[n] = l;
        tot += l;
    }
    return tot / N;
}

int main(void) {
    kref_seed(11);
    float lg[N * VP], lg0[N * VP], losses[N], losses0[N], dl[N * VP], dl0[N * VP], mean, mean0;
    double xd[N * VP], rl[N], rd[N * VP];
    int tg[N] = {0, 12, 5, 5, 7, 1};
    kref_fill(lg, N * VP, 4.0f);
    for (int j = 0; j < V; j++)
        lg[2 * VP + j] = 1000.0f + j; /* exp overflows without the max subtraction */
    /* padded columns: values that would dominate or poison a softmax over Vp */
    for (int n = 0; n < N; n++) {
        lg[n * VP + 13] = 1e30f, lg[n * VP + 14] = INFINITY, lg[n * VP + 15] = n % 2 ? NAN : -INFINITY;
    }
    for (int i = 0; i < N * VP; i++)
        xd[i] = lg[i];
    double rmean = mean_loss_ref(xd, tg, rl);

    kref_fill_nan(losses, N), kref_fill_nan(dl, N * VP);
    CHECK_OK(fsdp_softmax_crossentropy(losses, &mean, dl, lg, tg, N, V, VP, 1.0f / N));
    CHECK(kref_check_close("losses", losses, rl, N, 1e-5, 1e-6) == 0);
    CHECKF(test_close(mean, rmean, 1e-5, 1e-6), "mean %.9g want %.9g", mean, rmean);

    /* dlogits vs central differences of the double mean loss, padded columns exactly 0 */
    const double h = 1e-5;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < VP; j++) {
            int i = n * VP + j;
            if (j >= V) {
                rd[i] = 0;
                continue;
            }
            double s = xd[i];
            xd[i] = s + h;
            double lp = mean_loss_ref(xd, tg, NULL);
            xd[i] = s - h;
            double lm = mean_loss_ref(xd, tg, NULL);
            xd[i] = s;
            rd[i] = (lp - lm) / (2 * h);
        }
    CHECK(kref_check_close("dlogits", dl, rd, N * VP, 1e-4, 1e-7) == 0);
    int pad_nonzero = 0;
    for (int n = 0; n < N; n++)
        for (int j = V; j < VP; j++)
            pad_nonzero += dl[n * VP + j] != 0.0f;
    CHECK(pad_nonzero == 0);
    /* analytic check too (tighter than the FD): dloss * (p - onehot) */
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            mx = xd[n * VP + j] > mx ? xd[n * VP + j] : mx;
        for (int j = 0; j < V; j++)
            s += exp(xd[n * VP + j] - mx);
        for (int j = 0; j < V; j++)
            rd[n * VP + j] = (exp(xd[n * VP + j] - mx) / s - (j == tg[n])) / N;
    }
    CHECK(kref_check_close("dlogits analytic", dl, rd, N * VP, 1e-5, 1e-8) == 0);
    double rd_an[N * VP];
    memcpy(rd_an, rd, sizeof rd_an);

    /* Padded columns zeroed instead: bit-identical results. */
    memcpy(lg0, lg, sizeof lg);
    for (int n = 0; n < N; n++)
        for (int j = V; j < VP; j++)
            lg0[n * VP + j] = 0.0f;
    CHECK_OK(fsdp_softmax_crossentropy(losses0, &mean0, dl0, lg0, tg, N, V, VP, 1.0f / N));
    CHECK(memcmp(losses, losses0, sizeof losses) == 0 && mean == mean0 && memcmp(dl, dl0, sizeof dl) == 0);

    /* In place: dlogits over the logits. NULL outputs allowed. */
    memcpy(lg0, lg, sizeof lg);
    CHECK_OK(fsdp_softmax_crossentropy(NULL, NULL, lg0, lg0, tg, N, V, VP, 1.0f / N));
    CHECK(memcmp(lg0, dl, sizeof dl) == 0);
    CHECK_OK(fsdp_softmax_crossentropy(NULL, &mean0, NULL, lg, tg, N, V, VP, 1.0f));
    CHECK(mean0 == mean);

    /* Bad input: nothing written. */
    kref_fill_nan(losses0, N);
    tg[3] = V; /* a padded column is not a valid target */
    CHECK_ERR(fsdp_softmax_crossentropy(losses0, NULL, NULL, lg, tg, N, V, VP, 1.0f), FSDP_EINVAL,
              "position 3");
    CHECK(isnan(losses0[0]));
    tg[3] = 5;
    CHECK_ERR(fsdp_softmax_crossentropy(losses0, NULL, NULL, lg, tg, N, VP + 1, VP, 1.0f), FSDP_EINVAL,
              "exceeds");

    /* Ignored targets (FSDP_IGNORE_INDEX): loss 0, zero gradient rows (padded columns included, in place
     * too), the mean over the counted rows; counted rows give the bits of the unmasked call. */
    {
        int tgi[N];
        memcpy(tgi, tg, sizeof tgi);
        tgi[1] = FSDP_IGNORE_INDEX, tgi[4] = FSDP_IGNORE_INDEX;
        double tot = 0;
        int want = 0;
        for (int n = 0; n < N; n++)
            if (tgi[n] != FSDP_IGNORE_INDEX) tot += rl[n], want++;
        float li[N], dli[N * VP], mi;
        int cnt = -1;
        kref_fill_nan(li, N), kref_fill_nan(dli, N * VP);
        CHECK_OK(fsdp_softmax_crossentropy_count(li, &mi, &cnt, dli, lg, tgi, N, V, VP, 1.0f / want));
        CHECK(cnt == want);
        CHECKF(test_close(mi, tot / want, 1e-6, 1e-7), "masked mean %.9g want %.9g", mi, tot / want);
        int bad = 0;
        for (int n = 0; n < N; n++) {
            int ign = tgi[n] == FSDP_IGNORE_INDEX;
            bad += ign ? li[n] != 0.0f : memcmp(&li[n], &losses[n], 4) != 0;
            for (int j = 0; j < VP; j++) {
                /* counted rows: the analytic gradient with dloss 1/want */
                double r = ign || j >= V ? 0.0 : rd_an[n * VP + j] * N / want;
                bad += ign ? dli[n * VP + j] != 0.0f : !test_close(dli[n * VP + j], r, 1e-5, 1e-8);
            }
        }
        CHECKF(bad == 0, "%d bad masked entries", bad);
        /* without the count, and in place over the logits */
        float lgi[N * VP];
        memcpy(lgi, lg, sizeof lgi);
        CHECK_OK(fsdp_softmax_crossentropy(NULL, &mean0, lgi, lgi, tgi, N, V, VP, 1.0f / want));
        CHECK(mean0 == mi && memcmp(lgi, dli, sizeof dli) == 0);
        /* every target ignored: mean 0, count 0, zero gradient */
        for (int n = 0; n < N; n++)
            tgi[n] = FSDP_IGNORE_INDEX;
        CHECK_OK(fsdp_softmax_crossentropy_count(li, &mi, &cnt, dli, lg, tgi, N, V, VP, 1.0f));
        bad = 0;
        for (int i = 0; i < N * VP; i++)
            bad += dli[i] != 0.0f;
        CHECK(cnt == 0 && mi == 0.0f && bad == 0 && li[0] == 0.0f);
        /* no target ignored: the count is N and everything equals the plain call bit for bit */
        CHECK_OK(fsdp_softmax_crossentropy_count(li, &mi, &cnt, dli, lg, tg, N, V, VP, 1.0f / N));
        CHECK(cnt == N && mi == mean && memcmp(li, losses, sizeof li) == 0 &&
              memcmp(dli, dl, sizeof dl) == 0);
        /* other negative targets are still refused */
        tgi[2] = -101;
        CHECK_ERR(fsdp_softmax_crossentropy(NULL, NULL, NULL, lg, tgi, N, V, VP, 1.0f), FSDP_EINVAL, "-101");
    }

    /* Sampling softmax with temperature. */
    float pr[N * VP];
    const float temp = 0.7f;
    CHECK_OK(fsdp_softmax_forward(pr, lg, N, V, VP, temp));
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            mx = xd[n * VP + j] > mx ? xd[n * VP + j] : mx;
        for (int j = 0; j < V; j++)
            s += exp((xd[n * VP + j] - mx) / temp);
        for (int j = 0; j < VP; j++)
            rd[n * VP + j] = j < V ? exp((xd[n * VP + j] - mx) / temp) / s : 0.0;
    }
    CHECK(kref_check_close("softmax", pr, rd, N * VP, 1e-5, 1e-8) == 0);
    CHECK_ERR(fsdp_softmax_forward(pr, lg, N, V, VP, 0.0f), FSDP_EINVAL, "temperature");

    /* The thread count changes nothing (fixed summation orders). */
    for (int nt = 1; nt <= 3; nt += 2) {
        omp_set_num_threads(nt);
        CHECK_OK(fsdp_softmax_crossentropy(losses0, &mean0, dl0, lg, tg, N, V, VP, 1.0f / N));
        CHECKF(memcmp(losses, losses0, sizeof losses) == 0 && mean == mean0 &&
                   memcmp(dl, dl0, sizeof dl) == 0,
               "%d threads", nt);
    }
    CHECK(fsdp_mem_current(FSDP_MEM_OTHER) == 0);
    return TEST_MAIN_END();
}
