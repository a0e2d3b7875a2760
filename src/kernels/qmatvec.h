/*
 * qmatvec.h — kernels over weights of any GPU-supported type (f32, f16,
 * bf16 and the ggml block types), read through the glsl/quant/ snippets:
 * whole-tensor dequantization (for tests and conversions) and the
 * dequantizing matrix-vector product used for decode.
 */
#ifndef GLESC_KERNELS_QMATVEC_H
#define GLESC_KERNELS_QMATVEC_H

#include "core/core.h"

/* Dequantize kernel: bindings (qw: uint words, out: vec4), param (n4: number
 * of 4-element groups); one invocation per group, local size 64. */
char *kern_dequant_glsl(glesc_dtype t, core_err *err);

/* GEMV: y[c * N + n] = sum_k W[n, k] * x[c * K + k] for c < m, W row-major
 * with rows of K elements (K a multiple of the type's GPU block).
 * Bindings: (qw: uint words of W, x: vec4, y: float).
 * Params: (K4 = K / 4, N, row_words = words per row of W).
 * One workgroup per row: groups = (min(N, 65535), ceil(N / 65535), 1).
 * subgroup: reduce with GL_KHR_shader_subgroup_arithmetic. */
char *kern_qgemv_glsl(glesc_dtype t, int m, int local_size, bool subgroup, core_err *err);

#endif
