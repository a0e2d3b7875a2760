/*
 * session.c — sessions (glesc_llm.h): the KV cache, evaluating tokens
 * through the per-step graph of forward.c, and precompiling a session's
 * programs. Greedy steps that feed themselves on the GPU are greedy.c's.
 *
 * A session owns the KV cache (one persistent [n_head_kv·head_dim, n_ctx]
 * tensor per layer for keys and one for values) and one graph that is reset
 * and rebuilt for every step; the plan cache makes the rebuild cheap.
 *
 * Each eval's batches take their inputs (token ids, positions) from two
 * pairs of the session's tensors in turn, written after a fence of the
 * batch that read the pair before (no full wait between batches). A decode
 * step whose row is read records, orders and plans the next step's graph
 * while the GPU runs it (compute_prepare), then reads the row through a
 * readback.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"
#include "llm/runtime.h"

/* One of the options' types (t; dflt where 0) as a cache type. */
static glesc_dtype kv_resolve(glesc_dtype t, glesc_dtype dflt)
{
    return t == GLESC_KV_DEFAULT ? dflt : t == GLESC_KV_F32 ? GLESC_DTYPE_F32 : t;
}

glesc_status llm_kv_types(const glesc_session_options *o, const llm_hparams *hp, const char *who,
                          glesc_dtype *k, glesc_dtype *v)
{
    *k = kv_resolve(o->kv_type, GLESC_DTYPE_F16);
    *v = kv_resolve(o->kv_type_v, *k);
    for (int i = 0; i < 2; i++) {
        glesc_dtype t = i ? *v : *k;
        const char *name = glesc_dtype_name(t) ? glesc_dtype_name(t) : "?";
        bool block = t == GLESC_DTYPE_Q8_0 || t == GLESC_DTYPE_Q4_0;
        if (!block && t != GLESC_DTYPE_F32 && t != GLESC_DTYPE_F16)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "%s: KV cache type %s (%s) is not one of f32, f16, q8_0, q4_0", who,
                                name, i ? "values" : "keys");
        if (block && hp->head_dim % 32)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "%s: a %s KV cache (%s) needs a head size that is a multiple of "
                                "32 (its blocks are 32 values, llama.cpp's rule); the model's is "
                                "%lld",
                                who, name, i ? "values" : "keys", (long long)hp->head_dim);
    }
    return GLESC_OK;
}

size_t llm_kv_row_bytes(const llm_hparams *hp, glesc_dtype t)
{
    return glesc_dtype_row_bytes(t, hp->n_head_kv * hp->head_dim);
}

