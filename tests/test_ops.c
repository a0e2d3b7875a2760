/*
 * test_ops.c — every op against its CPU reference, table-driven: a row per
 * op (input range, tolerance), run over odd sizes, broadcasting and
 * non-contiguous views, in f32 and f16. Errors are NMSE (see
 * test_graph_util.h); each case logs its worst error.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "graph/graph.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define F16 GLESC_DTYPE_F16

typedef struct shape {
    int ndim;
    int64_t ne[4];
} shape;

/* Odd sizes around warp/workgroup multiples, and above a thousand. */
static const shape shapes[] = {
    {1, {1}},   {1, {3}},   {1, {31}},      {1, {33}},
    {1, {255}}, {1, {257}}, {2, {1031, 3}}, {4, {3, 5, 7, 2}},
};

TEST_GPU_SUITE(ops);

/* ---- unary ---- */

typedef struct unary_row {
    glesc_op op;
    float lo, hi;
    double tol;
} unary_row;

static const unary_row unary_rows[] = {
    {GLESC_OP_NEG, -3, 3, 1e-12},       {GLESC_OP_ABS, -3, 3, 1e-12},
    {GLESC_OP_SQR, -3, 3, 1e-12},       {GLESC_OP_SQRT, 0.01f, 5, 1e-10},
    {GLESC_OP_RSQRT, 0.05f, 5, 1e-10},  {GLESC_OP_EXP, -5, 5, 1e-10},
    {GLESC_OP_LOG, 0.01f, 10, 1e-10},   {GLESC_OP_SIN, -6, 6, 1e-10},
    {GLESC_OP_COS, -6, 6, 1e-10},       {GLESC_OP_TANH, -12, 12, 1e-10},
    {GLESC_OP_SIGMOID, -12, 12, 1e-10}, {GLESC_OP_RELU, -3, 3, 1e-12},
    {GLESC_OP_GELU, -6, 6, 1e-10},      {GLESC_OP_GELU_ERF, -6, 6, 1e-10},
    {GLESC_OP_SILU, -12, 12, 1e-10},    {GLESC_OP_SOFTPLUS, -40, 40, 1e-10},
    {GLESC_OP_STEP, -3, 3, 1e-12},
};

static double run_unary(const unary_row *r, glesc_dtype dt, int fusion)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, fusion);
    glesc_tensor *outs[CORE_ARRAY_LEN(shapes) + 1];
    int n = 0;
    for (size_t s = 0; s < CORE_ARRAY_LEN(shapes); s++) {
        glesc_tensor *x =
            tg_input(g, dt, shapes[s].ndim, shapes[s].ne, (uint32_t)(s + 1), r->lo, r->hi);
        outs[n] = glesc_unary(g, r->op, x);
        cr_assert_not_null(outs[n], "%s", glesc_context_errmsg(ctx));
        n++;
    }
    /* a non-contiguous source: the transpose of a [33, 31] input */
    glesc_tensor *x = tg_input(g, dt, 2, (int64_t[]){33, 31}, 99, r->lo, r->hi);
    outs[n++] = glesc_unary(g, r->op, glesc_transpose(g, x));
    char what[64];
    snprintf(what, sizeof what, "%s %s", glesc_op_name(r->op), glesc_dtype_name(dt));
    double worst = tg_check(g, outs, n, r->tol, what);
    glesc_graph_destroy(g);
    return worst;
}

Test(ops, unary)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(unary_rows); i++) {
        double e32 = run_unary(&unary_rows[i], F32, 0);
        double e16 = run_unary(&unary_rows[i], F16, 0);
        cr_log_info("%-10s worst NMSE f32 %.3g, f16 input %.3g", glesc_op_name(unary_rows[i].op),
                    e32, e16);
    }
}

