/* test_dtype.c — bf16 <-> f32 conversions against an independent reference written here from the IEEE
 * definition (candidates decoded to double, nearest chosen by comparing distances, ties to the even
 * pattern, overflow past the largest finite value to infinity), on the scalar functions and on every
 * SIMD path this CPU has, forced one at a time: all 65,536 bf16 values, every f32 exponent/mantissa-top
 * pattern with tie and near-tie low bits, random inputs, tails and unaligned pointers. Also the
 * communicator's rank-order fp32 sums (test_sums). */
#include "core/core.h"
#include "test_util.h"

#include <stdint.h>

/* ---------------------------------------------------------------- reference (no code shared with
 * the library: values are decoded field by field into doubles, which hold every f32 exactly) */

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Magnitude of a finite f32 pattern (sign ignored). */
static double ref_decode_f32(uint32_t u) {
    uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
    return e == 0 ? ldexp((double)m, -149) : ldexp((double)(m | 0x800000), (int)e - 150);
}
/* Magnitude of a finite bf16 pattern; 0x7f80 (the first pattern past the largest finite) is 2^128,
 * which is where IEEE's unbounded-exponent rounding puts the next value up. */
static double ref_decode_bf16_mag(uint16_t b) {
    uint32_t e = (b >> 7) & 0xff, m = b & 0x7f;
    if (e == 0xff) return ldexp(1.0, 128);
    return e == 0 ? ldexp((double)m, -133) : ldexp((double)(m | 0x80), (int)e - 134);
}

static int ref_is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* NaN: top 16 bits with the quiet bit set (the documented rule). */
static uint16_t ref_f32_to_bf16(uint32_t u) {
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t mag = u & 0x7fffffffu;
    if (ref_is_nan32(u)) return (uint16_t)((u >> 16) | 0x40);
    if (mag == 0x7f800000u) return (uint16_t)(sign | 0x7f80);
    double x = ref_decode_f32(mag);
    uint16_t lo = (uint16_t)(mag >> 16); /* largest bf16 magnitude <= x */
    double dlo = x - ref_decode_bf16_mag(lo), dhi = ref_decode_bf16_mag((uint16_t)(lo + 1)) - x;
    uint16_t r = dlo < dhi ? lo : dhi < dlo ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return (uint16_t)(sign | r); /* r == 0x7f80 is infinity: the overflow IEEE asks for */
}

/* Exact widening; a NaN keeps its bits (no quieting: no arithmetic happens). */
static uint32_t ref_bf16_to_f32(uint16_t b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) return (uint32_t)b << 16;
    double v = (b & 0x7f80) == 0x7f80 ? INFINITY : ref_decode_bf16_mag(b);
    float f = (float)v;
    if (b & 0x8000) f = -f;
    return bits_of(f);
}

static int bf16_is_snan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0 && !(b & 0x40); }

/* dst + (float)src: the exact sum rounded once to f32 (a double holds the sum of two floats with
 * enough bits that rounding it to f32 is the correctly rounded f32 sum). NaN inputs: dst's NaN
 * quieted, else src's. *any_nan: the result is an invalid-operation NaN whose bits IEEE leaves open. */
static uint32_t ref_add(uint32_t d, uint16_t s, int *any_nan) {
    *any_nan = 0;
    uint32_t s32 = ref_bf16_to_f32(s);
    if (ref_is_nan32(d)) return d | 0x400000u;
    if (ref_is_nan32(s32)) return s32 | 0x400000u;
    double r = (double)float_of(d) + (double)float_of(s32);
    if (isnan(r)) *any_nan = 1;
    return bits_of((float)r);
}

/* ---------------------------------------------------------------- inputs */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static const uint32_t edge_f32[] = {
    0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, /* +-0, +-1 */
    0x7f7fffffu, 0xff7fffffu,                           /* max finite: rounds past it -> inf */
    0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0x7f7effffu, /* just below / tie / above the overflow point */
    0x7f800000u, 0xff800000u,                           /* inf */
    0x7fc00000u, 0xffc00000u, 0x7fc0ffffu, 0x7fffffffu, /* quiet NaNs */
    0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7f80ffffu, /* signalling NaNs (low payload only too) */
    0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u, /* subnormal ties */
    0x00007fffu, 0x00008001u, 0x007fffffu, 0x807fffffu, /* largest subnormal rounds to min normal */
    0x007f8000u, 0x00800000u, 0x00808000u, 0x00818000u, /* min normal and ties above it */
    0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, /* ties at 1.0: even down, even up */
    0xbf808000u, 0xbf818000u, 0x4effffffu, 0x33800000u,
};
#define N_EDGE (sizeof edge_f32 / sizeof edge_f32[0])

