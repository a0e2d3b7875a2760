/*
 * test_generate.c — glesc_generate (src/llm/generate.c): the same ids as a
 * hand-written eval/sample loop (and llama.cpp's greedy ids on stories260K),
 * each stop reason with its counts (the last token evaluated only with
 * eval_last, an end-of-generation token neither shown nor evaluated), the
 * streamed pieces equal to the whole-sequence detokenization, the events in
 * order, glesc_session_logits during the callback being the sampled row, and
 * the errors (no row to sample from, a prompt too long: nothing evaluated).
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
#include "test_synth_util.h"
#include "test_util.h"

static glesc_context *ctx;
static glesc_model *model;
static char *dir, *path;

static void setup(void)
{
    ctx = test_context(NULL);
    dir = test_tmpdir();
    synth_params p;
    test_tiny_params(&p, 2, 128);
    p.n_ff = 128;
    path = test_synth_write(&p, dir, "g.gguf");
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &model), GLESC_OK, "%s", glesc_last_errmsg());
}

static void teardown(void)
{
    glesc_model_destroy(model);
    glesc_context_destroy(ctx);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

TestSuite(generate, .init = setup, .fini = teardown);

/* What the callbacks saw. */
typedef struct seen {
    const glesc_session *s;
    int32_t n_vocab; /* of the sampler (0: the synthetic model's) */
    int32_t ids[512];
    int n_ids, stop_at;
    char text[8192];
    size_t text_len;
    bool check_rows;  /* logits were asked for: check rows_ok */
    bool rows_ok;     /* every token was the arg max of glesc_session_logits (greedy) */
    int flushes;      /* calls with id -1 */
    int events[8][4]; /* per kind: count; order checked through `order` */
    char order[1024];
    size_t n_order;
    glesc_stop_reason stop_event;
} seen;

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static bool on_token(void *user, int32_t id, const char *piece, size_t len)
{
    seen *w = user;
    cr_assert_lt(w->text_len + len, sizeof w->text);
    memcpy(w->text + w->text_len, piece, len);
    w->text_len += len;
    if (id < 0) {
        w->flushes++;
        return false;
    }
    const float *row = glesc_session_logits(w->s);
    int32_t n_vocab =
        w->n_vocab ? w->n_vocab : glesc_tokenizer_n_vocab(glesc_model_tokenizer(model));
    if (w->check_rows && (!row || argmax(row, n_vocab) != id))
        w->rows_ok = false;
    w->ids[w->n_ids++] = id;
    if (w->n_order < sizeof w->order - 1)
        w->order[w->n_order++] = 't';
    return w->n_ids == w->stop_at;
}

static void on_event(void *user, const glesc_gen_event *ev)
{
    seen *w = user;
    w->events[ev->kind][0]++;
    static const char letter[] = "?PESO";
    if (w->n_order < sizeof w->order - 1)
        w->order[w->n_order++] = letter[ev->kind];
    if (ev->kind == GLESC_GEN_EVENT_STOP)
        w->stop_event = ev->stop;
    if (ev->kind == GLESC_GEN_EVENT_TOKEN_EVAL) {
        cr_expect_eq(ev->id, w->ids[w->n_ids - 1], "the evaluated token is the last sampled");
        cr_expect_not_null(ev->stats);
        cr_expect_eq(ev->stats->n_tokens, 1);
    }
}

/* A sampler over m's vocabulary: greedy (temperature 0), or else glesc's
 * default chain drawing with seed. */
static glesc_sampler *sampler(const glesc_model *m, bool greedy, uint64_t seed)
{
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    if (greedy)
        sp.temperature = 0;
    else
        sp.seed = seed;
    glesc_sampler *smp;
    cr_assert_eq(glesc_sampler_create(&sp, glesc_tokenizer_n_vocab(glesc_model_tokenizer(m)), &smp),
                 GLESC_OK);
    return smp;
}

/* A demo model of ../shared (rel) with "Once upon a time" tokenized, its
 * specials added; skips the test where ../shared lacks the model.
 * story_close() it. */
