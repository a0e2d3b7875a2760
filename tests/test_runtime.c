/*
 * test_runtime.c — the model runtime on real models: greedy generation from
 * stories260K reproduces llama.cpp's 48 tokens for both reference prompts,
 * decode steps reuse one plan (nothing generated or compiled from the second
 * decode step on), prefill in several batches equals one batch, and
 * truncating the session re-evaluates the same logits, replayed decode steps
 * equal freshly planned ones bit for bit; and each architecture
 * (llama, qwen2, qwen3; tied heads, linear RoPE scaling, wide heads) against
 * a double-precision CPU forward pass on synthetic models; per-kernel GPU
 * times of a session created with timing; a model file (or a descriptor's
 * range) truncated while it loads and a NaN weight are errors, never a
 * crash or a silent wrong answer.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/synth.h"
#include "compute/compute.h"
#include "glesc_llm.h"
#include "llm/runtime.h"
#include "test_gguf_edit.h"
#include "test_synth_util.h"
#include "test_util.h"

#define CORE_MAX_(a, b) ((a) > (b) ? (a) : (b))

TEST_GPU_SUITE(runtime);

static glesc_model *load(const char *path)
{
    glesc_model *m = NULL;
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    return m;
}

static int32_t argmax(const float *v, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int32_t)i;
    return best;
}

/* llama.cpp's greedy ids for "Once upon a time" and "The little dog ran to
 * the" (reference/expected/stories260K.json, generated_ids). */
static const int32_t expect_once[48] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                        401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                        295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
                                        266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432};

Test(runtime, stories260k_greedy_matches_llama_cpp)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    setenv("GLESC_PLAN_VERIFY", "1", 1);
    glesc_model *m = load(path);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, NULL, &s), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_tokenizer *tok = glesc_model_tokenizer(m);
    const char *prompt = "Once upon a time";
    int32_t *ids;
    size_t n;
    cr_assert_eq(
        glesc_tokenize_alloc(tok, prompt, strlen(prompt), GLESC_TOKENIZE_ADD_SPECIAL, &ids, &n),
        GLESC_OK);
    int32_t V = glesc_tokenizer_n_vocab(tok);
    float *logits = malloc((size_t)V * sizeof *logits);
    cr_assert_eq(glesc_session_eval(s, ids, n, 0, logits), GLESC_OK, "%s", glesc_last_errmsg());
    for (int step = 0; step < 48; step++) {
        int32_t id = argmax(logits, V);
        cr_assert_eq(id, expect_once[step], "step %d: %d, llama.cpp %d", step, id,
                     expect_once[step]);
        cr_assert_eq(glesc_session_eval(s, &id, 1, 0, logits), GLESC_OK, "%s", glesc_last_errmsg());
        glesc_eval_stats st;
        glesc_session_last_stats(s, &st);
        if (step < 3)
            cr_log_info("decode step %d: %d kernels, %d dispatches, plan %s, %d GLSL built, %d "
                        "compiled, %.1f ms",
                        step, st.kernels, st.dispatches, st.plan_reused ? "reused" : "new",
                        st.glsl_built, st.programs_compiled, (double)st.ns / 1e6);
        if (step >= 1) {
            cr_assert(st.plan_reused, "decode step %d built a new plan", step);
            cr_assert_eq(st.glsl_built, 0);
            cr_assert_eq(st.programs_compiled, 0);
        }
        /* 5 per layer, the embedding lookup and the output head */
        if (!getenv("GLESC_NO_FUSION"))
            cr_assert_leq(st.dispatches, 5 * 5 + 2, "dispatches per token: %d", st.dispatches);
    }
    cr_assert_eq(glesc_session_n_past(s), (int32_t)n + 48);
    free(logits);
    glesc_tokens_free(ids);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    unsetenv("GLESC_PLAN_VERIFY");
    free(path);
}

/* Decode steps replay their plan's records (only the attention kernels,
 * which see one more cached position, are bound again); a second context
 * forgets its plans before every step, so each of its steps is generated
 * and bound from nothing. Every step's logits must be equal, bit for bit. */
