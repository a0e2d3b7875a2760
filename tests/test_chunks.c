/*
 * test_chunks.c — tensors larger than the storage-block limit: split into
 * row chunks, written and read across chunks, multiplied (GEMV and GEMM,
 * with epilogue and the gate/up pair) and gathered by get_rows with one
 * dispatch per chunk. Most tests lower the limit to 1 MiB through the
 * context option; one multiplies a ~300 MiB f16 weight under llvmpipe's real
 * 128 MiB limit (m = 1, so it stays a matter of seconds).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define F16 GLESC_DTYPE_F16

static glesc_context *ctx;

static void setup(void)
{
    glesc_context_options o = {0};
    unsetenv("GLESC_CACHE_DIR");
    o.cache_dir = "off";
    o.max_storage_block_size = 1 << 20;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
}

TestSuite(chunks, .init = setup, .fini = teardown);

static glesc_tensor *weight(glesc_dtype dt, int64_t k, int64_t n, uint32_t seed)
{
    glesc_tensor *w = glesc_weight_new(ctx, dt, 2, (int64_t[]){k, n});
    cr_assert_not_null(w, "%s", glesc_context_errmsg(ctx));
    tg_fill(w, seed, -1, 1);
    return w;
}

Test(chunks, weight_is_split_and_round_trips)
{
    /* 1000 rows of 4 KiB: 256 rows per 1 MiB chunk → 4 chunks */
    glesc_tensor *w = weight(F32, 1024, 1000, 1);
    cr_assert_eq(w->st.n_chunks, 4);
    cr_assert_eq(w->st.chunk_rows, 256);
    float *v = malloc(1024 * 1000 * sizeof *v);
    for (int i = 0; i < 1024 * 1000; i++)
        v[i] = (float)(i % 9973);
    tg_write(w, v);
    float *r = tg_read(w);
    cr_assert_eq(memcmp(v, r, 1024 * 1000 * sizeof *v), 0);
    free(v);
    free(r);
    glesc_weight_free(w);
}

Test(chunks, matmul_across_chunks)
{
    glesc_tensor *w = weight(F32, 1024, 600, 2);   /* 3 chunks */
    glesc_tensor *wh = weight(F16, 1000, 1100, 3); /* 2000-byte rows, 524 per chunk: 3 chunks */
    for (int64_t m = 1; m <= 20; m += 19) {
        glesc_graph *g = glesc_graph_create(ctx);
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){1024, m}, 4, -1, 1);
        glesc_tensor *xh = tg_input(g, F32, 2, (int64_t[]){1000, m}, 5, -1, 1);
        glesc_tensor *bias = tg_input(g, F32, 1, (int64_t[]){600}, 6, -1, 1);
        glesc_tensor *outs[] = {glesc_add(g, glesc_matmul(g, w, x), bias), glesc_matmul(g, wh, xh)};
        tg_check(g, outs, 2, 1e-9, m == 1 ? "chunked GEMV" : "chunked GEMM");
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_assert_eq(s.kernels, 2);
        cr_assert_eq(s.dispatches, 6, "one dispatch per chunk");
        glesc_graph_destroy(g);
    }
    glesc_weight_free(w);
    glesc_weight_free(wh);
}

Test(chunks, gate_up_pair_across_chunks)
{
    glesc_tensor *wg = weight(F16, 512, 3000, 7); /* 1 KiB rows, 1024 per chunk: 3 chunks */
    glesc_tensor *wu = weight(F16, 512, 3000, 8);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){512, 2}, 9, -1, 1);
    glesc_tensor *y = glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg, x)), glesc_matmul(g, wu, x));
    tg_check(g, &y, 1, 1e-9, "chunked gate/up");
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.kernels, 1);
    cr_assert_eq(s.dispatches, 3);
    glesc_graph_destroy(g);
    glesc_weight_free(wg);
    glesc_weight_free(wu);
}