GLESC_API glesc_status glesc_session_create(glesc_model *m, const glesc_session_options *opts,
                                            glesc_session **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_session_create: NULL out");
    *out = NULL;
    if (!m)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_session_create: NULL model");
    glesc_session_options o;
    glesc_status st = core_struct_read(NULL, &o, sizeof o, opts, "glesc_session_create");
    if (st != GLESC_OK)
        return st;
    const llm_hparams *hp = &m->hp;
    if (o.n_ctx < 0 || o.n_batch < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "session: n_ctx %d and n_batch %d must not be negative", (int)o.n_ctx,
                            (int)o.n_batch);
    if (o.n_ctx == 0)
        o.n_ctx = (int32_t)CORE_MIN(hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096, 4096);
    if (o.n_batch == 0)
        o.n_batch = 512;
    o.n_batch = CORE_MIN(o.n_batch, o.n_ctx);
    glesc_dtype kt, vt;
    st = llm_kv_types(&o, hp, "session", &kt, &vt);
    if (st != GLESC_OK)
        return st;
    int64_t kv_dim = hp->n_head_kv * hp->head_dim;
    uint64_t limit = glesc_context_caps(m->ctx)->max_storage_block_size;
    for (int i = 0; i < 2; i++) {
        glesc_dtype t = i ? vt : kt;
        uint64_t bytes = glesc_weight_gpu_bytes(m->ctx, t, 2, (int64_t[]){kv_dim, o.n_ctx});
        uint64_t row = llm_kv_row_bytes(hp, t);
        if (bytes > limit || row * (uint64_t)o.n_ctx > limit)
            return core_err_set(
                NULL, GLESC_ERROR_LIMIT,
                "session: one layer's %s cache (%s) for %d positions takes %llu "
                "bytes, more than the device's storage-block limit of %llu "
                "bytes: use a smaller context%s",
                i ? "value" : "key", glesc_dtype_name(t), (int)o.n_ctx,
                (unsigned long long)(row * (uint64_t)o.n_ctx), (unsigned long long)limit,
                t == GLESC_DTYPE_Q4_0 ? "" : " or a smaller cache type (q8_0, q4_0)");
    }

    glesc_session *s = core_calloc(1, sizeof *s);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "session");
    s->m = m;
    s->greedy_next = -1;
    s->k_type = kt;
    s->v_type = vt;
    s->n_ctx = o.n_ctx;
    s->n_batch = o.n_batch;
    s->k_cache = core_calloc((size_t)hp->n_layer, sizeof *s->k_cache);
    s->v_cache = core_calloc((size_t)hp->n_layer, sizeof *s->v_cache);
    s->logits = core_calloc((size_t)hp->n_vocab, sizeof *s->logits);
    s->in_scratch = core_calloc((size_t)o.n_batch, sizeof *s->in_scratch);
    s->g = glesc_graph_create(m->ctx);
    if (!s->k_cache || !s->v_cache || !s->logits || !s->in_scratch || !s->g) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "session");
        goto fail;
    }
    /* its prompts (and one-token steps on their programs) take the device
     * class's narrow-GEMM skips: programs that compile faster (the large
     * GPUs'; none elsewhere) */
    graph_narrow_skips(s->g, true);
    if (o.timing &&
        (st = glesc_graph_set_options(s->g, &(glesc_graph_options){.timing = true})) != GLESC_OK) {
        st = llm_ctx_fail(m->ctx, st, "session: timing");
        goto fail;
    }
    if ((st = glesc_readback_create(m->ctx, &s->logits_rb)) != GLESC_OK)
        goto fail;
    /* The device profile, where a prompt of 2..8 tokens will need it
     * (measured once a context where neither the class, GLESC_GEMV_MAX_M
     * nor the disk cache gives it): here, so that no eval's time or memory
     * includes the measurement. */
    if (o.n_batch >= 2 && !compute_profile_get(m->ctx)) {
        st = llm_ctx_fail(m->ctx, GLESC_ERROR_OUT_OF_MEMORY, "session: device profile");
        goto fail;
    }
    uint64_t live0 = llm_pool_live_bytes(m->ctx);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        int64_t shape[2] = {kv_dim, o.n_ctx};
        s->k_cache[l] = glesc_weight_new(m->ctx, kt, 2, shape);
        s->v_cache[l] = glesc_weight_new(m->ctx, vt, 2, shape);
        if (!s->k_cache[l] || !s->v_cache[l]) {
            st = llm_ctx_fail(m->ctx, GLESC_ERROR_OUT_OF_MEMORY, "session: KV cache");
            goto fail;
        }
    }
    s->kv_bytes = llm_pool_live_bytes(m->ctx) - live0;
    *out = s;
    return GLESC_OK;
fail:
    glesc_session_destroy(s);
    return st;
}

GLESC_API void glesc_session_destroy(glesc_session *s)
{
    if (!s)
        return;
    glesc_graph_destroy(s->g);
    for (int64_t l = 0; l < s->m->hp.n_layer; l++) {
        if (s->k_cache)
            glesc_weight_free(s->k_cache[l]);
        if (s->v_cache)
            glesc_weight_free(s->v_cache[l]);
    }
    core_free(s->k_cache);
    core_free(s->v_cache);
    core_free(s->logits);
    for (int i = 0; i < 2; i++) {
        glesc_weight_free(s->next_id[i]);
        glesc_weight_free(s->pos[i]);
        glesc_readback_destroy(s->pend[i].rb);
        glesc_weight_free(s->in_ids[i]);
        glesc_weight_free(s->in_pos[i]);
        glesc_readback_destroy(s->in_rb[i]);
    }
    glesc_readback_destroy(s->logits_rb);
    core_free(s->in_scratch);
    core_free(s);
}

/* Waits for the batch that last read input pair i, if no wait since
 * covered it (its fence only: the batch after it keeps the GPU busy). */
