/*
 * test_vops.c — the vision ops that are not convolutions (pooling,
 * transposed convolution, leaky ReLU, ELU, hard-sigmoid, hard-swish, pad,
 * slice, gather, flatten, log-softmax, global pooling): each against its
 * CPU reference on the GPU, fusion on and off, with an explicit tolerance
 * (|gpu − ref| ≤ atol + rtol·|ref| per element; the worst error is logged),
 * the references against ONNX's own worked examples, and the refusals
 * (bad pads, axes, steps, types) with their messages.
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
#define I32 GLESC_DTYPE_I32

TEST_GPU_SUITE(vops);

/* Computes outs on the GPU and with the CPU references; every element must
 * be within atol + rtol·|ref|. Logs the worst absolute error; returns the
 * kernels of the compute. */
static int check(glesc_graph *g, glesc_tensor *const *outs, int n, double atol, double rtol,
                 const char *what)
{
    float *ref[8];
    cr_assert_leq(n, 8);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s: builder: %s", what, glesc_context_errmsg(ctx));
    cr_assert_eq(graph_cpu_eval(g, outs, n, ref), GLESC_OK, "%s: cpu eval: %s", what,
                 glesc_context_errmsg(ctx));
    glesc_status st = glesc_graph_compute(g, outs, n);
    cr_assert_eq(st, GLESC_OK, "%s: compute: %s", what, glesc_context_errmsg(ctx));
    double worst = 0;
    for (int i = 0; i < n; i++) {
        float *got = tg_read(outs[i]);
        int64_t ne = glesc_tensor_nelements(outs[i]);
        for (int64_t j = 0; j < ne; j++) {
            double e = fabs((double)got[j] - ref[i][j]);
            bool same_inf = isinf(got[j]) && got[j] == ref[i][j];
            cr_assert(same_inf || e <= atol + rtol * fabs(ref[i][j]),
                      "%s: output %d [%lld] of %lld: got %.9g want %.9g", what, i, (long long)j,
                      (long long)ne, got[j], ref[i][j]);
            if (!same_inf && e > worst)
                worst = e;
        }
        free(got);
        free(ref[i]);
    }
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_log_info("%s: worst |error| %.3g (tolerance %.1g + %.1g|ref|), %d kernels", what, worst,
                atol, rtol, s.kernels);
    return s.kernels;
}

/* Reads t and compares with want (a worked example). */
static void expect(glesc_tensor *t, const float *want, int64_t n, double tol, const char *what)
{
    cr_assert_not_null(t, "%s: %s", what, glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_nelements(t), n, "%s: %lld elements, want %lld", what,
                 (long long)glesc_tensor_nelements(t), (long long)n);
    cr_assert_eq(glesc_graph_compute(t->g, &t, 1), GLESC_OK, "%s: %s", what,
                 glesc_context_errmsg(ctx));
    float *got = tg_read(t);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(fabs(got[i] - want[i]) <= tol, "%s [%lld]: got %.7g want %.7g", what,
                  (long long)i, got[i], want[i]);
        worst = fmax(worst, fabs(got[i] - want[i]));
    }
    cr_log_info("%s: worst |error| %.3g against ONNX's example (tolerance %.1g)", what, worst, tol);
    free(got);
}

static glesc_tensor *input(glesc_graph *g, glesc_dtype dt, int ndim, const int64_t *shape,
                           uint32_t seed)
{
    return tg_input(g, dt, ndim, shape, seed, -2.0f, 2.0f);
}

static glesc_tensor *values(glesc_graph *g, glesc_dtype dt, int ndim, const int64_t *shape,
                            const float *v)
{
    glesc_tensor *t = glesc_tensor_new(g, dt, ndim, shape);
    cr_assert_not_null(t);
    tg_write(t, v);
    return t;
}

static void refused(glesc_tensor *t, const char *needle, const char *what)
{
    cr_assert_null(t, "%s was accepted", what);
    cr_assert(strstr(glesc_context_errmsg(ctx), needle), "%s: message '%s' lacks '%s'", what,
              glesc_context_errmsg(ctx), needle);
    cr_log_info("%s refused: %s", what, glesc_context_errmsg(ctx));
}

