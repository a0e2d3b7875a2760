/*
 * test_conv.c — the vision ops: conv2d (strides, asymmetric pads,
 * dilations, groups, depthwise, with and without bias, f16 inputs), conv1d
 * and batch normalization against the CPU references (each check prints its
 * worst absolute error and NMSE against an explicit tolerance); the folding
 * of a batch norm into a convolution's constant weights; the convolution's
 * fused epilogue (Conv+BN+ReLU and Conv+bias+residual+ReLU6 are one
 * dispatch each; GLESC_NO_FUSION=1 gives the same results within
 * rounding); the limits (clear errors). The convolution's two paths, the
 * direct kernel and the GEMM over the implicit im2col matrix, are each
 * forced (GLESC_CONV=direct|gemm) as well as chosen by shape, for every
 * case and for the fused epilogues.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "graph/graph.h"
#include "kernels/kernels.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define F16 GLESC_DTYPE_F16

TEST_GPU_SUITE(conv);

/* The convolution paths a test runs under: chosen by shape (NULL), then
 * each forced. */
static const char *const paths[] = {NULL, "direct", "gemm"};
#define N_PATHS (sizeof paths / sizeof paths[0])

static void set_path(const char *path)
{
    if (path)
        setenv("GLESC_CONV", path, 1);
    else
        unsetenv("GLESC_CONV");
}

/* Computes out on the GPU and with the CPU reference; fails above tol
 * (the worst absolute error relative to the reference's largest
 * magnitude). Prints the worst errors. Returns the GPU result (free it). */
static float *check(glesc_graph *g, glesc_tensor *out, double tol, const char *what)
{
    cr_assert_not_null(out, "%s: %s", what, glesc_context_errmsg(ctx));
    float *ref = NULL;
    cr_assert_eq(graph_cpu_eval(g, &out, 1, &ref), GLESC_OK, "%s: %s", what,
                 glesc_context_errmsg(ctx));
    glesc_status st = glesc_graph_compute(g, &out, 1);
    cr_assert_eq(st, GLESC_OK, "%s: %s", what, glesc_context_errmsg(ctx));
    float *got = tg_read(out);
    int64_t n = glesc_tensor_nelements(out);
    double worst = 0, mag = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= worst)) {
            worst = e;
            at = i;
        }
        mag = fmax(mag, fabs(ref[i]));
    }
    double rel = mag > 0 ? worst / mag : worst;
    cr_log_info("%s: %lld values, worst |gpu - ref| %.3g at %lld (%.3g relative to max |ref| "
                "%.3g), NMSE %.3g, tolerance %.1g",
                what, (long long)n, worst, (long long)at, rel, mag, tg_nmse(got, ref, n), tol);
    cr_assert(rel <= tol, "%s: worst error %.3g (relative %.3g) at %lld: got %g want %g", what,
              worst, rel, (long long)at, got[at], ref[at]);
    free(ref);
    return got;
}

typedef struct conv_case {
    const char *what;
    int64_t w, h, cin, n, cout, kw, kh;
    int strides[2], pads[4], dilations[2], group;
    bool bias, f16;
} conv_case;

static void run_case_path(const conv_case *c, const char *path)
{
    set_path(path);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_dtype dt = c->f16 ? F16 : F32;
    glesc_tensor *x = tg_input(g, dt, 4, (int64_t[]){c->w, c->h, c->cin, c->n}, 1, -1, 1);
    glesc_tensor *w =
        tg_input(g, dt, 4, (int64_t[]){c->kw, c->kh, c->cin / c->group, c->cout}, 2, -1, 1);
    glesc_tensor *b = c->bias ? tg_input(g, F32, 1, (int64_t[]){c->cout}, 3, -1, 1) : NULL;
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    for (int i = 0; i < 2; i++) {
        p.strides[i] = c->strides[i];
        p.dilations[i] = c->dilations[i];
    }
    for (int i = 0; i < 4; i++)
        p.pads[i] = c->pads[i];
    p.group = c->group;
    glesc_tensor *y = glesc_conv2d(g, x, w, b, &p);
    char what[160];
    snprintf(what, sizeof what, "%s (%s%s)", c->what, path ? path : "by shape: ",
             path                                ? ""
             : kernels_conv_variant(y) >> 24 & 1 ? "gemm"
                                                 : "direct");
    free(check(g, y, 1e-5, what));
    glesc_graph_destroy(g);
    set_path(NULL);
}

