/*
 * test_attention.c — rope and fused attention against naive CPU references:
 * both rope layouts, partial rotation, frequency scaling and factors; attention for one
 * query row (decode) and many (prefill), grouped-query ratios 1, 2, 4, 7, 8,
 * head sizes 4 to 128, additive and causal masks, f16 keys/values and
 * permuted (non-contiguous) inputs as a model's graph produces them, long
 * contexts split over workgroups and combined; sliding windows and
 * soft-capped scores (Gemma); YaRN and LongRoPE rope, also against ggml's
 * float formula; the prefill kernel's query blocks and key tiles at lengths
 * that are no multiple of them, a batch continuing a cache (n_past > 0), on
 * llvmpipe's caps and the portable ones (128 invocations, 16 KiB of shared
 * memory); the KV-cache writes (rope(k), v, qwen3's q/k norms) fused into
 * prefill and decode, batch after batch.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define F16 GLESC_DTYPE_F16

TEST_GPU_SUITE(attention);

Test(attention, rope)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[8];
    int n = 0;
    static const struct {
        int64_t d, h, t;
        int n_dims, mode;
        float base, scale;
    } cases[] = {
        {8, 2, 3, 8, GLESC_ROPE_NORMAL, 10000, 1},
        {64, 3, 5, 64, GLESC_ROPE_NEOX, 10000, 1},
        {64, 2, 4, 32, GLESC_ROPE_NORMAL, 500000, 0.25f},
        {128, 2, 2, 96, GLESC_ROPE_NEOX, 1e6f, 1},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        glesc_tensor *x =
            tg_input(g, i % 2 ? F16 : F32, 3, (int64_t[]){cases[i].d, cases[i].h, cases[i].t},
                     (uint32_t)i, -1, 1);
        glesc_tensor *pos =
            tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){cases[i].t}, (uint32_t)i + 7, 0, 300);
        outs[n++] = glesc_rope(g, x, pos, cases[i].n_dims, (glesc_rope_mode)cases[i].mode,
                               cases[i].base, cases[i].scale);
    }
    /* a view as the input: rows of a projection [d·h, t] seen as [d, h, t] */
    glesc_tensor *proj = tg_input(g, F32, 2, (int64_t[]){16 * 4, 3}, 40, -1, 1);
    glesc_tensor *pos = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){3}, 41, 0, 50);
    outs[n++] = glesc_rope(g, glesc_reshape(g, proj, 3, (int64_t[]){16, 4, 3}), pos, 16,
                           GLESC_ROPE_NEOX, 10000, 1);
    /* per-rotation frequency factors (Llama 3's rope_freqs), both layouts */
    glesc_tensor *ff = tg_input(g, F32, 1, (int64_t[]){16}, 42, 1, 8);
    glesc_tensor *xr = tg_input(g, F32, 3, (int64_t[]){32, 2, 4}, 43, -1, 1);
    glesc_tensor *pr = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){4}, 44, 0, 300);
    outs[n++] = glesc_rope_ext(g, xr, pr, ff, 32, GLESC_ROPE_NORMAL, 500000, 1);
    outs[n++] = glesc_rope_ext(g, xr, pr, ff, 32, GLESC_ROPE_NEOX, 10000, 0.5f);
    cr_assert_null(glesc_rope_ext(g, xr, pr, ff, 16, GLESC_ROPE_NORMAL, 1e4f, 1),
                   "16 factors for 8 rotations");
    cr_assert(strstr(glesc_context_errmsg(ctx), "frequency factors"), "%s",
              glesc_context_errmsg(ctx));
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    /* float theta over positions up to 300 rad: ~1e-5 absolute */
    double e = tg_check(g, outs, n, 1e-8, "rope");
    cr_log_info("rope worst NMSE %.3g", e);
    glesc_graph_destroy(g);
}

/* ggml's CPU rope (ggml_rope_cache_init, rope_yarn, rope_yarn_ramp,
 * ggml_rope_yarn_corr_dims) transcribed in float, as a check of the
 * parameters' meaning independent of glesc's reference: one row of x
 * [d] at position p, NeoX layout. */
