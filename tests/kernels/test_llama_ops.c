/* test_llama_ops.c — the Llama-family element-wise kernels against float64 recomputations: RMSNorm
 * (whole rows and per head, strided rows, F32 and BF16 weights) forward and backward (the analytic
 * float64 derivative and central differences of the double forward), accumulate 0 over NaN-filled
 * outputs and accumulate 1, thread-count invariance; RoPE forward/backward (the double rotation, the
 * transpose identity) and inv_freq against a double formula and against transformers' fixture
 * (tools/rope_reference.py: LlamaRotaryEmbedding / apply_rotary_pos_emb, llama3 scaling); SwiGLU
 * forward/backward against double and central differences; bad arguments refused. */
#include "kernels/kernels.h"

#include "kref.h"

#include <omp.h>

static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

/* ---------------------------------------------------------------- RMSNorm */

/* R = ntok*nh rows of C: row (t, h) at t*ld + h*C. */
static size_t roff(int r, int nh, int C, int ld) { return (size_t)(r / nh) * ld + (size_t)(r % nh) * C; }

static void rms_ref(double *out, const double *x, const double *w, int R, int nh, int C, int ld, double eps) {
    for (int r = 0; r < R; r++) {
        const double *xr = x + roff(r, nh, C, ld);
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c];
        double rs = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++)
            out[roff(r, nh, C, ld) + c] = xr[c] * rs * w[c];
    }
}

/* Analytic double backward of L = sum(out * dout); mag: the sizes of dx's two terms (the fp32 result
 * cancels between them). */
static void rms_bwd_ref(double *dx, double *mag, double *dw, const double *x, const double *w,
                        const double *d, int R, int nh, int C, int ld, double eps) {
    for (int c = 0; c < C; c++)
        dw[c] = 0;
    for (int r = 0; r < R; r++) {
        const double *xr = x + roff(r, nh, C, ld), *dr = d + roff(r, nh, C, ld);
        double ss = 0, dot = 0;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c], dot += w[c] * dr[c] * xr[c];
        double rs = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) {
            dx[roff(r, nh, C, ld) + c] = rs * w[c] * dr[c] - xr[c] * rs * rs * rs * dot / C;
            mag[roff(r, nh, C, ld) + c] = fabs(rs * w[c] * dr[c]) + fabs(xr[c] * rs * rs * rs * dot / C);
            dw[c] += dr[c] * xr[c] * rs;
        }
    }
}

static double rms_loss(const double *x, const double *w, const double *d, double *tmp, size_t n, int R,
                       int nh, int C, int ld, double eps) {
    memset(tmp, 0, n * sizeof(double));
    rms_ref(tmp, x, w, R, nh, C, ld, eps);
    double L = 0;
    for (size_t i = 0; i < n; i++)
        L += tmp[i] * d[i];
    return L;
}

/* head: use the per-head entry points (nh heads of C per token); else the whole-row ones (nh must be 1).
 * ld > nh*C tests strided rows; the padding between rows must be left untouched. fd: finite differences. */