static glesc_status in_wait(glesc_session *s, int i)
{
    if (!s->in_fenced[i])
        return GLESC_OK;
    s->in_fenced[i] = false;
    return glesc_readback_finish(s->in_rb[i], s->in_scratch,
                                 (size_t)glesc_tensor_nelements(s->in_ids[i]) * sizeof(int32_t));
}

/* Input pair i as i32 [n] tensors (made again when the size changes: the
 * old ones are freed, never written again). */
static glesc_status in_ensure(glesc_session *s, int i, int32_t n)
{
    glesc_context *ctx = s->m->ctx;
    if (s->in_ids[i] && glesc_tensor_nelements(s->in_ids[i]) == n)
        return GLESC_OK;
    glesc_status st = in_wait(s, i); /* its fence is sized by the old ones */
    if (st != GLESC_OK)
        return st;
    glesc_weight_free(s->in_ids[i]);
    glesc_weight_free(s->in_pos[i]);
    s->in_ids[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){n});
    s->in_pos[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){n});
    if (!s->in_ids[i] || !s->in_pos[i])
        return llm_ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "eval: the inputs");
    if (!s->in_rb[i])
        st = glesc_readback_create(ctx, &s->in_rb[i]);
    return st;
}

/* The index of the first value of v[0..n) that is not finite, or -1. One
 * pass that compilers vectorize (the exponent bits of each value), then a
 * search only when one is found. */
static int64_t first_not_finite(const float *v, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    for (size_t i = 0; bad && i < n; i++)
        if (!isfinite(v[i]))
            return (int64_t)i;
    return -1;
}

void llm_session_count(glesc_session *s, int32_t n)
{
    glesc_compute_stats cs;
    glesc_graph_stats(s->g, &cs);
    s->last.n_tokens = n;
    s->last.kernels = cs.kernels;
    s->last.dispatches = cs.dispatches;
    s->last.plan_reused = cs.plan_reused;
    s->last.glsl_built = cs.glsl_built;
    s->last.programs_compiled = cs.programs_compiled;
    s->total_dispatches += (uint64_t)cs.dispatches;
}

static glesc_status precompile_one(glesc_session *s, int32_t n_past, int32_t n, bool greedy,
                                   bool start);

/* The decode step's graphs (plain and greedy) with a cache of deep keys:
 * where the attention's variant changes with the cache's length
 * (kernels_attention_regs_from), its programs from that length on. */
static glesc_status precompile_deep(glesc_session *s, int32_t deep, bool start)
{
    glesc_status st = precompile_one(s, deep - 1, 1, false, start);
    return st == GLESC_OK ? precompile_one(s, deep - 1, 1, true, start) : st;
}

/* After a prompt of n tokens that compiled its programs (a first use),
 * where the driver compiles in the background: starts compiling the decode
 * step's programs (plain and greedy) and returns. Until they are done, a
 * one-token step runs on the prompt's programs (llm_forward): the first
 * tokens do not wait for a second round of compiles. Only after a prompt
 * of the narrow GEMM's widths, whose programs serve one token too; after a
 * longer one the compiles still start early. */
static void start_decode_programs(glesc_session *s, int32_t n)
{
    glesc_context *ctx = s->m->ctx;
    if (!compute_background_compiles(ctx) || s->n_past >= s->n_ctx)
        return;
    uint64_t t0 = core_time_ns();
    s->bg_decode = false; /* the decode step's own graphs */
    glesc_status st = precompile_one(s, s->n_past, 1, false, true);
    if (st == GLESC_OK)
        st = precompile_one(s, s->n_past, 1, true, true);
    /* and the deeper cache's attention after these (eval_chunk), before
     * the step that needs it */
    int64_t deep = kernels_attention_regs_from(ctx);
    s->deep_from = deep > s->n_past + 1 && deep <= s->n_ctx ? (int32_t)deep : 0;
    s->bg_decode = st == GLESC_OK && n <= KERNELS_GEMM_SMALL_M;
    core_log(CORE_LOG_DEBUG, "session: the decode step's programs started in %.1f ms",
             (double)(core_time_ns() - t0) / 1e6);
    core_err_reset(NULL); /* a failure shows again when the step is built */
}

