/*
 * test_quant_graph.c — quantized weights (the ggml block types) as graph
 * tensors: written in the file layout and repacked on upload, read back
 * unchanged, multiplied by glesc_matmul (GEMV and GEMM) to a double
 * precision CPU product of the CPU-dequantized weights, gathered by
 * get_rows exactly as the CPU dequantizes, fused (epilogues, the gate/up
 * pair), split into row chunks, and every 2-D tensor of the shared
 * quantized models multiplied.
 *
 * Errors are relative to Σ|w·x| of each output (the scale of the rounding
 * a float dot product can pick up); the worst is logged per case.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc_gguf.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define TOL 1e-5

static glesc_context *ctx;

static void setup(void)
{
    setenv("GLESC_PLAN_VERIFY", "1", 1);
    ctx = test_context(NULL);
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
}

TestSuite(quant_graph, .init = setup, .fini = teardown);

/* Every type with a GPU layout (the plain ones too: same path, no repack). */
static const glesc_dtype all_types[] = {
    GLESC_DTYPE_F32,    GLESC_DTYPE_F16,   GLESC_DTYPE_BF16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_1,
    GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,  GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q8_1, GLESC_DTYPE_Q2_K,
    GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,  GLESC_DTYPE_Q5_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL,
    GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
};

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A K x N weight of type t with random values: its file-layout bytes
 * (*file, glesc_dtype_row_bytes(t, K) * N of them) and the CPU
 * dequantization (*deq, K * N floats). free() both. */
typedef struct qweight {
    glesc_tensor *w;
    void *file;
    float *deq;
    int64_t k, n;
} qweight;

static qweight make_weight(glesc_context *c, glesc_dtype t, int64_t k, int64_t n, uint32_t seed)
{
    qweight q = {0};
    q.k = k;
    q.n = n;
    int64_t ne = k * n;
    float *src = malloc((size_t)ne * sizeof *src);
    for (int64_t i = 0; i < ne; i++)
        src[i] = frand(&seed) * (1.0f + (float)((i / 32) % 5)); /* varied block scales */
    size_t fb = (size_t)glesc_dtype_row_bytes(t, k) * (size_t)n;
    q.file = malloc(fb);
    q.deq = malloc((size_t)ne * sizeof *q.deq);
    cr_assert_eq(quant_quantize(t, src, q.file, ne), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(quant_dequantize(t, q.file, q.deq, ne), GLESC_OK, "%s", glesc_last_errmsg());
    free(src);
    q.w = glesc_weight_new(c, t, 2, (int64_t[]){k, n});
    cr_assert_not_null(q.w, "%s", glesc_context_errmsg(c));
    cr_assert_eq(glesc_tensor_write(q.w, q.file, fb), GLESC_OK, "%s", glesc_context_errmsg(c));
    return q;
}

static void free_weight(qweight *q)
{
    glesc_weight_free(q->w);
    free(q->file);
    free(q->deq);
}

static float *rand_floats(int64_t n, uint32_t seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = frand(&seed);
    return v;
}

/* Worst |got - Σ w·x| / Σ|w·x| over the [n, m] result of W [k, n] × X [k, m]. */
static double worst_error(const float *deq, const float *x, const float *got, int64_t k, int64_t n,
                          int64_t m)
{
    double worst = 0;
    for (int64_t j = 0; j < m; j++)
        for (int64_t i = 0; i < n; i++) {
            double s = 0, a = 0;
            const float *wr = deq + i * k, *xc = x + j * k;
            for (int64_t l = 0; l < k; l++) {
                double p = (double)wr[l] * (double)xc[l];
                s += p;
                a += fabs(p);
            }
            double e = fabs((double)got[j * n + i] - s) / (a > 0 ? a : 1);
            if (e > worst)
                worst = e;
        }
    return worst;
}

/* What a GEMM's header must name where set (a tile forced by GLESC_GEMM). */
static const char *gemm_tile;

/* glesc_matmul(W, X) for X [k, m] random; returns the worst error. */
static double check_matmul(glesc_context *c, const qweight *q, int64_t m, uint32_t seed,
                           int *dispatches)
{
    glesc_graph *g = glesc_graph_create(c);
    float *x = rand_floats(q->k * m, seed);
    glesc_tensor *xt = glesc_tensor_new(g, F32, 2, (int64_t[]){q->k, m});
    cr_assert_eq(glesc_tensor_write_f32(xt, x, (size_t)(q->k * m)), GLESC_OK);
    glesc_tensor *y = glesc_matmul(g, q->w, xt);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(c));
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    const char *glsl = glesc_graph_last_glsl(g);
    if (gemm_tile && glsl && strstr(glsl, "// GEMM (glsl/graph/gemm.glsl)"))
        cr_expect(strstr(glsl, gemm_tile), "%s: the GEMM has not '%s'",
                  glesc_dtype_name(q->w->dtype), gemm_tile);
    float *got = tg_read(y);
    double e = worst_error(q->deq, x, got, q->k, q->n, m);
    if (dispatches) {
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        *dispatches = s.dispatches;
    }
    free(got);
    free(x);
    glesc_graph_destroy(g);
    return e;
}

