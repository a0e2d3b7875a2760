/*
 * glesc-bench — GPU throughput figures: two rooflines as glesc's shaders
 * see them, a plain copy kernel (read + write) and a read-only reduction
 * over a large buffer, and, per weight type, the GEMV that decode runs: the
 * graph's glesc_matmul with m = 1 on a weight of that type
 * (glesc_weight_new, written in the file layout), computed again and again
 * with its cached plan, as effective bandwidth (GPU bytes of weights read
 * per second) and as fractions of the copy bandwidth, of the read-only
 * roofline, and of the same reduction kernel reading exactly the weight's
 * bytes (cycled through as many copies as the GEMV, each dispatch timed
 * alone as the graph times its kernels, so it pays the same launch and
 * tail costs: the roofline of a kernel that size); both the median of
 * their kernels' times (median_s). The copies are one
 * graph of that many matmuls, each kernel timed alone; "setup s" is the
 * time from the first weight to the first timed run (writing the weights,
 * planning, compiling).
 * With --gemm M, the same matmul with M columns instead (the prefill's
 * GEMM where M > 8) on one weight, as TFLOP/s (2·N·K·M per run) and as a
 * fraction of the fp32 multiply-add peak that a plain kernel of independent
 * multiply-adds reaches in the same run (compute_roofline_fma: the best of
 * 8, 16 and 32 chains; the f16 rate beside it where the driver has float16_t
 * arithmetic). With --gemm a shape may also be one of the prefill's fused
 * kernels: N1+N2+N3xK a grouped matmul (q/k/v), N*2xK the gate/up pair (N
 * rows each), a leading n for a folded rms_norm(x)·w, e.g. TinyLlama's
 * --shapes n2048+256+256x2048,n5632*2x2048,2048x2048,2048x5632.
 * The time is the kernel's GPU time from the graph's timing option (CPU time
 * around glFinish where the driver's timer queries miss compute work, as on
 * llvmpipe).
 *
 * White-box by design (the copy kernel is emitted and dispatched through
 * the internal gl/ and emit/ layers): built, not installed.
 *
 * With --attn N (a list), causal prefill attention of N queries against
 * their N keys (--attn-heads H/HKV/D: TinyLlama's 32/4/64 by default), f32
 * and f16 keys and values, as GFLOP/s and its fraction of the same peak.
 * usage: glesc-bench [--iters N] [--types q4_0,q8_0,...] [--shapes 4096x4096,11008x4096]
 *                    [--copy-mib N] [--warm-ms N] [--gemm M] [--attn N,...]
 *                    [--attn-heads H/HKV/D] [--portable]
 * --portable: no subgroups, 128 invocations, 16 KiB of shared memory and
 * 128 MiB storage blocks (what GLES guarantees), the fallback's speed.
 * --warm-ms: how long the GPU is kept busy before each GEMV or GEMM timing
 * (default 100; 0: not at all), so that each runs at the clocks decode and
 * prefill see.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-bench/glesc-bench.h"

int fail(glesc_context *ctx, const char *what)
{
    fprintf(stderr, "glesc-bench: %s: %s\n", what, glesc_context_errmsg(ctx));
    glesc_context_destroy(ctx);
    return 1;
}

/* The context (with the portable limits on --portable), its device and
 * caps printed; NULL after a message. */
static glesc_context *context_open(const options *o)
{
    glesc_context_options opts;
    glesc_context_options_init(&opts);
    if (o->portable)
        glesc_context_options_limits(&opts, "portable");
    glesc_context *ctx;
    if (glesc_context_create(&opts, &ctx) != GLESC_OK) {
        fprintf(stderr, "glesc-bench: %s\n", glesc_last_errmsg());
        return NULL;
    }
    const glesc_caps *caps = glesc_context_caps(ctx);
    printf("device: %s (%s), timer: %s\n", caps->renderer, caps->version,
           caps->has_timer_query ? "GL_EXT_disjoint_timer_query" : "CPU around glFinish");
    printf("caps: %d invocations, %d bytes shared, subgroups %s (size %d), storage blocks of "
           "%llu bytes%s\n",
           caps->max_compute_invocations, caps->max_compute_shared_memory,
           caps->has_subgroup ? "yes" : "no", caps->subgroup_size,
           (unsigned long long)caps->max_storage_block_size, o->portable ? " (--portable)" : "");
    return ctx;
}

/* What the GEMV table is set against: two buffers of r->bytes (a holds
 * random data), the read-only kernel over them and the bandwidths. */