static void test_rmsnorm(fsdp_dtype pdt, int head, int ntok, int nh, int C, int ld, float eps, int fd) {
    const int R = ntok * nh;
    const size_t n = (size_t)ntok * ld;
    float *x = malloc(n * 4), *out = malloc(n * 4), *dout = malloc(n * 4), *dx = malloc(n * 4),
          *px = malloc(n * 4), *rstd = malloc(R * 4), *w = malloc(C * 4), *dw = malloc(C * 4),
          *pw = malloc(C * 4);
    uint16_t *wb = malloc(C * 2);
    double *xd = malloc(n * 8), *wd = malloc(C * 8), *dd = malloc(n * 8), *ref = malloc(n * 8),
           *rdw = malloc(C * 8), *tmp = malloc(n * 8), *fdx = malloc(n * 8), *fdw = malloc(C * 8),
           *mag = malloc(n * 8);
    kref_fill(x, n, 2.0f), kref_fill(dout, n, 1.0f), kref_fill(px, n, 1.0f), kref_fill(pw, C, 1.0f);
    for (int t = 0; t < ntok && C > 1; t++) /* a row of large values: the scale must not matter */
        x[(size_t)t * ld] *= 50.0f;
    for (int c = 0; c < C; c++) {
        w[c] = 1.0f + 0.5f * kref_uniform(), wb[c] = kref_bf16(w[c]);
        wd[c] = pdt == FSDP_BF16 ? kref_bf16_f(wb[c]) : w[c];
    }
    for (size_t i = 0; i < n; i++)
        xd[i] = x[i], dd[i] = dout[i];
    const void *wp = pdt == FSDP_BF16 ? (const void *)wb : w;
#define RMS_FWD(o, ldo, rs, xx)                                                                              \
    (head ? fsdp_head_rmsnorm_forward(o, ldo, rs, xx, ld, wp, pdt, ntok, nh, C, eps)                         \
          : fsdp_rmsnorm_forward(o, ldo, rs, xx, ld, wp, pdt, ntok, C, eps))
#define RMS_BWD(g, gacc, gw, gwacc)                                                                          \
    (head ? fsdp_head_rmsnorm_backward(g, ld, gacc, gw, gwacc, dout, ld, x, ld, wp, pdt, rstd, ntok, nh, C)  \
          : fsdp_rmsnorm_backward(g, ld, gacc, gw, gwacc, dout, ld, x, ld, wp, pdt, rstd, ntok, C))

    /* forward: padding (elements past nh*C in each row) keeps its sentinel */
    for (size_t i = 0; i < n; i++)
        out[i] = -7.0f;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            out[roff(r, nh, C, ld) + c] = NAN;
    kref_fill_nan(rstd, R);
    CHECK_OK(RMS_FWD(out, ld, rstd, x));
    memset(ref, 0, n * 8);
    rms_ref(ref, xd, wd, R, nh, C, ld, eps);
    int bad = 0;
    for (int t = 0; t < ntok; t++)
        for (int i = nh * C; i < ld; i++)
            bad += out[(size_t)t * ld + i] != -7.0f;
    CHECKF(bad == 0, "padding written (head %d)", head);
    for (int r = 0; r < R; r++) /* compare only the row elements */
        bad += kref_check_close("rms out", out + roff(r, nh, C, ld), ref + roff(r, nh, C, ld), C, 1e-6,
                                1e-6 * maxabs(ref, n));
    CHECKF(bad == 0, "head %d pdt %d ntok %d nh %d C %d ld %d", head, pdt, ntok, nh, C, ld);
    /* rstd NULL: same out; in place (out = inp) gives the same values */
    float *out2 = malloc(n * 4);
    memcpy(out2, out, n * 4);
    CHECK_OK(RMS_FWD(out2, ld, NULL, x));
    CHECK(memcmp(out2, out, n * 4) == 0);
    memcpy(out2, x, n * 4);
    CHECK_OK(RMS_FWD(out2, ld, NULL, out2));
    bad = 0;
    for (int r = 0; r < R; r++)
        bad += memcmp(out2 + roff(r, nh, C, ld), out + roff(r, nh, C, ld), C * 4) != 0;
    CHECK(bad == 0);

    /* backward against the analytic double derivative (and finite differences when fd) */
    memset(ref, 0, n * 8);
    rms_bwd_ref(ref, mag, rdw, xd, wd, dd, R, nh, C, ld, eps);
    if (fd) {
        const double h = 1e-5;
        memset(fdx, 0, n * 8);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                size_t i = roff(r, nh, C, ld) + c;
                double s = xd[i];
                xd[i] = s + h;
                double lp = rms_loss(xd, wd, dd, tmp, n, R, nh, C, ld, eps);
                xd[i] = s - h;
                double lm = rms_loss(xd, wd, dd, tmp, n, R, nh, C, ld, eps);
                xd[i] = s;
                fdx[i] = (lp - lm) / (2 * h);
            }
        for (int c = 0; c < C; c++) {
            double s = wd[c];
            wd[c] = s + h;
            double lp = rms_loss(xd, wd, dd, tmp, n, R, nh, C, ld, eps);
            wd[c] = s - h;
            double lm = rms_loss(xd, wd, dd, tmp, n, R, nh, C, ld, eps);
            wd[c] = s;
            fdw[c] = (lp - lm) / (2 * h);
        }
        bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                size_t i = roff(r, nh, C, ld) + c;
                bad += !test_close(ref[i], fdx[i], 1e-6, 1e-8 * maxabs(fdx, n));
            }
        for (int c = 0; c < C; c++)
            bad += !test_close(rdw[c], fdw[c], 1e-6, 1e-8 * maxabs(fdw, C));
        CHECKF(bad == 0, "analytic reference vs differences (%d)", bad);
    }
    const double sx = maxabs(ref, n), sw = maxabs(rdw, C);
    for (int acc = 0; acc < 2; acc++) {
        for (size_t i = 0; i < n; i++)
            dx[i] = -7.0f;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                dx[roff(r, nh, C, ld) + c] = acc ? px[roff(r, nh, C, ld) + c] : NAN;
        if (acc)
            memcpy(dw, pw, C * 4);
        else
            kref_fill_nan(dw, C);
        CHECK_OK(RMS_BWD(dx, acc, dw, acc));
        bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                size_t i = roff(r, nh, C, ld) + c;
                bad += !test_close(dx[i], ref[i] + (acc ? px[i] : 0), 1e-5, 1e-6 * sx + 1e-6 * mag[i]);
            }
        for (int t = 0; t < ntok; t++)
            for (int i = nh * C; i < ld; i++)
                bad += dx[(size_t)t * ld + i] != -7.0f;
        CHECKF(bad == 0, "rms dinp: %d bad (head %d pdt %d acc %d C %d)", bad, head, pdt, acc, C);
        bad = 0;
        for (int c = 0; c < C; c++)
            bad += !test_close(dw[c], rdw[c] + (acc ? pw[c] : 0), 1e-5, 1e-6 * sw);
        CHECKF(bad == 0, "rms dweight: %d bad (head %d pdt %d acc %d)", bad, head, pdt, acc);
    }
    /* one output at a time gives the same bits; the thread count changes nothing */
    float *dx2 = malloc(n * 4), *dw2 = malloc(C * 4);
    CHECK_OK(RMS_BWD(dx, 0, dw, 0));
    memcpy(dx2, dx, n * 4);
    kref_fill_nan(dw2, C);
    CHECK_OK(RMS_BWD(NULL, 0, dw2, 0));
    CHECK(memcmp(dw, dw2, C * 4) == 0);
    kref_fill_nan(dw2, C);
    CHECK_OK(RMS_BWD(dx2, 0, NULL, 0));
    CHECK(memcmp(dx, dx2, n * 4) == 0);
    int nt0 = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt += 2) {
        omp_set_num_threads(nt);
        CHECK_OK(RMS_BWD(dx2, 0, dw2, 0));
        CHECKF(memcmp(dx, dx2, n * 4) == 0 && memcmp(dw, dw2, C * 4) == 0, "%d threads", nt);
    }
    omp_set_num_threads(nt0);
    /* dinp aliasing dout (acc 0) */
    float *dsave = malloc(n * 4);
    memcpy(dsave, dout, n * 4);
    CHECK_OK(
        head ? fsdp_head_rmsnorm_backward(dout, ld, 0, NULL, 0, dout, ld, x, ld, wp, pdt, rstd, ntok, nh, C)
             : fsdp_rmsnorm_backward(dout, ld, 0, NULL, 0, dout, ld, x, ld, wp, pdt, rstd, ntok, C));
    bad = 0;
    for (int r = 0; r < R; r++)
        bad += memcmp(dout + roff(r, nh, C, ld), dx + roff(r, nh, C, ld), C * 4) != 0;
    CHECK(bad == 0);
    memcpy(dout, dsave, n * 4);
