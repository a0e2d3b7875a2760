/*
 * tables.c — glesc-bench's tables against the fp32 multiply-add peak (see
 * main.c): --gemm M, the prefill's matmuls and fused kernels as TFLOP/s,
 * and --attn N, causal prefill attention as GFLOP/s.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-bench/glesc-bench.h"

/* --gemm M: the matmul of M columns per type and shape as TFLOP/s and its
 * fraction of the FMA peak (MFLOP/s). Frees the context. */
int gemm_table(glesc_context *ctx, const bool types[N_TYPES], const char *shapes_arg, int M,
               int iters, int warm_ms, double peak)
{
    printf("\n%-8s %17s %6s %10s %9s %8s  %s\n", "type", "N x K", "M", "us", "TFLOP/s", "of fma",
           "kernel");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        glesc_dtype t = all_types[ti];
        if (!types[ti])
            continue;
        for (const char *s = shapes_arg; s && *s;) {
            int N[MAX_MEMB], nn = 0, K = 0, rows = 0;
            bool pair, norm, res;
            parse_shape(s, N, &nn, &K, &pair, &norm, &res); /* checked by check_shapes */
            char name[32];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(s, ","), s);
            s = strchr(s, ',');
            s = s ? s + 1 : NULL;
            for (int i = 0; i < nn; i++)
                rows = CORE_MAX(rows, N[i]);
            float *f, *x = malloc((size_t)K * (size_t)M * sizeof *x);
            size_t pool_bytes;
            void *blocks = weight_pool(t, rows, K, &f, &pool_bytes);
            if (x)
                fill_uniform(x, (size_t)K * (size_t)M);
            char how[200];
            double sec;
            if (!f || !x || !blocks ||
                time_graph(ctx, t, N, nn, pair, norm, res, K, M, blocks, pool_bytes, x, 1, iters,
                           warm_ms, &sec, how, sizeof how))
                return fail(ctx, "graph gemm");
            int all = pair ? 2 * N[0] : 0;
            for (int i = 0; !pair && i < nn; i++)
                all += N[i];
            double flops = 2.0 * all * (double)K * M / sec;
            printf("%-8s %17s %6d %10.1f %9.2f %7.1f%%  %s\n", glesc_dtype_name(t), name, M,
                   sec * 1e6, flops / 1e12, 100.0 * flops / (peak * 1e9), how);
            fflush(stdout);
            gl_pool_trim(ctx, 0);
            free(f);
            free(x);
            free(blocks);
        }
    }
    glesc_context_destroy(ctx);
    return 0;
}

/* --attn N: causal prefill attention of N queries against their own N
 * keys, n_head query heads of d over n_head_kv key/value heads (f32 and f16
 * keys and values), as GFLOP/s (2·(d + d)·n_head per visible query-key pair,
 * N·(N + 1)/2 of them a head) and its fraction of the FMA peak (MFLOP/s).
 * Frees the context. */
int attn_table(glesc_context *ctx, const int *lens, int nn, int n_head, int n_head_kv, int d,
               int iters, int warm_ms, double peak)
{
    printf("\n%-4s %6s %14s %10s %10s %8s  %s\n", "kv", "N", "heads", "us", "GFLOP/s", "of fma",
           "kernel");
    for (int kt = 0; kt < 2; kt++) {
        glesc_dtype kvt = kt ? GLESC_DTYPE_F16 : GLESC_DTYPE_F32;
        for (int i = 0; i < nn; i++) {
            int64_t n = lens[i];
            size_t nq = (size_t)d * (size_t)n * (size_t)n_head,
                   nk = (size_t)d * (size_t)n * n_head_kv;
            float *x = malloc(CORE_MAX(nq, nk) * sizeof *x);
            glesc_graph *g = glesc_graph_create(ctx);
            glesc_graph_options go = {0};
            go.timing = true;
            if (!x || !g || glesc_graph_set_options(g, &go) != GLESC_OK) {
                free(x);
                glesc_graph_destroy(g);
                return fail(ctx, "attention graph");
            }
            fill_uniform(x, CORE_MAX(nq, nk));
            glesc_tensor *q = glesc_tensor_new(g, GLESC_DTYPE_F32, 3, (int64_t[]){d, n, n_head});
            glesc_tensor *k = glesc_tensor_new(g, kvt, 3, (int64_t[]){d, n, n_head_kv});
            glesc_tensor *v = glesc_tensor_new(g, kvt, 3, (int64_t[]){d, n, n_head_kv});
            glesc_tensor *y = NULL;
            if (q && k && v && glesc_tensor_write_f32(q, x, nq) == GLESC_OK &&
                glesc_tensor_write_f32(k, x, nk) == GLESC_OK &&
                glesc_tensor_write_f32(v, x, nk) == GLESC_OK)
                y = glesc_attention(g, q, k, v, NULL, 1.0f / sqrtf((float)d), true);
            free(x);
            uint64_t t0 = core_time_ns(), warm_ns = (uint64_t)warm_ms * 1000000u, ns = 0;
            bool ok = y != NULL;
            for (int r = 0; ok && (r < 3 || core_time_ns() - t0 < warm_ns); r++)
                ok = glesc_graph_compute(g, &y, 1) == GLESC_OK;
            const char *glsl = ok ? glesc_graph_last_glsl(g) : NULL;
            const char *l = glsl ? strstr(glsl, "// attention") : NULL;
            for (int r = 0; ok && r < iters; r++) {
                glesc_compute_stats st;
                ok = glesc_graph_compute(g, &y, 1) == GLESC_OK;
                glesc_graph_stats(g, &st);
                ok = ok && st.n_kernel_times == 1;
                if (ok)
                    ns += st.kernel_times[0].gpu_ns;
            }
            if (!ok) {
                glesc_graph_destroy(g);
                return fail(ctx, "attention");
            }
            double sec = (double)ns * 1e-9 / iters;
            double flops = 4.0 * d * n_head * ((double)n * (double)(n + 1) / 2) / sec;
            char heads[32];
            snprintf(heads, sizeof heads, "%d/%d x %d", n_head, n_head_kv, d);
            printf("%-4s %6lld %14s %10.1f %10.1f %7.1f%%  %.*s\n", glesc_dtype_name(kvt),
                   (long long)n, heads, sec * 1e6, flops / 1e9, 100.0 * flops / (peak * 1e9),
                   l ? (int)strcspn(l + 3, "\n") : 0, l ? l + 3 : "");
            fflush(stdout);
            glesc_graph_destroy(g);
            gl_pool_trim(ctx, 0);
        }
    }
    glesc_context_destroy(ctx);
    return 0;
}
