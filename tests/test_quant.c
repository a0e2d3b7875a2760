/*
 * test_quant.c — the quant module's CPU side: f16/bf16 conversions
 * (exhaustive and against a double-precision reference), dequantization of
 * hand-built blocks whose expected values are derived from the published
 * layouts (they pin the element order without reusing the code under test),
 * and quantize -> dequantize round trips within each type's error bound.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "quant/quant.h"

/* ---- Deterministic random numbers: core's generator, seeded before each
 * test (Criterion runs each test in a process of its own) ---- */
static core_rng rng;

static void rng_init(void)
{
    core_rng_seed(&rng, 1);
}

TestSuite(quant, .init = rng_init);

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ======================= f16 / bf16 ======================= */

/* The value of a finite half from its fields, in double (exact). */
static double f16_ref_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Correctly rounded half of a finite x: the nearest of the two positive
 * halves around |x| (ties to the even bit pattern), found by bisection over
 * the ordered bit patterns. 0x7c00 stands for 65536, the next step of an
 * unbounded exponent, so |x| >= 65520 rounds to infinity as IEEE says. */
static double f16_pos_value(int h)
{
    return h == 0x7c00 ? 65536.0 : f16_ref_value((uint16_t)h);
}

static uint16_t f16_ref_round(float x)
{
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    if (a >= 65536.0)
        return sign | 0x7c00;
    int lo = 0, hi = 0x7c00; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (f16_pos_value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - f16_pos_value(lo), dh = f16_pos_value(hi) - a;
    int r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

Test(quant, f16_exhaustive_decode_and_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        uint16_t back = quant_f32_to_f16(f);
        int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31 && m) {
            cr_assert(isnan(f), "half %04x should decode to NaN", h);
            cr_assert((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "NaN %04x -> %04x", h, back);
            continue;
        }
        if (e == 31) {
            cr_assert(isinf(f) && !!signbit(f) == !!(h & 0x8000), "half %04x -> %g", h, f);
        } else {
            cr_assert_eq((double)f, f16_ref_value((uint16_t)h), "half %04x -> %.10g", h, f);
            cr_assert_eq(!!signbit(f), !!(h & 0x8000), "sign of half %04x", h);
        }
        cr_assert_eq(back, h, "half %04x -> %.10g -> %04x", h, f, back);
    }
}

static void check_f16_round(float x)
{
    uint16_t got = quant_f32_to_f16(x), want = f16_ref_round(x);
    cr_assert_eq(got, want, "f32 %.9g (%08x): got half %04x, want %04x", x, f32_bits(x), got, want);
}

Test(quant, f16_rounding_vs_double_reference)
{
    /* Every tie between neighbouring halves and the floats just around it
     * (exact in float: a half has 11 significant bits, the midpoint 12). */
    for (int h = 0; h < 0x7c00; h++) {
        float mid = (float)((f16_pos_value(h) + f16_pos_value(h + 1)) / 2);
        for (int s = 0; s < 2; s++) {
            float v = s ? -mid : mid;
            check_f16_round(v);
            check_f16_round(nextafterf(v, 0.0f));
            check_f16_round(nextafterf(v, s ? -INFINITY : INFINITY));
        }
    }
    /* Random floats from well below the smallest subnormal (2^-24) to past
     * the overflow threshold, random mantissas and signs. */
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)core_rng_next(&rng);
        uint32_t exp = 127 - 28 + (uint32_t)(core_rng_next(&rng) % 47); /* 2^-28 .. 2^18 */
        float x = f32_from_bits((u & 0x807fffffu) | (exp << 23));
        check_f16_round(x);
    }
    const float special[] = {0.0f,         -0.0f,           65504.0f, 65519.996f, 65520.0f,
                             -65520.0f,    1e10f,           FLT_MAX,  -FLT_MAX,   0x1p-24f,
                             0x1p-25f,     0x1.000002p-25f, 0x1p-26f, FLT_MIN,    FLT_TRUE_MIN,
                             0x1.ffcp-15f, 0x1p-14f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_f16_round(special[i]);
    cr_assert_eq(quant_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(quant_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t nan = quant_f32_to_f16(NAN);
    cr_assert((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff), "NaN -> %04x", nan);
}

static double bf16_ref_value(uint16_t h) /* finite */
{
    int e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

static double bf16_pos_value(uint32_t h)
{
    return h == 0x7f80 ? ldexp(1.0, 128) : bf16_ref_value((uint16_t)h);
}

/* Correctly rounded bf16 of a finite x: the truncation and the next value up,
 * whichever is nearer (ties to even); 0x7f80 stands for 2^128. */
static uint16_t bf16_ref_round(float x)
{
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    uint32_t lo = (f32_bits(x) & 0x7fffffffu) >> 16, hi = lo + 1;
    double dl = a - bf16_pos_value(lo), dh = bf16_pos_value(hi) - a;
    uint32_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

Test(quant, bf16_exhaustive_and_rounding)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        int e = (h >> 7) & 255, m = h & 127;
        if (e == 255 && m) {
            cr_assert(isnan(f));
            cr_assert(isnan(quant_bf16_to_f32(quant_f32_to_bf16(f))), "bf16 NaN %04x", h);
            continue;
        }
        if (e != 255)
            cr_assert_eq((double)f, bf16_ref_value((uint16_t)h), "bf16 %04x -> %g", h, f);
        cr_assert_eq(quant_f32_to_bf16(f), h, "bf16 %04x round trip", h);
        if (e == 255)
            continue;
        /* the tie above h and its neighbours */
        float mid = (float)((bf16_pos_value(h & 0x7fff) + bf16_pos_value((h & 0x7fff) + 1)) / 2);
        if (h & 0x8000)
            mid = -mid;
        const float around[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, mid * 2)};
        for (int k = 0; k < 3; k++)
            cr_assert_eq(quant_f32_to_bf16(around[k]), bf16_ref_round(around[k]),
                         "f32 %08x: got %04x want %04x", f32_bits(around[k]),
                         quant_f32_to_bf16(around[k]), bf16_ref_round(around[k]));
    }
    for (int i = 0; i < 1000000; i++) {
        float x = f32_from_bits((uint32_t)core_rng_next(&rng));
        if (!isfinite(x))
            continue;
        cr_assert_eq(quant_f32_to_bf16(x), bf16_ref_round(x), "f32 %08x", f32_bits(x));
    }
    cr_assert_eq(quant_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds past the largest bf16 */
}

/* ======================= hand-built blocks ======================= */

static void dequant_or_fail(glesc_dtype t, const void *src, float *dst, int64_t n)
{
    glesc_status st = quant_dequantize(t, src, dst, n);
    cr_assert_eq(st, GLESC_OK, "%s: %s", glesc_dtype_name(t), glesc_last_errmsg());
}

static void expect_values(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s: element %d is %g, want %g", what, i, got[i], want[i]);
}

/* q4_0, d = 1.0 (f16 0x3c00); byte j = j | (15 - j) << 4. Byte j holds
 * element j (low nibble) and element j + 16 (high nibble); x = q - 8. */
Test(quant, golden_q4_0)
{
    uint8_t b[18] = {0x00, 0x3c};
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    const float want[32] = {-8, -7, -6, -5, -4, -3, -2, -1, 0,  1,  2,  3,  4,  5,  6,  7,
                            7,  6,  5,  4,  3,  2,  1,  0,  -1, -2, -3, -4, -5, -6, -7, -8};
    float y[32];
    dequant_or_fail(GLESC_DTYPE_Q4_0, b, y, 32);
    expect_values("q4_0", y, want, 32);
}

/* q4_1, d = 0.5 (0x3800), m = -2 (0xc000): x = 0.5 q - 2. */
Test(quant, golden_q4_1)
{
    uint8_t b[20] = {0x00, 0x38, 0x00, 0xc0};
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    const float want[32] = {-2,  -1.5, -1,  -0.5, 0,   0.5, 1,    1.5, 2,    2.5, 3,
                            3.5, 4,    4.5, 5,    5.5, 5.5, 5,    4.5, 4,    3.5, 3,
                            2.5, 2,    1.5, 1,    0.5, 0,   -0.5, -1,  -1.5, -2};
    float y[32];
    dequant_or_fail(GLESC_DTYPE_Q4_1, b, y, 32);
    expect_values("q4_1", y, want, 32);
}

/* q5_0, d = 1: qh = 0x80000001 (bytes 01 00 00 80): elements 0 and 31 get the
 * fifth bit. Byte j = j | j << 4. x = q - 16. */
Test(quant, golden_q5_0)
{
    uint8_t b[22] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0x80};
    for (int j = 0; j < 16; j++)
        b[6 + j] = (uint8_t)(j | (j << 4));
    const float want[32] = {0,   -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
                            -16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, 15};
    float y[32];
    dequant_or_fail(GLESC_DTYPE_Q5_0, b, y, 32);
    expect_values("q5_0", y, want, 32);
}

/* q5_1, d = 1, m = 0.5, qh bit 16 (byte 2 = 0x01): element 16 = 16.5. */
Test(quant, golden_q5_1)
{
    uint8_t b[24] = {0x00, 0x3c, 0x00, 0x38, 0x00, 0x00, 0x01, 0x00};
    float want[32], y[32];
    for (int i = 0; i < 32; i++)
        want[i] = 0.5f;
    want[16] = 16.5f;
    dequant_or_fail(GLESC_DTYPE_Q5_1, b, y, 32);
    expect_values("q5_1", y, want, 32);
}

/* q8_0, d = 0.5; q8_1, d = 2 (s ignored); qs[j] = 8j - 128 as a byte. */
Test(quant, golden_q8_0_q8_1)
{
    uint8_t b0[34] = {0x00, 0x38}, b1[36] = {0x00, 0x40, 0x12, 0x34};
    float want0[32], want1[32], y[32];
    for (int j = 0; j < 32; j++) {
        b0[2 + j] = (uint8_t)((8 * j) ^ 0x80); /* 8j - 128 as a two's-complement byte */
        b1[4 + j] = (uint8_t)(j - 16);         /* j - 16 */
        want0[j] = 0.5f * (float)(8 * j - 128);
        want1[j] = 2.0f * (float)(j - 16);
    }
    dequant_or_fail(GLESC_DTYPE_Q8_0, b0, y, 32);
    expect_values("q8_0", y, want0, 32);
    dequant_or_fail(GLESC_DTYPE_Q8_1, b1, y, 32);
    expect_values("q8_1", y, want1, 32);
}

/* q2_k, d = 1, dmin = 0.5, every scale byte 0x21 (scale 1, min 2 -> -1).
 * qs[0] = 0xe4 (2-bit fields 0,1,2,3): elements 0, 32, 64, 96 = 0, 1, 2, 3.
 * qs[37] = 0x1b (3,2,1,0): second half, l = 5: elements 133, 165, 197, 229.
 * Sub-block 15 (elements 240..255) gets scale 3, min 0 (byte 0x03), and
 * qs[63] = 0xc0: element 255 (h 1, run 3, l 31) = 3 -> 9. */
Test(quant, golden_q2_k)
{
    uint8_t b[84] = {0};
    memset(b, 0x21, 16);
    b[15] = 0x03;
    b[16 + 0] = 0xe4;
    b[16 + 37] = 0x1b;
    b[16 + 63] = 0xc0;
    b[80] = 0x00, b[81] = 0x3c; /* d = 1 */
    b[82] = 0x00, b[83] = 0x38; /* dmin = 0.5 */
    float want[256], y[256];
    for (int e = 0; e < 256; e++)
        want[e] = e >= 240 ? 0.0f : -1.0f;
    want[32] = 0, want[64] = 1, want[96] = 2; /* q - 1 */
    want[133] = 2, want[165] = 1, want[197] = 0, want[229] = -1;
    want[255] = 9;
    dequant_or_fail(GLESC_DTYPE_Q2_K, b, y, 256);
    expect_values("q2_k", y, want, 256);
}

/* q3_k, d = 1. Scales stored + 32: value 1 = 33 = 0b10'0001 -> low nibbles 1
 * (bytes 0..7: 0x11), top bits 2 in every 2-bit field of bytes 8..11 (0xaa).
 * Scale 8 (elements 128..143) = 15 = 47 = 0b10'1111: high nibble of byte 0
 * = 0xf. Scale 15 (240..255) = -32 = 0: high nibble of byte 7 = 0, bits 6..7
 * of byte 11 = 0. hmask all set (no -4) except hmask[0] bit 0 (element 0). */
Test(quant, golden_q3_k)
{
    uint8_t b[110] = {0};
    memset(b, 0xff, 32);
    b[0] = 0xfe;
    b[32 + 0] = 0xe4;  /* elements 0, 32, 64, 96: low bits 0, 1, 2, 3 */
    b[32 + 33] = 0x03; /* element 129 (h 1, run 0, l 1): 3 */
    b[32 + 63] = 0x40; /* element 255 (h 1, run 3, l 31): 1 */
    memset(b + 96, 0x11, 8);
    memset(b + 104, 0xaa, 4);
    b[96 + 0] = 0xf1;
    b[96 + 7] = 0x01;
    b[96 + 11] = 0x2a;
    b[108] = 0x00, b[109] = 0x3c;
    float want[256] = {0}, y[256];
    want[0] = -4; /* 0 - 4: no hmask bit */
    want[32] = 1, want[64] = 2, want[96] = 3;
    want[129] = 45; /* 15 * 3 */
    want[255] = -32;
    dequant_or_fail(GLESC_DTYPE_Q3_K, b, y, 256);
    expect_values("q3_k", y, want, 256);
}

/* q4_k / q5_k scales, d = dmin = 1: scales {1,2,3,4,17,33,49,63}, mins
 * {0,1,2,3,20,36,52,60}, packed by hand:
 *   bytes 0..3  = scale j | (scale j+4 >> 4) << 6: 0x41 0x82 0xc3 0xc4
 *   bytes 4..7  = min j | (min j+4 >> 4) << 6:     0x40 0x81 0xc2 0xc3
 *   bytes 8..11 = scale j+4 & 15 | (min j+4 & 15) << 4: 0x41 0x41 0x41 0xcf */
static const uint8_t k4_scales[12] = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x81,
                                      0xc2, 0xc3, 0x41, 0x41, 0x41, 0xcf};
