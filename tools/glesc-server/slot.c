/*
 * slot.c — one slot's work, on the worker thread: a session of the shared
 * model, the tokens its KV cache holds, and the job it runs. A job starts
 * from the longest prefix of its prompt that the cache already holds (the
 * session is truncated there, the rest evaluated a batch per step); then
 * each step evaluates the token sampled last and samples the next from its
 * logits row (logit_bias added first). Text reaches the job through the
 * streaming decoder (whole UTF-8 characters) and the stop strings: bytes
 * that could begin a stop string are held back until they cannot, and a
 * stop string found ends the answer before it. The token sampled last is
 * never evaluated, so the cache holds the prompt and every generated token
 * but the last: a chat's next turn, which repeats them, reuses them.
 */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-server/glesc-server.h"

static uint64_t use_clock;

int slot_init(srv *s, srv_slot *sl, int i)
{
    memset(sl, 0, sizeof *sl);
    sl->index = i;
    sl->pending = -1;
    glesc_session_options so = {
        .n_ctx = (int32_t)(s->opt.n_ctx ? s->opt.n_ctx / s->opt.n_parallel : 0),
        .kv_type = s->opt.kv_type,
        .kv_type_v = s->opt.kv_type_v,
        .n_batch = (int32_t)s->opt.n_batch,
    };
    const char *what = "creating a slot's session";
    if (glesc_session_create(s->model, &so, &sl->sess) == GLESC_OK) {
        what = "creating a slot's decoder";
        size_t n_ctx = (size_t)glesc_session_n_ctx(sl->sess);
        sl->cache = malloc(n_ctx * sizeof *sl->cache);
        sl->logits = malloc((size_t)s->n_vocab_model * sizeof *sl->logits);
        if (sl->cache && sl->logits &&
            glesc_decoder_create(s->tok, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &sl->dec) == GLESC_OK)
            return 0;
    }
    snprintf(s->load_error, sizeof s->load_error, "%s %d: %s", what, i,
             sl->cache && sl->logits ? glesc_last_errmsg() : "out of memory");
    return -1;
}

void slot_free(srv_slot *sl)
{
    if (sl->job) {
        srv_error e;
        srv_error_set(&e, 503, "unavailable_error", NULL, "the server is shutting down");
        job_finish(sl->job, NULL, &e);
        job_unref(sl->job);
    }
    glesc_decoder_destroy(sl->dec);
    glesc_sampler_destroy(sl->smp);
    glesc_session_destroy(sl->sess);
    free(sl->cache);
    free(sl->logits);
    buf_free(&sl->gen);
    memset(sl, 0, sizeof *sl);
}

size_t slot_prefix(const srv_slot *sl, const int32_t *prompt, size_t n)
{
    size_t i = 0;
    while (i < n && i < sl->n_cache && sl->cache[i] == prompt[i])
        i++;
    return i;
}

/* Ends sl's job (finish NULL: err) and frees the slot. */
static void slot_end(srv *s, srv_slot *sl, const char *finish, const srv_error *err)
{
    srv_job *j = sl->job;
    if (s->opt.verbose)
        fprintf(stderr,
                "glesc-server: %s slot %d: prompt %zu tokens (%zu cached), %d generated, "
                "%s, %.0f ms\n",
                j->id, sl->index, j->n_prompt, j->n_cached, (int)j->n_generated,
                finish ? finish : err->message, (double)(now_ns() - j->t_submit_ns) * 1e-6);
    job_finish(j, finish, err);
    job_unref(j);
    sl->job = NULL;
    sl->pending = -1;
    sl->last_used = ++use_clock;
}

static void slot_fail(srv *s, srv_slot *sl, const char *what, glesc_status st)
{
    srv_error e;
    if (st == GLESC_ERROR_CANCELLED || atomic_load(&sl->job->cancelled)) {
        atomic_fetch_add(&s->metrics.cancelled, 1);
        srv_error_set(&e, 499, "cancelled", NULL, "the request was cancelled");
    } else {
        srv_error_set(&e, 500, "server_error", NULL, "%s: %s", what, glesc_last_errmsg());
        /* The failed positions are not kept; start the slot over to be safe. */
        glesc_session_truncate(sl->sess, 0);
        sl->n_cache = 0;
    }
    slot_end(s, sl, NULL, &e);
}

/* j's sampler: llama.cpp's default chain from its parameters, with
 * logit_bias first (a chain of its own, in the same order) and
 * response_format's grammar last. */
