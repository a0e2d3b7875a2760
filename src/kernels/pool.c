/*
 * pool.c — the windowed gathers of the vision ops: pooling (max and
 * average, glsl/graph/pool.glsl) and the transposed 2-D convolution
 * (glsl/graph/deconv.glsl). One invocation per output element walks its
 * window; the input is read through a generated hook (kb_expr: a fused
 * elementwise prologue is computed where it is read) and the result stored
 * through another (kb_store_out: the epilogue fuses). Sizes, strides, pads
 * and dilations are uniforms; only the pooling type, count_include_pad
 * and the bias change the code.
 */
#include "kernels/kernels.h"

#include <stdio.h>

#define POOL_WG 128

static void u(kb *b, const char *name, int64_t v)
{
    kb_param_u(b, name, (uint64_t)v);
}

/* The window uniforms both kernels declare, named pre_NAME: total (output
 * elements), ow, oh, oc (the output's sizes), iw, ih (the input x's), kw,
 * kh (kernel), then from s (the op's parameters, in this order) sw, sh
 * (strides), dw, dh (dilations), pw, ph (begin pads). */
static void window_uniforms(kb *b, const char *pre, const glesc_tensor *out, const glesc_tensor *x,
                            int64_t kw, int64_t kh, const int32_t s[6])
{
    static const char *const names[14] = {"total", "ow", "oh", "oc", "iw", "ih", "kw",
                                          "kh",    "sw", "sh", "dw", "dh", "pw", "ph"};
    const int64_t v[14] = {graph_nelements(out),
                           out->ne[0],
                           out->ne[1],
                           out->ne[2],
                           x->ne[0],
                           x->ne[1],
                           kw,
                           kh,
                           s[0],
                           s[1],
                           s[2],
                           s[3],
                           s[4],
                           s[5]};
    char name[16];
    for (int i = 0; i < 14; i++) {
        snprintf(name, sizeof name, "%s_%s", pre, names[i]);
        u(b, name, v[i]);
    }
}

glesc_status kernels_gen_pool(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0];
    const int32_t *p = a->ip;
    if (b->k) {
        emit_kernel_local_size(b->k, POOL_WG, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
        if (p[0] == GLESC_POOL_AVG)
            emit_kernel_define(b->k, "POOL_AVG", "1");
        if (p[0] == GLESC_POOL_AVG && p[12])
            emit_kernel_define(b->k, "POOL_INCLUDE_PAD", "1");
        emit_kernel_comment(b->k, "%s pooling", p[0] == GLESC_POOL_AVG ? "average" : "max");
    }
    window_uniforms(b, "pl", a, x, p[1], p[2], p + 3);
    u(b, "pl_lw", x->ne[0] + p[9]);
    u(b, "pl_lh", x->ne[1] + p[10]);
    if (b->k) {
        emit_kernel_snippet(b->k, "graph/pool");
        emit_kernel_function_begin(b->k, "float pool_x(uint pw, uint ph, uint pc, uint pn)");
    }
    char v[16];
    const char *ci[4] = {"pw", "ph", "pc", "pn"};
    kb_line(b, "return %s;", kb_expr(b, x, ci, v));
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(b->k,
                                   "void pool_store(uint pw, uint ph, uint pc, uint pn, float y)");
    }
    kb_store_out(b, ci, "y", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
    kb_line(b, "pool_main(%s * WG_SIZE + gl_LocalInvocationID.x);", KB_GROUP_INDEX);
    kb_dispatch_1d(b, ((uint64_t)graph_nelements(a) + POOL_WG - 1) / POOL_WG);
    return b->st;
}

glesc_status kernels_gen_conv_transpose(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0], *w = a->src[1];
    const glesc_tensor *bias = a->n_src > 2 ? a->src[2] : NULL;
    const int32_t *p = a->ip;
    if (b->k) {
        emit_kernel_local_size(b->k, POOL_WG, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
        if (bias)
            emit_kernel_define(b->k, "CT_BIAS", "1");
        emit_kernel_comment(b->k, "transposed 2-D convolution%s", bias ? " with bias" : "");
    }
    window_uniforms(b, "ct", a, x, w->ne[0], w->ne[1], p);
    u(b, "ct_cog", w->ne[2]);
    u(b, "ct_cig", x->ne[2] / p[10]);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/deconv");
    static const struct {
        const char *sig;
        int src;
        const char *c[4];
    } loads[] = {
        {"float ct_x(uint pw, uint ph, uint pc, uint pn)", 0, {"pw", "ph", "pc", "pn"}},
        {"float ct_w(uint kw, uint kh, uint co, uint ci)", 1, {"kw", "kh", "co", "ci"}},
        {"float ct_b(uint co)", 2, {"co", "0u", "0u", "0u"}},
    };
    char v[16];
    for (int i = 0; i < 3; i++) {
        if (i == 2 && !bias)
            continue;
        if (b->k)
            emit_kernel_function_begin(b->k, loads[i].sig);
        kb_line(b, "return %s;", kb_expr(b, a->src[loads[i].src], loads[i].c, v));
        if (b->k)
            emit_kernel_function_end(b->k);
    }
    if (b->k)
        emit_kernel_function_begin(b->k,
                                   "void ct_store(uint pw, uint ph, uint pc, uint pn, float y)");
    kb_store_out(b, loads[0].c, "y", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
    kb_line(b, "ct_main(%s * WG_SIZE + gl_LocalInvocationID.x);", KB_GROUP_INDEX);
    kb_dispatch_1d(b, ((uint64_t)graph_nelements(a) + POOL_WG - 1) / POOL_WG);
    return b->st;
}