static const float k4_mn[8] = {0, 1, 2, 3, 20, 36, 52, 60};

/* q4_k: qs[0] = 0x5a: element 0 = 10, element 32 = 5. qs[127] = 0xf0:
 * element 223 (chunk 3, low) = 0, element 255 (chunk 3, high) = 15. */
Test(quant, golden_q4_k)
{
    uint8_t b[144] = {0x00, 0x3c, 0x00, 0x3c};
    memcpy(b + 4, k4_scales, 12);
    b[16 + 0] = 0x5a;
    b[16 + 127] = 0xf0;
    float want[256], y[256];
    for (int e = 0; e < 256; e++)
        want[e] = -k4_mn[e / 32];
    want[0] = 10;    /* 1 * 10 - 0 */
    want[32] = 9;    /* 2 * 5 - 1 */
    want[255] = 885; /* 63 * 15 - 60 */
    dequant_or_fail(GLESC_DTYPE_Q4_K, b, y, 256);
    expect_values("q4_k", y, want, 256);
    for (int j = 0; j < 8; j++) /* every sub-block's min, read back at q = 0 */
        cr_assert_eq(y[32 * j + 1], -k4_mn[j]);
}

/* q5_k: same scales; qh[0] = 0x81: element 0 gets +16 (bit 0: chunk 0 low),
 * element 224 gets +16 (bit 7: chunk 3 high); qs[0] = 0x5a. */
