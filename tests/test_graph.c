/*
 * test_graph.c — tensors and the graph as a whole: host read/write round
 * trips, views without copies, build-time errors that name the op and both
 * shapes, inputs that were never written, the plan cache (a second compute
 * of the same structure builds no GLSL and compiles nothing, also with new
 * sizes), statistics and memory reuse.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

#include "compute/compute.h"
#include "core/core.h"
#include "graph/graph.h"
#include "test_graph_util.h"
#include "test_util.h"

TEST_GPU_SUITE(graph);

Test(graph, write_read_roundtrip_all_types)
{
    glesc_graph *g = glesc_graph_create(ctx);
    static const glesc_dtype types[] = {GLESC_DTYPE_F32, GLESC_DTYPE_F16, GLESC_DTYPE_BF16,
                                        GLESC_DTYPE_I32};
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        glesc_tensor *t = glesc_tensor_new(g, types[i], 2, (int64_t[]){7, 3});
        cr_assert_not_null(t);
        float v[21], back[21];
        for (int j = 0; j < 21; j++)
            v[j] = (float)(j - 10);
        cr_assert_eq(glesc_tensor_write_f32(t, v, 21), GLESC_OK);
        cr_assert_eq(glesc_tensor_read_f32(t, back, 21), GLESC_OK);
        for (int j = 0; j < 21; j++)
            cr_assert_eq(back[j], v[j], "%s element %d", glesc_dtype_name(types[i]), j);
    }
    /* raw bytes round trip and size checks */
    glesc_tensor *t = glesc_tensor_new(g, GLESC_DTYPE_F16, 1, (int64_t[]){5});
    uint16_t h[5] = {1, 2, 3, 4, 5}, hb[5];
    cr_assert_eq(glesc_tensor_write(t, h, sizeof h), GLESC_OK);
    cr_assert_eq(glesc_tensor_read(t, hb, sizeof hb), GLESC_OK);
    cr_assert_eq(memcmp(h, hb, sizeof h), 0);
    cr_assert_eq(glesc_tensor_write(t, h, 4), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_context_errmsg(ctx), "4 bytes given, the tensor holds 10"), "%s",
              glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

Test(graph, views_share_memory)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){4, 3});
    float v[12];
    for (int i = 0; i < 12; i++)
        v[i] = (float)i;
    tg_write(x, v);
    glesc_tensor *t = glesc_transpose(g, x);
    cr_assert_eq(glesc_tensor_dim(t, 0), 3);
    cr_assert_eq(glesc_tensor_dim(t, 1), 4);
    float *r = tg_read(t);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            cr_assert_eq(r[i * 3 + j], v[j * 4 + i]);
    free(r);
    glesc_tensor *rs = glesc_reshape(g, x, 3, (int64_t[]){2, 2, 3});
    cr_assert_eq(glesc_tensor_nelements(rs), 12);
    glesc_tensor *w = glesc_view(g, x, 2, (int64_t[]){2, 2}, (size_t[]){0, 16}, 4);
    r = tg_read(w);
    cr_assert(r[0] == 1 && r[1] == 2 && r[2] == 5 && r[3] == 6);
    free(r);
    glesc_tensor *b =
        glesc_broadcast(g, glesc_view(g, x, 1, (int64_t[]){4}, NULL, 0), 2, (int64_t[]){4, 5});
    r = tg_read(b);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(r[i], (float)(i % 4));
    free(r);
    /* a view of a permuted tensor is refused: it is not contiguous */
    cr_assert_null(glesc_reshape(g, t, 1, (int64_t[]){12}));
    cr_assert(strstr(glesc_context_errmsg(ctx), "glesc_reshape: source [3, 4] is not contiguous"),
              "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

Test(graph, errors_name_op_and_shapes)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *a = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){4, 3});
    glesc_tensor *b = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){5, 3});
    cr_assert_null(glesc_add(g, a, b));
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_add: shapes [4, 3] and [5, 3] do not broadcast");
    /* a failed builder's NULL passes through later builders, keeping the message */
    cr_assert_null(glesc_exp(g, glesc_mul(g, a, b)));
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_mul: shapes [4, 3] and [5, 3] do not broadcast");
    cr_assert_null(glesc_matmul(g, a, b));
    cr_assert(strstr(glesc_context_errmsg(ctx), "glesc_matmul: shapes [4, 3] and [5, 3]"), "%s",
              glesc_context_errmsg(ctx));
    cr_assert_null(glesc_reshape(g, a, 1, (int64_t[]){13}));
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_reshape: shapes [4, 3] and [13] hold different numbers of elements");
    cr_assert_null(glesc_reduce(g, GLESC_OP_SUM, a, 4));
    cr_assert(strstr(glesc_context_errmsg(ctx), "glesc_sum: axis 4"), "%s",
              glesc_context_errmsg(ctx));
    cr_assert_null(glesc_tensor_new(g, GLESC_DTYPE_Q4_0, 1, (int64_t[]){32}));
    cr_assert(strstr(glesc_context_errmsg(ctx), "q4_0 is not a tensor type"), "%s",
              glesc_context_errmsg(ctx));
    /* computing a NULL output reports the builder's failure */
    glesc_tensor *bad = glesc_add(g, a, b);
    cr_assert_eq(glesc_graph_compute(g, &bad, 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_context_errmsg(ctx), "do not broadcast"), "%s",
              glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

Test(graph, unwritten_input_is_an_error)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *a = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){4, 3});
    glesc_tensor_set_name(a, "tokens");
    glesc_tensor *y = glesc_exp(g, a);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_ERROR_STATE);
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_graph_compute: input 'tokens' [4, 3] f32 was never written");
    glesc_graph_destroy(g);
}

