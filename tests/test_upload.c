/*
 * test_upload.c — filling persistent tensors (upload.c): every weight type
 * round-trips through each upload path (map, staging, subdata; GLESC_UPLOAD)
 * both by one thread (small writes) and by the workers (a few MiB split
 * over row chunks of a small storage-block limit): the GPU buffers hold
 * exactly what the CPU repack makes of the bytes, and glesc_tensor_read gives
 * the bytes back. glesc_weights_write reports its sources in order, stops on
 * a failing source (naming it, with the source's message) and on
 * cancellation, refuses what is not a persistent tensor; a new weight reads
 * as zeros until written, also inside a graph; a weight written again after
 * a compute used it is seen by the next compute.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "test_util.h"

static const glesc_dtype types[] = {
    GLESC_DTYPE_F32,    GLESC_DTYPE_F16,   GLESC_DTYPE_BF16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_1,
    GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,  GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q8_1, GLESC_DTYPE_Q2_K,
    GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,  GLESC_DTYPE_Q5_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL,
    GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
};
static const char *const paths[] = {"map", "staging", "subdata"};

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* The GPU image the CPU makes of host bytes: block rows repacked by the
 * portable path (the upload's workers take the specialised one), or the
 * bytes themselves, padded with zeros to whole words. */
static uint8_t *expected_gpu(glesc_dtype t, int64_t ne0, int64_t rows, const uint8_t *host,
                             uint64_t *size)
{
    uint64_t bytes = graph_dtype_quant(t) ? quant_gpu_row_bytes(t, ne0) * (uint64_t)rows
                                          : (uint64_t)ne0 * (uint64_t)rows * graph_dtype_size(t);
    *size = (bytes + 3) & ~(uint64_t)3;
    uint8_t *img = calloc(1, (size_t)*size);
    cr_assert_not_null(img);
    if (graph_dtype_quant(t))
        cr_assert_eq(quant_gpu_repack_generic(t, host, ne0, rows, (uint32_t *)(void *)img),
                     GLESC_OK);
    else
        memcpy(img, host, (size_t)bytes);
    return img;
}

/* Writes a [ne0, rows] weight of type t with random bytes and checks the
 * GPU image and the read-back. */