static void run_shape(glesc_dtype t, int64_t k, int64_t n, int64_t m, double *worst)
{
    qweight q = make_weight(ctx, t, k, n, (uint32_t)(k * 31 + n * 7 + m));
    double e = check_matmul(ctx, &q, m, (uint32_t)(m + 5), NULL);
    cr_log_info("%-7s W [%lld, %lld] x X [%lld, %lld] (%s): worst error %.3g", glesc_dtype_name(t),
                (long long)k, (long long)n, (long long)k, (long long)m, m <= 8 ? "GEMV" : "GEMM",
                e);
    cr_expect(e < TOL, "%s: W [%lld, %lld], m = %lld: error %.3g above %.g", glesc_dtype_name(t),
              (long long)k, (long long)n, (long long)m, e, TOL);
    if (e > *worst)
        *worst = e;
    free_weight(&q);
}

static int block_of(glesc_dtype t)
{
    return quant_gpu_block_elems(t) < 32 ? 32 : quant_gpu_block_elems(t);
}

Test(quant_graph, every_type_gemv_and_gemm)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        int64_t k = 2 * (int64_t)block_of(t) * (block_of(t) == 32 ? 4 : 1); /* 256 or 512 */
        double worst = 0;
        run_shape(t, k, 7, 2, &worst);
        run_shape(t, k, 67, 64, &worst);
        cr_log_info("%-7s worst %.3g", glesc_dtype_name(t), worst);
    }
}

/* The GEMV cases and tolerance (2e-6 of Σ|w·x|) the standalone dequantizing
 * GEMV was tested with before it was retired (decode runs this one): every
 * type on 7 rows, plain types with a k that is no multiple of 32, and long,
 * single-row and wide-m shapes for q4_0, q4_k and f16. */
static void gemv_case_on(glesc_context *c, glesc_dtype t, int64_t rows, int64_t k, int64_t m)
{
    qweight q = make_weight(c, t, k, rows, (uint32_t)(rows * 31 + k + m));
    glesc_graph_options o = {.gemv_max_m = 8};
    glesc_graph *g = glesc_graph_create(c);
    cr_assert_eq(glesc_graph_set_options(g, &o), GLESC_OK);
    float *x = rand_floats(k * m, 99);
    glesc_tensor *xt = glesc_tensor_new(g, F32, 2, (int64_t[]){k, m});
    cr_assert_eq(glesc_tensor_write_f32(xt, x, (size_t)(k * m)), GLESC_OK);
    glesc_tensor *y = glesc_matmul(g, q.w, xt);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    cr_assert(strstr(glesc_graph_last_glsl(g), "GEMV"), "%s m = %lld ran no GEMV",
              glesc_dtype_name(t), (long long)m);
    const char *knob = getenv("GLESC_GEMV");
    if (knob && strstr(knob, "half=1"))
        cr_assert(strstr(glesc_graph_last_glsl(g), "#define GEMV_HALF"), "%s: no half units",
                  glesc_dtype_name(t));
    /* every block type; the plain ones where their rows are whole units */
    if (knob && strstr(knob, "quad=1") && (graph_dtype_quant(t) || k % 32 == 0))
        cr_assert(strstr(glesc_graph_last_glsl(g), "#define GEMV_QUAD"), "%s: no quarter units",
                  glesc_dtype_name(t));
    if (knob && strstr(knob, "quad=1") && !graph_dtype_quant(t) && k % 32 == 0)
        cr_assert(strstr(glesc_graph_last_glsl(g), "#define GEMV_PLAIN"),
                  "%s: no plain quarter units", glesc_dtype_name(t));
    float *got = tg_read(y);
    double e = worst_error(q.deq, x, got, k, rows, m);
    cr_log_info("%-7s gemv rows %4lld K %4lld m %lld: worst error %.3g of sum|w*x|",
                glesc_dtype_name(t), (long long)rows, (long long)k, (long long)m, e);
    cr_expect_leq(e, 2e-6, "%s gemv rows %lld m %lld: %g", glesc_dtype_name(t), (long long)rows,
                  (long long)m, e);
    free(got);
    free(x);
    glesc_graph_destroy(g);
    free_weight(&q);
}

static void gemv_case(glesc_dtype t, int64_t rows, int64_t k, int64_t m)
{
    gemv_case_on(ctx, t, rows, k, m);
}

Test(quant_graph, gemv_odd_shapes)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        gemv_case(t, 7, 512, 2);
        if (quant_gpu_block_elems(t) == 4)
            gemv_case(t, 5, 172, 3);
        if (t == GLESC_DTYPE_Q4_0 || t == GLESC_DTYPE_Q4_K || t == GLESC_DTYPE_F16) {
            gemv_case(t, 1, 256, 1);
            gemv_case(t, 4097, 256, 1);
            gemv_case(t, 33, 768, 7);
        }
    }
}

/* Rows longer than a slice of x in shared memory (8448 elements: two
 * slices on llvmpipe, and with m = 2 on GPUs), and the portable path: no
 * subgroups, 128 invocations and 16 KiB of shared memory, what GLES
 * guarantees (the shared-memory reduction; on a GPU with subgroups the
 * other tests take the subgroup path, so this one compares both). */