/* ---- activations ---- */

Test(vops, activations)
{
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){33, 7}, 1, -8, 8);
        glesc_tensor *h = tg_input(g, F16, 3, (int64_t[]){5, 3, 2}, 2, -8, 8);
        glesc_tensor *outs[] = {
            glesc_leaky_relu(g, x, 0.1f),
            glesc_leaky_relu(g, h, -0.5f),
            glesc_elu(g, x, 1.0f),
            glesc_elu(g, h, 0.5f),
            glesc_hard_sigmoid(g, x, 0.2f, 0.5f),
            glesc_hard_sigmoid(g, h, 0.3f, -0.1f),
            glesc_hard_swish(g, x),
            glesc_hard_swish(g, h),
        };
        check(g, outs, 4, 1e-6, 1e-5, "leaky_relu, elu (f32, f16)");
        check(g, outs + 4, 4, 1e-6, 1e-5, "hard_sigmoid, hard_swish (f32, f16)");
        glesc_graph_destroy(g);
    }
    /* they fuse like the other unary ops: one kernel for the chain */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *x = input(g, F32, 2, (int64_t[]){65, 3}, 3);
    glesc_tensor *y = glesc_hard_swish(
        g, glesc_elu(g, glesc_leaky_relu(g, glesc_hard_sigmoid(g, x, 0.4f, 0.1f), 0.2f), 0.7f));
    glesc_tensor *z = glesc_add(g, y, x);
    cr_assert_eq(check(g, &z, 1, 1e-6, 1e-5, "fused activation chain"), 1);
    glesc_graph_destroy(g);
}

/* ---- pad ---- */

Test(vops, pad)
{
    static const struct {
        int64_t pads[8];
        glesc_pad_mode mode;
    } cases[] = {
        {{1, 2, 0, 0, 3, 0, 0, 0}, GLESC_PAD_CONSTANT},
        {{2, 0, 1, 0, 1, 3, 0, 0}, GLESC_PAD_REFLECT},
        {{0, 4, 0, 0, 5, 1, 2, 0}, GLESC_PAD_EDGE},
        {{-1, 1, 0, 0, 2, -2, 0, 0}, GLESC_PAD_CONSTANT}, /* negative: crops */
        {{9, 0, 0, 0, 11, 0, 0, 0}, GLESC_PAD_REFLECT},   /* wider than the source */
        {{0, 0, 0, 1, 0, 0, 0, 2}, GLESC_PAD_EDGE},       /* a new dimension */
        {{0, 0, 0, 2, 0, 0, 0, 1}, GLESC_PAD_REFLECT},    /* reflect of one element */
    };
    for (int fusion = -1; fusion <= 1; fusion += 2)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
            glesc_graph *g = glesc_graph_create(ctx);
            tg_fusion(g, fusion);
            glesc_tensor *x = input(g, i % 2 ? F16 : F32, 3, (int64_t[]){5, 4, 3}, (uint32_t)i);
            glesc_tensor *y = glesc_pad(g, x, cases[i].pads, cases[i].mode, -1.5f);
            char what[64];
            snprintf(what, sizeof what, "pad case %zu (mode %d, fusion %d)", i, (int)cases[i].mode,
                     fusion);
            check(g, &y, 1, 1e-6, 1e-6, what);
            glesc_graph_destroy(g);
        }
    /* pad fuses with its neighbours: relu(pad(x + b)) is one kernel */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *x = input(g, F32, 2, (int64_t[]){7, 6}, 7),
                 *b = input(g, F32, 1, (int64_t[]){7}, 8);
    glesc_tensor *y =
        glesc_relu(g, glesc_pad(g, glesc_add(g, x, b), (int64_t[]){2, 1, 0, 0, 1, 2, 0, 0},
                                GLESC_PAD_REFLECT, 0));
    cr_assert_eq(check(g, &y, 1, 1e-6, 1e-6, "relu(pad(x + b))"), 1);
    /* i32 data (read as floats, exact below 2^24): ONNX's edge/reflect pad
     * tests pad INT32 tensors */
    glesc_tensor *xi = tg_input(g, GLESC_DTYPE_I32, 2, (int64_t[]){4, 3}, 9, -1000, 1000);
    glesc_tensor *yi = glesc_cast(
        g, glesc_pad(g, xi, (int64_t[]){3, 1, 0, 0, 2, 2, 0, 0}, GLESC_PAD_REFLECT, 0), I32);
    check(g, &yi, 1, 0, 0, "pad of i32 data, cast back to i32");
    /* refusals */
    refused(glesc_pad(g, x, (int64_t[]){-4, 0, 0, 0, -4, 0, 0, 0}, GLESC_PAD_CONSTANT, 0),
            "leave nothing", "pad that removes a whole dimension");
    refused(glesc_pad(g, x, (int64_t[]){1, 0, 0, 0, 0, 0, 0, 0}, (glesc_pad_mode)3, 0), "mode 3",
            "pad mode wrap");
    glesc_graph_destroy(g);
}

