/*
 * map.c — the ONNX op table of onnx-run: each row maps one ONNX op onto
 * glesc's public graph API, exactly or not at all. A mapping checks every
 * attribute, type and shape it relies on and answers UNSUPPORTED (with the
 * reason) for anything glesc cannot express as ONNX defines it; it never
 * approximates. Layout conventions are in map.h.
 */
#include "map.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_FLOAT ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define T_FLOAT16 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
#define T_BFLOAT16 ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16
#define T_INT32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32
#define T_INT64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

static onnx_map_status say(onnx_map_ctx *m, onnx_map_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, m->why_len, fmt, ap);
    va_end(ap);
    return s;
}
#define UNSUP(...) say(m, ONNX_MAP_UNSUPPORTED, __VA_ARGS__)
#define INVALID(...) say(m, ONNX_MAP_ERROR, __VA_ARGS__)

/* A builder returned NULL: glesc's message. */
static onnx_map_status glesc_failed(onnx_map_ctx *m, const char *what)
{
    return say(m, ONNX_MAP_ERROR, "%s: %s", what, glesc_context_errmsg(glesc_graph_context(m->g)));
}
#define TRY(expr, what)                                                                            \
    do {                                                                                           \
        if (!(expr))                                                                               \
            return glesc_failed(m, what);                                                          \
    } while (0)
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        onnx_map_status s_ = (expr);                                                               \
        if (s_ != ONNX_MAP_OK)                                                                     \
            return s_;                                                                             \
    } while (0)

/* ---- attributes ---- */

static const Onnx__AttributeProto *attr(const onnx_map_ctx *m, const char *name)
{
    for (size_t i = 0; i < m->node->n_attribute; i++)
        if (!strcmp(m->node->attribute[i]->name, name))
            return m->node->attribute[i];
    return NULL;
}

static int64_t attr_i(const onnx_map_ctx *m, const char *name, int64_t def)
{
    const Onnx__AttributeProto *a = attr(m, name);
    return a && a->has_i ? a->i : def;
}

static float attr_f(const onnx_map_ctx *m, const char *name, float def)
{
    const Onnx__AttributeProto *a = attr(m, name);
    return a && a->has_f ? a->f : def;
}

/* ---- values ---- */

static bool is_float(int32_t type)
{
    return type == T_FLOAT || type == T_FLOAT16;
}

/* Input i must be present and FLOAT or FLOAT16 (what glesc's compute ops
 * read; their results are f32). */
static onnx_map_status need_float(onnx_map_ctx *m, int i)
{
    if (i >= m->n_in || !m->in[i])
        return INVALID("input %d is missing", i);
    if (!is_float(m->in[i]->type))
        return UNSUP("input %d (%s) is %s: glesc's ops compute in f32 (FLOAT and FLOAT16 inputs "
                     "only)",
                     i, m->in[i]->name, onnx_type_name(m->in[i]->type));
    return ONNX_MAP_OK;
}

static void gshape(int rank, const int64_t *dims, int *ndim, int64_t shape[4])
{
    *ndim = rank ? rank : 1;
    for (int i = 0; i < 4; i++)
        shape[i] = i < rank ? dims[rank - 1 - i] : 1;
}

onnx_map_status onnx_value_gpu(onnx_map_ctx *m, onnx_value *v, glesc_tensor **out)
{
    if (v->t) {
        *out = v->t;
        return ONNX_MAP_OK;
    }
    if (v->rank > 4)
        return UNSUP("%s has rank %d: glesc tensors have at most 4 dimensions", v->name, v->rank);
    for (int i = 0; i < v->rank; i++)
        if (v->dims[i] == 0)
            return UNSUP("%s has a zero-sized dimension: glesc tensors are never empty", v->name);
    if (!v->host)
        return INVALID("%s has no value", v->name);
    glesc_dtype dt;
    switch (v->type) {
    case T_FLOAT:
        dt = GLESC_DTYPE_F32;
        break;
    case T_FLOAT16:
        dt = GLESC_DTYPE_F16;
        break;
    case T_BFLOAT16:
        dt = GLESC_DTYPE_BF16;
        break;
    default:
        return UNSUP("%s is %s: glesc's ops read floating-point data only", v->name,
                     onnx_type_name(v->type));
    }
    int ndim;
    int64_t shape[4];
    gshape(v->rank, v->dims, &ndim, shape);
    glesc_tensor *t = glesc_tensor_new(m->g, dt, ndim, shape);
    TRY(t, "glesc_tensor_new");
    glesc_tensor_set_name(t, v->name);
    size_t bytes = (size_t)v->host->n * onnx_type_size(v->type);
    if (glesc_tensor_write(t, v->host->data, bytes) != GLESC_OK)
        return glesc_failed(m, "glesc_tensor_write");
    *out = v->t = t;
    return ONNX_MAP_OK;
}

static onnx_map_status gpu_in(onnx_map_ctx *m, int i, glesc_tensor **out)
{
    if (i >= m->n_in || !m->in[i])
        return INVALID("input %d is missing", i);
    return onnx_value_gpu(m, m->in[i], out);
}

/* A convolution's inputs (Conv, ConvTranspose): X, W and the optional
 * float bias B (NULL when absent). */
static onnx_map_status conv_inputs(onnx_map_ctx *m, glesc_tensor **x, glesc_tensor **w,
                                   glesc_tensor **b)
{
    *b = NULL;
    CHECK(gpu_in(m, 0, x));
    CHECK(gpu_in(m, 1, w));
    if (m->n_in > 2 && m->in[2]) {
        CHECK(need_float(m, 2));
        CHECK(gpu_in(m, 2, b));
    }
    return ONNX_MAP_OK;
}

/* Output k: t with the given ONNX type and rank; dims read from t. */
static void set_out(onnx_map_ctx *m, int k, glesc_tensor *t, int32_t type, int rank)
{
    onnx_value *o = &m->out[k];
    o->t = t;
    o->type = type;
    o->rank = rank;
    for (int i = 0; i < rank; i++)
        o->dims[i] = glesc_tensor_dim(t, rank - 1 - i);
}

/* A glesc reshape of x to ONNX dims (rank 0..4). */
static onnx_map_status reshape_to(onnx_map_ctx *m, glesc_tensor *x, int rank, const int64_t *dims,
                                  glesc_tensor **out)
{
    if (rank > 4)
        return UNSUP("result rank %d: glesc tensors have at most 4 dimensions", rank);
    int ndim;
    int64_t shape[4];
    gshape(rank, dims, &ndim, shape);
    TRY(*out = glesc_reshape(m->g, x, ndim, shape), "glesc_reshape");
    return ONNX_MAP_OK;
}

/* Integer contents of input i, which must be known on the host (a graph
 * input, initializer or Constant of INT64 or INT32). */
static onnx_map_status host_ints(onnx_map_ctx *m, int i, int64_t *vals, int max, int *n)
{
    const onnx_value *v = m->in[i];
    if (!v->host)
        return UNSUP("input %d (%s) is computed on the GPU: it must be a constant, an "
                     "initializer or a graph input",
                     i, v->name);
    if (v->type != T_INT64 && v->type != T_INT32)
        return INVALID("input %d (%s) is %s, not INT64", i, v->name, onnx_type_name(v->type));
    if (v->host->n > max)
        return UNSUP("input %d (%s) has %" PRId64 " values (at most %d)", i, v->name, v->host->n,
                     max);
    for (int64_t k = 0; k < v->host->n; k++)
        vals[k] = v->type == T_INT64 ? ((const int64_t *)v->host->data)[k]
                                     : ((const int32_t *)v->host->data)[k];
    *n = (int)v->host->n;
    return ONNX_MAP_OK;
}

/* A scalar float of input i known on the host (Clip's bounds). */
static onnx_map_status host_scalar(onnx_map_ctx *m, int i, float *val)
{
    const onnx_value *v = m->in[i];
    if (!v->host)
        return UNSUP("input %d (%s) is computed on the GPU: it must be a constant, an "
                     "initializer or a graph input",
                     i, v->name);
    if (v->host->n != 1)
        return INVALID("input %d (%s) has %" PRId64 " values, not 1", i, v->name, v->host->n);
    if (v->type != T_FLOAT)
        return UNSUP("input %d (%s) is %s (FLOAT bounds only)", i, v->name,
                     onnx_type_name(v->type));
    *val = *(const float *)v->host->data;
    return ONNX_MAP_OK;
}

/* ONNX axis a of a rank-r tensor (negative counts from the end) → glesc
 * axis. */
