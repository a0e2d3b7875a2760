/*
 * cpu.c — evaluates a graph with the op table's CPU references: the oracle
 * of the GPU tests. Every memory owner gets a host copy (floats, one per
 * element of its memory); leaves start from their GPU contents (quantized
 * weights dequantized with the CPU reference); an op's
 * sources are gathered through their strides into contiguous arrays, the
 * reference runs, and the result is rounded to the node's type (f16/bf16
 * round to nearest even, i32 truncates) and scattered into its owner's copy
 * through its strides (which is how in-place ops and views come out right).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "quant/quant.h"

typedef struct host_mem {
    glesc_tensor *owner;
    float *v; /* one float per element of the owner's memory */
} host_mem;

static float round_to(glesc_dtype dt, float x)
{
    switch (dt) {
    case GLESC_DTYPE_F16:
        return quant_f16_to_f32(quant_f32_to_f16(x));
    case GLESC_DTYPE_BF16:
        return quant_bf16_to_f32(quant_f32_to_bf16(x));
    case GLESC_DTYPE_I32:
        return truncf(x);
    default:
        return x;
    }
}

/* Element offset of coordinate i (flat, contiguous order) in t's owner. */
static int64_t elem_at(const glesc_tensor *t, int64_t i)
{
    if (graph_dtype_quant(t->owner->dtype)) { /* element strides (graph_quant_elem_stride) */
        int64_t off = graph_quant_elem_offs(t);
        for (int d = 0; d < 4; d++) {
            off += (i % t->ne[d]) * graph_quant_elem_stride(t, d);
            i /= t->ne[d];
        }
        return off;
    }
    size_t es = graph_dtype_size(t->owner->dtype);
    int64_t off = (int64_t)t->offs;
    for (int d = 0; d < 4; d++) {
        int64_t c = i % t->ne[d];
        i /= t->ne[d];
        off += c * t->nb[d];
    }
    return off / (int64_t)es;
}

static host_mem *find(host_mem *m, int n, const glesc_tensor *owner)
{
    for (int i = 0; i < n; i++)
        if (m[i].owner == owner)
            return &m[i];
    return NULL;
}

glesc_status graph_cpu_eval(glesc_graph *g, glesc_tensor *const *outs, int n, float **results)
{
    glesc_context *ctx = g->ctx;
    graph_order_t ord;
    glesc_status st = graph_order(g, outs, n, &ord);
    if (st != GLESC_OK)
        return st;
    host_mem *mem = core_calloc((size_t)ord.n + 1, sizeof *mem);
    int n_mem = 0;
    if (!mem) {
        graph_order_free(&ord);
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "cpu eval");
    }
    for (int i = 0; i < n; i++)
        results[i] = NULL;
    for (int k = 0; k < ord.n && st == GLESC_OK; k++) {
        glesc_tensor *t = ord.nodes[k];
        const graph_op_info *info = graph_op(t->op);
        if (info->kind == GRAPH_KIND_VIEW)
            continue;
        glesc_tensor *o = t->owner;
        host_mem *hm = find(mem, n_mem, o);
        if (!hm) {
            hm = &mem[n_mem++];
            hm->owner = o;
            /* quantized leaves: their dequantized elements */
            size_t es = graph_dtype_size(o->dtype);
            int64_t elems =
                graph_dtype_quant(o->dtype)
                    ? graph_nelements(o) + 1
                    : (int64_t)((o->persistent || o->op == GLESC_OP_NONE ? o->st.bytes
                                                                         : graph_nbytes(o)) /
                                es) +
                          1;
            hm->v = core_calloc((size_t)elems, sizeof *hm->v);
            if (!hm->v) {
                st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "cpu eval");
                break;
            }
            if (o->op == GLESC_OP_NONE) {
                /* The whole memory as the owner's own (contiguous) elements. */
                if (!o->written) {
                    char sh[64];
                    st = core_err_set(&ctx->err, GLESC_ERROR_STATE,
                                      "cpu eval: input %s was never written",
                                      graph_shape_str(o, sh, sizeof sh));
                    break;
                }
                st = graph_tensor_gather_f32(o, hm->v);
                if (st != GLESC_OK)
                    break;
            }
        }
        if (t->op == GLESC_OP_NONE)
            continue;
        /* gather sources */
        float *srcv[GRAPH_MAX_SRC] = {0};
        for (int s = 0; s < t->n_src && st == GLESC_OK; s++) {
            glesc_tensor *x = t->src[s];
            if (!x)
                continue;
            host_mem *xm = find(mem, n_mem, x->owner);
            int64_t ne = graph_nelements(x);
            srcv[s] = core_malloc((size_t)ne * sizeof(float) + 1);
            if (!srcv[s] || !xm) {
                st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "cpu eval");
                break;
            }
            for (int64_t i = 0; i < ne; i++)
                srcv[s][i] = xm->v[elem_at(x, i)];
        }
        int64_t ne = graph_nelements(t);
        float *res = st == GLESC_OK ? core_malloc((size_t)ne * sizeof(float) + 1) : NULL;
        if (st == GLESC_OK && !res)
            st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "cpu eval");
        if (st == GLESC_OK) {
            info->cpu(t, res, (const float *const *)srcv);
            for (int64_t i = 0; i < ne; i++)
                hm->v[elem_at(t, i)] = round_to(t->dtype, res[i]);
        }
        core_free(res);
        for (int s = 0; s < t->n_src; s++)
            core_free(srcv[s]);
    }
    for (int i = 0; i < n && st == GLESC_OK; i++) {
        glesc_tensor *t = outs[i];
        host_mem *hm = find(mem, n_mem, t->owner);
        int64_t ne = graph_nelements(t);
        results[i] = malloc((size_t)ne * sizeof(float) + 1);
        if (!results[i] || !hm) {
            st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "cpu eval");
            break;
        }
        for (int64_t j = 0; j < ne; j++)
            results[i][j] = hm->v[elem_at(t, j)];
    }
    if (st != GLESC_OK)
        for (int i = 0; i < n; i++) {
            free(results[i]);
            results[i] = NULL;
        }
    for (int i = 0; i < n_mem; i++)
        core_free(mem[i].v);
    core_free(mem);
    graph_order_free(&ord);
    return st;
}