Test(ops, scale_clamp_cast_cont)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){257, 3}, 5, -4, 4);
    glesc_tensor *h = tg_input(g, F16, 2, (int64_t[]){33, 31}, 6, -4, 4);
    glesc_tensor *outs[] = {
        glesc_scale(g, x, 0.75f, -0.5f),
        glesc_clamp(g, x, -1.5f, 2.25f),
        glesc_cast(g, x, GLESC_DTYPE_F16),
        glesc_cast(g, x, GLESC_DTYPE_BF16),
        glesc_cast(g, glesc_scale(g, x, 10, 0), GLESC_DTYPE_I32),
        glesc_cast(g, h, F32),
        glesc_cont(g, glesc_transpose(g, h)),
        glesc_cont(g, glesc_permute(g, glesc_reshape(g, x, 3, (int64_t[]){257, 1, 3}),
                                    (int[]){2, 0, 1, 3})),
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(outs); i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    /* Rounding to f16/bf16 may differ by one unit in the last place where
     * the GPU's conversion rounds differently; i32 truncation exactly. */
    double e = tg_check(g, outs, (int)CORE_ARRAY_LEN(outs), 1e-6, "scale/clamp/cast/cont");
    cr_log_info("scale, clamp, cast, cont: worst NMSE %.3g", e);
    cr_assert_eq(glesc_tensor_dtype(outs[2]), GLESC_DTYPE_F16);
    cr_assert_eq(glesc_tensor_dtype(outs[4]), GLESC_DTYPE_I32);
    cr_assert_eq(glesc_tensor_dtype(outs[6]), F16);
    glesc_graph_destroy(g);
}

/* ---- binary ---- */

typedef struct binary_row {
    glesc_op op;
    float alo, ahi, blo, bhi;
    double tol;
} binary_row;

static const binary_row binary_rows[] = {
    {GLESC_OP_ADD, -3, 3, -3, 3, 1e-12},   {GLESC_OP_SUB, -3, 3, -3, 3, 1e-12},
    {GLESC_OP_MUL, -3, 3, -3, 3, 1e-12},   {GLESC_OP_DIV, -3, 3, 0.5f, 3, 1e-12},
    {GLESC_OP_MAX, -3, 3, -3, 3, 1e-12},   {GLESC_OP_MIN, -3, 3, -3, 3, 1e-12},
    {GLESC_OP_POW, 0.1f, 3, -2, 2, 1e-10},
};

typedef struct bshape {
    shape a, b;
} bshape;

static const bshape bshapes[] = {
    {{1, {1}}, {1, {1}}},
    {{1, {257}}, {1, {257}}},
    {{1, {1}}, {1, {1031}}},      /* scalar broadcast */
    {{2, {33, 7}}, {2, {33, 1}}}, /* row broadcast */
    {{2, {33, 1}}, {2, {1, 7}}},  /* outer product shape */
    {{4, {3, 5, 7, 2}}, {4, {3, 1, 7, 1}}},
    {{2, {31, 3}}, {1, {31}}}, /* ranks differ */
};

static double run_binary(const binary_row *r, glesc_dtype dt)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[CORE_ARRAY_LEN(bshapes) + 2];
    int n = 0;
    for (size_t s = 0; s < CORE_ARRAY_LEN(bshapes); s++) {
        const bshape *bs = &bshapes[s];
        glesc_tensor *a =
            tg_input(g, dt, bs->a.ndim, bs->a.ne, (uint32_t)(2 * s + 1), r->alo, r->ahi);
        glesc_tensor *b =
            tg_input(g, F32, bs->b.ndim, bs->b.ne, (uint32_t)(2 * s + 2), r->blo, r->bhi);
        outs[n] = glesc_binary(g, r->op, a, b);
        cr_assert_not_null(outs[n], "%s", glesc_context_errmsg(ctx));
        n++;
    }
    /* non-contiguous operands: a transposed and a broadcast view */
    glesc_tensor *a = tg_input(g, dt, 2, (int64_t[]){31, 33}, 77, r->alo, r->ahi);
    glesc_tensor *b = tg_input(g, F32, 2, (int64_t[]){1, 31}, 78, r->blo, r->bhi);
    outs[n++] = glesc_binary(g, r->op, glesc_transpose(g, a),
                             glesc_broadcast(g, b, 2, (int64_t[]){33, 31}));
    glesc_tensor *c = tg_input(g, F32, 3, (int64_t[]){8, 6, 5}, 79, r->blo, r->bhi);
    /* windows with offsets: rows of a (row stride 31) and c's second plane */
    size_t es = dt == F16 ? 2 : 4;
    outs[n++] = glesc_binary(
        g, r->op, glesc_view(g, a, 2, (int64_t[]){8, 6}, (size_t[]){0, 31 * es}, 3 * es),
        glesc_view(g, c, 2, (int64_t[]){8, 6}, (size_t[]){0, 8 * 4}, 8 * 6 * 4));
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    char what[64];
    snprintf(what, sizeof what, "%s %s", glesc_op_name(r->op), glesc_dtype_name(dt));
    double worst = tg_check(g, outs, n, r->tol, what);
    glesc_graph_destroy(g);
    return worst;
}

