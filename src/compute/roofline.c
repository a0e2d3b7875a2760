/*
 * roofline.c — glesc_context_roofline: the memory bandwidth a plain GLES
 * compute shader reaches on this device, measured with two kernels of
 * glsl/compute/roofline.glsl over one large buffer: a vec4 copy (reads and
 * writes) and a read-only vec4 sum (one float written per workgroup). A
 * decode step's weight bandwidth and a GEMV's are set against these
 * (gguf-bench, glesc-bench): the read-only figure is the ceiling of a
 * kernel that streams weights, the copy figure the one glesc-bench has
 * quoted so far.
 *
 * The workgroup size comes from the caps (at most 256 invocations), so a
 * context with the portable overrides measures the portable ceiling. The
 * source is filled with a pattern (not zeros, which some GPUs compress),
 * each kernel runs twice to warm up and then `iters` times, each run timed
 * on its own (GPU timer queries; CPU time around glFinish where they do not
 * measure compute work, as on llvmpipe); the median counts.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

#define ROOF_UNROLL 8
#define ROOF_DEFAULT_BYTES (256ull << 20)
#define ROOF_DEFAULT_ITERS 20

/* The workgroup size of the roofline kernels: from the caps, at most 256. */
static int roof_wg(const glesc_caps *c)
{
    int wg = 256;
    while (wg > c->max_compute_invocations || wg > c->max_workgroup_size[0] ||
           (int)(wg * sizeof(float)) > c->max_compute_shared_memory)
        wg /= 2;
    return wg;
}

static char *roof_glsl(bool read, int wg, core_err *err)
{
    emit_kernel *k = emit_kernel_create(read ? "roofline_read" : "roofline_copy");
    if (!k) {
        core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "roofline kernel");
        return NULL;
    }
    emit_kernel_comment(k, "%s",
                        read ? "read-only roofline: a sum of vec4s, one float per group"
                             : "copy roofline: vec4s from src to dst");
    emit_kernel_local_size(k, wg, 1, 1);
    emit_kernel_define(k, "ROOF_UNROLL", "%du", ROOF_UNROLL);
    if (read)
        emit_kernel_define(k, "ROOF_READ", "1");
    emit_kernel_binding(k, EMIT_VEC4, EMIT_READONLY | EMIT_RESTRICT, "src");
    if (read) {
        emit_kernel_binding(k, EMIT_FLOAT, EMIT_WRITEONLY | EMIT_RESTRICT, "partial");
        emit_kernel_shared(k, "float", "red_scratch", wg);
    } else {
        emit_kernel_binding(k, EMIT_VEC4, EMIT_WRITEONLY | EMIT_RESTRICT, "dst");
    }
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    if (read)
        emit_kernel_snippet(k, "common/reduce");
    emit_kernel_snippet(k, "compute/roofline");
    emit_kernel_line(k, read ? "roofline_read();" : "roofline_copy();");
    char *src = emit_kernel_glsl(k, err);
    emit_kernel_destroy(k);
    return src;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median time of `iters` runs of prog (after two warm-up runs). */
static glesc_status time_kernel(glesc_context *ctx, const gl_program *prog, const gl_binding *b,
                                int nb, const gl_param *prm, int np, const uint32_t groups[3],
                                int iters, uint64_t *ns)
{
    glesc_status st = GLESC_OK;
    uint64_t *t = core_calloc((size_t)iters, sizeof *t);
    if (!t)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "roofline timings");
    for (int i = 0; i < 2 && st == GLESC_OK; i++)
        st = gl_dispatch(ctx, prog, b, nb, prm, np, groups);
    for (int i = 0; i < iters && st == GLESC_OK; i++) {
        gl_timer tm;
        if ((st = gl_timer_begin(ctx, &tm)) != GLESC_OK)
            break;
        st = gl_dispatch(ctx, prog, b, nb, prm, np, groups);
        glesc_status st2 = gl_timer_end(ctx, &tm);
        if (st == GLESC_OK)
            st = st2;
        if (st == GLESC_OK)
            st = gl_timer_result(ctx, &tm, &t[i]);
        gl_timer_release(ctx, &tm);
    }
    if (st == GLESC_OK) {
        qsort(t, (size_t)iters, sizeof *t, cmp_u64);
        *ns = t[iters / 2] ? t[iters / 2] : 1;
    }
    core_free(t);
    return st;
}