static int failures_shown;
#define SHOW_FAIL(...)                                                                                       \
    do {                                                                                                     \
        if (failures_shown++ < 20) fprintf(stderr, __VA_ARGS__);                                             \
    } while (0)

/* ---------------------------------------------------------------- checks */

static void test_scalar_definitions(void) {
    size_t bad = 0;
    for (size_t i = 0; i < N_EDGE; i++) {
        uint16_t got = fsdp_f32_to_bf16(float_of(edge_f32[i])), want = ref_f32_to_bf16(edge_f32[i]);
        if (got != want) {
            bad++;
            SHOW_FAIL("f32_to_bf16(%08x) = %04x, want %04x\n", edge_f32[i], got, want);
        }
    }
    CHECK(bad == 0);
    /* A few facts the reference itself must get right (guards against a wrong reference). */
    CHECK(ref_f32_to_bf16(0x7f7fffffu) == 0x7f80 && ref_f32_to_bf16(0x7f7f7fffu) == 0x7f7f);
    CHECK(ref_f32_to_bf16(0x3f808000u) == 0x3f80 && ref_f32_to_bf16(0x3f818000u) == 0x3f82);
    CHECK(ref_f32_to_bf16(0x007fffffu) == 0x0080 && ref_f32_to_bf16(0x00008000u) == 0x0000);
    CHECK(ref_f32_to_bf16(0x80000000u) == 0x8000 && ref_f32_to_bf16(0x7f800001u) == 0x7fc0);
    CHECK(bits_of(fsdp_bf16_to_f32(0x3f80)) == 0x3f800000u);

    /* All 65,536 bf16 values: exact widening, and the round trip returns the same bits except a
     * signalling NaN, which comes back quiet (quiet bit 0x0040 set, sign and payload kept). */
    size_t bad_up = 0, bad_trip = 0, snans = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = fsdp_bf16_to_f32((uint16_t)b);
        if (bits_of(f) != ref_bf16_to_f32((uint16_t)b)) bad_up++;
        uint16_t back = fsdp_f32_to_bf16(f);
        uint16_t want = bf16_is_snan((uint16_t)b) ? (uint16_t)(b | 0x40) : (uint16_t)b;
        snans += bf16_is_snan((uint16_t)b);
        if (back != want) {
            bad_trip++;
            SHOW_FAIL("round trip %04x -> %04x, want %04x\n", b, back, want);
        }
    }
    CHECK(bad_up == 0);
    CHECK(bad_trip == 0);
    CHECK(snans == 2 * 63); /* 2 signs x 63 non-zero payloads below the quiet bit */
    CHECK(fsdp_dtype_size(FSDP_F32) == 4 && fsdp_dtype_size(FSDP_BF16) == 2);
    CHECK(strcmp(fsdp_dtype_name(FSDP_BF16), "bf16") == 0 && strcmp(fsdp_dtype_name(FSDP_F32), "f32") == 0);
    CHECK(fsdp_dtype_size((fsdp_dtype)7) == 0);
}

/* Every 16-bit top pattern with low halves {0, 0x7fff, 0x8000, 0x8001, 0xffff}: every exponent, every
 * bf16 mantissa, exact ties and both neighbours; plus random bit patterns. Bulk, one path. */