Test(runtime, decode_replay_equals_fresh_plans)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_context *fresh_ctx = test_context(NULL);
    glesc_model *fm = NULL;
    cr_assert_eq(glesc_model_load(fresh_ctx, path, NULL, &fm), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session *s, *fs;
    glesc_session_options o = {.n_ctx = 64};
    cr_assert_eq(glesc_session_create(fm, &o, &fs), GLESC_OK, "%s", glesc_last_errmsg());
    /* each context's objects are made while it is current */
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
    glesc_model *m = load(path);
    cr_assert_eq(glesc_session_create(m, &o, &s), GLESC_OK, "%s", glesc_last_errmsg());
    int32_t V = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    int32_t id = 1;
    for (int step = 0; step < 40; step++) {
        cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
        cr_assert_eq(glesc_session_eval(s, &id, 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
        glesc_eval_stats st;
        glesc_session_last_stats(s, &st);
        cr_assert_eq(glesc_context_make_current(fresh_ctx), GLESC_OK);
        compute_plans_drop(fresh_ctx);
        cr_assert_eq(glesc_session_eval(fs, &id, 1, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_arr_eq(a, b, (size_t)V * sizeof *a, "step %d: replayed and fresh logits differ",
                         step);
        if (step >= 2)
            cr_assert(st.plan_reused, "step %d", step);
        id = argmax(a, V);
    }
    free(a);
    free(b);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    cr_assert_eq(glesc_context_make_current(fresh_ctx), GLESC_OK);
    glesc_session_destroy(fs);
    glesc_model_destroy(fm);
    glesc_context_destroy(fresh_ctx);
    cr_assert_eq(glesc_context_make_current(ctx), GLESC_OK);
    free(path);
}

/* The same 20 tokens evaluated as one batch, in batches of 3 (n_batch), and
 * one by one give the same logits at every position; truncating and
 * evaluating again reproduces them. f16 KV cache too. */
static void batching_case(glesc_dtype kv, double tol)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_model *m = load(path);
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = i == 0 ? 1 : 259 + (i * 37) % 250;
    int32_t V = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    float *a = malloc(20 * (size_t)V * sizeof *a), *b = malloc(20 * (size_t)V * sizeof *b);
    glesc_session *s1, *s2;
    cr_assert_eq(
        glesc_session_create(m, &(glesc_session_options){.kv_type = TEST_KV(kv), .n_ctx = 64}, &s1),
        GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(
        glesc_session_create(
            m, &(glesc_session_options){.kv_type = TEST_KV(kv), .n_ctx = 64, .n_batch = 3}, &s2),
        GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s1, ids, 20, GLESC_EVAL_ALL_LOGITS, a), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s2, ids, 20, GLESC_EVAL_ALL_LOGITS, b), GLESC_OK, "%s",
                 glesc_last_errmsg());
    double worst = 0;
    for (size_t i = 0; i < 20 * (size_t)V; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    /* one by one from position 10 on, after truncating */
    cr_assert_eq(glesc_session_truncate(s2, 10), GLESC_OK);
    for (int i = 10; i < 20; i++) {
        cr_assert_eq(glesc_session_eval(s2, &ids[i], 1, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
        for (int32_t j = 0; j < V; j++)
            worst = fmax(worst, fabs((double)a[(size_t)i * (size_t)V + (size_t)j] - b[j]));
    }
    cr_log_info("kv %s: batch 20 vs batches of 3 vs one by one: max |diff| %.3g",
                glesc_dtype_name(kv), worst);
    cr_assert_leq(worst, tol);
    cr_assert_eq(glesc_session_n_past(s2), 20);
    /* the last row alone equals the last row of all */
    glesc_session_truncate(s1, 0);
    cr_assert_eq(glesc_session_eval(s1, ids, 20, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
    for (int32_t j = 0; j < V; j++)
        cr_assert_float_eq(b[j], a[19 * (size_t)V + (size_t)j], tol);
    /* ... also from batches of 3 with nothing read back between them (the
     * batches follow each other on the GPU: a batch's inputs and parameters
     * must not reach the one still running before it; an H200 showed it) */
    glesc_session_truncate(s2, 0);
    uint64_t waits = ctx->write_waits;
    cr_assert_eq(glesc_session_eval(s2, ids, 20, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
    /* ... and the host never waited for all the GPU's work to write the
     * next batch's inputs and parameters: each batch's inputs go into the
     * pair of tensors the batch before the last one read, after a wait for
     * that batch alone (exec.c's guard counts the waits it had to do) */
    cr_expect_eq(ctx->write_waits, waits, "kv %s: %llu host writes waited for the GPU in 7 batches",
                 glesc_dtype_name(kv), (unsigned long long)(ctx->write_waits - waits));
    double last = 0;
    for (int32_t j = 0; j < V; j++)
        last = fmax(last, fabs((double)b[j] - a[19 * (size_t)V + (size_t)j]));
    cr_log_info("kv %s: last row after batches of 3 read only at the end: max |diff| %.3g",
                glesc_dtype_name(kv), last);
    cr_assert_leq(last, tol);
    free(a);
    free(b);
    glesc_session_destroy(s1);
    glesc_session_destroy(s2);
    glesc_model_destroy(m);
    free(path);
}

/* Decode steps record, order and plan the next step's graph while they
 * run: a session doing that (logits of the last row) and one reading every
 * row (nothing prepared ahead) give the same logits through what drops such
 * a graph or makes it stale: truncating, greedy steps, several tokens at
 * once, an eval without logits, a context shift. The sequence runs on one
 * session, then on the other (a compute of another graph in between drops
 * what was prepared). The plain decode steps never wait to write their
 * inputs. */
#define AHEAD_EVALS 32

/* Waits for the decode step's background compiles, which a cold prompt
 * starts where the driver compiles in the background (NVIDIA's); its
 * one-token steps run on the prompt's programs meanwhile, whose results
 * differ in rounding and whose dispatches differ in number: what follows
 * then runs on the decode kernels, whatever the timing. */
static void finish_background(glesc_session *s)
{
    for (int ms = 0; s->bg_decode && ms < 60000; ms++) {
        s->bg_decode = !compute_background_done(ctx);
        if (s->bg_decode)
            usleep(1000);
    }
    cr_assert(!s->bg_decode, "the decode step's programs still compile after 60 s");
}
static int ahead_eval(glesc_session *s, bool all_rows, const int32_t *ids, size_t n, float *rows,
                      int k, int32_t V)
{
    cr_assert_lt(k, AHEAD_EVALS);
    float *out = malloc(n * (size_t)V * sizeof *out);
    cr_assert_eq(glesc_session_eval(s, ids, n, all_rows ? GLESC_EVAL_ALL_LOGITS : 0, out), GLESC_OK,
                 "%s", glesc_last_errmsg());
    if (!all_rows)
        cr_expect(n > 1 || compute_state_get(ctx)->prep.valid,
                  "eval %d: the next step's compute is prepared", k);
    memcpy(rows + (size_t)k * (size_t)V, out + (all_rows ? (n - 1) * (size_t)V : 0),
           (size_t)V * sizeof *out);
    free(out);
    return k + 1;
}

static int ahead_sequence(glesc_session *s, bool all_rows, float *rows, int32_t V,
                          uint64_t *step_waits)
{
    static const int32_t prompt[6] = {1, 300, 301, 302, 303, 304};
    static const int32_t three[3] = {310, 311, 312};
    int k = ahead_eval(s, all_rows, prompt, 6, rows, 0, V);
    finish_background(s);
    int32_t id = argmax(rows, V);
    uint64_t waits = ctx->write_waits;
    for (int i = 0; i < 5; i++) {
        k = ahead_eval(s, all_rows, &id, 1, rows, k, V);
        id = argmax(rows + (size_t)(k - 1) * (size_t)V, V);
    }
    *step_waits = ctx->write_waits - waits;
    /* back two positions: the graph recorded for the next one is stale */
    cr_assert_eq(glesc_session_truncate(s, 9), GLESC_OK);
    k = ahead_eval(s, all_rows, &id, 1, rows, k, V);
    /* greedy steps use the graph for their own */
    int32_t g;
    cr_assert_eq(glesc_session_eval_greedy(s, 305), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_greedy_id(s, &g), GLESC_OK);
    k = ahead_eval(s, all_rows, &g, 1, rows, k, V);
    /* several tokens, one alone, one without logits */
    k = ahead_eval(s, all_rows, three, 3, rows, k, V);
    k = ahead_eval(s, all_rows, &three[1], 1, rows, k, V);
    cr_assert_eq(glesc_session_eval(s, &three[2], 1, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    k = ahead_eval(s, all_rows, &three[0], 1, rows, k, V);
    /* a shift moves the positions back */
    cr_assert_eq(glesc_session_shift(s, 1, 3), GLESC_OK, "%s", glesc_last_errmsg());
    for (int i = 0; i < 3; i++)
        k = ahead_eval(s, all_rows, &three[i], 1, rows, k, V);
    return k;
}

Test(runtime, decode_graphs_recorded_ahead_stay_right)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_model *m = load(path);
    int32_t V = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    float *ra = malloc(AHEAD_EVALS * (size_t)V * sizeof *ra);
    float *rb = malloc(AHEAD_EVALS * (size_t)V * sizeof *rb);
    glesc_session *a, *b;
    glesc_session_options o = {.n_ctx = 40, .n_batch = 4};
    cr_assert_eq(glesc_session_create(m, &o, &a), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_create(m, &o, &b), GLESC_OK, "%s", glesc_last_errmsg());
    uint64_t waits_a, waits_b;
    int ka = ahead_sequence(a, false, ra, V, &waits_a);
    int kr = ahead_sequence(b, true, rb, V, &waits_b);
    cr_assert_eq(ka, kr);
    cr_expect_eq(waits_a, 0, "%llu host writes of 5 decode steps waited",
                 (unsigned long long)waits_a);
    double worst = 0;
    for (size_t i = 0; i < (size_t)ka * (size_t)V; i++)
        worst = fmax(worst, fabs((double)ra[i] - rb[i]));
    cr_log_info("%d evals with graphs prepared ahead vs every row read: max |diff| %.3g", ka,
                worst);
    cr_expect_leq(worst, 1e-5);
    cr_expect_eq(glesc_session_n_past(a), glesc_session_n_past(b));
    free(ra);
    free(rb);
    glesc_session_destroy(a);
    glesc_session_destroy(b);
    glesc_model_destroy(m);
    free(path);
}

/* A 16-token prompt (the narrow GEMM's width, above every GEMV's) and 6
 * greedy decode steps on a fresh model and session of c; forced: one-token
 * steps that take the prompt's programs (runtime.h's batch_steps). Each
 * step's logits into rows, its statistics into st. */
#define FIRST_STEPS 6
static void first_steps(glesc_context *c, const char *path, int forced, float *rows, int32_t V,
                        glesc_eval_stats *st)
{
    glesc_model *m = NULL;
    cr_assert_eq(glesc_model_load(c, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 64}, &s), GLESC_OK, "%s",
                 glesc_last_errmsg());
    int32_t ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = i == 0 ? 1 : 259 + (i * 37) % 250;
    cr_assert_eq(glesc_session_eval(s, ids, 16, 0, rows), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session_last_stats(s, &st[0]);
    s->batch_steps = forced;
    for (int k = 1; k <= FIRST_STEPS; k++) {
        int32_t id = argmax(rows + (size_t)(k - 1) * (size_t)V, V);
        cr_assert_eq(glesc_session_eval(s, &id, 1, 0, rows + (size_t)k * (size_t)V), GLESC_OK, "%s",
                     glesc_last_errmsg());
        glesc_session_last_stats(s, &st[k]);
    }
    glesc_session_destroy(s);
    glesc_model_destroy(m);
}

static double worst_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

/* A first use: decode steps on the prompt's programs (the graph's
 * batch_kernels) compile nothing and give the decode kernels' logits; and
 * where the driver compiles in the background (llvmpipe's
 * GL_KHR_parallel_shader_compile with one compile thread, as on NVIDIA's
 * driver) the decode step's programs are started after the prompt, and the
 * first steps take the prompt's until they are done, compiling nothing. */
Test(runtime, first_steps_run_on_the_prompts_programs)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_model *m = load(path);
    int32_t V = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    glesc_model_destroy(m);
    size_t n = (FIRST_STEPS + 1) * (size_t)V;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *r = malloc(n * sizeof *r);
    glesc_eval_stats sa[FIRST_STEPS + 1], sb[FIRST_STEPS + 1], sr[FIRST_STEPS + 1];
    /* the fused prompt (the large GPUs' row takes narrow skips) */
    setenv("GLESC_FUSE_SKIP_NARROW", "none", 1);
    first_steps(ctx, path, FIRST_STEPS + 1, b, V, sb); /* forced */
    first_steps(ctx, path, 0, r, V, sr);               /* the decode kernels */
    unsetenv("GLESC_FUSE_SKIP_NARROW");
    cr_assert_gt(sb[0].programs_compiled, 0, "the prompt compiled nothing");
    for (int k = 1; k <= FIRST_STEPS; k++) {
        cr_log_info("step %d: %d dispatches on the prompt's programs, %d compiled; %d on the "
                    "decode kernels",
                    k, sb[k].dispatches, sb[k].programs_compiled, sr[k].dispatches);
        cr_expect_eq(sb[k].programs_compiled, 0, "step %d compiled %d programs", k,
                     sb[k].programs_compiled);
        cr_expect_neq(sb[k].dispatches, sr[k].dispatches, "step %d: not the batch kernels", k);
    }
    double wb = worst_diff(b, r, n);
    cr_log_info("steps on the prompt's programs vs the decode kernels: max |diff| %.3g", wb);
    cr_expect_leq(wb, 5e-3); /* GEMM and GEMV rounding through the f16 cache */

    /* the large GPUs' narrow skips (the prompt's GEMMs without their
     * group, pair and epilogues): more dispatches, and the forced steps
     * take those programs, compiling nothing */
    setenv("GLESC_FUSE_SKIP_NARROW", "group,pair,epilogue", 1);
    first_steps(ctx, path, FIRST_STEPS + 1, a, V, sa);
    unsetenv("GLESC_FUSE_SKIP_NARROW");
    for (int k = 1; k <= FIRST_STEPS; k++)
        cr_expect_eq(sa[k].programs_compiled, 0, "narrow skips: step %d compiled %d", k,
                     sa[k].programs_compiled);
    cr_expect_gt(sa[0].dispatches, sb[0].dispatches, "narrow skips: the prompt fused");
    double wn = worst_diff(a, r, n);
    cr_log_info("steps on the unfused prompt's programs vs the decode kernels: max |diff| %.3g",
                wn);
    cr_expect_leq(wn, 5e-3);

    setenv("GLESC_COMPILE_THREADS", "1", 1);
    glesc_context *c = test_context(NULL);
    unsetenv("GLESC_COMPILE_THREADS");
    if (compute_background_compiles(c)) {
        first_steps(c, path, 0, a, V, sa);
        for (int k = 1; k <= FIRST_STEPS; k++)
            cr_expect_eq(sa[k].programs_compiled, 0, "background: step %d compiled %d", k,
                         sa[k].programs_compiled);
        double wa = worst_diff(a, r, n);
        cr_log_info("background compiles: %d dispatches in the first step; max |diff| %.3g",
                    sa[1].dispatches, wa);
        cr_expect_leq(wa, 5e-3);
    } else {
        cr_log_info("background compiles not checked: the driver does not compile in the "
                    "background (no GL_KHR_parallel_shader_compile)");
    }
    free(a);
    free(b);
    free(r);
    glesc_context_destroy(c);
    free(path);
}

Test(runtime, batches_and_steps_agree_f32)
{
    batching_case(GLESC_DTYPE_F32, 1e-4);
}

Test(runtime, batches_and_steps_agree_f16_cache)
{
    /* f32 rounding differences between GEMV and GEMM move some cached values
     * across an f16 rounding boundary (llama.cpp's own f16 runs differ by
     * 1.8e-3 between its batched and incremental paths). */
    batching_case(GLESC_DTYPE_F16, 5e-3);
}

Test(runtime, context_overflow_and_bad_ids_are_refused)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_model *m = load(path);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 8}, &s), GLESC_OK);
    int32_t ids[9] = {1, 300, 301, 302, 303, 304, 305, 306, 307};
    cr_assert_eq(glesc_session_eval(s, ids, 9, 0, NULL), GLESC_ERROR_LIMIT);
    cr_log_info("%s", glesc_last_errmsg());
    cr_assert(strstr(glesc_last_errmsg(), "do not fit the context"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_n_past(s), 0);
    int32_t bad = 512;
    cr_assert_eq(glesc_session_eval(s, &bad, 1, 0, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "outside the vocabulary"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s, ids, 8, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s, ids, 1, 0, NULL), GLESC_ERROR_LIMIT);
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.kv_type = GLESC_DTYPE_BF16},
                                      &(glesc_session *){NULL}),
                 GLESC_ERROR_INVALID_ARGUMENT);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    free(path);
}

/* ---- Every architecture against a CPU forward pass ----
 * A direct double-precision transcription of llama.cpp's llama / qwen2 /
 * qwen3 graphs (RMS norm, RoPE normal or NeoX with linear scaling, grouped
 * query attention, SwiGLU, tied head), over a synthetic f32 model. */

/* The architectures' options, as the synthetic file and the CPU reference
 * see them. */
typedef struct arch_opts {
    const char *arch;
    int n_layer, head_dim, n_rot; /* 0: 2 layers, n_embd / n_head, head_dim */
    float base, linear, yarn;     /* rope.freq_base (0: 10000), scaling factors */
    bool tied, rope_freqs, longrope;
    int n_ctx_orig; /* rope.scaling.original_context_length (0: the file's context, 64) */
    float attn_factor;
    int n_swa;                         /* attention.sliding_window */
    float attn_softcap, final_softcap; /* gemma2's keys (0: llama.cpp's defaults 50, 30) */
    int n_ctx;                         /* the session's context (0: 32) */
    glesc_dtype kv;
    double tol;
    int per_layer; /* dispatches per layer per decode token at most (0: 5) */
} arch_opts;

typedef struct ref_model {
    const glesc_gguf *f;
    const arch_opts *o;
    int64_t e, L, ff, h, hkv, d, nv, n_rot;
    float eps;
    bool neox, gemma, gemma2, gemma3, phi3;
    int n_swa, swa_pattern;
    double attn_scale, attn_cap, final_cap, embd_scale;
    const float *factors; /* rope frequency factors, or NULL */
} ref_model;

/* Element i of tensor name (f32), or 0 with a test failure when absent. */
static const float *ref_tensor(const ref_model *m, const char *fmt, int64_t l)
{
    char name[96];
    snprintf(name, sizeof name, fmt, (long long)l);
    int64_t i = glesc_gguf_find_tensor(m->f, name);
    if (i < 0)
        return NULL;
    glesc_gguf_tensor_info t;
    glesc_gguf_tensor(m->f, i, &t);
    cr_assert_eq(t.type, GLESC_DTYPE_F32, "%s", name);
    return t.data; /* GGUF data is 32-byte aligned */
}

/* y[n] = W[k, n] x[k] */
static void ref_matvec(const float *w, const double *x, int64_t k, int64_t n, double *y)
{
    for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t i = 0; i < k; i++)
            s += (double)w[j * k + i] * x[i];
        y[j] = s;
    }
}

static void ref_rmsnorm(const double *x, const float *w, int64_t n, float eps, double *y)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * r * (w ? w[i] : 1.0);
}

