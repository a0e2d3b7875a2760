/*
 * map_vops.c — mappings of onnx-run's op table (map.c) on glesc's vops:
 * activations with ONNX's defaults, Pad, Slice, Gather, pooling and
 * ConvTranspose. Layout conventions are in map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

/* ---- vision: pooling and shape (glesc's vops) ---- */

/* LeakyRelu, Elu, HardSigmoid, HardSwish: elementwise with ONNX's defaults. */
onnx_map_status onnx_map_act(onnx_map_ctx *m)
{
    glesc_op op = m->row->gop;
    glesc_tensor *x, *y;
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_gpu_in(m, 0, &x));
    switch (op) {
    case GLESC_OP_LEAKY_RELU:
        y = glesc_leaky_relu(m->g, x, onnx_map_attr_f(m, "alpha", 0.01f));
        break;
    case GLESC_OP_ELU:
        y = glesc_elu(m->g, x, onnx_map_attr_f(m, "alpha", 1.0f));
        break;
    case GLESC_OP_HARD_SIGMOID:
        y = glesc_hard_sigmoid(m->g, x, onnx_map_attr_f(m, "alpha", 0.2f),
                               onnx_map_attr_f(m, "beta", 0.5f));
        break;
    default:
        y = glesc_hard_swish(m->g, x);
        break;
    }
    TRY(y, glesc_op_name(op));
    onnx_map_set_out(m, 0, y, m->in[0]->type, m->in[0]->rank);
    return ONNX_MAP_OK;
}

/* A string attribute equal to s (absent: def). */
static bool attr_is(const onnx_map_ctx *m, const char *name, const char *def, const char *s)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, name);
    if (!a || !a->has_s)
        return !strcmp(def, s);
    return a->s.len == strlen(s) && !memcmp(a->s.data, s, a->s.len);
}

/* Integer list attribute name (at most max values; absent: *n = 0). */
static onnx_map_status attr_ints(onnx_map_ctx *m, const char *name, int64_t *vals, int max, int *n)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, name);
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
    onnx_map_gshape(v->rank, v->dims, &ndim, shape);
    glesc_tensor *t = glesc_tensor_new(m->g, GLESC_DTYPE_I32, ndim, shape);
    TRY(t, "glesc_tensor_new");
    if (glesc_tensor_write(t, d, (size_t)v->host->n * sizeof *d) != GLESC_OK)
        return onnx_map_glesc_failed(m, "glesc_tensor_write");
    *out = t;
    return ONNX_MAP_OK;
}

/* Pad (opset 11+: pads and constant_value as inputs; before: attributes
 * pads and value; modes constant, reflect, edge). FLOAT/FLOAT16 data, or INT32 data exact in f32.
 */
onnx_map_status onnx_map_pad(onnx_map_ctx *m)
{
    if (m->n_in < 1 || !m->in[0])
        return INVALID("input 0 is missing");
    bool i32 = m->in[0]->type == T_INT32;
    if (!i32)
        CHECK(onnx_map_need_float(m, 0));
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
        CHECK(onnx_map_host_ints(m, 1, p, 2 * ONNX_MAX_RANK, &n));
    if (n != 2 * r)
        return INVALID("pads has %d values for rank %d", n, r);
    if (r > 4)
        return UNSUP("rank %d: glesc tensors have at most 4 dimensions", r);
    for (int a = 0; a < r; a++) {
        pads[r - 1 - a] = p[a];
        pads[4 + r - 1 - a] = p[r + a];
    }
    float value = old ? onnx_map_attr_f(m, "value", 0.0f) : 0.0f;
    if (!old && m->n_in > 2 && m->in[2]) {
        if (i32) {
            int64_t c;
            int nc;
            CHECK(onnx_map_host_ints(m, 2, &c, 1, &nc));
            if (nc != 1 || c < -(1 << 24) || c > (1 << 24))
                return UNSUP("constant_value of INT32 data must be one value exact in f32");
            value = (float)c;
        } else {
            CHECK(onnx_map_host_scalar(m, 2, &value));
        }
    }
    glesc_tensor *x, *y;
    if (i32)
        CHECK(exact_i32(m, xv, &x));
    else
        CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_pad(m->g, x, pads, mode, value), "glesc_pad");
    if (i32)
        TRY(y = glesc_cast(m->g, y, GLESC_DTYPE_I32), "glesc_cast");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Slice (opset 10+: starts, ends, axes, steps as inputs; before: attributes
 * starts, ends, axes). An empty result
 * is unsupported (glesc tensors are never empty). */