/* y = ((x + 1) * x - b) → silu, with b broadcast: one structure. */
static glesc_tensor *build_chain(glesc_graph *g, int64_t n, int64_t m, uint32_t seed)
{
    glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){n, m}, seed, -2, 2);
    glesc_tensor *b = tg_input(g, GLESC_DTYPE_F32, 1, (int64_t[]){n}, seed + 1, -1, 1);
    glesc_tensor *y = glesc_mul(g, glesc_scale(g, x, 1, 1), x);
    return glesc_silu(g, glesc_sub(g, y, b));
}

Test(graph, plan_cache_reuses_programs_and_glsl)
{
    setenv("GLESC_PLAN_VERIFY", "1", 1); /* a reused plan must give identical GLSL */
    glesc_compute_stats s;
    for (int fusion = -1; fusion <= 1; fusion += 2) {
        glesc_graph *g = glesc_graph_create(ctx);
        tg_fusion(g, fusion);
        glesc_tensor *y = build_chain(g, 33, 7, 1);
        tg_check(g, &y, 1, 1e-10, "chain, first");
        glesc_graph_stats(g, &s);
        cr_assert_gt(s.glsl_built, 0);
        /* same structure, new graph: the plan and its programs are reused */
        glesc_graph_reset(g);
        y = build_chain(g, 33, 7, 3);
        tg_check(g, &y, 1, 1e-10, "chain, same sizes");
        glesc_graph_stats(g, &s);
        cr_assert(s.plan_reused);
        cr_assert_eq(s.glsl_built, 0);
        cr_assert_eq(s.programs_compiled, 0);
        /* same structure with other sizes: sizes are uniforms */
        glesc_graph_reset(g);
        y = build_chain(g, 1000, 5, 5);
        tg_check(g, &y, 1, 1e-10, "chain, other sizes");
        glesc_graph_stats(g, &s);
        cr_assert(s.plan_reused, "fusion %d", fusion);
        cr_assert_eq(s.glsl_built, 0);
        cr_assert_eq(s.programs_compiled, 0);
        cr_assert_eq(s.kernels, fusion > 0 ? 1 : 4);
        cr_log_info("fusion %s: %d nodes → %d kernels, %d dispatches, %llu bytes read, %llu "
                    "written, %.2f ms host",
                    fusion > 0 ? "on" : "off", s.nodes, s.kernels, s.dispatches,
                    (unsigned long long)s.bytes_read, (unsigned long long)s.bytes_written,
                    (double)s.cpu_ns / 1e6);
        glesc_graph_destroy(g);
    }
    unsetenv("GLESC_PLAN_VERIFY");
}