#undef RMS_FWD
#undef RMS_BWD
    free(out2), free(dx2), free(dw2), free(dsave);
    free(x), free(out), free(dout), free(dx), free(px), free(rstd), free(w), free(dw), free(pw), free(wb);
    free(xd), free(wd), free(dd), free(ref), free(rdw), free(tmp), free(fdx), free(fdw), free(mag);
}

static void test_rmsnorm_args(void) {
    float x[64] = {0}, o[64], rs[8], w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    kref_fill_nan(o, 64);
    CHECK_ERR(fsdp_rmsnorm_forward(o, 4, rs, x, 8, w, FSDP_F32, 2, 8, 1e-5f), FSDP_EINVAL, "stride");
    CHECK_ERR(fsdp_rmsnorm_forward(o, 8, rs, x, 8, w, FSDP_F32, 0, 8, 1e-5f), FSDP_EINVAL, "positive");
    CHECK_ERR(fsdp_rmsnorm_forward(o, 8, rs, x, 8, NULL, FSDP_F32, 2, 8, 1e-5f), FSDP_EINVAL, "weight");
    CHECK_ERR(fsdp_rmsnorm_forward(o, 8, rs, x, 8, w, (fsdp_dtype)9, 2, 8, 1e-5f), FSDP_EINVAL, "dtype");
    CHECK_ERR(fsdp_rmsnorm_forward(o, 8, rs, x, 8, w, FSDP_F32, 2, 8, -1.0f), FSDP_EINVAL, "eps");
    CHECK(isnan(o[0]) && isnan(o[63]));
    CHECK_ERR(fsdp_rmsnorm_backward(o, 8, 0, w, 0, x, 8, x, 8, w, FSDP_F32, NULL, 2, 8), FSDP_EINVAL, "rstd");
    CHECK_ERR(fsdp_head_rmsnorm_forward(o, 8, rs, x, 8, w, FSDP_F32, 2, 3, 4, 1e-5f), FSDP_EINVAL, "stride");
    CHECK_ERR(fsdp_head_rmsnorm_backward(o, 6, 0, w, 0, x, 8, x, 8, w, FSDP_F32, rs, 2, 2, 4), FSDP_EINVAL,
              "stride");
    CHECK(isnan(o[0]) && isnan(o[63]));
    CHECK(fsdp_rmsnorm_backward_scratch_bytes(0, 8) == 0 && fsdp_rmsnorm_backward_scratch_bytes(100, 8) > 0);
}