static void run_case(const conv_case *c)
{
    for (size_t i = 0; i < N_PATHS; i++)
        run_case_path(c, paths[i]);
}

Test(conv, conv2d_cases_match_the_reference)
{
    static const conv_case cases[] = {
        {"3x3 s1 p1 bias", 13, 11, 5, 2, 7, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true, false},
        {"3x3 s2 asymmetric pads, dilation 2x1",
         17,
         15,
         3,
         1,
         6,
         3,
         3,
         {2, 2},
         {0, 1, 2, 3},
         {2, 1},
         1,
         false,
         false},
        {"5x3 strides 3x1", 20, 9, 4, 1, 5, 5, 3, {3, 1}, {2, 0, 1, 2}, {1, 1}, 1, true, false},
        {"grouped 3x3 (2 groups)",
         12,
         10,
         6,
         2,
         10,
         3,
         3,
         {1, 1},
         {1, 1, 1, 1},
         {1, 1},
         2,
         true,
         false},
        {"depthwise 3x3 s2", 21, 19, 8, 1, 8, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 8, true, false},
        {"depthwise multiplier 2",
         9,
         9,
         4,
         1,
         8,
         3,
         3,
         {1, 1},
         {1, 1, 1, 1},
         {1, 1},
         4,
         false,
         false},
        {"1x1 pointwise 40 -> 36", 19, 17, 40, 1, 36, 1, 1, {1, 1}, {0}, {1, 1}, 1, true, false},
        {"7x7 s2 p3 f16", 33, 30, 3, 1, 9, 7, 7, {2, 2}, {3, 3, 3, 3}, {1, 1}, 1, true, true},
        {"one output pixel", 4, 4, 3, 1, 2, 4, 4, {1, 1}, {0}, {1, 1}, 1, false, false},
        /* the blockings: 4 output rows per invocation (many workgroups),
         * 16 output channels per workgroup, a 1x1 kernel with strides,
         * pads and groups */
        {"depthwise 64 x 64 x 64, 4 rows an invocation",
         64,
         64,
         64,
         1,
         64,
         3,
         3,
         {1, 1},
         {1, 1, 1, 1},
         {1, 1},
         64,
         true,
         false},
        {"1x1 128 x 128, 8 -> 64 (16 channels a workgroup)",
         128,
         128,
         8,
         1,
         64,
         1,
         1,
         {1, 1},
         {0},
         {1, 1},
         1,
         false,
         false},
        {"1x1 stride 2, pads, 3 groups",
         23,
         21,
         12,
         2,
         9,
         1,
         1,
         {2, 2},
         {1, 0, 2, 1},
         {1, 1},
         3,
         true,
         false},
        {"3x3 128 x 128, 4 -> 32",
         128,
         128,
         4,
         1,
         32,
         3,
         3,
         {1, 1},
         {1, 1, 1, 1},
         {1, 1},
         1,
         true,
         false},
        /* many channels (the GEMM path by shape where the output is large) */
        {"3x3 64 -> 64, 2 images",
         13,
         11,
         64,
         2,
         64,
         3,
         3,
         {1, 1},
         {1, 1, 1, 1},
         {1, 1},
         1,
         true,
         false},
        {"grouped 3x3 64 -> 64 (2 groups) s2, dilation 2, asymmetric pads, f16",
         19,
         17,
         64,
         1,
         64,
         3,
         3,
         {2, 2},
         {0, 1, 2, 3},
         {2, 2},
         2,
         false,
         true},
        {"1x1 96 -> 40, 70 columns", 10, 7, 96, 1, 40, 1, 1, {1, 1}, {0}, {1, 1}, 1, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

static void conv1d_path(const char *path)
{
    set_path(path);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 3, (int64_t[]){300, 6, 2}, 4, -1, 1);
    glesc_tensor *w = tg_input(g, F32, 3, (int64_t[]){5, 3, 4}, 5, -1, 1);
    glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){4}, 6, -1, 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    p.strides[1] = 2;
    p.pads[1] = 1;
    p.pads[3] = 4;
    p.dilations[1] = 2;
    p.group = 2;
    glesc_tensor *y = glesc_conv1d(g, x, w, b, &p);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    /* (300 + 5 - 2·4 - 1) / 2 + 1 */
    cr_assert_eq(glesc_tensor_ndim(y), 3);
    cr_assert_eq(glesc_tensor_dim(y, 0), 149);
    cr_assert_eq(glesc_tensor_dim(y, 1), 4);
    char what[96];
    snprintf(what, sizeof what, "conv1d s2 d2 pads 1/4, 2 groups (%s)", path ? path : "by shape");
    free(check(g, y, 1e-5, what));
    /* the same op in its 1-D form: an activation runs in its epilogue */
    glesc_tensor *r = glesc_clamp(g, y, 0.0f, 6.0f);
    snprintf(what, sizeof what, "conv1d + relu6 (%s)", path ? path : "by shape");
    free(check(g, r, 1e-5, what));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.dispatches, 1, "conv1d + relu6: %d dispatches", s.dispatches);
    p.strides[0] = 2;
    cr_assert_null(glesc_conv1d(g, x, w, b, &p));
    cr_assert(strstr(glesc_context_errmsg(ctx), "H entries"), "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    set_path(NULL);
}

Test(conv, conv1d_matches_the_reference)
{
    for (size_t i = 0; i < N_PATHS; i++)
        conv1d_path(paths[i]);
}

Test(conv, batch_norm_matches_the_reference)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F16, 4, (int64_t[]){7, 5, 6, 2}, 7, -2, 2);
    glesc_tensor *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = tg_input(g, F32, 1, (int64_t[]){6}, 8 + (uint32_t)i, i == 3 ? 0.1f : -1,
                        i == 3 ? 2.0f : 1);
    glesc_tensor *y = glesc_batch_norm(g, x, p[0], p[1], p[2], p[3], 1e-3f);
    cr_assert_eq(glesc_tensor_op(y), GLESC_OP_BATCH_NORM);
    free(check(g, y, 1e-6, "batch norm"));
    glesc_tensor *bad = tg_input(g, F32, 1, (int64_t[]){5}, 9, 0, 1);
    cr_assert_null(glesc_batch_norm(g, x, p[0], bad, p[2], p[3], 1e-3f));
    cr_assert(strstr(glesc_context_errmsg(ctx), "bias"), "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

/* ---- folding and fusion ---- */

static glesc_tensor *weight(int ndim, const int64_t *shape, uint32_t seed, float lo, float hi)
{
    glesc_tensor *t = glesc_weight_new(ctx, F32, ndim, shape);
    cr_assert_not_null(t, "%s", glesc_context_errmsg(ctx));
    tg_fill(t, seed, lo, hi);
    return t;
}

typedef struct block {
    glesc_tensor *w, *b, *bn[4], *res_w;
} block;

static void block_new(block *k, int64_t cin, int64_t cout)
{
    k->w = weight(4, (int64_t[]){3, 3, cin, cout}, 11, -0.5f, 0.5f);
    k->b = weight(1, (int64_t[]){cout}, 12, -0.5f, 0.5f);
    for (int i = 0; i < 4; i++)
        k->bn[i] = weight(1, (int64_t[]){cout}, 13 + (uint32_t)i, i == 3 ? 0.2f : -1.0f,
                          i == 3 ? 1.5f : 1.0f);
}

static void block_free(block *k)
{
    glesc_weight_free(k->w);
    glesc_weight_free(k->b);
    for (int i = 0; i < 4; i++)
        glesc_weight_free(k->bn[i]);
}

/* conv(x) + BN + ReLU with constant weights: folded, one dispatch; with
 * fusion off the batch norm stays a node (3 dispatches). Same values.
 * cin -> cout channels, 15 x 13 pixels. */
static float *conv_bn_relu(int fusion, int *dispatches, glesc_op *op, bool input_params,
                           int64_t cin, int64_t cout)
{
    block k;
    block_new(&k, cin, cout);
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, fusion);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){15, 13, cin, 1}, 20, -1, 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    p.pads[0] = p.pads[1] = p.pads[2] = p.pads[3] = 1;
    glesc_tensor *c = glesc_conv2d(g, x, k.w, k.b, &p);
    glesc_tensor *bn[4];
    for (int i = 0; i < 4; i++)
        bn[i] = k.bn[i];
    if (input_params) /* graph inputs: no constants, no folding */
        for (int i = 0; i < 4; i++)
            bn[i] = tg_input(g, F32, 1, (int64_t[]){cout}, 13 + (uint32_t)i, i == 3 ? 0.2f : -1.0f,
                             i == 3 ? 1.5f : 1.0f);
    glesc_tensor *y = glesc_batch_norm(g, c, bn[0], bn[1], bn[2], bn[3], 1e-5f);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    *op = glesc_tensor_op(y);
    y = glesc_relu(g, y);
    char what[96];
    snprintf(what, sizeof what, "conv %lld -> %lld + bn + relu (%s path)", (long long)cin,
             (long long)cout, kernels_conv_variant(c) >> 24 & 1 ? "gemm" : "direct");
    float *res = check(g, y, 1e-5, what);
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    *dispatches = s.dispatches;
    cr_log_info("%s, fusion %d%s: %d nodes, %d kernels, %d dispatches", what, fusion,
                input_params ? " (parameters are inputs)" : "", s.nodes, s.kernels, s.dispatches);
    glesc_graph_destroy(g);
    block_free(&k);
    return res;
}