static void ggml_rope_row(const float *x, float *y, int d, int n_dims, int p, const float *ff,
                          int n_ctx_orig, float base, float fscale, float ext, float attn,
                          float beta_fast, float beta_slow)
{
    float corr[2] = {0, 0};
    if (ext != 0) {
        float lo =
            floorf(n_dims * logf(n_ctx_orig / (beta_fast * 2 * (float)M_PI)) / (2 * logf(base)));
        float hi =
            ceilf(n_dims * logf(n_ctx_orig / (beta_slow * 2 * (float)M_PI)) / (2 * logf(base)));
        corr[0] = fmaxf(0, lo);
        corr[1] = fminf((float)(n_dims - 1), hi);
    }
    float theta_scale = powf(base, -2.0f / n_dims), theta = (float)p;
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
        float te = theta / (ff ? ff[i0 / 2] : 1.0f), ti = fscale * te, th = ti, ms = attn;
        if (ext != 0) {
            float yy = (i0 / 2 - corr[0]) / fmaxf(0.001f, corr[1] - corr[0]);
            float mix = (1 - fminf(1, fmaxf(0, yy))) * ext;
            th = ti * (1 - mix) + te * mix;
            ms *= 1.0f + 0.1f * logf(1.0f / fscale);
        }
        float c = cosf(th) * ms, sn = sinf(th) * ms;
        int a = i0 / 2, b = i0 / 2 + n_dims / 2;
        y[a] = x[a] * c - x[b] * sn;
        y[b] = x[a] * sn + x[b] * c;
        theta *= theta_scale;
    }
    for (int i = n_dims; i < d; i++)
        y[i] = x[i];
}