Test(quant, golden_q5_k)
{
    uint8_t b[176] = {0x00, 0x3c, 0x00, 0x3c};
    memcpy(b + 4, k4_scales, 12);
    b[16 + 0] = 0x81;
    b[48 + 0] = 0x5a;
    float want[256], y[256];
    for (int e = 0; e < 256; e++)
        want[e] = -k4_mn[e / 32];
    want[0] = 26;    /* 1 * (10 + 16) - 0 */
    want[32] = 9;    /* 2 * 5 - 1 */
    want[224] = 948; /* 63 * 16 - 60 */
    dequant_or_fail(GLESC_DTYPE_Q5_K, b, y, 256);
    expect_values("q5_k", y, want, 256);
}

/* q6_k, d = 1, scales j+1 for even j, -(j+1) for odd j. ql[0] = 0x21:
 * element 0 low nibble 1, element 64 low nibble 2 (high nibble of ql[0]);
 * ql[32] = 0x43: element 32 = 3, element 96 = 4; qh[0] = 0xe4: top bits of
 * elements 0, 32, 64, 96 = 0, 1, 2, 3. Element 255 (h 1, run 3, l 31):
 * high nibble of ql[64 + 32 + 31] = 15, qh[32 + 31] bits 6..7 = 3 -> 63. */
