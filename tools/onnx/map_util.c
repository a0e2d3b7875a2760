/*
 * map_util.c — the helpers of onnx-run's mappings (map_ops.h): messages,
 * attributes, and values (their GPU tensors, host contents, axes and
 * shapes). Layout conventions are in map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

onnx_map_status onnx_map_say(onnx_map_ctx *m, onnx_map_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, m->why_len, fmt, ap);
    va_end(ap);
    return s;
}

/* A builder returned NULL: glesc's message. */
onnx_map_status onnx_map_glesc_failed(onnx_map_ctx *m, const char *what)
{
    return onnx_map_say(m, ONNX_MAP_ERROR, "%s: %s", what,
                        glesc_context_errmsg(glesc_graph_context(m->g)));
}

/* ---- attributes ---- */

const Onnx__AttributeProto *onnx_map_attr(const onnx_map_ctx *m, const char *name)
{
    for (size_t i = 0; i < m->node->n_attribute; i++)
        if (!strcmp(m->node->attribute[i]->name, name))
            return m->node->attribute[i];
    return NULL;
}

int64_t onnx_map_attr_i(const onnx_map_ctx *m, const char *name, int64_t def)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, name);
    return a && a->has_i ? a->i : def;
}

float onnx_map_attr_f(const onnx_map_ctx *m, const char *name, float def)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, name);
    return a && a->has_f ? a->f : def;
}

/* ---- values ---- */

static bool is_float(int32_t type)
{
    return type == T_FLOAT || type == T_FLOAT16;
}

/* Input i must be present and FLOAT or FLOAT16 (what glesc's compute ops
 * read; their results are f32). */
onnx_map_status onnx_map_need_float(onnx_map_ctx *m, int i)
{
    if (i >= m->n_in || !m->in[i])
        return INVALID("input %d is missing", i);
    if (!is_float(m->in[i]->type))
        return UNSUP("input %d (%s) is %s: glesc's ops compute in f32 (FLOAT and FLOAT16 inputs "
                     "only)",
                     i, m->in[i]->name, onnx_type_name(m->in[i]->type));
    return ONNX_MAP_OK;
}

void onnx_map_gshape(int rank, const int64_t *dims, int *ndim, int64_t shape[4])
{
    *ndim = rank ? rank : 1;
    for (int i = 0; i < 4; i++)
        shape[i] = i < rank ? dims[rank - 1 - i] : 1;
}

bool onnx_map_float_dtype(int32_t type, glesc_dtype *out)
{
    switch (type) {
    case T_FLOAT:
        *out = GLESC_DTYPE_F32;
        return true;
    case T_FLOAT16:
        *out = GLESC_DTYPE_F16;
        return true;
    case T_BFLOAT16:
        *out = GLESC_DTYPE_BF16;
        return true;
    default:
        return false;
    }
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
    if (!onnx_map_float_dtype(v->type, &dt))
        return UNSUP("%s is %s: glesc's ops read floating-point data only", v->name,
                     onnx_type_name(v->type));
    int ndim;
    int64_t shape[4];
    onnx_map_gshape(v->rank, v->dims, &ndim, shape);
    glesc_tensor *t = glesc_tensor_new(m->g, dt, ndim, shape);
    TRY(t, "glesc_tensor_new");
    glesc_tensor_set_name(t, v->name);
    size_t bytes = (size_t)v->host->n * onnx_type_size(v->type);
    if (glesc_tensor_write(t, v->host->data, bytes) != GLESC_OK)
        return onnx_map_glesc_failed(m, "glesc_tensor_write");
    *out = v->t = t;
    return ONNX_MAP_OK;
}

onnx_map_status onnx_map_gpu_in(onnx_map_ctx *m, int i, glesc_tensor **out)
{
    if (i >= m->n_in || !m->in[i])
        return INVALID("input %d is missing", i);
    return onnx_value_gpu(m, m->in[i], out);
}

/* A convolution's inputs (Conv, ConvTranspose): X, W and the optional
 * float bias B (NULL when absent). */
