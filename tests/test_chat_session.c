/*
 * test_chat_session.c — glesc_chat (src/llm/chat_session.c) on a synthetic
 * model: the cache holds the formatted conversation after every turn (its
 * positions are the evaluated text and reply), a second turn evaluates only
 * the new text, a reply stopped from the token callback stays in the
 * history and the cache with its end of turn and the next turn continues,
 * a full context shifts by default (the oldest turns leave the cache, the
 * system message and the newer turns stay, nothing is evaluated again; with
 * Gemma's merged system message the first turn stays too), starts over with
 * the system message kept, or fails and keeps the conversation under
 * GLESC_CHAT_CONTEXT_FAIL, a message larger
 * than the context is refused without changing anything, reset forgets the
 * conversation, and the template is detected from the model.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/synth.h"
#include "glesc_llm.h"
#include "test_synth_util.h"
#include "test_util.h"

static glesc_context *ctx;
static glesc_model *model;
static glesc_sampler *smp;
static char *dir, path[4200];

static void load_model(const char *chat_template)
{
    snprintf(path, sizeof path, "%s/c.gguf", dir);
    synth_params p;
    test_tiny_params(&p, 2, 512);
    p.n_ff = 128;
    p.chat_template = chat_template;
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &model), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    sp.temperature = 0;
    cr_assert_eq(
        glesc_sampler_create(&sp, glesc_tokenizer_n_vocab(glesc_model_tokenizer(model)), &smp),
        GLESC_OK);
}

static void setup(void)
{
    ctx = test_context(NULL);
    dir = test_tmpdir();
}

static void teardown(void)
{
    glesc_sampler_destroy(smp);
    glesc_model_destroy(model);
    glesc_context_destroy(ctx);
    unlink(path);
    rmdir(dir);
    free(dir);
}

TestSuite(chat_session, .init = setup, .fini = teardown);

static glesc_session *session(int32_t n_ctx)
{
    glesc_session_options so = {.n_ctx = n_ctx};
    glesc_session *s;
    cr_assert_eq(glesc_session_create(model, &so, &s), GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

typedef struct streamed {
    char text[8192];
    size_t len;
    int tokens, stop_at, start_overs, prompt_evals, shifts;
    size_t shifted; /* positions dropped by context shifts */
} streamed;

static bool on_token(void *user, int32_t id, const char *piece, size_t len)
{
    streamed *w = user;
    cr_assert_lt(w->len + len, sizeof w->text);
    memcpy(w->text + w->len, piece, len);
    w->len += len;
    if (id >= 0)
        w->tokens++;
    return w->tokens == w->stop_at;
}

static void on_event(void *user, const glesc_gen_event *ev)
{
    streamed *w = user;
    if (ev->kind == GLESC_GEN_EVENT_START_OVER)
        w->start_overs++;
    if (ev->kind == GLESC_GEN_EVENT_PROMPT_EVAL)
        w->prompt_evals++;
    if (ev->kind == GLESC_GEN_EVENT_CONTEXT_SHIFT) {
        w->shifts++;
        w->shifted += ev->n_tokens;
    }
}

static glesc_generate_params params(streamed *w, int32_t n_predict)
{
    glesc_generate_params p;
    glesc_generate_params_init(&p);
    p.n_predict = n_predict;
    p.on_token = on_token;
    p.token_user = w;
    p.on_event = on_event;
    p.event_user = w;
    memset(w, 0, sizeof *w);
    return p;
}

/* Tokens of the formatted conversation of c (BOS first), as one text. */
static size_t formatted_tokens(const glesc_chat *c)
{
    size_t n;
    const glesc_chat_message *m = glesc_chat_messages(c, &n);
    char *text;
    cr_assert_eq(glesc_chat_format(glesc_chat_get_template(c), m, n, false, &text), GLESC_OK);
    size_t n_ids;
    cr_assert_eq(glesc_tokenize(glesc_model_tokenizer(model), text, strlen(text),
                                GLESC_TOKENIZE_ADD_SPECIAL | GLESC_TOKENIZE_PARSE_SPECIAL, NULL, 0,
                                &n_ids),
                 GLESC_ERROR_LIMIT);
    glesc_text_free(text);
    return n_ids;
}