Test(quant, golden_q6_k)
{
    uint8_t b[210] = {0};
    b[0] = 0x21;
    b[32] = 0x43;
    b[127] = 0xf0;
    b[128] = 0xe4;
    b[128 + 63] = 0xc0;
    float sc[16];
    for (int j = 0; j < 16; j++) {
        sc[j] = (float)((j % 2) ? -(j + 1) : j + 1);
        b[192 + j] = (uint8_t)((int)sc[j] & 0xff);
    }
    b[208] = 0x00, b[209] = 0x3c;
    float want[256], y[256];
    for (int e = 0; e < 256; e++)
        want[e] = -32 * sc[e / 16];
    want[0] = -31;    /* 1 * (1 - 32) */
    want[32] = -39;   /* 3 * (19 - 32) */
    want[64] = 10;    /* 5 * (34 - 32) */
    want[96] = 140;   /* 7 * (52 - 32) */
    want[255] = -496; /* -16 * (63 - 32) */
    dequant_or_fail(GLESC_DTYPE_Q6_K, b, y, 256);
    expect_values("q6_k", y, want, 256);
}

/* q8_k, f32 d = 0.25 (0x3e800000), qs[j] = j - 128. */
Test(quant, golden_q8_k)
{
    uint8_t b[292] = {0x00, 0x00, 0x80, 0x3e};
    float want[256], y[256];
    for (int j = 0; j < 256; j++) {
        b[4 + j] = (uint8_t)(j ^ 0x80);
        want[j] = 0.25f * (float)(j - 128);
    }
    dequant_or_fail(GLESC_DTYPE_Q8_K, b, y, 256);
    expect_values("q8_k", y, want, 256);
}

