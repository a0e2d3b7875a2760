/*
 * timing.c — how glesc-bench times (see main.c for what it measures): a
 * kernel dispatched again and again under one timer (time_dispatch) or each
 * dispatch alone (time_each, their median), keeping the GPU's clocks up
 * before a timing (warm_gpu), and the matmuls through the graph: the
 * decode's GEMV on weights that do not fit the cache together (time_gemv)
 * and the prefill's GEMM and fused kernels (time_graph).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-bench/glesc-bench.h"

/* Mean GPU time of iters dispatches (after 3 warm-up runs), in seconds.
 * With cycle > 1, parameter cycle_param of dispatch i is i % cycle times
 * cycle_step (a buffer offset: each dispatch reads other memory). */
int time_dispatch(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb,
                  gl_param *prm, int np, const uint32_t g[3], int iters, int cycle, int cycle_param,
                  uint32_t cycle_step, double *sec)
{
    for (int i = 0; i < 3; i++)
        if (gl_dispatch(ctx, p, b, nb, prm, np, g) != GLESC_OK)
            return -1;
    glFinish();
    uint64_t cpu0 = core_time_ns();
    gl_timer t;
    if (gl_timer_begin(ctx, &t) != GLESC_OK)
        return -1;
    for (int i = 0; i < iters; i++) {
        if (cycle > 1)
            prm[cycle_param] = GL_PARAM_U((uint32_t)(i % cycle) * cycle_step);
        if (gl_dispatch(ctx, p, b, nb, prm, np, g) != GLESC_OK)
            return -1;
    }
    if (gl_timer_end(ctx, &t) != GLESC_OK)
        return -1;
    glFinish();
    uint64_t cpu_ns = core_time_ns() - cpu0, ns;
    glesc_status st = gl_timer_result(ctx, &t, &ns);
    gl_timer_release(ctx, &t);
    if (st != GLESC_OK)
        return -1;
    /* Some drivers (llvmpipe) answer timer queries without measuring the
     * compute work; fall back to the CPU clock around glFinish then. */
    if (ns * 100 < cpu_ns)
        ns = cpu_ns;
    *sec = (double)ns * 1e-9 / iters;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of n kernel times (sorts v). Kernels timed alone, each in its
 * own timer query, see whatever else holds the GPU or the host for a
 * moment: on an H200, a few samples of a run took 2-3 times longer (the
 * plain read kernel's as much as a GEMV's) and their mean moved a table's
 * ratios by tens of points; the median keeps the typical kernel. */
static double median_s(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return (n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2])) * 1e-9;
}

/* As time_dispatch, but each dispatch in its own timer query, as the
 * graph's per-kernel timing measures: launch and tail included, no overlap
 * with a neighbour; *sec is the median. */
int time_each(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb, gl_param *prm,
              int np, const uint32_t g[3], int iters, int cycle, int cycle_param,
              uint32_t cycle_step, double *sec)
{
    gl_timer *t = calloc((size_t)iters, sizeof *t);
    uint64_t *ns = calloc((size_t)iters, sizeof *ns);
    int rc = t && ns ? 0 : -1;
    for (int i = 0; i < iters && !rc; i++) {
        if (cycle > 1)
            prm[cycle_param] = GL_PARAM_U((uint32_t)(i % cycle) * cycle_step);
        if (gl_timer_begin(ctx, &t[i]) || gl_dispatch(ctx, p, b, nb, prm, np, g) ||
            gl_timer_end(ctx, &t[i]))
            rc = -1;
    }
    for (int i = 0; i < iters && !rc; i++)
        if (gl_timer_result(ctx, &t[i], &ns[i]))
            rc = -1;
    for (int i = 0; t && i < iters; i++)
        gl_timer_release(ctx, &t[i]);
    if (!rc)
        *sec = median_s(ns, iters);
    free(t);
    free(ns);
    return rc;
}

/* x[0..n) uniform in [-0.5, 0.5), the same sequence every time. */
void fill_uniform(float *x, size_t n)
{
    uint32_t seed = 7;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
}

/* The GEMV y = W·x through the graph: `copies` weights of type t and shape
 * [K, N] (the file-layout pool tiled over each), one graph per weight with
 * timing on, computed round-robin with their cached plan after a warm-up;
 * x is [K, M] (M > 8: the GEMM); *sec is the mean GPU time of the matmul
 * kernel; the kernel's header line that says how it is shaped goes into
 * how (size bytes). With nn > 1 weights (N[i] rows each, one copy) the
 * grouped matmul, with pair the gate/up pair silu(Wg h)·(Wu h) (N[0] rows
 * each), with norm of h = rms_norm(x)·w: the prefill's fused kernels. The
 * warm-up runs the graphs for warm_ms at least: the clocks a GPU falls to
 * while the host writes the weights and compiles the kernel (an H200 was
 * seen at 510 MHz against 1980 under load) must not reach the timings
 * (GEMM timings taken right after that ran at a third of their speed). */
