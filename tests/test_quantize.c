/*
 * test_quantize.c — glesc_quantize, the public quantization entry point:
 * for every type with a CPU quantizer its rows must come out byte for byte
 * as the internal quantizer (quant_quantize) writes them, and each refused
 * argument must be refused with a message that names it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

/* Deterministic test data: a few rows of mixed magnitudes and signs. */
static void fill(float *x, int64_t n, unsigned seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 20.0f : 2.0f);
    }
}

Test(quantize, every_type_matches_the_internal_quantizer)
{
    int checked = 0;
    for (int id = 0; id < GLESC_DTYPE_COUNT_; id++) {
        glesc_dtype t = (glesc_dtype)id;
        const quant_type_info *q = quant_type(t);
        if (!q || !q->quantize)
            continue;
        const int64_t rows = 3, per_row = 2 * 256; /* whole blocks of every type */
        float *x = malloc((size_t)(rows * per_row) * sizeof *x);
        size_t bytes = (size_t)glesc_dtype_row_bytes(t, per_row) * (size_t)rows;
        uint8_t *want = malloc(bytes), *got = malloc(bytes + 1);
        cr_assert(x && want && got);
        fill(x, rows * per_row, (unsigned)id);
        cr_assert_eq(quant_quantize(t, x, want, rows * per_row), GLESC_OK);
        got[bytes] = 0xa5; /* nothing past the rows is written */
        cr_assert_eq(glesc_quantize(t, x, rows, per_row, got, bytes + 1), GLESC_OK, "%s: %s",
                     q->name, glesc_last_errmsg());
        cr_expect(memcmp(want, got, bytes) == 0, "%s: bytes differ", q->name);
        cr_expect_eq(got[bytes], 0xa5, "%s: wrote past the rows", q->name);
        /* Row by row gives the same bytes as all rows at once. */
        size_t rb = bytes / (size_t)rows;
        for (int64_t r = 0; r < rows; r++) {
            memset(got, 0, rb);
            cr_assert_eq(glesc_quantize(t, x + r * per_row, 1, per_row, got, rb), GLESC_OK);
            cr_expect(memcmp(want + (size_t)r * rb, got, rb) == 0, "%s row %lld", q->name,
                      (long long)r);
        }
        free(x);
        free(want);
        free(got);
        checked++;
    }
    cr_expect_geq(checked, 17, "only %d types have a quantizer", checked);
}

static void expect_refused(glesc_status st, glesc_status want, const char *needle)
{
    cr_expect_eq(st, want, "status %s", glesc_status_name(st));
    cr_expect(strstr(glesc_last_errmsg(), needle), "'%s' not in '%s'", needle, glesc_last_errmsg());
}

Test(quantize, refused_arguments)
{
    float x[64];
    uint8_t dst[256];
    fill(x, 64, 1);
    expect_refused(glesc_quantize((glesc_dtype)4, x, 1, 32, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "unknown type id 4");
    expect_refused(glesc_quantize(GLESC_DTYPE_Q4_0, x, 1, 40, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "40 elements");
    expect_refused(glesc_quantize(GLESC_DTYPE_Q8_0, x, -1, 32, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "negative");
    expect_refused(glesc_quantize(GLESC_DTYPE_Q8_0, x, 2, 32, dst, 67),
                   GLESC_ERROR_INVALID_ARGUMENT, "need 68 bytes, dst has 67");
    expect_refused(glesc_quantize(GLESC_DTYPE_IQ2_XXS, x, 0, 256, dst, sizeof dst),
                   GLESC_ERROR_UNSUPPORTED, "iq2_xxs");
    expect_refused(glesc_quantize(GLESC_DTYPE_Q8_0, NULL, 1, 32, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "src is NULL");
    expect_refused(glesc_quantize(GLESC_DTYPE_F32, x, 1 << 30, 1 << 30, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "need");
    expect_refused(glesc_quantize(GLESC_DTYPE_Q8_0, x, INT64_MAX / 2, 64, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "overflow");
    x[37] = NAN;
    memset(dst, 0x5a, sizeof dst);
    expect_refused(glesc_quantize(GLESC_DTYPE_Q8_0, x, 2, 32, dst, sizeof dst),
                   GLESC_ERROR_INVALID_ARGUMENT, "element 5 of row 1 is not finite");
    for (size_t i = 0; i < sizeof dst; i++)
        cr_assert_eq(dst[i], 0x5a, "byte %zu written on failure", i);
    /* Plain types carry non-finite values; nothing to do is no error. */
    cr_expect_eq(glesc_quantize(GLESC_DTYPE_F16, x, 2, 32, dst, sizeof dst), GLESC_OK);
    cr_expect_eq(glesc_quantize(GLESC_DTYPE_Q4_K, NULL, 0, 256, NULL, 0), GLESC_OK);
}
