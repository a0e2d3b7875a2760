/*
 * dequant_k.c — CPU reference dequantization of ggml's K-quants: super-blocks
 * of 256 elements with per-sub-block scales (and mins) that are themselves
 * quantized against one or two f16 super-block scales. The arithmetic follows
 * ggml's dequantize_row_q*_K operation for operation (bit-identical results;
 * see dequant_legacy.c on FMA contraction).
 *
 * Layouts (byte offsets within one block, little endian):
 *   q2_k (84)  [0] scales[16]: low nibble scale, high nibble min, per 16 elements
 *              [16] qs[64]: 2-bit quants  [80] f16 d  [82] f16 dmin
 *              x = d * (sc & 15) * q - dmin * (sc >> 4)
 *   q3_k (110) [0] hmask[32]: third bit  [32] qs[64]: low 2 bits
 *              [96] scales[12]: 16 six-bit signed scales  [108] f16 d
 *              x = d * scale * (q - 4), q = low 2 bits | third bit << 2
 *   q4_k (144) [0] f16 d  [2] f16 dmin  [4] scales[12]: 8 six-bit (scale, min)
 *              [16] qs[128]: nibbles.  x = d * sc * q - dmin * m, 32 per sub-block
 *   q5_k (176) as q4_k, then [16] qh[32]: fifth bit  [48] qs[128]
 *   q6_k (210) [0] ql[128]: low 4 bits  [128] qh[64]: top 2 bits
 *              [192] int8 scales[16]  [208] f16 d.  x = d * sc * (q - 32)
 *   q8_k (292) [0] f32 d  [4] int8 qs[256]  [260] int16 bsums[16].  x = d * q
 *
 * Element order. q2_k, q3_k and q6_k walk each 128-element half as four
 * 32-element runs; run r takes bits 2r..2r+1 of the half's 32 qs bytes (q2_k,
 * q3_k) and element l of a run reads byte l. q3_k's hmask byte l holds the
 * third bit of elements l, l+32, l+64, ... in bits 0, 1, 2, ... (bit k =
 * element 32k + l over the whole block). q6_k: element 128h + 32r + l has its
 * low nibble in ql[64h + 32(r & 1) + l] (low nibble for r < 2, high for
 * r >= 2) and its top two bits in qh[32h + l] bits 2r..2r+1. q4_k and q5_k
 * walk 64-element chunks c: byte qs[32c + l] holds element 64c + l (low
 * nibble) and 64c + 32 + l (high nibble); q5_k's qh[l] bit 2c (bit 2c+1) is
 * the fifth bit of element 64c + l (64c + 32 + l). Scales go by element / 16
 * (q2_k, q3_k, q6_k) or element / 32 (q4_k, q5_k).
 */
#include "quant/quant_impl.h"

void quant_dequant_q2_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 84) {
        const uint8_t *scales = b, *qs = b + 16;
        const float d = quant_get_f16(b + 80), dmin = quant_get_f16(b + 82);
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = qs + 32 * half;
            for (int r = 0; r < 4; r++) {
                for (int g = 0; g < 2; g++) { /* two 16-element sub-blocks per run */
                    const uint8_t sc = scales[8 * half + 2 * r + g];
                    const float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[16 * g + l] >> (2 * r)) & 3) - ml;
                }
            }
        }
    }
}

void quant_dequant_q3_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 110) {
        const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        const float d = quant_get_f16(b + 108);
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = qs + 32 * half;
            for (int r = 0; r < 4; r++) {
                const int bit = 4 * half + r; /* hmask bit of this run */
                for (int g = 0; g < 2; g++) {
                    const float dl = d * (float)quant_q3k_scale(scales, 8 * half + 2 * r + g);
                    for (int l = 16 * g; l < 16 * g + 16; l++) {
                        int v = (q[l] >> (2 * r)) & 3;
                        if (!((hmask[l] >> bit) & 1))
                            v -= 4;
                        *dst++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

void quant_dequant_q4_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 144) {
        const float d = quant_get_f16(b), dmin = quant_get_f16(b + 2);
        const uint8_t *scales = b + 4, *qs = b + 16;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = qs + 32 * c;
            int sc, mn;
            quant_k4_scale_min(scales, 2 * c, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            quant_k4_scale_min(scales, 2 * c + 1, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void quant_dequant_q5_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 176) {
        const float d = quant_get_f16(b), dmin = quant_get_f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = qs + 32 * c;
            int sc, mn;
            quant_k4_scale_min(scales, 2 * c, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            quant_k4_scale_min(scales, 2 * c + 1, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((q[l] & 0xf) | (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
        }
    }
}

void quant_dequant_q6_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 210, dst += 256) {
        const uint8_t *ql = b, *qh = b + 128, *scales = b + 192;
        const float d = quant_get_f16(b + 208);
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < 4; r++) {
                for (int l = 0; l < 32; l++) {
                    const int e = 128 * h + 32 * r + l;
                    const uint8_t lo = ql[64 * h + 32 * (r & 1) + l];
                    const int q =
                        (r < 2 ? lo & 0xf : lo >> 4) | (((qh[32 * h + l] >> (2 * r)) & 3) << 4);
                    dst[e] = d * (float)quant_get_i8(scales[e / 16]) * (float)(q - 32);
                }
            }
        }
    }
}

/* The bsums only serve dot products. */
void quant_dequant_q8_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 292, dst += 256) {
        const float d = core_le_f32(b);
        for (int j = 0; j < 256; j++)
            dst[j] = d * (float)quant_get_i8(b[4 + j]);
    }
}
