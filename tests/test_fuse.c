/*
 * test_fuse.c — every fusion kind: the fused result equals the unfused one
 * (and the CPU reference) within tolerance, and the kernel/dispatch count is
 * what fusion promises; the legality rules (outputs, several consumers,
 * views, the binding limit, memory overlap) keep nodes apart.
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

TEST_GPU_SUITE(fuse);

typedef glesc_tensor *(*build_fn)(glesc_graph *g, glesc_tensor **extra_outs, int *n_extra);

/* Builds the same graph with fusion off and on; both must match the CPU
 * reference, each other, and the on-run must take `dispatches` dispatches. */
static void fused_vs_unfused(const char *what, build_fn build, int dispatches, double tol)
{
    float *res[2];
    int64_t n = 0;
    int disp[2];
    for (int pass = 0; pass < 2; pass++) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, pass ? 1 : -1);
        glesc_tensor *outs[4];
        int n_extra = 0;
        outs[0] = build(g, outs + 1, &n_extra);
        cr_assert_not_null(outs[0], "%s: %s", what, glesc_context_errmsg(ctx));
        tg_check(g, outs, 1 + n_extra, tol, what);
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        disp[pass] = s.dispatches;
        cr_log_info("%s, fusion %s: %d nodes → %d kernels, %d dispatches", what,
                    pass ? "on " : "off", s.nodes, s.kernels, s.dispatches);
        res[pass] = tg_read(outs[0]);
        n = glesc_tensor_nelements(outs[0]);
        glesc_graph_destroy(g);
    }
    double e = tg_nmse(res[1], res[0], n);
    cr_log_info("%s: fused vs unfused NMSE %.3g", what, e);
    cr_assert_leq(e, tol, "%s: fused differs from unfused: NMSE %g", what, e);
    cr_assert_eq(disp[1], dispatches, "%s: %d dispatches with fusion, want %d", what, disp[1],
                 dispatches);
    cr_assert_gt(disp[0], disp[1]);
    free(res[0]);
    free(res[1]);
}

/* ---- elementwise ---- */

static glesc_tensor *chain6(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){257, 3}, 1, -2, 2);
    glesc_tensor *b = tg_input(g, F16, 1, (int64_t[]){257}, 2, -1, 1);
    glesc_tensor *y = glesc_add(g, a, b);
    y = glesc_mul(g, y, a);
    y = glesc_silu(g, y);
    y = glesc_scale(g, y, 0.5f, 0.25f);
    y = glesc_unary(g, GLESC_OP_TANH, y);
    return glesc_sub(g, y, b);
}

Test(fuse, elementwise_chain_of_six_is_one_dispatch)
{
    fused_vs_unfused("6-op chain", chain6, 1, 1e-10);
}

static glesc_tensor *tree(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* (x+y)*(z-w) / exp(x): a tree with a shared leaf */
    glesc_tensor *a = tg_input(g, F32, 3, (int64_t[]){31, 5, 2}, 3, -1, 1);
    glesc_tensor *b = tg_input(g, F32, 3, (int64_t[]){31, 5, 2}, 4, -1, 1);
    glesc_tensor *c = tg_input(g, F32, 3, (int64_t[]){31, 1, 2}, 5, -1, 1);
    glesc_tensor *l = glesc_add(g, a, b), *r = glesc_sub(g, c, b);
    return glesc_div(g, glesc_mul(g, l, r), glesc_exp(g, a));
}

Test(fuse, elementwise_tree_is_one_dispatch)
{
    fused_vs_unfused("tree", tree, 1, 1e-10);
}

/* ---- norms, reductions, softmax ---- */

static glesc_tensor *norm_mul(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){1031, 3}, 6, -2, 2);
    glesc_tensor *w = tg_input(g, F16, 1, (int64_t[]){1031}, 7, 0.5f, 1.5f);
    return glesc_mul(g, glesc_rms_norm(g, a, 1e-6f), w);
}

Test(fuse, rms_norm_times_weight_is_one_dispatch)
{
    fused_vs_unfused("rms_norm·w", norm_mul, 1, 1e-10);
}

static glesc_tensor *add_norm_mul(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){257, 5}, 8, -2, 2);
    glesc_tensor *r = tg_input(g, F32, 2, (int64_t[]){257, 5}, 9, -2, 2);
    glesc_tensor *w = tg_input(g, F32, 1, (int64_t[]){257}, 10, 0.5f, 1.5f);
    glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){257}, 11, -1, 1);
    return glesc_add(g, glesc_mul(g, glesc_rms_norm(g, glesc_add(g, a, r), 1e-5f), w), b);
}

Test(fuse, residual_prologue_and_norm_epilogue_is_one_dispatch)
{
    fused_vs_unfused("(x+r) → rms_norm → ·w + b", add_norm_mul, 1, 1e-10);
}

static glesc_tensor *layer_norm_affine(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){255, 4}, 12, -2, 2);
    glesc_tensor *w = tg_input(g, F32, 1, (int64_t[]){255}, 13, 0.5f, 1.5f);
    glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){255}, 14, -1, 1);
    return glesc_add(g, glesc_mul(g, glesc_layer_norm(g, glesc_scale(g, a, 2, 0), 1e-5f), w), b);
}

Test(fuse, layer_norm_affine_is_one_dispatch)
{
    fused_vs_unfused("layer_norm(2x)·w + b", layer_norm_affine, 1, 1e-10);
}

static glesc_tensor *reduce_pro_epi(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 3, (int64_t[]){33, 31, 2}, 15, -2, 2);
    /* mean of squares along axis 1, then sqrt: prologue and epilogue */
    return glesc_sqrt(g, glesc_reduce(g, GLESC_OP_MEAN, glesc_unary(g, GLESC_OP_SQR, a), 1));
}

Test(fuse, reduction_prologue_and_epilogue_is_one_dispatch)
{
    fused_vs_unfused("sqrt(mean(x², axis 1))", reduce_pro_epi, 1, 1e-10);
}

static glesc_tensor *softmax_fused(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){257, 7}, 16, -4, 4);
    glesc_tensor *m = tg_input(g, F32, 2, (int64_t[]){257, 7}, 17, -1, 0);
    /* tanh soft-capping before, a scale after */
    glesc_tensor *s = glesc_softmax(g, glesc_unary(g, GLESC_OP_TANH, a), m, 2.0f, true);
    return glesc_scale(g, s, 3, 0);
}

Test(fuse, softmax_prologue_and_epilogue_is_one_dispatch)
{
    fused_vs_unfused("softmax(tanh x, mask, causal)·3", softmax_fused, 1, 1e-10);
}

/* ---- legality ---- */

static int kernels_of(glesc_graph *g, glesc_tensor **outs, int n)
{
    cr_assert_eq(glesc_graph_compute(g, outs, n), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    return s.kernels;
}

Test(fuse, requested_output_is_not_fused_away)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 1, (int64_t[]){100}, 1, -1, 1);
    glesc_tensor *mid = glesc_exp(g, a);
    glesc_tensor *outs[2] = {glesc_neg(g, mid), mid};
    cr_assert_eq(kernels_of(g, outs, 2), 2);
    tg_check(g, outs, 2, 1e-12, "output in the middle");
    glesc_graph_destroy(g);
}