/* Is layer l local (a sliding window)? llama.cpp's patterns: gemma2 every
 * other layer from 0, gemma3 five of six. */
static bool ref_swa(const ref_model *m, int64_t l)
{
    return m->swa_pattern > 0 && l % m->swa_pattern < m->swa_pattern - 1;
}

/* Rope of one head x[d] at position pos in layer l, written from the
 * papers' definitions: theta_i = pos · base^(-2i/n_rot) / factor_i;
 * linear scaling divides positions; YaRN (Peng et al.) blends
 * interpolation and extrapolation by a ramp over the rotations whose
 * wavelengths fall between n_ctx_orig / beta_fast and n_ctx_orig /
 * beta_slow (llama.cpp's rounding of the bounds) and scales the magnitude
 * by 0.1·ln(factor) + 1; LongRoPE multiplies it by attn_factor. Gemma 3's
 * local layers rotate with base 10000, unscaled. */
static void ref_rope(double *x, int pos, const ref_model *m, int64_t l)
{
    const arch_opts *o = m->o;
    double base = o->base > 0 ? o->base : 1e4, factor = o->linear > 0 ? o->linear : o->yarn;
    bool local = ref_swa(m, l) && m->gemma3;
    if (local) {
        base = 1e4;
        factor = 0;
    }
    double mag = o->attn_factor > 0 ? o->attn_factor : 1.0;
    double lo = 0, hi = 0;
    bool yarn = o->yarn > 0 && !local;
    if (yarn) {
        int n_orig = o->n_ctx_orig > 0 ? o->n_ctx_orig : 64;
        lo = fmax(0, floor(m->n_rot * log(n_orig / (32 * 2 * M_PI)) / (2 * log(base))));
        hi = fmin(m->n_rot - 1, ceil(m->n_rot * log(n_orig / (1 * 2 * M_PI)) / (2 * log(base))));
        mag *= 1 + 0.1 * log(o->yarn);
    }
    for (int64_t i = 0; i < m->n_rot / 2; i++) {
        double theta = pos * pow(base, -2.0 * (double)i / (double)m->n_rot);
        if (m->factors)
            theta /= m->factors[i];
        double interp = factor > 0 ? theta / factor : theta;
        if (yarn) {
            double r = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            theta = interp * (1 - r) + theta * r;
        } else {
            theta = interp;
        }
        int64_t a = m->neox ? i : 2 * i, b = m->neox ? i + m->n_rot / 2 : 2 * i + 1;
        double x0 = x[a], x1 = x[b];
        x[a] = mag * (x0 * cos(theta) - x1 * sin(theta));
        x[b] = mag * (x0 * sin(theta) + x1 * cos(theta));
    }
}

