/*
 * test_kv_quant.c — the quantized KV cache (q8_0, q4_0): set_rows' GPU
 * quantizer against ggml's CPU reference (quant_quantize) block by block;
 * attention reading quantized keys and values (decode, also through
 * registers, prefill, GQA, mixed types, the portable caps) against the CPU
 * evaluator (worst NMSE printed, tolerance 1e-7); and sessions of
 * synthetic models: logits of q8_0 and q4_0 caches (and mixed key/value
 * types) close to an f32 cache's in prefill and decode, a context shift, a
 * saved state's round trip (the bytes again) and a state of other types
 * refused, session copies, the memory estimate against the allocation, and
 * head sizes that are no multiple of 32 refused.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/synth.h"
#include "core/core.h"
#include "glesc_llm.h"
#include "quant/quant.h"
#include "test_graph_util.h"
#include "test_synth_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define Q8 GLESC_DTYPE_Q8_0
#define Q4 GLESC_DTYPE_Q4_0

TEST_GPU_TMPDIR_SUITE(kv_quant);

/* A cache [kv_dim, n_ctx] of type t, filled with random values quantized
 * on the host (glesc_tensor_write_f32). */
static glesc_tensor *cache_new(glesc_dtype t, int64_t kv_dim, int64_t n_ctx, uint32_t seed)
{
    glesc_tensor *c = glesc_weight_new(ctx, t, 2, (int64_t[]){kv_dim, n_ctx});
    cr_assert_not_null(c, "%s", glesc_context_errmsg(ctx));
    size_t n = (size_t)(kv_dim * n_ctx);
    float *v = malloc(n * sizeof *v);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    cr_assert_eq(glesc_tensor_write_f32(c, v, n), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    free(v);
    return c;
}

/* The GPU's blocks of rows written by set_rows equal ggml's reference
 * quantizer's: every scale, and every quant within one step (the GPU's
 * division may round the other way at a tie; llvmpipe matches exactly). */
static void check_quantizer(glesc_dtype t, int64_t kv_dim)
{
    const int64_t n_ctx = 12, n = 5;
    glesc_tensor *c = cache_new(t, kv_dim, n_ctx, 3);
    glesc_graph *g = glesc_graph_create(ctx);
    /* a wide range, a zero row and a row of one value in each block */
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){kv_dim, n}, 5, -3, 3);
    float *xv = tg_read(x);
    for (int64_t i = 0; i < kv_dim; i++) {
        xv[kv_dim + i] = 0.0f;
        xv[2 * kv_dim + i] = i % 32 == 7 ? -2.5f : 0.0f;
        xv[3 * kv_dim + i] *= 1e-3f;
    }
    tg_write(x, xv);
    int32_t rows[5] = {0, 3, 4, 11, 7};
    glesc_tensor *ix = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){n});
    cr_assert_eq(glesc_tensor_write(ix, rows, sizeof rows), GLESC_OK);
    glesc_tensor *y = glesc_set_rows(g, c, x, ix);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    size_t row = glesc_dtype_row_bytes(t, kv_dim), bb = t == Q8 ? 34 : 18;
    uint8_t *got = malloc(row * (size_t)n_ctx), *want = malloc(row);
    cr_assert_eq(glesc_tensor_read(c, got, row * (size_t)n_ctx), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    int differ = 0, total = 0;
    for (int64_t r = 0; r < n; r++) {
        cr_assert_eq(quant_quantize(t, xv + r * kv_dim, want, kv_dim), GLESC_OK);
        const uint8_t *gr = got + (size_t)rows[r] * row;
        for (size_t b = 0; b < row; b += bb) {
            cr_assert(!memcmp(gr + b, want + b, 2),
                      "%s row %lld block %zu: scale %02x%02x, want %02x%02x", glesc_dtype_name(t),
                      (long long)r, b / bb, gr[b + 1], gr[b], want[b + 1], want[b]);
            for (size_t j = 2; j < bb; j++) {
                int q[2][2] = {{gr[b + j], want[b + j]}, {0, 0}};
                if (t == Q8) {
                    q[0][0] = (int8_t)gr[b + j];
                    q[0][1] = (int8_t)want[b + j];
                } else {
                    q[1][0] = gr[b + j] >> 4;
                    q[1][1] = want[b + j] >> 4;
                    q[0][0] &= 15;
                    q[0][1] &= 15;
                }
                for (int h = 0; h < (t == Q8 ? 1 : 2); h++) {
                    cr_assert_leq(abs(q[h][0] - q[h][1]), 1, "%s row %lld block %zu byte %zu",
                                  glesc_dtype_name(t), (long long)r, b / bb, j);
                    differ += q[h][0] != q[h][1];
                    total++;
                }
            }
        }
    }
    cr_log_info("%s set_rows vs ggml's quantize_row_%s_ref: scales equal, %d of %d quants one "
                "step off",
                glesc_dtype_name(t), glesc_dtype_name(t), differ, total);
    cr_expect_leq(differ, total / 100, "%d of %d", differ, total);
    free(got);
    free(want);
    free(xv);
    glesc_graph_destroy(g);
    glesc_weight_free(c);
}

