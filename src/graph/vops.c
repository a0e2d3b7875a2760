/*
 * vops.c — the vision ops that are not convolutions, graph side: their
 * shape rules (the op table's rows in ops.c point here) and public
 * builders, with ONNX's semantics (opset 13-17). Some are other ops
 * under another name and make no node of their own: flatten is a
 * reshape, global pooling a mean or max reduction, a slice with positive
 * steps a view.
 *
 * Integer parameters (t->ip, part of the structure hash):
 *   pad          mode, begin pads of dimensions 0..3, end pads 0..3; fp[0]
 *                the constant
 *   slice        first source index per dimension (0..3), step (0..3),
 *                count (0..3)
 *   gather       the axis
 *   log_softmax  the axis
 *   pool         type, kernel w, h, stride w, h, dilation w, h, pads
 *                begin w, begin h, end w, end h, ceil mode,
 *                count_include_pad
 *   conv_transpose  stride w, h, dilation w, h, pads begin w, begin h, end
 *                w, end h, output padding w, h, group
 * (glesc's order, index 0 the width; the public parameter structs are in
 * ONNX's, H first, as glesc_conv_params).
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/ref.h"

static bool is_float(glesc_dtype dt)
{
    return dt == GLESC_DTYPE_F32 || dt == GLESC_DTYPE_F16 || dt == GLESC_DTYPE_BF16;
}

static glesc_status float_source(glesc_tensor *t, const glesc_tensor *x, const char *what)
{
    if (!is_float(x->dtype))
        return graph_op_fail(t, GLESC_ERROR_TYPE, "%s %s must be f32, f16 or bf16, not %s", what,
                             GRAPH_SH(x), glesc_dtype_name(x->dtype));
    return GLESC_OK;
}

/* ---- shape rules ---- */

glesc_status graph_shape_pad(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0];
    int mode = t->ip[0];
    if (mode != GLESC_PAD_CONSTANT && mode != GLESC_PAD_REFLECT && mode != GLESC_PAD_EDGE)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "mode %d is not constant (0), reflect (1) or edge (2)", mode);
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = x->ndim;
    for (int d = 0; d < 4; d++) {
        int64_t n = x->ne[d] + t->ip[1 + d] + t->ip[5 + d];
        if (n < 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "pads %d, %d of dimension %d leave nothing of %s", t->ip[1 + d],
                                 t->ip[5 + d], d, GRAPH_SH(x));
        if (t->ip[1 + d] || t->ip[5 + d])
            t->ndim = CORE_MAX(t->ndim, d + 1);
        t->ne[d] = n;
    }
    return GLESC_OK;
}

glesc_status graph_shape_slice(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0];
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = x->ndim;
    for (int d = 0; d < 4; d++) {
        int64_t first = t->ip[d], step = t->ip[4 + d], n = t->ip[8 + d];
        int64_t last = first + (n - 1) * step;
        if (n < 1 || step == 0 || first < 0 || first >= x->ne[d] || last < 0 || last >= x->ne[d])
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "%lld elements from %lld by %lld leave dimension %d of %s",
                                 (long long)n, (long long)first, (long long)step, d, GRAPH_SH(x));
        t->ne[d] = n;
    }
    return GLESC_OK;
}

glesc_status graph_shape_gather(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0], *ix = t->src[1];
    int axis = t->ip[0];
    if (float_source(t, x, "data") != GLESC_OK)
        return t->ctx->err.status;
    if (ix->dtype != GLESC_DTYPE_I32)
        return graph_op_fail(t, GLESC_ERROR_TYPE, "indices %s must be i32, not %s", GRAPH_SH(ix),
                             glesc_dtype_name(ix->dtype));
    if (axis < 0 || axis > 3)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "axis %d is not 0..3", axis);
    int r = CORE_MAX(x->ndim, axis + 1), q = ix->ndim;
    if (r - 1 + q > 4)
        return graph_op_fail(
            t, GLESC_ERROR_UNSUPPORTED,
            "data %s along dimension %d by indices %s makes %d dimensions, above 4", GRAPH_SH(x),
            axis, GRAPH_SH(ix), r - 1 + q);
    for (int d = q; d < 4; d++)
        if (ix->ne[d] != 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE, "indices %s have ndim %d", GRAPH_SH(ix), q);
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = r - 1 + q;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (int d = 0; d < axis; d++)
        t->ne[d] = x->ne[d];
    for (int j = 0; j < q; j++)
        t->ne[axis + j] = ix->ne[j];
    for (int d = axis + 1; d < r; d++)
        t->ne[d + q - 1] = x->ne[d];
    return GLESC_OK;
}