static void test_bulk_down(const char *path) {
    static const uint32_t lows[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234};
    const size_t nl = sizeof lows / sizeof lows[0];
    size_t n = 65536 * nl + N_EDGE + 100003;
    float *src = NULL;
    fsdp_bf16 *dst = NULL;
    CHECK_OK(fsdp_mem_alloc((void **)&src, (n + 8) * sizeof *src, FSDP_MEM_OTHER));
    CHECK_OK(fsdp_mem_alloc((void **)&dst, (n + 8) * sizeof *dst, FSDP_MEM_OTHER));
    if (!src || !dst) goto done;
    size_t k = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t j = 0; j < nl; j++)
            src[k++] = float_of(hi << 16 | lows[j]);
    for (size_t i = 0; i < N_EDGE; i++)
        src[k++] = float_of(edge_f32[i]);
    while (k < n)
        src[k++] = float_of(rnd32());

    fsdp_f32_to_bf16_n(dst, src, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t want = ref_f32_to_bf16(bits_of(src[i]));
        if (dst[i] != want) {
            bad++;
            SHOW_FAIL("[%s] f32_to_bf16_n[%zu](%08x) = %04x, want %04x\n", path, i, bits_of(src[i]), dst[i],
                      want);
        }
    }
    CHECKF(bad == 0, "%s: %zu mismatches", path, bad);

    /* Tails and misalignment: every n in [0, 70) at every element offset 0..3 of src and dst, with a
     * guard element after the end that must stay untouched. */
    size_t bad_tail = 0;
    for (size_t len = 0; len < 70; len++)
        for (size_t os = 0; os < 4; os++)
            for (size_t od = 0; od < 4; od++) {
                const float *s = src + 65536 * 2 + os * 11 + len; /* a mixed region of the inputs */
                fsdp_bf16 *d = dst + od;
                d[len] = 0xabcd;
                fsdp_f32_to_bf16_n(d, s, len);
                for (size_t i = 0; i < len; i++)
                    bad_tail += d[i] != ref_f32_to_bf16(bits_of(s[i]));
                bad_tail += d[len] != 0xabcd;
            }
    CHECKF(bad_tail == 0, "%s: %zu tail mismatches", path, bad_tail);
    fsdp_f32_to_bf16_n(NULL, NULL, 0);
done:
    fsdp_mem_free(dst);
    fsdp_mem_free(src);
}

/* Widening and upcast-add, one path. n_big crosses the streaming-store size (8 MiB of output). */
static void test_bulk_up(const char *path) {
    const size_t n_big = ((size_t)8 << 20) / 4 + 4099;
    fsdp_bf16 *src = NULL;
    float *dst = NULL, *d0 = NULL;
    CHECK_OK(fsdp_mem_alloc((void **)&src, (n_big + 8) * sizeof *src, FSDP_MEM_OTHER));
    CHECK_OK(fsdp_mem_alloc((void **)&dst, (n_big + 8) * sizeof *dst, FSDP_MEM_OTHER));
    CHECK_OK(fsdp_mem_alloc((void **)&d0, (n_big + 8) * sizeof *d0, FSDP_MEM_OTHER));
    if (!src || !dst || !d0) goto done;
    /* src: all 65,536 patterns first, then random ones; d0: random f32 of mixed kinds. */
    for (size_t i = 0; i < n_big + 8; i++)
        src[i] = i < 65536 ? (fsdp_bf16)i : (fsdp_bf16)rnd32();
    for (size_t i = 0; i < n_big + 8; i++) {
        uint32_t r = rnd32();
        if (i % 3 == 0) /* magnitudes near the src values, so sums round and cancel */
            r = (r & 0x807fffffu) | ((uint32_t)(110 + rnd32() % 40) << 23);
        if (i % 97 == 5) r = edge_f32[(i / 97) % N_EDGE];
        d0[i] = float_of(r);
    }

    /* inf + -inf at two places the add loop below reaches (offsets 0 and 1 of src). */
    d0[0xff80] = INFINITY;
    d0[0x7f80 - 1] = -INFINITY;
    size_t offs[] = {0, 1, 3, 7};
    size_t bad = 0;
    for (size_t oi = 0; oi < 4; oi++) {
        size_t o = offs[oi], n = oi == 0 ? n_big : n_big - 64 + oi * 5; /* odd tails too */
        dst[o + n] = 12345.0f;
        fsdp_bf16_to_f32_n(dst + o, src + (3 - oi), n);
        for (size_t i = 0; i < n; i++)
            bad += bits_of(dst[o + i]) != ref_bf16_to_f32(src[3 - oi + i]);
        bad += dst[o + n] != 12345.0f;
    }
    CHECKF(bad == 0, "%s: %zu bf16_to_f32_n mismatches", path, bad);
    for (size_t len = 0; len < 70; len++) {
        fsdp_bf16_to_f32_n(dst + 1, src + 2 + len, len);
        for (size_t i = 0; i < len; i++)
            bad += bits_of(dst[1 + i]) != ref_bf16_to_f32(src[2 + len + i]);
    }
    CHECKF(bad == 0, "%s: %zu bf16_to_f32_n tail mismatches", path, bad);

    /* Upcast-add: dst[i] += (float)src[i]. Invalid-operation NaNs (inf - inf) must be NaN and equal to
     * the scalar path's bits (IEEE leaves their bits to the hardware). */
    size_t bad_add = 0, n_any = 0;
    for (size_t oi = 0; oi < 4; oi++) {
        size_t o = offs[oi], n = oi == 0 ? 200003 : 1000 + oi;
        memcpy(dst + o, d0, n * sizeof *dst);
        fsdp_bf16_add_f32_n(dst + o, src + oi, n);
        for (size_t i = 0; i < n; i++) {
            int any;
            uint32_t want = ref_add(bits_of(d0[i]), src[oi + i], &any);
            if (any) {
                n_any++;
                float sc = d0[i];
                fsdp_simd keep = fsdp_simd_active();
                fsdp_simd_force(FSDP_SIMD_SCALAR);
                fsdp_bf16_add_f32_n(&sc, &src[oi + i], 1);
                fsdp_simd_force(keep);
                if (!isnan(dst[o + i]) || bits_of(dst[o + i]) != bits_of(sc)) bad_add++;
            } else if (bits_of(dst[o + i]) != want) {
                bad_add++;
                SHOW_FAIL("[%s] add %08x + %04x = %08x, want %08x\n", path, bits_of(d0[i]), src[oi + i],
                          bits_of(dst[o + i]), want);
            }
        }
    }
    CHECKF(bad_add == 0, "%s: %zu add mismatches", path, bad_add);
    CHECK(n_any > 0); /* the inputs did exercise inf + -inf */
    for (size_t len = 0; len < 70; len++) {
        memcpy(dst + 3, d0 + len, (len + 1) * sizeof *dst);
        fsdp_bf16_add_f32_n(dst + 3, src + 5, len);
        for (size_t i = 0; i < len; i++) {
            int any;
            uint32_t want = ref_add(bits_of(d0[len + i]), src[5 + i], &any);
            bad_add += any ? !isnan(dst[3 + i]) : bits_of(dst[3 + i]) != want;
        }
        bad_add += bits_of(dst[3 + len]) != bits_of(d0[2 * len]); /* guard untouched */
    }
    CHECKF(bad_add == 0, "%s: %zu add tail mismatches", path, bad_add);
    fsdp_bf16_to_f32_n(NULL, NULL, 0);
    fsdp_bf16_add_f32_n(NULL, NULL, 0);
done:
    fsdp_mem_free(d0);
    fsdp_mem_free(dst);
    fsdp_mem_free(src);
}

