/*
 * roofline.c — what glesc-bench measures against (see main.c): the copy
 * and read-only roofline kernels (emitted through the internal emit/ layer),
 * their grid, the weights' random quantized pool and the fp32 multiply-add
 * peak.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-bench/glesc-bench.h"

/* The roofline kernel: each invocation copies 4 vec4 spaced a workgroup
 * apart (coalesced, several loads in flight), no grid-stride loop. */
char *copy_glsl(void)
{
    emit_kernel *k = emit_kernel_create("copy");
    emit_kernel_local_size(k, 256, 1, 1);
    emit_kernel_binding(k, EMIT_VEC4, EMIT_READONLY | EMIT_RESTRICT, "src");
    emit_kernel_binding(k, EMIT_VEC4, EMIT_WRITEONLY | EMIT_RESTRICT, "dst");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    emit_kernel_line(k, "uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;");
    emit_kernel_line(k, "uint base = group * WG_SIZE * 4u + gl_LocalInvocationIndex;");
    emit_kernel_line(k, "vec4 v[4];");
    emit_kernel_line(k, "for (uint u = 0u; u < 4u; u++) {");
    emit_kernel_line(k, "uint i = base + u * WG_SIZE;");
    emit_kernel_line(k, "v[u] = i < n4 ? src[i] : vec4(0.0);");
    emit_kernel_line(k, "}");
    emit_kernel_line(k, "for (uint u = 0u; u < 4u; u++) {");
    emit_kernel_line(k, "uint i = base + u * WG_SIZE;");
    emit_kernel_line(k, "if (i < n4) {");
    emit_kernel_line(k, "dst[i] = v[u];");
    emit_kernel_line(k, "}");
    emit_kernel_line(k, "}");
    char *s = emit_kernel_glsl(k, NULL);
    emit_kernel_destroy(k);
    return s;
}

/* The read-only roofline: each invocation sums 4 vec4 spaced a workgroup
 * apart from element off4 on; the sums are stored only when one hits a
 * value random data never gives, so nothing but the loads costs. */
char *reduce_glsl(void)
{
    emit_kernel *k = emit_kernel_create("read");
    emit_kernel_local_size(k, 256, 1, 1);
    emit_kernel_binding(k, EMIT_VEC4, EMIT_READONLY | EMIT_RESTRICT, "src");
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_WRITEONLY | EMIT_RESTRICT, "dst");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    emit_kernel_param(k, EMIT_PARAM_UINT, "off4");
    emit_kernel_line(k, "uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;");
    emit_kernel_line(k, "uint base = group * WG_SIZE * 4u + gl_LocalInvocationIndex;");
    emit_kernel_line(k, "vec4 s = vec4(0.0);");
    emit_kernel_line(k, "for (uint u = 0u; u < 4u; u++) {");
    emit_kernel_line(k, "uint i = base + u * WG_SIZE;");
    emit_kernel_line(k, "s += i < n4 ? src[off4 + i] : vec4(0.0);");
    emit_kernel_line(k, "}");
    emit_kernel_line(k, "if (s.x + s.y + s.z + s.w == -1234.5) {");
    emit_kernel_line(k, "dst[group] = s.x;");
    emit_kernel_line(k, "}");
    char *text = emit_kernel_glsl(k, NULL);
    emit_kernel_destroy(k);
    return text;
}

/* Workgroups of 1024 vec4 (4 per invocation) over n4, as a 2-D grid. */
void grid_of(uint64_t n4, uint32_t g[3])
{
    uint32_t groups = (uint32_t)((n4 + 1023) / 1024);
    g[0] = CORE_MIN(groups, 65535u);
    g[1] = (groups + g[0] - 1) / g[0];
    g[2] = 1;
}

/* A weight of type t and N x K elements in the file layout: a quantized
 * random pool (at most 2^20 elements) tiled over it; its floats in *pool,
 * its blocks returned (free both), their bytes in *pool_bytes. */
void *weight_pool(glesc_dtype t, int N, int K, float **pool, size_t *pool_bytes)
{
    int64_t pool_n = CORE_MIN((int64_t)N * K, (int64_t)1 << 20);
    pool_n -= pool_n % quant_gpu_block_elems(t);
    float *f = malloc((size_t)pool_n * sizeof *f);
    uint32_t seed = 1;
    for (int64_t i = 0; f && i < pool_n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
    *pool_bytes = (size_t)glesc_dtype_row_bytes(t, pool_n);
    void *blocks = malloc(*pool_bytes);
    if (f && blocks)
        quant_quantize(t, f, blocks, pool_n);
    *pool = f;
    return blocks;
}

/* The fp32 multiply-add peak in MFLOP/s: the best of 8, 16 and 32
 * independent vec4 chains (more chains, more latency hidden per
 * invocation), printed with the f16 rate where the driver has float16_t
 * arithmetic; 0 when a measurement fails. */
double fma_peak(glesc_context *ctx)
{
    double peak = 0, rate;
    for (int chains = 8; chains <= 32; chains *= 2) {
        if (compute_roofline_fma(ctx, 0, chains, false, &rate))
            return 0;
        printf("fma fp32, %2d vec4 chains: %.1f TFLOP/s\n", chains, rate / 1e3);
        peak = CORE_MAX(peak, rate);
    }
    printf("fma: %.1f TFLOP/s (the best of those: fp32 multiply-adds of a plain kernel, 2 FLOP "
           "each)\n",
           peak / 1e3);
    printf("f16 arithmetic: %s\n", ctx->f16_ext ? ctx->f16_ext : "none");
    for (int chains = 8; ctx->f16_ext && chains <= 32; chains *= 2) {
        if (compute_roofline_fma(ctx, 0, chains, true, &rate))
            return 0;
        printf("fma f16, %2d f16vec4 chains: %.1f TFLOP/s\n", chains, rate / 1e3);
    }
    return peak;
}
