/*
 * generate.c — evaluation and sampling: the prompt in one batch (every row
 * to --logits-out when asked), then one token at a time, each streamed
 * through the detokenizer as soon as it is sampled; run_once is the whole
 * of a non-chat run.
 */
#include <errno.h>
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

/* Feeds id to the text decoder (the continuation, for --json's text) and to
 * the output decoder (stdout; NULL: stdout gets the text decoder's bytes).
 * false when stdout cannot be written. */
static bool emit(run *r, glesc_decoder *out_dec, glesc_decoder *text_dec, int32_t id, bool flush)
{
    const char *piece;
    size_t len;
    bool show = !r->o->json;
    glesc_status st = flush ? glesc_decoder_flush(text_dec, &piece, &len)
                            : glesc_decoder_feed(text_dec, id, &piece, &len);
    if (st == GLESC_OK && len) {
        buf_add(&r->text, piece, len);
        if (!out_dec && show && !out_write(piece, len))
            return false;
    }
    if (out_dec) {
        st = flush ? glesc_decoder_flush(out_dec, &piece, &len)
                   : glesc_decoder_feed(out_dec, id, &piece, &len);
        if (st == GLESC_OK && len && show && !out_write(piece, len))
            return false;
    }
    return !show || out_flush();
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
        glesc_sampler_accept(r->smp, ids[i]);
    return rc;
}

/* Samples up to n_predict tokens (< 0: until EOG or a full context) from
 * r->logits on, streaming them (see emit), or until *r->stop_flag is set.
 * Returns 0, or -1 on failure (a failed write of stdout included). Every
 * sampled token but an end-of-generation one is evaluated, so the session
 * holds it and r->logits has the next row; the n_predict-th one (or the one
 * the stop flag ended on) only with eval_last (a chat continues after it). */
int generate(run *r, glesc_decoder *out_dec, glesc_decoder *text_dec, long n_predict,
             bool eval_last)
{
    const options *o = r->o;
    r->stop = "length";
    for (long i = 0; n_predict < 0 || i < n_predict; i++) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int32_t id = glesc_sampler_sample(r->smp, r->logits);
        glesc_sampler_accept(r->smp, id);
        if (write_rows(r, r->logits, 1))
            return -1;
        buf_add(&r->generated, &id, sizeof id);
        if (r->generated.oom) {
            fprintf(stderr, "gguf-run: out of memory\n");
            return -1;
        }
        bool eog = glesc_tokenizer_is_eog(r->tok, id);
        if (eog && !o->ignore_eos) {
            r->stop = "eos";
            r->decode_ms += ms_since(&t0);
            break;
        }
        if (!emit(r, out_dec, text_dec, id, false))
            return -1;
        bool last = (n_predict >= 0 && i + 1 == n_predict) || (r->stop_flag && *r->stop_flag);
        if (last && !eval_last) { /* nothing will be sampled from its row */
            r->decode_ms += ms_since(&t0);
            break;
        }
        if (glesc_session_n_past(r->sess) >= glesc_session_n_ctx(r->sess)) {
            r->stop = "context";
            if (!o->json)
                fprintf(stderr, "\ngguf-run: the context (%d tokens) is full\n",
                        (int)glesc_session_n_ctx(r->sess));
            r->decode_ms += ms_since(&t0);
            break;
        }
        glesc_status st = glesc_session_eval(r->sess, &id, 1, 0, r->logits);
        if (st != GLESC_OK) {
            fprintf(stderr, "\ngguf-run: decoding: %s\n", glesc_last_errmsg());
            return -1;
        }
        r->decode_ms += ms_since(&t0);
        r->decode_tokens++;
        glesc_eval_stats es;
        glesc_session_last_stats(r->sess, &es);
        r->dispatches_per_token = es.dispatches;
        if (o->verbose > 1)
            verbose_line(r, "gguf-run: decode step %zu: token %d, %s plan, %d dispatches, %.2f ms",
                         r->decode_tokens, (int)id, es.plan_reused ? "reused" : "new",
                         es.dispatches, (double)es.ns / 1e6);
        if (last)
            break;
    }
    return emit(r, out_dec, text_dec, 0, true) ? 0 : -1;
}

/* One prompt, one continuation. The prompt is evaluated before it is
 * echoed: one that does not fit is refused before anything is printed, and
 * -v's line about it does not land inside the text. */
int run_once(run *r, const int32_t *ids, size_t n)
{
    const options *o = r->o;
    glesc_decoder *out_dec = NULL, *text_dec = NULL;
    bool echo = !o->json && !o->no_display_prompt;
    if (!prompt_fits(r, n))
        return 1;
    /* The echo and the continuation on stdout go through one decoder, so
     * the space between them comes out as the model sees it; the text of
     * --json is the continuation alone, with its leading space. */
    if ((echo && glesc_decoder_create(r->tok, 0, &out_dec) != GLESC_OK) ||
        glesc_decoder_create(r->tok, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &text_dec) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        glesc_decoder_destroy(out_dec);
        return 1;
    }
    r->stop = "length"; /* -n 0: the length limit ends it at once */
    int rc = eval_prompt(r, ids, n) ? 1 : 0;
    for (size_t i = 0; !rc && echo && i < n; i++) {
        const char *piece;
        size_t len;
        if (glesc_decoder_feed(out_dec, ids[i], &piece, &len) == GLESC_OK && len &&
            !out_write(piece, len))
            rc = 1;
    }
    if (!rc && echo && !out_flush())
        rc = 1;
    if (!rc && o->n_predict != 0)
        rc = generate(r, out_dec, text_dec, o->n_predict, false) ? 1 : 0;
    glesc_decoder_destroy(out_dec);
    glesc_decoder_destroy(text_dec);
    if (!o->json && (!out_write("\n", 1) || !out_flush()))
        rc = 1;
    verbose_flush(r);
    if (o->json && !rc && !print_json(r, ids, n))
        rc = 1;
    if (!rc)
        summary(r);
    return rc;
}
