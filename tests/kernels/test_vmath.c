/* test_vmath.c — the kernels' vectorised math against float64: exp within 2 ulp over its whole
 * normal range (dense sweep plus random points) and its edge cases; GELU forward and derivative
 * against the float64 tanh form; the shifted exp-sum against a float64 sum; NaN-ignoring max; and
 * every SIMD path this CPU has giving the same bits as the scalar form. */
#include "kernels/vmath.h"
#include "kref.h"

#include "fsdp.h"

#include <float.h>
#include <stdlib.h>

/* |got - want| in units of the fp32 ulp at want (want a positive normal float64). */
static double ulp_err(float got, double want) {
    int e;
    frexp(want, &e); /* want = m 2^e, m in [0.5, 1): ulp = 2^(e - 24) */
    return fabs((double)got - want) / ldexp(1.0, e - 24);
}

static void test_exp_accuracy(void) {
    enum { NS = 1 << 20 };
    float *x = malloc(NS * sizeof(float)), *y = malloc(NS * sizeof(float));
    const double lo = -87.336, hi = 88.376;
    double worst = 0.0;
    float worst_x = 0;
    for (int pass = 0; pass < 2; pass++) { /* an even sweep, then random points */
        kref_seed(7 + (uint64_t)pass);
        for (int i = 0; i < NS; i++)
            x[i] = pass == 0 ? (float)(lo + (hi - lo) * i / (NS - 1))
                             : (float)(lo + (hi - lo) * (0.5 + 0.5 * kref_uniform()));
        fsdp_vexp(y, x, NS);
        for (int i = 0; i < NS; i++) {
            double u = ulp_err(y[i], exp((double)x[i]));
            if (u > worst) worst = u, worst_x = x[i];
        }
    }
    /* small arguments, where exp(x) ~ 1 + x, checked densely around 0 */
    for (int i = 0; i < NS; i++)
        x[i] = (float)ldexp((double)(i - NS / 2), -30);
    fsdp_vexp(y, x, NS);
    for (int i = 0; i < NS; i++) {
        double u = ulp_err(y[i], exp((double)x[i]));
        if (u > worst) worst = u, worst_x = x[i];
    }
    fprintf(stderr, "exp: worst %.3f ulp at x = %.9g\n", worst, (double)worst_x);
    CHECKF(worst <= 2.0, "exp error %.3f ulp at %.9g exceeds 2 ulp", worst, (double)worst_x);
    free(y);
    free(x);
}

static void test_exp_edges(void) {
    float x[12] = {0.0f,    -0.0f,  1.0f,    -1.0f,    88.37f,    88.4f,
                   -87.33f, -87.4f, -104.0f, INFINITY, -INFINITY, NAN};
    float y[12];
    fsdp_vexp(y, x, 12);
    CHECK(y[0] == 1.0f && y[1] == 1.0f);
    CHECK(ulp_err(y[2], M_E) <= 2.0 && ulp_err(y[3], 1.0 / M_E) <= 2.0);
    CHECK(isfinite(y[4]) && ulp_err(y[4], exp((double)88.37f)) <= 2.0);
    CHECK(isinf(y[5]) && y[5] > 0);
    CHECK(y[6] > 0 && ulp_err(y[6], exp((double)-87.33f)) <= 2.0);
    CHECK(y[7] == 0.0f && y[8] == 0.0f); /* below 2^-126: flushed to 0 (contract) */
    CHECK(isinf(y[9]) && y[9] > 0 && y[10] == 0.0f && isnan(y[11]));
}

/* float64 references in the logistic form, 0.5 x (1 + tanh y) = x / (1 + e^(-2y)): the same function
 * without the cancellation that the tanh form has in float64 itself for x < -3. */
static double gelu_y(double x) { return sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); }
static double gelu_d(double x) { return x / (1 + exp(-2 * gelu_y(x))); }
/* gelu'(x) = s + t; *mag = |s| + |t|, the scale of its rounding error (the sum cancels near x = -0.75) */
static double gelu_grad_d(double x, double *mag) {
    const double e = exp(-2 * gelu_y(x)), s = 1 / (1 + e), oms = e / (1 + e);
    const double t = 2 * x * s * oms * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    *mag = fabs(s) + fabs(t);
    return s + t;
}

static void test_gelu_accuracy(void) {
    enum { NG = 200001 };
    float *x = malloc(NG * sizeof(float)), *y = malloc(NG * sizeof(float)), *g = malloc(NG * sizeof(float)),
          *one = malloc(NG * sizeof(float));
    for (int i = 0; i < NG; i++)
        x[i] = (float)(-14.0 + 28.0 * i / (NG - 1)), one[i] = 1.0f;
    fsdp_vgelu_forward(y, x, NG);
    fsdp_vgelu_backward(g, x, one, NG);
    /* Relative error, in fp32 ulps scaled by the conditioning: y = K (x + A x^3) carries up to ~4 ulps
     * of rounding, which e^(-2y) amplifies by |2y|, and x * sigmoid(2y) (0.5 x (1 + tanh y) alike)
     * inherits for negative x. Bound: 8 + 8|y| ulps of the value (of |s| + |t| for the derivative s + t,
     * which cancels near x = -0.75); below 1e-30, where |2y| > 87 is clamped, an absolute 1e-33. */
    double wf = 0, wg = 0;
    int bad = 0;
    for (int i = 0; i < NG; i++) {
        double mag, rf = gelu_d(x[i]), rg = gelu_grad_d(x[i], &mag);
        double cond = 0x1p-24 * (8 + 8 * fabs(gelu_y(x[i])));
        double ef = fabs(rf) > 1e-30 ? fabs(y[i] - rf) / fabs(rf) / cond : fabs(y[i] - rf) / 1e-33;
        double eg = mag > 1e-30 ? fabs(g[i] - rg) / mag / cond : fabs(g[i] - rg) / 1e-33;
        if (ef > wf) wf = ef;
        if (eg > wg) wg = eg;
        bad += !(ef <= 1.0) || !(eg <= 1.0);
    }
    fprintf(stderr, "gelu: worst error / bound: forward %.3f, derivative %.3f\n", wf, wg);
    CHECKF(bad == 0, "%d GELU values beyond the bound (worst fwd %.3f, grad %.3f of it)", bad, wf, wg);
    float xs[2] = {NAN, INFINITY}, ys[2];
    fsdp_vgelu_forward(ys, xs, 2);
    CHECK(isnan(ys[0]) && ys[1] == INFINITY);
    free(one);
    free(g);
    free(y);
    free(x);
}