Test(fuse, node_with_two_consumers_is_not_fused)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 1, (int64_t[]){100}, 1, -1, 1);
    glesc_tensor *e = glesc_exp(g, a);
    glesc_tensor *y = glesc_add(g, glesc_neg(g, e), glesc_sqrt(g, e));
    /* exp has two consumers: {exp}, {neg, sqrt, add} */
    cr_assert_eq(kernels_of(g, &y, 1), 2);
    tg_check(g, &y, 1, 1e-12, "two consumers");
    glesc_graph_destroy(g);
}

Test(fuse, views_and_broadcast_producers)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){31, 33}, 1, -1, 1);
    glesc_tensor *b = tg_input(g, F32, 2, (int64_t[]){33, 31}, 2, -1, 1);
    /* a transpose only renames coordinates: exp is computed inside the add */
    glesc_tensor *y = glesc_add(g, glesc_transpose(g, glesc_exp(g, a)), b);
    cr_assert_eq(kernels_of(g, &y, 1), 1);
    tg_check(g, &y, 1, 1e-12, "through a transpose");
    /* a strided window of exp(a) is read from memory: exp is materialized */
    glesc_tensor *w = glesc_view(g, glesc_exp(g, a), 2, (int64_t[]){8, 6}, (size_t[]){0, 124}, 8);
    glesc_tensor *z = glesc_neg(g, w);
    cr_assert_eq(kernels_of(g, &z, 1), 2);
    tg_check(g, &z, 1, 1e-12, "through a strided view");
    /* a broadcast producer ([33, 1] into [33, 31]) is not recomputed per element */
    glesc_tensor *c = tg_input(g, F32, 2, (int64_t[]){33, 1}, 3, -1, 1);
    glesc_tensor *u = glesc_mul(g, glesc_exp(g, c), b);
    cr_assert_eq(kernels_of(g, &u, 1), 2);
    tg_check(g, &u, 1, 1e-12, "broadcast producer");
    glesc_graph_destroy(g);
}

Test(fuse, binding_limit_splits_wide_kernels)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *y = NULL;
    for (int i = 0; i < 20; i++) {
        glesc_tensor *x = tg_input(g, F32, 1, (int64_t[]){77}, (uint32_t)i, -1, 1);
        y = y ? glesc_add(g, y, x) : x;
    }
    /* 20 inputs + 1 output > 16 bindings (at most, and at most what the
     * device allows): at least two kernels, each within the limit */
    int k = kernels_of(g, &y, 1);
    cr_assert_geq(k, 2);
    cr_assert_leq(k, 3);
    tg_check(g, &y, 1, 1e-12, "20-input sum");
    glesc_graph_destroy(g);
}

Test(fuse, many_views_of_one_buffer_stay_within_the_kernel_limits)
{
    /* 40 windows of one input: one binding, but 40 loads with their uniforms */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *x = tg_input(g, F32, 1, (int64_t[]){400}, 1, -1, 1);
    glesc_tensor *y = NULL;
    for (int i = 0; i < 40; i++) {
        glesc_tensor *w = glesc_view(g, x, 1, (int64_t[]){50}, NULL, (size_t)i * 4 * 7);
        y = y ? glesc_add(g, y, w) : w;
    }
    int k = kernels_of(g, &y, 1);
    cr_assert_geq(k, 3);
    tg_check(g, &y, 1, 1e-12, "sum of 40 windows");
    glesc_graph_destroy(g);
}

Test(fuse, in_place_write_over_own_input_is_refused)
{
    /* cache = cpy(exp(cache) + 1, cache): the copy writes the memory its
     * prologue reads, so the prologue stays a separate kernel */
    glesc_tensor *cache = glesc_weight_new(ctx, F32, 1, (int64_t[]){64});
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i / 64;
    tg_write(cache, v);
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *y = glesc_cpy(g, glesc_scale(g, glesc_exp(g, cache), 1, 1), cache);
    cr_assert_eq(kernels_of(g, &y, 1), 2);
    float *r = tg_read(y);
    for (int i = 0; i < 64; i++)
        cr_assert_float_eq(r[i], expf(v[i]) + 1, 1e-5);
    free(r);
    glesc_graph_destroy(g);
    glesc_weight_free(cache);
}

Test(fuse, env_switch_disables_fusion)
{
    setenv("GLESC_NO_FUSION", "1", 1);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *y = chain6(g, NULL, NULL);
    cr_assert_eq(kernels_of(g, &y, 1), 6);
    glesc_graph_destroy(g);
    unsetenv("GLESC_NO_FUSION");
    g = glesc_graph_create(ctx);
    y = chain6(g, NULL, NULL);
    cr_assert_eq(kernels_of(g, &y, 1), 1);
    glesc_graph_destroy(g);
}

/* ---- matmul epilogues and the gate/up pair ---- */

static int64_t mm_m = 1;

static glesc_tensor *mm_epilogue(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){96, 80}, 20, -1, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){96, mm_m}, 21, -1, 1);
    glesc_tensor *bias = tg_input(g, F32, 1, (int64_t[]){80}, 22, -1, 1);
    glesc_tensor *res = tg_input(g, F32, 2, (int64_t[]){80, mm_m}, 23, -1, 1);
    /* residual + gelu(W·x + bias) */
    return glesc_add(g, res, glesc_gelu(g, glesc_add(g, glesc_matmul(g, w, a), bias)));
}

Test(fuse, matmul_bias_activation_residual_is_one_dispatch)
{
    mm_m = 1; /* GEMV */
    fused_vs_unfused("res + gelu(W·x + b), m=1", mm_epilogue, 1, 1e-9);
    mm_m = 20; /* GEMM */
    fused_vs_unfused("res + gelu(W·x + b), m=20", mm_epilogue, 1, 1e-9);
}

static glesc_tensor *gate_up(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *wg = tg_input(g, F16, 2, (int64_t[]){64, 100}, 24, -1, 1);
    glesc_tensor *wu = tg_input(g, F16, 2, (int64_t[]){64, 100}, 25, -1, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, mm_m}, 26, -1, 1);
    glesc_tensor *gate = glesc_matmul(g, wg, a), *up = glesc_matmul(g, wu, a);
    return glesc_mul(g, glesc_silu(g, gate), up);
}

static glesc_tensor *up_gate(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *wg = tg_input(g, F32, 2, (int64_t[]){64, 100}, 24, -1, 1);
    glesc_tensor *wu = tg_input(g, F32, 2, (int64_t[]){64, 100}, 25, -1, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, mm_m}, 26, -1, 1);
    glesc_tensor *gate = glesc_matmul(g, wg, a), *up = glesc_matmul(g, wu, a);
    return glesc_mul(g, up, glesc_silu(g, gate)); /* operands the other way round */
}

Test(fuse, gate_up_silu_mul_is_one_dispatch)
{
    mm_m = 3;
    fused_vs_unfused("silu(Wg·x)·(Wu·x), m=3", gate_up, 1, 1e-9);
    fused_vs_unfused("(Wu·x)·silu(Wg·x), m=3", up_gate, 1, 1e-9);
    mm_m = 70;
    fused_vs_unfused("silu(Wg·x)·(Wu·x), m=70", gate_up, 1, 1e-9);
}