Test(vops, pad_onnx_examples)
{
    /* ONNX Pad's examples: x [[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]] (3 x 2),
     * pads [0, 2, 0, 0]: two columns before */
    static const float xv[] = {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f};
    static const float reflect[] = {1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f,
                                    2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f};
    static const float edge[] = {1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f,
                                 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f};
    static const float constant[] = {0.0f, 0.0f, 1.0f, 1.2f, 0.0f, 0.0f,
                                     2.3f, 3.4f, 0.0f, 0.0f, 4.5f, 5.7f};
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = values(g, F32, 2, (int64_t[]){2, 3}, xv);
    const int64_t pads[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    expect(glesc_pad(g, x, pads, GLESC_PAD_REFLECT, 0), reflect, 12, 0, "pad reflect");
    expect(glesc_pad(g, x, pads, GLESC_PAD_EDGE, 0), edge, 12, 0, "pad edge");
    expect(glesc_pad(g, x, pads, GLESC_PAD_CONSTANT, 0), constant, 12, 0, "pad constant");
    glesc_graph_destroy(g);
}

/* ---- slice ---- */

Test(vops, slice)
{
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x = input(g, F32, 3, (int64_t[]){10, 7, 4}, 11);
        /* positive steps: a view */
        glesc_tensor *v = glesc_slice(g, x, 2, (int[]){0, 2}, (int64_t[]){1, -3},
                                      (int64_t[]){INT64_MAX, 4}, (int64_t[]){3, 1});
        cr_assert_not_null(v, "%s", glesc_context_errmsg(ctx));
        cr_assert_eq(glesc_tensor_op(v), GLESC_OP_VIEW);
        cr_assert(glesc_tensor_dim(v, 0) == 3 && glesc_tensor_dim(v, 1) == 7 &&
                  glesc_tensor_dim(v, 2) == 3);
        /* a slice of a slice stays a view; a slice of a transpose too */
        glesc_tensor *vv =
            glesc_slice(g, v, 1, (int[]){1}, (int64_t[]){1}, (int64_t[]){6}, (int64_t[]){2});
        cr_assert_eq(glesc_tensor_op(vv), GLESC_OP_VIEW);
        glesc_tensor *vt = glesc_slice(g, glesc_transpose(g, x), 1, (int[]){0}, (int64_t[]){2},
                                       (int64_t[]){-1}, NULL);
        /* negative steps: a node of its own */
        glesc_tensor *r = glesc_slice(g, x, 3, (int[]){0, 1, 2}, (int64_t[]){-1, 5, 100},
                                      (int64_t[]){INT64_MIN, 0, -100}, (int64_t[]){-1, -2, -3});
        cr_assert_not_null(r, "%s", glesc_context_errmsg(ctx));
        cr_assert_eq(glesc_tensor_op(r), GLESC_OP_SLICE);
        cr_assert(glesc_tensor_dim(r, 0) == 10 && glesc_tensor_dim(r, 1) == 3 &&
                  glesc_tensor_dim(r, 2) == 2);
        glesc_tensor *rt = glesc_slice(g, glesc_transpose(g, x), 1, (int[]){1}, (int64_t[]){8},
                                       (int64_t[]){1}, (int64_t[]){-3});
        glesc_tensor *outs[] = {glesc_scale(g, v, 1, 0), glesc_scale(g, vv, 2, 0),
                                glesc_scale(g, vt, 1, 1), r, glesc_relu(g, rt)};
        check(g, outs, 5, 0, 1e-6, "slices (views, negative steps, of a transpose)");
        /* the view itself as an output */
        check(g, &v, 1, 0, 0, "slice view as output");
        refused(glesc_slice(g, x, 1, (int[]){0}, (int64_t[]){3}, (int64_t[]){3}, NULL),
                "leave no element", "empty slice");
        refused(glesc_slice(g, x, 1, (int[]){0}, (int64_t[]){0}, (int64_t[]){3}, (int64_t[]){0}),
                "step 0", "slice step 0");
        refused(glesc_slice(g, x, 2, (int[]){1, 1}, (int64_t[]){0, 0}, (int64_t[]){3, 3}, NULL),
                "given twice", "slice axis twice");
        glesc_graph_destroy(g);
    }
}