/* GELU, tanh form (Gemma's gelu_pytorch_tanh) */
static double ref_gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* q, k, v of one position from the normed input h: separate projections
 * (with qwen2's biases) or phi3's one matrix. */
static void ref_qkv(const ref_model *m, int64_t l, const double *h, double *q, double *k, double *v,
                    double *tmp)
{
    int64_t e = m->e, qd = m->h * m->d, kvd = m->hkv * m->d;
    const float *wqkv = ref_tensor(m, "blk.%lld.attn_qkv.weight", l);
    if (wqkv) {
        ref_matvec(wqkv, h, e, qd + 2 * kvd, tmp);
        memcpy(q, tmp, (size_t)qd * sizeof *q);
        memcpy(k, tmp + qd, (size_t)kvd * sizeof *k);
        memcpy(v, tmp + qd + kvd, (size_t)kvd * sizeof *v);
        return;
    }
    ref_matvec(ref_tensor(m, "blk.%lld.attn_q.weight", l), h, e, qd, q);
    ref_matvec(ref_tensor(m, "blk.%lld.attn_k.weight", l), h, e, kvd, k);
    ref_matvec(ref_tensor(m, "blk.%lld.attn_v.weight", l), h, e, kvd, v);
    const float *bq = ref_tensor(m, "blk.%lld.attn_q.bias", l);
    const float *bk = ref_tensor(m, "blk.%lld.attn_k.bias", l);
    const float *bv = ref_tensor(m, "blk.%lld.attn_v.bias", l);
    for (int64_t i = 0; bq && i < qd; i++)
        q[i] += bq[i];
    for (int64_t i = 0; bk && i < kvd; i++) {
        k[i] += bk[i];
        v[i] += bv[i];
    }
}

/* Adds y (normed by post_<which>, Gemma) to the residual x. */
static void ref_residual(const ref_model *m, int64_t l, const char *post, double *x, double *y,
                         double *tmp)
{
    const float *pn = post ? ref_tensor(m, post, l) : NULL;
    if (pn) {
        ref_rmsnorm(y, pn, m->e, m->eps, tmp);
        y = tmp;
    }
    for (int64_t i = 0; i < m->e; i++)
        x[i] += y[i];
}

/* Logits [n, nv] of ids[0..n) from position 0. */
static double *ref_forward(const ref_model *m, const int32_t *ids, int n)
{
    int64_t e = m->e, d = m->d, qd = m->h * d, kvd = m->hkv * d;
    int64_t big = CORE_MAX_(CORE_MAX_(e, qd + 2 * kvd), 2 * m->ff);
    double *x = calloc((size_t)(n * e), sizeof *x), *h = calloc((size_t)e, sizeof *h);
    double *q = calloc((size_t)qd, sizeof *q), *att = calloc((size_t)qd, sizeof *att);
    double *K = calloc((size_t)(n * kvd), sizeof *K), *V = calloc((size_t)(n * kvd), sizeof *V);
    double *g = calloc((size_t)2 * m->ff, sizeof *g), *u = calloc((size_t)m->ff, sizeof *u);
    double *t = calloc((size_t)big, sizeof *t), *t2 = calloc((size_t)big, sizeof *t2);
    double *qq = calloc((size_t)qd, sizeof *qq), *sc = calloc((size_t)n, sizeof *sc);
    double *logits = calloc((size_t)(n * m->nv), sizeof *logits);
    const float *emb = ref_tensor(m, "token_embd.weight", 0);
    for (int p = 0; p < n; p++)
        for (int64_t i = 0; i < e; i++)
            x[p * e + i] = emb[ids[p] * e + i] * m->embd_scale;
    for (int64_t l = 0; l < m->L; l++) {
        const float *qn = ref_tensor(m, "blk.%lld.attn_q_norm.weight", l);
        const float *kn = ref_tensor(m, "blk.%lld.attn_k_norm.weight", l);
        for (int p = 0; p < n; p++) { /* all positions' K/V first (causal below) */
            ref_rmsnorm(x + p * e, ref_tensor(m, "blk.%lld.attn_norm.weight", l), e, m->eps, h);
            double *k = K + p * kvd, *v = V + p * kvd;
            ref_qkv(m, l, h, qq, k, v, t);
            for (int64_t hh = 0; hh < m->hkv; hh++) {
                if (kn) {
                    ref_rmsnorm(k + hh * d, kn, d, m->eps, t);
                    memcpy(k + hh * d, t, (size_t)d * sizeof *t);
                }
                ref_rope(k + hh * d, p, m, l);
            }
        }
        for (int p = 0; p < n; p++) {
            ref_rmsnorm(x + p * e, ref_tensor(m, "blk.%lld.attn_norm.weight", l), e, m->eps, h);
            ref_qkv(m, l, h, q, t2, t2 + kvd, t);
            int first = m->n_swa > 0 && ref_swa(m, l) ? CORE_MAX_(0, p - m->n_swa + 1) : 0;
            for (int64_t hh = 0; hh < m->h; hh++) {
                double *qh = q + hh * d;
                if (qn) {
                    ref_rmsnorm(qh, qn, d, m->eps, t);
                    memcpy(qh, t, (size_t)d * sizeof *t);
                }
                ref_rope(qh, p, m, l);
                int64_t kh = hh / (m->h / m->hkv);
                double mx = -1e300, sum = 0;
                for (int j = first; j <= p; j++) {
                    double s = 0;
                    for (int64_t i = 0; i < d; i++)
                        s += qh[i] * K[j * kvd + kh * d + i];
                    s *= m->attn_scale;
                    if (m->attn_cap > 0)
                        s = m->attn_cap * tanh(s / m->attn_cap);
                    sc[j] = s;
                    mx = fmax(mx, sc[j]);
                }
                for (int j = first; j <= p; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t i = 0; i < d; i++) {
                    double a = 0;
                    for (int j = first; j <= p; j++)
                        a += sc[j] * V[j * kvd + kh * d + i];
                    att[hh * d + i] = a / sum;
                }
            }
            double *xp = x + p * e;
            ref_matvec(ref_tensor(m, "blk.%lld.attn_output.weight", l), att, qd, e, t2);
            ref_residual(m, l, "blk.%lld.post_attention_norm.weight", xp, t2, t);
            ref_rmsnorm(xp, ref_tensor(m, "blk.%lld.ffn_norm.weight", l), e, m->eps, h);
            const float *wg = ref_tensor(m, "blk.%lld.ffn_gate.weight", l);
            if (wg) {
                ref_matvec(wg, h, e, m->ff, g);
                ref_matvec(ref_tensor(m, "blk.%lld.ffn_up.weight", l), h, e, m->ff, u);
            } else { /* phi3: gate then up rows of one matrix */
                ref_matvec(ref_tensor(m, "blk.%lld.ffn_up.weight", l), h, e, 2 * m->ff, g);
                memcpy(u, g + m->ff, (size_t)m->ff * sizeof *u);
            }
            for (int64_t i = 0; i < m->ff; i++)
                g[i] = (m->gemma ? ref_gelu(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
            ref_matvec(ref_tensor(m, "blk.%lld.ffn_down.weight", l), g, m->ff, e, t2);
            ref_residual(m, l, "blk.%lld.post_ffw_norm.weight", xp, t2, t);
        }
    }
    const float *out = ref_tensor(m, "output.weight", 0);
    for (int p = 0; p < n; p++) {
        double *lg = logits + p * m->nv;
        ref_rmsnorm(x + p * e, ref_tensor(m, "output_norm.weight", 0), e, m->eps, h);
        ref_matvec(out ? out : emb, h, e, m->nv, lg);
        for (int64_t i = 0; m->final_cap > 0 && i < m->nv; i++)
            lg[i] = m->final_cap * tanh(lg[i] / m->final_cap);
    }
    free(x);
    free(h);
    free(q);
    free(qq);
    free(att);
    free(K);
    free(V);
    free(g);
    free(u);
    free(t);
    free(t2);
    free(sc);
    return logits;
}

static void arch_run(const arch_opts *o)
{
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, o->arch);
    synth_params p;
    test_tiny_params(&p, o->n_layer > 0 ? o->n_layer : 2, 64);
    p.arch = o->arch;
    p.head_dim = o->head_dim;
    p.n_rot = o->n_rot;
    p.rope_base = o->base;
    p.rope_linear = o->linear;
    p.rope_yarn = o->yarn;
    p.n_ctx_orig = o->n_ctx_orig;
    p.rope_attn_factor = o->attn_factor;
    p.longrope = o->longrope;
    p.n_swa = o->n_swa;
    p.attn_softcap = o->attn_softcap;
    p.final_softcap = o->final_softcap;
    p.tied_output = o->tied;
    p.rope_freqs = o->rope_freqs ? SYNTH_ROPE_FREQS_RAMP : SYNTH_ROPE_FREQS_NONE;
    p.seed = 7;
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());

    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_model *m = load(path);
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int n_ctx = o->n_ctx > 0 ? o->n_ctx : 32;
    bool gemma2 = !strcmp(o->arch, "gemma2"), gemma3 = !strcmp(o->arch, "gemma3");
    ref_model r = {.f = f,
                   .o = o,
                   .e = mi.n_embd,
                   .L = mi.n_layer,
                   .ff = mi.n_ff,
                   .h = mi.n_head,
                   .hkv = mi.n_head_kv,
                   .d = mi.head_dim,
                   .nv = mi.n_vocab,
                   .n_rot = o->n_rot > 0 ? o->n_rot : mi.head_dim,
                   .eps = 1e-5f,
                   .neox = strcmp(o->arch, "llama") != 0,
                   .gemma = gemma2 || gemma3,
                   .gemma2 = gemma2,
                   .gemma3 = gemma3,
                   .phi3 = !strcmp(o->arch, "phi3"),
                   .n_swa = gemma2 && o->n_swa == 0 ? 4096 : o->n_swa,
                   .swa_pattern = gemma2                   ? 2
                                  : gemma3 && o->n_swa > 0 ? 6
                                                           : 0,
                   .attn_scale = 1.0 / sqrt((double)mi.head_dim),
                   .attn_cap = gemma2 ? (o->attn_softcap > 0 ? o->attn_softcap : 50) : 0,
                   .final_cap = gemma2 ? (o->final_softcap > 0 ? o->final_softcap : 30) : 0,
                   .embd_scale = gemma2 || gemma3 ? sqrt((double)mi.n_embd) : 1};
    /* LongRoPE: the long factors once the context exceeds the original */
    int n_orig = o->n_ctx_orig > 0 ? o->n_ctx_orig : 64;
    r.factors =
        o->rope_freqs ? ref_tensor(&r, "rope_freqs.weight", 0)
        : o->longrope
            ? ref_tensor(
                  &r, n_ctx > n_orig ? "rope_factors_long.weight" : "rope_factors_short.weight", 0)
            : NULL;
    enum { N = 12 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = i == 0 ? 1 : 3 + (i * 97) % (int)(mi.n_vocab - 3);
    double *want = ref_forward(&r, ids, N);
    float *got = malloc((size_t)(N * mi.n_vocab) * sizeof *got);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(
                     m, &(glesc_session_options){.n_ctx = n_ctx, .kv_type = TEST_KV(o->kv)}, &s),
                 GLESC_OK, "%s", glesc_last_errmsg());
    /* a prefill of 8, then 4 decode steps */
    cr_assert_eq(glesc_session_eval(s, ids, 8, GLESC_EVAL_ALL_LOGITS, got), GLESC_OK, "%s",
                 glesc_last_errmsg());
    int per_layer = o->per_layer > 0 ? o->per_layer : 5;
    for (int i = 8; i < N; i++) {
        cr_assert_eq(glesc_session_eval(s, &ids[i], 1, 0, got + i * mi.n_vocab), GLESC_OK, "%s",
                     glesc_last_errmsg());
        /* a llama decoder layer is at most 5 dispatches (rms_norm·w with
         * q/k/v; attention with rope and the cache writes; output
         * projection + residual; rms_norm·w with gate/up and silu·mul; down
         * projection + residual), plus the embedding lookup (a kernel of
         * its own: gathered in the first layer's matmuls it would make
         * programs of that layer only, fuse.c) and the output head;
         * Gemma's post-norms add two a layer (see arch_cases) */
        glesc_eval_stats st;
        glesc_session_last_stats(s, &st);
        int extra = 2;
        if (!getenv("GLESC_NO_FUSION"))
            cr_assert_leq(st.dispatches, per_layer * mi.n_layer + extra,
                          "%s: %d dispatches per decode token", o->arch, st.dispatches);
        if (i == N - 1)
            cr_log_info("%s: %d dispatches per decode token (%lld layers)", o->arch, st.dispatches,
                        (long long)mi.n_layer);
    }
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < N * mi.n_vocab; i++) {
        worst = fmax(worst, fabs(got[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    cr_log_info("%s (head_dim %lld, rot %lld, base %g, linear %g, yarn %g%s%s%s, swa %d, caps "
                "%g/%g, ctx %d, kv %s): max |logit diff| %.3g (logits up to %.3g)",
                o->arch, (long long)mi.head_dim, (long long)r.n_rot, (double)o->base,
                (double)o->linear, (double)o->yarn, o->tied ? ", tied" : "",
                o->rope_freqs ? ", rope factors" : "", o->longrope ? ", longrope" : "", r.n_swa,
                r.attn_cap, r.final_cap, n_ctx, glesc_dtype_name(o->kv), worst, scale);
    cr_expect_leq(worst, o->tol, "%s: %.3g", o->arch, worst);
    free(want);
    free(got);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_gguf_close(f);
    unlink(path);
    rmdir(dir);
    free(dir);
}

static void arch_case(const char *arch, int head_dim, float base, float linear, bool tied,
                      glesc_dtype kv, double tol)
{
    arch_run(&(arch_opts){.arch = arch,
                          .head_dim = head_dim,
                          .base = base,
                          .linear = linear,
                          .tied = tied,
                          .kv = kv,
                          .tol = tol});
}

Test(runtime, llama_matches_cpu_reference)
{
    arch_case("llama", 0, 0, 0, false, GLESC_DTYPE_F32, 1e-4);
}

Test(runtime, llama_tied_linear_rope_matches_cpu_reference)
{
    arch_case("llama", 0, 500000.0f, 4.0f, true, GLESC_DTYPE_F32, 1e-4);
}

Test(runtime, llama3_rope_factors_match_cpu_reference)
{
    arch_run(&(arch_opts){.arch = "llama",
                          .base = 500000.0f,
                          .rope_freqs = true,
                          .kv = GLESC_DTYPE_F32,
                          .tol = 1e-4});
}

Test(runtime, qwen2_matches_cpu_reference)
{
    arch_case("qwen2", 0, 1000000.0f, 0, true, GLESC_DTYPE_F32, 1e-4);
}

Test(runtime, qwen2_yarn_matches_cpu_reference)
{
    /* Qwen 2.5's long-context files: YaRN, factor 4 over 4096 positions
     * (with head_dim 16 and base 10000 the ramp spans rotations 2..6) */
    arch_run(&(arch_opts){.arch = "qwen2",
                          .base = 10000.0f,
                          .yarn = 4.0f,
                          .n_ctx_orig = 4096,
                          .tied = true,
                          .kv = GLESC_DTYPE_F32,
                          .tol = 1e-4});
}

Test(runtime, qwen3_matches_cpu_reference)
{
    /* head_dim 32 with 4 heads: q is wider than n_embd, as in Qwen3 */
    arch_case("qwen3", 32, 1000000.0f, 0, false, GLESC_DTYPE_F32, 1e-4);
}

Test(runtime, f16_cache_stays_close)
{
    arch_case("qwen3", 32, 1000000.0f, 0, false, GLESC_DTYPE_F16, 2e-2);
}

/* Gemma's layer is 7 dispatches: its post-norms (rms_norm·w + residual
 * after the output and the down projections) need the whole row of a
 * matmul's result, which one GEMV workgroup does not have, so each is a
 * kernel of its own (the norm, its weight and the residual add in one). */
Test(runtime, gemma2_matches_cpu_reference)
{
    /* small caps so that soft-capping matters; a window of 5 of the 12
     * positions on layers 0 and 2 */
    arch_run(&(arch_opts){.arch = "gemma2",
                          .n_layer = 3,
                          .n_swa = 5,
                          .attn_softcap = 0.5f,
                          .final_softcap = 2.0f,
                          .tied = true,
                          .kv = GLESC_DTYPE_F32,
                          .tol = 1e-4,
                          .per_layer = 7});
}

Test(runtime, gemma2_default_caps_match_cpu_reference)
{
    /* no keys: llama.cpp's window 4096 and caps 50 / 30 */
    arch_run(&(arch_opts){.arch = "gemma2",
                          .head_dim = 32,
                          .tied = true,
                          .kv = GLESC_DTYPE_F16,
                          .tol = 2e-2,
                          .per_layer = 7});
}

Test(runtime, gemma3_matches_cpu_reference)
{
    /* six layers: five local ones (window 4, base 10000, unscaled) and a
     * global one with base 1e6 and linear scaling 8 */
    arch_run(&(arch_opts){.arch = "gemma3",
                          .n_layer = 6,
                          .head_dim = 32,
                          .base = 1e6f,
                          .linear = 8.0f,
                          .n_swa = 4,
                          .tied = true,
                          .kv = GLESC_DTYPE_F32,
                          .tol = 1e-4,
                          .per_layer = 7});
}

Test(runtime, phi3_matches_cpu_reference)
{
    /* fused attn_qkv and gate|up, partial rotary (24 of 32 dimensions) */
    arch_run(&(arch_opts){
        .arch = "phi3", .head_dim = 32, .n_rot = 24, .kv = GLESC_DTYPE_F32, .tol = 1e-4});
}

Test(runtime, phi3_longrope_matches_cpu_reference)
{
    /* LongRoPE: the short factors while the context fits the original 32
     * positions, the long ones beyond, both with the magnitude factor */
    for (int n_ctx = 32; n_ctx <= 48; n_ctx += 16)
        arch_run(&(arch_opts){.arch = "phi3",
                              .longrope = true,
                              .n_ctx_orig = 32,
                              .attn_factor = 1.19f,
                              .n_ctx = n_ctx,
                              .kv = GLESC_DTYPE_F32,
                              .tol = 1e-4});
}

/* A session created with timing reports one GPU time per kernel of its last
 * graph, as many as the eval's statistics count; without timing none. */
Test(runtime, kernel_times_with_timing)
{
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/timed.gguf", dir);
    synth_params p;
    test_tiny_params(&p, 1, 32);
    p.weight_type = GLESC_DTYPE_F16;
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
    glesc_model *m = load(path);
    glesc_session *timed, *plain;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.timing = true}, &timed),
                 GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_create(m, NULL, &plain), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_kernel_time *kt = NULL;
    cr_assert_eq(glesc_session_kernel_times(timed, &kt), 0, "nothing evaluated yet");
    cr_assert_null(kt);
    int32_t ids[3] = {1, 300, 301};
    for (int step = 0; step < 2; step++) {
        cr_assert_eq(glesc_session_eval(timed, step ? &ids[2] : ids, step ? 1 : 2, 0, NULL),
                     GLESC_OK, "%s", glesc_last_errmsg());
        glesc_eval_stats es;
        glesc_session_last_stats(timed, &es);
        int n = glesc_session_kernel_times(timed, &kt);
        cr_assert_eq(n, es.kernels);
        int dispatches = 0;
        for (int k = 0; k < n; k++) {
            cr_assert(kt[k].name && *kt[k].name);
            dispatches += kt[k].dispatches;
        }
        cr_assert_eq(dispatches, es.dispatches);
    }
    cr_assert_eq(glesc_session_eval(plain, ids, 2, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_kernel_times(plain, &kt), 0);
    cr_assert_null(kt);
    glesc_session_destroy(timed);
    glesc_session_destroy(plain);
    glesc_model_destroy(m);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* ---- Broken files and broken models ---- */

/* A small f32 llama model in a fresh directory; rm_model() removes both. */
static char *small_model(void)
{
    synth_params p;
    test_tiny_params(&p, 2, 64);
    char *dir = test_tmpdir();
    char *path = test_synth_write(&p, dir, "m.gguf");
    free(dir);
    return path;
}

static void rm_model(char *path)
{
    unlink(path);
    *strrchr(path, '/') = 0;
    rmdir(path);
    free(path);
}

typedef struct shrink {
    const char *path;
    off_t to;
    int calls;
} shrink;

/* After the first tensor is on the GPU, another process cuts the file. */
static bool shrink_file(void *user, uint64_t done, uint64_t total)
{
    shrink *s = user;
    if (s->calls++ == 0 && done < total)
        cr_assert_eq(truncate(s->path, s->to), 0);
    return false; /* go on loading */
}

/* The upload copies the file's bytes with pread: a file that shrinks while
 * it loads is an error naming it, where reading the mapping's vanished pages
 * was a SIGBUS. */
Test(runtime, model_file_truncated_while_loading)
{
    char *path = small_model();
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    shrink s = {path, sb.st_size / 2, 0};
    glesc_model_options o = {.progress = shrink_file, .progress_user = &s};
    glesc_model *m = (glesc_model *)1;
    cr_assert_eq(glesc_model_load(ctx, path, &o, &m), GLESC_ERROR_IO, "%s", glesc_last_errmsg());
    cr_assert_null(m);
    const char *msg = glesc_last_errmsg();
    cr_log_info("%s", msg);
    cr_expect(strstr(msg, path) && strstr(msg, "truncated"), "%s", msg);
    rm_model(path);
}

/* The same from a descriptor: the model at an offset inside a larger file
 * (an Android asset's layout), mapped by glesc_model_load_fd, whose upload
 * reads the tensors from the descriptor with pread too. */
Test(runtime, model_fd_truncated_while_loading)
{
    char *path = small_model();
    size_t size;
    void *bytes = test_read_file(path, &size);
    cr_assert_not_null(bytes);
    /* 4096 bytes of something else, then the model */
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    for (int i = 0; i < 4096; i++)
        fputc('x', fp);
    cr_assert_eq(fwrite(bytes, 1, size, fp), size);
    cr_assert_eq(fclose(fp), 0);
    free(bytes);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    shrink s = {path, (off_t)(4096 + size / 2), 0};
    glesc_model_options o = {.progress = shrink_file, .progress_user = &s};
    glesc_model *m = (glesc_model *)1;
    cr_assert_eq(glesc_model_load_fd(ctx, fd, 4096, size, "asset", &o, &m), GLESC_ERROR_IO, "%s",
                 glesc_last_errmsg());
    cr_assert_null(m);
    const char *msg = glesc_last_errmsg();
    cr_log_info("%s", msg);
    cr_expect(strstr(msg, "asset: tensor '") && strstr(msg, "truncated"), "%s", msg);
    close(fd);
    rm_model(path);
}

/* A NaN weight makes the logits of the positions that read it NaN: the eval
 * fails naming the position and token (before, id 0 was sampled and the
 * text was empty), keeps none of the call's positions, and the session goes
 * on from there. */
Test(runtime, non_finite_logits_are_an_error)
{
    char *path = small_model();
    /* token 300's embedding row gets a NaN */
    test_gguf_rewrite(
        path,
        &(test_gguf_edit){.tensor = "token_embd.weight", .index = 300 * 64 + 5, .value = NAN});
    glesc_model *m = load(path);
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 32}, &s), GLESC_OK);
    float *logits = malloc(4 * (size_t)mi.n_vocab * sizeof *logits);
    int32_t prompt[3] = {1, 301, 302};
    cr_assert_eq(glesc_session_eval(s, prompt, 3, 0, logits), GLESC_OK, "%s", glesc_last_errmsg());
    int32_t bad = 300;
    cr_assert_eq(glesc_session_eval(s, &bad, 1, 0, logits), GLESC_ERROR_NUMERIC);
    const char *msg = glesc_last_errmsg();
    cr_log_info("%s", msg);
    cr_expect(strstr(msg, "position 3 (token 300)") && strstr(msg, "NaN"), "%s", msg);
    cr_expect_eq(glesc_session_n_past(s), 3);
    int32_t good = 303;
    cr_assert_eq(glesc_session_eval(s, &good, 1, 0, logits), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(s), 4);
    for (int64_t i = 0; i < mi.n_vocab; i++)
        cr_assert(isfinite(logits[i]), "logit %lld after the failed step", (long long)i);
    /* every row is checked (in one batch, the NaN may reach the rows before
     * it too: masked attention weights are 0, and 0 · NaN is NaN) */
    glesc_session_truncate(s, 0);
    int32_t batch[4] = {1, 300, 301, 302};
    cr_assert_eq(glesc_session_eval(s, batch, 4, GLESC_EVAL_ALL_LOGITS, logits),
                 GLESC_ERROR_NUMERIC);
    cr_expect(strstr(glesc_last_errmsg(), "in a batch of positions 0..3)"), "%s",
              glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(s), 0);
    free(logits);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    rm_model(path);
}

/* ---- Pipelined greedy decoding ---- */

/* steps + 1 greedy tokens after prompt two ways: the CPU's arg max of each
 * row read back (glesc_session_eval with logits), and the GPU's, pipelined
 * (glesc_session_eval_greedy: each step queued before the previous step's
 * token is read). They must be the same ids; a greedy step takes the
 * dispatches of a plain one (the arg max runs in the output head's
 * kernel). */
static void greedy_matches_rows(glesc_model *m, const char *what, const int32_t *prompt,
                                size_t n_prompt, int steps)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int32_t *want = calloc((size_t)steps + 1, sizeof *want);
    int32_t *got = calloc((size_t)steps + 1, sizeof *got);
    float *logits = malloc((size_t)mi.n_vocab * sizeof *logits);
    glesc_session_options so = {.n_ctx = (int32_t)n_prompt + steps + 1};
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &so, &s), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s, prompt, n_prompt, 0, logits), GLESC_OK, "%s",
                 glesc_last_errmsg());
    finish_background(s);
    int plain_dispatches = 0;
    for (int i = 0; i <= steps; i++) {
        want[i] = argmax(logits, mi.n_vocab);
        if (i == steps)
            break;
        cr_assert_eq(glesc_session_eval(s, &want[i], 1, 0, logits), GLESC_OK, "%s",
                     glesc_last_errmsg());
        glesc_eval_stats st;
        glesc_session_last_stats(s, &st);
        plain_dispatches = st.dispatches;
    }
    /* the same from the prompt's row on, the GPU picking the rest */
    cr_assert_eq(glesc_session_truncate(s, 0), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, prompt, n_prompt, 0, logits), GLESC_OK);
    got[0] = argmax(logits, mi.n_vocab);
    cr_assert_eq(glesc_session_eval_greedy(s, got[0]), GLESC_OK, "%s", glesc_last_errmsg());
    for (int i = 1; i < steps; i++) {
        cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK, "%s",
                     glesc_last_errmsg());
        cr_assert_eq(glesc_session_greedy_id(s, &got[i]), GLESC_OK, "%s", glesc_last_errmsg());
    }
    glesc_eval_stats st;
    glesc_session_last_stats(s, &st);
    cr_assert_eq(glesc_session_greedy_id(s, &got[steps]), GLESC_OK, "%s", glesc_last_errmsg());
    /* from the third step on (the first two record the attention's second
     * parameter region), no host write of a step waited for the GPU: the
     * steps stay pipelined (exec.c's host-write guard never fires) */
    cr_assert_eq(glesc_session_truncate(s, (int32_t)n_prompt), GLESC_OK);
    cr_assert_eq(glesc_session_eval_greedy(s, got[0]), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK);
    cr_assert_eq(glesc_session_greedy_id(s, &got[1]), GLESC_OK);
    uint64_t waits = ctx->write_waits;
    for (int i = 2; i < steps; i++) {
        cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK);
        cr_assert_eq(glesc_session_greedy_id(s, &got[i]), GLESC_OK);
    }
    cr_expect_eq(ctx->write_waits, waits, "%s: %llu host writes waited for the GPU in %d steps",
                 what, (unsigned long long)(ctx->write_waits - waits), steps - 2);
    cr_assert_eq(glesc_session_greedy_id(s, &got[steps]), GLESC_OK);
    cr_expect_null(glesc_session_logits(s), "a greedy eval reads no logits");
    cr_expect_eq(glesc_session_n_past(s), (int32_t)n_prompt + steps);
    int same = 0;
    while (same <= steps && want[same] == got[same])
        same++;
    cr_log_info("%s: %d greedy steps, %d the same ids; %d dispatches a greedy step, %d a plain one",
                what, steps + 1, same, st.dispatches, plain_dispatches);
    cr_expect_eq(same, steps + 1, "%s: token %d: GPU %d, CPU %d", what, same,
                 same <= steps ? got[same] : -1, same <= steps ? want[same] : -1);
    if (!getenv("GLESC_NO_FUSION")) {
        cr_expect_eq(st.dispatches, plain_dispatches);
        /* 5 a layer, the embedding lookup, the head with the arg max */
        cr_expect_eq(st.dispatches, 5 * mi.n_layer + 2, "%s: %d dispatches a greedy step", what,
                     st.dispatches);
    } else { /* the arg max and its copy into the next step's slot */
        cr_expect_eq(st.dispatches, plain_dispatches + 2);
    }
    glesc_session_destroy(s);
    free(want);
    free(got);
    free(logits);
}