/* ---------------------------------------------------------------- RoPE */

/* Double rotation of the fp32 angle pos * inv_freq (the kernel's contract), sign -1 the inverse. */
static void rope_ref(double *y, const double *x, const int *pos, const float *f, int ntok, int nh, int hd,
                     int ld, double sgn) {
    const int h = hd / 2;
    for (int t = 0; t < ntok; t++)
        for (int k = 0; k < nh; k++) {
            const double *a = x + (size_t)t * ld + k * hd;
            double *o = y + (size_t)t * ld + k * hd;
            for (int i = 0; i < h; i++) {
                double ang = (double)((float)pos[t] * f[i]), c = cos(ang), s = sgn * sin(ang);
                o[i] = a[i] * c - a[i + h] * s;
                o[i + h] = a[i + h] * c + a[i] * s;
            }
        }
}

static void test_rope(int ntok, int nh, int hd, int ld, double theta) {
    const size_t n = (size_t)ntok * ld;
    float *x = malloc(n * 4), *y = malloc(n * 4), *f = malloc(hd / 2 * 4);
    double *xd = malloc(n * 8), *ref = malloc(n * 8), *dd = malloc(n * 8);
    int *pos = malloc(ntok * 4);
    for (int t = 0; t < ntok; t++) /* packed documents: positions restart */
        pos[t] = t < ntok / 2 ? t : 3 * (t - ntok / 2);
    CHECK_OK(fsdp_rope_inv_freq(f, hd, theta, NULL));
    /* inv_freq against the double formula */
    int bad = 0;
    for (int i = 0; i < hd / 2; i++)
        bad += !test_close(f[i], 1.0 / pow(theta, 2.0 * i / hd), 2e-7, 0);
    CHECKF(bad == 0, "inv_freq hd %d theta %g", hd, theta);
    kref_fill(x, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        xd[i] = x[i];
    memcpy(y, x, n * 4);
    CHECK_OK(fsdp_rope_forward(y, ld, pos, f, ntok, nh, hd));
    memcpy(ref, xd, n * 8);
    rope_ref(ref, xd, pos, f, ntok, nh, hd, ld, 1.0);
    CHECKF(kref_check_close("rope fwd", y, ref, n, 1e-6, 1e-6) == 0, "ntok %d nh %d hd %d ld %d", ntok, nh,
           hd, ld);
    /* padding untouched (ref holds x there) */
    bad = 0;
    for (int t = 0; t < ntok; t++)
        for (int i = nh * hd; i < ld; i++)
            bad += y[(size_t)t * ld + i] != x[(size_t)t * ld + i];
    CHECK(bad == 0);
    /* backward = the transpose: dx = R^T dy, and <R x, dy> = <x, R^T dy> */
    float *g = malloc(n * 4);
    kref_fill(g, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        dd[i] = g[i];
    CHECK_OK(fsdp_rope_backward(g, ld, pos, f, ntok, nh, hd));
    memcpy(ref, dd, n * 8);
    rope_ref(ref, dd, pos, f, ntok, nh, hd, ld, -1.0);
    CHECKF(kref_check_close("rope bwd", g, ref, n, 1e-6, 1e-6) == 0, "ntok %d nh %d hd %d", ntok, nh, hd);
    double l1 = 0, l2 = 0;
    for (int t = 0; t < ntok; t++)
        for (int i = 0; i < nh * hd; i++) {
            size_t j = (size_t)t * ld + i;
            l1 += (double)y[j] * dd[j], l2 += xd[j] * g[j];
        }
    CHECKF(fabs(l1 - l2) <= 1e-5 * (fabs(l1) + 1), "<Rx,dy> %.9g vs <x,R^T dy> %.9g", l1, l2);
    /* the inverse undoes the forward */
    CHECK_OK(fsdp_rope_backward(y, ld, pos, f, ntok, nh, hd));
    CHECK(kref_check_close("rope roundtrip", y, xd, n, 1e-5, 1e-6) == 0);
    /* bad arguments: nothing written */
    memcpy(y, x, n * 4);
    pos[ntok - 1] = -1;
    CHECK_ERR(fsdp_rope_forward(y, ld, pos, f, ntok, nh, hd), FSDP_EINVAL, "negative");
    pos[ntok - 1] = 0;
    CHECK_ERR(fsdp_rope_forward(y, ld, pos, f, ntok, nh, hd + 1), FSDP_EINVAL, "even");
    CHECK_ERR(fsdp_rope_backward(y, nh * hd - 1, pos, f, ntok, nh, hd), FSDP_EINVAL, "stride");
    CHECK(memcmp(x, y, n * 4) == 0);
    free(x), free(y), free(f), free(xd), free(ref), free(dd), free(pos), free(g);
}

static void test_rope_args(void) {
    float f[64];
    fsdp_rope_scaling sc = {1, 8.0f, 1.0f, 4.0f, 8192};
    CHECK_ERR(fsdp_rope_inv_freq(f, 63, 10000.0, NULL), FSDP_EINVAL, "even");
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, 0.0, NULL), FSDP_EINVAL, "theta");
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, -5.0, NULL), FSDP_EINVAL, "theta");
    sc.type = 2;
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, 10000.0, &sc), FSDP_EINVAL, "type");
    sc.type = 1, sc.high_freq_factor = 1.0f;
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, 10000.0, &sc), FSDP_EINVAL, "llama3");
    sc.high_freq_factor = 4.0f, sc.original_max_position_embeddings = 0;
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, 10000.0, &sc), FSDP_EINVAL, "original_max");
    sc.original_max_position_embeddings = 8192, sc.factor = 0.0f;
    CHECK_ERR(fsdp_rope_inv_freq(f, 64, 10000.0, &sc), FSDP_EINVAL, "factor");
    sc.type = 0; /* type 0 ignores the factors */
    CHECK_OK(fsdp_rope_inv_freq(f, 64, 10000.0, &sc));
}