Test(attention, rope_yarn_and_longrope)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[6];
    int n = 0;
    /* YaRN as Qwen 2.5's long-context files set it (factor 4 over 32768
     * positions), both layouts, partial rotation; LongRoPE (Phi-3's
     * factors with a magnitude, no YaRN ramp) */
    glesc_tensor *x = tg_input(g, F32, 3, (int64_t[]){64, 3, 5}, 60, -1, 1);
    glesc_tensor *pos = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){5}, 61, 0, 1000);
    glesc_tensor *ff = tg_input(g, F32, 1, (int64_t[]){24}, 62, 1, 30);
    outs[n++] = glesc_rope_yarn(g, x, pos, NULL, 64, GLESC_ROPE_NEOX, 32768, 1e6f, 0.25f, 1.0f,
                                1.0f, 32.0f, 1.0f);
    outs[n++] = glesc_rope_yarn(g, x, pos, NULL, 48, GLESC_ROPE_NORMAL, 4096, 10000, 0.125f, 0.5f,
                                1.0f, 32.0f, 1.0f);
    outs[n++] = glesc_rope_yarn(g, x, pos, ff, 48, GLESC_ROPE_NEOX, 4096, 10000, 1.0f, 0.0f, 1.19f,
                                32.0f, 1.0f);
    outs[n++] = glesc_rope_yarn(g, x, pos, ff, 48, GLESC_ROPE_NEOX, 4096, 10000, 0.5f, 1.0f, 1.1f,
                                16.0f, 2.0f);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i], "%s", glesc_context_errmsg(ctx));
    /* float theta over positions up to 1000 rad, as in the rope test */
    double e = tg_check(g, outs, n, 1e-8, "rope yarn/longrope");
    cr_log_info("rope YaRN and LongRoPE worst NMSE %.3g", e);

    /* against ggml's own float formula (which accumulates theta by
     * repeated products: small positions keep that within 1e-5) */
    glesc_tensor *ps = tg_input(g, GLESC_DTYPE_I32, 1, (int64_t[]){5}, 63, 0, 20);
    glesc_tensor *y1 = glesc_rope_yarn(g, x, ps, NULL, 64, GLESC_ROPE_NEOX, 32768, 1e6f, 0.25f,
                                       1.0f, 1.0f, 32.0f, 1.0f);
    glesc_tensor *y2 = glesc_rope_yarn(g, x, ps, ff, 48, GLESC_ROPE_NEOX, 4096, 10000, 1.0f, 0.0f,
                                       1.19f, 32.0f, 1.0f);
    glesc_tensor *ys[2] = {y1, y2};
    cr_assert_eq(glesc_graph_compute(g, ys, 2), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    float *xv = tg_read(x), *pv = tg_read(ps), *fv = tg_read(ff);
    double worst = 0;
    for (int w = 0; w < 2; w++) {
        float *got = tg_read(ys[w]);
        for (int r = 0; r < 15; r++) {
            float want[64];
            if (w == 0)
                ggml_rope_row(xv + r * 64, want, 64, 64, (int)pv[r / 3], NULL, 32768, 1e6f, 0.25f,
                              1.0f, 1.0f, 32.0f, 1.0f);
            else
                ggml_rope_row(xv + r * 64, want, 64, 48, (int)pv[r / 3], fv, 4096, 10000, 1.0f,
                              0.0f, 1.19f, 32.0f, 1.0f);
            for (int i = 0; i < 64; i++)
                worst = fmax(worst, fabs(got[r * 64 + i] - want[i]));
        }
        free(got);
    }
    cr_log_info("rope YaRN/LongRoPE vs ggml's float formula: max abs diff %.3g", worst);
    cr_expect_lt(worst, 1e-4, "%.3g", worst);
    free(xv);
    free(pv);
    free(fv);

    cr_assert_null(glesc_rope_yarn(g, x, pos, NULL, 64, GLESC_ROPE_NEOX, 0, 1e6f, 0.25f, 1.0f, 1.0f,
                                   32.0f, 1.0f));
    cr_assert(strstr(glesc_context_errmsg(ctx), "n_ctx_orig"), "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

typedef struct attn_case {
    int64_t d, h, hkv, tq, tk;
    bool mask, causal;
    glesc_dtype kv;
    int n_swa;     /* sliding window, 0: none */
    float softcap; /* 0: none */
} attn_case;

/* dv: v's head size */
static double run_attention_dv(glesc_context *c_, const attn_case *c, int64_t dv, uint32_t seed)
{
    glesc_graph *g = glesc_graph_create(c_);
    /* q, k, v as a model makes them: projections [d, heads, tokens]
     * permuted to [d, tokens, heads] (views, not copies) */
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){c->d, c->h, c->tq}, seed, -1, 1);
    glesc_tensor *k = tg_input(g, c->kv, 3, (int64_t[]){c->d, c->hkv, c->tk}, seed + 1, -1, 1);
    glesc_tensor *v = tg_input(g, c->kv, 3, (int64_t[]){dv, c->hkv, c->tk}, seed + 2, -1, 1);
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *m = NULL;
    if (c->mask)
        m = tg_input(g, F32, 2, (int64_t[]){c->tk, c->tq}, seed + 3, -2, 0);
    /* soft-capping matters only when scores reach the cap: larger q then */
    if (c->softcap > 0)
        q = glesc_scale(g, q, 4.0f * c->softcap / sqrtf((float)c->d), 0);
    glesc_tensor *y = glesc_attention_ext(g, glesc_permute(g, q, perm), glesc_permute(g, k, perm),
                                          glesc_permute(g, v, perm), m, 1.0f / sqrtf((float)c->d),
                                          c->causal, c->n_swa, c->softcap);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_dim(y, 0), dv);
    cr_assert_eq(glesc_tensor_dim(y, 1), c->h);
    cr_assert_eq(glesc_tensor_dim(y, 2), c->tq);
    char what[128];
    snprintf(what, sizeof what,
             "attention d=%lld/%lld h=%lld/%lld tq=%lld tk=%lld%s%s %s swa=%d cap=%g",
             (long long)c->d, (long long)dv, (long long)c->h, (long long)c->hkv, (long long)c->tq,
             (long long)c->tk, c->mask ? " mask" : "", c->causal ? " causal" : "",
             glesc_dtype_name(c->kv), c->n_swa, (double)c->softcap);
    double e = tg_check(g, &y, 1, 1e-9, what);
    cr_log_info("%s: NMSE %.3g", what, e);
    glesc_graph_destroy(g);
    return e;
}

static double run_attention_on(glesc_context *c_, const attn_case *c, uint32_t seed)
{
    return run_attention_dv(c_, c, c->d, seed);
}