glesc_status graph_shape_log_softmax(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0];
    if (t->ip[0] < 0 || t->ip[0] > 3)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "axis %d of %s is not 0..3", t->ip[0],
                             GRAPH_SH(x));
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = x->ndim;
    memcpy(t->ne, x->ne, sizeof t->ne);
    return GLESC_OK;
}

/* ONNX's output size of a window over n (with the pads), PyTorch's ceil rule. */
static int64_t pool_out(int64_t n, int64_t pb, int64_t pe, int64_t ext, int64_t s, bool ceil_mode)
{
    int64_t span = n + pb + pe - ext;
    if (span < 0)
        return 0;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= n + pb)
        o--; /* the last window would start in the end padding */
    return o;
}

glesc_status graph_shape_pool(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0];
    const int32_t *p = t->ip;
    if (float_source(t, x, "x") != GLESC_OK)
        return t->ctx->err.status;
    if (p[0] != GLESC_POOL_MAX && p[0] != GLESC_POOL_AVG)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                             "type %d is not max (0) or average (1)", p[0]);
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = CORE_MAX(2, x->ndim);
    memcpy(t->ne, x->ne, sizeof t->ne);
    for (int d = 0; d < 2; d++) {
        int k = p[1 + d], s = p[3 + d], dil = p[5 + d], pb = p[7 + d], pe = p[9 + d];
        if (k < 1 || s < 1 || dil < 1)
            return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                                 "kernel %d, stride %d and dilation %d of %s must be >= 1", k, s,
                                 dil, d ? "H" : "W");
        int64_t ext = (int64_t)(k - 1) * dil + 1;
        if (pb < 0 || pe < 0 || pb >= ext || pe >= ext)
            return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                                 "pads %d, %d of %s must be >= 0 and below the window's "
                                 "extent %lld (kernel %d, dilation %d): a window in the padding "
                                 "alone has no value",
                                 pb, pe, d ? "H" : "W", (long long)ext, k, dil);
        int64_t o = pool_out(x->ne[d], pb, pe, ext, s, p[11] != 0);
        if (o < 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "a window of extent %lld does not fit %s of %s with pads %d, %d",
                                 (long long)ext, d ? "H" : "W", GRAPH_SH(x), pb, pe);
        t->ne[d] = o;
    }
    return GLESC_OK;
}

