/*
 * test_quant_gpu.c — the GPU side of every block format: the glsl/quant/
 * snippets dequantize the repacked blocks exactly as the CPU reference does
 * (bit for bit where the formula is a product; within an ulp where it is a
 * product minus an offset that the GPU may fuse into an fma), and the
 * repacking gives the file's bytes back. The
 * dequantize kernel is this test's own: a snippet's dq4 over a whole
 * buffer, nothing else (the graph's weight loaders use the same snippets;
 * test_quant_graph.c checks them through glesc_matmul and get_rows).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emit/emit.h"
#include "gl/gl.h"
#include "quant/quant.h"
#include "test_util.h"

typedef struct type_case {
    glesc_dtype t;
    bool exact; /* bit-identical to the CPU reference */
} type_case;

static const type_case types[] = {
    {GLESC_DTYPE_F32, true},    {GLESC_DTYPE_F16, true},   {GLESC_DTYPE_BF16, true},
    {GLESC_DTYPE_Q4_0, true},   {GLESC_DTYPE_Q4_1, false}, {GLESC_DTYPE_Q5_0, true},
    {GLESC_DTYPE_Q5_1, false},  {GLESC_DTYPE_Q8_0, true},  {GLESC_DTYPE_Q8_1, true},
    {GLESC_DTYPE_Q2_K, false},  {GLESC_DTYPE_Q3_K, true},  {GLESC_DTYPE_Q4_K, false},
    {GLESC_DTYPE_Q5_K, false},  {GLESC_DTYPE_Q6_K, true},  {GLESC_DTYPE_IQ4_NL, true},
    {GLESC_DTYPE_IQ4_XS, true}, {GLESC_DTYPE_MXFP4, true},
};

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Quantizes n random floats; returns the file-layout blocks. */
static void *make_blocks(glesc_dtype t, int64_t n, uint32_t seed)
{
    float *src = malloc((size_t)n * sizeof *src);
    for (int64_t i = 0; i < n; i++)
        src[i] = frand(&seed) * (1.0f + (float)(i % 7)); /* varied block scales */
    void *blocks = malloc(glesc_dtype_row_bytes(t, n));
    cr_assert_eq(quant_quantize(t, src, blocks, n), GLESC_OK, "%s: %s", glesc_dtype_name(t),
                 glesc_last_errmsg());
    free(src);
    return blocks;
}

/* Rows of ne0 elements in the GPU layout (repacked for block types, as
 * they are for f32/f16/bf16); *row_words: words of a GPU row. */
static gl_buffer *upload_repacked(glesc_context *ctx, glesc_dtype t, const void *blocks,
                                  int64_t ne0, int64_t rows, uint32_t *row_words)
{
    uint64_t rb = quant_gpu_row_bytes(t, ne0);
    bool plain = rb == 0;
    if (plain)
        rb = glesc_dtype_row_bytes(t, ne0);
    size_t bytes = (size_t)(rb * (uint64_t)rows);
    uint32_t *w = malloc(bytes);
    if (plain)
        memcpy(w, blocks, bytes);
    else
        cr_assert_eq(quant_gpu_repack(t, blocks, ne0, rows, w), GLESC_OK);
    /* the round trip gives the file's bytes back */
    if (!plain) {
        void *back = malloc(glesc_dtype_row_bytes(t, ne0) * (size_t)rows);
        cr_assert_eq(quant_gpu_unpack(t, w, ne0, rows, back), GLESC_OK);
        cr_assert(!memcmp(back, blocks, glesc_dtype_row_bytes(t, ne0) * (size_t)rows),
                  "%s: unpack(repack(x)) != x", glesc_dtype_name(t));
        free(back);
    }
    gl_buffer *b;
    cr_assert_eq(gl_pool_acquire(ctx, bytes, GL_USAGE_WEIGHTS, &b), GLESC_OK);
    cr_assert_eq(gl_buffer_upload(ctx, b, 0, w, bytes), GLESC_OK);
    free(w);
    *row_words = (uint32_t)(rb / 4);
    return b;
}

/* Dequantize kernel of type t: bindings (qw: uint words, outv: vec4),
 * params n4 (4-element groups), ne0 (row length), row_words (GPU row); one
 * invocation per group, local size 64, the grid flattened over x and y.
 * core_free the text. */