/* Rank-order sums (fsdp_f32_sum_n, fsdp_f32_sum_axpy_n) against the definition written out here with
 * plain fp32 additions, left to right: k = 1..6 and 70 contributions, random magnitudes over 2^-20..2^20
 * (so the order of additions changes results: checked below), every length 0..69 and a long one at
 * odd offsets (vector bodies and tails), the accumulate's product rounded before its addition, and the
 * NaN rule (the earlier contribution's NaN, quieted). */
static uint32_t lcg(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 33);
}

static void test_sums(const char *path) {
    enum { K = 70, L = 5003 };
    static float in[K][L + 8], out[L + 8], acc[L + 8], acc0[L + 8];
    uint64_t st = 12345;
    for (int s = 0; s < K; s++)
        for (size_t i = 0; i < L + 8; i++) {
            float m = (float)(lcg(&st) % 2001) / 1000.0f - 1.0f;
            in[s][i] = ldexpf(m, (int)(lcg(&st) % 41) - 20);
        }
    for (size_t i = 0; i < L + 8; i++)
        acc0[i] = ldexpf((float)(lcg(&st) % 2001) / 1000.0f - 1.0f, 3);
    const float scale = 1.0f / 3.0f;
    int ks[] = {1, 2, 3, 4, 6, K};
    size_t bad = 0, order_matters = 0;
    for (int ki = 0; ki < 6; ki++) {
        int k = ks[ki];
        for (size_t len = 0; len <= L; len = len < 69 ? len + 1 : L) {
            size_t o = len % 5; /* src and dst offsets differ: unaligned vectors */
            const float *src[K];
            for (int s = 0; s < k; s++)
                src[s] = in[s] + o + (size_t)s % 3;
            memset(out, 0x7f, sizeof out);
            memcpy(acc, acc0, sizeof acc);
            fsdp_f32_sum_n(out + 1, src, k, len);
            fsdp_f32_sum_axpy_n(acc + 2, src, k, len, scale);
            for (size_t i = 0; i < len; i++) {
                float a = src[0][i], r = src[k - 1][i];
                for (int s = 1; s < k; s++)
                    a = a + src[s][i];
                for (int s = k - 2; s >= 0; s--)
                    r = r + src[s][i];
                order_matters += a != r;
                volatile float p = a * scale; /* rounded before the addition */
                float want_acc = acc0[i + 2] + p;
                bad += bits_of(out[1 + i]) != bits_of(a);
                bad += bits_of(acc[2 + i]) != bits_of(want_acc);
            }
            bad += bits_of(out[1 + len]) != 0x7f7f7f7fu; /* nothing written past the end */
            bad += bits_of(acc[2 + len]) != bits_of(acc0[2 + len]);
            if (len == L) break;
        }
    }
    CHECKF(bad == 0, "%s: %zu sum mismatches", path, bad);
    CHECK(order_matters > 1000); /* the data would catch a different order */
    bad = 0;
    /* NaN: both contributions NaN -> the first one's, quieted; one NaN -> that one, quieted. */
    float na[16], nb[16], nd[16];
    for (int i = 0; i < 16; i++) {
        na[i] = float_of(0x7f800001u + (uint32_t)i); /* signalling NaNs with payloads */
        nb[i] = i % 2 ? float_of(0xff800100u) : 1.0f;
    }
    const float *np[2] = {na, nb};
    fsdp_f32_sum_n(nd, np, 2, 16);
    for (int i = 0; i < 16; i++)
        bad += bits_of(nd[i]) != ((0x7f800001u + (uint32_t)i) | 0x00400000u);
    const float *nq[2] = {nb, na};
    fsdp_f32_sum_n(nd, nq, 2, 16);
    for (int i = 0; i < 16; i++)
        bad += bits_of(nd[i]) != (i % 2 ? 0xffc00100u : (0x7f800001u + (uint32_t)i) | 0x00400000u);
    CHECKF(bad == 0, "%s: %zu NaN-rule mismatches", path, bad);
    fsdp_f32_sum_n(NULL, NULL, 3, 0);
    fsdp_f32_sum_axpy_n(NULL, NULL, 3, 0, 1.0f);
}