static onnx_map_status axis_of(onnx_map_ctx *m, int64_t a, int rank, int *onnx_axis, int *gaxis)
{
    if (a < -rank || a >= (rank ? rank : 1))
        return INVALID("axis %" PRId64 " is out of range for rank %d", a, rank);
    if (a < 0)
        a += rank;
    if (onnx_axis)
        *onnx_axis = (int)a;
    *gaxis = rank ? rank - 1 - (int)a : 0;
    return ONNX_MAP_OK;
}

/* The axes of the reductions, Squeeze and Unsqueeze: attribute axes (older
 * opsets) or the optional INT64 input 1. */
static onnx_map_status axes_list(onnx_map_ctx *m, int64_t *axes, int *n)
{
    const Onnx__AttributeProto *a = attr(m, "axes");
    *n = 0;
    if (a) {
        if (a->n_ints > ONNX_MAX_RANK)
            return INVALID("attribute axes has %zu values", a->n_ints);
        for (size_t i = 0; i < a->n_ints; i++)
            axes[(*n)++] = a->ints[i];
        return ONNX_MAP_OK;
    }
    if (m->n_in > 1 && m->in[1])
        return host_ints(m, 1, axes, ONNX_MAX_RANK, n);
    return ONNX_MAP_OK;
}

/* Output 0 of the given type: y, whose ONNX dims are xv's with the ones
 * drop marks reduced to 1, reshaped without those (keepdims 0, Squeeze). */
static onnx_map_status drop_out(onnx_map_ctx *m, glesc_tensor *y, const onnx_value *xv,
                                const bool *drop, int32_t type)
{
    int64_t dims[ONNX_MAX_RANK] = {0};
    int nr = 0;
    for (int i = 0; i < xv->rank; i++)
        if (!drop[i])
            dims[nr++] = xv->dims[i];
    CHECK(reshape_to(m, y, nr, dims, &y));
    set_out(m, 0, y, type, nr);
    return ONNX_MAP_OK;
}

/* x (ONNX dims those of xv) coerced to 2-D at ONNX axis oa: glesc
 * [prod(dims[oa:]), prod(dims[:oa])]. */
static onnx_map_status flat2d(onnx_map_ctx *m, glesc_tensor *x, const onnx_value *xv, int oa,
                              glesc_tensor **out)
{
    int64_t flat[2] = {1, 1};
    for (int i = 0; i < xv->rank; i++)
        flat[i < oa] *= xv->dims[i];
    TRY(*out = glesc_reshape(m->g, x, 2, flat), "glesc_reshape");
    return ONNX_MAP_OK;
}

/* ---- elementwise ---- */

/* The row's glesc op on input 0. */
static onnx_map_status unary(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    glesc_tensor *x, *y;
    CHECK(need_float(m, 0));
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_unary(m->g, op, x), glesc_op_name(op));
    set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* 1 / x: a division by a one-element constant 1. */
static onnx_map_status map_reciprocal(onnx_map_ctx *m)
{
    glesc_tensor *x, *one, *y;
    CHECK(need_float(m, 0));
    CHECK(gpu_in(m, 0, &x));
    const int64_t shape[1] = {1};
    const float v = 1.0f;
    TRY(one = glesc_tensor_new(m->g, GLESC_DTYPE_F32, 1, shape), "glesc_tensor_new");
    if (glesc_tensor_write(one, &v, sizeof v) != GLESC_OK)
        return glesc_failed(m, "glesc_tensor_write");
    TRY(y = glesc_div(m->g, one, x), "glesc_div");
    set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* The row's glesc op with numpy broadcasting of a and b (both float, the
 * same type), folded over every input for the variadic ops (Max, Min, Sum,
 * Mean). */
static onnx_map_status binary(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    bool variadic = m->row->variadic;
    if (m->n_in < (variadic ? 1 : 2))
        return INVALID("%s needs %s inputs", m->node->op_type, variadic ? "1 or more" : "2");
    if (!variadic && m->n_in != 2)
        return INVALID("%s takes 2 inputs, not %d", m->node->op_type, m->n_in);
    glesc_tensor *acc;
    CHECK(need_float(m, 0));
    CHECK(gpu_in(m, 0, &acc));
    int rank = m->in[0]->rank;
    for (int i = 1; i < m->n_in; i++) {
        glesc_tensor *b;
        CHECK(need_float(m, i));
        if (m->in[i]->type != m->in[0]->type)
            return UNSUP("inputs of types %s and %s", onnx_type_name(m->in[0]->type),
                         onnx_type_name(m->in[i]->type));
        CHECK(gpu_in(m, i, &b));
        TRY(acc = glesc_binary(m->g, op, acc, b), glesc_op_name(op));
        if (m->in[i]->rank > rank)
            rank = m->in[i]->rank;
    }
    set_out(m, 0, acc, m->in[0]->type, rank);
    return ONNX_MAP_OK;
}
/* The sum of the n inputs times 1/n. */
static onnx_map_status map_mean(onnx_map_ctx *m)
{
    CHECK(binary(m));
    glesc_tensor *y;
    TRY(y = glesc_scale(m->g, m->out[0].t, 1.0f / (float)m->n_in, 0.0f), "glesc_scale");
    m->out[0].t = y;
    return ONNX_MAP_OK;
}

static onnx_map_status map_identity(onnx_map_ctx *m)
{
    if (m->n_in != 1 || !m->in[0])
        return INVALID("Identity takes 1 input");
    onnx_value *o = &m->out[0];
    const char *name = o->name;
    *o = *m->in[0];
    o->name = name;
    return ONNX_MAP_OK;
}

/* Clip: bounds from attributes min/max (opset < 11: their defaults are
 * float's lowest and largest, so an infinity is clipped) or optional
 * scalar inputs 1 and 2 (an absent one does not clip, as ONNX's reference
 * implementation). */
static onnx_map_status map_clip(onnx_map_ctx *m)
{
    float lo = attr_f(m, "min", m->opset < 11 ? -FLT_MAX : -INFINITY),
          hi = attr_f(m, "max", m->opset < 11 ? FLT_MAX : INFINITY);
    glesc_tensor *x, *y;
    CHECK(need_float(m, 0));
    if (m->n_in > 1 && m->in[1])
        CHECK(host_scalar(m, 1, &lo));
    if (m->n_in > 2 && m->in[2])
        CHECK(host_scalar(m, 2, &hi));
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_clamp(m->g, x, lo, hi), "glesc_clamp");
    set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* Cast and CastLike among FLOAT, FLOAT16 and BFLOAT16 (glesc_cast rounds to
 * nearest even, as ONNX's reference). */
static onnx_map_status cast_to(onnx_map_ctx *m, int32_t to)
{
    const onnx_value *x = m->in[0];
    glesc_dtype dt;
    switch (to) {
    case T_FLOAT:
        dt = GLESC_DTYPE_F32;
        break;
    case T_FLOAT16:
        dt = GLESC_DTYPE_F16;
        break;
    case T_BFLOAT16:
        dt = GLESC_DTYPE_BF16;
        break;
    default:
        return UNSUP("cast to %s: glesc casts among FLOAT, FLOAT16 and BFLOAT16 only",
                     onnx_type_name(to));
    }
    if (x->type != T_FLOAT && x->type != T_FLOAT16 && x->type != T_BFLOAT16)
        return UNSUP("cast from %s: glesc casts among FLOAT, FLOAT16 and BFLOAT16 only",
                     onnx_type_name(x->type));
    glesc_tensor *t, *y;
    CHECK(gpu_in(m, 0, &t));
    if (glesc_tensor_dtype(t) == dt)
        y = t;
    else
        TRY(y = glesc_cast(m->g, t, dt), "glesc_cast");
    set_out(m, 0, y, to, x->rank);
    return ONNX_MAP_OK;
}
static onnx_map_status map_cast(onnx_map_ctx *m)
{
    if (m->n_in != 1 || !m->in[0] || !attr(m, "to"))
        return INVALID("Cast takes 1 input and attribute to");
    return cast_to(m, (int32_t)attr_i(m, "to", 0));
}
static onnx_map_status map_castlike(onnx_map_ctx *m)
{
    if (m->n_in != 2 || !m->in[0] || !m->in[1])
        return INVALID("CastLike takes 2 inputs");
    return cast_to(m, m->in[1]->type);
}

/* ---- reductions ---- */

/* The reductions over a set of axes: from attribute axes (older opsets) or
 * the optional INT64 input 1 (ReduceSum from opset 13, the others from 18);
 * none: every axis, unless noop_with_empty_axes. pre and post are the
 * elementwise ops of the composed reductions (ReduceL2: sqr, then sqrt). */
static onnx_map_status reduce(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop, pre = m->row->pre, post = m->row->post;
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    int64_t axes[ONNX_MAX_RANK];
    int n_axes;
    CHECK(axes_list(m, axes, &n_axes));
    bool keep = attr_i(m, "keepdims", 1) != 0;
    glesc_tensor *x;
    CHECK(gpu_in(m, 0, &x));
    if (n_axes == 0 && attr_i(m, "noop_with_empty_axes", 0)) {
        set_out(m, 0, x, xv->type, r);
        return ONNX_MAP_OK;
    }
    bool reduced[ONNX_MAX_RANK] = {false};
    if (n_axes == 0)
        for (int i = 0; i < r; i++)
            reduced[i] = true;
    for (int i = 0; i < n_axes; i++) {
        int oa, ga;
        CHECK(axis_of(m, axes[i], r, &oa, &ga));
        if (reduced[oa])
            return INVALID("axis %" PRId64 " is repeated", axes[i]);
        reduced[oa] = true;
    }
    if (pre != GLESC_OP_NONE)
        TRY(x = glesc_unary(m->g, pre, x), glesc_op_name(pre));
    for (int i = 0; i < r; i++)
        if (reduced[i])
            TRY(x = glesc_reduce(m->g, op, x, r - 1 - i), glesc_op_name(op));
    if (post != GLESC_OP_NONE)
        TRY(x = glesc_unary(m->g, post, x), glesc_op_name(post));
    if (!keep)
        return drop_out(m, x, xv, reduced, xv->type);
    set_out(m, 0, x, xv->type, r);
    return ONNX_MAP_OK;
}

/* ArgMax along one axis: glesc gives the first maximum's index (i32). */
static onnx_map_status map_argmax(onnx_map_ctx *m)
{
    if (attr_i(m, "select_last_index", 0))
        return UNSUP("select_last_index=1: glesc's argmax gives the first maximum");
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int oa, ga;
    CHECK(axis_of(m, attr_i(m, "axis", 0), xv->rank, &oa, &ga));
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_reduce(m->g, GLESC_OP_ARGMAX, x, ga), "argmax");
    if (!attr_i(m, "keepdims", 1)) {
        bool drop[ONNX_MAX_RANK] = {false};
        drop[oa] = true;
        return drop_out(m, y, xv, drop, T_INT64);
    }
    set_out(m, 0, y, T_INT64, xv->rank);
    return ONNX_MAP_OK;
}

