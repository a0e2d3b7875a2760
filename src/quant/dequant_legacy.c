/*
 * dequant_legacy.c — CPU reference dequantization of the plain types (f32,
 * f16, bf16) and ggml's legacy 32-element blocks (q4_0 .. q8_1). These are
 * the ground truth the GPU dequant snippets are tested against, so they do
 * the arithmetic exactly as ggml's dequantize_row_* do (the same float
 * operations in the same order): results are bit-identical to ggml's as long
 * as neither side contracts a multiply-add into an FMA (GCC does not in ISO C
 * mode, -std=c11, which meson.build sets; clang does by default where the
 * target has FMA, e.g. aarch64: add -ffp-contract=off there when bit
 * equality with ggml matters).
 *
 * Legacy block layouts (little endian, no padding):
 *   q4_0  [0] f16 d  [2]  16 B qs                        x = (q - 8) * d
 *   q4_1  [0] f16 d  [2]  f16 m  [4] 16 B qs             x = q * d + m
 *   q5_0  [0] f16 d  [2]  u32 qh [6] 16 B qs             x = (q - 16) * d
 *   q5_1  [0] f16 d  [2]  f16 m  [4] u32 qh [8] 16 B qs  x = q * d + m
 *   q8_0  [0] f16 d  [2]  32 x i8 qs                     x = q * d
 *   q8_1  [0] f16 d  [2]  f16 s (= d * sum q) [4] 32 x i8 qs
 * Element order of the nibble types: byte j holds element j in its low
 * nibble and element j + 16 in its high nibble; for q5_* bit j of qh is the
 * fifth bit of element j (bits 16..31: elements 16..31).
 */
#include "quant/quant_impl.h"

void quant_dequant_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = core_le_f32(p + 4 * i);
}

void quant_dequant_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_get_f16(p + 2 * i);
}

void quant_dequant_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_bf16_to_f32(core_le16(p + 2 * i));
}

void quant_dequant_q4_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 18, dst += 32) {
        const float d = quant_get_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((qs[j] & 0xf) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

void quant_dequant_q4_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 20, dst += 32) {
        const float d = quant_get_f16(b), m = quant_get_f16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(qs[j] & 0xf) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

void quant_dequant_q5_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 22, dst += 32) {
        const float d = quant_get_f16(b);
        const uint32_t qh = core_le32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(q0 - 16) * d;
            dst[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

void quant_dequant_q5_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 24, dst += 32) {
        const float d = quant_get_f16(b), m = quant_get_f16(b + 2);
        const uint32_t qh = core_le32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)q0 * d + m;
            dst[j + 16] = (float)q1 * d + m;
        }
    }
}

void quant_dequant_q8_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 34, dst += 32) {
        const float d = quant_get_f16(b);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)quant_get_i8(b[2 + j]) * d;
    }
}

/* The s field (d times the sum of the quants) only serves dot products. */
void quant_dequant_q8_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 36, dst += 32) {
        const float d = quant_get_f16(b);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)quant_get_i8(b[4 + j]) * d;
    }
}