Test(graph, intermediates_go_back_to_the_pool)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, -1);
    int64_t n = 64 * 1024; /* 256 KiB per tensor */
    glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 1, &n, 1, -1, 1);
    glesc_tensor *y = x;
    for (int i = 0; i < 12; i++)
        y = glesc_scale(g, glesc_unary(g, GLESC_OP_SIN, y), 0.5f, 0.25f);
    glesc_context_reset_stats(ctx);
    glesc_stats before;
    glesc_context_stats(ctx, &before);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats after;
    glesc_context_stats(ctx, &after);
    /* 24 results but only two (plus the input) live at once */
    cr_log_info("24 unfused kernels: pool peak %llu bytes, %llu misses",
                (unsigned long long)after.pool_peak_bytes, (unsigned long long)after.pool_misses);
    cr_assert_leq(after.pool_peak_bytes, 4 * 320 * 1024ull);
    cr_assert_leq(after.pool_live_buffers, 2); /* the input and the output */
    glesc_graph_destroy(g);
    glesc_stats end;
    glesc_context_stats(ctx, &end);
    cr_assert_eq(end.pool_live_buffers, 0);
}

Test(graph, persistent_tensor_outlives_graphs)
{
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){5});
    cr_assert_not_null(w);
    float zero[5], v[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(glesc_tensor_read_f32(w, zero, 5), GLESC_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(zero[i], 0.0f, "weights start as zeros");
    tg_write(w, v);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *y = glesc_add(g, w, w);
    glesc_weight_free(w); /* the graph still holds it */
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    float *r = tg_read(y);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(r[i], 2 * v[i]);
    free(r);
    glesc_graph_destroy(g);
}

Test(graph, kernel_times_when_asked)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_graph_options o = {0};
    o.timing = true;
    o.fusion = -1;
    cr_assert_eq(glesc_graph_set_options(g, &o), GLESC_OK);
    glesc_tensor *y = build_chain(g, 257, 3, 9);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.n_kernel_times, s.kernels);
    for (int i = 0; i < s.n_kernel_times; i++) {
        cr_log_info("kernel %d %-8s %llu ns, %d dispatch(es)", i, s.kernel_times[i].name,
                    (unsigned long long)s.kernel_times[i].gpu_ns, s.kernel_times[i].dispatches);
        cr_assert_gt(s.kernel_times[i].gpu_ns, 0);
    }
    cr_assert_str_eq(s.kernel_times[0].name, "scale");
    glesc_graph_destroy(g);
}

Test(graph, chrome_trace_file)
{
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    setenv("GLESC_TRACE", path, 1);
    glesc_context *c = test_context(NULL);
    for (int step = 0; step < 2; step++) {
        glesc_graph *g = glesc_graph_create(c);
        glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){64, 4}, 1, -1, 1);
        glesc_tensor *y = glesc_mul(g, glesc_rms_norm(g, x, 1e-6f), x);
        cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
        glesc_graph_destroy(g);
    }
    unsetenv("GLESC_TRACE");  /* read at the context's first compute */
    glesc_context_destroy(c); /* closes the event list */
    size_t n;
    char *text = test_read_file(path, &n);
    cr_assert_not_null(text);
    cr_log_info("trace: %s", text);
    cr_assert(strncmp(text, "{\"traceEvents\":[", 16) == 0, "%s", text);
    cr_assert_not_null(strstr(text, "{\"name\":\"rms_norm+mul\",\"ph\":\"X\",\"ts\":"));
    cr_assert_not_null(strstr(text, "\"pid\":1,\"tid\":1"));
    cr_assert_not_null(strstr(text, "glesc_graph_compute"));
    cr_assert_not_null(strstr(text, "]}"));
    /* the host's work before the first dispatch, on its own track */
    cr_assert_not_null(strstr(text, "{\"name\":\"plan\",\"ph\":\"X\""));
    cr_assert_not_null(strstr(text, "\"pid\":1,\"tid\":3"));
    /* two computes: two kernel events, two compute events, two plan events */
    int events = 0;
    for (const char *p = text; (p = strstr(p, "\"ph\":\"X\"")); p++)
        events++;
    cr_assert_eq(events, 6);
    free(text);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A matmul and an attention of m columns (queries). */