static void greedy_on_models(int steps)
{
    static const char *const demos[] = {"models/stories260K.gguf",
                                        "models/TinyStories-656K-Q8_0.gguf",
                                        "models/llama-2-tiny-random.gguf"};
    for (size_t d = 0; d < CORE_ARRAY_LEN(demos); d++) {
        char *path = test_shared_path(demos[d]);
        if (!path) {
            cr_log_info("../shared/%s is absent: skipped", demos[d]);
            continue;
        }
        glesc_model *m = load(path);
        const glesc_tokenizer *tok = glesc_model_tokenizer(m);
        int32_t *ids;
        size_t n;
        cr_assert_eq(
            glesc_tokenize_alloc(tok, "Once upon a time", 16, GLESC_TOKENIZE_ADD_SPECIAL, &ids, &n),
            GLESC_OK);
        greedy_matches_rows(m, demos[d], ids, n, steps);
        glesc_tokens_free(ids);
        glesc_model_destroy(m);
        free(path);
    }
    /* the architectures' synthetic models (qwen2's biases, qwen3's norms,
     * a tied output head: the table read by the first layer and the arg
     * max) */
    static const struct {
        const char *arch;
        bool tied;
    } archs[] = {{"llama", false}, {"llama", true}, {"qwen2", true}, {"qwen3", false}};
    for (size_t a = 0; a < CORE_ARRAY_LEN(archs); a++) {
        char *dir = test_tmpdir();
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, archs[a].arch);
        synth_params p;
        test_tiny_params(&p, 2, 64);
        p.arch = archs[a].arch;
        p.tied_output = archs[a].tied;
        p.weight_type = GLESC_DTYPE_Q8_0;
        cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
        glesc_model *m = load(path);
        static const int32_t prompt[4] = {1, 300, 301, 302};
        char what[64];
        snprintf(what, sizeof what, "%s%s (q8_0)", archs[a].arch, archs[a].tied ? ", tied" : "");
        greedy_matches_rows(m, what, prompt, 4, steps);
        glesc_model_destroy(m);
        unlink(path);
        rmdir(dir);
        free(dir);
    }
}

