/*
 * generate.c — text generation over a session (glesc_generate): the prompt
 * in one eval, then tokens sampled one at a time, each handed to the
 * caller's callback with the text it completes (a streaming decoder holds
 * back partial UTF-8 characters) and evaluated so the next one can be
 * sampled from its row.
 *
 * With a greedy sampler (and no logits asked for) the tokens are picked on
 * the GPU and the steps pipelined: step t+1 is queued before step t's
 * token is read (glesc_session_eval_greedy), the same tokens as sampling
 * the rows read back, without the GPU waiting for the host in between.
 *
 * The loop is gguf-run's, moved here so every embedder gets the same
 * behaviour: an end-of-generation token stops without being evaluated or
 * shown (unless ignore_eos), and the last token of a run is only evaluated
 * when the caller will continue from it (eval_last; a chat always does), so
 * a one-shot run computes nothing nobody samples from. The chat session
 * (chat_session.c) drives the same loop and the same input eval.
 */
#include <string.h>

#include "llm/runtime.h"

GLESC_API const char *glesc_stop_reason_name(glesc_stop_reason r)
{
    static const char *const names[] = {"none", "eos", "length", "context", "callback"};
    return (unsigned)r < CORE_ARRAY_LEN(names) ? names[r] : NULL;
}

glesc_status llm_generate_params_in(glesc_generate_params *dst, const glesc_generate_params *p,
                                    const char *fn)
{
    glesc_generate_params_init(dst);
    return p ? core_struct_read(NULL, dst, sizeof *dst, p, fn) : GLESC_OK;
}

void llm_gen_event(const glesc_generate_params *p, const glesc_gen_event *ev)
{
    if (p->on_event)
        p->on_event(p->event_user, ev);
}

glesc_status llm_eval_input(glesc_session *s, glesc_sampler *smp, const int32_t *ids, size_t n,
                            const glesc_generate_params *p, glesc_generate_result *res)
{
    core_err_reset(NULL);
    uint64_t t0 = core_time_ns();
    glesc_status st = glesc_session_eval(s, ids, n, 0, s->logits);
    if (st != GLESC_OK) {
        core_err_prefix(NULL, "evaluating the prompt");
        return st;
    }
    res->prompt_ns += core_time_ns() - t0;
    res->prompt_tokens += n;
    glesc_eval_stats es;
    glesc_session_last_stats(s, &es);
    llm_gen_event(p,
                  &(glesc_gen_event){
                      .kind = GLESC_GEN_EVENT_PROMPT_EVAL, .n_tokens = n, .id = -1, .stats = &es});
    for (size_t i = 0; i < n; i++)
        glesc_sampler_accept_prompt(smp, ids[i]);
    return GLESC_OK;
}

/* Token id, whose eval was queued before the host knew it (pipelined), is
 * not kept: its position goes, with the token its eval chose; the last
 * eval is then the one that chose id (a greedy generation continues
 * from it, as from that eval's row). */
static void drop_queued(glesc_session *s, int32_t id)
{
    glesc_session_truncate(s, s->n_past - 1);
    s->greedy_next = id;
}