static double run_attention(const attn_case *c, uint32_t seed)
{
    return run_attention_on(ctx, c, seed);
}

Test(attention, decode_and_prefill_gqa_head_sizes)
{
    static const attn_case cases[] = {
        /* decode: one query over the cache */
        {8, 4, 4, 1, 7, false, false, F32, 0, 0},
        {64, 8, 4, 1, 33, false, true, F16, 0, 0},
        {128, 8, 2, 1, 70, false, false, F16, 0, 0}, /* two key tiles */
        {64, 8, 1, 1, 65, true, false, F32, 0, 0},
        /* prefill: many queries, causal */
        {8, 2, 2, 5, 5, false, true, F32, 0, 0},
        {64, 4, 1, 6, 9, false, true, F16, 0, 0},
        {128, 8, 1, 4, 4, true, true, F32, 0, 0},
        {64, 8, 2, 3, 70, true, false, F32, 0, 0},
    };
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        double e = run_attention(&cases[i], (uint32_t)(10 * i + 1));
        worst = fmax(worst, e);
    }
    cr_log_info("attention worst NMSE %.3g", worst);
}

Test(attention, long_context_splits_and_combines)
{
    /* enough keys for several splits per (query, head group): each split's
     * workgroup leaves its partial softmax in the scratch buffer and the
     * last one combines; run twice, since the combine must leave its
     * counters at zero for the next dispatch (of any shape) */
    static const attn_case cases[] = {
        {64, 8, 2, 1, 2048, false, false, F16, 0, 0},
        {64, 8, 2, 1, 2048, false, true, F32, 0, 0},
        {128, 4, 4, 1, 300, false, false, F32, 0, 0},
        {128, 4, 4, 1, 300, true, false, F32, 0, 0},
        {16, 14, 2, 1, 1000, false, false, F32, 0, 0}, /* 7 heads per kv head */
        {64, 4, 1, 3, 300, true, true, F16, 0, 0},
        /* the heads of TinyLlama (8 a kv head), Qwen2.5-0.5B (7) and Gemma 3
         * 1B (4 of 256): the combine's outputs in passes and the
         * accumulators in shared memory on Mali's row (GLESC_DEVICE_CLASS) */
        {64, 32, 4, 1, 2048, false, true, F16, 0, 0},
        {64, 14, 2, 1, 1000, false, false, F32, 0, 0},
        {256, 4, 1, 1, 600, false, true, F16, 0, 0},
    };
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
            run_attention(&cases[i], (uint32_t)(70 + 10 * i));
}

/* The prefill kernel (many queries): blocks of queries of the heads that
 * share a kv head against key tiles, lengths that are no multiple of
 * either, causal with keys already in the cache before the batch (tk > tq:
 * n_past = tk - tq), the GQA ratios and head sizes of the models (llama-2-tiny 4,
 * stories260K 8, TinyStories 16, the tiny test models 32, TinyLlama, Qwen2.5
 * and Llama 3.2 64, Llama-2-7B 128), f16 and f32 caches; on llvmpipe's caps
 * and on the portable ones (smaller tiles and blocks). NMSE against the
 * double-precision reference at most 1e-9 (f32 sums of a few hundred
 * products: ~1e-13 seen). */