static glesc_tensor *norm_qkv(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* rms_norm·w, then the product: the norm is the matmul's reduction
     * prologue (its squares summed in the matmul's k loop) */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, mm_m}, 27, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 28, 0.5f, 1.5f);
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){64, 48}, 29, -1, 1);
    return glesc_matmul(g, w, glesc_mul(g, glesc_rms_norm(g, a, 1e-6f), nw));
}

static glesc_tensor *res_norm_gate_up(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* (x + r) → rms_norm·w → silu(Wg·h)·(Wu·h): h has two consumers, both
     * in the gate/up kernel; the residual add is recomputed there too */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){96, mm_m}, 41, -1, 1);
    glesc_tensor *r = tg_input(g, F32, 2, (int64_t[]){96, mm_m}, 42, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){96}, 43, 0.5f, 1.5f);
    glesc_tensor *wg = tg_input(g, F16, 2, (int64_t[]){96, 72}, 44, -1, 1);
    glesc_tensor *wu = tg_input(g, F16, 2, (int64_t[]){96, 72}, 45, -1, 1);
    glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, glesc_add(g, a, r), 1e-5f), nw);
    return glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg, h)), glesc_matmul(g, wu, h));
}

Test(fuse, norm_folds_into_matmul)
{
    mm_m = 1; /* GEMV */
    fused_vs_unfused("W·(rms_norm(x)·w), m=1", norm_qkv, 1, 1e-9);
    mm_m = 2;
    fused_vs_unfused("W·(rms_norm(x)·w), m=2", norm_qkv, 1, 1e-9);
    mm_m = 1;
    fused_vs_unfused("gate/up of rms_norm(x + r)·w, m=1", res_norm_gate_up, 1, 1e-9);
    /* a GEMM (more than 8 columns) takes the norm only when asked
     * (GLESC_FUSE_GEMM_NORM): by default the norm keeps its kernel */
    mm_m = 37; /* a partial tile */
    fused_vs_unfused("W·(rms_norm(x)·w), m=37, the norm its own kernel", norm_qkv, 2, 1e-9);
    mm_m = 70;
    fused_vs_unfused("gate/up of rms_norm(x + r)·w, m=70, the norm its own kernel",
                     res_norm_gate_up, 2, 1e-9);
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1);
    mm_m = 37;
    fused_vs_unfused("W·(rms_norm(x)·w), m=37, folded", norm_qkv, 1, 1e-9);
    mm_m = 70;
    fused_vs_unfused("gate/up of rms_norm(x + r)·w, m=70, folded", res_norm_gate_up, 1, 1e-9);
    unsetenv("GLESC_FUSE_GEMM_NORM");
}

static glesc_tensor *norm_nonlinear(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* rms_norm(x)·w + b is not linear in the norm: the scale cannot be
     * applied after the product, so the norm keeps its own kernel */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, 1}, 46, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 47, 0.5f, 1.5f);
    glesc_tensor *nb = tg_input(g, F32, 1, (int64_t[]){64}, 48, -1, 1);
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){64, 48}, 49, -1, 1);
    return glesc_matmul(g, w, glesc_add(g, glesc_mul(g, glesc_rms_norm(g, a, 1e-6f), nw), nb));
}

Test(fuse, norm_with_a_nonlinear_epilogue_keeps_its_kernel)
{
    fused_vs_unfused("W·(rms_norm(x)·w + b)", norm_nonlinear, 2, 1e-9);
}

Test(fuse, norm_read_outside_the_matmul_keeps_its_kernel)
{
    /* h = rms_norm(x)·w feeds the matmul and is also added to its result:
     * h must exist in memory, so the norm is not folded */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, 1}, 50, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 51, 0.5f, 1.5f);
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){64, 64}, 52, -1, 1);
    glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, a, 1e-6f), nw);
    glesc_tensor *y = glesc_add(g, glesc_matmul(g, w, h), h);
    cr_assert_eq(kernels_of(g, &y, 1), 2);
    tg_check(g, &y, 1, 1e-9, "W·h + h");
    glesc_graph_destroy(g);
}

/* ---- grouped matmuls ---- */

static bool qkv_norm;

static glesc_tensor *qkv_group(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* q, k and v of one activation (optionally rms_norm·w of it): one
     * kernel whose workgroups pick their matmul by row range; different
     * row counts, weight types and epilogues */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, mm_m}, 53, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 54, 0.5f, 1.5f);
    glesc_tensor *h = qkv_norm ? glesc_mul(g, glesc_rms_norm(g, a, 1e-5f), nw) : a;
    glesc_tensor *wq = tg_input(g, F16, 2, (int64_t[]){64, 96}, 55, -1, 1);
    glesc_tensor *wk = tg_input(g, F32, 2, (int64_t[]){64, 32}, 56, -1, 1);
    glesc_tensor *wv = tg_input(g, F16, 2, (int64_t[]){64, 36}, 57, -1, 1);
    glesc_tensor *bq = tg_input(g, F32, 1, (int64_t[]){96}, 58, -1, 1);
    glesc_tensor *bv = tg_input(g, F32, 1, (int64_t[]){36}, 59, -1, 1);
    x[0] = glesc_matmul(g, wk, h);
    x[1] = glesc_silu(g, glesc_add(g, glesc_matmul(g, wv, h), bv));
    *n = 2;
    return glesc_add(g, glesc_matmul(g, wq, h), bq);
}

/* The narrow GEMM's skips (a graph's graph_narrow_skips: a session's
 * first prompts; GLESC_FUSE_SKIP_NARROW, or the large GPUs' row): q, k and
 * v apart in a GEMM of up to 64 columns and in one column on the batch
 * kernels (a first step on the prompt's programs), grouped in a GEMV, in
 * the wide GEMM and in a graph that does not ask; each matches the CPU
 * reference. */
Test(fuse, narrow_skips_leave_only_the_narrow_gemm_apart)
{
    static const struct {
        int64_t m;
        bool batch;
        int kernels;
        bool ask;
    } cases[] = {{1, false, 1, true},  {1, true, 3, true},    {40, false, 3, true},
                 {70, false, 1, true}, {40, false, 1, false}, {1, true, 1, false}};
    setenv("GLESC_FUSE_SKIP_NARROW", "group", 1);
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        mm_m = cases[i].m;
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, 1);
        graph_narrow_skips(g, cases[i].ask);
        glesc_tensor *outs[3];
        int n_extra = 0;
        outs[0] = qkv_group(g, outs + 1, &n_extra);
        if (cases[i].batch)
            graph_batch_kernels(g);
        char name[64];
        snprintf(name, sizeof name, "q/k/v, m=%lld%s%s", (long long)cases[i].m,
                 cases[i].batch ? ", batch kernels" : "", cases[i].ask ? "" : ", not asked");
        tg_check(g, outs, 1 + n_extra, 1e-9, name);
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_assert_eq(s.kernels, cases[i].kernels, "%s: %d kernels", name, s.kernels);
        glesc_graph_destroy(g);
    }
    unsetenv("GLESC_FUSE_SKIP_NARROW");
}

