/*
 * test_kv_quant.c — the quantized KV cache (q8_0, q4_0): set_rows' GPU
 * quantizer against ggml's CPU reference (quant_quantize) block by block;
 * attention reading quantized keys and values (decode, also through
 * registers, prefill, GQA, mixed types, the portable caps) against the CPU
 * evaluator (worst NMSE printed, tolerance 1e-7).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "quant/quant.h"
#include "test_graph_util.h"
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
    glesc_context_options o = {
        .no_subgroups = true, .max_compute_invocations = 128, .max_compute_shared_memory = 16384};
    o.cache_dir = "off";
    glesc_context *portable;
    cr_assert_eq(glesc_context_create(&o, &portable), GLESC_OK, "%s", glesc_last_errmsg());
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++)
        worst = fmax(worst, run_case(portable, &cases[i], (uint32_t)(10 * i + 101)));
    cr_log_info("attention over quantized caches (portable caps): worst NMSE %.3g", worst);
    glesc_context_destroy(portable);
}

/* The decode variant that loads tiles into registers (GLESC_ATTN_DECODE
 * regs=1, read when a kernel is generated: plans made in this test). */
Test(kv_quant, decode_register_tiles)
{
    setenv("GLESC_ATTN_DECODE", "regs=1", 1);
    double worst = 0;
    for (size_t i = 0; i < 4; i++)
        worst = fmax(worst, run_case(ctx, &cases[i], (uint32_t)(10 * i + 201)));
    unsetenv("GLESC_ATTN_DECODE");
    cr_log_info("decode through registers over quantized caches: worst NMSE %.3g", worst);
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