static const attn_case prefill_cases[] = {
    {64, 8, 8, 100, 100, false, true, F32, 0, 0},  /* gqa 1, first batch */
    {64, 32, 4, 77, 127, false, true, F16, 0, 0},  /* TinyLlama's heads, n_past 50 */
    {128, 8, 2, 65, 65, false, true, F32, 0, 0},   /* gqa 4 */
    {128, 16, 2, 33, 133, false, true, F16, 0, 0}, /* gqa 8, n_past 100 */
    {32, 8, 4, 130, 130, false, true, F16, 0, 0},  /* the tiny models */
    {8, 8, 4, 45, 61, false, true, F32, 0, 0},     /* stories260K */
    {16, 8, 4, 20, 20, false, true, F16, 0, 0},    /* TinyStories-656K */
    {4, 2, 2, 19, 40, false, true, F32, 0, 0},     /* llama-2-tiny: one vec4 a row */
    {80, 6, 2, 40, 90, true, true, F32, 0, 0},     /* 20 vec4 a row, mask and causal */
    {16, 14, 2, 50, 50, false, true, F32, 0, 0},   /* 7 heads per kv head */
    {64, 4, 4, 20, 70, true, false, F32, 0, 0},    /* additive mask only */
    {16, 2, 2, 10, 6, false, true, F32, 0, 0},     /* tk < tq: the first queries see no key */
    {64, 8, 2, 70, 100, false, true, F32, 20, 0},  /* a window inside blocks, n_past 30 */
    {32, 4, 1, 40, 40, true, true, F16, 7, 30},    /* window, soft-cap and mask (Gemma) */
    {64, 4, 2, 50, 90, false, false, F32, 16, 0},  /* a window without causality */
    {256, 4, 1, 33, 45, false, true, F32, 0, 50},  /* gemma3's head size, soft-cap */
    {256, 4, 2, 40, 200, false, true, F16, 0, 0},  /* Gemma 2 2B's heads, tiles a split */
};

Test(attention, prefill_blocks_tiles_and_cache_continuation)
{
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(prefill_cases); i++)
        worst = fmax(worst, run_attention(&prefill_cases[i], (uint32_t)(200 + 10 * i)));
    cr_log_info("prefill worst NMSE %.3g (tolerance 1e-9)", worst);
}

Test(attention, prefill_portable_caps)
{
    glesc_context *portable = test_portable_context();
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(prefill_cases); i++)
        worst =
            fmax(worst, run_attention_on(portable, &prefill_cases[i], (uint32_t)(300 + 10 * i)));
    /* head size 256: two rows of queries and tiles of eight keys fit */
    attn_case big = {256, 4, 2, 9, 30, false, true, F16, 0, 0};
    worst = fmax(worst, run_attention_on(portable, &big, 390));
    cr_log_info("prefill (portable caps) worst NMSE %.3g (tolerance 1e-9)", worst);
    glesc_context_destroy(portable);
}

/* The prefill kernel's shapes under GLESC_ATTN (read at generation, so a
 * fresh context each): tiny blocks with many splits of short tiles, no
 * splits, large blocks of long tiles, the small GPUs' row (16 rows of
 * 32-key tiles a workgroup of 128: 1 x 4 scores, 1 x 2 output vec4) and
 * V3D's (the same, at most 2 output vec4 an invocation: 8 rows for the
 * heads of 80, 128 and 256). */
Test(attention, prefill_tuning_settings)
{
    static const char *const knobs[] = {
        "wg=32,r=8,bk=8,skg=2,target=4096", "wg=64,r=16,bk=16,target=1", "wg=256,r=32,bk=64,skg=16",
        "wg=128,r=16,bk=32,target=64", "wg=128,r=16,bk=32,target=64,out=2"};
    static const size_t picks[] = {1, 3, 8, 11, 13, 15};
    glesc_context *saved = ctx;
    for (size_t k = 0; k < CORE_ARRAY_LEN(knobs); k++) {
        setenv("GLESC_ATTN", knobs[k], 1);
        ctx = test_context(NULL);
        double worst = 0;
        for (size_t i = 0; i < CORE_ARRAY_LEN(picks); i++)
            worst = fmax(worst, run_attention(&prefill_cases[picks[i]], (uint32_t)(500 + 10 * i)));
        cr_log_info("GLESC_ATTN=%s: worst NMSE %.3g (tolerance 1e-9)", knobs[k], worst);
        glesc_context_destroy(ctx);
    }
    ctx = saved;
    unsetenv("GLESC_ATTN");
}

/* A decoder layer's attention as the runtime builds it (llm/forward.c):
 * rope'd keys (after qwen3's per-head norms) and values written into the
 * caches at the batch's positions, attention over the first past + n rows.
 * Batches follow each other through the same caches: a prompt, a second
 * prompt batch continuing it, a decode step. Each batch is checked against
 * the CPU reference (which reads the caches as the GPU left them), and run
 * with fusion on (the writes inside the attention kernel) and off (separate
 * set_rows kernels): the same outputs and the same caches. */
