/* test_ops.c — encoder, LayerNorm, GELU and residual kernels, forward and backward, against float64:
 * forwards recomputed in double, backwards by central finite differences of the double forward (LN,
 * GELU) or a double scatter-add (encoder); accumulate flags checked on NaN- and value-prefilled
 * buffers; F32 and BF16 parameters (the reference uses the bf16-rounded values). */
#include "kernels/kernels.h"

#include "kref.h"

#include <omp.h>

static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

/* ---------------------------------------------------------------- encoder */

static void test_encoder(fsdp_dtype pdt) {
    enum { B = 3, T = 5, C = 19, V = 11, MAXT = 8 };
    float wte[V * C], wpe[MAXT * C], wter[V * C], wper[MAXT * C], out[B * T * C], dout[B * T * C];
    uint16_t wteb[V * C], wpeb[MAXT * C];
    float dwte[V * C], dwpe[MAXT * C], pwte[V * C], pwpe[MAXT * C];
    double ref[V * C > B * T * C ? V * C : B * T * C], tol[V * C > B * T * C ? V * C : B * T * C];
    /* tokens repeat, and rows 0, 4, 9, 10 are never used: they must be zeroed with accumulate 0 */
    int tok[B * T] = {1, 2, 3, 1, 5, 6, 7, 8, 2, 2, 3, 1, 1, 6, 5};
    kref_fill(wte, V * C, 1.0f), kref_fill(wpe, MAXT * C, 1.0f), kref_fill(dout, B * T * C, 1.0f);
    for (int i = 0; i < V * C; i++)
        wteb[i] = kref_bf16(wte[i]), wter[i] = pdt ? kref_bf16_f(wteb[i]) : wte[i];
    for (int i = 0; i < MAXT * C; i++)
        wpeb[i] = kref_bf16(wpe[i]), wper[i] = pdt ? kref_bf16_f(wpeb[i]) : wpe[i];
    const void *pte = pdt ? (const void *)wteb : wte, *ppe = pdt ? (const void *)wpeb : wpe;

    kref_fill_nan(out, B * T * C);
    CHECK_OK(fsdp_encoder_forward(out, tok, pte, ppe, pdt, B, T, C, V, MAXT));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                ref[i] = (double)wter[tok[b * T + t] * C + c] + wper[t * C + c];
                tol[i] = 0x1p-24 * fabs(ref[i]);
            }
    CHECKF(kref_check_bound("encoder out", out, ref, tol, B * T * C) == 0, "pdt %d", pdt);
    /* wpe NULL: the token row alone, exactly (no position embedding: the Llama family) */
    kref_fill_nan(out, B * T * C);
    CHECK_OK(fsdp_encoder_forward(out, tok, pte, NULL, pdt, B, T, C, V, MAXT));
    int same = 1;
    for (int r = 0; r < B * T; r++)
        for (int c = 0; c < C; c++)
            same &= out[(size_t)r * C + c] == wter[tok[r] * C + c];
    CHECKF(same, "encoder without wpe, pdt %d", pdt);

    kref_fill(pwte, V * C, 3.0f), kref_fill(pwpe, MAXT * C, 3.0f);
    for (int acc = 0; acc < 2; acc++) {
        if (acc)
            memcpy(dwte, pwte, sizeof dwte), memcpy(dwpe, pwpe, sizeof dwpe);
        else
            kref_fill_nan(dwte, V * C), kref_fill_nan(dwpe, MAXT * C);
        CHECK_OK(fsdp_encoder_backward(dwte, acc, dwpe, acc, dout, tok, B, T, C, V, MAXT));
        for (int v = 0; v < V; v++)
            for (int c = 0; c < C; c++) {
                double s = acc ? pwte[v * C + c] : 0, a = fabs(s);
                for (int r = 0; r < B * T; r++)
                    if (tok[r] == v) s += dout[r * C + c], a += fabs(dout[r * C + c]);
                ref[v * C + c] = s, tol[v * C + c] = (B * T + 1) * 0x1p-24 * a;
            }
        CHECKF(kref_check_bound("dwte", dwte, ref, tol, V * C) == 0, "acc %d", acc);
        for (int t = 0; t < MAXT; t++)
            for (int c = 0; c < C; c++) {
                double s = acc ? pwpe[t * C + c] : 0, a = fabs(s);
                for (int b = 0; b < B && t < T; b++)
                    s += dout[(b * T + t) * C + c], a += fabs(dout[(b * T + t) * C + c]);
                ref[t * C + c] = s, tol[t * C + c] = (B + 1) * 0x1p-24 * a;
            }
        CHECKF(kref_check_bound("dwpe", dwpe, ref, tol, MAXT * C) == 0, "acc %d", acc);
    }
    /* The thread count changes nothing (channel blocks, tokens summed in order). */
    float dwte2[V * C], dwpe2[MAXT * C];
    int nt0 = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt += 2) {
        omp_set_num_threads(nt);
        memcpy(dwte2, pwte, sizeof dwte2), memcpy(dwpe2, pwpe, sizeof dwpe2);
        CHECK_OK(fsdp_encoder_backward(dwte2, 1, dwpe2, 1, dout, tok, B, T, C, V, MAXT));
        CHECKF(memcmp(dwte, dwte2, sizeof dwte) == 0 && memcmp(dwpe, dwpe2, sizeof dwpe) == 0, "%d threads",
               nt);
    }
    omp_set_num_threads(nt0);
    /* A bad token fails before anything is written. */
    tok[7] = V;
    kref_fill_nan(out, B * T * C);
    CHECK_ERR(fsdp_encoder_forward(out, tok, pte, ppe, pdt, B, T, C, V, MAXT), FSDP_EINVAL, "token 11");
    CHECK(isnan(out[0]) && isnan(out[B * T * C - 1]));
    CHECK_ERR(fsdp_encoder_backward(dwte, 0, dwpe, 0, dout, tok, B, T, C, V, MAXT), FSDP_EINVAL,
              "position 7");
    tok[7] = 8;
    CHECK_ERR(fsdp_encoder_forward(out, tok, pte, ppe, pdt, B, MAXT + 1, C, V, MAXT), FSDP_EINVAL, "maxT");
    CHECK_ERR(fsdp_encoder_forward(out, tok, pte, ppe, pdt, 0, T, C, V, MAXT), FSDP_EINVAL, "B=0");
}

