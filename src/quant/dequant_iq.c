/*
 * dequant_iq.c — CPU reference dequantization of the non-linear 4-bit types:
 * iq4_nl, iq4_xs (a 16-entry code book instead of q - 8) and mxfp4 (E2M1
 * values with a power-of-two E8M0 scale). Bit-identical to ggml's
 * dequantize_row_iq4_nl / _iq4_xs / _mxfp4. The grid-based IQ1/IQ2/IQ3 types
 * are not here (their tables are large; see the type table for what exists).
 *
 * Layouts (little endian):
 *   iq4_nl (18, 32 elements)  [0] f16 d  [2] qs[16]        x = d * T[q]
 *   iq4_xs (136, 256)  [0] f16 d  [2] u16 scales_h  [4] scales_l[4]  [8] qs[128]
 *          sub-block ib (32 elements) has the 6-bit scale
 *          ls = (scales_l[ib/2] >> 4*(ib%2)) & 15 | ((scales_h >> 2*ib) & 3) << 4
 *          and x = d * (ls - 32) * T[q]
 *   mxfp4 (17, 32)  [0] u8 e (E8M0)  [1] qs[16]        x = M[q] * 2^(e - 128)
 * T = quant_iq4nl_values, M = quant_mxfp4_values (E2M1 doubled, hence the
 * halved scale). Nibble order as in q4_0: within each 32-element group, byte
 * j holds element j (low nibble) and element j + 16 (high nibble).
 */
#include <math.h>

#include "quant/quant_impl.h"

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void quant_dequant_iq4_nl(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 18, dst += 32) {
        const float d = quant_get_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)quant_iq4nl_values[qs[j] & 0xf];
            dst[j + 16] = d * (float)quant_iq4nl_values[qs[j] >> 4];
        }
    }
}

void quant_dequant_iq4_xs(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 136) {
        const float d = quant_get_f16(b);
        const unsigned scales_h = core_le16(b + 2);
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        for (int ib = 0; ib < 8; ib++, qs += 16, dst += 32) {
            const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                           (int)(((scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)quant_iq4nl_values[qs[j] & 0xf];
                dst[j + 16] = dl * (float)quant_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* 2^(e - 128) exactly, including e = 0 and 1 (float subnormals). */
static float mxfp4_scale(uint8_t e)
{
    return ldexpf(1.0f, (int)e - 128);
}

void quant_dequant_mxfp4(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 17, dst += 32) {
        const float d = mxfp4_scale(b[0]);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)quant_mxfp4_values[qs[j] & 0xf] * d;
            dst[j + 16] = (float)quant_mxfp4_values[qs[j] >> 4] * d;
        }
    }
}