Test(fuse, qkv_matmuls_of_one_activation_are_one_dispatch)
{
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1); /* the norm folded into the GEMMs too */
    for (int nrm = 0; nrm <= 1; nrm++) {
        qkv_norm = nrm;
        mm_m = 1;
        fused_vs_unfused(nrm ? "q, k, v of rms_norm(x)·w, m=1" : "q, k, v of x, m=1", qkv_group, 1,
                         1e-9);
        mm_m = 3;
        fused_vs_unfused(nrm ? "q, k, v of rms_norm(x)·w, m=3" : "q, k, v of x, m=3", qkv_group, 1,
                         1e-9);
        mm_m = 70; /* GEMM */
        fused_vs_unfused(nrm ? "q, k, v of rms_norm(x)·w, m=70" : "q, k, v of x, m=70", qkv_group,
                         1, 1e-9);
    }
    qkv_norm = false;
    unsetenv("GLESC_FUSE_GEMM_NORM");
}

/* The storage buffers of each kernel in a plan's GLSL (one #version a kernel). */
static void bindings_per_kernel(const char *glsl, int *most, int *kernels)
{
    *most = *kernels = 0;
    for (const char *k = strstr(glsl, "#version"); k;) {
        const char *next = strstr(k + 1, "#version");
        int n = 0;
        for (const char *b = strstr(k, "buffer "); b && (!next || b < next);
             b = strstr(b + 1, "buffer "))
            n++;
        *most = n > *most ? n : *most;
        (*kernels)++;
        k = next;
    }
}

Test(fuse, a_kernel_over_the_device_limit_is_split_not_failed)
{
    /* rms_norm(x)·w with q, k and v as one GEMM: x, the norm's weight, three
     * weights and three results are the 8 buffers the fusion pass counts;
     * the GEMM's generator also binds its split's scratch: 9. On a device
     * of 8 storage blocks (Mali) the planner splits the kernel (the norm
     * in a kernel of its own), it is not refused. */
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1);
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "off";
    cr_assert_eq(glesc_context_options_limits(&o, "blocks=8"), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context *small;
    cr_assert_eq(glesc_context_create(&o, &small), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_context_caps(small)->max_compute_storage_blocks, 8);
    int n_kernels[2], most[2];
    glesc_context *ctxs[2] = {ctx, small};
    for (int c = 0; c < 2; c++) {
        glesc_graph *g = glesc_graph_create(ctxs[c]);
        tg_fusion(g, 1);
        glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, 70}, 53, -1, 1);
        glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 54, 0.5f, 1.5f);
        glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, a, 1e-5f), nw);
        glesc_tensor *outs[3];
        for (int i = 0; i < 3; i++)
            outs[i] = glesc_matmul(
                g, tg_input(g, F16, 2, (int64_t[]){64, 32 + 16 * i}, 55 + (uint32_t)i, -1, 1), h);
        cr_assert_eq(glesc_graph_compute(g, outs, 3), GLESC_OK, "%s",
                     glesc_context_errmsg(ctxs[c]));
        tg_check(g, outs, 3, 1e-9,
                 c ? "q, k, v of rms_norm(x)·w on 8 blocks" : "q, k, v of rms_norm(x)·w");
        int k;
        bindings_per_kernel(glesc_graph_last_glsl(g), &most[c], &k);
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        n_kernels[c] = s.kernels;
        cr_assert_eq(k, s.kernels);
        cr_log_info("%s storage blocks: %d kernels, at most %d buffers in one", c ? "8" : "16",
                    s.kernels, most[c]);
        glesc_graph_destroy(g);
    }
    cr_assert_eq(n_kernels[0], 1, "the test needs the fused kernel where it fits");
    cr_assert_eq(most[0], 9, "the fused kernel binds 9 buffers (the test's premise)");
    cr_assert_eq(n_kernels[1], 2, "split in two on 8 blocks");
    cr_assert_leq(most[1], 8);
    glesc_context_destroy(small);
    unsetenv("GLESC_FUSE_GEMM_NORM");
}

Test(fuse, an_op_over_the_device_limit_is_named)
{
    /* a + b binds 3 buffers; on a device of 2 (below anything real: GLES
     * 3.1 guarantees 4) there is nothing to split: the error names the
     * kernel and the limit */
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "off";
    o.max_compute_storage_blocks = 2;
    glesc_context *tiny;
    cr_assert_eq(glesc_context_create(&o, &tiny), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_graph *g = glesc_graph_create(tiny);
    glesc_tensor *a = tg_input(g, F32, 1, (int64_t[]){64}, 1, -1, 1);
    glesc_tensor *b = tg_input(g, F32, 1, (int64_t[]){64}, 2, -1, 1);
    glesc_tensor *y = glesc_add(g, a, b);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_ERROR_LIMIT);
    const char *m = glesc_context_errmsg(tiny);
    cr_log_info("%s", m);
    cr_assert(strstr(m, "kernel add needs 3 storage buffers, the device allows 2"), "%s", m);
    glesc_graph_destroy(g);
    glesc_context_destroy(tiny);
}

Test(fuse, matmul_reading_its_siblings_result_is_not_grouped)
{
    /* Wb·x + Wa·x with weights of two types (no gate/up pair): Wa·x is
     * computed by another workgroup, so b's kernel cannot join a's */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, 1}, 60, -1, 1);
    glesc_tensor *wa = tg_input(g, F16, 2, (int64_t[]){64, 48}, 61, -1, 1);
    glesc_tensor *wb = tg_input(g, F32, 2, (int64_t[]){64, 48}, 62, -1, 1);
    glesc_tensor *ya = glesc_matmul(g, wa, a);
    glesc_tensor *outs[2] = {glesc_add(g, glesc_matmul(g, wb, a), ya), ya};
    cr_assert_eq(kernels_of(g, outs, 2), 2);
    tg_check(g, outs, 2, 1e-9, "Wb·x + Wa·x");
    glesc_graph_destroy(g);
}

/* ---- rope and the KV-cache write ---- */

static glesc_tensor *cache;

static glesc_tensor *rope_set_rows(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* as a decoder layer writes keys: rope on [d, n_head_kv, tokens], seen as
     * rows [d·n_head_kv, tokens] of the cache [d·n_head_kv, ctx] (f16) */
    int64_t d = 16, hkv = 2, t = 3;
    glesc_tensor *k = tg_input(g, F32, 3, (int64_t[]){d, hkv, t}, 30, -1, 1);
    glesc_tensor *pos = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){t});
    tg_write(pos, (float[]){4, 5, 6});
    glesc_tensor *kr = glesc_rope(g, k, pos, (int)d, GLESC_ROPE_NEOX, 10000, 1);
    tg_fill(cache, 31, -1, 1);
    return glesc_set_rows(g, cache, glesc_reshape(g, kr, 2, (int64_t[]){d * hkv, t}), pos);
}

Test(fuse, rope_into_set_rows_is_one_dispatch)
{
    cache = glesc_weight_new(ctx, F16, 2, (int64_t[]){32, 10});
    fused_vs_unfused("set_rows(cache, reshape(rope(k)))", rope_set_rows, 1, 1e-8);
    glesc_weight_free(cache);
}