/* ---- gather ---- */

Test(vops, gather)
{
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x = input(g, F32, 3, (int64_t[]){6, 5, 4}, 21);
        glesc_tensor *h = input(g, F16, 2, (int64_t[]){9, 3}, 22);
        /* in range, negative, and out of range (reads 0) */
        static const float i1v[] = {0, 4, -1, -5, 2, 5, -6, 3};
        static const float i2v[] = {1, -1, 0, 2, 3, -4};
        glesc_tensor *i1 = values(g, I32, 1, (int64_t[]){8}, i1v);
        glesc_tensor *i2 = values(g, I32, 2, (int64_t[]){3, 2}, i2v);
        glesc_tensor *outs[] = {
            glesc_gather(g, x, i1, 1), /* [6, 8, 4] */
            glesc_gather(g, x, i2, 2), /* [6, 5, 3, 2] */
            glesc_gather(g, x, i2, 0), /* [3, 2, 5, 4] */
            glesc_gather(g, h, i1, 0), /* [8, 3] */
            glesc_relu(g, glesc_gather(g, h, i2, 1)),
        };
        check(g, outs, 5, 1e-7, 0, "gather along dimensions 0, 1, 2 (f32, f16)");
        glesc_tensor *x4 = input(g, F32, 4, (int64_t[]){2, 3, 2, 2}, 23);
        refused(glesc_gather(g, x4, i2, 1), "above 4", "gather to 5 dimensions");
        refused(glesc_gather(g, x, x, 0), "must be i32", "float indices");
        glesc_graph_destroy(g);
    }
    /* computed indices: fused into the gather where they have its shape
     * (a 1-D x), loaded from memory where not */
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x1 = input(g, F32, 1, (int64_t[]){7}, 24);
        glesc_tensor *x2 = input(g, F32, 2, (int64_t[]){3, 7}, 25);
        glesc_tensor *f = tg_input(g, F32, 1, (int64_t[]){9}, 26, -9, 9);
        glesc_tensor *outs[] = {glesc_gather(g, x1, glesc_cast(g, f, I32), 0),
                                glesc_gather(g, x2, glesc_cast(g, f, I32), 1)};
        int k = check(g, outs, 2, 0, 0, "gather by computed (cast) indices");
        cr_assert_eq(k, fusion == 1 ? 3 : 4, "the first cast fuses into its gather: %d kernels", k);
        glesc_graph_destroy(g);
    }
    /* ONNX's test_gather_negative_indices: arange(10), [0, -9, -10] */
    glesc_graph *g = glesc_graph_create(ctx);
    float a[10];
    for (int i = 0; i < 10; i++)
        a[i] = (float)i;
    glesc_tensor *x = values(g, F32, 1, (int64_t[]){10}, a);
    glesc_tensor *ix = values(g, I32, 1, (int64_t[]){3}, (float[]){0, -9, -10});
    expect(glesc_gather(g, x, ix, 0), (float[]){0, 1, 0}, 3, 0, "gather negative indices");
    glesc_graph_destroy(g);
}

/* ---- flatten ---- */