Test(ops, binary)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(binary_rows); i++) {
        double e32 = run_binary(&binary_rows[i], F32);
        double e16 = run_binary(&binary_rows[i], F16);
        cr_log_info("%-4s worst NMSE f32 %.3g, f16 input %.3g", glesc_op_name(binary_rows[i].op),
                    e32, e16);
    }
}

/* ---- reductions, softmax, norms ---- */

Test(ops, reductions)
{
    static const glesc_op ops_[] = {GLESC_OP_SUM, GLESC_OP_MEAN, GLESC_OP_REDUCE_MAX,
                                    GLESC_OP_REDUCE_MIN, GLESC_OP_ARGMAX};
    static const shape rs[] = {
        {1, {1}}, {2, {257, 3}}, {3, {31, 33, 2}}, {4, {3, 5, 7, 2}}, {1, {1031}}};
    for (size_t o = 0; o < CORE_ARRAY_LEN(ops_); o++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *outs[32];
        int n = 0;
        for (size_t s = 0; s < CORE_ARRAY_LEN(rs); s++) {
            glesc_dtype dt = s % 2 ? F16 : F32;
            glesc_tensor *x = tg_input(g, dt, rs[s].ndim, rs[s].ne, (uint32_t)(s + 3), -3, 3);
            for (int ax = 0; ax < rs[s].ndim; ax++) {
                outs[n] = glesc_reduce(g, ops_[o], x, ax);
                cr_assert_not_null(outs[n], "%s", glesc_context_errmsg(ctx));
                n++;
            }
        }
        /* along a transposed view */
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){33, 31}, 50, -3, 3);
        outs[n++] = glesc_reduce(g, ops_[o], glesc_transpose(g, x), 0);
        double e = tg_check(g, outs, n, 1e-10, glesc_op_name(ops_[o]));
        cr_log_info("%-10s worst NMSE %.3g (%d cases)", glesc_op_name(ops_[o]), e, n);
        if (ops_[o] == GLESC_OP_ARGMAX)
            cr_assert_eq(glesc_tensor_dtype(outs[0]), GLESC_DTYPE_I32);
        glesc_graph_destroy(g);
    }
}

/* argmax: ties go to the first maximum, a row holding a NaN gives -1 (the
 * CPU reference and the kernel, along both axes). */
Test(ops, argmax_ties_and_nans)
{
    glesc_graph *g = glesc_graph_create(ctx);
    float v[4 * 300];
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 300; i++)
            v[r * 300 + i] = (float)((i * 7 + r) % 13) - 20.0f;
    v[0 * 300 + 17] = v[0 * 300 + 250] = 5.0f; /* row 0: a tie, 17 wins */
    v[1 * 300 + 299] = 7.0f;                   /* row 1: the last element */
    v[2 * 300 + 40] = NAN;                     /* row 2: -1 */
    v[3 * 300 + 0] = INFINITY;                 /* row 3: +inf is a maximum */
    glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){300, 4});
    cr_assert_eq(glesc_tensor_write_f32(x, v, 4 * 300), GLESC_OK);
    glesc_tensor *outs[2] = {glesc_reduce(g, GLESC_OP_ARGMAX, x, 0),
                             glesc_reduce(g, GLESC_OP_ARGMAX, glesc_transpose(g, x), 1)};
    cr_assert_eq(glesc_graph_compute(g, outs, 2), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    static const int32_t want[4] = {17, 299, -1, 0};
    for (int o = 0; o < 2; o++) {
        int32_t got[4];
        cr_assert_eq(glesc_tensor_read(outs[o], got, sizeof got), GLESC_OK);
        for (int r = 0; r < 4; r++)
            cr_expect_eq(got[r], want[r], "argmax %d, row %d: %d, want %d", o, r, got[r], want[r]);
    }
    float *ref[2];
    cr_assert_eq(graph_cpu_eval(g, outs, 2, ref), GLESC_OK);
    for (int o = 0; o < 2; o++) {
        for (int r = 0; r < 4; r++)
            cr_expect_eq((int32_t)ref[o][r], want[r], "reference %d, row %d: %g", o, r,
                         (double)ref[o][r]);
        free(ref[o]);
    }
    glesc_graph_destroy(g);
}

