/*
 * map_ops.h — what the files of onnx-run's op table share: the helpers
 * (map_util.c: messages, attributes, values) and the mapping functions the
 * table (map.c) names, by file: map_elementwise.c (elementwise ops,
 * reductions), map_nn.c (softmax, normalization, matrix products),
 * map_vision.c (convolution, batch normalization), map_shape.c (shape ops),
 * map_vops.c (activations with ONNX's defaults, pad, slice, gather,
 * pooling, transposed convolution: glesc's vops).
 */
#ifndef ONNX_MAP_OPS_H
#define ONNX_MAP_OPS_H

#include "map.h"

#define T_FLOAT ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define T_FLOAT16 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16
#define T_BFLOAT16 ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16
#define T_INT32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32
#define T_INT64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* Writes the message into m->why; returns s. */
onnx_map_status onnx_map_say(onnx_map_ctx *m, onnx_map_status s, const char *fmt, ...);
#define UNSUP(...) onnx_map_say(m, ONNX_MAP_UNSUPPORTED, __VA_ARGS__)
#define INVALID(...) onnx_map_say(m, ONNX_MAP_ERROR, __VA_ARGS__)
/* A builder returned NULL: glesc's message. */
onnx_map_status onnx_map_glesc_failed(onnx_map_ctx *m, const char *what);
#define TRY(expr, what)                                                                            \
    do {                                                                                           \
        if (!(expr))                                                                               \
            return onnx_map_glesc_failed(m, what);                                                 \
    } while (0)
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        onnx_map_status s_ = (expr);                                                               \
        if (s_ != ONNX_MAP_OK)                                                                     \
            return s_;                                                                             \
    } while (0)

/* map_util.c (each commented there). */
const Onnx__AttributeProto *onnx_map_attr(const onnx_map_ctx *m, const char *name);
int64_t onnx_map_attr_i(const onnx_map_ctx *m, const char *name, int64_t def);
float onnx_map_attr_f(const onnx_map_ctx *m, const char *name, float def);
/* The glesc type of ONNX's FLOAT, FLOAT16 and BFLOAT16; false for others. */
bool onnx_map_float_dtype(int32_t type, glesc_dtype *out);
onnx_map_status onnx_map_need_float(onnx_map_ctx *m, int i);
void onnx_map_gshape(int rank, const int64_t *dims, int *ndim, int64_t shape[4]);
onnx_map_status onnx_map_gpu_in(onnx_map_ctx *m, int i, glesc_tensor **out);
onnx_map_status onnx_map_conv_inputs(onnx_map_ctx *m, glesc_tensor **x, glesc_tensor **w,
                                     glesc_tensor **b);
void onnx_map_set_out(onnx_map_ctx *m, int k, glesc_tensor *t, int32_t type, int rank);
onnx_map_status onnx_map_reshape_to(onnx_map_ctx *m, glesc_tensor *x, int rank, const int64_t *dims,
                                    glesc_tensor **out);
onnx_map_status onnx_map_host_ints(onnx_map_ctx *m, int i, int64_t *vals, int max, int *n);
onnx_map_status onnx_map_host_scalar(onnx_map_ctx *m, int i, float *val);
onnx_map_status onnx_map_axis_of(onnx_map_ctx *m, int64_t a, int rank, int *onnx_axis, int *gaxis);
onnx_map_status onnx_map_axes_list(onnx_map_ctx *m, int64_t *axes, int *n);
onnx_map_status onnx_map_drop_out(onnx_map_ctx *m, glesc_tensor *y, const onnx_value *xv,
                                  const bool *drop, int32_t type);
onnx_map_status onnx_map_flat2d(onnx_map_ctx *m, glesc_tensor *x, const onnx_value *xv, int oa,
                                glesc_tensor **out);

/* map_elementwise.c */
onnx_map_status onnx_map_unary(onnx_map_ctx *m);
onnx_map_status onnx_map_reciprocal(onnx_map_ctx *m);
onnx_map_status onnx_map_binary(onnx_map_ctx *m);
onnx_map_status onnx_map_mean(onnx_map_ctx *m);
onnx_map_status onnx_map_identity(onnx_map_ctx *m);
onnx_map_status onnx_map_clip(onnx_map_ctx *m);
onnx_map_status onnx_map_cast(onnx_map_ctx *m);
onnx_map_status onnx_map_castlike(onnx_map_ctx *m);
onnx_map_status onnx_map_reduce(onnx_map_ctx *m);
onnx_map_status onnx_map_argmax(onnx_map_ctx *m);

/* map_nn.c */
onnx_map_status onnx_map_softmax(onnx_map_ctx *m);
onnx_map_status onnx_map_layer_norm(onnx_map_ctx *m);
onnx_map_status onnx_map_matmul(onnx_map_ctx *m);
onnx_map_status onnx_map_gemm(onnx_map_ctx *m);

/* map_vision.c */
onnx_map_status onnx_map_attr_list(onnx_map_ctx *m, const char *name, int n, int64_t def,
                                   int64_t *out);
onnx_map_status onnx_map_conv(onnx_map_ctx *m);
onnx_map_status onnx_map_batch_norm(onnx_map_ctx *m);

/* map_shape.c */
onnx_map_status onnx_map_concat(onnx_map_ctx *m);
onnx_map_status onnx_map_reshape(onnx_map_ctx *m);
onnx_map_status onnx_map_squeeze(onnx_map_ctx *m);
onnx_map_status onnx_map_unsqueeze(onnx_map_ctx *m);
onnx_map_status onnx_map_flatten(onnx_map_ctx *m);
onnx_map_status onnx_map_transpose(onnx_map_ctx *m);
onnx_map_status onnx_map_constant(onnx_map_ctx *m);
onnx_map_status onnx_map_shape(onnx_map_ctx *m);

/* map_vops.c */
onnx_map_status onnx_map_act(onnx_map_ctx *m);
onnx_map_status onnx_map_pad(onnx_map_ctx *m);
onnx_map_status onnx_map_slice(onnx_map_ctx *m);
onnx_map_status onnx_map_gather(onnx_map_ctx *m);
onnx_map_status onnx_map_pool(onnx_map_ctx *m);
onnx_map_status onnx_map_global_pool(onnx_map_ctx *m);
onnx_map_status onnx_map_conv_transpose(onnx_map_ctx *m);

#endif
