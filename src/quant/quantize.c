/*
 * quantize.c — CPU reference quantizers. They make test data for the GPU
 * dequant and matmul kernels and the weights of the benchmark's synthetic
 * models; they are not meant to compete with llama-quantize.
 *
 * - f32, f16, bf16: conversion, round-to-nearest-even.
 * - q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q8_k: ggml's reference quantizers
 *   (quantize_row_*_ref) formula for formula, so a tensor quantized here has
 *   the bytes llama-quantize writes without an importance matrix.
 * - q2_k .. q6_k: plain round-to-nearest, NOT ggml's searched scales
 *   (make_qkx2_quants etc.). Each sub-block gets the scale (and min) that maps
 *   its range onto the quant range; the sub-block scales are rounded to their
 *   6-bit (4-bit for q2_k) codes against the f16 super-block scale, and the
 *   elements are then rounded against the scales as stored. The blocks are
 *   valid and decode with any ggml-compatible reader; the error is somewhat
 *   larger than llama-quantize's (see test_quant.c for the measured bounds).
 * - iq4_nl, iq4_xs: the scale that maps the largest magnitude onto the code
 *   book's end (-127), nearest code, then one least-squares refit of the
 *   scale and a second nearest-code pass (each step can only lower the
 *   error). iq4_xs then rounds the sub-block scales to 6 bits like q3_k.
 * - mxfp4: ggml's reference (exponent from the largest magnitude, nearest
 *   E2M1 value).
 * Inputs must be finite. Everything is written byte by byte (little endian),
 * so dst may have any alignment.
 */
#include <math.h>

#include "quant/quant_impl.h"

/* x rounded half-to-even and clamped to [lo, hi]; NaN gives lo. Clamping in
 * float first keeps the conversion defined for any input. */
static int qround(float x, int lo, int hi)
{
    if (!(x >= (float)lo))
        return lo;
    if (x > (float)hi)
        return hi;
    return (int)rintf(x);
}

/* ggml's (int8_t)(v) truncation for v in [0, hi + 1], clamped to hi. */
static int qtrunc(float v, int hi)
{
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

/* The element of largest magnitude (the first one on ties), with its sign. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *lo, float *hi)
{
    *lo = x[0];
    *hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < *lo)
            *lo = x[j];
        if (x[j] > *hi)
            *hi = x[j];
    }
}

/* ---- Plain types ---- */

void quant_quantize_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        core_put_le_f32(p + 4 * i, src[i]);
}

void quant_quantize_f16(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        core_put_le16(p + 2 * i, quant_f32_to_f16(src[i]));
}

void quant_quantize_bf16(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        core_put_le16(p + 2 * i, quant_f32_to_bf16(src[i]));
}

/* ---- Legacy blocks (ggml's reference formulas) ---- */

