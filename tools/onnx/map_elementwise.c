/*
 * map_elementwise.c — mappings of onnx-run's op table (map.c): elementwise
 * ops (unary, binary, variadic, Clip, Cast) and reductions (ArgMax). Layout conventions are in
 * map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

/* ---- elementwise ---- */

/* The row's glesc op on input 0. */
onnx_map_status onnx_map_unary(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    glesc_tensor *x, *y;
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_unary(m->g, op, x), glesc_op_name(op));
    onnx_map_set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* 1 / x: a division by a one-element constant 1. */
onnx_map_status onnx_map_reciprocal(onnx_map_ctx *m)
{
    glesc_tensor *x, *one, *y;
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_gpu_in(m, 0, &x));
    const int64_t shape[1] = {1};
    const float v = 1.0f;
    TRY(one = glesc_tensor_new(m->g, GLESC_DTYPE_F32, 1, shape), "glesc_tensor_new");
    if (glesc_tensor_write(one, &v, sizeof v) != GLESC_OK)
        return onnx_map_glesc_failed(m, "glesc_tensor_write");
    TRY(y = glesc_div(m->g, one, x), "glesc_div");
    onnx_map_set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* The row's glesc op with numpy broadcasting of a and b (both float, the
 * same type), folded over every input for the variadic ops (Max, Min, Sum,
 * Mean). */
onnx_map_status onnx_map_binary(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    bool variadic = m->row->variadic;
    if (m->n_in < (variadic ? 1 : 2))
        return INVALID("%s needs %s inputs", m->node->op_type, variadic ? "1 or more" : "2");
    if (!variadic && m->n_in != 2)
        return INVALID("%s takes 2 inputs, not %d", m->node->op_type, m->n_in);
    glesc_tensor *acc;
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_gpu_in(m, 0, &acc));
    int rank = m->in[0]->rank;
    for (int i = 1; i < m->n_in; i++) {
        glesc_tensor *b;
        CHECK(onnx_map_need_float(m, i));
        if (m->in[i]->type != m->in[0]->type)
            return UNSUP("inputs of types %s and %s", onnx_type_name(m->in[0]->type),
                         onnx_type_name(m->in[i]->type));
        CHECK(onnx_map_gpu_in(m, i, &b));
        TRY(acc = glesc_binary(m->g, op, acc, b), glesc_op_name(op));
        if (m->in[i]->rank > rank)
            rank = m->in[i]->rank;
    }
    onnx_map_set_out(m, 0, acc, m->in[0]->type, rank);
    return ONNX_MAP_OK;
}
/* The sum of the n inputs times 1/n. */
onnx_map_status onnx_map_mean(onnx_map_ctx *m)
{
    CHECK(onnx_map_binary(m));
    glesc_tensor *y;
    TRY(y = glesc_scale(m->g, m->out[0].t, 1.0f / (float)m->n_in, 0.0f), "glesc_scale");
    m->out[0].t = y;
    return ONNX_MAP_OK;
}

onnx_map_status onnx_map_identity(onnx_map_ctx *m)
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
onnx_map_status onnx_map_clip(onnx_map_ctx *m)
{
    float lo = onnx_map_attr_f(m, "min", m->opset < 11 ? -FLT_MAX : -INFINITY),
          hi = onnx_map_attr_f(m, "max", m->opset < 11 ? FLT_MAX : INFINITY);
    glesc_tensor *x, *y;
    CHECK(onnx_map_need_float(m, 0));
    if (m->n_in > 1 && m->in[1])
        CHECK(onnx_map_host_scalar(m, 1, &lo));
    if (m->n_in > 2 && m->in[2])
        CHECK(onnx_map_host_scalar(m, 2, &hi));
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_clamp(m->g, x, lo, hi), "glesc_clamp");
    onnx_map_set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* Cast and CastLike among FLOAT, FLOAT16 and BFLOAT16 (glesc_cast rounds to
 * nearest even, as ONNX's reference). */
static onnx_map_status cast_to(onnx_map_ctx *m, int32_t to)
{
    const onnx_value *x = m->in[0];
    glesc_dtype dt, from;
    if (!onnx_map_float_dtype(to, &dt))
        return UNSUP("cast to %s: glesc casts among FLOAT, FLOAT16 and BFLOAT16 only",
                     onnx_type_name(to));
    if (!onnx_map_float_dtype(x->type, &from))
        return UNSUP("cast from %s: glesc casts among FLOAT, FLOAT16 and BFLOAT16 only",
                     onnx_type_name(x->type));
    glesc_tensor *t, *y;
    CHECK(onnx_map_gpu_in(m, 0, &t));
    if (glesc_tensor_dtype(t) == dt)
        y = t;
    else
        TRY(y = glesc_cast(m->g, t, dt), "glesc_cast");
    onnx_map_set_out(m, 0, y, to, x->rank);
    return ONNX_MAP_OK;
}
onnx_map_status onnx_map_cast(onnx_map_ctx *m)
{
    if (m->n_in != 1 || !m->in[0] || !onnx_map_attr(m, "to"))
        return INVALID("Cast takes 1 input and attribute to");
    return cast_to(m, (int32_t)onnx_map_attr_i(m, "to", 0));
}
onnx_map_status onnx_map_castlike(onnx_map_ctx *m)
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
onnx_map_status onnx_map_reduce(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop, pre = m->row->pre, post = m->row->post;
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    int64_t axes[ONNX_MAX_RANK];
    int n_axes;
    CHECK(onnx_map_axes_list(m, axes, &n_axes));
    bool keep = onnx_map_attr_i(m, "keepdims", 1) != 0;
    glesc_tensor *x;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    if (n_axes == 0 && onnx_map_attr_i(m, "noop_with_empty_axes", 0)) {
        onnx_map_set_out(m, 0, x, xv->type, r);
        return ONNX_MAP_OK;
    }
    bool reduced[ONNX_MAX_RANK] = {false};
    if (n_axes == 0)
        for (int i = 0; i < r; i++)
            reduced[i] = true;
    for (int i = 0; i < n_axes; i++) {
        int oa, ga;
        CHECK(onnx_map_axis_of(m, axes[i], r, &oa, &ga));
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
        return onnx_map_drop_out(m, x, xv, reduced, xv->type);
    onnx_map_set_out(m, 0, x, xv->type, r);
    return ONNX_MAP_OK;
}

/* ArgMax along one axis: glesc gives the first maximum's index (i32). */
onnx_map_status onnx_map_argmax(onnx_map_ctx *m)
{
    if (onnx_map_attr_i(m, "select_last_index", 0))
        return UNSUP("select_last_index=1: glesc's argmax gives the first maximum");
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int oa, ga;
    CHECK(onnx_map_axis_of(m, onnx_map_attr_i(m, "axis", 0), xv->rank, &oa, &ga));
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_reduce(m->g, GLESC_OP_ARGMAX, x, ga), "argmax");
    if (!onnx_map_attr_i(m, "keepdims", 1)) {
        bool drop[ONNX_MAX_RANK] = {false};
        drop[oa] = true;
        return onnx_map_drop_out(m, y, xv, drop, T_INT64);
    }
    onnx_map_set_out(m, 0, y, T_INT64, xv->rank);
    return ONNX_MAP_OK;
}