/* a against b: the worst difference relative to b's largest magnitude */
static void assert_close(const float *a, const float *b, int64_t n, double tol, const char *what)
{
    double worst = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    double rel = mag > 0 ? worst / mag : worst;
    cr_log_info("%s: worst difference %.3g (%.3g relative to max %.3g, tolerance %.1g)", what,
                worst, rel, mag, tol);
    cr_assert(rel <= tol, "%s: worst difference %g (relative %g) above %g", what, worst, rel, tol);
}

static void conv_bn_relu_one_dispatch(const char *path, int64_t cin, int64_t cout)
{
    set_path(path);
    int d_on, d_off, d_in;
    glesc_op op_on, op_off, op_in;
    float *on = conv_bn_relu(1, &d_on, &op_on, false, cin, cout);
    float *off = conv_bn_relu(-1, &d_off, &op_off, false, cin, cout);
    float *in = conv_bn_relu(1, &d_in, &op_in, true, cin, cout);
    set_path(NULL);
    cr_assert_eq(op_on, GLESC_OP_CONV, "constant parameters fold into the convolution");
    cr_assert_eq(op_off, GLESC_OP_BATCH_NORM, "fusion off: no folding");
    cr_assert_eq(op_in, GLESC_OP_BATCH_NORM, "parameters that are inputs are no constants");
    cr_assert_eq(d_on, 1, "folded conv + bn + relu: %d dispatches", d_on);
    cr_assert_eq(d_in, 1, "conv with bn + relu in its epilogue: %d dispatches", d_in);
    cr_assert_eq(d_off, 3, "unfused: %d dispatches", d_off);
    int64_t n = 15 * 13 * cout;
    assert_close(on, off, n, 1e-6, "folded vs unfused");
    assert_close(in, off, n, 1e-6, "epilogue vs unfused");
    free(on);
    free(off);
    free(in);
}

