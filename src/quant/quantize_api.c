/*
 * quantize_api.c — glesc_quantize, the public face of the CPU reference
 * quantizers (quantize.c through quant_quantize): rows of floats into any
 * weight type, with the argument checks a caller outside the library needs
 * (sizes, overflow, non-finite inputs) and messages that name them. Tools
 * that write GGUF files (the synthetic models of tools/common) use it.
 */
#include <math.h>

#include "core/core.h"
#include "quant/quant.h"

GLESC_API glesc_status glesc_quantize(glesc_dtype t, const float *src, int64_t n_rows,
                                      int64_t n_per_row, void *dst, size_t dst_size)
{
    core_err_reset(NULL);
    const quant_type_info *q = quant_type(t);
    if (!q)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_quantize: unknown type id %d", (int)t);
    if (n_rows < 0 || n_per_row < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_quantize %s: negative count (%lld rows of %lld)", q->name,
                            (long long)n_rows, (long long)n_per_row);
    if (n_per_row % q->block_size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_quantize %s: rows of %lld elements are not whole %d-element "
                            "blocks",
                            q->name, (long long)n_per_row, q->block_size);
    if (!q->quantize)
        return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                            "glesc_quantize %s: glesc has no quantizer for this type", q->name);
    uint64_t row_bytes = glesc_dtype_row_bytes(t, n_per_row), bytes;
    int64_t n;
    if (__builtin_mul_overflow(row_bytes, (uint64_t)n_rows, &bytes) ||
        __builtin_mul_overflow(n_rows, n_per_row, &n) || bytes > SIZE_MAX)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_quantize %s: %lld rows of %lld elements overflow", q->name,
                            (long long)n_rows, (long long)n_per_row);
    if (bytes > dst_size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_quantize %s: %lld rows of %lld elements need %llu bytes, dst "
                            "has %zu",
                            q->name, (long long)n_rows, (long long)n_per_row,
                            (unsigned long long)bytes, dst_size);
    if (n == 0)
        return GLESC_OK;
    if (!src || !dst)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_quantize %s: %s is NULL",
                            q->name, src ? "dst" : "src");
    /* The block quantizers derive scales from the values: a NaN or an
     * infinity would give meaningless blocks, so it is refused by name. */
    if (q->is_quantized)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(src[i]))
                return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                    "glesc_quantize %s: element %lld of row %lld is not finite "
                                    "(%g)",
                                    q->name, (long long)(i % n_per_row), (long long)(i / n_per_row),
                                    (double)src[i]);
    /* Rows are whole blocks, so the rows quantize as one run. */
    return quant_quantize(t, src, dst, n);
}
