/*
 * views.c — the view builders: reshape, permute/transpose, view (shape,
 * strides, byte offset) and broadcast (stride 0). A view never copies: it
 * shares its source's owner and only sets its own shape, strides and
 * offset, which every kernel reads as uniforms. Of the block types only
 * the KV cache's (q8_0, q4_0: graph_kv_quant) have views, of whole blocks
 * along dimension 0 with the file's byte strides (quant_view); the others
 * are read whole, by the weight loaders.
 */
#include "graph/graph.h"
#include "quant/quant.h"

glesc_tensor *graph_view_node(glesc_graph *g, glesc_op op, glesc_tensor *x)
{
    if (!g || !x)
        return NULL;
    if (graph_check_source(g, op, 0, x) != GLESC_OK)
        return NULL; /* a quantized x is refused here */
    glesc_tensor *t = graph_tensor_alloc(g);
    if (!t)
        return NULL;
    t->op = op;
    t->n_src = 1;
    t->src[0] = x;
    t->dtype = x->dtype;
    t->owner = x->owner;
    t->offs = x->offs;
    return t;
}

static glesc_tensor *view_fail(glesc_graph *g, glesc_tensor *t)
{
    graph_drop_newest(g, t);
    return NULL;
}

static bool shape_ok(glesc_tensor *t, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > 4 || !shape)
        return graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT, "ndim %d is not 1..4", ndim), false;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = d < ndim ? shape[d] : 1;
        if (t->ne[d] < 1)
            return graph_op_fail(t, GLESC_ERROR_SHAPE, "dimension %d has size %lld", d,
                                 (long long)t->ne[d]),
                   false;
    }
    t->ndim = ndim;
    return true;
}

GLESC_API glesc_tensor *glesc_reshape(glesc_graph *g, glesc_tensor *x, int ndim,
                                      const int64_t *shape)
{
    glesc_tensor *t = graph_view_node(g, GLESC_OP_RESHAPE, x);
    if (!t)
        return NULL;
    if (!shape_ok(t, ndim, shape))
        return view_fail(g, t);
    if (graph_nelements(t) != graph_nelements(x)) {
        graph_op_fail(t, GLESC_ERROR_SHAPE, "shapes %s and %s hold different numbers of elements",
                      GRAPH_SH(x), GRAPH_SH(t));
        return view_fail(g, t);
    }
    if (!graph_is_contiguous(x)) {
        graph_op_fail(t, GLESC_ERROR_SHAPE, "source %s is not contiguous (use glesc_cont first)",
                      GRAPH_SH(x));
        return view_fail(g, t);
    }
    uint64_t offs = x->offs;
    graph_set_contiguous(t);
    t->offs = offs;
    return t;
}

GLESC_API glesc_tensor *glesc_permute(glesc_graph *g, glesc_tensor *x, const int perm[4])
{
    glesc_tensor *t = graph_view_node(g, GLESC_OP_PERMUTE, x);
    if (!t)
        return NULL;
    int seen = 0;
    for (int i = 0; i < 4; i++)
        if (perm[i] >= 0 && perm[i] < 4)
            seen |= 1 << perm[i];
    if (seen != 15) {
        graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                      "(%d, %d, %d, %d) is not a permutation of 0..3", perm[0], perm[1], perm[2],
                      perm[3]);
        return view_fail(g, t);
    }
    int64_t xnb[4] = {x->nb[0], x->nb[1], x->nb[2], x->nb[3]};
    if (graph_dtype_quant(x->dtype)) { /* blocks stay along dimension 0; file-byte strides */
        if (perm[0] != 0) {
            graph_op_fail(t, GLESC_ERROR_SHAPE,
                          "%s %s: dimension 0 of a block type must stay dimension 0",
                          glesc_dtype_name(x->dtype), GRAPH_SH(x));
            return view_fail(g, t);
        }
        const quant_type_info *q = quant_type(x->dtype);
        for (int d = 1; d < 4; d++)
            xnb[d] = graph_quant_elem_stride(x, d) / q->block_size * q->block_bytes;
    }
    int nd = 1;
    for (int i = 0; i < 4; i++) {
        t->ne[perm[i]] = x->ne[i];
        t->nb[perm[i]] = xnb[i];
        t->ip[i] = perm[i];
        if (x->ne[i] > 1 || i < x->ndim)
            nd = CORE_MAX(nd, perm[i] + 1);
    }
    t->ndim = nd;
    return t;
}

GLESC_API glesc_tensor *glesc_transpose(glesc_graph *g, glesc_tensor *x)
{
    static const int perm[4] = {1, 0, 2, 3};
    return glesc_permute(g, x, perm);
}