void quant_quantize_q4_0(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 18, src += 32) {
        const float d = signed_absmax(src, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_put_f16(b, d);
        for (int j = 0; j < 16; j++) {
            int q0 = qtrunc(src[j] * id + 8.5f, 15);
            int q1 = qtrunc(src[j + 16] * id + 8.5f, 15);
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quant_quantize_q4_1(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 20, src += 32) {
        float lo, hi;
        min_max(src, 32, &lo, &hi);
        const float d = (hi - lo) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_put_f16(b, d);
        quant_put_f16(b + 2, lo);
        for (int j = 0; j < 16; j++) {
            int q0 = qtrunc((src[j] - lo) * id + 0.5f, 15);
            int q1 = qtrunc((src[j + 16] - lo) * id + 0.5f, 15);
            b[4 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quant_quantize_q5_0(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 22, src += 32) {
        const float d = signed_absmax(src, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        quant_put_f16(b, d);
        for (int j = 0; j < 16; j++) {
            int q0 = qtrunc(src[j] * id + 16.5f, 31);
            int q1 = qtrunc(src[j + 16] * id + 16.5f, 31);
            b[6 + j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        core_put_le32(b + 2, qh);
    }
}

void quant_quantize_q5_1(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 24, src += 32) {
        float lo, hi;
        min_max(src, 32, &lo, &hi);
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        quant_put_f16(b, d);
        quant_put_f16(b + 2, lo);
        for (int j = 0; j < 16; j++) {
            int q0 = qtrunc((src[j] - lo) * id + 0.5f, 31);
            int q1 = qtrunc((src[j + 16] - lo) * id + 0.5f, 31);
            b[8 + j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        core_put_le32(b + 4, qh);
    }
}

/* Shared by q8_0 and q8_1: d = max|x| / 127, q = round-half-away(x / d)
 * (ggml uses roundf here). Returns d; writes the quants to qs. */
static float quantize_8bit(const float *x, uint8_t *qs, int *sum)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *sum = 0;
    for (int j = 0; j < 32; j++) {
        int q = (int)roundf(fminf(fmaxf(x[j] * id, -127.0f), 127.0f));
        qs[j] = (uint8_t)(q & 0xff);
        *sum += q;
    }
    return d;
}

void quant_quantize_q8_0(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 34, src += 32) {
        int sum;
        quant_put_f16(b, quantize_8bit(src, b + 2, &sum));
    }
}

void quant_quantize_q8_1(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 36, src += 32) {
        int sum;
        const float d = quantize_8bit(src, b + 4, &sum);
        quant_put_f16(b, d);
        quant_put_f16(b + 2, (float)sum * d);
    }
}

/* ---- K-quants: round-to-nearest (see the top of the file) ---- */

/* Asymmetric sub-block: x ~ s * q - m with q in 0..nmax, m >= 0 (ggml's mins
 * are subtracted and never negative, so the range always includes 0). */
static void range_scale_min(const float *x, int n, int nmax, float *s, float *m)
{
    float lo, hi;
    min_max(x, n, &lo, &hi);
    if (lo > 0.0f)
        lo = 0.0f;
    *s = (hi - lo) / (float)nmax;
    *m = -lo;
}

void quant_quantize_q2_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, b += 84, src += 256) {
        float s[16], m[16], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 16; j++) {
            range_scale_min(src + 16 * j, 16, 3, &s[j], &m[j]);
            smax = fmaxf(smax, s[j]);
            mmax = fmaxf(mmax, m[j]);
        }
        const float d = quant_put_f16(b + 80, smax / 15.0f);
        const float dmin = quant_put_f16(b + 82, mmax / 15.0f);
        memset(b + 16, 0, 64);
        for (int j = 0; j < 16; j++) {
            const int sc = d > 0.0f ? qround(s[j] / d, 0, 15) : 0;
            const int mn = dmin > 0.0f ? qround(m[j] / dmin, 0, 15) : 0;
            b[j] = (uint8_t)(sc | (mn << 4));
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l; /* element 128h + 32r + k -> byte 32h + k, bits 2r */
                const int q = dl > 0.0f ? qround((src[e] + ml) / dl, 0, 3) : 0;
                b[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
            }
        }
    }
}

void quant_quantize_q3_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, b += 110, src += 256) {
        float s[16], smax = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = signed_absmax(src + 16 * j, 16) / -4.0f; /* the extreme maps to -4 */
            if (fabsf(s[j]) > fabsf(smax))
                smax = s[j];
        }
        const float d = quant_put_f16(b + 108, smax / -32.0f);
        int sc[16];
        for (int j = 0; j < 16; j++)
            sc[j] = d != 0.0f ? qround(s[j] / d, -32, 31) : 0;
        quant_q3k_pack(b + 96, sc);
        memset(b, 0, 96);
        for (int e = 0; e < 256; e++) {
            const float dl = d * (float)sc[e / 16];
            const int q = (dl != 0.0f ? qround(src[e] / dl, -4, 3) : 0) + 4; /* 0..7 */
            /* element 128h + 32r + l: low bits in byte 32h + l (bits 2r),
             * third bit in hmask[e % 32] bit e / 32 (set = no -4). */
            b[32 + 32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
            if (q & 4)
                b[e % 32] |= (uint8_t)(1u << (e / 32));
        }
    }
}

/* q4_k and q5_k: 8 sub-blocks of 32, (scale, min) in 6 bits each. Writes
 * d, dmin and the scales; returns the quants (0..nmax) in L. */
static void quantize_k4_scales(const float *x, uint8_t *b, int nmax, uint8_t *L)
{
    float s[8], m[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        range_scale_min(x + 32 * j, 32, nmax, &s[j], &m[j]);
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, m[j]);
    }
    const float d = quant_put_f16(b, smax / 63.0f);
    const float dmin = quant_put_f16(b + 2, mmax / 63.0f);
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? qround(s[j] / d, 0, 63) : 0;
        mn[j] = dmin > 0.0f ? qround(m[j] / dmin, 0, 63) : 0;
        const float dl = d * (float)sc[j], ml = dmin * (float)mn[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)(dl > 0.0f ? qround((x[32 * j + l] + ml) / dl, 0, nmax) : 0);
    }
    quant_k4_pack(b + 4, sc, mn);
}

void quant_quantize_q4_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, b += 144, src += 256) {
        quantize_k4_scales(src, b, 15, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[16 + 32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void quant_quantize_q5_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, b += 176, src += 256) {
        quantize_k4_scales(src, b, 31, L);
        memset(b + 16, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int q0 = L[64 * c + l], q1 = L[64 * c + 32 + l];
                b[48 + 32 * c + l] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
                b[16 + l] |= (uint8_t)(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
            }
        }
    }
}

void quant_quantize_q6_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, b += 210, src += 256) {
        float s[16], smax = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = signed_absmax(src + 16 * j, 16) / -32.0f; /* the extreme maps to -32 */
            if (fabsf(s[j]) > fabsf(smax))
                smax = s[j];
        }
        const float d = quant_put_f16(b + 208, smax / -128.0f);
        int sc[16];
        for (int j = 0; j < 16; j++) {
            sc[j] = d != 0.0f ? qround(s[j] / d, -128, 127) : 0;
            b[192 + j] = (uint8_t)(sc[j] & 0xff);
        }
        memset(b, 0, 192);
        for (int e = 0; e < 256; e++) {
            const float dl = d * (float)sc[e / 16];
            const int q = (dl != 0.0f ? qround(src[e] / dl, -32, 31) : 0) + 32; /* 0..63 */
            const int h = e / 128, r = (e % 128) / 32, l = e % 32;
            b[64 * h + 32 * (r & 1) + l] |= (uint8_t)((q & 0xf) << (r < 2 ? 0 : 4));
            b[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * r));
        }
    }
}

