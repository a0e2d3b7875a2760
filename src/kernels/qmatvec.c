/*
 * qmatvec.c — see qmatvec.h. Both kernels pull elements four at a time with
 * the type snippet's dq4(block_word, j), so adding a type means adding its
 * snippet and layout row (src/quant/gpu.c), nothing here.
 */
#include "emit/emit.h"
#include "kernels/qmatvec.h"
#include "quant/quant.h"

static bool add_type(emit_kernel *k, glesc_dtype t, core_err *err)
{
    const char *snippet = quant_gpu_snippet(t);
    if (!snippet) {
        core_err_set(err, GLESC_ERROR_UNSUPPORTED, "no GPU kernel for weight type %s",
                     glesc_dtype_name(t) ? glesc_dtype_name(t) : "?");
        return false;
    }
    emit_kernel_comment(k, "weights: %s (glsl/%s.glsl)", glesc_dtype_name(t), snippet);
    emit_kernel_define(k, "QW", "qw");
    emit_kernel_snippet(k, "quant/common");
    emit_kernel_snippet(k, snippet);
    emit_kernel_define(k, "QG", "(QK / 4u)");
    return true;
}

char *kern_dequant_glsl(glesc_dtype t, core_err *err)
{
    emit_kernel *k = emit_kernel_create("dequant");
    if (!k) {
        core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "dequant kernel");
        return NULL;
    }
    char *glsl = NULL;
    emit_kernel_local_size(k, 64, 1, 1);
    emit_kernel_binding(k, EMIT_UINT, EMIT_READONLY, "qw");
    emit_kernel_binding(k, EMIT_VEC4, EMIT_WRITEONLY, "outv");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    if (add_type(k, t, err)) {
        emit_kernel_line(k, "uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * "
                            "gl_NumWorkGroups.x * WG_SIZE;");
        emit_kernel_line(k, "if (i < n4) {");
        emit_kernel_line(k, "outv[i] = dq4((i / QG) * QWORDS, i %% QG);");
        emit_kernel_line(k, "}");
        glsl = emit_kernel_glsl(k, err);
    }
    emit_kernel_destroy(k);
    return glsl;
}

char *kern_qgemv_glsl(glesc_dtype t, int m, int local_size, bool subgroup, core_err *err)
{
    emit_kernel *k = emit_kernel_create("gemv");
    if (!k) {
        core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "gemv kernel");
        return NULL;
    }
    char *glsl = NULL;
    emit_kernel_comment(k,
                        "y[c*N + n] = sum_k W[n, k] * x[c*K + k], c < %d; one workgroup "
                        "per row",
                        m);
    emit_kernel_local_size(k, local_size, 1, 1);
    emit_kernel_binding(k, EMIT_UINT, EMIT_READONLY | EMIT_RESTRICT, "qw");
    emit_kernel_binding(k, EMIT_VEC4, EMIT_READONLY | EMIT_RESTRICT, "x");
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_WRITEONLY | EMIT_RESTRICT, "y");
    emit_kernel_param(k, EMIT_PARAM_UINT, "K4");
    emit_kernel_param(k, EMIT_PARAM_UINT, "N");
    emit_kernel_param(k, EMIT_PARAM_UINT, "row_words");
    emit_kernel_define(k, "M", "%d", m);
    if (subgroup) {
        emit_kernel_extension(k, "GL_KHR_shader_subgroup_basic");
        emit_kernel_extension(k, "GL_KHR_shader_subgroup_arithmetic");
        emit_kernel_define(k, "GLESC_SUBGROUP_ARITH", "1");
    }
    emit_kernel_shared(k, "float", "red_scratch", local_size);
    emit_kernel_snippet(k, "common/reduce");
    if (add_type(k, t, err)) {
        emit_kernel_line(k, "uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;");
        emit_kernel_line(k, "if (row >= N) {");
        emit_kernel_line(k, "return; // uniform across the workgroup");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "uint base = row * row_words;");
        emit_kernel_line(k, "float acc[M];");
        emit_kernel_line(k, "for (int c = 0; c < M; c++) {");
        emit_kernel_line(k, "acc[c] = 0.0;");
        emit_kernel_line(k, "}");
        /* Work items of 8 vec4 groups (32 elements: a legacy block or a
         * K-quant sub-block), so each thread reads a contiguous run and the
         * scales it decodes serve 32 elements; then the tail (K % 32). */
        emit_kernel_line(k, "uint n_items = K4 / 8u;");
        emit_kernel_line(k,
                         "for (uint it = gl_LocalInvocationIndex; it < n_items; it += WG_SIZE) {");
        emit_kernel_line(k, "for (uint u = 0u; u < 8u; u++) {");
        emit_kernel_line(k, "uint g = it * 8u + u;");
        emit_kernel_line(k, "vec4 w = dq4((g / QG) * QWORDS + base, g %% QG);");
        emit_kernel_line(k, "for (int c = 0; c < M; c++) {");
        emit_kernel_line(k, "acc[c] += dot(w, x[uint(c) * K4 + g]);");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "}");
        emit_kernel_line(
            k, "for (uint g = n_items * 8u + gl_LocalInvocationIndex; g < K4; g += WG_SIZE) {");
        emit_kernel_line(k, "vec4 w = dq4((g / QG) * QWORDS + base, g %% QG);");
        emit_kernel_line(k, "for (int c = 0; c < M; c++) {");
        emit_kernel_line(k, "acc[c] += dot(w, x[uint(c) * K4 + g]);");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "for (int c = 0; c < M; c++) {");
        emit_kernel_line(k, "float s = wg_reduce_sum(acc[c]);");
        emit_kernel_line(k, "if (gl_LocalInvocationIndex == 0u) {");
        emit_kernel_line(k, "y[uint(c) * N + row] = s;");
        emit_kernel_line(k, "}");
        emit_kernel_line(k, "}");
        glsl = emit_kernel_glsl(k, err);
    }
    emit_kernel_destroy(k);
    return glsl;
}