int time_graph(glesc_context *ctx, glesc_dtype t, const int *N, int nn, bool pair, bool norm,
               bool res, int K, int M, const void *pool, size_t pool_bytes, const float *x,
               int copies, int iters, int warm_ms, double *sec, char *how, size_t size)
{
    int rc = -1, nw = pair ? 2 : nn;
    bool fused = nw > 1 || norm;
    size_t fbytes = 0;
    for (int i = 0; i < nw; i++)
        fbytes = CORE_MAX(fbytes, (size_t)glesc_dtype_row_bytes(t, K) * (size_t)N[pair ? 0 : i]);
    char *file = malloc(fbytes);
    float *ones = malloc((size_t)K * sizeof *ones);
    glesc_tensor *w[64] = {0};
    glesc_graph *g[64] = {0};
    glesc_tensor *y[64][MAX_MEMB] = {{0}};
    int ny = pair ? 1 : nn;
    if (!file || !ones || (fused && copies > 64 / nw))
        goto done;
    for (int i = 0; i < K; i++)
        ones[i] = 1.0f + (float)(i % 7) / 64;
    for (size_t off = 0; off < fbytes; off += pool_bytes)
        memcpy(file + off, pool, CORE_MIN(pool_bytes, fbytes - off));
    glesc_graph_options go = {0};
    go.timing = true;
    for (int c = 0; c < copies; c++) {
        g[c] = glesc_graph_create(ctx);
        if (!g[c] || glesc_graph_set_options(g[c], &go) != GLESC_OK)
            goto done;
        glesc_tensor *xt = glesc_tensor_new(g[c], GLESC_DTYPE_F32, 2, (int64_t[]){K, M});
        if (!xt || glesc_tensor_write_f32(xt, x, (size_t)K * (size_t)M) != GLESC_OK)
            goto done;
        if (norm) {
            glesc_tensor *nt = glesc_tensor_new(g[c], GLESC_DTYPE_F32, 1, (int64_t[]){K});
            if (!nt || glesc_tensor_write_f32(nt, ones, (size_t)K) != GLESC_OK)
                goto done;
            xt = glesc_mul(g[c], glesc_rms_norm(g[c], xt, 1e-5f), nt);
        }
        glesc_tensor *mm[MAX_MEMB];
        for (int i = 0; i < nw; i++) {
            int64_t rows = N[pair ? 0 : i];
            glesc_tensor *wt = w[c * nw + i] = glesc_weight_new(ctx, t, 2, (int64_t[]){K, rows});
            if (!wt ||
                glesc_tensor_write(wt, file, (size_t)glesc_dtype_row_bytes(t, K) * (size_t)rows) !=
                    GLESC_OK)
                goto done;
            if (!(mm[i] = glesc_matmul(g[c], wt, xt)))
                goto done;
        }
        if (pair)
            y[c][0] = glesc_mul(g[c], glesc_silu(g[c], mm[0]), mm[1]);
        else if (res) {
            size_t nr = (size_t)N[0] * (size_t)M;
            float *rv = malloc(nr * sizeof *rv);
            glesc_tensor *rt = glesc_tensor_new(g[c], GLESC_DTYPE_F32, 2, (int64_t[]){N[0], M});
            if (rv)
                fill_uniform(rv, nr);
            bool ok = rv && rt && glesc_tensor_write_f32(rt, rv, nr) == GLESC_OK;
            free(rv);
            if (!ok)
                goto done;
            y[c][0] = glesc_add(g[c], mm[0], rt);
        } else
            memcpy(y[c], mm, (size_t)nn * sizeof *mm);
        if (!y[c][0])
            goto done;
    }
    uint64_t t0 = core_time_ns(), warm_ns = (uint64_t)warm_ms * 1000000u;
    for (int i = 0; i < CORE_MAX(3, copies) || core_time_ns() - t0 < warm_ns; i++)
        if (glesc_graph_compute(g[i % copies], y[i % copies], ny) != GLESC_OK)
            goto done;
    const char *glsl = glesc_graph_last_glsl(g[0]);
    const char *l = !glsl ? NULL : strstr(glsl, M > 8 ? "// GEMM" : "// GEMV");
    snprintf(how, size, "%.*s", l ? (int)strcspn(l + 3, "\n") : 0, l ? l + 3 : "");
    uint64_t ns = 0;
    for (int i = 0; i < iters; i++) {
        glesc_compute_stats st;
        if (glesc_graph_compute(g[i % copies], y[i % copies], ny) != GLESC_OK)
            goto done;
        glesc_graph_stats(g[i % copies], &st);
        if (st.n_kernel_times < 1 || st.n_kernel_times > 1 + norm || !st.plan_reused) {
            fprintf(stderr, "glesc-bench: graph matmul ran %d kernels (plan reused: %d)\n",
                    st.n_kernel_times, st.plan_reused);
            goto done;
        }
        /* a norm the GEMM does not fold (GRAPH_GEMV_MAX_M) runs first, in
         * a kernel of its own: the time of both */
        for (int k = 0; k < st.n_kernel_times; k++)
            ns += st.kernel_times[k].gpu_ns;
    }
    *sec = (double)ns * 1e-9 / iters;
    rc = 0;
done:
    for (int c = 0; c < copies; c++)
        glesc_graph_destroy(g[c]);
    for (int i = 0; i < 64; i++)
        glesc_weight_free(w[i]);
    free(file);
    free(ones);
    return rc;
}