Test(kv_quant, set_rows_quantizes_as_ggml)
{
    check_quantizer(Q8, 256); /* a full group of 8 blocks */
    check_quantizer(Q4, 256);
    check_quantizer(Q8, 96); /* 3 blocks: a short group, an odd pair */
    check_quantizer(Q4, 160);
}

typedef struct kvq_case {
    int64_t d, h, hkv, tq, n_past;
    glesc_dtype kt, vt;
} kvq_case;

/* A model's step: new rows appended to quantized caches with set_rows
 * (rope-free), attention over views of the caches' first n_past + tq rows
 * (as forward.c makes them); GPU against the CPU evaluator. */
static double run_case(glesc_context *c_, const kvq_case *c, uint32_t seed)
{
    const int64_t kv_dim = c->d * c->hkv, n_ctx = c->n_past + c->tq + 3, n_kv = c->n_past + c->tq;
    glesc_context *saved = ctx;
    ctx = c_;
    glesc_tensor *kc = cache_new(c->kt, kv_dim, n_ctx, seed);
    glesc_tensor *vc = cache_new(c->vt, kv_dim, n_ctx, seed + 1);
    glesc_graph *g = glesc_graph_create(c_);
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){c->d, c->h, c->tq}, seed + 2, -1, 1);
    glesc_tensor *k = tg_input(g, F32, 2, (int64_t[]){kv_dim, c->tq}, seed + 3, -1, 1);
    glesc_tensor *v = tg_input(g, F32, 2, (int64_t[]){kv_dim, c->tq}, seed + 4, -1, 1);
    int32_t pos[64];
    for (int i = 0; i < c->tq; i++)
        pos[i] = (int32_t)(c->n_past + i);
    glesc_tensor *p = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){c->tq});
    cr_assert_eq(glesc_tensor_write(p, pos, (size_t)c->tq * 4), GLESC_OK);
    glesc_tensor *ks = glesc_set_rows(g, kc, k, p), *vs = glesc_set_rows(g, vc, v, p);
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *kv[2] = {ks, vs};
    glesc_dtype ty[2] = {c->kt, c->vt};
    for (int i = 0; i < 2; i++)
        kv[i] = glesc_permute(g,
                              glesc_view(g, kv[i], 3, (int64_t[]){c->d, c->hkv, n_kv},
                                         (size_t[]){0, glesc_dtype_row_bytes(ty[i], c->d),
                                                    glesc_dtype_row_bytes(ty[i], kv_dim)},
                                         0),
                              perm);
    glesc_tensor *y = glesc_attention_ext(g, glesc_permute(g, q, perm), kv[0], kv[1], NULL,
                                          1.0f / sqrtf((float)c->d), true, 0, 0);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(c_));
    char what[128];
    snprintf(what, sizeof what, "attention d=%lld h=%lld/%lld tq=%lld n_past=%lld k %s v %s",
             (long long)c->d, (long long)c->h, (long long)c->hkv, (long long)c->tq,
             (long long)c->n_past, glesc_dtype_name(c->kt), glesc_dtype_name(c->vt));
    double e = tg_check(g, &y, 1, 1e-7, what);
    cr_log_info("%s: NMSE %.3g", what, e);
    glesc_graph_destroy(g);
    glesc_weight_free(kc);
    glesc_weight_free(vc);
    ctx = saved;
    return e;
}