/* iq4_nl, d = 1, byte j = j | (15 - j) << 4: the code book in order, then
 * reversed. */
Test(quant, golden_iq4_nl)
{
    uint8_t b[18] = {0x00, 0x3c};
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    const float want[32] = {-127, -104, -83, -65, -49, -35, -22, -10, 1,    13,  25,
                            38,   53,   69,  89,  113, 113, 89,  69,  53,   38,  25,
                            13,   1,    -10, -22, -35, -49, -65, -83, -104, -127};
    float y[32];
    dequant_or_fail(GLESC_DTYPE_IQ4_NL, b, y, 32);
    expect_values("iq4_nl", y, want, 32);
}

/* iq4_xs, d = 1: sub-block ib has ls = 33 + ib (scale ib + 1): low nibbles
 * 1..8 -> scales_l = 0x21 0x43 0x65 0x87, top bits 2 each -> scales_h =
 * 0xaaaa. All codes 8 (value 1) except qs[112] = 0xf0: element 224 = code 0
 * (-127), element 240 = code 15 (113), both in sub-block 7 (scale 8). */
Test(quant, golden_iq4_xs)
{
    uint8_t b[136] = {0x00, 0x3c, 0xaa, 0xaa, 0x21, 0x43, 0x65, 0x87};
    memset(b + 8, 0x88, 128);
    b[8 + 112] = 0xf0;
    float want[256], y[256];
    for (int e = 0; e < 256; e++)
        want[e] = (float)(e / 32 + 1);
    want[224] = -1016;
    want[240] = 904;
    dequant_or_fail(GLESC_DTYPE_IQ4_XS, b, y, 256);
    expect_values("iq4_xs", y, want, 256);
}

/* mxfp4, e = 127 (E8M0 scale 1): the E2M1 values themselves; byte j = j |
 * (15 - j) << 4. */
Test(quant, golden_mxfp4)
{
    uint8_t b[17] = {127};
    for (int j = 0; j < 16; j++)
        b[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    float want[32], y[32];
    for (int j = 0; j < 16; j++) {
        want[j] = e2m1[j];
        want[16 + j] = e2m1[15 - j];
    }
    dequant_or_fail(GLESC_DTYPE_MXFP4, b, y, 32);
    expect_values("mxfp4", y, want, 32);
    b[0] = 130; /* scale 8 */
    dequant_or_fail(GLESC_DTYPE_MXFP4, b, y, 32);
    cr_assert_eq(y[7], 48.0f);
}

Test(quant, plain_types)
{
    const uint8_t f32[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0}; /* 1, -2 */
    const uint8_t f16[4] = {0x00, 0x3c, 0x01, 0x00};                         /* 1, 2^-24 */
    const uint8_t bf16[4] = {0x80, 0x3f, 0x49, 0x40};                        /* 1, 3.140625 */
    float y[2];
    dequant_or_fail(GLESC_DTYPE_F32, f32, y, 2);
    cr_assert(y[0] == 1.0f && y[1] == -2.0f);
    dequant_or_fail(GLESC_DTYPE_F16, f16, y, 2);
    cr_assert(y[0] == 1.0f && y[1] == 0x1p-24f);
    dequant_or_fail(GLESC_DTYPE_BF16, bf16, y, 2);
    cr_assert(y[0] == 1.0f && y[1] == 3.140625f);
}

Test(quant, argument_errors)
{
    uint8_t b[64] = {0};
    float y[64];
    cr_assert_eq(quant_dequantize(GLESC_DTYPE_Q4_0, b, y, 31), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "q4_0") && strstr(glesc_last_errmsg(), "31"), "%s",
              glesc_last_errmsg());
    cr_assert_eq(quant_dequantize(GLESC_DTYPE_Q4_0, b, y, -32), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(quant_dequantize((glesc_dtype)4, b, y, 32), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(quant_dequantize(GLESC_DTYPE_IQ2_XXS, b, y, 256), GLESC_ERROR_UNSUPPORTED);
    cr_assert(strstr(glesc_last_errmsg(), "iq2_xxs"), "%s", glesc_last_errmsg());
    cr_assert_eq(quant_quantize(GLESC_DTYPE_I32, y, b, 4), GLESC_ERROR_UNSUPPORTED);
    cr_assert_eq(quant_dequantize(GLESC_DTYPE_Q4_0, b, y, 0), GLESC_OK);
    /* the table's rows agree with the public size queries */
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
        const quant_type_info *q = quant_type((glesc_dtype)t);
        if (!q)
            continue;
        cr_assert_eq(q->block_bytes, glesc_dtype_block_bytes((glesc_dtype)t));
        cr_assert_eq(!!q->dequant, !!q->quantize, "%s: dequant and quantize come in pairs",
                     q->name);
    }
}

/* ======================= round trips ======================= */

#define RT_N 65536 /* 256 super-blocks */

/* Test input: mostly N(0, 1) scaled per 256-block over four decades, plus an
 * all-zero block, a constant block, a block with one large outlier and a
 * block of tiny values (f16 subnormal scales). */
static void make_input(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)core_rng_normal(&rng);
    for (int blk = 0; blk < n / 256; blk++) {
        float s = powf(10.0f, (float)(blk % 5) - 2.0f);
        for (int i = 0; i < 256; i++)
            x[256 * blk + i] *= s;
    }
    memset(x, 0, 256 * sizeof *x);
    for (int i = 0; i < 256; i++)
        x[256 + i] = 0.75f;
    x[512 + 17] = 50.0f;
    for (int i = 0; i < 256; i++)
        x[768 + i] = (float)core_rng_normal(&rng) * 1e-6f;
}