Test(quant_graph, gemv_long_rows_and_portable_path)
{
    static const glesc_dtype types[] = {
        GLESC_DTYPE_F32,  GLESC_DTYPE_F16,  GLESC_DTYPE_BF16, GLESC_DTYPE_Q8_0,
        GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0, GLESC_DTYPE_Q5_1,
        GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q5_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_Q3_K,
    };
    glesc_context *portable = test_portable_context();
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        gemv_case(types[i], 37, 8448, 1);
        gemv_case(types[i], 37, 8448, 2);
        gemv_case_on(portable, types[i], 37, 8448, 1);
        gemv_case_on(portable, types[i], 21, 4096, 3);
    }
    glesc_context_destroy(portable);
}

/* The GEMV's other shapes (GLESC_GEMV, read when a kernel is generated:
 * a new context per setting, so no plan of another is reused): row groups
 * split over two teams, workgroups looping over blocks of rows, one, two,
 * four or eight units in flight, one or four rows a team, x loaded two or
 * four vec4 at a time (llvmpipe's default is one unit in flight and one
 * vec4; a GPU's, two and four), a workgroup per block, the shared-memory
 * reduction, the pipelined units (raw=1: every type that has them;
 * with four rows a team and split teams: four types), and the units a run
 * at a time (half=1, the small GPUs' default: every type, through its
 * snippet's unit_dec_half, its whole unit or dq4; with two rows, three
 * columns a pass and a pair-free sum over split teams: four types), and
 * the quarter units (quad=1, Mali's classes' default: every type, the
 * block types through their unit_q4 or dq4, the plain ones through pq4
 * where their rows are whole units, else the half units; also two units
 * in flight). */
Test(quant_graph, gemv_shapes_of_the_tuning_knob)
{
    static const char *const knobs[] = {"ks=2,unroll=2,fill=4",
                                        "groups=3,fill=2",
                                        "unroll=4,nr=4",
                                        "unroll=1,nr=1",
                                        "unroll=8,groups=0",
                                        "subgroup=0,ks=2,groups=2",
                                        "raw=1",
                                        "raw=1,nr=4,subgroup=0,ks=2,groups=2",
                                        "half=1",
                                        "half=1,nr=2,subgroup=0,ks=2",
                                        "half=1,quad=1",
                                        "half=1,quad=1,nr=2,subgroup=0,ks=2",
                                        "half=1,quad=1,unroll=2"};
    /* plain raw=1: every type whose loaders split their units; plain
     * half=1 every type of a GEMV */
    static const glesc_dtype types[] = {
        GLESC_DTYPE_F16,  GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_BF16,
        GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0, GLESC_DTYPE_Q5_1, GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q5_K};
    glesc_context *saved = ctx;
    for (size_t k = 0; k < CORE_ARRAY_LEN(knobs); k++) {
        /* one named local: GCC 12's -Wformat-overflow (at -O2 with the
         * sanitizers) otherwise takes knobs[k] for a possible null */
        const char *knob = knobs[k];
        setenv("GLESC_GEMV", knob, 1);
        ctx = test_context(NULL);
        cr_log_info("GLESC_GEMV=%s", knob ? knob : "");
        if (!strcmp(knob, "half=1") || !strcmp(knob, "half=1,quad=1")) {
            for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
                gemv_case(all_types[i], 7, 512, 2);
                gemv_case(all_types[i], 9, 768, 1);
                if (quant_gpu_block_elems(all_types[i]) == 4)
                    gemv_case(all_types[i], 5, 172, 3);
            }
        }
        size_t n =
            !strcmp(knob, "raw=1") || !strncmp(knob, "half=1", 6) ? CORE_ARRAY_LEN(types) : 4;
        for (size_t i = 0; i < n; i++) {
            gemv_case(types[i], 67, 1024, 1);
            gemv_case(types[i], 19, 768, 3);
        }
        glesc_context_destroy(ctx);
    }
    ctx = saved;
    unsetenv("GLESC_GEMV");
}

/* The small GPUs' GEMM tiles through GLESC_GEMM (a new context each, as
 * above): 64 x 16 of 4 x 2 an invocation (two accumulators a column, one
 * vec4 of x each invocation stages; also without the next step's loads in
 * flight, pre=0, and so with x fetched before the weights' decode, xf=1:
 * Mali's) and 64 x 32 of 4 x 4, every type, rows and columns no
 * multiple of the tile, K split in parts (slots forced) and whole; and
 * 32 x 16 of 4 x 2 (64 invocations) on four types. */