Test(vops, flatten)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = input(g, F32, 4, (int64_t[]){3, 4, 5, 2}, 31);
    for (int k = 0; k <= 4; k++) {
        glesc_tensor *f = glesc_flatten(g, x, k);
        cr_assert_not_null(f, "%s", glesc_context_errmsg(ctx));
        cr_assert_eq(glesc_tensor_op(f), GLESC_OP_RESHAPE, "flatten of a contiguous x is a view");
        int64_t lo = 1;
        for (int d = 0; d < k; d++)
            lo *= glesc_tensor_dim(x, d);
        cr_assert(glesc_tensor_dim(f, 0) == lo && glesc_tensor_dim(f, 1) == 120 / lo);
    }
    /* a permuted x is copied first */
    glesc_tensor *f = glesc_flatten(g, glesc_transpose(g, x), 2);
    check(g, &f, 1, 0, 0, "flatten of a transpose");
    refused(glesc_flatten(g, x, 5), "k = 5", "flatten k = 5");
    glesc_graph_destroy(g);
}

/* ---- log-softmax ---- */

Test(vops, log_softmax)
{
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x = input(g, F32, 4, (int64_t[]){7, 5, 3, 2}, 41);
        glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){300, 3}, 42, -90, 90);
        glesc_tensor *h = input(g, F16, 2, (int64_t[]){1, 4}, 43);
        glesc_tensor *outs[] = {
            glesc_log_softmax(g, x, 0),
            glesc_log_softmax(g, x, 1),
            glesc_log_softmax(g, glesc_mul(g, x, x), 2),      /* a prologue */
            glesc_scale(g, glesc_log_softmax(g, x, 3), 2, 1), /* an epilogue */
            glesc_log_softmax(g, w, 0), /* long rows, values far below the max */
            glesc_log_softmax(g, h, 0), /* rows of one: 0 */
        };
        check(g, outs, 6, 2e-5, 2e-6, "log_softmax along 0..3");
        refused(glesc_log_softmax(g, x, 4), "axis 4", "log_softmax axis 4");
        glesc_graph_destroy(g);
    }
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = values(g, F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
    expect(glesc_log_softmax(g, x, 0), (float[]){-2.40760596f, -1.40760596f, -0.40760596f}, 3, 1e-6,
           "log_softmax of [1, 2, 3]");
    /* ONNX's test_logsoftmax_large_number: rows far from 0, where x − (max +
     * log Σ) would lose the result to max's rounding */
    glesc_tensor *big =
        values(g, F32, 2, (int64_t[]){4, 2}, (float[]){0, 1, 2, 3, 10000, 10001, 10002, 10003});
    expect(glesc_log_softmax(g, big, 0),
           (float[]){-3.4401897f, -2.4401897f, -1.4401897f, -0.4401897f, -3.4401897f, -2.4401897f,
                     -1.4401897f, -0.4401897f},
           8, 1e-6, "log_softmax of [0..3], [10000..10003]");
    glesc_graph_destroy(g);
}

/* ---- pooling ---- */