static int batch_graph(glesc_graph *g, int64_t m, glesc_tensor **outs)
{
    glesc_tensor *w = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){64, 48}, 1, -1, 1);
    glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){64, m}, 2, -1, 1);
    glesc_tensor *q = tg_input(g, GLESC_DTYPE_F32, 3, (int64_t[]){32, m, 4}, 3, -1, 1);
    glesc_tensor *k = tg_input(g, GLESC_DTYPE_F32, 3, (int64_t[]){32, 20, 4}, 4, -1, 1);
    glesc_tensor *v = tg_input(g, GLESC_DTYPE_F32, 3, (int64_t[]){32, 20, 4}, 5, -1, 1);
    outs[0] = glesc_matmul(g, w, x);
    outs[1] = glesc_attention(g, q, k, v, NULL, 0.125f, false);
    return 2;
}

/* graph_batch_kernels: one column (query) runs on the programs 16 compiled
 * (the GEMM and prefill attention), compiling nothing, and matches the CPU
 * reference; without it, one column takes the GEMV and the decode
 * attention, which compile programs of their own. */
Test(graph, batch_kernels_run_one_column_on_the_batch_programs)
{
    glesc_compute_stats s;
    glesc_tensor *y[2];
    glesc_graph *g = glesc_graph_create(ctx);
    int n = batch_graph(g, 16, y);
    tg_check(g, y, n, 1e-10, "16 columns");
    glesc_graph_stats(g, &s);
    cr_assert_gt(s.programs_compiled, 0);
    glesc_graph_reset(g);
    n = batch_graph(g, 1, y);
    graph_batch_kernels(g);
    tg_check(g, y, n, 1e-10, "1 column, batch kernels");
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.programs_compiled, 0, "%d programs compiled", s.programs_compiled);
    glesc_graph_reset(g);
    n = batch_graph(g, 1, y);
    tg_check(g, y, n, 1e-10, "1 column, decode kernels");
    glesc_graph_stats(g, &s);
    cr_assert_gt(s.programs_compiled, 0);
    glesc_graph_destroy(g);
}

/* One decoder layer (llama-style) for one token at position pos, reading and
 * writing persistent f16 KV caches [d·n_kv_head, ctx]. */
typedef struct layer {
    int64_t dim, d, h, hkv, ff, ctx;
    glesc_tensor *wq, *wk, *wv, *wo; /* [dim, h·d], [dim, hkv·d] ×2, [h·d, dim] */
    glesc_tensor *wg, *wu, *wd;      /* [dim, ff] ×2, [ff, dim] */
    glesc_tensor *n1, *n2;           /* [dim] */
    glesc_tensor *kc, *vc;           /* [hkv·d, ctx] f16 */
} layer;

static glesc_tensor *decode_step(glesc_graph *g, layer *L, int pos, uint32_t seed)
{
    glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){L->dim, 1}, seed, -1, 1);
    glesc_tensor *p = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){1});
    tg_write(p, (float[]){(float)pos});
    glesc_tensor *hn = glesc_mul(g, glesc_rms_norm(g, x, 1e-6f), L->n1);
    glesc_tensor *q = glesc_reshape(g, glesc_matmul(g, L->wq, hn), 3, (int64_t[]){L->d, L->h, 1});
    glesc_tensor *k = glesc_reshape(g, glesc_matmul(g, L->wk, hn), 3, (int64_t[]){L->d, L->hkv, 1});
    glesc_tensor *v = glesc_matmul(g, L->wv, hn);
    q = glesc_rope(g, q, p, (int)L->d, GLESC_ROPE_NEOX, 10000, 1);
    k = glesc_rope(g, k, p, (int)L->d, GLESC_ROPE_NEOX, 10000, 1);
    glesc_tensor *kc =
        glesc_set_rows(g, L->kc, glesc_reshape(g, k, 2, (int64_t[]){L->d * L->hkv, 1}), p);
    glesc_tensor *vc = glesc_set_rows(g, L->vc, v, p);
    int64_t n_kv = pos + 1;
    size_t es = 2, row = (size_t)(L->d * L->hkv) * es;
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *kv = glesc_permute(g,
                                     glesc_view(g, kc, 3, (int64_t[]){L->d, L->hkv, n_kv},
                                                (size_t[]){0, (size_t)L->d * es, row}, 0),
                                     perm);
    glesc_tensor *vv = glesc_permute(g,
                                     glesc_view(g, vc, 3, (int64_t[]){L->d, L->hkv, n_kv},
                                                (size_t[]){0, (size_t)L->d * es, row}, 0),
                                     perm);
    glesc_tensor *att = glesc_attention(g, glesc_permute(g, q, perm), kv, vv, NULL,
                                        1.0f / sqrtf((float)L->d), true);
    att = glesc_reshape(g, att, 2, (int64_t[]){L->d * L->h, 1});
    glesc_tensor *h1 = glesc_add(g, glesc_matmul(g, L->wo, att), x);
    glesc_tensor *h2 = glesc_mul(g, glesc_rms_norm(g, h1, 1e-6f), L->n2);
    glesc_tensor *ff =
        glesc_mul(g, glesc_silu(g, glesc_matmul(g, L->wg, h2)), glesc_matmul(g, L->wu, h2));
    return glesc_add(g, glesc_matmul(g, L->wd, ff), h1);
}

