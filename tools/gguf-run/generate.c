/*
 * generate.c — the prompt in one batch (every row to --logits-out when
 * asked), then glesc_generate (or, in a chat, glesc_chat_send) samples the
 * continuation and streams it through the callbacks here: the text to
 * stdout as soon as it is complete, the ids and rows for --json and
 * --logits-out, and the statistics for -v and the summary; run_once is the
 * whole of a non-chat run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf-run/gguf-run.h"

double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

void buf_add(buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        char *nd = realloc(b->data, cap);
        if (!nd) {
            b->oom = 1;
            return;
        }
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static int write_rows(run *r, const float *rows, size_t n_rows)
{
    if (!r->logits_out)
        return 0;
    if (fwrite(rows, sizeof(float), n_rows * (size_t)r->n_vocab_model, r->logits_out) !=
        n_rows * (size_t)r->n_vocab_model) {
        fprintf(stderr, "gguf-run: --logits-out: write failed: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether n more tokens fit the context; a message says why not. */
static bool prompt_fits(run *r, size_t n)
{
    int32_t free_pos = glesc_session_n_ctx(r->sess) - glesc_session_n_past(r->sess);
    if (n <= (size_t)free_pos)
        return true;
    fprintf(stderr,
            "gguf-run: the prompt has %zu tokens but the context has room for %d more "
            "(of %d): use a larger -c or a shorter prompt\n",
            n, (int)free_pos, (int)glesc_session_n_ctx(r->sess));
    return false;
}

/* Evaluates ids and leaves the last row in r->logits; with --logits-out
 * writes every row. */
int eval_prompt(run *r, const int32_t *ids, size_t n)
{
    if (!prompt_fits(r, n))
        return -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    float *all = NULL;
    if (r->logits_out) {
        all = malloc(n * (size_t)r->n_vocab_model * sizeof *all);
        if (!all) {
            fprintf(stderr, "gguf-run: out of memory for %zu rows of logits\n", n);
            return -1;
        }
    }
    glesc_status st =
        glesc_session_eval(r->sess, ids, n, all ? GLESC_EVAL_ALL_LOGITS : 0, all ? all : r->logits);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-run: evaluating the prompt: %s\n", glesc_last_errmsg());
        free(all);
        return -1;
    }
    r->prompt_ms += ms_since(&t0);
    r->prompt_tokens += n;
    int rc = 0;
    if (all) {
        memcpy(r->logits, all + (n - 1) * (size_t)r->n_vocab_model,
               (size_t)r->n_vocab_model * sizeof *all);
        rc = write_rows(r, all, n);
        free(all);
    }
    if (r->o->verbose) {
        glesc_eval_stats es;
        glesc_session_last_stats(r->sess, &es);
        fprintf(stderr, "gguf-run: prompt: %zu tokens, %d kernels, %d dispatches per batch\n", n,
                es.kernels, es.dispatches);
    }
    for (size_t i = 0; i < n; i++)
        glesc_sampler_accept_prompt(r->smp, ids[i]);
    return rc;
}

/* The library's token callback: records the id and the row it was sampled
 * from, and writes the text (through r->out_dec when the prompt was echoed,
 * so the space between the two comes out as the model sees it). id -1
 * brings the bytes held back at the end. A failed write of stdout stops
 * generation (out_finish reports it). */
static bool on_token(void *user, int32_t id, const char *piece, size_t len)
{
    run *r = user;
    if (r->failed)
        return true;
    bool json = r->o->json;
    if (id < 0) {
        buf_add(&r->text, piece, len);
        if (!r->out_dec && !json && !out_write(piece, len))
            r->failed = 1;
        return r->failed;
    }
    r->reply_phase = 1;
    if (write_rows(r, glesc_session_logits(r->sess), 1)) {
        r->failed = 1;
        return true;
    }
    buf_add(&r->generated, &id, sizeof id);
    if (r->generated.oom) {
        fprintf(stderr, "gguf-run: out of memory\n");
        r->failed = 1;
        return true;
    }
    if (glesc_tokenizer_is_eog(r->tok, id) && !r->o->ignore_eos)
        return false; /* ends generation; not shown */
    buf_add(&r->text, piece, len);
    bool ok = true;
    if (!r->out_dec && len && !json)
        ok = out_write(piece, len);
    if (r->out_dec && glesc_decoder_feed(r->out_dec, id, &piece, &len) == GLESC_OK && len && !json)
        ok = out_write(piece, len);
    if (!ok || (!json && !out_flush())) {
        r->failed = 1;
        return true;
    }
    return r->stop_flag && *r->stop_flag;
}

/* The library's events: -v lines, the dispatches of a decode step, and the
 * notices of a full context. */