Test(chat_session, two_turns_reuse_the_cache)
{
    load_model("{% for message in messages %}<|im_start|>...");
    glesc_session *s = session(0);
    glesc_chat_options co;
    glesc_chat_options_init(&co);
    co.system = "Be brief.";
    glesc_chat *c;
    cr_assert_eq(glesc_chat_create(s, smp, &co, &c), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_chat_get_template(c), GLESC_CHAT_CHATML, "detected from the model");

    streamed w;
    glesc_generate_params p = params(&w, 12);
    glesc_generate_result r1, r2;
    cr_assert_eq(glesc_chat_send(c, "Hello there", &p, &r1), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(r1.stop, GLESC_STOP_LENGTH);
    cr_expect_eq(r1.n_generated, 12);
    cr_expect_eq(r1.decode_tokens, 12, "a chat evaluates the reply's last token too");
    cr_expect_eq((size_t)glesc_session_n_past(s), r1.prompt_tokens + r1.decode_tokens,
                 "the cache holds what the turn evaluated");
    size_t n;
    const glesc_chat_message *m = glesc_chat_messages(c, &n);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(m[0].role, "system");
    cr_expect_str_eq(m[1].content, "Hello there");
    cr_expect_str_eq(m[2].role, "assistant");
    cr_expect_eq(strlen(m[2].content), w.len);
    cr_expect_eq(memcmp(m[2].content, w.text, w.len), 0, "the history holds the streamed reply");
    /* The conversation as one text is about as long as what the cache holds
     * (the reply's sampled tokens may tokenize differently as text). */
    size_t whole = formatted_tokens(c);
    int32_t past = glesc_session_n_past(s);
    cr_expect(whole + 12 >= (size_t)past && (size_t)past + 12 >= whole, "cache %d, text %zu", past,
              whole);

    p = params(&w, 8);
    cr_assert_eq(glesc_chat_send(c, "Tell me more", &p, &r2), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_lt(r2.prompt_tokens, r1.prompt_tokens, "only the new turn's text is evaluated (%zu)",
                 r2.prompt_tokens);
    cr_expect_eq((size_t)glesc_session_n_past(s),
                 (size_t)past + r2.prompt_tokens + r2.decode_tokens);
    m = glesc_chat_messages(c, &n);
    cr_expect_eq(n, 5);

    glesc_chat_reset(c);
    m = glesc_chat_messages(c, &n);
    cr_expect_eq(n, 1, "reset keeps the system message");
    cr_expect_eq(glesc_session_n_past(s), 0);
    glesc_chat_destroy(c);
    glesc_session_destroy(s);
}

Test(chat_session, a_reply_stopped_by_the_callback_stays_consistent)
{
    load_model(NULL);
    glesc_session *s = session(0);
    glesc_chat *c;
    cr_assert_eq(glesc_chat_create(s, smp, NULL, &c), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_chat_get_template(c), GLESC_CHAT_CHATML, "no template: chatml");
    streamed w;
    glesc_generate_params p = params(&w, 40);
    w.stop_at = 3; /* a user's Ctrl-C */
    glesc_generate_result r;
    cr_assert_eq(glesc_chat_send(c, "Hello", &p, &r), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(r.stop, GLESC_STOP_CALLBACK);
    cr_expect_eq(r.n_generated, 3);
    cr_expect_eq(r.decode_tokens, 3, "the stopping token is in the cache");
    size_t n;
    const glesc_chat_message *m = glesc_chat_messages(c, &n);
    cr_assert_eq(n, 2);
    cr_expect_eq(strlen(m[1].content), w.len, "the reply so far is in the history");
    /* The end of turn ("<|im_end|>\n") was evaluated after the reply. */
    cr_expect_eq(w.prompt_evals, 2, "the turn's text, then its end");
    cr_expect_eq((size_t)glesc_session_n_past(s), r.prompt_tokens + r.decode_tokens);
    int32_t past = glesc_session_n_past(s);

    /* The next turn starts from there: compare with a chat that had the
     * same three-token reply and the same end of turn by a length stop. */
    p = params(&w, 5);
    glesc_generate_result r2;
    cr_assert_eq(glesc_chat_send(c, "Go on", &p, &r2), GLESC_OK, "%s", glesc_last_errmsg());
    char second[8192];
    memcpy(second, w.text, w.len);
    size_t second_len = w.len;

    glesc_session *s2 = session(0);
    glesc_chat *c2;
    glesc_sampler_reset(smp);
    cr_assert_eq(glesc_chat_create(s2, smp, NULL, &c2), GLESC_OK);
    p = params(&w, 3);
    cr_assert_eq(glesc_chat_send(c2, "Hello", &p, &r), GLESC_OK);
    cr_expect_eq(glesc_session_n_past(s2), past);
    p = params(&w, 5);
    cr_assert_eq(glesc_chat_send(c2, "Go on", &p, &r), GLESC_OK);
    cr_expect_eq(w.len, second_len);
    cr_expect_eq(memcmp(w.text, second, second_len), 0, "the stopped chat continues the same way");
    glesc_chat_destroy(c2);
    glesc_session_destroy(s2);
    glesc_chat_destroy(c);
    glesc_session_destroy(s);
}

Test(chat_session, a_full_context_starts_over_or_fails)
{
    load_model(NULL);
    for (int policy = 0; policy < 2; policy++) {
        glesc_session *s = session(160);
        glesc_chat_options co;
        glesc_chat_options_init(&co);
        co.system = "S";
        co.context_policy = (glesc_chat_context_policy)policy;
        glesc_chat *c;
        cr_assert_eq(glesc_chat_create(s, smp, &co, &c), GLESC_OK);
        streamed w;
        glesc_generate_params p = params(&w, 16);
        glesc_status st = GLESC_OK;
        int turns = 0;
        int start_overs = 0;
        for (; turns < 8; turns++) {
            p = params(&w, 30);
            size_t n_before;
            glesc_chat_messages(c, &n_before);
            int32_t past = glesc_session_n_past(s);
            st = glesc_chat_send(c, "Tell me a story about a dog", &p, NULL);
            start_overs += w.start_overs;
            if (st != GLESC_OK) {
                size_t n_after;
                glesc_chat_messages(c, &n_after);
                cr_expect_eq(n_after, n_before, "a refused message changes nothing");
                cr_expect_eq(glesc_session_n_past(s), past);
                break;
            }
            size_t n;
            const glesc_chat_message *m = glesc_chat_messages(c, &n);
            cr_expect_str_eq(m[0].role, "system", "the system message is kept");
        }
        if (policy == GLESC_CHAT_CONTEXT_START_OVER) {
            cr_expect_eq(st, GLESC_OK, "%s", glesc_last_errmsg());
            cr_expect_gt(start_overs, 0, "the conversation started over");
        } else {
            cr_expect_eq(st, GLESC_ERROR_LIMIT);
            cr_expect(strstr(glesc_last_errmsg(), "reset the chat"), "%s", glesc_last_errmsg());
            cr_expect_eq(start_overs, 0);
            glesc_chat_reset(c);
            p = params(&w, 4);
            cr_expect_eq(glesc_chat_send(c, "Hi", &p, NULL), GLESC_OK, "after a reset: %s",
                         glesc_last_errmsg());
        }
        /* A message larger than the whole context is refused either way. */
        char big[2048];
        memset(big, 'a', sizeof big - 1);
        for (size_t i = 0; i < sizeof big - 1; i += 2)
            big[i] = ' ';
        big[sizeof big - 1] = 0;
        size_t n_before;
        glesc_chat_messages(c, &n_before);
        cr_expect_eq(glesc_chat_send(c, big, &p, NULL), GLESC_ERROR_LIMIT);
        cr_expect(strstr(glesc_last_errmsg(), "does not fit the context (160 tokens)"), "%s",
                  glesc_last_errmsg());
        size_t n_after;
        const glesc_chat_message *m = glesc_chat_messages(c, &n_after);
        cr_expect_leq(n_after, n_before);
        cr_expect_str_eq(m[n_after - 1].role, n_after == 1 ? "system" : "assistant");
        glesc_chat_destroy(c);
        glesc_session_destroy(s);
    }
}

/* The default policy: a full context drops the oldest turns and goes on
 * without evaluating the rest again; the system message stays in the
 * history and in the cache. */
Test(chat_session, a_full_context_shifts_keeping_the_system_message)
{
    load_model(NULL);
    glesc_session *s = session(400);
    glesc_chat_options co;
    glesc_chat_options_init(&co);
    cr_expect_eq(co.context_policy, GLESC_CHAT_CONTEXT_SHIFT, "the default");
    co.system = "You tell short stories.";
    glesc_chat *c;
    cr_assert_eq(glesc_chat_create(s, smp, &co, &c), GLESC_OK);
    int shifts = 0;
    size_t dropped = 0, plain_prompt = 0;
    for (int turn = 0; turn < 10; turn++) {
        streamed w;
        glesc_generate_params p = params(&w, 24);
        glesc_generate_result r;
        size_t n_before;
        glesc_chat_messages(c, &n_before);
        int32_t past = glesc_session_n_past(s);
        cr_assert_eq(glesc_chat_send(c, "Tell me a story about a dog", &p, &r), GLESC_OK,
                     "turn %d: %s", turn, glesc_last_errmsg());
        cr_expect_eq(w.start_overs, 0, "turn %d started over", turn);
        size_t n;
        const glesc_chat_message *m = glesc_chat_messages(c, &n);
        cr_assert_geq(n, 3);
        cr_expect_str_eq(m[0].role, "system");
        cr_expect_str_eq(m[0].content, "You tell short stories.");
        cr_expect_str_eq(m[1].role, "user", "whole turns leave");
        cr_expect_str_eq(m[n - 1].role, "assistant");
        if (turn == 1 && !w.shifts)
            plain_prompt = r.prompt_tokens; /* a turn's text and end, no shift */
        if (w.shifts) {
            shifts += w.shifts;
            dropped += w.shifted;
            cr_expect_lt(n, n_before + 2, "turn %d: the oldest turns left the history", turn);
            /* the kept positions were not evaluated again: only this turn's
             * text and its end (a start over would evaluate the system
             * message and the whole message again) */
            cr_expect_eq(r.prompt_tokens, plain_prompt, "turn %d evaluated %zu prompt tokens", turn,
                         r.prompt_tokens);
            cr_expect_lt(glesc_session_n_past(s), past + (int32_t)(r.prompt_tokens + 24));
        }
        /* The cache holds the conversation's text (each turn's reply and
         * the kept message may tokenize a little differently as one text). */
        size_t whole = formatted_tokens(c);
        int32_t now = glesc_session_n_past(s);
        cr_expect(whole + 30 >= (size_t)now && (size_t)now + 30 >= whole,
                  "turn %d: cache %d, text %zu", turn, now, whole);
        cr_expect_leq(now, 400);
    }
    cr_expect_gt(shifts, 0, "the context never filled");
    cr_log_info("context shift: %d shifts dropped %zu positions over 10 turns in 400", shifts,
                dropped);
    glesc_chat_destroy(c);
    glesc_session_destroy(s);

    /* A template that merges the system message into the first user turn
     * (Gemma's) keeps that turn with it and drops the later ones. */
    s = session(400);
    co.chat_template = GLESC_CHAT_GEMMA;
    cr_assert_eq(glesc_chat_create(s, smp, &co, &c), GLESC_OK);
    int start_overs = 0;
    shifts = 0;
    for (int turn = 0; turn < 8; turn++) {
        streamed w;
        glesc_generate_params p = params(&w, 20);
        char msg[64];
        snprintf(msg, sizeof msg, "Story %d about a dog", turn);
        cr_assert_eq(glesc_chat_send(c, msg, &p, NULL), GLESC_OK, "%s", glesc_last_errmsg());
        start_overs += w.start_overs;
        shifts += w.shifts;
        size_t n;
        const glesc_chat_message *m = glesc_chat_messages(c, &n);
        cr_expect_str_eq(m[1].content, "Story 0 about a dog", "the first turn stays");
        size_t whole = formatted_tokens(c);
        int32_t now = glesc_session_n_past(s);
        cr_expect(whole + 30 >= (size_t)now && (size_t)now + 30 >= whole,
                  "gemma turn %d: cache %d, text %zu", turn, now, whole);
    }
    cr_expect_eq(start_overs, 0);
    cr_expect_gt(shifts, 0);
    glesc_chat_destroy(c);
    glesc_session_destroy(s);
}

Test(chat_session, options_and_arguments)
{
    load_model("<|start_header_id|>{{ role }}<|end_header_id|>");
    glesc_session *s = session(0);
    glesc_chat *c;
    cr_assert_eq(glesc_chat_create(s, smp, NULL, &c), GLESC_OK);
    cr_expect_eq(glesc_chat_get_template(c), GLESC_CHAT_LLAMA3);
    glesc_chat_destroy(c);
    glesc_chat_options co;
    glesc_chat_options_init(&co);
    co.chat_template = GLESC_CHAT_GEMMA;
    cr_assert_eq(glesc_chat_create(s, smp, &co, &c), GLESC_OK);
    cr_expect_eq(glesc_chat_get_template(c), GLESC_CHAT_GEMMA, "a named template wins");
    cr_expect_eq(glesc_chat_send(c, NULL, NULL, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_chat_destroy(c);
    co.chat_template = GLESC_CHAT_COUNT_;
    cr_expect_eq(glesc_chat_create(s, smp, &co, &c), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_null(c);
    cr_expect_eq(glesc_chat_create(NULL, smp, NULL, &c), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_chat_destroy(NULL);
    glesc_session_destroy(s);
}