glesc_status graph_shape_conv_transpose(glesc_tensor *t)
{
    const glesc_tensor *x = t->src[0], *w = t->src[1];
    const glesc_tensor *bias = t->n_src > 2 ? t->src[2] : NULL;
    const int32_t *p = t->ip;
    int groups = p[10];
    if (float_source(t, x, "x") != GLESC_OK || float_source(t, w, "weight") != GLESC_OK ||
        (bias && float_source(t, bias, "bias") != GLESC_OK))
        return t->ctx->err.status;
    if (groups < 1 || x->ne[2] % groups)
        return graph_op_fail(t, GLESC_ERROR_SHAPE, "group %d must divide x %s's C_in (dimension 2)",
                             groups, GRAPH_SH(x));
    if (w->ne[3] != x->ne[2] || x->ne[3] < 1)
        return graph_op_fail(t, GLESC_ERROR_SHAPE,
                             "weight %s must be [kW, kH, C_out / group, C_in] for x %s "
                             "(C_in %lld)",
                             GRAPH_SH(w), GRAPH_SH(x), (long long)x->ne[2]);
    int64_t c_out = w->ne[2] * groups;
    if (bias && (bias->ne[0] != c_out || bias->ne[1] * bias->ne[2] * bias->ne[3] != 1))
        return graph_op_fail(t, GLESC_ERROR_SHAPE, "bias %s must be [C_out = %lld]", GRAPH_SH(bias),
                             (long long)c_out);
    t->dtype = GLESC_DTYPE_F32;
    t->ndim = 4;
    for (int d = 0; d < 2; d++) {
        int s = p[d], dil = p[2 + d], pb = p[4 + d], pe = p[6 + d], op = p[8 + d];
        if (s < 1 || dil < 1 || pb < 0 || pe < 0)
            return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                                 "stride %d, dilation %d (>= 1) and pads %d, %d (>= 0) of %s", s,
                                 dil, pb, pe, d ? "H" : "W");
        if (op < 0 || (op >= s && op >= dil))
            return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                                 "output padding %d of %s must be below its stride %d or "
                                 "dilation %d",
                                 op, d ? "H" : "W", s, dil);
        int64_t o = (int64_t)s * (x->ne[d] - 1) + op + (w->ne[d] - 1) * dil + 1 - pb - pe;
        if (o < 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE,
                                 "pads %d, %d leave nothing of %s (x %s, weight %s)", pb, pe,
                                 d ? "H" : "W", GRAPH_SH(x), GRAPH_SH(w));
        t->ne[d] = o;
    }
    t->ne[2] = c_out;
    t->ne[3] = x->ne[3];
    return GLESC_OK;
}

/* ---- builders ---- */

static glesc_tensor *fail_null(glesc_graph *g, glesc_status st, const char *fmt, ...)
    CORE_PRINTF(3, 4);
static glesc_tensor *fail_null(glesc_graph *g, glesc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sbuf b;
    sbuf_init(&b);
    sbuf_appendv(&b, fmt, ap);
    va_end(ap);
    core_err_set(&g->ctx->err, st, "%s", sbuf_str(&b) ? sbuf_str(&b) : "out of memory");
    sbuf_free(&b);
    return NULL;
}

GLESC_API glesc_tensor *glesc_leaky_relu(glesc_graph *g, glesc_tensor *x, float alpha)
{
    return graph_node(g, GLESC_OP_LEAKY_RELU, &x, 1, NULL, 0, &alpha, 1);
}

GLESC_API glesc_tensor *glesc_elu(glesc_graph *g, glesc_tensor *x, float alpha)
{
    return graph_node(g, GLESC_OP_ELU, &x, 1, NULL, 0, &alpha, 1);
}

GLESC_API glesc_tensor *glesc_hard_sigmoid(glesc_graph *g, glesc_tensor *x, float alpha, float beta)
{
    float fp[2] = {alpha, beta};
    return graph_node(g, GLESC_OP_HARD_SIGMOID, &x, 1, NULL, 0, fp, 2);
}

