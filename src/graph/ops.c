/*
 * ops.c — the op table's semantic rows (name, arity, kind, shape rule, CPU
 * reference, and the facts of what an op reads and writes: in place,
 * remapped coordinates, a row gather) and the shape rules themselves: what
 * each op accepts and what it makes. The builders that create nodes are in
 * builders.c (ops) and views.c (views); how an op's code is made, and what
 * its kernel can absorb by fusion, is the kernels layer's own row
 * (src/kernels/codegen.c).
 *
 * Adding an op: a GLESC_OP_ value in glesc.h, a row here (the
 * _Static_assert below keeps the table complete), a reference in ref.c, and
 * a codegen row: either a GLSL expression (elementwise: it fuses with no
 * further work) or a generator in src/kernels/ with its fusion
 * capabilities.
 */
#include <math.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/ref.h"
#include "quant/quant.h"

glesc_status graph_op_fail(const glesc_tensor *t, glesc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sbuf b;
    sbuf_init(&b);
    sbuf_appendf(&b, "glesc_%s: ", graph_op(t->op)->name);
    sbuf_appendv(&b, fmt, ap);
    va_end(ap);
    core_err_set(&t->ctx->err, st, "%s", sbuf_str(&b) ? sbuf_str(&b) : "out of memory");
    sbuf_free(&b);
    return st;
}

static int max_ndim(const glesc_tensor *a, const glesc_tensor *b)
{
    return a->ndim > b->ndim ? a->ndim : b->ndim;
}

static void same_as(glesc_tensor *t, const glesc_tensor *x, glesc_dtype dt)
{
    t->dtype = dt;
    t->ndim = x->ndim;
    memcpy(t->ne, x->ne, sizeof t->ne);
}

static bool is_float(glesc_dtype dt)
{
    return dt == GLESC_DTYPE_F32 || dt == GLESC_DTYPE_F16 || dt == GLESC_DTYPE_BF16;
}

/* ---- shape rules ---- */

static glesc_status shape_unary(glesc_tensor *t)
{
    glesc_dtype dt = GLESC_DTYPE_F32;
    if (t->op == GLESC_OP_CONT && !graph_dtype_quant(t->src[0]->dtype))
        dt = t->src[0]->dtype; /* a block type's elements come out as f32 */
    if (t->op == GLESC_OP_CAST) {
        dt = (glesc_dtype)t->ip[0];
        if (!graph_dtype_ok(dt))
            return graph_op_fail(t, GLESC_ERROR_TYPE, "cannot cast to %s",
                                 glesc_dtype_name(dt) ? glesc_dtype_name(dt) : "(unknown type)");
    }
    same_as(t, t->src[0], dt);
    return GLESC_OK;
}

static glesc_status shape_binary(glesc_tensor *t)
{
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    for (int d = 0; d < 4; d++) {
        if (a->ne[d] != b->ne[d] && a->ne[d] != 1 && b->ne[d] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE, "shapes %s and %s do not broadcast",
                                 GRAPH_SH(a), GRAPH_SH(b));
        t->ne[d] = CORE_MAX(a->ne[d], b->ne[d]);
    }
    t->ndim = max_ndim(a, b);
    t->dtype = GLESC_DTYPE_F32;
    return GLESC_OK;
}

static glesc_status shape_reduce(glesc_tensor *t)
{
    int ax = t->ip[0];
    if (ax < 0 || ax > 3)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "axis %d of a tensor %s is not 0..3",
                             ax, GRAPH_SH(t->src[0]));
    same_as(t, t->src[0], t->op == GLESC_OP_ARGMAX ? GLESC_DTYPE_I32 : GLESC_DTYPE_F32);
    t->ne[ax] = 1;
    return GLESC_OK;
}

static glesc_status broadcasts_to(const glesc_tensor *t, const glesc_tensor *m,
                                  const glesc_tensor *x, const char *what)
{
    for (int d = 0; d < 4; d++)
        if (m->ne[d] != x->ne[d] && m->ne[d] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE, "%s %s does not broadcast to %s", what,
                                 GRAPH_SH(m), GRAPH_SH(x));
    return GLESC_OK;
}

static glesc_status shape_softmax(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0], *m = t->src[1];
    if (m && broadcasts_to(t, m, x, "mask") != GLESC_OK)
        return t->ctx->err.status;
    same_as(t, x, GLESC_DTYPE_F32);
    return GLESC_OK;
}