/* ggml's quantize_row_q8_K_ref: the scale comes from the signed extreme
 * (d = max / -127 ... stored as 1 / iscale, so d is negative when the
 * extreme is positive), quants clamped to 127, bsums = sums of 16. */
void quant_quantize_q8_k(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 256; i++, b += 292, src += 256) {
        const float max = signed_absmax(src, 256);
        int q[256] = {0};
        float d = 0.0f;
        if (max != 0.0f) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++)
                q[j] = qround(iscale * src[j], -128, 127);
            d = 1.0f / iscale;
        }
        core_put_le_f32(b, d);
        for (int j = 0; j < 256; j++)
            b[4 + j] = (uint8_t)(q[j] & 0xff);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += q[16 * j + l];
            core_put_le16(b + 260 + 2 * j, (uint16_t)(sum & 0xffff));
        }
    }
}

/* ---- Non-linear code books ---- */

static int nearest_code(const int8_t *table, float v)
{
    int best = 0;
    float err = fabsf(v - (float)table[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - (float)table[k]);
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

/* One group of 32 against the iq4 code book: returns the fitted scale (0 for
 * an all-zero group) and the codes in idx. */
static float iq4_fit(const float *x, uint8_t *idx)
{
    const float max = signed_absmax(x, 32);
    if (max == 0.0f) {
        memset(idx, 8, 32); /* any code: the scale is 0 */
        return 0.0f;
    }
    const float d0 = max / -127.0f;
    double sxq = 0.0, sqq = 0.0;
    for (int j = 0; j < 32; j++) {
        idx[j] = (uint8_t)nearest_code(quant_iq4nl_values, x[j] / d0);
        sxq += (double)x[j] * quant_iq4nl_values[idx[j]];
        sqq += (double)quant_iq4nl_values[idx[j]] * quant_iq4nl_values[idx[j]];
    }
    return (float)(sxq / sqq); /* sqq > 0: the code book has no 0 */
}

void quant_quantize_iq4_nl(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t idx[32];
    for (int64_t i = 0; i < n / 32; i++, b += 18, src += 32) {
        const float d = quant_put_f16(b, iq4_fit(src, idx));
        if (d != 0.0f)
            for (int j = 0; j < 32; j++)
                idx[j] = (uint8_t)nearest_code(quant_iq4nl_values, src[j] / d);
        for (int j = 0; j < 16; j++)
            b[2 + j] = (uint8_t)(idx[j] | (idx[j + 16] << 4));
    }
}

void quant_quantize_iq4_xs(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t idx[256];
    for (int64_t i = 0; i < n / 256; i++, b += 136, src += 256) {
        float s[8], smax = 0.0f;
        for (int ib = 0; ib < 8; ib++) {
            s[ib] = iq4_fit(src + 32 * ib, idx + 32 * ib);
            if (fabsf(s[ib]) > fabsf(smax))
                smax = s[ib];
        }
        const float d = quant_put_f16(b, smax / -32.0f);
        unsigned scales_h = 0;
        memset(b + 4, 0, 4);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (d != 0.0f ? qround(s[ib] / d, -32, 31) : 0) + 32; /* 0..63 */
            b[4 + ib / 2] |= (uint8_t)((ls & 0xf) << (4 * (ib % 2)));
            scales_h |= (unsigned)(ls >> 4) << (2 * ib);
            const float dl = d * (float)(ls - 32);
            const float *x = src + 32 * ib;
            uint8_t *q = idx + 32 * ib;
            if (dl != 0.0f)
                for (int j = 0; j < 32; j++)
                    q[j] = (uint8_t)nearest_code(quant_iq4nl_values, x[j] / dl);
            for (int j = 0; j < 16; j++)
                b[8 + 16 * ib + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
        core_put_le16(b + 2, (uint16_t)scales_h);
    }
}

void quant_quantize_mxfp4(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, b += 17, src += 32) {
        const float amax = fabsf(signed_absmax(src, 32));
        int e = 0;
        if (amax > 0.0f) {
            e = (int)floorf(log2f(amax)) - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        b[0] = (uint8_t)e;
        const float d = ldexpf(1.0f, e - 128);
        for (int j = 0; j < 16; j++) {
            int q0 = nearest_code(quant_mxfp4_values, src[j] / d);
            int q1 = nearest_code(quant_mxfp4_values, src[j + 16] / d);
            b[1 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