/* Explicit positions (packed documents: positions restart per document), against float64; positions
 * 0..T-1 give the plain encoder's forward bits; a position outside [0, maxT) is refused. */
static void test_encoder_pos(fsdp_dtype pdt) {
    enum { B = 2, T = 9, C = 21, V = 7, MAXT = 6 }; /* T > maxT: allowed with positions */
    float wte[V * C], wpe[MAXT * C], out[B * T * C], out2[B * T * C], dout[B * T * C];
    uint16_t wteb[V * C], wpeb[MAXT * C];
    float wter[V * C], wper[MAXT * C], dwte[V * C], dwpe[MAXT * C], pwpe[MAXT * C];
    double ref[V * C > B * T * C ? V * C : B * T * C], tol[V * C > B * T * C ? V * C : B * T * C];
    int tok[B * T] = {1, 2, 3, 1, 5, 6, 0, 2, 2, 3, 1, 1, 6, 5, 4, 4, 0, 1};
    int pos[B * T] = {0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2}; /* row 2 reaches 5 */
    kref_fill(wte, V * C, 1.0f), kref_fill(wpe, MAXT * C, 1.0f), kref_fill(dout, B * T * C, 1.0f);
    for (int i = 0; i < V * C; i++)
        wteb[i] = kref_bf16(wte[i]), wter[i] = pdt ? kref_bf16_f(wteb[i]) : wte[i];
    for (int i = 0; i < MAXT * C; i++)
        wpeb[i] = kref_bf16(wpe[i]), wper[i] = pdt ? kref_bf16_f(wpeb[i]) : wpe[i];
    const void *pte = pdt ? (const void *)wteb : wte, *ppe = pdt ? (const void *)wpeb : wpe;
    kref_fill_nan(out, B * T * C);
    CHECK_OK(fsdp_encoder_forward_pos(out, tok, pos, pte, ppe, pdt, B, T, C, V, MAXT));
    for (int r = 0; r < B * T; r++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            ref[i] = (double)wter[tok[r] * C + c] + wper[pos[r] * C + c];
            tol[i] = 0x1p-24 * fabs(ref[i]);
        }
    CHECKF(kref_check_bound("encoder_pos out", out, ref, tol, B * T * C) == 0, "pdt %d", pdt);
    kref_fill(pwpe, MAXT * C, 3.0f);
    for (int acc = 0; acc < 2; acc++) {
        if (acc)
            memcpy(dwpe, pwpe, sizeof dwpe);
        else
            kref_fill_nan(dwpe, MAXT * C);
        kref_fill_nan(dwte, V * C);
        CHECK_OK(fsdp_encoder_backward_pos(dwte, 0, dwpe, acc, dout, tok, pos, B, T, C, V, MAXT));
        for (int p = 0; p < MAXT; p++)
            for (int c = 0; c < C; c++) {
                double sm = acc ? pwpe[p * C + c] : 0, a = fabs(sm);
                for (int r = 0; r < B * T; r++)
                    if (pos[r] == p) sm += dout[r * C + c], a += fabs(dout[r * C + c]);
                ref[p * C + c] = sm, tol[p * C + c] = (B * T + 1) * 0x1p-24 * a;
            }
        CHECKF(kref_check_bound("dwpe (positions)", dwpe, ref, tol, MAXT * C) == 0, "acc %d", acc);
        for (int v = 0; v < V; v++)
            for (int c = 0; c < C; c++) {
                double sm = 0, a = 0;
                for (int r = 0; r < B * T; r++)
                    if (tok[r] == v) sm += dout[r * C + c], a += fabs(dout[r * C + c]);
                ref[v * C + c] = sm, tol[v * C + c] = (B * T + 1) * 0x1p-24 * a;
            }
        CHECKF(kref_check_bound("dwte (positions)", dwte, ref, tol, V * C) == 0, "acc %d", acc);
    }
    /* positions 0..T-1 of each row: the plain encoder's bits */
    int seq[2 * 5];
    for (int i = 0; i < 10; i++)
        seq[i] = i % 5;
    CHECK_OK(fsdp_encoder_forward(out, tok, pte, ppe, pdt, 2, 5, C, V, MAXT));
    CHECK_OK(fsdp_encoder_forward_pos(out2, tok, seq, pte, ppe, pdt, 2, 5, C, V, MAXT));
    CHECK(memcmp(out, out2, (size_t)10 * C * sizeof(float)) == 0);
    CHECK_ERR(fsdp_encoder_forward(out, tok, pte, ppe, pdt, B, T, C, V, MAXT), FSDP_EINVAL, "maxT");
    pos[4] = MAXT;
    CHECK_ERR(fsdp_encoder_forward_pos(out, tok, pos, pte, ppe, pdt, B, T, C, V, MAXT), FSDP_EINVAL,
              "position 6");
    CHECK_ERR(fsdp_encoder_backward_pos(dwte, 0, dwpe, 0, dout, tok, pos, B, T, C, V, MAXT), FSDP_EINVAL,
              "position 6");
}