GLESC_API glesc_tensor *glesc_hard_swish(glesc_graph *g, glesc_tensor *x)
{
    return graph_node(g, GLESC_OP_HARD_SWISH, &x, 1, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_pad(glesc_graph *g, glesc_tensor *x, const int64_t pads[8],
                                  glesc_pad_mode mode, float value)
{
    if (!g || !x)
        return NULL;
    int32_t ip[9] = {(int32_t)mode};
    for (int i = 0; i < 8; i++) {
        if (pads[i] < INT32_MIN / 2 || pads[i] > INT32_MAX / 2)
            return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT, "glesc_pad: pad %d is %lld", i,
                             (long long)pads[i]);
        ip[1 + i] = (int32_t)pads[i];
    }
    return graph_node(g, GLESC_OP_PAD, &x, 1, ip, 9, &value, 1);
}

GLESC_API glesc_tensor *glesc_slice(glesc_graph *g, glesc_tensor *x, int n, const int *axes,
                                    const int64_t *starts, const int64_t *ends,
                                    const int64_t *steps)
{
    if (!g || !x)
        return NULL;
    if (n < 1 || n > 4 || !axes || !starts || !ends)
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                         "glesc_slice: %d axes (1..4, with axes, starts and ends given)", n);
    int64_t first[4] = {0, 0, 0, 0}, step[4] = {1, 1, 1, 1}, count[4];
    memcpy(count, x->ne, sizeof count);
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        int a = axes[i];
        if (a < 0 || a > 3 || (seen & 1u << a))
            return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                             "glesc_slice: axis %d is not 0..3 or is given twice", a);
        seen |= 1u << a;
        int64_t dim = x->ne[a], s = steps ? steps[i] : 1, b = starts[i], e = ends[i];
        if (s == 0 || s < INT32_MIN || s > INT32_MAX)
            return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                             "glesc_slice: step %lld of axis %d (nonzero, 32 bits)", (long long)s,
                             a);
        /* ONNX's clamping */
        b = b < 0 ? (b < -dim ? 0 : b + dim) : b;
        e = e < 0 ? (e < -dim ? -1 : e + dim) : e;
        if (s > 0) {
            b = CORE_MIN(b, dim);
            e = CORE_MAX(0, CORE_MIN(e, dim));
            count[a] = e > b ? (e - b + s - 1) / s : 0;
        } else {
            b = CORE_MIN(b, dim - 1);
            e = CORE_MAX(-1, CORE_MIN(e, dim - 1));
            count[a] = b > e ? (b - e + (-s) - 1) / (-s) : 0;
        }
        if (count[a] < 1)
            return fail_null(g, GLESC_ERROR_SHAPE,
                             "glesc_slice: starts %lld, ends %lld, step %lld leave no element of "
                             "axis %d (size %lld)",
                             (long long)starts[i], (long long)ends[i], (long long)s, a,
                             (long long)dim);
        first[a] = b;
        step[a] = s;
    }
    bool view = true;
    for (int d = 0; d < 4; d++)
        view &= step[d] > 0;
    if (!view) {
        int32_t ip[12];
        for (int d = 0; d < 4; d++) {
            ip[d] = (int32_t)first[d];
            ip[4 + d] = (int32_t)step[d];
            ip[8 + d] = (int32_t)count[d];
        }
        return graph_node(g, GLESC_OP_SLICE, &x, 1, ip, 12, NULL, 0);
    }
    /* A view: the same owner, strides multiplied by the steps. */
    glesc_tensor *t = graph_view_node(g, GLESC_OP_VIEW, x);
    if (!t)
        return NULL;
    t->ndim = x->ndim;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = count[d];
        t->nb[d] = x->nb[d] * step[d];
        t->offs += (uint64_t)(first[d] * x->nb[d]);
    }
    return t;
}

GLESC_API glesc_tensor *glesc_gather(glesc_graph *g, glesc_tensor *x, glesc_tensor *indices,
                                     int axis)
{
    glesc_tensor *s[2] = {x, indices};
    int32_t ip = axis;
    return graph_node(g, GLESC_OP_GATHER, s, 2, &ip, 1, NULL, 0);
}

/* x as a contiguous tensor: x itself, or a copy. */
static glesc_tensor *contiguous(glesc_graph *g, glesc_tensor *x)
{
    return graph_is_contiguous(x) ? x : glesc_cont(g, x);
}

GLESC_API glesc_tensor *glesc_flatten(glesc_graph *g, glesc_tensor *x, int k)
{
    if (!g || !x)
        return NULL;
    if (k < 0 || k > 4)
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT, "glesc_flatten: k = %d is not 0..4", k);
    int64_t shape[2] = {1, 1};
    for (int d = 0; d < 4; d++)
        shape[d < k ? 0 : 1] *= x->ne[d];
    return glesc_reshape(g, contiguous(g, x), 2, shape);
}