typedef struct rt_result {
    /* sqrt of the mean over the Gaussian 256-blocks of sum err^2 / sum x^2:
     * every block weighs the same whatever its magnitude */
    double rel_rms;
    double worst_ratio; /* max over elements of |err| / bound (legacy types) */
} rt_result;

/* Quantizes x, checks the size, dequantizes (also from an odd address:
 * blocks may sit anywhere) and returns the error statistics. */
static rt_result round_trip(glesc_dtype t, const float *x, int n)
{
    const quant_type_info *q = quant_type(t);
    size_t bytes = glesc_dtype_row_bytes(t, n);
    uint8_t *blocks = malloc(bytes + 1);
    float *y = malloc(sizeof(float) * (size_t)n), *y2 = malloc(sizeof(float) * (size_t)n);
    cr_assert(blocks && y && y2);
    memset(blocks, 0xa5, bytes + 1);
    cr_assert_eq(quant_quantize(t, x, blocks + 1, n), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(blocks[0], 0xa5, "%s wrote before its output", q->name);
    dequant_or_fail(t, blocks + 1, y, n);
    memmove(blocks, blocks + 1, bytes);
    dequant_or_fail(t, blocks, y2, n);
    cr_assert(memcmp(y, y2, sizeof(float) * (size_t)n) == 0, "%s: alignment changed results",
              q->name);
    /* quantizing again gives the same bytes */
    uint8_t *again = malloc(bytes);
    cr_assert(again);
    quant_quantize(t, x, again, n);
    cr_assert(memcmp(again, blocks, bytes) == 0, "%s: quantizer not deterministic", q->name);

    rt_result r = {0, 0};
    double sum_rel = 0;
    for (int blk = 0; blk < n / 256; blk++) {
        double se = 0, sx = 0;
        for (int i = 256 * blk; i < 256 * blk + 256; i++) {
            cr_assert(isfinite(y[i]), "%s: element %d is %g", q->name, i, y[i]);
            if (i < 256)
                cr_assert_eq(y[i], 0.0f, "%s: zero block element %d is %g", q->name, i, y[i]);
            double e = (double)y[i] - x[i];
            se += e * e;
            sx += (double)x[i] * x[i];
        }
        if (blk >= 4)
            sum_rel += se / sx;
    }
    r.rel_rms = sqrt(sum_rel / (n / 256 - 4));

    /* Per-element bounds for the legacy types, from the stored scale d (and
     * min m): rounding error is at most d/2 (q4_0 / q5_0: d at the clipped
     * positive end), plus the f16 rounding of d (half an f16 ulp: u) times
     * the largest quant, plus that of m (um). */
    int bs = q->block_size, bb = q->block_bytes;
    for (int blk = 0; blk < n / bs && bs == 32; blk++) {
        const uint8_t *b = blocks + (size_t)blk * (size_t)bb;
        uint16_t hd = (uint16_t)((b[0] | b[1] << 8) & 0x7fff),
                 hm = (uint16_t)((b[2] | b[3] << 8) & 0x7fff);
        double d = f16_ref_value(hd), u = (f16_ref_value((uint16_t)(hd + 1)) - d) / 2;
        double um = (f16_ref_value((uint16_t)(hm + 1)) - f16_ref_value(hm)) / 2;
        double bound;
        switch (t) {
        case GLESC_DTYPE_Q4_0:
            bound = (d + u) + 8 * u;
            break;
        case GLESC_DTYPE_Q5_0:
            bound = (d + u) + 16 * u;
            break;
        case GLESC_DTYPE_Q4_1:
            bound = (d + u) / 2 + 15 * u + um;
            break;
        case GLESC_DTYPE_Q5_1:
            bound = (d + u) / 2 + 31 * u + um;
            break;
        case GLESC_DTYPE_Q8_0:
        case GLESC_DTYPE_Q8_1:
            bound = (d + u) / 2 + 127 * u;
            break;
        default:
            bound = -1;
            break;
        }
        if (bound < 0)
            break;
        bound += 1e-30; /* all-zero and constant blocks */
        for (int j = 0; j < 32; j++) {
            double e = fabs((double)y[blk * 32 + j] - x[blk * 32 + j]);
            double ratio = e / bound;
            cr_assert(e <= bound * (1 + 1e-6) + 1e-37,
                      "%s block %d element %d: x %g y %g err %g > bound %g (d %g)", q->name, blk, j,
                      x[blk * 32 + j], y[blk * 32 + j], e, bound, d);
            if (ratio > r.worst_ratio)
                r.worst_ratio = ratio;
        }
    }
    free(again);
    free(blocks);
    free(y);
    free(y2);
    return r;
}

/* Relative RMS error bounds on Gaussian data: measured value, then the bound
 * (about 1.25x). The K types use plain round-to-nearest (quantize.c), not
 * llama-quantize's scale search, hence q2_k's large error. */
static const struct {
    glesc_dtype t;
    double max_rel_rms;
} rt_bounds[] = {
    {GLESC_DTYPE_F32, 0.0},     /* 0 */
    {GLESC_DTYPE_F16, 3e-4},    /* 0.00021 */
    {GLESC_DTYPE_BF16, 2.5e-3}, /* 0.00166 */
    {GLESC_DTYPE_Q4_0, 0.11},   /* 0.0859 */
    {GLESC_DTYPE_Q4_1, 0.10},   /* 0.0781 */
    {GLESC_DTYPE_Q5_0, 0.055},  /* 0.0426 */
    {GLESC_DTYPE_Q5_1, 0.05},   /* 0.0378 */
    {GLESC_DTYPE_Q8_0, 0.007},  /* 0.00536 */
    {GLESC_DTYPE_Q8_1, 0.007},  /* 0.00536 */
    {GLESC_DTYPE_Q2_K, 0.40},   /* 0.327 */
    {GLESC_DTYPE_Q3_K, 0.20},   /* 0.155 */
    {GLESC_DTYPE_Q4_K, 0.10},   /* 0.0784 */
    {GLESC_DTYPE_Q5_K, 0.05},   /* 0.0381 */
    {GLESC_DTYPE_Q6_K, 0.025},  /* 0.0188 */
    {GLESC_DTYPE_Q8_K, 0.009},  /* 0.00702 */
    {GLESC_DTYPE_IQ4_NL, 0.10}, /* 0.0775 */
    {GLESC_DTYPE_IQ4_XS, 0.10}, /* 0.0779 */
    {GLESC_DTYPE_MXFP4, 0.15},  /* 0.115 */
};

Test(quant, round_trip_error_bounds)
{
    float *x = malloc(sizeof(float) * RT_N);
    cr_assert(x);
    make_input(x, RT_N);
    for (size_t i = 0; i < sizeof rt_bounds / sizeof rt_bounds[0]; i++) {
        glesc_dtype t = rt_bounds[i].t;
        rt_result r = round_trip(t, x, RT_N);
        printf("round trip %-7s rel rms %.5f  worst err/bound %.3f\n", glesc_dtype_name(t),
               r.rel_rms, r.worst_ratio);
        cr_assert(r.rel_rms <= rt_bounds[i].max_rel_rms, "%s: relative RMS error %g > %g",
                  glesc_dtype_name(t), r.rel_rms, rt_bounds[i].max_rel_rms);
    }
    /* every type with a quantizer is covered above */
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
        const quant_type_info *q = quant_type((glesc_dtype)t);
        if (!q || !q->quantize)
            continue;
        bool found = false;
        for (size_t i = 0; i < sizeof rt_bounds / sizeof rt_bounds[0]; i++)
            found |= (int)rt_bounds[i].t == t;
        cr_assert(found, "%s has a quantizer but no round-trip bound", q->name);
    }
    free(x);
}