static const kvq_case cases[] = {
    {64, 4, 2, 1, 40, Q8, Q8},  {64, 4, 2, 1, 300, Q4, Q4}, {128, 8, 2, 1, 70, Q8, Q4},
    {32, 2, 2, 1, 9, Q4, F32},  {64, 4, 2, 17, 0, Q8, Q8},  {64, 4, 2, 20, 13, Q4, Q4},
    {128, 4, 1, 9, 30, Q8, Q4}, {96, 6, 3, 33, 5, F32, Q8},
};

Test(kv_quant, attention_reads_quantized_caches)
{
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        worst = fmax(worst, run_case(ctx, &cases[i], (uint32_t)(10 * i + 1)));
    cr_log_info("attention over quantized caches: worst NMSE %.3g (tolerance 1e-7)", worst);
}

Test(kv_quant, attention_portable_caps)
{
    glesc_context *portable = test_portable_context();
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        worst = fmax(worst, run_case(portable, &cases[i], (uint32_t)(10 * i + 101)));
    cr_log_info("attention over quantized caches (portable caps): worst NMSE %.3g", worst);
    glesc_context_destroy(portable);
}

/* The decode variant that loads tiles into registers, and the keys split
 * over many workgroups and combined in decode and prefill (GLESC_ATTN_DECODE
 * regs=1, target=256 with tiles of 16; GLESC_ATTN target=512 with tiles of
 * 16 keys: read when a kernel is generated, so plans made in this test). */
Test(kv_quant, decode_register_tiles_and_splits)
{
    setenv("GLESC_ATTN_DECODE", "regs=1,target=256,tiles=1,t=16", 1);
    setenv("GLESC_ATTN", "target=512,bk=16", 1);
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        worst = fmax(worst, run_case(ctx, &cases[i], (uint32_t)(10 * i + 201)));
    unsetenv("GLESC_ATTN_DECODE");
    unsetenv("GLESC_ATTN");
    cr_log_info("decode through registers, keys split in decode and prefill, over quantized "
                "caches: worst NMSE %.3g",
                worst);
}