/* fsdp_bf16_sum_n against the reference written out here: each contribution widened (ref_bf16_to_f32),
 * added left to right by ref_add's rule (the correctly rounded f32 sum, the earlier NaN quieted), the
 * result rounded once by ref_f32_to_bf16. k = 1..4 and 9, every length 0..69 and a long one at odd
 * offsets, in place (dst = src[0] and dst = src[k-1], as the reduce-scatter calls it) and not. */
static void test_bf16_sums(const char *path) {
    enum { K = 9, L = 3001 };
    static fsdp_bf16 in[K][L + 8], out[L + 8], work[L + 8];
    uint64_t st = 777;
    for (int s = 0; s < K; s++)
        for (size_t i = 0; i < L + 8; i++) {
            uint32_t r = lcg(&st);
            /* mostly finite values over a wide range; now and then inf, NaN (quiet or signalling) */
            uint16_t b = (uint16_t)(((r & 1) << 15) | ((64 + (r >> 1) % 128) << 7) | ((r >> 9) & 0x7f));
            if (r % 97 == 0) b = (uint16_t)(0x7f80 | ((r >> 8) & 0x8000) | (r % 3 == 0 ? 0x41 : 0x01));
            if (r % 89 == 0) b = (uint16_t)(0x7f80 | ((r >> 8) & 0x8000));
            in[s][i] = b;
        }
    int ks[] = {1, 2, 3, 4, K};
    size_t bad = 0, cases = 0, rounded = 0;
    for (int ki = 0; ki < 5; ki++) {
        int k = ks[ki];
        for (size_t len = 0; len <= L; len = len < 69 ? len + 1 : L) {
            for (int alias = 0; alias < 3; alias++) { /* 0: out of place; 1: dst = src[0]; 2: = src[k-1] */
                size_t o = len % 5;
                const fsdp_bf16 *src[K];
                for (int s = 0; s < k; s++)
                    src[s] = in[s] + o + (size_t)s % 3;
                fsdp_bf16 *dst = out + 1;
                if (alias) {
                    int a = alias == 1 ? 0 : k - 1;
                    memcpy(work, in[a], sizeof work);
                    src[a] = work + o + (size_t)a % 3;
                    dst = work + o + (size_t)a % 3;
                }
                memset(out, 0x5a, sizeof out);
                fsdp_bf16 guard = dst[len];
                /* the reference first: in place, dst overwrites a contribution */
                static uint16_t want[L + 8];
                for (size_t i = 0; i < len; i++) {
                    uint32_t a32 = ref_bf16_to_f32(src[0][i]);
                    int any = 0, any_s = 0;
                    for (int s = 1; s < k; s++) {
                        uint32_t w = ref_bf16_to_f32(src[s][i]);
                        uint32_t n32 = ref_is_nan32(a32) ? (a32 | 0x400000u)
                                       : ref_is_nan32(w)
                                           ? (w | 0x400000u)
                                           : bits_of((float)((double)float_of(a32) + (double)float_of(w)));
                        if (!ref_is_nan32(a32) && !ref_is_nan32(w) && ref_is_nan32(n32)) any_s = 1;
                        any |= any_s;
                        a32 = n32;
                    }
                    want[i] = any ? 0xffff : ref_f32_to_bf16(a32); /* 0xffff: a NaN of open bits */
                    rounded += (a32 & 0xffff) != 0;
                }
                fsdp_bf16_sum_n(dst, src, k, len);
                for (size_t i = 0; i < len; i++) {
                    if (want[i] == 0xffff)
                        bad += (dst[i] & 0x7f80) != 0x7f80 || (dst[i] & 0x7f) == 0;
                    else if (dst[i] != want[i]) {
                        if (bad < 5)
                            fprintf(stderr, "[%s] k %d len %zu alias %d i %zu: %04x, want %04x\n", path, k,
                                    len, alias, i, dst[i], want[i]);
                        bad++;
                    }
                }
                bad += dst[len] != guard; /* nothing written past the end */
                cases++;
            }
            if (len == L) break;
        }
    }
    CHECKF(bad == 0, "%s: %zu bf16 sum mismatches", path, bad);
    CHECK(cases > 1000 && rounded > 1000); /* sums that needed rounding did occur */
    fsdp_bf16_sum_n(NULL, NULL, 3, 0);
}

