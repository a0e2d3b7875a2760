/*
 * map_vision.c — mappings of onnx-run's op table (map.c): convolution and
 * batch normalization. Layout conventions are in map.h.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map_ops.h"

/* ---- vision ---- */

/* ONNX's per-axis list attribute name (n values, each within int32) into
 * out, default def. */
onnx_map_status onnx_map_attr_list(onnx_map_ctx *m, const char *name, int n, int64_t def,
                                   int64_t *out)
{
    const Onnx__AttributeProto *a = onnx_map_attr(m, name);
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
onnx_map_status onnx_map_conv(onnx_map_ctx *m)
{
    CHECK(onnx_map_need_float(m, 0));
    CHECK(onnx_map_need_float(m, 1));
    const onnx_value *xv = m->in[0], *wv = m->in[1];
    int r = xv->rank, ns = r - 2;
    if (r == 5)
        return UNSUP("3-D convolution (rank-5 X): glesc convolves 1 or 2 spatial axes");
    if ((r != 3 && r != 4) || wv->rank != r)
        return INVALID("Conv's X (rank %d) and W (rank %d) must both be rank 3 or 4", r, wv->rank);
    int64_t strides[2], dil[2], pads[4], ks[2];
    CHECK(onnx_map_attr_list(m, "strides", ns, 1, strides));
    CHECK(onnx_map_attr_list(m, "dilations", ns, 1, dil));
    CHECK(onnx_map_attr_list(m, "pads", 2 * ns, 0, pads));
    CHECK(onnx_map_attr_list(m, "kernel_shape", ns, 0, ks));
    for (int i = 0; i < ns; i++)
        if (onnx_map_attr(m, "kernel_shape") && ks[i] != wv->dims[2 + i])
            return INVALID("kernel_shape %" PRId64 " differs from W's %" PRId64, ks[i],
                           wv->dims[2 + i]);
    const Onnx__AttributeProto *ap = onnx_map_attr(m, "auto_pad");
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
    int64_t group = onnx_map_attr_i(m, "group", 1);
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
    CHECK(onnx_map_conv_inputs(m, &x, &w, &b));
    if (ns == 1)
        TRY(y = glesc_conv1d(m->g, x, w, b, &p), "glesc_conv1d");
    else
        TRY(y = glesc_conv2d(m->g, x, w, b, &p), "glesc_conv2d");
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}

/* BatchNormalization, inference form (training_mode 0, one output, and
 * is_test 1 before opset 7): X [N,
 * C, D...] is reshaped to glesc's [D..., 1, C, N] (the channel in
 * dimension 2), normalized, and reshaped back. momentum only matters in
 * training. */
onnx_map_status onnx_map_batch_norm(onnx_map_ctx *m)
{
    if (onnx_map_attr_i(m, "training_mode", 0) != 0)
        return UNSUP("training_mode 1: glesc's batch norm is the inference form");
    /* before opset 7 the default is_test 0 is training (batch statistics) */
    if (m->opset < 7 && onnx_map_attr_i(m, "is_test", 0) == 0)
        return UNSUP("is_test 0 (opset %" PRId64 "): training mode", m->opset);
    if (onnx_map_attr_i(m, "spatial", 1) != 1)
        return UNSUP("spatial 0 (statistics per element, not per channel)");
    if (m->n_out > 1)
        return UNSUP("the running mean and variance outputs (training)");
    for (int i = 0; i < 5; i++)
        CHECK(onnx_map_need_float(m, i));
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
    CHECK(onnx_map_gpu_in(m, 0, &x));
    for (int i = 0; i < 4; i++)
        CHECK(onnx_map_gpu_in(m, 1 + i, &prm[i]));
    const int64_t shape[4] = {inner, 1, xv->dims[1], xv->dims[0]};
    TRY(x = glesc_reshape(m->g, x, 4, shape), "glesc_reshape");
    TRY(y = glesc_batch_norm(m->g, x, prm[0], prm[1], prm[2], prm[3],
                             onnx_map_attr_f(m, "epsilon", 1e-5f)),
        "glesc_batch_norm");
    CHECK(onnx_map_reshape_to(m, y, r, xv->dims, &y));
    onnx_map_set_out(m, 0, y, xv->type, r);
    return ONNX_MAP_OK;
}