Test(vops, pool_2d)
{
    static const glesc_pool_params cases[] = {
        {0, GLESC_POOL_MAX, {3, 3}, {2, 2}, {0, 0, 0, 0}, {0, 0}, false, false},
        {0, GLESC_POOL_MAX, {3, 3}, {2, 2}, {0, 0, 0, 0}, {0, 0}, true, false},
        {0, GLESC_POOL_AVG, {3, 3}, {2, 2}, {0, 0, 0, 0}, {0, 0}, true, false},
        {0, GLESC_POOL_AVG, {2, 3}, {1, 2}, {0, 1, 1, 2}, {0, 0}, false, false},
        {0, GLESC_POOL_AVG, {2, 3}, {1, 2}, {0, 1, 1, 2}, {0, 0}, false, true},
        {0, GLESC_POOL_AVG, {3, 4}, {2, 3}, {1, 2, 2, 1}, {0, 0}, true, true},
        {0, GLESC_POOL_MAX, {2, 2}, {1, 1}, {2, 1, 1, 0}, {3, 2}, false, false},
        {0, GLESC_POOL_AVG, {3, 2}, {1, 2}, {1, 0, 0, 2}, {2, 2}, true, true},
        {0, GLESC_POOL_MAX, {1, 5}, {1, 3}, {0, 2, 0, 2}, {0, 0}, true, false},
    };
    for (int fusion = -1; fusion <= 1; fusion += 2)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
            glesc_graph *g = glesc_graph_create(ctx);
            tg_fusion(g, fusion);
            glesc_tensor *x =
                input(g, i % 3 == 2 ? F16 : F32, 4, (int64_t[]){10, 9, 3, 2}, (uint32_t)(50 + i));
            glesc_tensor *y = glesc_pool2d(g, x, &cases[i]);
            char what[96];
            snprintf(what, sizeof what,
                     "pool_2d case %zu (%s, ceil %d, include pad %d, fusion %d) -> [%lld, %lld]", i,
                     cases[i].type == GLESC_POOL_AVG ? "avg" : "max", cases[i].ceil_mode,
                     cases[i].count_include_pad, fusion, y ? (long long)glesc_tensor_dim(y, 0) : 0,
                     y ? (long long)glesc_tensor_dim(y, 1) : 0);
            check(g, &y, 1, 1e-6, 1e-6, what);
            glesc_graph_destroy(g);
        }
}

Test(vops, pool_fusion_and_refusals)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *x = input(g, F32, 4, (int64_t[]){8, 8, 4, 1}, 61);
    glesc_tensor *b = input(g, F32, 3, (int64_t[]){1, 1, 4}, 62);
    glesc_pool_params p = {0, GLESC_POOL_MAX, {2, 2}, {2, 2}, {0, 0, 0, 0}, {0, 0}, false, false};
    /* relu(maxpool(x + b)) * 2: prologue and epilogue in the pooling kernel */
    glesc_tensor *y = glesc_scale(g, glesc_relu(g, glesc_pool2d(g, glesc_add(g, x, b), &p)), 2, 0);
    cr_assert_eq(check(g, &y, 1, 1e-6, 1e-6, "scale(relu(maxpool(x + b)))"), 1);
    p.pads[2] = 2;
    refused(glesc_pool2d(g, x, &p), "below the window's extent", "pad as wide as the window");
    p.pads[2] = 0;
    p.kernel_shape[1] = 9;
    refused(glesc_pool2d(g, x, &p), "does not fit", "window wider than the input");
    p.kernel_shape[1] = 2;
    p.type = (glesc_pool_type)7;
    refused(glesc_pool2d(g, x, &p), "type 7", "pool type 7");
    glesc_pool_params_init(&p); /* no kernel_shape */
    refused(glesc_pool2d(g, x, &p), "kernel 0", "pool without kernel_shape");
    p.kernel_shape[0] = p.kernel_shape[1] = 2;
    refused(glesc_pool1d(g, glesc_reshape(g, x, 3, (int64_t[]){8, 8, 4}), &p), "H entries",
            "1-D pool with a kernel height");
    p.struct_size = 2;
    refused(glesc_pool2d(g, x, &p), "struct_size 2", "struct_size too small");
    refused(glesc_global_pool(g, x, GLESC_POOL_AVG, 3), "spatial", "global pool over 3");
    glesc_graph_destroy(g);
}