void llm_deep_programs(glesc_session *s)
{
    if (s->deep_from <= 0 || s->bg_decode)
        return;
    if (s->deep_from > s->n_past + 1) {
        uint64_t t0 = core_time_ns();
        precompile_deep(s, s->deep_from, true);
        core_log(CORE_LOG_DEBUG,
                 "session: the programs of the decode step from %d keys started in %.1f ms",
                 (int)s->deep_from, (double)(core_time_ns() - t0) / 1e6);
    }
    s->deep_from = 0;
    core_err_reset(NULL); /* a failure shows again when the step is built */
}

/* One graph: n ≤ n_batch tokens. logits: NULL, one row, or n rows. */
static glesc_status eval_chunk(glesc_session *s, const int32_t *ids, int32_t n, bool all,
                               float *logits)
{
    glesc_context *ctx = s->m->ctx;
    glesc_graph *g = s->g;
    uint64_t t0 = core_time_ns();
    int slot = s->in_slot;
    s->in_slot ^= 1;
    /* the graph recorded while the step before ran, if it is this one's */
    glesc_tensor *y = NULL;
    if (s->pre_y && s->pre_pos == s->n_past && s->pre_slot == slot && n == 1 && !all)
        y = s->pre_y;
    s->pre_y = NULL;
    glesc_status st = in_wait(s, slot);
    if (st == GLESC_OK && !y) {
        glesc_graph_reset(g);
        st = in_ensure(s, slot, n);
    }
    if (st != GLESC_OK)
        return llm_ctx_fail(ctx, st, "eval: inputs");
    int32_t *pos = s->in_scratch;
    for (int32_t i = 0; i < n; i++)
        pos[i] = s->n_past + i;
    if ((st = glesc_tensor_write(s->in_ids[slot], ids, (size_t)n * 4)) != GLESC_OK ||
        (st = glesc_tensor_write(s->in_pos[slot], pos, (size_t)n * 4)) != GLESC_OK)
        return llm_ctx_fail(ctx, st, "eval: inputs");
    if (!y && !(y = llm_forward(s, s->in_ids[slot], s->in_pos[slot], n, all)))
        return llm_ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT, "eval: building the step's graph");
    uint64_t t1 = core_time_ns();
    if ((st = glesc_graph_compute(g, &y, 1)) != GLESC_OK)
        return llm_ctx_fail(ctx, st, "eval");
    /* the last row goes to the host through a copy and its fence; without
     * logits, a copy of the ids marks where this batch ends (in_wait) */
    bool row = logits && !all;
    if (row)
        st = glesc_readback_start(s->logits_rb, y);
    else if (!logits && (st = glesc_readback_start(s->in_rb[slot], s->in_ids[slot])) == GLESC_OK)
        s->in_fenced[slot] = true;
    if (st != GLESC_OK)
        return llm_ctx_fail(ctx, st, "eval");
    uint64_t t2 = core_time_ns();
    s->last.build_ns += t1 - t0;
    s->last.submit_ns += t2 - t1;
    s->n_past += n;
    llm_session_count(s, n);
    if (n == 1)
        llm_deep_programs(s);
    /* A decode step is likely followed by another: record its graph now,
     * and order and plan it (compute_prepare), while this one runs: the
     * host's share of the next step shrinks to writing its inputs and
     * dispatching. */
    if (row && n == 1 && s->n_past < s->n_ctx) {
        uint64_t tp = core_time_ns();
        int next = s->in_slot;
        glesc_graph_reset(g);
        if (in_ensure(s, next, 1) == GLESC_OK &&
            (s->pre_y = llm_forward(s, s->in_ids[next], s->in_pos[next], 1, false))) {
            s->pre_pos = s->n_past;
            s->pre_slot = next;
            /* ordered and planned too: the next compute only dispatches */
            compute_prepare(g, s->pre_y);
        }
        core_err_reset(NULL); /* a failure shows again when the step is built */
        s->last.build_ns += core_time_ns() - tp;
    }
    bool start = n > 1 && !all && s->last.programs_compiled > 0;
    if (!logits) {
        if (start)
            start_decode_programs(s, n);
        return GLESC_OK;
    }
    size_t rows = all ? (size_t)n : 1;
    size_t n_vocab = (size_t)s->m->hp.n_vocab;
    uint64_t t3 = core_time_ns();
    st = row ? glesc_readback_finish(s->logits_rb, logits, n_vocab * sizeof *logits)
             : glesc_tensor_read_f32(y, logits, rows * n_vocab);
    if (st != GLESC_OK)
        return llm_ctx_fail(ctx, st, "eval: reading the logits");
    s->last.read_ns += core_time_ns() - t3;
    /* A NaN or infinity would otherwise sample as id 0 and decode as empty
     * text: one pass over the rows read back is cheap beside the step. */
    int64_t i = first_not_finite(logits, rows * n_vocab);
    if (i >= 0) {
        int32_t r = all ? (int32_t)((size_t)i / n_vocab) : n - 1;
        int32_t at = s->n_past - n + r;
        char batch[64] = "";
        if (n > 1)
            snprintf(batch, sizeof batch, ", in a batch of positions %d..%d", (int)(s->n_past - n),
                     (int)s->n_past - 1);
        return core_err_set(NULL, GLESC_ERROR_NUMERIC,
                            "the logits of position %d (token %d%s) are not finite (logit "
                            "%zu is %s): the model's weights or hyperparameters hold a NaN "
                            "or infinity, or its activations overflow",
                            (int)at, (int)ids[r], batch, (size_t)i % n_vocab,
                            isnan(logits[i]) ? "NaN" : "infinite");
    }
    if (start) /* after the logits: the first token does not wait for it */
        start_decode_programs(s, n);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_eval(glesc_session *s, const int32_t *ids, size_t n,
                                          unsigned flags, float *logits)
{
    core_err_reset(NULL);
    if (!s || !ids || n == 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_eval: no session or no tokens");
    uint64_t t0 = core_time_ns();
    if (n > (size_t)(s->n_ctx - s->n_past))
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "%zu tokens do not fit the context: %d of %d positions are used, "
                            "%d are free (use a larger context)",
                            n, (int)s->n_past, (int)s->n_ctx, (int)(s->n_ctx - s->n_past));
    int64_t n_vocab = s->m->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "token %zu of the input: id %d is outside the vocabulary (0..%lld)",
                                i, (int)ids[i], (long long)(n_vocab - 1));
    bool all = (flags & GLESC_EVAL_ALL_LOGITS) != 0;
    int32_t start = s->n_past;
    s->has_logits = false;
    llm_greedy_settle(s); /* the tokens come from the host now */
    s->last.build_ns = s->last.submit_ns = s->last.read_ns = 0;
    for (size_t off = 0; off < n;) {
        int32_t c = (int32_t)CORE_MIN((size_t)s->n_batch, n - off);
        bool last = off + (size_t)c == n;
        float *dst = !logits ? NULL : all ? logits + off * (size_t)n_vocab : last ? logits : NULL;
        glesc_status st = eval_chunk(s, ids + off, c, all, dst);
        if (st != GLESC_OK) {
            s->n_past = start; /* none of this call's positions are kept */
            return st;
        }
        off += (size_t)c;
    }
    if (logits) { /* the last row, for glesc_session_logits */
        const float *row = all ? logits + (n - 1) * (size_t)n_vocab : logits;
        if (row != s->logits)
            memcpy(s->logits, row, (size_t)n_vocab * sizeof *row);
        s->has_logits = true;
    }
    s->last.ns = core_time_ns() - t0;
    s->last.total_dispatches = s->total_dispatches;
    return GLESC_OK;
}