GLESC_API glesc_tensor *glesc_log_softmax(glesc_graph *g, glesc_tensor *x, int axis)
{
    int32_t ip = axis;
    return graph_node(g, GLESC_OP_LOG_SOFTMAX, &x, 1, &ip, 1, NULL, 0);
}

static int or_one(int v)
{
    return v == 0 ? 1 : v;
}

/* A public parameter struct (struct_size first) into *dst: false (message
 * set) when its struct_size is too small. */
static bool params_in(glesc_graph *g, void *dst, size_t size, const void *src, const char *fn)
{
    return core_struct_read(&g->ctx->err, dst, size, src, fn) == GLESC_OK;
}

/* The node's parameters are in glesc's order (index 0 the width); the
 * public ones in ONNX's (H, then W). */
static glesc_tensor *pool_node(glesc_graph *g, glesc_tensor *x, const glesc_pool_params *p)
{
    int32_t ip[13] = {(int32_t)p->type,
                      p->kernel_shape[1],
                      p->kernel_shape[0],
                      or_one(p->strides[1]),
                      or_one(p->strides[0]),
                      or_one(p->dilations[1]),
                      or_one(p->dilations[0]),
                      p->pads[1],
                      p->pads[0],
                      p->pads[3],
                      p->pads[2],
                      p->ceil_mode,
                      p->count_include_pad};
    return graph_node(g, GLESC_OP_POOL, &x, 1, ip, 13, NULL, 0);
}

/* The caller's pooling parameters into q (kernel_shape has no default, so
 * NULL is refused). */
static bool pool_params_in(glesc_graph *g, glesc_pool_params *q, const glesc_pool_params *p,
                           const char *fn)
{
    if (!p) {
        fail_null(g, GLESC_ERROR_INVALID_ARGUMENT, "%s: no parameters (kernel_shape is required)",
                  fn);
        return false;
    }
    return params_in(g, q, sizeof *q, p, fn);
}

GLESC_API glesc_tensor *glesc_pool2d(glesc_graph *g, glesc_tensor *x, const glesc_pool_params *p)
{
    if (!g || !x)
        return NULL;
    glesc_pool_params q;
    if (!pool_params_in(g, &q, p, "glesc_pool2d"))
        return NULL;
    return pool_node(g, x, &q);
}

GLESC_API glesc_tensor *glesc_pool1d(glesc_graph *g, glesc_tensor *x, const glesc_pool_params *p)
{
    if (!g || !x)
        return NULL;
    glesc_pool_params q;
    if (!pool_params_in(g, &q, p, "glesc_pool1d"))
        return NULL;
    if (x->ne[3] != 1)
        return fail_null(g, GLESC_ERROR_SHAPE, "glesc_pool1d: x %s must be [W, C, N]", GRAPH_SH(x));
    if (q.kernel_shape[0] > 1 || q.strides[0] > 1 || q.dilations[0] > 1 || q.pads[0] || q.pads[2])
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                         "glesc_pool1d: the H entries (kernel %d, stride %d, dilation %d, pads "
                         "%d, %d) must be 0 or their default",
                         q.kernel_shape[0], q.strides[0], q.dilations[0], q.pads[0], q.pads[2]);
    q.kernel_shape[0] = 1;
    /* [W, C, N] as [W, 1, C, N]: a 2-D pool of height 1 */
    int64_t s4[4] = {x->ne[0], 1, x->ne[1], x->ne[2]};
    glesc_tensor *y = pool_node(g, glesc_reshape(g, contiguous(g, x), 4, s4), &q);
    if (!y)
        return NULL;
    int64_t s3[3] = {y->ne[0], y->ne[2], y->ne[3]};
    return glesc_reshape(g, y, CORE_MAX(2, x->ndim), s3);
}

