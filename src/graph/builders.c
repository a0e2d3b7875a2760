/*
 * builders.c — node creation (graph_node: check the sources, record the
 * node, run its op's shape rule) and the public builders of every op that
 * computes something (glesc_add .. glesc_attention). A builder only records:
 * nothing runs until glesc_graph_compute. Views have their own builders
 * (views.c).
 */
#include <math.h>

#include "graph/graph.h"

/* Quantized tensors are read through weight loaders (matmul's W, get_rows'
 * table); only a KV cache's types are read by more (kv_reader). */
static glesc_status quant_source_fail(glesc_graph *g, glesc_op op, const glesc_tensor *s)
{
    char sh[64];
    return core_err_set(
        &g->ctx->err, GLESC_ERROR_TYPE,
        "glesc_%s: the %s tensor %s%s%s%s is quantized: it can only be the weight of "
        "matmul or the table of get_rows, used whole (no views); q8_0 and q4_0 also a KV "
        "cache (views, set_rows, attention's k and v, rope, cont, cast)",
        graph_op(op)->name, glesc_dtype_name(s->dtype), s->name ? "'" : "", s->name ? s->name : "",
        s->name ? "' " : "", graph_shape_str(s, sh, sizeof sh));
}

/* Where a KV cache's block type (graph_kv_quant) may be source i of op:
 * views of it, set_rows into it, and the ops that read it element by
 * element (attention's k and v; rope, cont and cast, which a context shift
 * and saved states use). */
static bool kv_reader(glesc_op op, int i)
{
    switch (op) {
    case GLESC_OP_VIEW:
    case GLESC_OP_PERMUTE:
    case GLESC_OP_SET_ROWS:
    case GLESC_OP_ROPE:
    case GLESC_OP_CONT:
    case GLESC_OP_CAST:
        return i == 0;
    case GLESC_OP_ATTENTION:
        return i == 1 || i == 2;
    default:
        return false;
    }
}

glesc_status graph_check_source(glesc_graph *g, glesc_op op, int i, glesc_tensor *s)
{
    if (s->g && s->g != g)
        return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_%s: a source belongs to another graph", graph_op(op)->name);
    if (s->ctx != g->ctx)
        return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_%s: a source belongs to another context", graph_op(op)->name);
    if (s->persistent && graph_hold(g, s) != GLESC_OK)
        return g->ctx->err.status;
    if (graph_dtype_quant(s->dtype) &&
        !(i == 0 && (op == GLESC_OP_MATMUL || op == GLESC_OP_GET_ROWS)) &&
        !(graph_kv_quant(s->dtype) && kv_reader(op, i)))
        return quant_source_fail(g, op, s);
    return GLESC_OK;
}

void graph_drop_newest(glesc_graph *g, glesc_tensor *t)
{
    g->tensors = t->next;
    g->gen = graph_gen_next();
    graph_free_tensor(t);
}

glesc_tensor *graph_node(glesc_graph *g, glesc_op op, glesc_tensor *const *src, int n_src,
                         const int32_t *ip, int n_ip, const float *fp, int n_fp)
{
    if (!g)
        return NULL;
    const graph_op_info *info = graph_op(op);
    for (int i = 0; i < n_src; i++) {
        if (!src[i]) {
            /* Optional sources (softmax's and attention's masks) may be NULL. */
            bool optional = (op == GLESC_OP_SOFTMAX && i == 1) ||
                            (op == GLESC_OP_ATTENTION && i == 3) || (op == GLESC_OP_CONV && i == 2);
            if (!optional)
                return NULL; /* an earlier builder failed: keep its message */
            continue;
        }
        if (graph_check_source(g, op, i, src[i]) != GLESC_OK)
            return NULL;
    }
    glesc_tensor *t = graph_tensor_alloc(g);
    if (!t)
        return NULL;
    t->op = op;
    t->n_src = n_src;
    for (int i = 0; i < n_src; i++)
        t->src[i] = src[i];
    for (int i = 0; i < n_ip; i++)
        t->ip[i] = ip[i];
    for (int i = 0; i < n_fp; i++)
        t->fp[i] = fp[i];
    if (info->shape(t) != GLESC_OK) {
        graph_drop_newest(g, t);
        return NULL;
    }
    if (t->owner == t)
        graph_set_contiguous(t);
    return t;
}

/* ---- builders ---- */