Test(ops, softmax)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[16];
    int n = 0;
    static const shape ss[] = {
        {1, {1}}, {2, {7, 3}}, {2, {257, 5}}, {3, {33, 31, 2}}, {2, {1031, 2}}};
    for (size_t s = 0; s < CORE_ARRAY_LEN(ss); s++) {
        glesc_tensor *x = tg_input(g, s % 2 ? F16 : F32, ss[s].ndim, ss[s].ne, (uint32_t)s, -5, 5);
        outs[n++] = glesc_softmax(g, x, NULL, 1.0f, false);
        glesc_tensor *m =
            tg_input(g, F32, 2, (int64_t[]){ss[s].ne[0], ss[s].ndim > 1 ? ss[s].ne[1] : 1},
                     (uint32_t)s + 40, -2, 0);
        outs[n++] = glesc_softmax(g, x, m, 0.125f, s % 2 == 0);
    }
    /* causal with more rows than columns: early rows are fully masked → zeros */
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){3, 5}, 77, -5, 5);
    outs[n++] = glesc_softmax(g, x, NULL, 1.0f, true);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    double e = tg_check(g, outs, n, 1e-10, "softmax");
    cr_log_info("softmax     worst NMSE %.3g (%d cases)", e, n);
    float *r = tg_read(outs[n - 1]);
    cr_assert_eq(r[0], 0.0f);
    cr_assert_eq(r[3], 0.0f);
    cr_assert_float_eq(r[6] + r[7] + r[8], 1.0f, 1e-6);
    free(r);
    glesc_graph_destroy(g);
}

Test(ops, norms)
{
    static const shape ns[] = {
        {1, {1}}, {2, {3, 5}}, {2, {257, 3}}, {3, {1031, 2, 2}}, {2, {4096, 2}}};
    for (int layer = 0; layer < 2; layer++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *outs[16];
        int n = 0;
        for (size_t s = 0; s < CORE_ARRAY_LEN(ns); s++) {
            glesc_tensor *x =
                tg_input(g, s % 2 ? F16 : F32, ns[s].ndim, ns[s].ne, (uint32_t)s + 9, -2, 3);
            outs[n++] = layer ? glesc_layer_norm(g, x, 1e-5f) : glesc_rms_norm(g, x, 1e-6f);
        }
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){31, 33}, 5, -2, 2);
        outs[n++] = layer ? glesc_layer_norm(g, glesc_transpose(g, x), 1e-5f)
                          : glesc_rms_norm(g, glesc_transpose(g, x), 1e-6f);
        /* a one-element layer norm is 0 everywhere; NMSE needs a nonzero reference */
        double e = tg_check(g, outs + layer, n - layer, 1e-10, layer ? "layer_norm" : "rms_norm");
        cr_log_info("%-10s worst NMSE %.3g", layer ? "layer_norm" : "rms_norm", e);
        glesc_graph_destroy(g);
    }
}

/* ---- matmul ---- */

typedef struct mm_case {
    int64_t k, n, m;
} mm_case;

/* m ≤ 8 takes the GEMV kernel, larger m the tiled GEMM (partial tiles too). */
static const mm_case mm_cases[] = {
    {1, 1, 1},    {3, 5, 1},      {33, 31, 2},   {255, 257, 8}, {257, 33, 9},
    {64, 64, 64}, {1031, 31, 17}, {31, 257, 65}, {4096, 3, 1},
};