/* Plans and compiles (compute_prepare, nothing runs) the graph of a batch
 * of n tokens after n_past cached positions; greedy: a decode step with the
 * arg max on the GPU (glesc_session_eval_greedy's graph); start: only starts
 * the compiles (compute_start). */
static glesc_status precompile_one(glesc_session *s, int32_t n_past, int32_t n, bool greedy,
                                   bool start)
{
    glesc_context *ctx = s->m->ctx;
    glesc_graph *g = s->g;
    int slot = s->in_slot;
    glesc_status st = greedy ? llm_greedy_setup(s) : in_wait(s, slot);
    glesc_graph_reset(g);
    if (st == GLESC_OK && !greedy)
        st = in_ensure(s, slot, n);
    if (st != GLESC_OK)
        return st;
    int32_t saved = s->n_past;
    s->n_past = n_past; /* the cache views' sizes: a structure's 1-sized dimensions */
    glesc_tensor *y;
    if (greedy) {
        y = llm_forward(s, s->next_id[0], s->pos[0], 1, false);
        y = glesc_cpy(g, glesc_reduce(g, GLESC_OP_ARGMAX, y, 0), s->next_id[1]);
    } else {
        y = llm_forward(s, s->in_ids[slot], s->in_pos[slot], n, false);
    }
    s->n_past = saved;
    if (!y)
        return llm_ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT,
                            "precompile: building a step's graph");
    st = start ? compute_start(g, y) : compute_prepare(g, y);
    compute_state *cs = compute_state_get(ctx);
    if (cs)
        compute_prepared_drop(cs); /* compiled, never to run */
    glesc_graph_reset(g);
    if (st != GLESC_OK)
        return llm_ctx_fail(ctx, st, "precompile");
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_precompile(glesc_session *s)
{
    core_err_reset(NULL);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_precompile: NULL session");
    s->pre_y = NULL;      /* a decode step recorded ahead is built again */
    s->bg_decode = false; /* background compiles are waited for */
    s->deep_from = 0;     /* compiled below */
    /* A batch length of each kind with kernels of its own: one token (the
     * decode GEMV), two (the GEMV of 2 .. gemv_max_m columns, one program
     * for all of them; or the narrow GEMM where the device takes the GEMM
     * from 2), the narrow GEMM's (up to KERNELS_GEMM_SMALL_M) and the wide
     * one's; a first batch (no cached positions) and a later one differ
     * where the cache's length is 1. */
    int32_t nb = s->n_batch, sizes[4], n_sizes = 0;
    const int32_t want[4] = {1, 2, CORE_MIN(nb, KERNELS_GEMM_SMALL_M), nb};
    for (int i = 0; i < 4; i++)
        if (want[i] <= nb && (n_sizes == 0 || want[i] > sizes[n_sizes - 1]))
            sizes[n_sizes++] = want[i];
    glesc_status st = GLESC_OK;
    for (int i = 0; i < n_sizes && st == GLESC_OK; i++) {
        int32_t n = sizes[i];
        st = precompile_one(s, 0, n, false, false);
        if (st == GLESC_OK && n < s->n_ctx)
            st = precompile_one(s, CORE_MIN(1, s->n_ctx - n), n, false, false);
    }
    if (st == GLESC_OK && s->n_ctx > 1)
        st = precompile_one(s, 1, 1, true, false);
    int64_t deep = kernels_attention_regs_from(s->m->ctx);
    if (st == GLESC_OK && deep > 1 && deep <= s->n_ctx)
        st = precompile_deep(s, (int32_t)deep, false);
    return st;
}