glesc_status llm_generate_tokens(glesc_session *s, glesc_sampler *smp,
                                 const glesc_generate_params *p, bool eval_last,
                                 glesc_generate_result *res)
{
    const glesc_tokenizer *tok = s->m->tok;
    /* Pipelined (a greedy sampler, no logits asked for): the first token
     * comes from the last row read back, or is the one the GPU chose for
     * the last greedy eval (a generation going on), every later one is the
     * arg max the GPU took of the previous token's logits
     * (glesc_session_eval_greedy). The eval of token i+1 is queued before
     * token i+1 is read, so the GPU runs it while the host reads and hands
     * out token i+1; when token i+1 ends generation instead, its eval is
     * dropped (truncated). queued: the current token's eval was queued so;
     * qstats its statistics. */
    bool pipelined = !p->logits && llm_sampler_is_greedy(smp);
    bool from_gpu = pipelined && !s->has_logits && s->greedy_next >= 0;
    if (!s->has_logits && !from_gpu)
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "generate: the session has no logits row to sample from (evaluate a "
                            "prompt first, with logits)");
    glesc_decoder *dec = NULL;
    glesc_status st = glesc_decoder_create(tok, p->detokenize_flags, &dec);
    if (st != GLESC_OK)
        return st;
    uint64_t t0 = core_time_ns();
    res->stop = p->n_predict == 0 ? GLESC_STOP_LENGTH : GLESC_STOP_NONE;
    bool queued = false;
    glesc_eval_stats qstats = {0};
    for (int32_t i = 0; p->n_predict < 0 || i < p->n_predict; i++) {
        int32_t id = s->greedy_next;
        if (i == 0 && from_gpu) {
            llm_sampler_skip(smp);
        } else if (i == 0 || !pipelined) {
            id = glesc_sampler_sample(smp, s->logits);
        } else if ((st = glesc_session_greedy_id(s, &id)) == GLESC_OK) {
            llm_sampler_skip(smp);
        } else {
            core_err_prefix(NULL, "decoding");
            goto done;
        }
        glesc_sampler_accept(smp, id);
        res->n_generated++;
        if (glesc_tokenizer_is_eog(tok, id) && !p->ignore_eos) {
            if (p->on_token)
                p->on_token(p->token_user, id, "", 0);
            res->stop = GLESC_STOP_EOS;
            if (queued)
                drop_queued(s, id);
            break;
        }
        const char *piece = "";
        size_t len = 0;
        if (glesc_decoder_feed(dec, id, &piece, &len) != GLESC_OK)
            len = 0; /* only for ids out of the vocabulary, which the sampler never gives */
        bool stop = p->on_token && p->on_token(p->token_user, id, piece, len);
        bool last = p->n_predict >= 0 && i + 1 == p->n_predict;
        res->stop = stop ? GLESC_STOP_CALLBACK : GLESC_STOP_LENGTH;
        if ((stop || last) && !eval_last) { /* nothing will be sampled from its row */
            if (queued)
                drop_queued(s, id);
            break;
        }
        if (!queued && s->n_past >= s->n_ctx) {
            if (!stop)
                res->stop = GLESC_STOP_CONTEXT;
            break;
        }
        glesc_eval_stats es = qstats;
        if (!queued) {
            st = pipelined ? glesc_session_eval_greedy(s, id)
                           : glesc_session_eval(s, &id, 1, 0, s->logits);
            if (st != GLESC_OK) {
                core_err_prefix(NULL, "decoding");
                goto done;
            }
            glesc_session_last_stats(s, &es);
        }
        res->decode_tokens++;
        llm_gen_event(
            p, &(glesc_gen_event){
                   .kind = GLESC_GEN_EVENT_TOKEN_EVAL, .n_tokens = 1, .id = id, .stats = &es});
        if (stop || last)
            break;
        /* queue the next token's eval unless it will not be evaluated: the
         * last of n_predict without eval_last, or no room */
        bool next_last = p->n_predict >= 0 && i + 2 == p->n_predict;
        queued = pipelined && s->n_past < s->n_ctx && (!next_last || eval_last);
        if (queued) {
            if ((st = glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS)) != GLESC_OK) {
                core_err_prefix(NULL, "decoding");
                goto done;
            }
            glesc_session_last_stats(s, &qstats);
        }
    }
    llm_gen_event(p, &(glesc_gen_event){.kind = GLESC_GEN_EVENT_STOP, .id = -1, .stop = res->stop});
    const char *rest;
    size_t len;
    if (glesc_decoder_flush(dec, &rest, &len) == GLESC_OK && len && p->on_token)
        p->on_token(p->token_user, -1, rest, len);
done:
    /* the token the last kept eval chose is not used: read it so nothing
     * waits in the session (a NaN there is no one's concern) */
    while (st == GLESC_OK && s->n_pend) {
        int32_t unused;
        glesc_session_greedy_id(s, &unused);
    }
    res->decode_ns += core_time_ns() - t0;
    glesc_decoder_destroy(dec);
    return st;
}

GLESC_API glesc_status glesc_generate(glesc_session *s, glesc_sampler *smp, const int32_t *prompt,
                                      size_t n_prompt, const glesc_generate_params *p,
                                      glesc_generate_result *res)
{
    core_err_reset(NULL);
    glesc_generate_result r = {0};
    if (!res)
        res = &r;
    memset(res, 0, sizeof *res);
    if (!s || !smp || (n_prompt && !prompt))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_generate: NULL session, sampler or prompt");
    glesc_generate_params params;
    glesc_status st = llm_generate_params_in(&params, p, "glesc_generate");
    if (st != GLESC_OK)
        return st;
    p = &params;
    if (n_prompt) {
        int32_t free_pos = s->n_ctx - s->n_past;
        if (n_prompt > (size_t)free_pos)
            return core_err_set(NULL, GLESC_ERROR_LIMIT,
                                "the prompt has %zu tokens but the context has room for %d more "
                                "(of %d)",
                                n_prompt, (int)free_pos, (int)s->n_ctx);
        st = llm_eval_input(s, smp, prompt, n_prompt, p, res);
        if (st != GLESC_OK)
            return st;
    }
    return llm_generate_tokens(s, smp, p, p->eval_last, res);
}