static glesc_status shape_norm(glesc_tensor *t)
{
    same_as(t, t->src[0], GLESC_DTYPE_F32);
    return GLESC_OK;
}

static glesc_status shape_matmul(glesc_tensor *t)
{
    const glesc_tensor *w = t->src[0], *x = t->src[1];
    if (w->ne[0] != x->ne[0])
        return graph_op_fail(
            t, GLESC_ERROR_SHAPE,
            "shapes %s and %s: W [k, n] and X [k, m] must agree in k (dimension 0)", GRAPH_SH(w),
            GRAPH_SH(x));
    if (x->ne[2] % w->ne[2] || x->ne[3] % w->ne[3])
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "shapes %s and %s: X's batch dimensions must be multiples of W's",
                             GRAPH_SH(w), GRAPH_SH(x));
    if (!quant_gpu_readable(w->dtype))
        return graph_op_fail(t, GLESC_ERROR_UNSUPPORTED, "no matmul kernel reads %s weights",
                             glesc_dtype_name(w->dtype));
    int block = quant_type(w->dtype)->block_size;
    if (w->ne[0] % block)
        return graph_op_fail(t, GLESC_ERROR_SHAPE, "k = %lld is not a multiple of %s's block of %d",
                             (long long)w->ne[0], glesc_dtype_name(w->dtype), block);
    if (!graph_dtype_quant(w->dtype) && w->nb[0] != (int64_t)graph_dtype_size(w->dtype))
        return graph_op_fail(
            t, GLESC_ERROR_UNSUPPORTED,
            "W %s must be contiguous along dimension 0 (make it so with glesc_cont)", GRAPH_SH(w));
    if (!is_float(x->dtype))
        return graph_op_fail(t, GLESC_ERROR_TYPE, "X must be f32, f16 or bf16, not %s",
                             glesc_dtype_name(x->dtype));
    t->dtype = GLESC_DTYPE_F32;
    t->ne[0] = w->ne[1];
    t->ne[1] = x->ne[1];
    t->ne[2] = x->ne[2];
    t->ne[3] = x->ne[3];
    t->ndim = CORE_MAX(2, x->ndim);
    return GLESC_OK;
}

static glesc_status shape_get_rows(glesc_tensor *t)
{
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    if (b->dtype != GLESC_DTYPE_I32)
        return graph_op_fail(t, GLESC_ERROR_TYPE, "row indices must be i32, not %s",
                             glesc_dtype_name(b->dtype));
    if (b->ne[3] != 1 || (a->ne[2] != 1 && a->ne[2] != b->ne[1]) ||
        (a->ne[3] != 1 && a->ne[3] != b->ne[2]))
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "table %s and indices %s: indices are [n, b2, b3] with the table's "
                             "dimensions 2 and 3 equal to b2 and b3 (or 1)",
                             GRAPH_SH(a), GRAPH_SH(b));
    if (!quant_gpu_readable(a->dtype) ||
        (!graph_dtype_quant(a->dtype) && a->nb[0] != (int64_t)graph_dtype_size(a->dtype)))
        return graph_op_fail(t, GLESC_ERROR_UNSUPPORTED,
                             "table %s %s must be f32, f16, bf16 or a quantized weight type, and "
                             "contiguous along dimension 0",
                             GRAPH_SH(a), glesc_dtype_name(a->dtype));
    t->dtype = GLESC_DTYPE_F32;
    t->ne[0] = a->ne[0];
    t->ne[1] = b->ne[0];
    t->ne[2] = b->ne[1];
    t->ne[3] = b->ne[2];
    t->ndim = CORE_MAX(2, b->ndim + 1);
    return GLESC_OK;
}

/* In-place results: t is dst after the write (same memory, shape, strides). */
static void alias(glesc_tensor *t, const glesc_tensor *dst)
{
    same_as(t, dst, dst->dtype);
    memcpy(t->nb, dst->nb, sizeof t->nb);
    t->offs = dst->offs;
    t->owner = dst->owner;
}

static bool has_zero_stride(const glesc_tensor *t)
{
    for (int d = 0; d < 4; d++)
        if (t->ne[d] > 1 && t->nb[d] == 0)
            return true;
    return false;
}

