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

#include "common/args.h"
#include "compute/compute.h"
#include "quant/quant.h"

static const glesc_dtype all_types[] = {
    GLESC_DTYPE_F32,  GLESC_DTYPE_F16,    GLESC_DTYPE_BF16,   GLESC_DTYPE_Q4_0,
    GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,   GLESC_DTYPE_Q8_0,
    GLESC_DTYPE_Q2_K, GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,   GLESC_DTYPE_Q5_K,
    GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL, GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
};

#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* --types: a comma-separated list of names of all_types into sel[]; -1
 * after a message naming the first one that is not such a name. */
static int parse_types(const char *arg, bool sel[N_TYPES])
{
    for (const char *s = arg;;) {
        size_t n = strcspn(s, ",");
        size_t k = 0;
        while (k < N_TYPES && (strlen(glesc_dtype_name(all_types[k])) != n ||
                               strncmp(s, glesc_dtype_name(all_types[k]), n)))
            k++;
        if (k == N_TYPES) {
            fprintf(stderr, "glesc-bench: --types: '%.*s' is not one of", (int)n, s);
            for (size_t j = 0; j < N_TYPES; j++)
                fprintf(stderr, "%s %s", j ? "," : "", glesc_dtype_name(all_types[j]));
            fputc('\n', stderr);
            return -1;
        }
        sel[k] = true;
        if (!s[n])
            return 0;
        s += n + 1;
    }
}

/* A shape of --shapes: NxK, or with --gemm the forms of the prefill's
 * fused matmuls: N1+N2+...xK a grouped matmul (q/k/v: up to 4 weights of
 * one activation), N*2xK the gate/up pair silu(Wg h)·(Wu h) of N rows
 * each, a leading n: of h = rms_norm(x)·w (folded into a GEMV; a GEMM's
 * norm is a kernel of its own, timed with it), and a trailing
 * r: plus a residual, W x + r (the residual add the output projections
 * take as their epilogue). Parses the shape at s (up to a comma) into n[]
 * (its weights' rows, *nn of them), *K, *pair, *norm and *res; false if it
 * is none of these. */
#define MAX_MEMB 4
static bool parse_shape(const char *s, int n[MAX_MEMB], int *nn, int *K, bool *pair, bool *norm,
                        bool *res)
{
    size_t len = strcspn(s, ",");
    *norm = s[0] == 'n';
    int used = *norm;
    *nn = 0;
    *pair = false;
    for (;;) {
        int v = 0, u = 0;
        if (*nn == MAX_MEMB || sscanf(s + used, "%d%n", &v, &u) != 1 || v <= 0)
            return false;
        n[(*nn)++] = v;
        used += u;
        if (s[used] == '+' && !*pair) {
            used++;
            continue;
        }
        if (s[used] == '*' && *nn == 1 && s[used + 1] == '2') {
            *pair = true;
            used += 2;
        }
        break;
    }
    int u = 0;
    if (sscanf(s + used, "x%d%n", K, &u) != 1 || *K <= 0)
        return false;
    used += u;
    *res = s[used] == 'r';
    return (size_t)(used + *res) == len;
}

/* --shapes: NxK,... with positive sizes (and the fused forms of
 * parse_shape with --gemm), K a multiple of every selected type's block; -1
 * after a message naming the first bad one. */
static int check_shapes(const char *arg, const bool sel[N_TYPES], bool fused)
{
    for (const char *s = arg;;) {
        int N[MAX_MEMB], nn = 0, K = 0;
        bool pair, norm, res;
        size_t n = strcspn(s, ",");
        bool ok = parse_shape(s, N, &nn, &K, &pair, &norm, &res) &&
                  (fused || (nn == 1 && !pair && !norm && !res));
        for (size_t k = 0; ok && k < N_TYPES; k++)
            if (sel[k] && K % quant_gpu_block_elems(all_types[k])) {
                fprintf(stderr,
                        "glesc-bench: --shapes: K of '%.*s' is not a multiple of %s's "
                        "block of %d\n",
                        (int)n, s, glesc_dtype_name(all_types[k]),
                        quant_gpu_block_elems(all_types[k]));
                return -1;
            }
        if (!ok) {
            fprintf(stderr, "glesc-bench: --shapes: '%.*s' is not NxK with positive sizes%s\n",
                    (int)n, s, fused ? " (nor N+N+...xK, N*2xK, nNxK, NxKr...)" : "");
            return -1;
        }
        if (!s[n])
            return 0;
        s += n + 1;
    }
}