static void test_sum_max(void) {
    enum { N = 50257 };
    float *x = malloc(N * sizeof(float)), *e = malloc(N * sizeof(float));
    kref_seed(11);
    kref_fill(x, N, 8.0f);
    float mx = fsdp_vmax(x, N);
    float want = -INFINITY;
    for (int i = 0; i < N; i++)
        want = x[i] > want ? x[i] : want;
    CHECK(mx == want);
    double s = fsdp_vexp_shift_sum(e, x, N, mx), s0 = fsdp_vexp_shift_sum(NULL, x, N, mx), ref = 0, sf = 0;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double r = exp((double)(x[i] - mx));
        ref += r, sf += e[i];
        bad += !(ulp_err(e[i], r) <= 2.0);
    }
    CHECKF(bad == 0, "%d exp(x - shift) values beyond 2 ulp", bad);
    CHECK(s == s0);
    CHECKF(fabs(s - sf) <= 1e-13 * sf, "sum %.17g vs float64 sum of the outputs %.17g", s, sf);
    CHECKF(fabs(s - ref) <= 2e-7 * ref, "sum %.17g vs float64 %.17g", s, ref);
    x[5] = NAN;
    x[N - 1] = NAN;
    CHECK(fsdp_vmax(x, N) == want || x[5] == want);
    float nans[3] = {NAN, NAN, NAN};
    CHECK(fsdp_vmax(nans, 3) == -INFINITY && fsdp_vmax(nans, 0) == -INFINITY);
    free(e);
    free(x);
}

/* Every path this CPU has gives the scalar form's bits (n with a vector tail). */
static void test_paths(void) {
    enum { N = 1037 };
    static float x[N], y[3][N], g[3][N], e[3][N], d[N], sc[3][N];
    static double sum[3];
    static float mx[3];
    kref_seed(5);
    kref_fill(x, N, 12.0f);
    kref_fill(d, N, 1.0f);
    x[3] = NAN;
    x[100] = -200.0f;
    x[101] = 200.0f;
    const fsdp_simd paths[3] = {FSDP_SIMD_SCALAR, FSDP_SIMD_AVX2, FSDP_SIMD_AVX512};
    int ran = 0;
    for (int p = 0; p < 3; p++) {
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        ran++;
        fsdp_vgelu_forward(y[p], x, N);
        fsdp_vgelu_backward(g[p], x, d, N);
        mx[p] = fsdp_vmax(x, N);
        sum[p] = fsdp_vexp_shift_sum(e[p], x, N, mx[p]);
        fsdp_vscale2(sc[p], x, N, 0.37f, 1.0f / 3.0f);
        if (p == 0) continue;
        int dy = 0, dg = 0, de = 0, ds = 0;
        for (int i = 0; i < N; i++) {
            int nan = isnan(x[i]);
            dy += nan ? !isnan(y[p][i]) : memcmp(&y[p][i], &y[0][i], 4) != 0;
            dg += nan ? !isnan(g[p][i]) : memcmp(&g[p][i], &g[0][i], 4) != 0;
            de += nan ? !isnan(e[p][i]) : memcmp(&e[p][i], &e[0][i], 4) != 0;
            ds += nan ? !isnan(sc[p][i]) : memcmp(&sc[p][i], &sc[0][i], 4) != 0;
        }
        CHECKF(dy + dg + de + ds == 0, "%s vs scalar: gelu %d, gelu' %d, exp %d, scale %d differ",
               fsdp_simd_name(paths[p]), dy, dg, de, ds);
        CHECK(mx[p] == mx[0]);
        CHECK(isnan(sum[p]) && isnan(sum[0])); /* x[3] is NaN */
    }
    /* the same sums without the NaN: bit-identical doubles */
    x[3] = 0.5f;
    double s0 = 0;
    for (int p = 0; p < 3; p++) {
        if (fsdp_simd_force(paths[p]) != FSDP_OK) {
            fsdp_clear_error();
            continue;
        }
        double s = fsdp_vexp_shift_sum(NULL, x, N, 3.0f);
        if (p == 0) s0 = s;
        CHECKF(memcmp(&s, &s0, sizeof s) == 0, "%s: exp sum %.17g vs scalar %.17g", fsdp_simd_name(paths[p]),
               s, s0);
    }
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    fprintf(stderr, "paths compared: %d\n", ran);
    CHECK(ran >= 1);
}

int main(void) {
    test_exp_accuracy();
    test_exp_edges();
    test_gelu_accuracy();
    test_sum_max();
    test_paths();
    return TEST_MAIN_END();
}
