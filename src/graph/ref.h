/*
 * ref.h — the CPU references of the op table (ref.c), in double precision:
 * the ground truth the GPU kernels are tested against. Every function takes
 * the node (for shapes and params), its sources as contiguous floats of the
 * sources' shapes, and writes t's shape contiguously.
 */
#ifndef GLESC_GRAPH_REF_H
#define GLESC_GRAPH_REF_H

#include "graph/graph.h"

void ref_unary(const glesc_tensor *t, float *dst, const float *const *src);
void ref_binary(const glesc_tensor *t, float *dst, const float *const *src);
void ref_reduce(const glesc_tensor *t, float *dst, const float *const *src);
void ref_softmax(const glesc_tensor *t, float *dst, const float *const *src);
void ref_rms_norm(const glesc_tensor *t, float *dst, const float *const *src);
void ref_layer_norm(const glesc_tensor *t, float *dst, const float *const *src);
void ref_matmul(const glesc_tensor *t, float *dst, const float *const *src);
void ref_get_rows(const glesc_tensor *t, float *dst, const float *const *src);
void ref_set_rows(const glesc_tensor *t, float *dst, const float *const *src);
void ref_concat(const glesc_tensor *t, float *dst, const float *const *src);
void ref_cpy(const glesc_tensor *t, float *dst, const float *const *src);
void ref_rope(const glesc_tensor *t, float *dst, const float *const *src);
void ref_attention(const glesc_tensor *t, float *dst, const float *const *src);
void ref_conv(const glesc_tensor *t, float *dst, const float *const *src);
void ref_batch_norm(const glesc_tensor *t, float *dst, const float *const *src);

/* scalar references of the elementwise rows */
double ref_neg(double x, const float *p);
double ref_abs(double x, const float *p);
double ref_sqr(double x, const float *p);
double ref_sqrt(double x, const float *p);
double ref_rsqrt(double x, const float *p);
double ref_exp(double x, const float *p);
double ref_log(double x, const float *p);
double ref_sin(double x, const float *p);
double ref_cos(double x, const float *p);
double ref_tanh(double x, const float *p);
double ref_sigmoid(double x, const float *p);
double ref_relu(double x, const float *p);
double ref_gelu(double x, const float *p);
double ref_gelu_erf(double x, const float *p);
double ref_silu(double x, const float *p);
double ref_softplus(double x, const float *p);
double ref_step(double x, const float *p);
double ref_scale(double x, const float *p);
double ref_clamp(double x, const float *p);
double ref_ident(double x, const float *p);
double ref_add(double a, double b);
double ref_sub(double a, double b);
double ref_mul(double a, double b);
double ref_div(double a, double b);
double ref_max(double a, double b);
double ref_min(double a, double b);
double ref_pow(double a, double b);

/* ---- vision: pooling and shape (vops.c: shape rules; ref_vops.c:
 * references) ---- */
glesc_status graph_shape_pad(glesc_tensor *t);
glesc_status graph_shape_slice(glesc_tensor *t);
glesc_status graph_shape_gather(glesc_tensor *t);
glesc_status graph_shape_log_softmax(glesc_tensor *t);
glesc_status graph_shape_pool(glesc_tensor *t);
glesc_status graph_shape_conv_transpose(glesc_tensor *t);
void ref_pad(const glesc_tensor *t, float *dst, const float *const *src);
void ref_slice(const glesc_tensor *t, float *dst, const float *const *src);
void ref_gather(const glesc_tensor *t, float *dst, const float *const *src);
void ref_log_softmax(const glesc_tensor *t, float *dst, const float *const *src);
void ref_pool(const glesc_tensor *t, float *dst, const float *const *src);
void ref_conv_transpose(const glesc_tensor *t, float *dst, const float *const *src);
double ref_leaky_relu(double x, const float *p);
double ref_elu(double x, const float *p);
double ref_hard_sigmoid(double x, const float *p);
double ref_hard_swish(double x, const float *p);

#endif /* GLESC_GRAPH_REF_H */
