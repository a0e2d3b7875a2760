/*
 * quant_impl.h — private to src/quant/: block field readers and writers
 * (floats and int8; integers use core's little-endian helpers), the
 * packed-scale layouts the K-quants share, and the per-type reference
 * functions that types.c plugs into the table. Other layers use
 * quant.h (the table, quant_dequantize, quant_quantize) instead.
 *
 * Blocks are read byte by byte: GGUF tensor data is only 32-byte aligned as a
 * whole and blocks of 18, 22, 34, 110 ... bytes sit at any address, so no
 * struct is ever overlaid on them (that would be unaligned access on aarch64
 * and UB for UBSan). Every field is little endian in the file.
 */
#ifndef GLESC_QUANT_IMPL_H
#define GLESC_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "quant/quant.h"

/* ---- Field readers and writers (p: any alignment; integers and f32:
 * core_le16, core_le32, core_le_f32 and their core_put_ forms) ---- */

/* A byte as two's-complement int8 (the conversion (int8_t)u is
 * implementation-defined for u > 127; this is not). */
static inline int quant_get_i8(uint8_t u)
{
    return (int)u - ((u & 0x80) ? 256 : 0);
}

static inline float quant_get_f16(const uint8_t *p)
{
    return quant_f16_to_f32(core_le16(p));
}

/* Stores f as f16 and returns the value that was stored (what dequantization
 * will see), so quantizers can requantize against the rounded scale. */
static inline float quant_put_f16(uint8_t *p, float f)
{
    uint16_t h = quant_f32_to_f16(f);
    core_put_le16(p, h);
    return quant_f16_to_f32(h);
}

/* ---- Packed 6-bit scales ----
 * q4_k / q5_k: 8 (scale, min) pairs of 6 bits in 12 bytes (ggml's
 * get_scale_min_k4). For j < 4: scale = s[j] & 63, min = s[j+4] & 63. For
 * j >= 4 the low 4 bits sit in s[j+4] (scale low nibble, min high nibble) and
 * the top 2 bits in bits 6..7 of s[j-4] (scale) and s[j] (min). */
static inline void quant_k4_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The inverse: packs sc[8], mn[8] (each 0..63) into s[12]. */
static inline void quant_k4_pack(uint8_t *s, const int *sc, const int *mn)
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
    }
}

/* q3_k: 16 signed 6-bit scales (stored + 32) in 12 bytes. Low 4 bits of
 * scale j: s[j] low nibble for j < 8, s[j-8] high nibble for j >= 8; top 2
 * bits: bits 2*(j/4) .. 2*(j/4)+1 of s[8 + j%4]. Returns -32..31. */
static inline int quant_q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* The inverse: packs sc[16] (each -32..31) into s[12]. */
static inline void quant_q3k_pack(uint8_t *s, const int *sc)
{
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        int u = sc[j] + 32;
        if (j < 8)
            s[j] |= (uint8_t)(u & 0xf);
        else
            s[j - 8] |= (uint8_t)((u & 0xf) << 4);
        s[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
    }
}

/* ggml's kvalues_iq4nl and kvalues_mxfp4 live in quant.h (the GPU side
 * needs them too). */

/* ---- Reference functions (contracts: quant_type_info in quant.h) ---- */
void quant_dequant_f32(const void *src, float *dst, int64_t n);
void quant_dequant_f16(const void *src, float *dst, int64_t n);
void quant_dequant_bf16(const void *src, float *dst, int64_t n);
void quant_dequant_q4_0(const void *src, float *dst, int64_t n);
void quant_dequant_q4_1(const void *src, float *dst, int64_t n);
void quant_dequant_q5_0(const void *src, float *dst, int64_t n);
void quant_dequant_q5_1(const void *src, float *dst, int64_t n);
void quant_dequant_q8_0(const void *src, float *dst, int64_t n);
void quant_dequant_q8_1(const void *src, float *dst, int64_t n);
void quant_dequant_q2_k(const void *src, float *dst, int64_t n);
void quant_dequant_q3_k(const void *src, float *dst, int64_t n);
void quant_dequant_q4_k(const void *src, float *dst, int64_t n);
void quant_dequant_q5_k(const void *src, float *dst, int64_t n);
void quant_dequant_q6_k(const void *src, float *dst, int64_t n);
void quant_dequant_q8_k(const void *src, float *dst, int64_t n);
void quant_dequant_iq4_nl(const void *src, float *dst, int64_t n);
void quant_dequant_iq4_xs(const void *src, float *dst, int64_t n);
void quant_dequant_mxfp4(const void *src, float *dst, int64_t n);

void quant_quantize_f32(const float *src, void *dst, int64_t n);
void quant_quantize_f16(const float *src, void *dst, int64_t n);
void quant_quantize_bf16(const float *src, void *dst, int64_t n);
void quant_quantize_q4_0(const float *src, void *dst, int64_t n);
void quant_quantize_q4_1(const float *src, void *dst, int64_t n);
void quant_quantize_q5_0(const float *src, void *dst, int64_t n);
void quant_quantize_q5_1(const float *src, void *dst, int64_t n);
void quant_quantize_q8_0(const float *src, void *dst, int64_t n);
void quant_quantize_q8_1(const float *src, void *dst, int64_t n);
void quant_quantize_q2_k(const float *src, void *dst, int64_t n);
void quant_quantize_q3_k(const float *src, void *dst, int64_t n);
void quant_quantize_q4_k(const float *src, void *dst, int64_t n);
void quant_quantize_q5_k(const float *src, void *dst, int64_t n);
void quant_quantize_q6_k(const float *src, void *dst, int64_t n);
void quant_quantize_q8_k(const float *src, void *dst, int64_t n);
void quant_quantize_iq4_nl(const float *src, void *dst, int64_t n);
void quant_quantize_iq4_xs(const float *src, void *dst, int64_t n);
void quant_quantize_mxfp4(const float *src, void *dst, int64_t n);

#endif /* GLESC_QUANT_IMPL_H */