Test(kv_quant, views_of_blocks_are_checked)
{
    glesc_tensor *c = cache_new(Q8, 64, 8, 1);
    glesc_graph *g = glesc_graph_create(ctx);
    /* a stride that cuts a block, dimension 0 moved */
    cr_assert_null(glesc_view(g, c, 2, (int64_t[]){64, 4}, (size_t[]){0, 40}, 0));
    cr_assert(strstr(glesc_context_errmsg(ctx), "whole blocks"), "%s", glesc_context_errmsg(ctx));
    cr_assert_null(glesc_permute(g, c, (int[]){1, 0, 2, 3}));
    cr_assert(strstr(glesc_context_errmsg(ctx), "dimension 0"), "%s", glesc_context_errmsg(ctx));
    /* not a source of other ops */
    cr_assert_null(glesc_add(g, c, c));
    cr_assert(strstr(glesc_context_errmsg(ctx), "quantized"), "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    glesc_weight_free(c);
}

/* ---- Sessions of a synthetic model ---- */

enum { N = 20 };

/* The tests' tiny llama with heads of 32 (quantized caches need whole
 * blocks a head), n_layer layers; *path (free() it) where given. */
static glesc_model *model(int n_layer, int head_dim, char **path)
{
    synth_params p;
    test_tiny_params(&p, n_layer, 64);
    p.head_dim = head_dim;
    p.seed = 5;
    char name[32];
    snprintf(name, sizeof name, "kvq-%d-%d.gguf", n_layer, head_dim);
    char *file = test_synth_write(&p, dir, name);
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, file, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    if (path)
        *path = file;
    else
        free(file);
    return m;
}

static glesc_session *session(glesc_model *m, glesc_dtype kt, glesc_dtype vt)
{
    glesc_session *s;
    glesc_session_options o = {.n_ctx = 48, .kv_type = kt, .kv_type_v = vt};
    cr_assert_eq(glesc_session_create(m, &o, &s), GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

static void ids_of(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = i == 0 ? 1 : 3 + (i * 37) % 200;
}

static int64_t n_vocab(const glesc_model *m)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    return mi.n_vocab;
}

/* max |a - b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double w = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return w / fmax(scale, 1e-30);
}

/* Types and the tolerance of their logits against an f32 cache's (largest
 * difference over the largest logit), measured on llvmpipe with a margin. */
static const struct {
    glesc_dtype k, v;
    double tol;
} types[] = {
    {GLESC_KV_DEFAULT, GLESC_KV_DEFAULT, 2e-3}, /* f16 */
    {Q8, Q8, 2e-2},
    {Q4, Q4, 1.5e-1},
    {Q8, GLESC_DTYPE_F16, 2e-2},
    {Q4, Q8, 1.5e-1},
};

Test(kv_quant, logits_close_to_an_f32_cache)
{
    glesc_model *m = model(2, 32, NULL);
    int64_t nv = n_vocab(m);
    int32_t ids[N + 4];
    ids_of(ids, N + 4);
    float *want = malloc((size_t)(5 * nv) * sizeof *want), *got = malloc((size_t)nv * sizeof *got);
    glesc_session *ref = session(m, GLESC_KV_F32, GLESC_KV_DEFAULT);
    cr_assert_eq(glesc_session_eval(ref, ids, N, 0, want), GLESC_OK, "%s", glesc_last_errmsg());
    for (int i = 0; i < 4; i++) /* decode steps */
        cr_assert_eq(glesc_session_eval(ref, &ids[N + i], 1, 0, want + (i + 1) * nv), GLESC_OK);
    int f16_dispatches = 0;
    for (size_t t = 0; t < CORE_ARRAY_LEN(types); t++) {
        glesc_session *s = session(m, types[t].k, types[t].v);
        glesc_dtype kt, vt;
        glesc_session_kv_types(s, &kt, &vt);
        double worst = 0;
        cr_assert_eq(glesc_session_eval(s, ids, N, 0, got), GLESC_OK, "%s", glesc_last_errmsg());
        worst = rel_diff(got, want, nv);
        double prefill = worst;
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(glesc_session_eval(s, &ids[N + i], 1, 0, got), GLESC_OK, "%s",
                         glesc_last_errmsg());
            worst = fmax(worst, rel_diff(got, want + (i + 1) * nv, nv));
        }
        /* a decode step: a quantized cache's rows are one dispatch a layer
         * (keys and values paired), an f16 cache's none of their own */
        glesc_eval_stats es;
        glesc_session_last_stats(s, &es);
        if (t == 0)
            f16_dispatches = es.dispatches;
        bool own = kt != GLESC_DTYPE_F16 || vt != GLESC_DTYPE_F16; /* a dispatch per layer (2) */
        if (!getenv("GLESC_NO_FUSION")) /* kernel by kernel the counts differ */
            cr_expect_eq(es.dispatches, f16_dispatches + (own ? 2 : 0),
                         "k %s v %s: %d dispatches a step", glesc_dtype_name(kt),
                         glesc_dtype_name(vt), es.dispatches);
        cr_log_info("k %s v %s vs an f32 cache: logits' worst difference %.3g of the largest "
                    "(prefill of %d %.3g, 4 decode steps; tolerance %.3g)",
                    glesc_dtype_name(kt), glesc_dtype_name(vt), worst, N, prefill, types[t].tol);
        cr_expect_leq(worst, types[t].tol, "k %s v %s: %.3g", glesc_dtype_name(kt),
                      glesc_dtype_name(vt), worst);
        cr_expect_gt(worst, 0.0, "k %s v %s: no difference at all", glesc_dtype_name(kt),
                     glesc_dtype_name(vt));
        glesc_session_destroy(s);
    }
    glesc_session_destroy(ref);
    free(want);
    free(got);
    glesc_model_destroy(m);
}

/* A shift of a quantized cache (keys decoded, rotated, quantized again)
 * stays as close to an f32 cache's shift as the caches were. */
Test(kv_quant, context_shift)
{
    glesc_model *m = model(2, 32, NULL);
    int64_t nv = n_vocab(m);
    int32_t ids[N];
    ids_of(ids, N);
    float *want = malloc((size_t)nv * sizeof *want), *got = malloc((size_t)nv * sizeof *got);
    glesc_session *ref = session(m, GLESC_KV_F32, GLESC_KV_DEFAULT);
    cr_assert_eq(glesc_session_eval(ref, ids, N - 1, 0, NULL), GLESC_OK);
    cr_assert_eq(glesc_session_shift(ref, 3, 7), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(ref, &ids[N - 1], 1, 0, want), GLESC_OK);
    for (size_t t = 1; t < CORE_ARRAY_LEN(types); t++) {
        glesc_session *s = session(m, types[t].k, types[t].v);
        cr_assert_eq(glesc_session_eval(s, ids, N - 1, 0, NULL), GLESC_OK);
        cr_assert_eq(glesc_session_shift(s, 3, 7), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_eq(glesc_session_n_past(s), N - 1 - 7);
        cr_assert_eq(glesc_session_eval(s, &ids[N - 1], 1, 0, got), GLESC_OK, "%s",
                     glesc_last_errmsg());
        double e = rel_diff(got, want, nv);
        cr_log_info("shifted k %s v %s vs a shifted f32 cache: %.3g of the largest logit",
                    glesc_dtype_name(types[t].k), glesc_dtype_name(types[t].v), e);
        cr_expect_leq(e, types[t].tol, "%.3g", e);
        glesc_session_destroy(s);
    }
    glesc_session_destroy(ref);
    free(want);
    free(got);
    glesc_model_destroy(m);
}

/* Saved and loaded again, a quantized cache gives the same state bytes and
 * the same next logits; sessions of other types refuse it; a copy
 * continues as its source. */
Test(kv_quant, state_round_trip_and_copy)
{
    glesc_model *m = model(2, 32, NULL);
    int64_t nv = n_vocab(m);
    int32_t ids[N + 1], got_ids[N];
    ids_of(ids, N + 1);
    float *a = malloc((size_t)nv * sizeof *a), *b = malloc((size_t)nv * sizeof *b);
    glesc_session *s = session(m, Q8, Q4);
    cr_assert_eq(glesc_session_eval(s, ids, N, 0, NULL), GLESC_OK);
    size_t size = glesc_session_state_size(s, NULL, N), n = 0;
    uint8_t *st1 = malloc(size), *st2 = malloc(size);
    cr_assert_eq(glesc_session_state_save(s, NULL, ids, N, st1, size, NULL), GLESC_OK, "%s",
                 glesc_last_errmsg());
    glesc_session *t = session(m, Q8, Q4);
    cr_assert_eq(glesc_session_state_load(t, NULL, st1, size, got_ids, N, &n), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(n, (size_t)N);
    cr_assert_eq(glesc_session_state_save(t, NULL, ids, N, st2, size, NULL), GLESC_OK);
    cr_assert(!memcmp(st1, st2, size), "a loaded quantized cache saves other bytes");
    cr_assert_eq(glesc_session_eval(s, &ids[N], 1, 0, a), GLESC_OK);
    cr_assert_eq(glesc_session_eval(t, &ids[N], 1, 0, b), GLESC_OK);
    cr_expect_leq(rel_diff(b, a, nv), 1e-6, "%.3g", rel_diff(b, a, nv));

    /* other types: refused with both types named, nothing changed */
    glesc_session *o = session(m, Q8, Q8);
    glesc_status rc = glesc_session_state_load(o, NULL, st1, size, got_ids, N, &n);
    cr_assert_eq(rc, GLESC_ERROR_FORMAT, "%s", glesc_status_name(rc));
    cr_assert(strstr(glesc_last_errmsg(), "KV cache types q8_0 for keys") &&
                  strstr(glesc_last_errmsg(), "q4_0 for values") &&
                  strstr(glesc_last_errmsg(), "q8_0 and q8_0"),
              "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_n_past(o), 0);

    /* copies: the same next logits; of other types refused */
    glesc_session *c = session(m, Q8, Q4);
    cr_assert_eq(glesc_session_truncate(s, N), GLESC_OK);
    cr_assert_eq(glesc_session_copy(c, s), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(c, &ids[N], 1, 0, b), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, &ids[N], 1, 0, a), GLESC_OK);
    cr_expect_leq(rel_diff(b, a, nv), 1e-6, "copy: %.3g", rel_diff(b, a, nv));
    cr_assert_eq(glesc_session_copy(o, s), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "q8_0/q8_0"), "%s", glesc_last_errmsg());
    glesc_session_destroy(c);
    glesc_session_destroy(o);
    glesc_session_destroy(t);
    glesc_session_destroy(s);
    free(st1);
    free(st2);
    free(a);
    free(b);
    glesc_model_destroy(m);
}

/* glesc_model_estimate's KV bytes are what the session allocates, for
 * every type; head sizes that are no multiple of 32 are refused. */
Test(kv_quant, estimate_and_head_size_rule)
{
    char *path;
    glesc_model *m = model(2, 32, &path);
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    static const glesc_dtype all[] = {GLESC_KV_F32, GLESC_DTYPE_F16, Q8, Q4};
    for (size_t i = 0; i < CORE_ARRAY_LEN(all); i++)
        for (size_t j = 0; j < CORE_ARRAY_LEN(all); j++) {
            glesc_session_options o = {.n_ctx = 100, .kv_type = all[i], .kv_type_v = all[j]};
            glesc_model_memory est;
            cr_assert_eq(glesc_model_estimate(ctx, f, &o, &est), GLESC_OK, "%s",
                         glesc_last_errmsg());
            glesc_session *s;
            cr_assert_eq(glesc_session_create(m, &o, &s), GLESC_OK, "%s", glesc_last_errmsg());
            cr_expect_eq(est.kv_bytes, glesc_session_kv_bytes(s), "%zu/%zu: %llu vs %llu", i, j,
                         (unsigned long long)est.kv_bytes,
                         (unsigned long long)glesc_session_kv_bytes(s));
            glesc_session_destroy(s);
        }
    glesc_gguf_close(f);
    glesc_model_destroy(m);
    free(path);

    m = model(1, 16, &path); /* heads of 16 */
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    glesc_session *s;
    glesc_session_options o = {.kv_type = GLESC_DTYPE_F16, .kv_type_v = Q4};
    cr_assert_eq(glesc_session_create(m, &o, &s), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "q4_0 KV cache (values) needs a head size that is a "
                                          "multiple of 32") &&
                  strstr(glesc_last_errmsg(), "16"),
              "%s", glesc_last_errmsg());
    glesc_model_memory est;
    cr_assert_eq(glesc_model_estimate(ctx, f, &o, &est), GLESC_ERROR_INVALID_ARGUMENT);
    o.kv_type_v = GLESC_DTYPE_BF16;
    cr_assert_eq(glesc_session_create(m, &o, &s), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "bf16 (values) is not one of f32, f16, q8_0, q4_0"), "%s",
              glesc_last_errmsg());
    glesc_gguf_close(f);
    glesc_model_destroy(m);
    free(path);
}