/* A view of a block type (graph.h): dimension 0 whole blocks, strides and
 * offset in the file's bytes of whole blocks, within a source that covers
 * its owner whole (the cache, or a set_rows into it). */
static glesc_tensor *quant_view(glesc_graph *g, glesc_tensor *t, glesc_tensor *x, int ndim,
                                const size_t *nb, size_t offset)
{
    const quant_type_info *q = quant_type(x->dtype);
    const int64_t bs = q->block_size, bb = q->block_bytes;
    t->nb[0] = bb;
    int64_t prev = t->ne[0] / bs * bb;
    for (int d = 1; d < 4; d++) {
        t->nb[d] = d < ndim ? (int64_t)nb[d] : prev;
        prev = t->nb[d] * t->ne[d];
    }
    int64_t last = (int64_t)offset / bb * bs + t->ne[0] - 1;
    bool ok = t->ne[0] % bs == 0 && (int64_t)offset % bb == 0 &&
              graph_op(x->op)->kind != GRAPH_KIND_VIEW &&
              graph_nelements(x) == graph_nelements(x->owner);
    for (int d = 1; d < 4 && ok; d++) {
        ok = t->nb[d] % bb == 0;
        last += (t->ne[d] - 1) * (t->nb[d] / bb * bs);
    }
    if (!ok || last >= graph_nelements(x)) {
        graph_op_fail(t, GLESC_ERROR_SHAPE,
                      "view %s of the %s %s at byte offset %zu: a view of a block type takes "
                      "whole blocks (dimension 0 a multiple of %lld elements, strides and offset "
                      "multiples of %lld bytes as in the file) within the tensor",
                      GRAPH_SH(t), glesc_dtype_name(x->dtype), GRAPH_SH(x), offset, (long long)bs,
                      (long long)bb);
        return view_fail(g, t);
    }
    t->offs = offset;
    return t;
}

GLESC_API glesc_tensor *glesc_view(glesc_graph *g, glesc_tensor *x, int ndim, const int64_t *shape,
                                   const size_t *nb, size_t offset)
{
    glesc_tensor *t = graph_view_node(g, GLESC_OP_VIEW, x);
    if (!t)
        return NULL;
    if (!shape_ok(t, ndim, shape))
        return view_fail(g, t);
    if (graph_dtype_quant(x->dtype))
        return quant_view(g, t, x, ndim, nb, offset);
    size_t es = graph_dtype_size(x->dtype);
    t->nb[0] = (int64_t)es;
    int64_t prev = (int64_t)es * t->ne[0];
    for (int d = 1; d < 4; d++) {
        t->nb[d] = d < ndim ? (int64_t)nb[d] : prev;
        prev = t->nb[d] * t->ne[d];
    }
    uint64_t last = offset + es;
    for (int d = 0; d < 4; d++) {
        if (t->nb[d] % (int64_t)es) {
            graph_op_fail(t, GLESC_ERROR_INVALID_ARGUMENT,
                          "stride nb[%d] = %lld is not a multiple of "
                          "the element size %zu",
                          d, (long long)t->nb[d], es);
            return view_fail(g, t);
        }
        last += (uint64_t)(t->ne[d] - 1) * (uint64_t)t->nb[d];
    }
    if (offset % es || !graph_is_contiguous(x) || last > graph_nbytes(x)) {
        graph_op_fail(
            t, GLESC_ERROR_SHAPE,
            "view %s at byte offset %zu (last byte %llu) does not fit the contiguous %s of "
            "%llu bytes",
            GRAPH_SH(t), offset, (unsigned long long)last, GRAPH_SH(x),
            (unsigned long long)graph_nbytes(x));
        return view_fail(g, t);
    }
    t->offs = x->offs + offset;
    return t;
}

GLESC_API glesc_tensor *glesc_broadcast(glesc_graph *g, glesc_tensor *x, int ndim,
                                        const int64_t *shape)
{
    glesc_tensor *t = graph_view_node(g, GLESC_OP_BROADCAST, x);
    if (!t)
        return NULL;
    if (!shape_ok(t, ndim, shape))
        return view_fail(g, t);
    for (int d = 0; d < 4; d++) {
        if (x->ne[d] != t->ne[d] && x->ne[d] != 1) {
            graph_op_fail(t, GLESC_ERROR_SHAPE, "shape %s does not broadcast to %s", GRAPH_SH(x),
                          GRAPH_SH(t));
            return view_fail(g, t);
        }
        t->nb[d] = x->ne[d] == t->ne[d] ? x->nb[d] : 0;
    }
    return t;
}