static glesc_tensor *qnorm_rope(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* rope reads a partner element: it cannot be a norm's epilogue */
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){32, 2, 3}, 32, -1, 1);
    glesc_tensor *w = tg_input(g, F32, 1, (int64_t[]){32}, 33, 0.5f, 1.5f);
    glesc_tensor *pos = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){3}, 34, 0, 20);
    return glesc_rope(g, glesc_mul(g, glesc_rms_norm(g, q, 1e-6f), w), pos, 32, GLESC_ROPE_NORMAL,
                      10000, 1);
}

Test(fuse, rope_is_not_an_anchor_epilogue)
{
    fused_vs_unfused("rope(rms_norm(q)·w)", qnorm_rope, 2, 1e-8);
}

static glesc_tensor *rope_attention(glesc_graph *g, glesc_tensor **x, int *n)
{
    int64_t d = 32, h = 4, hkv = 2, t = 3;
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){d, h, t}, 35, -1, 1);
    glesc_tensor *k = tg_input(g, F16, 3, (int64_t[]){d, 7, hkv}, 36, -1, 1);
    glesc_tensor *v = tg_input(g, F16, 3, (int64_t[]){d, 7, hkv}, 37, -1, 1);
    glesc_tensor *pos = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){t});
    tg_write(pos, (float[]){4, 5, 6});
    glesc_tensor *qr = glesc_rope(g, q, pos, (int)d, GLESC_ROPE_NORMAL, 10000, 1);
    static const int perm[4] = {0, 2, 1, 3};
    return glesc_attention(g, glesc_permute(g, qr, perm), k, v, NULL, 0.2f, true);
}

Test(fuse, rope_into_attention_is_one_dispatch)
{
    fused_vs_unfused("attention(permute(rope(q)), k, v)", rope_attention, 1, 1e-9);
}

/* A decoder layer's attention as the runtime builds it: new keys (rope'd;
 * with qwen3's per-head norms first) and values written into f16/f32 caches
 * at the given positions, attention over the first n_kv cache rows. With
 * fusion the writes (and the norms) are part of the attention kernel. */
typedef struct kv_case {
    int64_t d, h, hkv, t, ctx, n_kv;
    int32_t pos[4];
    bool norms;
    glesc_dtype kv;
    int n_swa;     /* a local layer's window (gemma), 0: none */
    float softcap; /* gemma2's score cap, 0: none */
    bool fused;    /* q, k, v strided views of one projection (phi3's attn_qkv) */
} kv_case;

static glesc_tensor *cache_view(glesc_graph *g, glesc_tensor *c, const kv_case *kc)
{
    size_t es = kc->kv == F32 ? 4 : 2;
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *v =
        glesc_view(g, c, 3, (int64_t[]){kc->d, kc->hkv, kc->n_kv},
                   (size_t[]){0, (size_t)kc->d * es, (size_t)(kc->d * kc->hkv) * es}, 0);
    return glesc_permute(g, v, perm);
}

static void kv_run(const kv_case *kc, int fusion, glesc_tensor *kcache, glesc_tensor *vcache,
                   float **out, float **kout, float **vout, int *dispatches)
{
    tg_fill(kcache, 80, -1, 1);
    tg_fill(vcache, 81, -1, 1);
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, fusion);
    int64_t d = kc->d, t = kc->t;
    glesc_tensor *q, *k, *v;
    if (kc->fused) {
        int64_t qd = d * kc->h, kvd = d * kc->hkv;
        size_t ld = (size_t)(qd + 2 * kvd) * 4;
        glesc_tensor *qkv = tg_input(g, F32, 2, (int64_t[]){qd + 2 * kvd, t}, 82, -1, 1);
        q = glesc_view(g, qkv, 3, (int64_t[]){d, kc->h, t}, (size_t[]){0, (size_t)d * 4, ld}, 0);
        k = glesc_view(g, qkv, 3, (int64_t[]){d, kc->hkv, t}, (size_t[]){0, (size_t)d * 4, ld},
                       (size_t)qd * 4);
        v = glesc_view(g, qkv, 2, (int64_t[]){kvd, t}, (size_t[]){0, ld}, (size_t)(qd + kvd) * 4);
    } else {
        q = tg_input(g, F32, 3, (int64_t[]){d, kc->h, t}, 82, -1, 1);
        k = tg_input(g, F32, 3, (int64_t[]){d, kc->hkv, t}, 83, -1, 1);
        v = tg_input(g, F32, 2, (int64_t[]){d * kc->hkv, t}, 84, -1, 1);
    }
    if (kc->softcap > 0) /* scores large enough for the cap to matter */
        q = glesc_scale(g, q, 3.0f * kc->softcap, 0);
    glesc_tensor *pos = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){t});
    cr_assert_eq(glesc_tensor_write(pos, kc->pos, (size_t)t * 4), GLESC_OK);
    if (kc->norms) {
        glesc_tensor *qn = tg_input(g, F32, 1, (int64_t[]){d}, 85, 0.5f, 1.5f);
        glesc_tensor *kn = tg_input(g, F32, 1, (int64_t[]){d}, 86, 0.5f, 1.5f);
        q = glesc_mul(g, glesc_rms_norm(g, q, 1e-6f), qn);
        k = glesc_mul(g, glesc_rms_norm(g, k, 1e-6f), kn);
    }
    q = glesc_rope(g, q, pos, (int)d, GLESC_ROPE_NEOX, 10000, 1);
    k = glesc_rope(g, k, pos, (int)d, GLESC_ROPE_NEOX, 10000, 1);
    glesc_tensor *ks =
        glesc_set_rows(g, kcache, glesc_reshape(g, k, 2, (int64_t[]){d * kc->hkv, t}), pos);
    glesc_tensor *vs = glesc_set_rows(g, vcache, v, pos);
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *y = glesc_attention_ext(g, glesc_permute(g, q, perm), cache_view(g, ks, kc),
                                          cache_view(g, vs, kc), NULL, 1.0f / sqrtf((float)d), true,
                                          kc->n_swa, kc->softcap);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    tg_check(g, &y, 1, 1e-9,
             kc->norms ? "normed k/v cache write + attention" : "k/v cache write + attention");
    glesc_compute_stats st;
    glesc_graph_stats(g, &st);
    *dispatches = st.dispatches;
    *out = tg_read(y);
    *kout = tg_read(kcache);
    *vout = tg_read(vcache);
    glesc_graph_destroy(g);
}

