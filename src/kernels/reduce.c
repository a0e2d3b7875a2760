/*
 * reduce.c — kernels that reduce along one axis: sum/mean/max/min/argmax,
 * rms_norm and layer_norm, softmax. One workgroup per output row; its
 * invocations stride over the reduced axis and combine through shared
 * memory (glsl/common/reduce.glsl).
 *
 * Inputs are read with kb_expr at the loop's coordinates, so a fused
 * elementwise prologue (x + r → rms_norm) is recomputed in each pass rather
 * than stored: cheaper than a round trip through memory. Results go out
 * through kb_store_out, which applies a fused epilogue (· w, + b).
 */
#include <stdio.h>

#include "kernels/kernels.h"

#define REDUCE_WG 128

static void setup(kb *b, bool argmax)
{
    if (!b->k)
        return;
    emit_kernel_local_size(b->k, REDUCE_WG, 1, 1);
    emit_kernel_shared(b->k, "float", "red_scratch", REDUCE_WG);
    if (argmax) {
        emit_kernel_shared(b->k, "float", "am_v", REDUCE_WG);
        emit_kernel_shared(b->k, "float", "am_i", REDUCE_WG);
    }
    emit_kernel_snippet(b->k, "common/reduce");
    emit_kernel_snippet(b->k, "graph/reduce");
    if (argmax)
        emit_kernel_snippet(b->k, "graph/argmax");
    emit_kernel_snippet(b->k, "graph/eltwise"); /* for fused prologues/epilogues */
}

/* `uint row` = this workgroup's row; returns early past the last one. */
static void row_index(kb *b, int64_t rows)
{
    kb_param_u(b, "rows", (uint64_t)rows);
    kb_line(b, "uint row = %s;", KB_GROUP_INDEX);
    kb_line(b, "if (row >= rows) {");
    kb_line(b, "return; // uniform over the workgroup: no barrier is skipped by part of it");
    kb_line(b, "}");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
}

/* c1..c3 of a row of t (rows run over dimensions 1..3). */
static void row_coords(kb *b, const glesc_tensor *t)
{
    kb_param_u(b, "rn1", (uint64_t)t->ne[1]);
    kb_param_u(b, "rn2", (uint64_t)t->ne[2]);
    kb_line(b, "uint c1 = row %% rn1;");
    kb_line(b, "uint c2 = (row / rn1) %% rn2;");
    kb_line(b, "uint c3 = row / rn1 / rn2;");
}

glesc_status kernels_gen_reduce(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0];
    int ax = a->ip[0];
    glesc_op op = a->op;
    setup(b, op == GLESC_OP_ARGMAX);
    int64_t rows = graph_nelements(a);
    row_index(b, rows);
    kb_coords_from_flat(b, "row", a, "on", "c");
    kb_param_u(b, "len", (uint64_t)x->ne[ax]);
    const char *c[4] = {"c0", "c1", "c2", "c3"};
    const char *cj[4] = {"c0", "c1", "c2", "c3"};
    cj[ax] = "j";
    char v[16];
    if (op == GLESC_OP_ARGMAX) {
        kb_line(b, "float bv = NEG_INF;");
        kb_line(b, "float bi = AM_NONE;");
    } else {
        kb_line(b, "float acc = %s;",
                op == GLESC_OP_REDUCE_MAX   ? "NEG_INF"
                : op == GLESC_OP_REDUCE_MIN ? "-NEG_INF"
                                            : "0.0");
    }
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    kb_expr(b, x, cj, v);
    switch (op) {
    case GLESC_OP_ARGMAX:
        kb_line(b, "if (am_better(%s, float(j), bv, bi)) {", v);
        kb_line(b, "bv = %s;", v);
        kb_line(b, "bi = float(j);");
        kb_line(b, "}");
        break;
    case GLESC_OP_REDUCE_MAX:
        kb_line(b, "acc = max(acc, %s);", v);
        break;
    case GLESC_OP_REDUCE_MIN:
        kb_line(b, "acc = min(acc, %s);", v);
        break;
    default:
        kb_line(b, "acc += %s;", v);
    }
    kb_line(b, "}");
    switch (op) {
    case GLESC_OP_ARGMAX:
        kb_line(b, "wg_argmax(bv, bi);");
        kb_line(b, "float res = am_result(bv, bi);");
        break;
    case GLESC_OP_REDUCE_MAX:
        kb_line(b, "float res = wg_reduce_max(acc);");
        break;
    case GLESC_OP_REDUCE_MIN:
        kb_line(b, "float res = wg_reduce_min(acc);");
        break;
    case GLESC_OP_MEAN:
        kb_line(b, "float res = wg_reduce_sum(acc) / float(len);");
        break;
    default:
        kb_line(b, "float res = wg_reduce_sum(acc);");
    }
    kb_line(b, "if (lid == 0u) {");
    kb_store_out(b, c, "res", NULL);
    kb_line(b, "}");
    kb_dispatch_1d(b, (uint64_t)rows);
    return b->st;
}