onnx_map_status onnx_map_slice(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
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
        CHECK(onnx_map_host_ints(m, 1, starts, ONNX_MAX_RANK, &ns));
        CHECK(onnx_map_host_ints(m, 2, ends, ONNX_MAX_RANK, &ne));
        if (m->n_in > 3 && m->in[3])
            CHECK(onnx_map_host_ints(m, 3, axes, ONNX_MAX_RANK, &na));
        if (m->n_in > 4 && m->in[4])
            CHECK(onnx_map_host_ints(m, 4, steps, ONNX_MAX_RANK, &nst));
    }
    if (ne != ns || (na && na != ns) || (nst && nst != ns) || ns < 1 || ns > 4)
        return INVALID("starts, ends, axes and steps of %d, %d, %d and %d values", ns, ne, na, nst);
    int gaxes[4];
    for (int i = 0; i < ns; i++) {
        CHECK(onnx_map_axis_of(m, na ? axes[i] : i, r, NULL, &gaxes[i]));
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
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_slice(m->g, x, ns, gaxes, starts, ends, steps), "glesc_slice");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* Gather along axis with INT32/INT64 indices known on the host (i32 on the
 * GPU); scalar indices drop the axis. */
onnx_map_status onnx_map_gather(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0], *iv = m->in[1];
    int r = xv->rank, ga;
    CHECK(onnx_map_axis_of(m, onnx_map_attr_i(m, "axis", 0), r, NULL, &ga));
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
    onnx_map_gshape(iv->rank, iv->dims, &ndim, shape);
    glesc_tensor *ix = glesc_tensor_new(m->g, GLESC_DTYPE_I32, ndim, shape), *x, *y;
    glesc_status st = ix ? glesc_tensor_write_f32(ix, v, (size_t)n) : GLESC_OK;
    free(v);
    TRY(ix, "glesc_tensor_new");
    if (st != GLESC_OK)
        return onnx_map_glesc_failed(m, "glesc_tensor_write_f32");
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_gather(m->g, x, ix, ga), "glesc_gather");
    int rank = r - 1 + iv->rank;
    if (iv->rank == 0) {
        int64_t dims[ONNX_MAX_RANK];
        for (int i = 0, j = 0; i < r; i++)
            if (i != r - 1 - ga)
                dims[j++] = xv->dims[i];
        CHECK(onnx_map_reshape_to(m, y, rank, dims, &y));
    }
    onnx_map_set_out(m, 0, y, xv->type, rank);
    return ONNX_MAP_OK;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* MaxPool and AveragePool, 1-D (rank 3) and 2-D (rank 4). */
onnx_map_status onnx_map_pool(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, ns = r - 2;
    if (ns != 1 && ns != 2)
        return UNSUP("%d spatial dimensions: glesc pools over 1 or 2", ns);
    if (m->n_out > 1 && m->out[1].name && m->out[1].name[0])
        return UNSUP("MaxPool's Indices output");
    if (!onnx_map_attr(m, "kernel_shape"))
        return INVALID("no kernel_shape");
    int64_t k[2], s[2], d[2], p[4];
    CHECK(onnx_map_attr_list(m, "kernel_shape", ns, 1, k));
    CHECK(onnx_map_attr_list(m, "strides", ns, 1, s));
    CHECK(onnx_map_attr_list(m, "dilations", ns, 1, d));
    CHECK(onnx_map_attr_list(m, "pads", 2 * ns, 0, p));
    bool ceil_mode = onnx_map_attr_i(m, "ceil_mode", 0) != 0;
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
    q.count_include_pad = onnx_map_attr_i(m, "count_include_pad", 0) != 0;
    for (int i = 0; i < ns; i++) {
        int j = i + 2 - ns;
        q.kernel_shape[j] = (int)k[i];
        q.strides[j] = (int)s[i];
        q.dilations[j] = (int)d[i];
        q.pads[j] = (int)p[i];
        q.pads[2 + j] = (int)p[ns + i];
    }
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = ns == 2 ? glesc_pool2d(m->g, x, &q) : glesc_pool1d(m->g, x, &q),
        ns == 2 ? "glesc_pool2d" : "glesc_pool1d");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* GlobalMaxPool and GlobalAveragePool over 1 or 2 spatial dimensions. */