static void on_event(void *user, const glesc_gen_event *ev)
{
    run *r = user;
    int n_ctx = (int)glesc_session_n_ctx(r->sess);
    switch (ev->kind) {
    case GLESC_GEN_EVENT_PROMPT_EVAL:
        if (r->o->verbose)
            fprintf(stderr, "gguf-run: prompt: %zu tokens, %d kernels, %d dispatches per batch\n",
                    ev->n_tokens, ev->stats->kernels, ev->stats->dispatches);
        break;
    case GLESC_GEN_EVENT_TOKEN_EVAL:
        r->dispatches_per_token = ev->stats->dispatches;
        if (r->o->verbose > 1)
            verbose_line(r, "gguf-run: decode step: token %d, %s plan, %d dispatches, %.2f ms",
                         (int)ev->id, ev->stats->plan_reused ? "reused" : "new",
                         ev->stats->dispatches, (double)ev->stats->ns / 1e6);
        break;
    case GLESC_GEN_EVENT_STOP:
        r->reply_phase = 2;
        if (ev->stop == GLESC_STOP_CONTEXT && !r->o->json)
            fprintf(stderr, "\ngguf-run: the context (%d tokens) is full\n", n_ctx);
        break;
    case GLESC_GEN_EVENT_CONTEXT_SHIFT:
        fprintf(stderr,
                "gguf-run: the context (%d tokens) is full: the oldest turns (%zu tokens) leave "
                "it\n",
                n_ctx, ev->n_tokens);
        break;
    case GLESC_GEN_EVENT_START_OVER:
        fprintf(stderr,
                "gguf-run: the context (%d tokens) is full: the conversation starts "
                "over\n",
                n_ctx);
        break;
    }
}

void gen_params(run *r, glesc_generate_params *p)
{
    glesc_generate_params_init(p);
    /* A context holds at most INT32_MAX tokens: a larger -n never binds. */
    p->n_predict = r->o->n_predict > INT32_MAX ? INT32_MAX : (int32_t)r->o->n_predict;
    p->ignore_eos = r->o->ignore_eos;
    p->logits = r->logits_out != NULL; /* --logits-out writes the rows the tokens came from */
    p->on_token = on_token;
    p->token_user = r;
    p->on_event = on_event;
    p->event_user = r;
    r->reply_phase = 0;
}

void add_result(run *r, const glesc_generate_result *res)
{
    r->prompt_ms += (double)res->prompt_ns / 1e6;
    r->prompt_tokens += res->prompt_tokens;
    r->decode_ms += (double)res->decode_ns / 1e6;
    r->decode_tokens += res->decode_tokens;
}

/* One prompt, one continuation. The prompt is evaluated before it is
 * echoed: one that does not fit is refused before anything is printed, and
 * -v's line about it does not land inside the text. */
int run_once(run *r, const int32_t *ids, size_t n)
{
    const options *o = r->o;
    bool echo = !o->json && !o->no_display_prompt;
    if (!prompt_fits(r, n))
        return 1;
    /* The echo and the continuation on stdout go through one decoder, so
     * the space between them comes out as the model sees it; the text of
     * --json is the continuation alone, with its leading space. */
    if (echo && glesc_decoder_create(r->tok, 0, &r->out_dec) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    r->stop = "length"; /* -n 0: the length limit ends it at once */
    size_t cached = o->prompt_cache ? prompt_cache_load(r, ids, n) : 0;
    int rc = cached < n && eval_prompt(r, ids + cached, n - cached) ? 1 : 0;
    if (!rc && o->prompt_cache && cached < n && prompt_cache_save(r, ids, n))
        rc = 1;
    for (size_t i = 0; !rc && echo && i < n; i++) {
        const char *piece;
        size_t len;
        if (glesc_decoder_feed(r->out_dec, ids[i], &piece, &len) == GLESC_OK && len &&
            !out_write(piece, len))
            rc = 1;
    }
    if (!rc && echo && !out_flush())
        rc = 1;
    if (!rc && o->n_predict != 0) {
        /* The prompt is in the session: generation samples from its last
         * row; the last token is not evaluated (nothing samples from it). */
        glesc_generate_params p;
        gen_params(r, &p);
        glesc_generate_result res;
        glesc_status st = glesc_generate(r->sess, r->smp, NULL, 0, &p, &res);
        add_result(r, &res);
        if (st != GLESC_OK) {
            fprintf(stderr, "\ngguf-run: %s\n", glesc_last_errmsg());
            rc = 1;
        } else if (r->failed) {
            rc = 1;
        } else {
            r->stop = glesc_stop_reason_name(res.stop);
            const char *piece;
            size_t len;
            if (r->out_dec && glesc_decoder_flush(r->out_dec, &piece, &len) == GLESC_OK && len &&
                !o->json && !out_write(piece, len))
                rc = 1;
        }
    }
    glesc_decoder_destroy(r->out_dec);
    r->out_dec = NULL;
    if (!o->json && (!out_write("\n", 1) || !out_flush()))
        rc = 1;
    verbose_flush(r);
    if (o->json && !rc && !print_json(r, ids, n))
        rc = 1;
    if (!rc)
        summary(r);
    return rc;
}