static glesc_status job_sampler(const srv *s, const srv_job *j, uint64_t seed, glesc_sampler **out)
{
    const glesc_sampler_params *p = &j->req.sp;
    glesc_sampler *smp = NULL;
    glesc_status st;
    glesc_sampler_params sp = *p;
    sp.seed = seed;
    glesc_logit_bias *b = j->req.n_bias ? malloc(j->req.n_bias * sizeof *b) : NULL;
    if (j->req.n_bias && !b)
        return GLESC_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < j->req.n_bias; i++) /* OpenAI's -100 bans the token */
        b[i] = (glesc_logit_bias){j->req.bias[i].id,
                                  j->req.bias[i].bias <= -100 ? -INFINITY : j->req.bias[i].bias};
    sp.logit_bias = b;
    sp.n_logit_bias = j->req.n_bias;
    st = glesc_sampler_create(&sp, s->n_vocab_tok, &smp);
    free(b);
    if (st == GLESC_OK && j->gbnf)
        st = glesc_sampler_add_grammar(smp, s->tok, j->gbnf, NULL);
    if (st != GLESC_OK) {
        glesc_sampler_destroy(smp);
        return st;
    }
    *out = smp;
    return GLESC_OK;
}

void slot_assign(srv *s, srv_slot *sl, srv_job *j)
{
    size_t p = slot_prefix(sl, j->prompt, j->n_prompt);
    if (p == j->n_prompt) /* a row of logits is needed: evaluate the last token again */
        p--;
    /* (n_past may hold one position more than the cache says, after a
     * failed greedy step.) */
    if (glesc_session_n_past(sl->sess) != (int32_t)p &&
        glesc_session_truncate(sl->sess, (int32_t)p) != GLESC_OK) {
        p = 0;
        glesc_session_truncate(sl->sess, 0);
    }
    sl->n_cache = p;
    sl->job = j;
    sl->n_prompt_done = p;
    sl->pending = -1;
    sl->gen.len = 0;
    sl->sent = 0;
    j->n_cached = p;
    uint64_t seed = j->req.seed_given
                        ? j->req.sp.seed
                        : now_ns() ^ (uint64_t)(sl->index + 1) * 0x9e3779b97f4a7c15ull;
    glesc_sampler_destroy(sl->smp);
    sl->smp = NULL;
    if (job_sampler(s, j, seed, &sl->smp) != GLESC_OK) {
        srv_error e;
        srv_error_set(&e, 400, "invalid_request_error", NULL, "%s", glesc_last_errmsg());
        slot_end(s, sl, NULL, &e);
        return;
    }
    int32_t last_n = j->req.sp.repeat_last_n;
    size_t from = j->n_prompt > (size_t)last_n ? j->n_prompt - (size_t)last_n : 0;
    for (size_t i = from; i < j->n_prompt; i++)
        glesc_sampler_accept_prompt(sl->smp, j->prompt[i]);
    glesc_decoder_reset(sl->dec);
    atomic_fetch_add(&s->metrics.prompt_tokens, j->n_prompt);
    atomic_fetch_add(&s->metrics.cached_tokens, p);
}

/* Hands gen[sent..upto) to the job. */
static void emit(srv_slot *sl, size_t upto)
{
    if (upto > sl->sent) {
        job_push_text(sl->job, sl->gen.data + sl->sent, upto - sl->sent);
        sl->sent = upto;
    }
}

/* Where a stop string starts in gen (searched where new bytes can make
 * one), or -1. */
static long stop_find(const srv_slot *sl, size_t from)
{
    const srv_request *r = &sl->job->req;
    long best = -1;
    for (size_t k = 0; k < r->n_stop; k++) {
        size_t n = strlen(r->stop[k]);
        size_t start = from > n ? from - n : 0;
        if (sl->gen.len < start + n)
            continue;
        const char *hit = memmem(sl->gen.data + start, sl->gen.len - start, r->stop[k], n);
        if (hit && (best < 0 || hit - sl->gen.data < best))
            best = hit - sl->gen.data;
    }
    return best;
}

/* Bytes at gen's end that begin some stop string (held back). */
static size_t stop_hold(const srv_slot *sl)
{
    const srv_request *r = &sl->job->req;
    size_t hold = 0;
    for (size_t k = 0; k < r->n_stop; k++) {
        size_t n = strlen(r->stop[k]);
        for (size_t h = n - 1; h > hold; h--)
            if (h <= sl->gen.len - sl->sent &&
                !memcmp(sl->gen.data + sl->gen.len - h, r->stop[k], h)) {
                hold = h;
                break;
            }
    }
    return hold;
}

/* Adds text to gen; true when a stop string ended the answer. */
static bool add_text(srv_slot *sl, const char *t, size_t n)
{
    if (!n)
        return false;
    size_t from = sl->gen.len;
    buf_add(&sl->gen, t, n);
    if (sl->gen.oom)
        return false;
    long at = stop_find(sl, from);
    if (at >= 0) {
        sl->gen.len = (size_t)at;
        emit(sl, sl->gen.len);
        return true;
    }
    emit(sl, sl->gen.len - stop_hold(sl));
    return false;
}

/* The end of a generation: the held-back bytes, then the job's end. */
static void finish_gen(srv *s, srv_slot *sl, const char *reason)
{
    const char *t;
    size_t n;
    if (glesc_decoder_flush(sl->dec, &t, &n) == GLESC_OK && add_text(sl, t, n)) {
        slot_end(s, sl, "stop", NULL);
        return;
    }
    emit(sl, sl->gen.len);
    slot_end(s, sl, reason, NULL);
}