typedef struct rooflines {
    uint64_t bytes;
    gl_buffer *a, *b;
    gl_binding cb[2];
    const gl_program *rp;
    uint32_t cg[3];
    double copy_bw, read_bw;
} rooflines;

/* Random contents in a (no memory compression can shortcut them). */
static int fill_random(glesc_context *ctx, gl_buffer *a, uint64_t bytes)
{
    size_t chunk = 4u << 20;
    uint32_t *r = malloc(chunk), seed = 7;
    for (size_t i = 0; r && i < chunk / 4; i++)
        r[i] = seed = seed * 1664525u + 1013904223u;
    for (uint64_t off = 0; r && off < bytes; off += chunk)
        if (gl_buffer_upload(ctx, a, off, r, (size_t)CORE_MIN((uint64_t)chunk, bytes - off)))
            return -1;
    free(r);
    return 0;
}

/* The rooflines: copy and read-only bandwidth over the whole buffers, and
 * what an empty kernel costs timed alone and chained; 0, or fail()'s 1. */
static int rooflines_time(glesc_context *ctx, const options *o, rooflines *r)
{
    const glesc_caps *caps = glesc_context_caps(ctx);
    r->bytes =
        o->copy_mib ? o->copy_mib << 20 : CORE_MIN(caps->max_storage_block_size / 2, 1ull << 30);
    r->bytes &= ~(uint64_t)15;
    if (gl_pool_acquire(ctx, r->bytes, GL_USAGE_ACTIVATIONS, &r->a) ||
        gl_pool_acquire(ctx, r->bytes, GL_USAGE_ACTIVATIONS, &r->b))
        return fail(ctx, "copy buffers");
    if (fill_random(ctx, r->a, r->bytes))
        return fail(ctx, "copy buffers");
    char *src = copy_glsl();
    const gl_program *p;
    if (gl_program_get(ctx, src, &p))
        return fail(ctx, "copy kernel");
    core_free(src);
    r->cb[0] = (gl_binding){r->a, 0, 0, false};
    r->cb[1] = (gl_binding){r->b, 0, 0, true};
    gl_param cp = GL_PARAM_U(r->bytes / 16);
    grid_of(r->bytes / 16, r->cg);
    double sec;
    if (time_dispatch(ctx, p, r->cb, 2, &cp, 1, r->cg, o->iters, 0, 0, 0, &sec))
        return fail(ctx, "copy timing");
    r->copy_bw = 2.0 * (double)r->bytes / sec;
    printf("copy: %.1f MiB in %.1f us: %.1f GB/s (read + write)\n", (double)r->bytes / 1048576.0,
           sec * 1e6, r->copy_bw / 1e9);
    /* Read-only roofline over the same buffer (b receives nothing). */
    char *rsrc = reduce_glsl();
    if (gl_program_get(ctx, rsrc, &r->rp))
        return fail(ctx, "read kernel");
    core_free(rsrc);
    gl_param rprm[2] = {GL_PARAM_U(r->bytes / 16), GL_PARAM_U(0)};
    if (time_dispatch(ctx, r->rp, r->cb, 2, rprm, 2, r->cg, o->iters, 0, 0, 0, &sec))
        return fail(ctx, "read timing");
    r->read_bw = (double)r->bytes / sec;
    printf("read: %.1f MiB in %.1f us: %.1f GB/s (read only)\n", (double)r->bytes / 1048576.0,
           sec * 1e6, r->read_bw / 1e9);
    /* The floor of a timed kernel: one workgroup reading nothing. */
    gl_param eprm[2] = {GL_PARAM_U(0), GL_PARAM_U(0)};
    if (time_each(ctx, r->rp, r->cb, 2, eprm, 2, (uint32_t[3]){1, 1, 1}, o->iters, 0, 0, 0, &sec))
        return fail(ctx, "empty kernel timing");
    printf("empty kernel, timed alone: %.2f us\n", sec * 1e6);
    /* What a chain of dependent kernels pays per link (a decode step is
     * one): back-to-back dispatches, each writing what the next writes
     * (a barrier between every two), under one timer. */
    if (time_dispatch(ctx, r->rp, r->cb, 2, eprm, 2, (uint32_t[3]){1, 1, 1}, o->iters, 0, 0, 0,
                      &sec))
        return fail(ctx, "empty kernel timing");
    printf("empty kernel, chained (a barrier between each): %.2f us\n", sec * 1e6);
    return 0;
}

/* The GEMV table: per selected type and shape, the graph's GEMV against
 * the rooflines; destroys the context. */