/* transformers' fixture: inv_freq (default and llama3) and apply_rotary_pos_emb. */
static void test_rope_fixture(void) {
    const char *path = FSDP_SOURCE_DIR "/tests/kernels/rope_fixture.txt";
    FILE *fp = fopen(path, "r");
    CHECKF(fp != NULL, "cannot open %s", path);
    if (!fp) return;
    char line[512];
    CHECK(fgets(line, sizeof line, fp) != NULL && line[0] == '#');
    int ncase = 0, hd, type, orig, ntok, nh;
    double theta;
    float factor, low, high;
    while (fscanf(fp, " case %d %lf %d %f %f %f %d %d %d", &hd, &theta, &type, &factor, &low, &high, &orig,
                  &ntok, &nh) == 9) {
        const int h = hd / 2;
        const size_t n = (size_t)ntok * nh * hd;
        float *fr = malloc(h * 4), *f = malloc(h * 4), *x = malloc(n * 4), *y = malloc(n * 4);
        double *yr = malloc(n * 8);
        int *pos = malloc(ntok * 4), ok = 1;
        ok &= fscanf(fp, " inv_freq") == 0;
        for (int i = 0; i < h; i++)
            ok &= fscanf(fp, "%f", &fr[i]) == 1;
        ok &= fscanf(fp, " pos") == 0;
        for (int t = 0; t < ntok; t++)
            ok &= fscanf(fp, "%d", &pos[t]) == 1;
        ok &= fscanf(fp, " x") == 0;
        for (size_t i = 0; i < n; i++)
            ok &= fscanf(fp, "%f", &x[i]) == 1;
        ok &= fscanf(fp, " y") == 0;
        for (size_t i = 0; i < n; i++) {
            float v;
            ok &= fscanf(fp, "%f", &v) == 1;
            yr[i] = v;
        }
        ok &= fscanf(fp, " end") == 0;
        CHECKF(ok, "fixture case %d malformed", ncase);
        fsdp_rope_scaling sc = {type, factor, low, high, orig};
        CHECK_OK(fsdp_rope_inv_freq(f, hd, theta, &sc));
        /* inv_freq: transformers' fp32 values to an ulp (torch's fp32 pow is not correctly rounded) */
        int bad = 0;
        for (int i = 0; i < h; i++)
            if (!(fabs(f[i] - fr[i]) <= 0x1p-23 * fabs(fr[i]))) {
                if (bad++ < 3) fprintf(stderr, "  inv_freq[%d] %.9g want %.9g\n", i, f[i], fr[i]);
            }
        CHECKF(bad == 0, "inv_freq case %d (hd %d theta %g type %d)", ncase, hd, theta, type);
        /* rotation with transformers' inv_freq: apply_rotary_pos_emb's fp32 result to ~1e-6 of |x| */
        memcpy(y, x, n * 4);
        CHECK_OK(fsdp_rope_forward(y, nh * hd, pos, fr, ntok, nh, hd));
        CHECKF(kref_check_close("rope vs transformers", y, yr, n, 1e-6, 2e-6) == 0, "case %d", ncase);
        /* and with our own inv_freq (an ulp of inv_freq moves large angles: looser there) */
        memcpy(y, x, n * 4);
        CHECK_OK(fsdp_rope_forward(y, nh * hd, pos, f, ntok, nh, hd));
        CHECKF(kref_check_close("rope (own inv_freq) vs transformers", y, yr, n, 1e-5, 2e-5) == 0, "case %d",
               ncase);
        free(fr), free(f), free(x), free(y), free(yr), free(pos);
        if (!ok) break;
        ncase++;
    }
    CHECKF(ncase == 6, "read %d fixture cases, want 6", ncase);
    fclose(fp);
}