Test(quant_graph, gemm_shapes_of_the_tuning_knob)
{
    static const char *const knobs[] = {
        "bn=64,bm=16,tn=4,tm=2", "bn=64,bm=16,tn=4,tm=2,pre=0,slots=1000000",
        "bn=64,bm=16,tn=4,tm=2,pre=0,xf=1,slots=1000000", "bn=64,bm=32,tn=4,tm=4,slots=1000000",
        "bn=32,bm=16,tn=4,tm=2,loop=0,slots=1000000"};
    static const glesc_dtype types[] = {GLESC_DTYPE_F16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_K,
                                        GLESC_DTYPE_Q6_K};
    glesc_context *saved = ctx;
    for (size_t k = 0; k < CORE_ARRAY_LEN(knobs); k++) {
        const char *knob = knobs[k];
        setenv("GLESC_GEMM", knob, 1);
        ctx = test_context(NULL);
        cr_log_info("GLESC_GEMM=%s", knob);
        int bn, bm, tn, tm;
        cr_assert_eq(sscanf(knob, "bn=%d,bm=%d,tn=%d,tm=%d", &bn, &bm, &tn, &tm), 4);
        char want[96];
        snprintf(want, sizeof want, "tiles of %d weight rows by %d columns, %d x %d", bn, bm, tn,
                 tm);
        gemm_tile = want;
        bool every = k < 4;
        size_t n = every ? CORE_ARRAY_LEN(all_types) : CORE_ARRAY_LEN(types);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            glesc_dtype t = every ? all_types[i] : types[i];
            int64_t kk = 8 * (int64_t)block_of(t) * (block_of(t) == 32 ? 2 : 1); /* 512, 2048 */
            run_shape(t, kk, 67, 37, &worst);
            run_shape(t, kk, 129, 9, &worst);
        }
        cr_log_info("GLESC_GEMM=%s: worst %.3g", knob, worst);
        gemm_tile = NULL;
        glesc_context_destroy(ctx);
    }
    ctx = saved;
    unsetenv("GLESC_GEMM");
}

/* The full shape list for the types models use most. */
static void full_shapes(glesc_dtype t)
{
    static const int64_t ms[] = {1, 2, 7, 64, 300};
    double worst = 0;
    for (size_t mi = 0; mi < CORE_ARRAY_LEN(ms); mi++) {
        int64_t m = ms[mi];
        run_shape(t, 512, 1, m, &worst);
        run_shape(t, 512, 7, m, &worst);
        run_shape(t, 256, 4097, m, &worst);
    }
    cr_log_info("%-7s worst over rows 1, 7, 4097 and m 1, 2, 7, 64, 300: %.3g", glesc_dtype_name(t),
                worst);
}

Test(quant_graph, q4_0_shapes)
{
    full_shapes(GLESC_DTYPE_Q4_0);
}

Test(quant_graph, q8_0_shapes)
{
    full_shapes(GLESC_DTYPE_Q8_0);
}

Test(quant_graph, q4_k_shapes)
{
    full_shapes(GLESC_DTYPE_Q4_K);
}

Test(quant_graph, q6_k_shapes)
{
    full_shapes(GLESC_DTYPE_Q6_K);
}

/* Written in the file layout, read back unchanged (the GPU keeps repacked
 * blocks); read_f32 gives the CPU dequantization. */
Test(quant_graph, file_layout_round_trips)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        int64_t k = block_of(t) * 2, n = 5;
        qweight q = make_weight(ctx, t, k, n, 3);
        size_t fb = (size_t)glesc_dtype_row_bytes(t, k) * (size_t)n;
        void *back = malloc(fb);
        cr_assert_eq(glesc_tensor_read(q.w, back, fb), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        cr_expect_eq(memcmp(back, q.file, fb), 0, "%s: bytes read back differ",
                     glesc_dtype_name(t));
        float *f = malloc((size_t)(k * n) * sizeof *f);
        cr_assert_eq(glesc_tensor_read_f32(q.w, f, (size_t)(k * n)), GLESC_OK);
        cr_expect_eq(memcmp(f, q.deq, (size_t)(k * n) * sizeof *f), 0,
                     "%s: read_f32 differs from the CPU dequantization", glesc_dtype_name(t));
        free(f);
        free(back);
        free_weight(&q);
    }
}

Test(quant_graph, errors_are_clear)
{
    /* a row length that is not a multiple of the block */
    cr_assert_null(glesc_weight_new(ctx, GLESC_DTYPE_Q4_K, 2, (int64_t[]){300, 4}));
    const char *msg = glesc_context_errmsg(ctx);
    cr_expect(strstr(msg, "q4_k") && strstr(msg, "[300, 4]") && strstr(msg, "256"), "%s", msg);
    /* types without a GPU layout */
    cr_assert_null(glesc_weight_new(ctx, GLESC_DTYPE_IQ2_XXS, 2, (int64_t[]){256, 4}));
    cr_expect(strstr(glesc_context_errmsg(ctx), "iq2_xxs"), "%s", glesc_context_errmsg(ctx));
    /* wrong byte counts name the file layout */
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_Q8_0, 2, (int64_t[]){64, 3});
    cr_assert_not_null(w);
    glesc_tensor_set_name(w, "blk.0.ffn_up.weight");
    char buf[4096] = {0};
    cr_expect_neq(glesc_tensor_write(w, buf, 64 * 3), GLESC_OK);
    msg = glesc_context_errmsg(ctx);
    cr_expect(strstr(msg, "blk.0.ffn_up.weight") && strstr(msg, "204"), "%s", msg);
    cr_expect_eq(glesc_tensor_write(w, buf, 204), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    /* quantized tensors only feed matmul's W and get_rows' table */
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){64, 3}, 1, -1, 1);
    cr_expect_null(glesc_add(g, w, x));
    cr_expect(strstr(glesc_context_errmsg(ctx), "quantized"), "%s", glesc_context_errmsg(ctx));
    cr_expect_null(glesc_matmul(g, x, w));
    cr_expect_null(glesc_reshape(g, w, 1, (int64_t[]){192}));
    cr_expect(strstr(glesc_context_errmsg(ctx), "q8_0"), "%s", glesc_context_errmsg(ctx));
    cr_expect_null(glesc_tensor_new(g, GLESC_DTYPE_Q8_0, 1, (int64_t[]){32}));
    glesc_graph_destroy(g);
    glesc_weight_free(w);
}