static double run_matmul(glesc_dtype wt, glesc_dtype xt)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[16];
    int n = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(mm_cases); i++) {
        const mm_case *c = &mm_cases[i];
        glesc_tensor *w = tg_input(g, wt, 2, (int64_t[]){c->k, c->n}, (uint32_t)i, -1, 1);
        glesc_tensor *x = tg_input(g, xt, 2, (int64_t[]){c->k, c->m}, (uint32_t)i + 50, -1, 1);
        outs[n++] = glesc_matmul(g, w, x);
    }
    /* batched with broadcast weights: W [33, 17, 2, 1], X [33, 9, 4, 3] */
    glesc_tensor *w = tg_input(g, wt, 4, (int64_t[]){33, 17, 2, 1}, 90, -1, 1);
    glesc_tensor *x = tg_input(g, xt, 4, (int64_t[]){33, 9, 4, 3}, 91, -1, 1);
    outs[n++] = glesc_matmul(g, w, x);
    x = tg_input(g, xt, 4, (int64_t[]){33, 3, 4, 3}, 92, -1, 1);
    outs[n++] = glesc_matmul(g, w, x);
    /* a transposed activation: X = [m, k]ᵀ */
    x = tg_input(g, xt, 2, (int64_t[]){19, 33}, 93, -1, 1);
    glesc_tensor *w2 = tg_input(g, wt, 2, (int64_t[]){33, 29}, 94, -1, 1);
    outs[n++] = glesc_matmul(g, w2, glesc_transpose(g, x));
    x = tg_input(g, xt, 2, (int64_t[]){3, 33}, 95, -1, 1);
    outs[n++] = glesc_matmul(g, w2, glesc_transpose(g, x));
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    char what[64];
    snprintf(what, sizeof what, "matmul w %s x %s", glesc_dtype_name(wt), glesc_dtype_name(xt));
    double e = tg_check(g, outs, n, 1e-9, what);
    glesc_graph_destroy(g);
    return e;
}

Test(ops, matmul)
{
    static const glesc_dtype wts[] = {F32, F16, GLESC_DTYPE_BF16};
    for (size_t i = 0; i < CORE_ARRAY_LEN(wts); i++) {
        double e = run_matmul(wts[i], F32);
        cr_log_info("matmul W %-4s X f32: worst NMSE %.3g", glesc_dtype_name(wts[i]), e);
    }
    double e = run_matmul(F16, F16);
    cr_log_info("matmul W f16  X f16: worst NMSE %.3g", e);
}

Test(ops, matmul_gemv_threshold_is_an_option)
{
    for (int mmax = 1; mmax <= 8; mmax += 7) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_graph_options o = {0};
        o.gemv_max_m = mmax;
        cr_assert_eq(glesc_graph_set_options(g, &o), GLESC_OK);
        glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){100, 37}, 1, -1, 1);
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){100, 5}, 2, -1, 1);
        glesc_tensor *y = glesc_matmul(g, w, x);
        tg_check(g, &y, 1, 1e-9, "matmul m=5");
        const char *glsl = glesc_graph_last_glsl(g);
        cr_assert_not_null(strstr(glsl, mmax == 8 ? "GEMV" : "GEMM"), "gemv_max_m %d", mmax);
        glesc_graph_destroy(g);
    }
}

/* ---- rows, concat, copies ---- */

Test(ops, get_rows)
{
    static const glesc_dtype tts[] = {F32, F16, GLESC_DTYPE_BF16};
    for (size_t t = 0; t < CORE_ARRAY_LEN(tts); t++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *tab = tg_input(g, tts[t], 2, (int64_t[]){33, 100}, 1, -1, 1);
        glesc_tensor *idx = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){7});
        tg_write(idx, (float[]){3, 99, 0, 3, -1, 100, 42}); /* -1 and 100 read as zeros */
        glesc_tensor *tab3 = tg_input(g, tts[t], 3, (int64_t[]){5, 9, 2}, 2, -1, 1);
        glesc_tensor *idx2 = tg_input(g, GLESC_DTYPE_I32, 2, (int64_t[]){4, 2}, 3, 0, 9);
        glesc_tensor *one = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){1});
        tg_write(one, (float[]){57});
        glesc_tensor *outs[] = {glesc_get_rows(g, tab, idx), glesc_get_rows(g, tab3, idx2),
                                glesc_get_rows(g, tab, one)};
        double e = tg_check(g, outs, 3, 1e-12, "get_rows");
        cr_log_info("get_rows %-4s worst NMSE %.3g", glesc_dtype_name(tts[t]), e);
        glesc_graph_destroy(g);
    }
}