static glesc_status shape_set_rows(glesc_tensor *t)
{
    const glesc_tensor *dst = t->src[0], *s = t->src[1], *ix = t->src[2];
    if (ix->dtype != GLESC_DTYPE_I32)
        return graph_op_fail(t, GLESC_ERROR_TYPE, "row indices must be i32, not %s",
                             glesc_dtype_name(ix->dtype));
    if (dst->ne[0] != s->ne[0] || dst->ne[2] != s->ne[2] || dst->ne[3] != s->ne[3])
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "destination %s and rows %s must agree in dimensions 0, 2 and 3",
                             GRAPH_SH(dst), GRAPH_SH(s));
    if (ix->ne[0] != s->ne[1] || (ix->ne[1] != 1 && ix->ne[1] != s->ne[2]) ||
        (ix->ne[2] != 1 && ix->ne[2] != s->ne[3]) || ix->ne[3] != 1)
        return graph_op_fail(
            t, GLESC_ERROR_SHAPE,
            "indices %s do not match rows %s (indices are [n, b2, b3], b2/b3 may be 1)",
            GRAPH_SH(ix), GRAPH_SH(s));
    if (graph_kv_quant(dst->dtype)) { /* whole rows quantized: a cache of its own */
        if (graph_op(dst->op)->kind == GRAPH_KIND_VIEW || dst->ne[0] % 32 ||
            dst->ne[2] * dst->ne[3] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "a %s destination %s must be a whole 2-D tensor, rows a "
                                 "multiple of 32 elements (no view)",
                                 glesc_dtype_name(dst->dtype), GRAPH_SH(dst));
    } else if (!is_float(dst->dtype) || has_zero_stride(dst))
        return graph_op_fail(t, GLESC_ERROR_TYPE,
                             "destination %s must be f32, f16, bf16, q8_0 or q4_0 without "
                             "broadcast dimensions",
                             GRAPH_SH(dst));
    alias(t, dst);
    return GLESC_OK;
}

static glesc_status shape_concat(glesc_tensor *t)
{
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    int dim = t->ip[0];
    if (dim < 0 || dim > 3)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "dimension %d is not 0..3", dim);
    for (int d = 0; d < 4; d++)
        if (d != dim && a->ne[d] != b->ne[d])
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "shapes %s and %s differ outside dimension %d", GRAPH_SH(a),
                                 GRAPH_SH(b), dim);
    same_as(t, a, GLESC_DTYPE_F32);
    t->ne[dim] = a->ne[dim] + b->ne[dim];
    t->ndim = CORE_MAX(max_ndim(a, b), dim + 1);
    return GLESC_OK;
}

static glesc_status shape_cpy(glesc_tensor *t)
{
    const glesc_tensor *s = t->src[0], *dst = t->src[1];
    if (!graph_same_shape(s, dst))
        return graph_op_fail(t, GLESC_ERROR_SHAPE, "source %s and destination %s differ",
                             GRAPH_SH(s), GRAPH_SH(dst));
    if (has_zero_stride(dst))
        return graph_op_fail(
            t, GLESC_ERROR_INVALID_ARGUMENT,
            "destination %s is a broadcast view (stride 0): elements would collide", GRAPH_SH(dst));
    alias(t, dst);
    return GLESC_OK;
}

static glesc_status shape_rope(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0], *p = t->src[1];
    int n_dims = t->ip[0], mode = t->ip[1];
    if (p->dtype != GLESC_DTYPE_I32 || p->ne[0] != x->ne[2] || p->ne[1] * p->ne[2] * p->ne[3] != 1)
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "positions %s %s must be i32 [n_tokens] for x %s (n_tokens is x's "
                             "dimension 2)",
                             GRAPH_SH(p), glesc_dtype_name(p->dtype), GRAPH_SH(x));
    if (n_dims <= 0 || n_dims % 2 || n_dims > x->ne[0])
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "n_dims %d must be even and at most the head size %lld (x %s)", n_dims,
                             (long long)x->ne[0], GRAPH_SH(x));
    if (mode != GLESC_ROPE_NORMAL && mode != GLESC_ROPE_NEOX)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "mode %d is not normal (0) or neox (2)", mode);
    const glesc_tensor *ff = t->n_src > 2 ? t->src[2] : NULL;
    if (ff && (ff->dtype != GLESC_DTYPE_F32 || ff->ne[0] != n_dims / 2 ||
               ff->ne[1] * ff->ne[2] * ff->ne[3] != 1))
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "frequency factors %s %s must be f32 [n_dims / 2 = %d]", GRAPH_SH(ff),
                             glesc_dtype_name(ff->dtype), n_dims / 2);
    if (!isfinite(t->fp[2]) || !isfinite(t->fp[3]))
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "ext_factor %g and attn_factor %g must be finite", (double)t->fp[2],
                             (double)t->fp[3]);
    if (t->ip[2] && (t->ip[5] <= 0 || !(t->fp[0] > 1.0f) || !(t->fp[1] > 0.0f)))
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "YaRN (ext_factor %g) needs n_ctx_orig > 0 (%d), freq_base > 1 (%g) "
                             "and freq_scale > 0 (%g)",
                             (double)t->fp[2], t->ip[5], (double)t->fp[0], (double)t->fp[1]);
    same_as(t, x, GLESC_DTYPE_F32);
    return GLESC_OK;
}