Test(vops, pool_onnx_examples)
{
    /* test_maxpool_2d_ceil / test_averagepool_2d_ceil: 1..16 (4 x 4),
     * kernel 3, strides 2, ceil mode */
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)(i + 1);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = values(g, F32, 4, (int64_t[]){4, 4, 1, 1}, v);
    glesc_pool_params p = {0, GLESC_POOL_MAX, {3, 3}, {2, 2}, {0, 0, 0, 0}, {0, 0}, true, false};
    expect(glesc_pool2d(g, x, &p), (float[]){11, 12, 15, 16}, 4, 0, "maxpool_2d_ceil");
    p.type = GLESC_POOL_AVG;
    expect(glesc_pool2d(g, x, &p), (float[]){6, 7.5f, 12, 13.5f}, 4, 1e-6, "averagepool_2d_ceil");
    /* test_maxpool_2d_dilations: kernel 2, dilations 2 */
    glesc_pool_params d = {0, GLESC_POOL_MAX, {2, 2}, {1, 1}, {0, 0, 0, 0}, {2, 2}, false, false};
    expect(glesc_pool2d(g, x, &d), (float[]){11, 12, 15, 16}, 4, 0, "maxpool_2d_dilations");
    /* test_averagepool_2d_pads_count_include_pad, a corner of it by hand:
     * 1..16, kernel 3, pads 1: the first window holds 1, 2, 5, 6 over 9 */
    glesc_pool_params c = {0, GLESC_POOL_AVG, {3, 3}, {1, 1}, {1, 1, 1, 1}, {0, 0}, false, true};
    glesc_tensor *y = glesc_pool2d(g, x, &c);
    cr_assert_not_null(y);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK);
    float *got = tg_read(y);
    cr_assert_float_eq(got[0], 14.0f / 9.0f, 1e-6, "include pad corner %g", got[0]);
    cr_assert_float_eq(got[5], 6.0f, 1e-6, "include pad centre %g", got[5]);
    free(got);
    glesc_graph_destroy(g);
}

Test(vops, pool_1d_and_global)
{
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *x = input(g, F32, 3, (int64_t[]){17, 3, 2}, 71);
        glesc_pool_params p = {0, GLESC_POOL_AVG, {0, 4}, {0, 3}, {0, 2, 0, 1}, {0, 0}, true, true};
        glesc_pool_params q = {0,      GLESC_POOL_MAX, {0, 3}, {0, 2}, {0, 1, 0, 0},
                               {0, 2}, false,          false};
        glesc_tensor *img = input(g, F32, 4, (int64_t[]){7, 6, 3, 2}, 72);
        glesc_tensor *outs[] = {
            glesc_pool1d(g, x, &p),
            glesc_pool1d(g, glesc_transpose(g, glesc_transpose(g, x)), &q),
            glesc_global_pool(g, img, GLESC_POOL_AVG, 2),
            glesc_global_pool(g, glesc_transpose(g, img), GLESC_POOL_MAX, 2),
            glesc_global_pool(g, x, GLESC_POOL_AVG, 1),
        };
        cr_assert(outs[0] && glesc_tensor_ndim(outs[0]) == 3 && glesc_tensor_dim(outs[0], 0) == 7,
                  "1-D pool of 17 by 4/3, pads 2+1, ceil: 7 outputs");
        cr_assert(outs[2] && glesc_tensor_dim(outs[2], 0) == 1 &&
                  glesc_tensor_dim(outs[2], 1) == 1 && glesc_tensor_dim(outs[2], 2) == 3);
        check(g, outs, 5, 1e-6, 1e-5, "pool_1d, global average and max pools");
        glesc_graph_destroy(g);
    }
}

/* ---- transposed convolution ---- */

