/*
 * map_nn.c — mappings of onnx-run's op table (map.c): softmax, layer
 * normalization and matrix products (MatMul, Gemm). Layout conventions are in map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

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
onnx_map_status onnx_map_softmax(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, oa, ga;
    CHECK(onnx_map_axis_of(m, onnx_map_attr_i(m, "axis", m->opset >= 13 ? -1 : 1), r, &oa, &ga));
    glesc_tensor *x, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    if (m->opset >= 13) {
        CHECK(softmax_at(m, x, ga, &y));
    } else {
        CHECK(onnx_map_flat2d(m, x, xv, oa, &x));
        CHECK(softmax_at(m, x, 0, &y));
        CHECK(onnx_map_reshape_to(m, y, r, xv->dims, &y));
    }
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* LayerNormalization (opset 17): over the dimensions from axis on (glesc's
 * leading ones, reshaped into dimension 0), times Scale plus B. Outputs
 * Mean and InvStdDev are the reductions of the same reshape. */
onnx_map_status onnx_map_layer_norm(onnx_map_ctx *m)
{
    if (onnx_map_attr_i(m, "stash_type", 1) != 1)
        return UNSUP("stash_type %" PRId64 ": glesc normalizes in f32",
                     onnx_map_attr_i(m, "stash_type", 1));
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_need_float(m, 1));
    const onnx_value *xv = m->in[0];
    int r = xv->rank, oa, ga;
    CHECK(onnx_map_axis_of(m, onnx_map_attr_i(m, "axis", -1), r, &oa, &ga));
    float eps = onnx_map_attr_f(m, "epsilon", 1e-5f);
    glesc_tensor *x, *scale, *bias = NULL, *y;
    CHECK(onnx_map_gpu_in(m, 0, &x));
    CHECK(onnx_map_gpu_in(m, 1, &scale));
    if (m->n_in > 2 && m->in[2]) {
        CHECK(onnx_map_need_float(m, 2));
        CHECK(onnx_map_gpu_in(m, 2, &bias));
    }
    glesc_tensor *xf;
    CHECK(onnx_map_flat2d(m, x, xv, oa, &xf));
    TRY(y = glesc_layer_norm(m->g, xf, eps), "glesc_layer_norm");
    CHECK(onnx_map_reshape_to(m, y, r, xv->dims, &y));
    TRY(y = glesc_mul(m->g, y, scale), "glesc_mul");
    if (bias)
        TRY(y = glesc_add(m->g, y, bias), "glesc_add");
    onnx_map_set_out(m, 0, y, xv->type, r);
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
    CHECK(onnx_map_reshape_to(m, mean, r, sdims, &mean));
    onnx_map_set_out(m, 1, mean, T_FLOAT, r);
    if (m->n_out > 2) {
        CHECK(onnx_map_reshape_to(m, inv, r, sdims, &inv));
        onnx_map_set_out(m, 2, inv, T_FLOAT, r);
    }
    return ONNX_MAP_OK;
}

/* ---- products ---- */

/* MatMul (numpy semantics): A [..., M, K] · B [..., K, N]. In glesc's
 * order A is X [K, M, ...] and Bᵀ is the weight W [K, N, ...] (a contiguous
 * transpose), W's batch dimensions broadcasting over X's; a 1-D operand
 * is a row (A) or column (B) vector whose unit dimension is dropped. */
onnx_map_status onnx_map_matmul(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_need_float(m, 1));
    const onnx_value *av = m->in[0], *bv = m->in[1];
    if (av->rank < 1 || bv->rank < 1)
        return INVALID("MatMul of a scalar");
    glesc_tensor *a, *b, *w, *y;
    CHECK(onnx_map_gpu_in(m, 0, &a));
    CHECK(onnx_map_gpu_in(m, 1, &b));
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
    CHECK(onnx_map_reshape_to(m, y, nr, dims, &y));
    onnx_map_set_out(m, 0, y, av->type, nr);
    return ONNX_MAP_OK;
}

/* Gemm: alpha·A'·B' + beta·C with A' = A or Aᵀ (transA), B' = B or Bᵀ
 * (transB), C broadcasting to [M, N] (attribute broadcast of opsets before 7
 * asks for just that). glesc's weight is B'ᵀ: B itself when
 * transB (its rows are glesc's contiguous dimension 0), else a contiguous
 * transpose; the activation is A' (A, or a contiguous transpose). */
onnx_map_status onnx_map_gemm(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_need_float(m, 1));
    if (m->in[0]->rank != 2 || m->in[1]->rank != 2)
        return INVALID("Gemm's A and B must be 2-D");
    float alpha = onnx_map_attr_f(m, "alpha", 1.0f), beta = onnx_map_attr_f(m, "beta", 1.0f);
    glesc_tensor *a, *b, *y;
    CHECK(onnx_map_gpu_in(m, 0, &a));
    CHECK(onnx_map_gpu_in(m, 1, &b));
    if (onnx_map_attr_i(m, "transA", 0)) {
        TRY(a = glesc_transpose(m->g, a), "glesc_transpose");
        TRY(a = glesc_cont(m->g, a), "glesc_cont");
    }
    if (!onnx_map_attr_i(m, "transB", 0)) {
        TRY(b = glesc_transpose(m->g, b), "glesc_transpose");
        TRY(b = glesc_cont(m->g, b), "glesc_cont");
    }
    TRY(y = glesc_matmul(m->g, b, a), "glesc_matmul");
    if (alpha != 1.0f)
        TRY(y = glesc_scale(m->g, y, alpha, 0.0f), "glesc_scale");
    if (m->n_in > 2 && m->in[2] && beta != 0.0f) {
        glesc_tensor *c;
        CHECK(onnx_map_need_float(m, 2));
        CHECK(onnx_map_gpu_in(m, 2, &c));
        if (beta != 1.0f)
            TRY(c = glesc_scale(m->g, c, beta, 0.0f), "glesc_scale");
        TRY(y = glesc_add(m->g, y, c), "glesc_add");
    }
    onnx_map_set_out(m, 0, y, m->in[0]->type, 2);
    return ONNX_MAP_OK;
}