typedef struct cache_case {
    int64_t d, h, hkv, ctx;
    int64_t n[3]; /* tokens of each batch */
    bool norms;
    glesc_dtype kv;
} cache_case;

static float *cache_batch(const cache_case *c, glesc_tensor *kcache, glesc_tensor *vcache,
                          int64_t past, int64_t n, int fusion, uint32_t seed)
{
    glesc_graph *g = glesc_graph_create(ctx);
    tg_fusion(g, fusion);
    int64_t d = c->d, n_kv = past + n;
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){d, c->h, n}, seed, -1, 1);
    glesc_tensor *k = tg_input(g, F32, 3, (int64_t[]){d, c->hkv, n}, seed + 1, -1, 1);
    glesc_tensor *v = tg_input(g, F32, 2, (int64_t[]){d * c->hkv, n}, seed + 2, -1, 1);
    glesc_tensor *pos = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){n});
    int32_t pv[256];
    cr_assert_leq(n, 256);
    for (int64_t i = 0; i < n; i++)
        pv[i] = (int32_t)(past + i);
    cr_assert_eq(glesc_tensor_write(pos, pv, (size_t)n * 4), GLESC_OK);
    if (c->norms) {
        glesc_tensor *qn = tg_input(g, F32, 1, (int64_t[]){d}, seed + 3, 0.5f, 1.5f);
        glesc_tensor *kn = tg_input(g, F32, 1, (int64_t[]){d}, seed + 4, 0.5f, 1.5f);
        q = glesc_mul(g, glesc_rms_norm(g, q, 1e-6f), qn);
        k = glesc_mul(g, glesc_rms_norm(g, k, 1e-6f), kn);
    }
    glesc_rope_mode mode = c->norms ? GLESC_ROPE_NEOX : GLESC_ROPE_NORMAL;
    q = glesc_rope(g, q, pos, (int)d, mode, 10000, 1);
    k = glesc_rope(g, k, pos, (int)d, mode, 10000, 1);
    glesc_tensor *ks =
        glesc_set_rows(g, kcache, glesc_reshape(g, k, 2, (int64_t[]){d * c->hkv, n}), pos);
    glesc_tensor *vs = glesc_set_rows(g, vcache, v, pos);
    size_t es = c->kv == F32 ? 4 : 2;
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *kv[2];
    for (int i = 0; i < 2; i++)
        kv[i] =
            glesc_permute(g,
                          glesc_view(g, i ? vs : ks, 3, (int64_t[]){d, c->hkv, n_kv},
                                     (size_t[]){0, (size_t)d * es, (size_t)(d * c->hkv) * es}, 0),
                          perm);
    glesc_tensor *y = glesc_attention(g, glesc_permute(g, q, perm), kv[0], kv[1], NULL,
                                      1.0f / sqrtf((float)d), true);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    char what[128];
    snprintf(
        what, sizeof what, "cache write + attention d=%lld h=%lld/%lld past %lld n %lld%s %s%s",
        (long long)d, (long long)c->h, (long long)c->hkv, (long long)past, (long long)n,
        c->norms ? " q/k norms" : "", glesc_dtype_name(c->kv), fusion > 0 ? " fused" : " unfused");
    double e = tg_check(g, &y, 1, 1e-9, what);
    cr_log_info("%s: NMSE %.3g", what, e);
    float *out = tg_read(y);
    glesc_graph_destroy(g);
    return out;
}

static const cache_case cache_cases[] = {
    {64, 8, 2, 160, {40, 70, 1}, true, F16},   /* gqa 4, qwen3's norms */
    {128, 8, 1, 160, {65, 33, 1}, false, F32}, /* gqa 8 */
    {32, 4, 2, 128, {17, 100, 1}, true, F32},  /* the qwen3 test model's heads */
    {64, 32, 4, 96, {50, 30, 1}, false, F16},  /* TinyLlama's heads */
    {128, 4, 4, 160, {40, 70, 1}, false, F16}, /* Llama-2-7B's heads (gqa 1) */
};

/* Batches into a cache, fused (the writes inside the attention kernel) and
 * unfused: the same outputs and caches. */