glesc_status kernels_gen_norm(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0];
    bool layer = a->op == GLESC_OP_LAYER_NORM;
    setup(b, false);
    int64_t rows = graph_nelements(a) / a->ne[0];
    row_index(b, rows);
    row_coords(b, a);
    kb_param_u(b, "len", (uint64_t)a->ne[0]);
    kb_param_f(b, "eps", a->fp[0]);
    const char *cj[4] = {"j", "c1", "c2", "c3"};
    char v[16];
    kb_line(b, "float mean = 0.0;");
    if (layer) {
        /* two passes (mean, then squared deviations): no cancellation */
        kb_line(b, "float acc = 0.0;");
        kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
        kb_line(b, "acc += %s;", kb_expr(b, x, cj, v));
        kb_line(b, "}");
        kb_line(b, "mean = wg_reduce_sum(acc) / float(len);");
    }
    kb_line(b, "float sq = 0.0;");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    kb_expr(b, x, cj, v);
    kb_line(b, "float d = %s - mean;", v);
    kb_line(b, "sq += d * d;");
    kb_line(b, "}");
    kb_line(b, "float scale = inversesqrt(wg_reduce_sum(sq) / float(len) + eps);");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    kb_expr(b, x, cj, v);
    kb_line(b, "float y = (%s - mean) * scale;", v);
    kb_store_out(b, cj, "y", NULL);
    kb_line(b, "}");
    kb_dispatch_1d(b, (uint64_t)rows);
    return b->st;
}

/* The scaled, masked logit of column j (NEG_INF where masked). */
static void logit(kb *b, const glesc_tensor *a, const char *const cj[4])
{
    char v[16], m[16];
    kb_expr(b, a->src[0], cj, v);
    if (a->src[1])
        kb_line(b, "float s = %s * scale + %s;", v, kb_expr(b, a->src[1], cj, m));
    else
        kb_line(b, "float s = %s * scale;", v);
    if (a->ip[0]) /* causal: queries are the last ne1 positions */
        kb_line(b, "s = int(j) > int(c1) + causal_off ? NEG_INF : s;");
}

glesc_status kernels_gen_softmax(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    setup(b, false);
    int64_t rows = graph_nelements(a) / a->ne[0];
    row_index(b, rows);
    row_coords(b, a);
    kb_param_u(b, "len", (uint64_t)a->ne[0]);
    kb_param_f(b, "scale", a->fp[0]);
    if (a->ip[0])
        kb_param_i(b, "causal_off", a->ne[0] - a->ne[1]);
    const char *cj[4] = {"j", "c1", "c2", "c3"};
    kb_line(b, "float mx = NEG_INF;");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    logit(b, a, cj);
    kb_line(b, "mx = max(mx, s);");
    kb_line(b, "}");
    kb_line(b, "mx = wg_reduce_max(mx);");
    kb_line(b, "float sum = 0.0;");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    logit(b, a, cj);
    kb_line(b, "sum += mx == NEG_INF ? 0.0 : exp(s - mx);");
    kb_line(b, "}");
    kb_line(b, "sum = wg_reduce_sum(sum);");
    kb_line(b, "float inv = sum > 0.0 ? 1.0 / sum : 0.0; // a fully masked row gives zeros");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    logit(b, a, cj);
    kb_line(b, "float y = mx == NEG_INF ? 0.0 : exp(s - mx) * inv;");
    kb_store_out(b, cj, "y", NULL);
    kb_line(b, "}");
    kb_dispatch_1d(b, (uint64_t)rows);
    return b->st;
}

/* log(softmax(x)) along any dimension: one workgroup per row of that
 * dimension, three passes (max, sum of e^(x − max), store (x − max) − log
 * sum), so no value underflows to −inf before its logarithm. */
glesc_status kernels_gen_log_softmax(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0];
    int ax = a->ip[0];
    setup(b, false);
    glesc_tensor rows_of = *a; /* a's shape with the axis collapsed: the rows */
    rows_of.ne[ax] = 1;
    int64_t rows = graph_nelements(&rows_of);
    row_index(b, rows);
    kb_coords_from_flat(b, "row", &rows_of, "on", "c");
    kb_param_u(b, "len", (uint64_t)a->ne[ax]);
    const char *cj[4] = {"c0", "c1", "c2", "c3"};
    cj[ax] = "j";
    char v[16];
    kb_line(b, "float mx = NEG_INF;");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    kb_line(b, "mx = max(mx, %s);", kb_expr(b, x, cj, v));
    kb_line(b, "}");
    kb_line(b, "mx = wg_reduce_max(mx);");
    kb_line(b, "float sum = 0.0;");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    kb_line(b, "sum += exp(%s - mx);", kb_expr(b, x, cj, v));
    kb_line(b, "}");
    kb_line(b, "float ls = log(wg_reduce_sum(sum));");
    kb_line(b, "for (uint j = lid; j < len; j += WG_SIZE) {");
    /* (x − max) first: exact for values near the max, where x − (max + ls)
     * would round max + ls to x's magnitude */
    kb_line(b, "float y = (%s - mx) - ls;", kb_expr(b, x, cj, v));
    kb_store_out(b, cj, "y", NULL);
    kb_line(b, "}");
    kb_dispatch_1d(b, (uint64_t)rows);
    return b->st;
}