Test(chunks, get_rows_across_chunks)
{
    glesc_tensor *tab = weight(F16, 700, 2000, 10); /* 1400-byte rows, 748 per chunk: 3 chunks */
    cr_assert_eq(tab->st.n_chunks, 3);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *idx = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){8});
    tg_write(idx, (float[]){0, 747, 748, 1999, 1500, -3, 2000, 5});
    glesc_tensor *y = glesc_scale(g, glesc_get_rows(g, tab, idx), 2, 0);
    tg_check(g, &y, 1, 1e-12, "chunked get_rows");
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    cr_assert_eq(s.kernels, 1, "the scale is get_rows' epilogue");
    cr_assert_eq(s.dispatches, 3);
    glesc_graph_destroy(g);
    glesc_weight_free(tab);
}

Test(chunks, other_ops_refuse_chunked_tensors)
{
    glesc_tensor *w = weight(F32, 1024, 600, 11);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *y = glesc_exp(g, w);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_ERROR_UNSUPPORTED);
    cr_assert(strstr(glesc_context_errmsg(ctx), "split into 3 chunks can only be read by matmul"),
              "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    /* an activation over the limit is an error naming sizes */
    g = glesc_graph_create(ctx);
    glesc_tensor *x = tg_input(g, F32, 1, (int64_t[]){1000}, 1, -1, 1);
    glesc_tensor *big = glesc_broadcast(g, x, 2, (int64_t[]){1000, 300});
    y = glesc_exp(g, big);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_ERROR_LIMIT);
    cr_assert(strstr(glesc_context_errmsg(ctx), "exceeds the device's storage-block limit"), "%s",
              glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    glesc_weight_free(w);
}

/* ---- the real limit ---- */

static float wval(int64_t n, int64_t k)
{
    uint32_t h = (uint32_t)(n * 2654435761u) ^ (uint32_t)(k * 40503u + 0x9e3779b9u);
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return (float)(h & 0xffff) / 65536.0f - 0.5f;
}

Test(chunks_real, f16_weight_of_300_mib_under_128_mib_limit, .timeout = 300)
{
    glesc_context *c = test_context(NULL);
    const glesc_caps *caps = glesc_context_caps(c);
    int64_t k = 4096, n = 38400; /* 4096 × 38400 f16 = 300 MiB */
    uint64_t bytes = (uint64_t)k * (uint64_t)n * 2;
    if (bytes <= caps->max_storage_block_size) {
        glesc_context_destroy(c);
        cr_skip_test("the device's storage-block limit (%llu) holds the whole weight",
                     (unsigned long long)caps->max_storage_block_size);
    }
    glesc_tensor *w = glesc_weight_new(c, F16, 2, (int64_t[]){k, n});
    cr_assert_not_null(w, "%s", glesc_context_errmsg(c));
    cr_log_info("300 MiB weight in %d chunks of %lld rows (limit %llu bytes)", w->st.n_chunks,
                (long long)w->st.chunk_rows, (unsigned long long)caps->max_storage_block_size);
    cr_assert_geq(w->st.n_chunks, 3);
    uint16_t *h = malloc(bytes);
    cr_assert_not_null(h);
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < k; i++)
            h[r * k + i] = quant_f32_to_f16(wval(r, i));
    cr_assert_eq(glesc_tensor_write(w, h, bytes), GLESC_OK, "%s", glesc_context_errmsg(c));
    glesc_graph *g = glesc_graph_create(c);
    glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){k, 1});
    float *xv = malloc((size_t)k * sizeof *xv);
    for (int64_t i = 0; i < k; i++)
        xv[i] = wval(i, 7) * 2;
    tg_write(x, xv);
    glesc_tensor *y = glesc_matmul(g, w, x);
    uint64_t t0 = core_time_ns();
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    float *got = tg_read(y);
    cr_log_info("GEMV over %d chunks: %.2f s", w->st.n_chunks, (double)(core_time_ns() - t0) / 1e9);
    float *ref = malloc((size_t)n * sizeof *ref);
    for (int64_t r = 0; r < n; r++) {
        double acc = 0;
        for (int64_t i = 0; i < k; i++)
            acc += (double)quant_f16_to_f32(h[r * k + i]) * xv[i];
        ref[r] = (float)acc;
    }
    double e = tg_nmse(got, ref, n);
    cr_log_info("300 MiB f16 GEMV: NMSE %.3g", e);
    cr_assert_leq(e, 1e-9);
    free(h);
    free(xv);
    free(got);
    free(ref);
    glesc_graph_destroy(g);
    glesc_weight_free(w);
    glesc_context_destroy(c);
}