typedef struct story {
    glesc_model *m;
    const glesc_tokenizer *tok;
    int32_t *ids;
    size_t n;
} story;

static story story_open(const char *rel)
{
    TEST_REQUIRE_SHARED(spath, rel);
    story st;
    cr_assert_eq(glesc_model_load(ctx, spath, NULL, &st.m), GLESC_OK, "%s", glesc_last_errmsg());
    free(spath);
    st.tok = glesc_model_tokenizer(st.m);
    cr_assert_eq(glesc_tokenize_alloc(st.tok, "Once upon a time", 16, GLESC_TOKENIZE_ADD_SPECIAL,
                                      &st.ids, &st.n),
                 GLESC_OK);
    return st;
}

static void story_close(story *st)
{
    glesc_tokens_free(st->ids);
    glesc_model_destroy(st->m);
}

static glesc_session *session(int32_t n_ctx)
{
    glesc_session_options so = {.n_ctx = n_ctx};
    glesc_session *s;
    cr_assert_eq(glesc_session_create(model, &so, &s), GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

/* logits: every token's row read back (else a greedy sampler's tokens are
 * picked on the GPU, pipelined: the same tokens). */
static bool with_logits;

static void params(glesc_generate_params *p, seen *w, int32_t n_predict)
{
    glesc_generate_params_init(p);
    p->n_predict = n_predict;
    p->on_token = on_token;
    p->token_user = w;
    p->on_event = on_event;
    p->event_user = w;
    p->logits = with_logits;
    w->check_rows = with_logits;
    w->rows_ok = true;
}

static const int32_t prompt[] = {1, 300, 301, 302, 303};

Test(generate, same_ids_as_a_hand_written_loop_and_counts)
{
    /* By hand: eval the prompt, then sample and eval 20 times. */
    glesc_session *s = session(0);
    glesc_sampler *smp = sampler(model, true, 0);
    int32_t V = glesc_tokenizer_n_vocab(glesc_model_tokenizer(model));
    float *row = malloc((size_t)V * 4 * 2);
    cr_assert_eq(glesc_session_eval(s, prompt, 5, 0, row), GLESC_OK);
    int32_t expect[20];
    for (int i = 0; i < 20; i++) {
        expect[i] = argmax(row, V);
        cr_assert_eq(glesc_session_eval(s, &expect[i], 1, 0, row), GLESC_OK);
    }
    glesc_session_destroy(s);

    for (int mode = 0; mode < 4; mode++) {
        int eval_last = mode & 1;
        with_logits = mode >> 1;
        s = session(0);
        seen w = {.s = s};
        glesc_generate_params p;
        params(&p, &w, 20);
        p.eval_last = eval_last;
        glesc_generate_result res;
        cr_assert_eq(glesc_generate(s, smp, prompt, 5, &p, &res), GLESC_OK, "%s",
                     glesc_last_errmsg());
        cr_expect_eq(w.n_ids, 20);
        cr_expect_eq(memcmp(w.ids, expect, sizeof expect), 0, "ids differ from the hand loop (%s)",
                     with_logits ? "logits" : "pipelined");
        cr_expect(w.rows_ok, "glesc_session_logits was not the sampled row in the callback");
        cr_expect_eq(res.stop, GLESC_STOP_LENGTH);
        cr_expect_eq(w.stop_event, GLESC_STOP_LENGTH);
        cr_expect_eq(res.n_generated, 20);
        cr_expect_eq(res.prompt_tokens, 5);
        cr_expect_eq(res.decode_tokens, eval_last ? 20u : 19u, "the last token evaluated: %d",
                     eval_last);
        cr_expect_eq(glesc_session_n_past(s), 5 + (int)res.decode_tokens);
        /* The events: the prompt, then each token and its eval, then stop. */
        char order[64] = "P";
        for (int i = 0; i < 20; i++)
            strcat(order, i < 19 || eval_last ? "tE" : "t");
        strcat(order, "S");
        w.order[w.n_order] = 0;
        cr_expect_str_eq(w.order, order);
        /* The pieces are the whole continuation's text. */
        char *text;
        size_t len;
        cr_assert_eq(
            glesc_detokenize(glesc_model_tokenizer(model), w.ids, 20,
                             GLESC_DETOKENIZE_KEEP_LEADING_SPACE | GLESC_DETOKENIZE_NO_CLEANUP,
                             &text, &len),
            GLESC_OK);
        cr_expect_eq(w.text_len, len);
        cr_expect_eq(memcmp(w.text, text, len), 0, "streamed '%.*s', whole '%s'", (int)w.text_len,
                     w.text, text);
        glesc_text_free(text);
        glesc_sampler_reset(smp);
        glesc_session_destroy(s);
    }
    with_logits = false;
    free(row);
    glesc_sampler_destroy(smp);
}

static void context_callback_and_continuation(void)
{
    glesc_sampler *smp = sampler(model, true, 0);
    /* A context of 16: the prompt's 5, then 11 evaluated tokens; the 12th
     * is sampled from the last row but has no room. */
    glesc_session *s = session(16);
    seen w = {.s = s};
    glesc_generate_params p;
    params(&p, &w, -1);
    p.ignore_eos = true;
    glesc_generate_result res;
    cr_assert_eq(glesc_generate(s, smp, prompt, 5, &p, &res), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(res.stop, GLESC_STOP_CONTEXT);
    cr_expect_eq(res.n_generated, 12);
    cr_expect_eq(res.decode_tokens, 11);
    cr_expect_eq(glesc_session_n_past(s), 16);
    glesc_session_destroy(s);

    /* The callback stops at the third token; with eval_last it is in the
     * session, and a second call continues from its row. */
    s = session(0);
    w = (seen){.s = s, .stop_at = 3};
    params(&p, &w, 50);
    p.eval_last = true;
    glesc_sampler_reset(smp);
    cr_assert_eq(glesc_generate(s, smp, prompt, 5, &p, &res), GLESC_OK);
    cr_expect_eq(res.stop, GLESC_STOP_CALLBACK);
    cr_expect_eq(res.n_generated, 3);
    cr_expect_eq(res.decode_tokens, 3);
    cr_expect_eq(glesc_session_n_past(s), 8);
    int32_t first[3];
    memcpy(first, w.ids, sizeof first);
    w = (seen){.s = s};
    params(&p, &w, 4);
    cr_assert_eq(glesc_generate(s, smp, NULL, 0, &p, &res), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(res.prompt_tokens, 0);
    cr_expect_eq(res.n_generated, 4);
    glesc_session_destroy(s);

    /* The same 7 tokens in one call. */
    s = session(0);
    seen all = {.s = s};
    params(&p, &all, 7);
    glesc_sampler_reset(smp);
    cr_assert_eq(glesc_generate(s, smp, prompt, 5, &p, &res), GLESC_OK);
    cr_expect_eq(memcmp(all.ids, first, sizeof first), 0);
    cr_expect_eq(memcmp(all.ids + 3, w.ids, 4 * sizeof(int32_t)), 0,
                 "continuing after a stop gives the same tokens");
    glesc_session_destroy(s);
    glesc_sampler_destroy(smp);
}

Test(generate, context_callback_and_continuation)
{
    with_logits = true;
    context_callback_and_continuation();
    with_logits = false; /* pipelined: a continuation starts from the GPU's token */
    context_callback_and_continuation();
}

Test(generate, errors)
{
    glesc_sampler *smp = sampler(model, true, 0);
    glesc_session *s = session(8);
    glesc_generate_result res;
    /* Nothing evaluated yet: no row to sample from. */
    cr_expect_eq(glesc_generate(s, smp, NULL, 0, NULL, &res), GLESC_ERROR_STATE);
    cr_expect(strstr(glesc_last_errmsg(), "no logits"), "%s", glesc_last_errmsg());
    int32_t long_prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    cr_expect_eq(glesc_generate(s, smp, long_prompt, 9, NULL, &res), GLESC_ERROR_LIMIT);
    cr_expect(strstr(glesc_last_errmsg(), "room for 8 more"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(s), 0, "nothing evaluated");
    cr_expect_eq(glesc_generate(NULL, smp, NULL, 0, NULL, &res), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_generate(s, NULL, NULL, 0, NULL, &res), GLESC_ERROR_INVALID_ARGUMENT);
    /* An id outside the vocabulary fails the prompt's eval, with the step. */
    int32_t bad[2] = {1, 1 << 20};
    cr_expect_eq(glesc_generate(s, smp, bad, 2, NULL, &res), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "evaluating the prompt: "), "%s", glesc_last_errmsg());
    /* n_predict 0 only evaluates the prompt; truncating forgets the row. */
    glesc_generate_params p;
    glesc_generate_params_init(&p);
    p.n_predict = 0;
    cr_expect_eq(glesc_generate(s, smp, prompt, 5, &p, &res), GLESC_OK);
    cr_expect_eq(res.n_generated, 0);
    cr_expect_eq(res.stop, GLESC_STOP_LENGTH);
    cr_expect_not_null(glesc_session_logits(s));
    cr_expect_eq(glesc_session_truncate(s, 2), GLESC_OK);
    cr_expect_null(glesc_session_logits(s));
    cr_expect_str_eq(glesc_stop_reason_name(GLESC_STOP_CALLBACK), "callback");
    cr_expect_null(glesc_stop_reason_name((glesc_stop_reason)99));
    glesc_session_destroy(s);
    glesc_sampler_destroy(smp);
}

/* llama.cpp's greedy ids for "Once upon a time" on stories260K (as
 * test_runtime's hand loop checks them), through glesc_generate. */
Test(generate, stories260k_greedy_matches_llama_cpp)
{
    static const int32_t expect[48] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                       401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                       295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
                                       266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432};
    story st = story_open("models/stories260K.gguf");
    glesc_sampler *smp = sampler(st.m, true, 0);
    for (int logits = 0; logits < 2; logits++) {
        glesc_session *s;
        cr_assert_eq(glesc_session_create(st.m, NULL, &s), GLESC_OK);
        seen w = {.s = s, .n_vocab = glesc_tokenizer_n_vocab(st.tok), .rows_ok = true};
        w.check_rows = logits;
        glesc_generate_params p;
        glesc_generate_params_init(&p);
        p.n_predict = 48;
        p.logits = logits;
        p.on_token = on_token;
        p.token_user = &w;
        glesc_generate_result res;
        glesc_sampler_reset(smp);
        cr_assert_eq(glesc_generate(s, smp, st.ids, st.n, &p, &res), GLESC_OK, "%s",
                     glesc_last_errmsg());
        cr_expect_eq(w.n_ids, 48);
        cr_expect(w.rows_ok, "each id is the arg max of the row glesc_session_logits shows");
        for (int i = 0; i < 48; i++)
            cr_expect_eq(w.ids[i], expect[i], "%s: token %d: %d, llama.cpp %d",
                         logits ? "logits" : "pipelined", i, w.ids[i], expect[i]);
        glesc_session_destroy(s);
    }
    glesc_sampler_destroy(smp);
    story_close(&st);
}

/* An end-of-generation token stops without being shown or evaluated
 * (TinyStories-656K ends its stories), and with ignore_eos it is text. */
Test(generate, end_of_generation)
{
    story st = story_open("models/TinyStories-656K-Q8_0.gguf");
    /* gguf-run --seed 1 reaches the end of its story */
    glesc_sampler *smp = sampler(st.m, false, 1);
    glesc_session_options so = {.n_ctx = 1024};
    glesc_session *s;
    cr_assert_eq(glesc_session_create(st.m, &so, &s), GLESC_OK);
    seen w = {.s = s};
    glesc_generate_params p;
    glesc_generate_params_init(&p);
    p.on_token = on_token;
    p.token_user = &w;
    glesc_generate_result res;
    cr_assert_eq(glesc_generate(s, smp, st.ids, st.n, &p, &res), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_expect_eq(res.stop, GLESC_STOP_EOS);
    cr_assert_gt(w.n_ids, 1);
    int32_t last = w.ids[w.n_ids - 1];
    cr_expect(glesc_tokenizer_is_eog(st.tok, last), "the last id %d ends generation", last);
    cr_expect_eq(res.n_generated, w.n_ids);
    cr_expect_eq(res.decode_tokens, (size_t)w.n_ids - 1, "the end token is not evaluated");
    cr_expect_eq(glesc_session_n_past(s), (int)st.n + w.n_ids - 1);
    glesc_session_destroy(s);
    glesc_sampler_destroy(smp);
    story_close(&st);
}

/* Pipelined greedy generation (the GPU picks the tokens, step t+1 queued
 * before step t's token is read) against the rows read back, on a model
 * that ends its story (TinyStories-656K, greedy: an end token after 108):
 * the same ids, stop reason, counts and positions, whether generation ends
 * at the end token (whose speculatively queued eval is dropped), at a
 * callback's stop or at n_predict, with and without eval_last; and a
 * continuation after each goes on with the same tokens. */
Test(generate, pipelined_greedy_equals_the_rows_read_back)
{
    story st = story_open("models/TinyStories-656K-Q8_0.gguf");
    glesc_sampler *smp = sampler(st.m, true, 0);
    static const struct {
        int32_t n_predict, stop_at;
        bool eval_last, ignore_eos;
    } cases[] = {{-1, 0, false, false}, {-1, 0, true, false}, {200, 0, false, true},
                 {-1, 7, false, false}, {-1, 7, true, false}, {30, 0, false, false},
                 {30, 0, true, false}};
    for (size_t c = 0; c < CORE_ARRAY_LEN(cases); c++) {
        seen w[2];
        glesc_generate_result res[2];
        int32_t n_past[2], cont[2][5] = {{0}}, cont_n[2];
        for (int logits = 0; logits < 2; logits++) {
            glesc_session *s;
            cr_assert_eq(glesc_session_create(st.m, &(glesc_session_options){.n_ctx = 512}, &s),
                         GLESC_OK);
            w[logits] = (seen){.s = s, .n_vocab = glesc_tokenizer_n_vocab(st.tok)};
            w[logits].stop_at = cases[c].stop_at;
            glesc_generate_params p;
            glesc_generate_params_init(&p);
            p.n_predict = cases[c].n_predict;
            p.eval_last = cases[c].eval_last;
            p.ignore_eos = cases[c].ignore_eos;
            p.logits = logits;
            p.on_token = on_token;
            p.token_user = &w[logits];
            w[logits].check_rows = logits;
            w[logits].rows_ok = true;
            glesc_sampler_reset(smp);
            cr_assert_eq(glesc_generate(s, smp, st.ids, st.n, &p, &res[logits]), GLESC_OK, "%s",
                         glesc_last_errmsg());
            n_past[logits] = glesc_session_n_past(s);
            /* going on from where it stopped: 5 more */
            seen more = {.s = s, .n_vocab = w[logits].n_vocab};
            p.n_predict = 5;
            p.token_user = &more;
            p.eval_last = false;
            cr_assert_eq(glesc_generate(s, smp, NULL, 0, &p, NULL), GLESC_OK, "%s",
                         glesc_last_errmsg());
            cont_n[logits] = more.n_ids; /* 1 after an end token: it comes again */
            memcpy(cont[logits], more.ids, sizeof cont[logits]);
            glesc_session_destroy(s);
        }
        cr_log_info("case %zu: %d tokens, stop %s, %zu evaluated, n_past %d", c, w[1].n_ids,
                    glesc_stop_reason_name(res[1].stop), res[1].decode_tokens, n_past[1]);
        if (c == 0)
            cr_expect_eq(res[1].stop, GLESC_STOP_EOS, "the story ends");
        cr_expect(w[1].rows_ok);
        cr_expect_eq(w[0].n_ids, w[1].n_ids, "case %zu: %d tokens pipelined, %d read back", c,
                     w[0].n_ids, w[1].n_ids);
        cr_expect_eq(memcmp(w[0].ids, w[1].ids, (size_t)w[1].n_ids * sizeof(int32_t)), 0,
                     "case %zu: the ids differ", c);
        cr_expect_eq(res[0].stop, res[1].stop, "case %zu", c);
        cr_expect_eq(res[0].n_generated, res[1].n_generated, "case %zu", c);
        cr_expect_eq(res[0].decode_tokens, res[1].decode_tokens, "case %zu", c);
        cr_expect_eq(n_past[0], n_past[1], "case %zu: positions %d pipelined, %d read back", c,
                     n_past[0], n_past[1]);
        cr_expect_eq(cont_n[0], cont_n[1], "case %zu: continuations", c);
        cr_expect_eq(memcmp(cont[0], cont[1], sizeof cont[0]), 0, "case %zu: continuations", c);
        cr_expect_eq(w[0].text_len, w[1].text_len);
    }
    glesc_sampler_destroy(smp);
    story_close(&st);
}

/* Every batch length 1..80 (a first batch and a later one), a decode step
 * and a greedy step on session s of model m, asserting that none compiles a
 * program after `compiled`; a: a scratch row of logits. */
static void every_length_compiles_nothing(glesc_context *c, glesc_model *m, glesc_session *s,
                                          uint64_t compiled, float *a, const char *what)
{
    int32_t n_vocab = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    int32_t ids[80];
    for (int i = 0; i < 80; i++)
        ids[i] = 3 + (i * 37) % (n_vocab - 3);
    glesc_stats st;
    for (int n = 1; n <= 80; n++) {
        cr_assert_eq(glesc_session_truncate(s, 0), GLESC_OK);
        cr_assert_eq(glesc_session_eval(s, ids, (size_t)n, 0, a), GLESC_OK, "%s",
                     glesc_last_errmsg());
        if (n % 8 == 1) { /* a later batch, a decode step, a greedy step */
            cr_assert_eq(glesc_session_eval(s, ids, CORE_MIN(n, 20), 0, a), GLESC_OK);
            cr_assert_eq(glesc_session_eval(s, ids + 1, 1, 0, a), GLESC_OK);
            cr_assert_eq(glesc_session_eval_greedy(s, ids[2]), GLESC_OK, "%s", glesc_last_errmsg());
            int32_t id;
            cr_assert_eq(glesc_session_greedy_id(s, &id), GLESC_OK);
        }
        glesc_context_stats(c, &st);
        cr_assert_eq(st.programs_compiled, compiled,
                     "%s: a prompt of %d tokens compiled %llu programs", what, n,
                     (unsigned long long)(st.programs_compiled - compiled));
    }
}

/* A context of device class cls without a program cache on disk, the
 * test model in it and two sessions of n_ctx and n_batch. */
static void two_sessions(const char *cls, int32_t n_ctx, int32_t n_batch, glesc_context **c,
                         glesc_model **m, glesc_session **s, glesc_session **ref)
{
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "off";
    o.device_class = cls;
    cr_assert_eq(glesc_context_create(&o, c), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_model_load(*c, path, NULL, m), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session_options so = {.n_ctx = n_ctx, .n_batch = n_batch};
    cr_assert_eq(glesc_session_create(*m, &so, s), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_create(*m, &so, ref), GLESC_OK, "%s", glesc_last_errmsg());
}

static void two_sessions_end(glesc_context *c, glesc_model *m, glesc_session *s, glesc_session *ref)
{
    glesc_session_destroy(s);
    glesc_session_destroy(ref);
    glesc_model_destroy(m);
    glesc_context_destroy(c);
}

/* After glesc_session_precompile, no batch length from 1 to n_batch, no
 * later batch, no decode step and no greedy step compiles a program, and
 * what is evaluated is what a session without it gives. In the default
 * device class's configurations (the small GPUs': a GEMV of 1 column, one
 * of 2 .. 8, the prefill attention from 2 queries, the GEMMs). */
Test(generate, precompiled_session_compiles_nothing_at_any_batch_length)
{
    glesc_context *c;
    glesc_model *m;
    glesc_session *s, *ref;
    two_sessions("default", 128, 80, &c, &m, &s, &ref);
    glesc_stats st;
    glesc_context_stats(c, &st);
    uint64_t before = st.programs_compiled;
    cr_assert_eq(glesc_session_precompile(s), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_stats(c, &st);
    uint64_t compiled = st.programs_compiled;
    cr_log_info("precompile: %llu programs", (unsigned long long)(compiled - before));
    cr_assert_gt(compiled, before);
    cr_assert_eq(glesc_session_n_past(s), 0, "the state is unchanged");

    int32_t n_vocab = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    float *a = malloc((size_t)n_vocab * sizeof *a), *b = malloc((size_t)n_vocab * sizeof *b);
    every_length_compiles_nothing(c, m, s, compiled, a, "precompiled");
    /* the same logits as a session that never precompiled */
    int32_t ids[9];
    for (int i = 0; i < 9; i++)
        ids[i] = 3 + (i * 37) % (n_vocab - 3);
    cr_assert_eq(glesc_session_truncate(s, 0), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, ids, 9, 0, a), GLESC_OK);
    cr_assert_eq(glesc_session_eval(ref, ids, 9, 0, b), GLESC_OK);
    cr_assert_eq(memcmp(a, b, (size_t)n_vocab * sizeof *a), 0);
    cr_assert_eq(glesc_session_precompile(NULL), GLESC_ERROR_INVALID_ARGUMENT);
    free(a);
    free(b);
    two_sessions_end(c, m, s, ref);
}

/* Where the decode attention changes variant with the cache's length (a
 * class's decode_regs_from; here GLESC_ATTN_DECODE's from=, on the large
 * GPUs' class): after glesc_session_precompile, the decode steps before and
 * from that length compile nothing, and they give what a session that
 * never precompiled gives. */
Test(generate, precompiled_session_covers_the_deeper_caches_attention)
{
    glesc_context *c;
    glesc_model *m;
    glesc_session *s, *ref;
    two_sessions("nvidia", 64, 16, &c, &m, &s, &ref);
    /* one variant at every depth (the tiles through registers never), then
     * the same session's programs where they change at 40 keys: only those
     * of the deeper cache's decode steps are new */
    setenv("GLESC_ATTN_DECODE", "regs=0", 1);
    cr_assert_eq(glesc_session_precompile(ref), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_stats st;
    glesc_context_stats(c, &st);
    uint64_t compiled = st.programs_compiled;
    setenv("GLESC_ATTN_DECODE", "from=40", 1);
    cr_assert_eq(glesc_session_precompile(s), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_stats(c, &st);
    cr_log_info("precompile: %llu programs more for 40 keys and more",
                (unsigned long long)(st.programs_compiled - compiled));
    cr_assert_gt(st.programs_compiled, compiled, "no program of its own from 40 keys on");
    compiled = st.programs_compiled;
    int32_t n_vocab = glesc_tokenizer_n_vocab(glesc_model_tokenizer(m));
    float *a = malloc((size_t)n_vocab * sizeof *a), *b = malloc((size_t)n_vocab * sizeof *b);
    int32_t ids[48];
    for (int i = 0; i < 48; i++)
        ids[i] = 3 + (i * 29) % (n_vocab - 3);
    /* 37 positions as a prompt, then one token at a time past 40 keys;
     * the reference's steps with the tiles through registers never */
    cr_assert_eq(glesc_session_eval(s, ids, 37, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
    double worst = 0;
    for (int i = 37; i < 44; i++) {
        cr_assert_eq(glesc_session_eval(s, ids + i, 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
    }
    glesc_context_stats(c, &st);
    cr_assert_eq(st.programs_compiled, compiled,
                 "decode steps at 38..44 keys compiled %llu programs after the precompile",
                 (unsigned long long)(st.programs_compiled - compiled));
    setenv("GLESC_ATTN_DECODE", "regs=0", 1);
    cr_assert_eq(glesc_session_eval(ref, ids, 44, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
    for (int32_t j = 0; j < n_vocab; j++)
        worst = fmax(worst, fabs((double)a[j] - b[j]) / (1.0 + fabs((double)b[j])));
    cr_log_info("the deeper cache's decode against a prompt's: worst relative logit difference "
                "%.3g (tolerance 1e-4)",
                worst);
    cr_assert_leq(worst, 1e-4);
    unsetenv("GLESC_ATTN_DECODE");
    free(a);
    free(b);
    two_sessions_end(c, m, s, ref);
}

/* llvmpipe's class (kernels/devclass.c): a prompt of up to 8 tokens runs
 * the decode step's programs (the GEMV a column a pass, the decode
 * attention) and its GEMM has one tile for every width, so after a first
 * use (a prompt of 20 tokens, then decode) no length compiles anything. */
Test(generate, after_a_first_use_no_batch_length_compiles_on_llvmpipe)
{
    if (strcmp(glesc_context_caps(ctx)->device_class, "llvmpipe")) {
        cr_skip_test("the device is %s, not llvmpipe", glesc_context_caps(ctx)->device_class);
        return;
    }
    glesc_session_options so = {.n_ctx = 128, .n_batch = 80};
    glesc_session *s;
    cr_assert_eq(glesc_session_create(model, &so, &s), GLESC_OK, "%s", glesc_last_errmsg());
    int32_t n_vocab = glesc_tokenizer_n_vocab(glesc_model_tokenizer(model));
    float *a = malloc((size_t)n_vocab * sizeof *a);
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 3 + (i * 11) % (n_vocab - 3);
    cr_assert_eq(glesc_session_eval(s, ids, 20, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s, ids, 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval_greedy(s, ids[2]), GLESC_OK, "%s", glesc_last_errmsg());
    int32_t id;
    cr_assert_eq(glesc_session_greedy_id(s, &id), GLESC_OK);
    glesc_stats st;
    glesc_context_stats(ctx, &st);
    cr_log_info("first use: %llu programs", (unsigned long long)st.programs_compiled);
    every_length_compiles_nothing(ctx, model, s, st.programs_compiled, a, "after first use");
    free(a);
    glesc_session_destroy(s);
}

static bool append_piece(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id;
    seen *w = user;
    if (w->text_len + len < sizeof w->text) {
        memcpy(w->text + w->text_len, piece, len);
        w->text_len += len;
    }
    return false; /* go on */
}

/* A grammar makes a greedy sampler's generation read the rows back (the
 * pipelined path picks on the GPU and could not be constrained): the text
 * follows the grammar and ends at EOS where it is complete; and a prompt
 * accepted through glesc_generate does not advance the grammar. */
Test(generate, a_grammar_takes_the_host_path)
{
    const glesc_tokenizer *tok = glesc_model_tokenizer(model);
    glesc_sampler *smp = sampler(model, true, 0);
    cr_assert_eq(glesc_sampler_add_grammar(smp, tok, "root ::= \"(\" [a-z]{2,5} \")\"", NULL),
                 GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session *s;
    cr_assert_eq(glesc_session_create(model, NULL, &s), GLESC_OK);
    int32_t ids[4] = {1, 40, 41, 42};
    glesc_generate_params gp;
    glesc_generate_params_init(&gp);
    gp.n_predict = 20;
    seen w = {.s = s};
    gp.on_token = append_piece;
    gp.token_user = &w;
    glesc_generate_result res;
    cr_assert_eq(glesc_generate(s, smp, ids, 4, &gp, &res), GLESC_OK, "%s", glesc_last_errmsg());
    w.text[w.text_len] = 0;
    cr_expect_eq(res.stop, GLESC_STOP_EOS, "text '%s'", w.text);
    size_t n = strlen(w.text);
    cr_expect(n >= 4 && n <= 7 && w.text[0] == '(' && w.text[n - 1] == ')', "text '%s'", w.text);
    for (size_t i = 1; i + 1 < n; i++)
        cr_expect(w.text[i] >= 'a' && w.text[i] <= 'z', "text '%s'", w.text);
    glesc_session_destroy(s);
    glesc_sampler_destroy(smp);
}