Test(conv, conv_bn_relu_is_one_dispatch)
{
    for (size_t i = 0; i < N_PATHS; i++) {
        conv_bn_relu_one_dispatch(paths[i], 4, 8);
        conv_bn_relu_one_dispatch(paths[i], 64, 48);
    }
}

/* The GEMM path with K split over workgroups (GLESC_GEMM's slots: the
 * device is told it runs 128 workgroups at once, so 5 tiles take 2 parts),
 * an epilogue after the parts are added. */
Test(conv, gemm_path_with_split_k)
{
    setenv("GLESC_CONV", "gemm", 1);
    setenv("GLESC_GEMM", "slots=128", 1);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){13, 11, 64, 2}, 1, -1, 1);
    glesc_tensor *w = tg_input(g, F16, 4, (int64_t[]){3, 3, 64, 64}, 2, -1, 1);
    glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){64}, 3, -1, 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    p.pads[0] = p.pads[1] = p.pads[2] = p.pads[3] = 1;
    glesc_tensor *y = glesc_clamp(g, glesc_conv2d(g, x, w, b, &p), 0.0f, 6.0f);
    free(check(g, y, 1e-5, "3x3 64 -> 64 + relu6 (gemm, K in 2 parts)"));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.dispatches, 1);
    /* the kernel as the executor binds it: z holds the group times the parts */
    graph_order_t ord = {0};
    cr_assert_eq(graph_order(g, &y, 1, &ord), GLESC_OK);
    kernels_kernel *gks = calloc((size_t)ord.n, sizeof *gks);
    int nk = 0, max_bind = compute_max_bindings(ctx);
    kernels_fuse(ord.nodes, ord.n, true, max_bind, NULL, gks, &nk);
    cr_assert_eq(nk, 1);
    kb kbind;
    glesc_graph_options o = {.gemv_max_m = 8};
    cr_assert_eq(compute_kernel_bind(ctx, &gks[0], max_bind, &o, &kbind), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(kbind.n_disp, 1);
    cr_assert_eq(kbind.disp[0].groups[2], 2, "parts of K: %u", kbind.disp[0].groups[2]);
    cr_assert_gt(kbind.disp[0].scratch_bytes, 0);
    kb_free(&kbind);
    free(gks);
    graph_order_free(&ord);
    glesc_graph_destroy(g);
    unsetenv("GLESC_GEMM");
    set_path(NULL);
}