static glesc_tensor *weight_f16(int64_t k, int64_t n, uint32_t seed)
{
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F16, 2, (int64_t[]){k, n});
    cr_assert_not_null(w, "%s", glesc_context_errmsg(ctx));
    tg_fill(w, seed, -0.2f, 0.2f);
    return w;
}

static layer layer_new(void)
{
    layer L = {.dim = 64, .d = 16, .h = 4, .hkv = 2, .ff = 96, .ctx = 8};
    L.wq = weight_f16(L.dim, L.h * L.d, 1);
    L.wk = weight_f16(L.dim, L.hkv * L.d, 2);
    L.wv = weight_f16(L.dim, L.hkv * L.d, 3);
    L.wo = weight_f16(L.h * L.d, L.dim, 4);
    L.wg = weight_f16(L.dim, L.ff, 5);
    L.wu = weight_f16(L.dim, L.ff, 6);
    L.wd = weight_f16(L.ff, L.dim, 7);
    L.n1 = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){L.dim});
    L.n2 = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){L.dim});
    tg_fill(L.n1, 8, 0.5f, 1.5f);
    tg_fill(L.n2, 9, 0.5f, 1.5f);
    L.kc = glesc_weight_new(ctx, GLESC_DTYPE_F16, 2, (int64_t[]){L.hkv * L.d, L.ctx});
    L.vc = glesc_weight_new(ctx, GLESC_DTYPE_F16, 2, (int64_t[]){L.hkv * L.d, L.ctx});
    return L;
}

static void layer_free(layer *L)
{
    glesc_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu,
                          L->wd, L->n1, L->n2, L->kc, L->vc};
    for (size_t i = 0; i < CORE_ARRAY_LEN(ws); i++)
        glesc_weight_free(ws[i]);
}

Test(graph, decode_steps_reuse_the_plan)
{
    setenv("GLESC_PLAN_VERIFY", "1", 1);
    layer L = layer_new();
    glesc_graph *g = glesc_graph_create(ctx);
    for (int pos = 0; pos < 5; pos++) {
        glesc_graph_reset(g);
        glesc_tensor *y = decode_step(g, &L, pos, (uint32_t)(100 + pos));
        cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
        double e = tg_check(g, &y, 1, 1e-8, "decode step");
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_log_info("step %d: %d nodes (%d views) → %d kernels, %d dispatches; %s, %d GLSL "
                    "built, %d compiled, NMSE %.3g, %.2f ms host",
                    pos, s.nodes, s.views, s.kernels, s.dispatches,
                    s.plan_reused ? "plan reused" : "new plan", s.glsl_built, s.programs_compiled,
                    e, (double)s.cpu_ns / 1e6);
        if (pos >= 2) { /* steps 0 and 1 differ in which sizes are 1 */
            cr_assert(s.plan_reused, "step %d", pos);
            cr_assert_eq(s.glsl_built, 0);
            cr_assert_eq(s.programs_compiled, 0);
        }
        cr_assert_leq(s.dispatches, 5);
    }
    glesc_graph_destroy(g);
    layer_free(&L);
    unsetenv("GLESC_PLAN_VERIFY");
}

/* Replay: a reused plan dispatches what it recorded; only the kernels whose
 * sizes changed (attention over one more cached position) run their
 * generator. Its results must equal, bit for bit, those of a plan made from
 * nothing for the same step, with a growing cache. */
