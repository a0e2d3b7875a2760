/*
 * types.c — the table of ggml block formats (sizes from ggml's published
 * block layouts, the CPU reference functions of dequant_*.c and quantize.c),
 * the checked entry points quant_dequantize / quant_quantize, and the
 * f16/bf16 conversions everything else uses.
 */
#include <string.h>

#include "core/core.h"
#include "quant/quant_impl.h"

/* Rows with a CPU reference name their functions; the others have none. */
#define ROW(id, nm, bs, bb, q) [GLESC_DTYPE_##id] = {nm, bs, bb, q, NULL, NULL}
#define REF(id, nm, bs, bb, q, fn)                                                                 \
    [GLESC_DTYPE_##id] = {nm, bs, bb, q, quant_dequant_##fn, quant_quantize_##fn}

/* Sizes in bytes, with the layout that gives them:
 * q4_0 = f16 d + 16 B nibbles; q4_1 = d, m + 16; q5_0 = d + u32 qh + 16;
 * q5_1 = d, m + qh + 16; q8_0 = d + 32; q8_1 = d, s + 32;
 * q2_k = 16 scales + 64 qs + d, dmin; q3_k = 32 hmask + 64 qs + 12 scales + d;
 * q4_k = d, dmin + 12 scales + 128 qs; q5_k = q4_k + 32 qh;
 * q6_k = 128 ql + 64 qh + 16 scales + d; q8_k = f32 d + 256 qs + 16 i16 bsums;
 * iq4_nl = d + 16; iq4_xs = d + u16 scales_h + 4 scales_l + 128 qs;
 * mxfp4 = u8 E8M0 exponent + 16. */
static const quant_type_info types[GLESC_DTYPE_COUNT_] = {
    REF(F32, "f32", 1, 4, false, f32),
    REF(F16, "f16", 1, 2, false, f16),
    REF(Q4_0, "q4_0", 32, 18, true, q4_0),
    REF(Q4_1, "q4_1", 32, 20, true, q4_1),
    REF(Q5_0, "q5_0", 32, 22, true, q5_0),
    REF(Q5_1, "q5_1", 32, 24, true, q5_1),
    REF(Q8_0, "q8_0", 32, 34, true, q8_0),
    REF(Q8_1, "q8_1", 32, 36, true, q8_1),
    REF(Q2_K, "q2_k", 256, 84, true, q2_k),
    REF(Q3_K, "q3_k", 256, 110, true, q3_k),
    REF(Q4_K, "q4_k", 256, 144, true, q4_k),
    REF(Q5_K, "q5_k", 256, 176, true, q5_k),
    REF(Q6_K, "q6_k", 256, 210, true, q6_k),
    REF(Q8_K, "q8_k", 256, 292, true, q8_k),
    ROW(IQ2_XXS, "iq2_xxs", 256, 66, true),
    ROW(IQ2_XS, "iq2_xs", 256, 74, true),
    ROW(IQ3_XXS, "iq3_xxs", 256, 98, true),
    ROW(IQ1_S, "iq1_s", 256, 50, true),
    REF(IQ4_NL, "iq4_nl", 32, 18, true, iq4_nl),
    ROW(IQ3_S, "iq3_s", 256, 110, true),
    ROW(IQ2_S, "iq2_s", 256, 82, true),
    REF(IQ4_XS, "iq4_xs", 256, 136, true, iq4_xs),
    ROW(I8, "i8", 1, 1, false),
    ROW(I16, "i16", 1, 2, false),
    ROW(I32, "i32", 1, 4, false),
    ROW(I64, "i64", 1, 8, false),
    ROW(F64, "f64", 1, 8, false),
    ROW(IQ1_M, "iq1_m", 256, 56, true),
    REF(BF16, "bf16", 1, 2, false, bf16),
    ROW(TQ1_0, "tq1_0", 256, 54, true),
    ROW(TQ2_0, "tq2_0", 256, 66, true),
    REF(MXFP4, "mxfp4", 32, 17, true, mxfp4),
};

const quant_type_info *quant_type(glesc_dtype t)
{
    if ((unsigned)t >= GLESC_DTYPE_COUNT_ || !types[t].name)
        return NULL;
    return &types[t];
}

/* Shared argument checks of the two entry points; has_fn: the row has the
 * function asked for. */
static glesc_status check_call(glesc_dtype t, int64_t n, bool has_fn, const char *what)
{
    const quant_type_info *q = quant_type(t);
    if (!q)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "%s: unknown type id %d", what,
                            (int)t);
    if (n < 0 || n % q->block_size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s %s: %lld elements is not a whole number of %d-element blocks", what,
                            q->name, (long long)n, q->block_size);
    if (!has_fn)
        return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED, "%s %s: no CPU reference for this type",
                            what, q->name);
    return GLESC_OK;
}

glesc_status quant_dequantize(glesc_dtype t, const void *src, float *dst, int64_t n)
{
    const quant_type_info *q = quant_type(t);
    glesc_status st = check_call(t, n, q && q->dequant, "dequantize");
    if (st == GLESC_OK)
        q->dequant(src, dst, n);
    return st;
}

glesc_status quant_quantize(glesc_dtype t, const float *src, void *dst, int64_t n)
{
    const quant_type_info *q = quant_type(t);
    glesc_status st = check_call(t, n, q && q->quantize, "quantize");
    if (st == GLESC_OK)
        q->quantize(src, dst, n);
    return st;
}

GLESC_API const char *glesc_dtype_name(glesc_dtype t)
{
    const quant_type_info *q = quant_type(t);
    return q ? q->name : NULL;
}

GLESC_API int glesc_dtype_block_size(glesc_dtype t)
{
    const quant_type_info *q = quant_type(t);
    return q ? q->block_size : 0;
}

GLESC_API int glesc_dtype_block_bytes(glesc_dtype t)
{
    const quant_type_info *q = quant_type(t);
    return q ? q->block_bytes : 0;
}

GLESC_API uint64_t glesc_dtype_row_bytes(glesc_dtype t, int64_t n)
{
    const quant_type_info *q = quant_type(t);
    if (!q || n < 0 || n % q->block_size)
        return 0;
    uint64_t blocks = (uint64_t)n / (uint64_t)q->block_size, bytes;
    if (__builtin_mul_overflow(blocks, (uint64_t)q->block_bytes, &bytes))
        return 0;
    return bytes;
}

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t quant_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10)) & 0xffff;
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float quant_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