Test(fuse, cache_writes_join_the_attention)
{
    static const kv_case cases[] = {
        {32, 4, 2, 1, 16, 8, {7}, false, F16, 0, 0, false},       /* decode */
        {16, 4, 1, 3, 12, 9, {6, 7, 8}, false, F32, 0, 0, false}, /* prefill of 3 */
        /* positions out of order: the search */
        {16, 4, 2, 3, 12, 9, {6, 2, 8}, false, F16, 0, 0, false},
        {32, 8, 2, 1, 300, 260, {259}, false, F32, 0, 0, false}, /* the new row in the last split */
        {32, 4, 2, 2, 16, 10, {8, 9}, true, F16, 0, 0, false},   /* per-head q/k norms (qwen3) */
        {16, 2, 2, 1, 8, 1, {0}, true, F32, 0, 0, false},        /* the first token */
        /* gemma: a window and capped scores, decode over splits and prefill */
        {32, 8, 2, 1, 300, 260, {259}, false, F32, 40, 5.0f, false},
        {16, 4, 2, 3, 12, 9, {6, 7, 8}, true, F16, 2, 0.5f, false},
        /* phi3: q, k, v windows of one projection */
        {16, 4, 1, 3, 12, 9, {6, 7, 8}, false, F32, 0, 0, true},
        {32, 4, 2, 1, 16, 8, {7}, false, F16, 0, 0, true},
    };
    /* this device's class (llvmpipe: the decode kernel serves up to 8
     * queries, kernels/devclass.c), then the default class's (prefill's
     * kernel from 2) */
    glesc_context *own = ctx, *dflt = NULL;
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "off";
    o.device_class = "default";
    cr_assert_eq(glesc_context_create(&o, &dflt), GLESC_OK, "%s", glesc_last_errmsg());
    for (int cls = 0; cls < 2; cls++) {
        ctx = cls ? dflt : own;
        int decode_max_q = strcmp(glesc_context_caps(ctx)->device_class, "llvmpipe") ? 1 : 8;
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
            const kv_case *kc = &cases[i];
            glesc_tensor *kcache =
                glesc_weight_new(ctx, kc->kv, 2, (int64_t[]){kc->d * kc->hkv, kc->ctx});
            glesc_tensor *vcache =
                glesc_weight_new(ctx, kc->kv, 2, (int64_t[]){kc->d * kc->hkv, kc->ctx});
            float *y[2], *kk[2], *vv[2];
            int disp[2];
            for (int pass = 0; pass < 2; pass++)
                kv_run(kc, pass ? 1 : -1, kcache, vcache, &y[pass], &kk[pass], &vv[pass],
                       &disp[pass]);
            int64_t ny = kc->d * kc->h * kc->t, nc = kc->d * kc->hkv * kc->ctx;
            double e = tg_nmse(y[1], y[0], ny);
            cr_log_info("case %zu: %d dispatches fused, %d unfused; fused vs unfused NMSE %.3g", i,
                        disp[1], disp[0], e);
            cr_assert_leq(e, 1e-12, "case %zu: attention differs: %g", i, e);
            /* the same rows written (a norm summed in another order may round
             * differently in f32) */
            cr_assert_leq(tg_nmse(kk[1], kk[0], nc), 1e-12, "case %zu: k cache differs", i);
            cr_assert_eq(memcmp(vv[0], vv[1], (size_t)nc * 4), 0, "case %zu: v cache differs", i);
            /* one kernel; a prefill's writes are a dispatch of their own */
            cr_assert_eq(disp[1], kc->t > decode_max_q ? 2 : 1, "case %zu (%s): %d dispatches", i,
                         glesc_context_caps(ctx)->device_class, disp[1]);
            for (int pass = 0; pass < 2; pass++) {
                free(y[pass]);
                free(kk[pass]);
                free(vv[pass]);
            }
            glesc_weight_free(kcache);
            glesc_weight_free(vcache);
        }
    }
    ctx = own;
    glesc_context_destroy(dflt);
}

static glesc_tensor *mm_prologue(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){96, 40}, 38, -1, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){96, mm_m}, 39, -1, 1);
    glesc_tensor *s = tg_input(g, F32, 1, (int64_t[]){96}, 40, 0.5f, 1.5f);
    return glesc_matmul(g, w, glesc_mul(g, a, s)); /* a per-channel scale of the activation */
}

static glesc_tensor *mm_long_prologue(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *w = tg_input(g, F16, 2, (int64_t[]){96, 40}, 38, -1, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){96, mm_m}, 39, -1, 1);
    glesc_tensor *y = a;
    for (int i = 0; i < 4; i++)
        y = glesc_tanh(g, glesc_scale(g, y, 1.1f, 0.1f));
    return glesc_matmul(g, w, y);
}

Test(fuse, short_activation_prologue_joins_matmul)
{
    mm_m = 2;
    fused_vs_unfused("W·(x·s), m=2", mm_prologue, 1, 1e-9);
    mm_m = 33;
    fused_vs_unfused("W·(x·s), m=33", mm_prologue, 1, 1e-9);
    /* an 8-op chain is computed once, not once per workgroup */
    fused_vs_unfused("W·chain8(x)", mm_long_prologue, 2, 1e-9);
}

/* ---- an arg max folded into the GEMV ---- */

static int am_rows = 1000;
static glesc_dtype am_wtype = F16;

static glesc_tensor *head_argmax(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* the output head of greedy decoding: argmax(W·(rms_norm(x)·w)) along
     * the rows, one kernel (the rows never reach memory) */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){256, 1}, 61, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){256}, 62, 0.5f, 1.5f);
    glesc_tensor *w = tg_input(g, am_wtype, 2, (int64_t[]){256, am_rows}, 63, -1, 1);
    glesc_tensor *y = glesc_matmul(g, w, glesc_mul(g, glesc_rms_norm(g, a, 1e-5f), nw));
    return glesc_reduce(g, GLESC_OP_ARGMAX, y, 0);
}

static glesc_tensor *head_argmax_bias(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* an epilogue between the product and the arg max comes along */
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){128, 1}, 64, -1, 1);
    glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){128, 777}, 65, -1, 1);
    glesc_tensor *bias = tg_input(g, F32, 1, (int64_t[]){777}, 66, -2, 2);
    return glesc_reduce(g, GLESC_OP_ARGMAX, glesc_add(g, glesc_matmul(g, w, a), bias), 0);
}

Test(fuse, argmax_folds_into_the_gemv)
{
    am_rows = 1000;
    fused_vs_unfused("argmax(W·(rms_norm(x)·w)), 1000 rows", head_argmax, 1, 0);
    am_rows = 7; /* fewer rows than a workgroup's */
    fused_vs_unfused("argmax(W·(rms_norm(x)·w)), 7 rows", head_argmax, 1, 0);
    am_rows = 70000; /* more blocks of rows than workgroups */
    am_wtype = F32;
    fused_vs_unfused("argmax(W·(rms_norm(x)·w)), 70000 rows", head_argmax, 1, 0);
    am_rows = 1000;
    am_wtype = F16;
    fused_vs_unfused("argmax(W·x + b)", head_argmax_bias, 1, 0);
}

Test(fuse, argmax_of_several_columns_keeps_its_kernel)
{
    /* m = 2: the GEMV's result is a matrix, the arg max its own kernel */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){64, 2}, 67, -1, 1);
    glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){64, 300}, 68, -1, 1);
    glesc_tensor *y = glesc_reduce(g, GLESC_OP_ARGMAX, glesc_matmul(g, w, a), 0);
    cr_assert_eq(kernels_of(g, &y, 1), 2);
    tg_check(g, &y, 1, 0, "argmax of 2 columns");
    glesc_graph_destroy(g);
}

/* The arg max of a product computed on ctx c into a persistent i32
 * tensor through cpy (greedy decoding's next token), against the arg max
 * of the same product's rows read back; w's rows per dim 1. Returns the
 * index and checks the kernel count (1 with fusion). */