#define ATTN_MAX_D 512

static glesc_status shape_attention(glesc_tensor *t)
{
    const glesc_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *m = t->src[3];
    if (q->ne[0] != k->ne[0] || k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2] || q->ne[3] != 1 ||
        k->ne[3] != 1 || v->ne[3] != 1)
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "q %s, k %s, v %s: want q [d, n_q, n_head], k [d, n_kv, n_head_kv], "
                             "v [d_v, n_kv, n_head_kv]",
                             GRAPH_SH(q), GRAPH_SH(k), GRAPH_SH(v));
    if (q->ne[2] % k->ne[2])
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "q %s and k %s: n_head %lld is not a multiple of n_head_kv %lld",
                             GRAPH_SH(q), GRAPH_SH(k), (long long)q->ne[2], (long long)k->ne[2]);
    if (q->ne[0] > ATTN_MAX_D || v->ne[0] > ATTN_MAX_D)
        return graph_op_fail(t, GLESC_ERROR_UNSUPPORTED, "head size %lld above %d",
                             (long long)CORE_MAX(q->ne[0], v->ne[0]), ATTN_MAX_D);
    if (m) {
        if (m->ne[0] != k->ne[1] || (m->ne[1] != 1 && m->ne[1] != q->ne[1]) ||
            (m->ne[2] != 1 && m->ne[2] != q->ne[2]) || m->ne[3] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "mask %s does not broadcast to [n_kv, n_q] = "
                                 "[%lld, %lld]",
                                 GRAPH_SH(m), (long long)k->ne[1], (long long)q->ne[1]);
    }
    for (int i = 0; i < 4; i++)
        if (t->src[i] && !is_float(t->src[i]->dtype) &&
            !((i == 1 || i == 2) && graph_kv_quant(t->src[i]->dtype)))
            return graph_op_fail(t, GLESC_ERROR_TYPE,
                                 "inputs must be f32, f16 or bf16 (k and v also q8_0, q4_0)");
    if (t->ip[1] < 0)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "sliding window %d is negative (0: none)", t->ip[1]);
    if (!isfinite(t->fp[1]) || t->fp[1] < 0)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "soft-cap %g must be positive (0: none)", (double)t->fp[1]);
    t->dtype = GLESC_DTYPE_F32;
    t->ne[0] = v->ne[0];
    t->ne[1] = q->ne[2];
    t->ne[2] = q->ne[1];
    t->ne[3] = 1;
    t->ndim = 3;
    return GLESC_OK;
}

/* ---- vision: convolution (ip: see graph_conv_dims) ---- */

static bool conv_float(const glesc_tensor *t)
{
    return !t || is_float(t->dtype);
}