GLESC_API glesc_status glesc_context_roofline(glesc_context *ctx, uint64_t bytes, int iters,
                                              glesc_roofline *out)
{
    if (!ctx || !out || iters < 0)
        return core_err_set(ctx ? &ctx->err : NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_roofline: NULL context or result, or iters %d < 0",
                            iters);
    core_err_reset(&ctx->err);
    memset(out, 0, sizeof *out);
    glesc_status bst = gl_context_bind(ctx, "glesc_context_roofline");
    if (bst != GLESC_OK)
        return bst;
    const glesc_caps *c = &ctx->caps;
    int wg = roof_wg(c);
    uint64_t per_group = (uint64_t)wg * ROOF_UNROLL * 16;
    if (!bytes)
        bytes = ROOF_DEFAULT_BYTES;
    if (bytes > c->max_storage_block_size)
        bytes = c->max_storage_block_size;
    if (bytes > (uint64_t)UINT32_MAX * 16) /* n4 is a uint */
        bytes = (uint64_t)UINT32_MAX * 16;
    bytes -= bytes % per_group;
    if (!iters)
        iters = ROOF_DEFAULT_ITERS;
    if (!bytes)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_roofline: fewer bytes than one workgroup's %llu",
                            (unsigned long long)per_group);
    uint64_t n_groups = bytes / per_group;
    uint32_t gx = n_groups < (uint64_t)c->max_workgroup_count[0]
                      ? (uint32_t)n_groups
                      : (uint32_t)c->max_workgroup_count[0];
    uint32_t groups[3] = {gx, (uint32_t)((n_groups + gx - 1) / gx), 1};
    if (groups[1] > (uint32_t)c->max_workgroup_count[1])
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "glesc_context_roofline: %llu workgroups exceed the dispatch limits",
                            (unsigned long long)n_groups);

    glesc_status st = GLESC_OK;
    gl_buffer *src = NULL, *dst = NULL, *partial = NULL;
    char *glsl[2] = {NULL, NULL};
    uint32_t *pattern = NULL;
    const gl_program *prog[2];
    for (int r = 0; r < 2 && st == GLESC_OK; r++)
        if (!(glsl[r] = roof_glsl(r == 1, wg, &ctx->err)))
            st = ctx->err.status ? ctx->err.status : GLESC_ERROR_OUT_OF_MEMORY;
    if (st == GLESC_OK)
        st = gl_program_get_batch(ctx, (const char *const *)glsl, 2, prog);
    if (st == GLESC_OK)
        st = gl_pool_acquire(ctx, bytes, GL_USAGE_ACTIVATIONS, &src);
    if (st == GLESC_OK)
        st = gl_pool_acquire(ctx, bytes, GL_USAGE_ACTIVATIONS, &dst);
    if (st == GLESC_OK)
        st = gl_pool_acquire(ctx, n_groups * sizeof(float), GL_USAGE_ACTIVATIONS, &partial);
    /* a pattern of small floats, uploaded in 4 MiB pieces */
    const uint64_t piece = 4u << 20;
    if (st == GLESC_OK && !(pattern = core_malloc(piece)))
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "roofline source");
    for (uint64_t i = 0; pattern && i < piece / 4; i++)
        pattern[i] = 0x3c000000u | (uint32_t)((i * 2654435761u) >> 12 & 0xfffffu);
    for (uint64_t off = 0; st == GLESC_OK && off < bytes; off += piece)
        st = gl_buffer_upload(ctx, src, off, pattern, bytes - off < piece ? bytes - off : piece);
    gl_param n4 = GL_PARAM_U((uint32_t)(bytes / 16));
    if (st == GLESC_OK) {
        gl_binding b[2] = {{src, 0, bytes, false}, {dst, 0, bytes, true}};
        st = time_kernel(ctx, prog[0], b, 2, &n4, 1, groups, iters, &out->copy_ns);
    }
    if (st == GLESC_OK) {
        gl_binding b[2] = {{src, 0, bytes, false}, {partial, 0, n_groups * sizeof(float), true}};
        st = time_kernel(ctx, prog[1], b, 2, &n4, 1, groups, iters, &out->read_ns);
    }
    if (st == GLESC_OK) {
        out->bytes = bytes;
        out->local_size = wg;
        out->copy_gbps = 2.0 * (double)bytes / (double)out->copy_ns;
        out->read_gbps = (double)bytes / (double)out->read_ns;
    } else {
        core_err_prefix(&ctx->err, "glesc_context_roofline (%llu bytes)",
                        (unsigned long long)bytes);
    }
    core_free(pattern);
    gl_pool_release(ctx, partial);
    gl_pool_release(ctx, dst);
    gl_pool_release(ctx, src);
    core_free(glsl[0]);
    core_free(glsl[1]);
    return st;
}