static int32_t argmax_into(glesc_context *c, glesc_tensor *w, const float *xv, int64_t k,
                           int fusion)
{
    glesc_graph *g = glesc_graph_create(c);
    tg_fusion(g, fusion);
    glesc_tensor *slot = glesc_weight_new(c, GLESC_DTYPE_I32, 1, (int64_t[]){1});
    cr_assert_not_null(slot, "%s", glesc_context_errmsg(c));
    glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){k, 1});
    glesc_tensor_write_f32(x, xv, k);
    glesc_tensor *y =
        glesc_cpy(g, glesc_reduce(g, GLESC_OP_ARGMAX, glesc_matmul(g, w, x), 0), slot);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    if (fusion > 0)
        cr_assert_eq(s.kernels, 1, "argmax into a slot: %d kernels", s.kernels);
    int32_t id = -2;
    cr_assert_eq(glesc_tensor_read(slot, &id, 4), GLESC_OK);
    glesc_graph_destroy(g);
    glesc_weight_free(slot);
    return id;
}

/* The first maximum of the rows of W·x as the GPU computes them (fusion
 * off: the product stored, read back). */
static int32_t argmax_of_rows(glesc_context *c, glesc_tensor *w, const float *xv, int64_t k,
                              int64_t n)
{
    glesc_graph *g = glesc_graph_create(c);
    tg_fusion(g, -1);
    glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){k, 1});
    glesc_tensor_write_f32(x, xv, k);
    glesc_tensor *y = glesc_matmul(g, w, x);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    float *r = tg_read(y);
    int32_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(r[i]))
            return free(r), glesc_graph_destroy(g), -1;
        if (r[i] > r[best])
            best = (int32_t)i;
    }
    free(r);
    glesc_graph_destroy(g);
    return best;
}

/* Weights whose rows a and b are the largest product with x = ones, equal
 * (a tie: the first wins), the others random and smaller; optionally a
 * NaN in row nan_row (-1: none). */
static glesc_tensor *tie_weight(glesc_context *c, glesc_dtype t, int64_t k, int64_t n, int64_t a,
                                int64_t b, int64_t nan_row)
{
    glesc_tensor *w = glesc_weight_new(c, t, 2, (int64_t[]){k, n});
    cr_assert_not_null(w, "%s", glesc_context_errmsg(c));
    float *v = malloc((size_t)(k * n) * sizeof *v);
    uint32_t s = 12345;
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < k; i++) {
            s = s * 1664525u + 1013904223u;
            float u = (float)(s >> 8) / (float)(1u << 24);
            v[r * k + i] = r == a || r == b ? 0.5f : u * 0.25f - 0.125f;
        }
    if (nan_row >= 0)
        v[nan_row * k + 3] = NAN;
    cr_assert_eq(glesc_tensor_write_f32(w, v, (size_t)(k * n)), GLESC_OK, "%s",
                 glesc_context_errmsg(c));
    free(v);
    return w;
}

/* Ties, NaNs, every weight type of the decode and a weight split into
 * chunks (a dispatch per chunk, one combine over all) on context c. */
static void argmax_cases(glesc_context *c, const char *what)
{
    enum { K = 256, N = 3000 };
    float xv[K];
    for (int i = 0; i < K; i++)
        xv[i] = 1.0f;
    static const glesc_dtype types[] = {GLESC_DTYPE_F32,  GLESC_DTYPE_F16,  GLESC_DTYPE_Q8_0,
                                        GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q6_K, GLESC_DTYPE_Q4_K};
    for (size_t ti = 0; ti < CORE_ARRAY_LEN(types); ti++) {
        glesc_tensor *w = tie_weight(c, types[ti], K, N, 1234, 2900, -1);
        int32_t got = argmax_into(c, w, xv, K, 1), off = argmax_into(c, w, xv, K, -1);
        int32_t rows = argmax_of_rows(c, w, xv, K, N);
        cr_log_info("%s, %s: tie of rows 1234 and 2900: fused %d, unfused %d, rows read %d", what,
                    glesc_dtype_name(types[ti]), got, off, rows);
        cr_expect_eq(got, 1234, "%s %s: arg max %d", what, glesc_dtype_name(types[ti]), got);
        cr_expect_eq(off, 1234);
        cr_expect_eq(rows, 1234);
        glesc_weight_free(w);
    }
    /* a NaN in one row: -1, fused and unfused */
    glesc_tensor *w = tie_weight(c, GLESC_DTYPE_F32, K, N, 10, 20, 2500);
    cr_expect_eq(argmax_into(c, w, xv, K, 1), -1, "%s: a NaN row gives -1", what);
    cr_expect_eq(argmax_into(c, w, xv, K, -1), -1);
    glesc_weight_free(w);
    /* random rows: the fused arg max is the first maximum of the rows the
     * same GEMV computes */
    glesc_tensor *wr = glesc_weight_new(c, GLESC_DTYPE_Q4_K, 2, (int64_t[]){K, N});
    tg_fill(wr, 71, -1, 1);
    float xr[K];
    for (int i = 0; i < K; i++)
        xr[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    int32_t got = argmax_into(c, wr, xr, K, 1);
    cr_expect_eq(got, argmax_of_rows(c, wr, xr, K, N), "%s: random rows", what);
    glesc_weight_free(wr);
}

Test(fuse, argmax_ties_nans_and_types)
{
    argmax_cases(ctx, "default context");
}

Test(fuse, argmax_over_chunks_and_on_the_portable_path)
{
    /* 64 KiB storage blocks: the f32 weight is 47 chunks, a dispatch each */
    glesc_context_options o = {.cache_dir = "off", .max_storage_block_size = 64u << 10};
    glesc_context *c = NULL;
    cr_assert_eq(glesc_context_create(&o, &c), GLESC_OK, "%s", glesc_last_errmsg());
    argmax_cases(c, "64 KiB storage blocks");
    glesc_context_destroy(c);
    glesc_context_options p = {.cache_dir = "off",
                               .no_subgroups = true,
                               .max_compute_invocations = 128,
                               .max_compute_shared_memory = 16384};
    cr_assert_eq(glesc_context_create(&p, &c), GLESC_OK, "%s", glesc_last_errmsg());
    argmax_cases(c, "portable");
    glesc_context_destroy(c);
    /* shared memory the GEMV's x slices fill to the byte (llvmpipe's
     * workgroups: 15104 = 1280 + 9 · 1536; an H200's 128-invocation portable
     * path does so at 16 KiB): the arg max takes nothing beyond the GEMV's
     * budget */
    p.max_compute_shared_memory = 15104;
    cr_assert_eq(glesc_context_create(&p, &c), GLESC_OK, "%s", glesc_last_errmsg());
    argmax_cases(c, "shared memory filled exactly");
    glesc_context_destroy(c);
}

/* ---- gathers computed where they are read ---- */

static glesc_dtype gather_type = F32;
static int gather_n = 1;
static bool gather_two_kernels, gather_matmul;

static glesc_tensor *embed_layer(glesc_graph *g, glesc_tensor **x, int *n)
{
    /* an embedding lookup e read by a row norm (its squares included) and
     * by a residual add in the norm's epilogue: no kernel of its own, each
     * reader gathers its rows (indices outside the table read as zeros);
     * two kernels: a softmax of e with the norm's result added reads it
     * too. Read by a matmul's kernel (the norm folded into the product), e
     * keeps its kernel. */
    glesc_tensor *tab =
        tg_input(g, gather_type == F16 ? F16 : F32, 2, (int64_t[]){64, 50}, 72, -1, 1);
    glesc_tensor *ids = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){gather_n}, 73, -2, 52);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 74, 0.5f, 1.5f);
    glesc_tensor *e = glesc_get_rows(g, tab, ids);
    glesc_tensor *y = glesc_mul(g, glesc_rms_norm(g, e, 1e-5f), nw);
    if (gather_matmul) {
        glesc_tensor *w1 = tg_input(g, F16, 2, (int64_t[]){64, 64}, 75, -1, 1);
        y = glesc_matmul(g, w1, y);
    }
    if (gather_two_kernels)
        y = glesc_add(g, glesc_softmax(g, e, NULL, 1.0f, false), y);
    return glesc_add(g, y, e);
}

