/*
 * test_attention.c — rope and fused attention against naive CPU references:
 * both rope layouts, partial rotation, frequency scaling and factors; attention for one
 * query row (decode) and many (prefill), grouped-query ratios 1, 2, 4, 8,
 * head sizes 8, 64, 128, additive and causal masks, f16 keys/values and
 * permuted (non-contiguous) inputs as a model's graph produces them, long
 * contexts split over workgroups and combined; rope fused with the
 * KV-cache write.
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

typedef struct attn_case {
    int64_t d, h, hkv, tq, tk;
    bool mask, causal;
    glesc_dtype kv;
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
    glesc_tensor *y =
        glesc_attention(g, glesc_permute(g, q, perm), glesc_permute(g, k, perm),
                        glesc_permute(g, v, perm), m, 1.0f / sqrtf((float)c->d), c->causal);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_dim(y, 0), c->d);
    cr_assert_eq(glesc_tensor_dim(y, 1), c->h);
    cr_assert_eq(glesc_tensor_dim(y, 2), c->tq);
    char what[96];
    snprintf(what, sizeof what, "attention d=%lld h=%lld/%lld tq=%lld tk=%lld%s%s %s",
             (long long)c->d, (long long)c->h, (long long)c->hkv, (long long)c->tq,
             (long long)c->tk, c->mask ? " mask" : "", c->causal ? " causal" : "",
             glesc_dtype_name(c->kv));
    double e = tg_check(g, &y, 1, 1e-9, what);
    cr_log_info("%s: NMSE %.3g", what, e);
    glesc_graph_destroy(g);
    return e;
}

Test(attention, decode_and_prefill_gqa_head_sizes)
{
    static const attn_case cases[] = {
        /* decode: one query over the cache */
        {8, 4, 4, 1, 7, false, false, F32},
        {64, 8, 4, 1, 33, false, true, F16},
        {128, 8, 2, 1, 70, false, false, F16}, /* two key tiles */
        {64, 8, 1, 1, 65, true, false, F32},
        /* prefill: many queries, causal */
        {8, 2, 2, 5, 5, false, true, F32},
        {64, 4, 1, 6, 9, false, true, F16},
        {128, 8, 1, 4, 4, true, true, F32},
        {64, 8, 2, 3, 70, true, false, F32},
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
        {64, 8, 2, 1, 2048, false, false, F16},  {64, 8, 2, 1, 2048, false, true, F32},
        {128, 4, 4, 1, 300, false, false, F32},  {128, 4, 4, 1, 300, true, false, F32},
        {16, 14, 2, 1, 1000, false, false, F32}, /* 7 heads per kv head */
        {64, 4, 1, 3, 300, true, true, F16},
    };
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
            run_attention(&cases[i], (uint32_t)(70 + 10 * i));
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
