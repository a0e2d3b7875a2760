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

#include "core/core.h"
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
    {1, {1}},        {1, {3}},         {1, {31}},          {1, {33}},
    {1, {255}},      {1, {257}},       {2, {1031, 3}},     {4, {3, 5, 7, 2}},
};

static glesc_context *ctx;

static void setup(void)
{
    ctx = test_context(NULL);
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
}

TestSuite(ops, .init = setup, .fini = teardown);

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
        glesc_tensor *x = tg_input(g, dt, shapes[s].ndim, shapes[s].ne, (uint32_t)(s + 1), r->lo,
                                   r->hi);
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
    {GLESC_OP_ADD, -3, 3, -3, 3, 1e-12}, {GLESC_OP_SUB, -3, 3, -3, 3, 1e-12},
    {GLESC_OP_MUL, -3, 3, -3, 3, 1e-12}, {GLESC_OP_DIV, -3, 3, 0.5f, 3, 1e-12},
    {GLESC_OP_MAX, -3, 3, -3, 3, 1e-12}, {GLESC_OP_MIN, -3, 3, -3, 3, 1e-12},
    {GLESC_OP_POW, 0.1f, 3, -2, 2, 1e-10},
};

typedef struct bshape {
    shape a, b;
} bshape;

static const bshape bshapes[] = {
    {{1, {1}}, {1, {1}}},
    {{1, {257}}, {1, {257}}},
    {{1, {1}}, {1, {1031}}},             /* scalar broadcast */
    {{2, {33, 7}}, {2, {33, 1}}},        /* row broadcast */
    {{2, {33, 1}}, {2, {1, 7}}},         /* outer product shape */
    {{4, {3, 5, 7, 2}}, {4, {3, 1, 7, 1}}},
    {{2, {31, 3}}, {1, {31}}},           /* ranks differ */
};

static double run_binary(const binary_row *r, glesc_dtype dt)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[CORE_ARRAY_LEN(bshapes) + 2];
    int n = 0;
    for (size_t s = 0; s < CORE_ARRAY_LEN(bshapes); s++) {
        const bshape *bs = &bshapes[s];
        glesc_tensor *a = tg_input(g, dt, bs->a.ndim, bs->a.ne, (uint32_t)(2 * s + 1), r->alo,
                                   r->ahi);
        glesc_tensor *b = tg_input(g, F32, bs->b.ndim, bs->b.ne, (uint32_t)(2 * s + 2), r->blo,
                                   r->bhi);
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
    outs[n++] = glesc_binary(g, r->op,
                             glesc_view(g, a, 2, (int64_t[]){8, 6}, (size_t[]){0, 31 * es}, 3 * es),
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
    static const shape rs[] = {{1, {1}}, {2, {257, 3}}, {3, {31, 33, 2}}, {4, {3, 5, 7, 2}},
                               {1, {1031}}};
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

Test(ops, softmax)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[16];
    int n = 0;
    static const shape ss[] = {{1, {1}}, {2, {7, 3}}, {2, {257, 5}}, {3, {33, 31, 2}},
                               {2, {1031, 2}}};
    for (size_t s = 0; s < CORE_ARRAY_LEN(ss); s++) {
        glesc_tensor *x = tg_input(g, s % 2 ? F16 : F32, ss[s].ndim, ss[s].ne, (uint32_t)s, -5, 5);
        outs[n++] = glesc_softmax(g, x, NULL, 1.0f, false);
        glesc_tensor *m = tg_input(g, F32, 2, (int64_t[]){ss[s].ne[0], ss[s].ndim > 1 ? ss[s].ne[1] : 1},
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
    static const shape ns[] = {{1, {1}}, {2, {3, 5}}, {2, {257, 3}}, {3, {1031, 2, 2}},
                               {2, {4096, 2}}};
    for (int layer = 0; layer < 2; layer++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *outs[16];
        int n = 0;
        for (size_t s = 0; s < CORE_ARRAY_LEN(ns); s++) {
            glesc_tensor *x = tg_input(g, s % 2 ? F16 : F32, ns[s].ndim, ns[s].ne, (uint32_t)s + 9,
                                       -2, 3);
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