/* q8_1's s field is d times the sum of the quants; q8_k's bsums are the sums
 * of each 16 quants (both feed dot products, so they must be right). */
Test(quant, q8_sums)
{
    float x[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)core_rng_normal(&rng);
    uint8_t b1[36 * 8], bk[292];
    cr_assert_eq(quant_quantize(GLESC_DTYPE_Q8_1, x, b1, 256), GLESC_OK);
    for (int blk = 0; blk < 8; blk++) {
        const uint8_t *b = b1 + 36 * blk;
        int sum = 0;
        for (int j = 0; j < 32; j++)
            sum += (int8_t)b[4 + j];
        float d = quant_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
        float s = quant_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
        /* s = sum * d with ggml's unrounded d, stored as f16 */
        cr_assert(fabsf(s - (float)sum * d) <= fabsf((float)sum * d) * 0x1p-10f + 1e-7f,
                  "block %d: s %g, sum %d, d %g", blk, s, sum, d);
    }
    cr_assert_eq(quant_quantize(GLESC_DTYPE_Q8_K, x, bk, 256), GLESC_OK);
    for (int j = 0; j < 16; j++) {
        int sum = 0;
        for (int l = 0; l < 16; l++)
            sum += (int8_t)bk[4 + 16 * j + l];
        cr_assert_eq((int16_t)(bk[260 + 2 * j] | bk[261 + 2 * j] << 8), sum);
    }
}