static void check_cache_writes(size_t i)
{
    {
        const cache_case *c = &cache_cases[i];
        glesc_tensor *kc[2], *vc[2];
        float *y[2][3];
        for (int pass = 0; pass < 2; pass++) {
            int64_t shape[2] = {c->d * c->hkv, c->ctx};
            kc[pass] = glesc_weight_new(ctx, c->kv, 2, shape);
            vc[pass] = glesc_weight_new(ctx, c->kv, 2, shape);
            cr_assert(kc[pass] && vc[pass], "%s", glesc_context_errmsg(ctx));
            tg_fill(kc[pass], 90, -1, 1);
            tg_fill(vc[pass], 91, -1, 1);
            int64_t past = 0;
            for (int b = 0; b < 3; b++) {
                y[pass][b] = cache_batch(c, kc[pass], vc[pass], past, c->n[b], pass ? -1 : 1,
                                         (uint32_t)(400 + 10 * b));
                past += c->n[b];
            }
        }
        /* fused, the norms are summed per element where a key is read,
         * unfused by the norm kernel, in another order: the f32 results may
         * differ in the last bit, and an f16 cache's rounding of such a key
         * element by one f16 step (2^-11 relative) */
        double tol = !c->norms ? 1e-12 : c->kv == F16 ? 1e-9 : 1e-10;
        for (int b = 0; b < 3; b++) {
            double e = tg_nmse(y[0][b], y[1][b], c->d * c->h * c->n[b]);
            cr_log_info("case %zu batch %d: fused vs unfused NMSE %.3g (tolerance %g)", i, b, e,
                        tol);
            cr_assert_leq(e, tol, "case %zu batch %d: fused and unfused differ: %g", i, b, e);
        }
        float *cache[2][2];
        int64_t nc = c->d * c->hkv * c->ctx;
        for (int pass = 0; pass < 2; pass++) {
            cache[pass][0] = tg_read(kc[pass]);
            cache[pass][1] = tg_read(vc[pass]);
        }
        /* the same rows written (within the norms' rounding, as above) */
        double ek = tg_nmse(cache[0][0], cache[1][0], nc);
        cr_log_info("case %zu: k caches NMSE %.3g (tolerance %g)", i, ek, tol);
        cr_assert_leq(ek, tol, "case %zu: k caches differ: %g", i, ek);
        cr_assert_eq(memcmp(cache[0][1], cache[1][1], (size_t)nc * 4), 0,
                     "case %zu: v caches differ", i);
        for (int pass = 0; pass < 2; pass++) {
            for (int b = 0; b < 3; b++)
                free(y[pass][b]);
            free(cache[pass][0]);
            free(cache[pass][1]);
            glesc_weight_free(kc[pass]);
            glesc_weight_free(vc[pass]);
        }
    }
}

Test(attention, cache_writes_in_prefill_batches)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(cache_cases); i++)
        check_cache_writes(i);
}

/* The decode kernel's tiles through registers (the default on GPUs, off on
 * llvmpipe, where this turns it on): decode against the reference at
 * several depths (one and several splits, partial tiles), GQA, f16 and f32
 * caches, a window and a soft-cap, then a decode step whose new key and
 * value rows the kernel writes itself (the last batch of 1 of each cache
 * case: the new rows given their values from the registers' raw reads). */
Test(attention, decode_register_tiles)
{
    static const attn_case cases[] = {
        {8, 4, 4, 1, 7, false, false, F32, 0, 0},    {64, 8, 4, 1, 33, false, true, F16, 0, 0},
        {128, 8, 2, 1, 70, false, false, F16, 0, 0}, {64, 8, 1, 1, 65, true, false, F32, 0, 0},
        {64, 8, 2, 1, 2048, false, true, F32, 0, 0}, {16, 14, 2, 1, 1000, false, false, F32, 0, 0},
        {64, 4, 2, 1, 40, false, true, F32, 16, 50}, {256, 4, 1, 1, 45, false, true, F16, 0, 50},
    };
    setenv("GLESC_ATTN_DECODE", "regs=1", 1);
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        run_attention(&cases[i], (uint32_t)(900 + 10 * i));
    for (size_t i = 0; i < CORE_ARRAY_LEN(cache_cases); i++)
        check_cache_writes(i);
    unsetenv("GLESC_ATTN_DECODE");
}