onnx_map_status onnx_map_global_pool(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank;
    if (r != 3 && r != 4)
        return UNSUP("%d spatial dimensions: glesc pools over 1 or 2", r - 2);
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    TRY(y = glesc_global_pool(m->g, x, m->row->pool, r - 2), "glesc_global_pool");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* ConvTranspose, 1-D and 2-D; output_shape and
 * auto_pad become pads as ONNX computes them (a negative end pad is output
 * padding: positions no input reaches). */
onnx_map_status onnx_map_conv_transpose(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_need_float(m, 1));
    const onnx_value *xv = m->in[0], *wv = m->in[1];
    int r = xv->rank, ns = r - 2;
    if (ns != 1 && ns != 2)
        return UNSUP("%d spatial dimensions: glesc's transposed convolution is 1-D or 2-D", ns);
    if (wv->rank != r)
        return INVALID("W has rank %d for X of rank %d", wv->rank, r);
    int64_t k[2], s[2], d[2], p[4], op[2], os[2];
    for (int i = 0; i < ns; i++)
        k[i] = wv->dims[2 + i];
    const Onnx__AttributeProto *ka = onnx_map_attr(m, "kernel_shape");
    if (ka) {
        if ((int)ka->n_ints != ns)
            return INVALID("kernel_shape has %zu values", ka->n_ints);
        for (int i = 0; i < ns; i++)
            if (ka->ints[i] != k[i])
                return UNSUP("kernel_shape %" PRId64 " differs from W's %" PRId64, ka->ints[i],
                             k[i]);
    }
    CHECK(onnx_map_attr_list(m, "strides", ns, 1, s));
    CHECK(onnx_map_attr_list(m, "dilations", ns, 1, d));
    CHECK(onnx_map_attr_list(m, "pads", 2 * ns, 0, p));
    CHECK(onnx_map_attr_list(m, "output_padding", ns, 0, op));
    bool upper = attr_is(m, "auto_pad", "NOTSET", "SAME_UPPER");
    bool same = upper || attr_is(m, "auto_pad", "NOTSET", "SAME_LOWER");
    if (!same && !attr_is(m, "auto_pad", "NOTSET", "NOTSET") &&
        !attr_is(m, "auto_pad", "NOTSET", "VALID"))
        return UNSUP("auto_pad value");
    if (attr_is(m, "auto_pad", "NOTSET", "VALID"))
        for (int i = 0; i < 2 * ns; i++)
            p[i] = 0;
    bool have_os = onnx_map_attr(m, "output_shape") != NULL;
    if (have_os)
        CHECK(onnx_map_attr_list(m, "output_shape", ns, 0, os));
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
    q.group = (int)onnx_map_attr_i(m, "group", 1);
    for (int i = 0; i < ns; i++) {
        int j = i + 2 - ns; /* ONNX's order (H, W); 1-D: the W entries */
        q.strides[j] = (int)s[i];
        q.dilations[j] = (int)d[i];
        q.pads[j] = (int)p[i];
        q.pads[2 + j] = (int)p[ns + i];
        q.output_padding[j] = (int)op[i];
    }
    glesc_tensor *x, *w, *b, *y;
    CHECK(onnx_map_conv_inputs(m, &x, &w, &b));
    if (ns == 2)
        TRY(y = glesc_conv_transpose2d(m->g, x, w, b, &q), "glesc_conv_transpose2d");
    else
        TRY(y = glesc_conv_transpose1d(m->g, x, w, b, &q), "glesc_conv_transpose1d");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}
