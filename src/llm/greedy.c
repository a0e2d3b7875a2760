/*
 * greedy.c — pipelined greedy decoding (glesc_session_eval_greedy,
 * glesc_session_greedy_id): a session's steps that end in the arg max of
 * the logits, copied into one of two i32 tensors that the next step's
 * embedding lookup reads: the GPU feeds itself, and the host reads each
 * token through a readback while the next step runs.
 */
#include <stdio.h>

#include "llm/runtime.h"

/* Waits for the greedy eval of pending entry i (once), keeping its token. */
static void greedy_wait(glesc_session *s, int i)
{
    if (s->pend[i].done)
        return;
    s->pend[i].value = -1;
    s->pend[i].st = glesc_readback_finish(s->pend[i].rb, &s->pend[i].value, sizeof(int32_t));
    s->pend[i].done = true;
}

void llm_greedy_settle(glesc_session *s)
{
    for (; s->n_pend; s->n_pend--) {
        greedy_wait(s, s->pend_head);
        s->pend_head = (s->pend_head + 1) % 2;
    }
    s->chain = false;
    s->greedy_next = -1;
}

glesc_status llm_greedy_setup(glesc_session *s)
{
    glesc_context *ctx = s->m->ctx;
    for (int i = 0; i < 2; i++) {
        if (!s->next_id[i] &&
            !(s->next_id[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){1})))
            return llm_ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "greedy eval: the token slots");
        if (!s->pos[i] && !(s->pos[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){1})))
            return llm_ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "greedy eval: the positions");
        if (!s->pend[i].rb) {
            glesc_status st = glesc_readback_create(ctx, &s->pend[i].rb);
            if (st != GLESC_OK)
                return st;
        }
    }
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_eval_greedy(glesc_session *s, int32_t id)
{
    core_err_reset(NULL);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_eval_greedy: NULL session");
    uint64_t t0 = core_time_ns();
    if (s->n_past >= s->n_ctx)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "a token does not fit the context: all %d positions are used (use a "
                            "larger context)",
                            (int)s->n_ctx);
    if (id >= s->m->hp.n_vocab || (id < 0 && id != GLESC_GREEDY_PREVIOUS))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_eval_greedy: id %d is outside the vocabulary (0..%lld)",
                            (int)id, (long long)(s->m->hp.n_vocab - 1));
    if (id < 0 && !s->chain)
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "glesc_session_eval_greedy: no arg max of a greedy eval is on the GPU "
                            "to continue from (the last eval was not greedy, or the session was "
                            "truncated since): give the token");
    if (s->n_pend == 2)
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "glesc_session_eval_greedy: the ids of two greedy evals are not read "
                            "yet (glesc_session_greedy_id)");
    glesc_status st = llm_greedy_setup(s);
    if (st != GLESC_OK)
        return st;
    glesc_context *ctx = s->m->ctx;
    glesc_tensor *in = s->next_id[s->next_slot], *out = s->next_id[1 - s->next_slot];
    /* a given token goes where the eval before wrote its arg max: wait for
     * that eval first (its token is kept for glesc_session_greedy_id) */
    for (int i = 0; id >= 0 && i < s->n_pend; i++)
        greedy_wait(s, (s->pend_head + i) % 2);
    if (id >= 0 && (st = glesc_tensor_write(in, &id, sizeof id)) != GLESC_OK)
        return llm_ctx_fail(ctx, st, "greedy eval: the token");
    glesc_graph *g = s->g;
    uint64_t t_build = core_time_ns();
    s->pre_y = NULL; /* a decode step's graph recorded ahead is dropped */
    glesc_graph_reset(g);
    /* Nothing the host writes for this step may be memory that the step
     * before, still running, reads: a graph input would come from the
     * buffer pool, maybe the very buffer that step's positions are in (on
     * an H200 such writes landed under the running step), so the position
     * goes into its own tensor of two, and the token is on the GPU. */
    int32_t pos = s->n_past;
    glesc_tensor *pos_t = s->pos[pos % 2];
    if ((st = glesc_tensor_write(pos_t, &pos, sizeof pos)) != GLESC_OK)
        return llm_ctx_fail(ctx, st, "greedy eval: the position");
    /* the arg max of the logits into the other slot: folded into the
     * output head's kernel (the logits never reach memory) */
    glesc_tensor *y = llm_forward(s, in, pos_t, 1, false);
    y = glesc_cpy(g, glesc_reduce(g, GLESC_OP_ARGMAX, y, 0), out);
    if (!y)
        return llm_ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT,
                            "greedy eval: building the step's graph");
    int slot = (s->pend_head + s->n_pend) % 2;
    uint64_t t_submit = core_time_ns();
    if ((st = glesc_graph_compute(g, &y, 1)) != GLESC_OK ||
        (st = glesc_readback_start(s->pend[slot].rb, out)) != GLESC_OK)
        return llm_ctx_fail(ctx, st, "greedy eval");
    s->pend[slot].pos = pos;
    s->pend[slot].token = id;
    s->pend[slot].done = false;
    s->n_pend++;
    s->n_past++;
    s->next_slot ^= 1;
    s->chain = true;
    s->has_logits = false;
    s->greedy_next = -1;
    llm_session_count(s, 1);
    llm_deep_programs(s);
    uint64_t t_end = core_time_ns();
    s->last.build_ns = t_submit - t_build;
    s->last.submit_ns = t_end - t_submit;
    s->last.read_ns = 0; /* read later: glesc_session_greedy_id */
    s->last.ns = t_end - t0;
    s->last.total_dispatches = s->total_dispatches;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_greedy_id(glesc_session *s, int32_t *id)
{
    core_err_reset(NULL);
    if (!s || !id)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_greedy_id: NULL session or id");
    if (!s->n_pend)
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "glesc_session_greedy_id: no greedy eval is waiting to be read");
    int slot = s->pend_head;
    s->pend_head = (s->pend_head + 1) % 2;
    s->n_pend--;
    greedy_wait(s, slot);
    int32_t v = s->pend[slot].value;
    glesc_status st = s->pend[slot].st;
    if (st != GLESC_OK)
        return llm_ctx_fail(s->m->ctx, st, "reading a greedy eval's token");
    if (v < 0 || v >= s->m->hp.n_vocab) {
        char tok[48] = "the previous greedy eval's arg max";
        if (s->pend[slot].token >= 0)
            snprintf(tok, sizeof tok, "%d", (int)s->pend[slot].token);
        return core_err_set(NULL, GLESC_ERROR_NUMERIC,
                            "the logits of position %d (token %s) are not finite (a NaN; the arg "
                            "max on the GPU is %d): the model's weights or hyperparameters hold "
                            "a NaN or infinity, or its activations overflow",
                            (int)s->pend[slot].pos, tok, (int)v);
    }
    *id = v;
    if (!s->n_pend && s->chain)
        s->greedy_next = v; /* the last eval's: a greedy generation goes on from it */
    return GLESC_OK;
}