/* get_rows of a quantized table: exactly the CPU dequantization. */
Test(quant_graph, get_rows_dequantizes_exactly)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        int64_t k = block_of(t) * 2, n = 37;
        qweight q = make_weight(ctx, t, k, n, 11);
        glesc_graph *g = glesc_graph_create(ctx);
        int32_t idx[] = {0, 36, 5, 5, 17, 1};
        glesc_tensor *it = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){6});
        cr_assert_eq(glesc_tensor_write(it, idx, sizeof idx), GLESC_OK);
        glesc_tensor *r = glesc_get_rows(g, q.w, it);
        cr_assert_not_null(r, "%s", glesc_context_errmsg(ctx));
        cr_assert_eq(glesc_graph_compute(g, &r, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        float *got = tg_read(r);
        int64_t differ = 0;
        for (int j = 0; j < 6; j++)
            for (int64_t l = 0; l < k; l++)
                if (memcmp(&got[j * k + l], &q.deq[idx[j] * k + l], 4))
                    differ++;
        /* types whose decode is d·q − m may round once differently where
         * the GPU fuses it into an fma (as in test_quant_gpu.c) */
        double worst = 0;
        for (int j = 0; j < 6; j++)
            for (int64_t l = 0; l < k; l++) {
                double ref = q.deq[idx[j] * k + l];
                worst = fmax(worst, fabs(got[j * k + l] - ref) / (fabs(ref) + 1e-30));
            }
        cr_log_info("get_rows %-7s: %lld of %lld differ, worst relative %.3g", glesc_dtype_name(t),
                    (long long)differ, (long long)(6 * k), worst);
        cr_expect(differ == 0 || worst < 1e-6, "%s: get_rows differs from the CPU (%.3g)",
                  glesc_dtype_name(t), worst);
        free(got);
        glesc_graph_destroy(g);
        free_weight(&q);
    }
}

/* Epilogues and the gate/up pair fuse over quantized weights exactly as
 * over f16 ones; the pair of two different types does not (one loader pair
 * per kernel, the types are part of the plan) but still computes right. */
Test(quant_graph, fusion_with_quantized_weights)
{
    for (int64_t m = 1; m <= 64; m += 63) {
        qweight wg = make_weight(ctx, GLESC_DTYPE_Q4_K, 512, 96, 21);
        qweight wu = make_weight(ctx, GLESC_DTYPE_Q4_K, 512, 96, 22);
        qweight wd = make_weight(ctx, GLESC_DTYPE_Q6_K, 512, 96, 23);
        for (int fusion = 1; fusion >= -1; fusion -= 2) {
            /* matmul → +bias → gelu → +residual: one kernel */
            glesc_graph *g = glesc_graph_create(ctx);
            tg_fusion(g, fusion);
            glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){512, m}, 30, -1, 1);
            glesc_tensor *bias = tg_input(g, F32, 1, (int64_t[]){96}, 31, -1, 1);
            glesc_tensor *res = tg_input(g, F32, 2, (int64_t[]){96, m}, 32, -1, 1);
            glesc_tensor *y =
                glesc_add(g, glesc_gelu(g, glesc_add(g, glesc_matmul(g, wg.w, x), bias)), res);
            tg_check(g, &y, 1, 1e-10,
                     m == 1 ? "q4_k GEMV + bias, gelu, residual"
                            : "q4_k GEMM + bias, gelu, residual");
            glesc_compute_stats s;
            glesc_graph_stats(g, &s);
            cr_expect_eq(s.dispatches, fusion > 0 ? 1 : 4, "epilogue: %d dispatches", s.dispatches);
            glesc_graph_destroy(g);

            /* silu(Wg·x) · (Wu·x): one kernel; with a q6_k up weight: three */
            for (int mixed = 0; mixed <= 1; mixed++) {
                g = glesc_graph_create(ctx);
                tg_fusion(g, fusion);
                x = tg_input(g, F32, 2, (int64_t[]){512, m}, 33, -1, 1);
                y = glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg.w, x)),
                              glesc_matmul(g, mixed ? wd.w : wu.w, x));
                tg_check(g, &y, 1, 1e-10, mixed ? "gate q4_k / up q6_k" : "gate/up q4_k pair");
                glesc_graph_stats(g, &s);
                int expect = fusion < 0 ? 4 : mixed ? 2 : 1;
                cr_expect_eq(s.dispatches, expect, "gate/up (mixed %d, fusion %d): %d dispatches",
                             mixed, fusion, s.dispatches);
                glesc_graph_destroy(g);
            }
        }
        free_weight(&wg);
        free_weight(&wu);
        free_weight(&wd);
    }
}

