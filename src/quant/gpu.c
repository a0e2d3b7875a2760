/*
 * gpu.c — how quantized blocks live on the GPU. GLSL ES has no 8- or 16-bit
 * storage, so blocks are read as uint words; a block whose size is not a
 * multiple of 4 bytes is repacked at upload with zero padding placed so that
 * its quant bytes start on a word boundary (after the f16 scale for the
 * 32-element types, at the end for q3_k/q6_k). The snippets in glsl/quant/
 * read exactly these layouts.
 */
#include <string.h>

#include "core/core.h"
#include "quant/quant.h"

typedef struct gpu_layout {
    const char *snippet; /* under glsl/ */
    int hdr;             /* bytes copied before the padding */
    int pad;             /* zero bytes inserted after hdr */
    int qk;              /* elements per GPU block (4 for the plain types) */
} gpu_layout;

static const gpu_layout layouts[GLESC_DTYPE_COUNT_] = {
    [GLESC_DTYPE_F32] = {"quant/f32", 0, 0, 4},
    [GLESC_DTYPE_F16] = {"quant/f16", 0, 0, 4},
    [GLESC_DTYPE_BF16] = {"quant/bf16", 0, 0, 4},
    [GLESC_DTYPE_Q4_0] = {"quant/q4_0", 2, 2, 32},
    [GLESC_DTYPE_Q4_1] = {"quant/q4_1", 0, 0, 32},
    [GLESC_DTYPE_Q5_0] = {"quant/q5_0", 2, 2, 32},
    [GLESC_DTYPE_Q5_1] = {"quant/q5_1", 0, 0, 32},
    [GLESC_DTYPE_Q8_0] = {"quant/q8_0", 2, 2, 32},
    [GLESC_DTYPE_Q8_1] = {"quant/q8_1", 0, 0, 32},
    [GLESC_DTYPE_Q2_K] = {"quant/q2_k", 0, 0, 256},
    [GLESC_DTYPE_Q3_K] = {"quant/q3_k", 110, 2, 256},
    [GLESC_DTYPE_Q4_K] = {"quant/q4_k", 0, 0, 256},
    [GLESC_DTYPE_Q5_K] = {"quant/q5_k", 0, 0, 256},
    [GLESC_DTYPE_Q6_K] = {"quant/q6_k", 210, 2, 256},
    [GLESC_DTYPE_IQ4_NL] = {"quant/iq4_nl", 2, 2, 32},
    [GLESC_DTYPE_IQ4_XS] = {"quant/iq4_xs", 0, 0, 256},
    [GLESC_DTYPE_MXFP4] = {"quant/mxfp4", 1, 3, 32},
};

static const gpu_layout *layout(glesc_dtype t)
{
    if ((unsigned)t >= GLESC_DTYPE_COUNT_ || !layouts[t].snippet)
        return NULL;
    return &layouts[t];
}

const char *quant_gpu_snippet(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    return l ? l->snippet : NULL;
}

bool quant_gpu_readable(glesc_dtype t)
{
    return layout(t) != NULL;
}

int quant_gpu_block_elems(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    return l ? l->qk : 0;
}

int quant_gpu_block_words(glesc_dtype t)
{
    const gpu_layout *l = layout(t);
    if (!l)
        return 0;
    const quant_type_info *q = quant_type(t);
    int bytes = q->block_bytes * (l->qk / q->block_size) + l->pad;
    return bytes / 4;
}

/* One GPU block from its file bytes (l->qk elements). */
static void repack_block(const gpu_layout *l, int file_bytes, const uint8_t *src, uint32_t *dst,
                         int words)
{
    uint8_t tmp[512];
    memset(tmp, 0, sizeof tmp);
    if (l->pad) {
        memcpy(tmp, src, (size_t)l->hdr);
        memcpy(tmp + l->hdr + l->pad, src + l->hdr, (size_t)(file_bytes - l->hdr));
    } else {
        memcpy(tmp, src, (size_t)file_bytes);
    }
    for (int w = 0; w < words; w++)
        dst[w] = core_le32(tmp + 4 * w);
}

glesc_status quant_gpu_repack(glesc_dtype t, const void *src, int64_t n, uint32_t *dst)
{
    const gpu_layout *l = layout(t);
    if (!l)
        return GLESC_ERROR_UNSUPPORTED;
    if (n < 0 || n % l->qk)
        return GLESC_ERROR_INVALID_ARGUMENT;
    const quant_type_info *q = quant_type(t);
    int file_bytes = q->block_bytes * (l->qk / q->block_size);
    int words = quant_gpu_block_words(t);
    const uint8_t *s = src;
    for (int64_t b = 0; b < n / l->qk; b++)
        repack_block(l, file_bytes, s + b * file_bytes, dst + b * words, words);
    return GLESC_OK;
}

glesc_status quant_gpu_unpack(glesc_dtype t, const uint32_t *src, int64_t n, void *dst)
{
    const gpu_layout *l = layout(t);
    if (!l)
        return GLESC_ERROR_UNSUPPORTED;
    if (n < 0 || n % l->qk)
        return GLESC_ERROR_INVALID_ARGUMENT;
    const quant_type_info *q = quant_type(t);
    int file_bytes = q->block_bytes * (l->qk / q->block_size);
    int words = quant_gpu_block_words(t);
    uint8_t *d = dst;
    uint8_t tmp[512];
    for (int64_t b = 0; b < n / l->qk; b++) {
        const uint32_t *w = src + b * words;
        for (int i = 0; i < words; i++)
            core_put_le32(tmp + 4 * i, w[i]);
        uint8_t *o = d + b * file_bytes;
        memcpy(o, tmp, (size_t)l->hdr);
        memcpy(o + l->hdr, tmp + l->hdr + l->pad, (size_t)(file_bytes - l->hdr));
    }
    return GLESC_OK;
}