Test(vops, conv_transpose)
{
    static const struct {
        int64_t x[4], w[4];
        glesc_conv_transpose_params p;
        bool bias;
    } cases[] = {
        {{3, 3, 1, 1}, {3, 3, 2, 1}, {0, {1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}, 1}, false},
        {{5, 4, 3, 2}, {3, 3, 2, 3}, {0, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1}, true},
        {{4, 5, 4, 1}, {2, 3, 3, 4}, {0, {2, 3}, {1, 0, 0, 2}, {1, 1}, {0, 2}, 2}, true},
        {{6, 3, 2, 2}, {3, 2, 2, 2}, {0, {2, 1}, {0, 1, 2, 0}, {3, 2}, {1, 0}, 2}, false},
        {{7, 1, 3, 1}, {4, 1, 1, 3}, {0, {1, 2}, {0, 0, 0, 1}, {1, 1}, {0, 0}, 3}, true},
    };
    for (int fusion = -1; fusion <= 1; fusion += 2)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
            glesc_graph *g = glesc_graph_create(ctx);
            tg_fusion(g, fusion);
            glesc_tensor *x = input(g, F32, 4, cases[i].x, (uint32_t)(80 + i));
            glesc_tensor *w = input(g, i % 2 ? F16 : F32, 4, cases[i].w, (uint32_t)(90 + i));
            int64_t c_out = cases[i].w[2] * (cases[i].p.group ? cases[i].p.group : 1);
            glesc_tensor *b = cases[i].bias ? input(g, F32, 1, &c_out, (uint32_t)(95 + i)) : NULL;
            glesc_tensor *y = glesc_relu(g, glesc_conv_transpose2d(g, x, w, b, &cases[i].p));
            char what[96];
            snprintf(what, sizeof what, "conv_transpose case %zu (fusion %d) -> [%lld, %lld, %lld]",
                     i, fusion, y ? (long long)glesc_tensor_dim(y, 0) : 0,
                     y ? (long long)glesc_tensor_dim(y, 1) : 0,
                     y ? (long long)glesc_tensor_dim(y, 2) : 0);
            int k = check(g, &y, 1, 1e-5, 1e-5, what);
            if (fusion == 1)
                cr_assert_eq(k, 1, "relu fuses into the transposed convolution");
            glesc_graph_destroy(g);
        }
    /* 1-D: [W, C_in, N] through a 2-D one of height 1 */
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = input(g, F32, 3, (int64_t[]){9, 4, 2}, 97);
    glesc_tensor *w = input(g, F32, 3, (int64_t[]){3, 3, 4}, 98);
    glesc_tensor *b = input(g, F32, 1, (int64_t[]){6}, 99);
    glesc_conv_transpose_params p;
    glesc_conv_transpose_params_init(&p);
    p.strides[1] = 2;
    p.pads[1] = 1;
    p.pads[3] = 2;
    p.output_padding[1] = 1;
    p.group = 2;
    glesc_tensor *y = glesc_conv_transpose1d(g, x, w, b, &p);
    cr_assert(y && glesc_tensor_ndim(y) == 3 && glesc_tensor_dim(y, 0) == 17 &&
                  glesc_tensor_dim(y, 1) == 6,
              "[%lld, %lld]: 2·8 + 1 + 3 - 3 = 17 by 6 channels",
              y ? (long long)glesc_tensor_dim(y, 0) : 0, y ? (long long)glesc_tensor_dim(y, 1) : 0);
    check(g, &y, 1, 1e-5, 1e-5, "conv_transpose1d (stride 2, pads 1/2, output padding 1, group 2)");
    p.strides[0] = 2;
    refused(glesc_conv_transpose1d(g, x, w, b, &p), "H entries", "1-D with a stride in H");
    glesc_graph_destroy(g);
}

Test(vops, conv_transpose_onnx_example)
{
    /* ONNX ConvTranspose's first example: x = arange(9) (3 x 3), W = ones
     * [1, 2, 3, 3] → two 5 x 5 channels */
    static const float ch[25] = {0,  1,  3, 3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                 27, 15, 9, 20, 33, 24, 13, 6,  13, 21, 15, 8};
    float xv[9], wv[18], want[50];
    for (int i = 0; i < 9; i++)
        xv[i] = (float)i;
    for (int i = 0; i < 18; i++)
        wv[i] = 1;
    memcpy(want, ch, sizeof ch);
    memcpy(want + 25, ch, sizeof ch);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = values(g, F32, 4, (int64_t[]){3, 3, 1, 1}, xv);
    glesc_tensor *w = values(g, F32, 4, (int64_t[]){3, 3, 2, 1}, wv);
    expect(glesc_conv_transpose2d(g, x, w, NULL, NULL), want, 50, 0, "convtranspose");
    glesc_conv_transpose_params p;
    glesc_conv_transpose_params_init(&p);
    /* refusals */
    p.output_padding[0] = 1;
    refused(glesc_conv_transpose2d(g, x, w, NULL, &p), "output padding",
            "output padding 1, stride 1");
    p.output_padding[0] = 0;
    p.group = 2;
    refused(glesc_conv_transpose2d(g, x, w, NULL, &p), "group 2", "group not dividing C_in");
    p.group = 1;
    glesc_tensor *b = input(g, F32, 1, (int64_t[]){3}, 1);
    refused(glesc_conv_transpose2d(g, x, w, b, &p), "bias", "bias of the wrong size");
    glesc_graph_destroy(g);
}
