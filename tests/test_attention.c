/*
 * test_attention.c — rope and fused attention against naive CPU references:
 * both rope layouts, partial rotation, frequency scaling and factors; attention for one
 * query row (decode) and many (prefill), grouped-query ratios 1, 2, 4, 8,
 * head sizes 8, 64, 128, additive and causal masks, f16 keys/values and
 * permuted (non-contiguous) inputs as a model's graph produces them, long
 * contexts split over workgroups and combined; sliding windows and
 * soft-capped scores (Gemma); YaRN and LongRoPE rope, also against ggml's
 * float formula; rope fused with the KV-cache write.
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

static glesc_context *ctx;

static void setup(void)
{
    ctx = test_context(NULL);
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
}

TestSuite(attention, .init = setup, .fini = teardown);

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

static double run_attention(const attn_case *c, uint32_t seed)
{
    glesc_graph *g = glesc_graph_create(ctx);
    /* q, k, v as a model makes them: projections [d, heads, tokens]
     * permuted to [d, tokens, heads] (views, not copies) */
    glesc_tensor *q = tg_input(g, F32, 3, (int64_t[]){c->d, c->h, c->tq}, seed, -1, 1);
    glesc_tensor *k = tg_input(g, c->kv, 3, (int64_t[]){c->d, c->hkv, c->tk}, seed + 1, -1, 1);
    glesc_tensor *v = tg_input(g, c->kv, 3, (int64_t[]){c->d, c->hkv, c->tk}, seed + 2, -1, 1);
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
    cr_assert_eq(glesc_tensor_dim(y, 0), c->d);
    cr_assert_eq(glesc_tensor_dim(y, 1), c->h);
    cr_assert_eq(glesc_tensor_dim(y, 2), c->tq);
    char what[128];
    snprintf(what, sizeof what, "attention d=%lld h=%lld/%lld tq=%lld tk=%lld%s%s %s swa=%d cap=%g",
             (long long)c->d, (long long)c->h, (long long)c->hkv, (long long)c->tq,
             (long long)c->tk, c->mask ? " mask" : "", c->causal ? " causal" : "",
             glesc_dtype_name(c->kv), c->n_swa, (double)c->softcap);
    double e = tg_check(g, &y, 1, 1e-9, what);
    cr_log_info("%s: NMSE %.3g", what, e);
    glesc_graph_destroy(g);
    return e;
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
        {64, 8, 2, 1, 2048, false, false, F16, 0, 0},  {64, 8, 2, 1, 2048, false, true, F32, 0, 0},
        {128, 4, 4, 1, 300, false, false, F32, 0, 0},  {128, 4, 4, 1, 300, true, false, F32, 0, 0},
        {16, 14, 2, 1, 1000, false, false, F32, 0, 0}, /* 7 heads per kv head */
        {64, 4, 1, 3, 300, true, true, F16, 0, 0},
    };
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
            run_attention(&cases[i], (uint32_t)(70 + 10 * i));
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