int main(void) {
    test_scalar_definitions();

    CHECK(strcmp(fsdp_simd_name(FSDP_SIMD_SCALAR), "scalar") == 0);
    CHECK(strcmp(fsdp_simd_name(FSDP_SIMD_AVX512), "avx512") == 0);
    CHECK(strcmp(fsdp_simd_name(FSDP_SIMD_AVX2), "avx2") == 0);
    CHECK_ERR(fsdp_simd_force((fsdp_simd)42), FSDP_EINVAL, "42");
    fsdp_simd best = fsdp_simd_active();
    CHECK(best != FSDP_SIMD_AUTO);

    /* What this CPU supports, asked independently; a supported path must be accepted and tested. */
    int have[4] = {0, 1, 0, 0};
#if defined(__x86_64__)
    have[FSDP_SIMD_AVX2] = __builtin_cpu_supports("avx2");
    have[FSDP_SIMD_AVX512] = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif
    int tested = 0;
    for (int p = FSDP_SIMD_SCALAR; p <= FSDP_SIMD_AVX512; p++) {
        const char *name = fsdp_simd_name((fsdp_simd)p);
        if (!have[p]) {
            CHECK_ERR(fsdp_simd_force((fsdp_simd)p), FSDP_EUNSUPPORTED, name);
            fprintf(stderr, "path %s: not available on this CPU\n", name);
            continue;
        }
        CHECK_OK(fsdp_simd_force((fsdp_simd)p));
        CHECK(fsdp_simd_active() == (fsdp_simd)p);
        test_bulk_down(name);
        test_bulk_up(name);
        test_sums(name);
        test_bf16_sums(name);
        tested++;
        fprintf(stderr, "path %s: tested\n", name);
    }
    CHECK(tested >= 1);
    CHECK_OK(fsdp_simd_force(FSDP_SIMD_AUTO));
    CHECK(fsdp_simd_active() == best);
    CHECK(best == (have[FSDP_SIMD_AVX512] ? FSDP_SIMD_AVX512
                   : have[FSDP_SIMD_AVX2] ? FSDP_SIMD_AVX2
                                          : FSDP_SIMD_SCALAR));
    return TEST_MAIN_END();
}
