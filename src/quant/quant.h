/*
 * quant.h — the ggml block formats: one table row per type (name, block size,
 * bytes per block) and, per type, the CPU reference dequantization and
 * quantization (dequant_*.c, quantize.c). The GPU
 * side (GLSL dequant snippets in glsl/quant/, repacking on upload) builds on
 * the same table.
 */
#ifndef GLESC_QUANT_H
#define GLESC_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "glesc.h"

typedef struct quant_type_info {
    const char *name;  /* "q4_k" */
    int block_size;    /* elements per block */
    int block_bytes;   /* bytes per block */
    bool is_quantized; /* block_size > 1 or a packed format */
    /* CPU reference: dequantize n elements (a multiple of block_size) from
     * src (n / block_size blocks, any alignment) into dst. NULL where glesc
     * has no reference for the type yet. */
    void (*dequant)(const void *src, float *dst, int64_t n);
    /* CPU reference quantization: n floats (a multiple of block_size) from
     * src into n / block_size blocks at dst (any alignment; every byte of
     * them is written). NULL where glesc has no quantizer for the type. The
     * legacy types (q4_0 .. q8_1), q8_k and mxfp4 follow ggml's reference
     * quantizers; the other K types and iq4_* use plain round-to-nearest
     * (see quantize.c): valid blocks, somewhat larger error than
     * llama-quantize's searched scales. */
    void (*quantize)(const float *src, void *dst, int64_t n);
} quant_type_info;

/* The row for t, or NULL when t is not a known type id. */
const quant_type_info *quant_type(glesc_dtype t);

/* IEEE half <-> float, exact (round-to-nearest-even for float -> half). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round-to-nearest-even, NaN kept quiet */

/* Dequantizes n elements of type t from src (n / block_size blocks, any
 * alignment, little endian as in GGUF) into dst (n floats, caller-owned).
 * GLESC_ERROR_INVALID_ARGUMENT when n < 0 or not a multiple of the block
 * size, GLESC_ERROR_UNSUPPORTED when t has no CPU reference; the message
 * (glesc_last_errmsg) names the type and n. Nothing is written on failure. */
glesc_status quant_dequantize(glesc_dtype t, const void *src, float *dst, int64_t n);

/* Quantizes n floats from src into n / block_size blocks of type t at dst
 * (caller-owned, glesc_dtype_row_bytes(t, n) bytes, any alignment). Plain
 * types (f32, f16, bf16) are converted with round-to-nearest-even. Errors as
 * for quant_dequantize. Deterministic: the same input gives the same bytes
 * on every host whose compiler does not contract float expressions into FMAs
 * (see dequant_legacy.c). Inputs must be finite. */
glesc_status quant_quantize(glesc_dtype t, const float *src, void *dst, int64_t n);

/* ggml's non-linear 4-bit code books: kvalues_iq4nl (iq4_nl, iq4_xs: value =
 * d * table[nibble]) and kvalues_mxfp4 (E2M1 values doubled; mxfp4 scales
 * them by 2^(e - 128), i.e. half the E8M0 scale). */
extern const int8_t quant_iq4nl_values[16];
extern const int8_t quant_mxfp4_values[16];

/* ---- GPU layout (gpu.c) ----
 * On the GPU a row of a block type is its blocks repacked (gpu.c's table):
 * in groups of G blocks, each group holding one field after another (the
 * quants of its blocks, then their scales, ...), every field's array
 * padded to the type's alignment (16 bytes where the GEMV reads uvec4, else
 * 4), the last group of a row as long as its blocks need. The GLSL snippet
 * glsl/<quant_gpu_snippet(t)>.glsl reads that layout through the function
 * quant_gpu_locate_glsl writes. f32, f16 and bf16 are not repacked.
 * Functions return 0 / NULL for types without a GPU path. */
const char *quant_gpu_snippet(glesc_dtype t);
/* Can a GPU kernel read a tensor of type t as weights (matmul's W,
 * get_rows' table)? Exactly the types with a GPU layout: f32, f16, bf16
 * and q4_0 .. mxfp4 (not q8_k, the iq1/iq2/iq3 and ternary types). A row
 * of such a weight holds a whole number of the type's blocks
 * (quant_type(t)->block_size elements; 1 for the plain types). */
bool quant_gpu_readable(glesc_dtype t);
/* Elements per block (4 for the plain types, whose GPU rows are plain). */
int quant_gpu_block_elems(glesc_dtype t);
/* GPU bytes of a row of ne0 elements of block type t (a multiple of 4;
 * of 16 where quant_gpu_align is 16); 0 for plain types or a bad ne0. */
uint64_t quant_gpu_row_bytes(glesc_dtype t, int64_t ne0);
/* The alignment of t's field arrays in bytes (16: rows and quants can be
 * read as uvec4), 0 for the plain types. */
int quant_gpu_align(glesc_dtype t);
/* Repacks rows (each ne0 elements, a multiple of quant_gpu_block_elems)
 * from the file layout at src (any alignment) into GPU rows at dst (host
 * words, quant_gpu_row_bytes(t, ne0) bytes a row; the caller uploads them). */
glesc_status quant_gpu_repack(glesc_dtype t, const void *src, int64_t ne0, int64_t rows,
                              uint32_t *dst);
/* The same bytes as quant_gpu_repack, through the portable path (a byte
 * image of each group, any host's byte order); quant_gpu_repack takes a
 * specialised one on little-endian hosts. The reference tests check it by. */
glesc_status quant_gpu_repack_generic(glesc_dtype t, const void *src, int64_t ne0, int64_t rows,
                                      uint32_t *dst);
/* True where t's GPU rows are its file rows byte for byte (whole blocks
 * whose size is a multiple of the alignment: q4_k, q5_k, q8_1, q2_k,
 * iq4_xs): an upload reads them straight into GPU memory. */
bool quant_gpu_same_as_file(glesc_dtype t);
/* The inverse of quant_gpu_repack: GPU rows at src back to the file layout
 * at dst (glesc_dtype_row_bytes(t, ne0) bytes a row, any alignment; the
 * padding is dropped). */
glesc_status quant_gpu_unpack(glesc_dtype t, const uint32_t *src, int64_t ne0, int64_t rows,
                              void *dst);
/* Appends GLSL `qblock qlocate(uint row, uint nb, uint blk)` for t's layout:
 * the words where block blk's field arrays start (f0, f1, f2, counted from
 * word 0 of the buffer; row is the row's first word, nb its block count) and
 * the block's index i in its group. Needs `struct qblock` (quant/common). */
void quant_gpu_locate_glsl(glesc_dtype t, sbuf *out);

#endif /* GLESC_QUANT_H */