static glesc_status shape_conv(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    graph_conv_dims d;
    graph_conv_dims_of(t, &d); /* its result sizes are not set yet */
    if (!conv_float(x) || !conv_float(w) || !conv_float(b))
        return graph_op_fail(t, GLESC_ERROR_TYPE, "x, w and b must be f32, f16 or bf16");
    if (d.sh < 1 || d.sw < 1 || d.dh < 1 || d.dw < 1 || d.ph < 0 || d.pw < 0 || t->ip[4] < 0 ||
        t->ip[5] < 0 || d.group < 1)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "strides %d, %d and dilations %d, %d must be at least 1, pads %d, "
                             "%d, %d, %d at least 0 and the group count %d at least 1",
                             d.sh, d.sw, d.dh, d.dw, d.ph, d.pw, t->ip[4], t->ip[5], d.group);
    if (d.one_d && (x->ne[3] != 1 || w->ne[3] != 1))
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "x %s and w %s: a 1-D convolution takes x [W, C_in, N] and w [kW, "
                             "C_in / group, C_out]",
                             GRAPH_SH(x), GRAPH_SH(w));
    if (d.c % d.group || d.co % d.group || d.cg * d.group != d.c)
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "x %s and w %s with %d groups: want x [W, H, C_in, N] and w [kW, kH, "
                             "C_in / group, C_out], C_in and C_out multiples of the group count",
                             GRAPH_SH(x), GRAPH_SH(w), d.group);
    if (b && (b->ne[0] != d.co || b->ne[1] * b->ne[2] * b->ne[3] != 1))
        return graph_op_fail(t, GLESC_ERROR_SHAPE, "bias %s must be [C_out = %lld]", GRAPH_SH(b),
                             (long long)d.co);
    int64_t nh = d.h + d.ph + t->ip[4] - (int64_t)d.dh * (d.kh - 1) - 1;
    int64_t nw = d.w + d.pw + t->ip[5] - (int64_t)d.dw * (d.kw - 1) - 1;
    if (nh < 0 || nw < 0)
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "the dilated kernel %s does not fit the padded input %s", GRAPH_SH(w),
                             GRAPH_SH(x));
    t->dtype = GLESC_DTYPE_F32;
    int64_t ne[4] = {nw / d.sw + 1, nh / d.sh + 1, d.co, d.n};
    if (d.one_d) {
        t->ne[0] = ne[0];
        t->ne[1] = d.co;
        t->ne[2] = d.n;
        t->ne[3] = 1;
        t->ndim = CORE_MAX(2, x->ndim);
    } else {
        memcpy(t->ne, ne, sizeof ne);
        t->ndim = CORE_MAX(3, x->ndim);
    }
    return GLESC_OK;
}

static glesc_status shape_batch_norm(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0];
    if (!is_float(x->dtype))
        return graph_op_fail(t, GLESC_ERROR_TYPE, "x must be f32, f16 or bf16, not %s",
                             glesc_dtype_name(x->dtype));
    static const char *const names[] = {"", "scale", "bias", "mean", "var"};
    for (int i = 1; i < 5; i++) {
        const glesc_tensor *p = t->src[i];
        if (!is_float(p->dtype) || p->ne[0] != x->ne[2] || p->ne[1] * p->ne[2] * p->ne[3] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "%s %s %s must be f32, f16 or bf16 [C = %lld] for x %s (C is "
                                 "dimension 2 of x)",
                                 names[i], GRAPH_SH(p), glesc_dtype_name(p->dtype),
                                 (long long)x->ne[2], GRAPH_SH(x));
    }
    if (!isfinite(t->fp[0]) || t->fp[0] < 0)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "epsilon %g must be finite and >= 0",
                             (double)t->fp[0]);
    same_as(t, x, GLESC_DTYPE_F32);
    return GLESC_OK;
}

static glesc_status shape_view(glesc_tensor *t)
{
    return GLESC_OK; /* views are checked by their builders */
}

/* ---- the table ---- */

#define LEAF(nm)                                                                                   \
    {                                                                                              \
        .name = nm, .kind = GRAPH_KIND_LEAF                                                        \
    }
#define VIEW(nm)                                                                                   \
    {                                                                                              \
        .name = nm, .arity = 1, .kind = GRAPH_KIND_VIEW, .shape = shape_view                       \
    }
#define UNARY(nm, fn)                                                                              \
    {                                                                                              \
        .name = nm, .arity = 1, .kind = GRAPH_KIND_ELTWISE, .shape = shape_unary,                  \
        .cpu = ref_unary, .f1 = fn                                                                 \
    }
#define BINARY(nm, fn)                                                                             \
    {                                                                                              \
        .name = nm, .arity = 2, .kind = GRAPH_KIND_ELTWISE, .shape = shape_binary,                 \
        .cpu = ref_binary, .f2 = fn                                                                \
    }
#define REDUCE(nm)                                                                                 \
    {                                                                                              \
        .name = nm, .arity = 1, .kind = GRAPH_KIND_ANCHOR, .shape = shape_reduce,                  \
        .cpu = ref_reduce                                                                          \
    }