Test(fuse, embedding_lookup_is_gathered_by_its_readers)
{
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1); /* the norm folded into the GEMMs too */
    for (int two = 0; two <= 1; two++) {
        gather_two_kernels = two;
        int want = two ? 2 : 1;
        gather_type = F32;
        gather_n = 1;
        fused_vs_unfused("e = table[ids]; rms_norm(e)·w + e, 1 token", embed_layer, want, 1e-9);
        gather_type = F16;
        gather_n = 3;
        fused_vs_unfused("e = table[ids] (f16); 3 tokens", embed_layer, want, 1e-9);
        gather_n = 40;
        fused_vs_unfused("e = table[ids] (f16); 40 tokens", embed_layer, want, 1e-9);
    }
    /* a matmul's kernel reading e would be a program of the first layer
     * only: e is computed once, by its own kernel */
    gather_two_kernels = false;
    gather_matmul = true;
    gather_type = F32;
    gather_n = 1;
    fused_vs_unfused("e = table[ids]; W·(rms_norm(e)·w) + e, 1 token", embed_layer, 2, 1e-9);
    gather_n = 40; /* GEMM */
    fused_vs_unfused("e = table[ids]; W·(rms_norm(e)·w) + e, 40 tokens", embed_layer, 2, 1e-9);
    gather_matmul = false;
    unsetenv("GLESC_FUSE_GEMM_NORM");
}

Test(fuse, quantized_embedding_table_is_gathered)
{
    /* a q4_0 table (a weight: dequantized by its loader where read) */
    for (int pass = 0; pass < 2; pass++) {
        glesc_tensor *tab = glesc_weight_new(ctx, GLESC_DTYPE_Q4_0, 2, (int64_t[]){64, 40});
        tg_fill(tab, 80, -1, 1);
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, pass ? 1 : -1);
        glesc_tensor *ids = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){2}, 81, 0, 40);
        glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){64}, 83, 0.5f, 1.5f);
        glesc_tensor *e = glesc_get_rows(g, tab, ids);
        glesc_tensor *y = glesc_add(g, glesc_mul(g, glesc_rms_norm(g, e, 1e-5f), nw), e);
        cr_assert_eq(kernels_of(g, &y, 1), pass ? 1 : 4);
        tg_check(g, &y, 1, 1e-9, pass ? "q4_0 table, gathered" : "q4_0 table, unfused");
        glesc_graph_destroy(g);
        glesc_weight_free(tab);
    }
}

Test(fuse, gather_read_as_a_view_or_from_a_chunked_table_keeps_its_kernel)
{
    /* a reader through a reshape needs the rows in memory */
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, 1);
    glesc_tensor *tab = tg_input(g, F32, 2, (int64_t[]){64, 50}, 84, -1, 1);
    glesc_tensor *ids = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){2}, 85, 0, 50);
    glesc_tensor *e = glesc_get_rows(g, tab, ids);
    glesc_tensor *y = glesc_exp(g, glesc_reshape(g, e, 1, (int64_t[]){128}));
    cr_assert_eq(kernels_of(g, &y, 1), 2);
    tg_check(g, &y, 1, 1e-10, "exp(reshape(table[ids]))");
    glesc_graph_destroy(g);
    /* a table in row chunks is read by get_rows' own kernel, a dispatch
     * per chunk */
    glesc_context_options o = {.cache_dir = "off", .max_storage_block_size = 4096};
    glesc_context *c = NULL;
    cr_assert_eq(glesc_context_create(&o, &c), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tensor *big = glesc_weight_new(c, F32, 2, (int64_t[]){64, 50});
    tg_fill(big, 86, -1, 1);
    g = glesc_graph_create(c);
    tg_fusion(g, 1);
    ids = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){2}, 87, 0, 50);
    e = glesc_get_rows(g, big, ids);
    y = glesc_add(g, glesc_exp(g, e), e);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.kernels, 2, "chunked table: %d kernels", s.kernels);
    tg_check(g, &y, 1, 1e-10, "exp(e) + e, chunked table");
    glesc_graph_destroy(g);
    glesc_weight_free(big);
    glesc_context_destroy(c);
}

/* GLESC_FUSE_SKIP leaves each named fusion out for GEMMs only: a GEMV of
 * the same graph keeps it, and the result does not change. */
Test(fuse, skip_switch_leaves_gemm_fusions_out)
{
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1); /* the norm folded into the GEMMs too */
    static const struct {
        const char *skip;
        build_fn build;
        int gemm_kernels;
    } cases[] = {{"norm", norm_qkv, 2},        {"pair", gate_up, 2},
                 {"epilogue", mm_epilogue, 2}, {"epilogue", gate_up, 2},
                 {"prologue", mm_prologue, 2}, {"pair,norm", res_norm_gate_up, 3},
                 {"group", qkv_group, 3}};
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        for (int m = 1; m <= 40; m += 39) {
            mm_m = m;
            float *res[2];
            int kernels[2];
            int64_t n = 0;
            for (int pass = 0; pass < 2; pass++) {
                if (pass)
                    setenv("GLESC_FUSE_SKIP", cases[i].skip, 1);
                glesc_graph *g = glesc_graph_create(ctx);
                glesc_tensor *outs[4];
                int n_extra = 0;
                outs[0] = cases[i].build(g, outs + 1, &n_extra);
                kernels[pass] = kernels_of(g, outs, 1 + n_extra);
                res[pass] = tg_read(outs[0]);
                n = glesc_tensor_nelements(outs[0]);
                glesc_graph_destroy(g);
                unsetenv("GLESC_FUSE_SKIP");
            }
            double e = tg_nmse(res[1], res[0], n);
            cr_log_info("skip %s, case %zu, m=%d: %d → %d kernels, NMSE %.3g", cases[i].skip, i, m,
                        kernels[0], kernels[1], e);
            cr_assert_leq(e, 1e-9, "skip %s, m=%d: NMSE %g", cases[i].skip, m, e);
            cr_assert_eq(kernels[0], 1, "case %zu, m=%d: %d kernels fused", i, m, kernels[0]);
            cr_assert_eq(kernels[1], m == 1 ? 1 : cases[i].gemm_kernels,
                         "skip %s, case %zu, m=%d: %d kernels", cases[i].skip, i, m, kernels[1]);
            free(res[0]);
            free(res[1]);
        }
    unsetenv("GLESC_FUSE_GEMM_NORM");
}
