/*
 * test_kv_shift.c — glesc_session_shift (src/llm/kv_shift.c) on synthetic
 * models. With one layer a position's cached key and value depend only on
 * its token and position, so a shifted cache must equal the cache of a fresh
 * session fed only the kept tokens: the next step's logits are compared
 * (worst error printed) for the rotation modes (adjacent pairs, NeoX halves,
 * Llama 3 frequency factors, linear scaling, partial rotary, YaRN, LongRoPE,
 * a gemma3 local layer's own base, sliding windows) and both cache types. Deeper models shift
 * without error and keep evaluating; bad ranges are refused and change nothing.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/synth.h"
#include "glesc_llm.h"
#include "test_synth_util.h"
#include "test_util.h"

static glesc_context *ctx;
static char *dir;

static void setup(void)
{
    ctx = test_context(NULL);
    dir = test_tmpdir();
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
    rmdir(dir);
    free(dir);
}

TestSuite(kv_shift, .init = setup, .fini = teardown);

typedef struct shape {
    const char *arch;
    int n_layer, head_dim, n_rot; /* 0: defaults */
    float linear;
    synth_rope_freqs freqs;
    float base, yarn;      /* rope.freq_base (0: 10000), YaRN's factor */
    bool longrope;         /* phi3's factors (the session's context exceeds n_ctx_orig) */
    float attn_factor;     /* rope.scaling.attn_factor (0: none) */
    int n_ctx_orig, n_swa; /* 0: none */
} shape;

static glesc_model *load(const shape *sh, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s-%d.gguf", dir, sh->arch, sh->n_layer);
    synth_params p;
    test_tiny_params(&p, sh->n_layer, 64);
    p.arch = sh->arch;
    p.head_dim = sh->head_dim;
    p.n_rot = sh->n_rot;
    p.rope_linear = sh->linear;
    p.rope_freqs = sh->freqs;
    p.rope_base = sh->base;
    p.rope_yarn = sh->yarn;
    p.longrope = sh->longrope;
    p.rope_attn_factor = sh->attn_factor;
    p.n_ctx_orig = sh->n_ctx_orig;
    p.n_swa = sh->n_swa;
    p.seed = 11;
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    return m;
}