/* ---------------------------------------------------------------- LayerNorm */

static void ln_ref(double *out, const double *x, const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[n * C + c] - m) * (x[n * C + c] - m);
        v /= C;
        double rs = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++)
            out[n * C + c] = (x[n * C + c] - m) * rs * w[c] + b[c];
    }
}

/* L = sum(out * dout) of the double forward. */
static double ln_loss(const double *x, const double *w, const double *b, const double *dout, double *tmp,
                      int N, int C) {
    ln_ref(tmp, x, w, b, N, C);
    double L = 0;
    for (int i = 0; i < N * C; i++)
        L += tmp[i] * dout[i];
    return L;
}

static void test_layernorm(fsdp_dtype pdt, int N, int C) {
    size_t nc = (size_t)N * C;
    float *x = malloc(nc * 4), *out = malloc(nc * 4), *dout = malloc(nc * 4), *dx = malloc(nc * 4),
          *px = malloc(nc * 4);
    float *w = malloc(C * 4), *b = malloc(C * 4), *dw = malloc(C * 4), *db = malloc(C * 4),
          *pw = malloc(C * 4), *pb = malloc(C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    uint16_t *wb = malloc(C * 2), *bb = malloc(C * 2);
    double *xd = malloc(nc * 8), *wd = malloc(C * 8), *bd = malloc(C * 8), *dd = malloc(nc * 8),
           *ref = malloc(nc * 8), *tmp = malloc(nc * 8), *rw = malloc(C * 8), *rb = malloc(C * 8);
    kref_fill(x, nc, 2.0f), kref_fill(dout, nc, 1.0f), kref_fill(px, nc, 1.0f);
    for (int c = 0; c < C; c++) {
        w[c] = 1.0f + 0.5f * kref_uniform(), b[c] = 0.2f * kref_uniform();
        wb[c] = kref_bf16(w[c]), bb[c] = kref_bf16(b[c]);
        wd[c] = pdt ? kref_bf16_f(wb[c]) : w[c], bd[c] = pdt ? kref_bf16_f(bb[c]) : b[c];
    }
    kref_fill(pw, C, 1.0f), kref_fill(pb, C, 1.0f);
    for (size_t i = 0; i < nc; i++)
        xd[i] = x[i], dd[i] = dout[i];
    /* a row with a large offset: the mean must be subtracted before the variance */
    for (int c = 0; c < C; c++)
        x[c] += 100.0f, xd[c] = x[c];
    const void *pw_ = pdt ? (const void *)wb : w, *pb_ = pdt ? (const void *)bb : b;

    kref_fill_nan(out, nc);
    CHECK_OK(fsdp_layernorm_forward(out, mean, rstd, x, pw_, pb_, pdt, N, C));
    ln_ref(ref, xd, wd, bd, N, C);
    CHECKF(kref_check_close("ln out", out, ref, nc, 1e-5, 1e-5 * maxabs(ref, nc)) == 0, "N=%d C=%d", N, C);

    /* Central differences of the double forward. h = 1e-4: truncation O(h^2) ~ 1e-8 relative. */
    const double h = 1e-4;
    for (size_t i = 0; i < nc; i++) {
        double s = xd[i];
        xd[i] = s + h;
        double lp = ln_loss(xd, wd, bd, dd, tmp, N, C);
        xd[i] = s - h;
        double lm = ln_loss(xd, wd, bd, dd, tmp, N, C);
        xd[i] = s;
        ref[i] = (lp - lm) / (2 * h);
    }
    for (int c = 0; c < C; c++) {
        double s = wd[c];
        wd[c] = s + h;
        double lp = ln_loss(xd, wd, bd, dd, tmp, N, C);
        wd[c] = s - h;
        double lm = ln_loss(xd, wd, bd, dd, tmp, N, C);
        wd[c] = s;
        rw[c] = (lp - lm) / (2 * h);
        s = bd[c];
        bd[c] = s + h;
        lp = ln_loss(xd, wd, bd, dd, tmp, N, C);
        bd[c] = s - h;
        lm = ln_loss(xd, wd, bd, dd, tmp, N, C);
        bd[c] = s;
        rb[c] = (lp - lm) / (2 * h);
    }
    double sx = maxabs(ref, nc), sw = maxabs(rw, C), sb = maxabs(rb, C);
    for (int acc = 0; acc < 2; acc++) {
        if (acc) {
            memcpy(dx, px, nc * 4), memcpy(dw, pw, C * 4), memcpy(db, pb, C * 4);
            for (size_t i = 0; i < nc; i++)
                ref[i] += px[i];
            for (int c = 0; c < C; c++)
                rw[c] += pw[c], rb[c] += pb[c];
        } else {
            kref_fill_nan(dx, nc), kref_fill_nan(dw, C), kref_fill_nan(db, C);
        }
        CHECK_OK(fsdp_layernorm_backward(dx, acc, dw, db, acc, dout, x, pw_, pdt, mean, rstd, N, C));
        CHECKF(kref_check_close("ln dinp", dx, ref, nc, 1e-5, 2e-5 * sx) == 0, "N=%d C=%d acc=%d", N, C, acc);
        CHECKF(kref_check_close("ln dweight", dw, rw, C, 1e-5, 1e-5 * sw) == 0, "N=%d C=%d acc=%d", N, C,
               acc);
        CHECKF(kref_check_close("ln dbias", db, rb, C, 1e-5, 1e-5 * sb) == 0, "N=%d C=%d acc=%d", N, C, acc);
    }
    /* dinp only / params only: same numbers as the combined call (acc 0). */
    float *dx2 = malloc(nc * 4), *dw2 = malloc(C * 4);
    CHECK_OK(fsdp_layernorm_backward(dx, 0, dw, db, 0, dout, x, pw_, pdt, mean, rstd, N, C));
    CHECK_OK(fsdp_layernorm_backward(dx2, 0, NULL, NULL, 0, dout, x, pw_, pdt, mean, rstd, N, C));
    CHECK_OK(fsdp_layernorm_backward(NULL, 0, dw2, NULL, 0, dout, x, NULL, pdt, mean, rstd, N, C));
    CHECK(memcmp(dx, dx2, nc * 4) == 0 && memcmp(dw, dw2, C * 4) == 0);
    /* The thread count changes nothing (per-row and per-channel-block summation orders are fixed). */
    int nt0 = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt += 2) {
        omp_set_num_threads(nt);
        CHECK_OK(fsdp_layernorm_backward(dx2, 0, dw2, NULL, 0, dout, x, pw_, pdt, mean, rstd, N, C));
        CHECKF(memcmp(dx, dx2, nc * 4) == 0 && memcmp(dw, dw2, C * 4) == 0, "%d threads", nt);
    }
    omp_set_num_threads(nt0);
    CHECK_ERR(fsdp_layernorm_forward(out, mean, rstd, x, pw_, pb_, pdt, N, 0), FSDP_EINVAL, "C=0");
    CHECK_ERR(fsdp_layernorm_backward(dx, 0, NULL, NULL, 0, dout, x, pw_, pdt, NULL, rstd, N, C), FSDP_EINVAL,
              "mean");
    free(dx2), free(dw2);
    free(x), free(out), free(dout), free(dx), free(px), free(w), free(b), free(dw), free(db), free(pw),
        free(pb);
    free(mean), free(rstd), free(wb), free(bb), free(xd), free(wd), free(bd), free(dd), free(ref), free(tmp);
    free(rw), free(rb);
}