/* Mali's class (on llvmpipe, GLESC_DEVICE_CLASS): decode's gate/up pair
 * stays one kernel, the norm folded in, for the types whose pair fits
 * Mali's registers (q4_0, q8_0 and the plain ones: kernels_gemv_pair_lean;
 * the plain types' quarter units of scale 1, GEMV_PLAIN); for the other
 * block types the norm, the gate GEMV and the up GEMV with silu(gate)· are
 * three (decode_pair_split), every GEMV through the quarter units. A
 * prompt's (two columns) stays one kernel. */
Test(quant_graph, decode_pair_split_on_the_mali_class)
{
    static const glesc_dtype types[] = {
        GLESC_DTYPE_F16,  GLESC_DTYPE_F32,  GLESC_DTYPE_BF16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q8_0,
        GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0, GLESC_DTYPE_Q5_1, GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q5_K,
        GLESC_DTYPE_Q6_K, GLESC_DTYPE_Q3_K, GLESC_DTYPE_Q2_K};
    setenv("GLESC_DEVICE_CLASS", "mali-valhall", 1);
    glesc_context *c = test_context(NULL);
    unsetenv("GLESC_DEVICE_CLASS");
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        glesc_dtype t = types[i];
        bool plain = !graph_dtype_quant(t);
        bool lean = plain || t == GLESC_DTYPE_Q4_0 || t == GLESC_DTYPE_Q8_0;
        qweight wg = make_weight(c, t, 512, 96, 41);
        qweight wu = make_weight(c, t, 512, 96, 42);
        for (int64_t m = 1; m <= 2; m++) {
            glesc_graph *g = glesc_graph_create(c);
            glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){512, m}, 43, -1, 1);
            glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){512}, 44, 0.5f, 1.5f);
            glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, x, 1e-5f), nw);
            glesc_tensor *y =
                glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg.w, h)), glesc_matmul(g, wu.w, h));
            tg_check(g, &y, 1, 1e-10, glesc_dtype_name(t));
            glesc_compute_stats s;
            glesc_graph_stats(g, &s);
            int want = m == 1 && !lean ? 3 : 1;
            cr_log_info("%-5s norm, gate/up, m %lld: %d dispatches", glesc_dtype_name(t),
                        (long long)m, s.dispatches);
            cr_expect_eq(s.dispatches, want, "%s m %lld: %d dispatches, want %d",
                         glesc_dtype_name(t), (long long)m, s.dispatches, want);
            if (m == 1)
                cr_expect(strstr(glesc_graph_last_glsl(g), "#define GEMV_QUAD"),
                          "%s: no quarter units", glesc_dtype_name(t));
            if (m == 1 && plain)
                cr_expect(strstr(glesc_graph_last_glsl(g), "#define GEMV_PLAIN"),
                          "%s: no plain quarter units", glesc_dtype_name(t));
            glesc_graph_destroy(g);
        }
        free_weight(&wg);
        free_weight(&wu);
    }
    glesc_context_destroy(c);
}

/* Both tests below compare bits, so the K split of the GEMM (m 12) is pinned
 * to none: a GPU's context may split a dispatch of few tiles into parts
 * whose partial sums add in another order (GLESC_GEMM slots), while the
 * context of 64 KiB storage blocks has no room for their scratch (the
 * variable is read whenever a kernel is generated). */
static void pin_gemm_split(void)
{
    setenv("GLESC_GEMM", "slots=1", 1);
}

/* A quantized weight split into row chunks (64 KiB storage blocks) gives
 * exactly the unsplit result: GEMV, GEMM, the gate/up pair and get_rows. */