/* ---- The arithmetic peak ---- */

#define FMA_GROUPS 2048    /* workgroups: many per compute unit of any GPU */
#define FMA_MIN_NS 2000000 /* rounds grow until a run takes this long */

glesc_status compute_roofline_fma(glesc_context *ctx, int iters, int chains, bool f16,
                                  double *gflops)
{
    *gflops = 0;
    if (chains < 1 || chains > 64)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "compute_roofline_fma: %d chains (1 to 64)", chains);
    if (f16 && !ctx->f16_ext)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "compute_roofline_fma: f16 without a float16 extension "
                            "(GL_EXT_shader_explicit_arithmetic_types_float16, "
                            "GL_AMD_gpu_shader_half_float or GL_NV_gpu_shader5)");
    glesc_status st = gl_context_bind(ctx, "compute_roofline_fma");
    if (st != GLESC_OK)
        return st;
    int wg = roof_wg(&ctx->caps);
    emit_kernel *k = emit_kernel_create("roofline_fma");
    if (!k)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "FMA roofline kernel");
    emit_kernel_comment(k, "arithmetic roofline: independent chains of %s multiply-adds",
                        f16 ? "f16vec4" : "vec4");
    emit_kernel_local_size(k, wg, 1, 1);
    if (f16)
        emit_kernel_extension(k, ctx->f16_ext);
    emit_kernel_define(k, "ROOF_FMA", "1");
    if (f16)
        emit_kernel_define(k, "ROOF_F16", "1");
    emit_kernel_define(k, "ROOF_CHAINS", "%du", chains);
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_WRITEONLY | EMIT_RESTRICT, "dst");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n4");
    emit_kernel_param(k, EMIT_PARAM_FLOAT, "fma_m");
    emit_kernel_param(k, EMIT_PARAM_FLOAT, "fma_c");
    emit_kernel_snippet(k, "compute/roofline");
    emit_kernel_line(k, "roofline_fma();");
    char *glsl = emit_kernel_glsl(k, &ctx->err);
    emit_kernel_destroy(k);
    if (!glsl)
        return ctx->err.status ? ctx->err.status : GLESC_ERROR_OUT_OF_MEMORY;
    const gl_program *prog;
    gl_buffer *dst = NULL;
    st = gl_program_get(ctx, glsl, &prog);
    if (st == GLESC_OK)
        st = gl_pool_acquire(ctx, FMA_GROUPS * sizeof(float), GL_USAGE_ACTIVATIONS, &dst);
    uint32_t groups[3] = {FMA_GROUPS, 1, 1};
    gl_binding b = {dst, 0, FMA_GROUPS * sizeof(float), true};
    gl_param prm[3] = {GL_PARAM_U(4), GL_PARAM_F(0.999f), GL_PARAM_F(0.001f)};
    uint64_t ns = 0;
    /* as many rounds as make a run long beside its launch */
    while (st == GLESC_OK) {
        st = time_kernel(ctx, prog, &b, 1, prm, 3, groups, 3, &ns);
        if (st != GLESC_OK || ns >= FMA_MIN_NS || prm[0].v.u >= (1u << 22))
            break;
        prm[0].v.u *= ns > FMA_MIN_NS / 64 ? 4 : 16;
    }
    if (st == GLESC_OK)
        st = time_kernel(ctx, prog, &b, 1, prm, 3, groups, iters > 0 ? iters : 5, &ns);
    if (st == GLESC_OK)
        *gflops = 2.0 * 4 * 4 * chains * (double)prm[0].v.u * wg * FMA_GROUPS / (double)ns;
    else
        core_err_prefix(&ctx->err, "the FMA roofline (%d %s chains)", chains,
                        f16 ? "f16vec4" : "vec4");
    gl_pool_release(ctx, dst);
    core_free(glsl);
    return st;
}
