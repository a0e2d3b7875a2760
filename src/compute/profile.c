/*
 * profile.c — thresholds measured on the device rather than guessed. Today one:
 * up to how many activation columns the matrix-vector kernel (weights read
 * once, every column at once) beats the tiled matrix-matrix kernel. It
 * depends on the GPU's bandwidth-to-compute ratio: on a big GPU the GEMV
 * stays ahead longer than on llvmpipe.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

/* Seconds for one compute of W[k, n] x X[k, m] with the given options (best
 * of three after a warm-up); negative on failure. */
static double time_matmul(glesc_context *ctx, glesc_tensor *w, int64_t k, int64_t m, int max_m)
{
    glesc_graph *g = glesc_graph_create(ctx);
    if (!g)
        return -1;
    glesc_graph_options o = {.gemv_max_m = max_m, .fusion = 1};
    glesc_graph_set_options(g, &o);
    double best = -1;
    int64_t shape[2] = {k, m};
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, shape);
    float *xs = core_calloc((size_t)(k * m), sizeof *xs);
    if (x && xs && glesc_tensor_write_f32(x, xs, (size_t)(k * m)) == GLESC_OK) {
        glesc_tensor *y = glesc_matmul(g, w, x);
        for (int rep = 0; y && rep < 3; rep++) {
            gl_finish(ctx, 10ull * 1000000000ull);
            uint64_t t0 = core_time_ns();
            if (glesc_graph_compute(g, &y, 1) != GLESC_OK ||
                gl_finish(ctx, 10ull * 1000000000ull) != GLESC_OK) {
                best = -1;
                break;
            }
            double s = (double)(core_time_ns() - t0) * 1e-9;
            if (rep > 0 && (best < 0 || s < best))
                best = s;
        }
    }
    core_free(xs);
    glesc_graph_destroy(g);
    return best;
}

static int measure(glesc_context *ctx)
{
    const int64_t k = 512, n = 512;
    int64_t shape[2] = {k, n};
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F16, 2, shape);
    if (!w)
        return 8;
    uint16_t *wd = core_calloc((size_t)(k * n), sizeof *wd);
    int best = 1;
    if (wd && glesc_tensor_write(w, wd, (size_t)(k * n) * 2) == GLESC_OK) {
        static const int ms[] = {2, 4, 8};
        for (size_t i = 0; i < CORE_ARRAY_LEN(ms); i++) {
            double t_gemv = time_matmul(ctx, w, k, ms[i], 8);
            double t_gemm = time_matmul(ctx, w, k, ms[i], 1);
            if (t_gemv < 0 || t_gemm < 0 || t_gemv > t_gemm)
                break;
            best = ms[i];
        }
    }
    core_free(wd);
    glesc_weight_free(w);
    return best;
}

static bool cache_file(glesc_context *ctx, char *path, size_t n)
{
    if (!ctx->cache_dir)
        return false;
    sbuf key;
    sbuf_init(&key);
    sbuf_appendf(&key, "%s|%s|%s|gemv_max_m v1", ctx->caps.vendor, ctx->caps.renderer,
                 ctx->caps.version);
    bool ok = sbuf_str(&key) != NULL;
    if (ok) {
        char hex[33];
        core_hash128_hex(core_hash128_bytes(key.data, key.len), hex);
        snprintf(path, n, "%s/tune-%s.txt", ctx->cache_dir, hex);
    }
    sbuf_free(&key);
    return ok;
}

int compute_tune_gemv_max_m(glesc_context *ctx)
{
    compute_state *cs = compute_state_get(ctx);
    if (cs && cs->gemv_max_m)
        return cs->gemv_max_m;
    int v = 0;
    const char *env = core_env("GLESC_GEMV_MAX_M");
    if (env)
        v = atoi(env);
    char path[4300];
    bool cached = cache_file(ctx, path, sizeof path);
    if (v < 1 || v > 8) {
        v = 0;
        FILE *f = cached ? fopen(path, "r") : NULL;
        if (f) {
            if (fscanf(f, "%d", &v) != 1 || v < 1 || v > 8)
                v = 0;
            fclose(f);
        }
        if (!v) {
            v = measure(ctx);
            core_log(CORE_LOG_INFO, "measured: GEMV beats GEMM up to m = %d", v);
            f = cached ? fopen(path, "w") : NULL;
            if (f) {
                fprintf(f, "%d\n", v);
                fclose(f);
            }
        }
    }
    if (cs)
        cs->gemv_max_m = v;
    return v;
}