Test(graph, replay_matches_fresh_generation)
{
    layer L = layer_new();
    glesc_graph *g = glesc_graph_create(ctx);
    int64_t n = L.dim;
    for (int pos = 0; pos < (int)L.ctx; pos++) {
        /* replayed (or, on the first steps, new) */
        glesc_graph_reset(g);
        glesc_tensor *y = decode_step(g, &L, pos, (uint32_t)(100 + pos));
        cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        float *replayed = tg_read(y);
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_log_info("step %d: %s, %d of %d kernels bound", pos,
                    s.plan_reused ? "plan reused" : "new plan", s.kernels_bound, s.kernels);
        if (pos >= 2) { /* the plan of step pos-1, made for one position less */
            cr_assert(s.plan_reused, "step %d", pos);
            cr_assert_gt(s.kernels_bound, 0, "step %d: the longer cache must be bound", pos);
            cr_assert_lt(s.kernels_bound, s.kernels, "step %d: nothing was replayed", pos);
        }
        /* the same graph again (the step rewrites the same cache row): all replayed */
        cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        glesc_graph_stats(g, &s);
        cr_assert_eq(s.kernels_bound, 0, "step %d: same sizes, yet %d kernels bound", pos,
                     s.kernels_bound);
        float *again = tg_read(y);
        cr_assert_arr_eq(again, replayed, (size_t)n * sizeof *again, "step %d", pos);
        /* a fresh plan: every kernel generated and bound */
        compute_plans_drop(ctx);
        glesc_graph_reset(g);
        y = decode_step(g, &L, pos, (uint32_t)(100 + pos));
        cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        glesc_graph_stats(g, &s);
        cr_assert(!s.plan_reused);
        cr_assert_eq(s.kernels_bound, s.kernels);
        float *fresh = tg_read(y);
        cr_assert_arr_eq(fresh, replayed, (size_t)n * sizeof *fresh,
                         "step %d: replay and fresh generation differ", pos);
        free(replayed);
        free(again);
        free(fresh);
    }
    glesc_graph_destroy(g);
    layer_free(&L);
}

/* y = softmax(rms_norm(x) · w): another structure than build_chain. */
static glesc_tensor *build_norm(glesc_graph *g, int64_t n, int64_t m, uint32_t seed)
{
    glesc_tensor *x = tg_input(g, GLESC_DTYPE_F32, 2, (int64_t[]){n, m}, seed, -2, 2);
    glesc_tensor *w = tg_input(g, GLESC_DTYPE_F32, 1, (int64_t[]){n}, seed + 1, 0.5f, 1.5f);
    return glesc_softmax(g, glesc_mul(g, glesc_rms_norm(g, x, 1e-6f), w), NULL, 1.0f, false);
}

/* The executor skips program and buffer binds that would change nothing;
 * graphs of other structures and sizes, and another context, run in
 * between must not leave it with a stale idea of what is bound. */
Test(graph, state_cache_survives_alternating_graphs_and_contexts)
{
    glesc_context *ctx2 = test_context(NULL);
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
    glesc_graph *a = glesc_graph_create(ctx), *b = glesc_graph_create(ctx);
    glesc_graph *c = glesc_graph_create(ctx2);
    for (int i = 0; i < 6; i++) {
        int64_t n = i % 2 ? 100 : 33; /* sizes change every other round */
        glesc_graph_reset(a);
        glesc_tensor *y = build_chain(a, n, 3, (uint32_t)i);
        tg_check(a, &y, 1, 1e-10, "chain");
        glesc_graph_reset(b);
        glesc_tensor *z = build_norm(b, n + 7, 2, (uint32_t)i + 10);
        tg_check(b, &z, 1, 1e-10, "norm");
        /* the same graph again: everything replayed, nothing rebound */
        tg_check(a, &y, 1, 1e-10, "chain again");
        cr_assert_eq(glesc_context_make_current(ctx2), GLESC_OK);
        glesc_graph_reset(c);
        glesc_tensor *w = build_chain(c, n + 1, 2, (uint32_t)i + 20);
        tg_check(c, &w, 1, 1e-10, "chain on a second context");
        cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
        /* the pool deletes its cached buffers: their names may come back */
        glesc_graph_reset(b);
        gl_pool_trim(ctx, 0);
    }
    glesc_graph_destroy(a);
    glesc_graph_destroy(b);
    cr_assert_eq(glesc_context_make_current(ctx2), GLESC_OK);
    glesc_graph_destroy(c);
    glesc_context_destroy(ctx2);
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
}