static int fail(glesc_context *ctx, const char *what)
{
    fprintf(stderr, "glesc-bench: %s: %s\n", what, glesc_context_errmsg(ctx));
    glesc_context_destroy(ctx);
    return 1;
}

/* Mean GPU time of iters dispatches (after 3 warm-up runs), in seconds.
 * With cycle > 1, parameter cycle_param of dispatch i is i % cycle times
 * cycle_step (a buffer offset: each dispatch reads other memory). */
static int time_dispatch(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb,
                         gl_param *prm, int np, const uint32_t g[3], int iters, int cycle,
                         int cycle_param, uint32_t cycle_step, double *sec)
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
static int time_each(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb,
                     gl_param *prm, int np, const uint32_t g[3], int iters, int cycle,
                     int cycle_param, uint32_t cycle_step, double *sec)
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
static void fill_uniform(float *x, size_t n)
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
static int time_graph(glesc_context *ctx, glesc_dtype t, const int *N, int nn, bool pair, bool norm,
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

/* Keeps the GPU busy for ms milliseconds (a kernel over the whole roofline
 * buffer, again and again) right before a timing: a GPU's clocks fall while
 * the host prepares the next weights (an H200's SM clock was seen at idle
 * speed, and a kernel timed alone then ran 2-4 times slower), and a decode
 * step's back-to-back dispatches keep them up. (The idea is branch gemvq's.) */
typedef struct warmer {
    glesc_context *ctx;
    const gl_program *p;
    const gl_binding *b;
    gl_param prm[2];
    uint32_t g[3];
    int ms;
} warmer;

static int warm_gpu(warmer *w)
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
static int time_gemv(glesc_context *ctx, glesc_dtype t, int N, int K, const void *pool,
                     size_t pool_bytes, const float *x, int copies, int iters, warmer *wm,
                     double *sec, double *setup, char *how, size_t size)
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

/* The roofline kernel: each invocation copies 4 vec4 spaced a workgroup
 * apart (coalesced, several loads in flight), no grid-stride loop. */
static char *copy_glsl(void)
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
static char *reduce_glsl(void)
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
static void grid_of(uint64_t n4, uint32_t g[3])
{
    uint32_t groups = (uint32_t)((n4 + 1023) / 1024);
    g[0] = CORE_MIN(groups, 65535u);
    g[1] = (groups + g[0] - 1) / g[0];
    g[2] = 1;
}

/* A weight of type t and N x K elements in the file layout: a quantized
 * random pool (at most 2^20 elements) tiled over it; its floats in *pool,
 * its blocks returned (free both), their bytes in *pool_bytes. */
static void *weight_pool(glesc_dtype t, int N, int K, float **pool, size_t *pool_bytes)
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
static double fma_peak(glesc_context *ctx)
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

/* --gemm M: the matmul of M columns per type and shape as TFLOP/s and its
 * fraction of the FMA peak (MFLOP/s). Frees the context. */
static int gemm_table(glesc_context *ctx, const bool types[N_TYPES], const char *shapes_arg, int M,
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
static int attn_table(glesc_context *ctx, const int *lens, int nn, int n_head, int n_head_kv, int d,
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

int main(int argc, char **argv)
{
    int iters = 20, gemm_m = 0, warm_ms = 100, attn_n[8], n_attn = 0, heads[3] = {32, 4, 64};
    bool portable = false;
    uint64_t copy_mib = 0;
    const char *shapes_arg = "4096x4096,11008x4096";
    bool types[N_TYPES];
    for (size_t k = 0; k < N_TYPES; k++)
        types[k] = true;
    for (int i = 1; i < argc; i++) {
        long v;
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--iters", argv[++i], 1, 1000000, &v))
                return 2;
            iters = (int)v;
        } else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            memset(types, 0, sizeof types);
            if (parse_types(argv[++i], types))
                return 2;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            shapes_arg = argv[++i];
        } else if (!strcmp(argv[i], "--warm-ms") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--warm-ms", argv[++i], 0, 10000, &v))
                return 2;
            warm_ms = (int)v;
        } else if (!strcmp(argv[i], "--copy-mib") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--copy-mib", argv[++i], 1, 1 << 20, &v))
                return 2;
            copy_mib = (uint64_t)v;
        } else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--gemm", argv[++i], 1, 1 << 16, &v))
                return 2;
            gemm_m = (int)v;
        } else if (!strcmp(argv[i], "--attn") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (n_attn == 8 || tool_parse_long("glesc-bench", "--attn", t, 1, 1 << 16, &v))
                    return 2;
                attn_n[n_attn++] = (int)v;
            }
            if (!n_attn)
                return 2;
        } else if (!strcmp(argv[i], "--attn-heads") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d/%d/%d", &heads[0], &heads[1], &heads[2]) != 3 ||
                heads[0] < 1 || heads[1] < 1 || heads[0] % heads[1] || heads[2] < 1 ||
                heads[2] > 256) {
                fprintf(stderr,
                        "glesc-bench: --attn-heads: H/HKV/D, H a multiple of HKV, D at "
                        "most 256: '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--portable")) {
            portable = true;
        } else {
            fprintf(stderr, "usage: glesc-bench [--iters N] [--types q4_0,...] "
                            "[--shapes NxK,...] [--copy-mib N] [--warm-ms N] [--gemm M] "
                            "[--attn N,...] [--attn-heads H/HKV/D] [--portable]\n");
            return 2;
        }
    }
    if (check_shapes(shapes_arg, types, gemm_m > 0))
        return 2;
    glesc_context_options opts;
    glesc_context_options_init(&opts);
    if (portable)
        glesc_context_options_limits(&opts, "portable");
    glesc_context *ctx;
    if (glesc_context_create(&opts, &ctx) != GLESC_OK) {
        fprintf(stderr, "glesc-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    const glesc_caps *caps = glesc_context_caps(ctx);
    printf("device: %s (%s), timer: %s\n", caps->renderer, caps->version,
           caps->has_timer_query ? "GL_EXT_disjoint_timer_query" : "CPU around glFinish");
    printf("caps: %d invocations, %d bytes shared, subgroups %s (size %d), storage blocks of "
           "%llu bytes%s\n",
           caps->max_compute_invocations, caps->max_compute_shared_memory,
           caps->has_subgroup ? "yes" : "no", caps->subgroup_size,
           (unsigned long long)caps->max_storage_block_size, portable ? " (--portable)" : "");

    /* Copy roofline. */
    uint64_t bytes =
        copy_mib ? copy_mib << 20 : CORE_MIN(caps->max_storage_block_size / 2, 1ull << 30);
    bytes &= ~(uint64_t)15;
    gl_buffer *a, *b;
    if (gl_pool_acquire(ctx, bytes, GL_USAGE_ACTIVATIONS, &a) ||
        gl_pool_acquire(ctx, bytes, GL_USAGE_ACTIVATIONS, &b))
        return fail(ctx, "copy buffers");
    /* random contents (no memory compression can shortcut them) */
    {
        size_t chunk = 4u << 20;
        uint32_t *r = malloc(chunk), seed = 7;
        for (size_t i = 0; r && i < chunk / 4; i++)
            r[i] = seed = seed * 1664525u + 1013904223u;
        for (uint64_t off = 0; r && off < bytes; off += chunk)
            if (gl_buffer_upload(ctx, a, off, r, (size_t)CORE_MIN((uint64_t)chunk, bytes - off)))
                return fail(ctx, "copy buffers");
        free(r);
    }
    char *src = copy_glsl();
    const gl_program *p;
    if (gl_program_get(ctx, src, &p))
        return fail(ctx, "copy kernel");
    core_free(src);
    gl_binding cb[2] = {{a, 0, 0, false}, {b, 0, 0, true}};
    gl_param cp = GL_PARAM_U(bytes / 16);
    uint32_t cg[3];
    grid_of(bytes / 16, cg);
    double sec;
    if (time_dispatch(ctx, p, cb, 2, &cp, 1, cg, iters, 0, 0, 0, &sec))
        return fail(ctx, "copy timing");
    double copy_bw = 2.0 * (double)bytes / sec;
    printf("copy: %.1f MiB in %.1f us: %.1f GB/s (read + write)\n", (double)bytes / 1048576.0,
           sec * 1e6, copy_bw / 1e9);
    /* Read-only roofline over the same buffer (b receives nothing). */
    char *rsrc = reduce_glsl();
    const gl_program *rp;
    if (gl_program_get(ctx, rsrc, &rp))
        return fail(ctx, "read kernel");
    core_free(rsrc);
    gl_param rprm[2] = {GL_PARAM_U(bytes / 16), GL_PARAM_U(0)};
    if (time_dispatch(ctx, rp, cb, 2, rprm, 2, cg, iters, 0, 0, 0, &sec))
        return fail(ctx, "read timing");
    double read_bw = (double)bytes / sec;
    printf("read: %.1f MiB in %.1f us: %.1f GB/s (read only)\n", (double)bytes / 1048576.0,
           sec * 1e6, read_bw / 1e9);
    /* The floor of a timed kernel: one workgroup reading nothing. */
    gl_param eprm[2] = {GL_PARAM_U(0), GL_PARAM_U(0)};
    if (time_each(ctx, rp, cb, 2, eprm, 2, (uint32_t[3]){1, 1, 1}, iters, 0, 0, 0, &sec))
        return fail(ctx, "empty kernel timing");
    printf("empty kernel, timed alone: %.2f us\n", sec * 1e6);
    /* What a chain of dependent kernels pays per link (a decode step is
     * one): back-to-back dispatches, each writing what the next writes
     * (a barrier between every two), under one timer. */
    if (time_dispatch(ctx, rp, cb, 2, eprm, 2, (uint32_t[3]){1, 1, 1}, iters, 0, 0, 0, &sec))
        return fail(ctx, "empty kernel timing");
    printf("empty kernel, chained (a barrier between each): %.2f us\n", sec * 1e6);

    if (n_attn || gemm_m) { /* against the FMA peak: the roofline buffers go */
        gl_pool_release(ctx, a);
        gl_pool_release(ctx, b);
        double peak = fma_peak(ctx);
        if (!peak)
            return fail(ctx, "FMA peak");
        return n_attn ? attn_table(ctx, attn_n, n_attn, heads[0], heads[1], heads[2], iters,
                                   warm_ms, peak)
                      : gemm_table(ctx, types, shapes_arg, gemm_m, iters, warm_ms, peak);
    }
    /* the GPU kept busy before each timing: the read kernel over the
     * whole buffer */
    warmer wm = {ctx, rp, cb, {GL_PARAM_U(bytes / 16), GL_PARAM_U(0)}, {0, 0, 0}, warm_ms};
    grid_of(bytes / 16, wm.g);
    printf("\n%-8s %-11s %9s %9s %8s %8s %8s %9s %7s  %s\n", "type", "N x K", "us", "GB/s",
           "of copy", "of read", "of same", "same us", "setup s", "kernel");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        glesc_dtype t = all_types[ti];
        if (!types[ti])
            continue;
        for (const char *s = shapes_arg; s && *s;) {
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
            if (time_gemv(ctx, t, N, K, blocks, pool_bytes, f, copies, CORE_MAX(iters, copies), &wm,
                          &sec, &setup, how, sizeof how))
                return fail(ctx, "graph gemv");
            /* the read-only kernel over exactly these bytes, cycled through
             * as many copies as fit the buffer (a, bytes long) */
            uint64_t w4 = (wbytes + 15) / 16;
            int rcopies = (int)CORE_MIN((uint64_t)copies, bytes / 16 / w4);
            double same = 0;
            uint32_t rg[3];
            grid_of(w4, rg);
            gl_param sprm[2] = {GL_PARAM_U(w4), GL_PARAM_U(0)};
            if (rcopies >= 1 &&
                (warm_gpu(&wm) || time_each(ctx, rp, cb, 2, sprm, 2, rg, CORE_MAX(iters, copies),
                                            rcopies, 1, (uint32_t)w4, &same)))
                return fail(ctx, "read timing (same size)");
            double bw = (double)wbytes / sec;
            printf("%-8s %5dx%-5d %9.2f %9.1f %7.1f%% %7.1f%% %7.1f%% %9.2f %7.2f  %s\n",
                   glesc_dtype_name(t), N, K, sec * 1e6, bw / 1e9, 100.0 * bw / copy_bw,
                   100.0 * bw / read_bw, same > 0 ? 100.0 * same / sec : 0.0, same * 1e6, setup,
                   how);
            fflush(stdout);
            gl_pool_trim(ctx, 0);
            free(f);
            free(blocks);
        }
    }
    gl_pool_release(ctx, a);
    gl_pool_release(ctx, b);
    glesc_context_destroy(ctx);
    return 0;
}