static void round_trip(glesc_context *ctx, glesc_dtype t, int64_t ne0, int64_t rows, uint64_t seed)
{
    int64_t shape[2] = {ne0, rows};
    glesc_tensor *w = glesc_weight_new(ctx, t, 2, shape);
    cr_assert_not_null(w, "%s: %s", glesc_dtype_name(t), glesc_context_errmsg(ctx));
    size_t host = (size_t)graph_host_nbytes(w);
    uint8_t *src = malloc(host), *back = malloc(host);
    cr_assert(src && back);
    fill_random(src, host, seed);
    cr_assert_eq(glesc_tensor_write(w, src, host), GLESC_OK, "%s: %s", glesc_dtype_name(t),
                 glesc_context_errmsg(ctx));
    uint64_t img_size;
    uint8_t *img = expected_gpu(t, ne0, rows, src, &img_size);
    uint8_t *gpu = malloc((size_t)img_size);
    cr_assert_not_null(gpu);
    cr_assert_eq(w->st.bytes, img_size);
    cr_assert_eq(graph_storage_read(w, 0, gpu, img_size), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    size_t bad = 0;
    while (bad < img_size && gpu[bad] == img[bad])
        bad++;
    cr_expect_eq(bad, img_size,
                 "%s [%lld, %lld] (%d chunks, path %s): GPU byte %zu is %u, the CPU "
                 "repack has %u",
                 glesc_dtype_name(t), (long long)ne0, (long long)rows, w->st.n_chunks,
                 getenv("GLESC_UPLOAD"), bad, bad < img_size ? gpu[bad] : 0,
                 bad < img_size ? img[bad] : 0);
    cr_assert_eq(glesc_tensor_read(w, back, host), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_expect_eq(memcmp(back, src, host), 0, "%s: the read-back differs", glesc_dtype_name(t));
    free(src);
    free(back);
    free(img);
    free(gpu);
    glesc_weight_free(w);
}

Test(upload, every_type_round_trips_on_every_path)
{
    /* 1 MiB storage blocks: the large weights are split into row chunks */
    glesc_context_options co = {.cache_dir = "off", .max_storage_block_size = 1 << 20};
    glesc_context *ctx;
    cr_assert_eq(glesc_context_create(&co, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        setenv("GLESC_UPLOAD", paths[p], 1);
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            glesc_dtype t = types[i];
            int64_t ne0 = 1024;
            /* one small weight (no workers, odd size), one of ~5 MiB (workers) */
            uint64_t row = glesc_dtype_row_bytes(t, ne0);
            round_trip(ctx, t, t == GLESC_DTYPE_F16 || t == GLESC_DTYPE_BF16 ? 7 : ne0, 3, i);
            round_trip(ctx, t, ne0, (int64_t)((5u << 20) / row) + 3, 100 + i);
        }
    }
    unsetenv("GLESC_UPLOAD");
    glesc_context_destroy(ctx);
}

/* ---- glesc_weights_write ---- */

typedef struct src_mem {
    const uint8_t *bytes;
    uint64_t fail_at; /* read fails when its range reaches this offset (0: never) */
} src_mem;

static glesc_status read_mem(void *user, uint64_t offset, void *dst, size_t size)
{
    const src_mem *s = user;
    if (s->fail_at && offset + size > s->fail_at)
        return core_err_set(NULL, GLESC_ERROR_IO, "the disk holding bytes %llu..%llu caught fire",
                            (unsigned long long)offset, (unsigned long long)(offset + size));
    memcpy(dst, s->bytes + offset, size);
    return GLESC_OK;
}

typedef struct done_log {
    int calls, last, cancel_at;
    bool in_order;
} done_log;

static bool on_done(void *user, int i)
{
    done_log *l = user;
    l->in_order &= i == l->last + 1;
    l->last = i;
    l->calls++;
    return l->calls == l->cancel_at;
}

#define N_SRC 5

typedef struct src_set {
    glesc_tensor *t[N_SRC];
    uint8_t *bytes[N_SRC];
    src_mem mem[N_SRC];
    glesc_weight_source src[N_SRC];
} src_set;

/* Five q8_0 weights of 0.5 .. 2.5 MiB (6 MiB in all: the workers run). */
static void make_sources(glesc_context *ctx, src_set *s)
{
    for (int i = 0; i < N_SRC; i++) {
        int64_t shape[2] = {4096, 120 * (i + 1)};
        s->t[i] = glesc_weight_new(ctx, GLESC_DTYPE_Q8_0, 2, shape);
        cr_assert_not_null(s->t[i]);
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        glesc_tensor_set_name(s->t[i], name);
        size_t n = (size_t)graph_host_nbytes(s->t[i]);
        s->bytes[i] = malloc(n);
        fill_random(s->bytes[i], n, 7 + (uint64_t)i);
        s->mem[i] = (src_mem){s->bytes[i], 0};
        s->src[i] = (glesc_weight_source){s->t[i], read_mem, &s->mem[i]};
    }
}

static void free_sources(src_set *s)
{
    for (int i = 0; i < N_SRC; i++) {
        glesc_weight_free(s->t[i]);
        free(s->bytes[i]);
    }
}

Test(upload, sources_reported_in_order)
{
    glesc_context *ctx = test_context(NULL);
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        setenv("GLESC_UPLOAD", paths[p], 1);
        src_set s;
        make_sources(ctx, &s);
        done_log l = {0, -1, 0, true};
        cr_assert_eq(glesc_weights_write(ctx, s.src, N_SRC, on_done, &l), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        cr_expect_eq(l.calls, N_SRC, "%s", paths[p]);
        cr_expect(l.in_order, "%s", paths[p]);
        for (int i = 0; i < N_SRC; i++) {
            size_t n = (size_t)graph_host_nbytes(s.t[i]);
            uint8_t *back = malloc(n);
            cr_assert_eq(glesc_tensor_read(s.t[i], back, n), GLESC_OK);
            cr_expect_eq(memcmp(back, s.bytes[i], n), 0, "%s: w%d differs", paths[p], i);
            free(back);
        }
        free_sources(&s);
    }
    unsetenv("GLESC_UPLOAD");
    glesc_context_destroy(ctx);
}

Test(upload, a_failing_source_stops_with_its_message)
{
    glesc_context *ctx = test_context(NULL);
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        setenv("GLESC_UPLOAD", paths[p], 1);
        src_set s;
        make_sources(ctx, &s);
        s.mem[3].fail_at = 1000; /* w3 fails at its first piece */
        done_log l = {0, -1, 0, true};
        cr_assert_eq(glesc_weights_write(ctx, s.src, N_SRC, on_done, &l), GLESC_ERROR_IO);
        const char *msg = glesc_context_errmsg(ctx);
        cr_expect(strstr(msg, "caught fire"), "%s: %s", paths[p], msg);
        cr_expect_leq(l.calls, 3, "%s: tensors after the failing one were reported", paths[p]);
        cr_expect(l.in_order);
        free_sources(&s);
    }
    unsetenv("GLESC_UPLOAD");
    glesc_context_destroy(ctx);
}

Test(upload, the_callback_cancels)
{
    glesc_context *ctx = test_context(NULL);
    src_set s;
    make_sources(ctx, &s);
    done_log l = {0, -1, 2, true};
    cr_assert_eq(glesc_weights_write(ctx, s.src, N_SRC, on_done, &l), GLESC_ERROR_CANCELLED);
    cr_expect_eq(l.calls, 2, "no call after the cancelling one");
    cr_expect(strstr(glesc_context_errmsg(ctx), "'w1'"), "%s", glesc_context_errmsg(ctx));
    free_sources(&s);
    glesc_context_destroy(ctx);
}

Test(upload, only_persistent_tensors)
{
    glesc_context *ctx = test_context(NULL);
    glesc_graph *g = glesc_graph_create(ctx);
    uint8_t b[64] = {0};
    src_mem m = {b, 0};
    glesc_tensor *in = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){16});
    glesc_weight_source s = {in, read_mem, &m};
    cr_expect_eq(glesc_weights_write(ctx, &s, 1, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_context_errmsg(ctx), "not a persistent tensor"), "%s",
              glesc_context_errmsg(ctx));
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){16});
    s = (glesc_weight_source){w, NULL, &m};
    cr_expect_eq(glesc_weights_write(ctx, &s, 1, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_weights_write(ctx, NULL, 1, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_weights_write(ctx, &s, -1, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_weights_write(ctx, &s, 0, NULL, NULL), GLESC_OK);
    cr_expect_eq(glesc_weights_write(NULL, &s, 1, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_weight_free(w);
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx);
}

/* ---- Zeros and rewrites ---- */

Test(upload, a_new_weight_is_zeros_until_written)
{
    glesc_context *ctx = test_context(NULL);
    int64_t n = 1000;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i - 7.5f;
    /* used by a graph before any write: it adds zeros */
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, &n);
    cr_assert(w->zeros_due, "glesc_weight_new writes nothing itself");
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *in = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, &n);
    cr_assert_eq(glesc_tensor_write_f32(in, x, (size_t)n), GLESC_OK);
    glesc_tensor *out = glesc_add(g, in, w);
    cr_assert_not(w->zeros_due, "a graph using the weight wrote its zeros");
    cr_assert_eq(glesc_graph_compute(g, &out, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_read_f32(out, y, (size_t)n), GLESC_OK);
    cr_expect_eq(memcmp(x, y, (size_t)n * sizeof *x), 0, "a new weight adds zeros");
    glesc_graph_destroy(g);
    glesc_weight_free(w);
    /* read before any write: zeros (f16 and a block type too) */
    glesc_dtype ts[] = {GLESC_DTYPE_F16, GLESC_DTYPE_Q4_K};
    for (size_t k = 0; k < 2; k++) {
        glesc_tensor *v = glesc_weight_new(ctx, ts[k], 2, (int64_t[]){256, 3});
        cr_assert_eq(glesc_tensor_read_f32(v, y, 768), GLESC_OK, "%s", glesc_context_errmsg(ctx));
        cr_assert_not(v->zeros_due, "the read wrote the zeros");
        for (int i = 0; i < 768; i++)
            cr_assert_eq(y[i], 0.0f, "%s: element %d", glesc_dtype_name(ts[k]), i);
        glesc_weight_free(v);
    }
    /* written first: no zeros are ever written */
    w = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, &n);
    cr_assert_eq(glesc_tensor_write_f32(w, x, (size_t)n), GLESC_OK);
    cr_assert_not(w->zeros_due);
    cr_assert_eq(glesc_tensor_read_f32(w, y, (size_t)n), GLESC_OK);
    cr_expect_eq(memcmp(x, y, (size_t)n * sizeof *x), 0);
    glesc_weight_free(w);
    free(x);
    free(y);
    glesc_context_destroy(ctx);
}

Test(upload, a_weight_written_again_after_a_compute)
{
    glesc_context *ctx = test_context(NULL);
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        setenv("GLESC_UPLOAD", paths[p], 1);
        int64_t n = 3 << 20; /* 12 MiB of f32: the workers write it */
        float *a = malloc((size_t)n * sizeof *a), *y = malloc(4 * sizeof *y);
        glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, &n);
        for (int round = 1; round <= 2; round++) {
            for (int64_t i = 0; i < n; i++)
                a[i] = (float)(round * (i % 1000));
            cr_assert_eq(glesc_tensor_write_f32(w, a, (size_t)n), GLESC_OK, "%s",
                         glesc_context_errmsg(ctx));
            glesc_graph *g = glesc_graph_create(ctx);
            size_t nb[1] = {4};
            glesc_tensor *tail =
                glesc_view(g, w, 1, (int64_t[]){4}, nb, (size_t)(n - 4) * sizeof(float));
            glesc_tensor *out = glesc_scale(g, tail, 2.0f, 0.0f);
            cr_assert_eq(glesc_graph_compute(g, &out, 1), GLESC_OK, "%s",
                         glesc_context_errmsg(ctx));
            cr_assert_eq(glesc_tensor_read_f32(out, y, 4), GLESC_OK);
            for (int i = 0; i < 4; i++)
                cr_expect_eq(y[i], 2.0f * a[n - 4 + i], "%s, round %d: element %d is %g", paths[p],
                             round, i, (double)y[i]);
            glesc_graph_destroy(g);
        }
        glesc_weight_free(w);
        free(a);
        free(y);
    }
    unsetenv("GLESC_UPLOAD");
    glesc_context_destroy(ctx);
}