GLESC_API glesc_tensor *glesc_global_pool(glesc_graph *g, glesc_tensor *x, glesc_pool_type type,
                                          int n_spatial)
{
    if (!g || !x)
        return NULL;
    if (n_spatial != 1 && n_spatial != 2)
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                         "glesc_global_pool: %d spatial dimensions (1 or 2)", n_spatial);
    if (type != GLESC_POOL_MAX && type != GLESC_POOL_AVG)
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                         "glesc_global_pool: type %d is not max (0) or average (1)", (int)type);
    glesc_op op = type == GLESC_POOL_AVG ? GLESC_OP_MEAN : GLESC_OP_REDUCE_MAX;
    if (n_spatial == 1)
        return glesc_reduce(g, op, x, 0);
    /* [W, H, C, N] → [W·H, C, N] → reduce → [1, 1, C, N] */
    int64_t s3[3] = {x->ne[0] * x->ne[1], x->ne[2], x->ne[3]};
    glesc_tensor *r = glesc_reduce(g, op, glesc_reshape(g, contiguous(g, x), 3, s3), 0);
    if (!r)
        return NULL;
    int64_t s4[4] = {1, 1, x->ne[2], x->ne[3]};
    return glesc_reshape(g, r, CORE_MAX(2, x->ndim), s4);
}

static glesc_tensor *conv_transpose_node(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                         glesc_tensor *b, const glesc_conv_transpose_params *p)
{
    glesc_tensor *s[3] = {x, w, b};
    int32_t ip[11] = {or_one(p->strides[1]),
                      or_one(p->strides[0]),
                      or_one(p->dilations[1]),
                      or_one(p->dilations[0]),
                      p->pads[1],
                      p->pads[0],
                      p->pads[3],
                      p->pads[2],
                      p->output_padding[1],
                      p->output_padding[0],
                      or_one(p->group)};
    return graph_node(g, GLESC_OP_CONV_TRANSPOSE, s, b ? 3 : 2, ip, 11, NULL, 0);
}

GLESC_API glesc_tensor *glesc_conv_transpose2d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                               glesc_tensor *b,
                                               const glesc_conv_transpose_params *params)
{
    if (!g || !x || !w)
        return NULL;
    glesc_conv_transpose_params q;
    if (!params_in(g, &q, sizeof q, params, "glesc_conv_transpose2d"))
        return NULL;
    return conv_transpose_node(g, x, w, b, &q);
}

GLESC_API glesc_tensor *glesc_conv_transpose1d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                               glesc_tensor *b,
                                               const glesc_conv_transpose_params *params)
{
    if (!g || !x || !w)
        return NULL;
    glesc_conv_transpose_params q;
    if (!params_in(g, &q, sizeof q, params, "glesc_conv_transpose1d"))
        return NULL;
    if (x->ne[3] != 1 || w->ne[3] != 1)
        return fail_null(g, GLESC_ERROR_SHAPE,
                         "glesc_conv_transpose1d: x %s and w %s must be [W, C_in, N] and [kW, "
                         "C_out / group, C_in]",
                         GRAPH_SH(x), GRAPH_SH(w));
    if (q.strides[0] > 1 || q.dilations[0] > 1 || q.pads[0] || q.pads[2] || q.output_padding[0])
        return fail_null(g, GLESC_ERROR_INVALID_ARGUMENT,
                         "glesc_conv_transpose1d: the H entries (stride %d, dilation %d, pads %d, "
                         "%d, output padding %d) must be 0 or their default",
                         q.strides[0], q.dilations[0], q.pads[0], q.pads[2], q.output_padding[0]);
    /* [W, C, N] as [W, 1, C, N]: a 2-D transposed convolution of height 1 */
    int64_t xs[4] = {x->ne[0], 1, x->ne[1], x->ne[2]}, ws[4] = {w->ne[0], 1, w->ne[1], w->ne[2]};
    glesc_tensor *y = conv_transpose_node(g, glesc_reshape(g, contiguous(g, x), 4, xs),
                                          glesc_reshape(g, contiguous(g, w), 4, ws), b, &q);
    if (!y)
        return NULL;
    int64_t s3[3] = {y->ne[0], y->ne[2], y->ne[3]};
    return glesc_reshape(g, y, 3, s3);
}