Test(runtime, greedy_on_the_gpu_gives_the_cpu_tokens)
{
    greedy_on_models(40);
}

/* GLESC_NO_FUSION=1: the arg max and the embedding lookup run as kernels
 * of their own, the tokens are the same. */
Test(runtime, greedy_on_the_gpu_without_fusion)
{
    setenv("GLESC_NO_FUSION", "1", 1);
    greedy_on_models(12);
    unsetenv("GLESC_NO_FUSION");
}

Test(runtime, greedy_evals_refuse_what_they_cannot_do)
{
    char *path = small_model();
    glesc_model *m = load(path);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 6}, &s), GLESC_OK);
    int32_t id;
    /* nothing on the GPU to continue from, nothing to read */
    cr_expect_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_ERROR_STATE);
    cr_expect(strstr(glesc_last_errmsg(), "give the token"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_greedy_id(s, &id), GLESC_ERROR_STATE);
    cr_expect_eq(glesc_session_eval_greedy(s, 1 << 20), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_session_eval_greedy(s, -7), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_session_n_past(s), 0);
    /* two results may wait, not three */
    cr_assert_eq(glesc_session_eval_greedy(s, 1), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK);
    cr_expect_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_ERROR_STATE);
    cr_expect(strstr(glesc_last_errmsg(), "not read"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(s), 2);
    int32_t a, b;
    cr_assert_eq(glesc_session_greedy_id(s, &a), GLESC_OK);
    cr_assert_eq(glesc_session_greedy_id(s, &b), GLESC_OK);
    /* a truncate drops the results not read and the chain */
    cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK);
    cr_assert_eq(glesc_session_truncate(s, 2), GLESC_OK);
    cr_expect_eq(glesc_session_greedy_id(s, &id), GLESC_ERROR_STATE);
    cr_expect_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_ERROR_STATE);
    /* a given token restarts it; the context fills as with glesc_session_eval */
    cr_assert_eq(glesc_session_eval_greedy(s, b), GLESC_OK);
    for (int i = 3; i < 6; i++) {
        cr_assert_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_OK, "%s",
                     glesc_last_errmsg());
        cr_assert_eq(glesc_session_greedy_id(s, &id), GLESC_OK);
    }
    cr_expect_eq(glesc_session_n_past(s), 6);
    cr_expect_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_ERROR_LIMIT);
    cr_assert_eq(glesc_session_greedy_id(s, &id), GLESC_OK);
    /* glesc_session_eval drops the chain too */
    cr_assert_eq(glesc_session_truncate(s, 4), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, &id, 1, 0, NULL), GLESC_OK);
    cr_expect_eq(glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS), GLESC_ERROR_STATE);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    rm_model(path);
}

/* A NaN in the logits of a greedy step: its token reads as an error naming
 * the position, not as id 0. */
Test(runtime, greedy_nan_logits_are_an_error)
{
    char *path = small_model();
    test_gguf_rewrite(
        path,
        &(test_gguf_edit){.tensor = "token_embd.weight", .index = 300 * 64 + 5, .value = NAN});
    glesc_model *m = load(path);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 32}, &s), GLESC_OK);
    int32_t prompt[3] = {1, 301, 302}, id;
    cr_assert_eq(glesc_session_eval(s, prompt, 3, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval_greedy(s, 300), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_greedy_id(s, &id), GLESC_ERROR_NUMERIC);
    const char *msg = glesc_last_errmsg();
    cr_log_info("%s", msg);
    cr_expect(strstr(msg, "position 3 (token 300)") && strstr(msg, "NaN"), "%s", msg);
    cr_expect_eq(glesc_session_n_past(s), 4, "the position stays evaluated");
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    rm_model(path);
}