/* Every allocation of building and computing a small fused graph fails in
 * turn: each failure must come back as an error with a message, never a
 * crash, and the context must stay usable. */
Test(graph, allocation_failures_are_reported)
{
    int failures = 0, n;
    for (n = 0; n < 2000; n++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *x = g ? glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){37, 3}) : NULL;
        glesc_tensor *w = g ? glesc_tensor_new(g, GLESC_DTYPE_F16, 2, (int64_t[]){37, 5}) : NULL;
        if (x)
            tg_fill(x, 1, -1, 1);
        if (w)
            tg_fill(w, 2, -1, 1);
        core_alloc_fail_after(n);
        glesc_tensor *y = glesc_add(g, glesc_mul(g, glesc_rms_norm(g, x, 1e-6f), x), x);
        glesc_tensor *z = glesc_silu(g, glesc_matmul(g, w, y));
        glesc_status st = z ? glesc_graph_compute(g, &z, 1) : GLESC_ERROR_OUT_OF_MEMORY;
        long made = core_alloc_fail_after(-1);
        if (st != GLESC_OK) {
            failures++;
            cr_assert(z == NULL || strlen(glesc_context_errmsg(ctx)) > 0);
        }
        glesc_graph_destroy(g);
        if (st == GLESC_OK && made <= n)
            break; /* the whole run needed fewer allocations: done */
    }
    cr_log_info("allocation failure injected at %d points, %d reported", n, failures);
    cr_assert_gt(failures, 10);
    /* the context still works */
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *y = build_chain(g, 33, 7, 1);
    tg_check(g, &y, 1, 1e-10, "after OOM sweep");
    glesc_graph_destroy(g);
}

/* A readback copies a tensor's bytes after the work before it and before
 * the work after it: read after the next compute overwrote the tensor, it
 * still gives the first compute's values. Both paths: the persistently
 * mapped buffer (where GL_EXT_buffer_storage exists) and the pool buffer
 * mapped per read (GLESC_READBACK=map). */
static void readback_case(const char *mode)
{
    if (mode)
        setenv("GLESC_READBACK", mode, 1);
    else
        unsetenv("GLESC_READBACK");
    cr_log_info("readback %s (GL_EXT_buffer_storage: %s)", mode ? mode : "default",
                glesc_context_caps(ctx)->has_buffer_storage ? "yes" : "no");
    glesc_readback *rb;
    cr_assert_eq(glesc_readback_create(ctx, &rb), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tensor *acc = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){3});
    int32_t v[3];
    cr_expect_eq(glesc_readback_finish(rb, v, sizeof v), GLESC_ERROR_STATE, "nothing queued");
    for (int step = 0; step < 4; step++) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){3});
        float xv[3] = {(float)step, (float)(10 * step), -1.0f};
        cr_assert_eq(glesc_tensor_write_f32(x, xv, 3), GLESC_OK);
        glesc_tensor *y = glesc_cpy(g, glesc_scale(g, x, 2.0f, 1.0f), acc);
        cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        if (step > 0) { /* the previous step's copy, read after this step */
            cr_assert_eq(glesc_readback_finish(rb, v, sizeof v), GLESC_OK, "%s",
                         glesc_context_errmsg(ctx));
            int prev = step - 1;
            cr_expect(v[0] == 2 * prev + 1 && v[1] == 20 * prev + 1 && v[2] == -1,
                      "step %d: %d %d %d", prev, v[0], v[1], v[2]);
        }
        cr_assert_eq(glesc_readback_start(rb, acc), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        glesc_graph_destroy(g);
    }
    cr_expect_eq(glesc_readback_finish(rb, v, 4), GLESC_ERROR_INVALID_ARGUMENT, "a wrong size");
    cr_assert_eq(glesc_readback_finish(rb, v, sizeof v), GLESC_OK);
    cr_expect(v[0] == 7 && v[1] == 61, "the last step: %d %d", v[0], v[1]);
    cr_expect_eq(glesc_readback_finish(rb, v, sizeof v), GLESC_ERROR_STATE, "read once");
    /* what it cannot copy */
    glesc_tensor *q = glesc_weight_new(ctx, GLESC_DTYPE_Q4_0, 2, (int64_t[]){32, 2});
    cr_expect_eq(glesc_readback_start(rb, q), GLESC_ERROR_UNSUPPORTED);
    cr_expect(strstr(glesc_context_errmsg(ctx), "q4_0"), "%s", glesc_context_errmsg(ctx));
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *m = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){4, 3});
    cr_expect_eq(glesc_readback_start(rb, glesc_transpose(g, m)), GLESC_ERROR_UNSUPPORTED,
                 "a transposed view is not contiguous");
    cr_expect_eq(glesc_readback_start(rb, m), GLESC_ERROR_STATE, "an input never written");
    glesc_graph_destroy(g);
    glesc_weight_free(q);
    glesc_weight_free(acc);
    glesc_readback_destroy(rb);
    glesc_readback_destroy(NULL);
}

