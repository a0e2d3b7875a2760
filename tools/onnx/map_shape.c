/*
 * map_shape.c — mappings of onnx-run's op table (map.c): shape ops
 * (Concat, Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Constant,
 * Shape). Layout conventions are in map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

/* ---- shape ---- */

onnx_map_status onnx_map_concat(onnx_map_ctx *m)
{
    if (!onnx_map_attr(m, "axis"))
        return INVALID("Concat needs attribute axis");
    CHECK(onnx_map_need_float(m, 0));
    int r = m->in[0]->rank, ga;
    CHECK(onnx_map_axis_of(m, onnx_map_attr_i(m, "axis", 0), r, NULL, &ga));
    glesc_tensor *acc;
    CHECK(onnx_map_gpu_in(m, 0, &acc));
    for (int i = 1; i < m->n_in; i++) {
        glesc_tensor *b;
        CHECK(onnx_map_need_float(m, i));
        if (m->in[i]->type != m->in[0]->type || m->in[i]->rank != r)
            return INVALID("Concat inputs differ in type or rank");
        CHECK(onnx_map_gpu_in(m, i, &b));
        TRY(acc = glesc_concat(m->g, acc, b, ga), "glesc_concat");
    }
    onnx_map_set_out(m, 0, acc, m->in[0]->type, r);
    return ONNX_MAP_OK;
}

onnx_map_status onnx_map_reshape(onnx_map_ctx *m)
{
    if (m->n_in != 2 || !m->in[0] || !m->in[1])
        return INVALID("Reshape takes 2 inputs");
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t dims[ONNX_MAX_RANK] = {0};
    int n;
    CHECK(onnx_map_host_ints(m, 1, dims, ONNX_MAX_RANK, &n));
    bool allowzero = onnx_map_attr_i(m, "allowzero", 0) != 0;
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
    CHECK(onnx_map_gpu_in(m, 0, &x));
    CHECK(onnx_map_reshape_to(m, x, n, dims, &y));
    onnx_map_set_out(m, 0, y, xv->type, n);
    return ONNX_MAP_OK;
}

/* Squeeze: a reshape without the given size-1 dimensions (none given: all
 * of them). */
onnx_map_status onnx_map_squeeze(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t axes[ONNX_MAX_RANK];
    int n;
    CHECK(onnx_map_axes_list(m, axes, &n));
    bool drop[ONNX_MAX_RANK] = {false};
    for (int i = 0; i < xv->rank; i++)
        drop[i] = n == 0 && xv->dims[i] == 1;
    for (int i = 0; i < n; i++) {
        int oa, ga;
        CHECK(onnx_map_axis_of(m, axes[i], xv->rank, &oa, &ga));
        if (xv->dims[oa] != 1)
            return INVALID("axis %" PRId64 " has size %" PRId64 ", not 1", axes[i], xv->dims[oa]);
        drop[oa] = true;
    }
    glesc_tensor *x;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    return onnx_map_drop_out(m, x, xv, drop, xv->type);
}

/* Unsqueeze: a reshape with size-1 dimensions inserted at the axes (of the
 * result's rank). */
onnx_map_status onnx_map_unsqueeze(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t axes[ONNX_MAX_RANK];
    int n;
    CHECK(onnx_map_axes_list(m, axes, &n));
    int r = xv->rank + n;
    if (r > ONNX_MAX_RANK)
        return UNSUP("result rank %d", r);
    bool ins[ONNX_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int oa, ga;
        CHECK(onnx_map_axis_of(m, axes[i], r, &oa, &ga));
        if (ins[oa])
            return INVALID("axis %" PRId64 " is repeated", axes[i]);
        ins[oa] = true;
    }
    int64_t dims[ONNX_MAX_RANK] = {0};
    for (int i = 0, k = 0; i < r; i++)
        dims[i] = ins[i] ? 1 : xv->dims[k++];
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    CHECK(onnx_map_reshape_to(m, x, r, dims, &y));
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Flatten: [prod(dims[:axis]), prod(dims[axis:])], a reshape. */
onnx_map_status onnx_map_flatten(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int64_t a = onnx_map_attr_i(m, "axis", 1);
    if (a < -xv->rank || a > xv->rank)
        return INVALID("axis %" PRId64 " is out of range for rank %d", a, xv->rank);
    if (a < 0)
        a += xv->rank;
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    CHECK(onnx_map_flat2d(m, x, xv, (int)a, &y));
    onnx_map_set_out(m, 0, y, xv->type, 2);
    return ONNX_MAP_OK;
}

/* Transpose: output dim j is input dim perm[j] (default: reversed). */
onnx_map_status onnx_map_transpose(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    int64_t perm[ONNX_MAX_RANK];
    const Onnx__AttributeProto *a = onnx_map_attr(m, "perm");
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
    CHECK(onnx_map_gpu_in(m, 0, &x));
    /* glesc_permute: source dim i becomes result dim p[i] */
    int p[4] = {0, 1, 2, 3};
    for (int j = 0; j < r; j++)
        p[r - 1 - perm[j]] = r - 1 - j;
    TRY(y = glesc_permute(m->g, x, p), "glesc_permute");
    TRY(y = glesc_cont(m->g, y), "glesc_cont");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Constant: a host value from attribute value (a tensor) or value_float(s),
 * value_int(s). */
onnx_map_status onnx_map_constant(onnx_map_ctx *m)
{
    onnx_tensor *h = m->new_host(m->user);
    if (!h)
        return INVALID("out of memory");
    const Onnx__AttributeProto *a;
    if ((a = onnx_map_attr(m, "value")) && a->t) {
        char err[256];
        onnx_read_status s = onnx_tensor_decode(a->t, "Constant value", h, err, sizeof err);
        if (s != ONNX_READ_OK)
            return onnx_map_say(
                m, s == ONNX_READ_UNSUPPORTED ? ONNX_MAP_UNSUPPORTED : ONNX_MAP_ERROR, "%s", err);
    } else if ((a = onnx_map_attr(m, "value_float")) || (a = onnx_map_attr(m, "value_floats")) ||
               (a = onnx_map_attr(m, "value_int")) || (a = onnx_map_attr(m, "value_ints"))) {
        bool floats = a->has_f || a->n_floats;
        bool list = a->n_floats || a->n_ints || !strcmp(a->name, "value_floats") ||
                    !strcmp(a->name, "value_ints");
        size_t nl = floats ? a->n_floats : a->n_ints;
        if (list && nl > INT32_MAX)
            return INVALID("Constant with more than 2^31 values");
        int64_t n = list ? (int64_t)nl : 1;
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
onnx_map_status onnx_map_shape(onnx_map_ctx *m)
{
    if (m->n_in != 1 || !m->in[0])
        return INVALID("Shape takes 1 input");
    const onnx_value *xv = m->in[0];
    int64_t r = xv->rank, start = onnx_map_attr_i(m, "start", 0),
            end = onnx_map_attr_i(m, "end", r);
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