/* ---- softmax and normalization ---- */

/* glesc dimension ga swapped with dimension 0 (a permutation is its own
 * inverse), as a contiguous copy. */
static onnx_map_status swap0(onnx_map_ctx *m, glesc_tensor *x, int ga, glesc_tensor **out)
{
    if (ga == 0) {
        *out = x;
        return ONNX_MAP_OK;
    }
    int perm[4] = {0, 1, 2, 3};
    perm[0] = ga;
    perm[ga] = 0;
    TRY(x = glesc_permute(m->g, x, perm), "glesc_permute");
    TRY(*out = glesc_cont(m->g, x), "glesc_cont");
    return ONNX_MAP_OK;
}

/* Softmax (the row's GLESC_OP_SOFTMAX) or LogSoftmax of x along glesc
 * dimension ga: glesc_softmax reads dimension 0, so a swap there and
 * back. */
static onnx_map_status softmax_at(onnx_map_ctx *m, glesc_tensor *x, int ga, glesc_tensor **out)
{
    if (m->row->gop == GLESC_OP_LOG_SOFTMAX) {
        TRY(*out = glesc_log_softmax(m->g, x, ga), "glesc_log_softmax");
        return ONNX_MAP_OK;
    }
    CHECK(swap0(m, x, ga, &x));
    TRY(x = glesc_softmax(m->g, x, NULL, 1.0f, false), "glesc_softmax");
    return swap0(m, x, ga, out);
}

/* Softmax and LogSoftmax from opset 13: along one axis. Before 13: over the
 * input coerced to 2-D at axis, i.e. every dimension from axis on at once
 * (glesc's leading dimensions, reshaped into one). */