Test(conv, the_path_follows_the_shape)
{
    glesc_graph *g = glesc_graph_create(ctx);
    /* 128 x 128 pixels: 128 tiles of 128 x 128 for 32 to 128 channels */
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){128, 128, 64, 1}, 1, -1, 1);
    glesc_tensor *small = tg_input(g, F32, 4, (int64_t[]){16, 16, 64, 1}, 1, -1, 1);
    glesc_tensor *wide = tg_input(g, F32, 4, (int64_t[]){3, 3, 64, 32}, 2, -1, 1);
    glesc_tensor *narrow = tg_input(g, F32, 4, (int64_t[]){3, 3, 64, 16}, 2, -1, 1);
    glesc_tensor *dw = tg_input(g, F32, 4, (int64_t[]){3, 3, 1, 64}, 2, -1, 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    p.pads[0] = p.pads[1] = p.pads[2] = p.pads[3] = 1;
    cr_assert(kernels_conv_variant(glesc_conv2d(g, x, wide, NULL, &p)) >> 24 & 1,
              "K 576, 32 output channels, 128 x 128 pixels: the GEMM");
    cr_assert_not(kernels_conv_variant(glesc_conv2d(g, small, wide, NULL, &p)) >> 24 & 1,
                  "16 x 16 pixels (2 tiles): direct");
    cr_assert_not(kernels_conv_variant(glesc_conv2d(g, x, narrow, NULL, &p)) >> 24 & 1,
                  "16 output channels: direct");
    p.group = 64;
    cr_assert_not(kernels_conv_variant(glesc_conv2d(g, x, dw, NULL, &p)) >> 24 & 1,
                  "depthwise: direct");
    setenv("GLESC_CONV", "sideways", 1);
    glesc_tensor *y = glesc_conv2d(g, small, wide, NULL, NULL);
    cr_assert_neq(glesc_graph_compute(g, &y, 1), GLESC_OK);
    set_path(NULL);
    cr_assert(strstr(glesc_context_errmsg(ctx), "GLESC_CONV=sideways"), "%s",
              glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

/* conv + bias (a separate add) + residual add + ReLU6 (clamp 0..6). */
static float *conv_residual(int *dispatches)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){14, 14, 16, 1}, 30, -1, 1);
    glesc_tensor *w = tg_input(g, F16, 4, (int64_t[]){1, 1, 16, 16}, 31, -0.5f, 0.5f);
    glesc_tensor *b = tg_input(g, F32, 4, (int64_t[]){1, 1, 16, 1}, 32, -1, 1);
    glesc_tensor *y = glesc_conv2d(g, x, w, NULL, NULL);
    y = glesc_add(g, y, b);
    y = glesc_add(g, y, x);
    y = glesc_clamp(g, y, 0.0f, 6.0f);
    float *res = check(g, y, 1e-5, "conv + bias + residual + relu6");
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    *dispatches = s.dispatches;
    glesc_graph_destroy(g);
    return res;
}

static void conv_residual_one_dispatch(const char *path)
{
    set_path(path);
    int d_on, d_env;
    float *on = conv_residual(&d_on);
    cr_assert_eq(d_on, 1, "conv + bias + residual + relu6: %d dispatches", d_on);
    /* GLESC_NO_FUSION=1 (the graphs' fusion option is 0: the environment decides) */
    setenv("GLESC_NO_FUSION", "1", 1);
    float *env = conv_residual(&d_env);
    unsetenv("GLESC_NO_FUSION");
    cr_log_info("conv + bias + residual + relu6: %d dispatches fused, %d with GLESC_NO_FUSION=1",
                d_on, d_env);
    cr_assert_eq(d_env, 4);
    assert_close(on, env, 14 * 14 * 16, 1e-6, "fused vs GLESC_NO_FUSION=1");
    free(on);
    free(env);
    set_path(NULL);
}