int warm_gpu(warmer *w)
{
    uint64_t t0 = core_time_ns();
    while (w->ms > 0 && core_time_ns() - t0 < (uint64_t)w->ms * 1000000u) {
        for (int i = 0; i < 16; i++)
            if (gl_dispatch(w->ctx, w->p, w->b, 2, w->prm, 2, w->g) != GLESC_OK)
                return -1;
        glFinish();
    }
    return 0;
}

/* A weight's file layout: the quantized pool tiled over it (whole blocks:
 * the pool is a multiple of the block), read at any offset. */
typedef struct pool_src {
    const char *pool;
    size_t bytes;
} pool_src;

static glesc_status read_pool(void *user, uint64_t offset, void *dst, size_t size)
{
    const pool_src *ps = user;
    char *d = dst;
    while (size) {
        size_t o = (size_t)(offset % ps->bytes), n = CORE_MIN(size, ps->bytes - o);
        memcpy(d, ps->pool + o, n);
        d += n;
        offset += n;
        size -= n;
    }
    return GLESC_OK;
}

/* The decode's GEMV y = W·x (m = 1) on `copies` weights of type t and
 * shape [K, N] that together do not fit the GPU's last-level cache, so each
 * kernel reads its weight from memory as decode does: one graph of copies
 * matmuls (each with an x of its own: no grouping), the weights written in
 * one glesc_weights_write. After two untimed computes (plan, programs,
 * first touch) and warming the GPU, rounds of the graph each time every
 * kernel alone (the graph's timing); *sec is their median, *setup the
 * seconds from the first weight to the end of the untimed computes, how
 * the kernel's header line. */
int time_gemv(glesc_context *ctx, glesc_dtype t, int N, int K, const void *pool, size_t pool_bytes,
              const float *x, int copies, int iters, warmer *wm, double *sec, double *setup,
              char *how, size_t size)
{
    int rc = -1;
    uint64_t t0 = core_time_ns();
    glesc_tensor **w = calloc((size_t)copies, sizeof *w);
    glesc_tensor **y = calloc((size_t)copies, sizeof *y);
    glesc_weight_source *src = calloc((size_t)copies, sizeof *src);
    pool_src ps = {pool, pool_bytes};
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_graph_options go = {0};
    go.timing = true;
    if (!w || !y || !src || !g || glesc_graph_set_options(g, &go) != GLESC_OK)
        goto done;
    for (int c = 0; c < copies; c++) {
        glesc_tensor *xt = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){K, 1});
        w[c] = glesc_weight_new(ctx, t, 2, (int64_t[]){K, N});
        if (!xt || !w[c] || glesc_tensor_write_f32(xt, x, (size_t)K) != GLESC_OK ||
            !(y[c] = glesc_matmul(g, w[c], xt)))
            goto done;
        src[c] = (glesc_weight_source){w[c], read_pool, &ps};
    }
    if (glesc_weights_write(ctx, src, copies, NULL, NULL) != GLESC_OK)
        goto done;
    for (int i = 0; i < 2; i++)
        if (glesc_graph_compute(g, y, copies) != GLESC_OK)
            goto done;
    const char *glsl = glesc_graph_last_glsl(g);
    const char *l = !glsl ? NULL : strstr(glsl, "// GEMV");
    snprintf(how, size, "%.*s", l ? (int)strcspn(l + 3, "\n") : 0, l ? l + 3 : "");
    *setup = (double)(core_time_ns() - t0) * 1e-9;
    if (warm_gpu(wm))
        goto done;
    int rounds = CORE_MAX(2, (iters + copies - 1) / copies);
    uint64_t *ns = calloc((size_t)rounds * (size_t)copies, sizeof *ns);
    if (!ns)
        goto done;
    for (int r = 0; r < rounds; r++) {
        glesc_compute_stats st;
        if (glesc_graph_compute(g, y, copies) != GLESC_OK)
            goto done;
        glesc_graph_stats(g, &st);
        if (st.n_kernel_times != copies || !st.plan_reused) {
            fprintf(stderr, "glesc-bench: %d matmuls ran %d kernels (plan reused: %d)\n", copies,
                    st.n_kernel_times, st.plan_reused);
            free(ns);
            goto done;
        }
        for (int k = 0; k < copies; k++)
            ns[r * copies + k] = st.kernel_times[k].gpu_ns;
    }
    *sec = median_s(ns, rounds * copies);
    free(ns);
    rc = 0;
done:
    glesc_graph_destroy(g);
    for (int c = 0; w && c < copies; c++)
        glesc_weight_free(w[c]);
    free(w);
    free(y);
    free(src);
    return rc;
}