/* Positional: one row per glesc_op in enum order; the length is checked. */
static const graph_op_info ops[] = {
    LEAF("none"),
    VIEW("reshape"),
    VIEW("view"),
    VIEW("permute"),
    VIEW("broadcast"),
    UNARY("neg", ref_neg),
    UNARY("abs", ref_abs),
    UNARY("sqr", ref_sqr),
    UNARY("sqrt", ref_sqrt),
    UNARY("rsqrt", ref_rsqrt),
    UNARY("exp", ref_exp),
    UNARY("log", ref_log),
    UNARY("sin", ref_sin),
    UNARY("cos", ref_cos),
    UNARY("tanh", ref_tanh),
    UNARY("sigmoid", ref_sigmoid),
    UNARY("relu", ref_relu),
    UNARY("gelu", ref_gelu),
    UNARY("gelu_erf", ref_gelu_erf),
    UNARY("silu", ref_silu),
    UNARY("softplus", ref_softplus),
    UNARY("step", ref_step),
    UNARY("scale", ref_scale),
    UNARY("clamp", ref_clamp),
    {.name = "cast",
     .arity = 1,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = shape_unary,
     .cpu = ref_unary,
     .f1 = ref_ident},
    UNARY("cont", ref_ident),
    BINARY("add", ref_add),
    BINARY("sub", ref_sub),
    BINARY("mul", ref_mul),
    BINARY("div", ref_div),
    BINARY("max", ref_max),
    BINARY("min", ref_min),
    BINARY("pow", ref_pow),
    REDUCE("sum"),
    REDUCE("mean"),
    REDUCE("reduce_max"),
    REDUCE("reduce_min"),
    {.name = "argmax",
     .arity = 1,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_reduce,
     .cpu = ref_reduce},
    {.name = "softmax",
     .arity = 2,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_softmax,
     .cpu = ref_softmax},
    {.name = "rms_norm",
     .arity = 1,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_norm,
     .cpu = ref_rms_norm},
    {.name = "layer_norm",
     .arity = 1,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_norm,
     .cpu = ref_layer_norm},
    {.name = "matmul",
     .arity = 2,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_matmul,
     .cpu = ref_matmul},
    {.name = "get_rows",
     .arity = 2,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_get_rows,
     .cpu = ref_get_rows,
     .gather = true},
    {.name = "set_rows",
     .arity = 3,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_set_rows,
     .cpu = ref_set_rows,
     .inplace = true},
    {.name = "concat",
     .arity = 2,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = shape_concat,
     .cpu = ref_concat,
     .remaps = true},
    {.name = "cpy",
     .arity = 2,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = shape_cpy,
     .cpu = ref_cpy,
     .inplace = true},
    {.name = "rope",
     .arity = 3, /* x, positions, optional frequency factors */
     .kind = GRAPH_KIND_ELTWISE,
     .shape = shape_rope,
     .cpu = ref_rope,
     .remaps = true},
    {.name = "attention",
     .arity = 4,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_attention,
     .cpu = ref_attention},
    {.name = "conv",
     .arity = 3, /* x, w, optional bias */
     .kind = GRAPH_KIND_ANCHOR,
     .shape = shape_conv,
     .cpu = ref_conv},
    {.name = "batch_norm",
     .arity = 5, /* x, scale, bias, mean, var */
     .kind = GRAPH_KIND_ELTWISE,
     .shape = shape_batch_norm,
     .cpu = ref_batch_norm},
    /* vision: pooling and shape (vops.c, ref_vops.c) */
    UNARY("leaky_relu", ref_leaky_relu),
    UNARY("elu", ref_elu),
    UNARY("hard_sigmoid", ref_hard_sigmoid),
    UNARY("hard_swish", ref_hard_swish),
    {.name = "pad",
     .arity = 1,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = graph_shape_pad,
     .cpu = ref_pad,
     .remaps = true},
    {.name = "slice",
     .arity = 1,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = graph_shape_slice,
     .cpu = ref_slice,
     .remaps = true},
    {.name = "gather",
     .arity = 2,
     .kind = GRAPH_KIND_ELTWISE,
     .shape = graph_shape_gather,
     .cpu = ref_gather,
     .remaps = true},
    {.name = "log_softmax",
     .arity = 1,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = graph_shape_log_softmax,
     .cpu = ref_log_softmax},
    {.name = "pool",
     .arity = 1,
     .kind = GRAPH_KIND_ANCHOR,
     .shape = graph_shape_pool,
     .cpu = ref_pool},
    {.name = "conv_transpose",
     .arity = 3, /* x, weight, optional bias */
     .kind = GRAPH_KIND_ANCHOR,
     .shape = graph_shape_conv_transpose,
     .cpu = ref_conv_transpose},
};
_Static_assert(CORE_ARRAY_LEN(ops) == GLESC_OP_COUNT_, "one op table row per glesc_op");

const graph_op_info *graph_op(glesc_op op)
{
    return &ops[op];
}

GLESC_API const char *glesc_op_name(glesc_op op)
{
    return (unsigned)op < GLESC_OP_COUNT_ ? ops[op].name : NULL;
}
