/*
 * test_quant_model.c — the CPU reference dequantizers on real files. Every
 * reference/models/tiny-<type>.gguf in the shared folder was made from
 * tiny-f32.gguf (llama-quantize --pure, or gguf-py for f16/bf16/q8_0; see
 * reference/README.md), so dequantizing each of its 2-D tensors must give
 * back the f32 source up to the type's quantization error. A wrong element
 * order or scale decode shows up as an error near 1 (or worse), far above
 * every bound here.
 *
 * A second test re-quantizes the f32 source with quant_quantize and compares
 * bytes: f16 and bf16 (plain rounding) and the legacy types, whose
 * quantizers follow ggml's reference formulas, must reproduce the files.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc_gguf.h"
#include "quant/quant.h"
#include "test_util.h"

#define MODEL_DIR "reference/models/"

static glesc_gguf *open_or_fail(const char *path)
{
    glesc_gguf *f = NULL;
    glesc_status st = glesc_gguf_open(path, &f);
    cr_assert_eq(st, GLESC_OK, "%s: %s", path, glesc_last_errmsg());
    return f;
}

/* Relative RMS error of y against x: sqrt(sum (y - x)^2 / sum x^2). */
static double rel_rms(const float *y, const float *x, int64_t n)
{
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)y[i] - x[i];
        se += e * e;
        sx += (double)x[i] * x[i];
    }
    return sqrt(se / sx);
}

/* Dequantizes every 2-D tensor of path and compares it with the tensor of
 * the same name in the f32 source; expect_type: the type every 2-D tensor
 * must have (GLESC_DTYPE_COUNT_: any). Asserts the worst relative RMS error
 * is at most bound and returns it. */
static double check_file(const char *path, const char *f32_path, glesc_dtype expect_type,
                         double bound)
{
    glesc_gguf *q = open_or_fail(path), *ref = open_or_fail(f32_path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    double worst = 0;
    int n_checked = 0;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(q); i++) {
        glesc_gguf_tensor_info t, r;
        cr_assert_eq(glesc_gguf_tensor(q, i, &t), GLESC_OK);
        if (t.n_dims != 2)
            continue;
        int64_t ri = glesc_gguf_find_tensor(ref, t.name);
        cr_assert(ri >= 0, "%s: %s is not in tiny-f32.gguf", base, t.name);
        cr_assert_eq(glesc_gguf_tensor(ref, ri, &r), GLESC_OK);
        cr_assert_eq(r.type, GLESC_DTYPE_F32, "tiny-f32.gguf: %s is not f32", t.name);
        cr_assert(t.ne[0] == r.ne[0] && t.ne[1] == r.ne[1], "%s: %s shape differs", base, t.name);
        if (expect_type != GLESC_DTYPE_COUNT_)
            cr_assert_eq(t.type, expect_type, "%s: %s is %s", base, t.name,
                         glesc_dtype_name(t.type));
        const int64_t n = t.ne[0] * t.ne[1];
        cr_assert_eq(t.size, glesc_dtype_row_bytes(t.type, t.ne[0]) * (uint64_t)t.ne[1]);
        float *y = malloc(sizeof(float) * (size_t)n), *x = malloc(sizeof(float) * (size_t)n);
        cr_assert(y && x);
        glesc_status st = quant_dequantize(t.type, t.data, y, n);
        cr_assert_eq(st, GLESC_OK, "%s: %s: %s", base, t.name, glesc_last_errmsg());
        cr_assert_eq(quant_dequantize(GLESC_DTYPE_F32, r.data, x, n), GLESC_OK);
        double e = rel_rms(y, x, n);
        printf("%-18s %-24s %-5s rel rms %.5f\n", base, t.name, glesc_dtype_name(t.type), e);
        cr_assert(e <= bound, "%s: %s (%s): relative RMS error %.5f > %.5f", base, t.name,
                  glesc_dtype_name(t.type), e, bound);
        if (e > worst)
            worst = e;
        n_checked++;
        free(x);
        free(y);
    }
    cr_assert_eq(n_checked, 16, "%s: %d 2-D tensors, expected 16", base, n_checked);
    printf("%-18s worst rel rms %.5f (bound %.4g)\n", base, worst, bound);
    glesc_gguf_close(ref);
    glesc_gguf_close(q);
    return worst;
}

/* One test per file. Bounds: the measured worst relative RMS error over the
 * file's 16 matrices (in the comment: every matrix of a file lands within a
 * few percent of it), times about 1.3. For reference, glesc's own
 * round-to-nearest K quantizers reach 0.327 (q2_k), 0.155 (q3_k), 0.078
 * (q4_k) on Gaussian data: llama-quantize's scale search buys 5-10%. */