Test(ops, set_rows)
{
    static const glesc_dtype dts[] = {F32, F16, GLESC_DTYPE_BF16};
    for (size_t t = 0; t < CORE_ARRAY_LEN(dts); t++) {
        glesc_tensor *cache = glesc_weight_new(ctx, dts[t], 3, (int64_t[]){33, 20, 2});
        glesc_tensor *cache2 = glesc_weight_new(ctx, dts[t], 2, (int64_t[]){7, 9});
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fill(cache, 1, -1, 1);
        glesc_tensor *src = tg_input(g, F32, 3, (int64_t[]){33, 3, 2}, 2, -3, 3);
        glesc_tensor *idx = glesc_tensor_new(g, GLESC_DTYPE_I32, 2, (int64_t[]){3, 2});
        tg_write(idx, (float[]){5, 0, 19, 7, 8, 25}); /* 25 is past the end: dropped */
        glesc_tensor *src2 = tg_input(g, F32, 2, (int64_t[]){7, 3}, 3, -3, 3);
        glesc_tensor *idx1 = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){3});
        tg_write(idx1, (float[]){8, 1, 4});
        glesc_tensor *outs[] = {glesc_set_rows(g, cache, src, idx),
                                glesc_set_rows(g, cache2, src2, idx1)};
        cr_assert_not_null(outs[0], "%s", glesc_context_errmsg(ctx));
        double e = tg_check(g, outs, 2, 1e-12, "set_rows");
        cr_log_info("set_rows into %-4s worst NMSE %.3g", glesc_dtype_name(dts[t]), e);
        glesc_graph_destroy(g);
        glesc_weight_free(cache);
        glesc_weight_free(cache2);
    }
}

Test(ops, concat_and_cpy)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[8];
    int n = 0;
    for (int d = 0; d < 4; d++) {
        int64_t sa[4] = {3, 5, 2, 2}, sb[4] = {3, 5, 2, 2};
        sb[d] = 4;
        glesc_tensor *a = tg_input(g, d % 2 ? F16 : F32, 4, sa, (uint32_t)d, -1, 1);
        glesc_tensor *b = tg_input(g, F32, 4, sb, (uint32_t)d + 10, -1, 1);
        outs[n++] = glesc_concat(g, a, b, d);
    }
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){31, 33}, 20, -1, 1);
    glesc_tensor *dst = glesc_weight_new(ctx, F16, 2, (int64_t[]){40, 40});
    glesc_tensor *win = glesc_view(g, dst, 2, (int64_t[]){33, 31}, (size_t[]){0, 80}, 2 * 3);
    outs[n++] = glesc_cpy(g, glesc_transpose(g, a), win);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    double e = tg_check(g, outs, n, 1e-6, "concat/cpy");
    cr_log_info("concat, cpy: worst NMSE %.3g", e);
    glesc_graph_destroy(g);
    glesc_weight_free(dst);
}

#include "kernels/kernels.h"

/* The two halves of the op table agree: graph's semantic row says what kind
 * an op is, kernels' codegen row must then say how its code is made (an
 * expression for elementwise ops, a generator for anchors, nothing for
 * views and leaves); a variant, and fusion capabilities, only where there
 * is a generator. */
Test(ops, codegen_rows_match_the_semantic_rows)
{
    for (int op = 0; op < GLESC_OP_COUNT_; op++) {
        const graph_op_info *sem = graph_op((glesc_op)op);
        const kernels_codegen *cg = kernels_op((glesc_op)op);
        const char *name = sem->name;
        switch (sem->kind) {
        case GRAPH_KIND_ELTWISE:
            cr_expect(cg->expr && !cg->gen, "%s: elementwise without an expression", name);
            cr_expect(cg->expr != kernels_expr_template || cg->glsl, "%s: template without text",
                      name);
            break;
        case GRAPH_KIND_ANCHOR:
            cr_expect(cg->gen && !cg->expr && !cg->glsl, "%s: anchor without a generator", name);
            break;
        default:
            cr_expect(!cg->gen && !cg->expr && !cg->glsl, "%s: a %s has no code", name,
                      sem->kind == GRAPH_KIND_VIEW ? "view" : "leaf");
        }
        cr_expect(!cg->variant || cg->gen, "%s: a variant without a generator", name);
        bool caps = cg->prologue || cg->epilogue || cg->row_scale || cg->norm_prologue ||
                    cg->norm_deferred || cg->row_write_prologue || cg->extra_bindings ||
                    cg->reduce_epilogue || cg->takes_reduce;
        cr_expect(!caps || cg->gen, "%s: fusion capabilities without a generator", name);
        cr_expect(!(cg->prologue >> sem->arity) && !(cg->norm_prologue >> sem->arity) &&
                      !(cg->row_write_prologue >> sem->arity),
                  "%s: a capability on a source the op does not have", name);
        cr_expect(!cg->norm_deferred || cg->norm_prologue, "%s: norm_deferred without a source",
                  name);
    }
}