static glesc_session *session(glesc_model *m, glesc_dtype kv)
{
    glesc_session *s;
    cr_assert_eq(
        glesc_session_create(m, &(glesc_session_options){.n_ctx = 40, .kv_type = TEST_KV(kv)}, &s),
        GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

enum { N = 20, KEEP = 3, DISCARD = 7 };

static void ids_of(int32_t *ids, int64_t n_vocab)
{
    for (int i = 0; i < N; i++)
        ids[i] = i == 0 ? 1 : 3 + (i * 131) % (int)(n_vocab - 3);
}

/* One layer: shift(KEEP, DISCARD) then a step equals a fresh session fed the
 * kept tokens then the same step. */
static void equals_fresh(const shape *sh, glesc_dtype kv, double tol)
{
    char path[4200];
    glesc_model *m = load(sh, path, sizeof path);
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int32_t ids[N], kept[N];
    ids_of(ids, mi.n_vocab);
    float *a = malloc((size_t)mi.n_vocab * sizeof *a), *b = malloc((size_t)mi.n_vocab * sizeof *b);

    glesc_session *s = session(m, kv);
    cr_assert_eq(glesc_session_eval(s, ids, N - 1, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_shift(s, KEEP, DISCARD), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_n_past(s), N - 1 - DISCARD);
    cr_assert_eq(glesc_session_eval(s, &ids[N - 1], 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());

    int n = 0;
    for (int i = 0; i < N - 1; i++)
        if (i < KEEP || i >= KEEP + DISCARD)
            kept[n++] = ids[i];
    glesc_session *f = session(m, kv);
    cr_assert_eq(glesc_session_eval(f, kept, (size_t)n, 0, NULL), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(f, &ids[N - 1], 1, 0, b), GLESC_OK, "%s", glesc_last_errmsg());

    double worst = 0, scale = 0;
    for (int64_t i = 0; i < mi.n_vocab; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    cr_log_info("%s (n_rot %d of head_dim %lld, linear %g%s, kv %s): shifted vs fresh cache, "
                "max |logit diff| %.3g (logits up to %.3g)",
                sh->arch, sh->n_rot ? sh->n_rot : (int)mi.head_dim, (long long)mi.head_dim,
                sh->linear, sh->freqs ? ", rope factors" : "", glesc_dtype_name(kv), worst, scale);
    cr_expect_leq(worst, tol, "%s: %.3g", sh->arch, worst);
    /* and the shifted session saw a different step than the unshifted one */
    glesc_session *u = session(m, kv);
    cr_assert_eq(glesc_session_eval(u, ids, N, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
    double moved = 0;
    for (int64_t i = 0; i < mi.n_vocab; i++)
        moved = fmax(moved, fabs((double)a[i] - b[i]));
    cr_expect_gt(moved, 1e-3 + 10 * worst, "the shift changed nothing (%.3g)", moved);
    glesc_session_destroy(u);
    glesc_session_destroy(f);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    free(a);
    free(b);
    unlink(path);
}

Test(kv_shift, llama_one_layer_equals_fresh_cache)
{
    equals_fresh(&(shape){"llama", 1, 0, 0, 0, SYNTH_ROPE_FREQS_NONE, 0, 0, false, 0, 0, 0},
                 GLESC_DTYPE_F32, 1e-4);
}

Test(kv_shift, qwen2_neox_one_layer_equals_fresh_cache)
{
    equals_fresh(&(shape){"qwen2", 1, 0, 0, 0, SYNTH_ROPE_FREQS_NONE, 0, 0, false, 0, 0, 0},
                 GLESC_DTYPE_F32, 1e-4);
}

Test(kv_shift, rope_factors_linear_partial_equal_fresh_cache)
{
    equals_fresh(&(shape){"llama", 1, 32, 16, 2.0f, SYNTH_ROPE_FREQS_RAMP, 0, 0, false, 0, 0, 0},
                 GLESC_DTYPE_F32, 1e-4);
}

/* The rotation by the distance has magnitude 1 whatever the model's rope
 * multiplies keys by (YaRN's 1 + 0.1·ln(factor), LongRoPE's attn_factor),
 * and a local layer's own base (gemma3: 10000 where the global layers use
 * rope.freq_base). The windows (14) reach the kept first tokens from the
 * last position after the shift but not before it, so the shift shows. */
Test(kv_shift, yarn_longrope_and_local_layers_equal_fresh_cache)
{
    equals_fresh(&(shape){.arch = "qwen2",
                          .n_layer = 1,
                          .base = 10000,
                          .yarn = 4,
                          .n_ctx_orig = 4096,
                          .freqs = SYNTH_ROPE_FREQS_NONE},
                 GLESC_DTYPE_F32, 1e-4);
    equals_fresh(&(shape){.arch = "phi3",
                          .n_layer = 1,
                          .head_dim = 32,
                          .n_rot = 24,
                          .longrope = true,
                          .attn_factor = 1.19f,
                          .n_ctx_orig = 16},
                 GLESC_DTYPE_F32, 1e-4);
    equals_fresh(&(shape){.arch = "gemma3", .n_layer = 1, .base = 1e6f, .linear = 8, .n_swa = 14},
                 GLESC_DTYPE_F32, 1e-4);
    equals_fresh(&(shape){.arch = "gemma2", .n_layer = 1, .n_swa = 14}, GLESC_DTYPE_F32, 1e-4);
}

Test(kv_shift, f16_cache_one_layer_stays_close)
{
    equals_fresh(&(shape){"llama", 1, 0, 0, 0, SYNTH_ROPE_FREQS_NONE, 0, 0, false, 0, 0, 0},
                 GLESC_DTYPE_F16, 2e-3);
}

Test(kv_shift, deeper_model_shifts_and_goes_on_bad_ranges_refused)
{
    char path[4200];
    glesc_model *m =
        load(&(shape){"qwen3", 3, 0, 0, 0, SYNTH_ROPE_FREQS_NONE, 0, 0, false, 0, 0, 0}, path,
             sizeof path);
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int32_t ids[N];
    ids_of(ids, mi.n_vocab);
    float *a = malloc((size_t)mi.n_vocab * sizeof *a);
    glesc_session *s = session(m, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(s, ids, N - 1, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());

    cr_expect_eq(glesc_session_shift(s, -1, 2), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_session_shift(s, 5, N), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "do not fit the 19 evaluated positions"), "%s",
              glesc_last_errmsg());
    cr_expect_eq(glesc_session_shift(NULL, 0, 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_session_n_past(s), N - 1, "a refused shift changed the session");
    cr_expect_eq(glesc_session_shift(s, 4, 0), GLESC_OK);
    cr_assert_eq(glesc_session_n_past(s), N - 1);

    /* shift twice, evaluate after each, then drop the whole tail */
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(glesc_session_shift(s, KEEP, 4), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_eq(glesc_session_eval(s, &ids[i], 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
        for (int64_t j = 0; j < mi.n_vocab; j++)
            cr_assert(isfinite(a[j]));
    }
    cr_expect_eq(glesc_session_n_past(s), N - 1 - 8 + 2);
    int32_t np = glesc_session_n_past(s);
    cr_assert_eq(glesc_session_shift(s, KEEP, np - KEEP), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(s), KEEP);
    cr_expect_null(glesc_session_logits(s), "logits of a forgotten position are still offered");
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    free(a);
    unlink(path);
}