#define MODEL_TEST(tname, dtype, bound)                                                            \
    Test(quant_model, dequant_##tname)                                                             \
    {                                                                                              \
        TEST_REQUIRE_SHARED(path, MODEL_DIR "tiny-" #tname ".gguf");                               \
        TEST_REQUIRE_SHARED(f32, MODEL_DIR "tiny-f32.gguf");                                       \
        check_file(path, f32, dtype, bound);                                                       \
        free(f32);                                                                                 \
        free(path);                                                                                \
    }

MODEL_TEST(f32, GLESC_DTYPE_F32, 0.0)        /* 0 */
MODEL_TEST(f16, GLESC_DTYPE_F16, 3e-4)       /* 0.00021 */
MODEL_TEST(bf16, GLESC_DTYPE_BF16, 2.5e-3)   /* 0.00167 */
MODEL_TEST(q8_0, GLESC_DTYPE_Q8_0, 0.007)    /* 0.00539 */
MODEL_TEST(q4_0, GLESC_DTYPE_Q4_0, 0.11)     /* 0.0866 */
MODEL_TEST(q4_1, GLESC_DTYPE_Q4_1, 0.10)     /* 0.0786 */
MODEL_TEST(q5_0, GLESC_DTYPE_Q5_0, 0.055)    /* 0.0430 */
MODEL_TEST(q5_1, GLESC_DTYPE_Q5_1, 0.05)     /* 0.0380 */
MODEL_TEST(q2_k, GLESC_DTYPE_Q2_K, 0.38)     /* 0.298 */
MODEL_TEST(q3_k, GLESC_DTYPE_Q3_K, 0.20)     /* 0.152 */
MODEL_TEST(q4_k, GLESC_DTYPE_Q4_K, 0.09)     /* 0.0717 */
MODEL_TEST(q5_k, GLESC_DTYPE_Q5_K, 0.047)    /* 0.0363 */
MODEL_TEST(q6_k, GLESC_DTYPE_Q6_K, 0.023)    /* 0.0178 */
MODEL_TEST(q4_k_m, GLESC_DTYPE_COUNT_, 0.09) /* 0.0717 (13 q4_k + 3 q6_k) */

/* The mixed recipe: three matrices are q6_k (reference/README.md), so the
 * test above covers both decoders in one model. */
Test(quant_model, q4_k_m_types)
{
    TEST_REQUIRE_SHARED(path, MODEL_DIR "tiny-q4_k_m.gguf");
    glesc_gguf *f = open_or_fail(path);
    int n_q6 = 0;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        cr_assert_eq(glesc_gguf_tensor(f, i, &t), GLESC_OK);
        if (t.n_dims != 2)
            continue;
        bool q6 = !strcmp(t.name, "output.weight") || !strcmp(t.name, "blk.1.attn_v.weight") ||
                  !strcmp(t.name, "blk.1.ffn_down.weight");
        cr_assert_eq(t.type, q6 ? GLESC_DTYPE_Q6_K : GLESC_DTYPE_Q4_K, "%s is %s", t.name,
                     glesc_dtype_name(t.type));
        n_q6 += q6;
    }
    cr_assert_eq(n_q6, 3);
    glesc_gguf_close(f);
    free(path);
}

/* Re-quantizing the f32 source must give the file's bytes where glesc's
 * quantizer is ggml's reference formula: prints the number of differing
 * blocks and asserts that none differ. */
static void check_requantize(const char *path, const char *f32_path, glesc_dtype type)
{
    glesc_gguf *q = open_or_fail(path), *ref = open_or_fail(f32_path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const quant_type_info *info = quant_type(type);
    int64_t blocks = 0, differing = 0;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(q); i++) {
        glesc_gguf_tensor_info t, r;
        cr_assert_eq(glesc_gguf_tensor(q, i, &t), GLESC_OK);
        if (t.n_dims != 2)
            continue;
        cr_assert_eq(t.type, type);
        cr_assert_eq(glesc_gguf_tensor(ref, glesc_gguf_find_tensor(ref, t.name), &r), GLESC_OK);
        const int64_t n = t.ne[0] * t.ne[1];
        float *x = malloc(sizeof(float) * (size_t)n);
        uint8_t *bytes = malloc(t.size);
        cr_assert(x && bytes);
        cr_assert_eq(quant_dequantize(GLESC_DTYPE_F32, r.data, x, n), GLESC_OK);
        cr_assert_eq(quant_quantize(type, x, bytes, n), GLESC_OK);
        const uint8_t *file = t.data;
        for (int64_t b = 0; b < n / info->block_size; b++) {
            size_t off = (size_t)b * (size_t)info->block_bytes;
            if (memcmp(bytes + off, file + off, (size_t)info->block_bytes) != 0) {
                if (differing == 0)
                    printf("%s: %s: first differing block %lld\n", base, t.name, (long long)b);
                differing++;
            }
        }
        blocks += n / info->block_size;
        free(bytes);
        free(x);
    }
    printf("%-18s re-quantized: %lld of %lld blocks differ\n", base, (long long)differing,
           (long long)blocks);
    cr_assert_eq(differing, 0, "%s: %lld of %lld re-quantized blocks differ", base,
                 (long long)differing, (long long)blocks);
    glesc_gguf_close(ref);
    glesc_gguf_close(q);
}

#define REQUANT_TEST(tname, dtype)                                                                 \
    Test(quant_model, requantize_##tname)                                                          \
    {                                                                                              \
        TEST_REQUIRE_SHARED(path, MODEL_DIR "tiny-" #tname ".gguf");                               \
        TEST_REQUIRE_SHARED(f32, MODEL_DIR "tiny-f32.gguf");                                       \
        check_requantize(path, f32, dtype);                                                        \
        free(f32);                                                                                 \
        free(path);                                                                                \
    }

REQUANT_TEST(f16, GLESC_DTYPE_F16)
REQUANT_TEST(bf16, GLESC_DTYPE_BF16)
REQUANT_TEST(q8_0, GLESC_DTYPE_Q8_0)
REQUANT_TEST(q4_0, GLESC_DTYPE_Q4_0)
REQUANT_TEST(q4_1, GLESC_DTYPE_Q4_1)
REQUANT_TEST(q5_0, GLESC_DTYPE_Q5_0)
REQUANT_TEST(q5_1, GLESC_DTYPE_Q5_1)