/* ---------------------------------------------------------------- SwiGLU */

static double silu_d(double x) { return x / (1 + exp(-x)); }

static void test_swiglu(int N, int I) {
    const size_t n2 = (size_t)N * 2 * I, n1 = (size_t)N * I;
    float *gu = malloc(n2 * 4), *out = malloc(n1 * 4), *d = malloc(n1 * 4), *dgu = malloc(n2 * 4);
    double *ref = malloc(n2 * 8);
    kref_fill(gu, n2, 4.0f), kref_fill(d, n1, 1.0f);
    gu[0] = 0.0f;
    if (I > 3) gu[1] = 100.0f, gu[2] = -100.0f, gu[3] = -20.0f; /* saturated gates */
    kref_fill_nan(out, n1);
    CHECK_OK(fsdp_swiglu_forward(out, gu, N, I));
    for (int r = 0; r < N; r++)
        for (int j = 0; j < I; j++)
            ref[(size_t)r * I + j] = silu_d(gu[(size_t)r * 2 * I + j]) * gu[(size_t)r * 2 * I + I + j];
    CHECKF(kref_check_close("swiglu", out, ref, n1, 1e-6, 1e-30) == 0, "N %d I %d", N, I);
    /* backward: the analytic double derivative, checked itself against central differences */
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (int j = 0; j < I; j++) {
            size_t gi = (size_t)r * 2 * I + j, ui = gi + I, oi = (size_t)r * I + j;
            double g = gu[gi], u = gu[ui], s = 1 / (1 + exp(-g));
            ref[gi] = d[oi] * u * s * (1 + g * (1 - s));
            ref[ui] = d[oi] * silu_d(g);
            const double h = 1e-6 * (fabs(g) + 1);
            double fdg = d[oi] * u * (silu_d(g + h) - silu_d(g - h)) / (2 * h);
            bad += !test_close(ref[gi], fdg, 1e-6, 1e-9);
        }
    CHECK(bad == 0);
    kref_fill_nan(dgu, n2);
    CHECK_OK(fsdp_swiglu_backward(dgu, d, gu, N, I));
    CHECKF(kref_check_close("dswiglu", dgu, ref, n2, 1e-5, 1e-30) == 0, "N %d I %d", N, I);
    CHECK_ERR(fsdp_swiglu_backward(gu, d, gu, N, I), FSDP_EINVAL, "alias");
    CHECK_ERR(fsdp_swiglu_forward(out, gu, N, 0), FSDP_EINVAL, "positive");
    CHECK_ERR(fsdp_swiglu_forward(NULL, gu, N, I), FSDP_EINVAL, "NULL");
    free(gu), free(out), free(d), free(dgu), free(ref);
}