Test(conv, conv_bias_residual_activation_is_one_dispatch_and_no_fusion_matches)
{
    for (size_t i = 0; i < N_PATHS; i++)
        conv_residual_one_dispatch(paths[i]);
}

Test(conv, no_fusion_env_keeps_batch_norm_unfolded)
{
    /* fusion 0 (the default): GLESC_NO_FUSION=1 turns folding off too */
    setenv("GLESC_NO_FUSION", "1", 1);
    block k;
    block_new(&k, 4, 8);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){15, 13, 4, 1}, 20, -1, 1);
    glesc_tensor *c = glesc_conv2d(g, x, k.w, k.b, NULL);
    glesc_tensor *y = glesc_batch_norm(g, c, k.bn[0], k.bn[1], k.bn[2], k.bn[3], 1e-5f);
    cr_assert_eq(glesc_tensor_op(y), GLESC_OP_BATCH_NORM);
    free(check(g, glesc_relu(g, y), 1e-5, "conv + bn + relu, GLESC_NO_FUSION=1"));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.dispatches, 3);
    glesc_graph_destroy(g);
    block_free(&k);
    unsetenv("GLESC_NO_FUSION");
}

/* ---- limits ---- */

Test(conv, shape_errors_name_the_problem)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){8, 8, 6, 1}, 1, -1, 1);
    glesc_tensor *w = tg_input(g, F32, 4, (int64_t[]){3, 3, 4, 4}, 2, -1, 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    p.group = 2;
    cr_assert_null(glesc_conv2d(g, x, w, NULL, &p));
    cr_assert(strstr(glesc_context_errmsg(ctx), "C_in / group"), "%s", glesc_context_errmsg(ctx));
    glesc_tensor *w2 = tg_input(g, F32, 4, (int64_t[]){9, 9, 6, 4}, 2, -1, 1);
    cr_assert_null(glesc_conv2d(g, x, w2, NULL, NULL));
    cr_assert(strstr(glesc_context_errmsg(ctx), "does not fit"), "%s", glesc_context_errmsg(ctx));
    glesc_tensor *w3 = tg_input(g, F32, 4, (int64_t[]){3, 3, 6, 4}, 2, -1, 1);
    p.group = 1;
    set_path("direct"); /* the GEMM path stages no patch */
    p.dilations[0] = p.dilations[1] = 3000;
    p.pads[0] = p.pads[1] = p.pads[2] = p.pads[3] = 3000;
    glesc_tensor *y = glesc_conv2d(g, x, w3, NULL, &p);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    cr_assert_neq(glesc_graph_compute(g, &y, 1), GLESC_OK);
    set_path(NULL);
    cr_assert(strstr(glesc_context_errmsg(ctx), "shared memory"), "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

Test(conv, tensors_beyond_the_storage_limit_are_refused_clearly)
{
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.max_storage_block_size = 1 << 16; /* 64 KiB stands for llvmpipe's 128 MiB */
    glesc_context *small;
    cr_assert_eq(glesc_context_create(&o, &small), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_graph *g = glesc_graph_create(small);
    glesc_tensor *x = glesc_tensor_new(g, F32, 4, (int64_t[]){64, 64, 4, 1});
    cr_assert_not_null(x);
    glesc_tensor *w = glesc_weight_new(small, F32, 4, (int64_t[]){3, 3, 4, 8});
    cr_assert_not_null(w);
    float *v = calloc(64 * 64 * 4, sizeof *v);
    glesc_status st = glesc_tensor_write_f32(x, v, 64 * 64 * 4);
    glesc_tensor *y = st == GLESC_OK ? glesc_conv2d(g, x, w, NULL, NULL) : NULL;
    if (y)
        st = glesc_graph_compute(g, &y, 1);
    cr_log_info("conv over a 64 KiB input with a 64 KiB limit: %s: %s", glesc_status_name(st),
                glesc_context_errmsg(small));
    cr_assert_neq(st, GLESC_OK);
    cr_assert(strstr(glesc_context_errmsg(small), "limit"), "%s", glesc_context_errmsg(small));
    /* a weight beyond the limit is split into chunks, which the
     * convolution does not read */
    glesc_tensor *x2 = glesc_tensor_new(g, F32, 4, (int64_t[]){8, 8, 64, 1});
    glesc_tensor *big = glesc_weight_new(small, F32, 4, (int64_t[]){3, 3, 64, 32});
    cr_assert_not_null(big, "%s", glesc_context_errmsg(small));
    cr_assert_eq(glesc_tensor_write_f32(x2, v, 8 * 8 * 64), GLESC_OK);
    y = glesc_conv2d(g, x2, big, NULL, NULL);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(small));
    st = glesc_graph_compute(g, &y, 1);
    cr_log_info("conv with a 72 KiB weight and a 64 KiB limit: %s: %s", glesc_status_name(st),
                glesc_context_errmsg(small));
    cr_assert_eq(st, GLESC_ERROR_LIMIT);
    cr_assert(strstr(glesc_context_errmsg(small), "weight"), "%s", glesc_context_errmsg(small));
    glesc_weight_free(big);
    free(v);
    glesc_weight_free(w);
    glesc_graph_destroy(g);
    glesc_context_destroy(small);
}

/* The folded convolution is a new node: the original stays for another
 * consumer, and a parameter the graph writes in place is no constant. */
Test(conv, folding_keeps_the_original_and_skips_written_parameters)
{
    block k;
    block_new(&k, 4, 8);
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *x = tg_input(g, F32, 4, (int64_t[]){9, 7, 4, 1}, 40, -1, 1);
    glesc_tensor *c = glesc_conv2d(g, x, k.w, k.b, NULL);
    glesc_tensor *y = glesc_batch_norm(g, c, k.bn[0], k.bn[1], k.bn[2], k.bn[3], 1e-5f);
    cr_assert_eq(glesc_tensor_op(y), GLESC_OP_CONV);
    cr_assert_neq(y, c);
    glesc_tensor *outs[2] = {y, glesc_relu(g, c)};
    tg_check(g, outs, 2, 1e-10, "folded conv and the original's relu");
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.dispatches, 2, "the folded and the original convolution: %d", s.dispatches);
    glesc_graph_destroy(g);

    /* a graph that copies into the variance: no fold, same values */
    g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    x = tg_input(g, F32, 4, (int64_t[]){9, 7, 4, 1}, 40, -1, 1);
    glesc_tensor *v = tg_input(g, F32, 1, (int64_t[]){8}, 41, 0.5f, 1.0f);
    glesc_tensor *w = glesc_cpy(g, v, k.bn[3]);
    cr_assert_not_null(w, "%s", glesc_context_errmsg(ctx));
    c = glesc_conv2d(g, x, k.w, k.b, NULL);
    y = glesc_batch_norm(g, c, k.bn[0], k.bn[1], k.bn[2], k.bn[3], 1e-5f);
    cr_assert_eq(glesc_tensor_op(y), GLESC_OP_BATCH_NORM, "a written parameter is no constant");
    glesc_graph_destroy(g);
    block_free(&k);
}

/* One structure at several sizes: the plan cache reuses a plan when the
 * variant is the same (new sizes in the uniforms) and makes a new one
 * when the blocking changes. */
Test(conv, sizes_change_under_one_structure)
{
    static const int64_t sizes[][2] = {{33, 30}, {35, 31}, {64, 64}, {9, 5}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *x =
            tg_input(g, F32, 4, (int64_t[]){sizes[i][0], sizes[i][1], 6, 1}, 50, -1, 1);
        glesc_tensor *w = tg_input(g, F32, 4, (int64_t[]){3, 3, 3, 12}, 51, -1, 1);
        glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){12}, 52, -1, 1);
        glesc_conv_params p;
        glesc_conv_params_init(&p);
        p.strides[0] = p.strides[1] = 2;
        p.pads[0] = p.pads[1] = p.pads[2] = p.pads[3] = 1;
        p.group = 2;
        glesc_tensor *y = glesc_clamp(g, glesc_conv2d(g, x, w, b, &p), 0.0f, 6.0f);
        char what[64];
        snprintf(what, sizeof what, "conv + relu6 at %lldx%lld", (long long)sizes[i][0],
                 (long long)sizes[i][1]);
        free(check(g, y, 1e-5, what));
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_log_info("%s: plan %s", what, s.plan_reused ? "reused" : "new");
        glesc_graph_destroy(g);
    }
}