static char *dequant_glsl(glesc_dtype t, core_err *err)
{
    const char *snippet = quant_gpu_snippet(t);
    cr_assert_not_null(snippet, "no GPU layout for %s", glesc_dtype_name(t));
    emit_kernel *k = emit_kernel_create("dequant");
    cr_assert_not_null(k);
    emit_kernel_comment(k, "weights: %s (glsl/%s.glsl)", glesc_dtype_name(t), snippet);
    emit_kernel_local_size(k, 64, 1, 1);
    emit_kernel_binding(k, EMIT_UINT, EMIT_READONLY, "qw");
    emit_kernel_binding(k, EMIT_VEC4, EMIT_WRITEONLY, "outv");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    emit_kernel_param(k, EMIT_PARAM_UINT, "ne0");
    emit_kernel_param(k, EMIT_PARAM_UINT, "row_words");
    emit_kernel_define(k, "QW(i)", "qw[i]");
    emit_kernel_define(k, "QW4(i)",
                       "uvec4(qw[4u * (i)], qw[4u * (i) + 1u], qw[4u * (i) + 2u], "
                       "qw[4u * (i) + 3u])");
    emit_kernel_snippet(k, "quant/common");
    sbuf loc;
    sbuf_init(&loc);
    quant_gpu_locate_glsl(t, &loc);
    if (!loc.len) /* plain types: blocks of 4 elements, QWORDS words each */
        sbuf_append(&loc, "qblock qlocate(uint row, uint nb, uint blk) {\n"
                          "    return qblock(row + blk * QWORDS, 0u, 0u, 0u);\n}\n");
    emit_kernel_snippet(k, snippet);
    cr_assert_not_null(sbuf_str(&loc));
    emit_kernel_helper(k, "qlocate", sbuf_str(&loc));
    sbuf_free(&loc);
    emit_kernel_define(k, "QG", "(QK / 4u)");
    emit_kernel_line(k, "uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * "
                        "gl_NumWorkGroups.x * WG_SIZE;");
    emit_kernel_line(k, "if (i < n4) {");
    emit_kernel_line(k, "uint row = i / (ne0 / 4u), j = i %% (ne0 / 4u);");
    emit_kernel_line(k, "outv[i] = dq4(qlocate(row * row_words, ne0 / QK, j / QG), j %% QG);");
    emit_kernel_line(k, "}");
    char *glsl = emit_kernel_glsl(k, err);
    emit_kernel_destroy(k);
    return glsl;
}

static const gl_program *program(glesc_context *ctx, char *glsl, core_err *err)
{
    cr_assert_not_null(glsl, "%s", core_err_msg(err));
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, glsl, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    core_free(glsl);
    return p;
}

static double ulp_of(double x)
{
    int e;
    frexp(fabs(x) > 1e-30 ? x : 1e-30, &e);
    return ldexp(1.0, e - 24);
}

Test(quant_gpu, dequant_matches_cpu_reference)
{
    glesc_context *ctx = test_context(NULL);
    /* rows of 39 blocks of 32 (groups of 8 and a tail of 7) or of 13 of
     * 256 (a tail of 5) */
    const int64_t n = 256 * 13 * 3;
    for (size_t c = 0; c < CORE_ARRAY_LEN(types); c++) {
        glesc_dtype t = types[c].t;
        int64_t ne0 = quant_gpu_block_elems(t) == 256 ? 256 * 13 : 32 * 39;
        void *blocks = make_blocks(t, n, 1234u + (uint32_t)c);
        float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
        cr_assert_eq(quant_dequantize(t, blocks, ref, n), GLESC_OK);
        uint32_t row_words;
        gl_buffer *qw = upload_repacked(ctx, t, blocks, ne0, n / ne0, &row_words), *out;
        cr_assert_eq(gl_pool_acquire(ctx, n * 4, GL_USAGE_READBACK, &out), GLESC_OK);
        core_err err = {0};
        const gl_program *p = program(ctx, dequant_glsl(t, &err), &err);
        gl_binding b[2] = {{qw, 0, 0, false}, {out, 0, 0, true}};
        gl_param prm[3] = {GL_PARAM_U(n / 4), GL_PARAM_U(ne0), GL_PARAM_U(row_words)};
        cr_assert_eq(gl_dispatch(ctx, p, b, 2, prm, 3, (uint32_t[3]){(n / 4 + 63) / 64, 1, 1}),
                     GLESC_OK, "%s", glesc_context_errmsg(ctx));
        cr_assert_eq(gl_buffer_download(ctx, out, 0, got, n * 4), GLESC_OK);
        int64_t diff = 0;
        double worst_ulps = 0;
        for (int64_t i = 0; i < n; i++) {
            if (memcmp(&got[i], &ref[i], 4) == 0)
                continue;
            diff++;
            /* Scale of the terms: the value plus the block's largest value
             * bounds an fma's rounding difference. */
            int64_t b0 = i / 256 * 256;
            double mx = 0;
            for (int64_t k = b0; k < b0 + 256 && k < n; k++)
                mx = fmax(mx, fabs(ref[k]));
            worst_ulps = fmax(worst_ulps, fabs((double)got[i] - ref[i]) / ulp_of(mx));
        }
        cr_log_info("%-7s dequant: %lld of %lld elements differ from the CPU reference, worst "
                    "%.2f ulp of the block maximum",
                    glesc_dtype_name(t), (long long)diff, (long long)n, worst_ulps);
        if (types[c].exact)
            cr_expect_eq(diff, 0, "%s: %lld elements not bit-identical", glesc_dtype_name(t),
                         (long long)diff);
        else
            cr_expect_leq(worst_ulps, 2.0, "%s: %.2f ulp", glesc_dtype_name(t), worst_ulps);
        gl_pool_release(ctx, qw);
        gl_pool_release(ctx, out);
        free(blocks);
        free(ref);
        free(got);
    }
    glesc_context_destroy(ctx);
}