GLESC_API int32_t glesc_session_n_past(const glesc_session *s)
{
    return s ? s->n_past : 0;
}

GLESC_API int32_t glesc_session_n_ctx(const glesc_session *s)
{
    return s ? s->n_ctx : 0;
}

GLESC_API glesc_status glesc_session_truncate(glesc_session *s, int32_t n)
{
    core_err_reset(NULL);
    if (!s || n < 0 || n > s->n_past)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_truncate: %d is not in 0..%d", (int)n,
                            s ? (int)s->n_past : 0);
    if (n != s->n_past) {
        s->has_logits = false;
        llm_greedy_settle(s); /* greedy results not read yet are dropped */
    }
    s->n_past = n;
    return GLESC_OK;
}

GLESC_API const float *glesc_session_logits(const glesc_session *s)
{
    return s && s->has_logits ? s->logits : NULL;
}

GLESC_API void glesc_session_kv_types(const glesc_session *s, glesc_dtype *k, glesc_dtype *v)
{
    if (s && k)
        *k = s->k_type;
    if (s && v)
        *v = s->v_type;
}

GLESC_API uint64_t glesc_session_kv_bytes(const glesc_session *s)
{
    return s ? s->kv_bytes : 0;
}

GLESC_API int glesc_session_kernel_times(const glesc_session *s, const glesc_kernel_time **out)
{
    glesc_compute_stats cs = {0};
    if (s)
        glesc_graph_stats(s->g, &cs);
    *out = cs.n_kernel_times ? cs.kernel_times : NULL;
    return cs.n_kernel_times;
}

GLESC_API void glesc_session_last_stats(const glesc_session *s, glesc_eval_stats *out)
{
    if (s)
        *out = s->last;
    else
        memset(out, 0, sizeof *out);
}