GLESC_API glesc_tensor *glesc_unary(glesc_graph *g, glesc_op op, glesc_tensor *x)
{
    if (g && (op < GLESC_OP_NEG || op > GLESC_OP_STEP)) {
        core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                     "glesc_unary: %s is not a parameterless unary op",
                     glesc_op_name(op) ? glesc_op_name(op) : "(unknown op)");
        return NULL;
    }
    return graph_node(g, op, &x, 1, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_binary(glesc_graph *g, glesc_op op, glesc_tensor *a, glesc_tensor *b)
{
    if (g && (op < GLESC_OP_ADD || op > GLESC_OP_POW)) {
        core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                     "glesc_binary: %s is not a binary op",
                     glesc_op_name(op) ? glesc_op_name(op) : "(unknown op)");
        return NULL;
    }
    glesc_tensor *s[2] = {a, b};
    return graph_node(g, op, s, 2, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_neg(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_NEG, x);
}
GLESC_API glesc_tensor *glesc_exp(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_EXP, x);
}
GLESC_API glesc_tensor *glesc_silu(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_SILU, x);
}
GLESC_API glesc_tensor *glesc_gelu(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_GELU, x);
}
GLESC_API glesc_tensor *glesc_relu(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_RELU, x);
}
GLESC_API glesc_tensor *glesc_tanh(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_TANH, x);
}
GLESC_API glesc_tensor *glesc_sigmoid(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_SIGMOID, x);
}
GLESC_API glesc_tensor *glesc_sqrt(glesc_graph *g, glesc_tensor *x)
{
    return glesc_unary(g, GLESC_OP_SQRT, x);
}
GLESC_API glesc_tensor *glesc_add(glesc_graph *g, glesc_tensor *a, glesc_tensor *b)
{
    return glesc_binary(g, GLESC_OP_ADD, a, b);
}
GLESC_API glesc_tensor *glesc_sub(glesc_graph *g, glesc_tensor *a, glesc_tensor *b)
{
    return glesc_binary(g, GLESC_OP_SUB, a, b);
}
GLESC_API glesc_tensor *glesc_mul(glesc_graph *g, glesc_tensor *a, glesc_tensor *b)
{
    return glesc_binary(g, GLESC_OP_MUL, a, b);
}
GLESC_API glesc_tensor *glesc_div(glesc_graph *g, glesc_tensor *a, glesc_tensor *b)
{
    return glesc_binary(g, GLESC_OP_DIV, a, b);
}

GLESC_API glesc_tensor *glesc_scale(glesc_graph *g, glesc_tensor *x, float s, float b)
{
    float fp[2] = {s, b};
    return graph_node(g, GLESC_OP_SCALE, &x, 1, NULL, 0, fp, 2);
}

GLESC_API glesc_tensor *glesc_clamp(glesc_graph *g, glesc_tensor *x, float lo, float hi)
{
    float fp[2] = {lo, hi};
    return graph_node(g, GLESC_OP_CLAMP, &x, 1, NULL, 0, fp, 2);
}

GLESC_API glesc_tensor *glesc_cast(glesc_graph *g, glesc_tensor *x, glesc_dtype t)
{
    int32_t ip = (int32_t)t;
    return graph_node(g, GLESC_OP_CAST, &x, 1, &ip, 1, NULL, 0);
}