static onnx_map_status softmax(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, oa, ga;
    CHECK(axis_of(m, attr_i(m, "axis", m->opset >= 13 ? -1 : 1), r, &oa, &ga));
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    if (m->opset >= 13) {
        CHECK(softmax_at(m, x, ga, &y));
    } else {
        CHECK(flat2d(m, x, xv, oa, &x));
        CHECK(softmax_at(m, x, 0, &y));
        CHECK(reshape_to(m, y, r, xv->dims, &y));
    }
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* LayerNormalization (opset 17): over the dimensions from axis on (glesc's
 * leading ones, reshaped into dimension 0), times Scale plus B. Outputs
 * Mean and InvStdDev are the reductions of the same reshape. */
static onnx_map_status map_layer_norm(onnx_map_ctx *m)
{
    if (attr_i(m, "stash_type", 1) != 1)
        return UNSUP("stash_type %" PRId64 ": glesc normalizes in f32", attr_i(m, "stash_type", 1));
    CHECK(need_float(m, 0));
    CHECK(need_float(m, 1));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, oa, ga;
    CHECK(axis_of(m, attr_i(m, "axis", -1), r, &oa, &ga));
    float eps = attr_f(m, "epsilon", 1e-5f);
    glesc_tensor *x, *scale, *bias = NULL, *y;
    CHECK(gpu_in(m, 0, &x));
    CHECK(gpu_in(m, 1, &scale));
    if (m->n_in > 2 && m->in[2]) {
        CHECK(need_float(m, 2));
        CHECK(gpu_in(m, 2, &bias));
    }
    glesc_tensor *xf;
    CHECK(flat2d(m, x, xv, oa, &xf));
    TRY(y = glesc_layer_norm(m->g, xf, eps), "glesc_layer_norm");
    CHECK(reshape_to(m, y, r, xv->dims, &y));
    TRY(y = glesc_mul(m->g, y, scale), "glesc_mul");
    if (bias)
        TRY(y = glesc_add(m->g, y, bias), "glesc_add");
    set_out(m, 0, y, xv->type, r);
    if (m->n_out < 2)
        return ONNX_MAP_OK;
    /* Mean and InvStdDev: shape X.shape[:axis] + [1] * (r - axis). */
    int64_t sdims[ONNX_MAX_RANK];
    for (int i = 0; i < r; i++)
        sdims[i] = i < oa ? xv->dims[i] : 1;
    glesc_tensor *mean, *var, *inv;
    TRY(mean = glesc_reduce(m->g, GLESC_OP_MEAN, xf, 0), "mean");
    TRY(var = glesc_sub(m->g, xf, mean), "glesc_sub");
    TRY(var = glesc_unary(m->g, GLESC_OP_SQR, var), "sqr");
    TRY(var = glesc_reduce(m->g, GLESC_OP_MEAN, var, 0), "mean");
    TRY(inv = glesc_scale(m->g, var, 1.0f, eps), "glesc_scale");
    TRY(inv = glesc_unary(m->g, GLESC_OP_RSQRT, inv), "rsqrt");
    CHECK(reshape_to(m, mean, r, sdims, &mean));
    set_out(m, 1, mean, T_FLOAT, r);
    if (m->n_out > 2) {
        CHECK(reshape_to(m, inv, r, sdims, &inv));
        set_out(m, 2, inv, T_FLOAT, r);
    }
    return ONNX_MAP_OK;
}

/* ---- products ---- */

/* MatMul (numpy semantics): A [..., M, K] · B [..., K, N]. In glesc's
 * order A is X [K, M, ...] and Bᵀ is the weight W [K, N, ...] (a contiguous
 * transpose), W's batch dimensions broadcasting over X's; a 1-D operand
 * is a row (A) or column (B) vector whose unit dimension is dropped. */
static onnx_map_status map_matmul(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    CHECK(need_float(m, 1));
    const onnx_value *av = m->in[0], *bv = m->in[1];
    if (av->rank < 1 || bv->rank < 1)
        return INVALID("MatMul of a scalar");
    glesc_tensor *a, *b, *w, *y;
    CHECK(gpu_in(m, 0, &a));
    CHECK(gpu_in(m, 1, &b));
    /* batch dims: B's must broadcast to A's (glesc broadcasts the weight) */
    int ra = av->rank, rb = bv->rank;
    int batch = (ra > rb ? ra : rb) - 2;
    for (int i = 0; i < batch; i++) {
        int64_t da = i - (batch - (ra - 2)) >= 0 && ra > 2 ? av->dims[i - (batch - (ra - 2))] : 1;
        int64_t db = i - (batch - (rb - 2)) >= 0 && rb > 2 ? bv->dims[i - (batch - (rb - 2))] : 1;
        if (da % db != 0 || (db != da && db != 1))
            return UNSUP("batch dimensions of A and B: glesc broadcasts B's over A's, not A's "
                         "over B's");
    }
    if (rb == 1) {
        const int64_t col[2] = {bv->dims[0], 1};
        TRY(w = glesc_reshape(m->g, b, 2, col), "glesc_reshape");
    } else {
        TRY(w = glesc_transpose(m->g, b), "glesc_transpose");
        TRY(w = glesc_cont(m->g, w), "glesc_cont");
    }
    TRY(y = glesc_matmul(m->g, w, a), "glesc_matmul");
    /* result dims: batch..., M (unless A is 1-D), N (unless B is 1-D) */
    int64_t dims[ONNX_MAX_RANK] = {0};
    int nr = 0;
    for (int i = 0; i < batch; i++)
        dims[nr++] = glesc_tensor_dim(y, 2 + batch - 1 - i);
    if (ra > 1)
        dims[nr++] = av->dims[ra - 2];
    if (rb > 1)
        dims[nr++] = bv->dims[rb - 1];
    CHECK(reshape_to(m, y, nr, dims, &y));
    set_out(m, 0, y, av->type, nr);
    return ONNX_MAP_OK;
}

/* Gemm: alpha·A'·B' + beta·C with A' = A or Aᵀ (transA), B' = B or Bᵀ
 * (transB), C broadcasting to [M, N] (attribute broadcast of opsets before 7
 * asks for just that). glesc's weight is B'ᵀ: B itself when
 * transB (its rows are glesc's contiguous dimension 0), else a contiguous
 * transpose; the activation is A' (A, or a contiguous transpose). */
static onnx_map_status map_gemm(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    CHECK(need_float(m, 1));
    if (m->in[0]->rank != 2 || m->in[1]->rank != 2)
        return INVALID("Gemm's A and B must be 2-D");
    float alpha = attr_f(m, "alpha", 1.0f), beta = attr_f(m, "beta", 1.0f);
    glesc_tensor *a, *b, *y;
    CHECK(gpu_in(m, 0, &a));
    CHECK(gpu_in(m, 1, &b));
    if (attr_i(m, "transA", 0)) {
        TRY(a = glesc_transpose(m->g, a), "glesc_transpose");
        TRY(a = glesc_cont(m->g, a), "glesc_cont");
    }
    if (!attr_i(m, "transB", 0)) {
        TRY(b = glesc_transpose(m->g, b), "glesc_transpose");
        TRY(b = glesc_cont(m->g, b), "glesc_cont");
    }
    TRY(y = glesc_matmul(m->g, b, a), "glesc_matmul");
    if (alpha != 1.0f)
        TRY(y = glesc_scale(m->g, y, alpha, 0.0f), "glesc_scale");
    if (m->n_in > 2 && m->in[2] && beta != 0.0f) {
        glesc_tensor *c;
        CHECK(need_float(m, 2));
        CHECK(gpu_in(m, 2, &c));
        if (beta != 1.0f)
            TRY(c = glesc_scale(m->g, c, beta, 0.0f), "glesc_scale");
        TRY(y = glesc_add(m->g, y, c), "glesc_add");
    }
    set_out(m, 0, y, m->in[0]->type, 2);
    return ONNX_MAP_OK;
}

/* ---- vision ---- */

/* ONNX's per-axis list attribute name (n values, each within int32) into
 * out, default def. */
static onnx_map_status attr_list(onnx_map_ctx *m, const char *name, int n, int64_t def,
                                 int64_t *out)
{
    const Onnx__AttributeProto *a = attr(m, name);
    for (int i = 0; i < n; i++)
        out[i] = def;
    if (!a)
        return ONNX_MAP_OK;
    if ((int)a->n_ints != n)
        return INVALID("%s has %zu values, want %d", name, a->n_ints, n);
    for (int i = 0; i < n; i++) {
        if (a->ints[i] < INT32_MIN || a->ints[i] > INT32_MAX)
            return INVALID("%s[%d] = %" PRId64, name, i, a->ints[i]);
        out[i] = a->ints[i];
    }
    return ONNX_MAP_OK;
}

/* Conv over 1 or 2 spatial axes (X [N, C, W] or [N, C, H, W], W [M, C /
 * group, kW] or [M, C / group, kH, kW], optional B [M]): ONNX's dims
 * reversed are glesc's layout, and pads [x1_begin, x2_begin, x1_end,
 * x2_end] are glesc_conv_params' order. auto_pad SAME_UPPER / SAME_LOWER
 * give the pads the spec computes (output ceil(in / stride)). */
static onnx_map_status map_conv(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    CHECK(need_float(m, 1));
    const onnx_value *xv = m->in[0], *wv = m->in[1];
    int r = xv->rank, ns = r - 2;
    if (r == 5)
        return UNSUP("3-D convolution (rank-5 X): glesc convolves 1 or 2 spatial axes");
    if ((r != 3 && r != 4) || wv->rank != r)
        return INVALID("Conv's X (rank %d) and W (rank %d) must both be rank 3 or 4", r, wv->rank);
    int64_t strides[2], dil[2], pads[4], ks[2];
    CHECK(attr_list(m, "strides", ns, 1, strides));
    CHECK(attr_list(m, "dilations", ns, 1, dil));
    CHECK(attr_list(m, "pads", 2 * ns, 0, pads));
    CHECK(attr_list(m, "kernel_shape", ns, 0, ks));
    for (int i = 0; i < ns; i++)
        if (attr(m, "kernel_shape") && ks[i] != wv->dims[2 + i])
            return INVALID("kernel_shape %" PRId64 " differs from W's %" PRId64, ks[i],
                           wv->dims[2 + i]);
    const Onnx__AttributeProto *ap = attr(m, "auto_pad");
    if (ap && ap->has_s && ap->s.len && strncmp((const char *)ap->s.data, "NOTSET", ap->s.len)) {
        bool valid = !strncmp((const char *)ap->s.data, "VALID", ap->s.len);
        bool upper = !strncmp((const char *)ap->s.data, "SAME_UPPER", ap->s.len);
        bool lower = !strncmp((const char *)ap->s.data, "SAME_LOWER", ap->s.len);
        if (!valid && !upper && !lower)
            return INVALID("auto_pad %.*s", (int)ap->s.len, (const char *)ap->s.data);
        for (int i = 0; i < ns; i++) {
            int64_t in = xv->dims[2 + i], out = (in + strides[i] - 1) / strides[i];
            int64_t total = (out - 1) * strides[i] + (wv->dims[2 + i] - 1) * dil[i] + 1 - in;
            total = valid || total < 0 ? 0 : total;
            pads[i] = upper ? total / 2 : total - total / 2;
            pads[ns + i] = total - pads[i];
        }
    }
    int64_t group = attr_i(m, "group", 1);
    glesc_conv_params p;
    glesc_conv_params_init(&p);
    for (int i = 0; i < ns; i++) {
        int a = ns == 1 ? 1 : i; /* 1-D: the W entries */
        if (strides[i] < 1 || dil[i] < 1 || strides[i] > INT32_MAX || dil[i] > INT32_MAX ||
            pads[i] < 0 || pads[ns + i] < 0 || pads[i] > INT32_MAX || pads[ns + i] > INT32_MAX)
            return INVALID("strides, dilations or pads out of range");
        p.strides[a] = (int)strides[i];
        p.dilations[a] = (int)dil[i];
        p.pads[a] = (int)pads[i];
        p.pads[2 + a] = (int)pads[ns + i];
    }
    if (group < 1 || group > INT32_MAX)
        return INVALID("group %" PRId64, group);
    p.group = (int)group;
    glesc_tensor *x, *w, *b, *y;
    CHECK(conv_inputs(m, &x, &w, &b));
    if (ns == 1)
        TRY(y = glesc_conv1d(m->g, x, w, b, &p), "glesc_conv1d");
    else
        TRY(y = glesc_conv2d(m->g, x, w, b, &p), "glesc_conv2d");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* BatchNormalization, inference form (training_mode 0, one output, and
 * is_test 1 before opset 7): X [N,
 * C, D...] is reshaped to glesc's [D..., 1, C, N] (the channel in
 * dimension 2), normalized, and reshaped back. momentum only matters in
 * training. */
static onnx_map_status map_batch_norm(onnx_map_ctx *m)
{
    if (attr_i(m, "training_mode", 0) != 0)
        return UNSUP("training_mode 1: glesc's batch norm is the inference form");
    /* before opset 7 the default is_test 0 is training (batch statistics) */
    if (m->opset < 7 && attr_i(m, "is_test", 0) == 0)
        return UNSUP("is_test 0 (opset %" PRId64 "): training mode", m->opset);
    if (attr_i(m, "spatial", 1) != 1)
        return UNSUP("spatial 0 (statistics per element, not per channel)");
    if (m->n_out > 1)
        return UNSUP("the running mean and variance outputs (training)");
    for (int i = 0; i < 5; i++)
        CHECK(need_float(m, i));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    if (r < 2 || r > 4)
        return UNSUP("X of rank %d: glesc's batch norm takes [N, C] to [N, C, H, W]", r);
    for (int i = 1; i < 5; i++)
        if (m->in[i]->rank != 1 || m->in[i]->dims[0] != xv->dims[1])
            return INVALID("input %d (%s) must be [C = %" PRId64 "]", i, m->in[i]->name,
                           xv->dims[1]);
    int64_t inner = 1;
    for (int i = 2; i < r; i++)
        inner *= xv->dims[i];
    glesc_tensor *x, *prm[4], *y;
    CHECK(gpu_in(m, 0, &x));
    for (int i = 0; i < 4; i++)
        CHECK(gpu_in(m, 1 + i, &prm[i]));
    const int64_t shape[4] = {inner, 1, xv->dims[1], xv->dims[0]};
    TRY(x = glesc_reshape(m->g, x, 4, shape), "glesc_reshape");
    TRY(y = glesc_batch_norm(m->g, x, prm[0], prm[1], prm[2], prm[3], attr_f(m, "epsilon", 1e-5f)),
        "glesc_batch_norm");
    CHECK(reshape_to(m, y, r, xv->dims, &y));
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* ---- shape ---- */

static onnx_map_status map_concat(onnx_map_ctx *m)
{
    if (!attr(m, "axis"))
        return INVALID("Concat needs attribute axis");
    CHECK(need_float(m, 0));
    int r = m->in[0]->rank, ga;
    CHECK(axis_of(m, attr_i(m, "axis", 0), r, NULL, &ga));
    glesc_tensor *acc;
    CHECK(gpu_in(m, 0, &acc));
    for (int i = 1; i < m->n_in; i++) {
        glesc_tensor *b;
        CHECK(need_float(m, i));
        if (m->in[i]->type != m->in[0]->type || m->in[i]->rank != r)
            return INVALID("Concat inputs differ in type or rank");
        CHECK(gpu_in(m, i, &b));
        TRY(acc = glesc_concat(m->g, acc, b, ga), "glesc_concat");
    }
    set_out(m, 0, acc, m->in[0]->type, r);
    return ONNX_MAP_OK;
}

static onnx_map_status map_reshape(onnx_map_ctx *m)
{
    if (m->n_in != 2 || !m->in[0] || !m->in[1])
        return INVALID("Reshape takes 2 inputs");
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t dims[ONNX_MAX_RANK] = {0};
    int n;
    CHECK(host_ints(m, 1, dims, ONNX_MAX_RANK, &n));
    bool allowzero = attr_i(m, "allowzero", 0) != 0;
    int64_t total = 1, known = 1;
    int infer = -1;
    for (int i = 0; i < xv->rank; i++)
        total *= xv->dims[i];
    for (int i = 0; i < n; i++) {
        if (dims[i] == 0 && !allowzero) {
            if (i >= xv->rank)
                return INVALID("shape[%d] = 0 copies a dimension the input lacks", i);
            dims[i] = xv->dims[i];
        }
        if (dims[i] == -1) {
            if (infer >= 0)
                return INVALID("shape has two -1 entries");
            infer = i;
            continue;
        }
        if (dims[i] < 0)
            return INVALID("shape[%d] = %" PRId64, i, dims[i]);
        known *= dims[i];
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            return INVALID("shape's -1 cannot be inferred");
        dims[infer] = total / known;
        known *= dims[infer];
    }
    if (known != total)
        return INVALID("shape gives %" PRId64 " elements, the input has %" PRId64, known, total);
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    CHECK(reshape_to(m, x, n, dims, &y));
    set_out(m, 0, y, xv->type, n);
    return ONNX_MAP_OK;
}

/* Squeeze: a reshape without the given size-1 dimensions (none given: all
 * of them). */
static onnx_map_status map_squeeze(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t axes[ONNX_MAX_RANK];
    int n;
    CHECK(axes_list(m, axes, &n));
    bool drop[ONNX_MAX_RANK] = {false};
    for (int i = 0; i < xv->rank; i++)
        drop[i] = n == 0 && xv->dims[i] == 1;
    for (int i = 0; i < n; i++) {
        int oa, ga;
        CHECK(axis_of(m, axes[i], xv->rank, &oa, &ga));
        if (xv->dims[oa] != 1)
            return INVALID("axis %" PRId64 " has size %" PRId64 ", not 1", axes[i], xv->dims[oa]);
        drop[oa] = true;
    }
    glesc_tensor *x;
    CHECK(gpu_in(m, 0, &x));
    return drop_out(m, x, xv, drop, xv->type);
}

/* Unsqueeze: a reshape with size-1 dimensions inserted at the axes (of the
 * result's rank). */
static onnx_map_status map_unsqueeze(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t axes[ONNX_MAX_RANK];
    int n;
    CHECK(axes_list(m, axes, &n));
    int r = xv->rank + n;
    if (r > ONNX_MAX_RANK)
        return UNSUP("result rank %d", r);
    bool ins[ONNX_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int oa, ga;
        CHECK(axis_of(m, axes[i], r, &oa, &ga));
        if (ins[oa])
            return INVALID("axis %" PRId64 " is repeated", axes[i]);
        ins[oa] = true;
    }
    int64_t dims[ONNX_MAX_RANK] = {0};
    for (int i = 0, k = 0; i < r; i++)
        dims[i] = ins[i] ? 1 : xv->dims[k++];
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    CHECK(reshape_to(m, x, r, dims, &y));
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Flatten: [prod(dims[:axis]), prod(dims[axis:])], a reshape. */
static onnx_map_status map_flatten(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t a = attr_i(m, "axis", 1);
    if (a < -xv->rank || a > xv->rank)
        return INVALID("axis %" PRId64 " is out of range for rank %d", a, xv->rank);
    if (a < 0)
        a += xv->rank;
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    CHECK(flat2d(m, x, xv, (int)a, &y));
    set_out(m, 0, y, xv->type, 2);
    return ONNX_MAP_OK;
}

/* Transpose: output dim j is input dim perm[j] (default: reversed). */
static onnx_map_status map_transpose(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    int64_t perm[ONNX_MAX_RANK];
    const Onnx__AttributeProto *a = attr(m, "perm");
    if (a && (int)a->n_ints != r)
        return INVALID("perm has %zu entries for rank %d", a->n_ints, r);
    bool seen[ONNX_MAX_RANK] = {false};
    for (int j = 0; j < r; j++) {
        perm[j] = a ? a->ints[j] : r - 1 - j;
        if (perm[j] < 0 || perm[j] >= r || seen[perm[j]])
            return INVALID("perm is not a permutation of 0..%d", r - 1);
        seen[perm[j]] = true;
    }
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    /* glesc_permute: source dim i becomes result dim p[i] */
    int p[4] = {0, 1, 2, 3};
    for (int j = 0; j < r; j++)
        p[r - 1 - perm[j]] = r - 1 - j;
    TRY(y = glesc_permute(m->g, x, p), "glesc_permute");
    TRY(y = glesc_cont(m->g, y), "glesc_cont");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Constant: a host value from attribute value (a tensor) or value_float(s),
 * value_int(s). */
static onnx_map_status map_constant(onnx_map_ctx *m)
{
    onnx_tensor *h = m->new_host(m->user);
    if (!h)
        return INVALID("out of memory");
    const Onnx__AttributeProto *a;
    if ((a = attr(m, "value")) && a->t) {
        char err[256];
        onnx_read_status s = onnx_tensor_decode(a->t, "Constant value", h, err, sizeof err);
        if (s != ONNX_READ_OK)
            return say(m, s == ONNX_READ_UNSUPPORTED ? ONNX_MAP_UNSUPPORTED : ONNX_MAP_ERROR, "%s",
                       err);
    } else if ((a = attr(m, "value_float")) || (a = attr(m, "value_floats")) ||
               (a = attr(m, "value_int")) || (a = attr(m, "value_ints"))) {
        bool floats = a->has_f || a->n_floats;
        bool list = a->n_floats || a->n_ints || !strcmp(a->name, "value_floats") ||
                    !strcmp(a->name, "value_ints");
        int64_t n = list ? (int64_t)(floats ? a->n_floats : a->n_ints) : 1;
        h->type = floats ? T_FLOAT : T_INT64;
        h->rank = list ? 1 : 0;
        h->dims[0] = n;
        h->n = n;
        h->data = malloc((size_t)(n ? n : 1) * 8);
        if (!h->data)
            return INVALID("out of memory");
        for (int64_t i = 0; i < n; i++) {
            if (floats)
                ((float *)h->data)[i] = list ? a->floats[i] : a->f;
            else
                ((int64_t *)h->data)[i] = list ? a->ints[i] : a->i;
        }
    } else {
        return UNSUP("Constant without value, value_float(s) or value_int(s)");
    }
    onnx_value *o = &m->out[0];
    o->type = h->type;
    o->rank = h->rank;
    memcpy(o->dims, h->dims, sizeof o->dims);
    o->host = h;
    return ONNX_MAP_OK;
}

/* Shape: the input's dims[start:end] as a host INT64 tensor. */
static onnx_map_status map_shape(onnx_map_ctx *m)
{
    if (m->n_in != 1 || !m->in[0])
        return INVALID("Shape takes 1 input");
    const onnx_value *xv = m->in[0];
    int64_t r = xv->rank, start = attr_i(m, "start", 0), end = attr_i(m, "end", r);
    start = start < 0 ? start + r : start;
    end = end < 0 ? end + r : end;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t n = end > start ? end - start : 0;
    onnx_tensor *h = m->new_host(m->user);
    if (!h || !(h->data = malloc((size_t)(n ? n : 1) * sizeof(int64_t))))
        return INVALID("out of memory");
    h->type = T_INT64;
    h->rank = 1;
    h->dims[0] = h->n = n;
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)h->data)[i] = xv->dims[start + i];
    onnx_value *o = &m->out[0];
    o->type = T_INT64;
    o->rank = 1;
    o->dims[0] = n;
    o->host = h;
    return ONNX_MAP_OK;
}

/* ---- vision: pooling and shape (glesc's vops) ---- */

/* LeakyRelu, Elu, HardSigmoid, HardSwish: elementwise with ONNX's defaults. */
static onnx_map_status act(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    glesc_tensor *x, *y;
    CHECK(need_float(m, 0));
    CHECK(gpu_in(m, 0, &x));
    switch (op) {
    case GLESC_OP_LEAKY_RELU:
        y = glesc_leaky_relu(m->g, x, attr_f(m, "alpha", 0.01f));
        break;
    case GLESC_OP_ELU:
        y = glesc_elu(m->g, x, attr_f(m, "alpha", 1.0f));
        break;
    case GLESC_OP_HARD_SIGMOID:
        y = glesc_hard_sigmoid(m->g, x, attr_f(m, "alpha", 0.2f), attr_f(m, "beta", 0.5f));
        break;
    default:
        y = glesc_hard_swish(m->g, x);
        break;
    }
    TRY(y, glesc_op_name(op));
    set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* A string attribute equal to s (absent: def). */
static bool attr_is(const onnx_map_ctx *m, const char *name, const char *def, const char *s)
{
    const Onnx__AttributeProto *a = attr(m, name);
    if (!a || !a->has_s)
        return !strcmp(def, s);
    return a->s.len == strlen(s) && !memcmp(a->s.data, s, a->s.len);
}

/* Integer list attribute name (at most max values; absent: *n = 0). */
static onnx_map_status attr_ints(onnx_map_ctx *m, const char *name, int64_t *vals, int max, int *n)
{
    const Onnx__AttributeProto *a = attr(m, name);
    *n = 0;
    if (!a)
        return ONNX_MAP_OK;
    if ((int)a->n_ints > max)
        return UNSUP("%s has %zu values (at most %d)", name, a->n_ints, max);
    for (size_t i = 0; i < a->n_ints; i++)
        vals[i] = a->ints[i];
    *n = (int)a->n_ints;
    return ONNX_MAP_OK;
}

/* INT32 data known on the host as an i32 tensor, when every value is exact
 * in f32 (|v| <= 2^24: glesc's elementwise ops compute in f32, and the
 * result is cast back to i32). */
static onnx_map_status exact_i32(onnx_map_ctx *m, onnx_value *v, glesc_tensor **out)
{
    if (!v->host)
        return UNSUP("INT32 input %s is computed on the GPU", v->name);
    if (v->rank > 4)
        return UNSUP("%s has rank %d: glesc tensors have at most 4 dimensions", v->name, v->rank);
    const int32_t *d = v->host->data;
    for (int64_t i = 0; i < v->host->n; i++)
        if (d[i] < -(1 << 24) || d[i] > (1 << 24))
            return UNSUP("INT32 value %" PRId32 " of %s is not exact in f32", d[i], v->name);
    int ndim;
    int64_t shape[4];
    gshape(v->rank, v->dims, &ndim, shape);
    glesc_tensor *t = glesc_tensor_new(m->g, GLESC_DTYPE_I32, ndim, shape);
    TRY(t, "glesc_tensor_new");
    if (glesc_tensor_write(t, d, (size_t)v->host->n * sizeof *d) != GLESC_OK)
        return glesc_failed(m, "glesc_tensor_write");
    *out = t;
    return ONNX_MAP_OK;
}

/* Pad (opset 11+: pads and constant_value as inputs; before: attributes
 * pads and value; modes constant, reflect, edge). FLOAT/FLOAT16 data, or INT32 data exact in f32.
 */
static onnx_map_status map_pad(onnx_map_ctx *m)
{
    if (m->n_in < 1 || !m->in[0])
        return INVALID("input 0 is missing");
    bool i32 = m->in[0]->type == T_INT32;
    if (!i32)
        CHECK(need_float(m, 0));
    onnx_value *xv = m->in[0];
    int r = xv->rank, n;
    bool old = m->opset < 11; /* pads and value as attributes */
    if (!old && (m->n_in < 2 || !m->in[1]))
        return INVALID("Pad without a pads input");
    if (m->n_in > 3 && m->in[3])
        return UNSUP("Pad's axes input (opset 18)");
    glesc_pad_mode mode;
    if (attr_is(m, "mode", "constant", "constant"))
        mode = GLESC_PAD_CONSTANT;
    else if (attr_is(m, "mode", "constant", "reflect"))
        mode = GLESC_PAD_REFLECT;
    else if (attr_is(m, "mode", "constant", "edge"))
        mode = GLESC_PAD_EDGE;
    else
        return UNSUP("Pad mode other than constant, reflect or edge");
    int64_t p[2 * ONNX_MAX_RANK], pads[8] = {0};
    if (old)
        CHECK(attr_ints(m, "pads", p, 2 * ONNX_MAX_RANK, &n));
    else
        CHECK(host_ints(m, 1, p, 2 * ONNX_MAX_RANK, &n));
    if (n != 2 * r)
        return INVALID("pads has %d values for rank %d", n, r);
    if (r > 4)
        return UNSUP("rank %d: glesc tensors have at most 4 dimensions", r);
    for (int a = 0; a < r; a++) {
        pads[r - 1 - a] = p[a];
        pads[4 + r - 1 - a] = p[r + a];
    }
    float value = old ? attr_f(m, "value", 0.0f) : 0.0f;
    if (!old && m->n_in > 2 && m->in[2]) {
        if (i32) {
            int64_t c;
            int nc;
            CHECK(host_ints(m, 2, &c, 1, &nc));
            if (nc != 1 || c < -(1 << 24) || c > (1 << 24))
                return UNSUP("constant_value of INT32 data must be one value exact in f32");
            value = (float)c;
        } else {
            CHECK(host_scalar(m, 2, &value));
        }
    }
    glesc_tensor *x, *y;
    if (i32)
        CHECK(exact_i32(m, xv, &x));
    else
        CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_pad(m->g, x, pads, mode, value), "glesc_pad");
    if (i32)
        TRY(y = glesc_cast(m->g, y, GLESC_DTYPE_I32), "glesc_cast");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Slice (opset 10+: starts, ends, axes, steps as inputs; before: attributes
 * starts, ends, axes). An empty result
 * is unsupported (glesc tensors are never empty). */
static onnx_map_status map_slice(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, ns, ne, na = 0, nst = 0;
    int64_t starts[ONNX_MAX_RANK], ends[ONNX_MAX_RANK], axes[ONNX_MAX_RANK], steps[ONNX_MAX_RANK];
    if (m->opset < 10) { /* attributes starts, ends, axes; no steps */
        CHECK(attr_ints(m, "starts", starts, ONNX_MAX_RANK, &ns));
        CHECK(attr_ints(m, "ends", ends, ONNX_MAX_RANK, &ne));
        CHECK(attr_ints(m, "axes", axes, ONNX_MAX_RANK, &na));
    } else {
        if (m->n_in < 3 || !m->in[1] || !m->in[2])
            return INVALID("Slice without starts and ends inputs");
        CHECK(host_ints(m, 1, starts, ONNX_MAX_RANK, &ns));
        CHECK(host_ints(m, 2, ends, ONNX_MAX_RANK, &ne));
        if (m->n_in > 3 && m->in[3])
            CHECK(host_ints(m, 3, axes, ONNX_MAX_RANK, &na));
        if (m->n_in > 4 && m->in[4])
            CHECK(host_ints(m, 4, steps, ONNX_MAX_RANK, &nst));
    }
    if (ne != ns || (na && na != ns) || (nst && nst != ns) || ns < 1 || ns > 4)
        return INVALID("starts, ends, axes and steps of %d, %d, %d and %d values", ns, ne, na, nst);
    int gaxes[4];
    for (int i = 0; i < ns; i++) {
        CHECK(axis_of(m, na ? axes[i] : i, r, NULL, &gaxes[i]));
        int64_t dim = xv->dims[r - 1 - gaxes[i]], s = nst ? steps[i] : 1, b = starts[i],
                e = ends[i];
        if (!nst)
            steps[i] = 1;
        if (s == 0)
            return INVALID("step 0");
        /* ONNX's clamping, for the empty case glesc refuses */
        b = b < 0 ? (b < -dim ? 0 : b + dim) : b;
        e = e < 0 ? (e < -dim ? -1 : e + dim) : e;
        bool empty = s > 0 ? (b >= dim || (e < dim ? (e < 0 ? 0 : e) : dim) <= b)
                           : ((b > dim - 1 ? dim - 1 : b) <= (e > dim - 1 ? dim - 1 : e));
        if (empty)
            return UNSUP("an empty result (axis %d): glesc tensors are never empty",
                         r - 1 - gaxes[i]);
    }
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_slice(m->g, x, ns, gaxes, starts, ends, steps), "glesc_slice");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Gather along axis with INT32/INT64 indices known on the host (i32 on the
 * GPU); scalar indices drop the axis. */
static onnx_map_status map_gather(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0], *iv = m->in[1];
    int r = xv->rank, ga;
    CHECK(axis_of(m, attr_i(m, "axis", 0), r, NULL, &ga));
    if (!iv || !iv->host || (iv->type != T_INT64 && iv->type != T_INT32))
        return UNSUP("indices must be INT32 or INT64 known on the host");
    if (iv->rank > 4 || r - 1 + (iv->rank ? iv->rank : 1) > 4)
        return UNSUP("result rank %d: glesc tensors have at most 4 dimensions", r - 1 + iv->rank);
    int64_t n = iv->host->n, dim = xv->dims[r - 1 - ga];
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return INVALID("out of memory");
    for (int64_t k = 0; k < n; k++) {
        int64_t i = iv->type == T_INT64 ? ((const int64_t *)iv->host->data)[k]
                                        : ((const int32_t *)iv->host->data)[k];
        if (i < -dim || i >= dim) {
            free(v);
            return UNSUP("index %" PRId64 " outside [-%" PRId64 ", %" PRId64
                         "): ONNX calls it an error, glesc reads 0",
                         i, dim, dim);
        }
        v[k] = (float)i;
    }
    int ndim;
    int64_t shape[4];
    gshape(iv->rank, iv->dims, &ndim, shape);
    glesc_tensor *ix = glesc_tensor_new(m->g, GLESC_DTYPE_I32, ndim, shape), *x, *y;
    glesc_status st = ix ? glesc_tensor_write_f32(ix, v, (size_t)n) : GLESC_OK;
    free(v);
    TRY(ix, "glesc_tensor_new");
    if (st != GLESC_OK)
        return glesc_failed(m, "glesc_tensor_write_f32");
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_gather(m->g, x, ix, ga), "glesc_gather");
    int rank = r - 1 + iv->rank;
    if (iv->rank == 0) {
        int64_t dims[ONNX_MAX_RANK];
        for (int i = 0, j = 0; i < r; i++)
            if (i != r - 1 - ga)
                dims[j++] = xv->dims[i];
        CHECK(reshape_to(m, y, rank, dims, &y));
    }
    set_out(m, 0, y, xv->type, rank);
    return ONNX_MAP_OK;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* MaxPool and AveragePool, 1-D (rank 3) and 2-D (rank 4). */
static onnx_map_status pool(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, ns = r - 2;
    if (ns != 1 && ns != 2)
        return UNSUP("%d spatial dimensions: glesc pools over 1 or 2", ns);
    if (m->n_out > 1 && m->out[1].name && m->out[1].name[0])
        return UNSUP("MaxPool's Indices output");
    if (!attr(m, "kernel_shape"))
        return INVALID("no kernel_shape");
    int64_t k[2], s[2], d[2], p[4];
    CHECK(attr_list(m, "kernel_shape", ns, 1, k));
    CHECK(attr_list(m, "strides", ns, 1, s));
    CHECK(attr_list(m, "dilations", ns, 1, d));
    CHECK(attr_list(m, "pads", 2 * ns, 0, p));
    bool ceil_mode = attr_i(m, "ceil_mode", 0) != 0;
    if (!attr_is(m, "auto_pad", "NOTSET", "NOTSET")) {
        bool valid = attr_is(m, "auto_pad", "NOTSET", "VALID");
        bool lower = attr_is(m, "auto_pad", "NOTSET", "SAME_LOWER");
        if (!valid && !lower && !attr_is(m, "auto_pad", "NOTSET", "SAME_UPPER"))
            return UNSUP("auto_pad value");
        for (int i = 0; i < ns; i++) {
            int64_t in = xv->dims[2 + i], ext = (k[i] - 1) * d[i] + 1;
            int64_t total = valid ? 0 : ((in + s[i] - 1) / s[i] - 1) * s[i] + ext - in;
            total = total < 0 ? 0 : total;
            p[i] = lower ? total - total / 2 : total / 2;
            p[ns + i] = total - p[i];
        }
    }
    /* glesc's parameters are in ONNX's order (H, W); a 1-D pool reads the W
     * entries (index 1) */
    glesc_pool_params q;
    glesc_pool_params_init(&q);
    q.type = m->row->pool;
    q.ceil_mode = ceil_mode;
    q.count_include_pad = attr_i(m, "count_include_pad", 0) != 0;
    for (int i = 0; i < ns; i++) {
        int j = i + 2 - ns;
        q.kernel_shape[j] = (int)k[i];
        q.strides[j] = (int)s[i];
        q.dilations[j] = (int)d[i];
        q.pads[j] = (int)p[i];
        q.pads[2 + j] = (int)p[ns + i];
    }
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    TRY(y = ns == 2 ? glesc_pool2d(m->g, x, &q) : glesc_pool1d(m->g, x, &q),
        ns == 2 ? "glesc_pool2d" : "glesc_pool1d");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* GlobalMaxPool and GlobalAveragePool over 1 or 2 spatial dimensions. */
static onnx_map_status global_pool(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    if (r != 3 && r != 4)
        return UNSUP("%d spatial dimensions: glesc pools over 1 or 2", r - 2);
    glesc_tensor *x, *y;
    CHECK(gpu_in(m, 0, &x));
    TRY(y = glesc_global_pool(m->g, x, m->row->pool, r - 2), "glesc_global_pool");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* ConvTranspose, 1-D and 2-D; output_shape and
 * auto_pad become pads as ONNX computes them (a negative end pad is output
 * padding: positions no input reaches). */
static onnx_map_status map_conv_transpose(onnx_map_ctx *m)
{
    CHECK(need_float(m, 0));
    CHECK(need_float(m, 1));
    const onnx_value *xv = m->in[0], *wv = m->in[1];
    int r = xv->rank, ns = r - 2;
    if (ns != 1 && ns != 2)
        return UNSUP("%d spatial dimensions: glesc's transposed convolution is 1-D or 2-D", ns);
    if (wv->rank != r)
        return INVALID("W has rank %d for X of rank %d", wv->rank, r);
    int64_t k[2], s[2], d[2], p[4], op[2], os[2];
    for (int i = 0; i < ns; i++)
        k[i] = wv->dims[2 + i];
    const Onnx__AttributeProto *ka = attr(m, "kernel_shape");
    if (ka) {
        if ((int)ka->n_ints != ns)
            return INVALID("kernel_shape has %zu values", ka->n_ints);
        for (int i = 0; i < ns; i++)
            if (ka->ints[i] != k[i])
                return UNSUP("kernel_shape %" PRId64 " differs from W's %" PRId64, ka->ints[i],
                             k[i]);
    }
    CHECK(attr_list(m, "strides", ns, 1, s));
    CHECK(attr_list(m, "dilations", ns, 1, d));
    CHECK(attr_list(m, "pads", 2 * ns, 0, p));
    CHECK(attr_list(m, "output_padding", ns, 0, op));
    bool upper = attr_is(m, "auto_pad", "NOTSET", "SAME_UPPER");
    bool same = upper || attr_is(m, "auto_pad", "NOTSET", "SAME_LOWER");
    if (!same && !attr_is(m, "auto_pad", "NOTSET", "NOTSET") &&
        !attr_is(m, "auto_pad", "NOTSET", "VALID"))
        return UNSUP("auto_pad value");
    if (attr_is(m, "auto_pad", "NOTSET", "VALID"))
        for (int i = 0; i < 2 * ns; i++)
            p[i] = 0;
    bool have_os = attr(m, "output_shape") != NULL;
    if (have_os)
        CHECK(attr_list(m, "output_shape", ns, 0, os));
    if (have_os || same) {
        for (int i = 0; i < ns; i++) {
            int64_t in = xv->dims[2 + i], want = have_os ? os[i] : in * s[i];
            int64_t total = s[i] * (in - 1) + op[i] + (k[i] - 1) * d[i] + 1 - want;
            p[i] = upper ? floor_div(total, 2) : total - floor_div(total, 2);
            p[ns + i] = total - p[i];
            if (p[ns + i] < 0) { /* output positions no input reaches */
                op[i] -= p[ns + i];
                p[ns + i] = 0;
            }
            if (p[i] < 0)
                return UNSUP("output_shape %" PRId64 " needs a negative begin pad", want);
        }
    }
    glesc_conv_transpose_params q;
    glesc_conv_transpose_params_init(&q);
    q.group = (int)attr_i(m, "group", 1);
    for (int i = 0; i < ns; i++) {
        int j = i + 2 - ns; /* ONNX's order (H, W); 1-D: the W entries */
        q.strides[j] = (int)s[i];
        q.dilations[j] = (int)d[i];
        q.pads[j] = (int)p[i];
        q.pads[2 + j] = (int)p[ns + i];
        q.output_padding[j] = (int)op[i];
    }
    glesc_tensor *x, *w, *b, *y;
    CHECK(conv_inputs(m, &x, &w, &b));
    if (ns == 2)
        TRY(y = glesc_conv_transpose2d(m->g, x, w, b, &q), "glesc_conv_transpose2d");
    else
        TRY(y = glesc_conv_transpose1d(m->g, x, w, b, &q), "glesc_conv_transpose1d");
    set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* ---- the table ---- */

#define REDUCE_ATTRS "axes,keepdims,noop_with_empty_axes"
static const onnx_map_entry table[] = {
    {"Abs", unary, .attrs = "", .gop = GLESC_OP_ABS},
    {"Add", binary, .attrs = "", .gop = GLESC_OP_ADD},
    {"ArgMax", map_argmax, .attrs = "axis,keepdims,select_last_index"},
    {"AveragePool", pool,
     .attrs = "auto_pad,ceil_mode,count_include_pad,kernel_shape,pads,strides,dilations",
     .pool = GLESC_POOL_AVG},
    {"BatchNormalization", map_batch_norm,
     .attrs = "epsilon,is_test,momentum,spatial,training_mode"},
    {"Cast", map_cast, .attrs = "to"},
    {"CastLike", map_castlike, .attrs = ""},
    {"Clip", map_clip, .attrs = "min,max"},
    {"Concat", map_concat, .attrs = "axis"},
    {"Constant", map_constant, .attrs = "value,value_float,value_floats,value_int,value_ints"},
    {"Conv", map_conv, .attrs = "auto_pad,dilations,group,kernel_shape,pads,strides"},
    {"ConvTranspose", map_conv_transpose,
     .attrs = "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides"},
    {"Cos", unary, .attrs = "", .gop = GLESC_OP_COS},
    {"Div", binary, .attrs = "", .gop = GLESC_OP_DIV},
    {"Elu", act, .attrs = "alpha", .gop = GLESC_OP_ELU},
    {"Exp", unary, .attrs = "", .gop = GLESC_OP_EXP},
    {"Flatten", map_flatten, .attrs = "axis"},
    {"Gather", map_gather, .attrs = "axis"},
    {"Gemm", map_gemm, .attrs = "alpha,beta,broadcast,transA,transB"},
    {"GlobalAveragePool", global_pool, .attrs = "", .pool = GLESC_POOL_AVG},
    {"GlobalMaxPool", global_pool, .attrs = "", .pool = GLESC_POOL_MAX},
    {"HardSigmoid", act, .attrs = "alpha,beta", .gop = GLESC_OP_HARD_SIGMOID},
    {"HardSwish", act, .attrs = "", .gop = GLESC_OP_HARD_SWISH},
    {"Identity", map_identity, .attrs = ""},
    {"LayerNormalization", map_layer_norm, .attrs = "axis,epsilon,stash_type"},
    {"LeakyRelu", act, .attrs = "alpha", .gop = GLESC_OP_LEAKY_RELU},
    {"Log", unary, .attrs = "", .gop = GLESC_OP_LOG},
    {"LogSoftmax", softmax, .attrs = "axis", .gop = GLESC_OP_LOG_SOFTMAX},
    {"MatMul", map_matmul, .attrs = ""},
    {"Max", binary, .attrs = "", .gop = GLESC_OP_MAX, .variadic = true},
    {"MaxPool", pool,
     .attrs = "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides",
     .pool = GLESC_POOL_MAX},
    {"Mean", map_mean, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Min", binary, .attrs = "", .gop = GLESC_OP_MIN, .variadic = true},
    {"Mul", binary, .attrs = "", .gop = GLESC_OP_MUL},
    {"Neg", unary, .attrs = "", .gop = GLESC_OP_NEG},
    {"Pad", map_pad, .attrs = "mode,pads,value"},
    {"Pow", binary, .attrs = "", .gop = GLESC_OP_POW},
    {"Reciprocal", map_reciprocal, .attrs = ""},
    {"ReduceL1", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_ABS},
    {"ReduceL2", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_SQR,
     .post = GLESC_OP_SQRT},
    {"ReduceLogSum", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .post = GLESC_OP_LOG},
    {"ReduceLogSumExp", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_EXP,
     .post = GLESC_OP_LOG},
    {"ReduceMax", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MAX},
    {"ReduceMean", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_MEAN},
    {"ReduceMin", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MIN},
    {"ReduceSum", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM},
    {"ReduceSumSquare", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_SQR},
    {"Relu", unary, .attrs = "", .gop = GLESC_OP_RELU},
    {"Reshape", map_reshape, .attrs = "allowzero"},
    {"Shape", map_shape, .attrs = "start,end"},
    {"Sigmoid", unary, .attrs = "", .gop = GLESC_OP_SIGMOID},
    {"Sin", unary, .attrs = "", .gop = GLESC_OP_SIN},
    {"Slice", map_slice, .attrs = "axes,ends,starts"},
    {"Softmax", softmax, .attrs = "axis", .gop = GLESC_OP_SOFTMAX},
    {"Softplus", unary, .attrs = "", .gop = GLESC_OP_SOFTPLUS},
    {"Sqrt", unary, .attrs = "", .gop = GLESC_OP_SQRT},
    {"Squeeze", map_squeeze, .attrs = "axes"},
    {"Sub", binary, .attrs = "", .gop = GLESC_OP_SUB},
    {"Sum", binary, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Tanh", unary, .attrs = "", .gop = GLESC_OP_TANH},
    {"Transpose", map_transpose, .attrs = "perm"},
    {"Unsqueeze", map_unsqueeze, .attrs = "axes"},
};

const onnx_map_entry *onnx_map_find(const char *op)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].op, op))
            return &table[i];
    return NULL;
}

/* name is one of the comma-separated names of list. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

onnx_map_status onnx_map_node(const onnx_map_entry *e, onnx_map_ctx *m)
{
    const char *d = m->node->domain;
    if (d && d[0] && strcmp(d, "ai.onnx"))
        return UNSUP("%s of domain %s", m->node->op_type, d);
    for (size_t i = 0; i < m->node->n_attribute; i++) {
        const Onnx__AttributeProto *a = m->node->attribute[i];
        if (!listed(e->attrs, a->name))
            return UNSUP("%s attribute %s is not mapped", e->op, a->name);
        if (a->ref_attr_name && a->ref_attr_name[0])
            return UNSUP("%s attribute %s refers to a function attribute", e->op, a->name);
    }
    for (int k = 0; k < m->n_out; k++) {
        m->out[k].t = NULL;
        m->out[k].host = NULL;
    }
    m->row = e;
    return e->fn(m);
}