int main(void) {
    const fsdp_simd paths[3] = {FSDP_SIMD_AUTO, FSDP_SIMD_AVX2, FSDP_SIMD_SCALAR};
    for (int p = 0; p < 3; p++) { /* vmath's exp (SwiGLU) has a form per path */
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        kref_seed(21);
        test_swiglu(3, 5);
        test_swiglu(4, 300); /* two chunks, the second partial */
    }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    kref_seed(5);
    for (int pi = 0; pi < 2; pi++) {
        fsdp_dtype pdt = pi ? FSDP_BF16 : FSDP_F32;
        test_rmsnorm(pdt, 0, 1, 1, 1, 1, 1e-5f, 1);
        test_rmsnorm(pdt, 0, 7, 1, 37, 37, 1e-6f, 1);
        test_rmsnorm(pdt, 0, 5, 1, 24, 31, 1e-5f, 1);           /* strided */
        test_rmsnorm(pdt, 0, 300, 1, 64, 80, 1e-5f, 0);         /* several row chunks */
        test_rmsnorm(pdt, 1, 4, 3, 8, 3 * 8 + 2 * 8, 1e-6f, 1); /* q heads inside a fused qkv row */
        test_rmsnorm(pdt, 1, 150, 4, 16, 100, 1e-6f, 0);
    }
    test_rmsnorm_args();
    test_rope(6, 3, 8, 3 * 8, 10000.0);
    test_rope(9, 2, 64, 2 * 64 + 10, 100000.0);
    test_rope(5, 1, 2, 5, 500000.0);
    test_rope_args();
    test_rope_fixture();
    CHECK(fsdp_mem_current(FSDP_MEM_OTHER) == 0 && fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0);
    return TEST_MAIN_END();
}