/* ---- The GPU layout's repack (gpu.c): the specialised little-endian path
 * gives the portable path's bytes for every type, row length (whole groups
 * and a short last one) and source alignment; types kept as in the file
 * come out unchanged ---- */

Test(quant, gpu_repack_matches_the_generic_path)
{
    static const int64_t blocks[] = {1, 3, 8, 9, 15, 16, 64, 67};
    int checked = 0;
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
        if (!quant_gpu_row_bytes((glesc_dtype)t, quant_gpu_block_elems((glesc_dtype)t)))
            continue;
        int qk = quant_gpu_block_elems((glesc_dtype)t);
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
            int64_t ne0 = blocks[b] * qk, rows = 3;
            uint64_t frow = glesc_dtype_row_bytes((glesc_dtype)t, ne0);
            uint64_t grow = quant_gpu_row_bytes((glesc_dtype)t, ne0);
            size_t in_size = (size_t)(frow * (uint64_t)rows) + 1;
            uint8_t *in = malloc(in_size);
            uint32_t *fast = malloc((size_t)(grow * (uint64_t)rows));
            uint32_t *ref = malloc((size_t)(grow * (uint64_t)rows));
            cr_assert(in && fast && ref);
            for (size_t i = 0; i < in_size; i++)
                in[i] = (uint8_t)core_rng_next(&rng);
            /* the file's blocks sit at any address: start one byte in */
            memset(fast, 0xa5, (size_t)(grow * (uint64_t)rows));
            memset(ref, 0x5a, (size_t)(grow * (uint64_t)rows));
            cr_assert_eq(quant_gpu_repack((glesc_dtype)t, in + 1, ne0, rows, fast), GLESC_OK);
            cr_assert_eq(quant_gpu_repack_generic((glesc_dtype)t, in + 1, ne0, rows, ref),
                         GLESC_OK);
            cr_expect_eq(memcmp(fast, ref, (size_t)(grow * (uint64_t)rows)), 0,
                         "%s: %lld blocks a row: the repacks differ",
                         glesc_dtype_name((glesc_dtype)t), (long long)blocks[b]);
            if (quant_gpu_same_as_file((glesc_dtype)t)) {
                cr_assert_eq(grow, frow, "%s", glesc_dtype_name((glesc_dtype)t));
                cr_expect_eq(memcmp(fast, in + 1, (size_t)(frow * (uint64_t)rows)), 0,
                             "%s is kept as in the file, but its repack changes it",
                             glesc_dtype_name((glesc_dtype)t));
            }
            free(in);
            free(fast);
            free(ref);
            checked++;
        }
    }
    /* q4_0 .. q8_1, q2_k .. q6_k, iq4_nl, iq4_xs, mxfp4 */
    cr_expect_geq(checked, 14 * (int)(sizeof blocks / sizeof *blocks));
    cr_expect(quant_gpu_same_as_file(GLESC_DTYPE_Q4_K) && quant_gpu_same_as_file(GLESC_DTYPE_Q5_K));
    cr_expect(
        !quant_gpu_same_as_file(GLESC_DTYPE_Q4_0) && !quant_gpu_same_as_file(GLESC_DTYPE_Q6_K) &&
        !quant_gpu_same_as_file(GLESC_DTYPE_Q3_K) && !quant_gpu_same_as_file(GLESC_DTYPE_F16));
}