Test(quant_graph, chunked_weights_match)
{
    pin_gemm_split();
    glesc_context *small;
    glesc_context_options o = {0};
    o.cache_dir = "off";
    o.max_storage_block_size = 64 << 10;
    cr_assert_eq(glesc_context_create(&o, &small), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context *cs[2] = {ctx, small};
    float *res[2][4] = {{0}};
    int64_t k = 1024, n = 300; /* q4_k rows of 576 bytes: 113 per chunk, 3 chunks */
    for (int c = 0; c < 2; c++) {
        cr_assert_eq(glesc_context_make_current(cs[c]), GLESC_OK);
        qweight wg = make_weight(cs[c], GLESC_DTYPE_Q4_K, k, n, 41);
        qweight wu = make_weight(cs[c], GLESC_DTYPE_Q4_K, k, n, 42);
        cr_expect_eq(wg.w->st.n_chunks, c ? 3 : 1);
        for (int i = 0; i < 2; i++) {
            int64_t m = i ? 12 : 1; /* activations must fit 64 KiB too */
            glesc_graph *g = glesc_graph_create(cs[c]);
            glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){k, m}, 43, -1, 1);
            glesc_tensor *outs[2] = {
                glesc_matmul(g, wg.w, x),
                glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg.w, x)), glesc_matmul(g, wu.w, x))};
            cr_assert_not_null(outs[1], "%s", glesc_context_errmsg(cs[c]));
            cr_assert_eq(glesc_graph_compute(g, outs, 2), GLESC_OK, "%s",
                         glesc_context_errmsg(cs[c]));
            res[c][2 * i] = tg_read(outs[0]);
            res[c][2 * i + 1] = tg_read(outs[1]);
            glesc_compute_stats s;
            glesc_graph_stats(g, &s);
            cr_expect_eq(s.dispatches, c ? 6 : 2, "%d dispatches", s.dispatches);
            if (i == 1) {
                float *xv = tg_read(x);
                double e = worst_error(wg.deq, xv, res[c][2 * i], k, n, m);
                cr_log_info("chunks %d: GEMM error %.3g", wg.w->st.n_chunks, e);
                cr_expect(e < TOL);
                free(xv);
            }
            glesc_graph_destroy(g);
        }
        glesc_graph *g = glesc_graph_create(cs[c]);
        int32_t idx[] = {299, 0, 113, 112, 226, 150};
        glesc_tensor *it = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){6});
        cr_assert_eq(glesc_tensor_write(it, idx, sizeof idx), GLESC_OK);
        glesc_tensor *r = glesc_get_rows(g, wg.w, it);
        cr_assert_eq(glesc_graph_compute(g, &r, 1), GLESC_OK, "%s", glesc_context_errmsg(cs[c]));
        float *rows = tg_read(r);
        for (int j = 0; j < 6; j++)
            cr_expect_eq(memcmp(rows + j * k, wg.deq + idx[j] * k, (size_t)k * 4), 0,
                         "get_rows row %d (chunks %d)", idx[j], wg.w->st.n_chunks);
        free(rows);
        glesc_graph_destroy(g);
        free_weight(&wg);
        free_weight(&wu);
    }
    for (int i = 0; i < 4; i++) {
        int64_t cnt = n * (i < 2 ? 1 : 12);
        cr_expect_eq(memcmp(res[0][i], res[1][i], (size_t)cnt * 4), 0,
                     "output %d differs between split and whole weights", i);
        free(res[0][i]);
        free(res[1][i]);
    }
    glesc_context_destroy(small);
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
}

/* A grouped matmul (q, k, v of one activation: one kernel, workgroups pick
 * their matmul by row range) over weights of different types and row
 * counts, as a Q4_K_M file has (q6_k attn_v): one dispatch, each result
 * equal to its own product; split into row chunks (3, 2 and 1 of them)
 * it takes one dispatch per chunk and gives exactly the same values. */
Test(quant_graph, grouped_matmul_of_mixed_types_and_chunks)
{
    pin_gemm_split();
    glesc_context *small;
    glesc_context_options o = {0};
    o.cache_dir = "off";
    o.max_storage_block_size = 64 << 10;
    cr_assert_eq(glesc_context_create(&o, &small), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context *cs[2] = {ctx, small};
    static const glesc_dtype types[3] = {GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_Q4_0};
    static const int64_t rows[3] = {300, 150, 64};
    int64_t k = 1024;
    float *res[2][2][3] = {{{0}}};
    for (int c = 0; c < 2; c++) {
        cr_assert_eq(glesc_context_make_current(cs[c]), GLESC_OK);
        qweight w[3];
        for (int j = 0; j < 3; j++)
            w[j] = make_weight(cs[c], types[j], k, rows[j], 60 + (uint32_t)j);
        cr_expect_eq(w[0].w->st.n_chunks, c ? 3 : 1);
        cr_expect_eq(w[1].w->st.n_chunks, c ? 2 : 1);
        for (int i = 0; i < 2; i++) {
            int64_t m = i ? 12 : 1;
            glesc_graph *g = glesc_graph_create(cs[c]);
            glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){k, m}, 64, -1, 1);
            glesc_tensor *outs[3];
            for (int j = 0; j < 3; j++)
                outs[j] = glesc_matmul(g, w[j].w, x);
            cr_assert_eq(glesc_graph_compute(g, outs, 3), GLESC_OK, "%s",
                         glesc_context_errmsg(cs[c]));
            glesc_compute_stats s;
            glesc_graph_stats(g, &s);
            cr_expect_eq(s.kernels, 1, "%d kernels", s.kernels);
            cr_expect_eq(s.dispatches, c ? 3 : 1, "%d dispatches", s.dispatches);
            float *xv = tg_read(x);
            for (int j = 0; j < 3; j++) {
                res[c][i][j] = tg_read(outs[j]);
                double e = worst_error(w[j].deq, xv, res[c][i][j], k, rows[j], m);
                cr_log_info("group member %d (%s, chunks %d, m %lld): error %.3g", j,
                            glesc_dtype_name(types[j]), w[j].w->st.n_chunks, (long long)m, e);
                cr_expect(e < TOL, "member %d: %.3g", j, e);
            }
            free(xv);
            glesc_graph_destroy(g);
        }
        for (int j = 0; j < 3; j++)
            free_weight(&w[j]);
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            int64_t cnt = rows[j] * (i ? 12 : 1);
            cr_expect_eq(memcmp(res[0][i][j], res[1][i][j], (size_t)cnt * 4), 0,
                         "member %d (m case %d) differs between split and whole weights", j, i);
            free(res[0][i][j]);
            free(res[1][i][j]);
        }
    glesc_context_destroy(small);
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
}