/* Token id was chosen: its text goes on; ends the job or leaves the token
 * pending for the next step. */
static void token_emit(srv *s, srv_slot *sl, int32_t id)
{
    srv_job *j = sl->job;
    glesc_sampler_accept(sl->smp, id);
    j->n_generated++;
    atomic_fetch_add(&s->metrics.generated_tokens, 1);
    if (glesc_tokenizer_is_eog(s->tok, id)) {
        finish_gen(s, sl, "stop");
        return;
    }
    const char *t;
    size_t n;
    if (glesc_decoder_feed(sl->dec, id, &t, &n) == GLESC_OK && add_text(sl, t, n)) {
        slot_end(s, sl, "stop", NULL);
        return;
    }
    if (j->n_generated >= j->max_tokens || sl->n_cache >= (size_t)s->slot_ctx)
        finish_gen(s, sl, "length");
    else
        sl->pending = id;
}

/* Samples a token from sl->logits and hands it on. */
static void sample_emit(srv *s, srv_slot *sl)
{
    srv_job *j = sl->job;
    if (j->n_generated >= j->max_tokens) {
        finish_gen(s, sl, "length");
        return;
    }
    token_emit(s, sl, glesc_sampler_sample(sl->smp, sl->logits));
}

/* Evaluates ids[0..n) at the cache's end (logits of the last into
 * sl->logits when want): 0, or -1 after ending the job. */
static int slot_eval(srv *s, srv_slot *sl, const int32_t *ids, size_t n, bool want,
                     const char *what)
{
    s->evaluating = sl->job;
    glesc_status st = glesc_session_eval(sl->sess, ids, n, 0, want ? sl->logits : NULL);
    s->evaluating = NULL;
    if (st != GLESC_OK) {
        slot_fail(s, sl, what, st);
        return -1;
    }
    memcpy(sl->cache + sl->n_cache, ids, n * sizeof *ids);
    sl->n_cache += n;
    return 0;
}

void slot_step(srv *s, srv_slot *sl)
{
    srv_job *j = sl->job;
    if (atomic_load(&j->cancelled)) {
        slot_fail(s, sl, "cancelled", GLESC_ERROR_CANCELLED);
        return;
    }
    uint64_t t0 = now_ns();
    if (sl->n_prompt_done < j->n_prompt) {
        size_t n = j->n_prompt - sl->n_prompt_done;
        if (n > (size_t)s->opt.n_batch)
            n = (size_t)s->opt.n_batch;
        bool last = sl->n_prompt_done + n == j->n_prompt;
        if (slot_eval(s, sl, j->prompt + sl->n_prompt_done, n, last, "evaluating the prompt"))
            return;
        sl->n_prompt_done += n;
        atomic_fetch_add(&s->metrics.prompt_ns, now_ns() - t0);
        if (last)
            sample_emit(s, sl);
        return;
    }
    int32_t id = sl->pending;
    if (slot_eval(s, sl, &id, 1, true, "decoding"))
        return;
    sl->pending = -1;
    sample_emit(s, sl);
    atomic_fetch_add(&s->metrics.decode_ns, now_ns() - t0);
}

/* ---- greedy steps, queued on the GPU for several slots at once ----
 * A greedy job's next token is the arg max of its logits, which the GPU
 * takes itself (glesc_session_eval_greedy): the worker queues one such step
 * for every greedy slot, then reads their tokens, so the GPU runs the slots'
 * steps back to back instead of waiting for the host between them. The
 * tokens are those the sampler would pick (the CPU's arg max, ties to the
 * lowest id). */

bool slot_greedy_ready(const srv_slot *sl)
{
    const srv_job *j = sl->job;
    if (!j || sl->pending < 0 || sl->n_prompt_done < j->n_prompt || atomic_load(&j->cancelled))
        return false;
    const glesc_sampler_params *p = &j->req.sp;
    return (p->temperature <= 0 || p->top_k == 1) && p->repeat_penalty == 1.0f &&
           j->req.n_bias == 0 && !j->gbnf;
}

void slot_greedy_submit(srv *s, srv_slot *sl)
{
    uint64_t t0 = now_ns();
    glesc_status st = glesc_session_eval_greedy(sl->sess, sl->pending);
    if (st != GLESC_OK) {
        slot_fail(s, sl, "decoding", st);
        return;
    }
    sl->cache[sl->n_cache++] = sl->pending;
    sl->pending = -1;
    sl->greedy_queued = true;
    atomic_fetch_add(&s->metrics.decode_ns, now_ns() - t0);
}

void slot_greedy_collect(srv *s, srv_slot *sl)
{
    uint64_t t0 = now_ns();
    int32_t id;
    sl->greedy_queued = false;
    glesc_status st = glesc_session_greedy_id(sl->sess, &id);
    if (st != GLESC_OK) {
        slot_fail(s, sl, "decoding", st);
        return;
    }
    token_emit(s, sl, id);
    atomic_fetch_add(&s->metrics.decode_ns, now_ns() - t0);
}
