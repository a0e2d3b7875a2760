/*
 * quant.h — the ggml block formats: one table row per type (name, block size,
 * bytes per block) and, per type, the CPU reference dequantization. The GPU
 * side (GLSL dequant snippets in glsl/quant/, repacking on upload) builds on
 * the same table.
 */
#ifndef GLESC_QUANT_H
#define GLESC_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "glesc.h"

typedef struct quant_type_info {
    const char *name;      /* "q4_k" */
    int block_size;        /* elements per block */
    int block_bytes;       /* bytes per block */
    bool is_quantized;     /* block_size > 1 or a packed format */
    /* CPU reference: dequantize n elements (a multiple of block_size) from
     * src (n / block_size blocks, any alignment) into dst. NULL where glesc
     * has no reference for the type yet. */
    void (*dequant)(const void *src, float *dst, int64_t n);
} quant_type_info;

/* The row for t, or NULL when t is not a known type id. */
const quant_type_info *quant_type(glesc_dtype t);

/* IEEE half <-> float, exact (round-to-nearest-even for float -> half). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round-to-nearest-even, NaN kept quiet */

#endif /* GLESC_QUANT_H */