#include "glesc_gguf.h"

static bool exact_type(glesc_dtype t)
{
    for (size_t c = 0; c < CORE_ARRAY_LEN(types); c++)
        if (types[c].t == t)
            return types[c].exact;
    return false;
}

/* Every tensor of the shared models (one tiny model per weight type, and
 * the real models) dequantizes on the GPU to the CPU reference. */
Test(quant_gpu, shared_models_dequantize_like_cpu)
{
    static const char *const files[] = {
        "reference/models/tiny-f32.gguf",    "reference/models/tiny-f16.gguf",
        "reference/models/tiny-bf16.gguf",   "reference/models/tiny-q8_0.gguf",
        "reference/models/tiny-q4_0.gguf",   "reference/models/tiny-q4_1.gguf",
        "reference/models/tiny-q5_0.gguf",   "reference/models/tiny-q5_1.gguf",
        "reference/models/tiny-q2_k.gguf",   "reference/models/tiny-q3_k.gguf",
        "reference/models/tiny-q4_k.gguf",   "reference/models/tiny-q5_k.gguf",
        "reference/models/tiny-q6_k.gguf",   "reference/models/tiny-q4_k_m.gguf",
        "models/TinyStories-656K-Q8_0.gguf", "models/llama-2-tiny-random.gguf",
    };
    TEST_REQUIRE_SHARED(first, files[0]);
    free(first);
    glesc_context *ctx = test_context(NULL);
    core_err err = {0};
    for (size_t fi = 0; fi < CORE_ARRAY_LEN(files); fi++) {
        char *path = test_shared_path(files[fi]);
        cr_assert_not_null(path, "%s is missing from the shared folder", files[fi]);
        glesc_gguf *f;
        cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
        int64_t checked = 0, elems = 0, differ = 0;
        for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
            glesc_gguf_tensor_info ti;
            cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
            int64_t n = ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3];
            if (!quant_gpu_snippet(ti.type) || n % quant_gpu_block_elems(ti.type))
                continue;
            float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
            cr_assert_eq(quant_dequantize(ti.type, ti.data, ref, n), GLESC_OK);
            uint32_t row_words; /* the tensor as one row */
            gl_buffer *qw = upload_repacked(ctx, ti.type, ti.data, n, 1, &row_words), *out;
            cr_assert_eq(gl_pool_acquire(ctx, (uint64_t)n * 4, GL_USAGE_READBACK, &out), GLESC_OK);
            const gl_program *p = program(ctx, dequant_glsl(ti.type, &err), &err);
            gl_binding b[2] = {{qw, 0, 0, false}, {out, 0, 0, true}};
            gl_param prm[3] = {GL_PARAM_U(n / 4), GL_PARAM_U(n), GL_PARAM_U(row_words)};
            uint32_t groups = (uint32_t)((n / 4 + 63) / 64);
            uint32_t gx = groups < 65535 ? groups : 65535;
            /* The kernel flattens a 2-D grid: x spans gx workgroups. */
            cr_assert_eq(
                gl_dispatch(ctx, p, b, 2, prm, 3, (uint32_t[3]){gx, (groups + gx - 1) / gx, 1}),
                GLESC_OK, "%s", glesc_context_errmsg(ctx));
            cr_assert_eq(gl_buffer_download(ctx, out, 0, got, (uint64_t)n * 4), GLESC_OK);
            int64_t d = 0;
            double worst = 0;
            for (int64_t k = 0; k < n; k++)
                if (memcmp(&got[k], &ref[k], 4)) {
                    d++;
                    worst = fmax(worst, fabs((double)got[k] - ref[k]) / (fabs(ref[k]) + 1e-30));
                }
            cr_expect(d == 0 || (!exact_type(ti.type) && worst < 1e-5),
                      "%s: tensor '%s' (%s): %lld of %lld elements differ, worst relative %.3g",
                      files[fi], ti.name, glesc_dtype_name(ti.type), (long long)d, (long long)n,
                      worst);
            differ += d;
            checked++;
            elems += n;
            gl_pool_release(ctx, qw);
            gl_pool_release(ctx, out);
            free(ref);
            free(got);
        }
        cr_log_info("%-40s %3lld tensors, %9lld elements on the GPU, %lld differ from the CPU",
                    files[fi], (long long)checked, (long long)elems, (long long)differ);
        cr_expect_gt(checked, 0, "%s: no tensor checked", files[fi]);
        glesc_gguf_close(f);
        free(path);
    }
    glesc_context_destroy(ctx);
}