Test(graph, readback_reads_what_the_work_before_it_wrote)
{
    readback_case(NULL);
}

Test(graph, readback_through_a_map_reads_the_same)
{
    readback_case("map");
    unsetenv("GLESC_READBACK");
}

/* A compute prepared ahead (compute_prepare: ordered and planned) runs at
 * the next compute of the same graph and output, and only then: a change
 * of the graph's tensors, another compute in between or a plan drop makes
 * the compute plan again (a stale order would read freed tensors: ASan). */
static float prep_compute(glesc_graph *g, float xv, float mul, bool prepare, bool rebuild,
                          bool other, bool *used)
{
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4});
    glesc_tensor *y = glesc_scale(g, x, mul, 0.0f);
    if (prepare)
        cr_assert_eq(compute_prepare(g, y), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    if (rebuild) { /* the same structure again, the old tensors freed */
        glesc_graph_reset(g);
        x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4});
        y = glesc_scale(g, x, mul, 0.0f);
    }
    if (other) { /* a compute of another graph in between */
        glesc_graph *o = glesc_graph_create(ctx);
        glesc_tensor *a = glesc_tensor_new(o, GLESC_DTYPE_F32, 1, (int64_t[]){4});
        cr_assert_eq(glesc_tensor_write_f32(a, (float[]){1, 2, 3, 4}, 4), GLESC_OK);
        glesc_tensor *b = glesc_scale(o, a, 3.0f, 0.0f);
        cr_assert_eq(glesc_graph_compute(o, &b, 1), GLESC_OK);
        glesc_graph_destroy(o);
    }
    float in[4] = {xv, xv, xv, xv}, out[4];
    cr_assert_eq(glesc_tensor_write_f32(x, in, 4), GLESC_OK);
    compute_state *cs = compute_state_get(ctx);
    *used = cs->prep.valid && cs->prep.out == y && cs->prep.gen == g->gen &&
            cs->prep.computes == cs->computes;
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_expect(!cs->prep.valid, "a compute consumes or drops what was prepared");
    cr_assert_eq(glesc_tensor_read_f32(y, out, 4), GLESC_OK);
    glesc_graph_reset(g);
    return out[3];
}

Test(graph, compute_prepared_ahead_runs_only_when_nothing_changed)
{
    glesc_graph *g = glesc_graph_create(ctx);
    bool used;
    cr_expect_float_eq(prep_compute(g, 2, 3, false, false, false, &used), 6, 0);
    cr_expect(!used);
    cr_expect_float_eq(prep_compute(g, 2, 5, true, false, false, &used), 10, 0);
    cr_expect(used, "prepared, nothing changed: the compute takes it");
    cr_expect_float_eq(prep_compute(g, 3, 5, true, true, false, &used), 15, 0);
    cr_expect(!used, "the graph was rebuilt");
    cr_expect_float_eq(prep_compute(g, 4, 5, true, false, true, &used), 20, 0);
    cr_expect(!used, "another compute ran in between");
    cr_assert_eq(
        compute_prepare(
            g, glesc_scale(g, glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4}), 2.0f, 0.0f)),
        GLESC_OK);
    compute_plans_drop(ctx);
    cr_expect(!compute_state_get(ctx)->prep.valid, "dropping the plans drops it");
    glesc_graph_destroy(g);
}