/* v's head size other than q's and k's (as in DeepSeek's MLA): larger
 * than d + 1, the decode kernel reads values where it uses them instead of
 * staging a value tile (and, with tiles through registers, loads only the
 * keys into registers); smaller, the value tile is staged as usual; in
 * decode (one and several splits, with tiles through registers too) and
 * prefill. NMSE against the reference at most 1e-9. */
Test(attention, value_head_size_differs)
{
    static const struct {
        attn_case c;
        int64_t dv;
    } cases[] = {
        {{64, 8, 2, 1, 40, false, true, F32, 0, 0}, 128},
        {{64, 4, 1, 1, 700, false, true, F16, 0, 0}, 128},
        {{128, 4, 2, 1, 300, true, false, F32, 0, 0}, 64},
        {{32, 8, 4, 1, 90, false, true, F32, 0, 0}, 200},
        {{64, 4, 2, 20, 50, false, true, F32, 0, 0}, 128},
        {{128, 4, 4, 9, 20, true, true, F16, 0, 0}, 32},
    };
    double worst = 0;
    for (int regs = 0; regs < 2; regs++) {
        if (regs)
            setenv("GLESC_ATTN_DECODE", "regs=1", 1);
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
            worst = fmax(worst,
                         run_attention_dv(ctx, &cases[i].c, cases[i].dv, (uint32_t)(600 + 10 * i)));
    }
    unsetenv("GLESC_ATTN_DECODE");
    cr_log_info("differing head sizes: worst NMSE %.3g (tolerance 1e-9)", worst);
}

Test(attention, sliding_window_and_softcap)
{
    /* Gemma's local layers (a window of the last n_swa positions) and
     * Gemma 2's soft-capped scores, in decode (one query; with many keys
     * the splits cover only the window) and prefill (each query its own
     * window), with and without a mask, GQA */
    static const attn_case cases[] = {
        {64, 4, 2, 1, 40, false, true, F32, 16, 0},   {64, 4, 2, 1, 40, false, true, F32, 16, 50},
        {32, 2, 1, 1, 700, false, true, F16, 100, 0}, /* window over several splits */
        {32, 2, 1, 1, 700, false, true, F32, 1, 0},   /* only its own position */
        {64, 4, 2, 12, 12, false, true, F32, 5, 0},   {64, 4, 4, 9, 20, true, true, F32, 4, 30},
        {64, 4, 2, 6, 30, false, false, F32, 7, 0}, /* a window without causality */
        {128, 8, 1, 1, 300, false, true, F32, 0, 20}, {16, 4, 2, 7, 7, false, true, F16, 0, 10},
    };
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
            run_attention(&cases[i], (uint32_t)(170 + 10 * i));
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *q = glesc_tensor_new(g, F32, 3, (int64_t[]){64, 1, 4});
    glesc_tensor *k = glesc_tensor_new(g, F32, 3, (int64_t[]){64, 9, 4});
    cr_assert_null(glesc_attention_ext(g, q, k, k, NULL, 1, true, -3, 0));
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_attention: sliding window -3 is negative (0: none)");
    cr_assert_null(glesc_attention_ext(g, q, k, k, NULL, 1, true, 0, -1));
    cr_assert_str_eq(glesc_context_errmsg(ctx),
                     "glesc_attention: soft-cap -1 must be positive (0: none)");
    glesc_graph_destroy(g);
}

Test(attention, bad_shapes_name_the_inputs)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *q = glesc_tensor_new(g, F32, 3, (int64_t[]){64, 1, 6});
    glesc_tensor *k = glesc_tensor_new(g, F32, 3, (int64_t[]){64, 9, 4});
    cr_assert_null(glesc_attention(g, q, k, k, NULL, 1, false));
    cr_assert_str_eq(glesc_context_errmsg(ctx), "glesc_attention: q [64, 1, 6] and k [64, 9, 4]: "
                                                "n_head 6 is not a multiple of n_head_kv 4");
    glesc_graph_destroy(g);
}