/* ---------------------------------------------------------------- GELU, residual */

static double gelu_d(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

static void test_gelu(void) {
    enum { N = 257 };
    float x[N], y[N], d[N], g[N];
    double ref[N];
    kref_fill(x, N, 4.0f), kref_fill(d, N, 1.0f);
    x[0] = 0.0f, x[1] = 30.0f, x[2] = -30.0f, x[3] = 10.0f, x[4] = -10.0f; /* saturated tails */
    kref_fill_nan(y, N);
    CHECK_OK(fsdp_gelu_forward(y, x, N));
    for (int i = 0; i < N; i++)
        ref[i] = gelu_d(x[i]);
    CHECK(kref_check_close("gelu", y, ref, N, 1e-5, 1e-6) == 0);
    const double h = 1e-5;
    for (int i = 0; i < N; i++)
        ref[i] = d[i] * (gelu_d((double)x[i] + h) - gelu_d((double)x[i] - h)) / (2 * h);
    kref_fill_nan(g, N);
    CHECK_OK(fsdp_gelu_backward(g, x, d, N));
    CHECK(kref_check_close("gelu'", g, ref, N, 1e-5, 1e-6) == 0);
    /* in place over dout */
    memcpy(g, d, sizeof g);
    CHECK_OK(fsdp_gelu_backward(g, x, g, N));
    CHECK(kref_check_close("gelu' in place", g, ref, N, 1e-5, 1e-6) == 0);
    CHECK_ERR(fsdp_gelu_backward(x, x, d, N), FSDP_EINVAL, "alias");
    /* in-place forward */
    memcpy(y, x, sizeof y);
    CHECK_OK(fsdp_gelu_forward(y, y, N));
    for (int i = 0; i < N; i++)
        ref[i] = gelu_d(x[i]);
    CHECK(kref_check_close("gelu in place", y, ref, N, 1e-5, 1e-6) == 0);
}

static void test_residual(void) {
    enum { N = 101 };
    float a[N], b[N], o[N], d[N], da[N], db[N], pa[N], pb[N];
    kref_fill(a, N, 1.0f), kref_fill(b, N, 1.0f), kref_fill(d, N, 1.0f), kref_fill(pa, N, 1.0f),
        kref_fill(pb, N, 1.0f);
    CHECK_OK(fsdp_residual_forward(o, a, b, N));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += o[i] != a[i] + b[i];
    CHECK(bad == 0);
    kref_fill_nan(da, N), kref_fill_nan(db, N);
    CHECK_OK(fsdp_residual_backward(da, db, d, N, 0));
    CHECK(memcmp(da, d, sizeof d) == 0 && memcmp(db, d, sizeof d) == 0);
    memcpy(da, pa, sizeof da), memcpy(db, pb, sizeof db);
    CHECK_OK(fsdp_residual_backward(da, db, d, N, 1));
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += da[i] != pa[i] + d[i] || db[i] != pb[i] + d[i];
    CHECK(bad == 0);
    CHECK_ERR(fsdp_residual_backward(d, NULL, d, N, 1), FSDP_EINVAL, "alias");
}

int main(void) {
    /* every SIMD form this CPU has (LayerNorm and GELU have AVX-512 / AVX2 / generic forms) */
    const fsdp_simd paths[3] = {FSDP_SIMD_AUTO, FSDP_SIMD_AVX2, FSDP_SIMD_SCALAR};
    for (int p = 0; p < 3; p++) {
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        kref_seed(7);
        test_encoder(FSDP_F32);
        test_encoder(FSDP_BF16);
        test_encoder_pos(FSDP_F32);
        test_encoder_pos(FSDP_BF16);
        test_layernorm(FSDP_F32, 1, 1);
        test_layernorm(FSDP_F32, 7, 37);
        test_layernorm(FSDP_BF16, 5, 64);
        test_layernorm(FSDP_F32, 3, 131);
        test_gelu();
        test_residual();
    }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    CHECK(fsdp_mem_current(FSDP_MEM_OTHER) == 0 && fsdp_mem_current(FSDP_MEM_ACTIVATION) == 0);
    return TEST_MAIN_END();
}