static int gemv_table(glesc_context *ctx, const options *o, rooflines *r)
{
    double sec;
    /* the GPU kept busy before each timing: the read kernel over the
     * whole buffer */
    warmer wm = {ctx,       r->rp,     r->cb, {GL_PARAM_U(r->bytes / 16), GL_PARAM_U(0)},
                 {0, 0, 0}, o->warm_ms};
    grid_of(r->bytes / 16, wm.g);
    printf("\n%-8s %-11s %9s %9s %8s %8s %8s %9s %7s  %s\n", "type", "N x K", "us", "GB/s",
           "of copy", "of read", "of same", "same us", "setup s", "kernel");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        glesc_dtype t = all_types[ti];
        if (!o->types[ti])
            continue;
        for (const char *s = o->shapes_arg; s && *s;) {
            int N = 0, K = 0; /* checked by check_shapes */
            sscanf(s, "%dx%d", &N, &K);
            s = strchr(s, ',');
            s = s ? s + 1 : NULL;
            /* Weights: a quantized random pool tiled over the matrix. */
            float *f;
            size_t pool_bytes;
            void *blocks = weight_pool(t, N, K, &f, &pool_bytes);
            if (!f || !blocks)
                return fail(ctx, "weights");
            uint64_t row_bytes = quant_gpu_row_bytes(t, K);
            if (!row_bytes) /* a plain type */
                row_bytes = (uint64_t)glesc_dtype_row_bytes(t, K);
            uint64_t wbytes = row_bytes * (uint64_t)N; /* on the GPU */
            /* Enough copies of the weight that they do not fit in the GPU's
             * last-level cache together (e.g. 50 MB on an H200): each timed
             * compute reads its weights from memory, as decode does. */
            int copies = (int)CORE_MIN(64u, (256ull << 20) / wbytes + 1);
            char how[160];
            double setup;
            if (time_gemv(ctx, t, N, K, blocks, pool_bytes, f, copies, CORE_MAX(o->iters, copies),
                          &wm, &sec, &setup, how, sizeof how))
                return fail(ctx, "graph gemv");
            /* the read-only kernel over exactly these bytes, cycled through
             * as many copies as fit the buffer (a, bytes long) */
            uint64_t w4 = (wbytes + 15) / 16;
            int rcopies = (int)CORE_MIN((uint64_t)copies, r->bytes / 16 / w4);
            double same = 0;
            uint32_t rg[3];
            grid_of(w4, rg);
            gl_param sprm[2] = {GL_PARAM_U(w4), GL_PARAM_U(0)};
            if (rcopies >= 1 && (warm_gpu(&wm) || time_each(ctx, r->rp, r->cb, 2, sprm, 2, rg,
                                                            CORE_MAX(o->iters, copies), rcopies, 1,
                                                            (uint32_t)w4, &same)))
                return fail(ctx, "read timing (same size)");
            double bw = (double)wbytes / sec;
            printf("%-8s %5dx%-5d %9.2f %9.1f %7.1f%% %7.1f%% %7.1f%% %9.2f %7.2f  %s\n",
                   glesc_dtype_name(t), N, K, sec * 1e6, bw / 1e9, 100.0 * bw / r->copy_bw,
                   100.0 * bw / r->read_bw, same > 0 ? 100.0 * same / sec : 0.0, same * 1e6, setup,
                   how);
            fflush(stdout);
            gl_pool_trim(ctx, 0);
            free(f);
            free(blocks);
        }
    }
    gl_pool_release(ctx, r->a);
    gl_pool_release(ctx, r->b);
    glesc_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (check_shapes(o.shapes_arg, o.types, o.gemm_m > 0))
        return 2;
    glesc_context *ctx = context_open(&o);
    if (!ctx)
        return 1;
    rooflines r;
    if (rooflines_time(ctx, &o, &r))
        return 1;
    if (o.n_attn || o.gemm_m) { /* against the FMA peak: the roofline buffers go */
        gl_pool_release(ctx, r.a);
        gl_pool_release(ctx, r.b);
        double peak = fma_peak(ctx);
        if (!peak)
            return fail(ctx, "FMA peak");
        return o.n_attn
                   ? attn_table(ctx, o.attn_n, o.n_attn, o.heads[0], o.heads[1], o.heads[2],
                                o.iters, o.warm_ms, peak)
                   : gemm_table(ctx, o.types, o.shapes_arg, o.gemm_m, o.iters, o.warm_ms, peak);
    }
    return gemv_table(ctx, &o, &r);
}