/* Every 2-D tensor of a shared GGUF model: uploaded, read back, multiplied
 * (m = 1) and compared with the CPU; returns the number checked. */
static int check_model(const char *path)
{
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    int checked = 0;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info ti;
        cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
        if (ti.n_dims != 2 || !quant_gpu_readable(ti.type))
            continue;
        qweight q = {0};
        q.k = ti.ne[0];
        q.n = ti.ne[1];
        q.deq = malloc((size_t)(q.k * q.n) * sizeof *q.deq);
        cr_assert_eq(quant_dequantize(ti.type, ti.data, q.deq, q.k * q.n), GLESC_OK);
        q.w = glesc_weight_new(ctx, ti.type, 2, ti.ne);
        cr_assert_not_null(q.w, "%s", glesc_context_errmsg(ctx));
        glesc_tensor_set_name(q.w, ti.name);
        cr_assert_eq(glesc_tensor_write(q.w, ti.data, (size_t)ti.size), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        double e = check_matmul(ctx, &q, 1, (uint32_t)i, NULL);
        cr_log_info("%s: %-24s %-5s [%lld, %lld]: GEMV error %.3g", path + strlen(path) - 20,
                    ti.name, glesc_dtype_name(ti.type), (long long)q.k, (long long)q.n, e);
        cr_expect(e < TOL, "%s: %s (%s): GEMV error %.3g", path, ti.name, glesc_dtype_name(ti.type),
                  e);
        free(q.deq);
        glesc_weight_free(q.w);
        checked++;
    }
    glesc_gguf_close(f);
    return checked;
}

Test(quant_graph, tiny_q4_k_m_model)
{
    TEST_REQUIRE_SHARED(path, "reference/models/tiny-q4_k_m.gguf");
    cr_expect_eq(check_model(path), 16, "16 matrices (13 q4_k, 3 q6_k)");
    free(path);
}

/* The other quantized shared models, each where present. */
Test(quant_graph, shared_quantized_models)
{
    static const char *const files[] = {
        "models/extra/mqa-q4_k.gguf",
        "models/extra/mqa-q6_k.gguf",
        "models/extra/q5_0.gguf",
        "models/TinyStories-656K-Q8_0.gguf",
    };
    TEST_REQUIRE_SHARED(first, files[0]);
    free(first);
    for (size_t i = 0; i < CORE_ARRAY_LEN(files); i++) {
        char *path = test_shared_path(files[i]);
        if (!path) {
            cr_log_info("%s is absent: skipped", files[i]);
            continue;
        }
        cr_expect_gt(check_model(path), 0, "%s: no matrix checked", files[i]);
        free(path);
    }
}

/* 3-D quantized weights: batched matmul (W broadcast over X's batches) and
 * get_rows with a table per batch, against the CPU reference evaluation. */
Test(quant_graph, batched_weights)
{
    glesc_dtype types[] = {GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q3_K};
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        glesc_dtype t = types[i];
        glesc_tensor *w = glesc_weight_new(ctx, t, 3, (int64_t[]){256, 9, 2});
        cr_assert_not_null(w, "%s", glesc_context_errmsg(ctx));
        tg_fill(w, 50 + (uint32_t)i, -1, 1); /* quantized by glesc_tensor_write_f32 */
        for (int64_t m = 3; m <= 67; m += 64) {
            glesc_graph *g = glesc_graph_create(ctx);
            /* X's 4 batches over W's 2: W batch b / 2 */
            glesc_tensor *x = tg_input(g, F32, 3, (int64_t[]){256, m, 4}, 51, -1, 1);
            glesc_tensor *idx = glesc_tensor_new(g, GLESC_DTYPE_I32, 2, (int64_t[]){4, 2});
            int32_t iv[] = {8, 0, 3, 3, 1, 7, 8, 2};
            cr_assert_eq(glesc_tensor_write(idx, iv, sizeof iv), GLESC_OK);
            glesc_tensor *outs[] = {glesc_matmul(g, w, x), glesc_get_rows(g, w, idx)};
            cr_assert_not_null(outs[0], "%s", glesc_context_errmsg(ctx));
            cr_assert_not_null(outs[1], "%s", glesc_context_errmsg(ctx));
            double e = tg_check(g, outs, 2, 1e-10, glesc_dtype_name(t));
            cr_log_info("%s batched W [256, 9, 2], m = %lld: NMSE %.3g", glesc_dtype_name(t),
                        (long long)m, e);
            glesc_graph_destroy(g);
        }
        glesc_weight_free(w);
    }
}