GLESC_API glesc_tensor *glesc_cont(glesc_graph *g, glesc_tensor *x)
{
    return graph_node(g, GLESC_OP_CONT, &x, 1, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_reduce(glesc_graph *g, glesc_op op, glesc_tensor *x, int axis)
{
    if (g && (op < GLESC_OP_SUM || op > GLESC_OP_ARGMAX)) {
        core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                     "glesc_reduce: %s is not a reduction",
                     glesc_op_name(op) ? glesc_op_name(op) : "(unknown op)");
        return NULL;
    }
    int32_t ip = axis;
    return graph_node(g, op, &x, 1, &ip, 1, NULL, 0);
}

GLESC_API glesc_tensor *glesc_softmax(glesc_graph *g, glesc_tensor *x, glesc_tensor *mask,
                                      float scale, bool causal)
{
    if (!x)
        return NULL;
    glesc_tensor *s[2] = {x, mask};
    int32_t ip = causal;
    return graph_node(g, GLESC_OP_SOFTMAX, s, 2, &ip, 1, &scale, 1);
}

GLESC_API glesc_tensor *glesc_rms_norm(glesc_graph *g, glesc_tensor *x, float eps)
{
    return graph_node(g, GLESC_OP_RMS_NORM, &x, 1, NULL, 0, &eps, 1);
}

GLESC_API glesc_tensor *glesc_layer_norm(glesc_graph *g, glesc_tensor *x, float eps)
{
    return graph_node(g, GLESC_OP_LAYER_NORM, &x, 1, NULL, 0, &eps, 1);
}

GLESC_API glesc_tensor *glesc_matmul(glesc_graph *g, glesc_tensor *w, glesc_tensor *x)
{
    glesc_tensor *s[2] = {w, x};
    return graph_node(g, GLESC_OP_MATMUL, s, 2, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_get_rows(glesc_graph *g, glesc_tensor *table, glesc_tensor *rows)
{
    glesc_tensor *s[2] = {table, rows};
    return graph_node(g, GLESC_OP_GET_ROWS, s, 2, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_set_rows(glesc_graph *g, glesc_tensor *dst, glesc_tensor *src,
                                       glesc_tensor *idx)
{
    glesc_tensor *s[3] = {dst, src, idx};
    return graph_node(g, GLESC_OP_SET_ROWS, s, 3, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_concat(glesc_graph *g, glesc_tensor *a, glesc_tensor *b, int dim)
{
    glesc_tensor *s[2] = {a, b};
    int32_t ip = dim;
    return graph_node(g, GLESC_OP_CONCAT, s, 2, &ip, 1, NULL, 0);
}

GLESC_API glesc_tensor *glesc_cpy(glesc_graph *g, glesc_tensor *src, glesc_tensor *dst)
{
    glesc_tensor *s[2] = {src, dst};
    return graph_node(g, GLESC_OP_CPY, s, 2, NULL, 0, NULL, 0);
}

GLESC_API glesc_tensor *glesc_rope(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos, int n_dims,
                                   glesc_rope_mode mode, float freq_base, float freq_scale)
{
    return glesc_rope_yarn(g, x, pos, NULL, n_dims, mode, 0, freq_base, freq_scale, 0.0f, 1.0f,
                           0.0f, 0.0f);
}

GLESC_API glesc_tensor *glesc_rope_ext(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                                       glesc_tensor *freq_factors, int n_dims, glesc_rope_mode mode,
                                       float freq_base, float freq_scale)
{
    return glesc_rope_yarn(g, x, pos, freq_factors, n_dims, mode, 0, freq_base, freq_scale, 0.0f,
                           1.0f, 0.0f, 0.0f);
}

/* ggml_rope_yarn_corr_dim: the rotation whose wavelength fits n_rot turns
 * into n_ctx_orig positions. */
static double yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return n_dims * logf((float)n_ctx_orig / (n_rot * 2 * 3.14159265358979f)) / (2 * logf(base));
}

GLESC_API glesc_tensor *glesc_rope_yarn(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                                        glesc_tensor *freq_factors, int n_dims,
                                        glesc_rope_mode mode, int n_ctx_orig, float freq_base,
                                        float freq_scale, float ext_factor, float attn_factor,
                                        float beta_fast, float beta_slow)
{
    glesc_tensor *s[3] = {x, pos, freq_factors};
    /* ip: n_dims, mode, YaRN on, its correction dimensions (whole numbers,
     * as ggml_rope_yarn_corr_dims makes them), n_ctx_orig */
    int32_t ip[6] = {n_dims, (int32_t)mode, ext_factor != 0.0f, 0, 0, n_ctx_orig};
    if (ext_factor != 0.0f && n_ctx_orig > 0 && freq_base > 1.0f && n_dims > 0) {
        double lo = floor(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
        double hi = ceil(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
        ip[3] = (int32_t)fmax(0.0, fmin(lo, (double)n_dims));
        ip[4] = (int32_t)fmax(0.0, fmin(hi, (double)(n_dims - 1)));
    }
    float fp[4] = {freq_base, freq_scale, ext_factor, attn_factor};
    return graph_node(g, GLESC_OP_ROPE, s, freq_factors ? 3 : 2, ip, 6, fp, 4);
}

GLESC_API glesc_tensor *glesc_attention(glesc_graph *g, glesc_tensor *q, glesc_tensor *k,
                                        glesc_tensor *v, glesc_tensor *mask, float scale,
                                        bool causal)
{
    return glesc_attention_ext(g, q, k, v, mask, scale, causal, 0, 0.0f);
}

GLESC_API glesc_tensor *glesc_attention_ext(glesc_graph *g, glesc_tensor *q, glesc_tensor *k,
                                            glesc_tensor *v, glesc_tensor *mask, float scale,
                                            bool causal, int n_swa, float softcap)
{
    if (!q || !k || !v)
        return NULL;
    glesc_tensor *s[4] = {q, k, v, mask};
    /* ip: causal, window, soft-capping on (the code differs); fp: the
     * scale and the cap (uniforms) */
    int32_t ip[3] = {causal, n_swa, softcap != 0.0f};
    float fp[2] = {scale, softcap};
    return graph_node(g, GLESC_OP_ATTENTION, s, 4, ip, 3, fp, 2);
}