onnx_map_status onnx_map_conv_inputs(onnx_map_ctx *m, glesc_tensor **x, glesc_tensor **w,
                                     glesc_tensor **b)
{
    *b = NULL;
    CHECK(onnx_map_gpu_in(m, 0, x));
    CHECK(onnx_map_gpu_in(m, 1, w));
    if (m->n_in > 2 && m->in[2]) {
        CHECK(onnx_map_need_float(m, 2));
        CHECK(onnx_map_gpu_in(m, 2, b));
    }
    return ONNX_MAP_OK;
}

/* Output k: t with the given ONNX type and rank; dims read from t. */
void onnx_map_set_out(onnx_map_ctx *m, int k, glesc_tensor *t, int32_t type, int rank)
{
    onnx_value *o = &m->out[k];
    o->t = t;
    o->type = type;
    o->rank = rank;
    for (int i = 0; i < rank; i++)
        o->dims[i] = glesc_tensor_dim(t, rank - 1 - i);
}

/* A glesc reshape of x to ONNX dims (rank 0..4). */
onnx_map_status onnx_map_reshape_to(onnx_map_ctx *m, glesc_tensor *x, int rank, const int64_t *dims,
                                    glesc_tensor **out)
{
    if (rank > 4)
        return UNSUP("result rank %d: glesc tensors have at most 4 dimensions", rank);
    int ndim;
    int64_t shape[4];
    onnx_map_gshape(rank, dims, &ndim, shape);
    TRY(*out = glesc_reshape(m->g, x, ndim, shape), "glesc_reshape");
    return ONNX_MAP_OK;
}

/* Integer contents of input i, which must be known on the host (a graph
 * input, initializer or Constant of INT64 or INT32). */
onnx_map_status onnx_map_host_ints(onnx_map_ctx *m, int i, int64_t *vals, int max, int *n)
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
onnx_map_status onnx_map_host_scalar(onnx_map_ctx *m, int i, float *val)
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
onnx_map_status onnx_map_axis_of(onnx_map_ctx *m, int64_t a, int rank, int *onnx_axis, int *gaxis)
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
onnx_map_status onnx_map_axes_list(onnx_map_ctx *m, int64_t *axes, int *n)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, "axes");
    *n = 0;
    if (a) {
        if (a->n_ints > ONNX_MAX_RANK)
            return INVALID("attribute axes has %zu values", a->n_ints);
        for (size_t i = 0; i < a->n_ints; i++)
            axes[(*n)++] = a->ints[i];
        return ONNX_MAP_OK;
    }
    if (m->n_in > 1 && m->in[1])
        return onnx_map_host_ints(m, 1, axes, ONNX_MAX_RANK, n);
    return ONNX_MAP_OK;
}

/* Output 0 of the given type: y, whose ONNX dims are xv's with the ones
 * drop marks reduced to 1, reshaped without those (keepdims 0, Squeeze). */
onnx_map_status onnx_map_drop_out(onnx_map_ctx *m, glesc_tensor *y, const onnx_value *xv,
                                  const bool *drop, int32_t type)
{
    int64_t dims[ONNX_MAX_RANK] = {0};
    int nr = 0;
    for (int i = 0; i < xv->rank; i++)
        if (!drop[i])
            dims[nr++] = xv->dims[i];
    CHECK(onnx_map_reshape_to(m, y, nr, dims, &y));
    onnx_map_set_out(m, 0, y, type, nr);
    return ONNX_MAP_OK;
}

/* x (ONNX dims those of xv) coerced to 2-D at ONNX axis oa: glesc
 * [prod(dims[oa:]), prod(dims[:oa])]. */
onnx_map_status onnx_map_flat2d(onnx_map_ctx *m, glesc_tensor *x, const onnx_value *xv, int oa,
                                glesc_tensor **out)
{
    int64_t flat[2] = {1, 1};
    for (int i = 0; i < xv->rank; i++)
        flat[i < oa] *= xv->dims[i];
    TRY(*out = glesc_reshape(m->g, x, 2, flat), "glesc_reshape");
    return ONNX_MAP_OK;
}
