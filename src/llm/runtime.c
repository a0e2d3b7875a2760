/*
 * runtime.c — models and sessions (glesc_llm.h): loading a GGUF model onto
 * the GPU and evaluating tokens through the per-step graph of forward.c.
 *
 * Loading validates everything before the first byte goes to the GPU
 * (model.c: architecture, hyperparameters, every tensor's name and shape),
 * then creates every tensor with glesc_weight_new (matrices in their own
 * type, so a block-quantized type works as soon as the graph layer accepts
 * it, and is refused with the tensor named until then; norm vectors as f32)
 * and fills them all in one glesc_weights_write: worker threads read the
 * file's bytes with glesc_gguf_tensor_read (pread, not through the mapping:
 * a model file truncated or rewritten while it loads is then an error
 * naming it, not a SIGBUS) and repack them straight into GPU memory, while
 * this thread keeps the GL work and reports progress tensor by tensor.
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
 *
 * Greedy steps (glesc_session_eval_greedy) end in the arg max of the
 * logits, copied into one of two i32 tensors that the next step's
 * embedding lookup reads: the GPU feeds itself, and the host reads each
 * token through a readback while the next step runs.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"
#include "gguf/gguf.h"
#include "llm/runtime.h"
#include "quant/quant.h"

/* Copies the context's last message into the thread's (where glesc_llm.h
 * promises it) with a prefix. */
static glesc_status ctx_fail(glesc_context *ctx, glesc_status st, const char *what)
{
    return core_err_set(NULL, st, "%s: %s", what, glesc_context_errmsg(ctx));
}

/* One tensor of the load: where it goes and how its bytes are read. */
typedef struct load_item {
    struct loader *ld;
    const char *name;
    int64_t index; /* in the file */
    glesc_gguf_tensor_info info;
    bool vector;         /* uploaded as f32 */
    glesc_tensor **slot; /* in the model */
} load_item;

typedef struct loader {
    glesc_model *m;
    const glesc_gguf *f;
    const char *path;
    const glesc_model_options *opts;
    uint64_t done, total;
    load_item *items;
    int n_items, cap_items;
    bool cancelled;
} loader;

/* Reads a matrix's file bytes (glesc_read_fn: any thread). */
static glesc_status read_matrix(void *user, uint64_t offset, void *dst, size_t size)
{
    const load_item *it = user;
    return glesc_gguf_tensor_read(it->ld->f, it->index, offset, dst, size);
}

/* Reads the f32 bytes [offset, offset+size) of a vector stored in the file
 * as f32, f16, bf16 or a block type (glesc_read_fn: any thread). */
static glesc_status read_vector(void *user, uint64_t offset, void *dst, size_t size)
{
    const load_item *it = user;
    const loader *ld = it->ld;
    glesc_dtype t = it->info.type;
    if (t == GLESC_DTYPE_F32)
        return read_matrix(user, offset, dst, size);
    const quant_type_info *q = quant_type(t);
    int64_t e0 = (int64_t)(offset / 4), e1 = (int64_t)((offset + size) / 4), bs = q->block_size;
    int64_t b0 = e0 / bs, b1 = (e1 + bs - 1) / bs;
    uint64_t bytes = (uint64_t)(b1 - b0) * (uint64_t)q->block_bytes;
    void *raw = core_malloc((size_t)bytes);
    float *vals = core_malloc((size_t)(b1 - b0) * (size_t)bs * sizeof *vals);
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    if (!raw || !vals)
        st = core_err_set(NULL, st, "%s: tensor '%s'", ld->path, it->name);
    else if ((st = glesc_gguf_tensor_read(ld->f, it->index, (uint64_t)b0 * q->block_bytes, raw,
                                          bytes)) == GLESC_OK &&
             (st = quant_dequantize(t, raw, vals, (b1 - b0) * bs)) != GLESC_OK)
        st = core_err_set(NULL, st, "%s: tensor '%s' (%s): %s", ld->path, it->name,
                          glesc_dtype_name(t), glesc_last_errmsg());
    if (st == GLESC_OK)
        memcpy(dst, vals + (e0 - b0 * bs), size);
    core_free(raw);
    core_free(vals);
    return st;
}

/* Adds tensor name to the load (nothing when the file lacks it: the check
 * before made sure only optional ones are absent). */
static glesc_status plan_item(loader *ld, const char *name, bool vector, glesc_tensor **slot)
{
    int64_t i = glesc_gguf_find_tensor(ld->f, name);
    if (i < 0)
        return GLESC_OK;
    if (ld->n_items == ld->cap_items) {
        int cap = ld->cap_items ? 2 * ld->cap_items : 64;
        load_item *p = core_realloc(ld->items, (size_t)cap * sizeof *p);
        if (!p)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: tensor '%s'", ld->path, name);
        ld->items = p;
        ld->cap_items = cap;
    }
    load_item *it = &ld->items[ld->n_items];
    memset(it, 0, sizeof *it);
    it->ld = ld;
    it->index = i;
    it->vector = vector;
    it->slot = slot;
    glesc_gguf_tensor(ld->f, i, &it->info);
    it->name = it->info.name; /* the reader's, valid during the load */
    ld->n_items++;
    ld->total += it->info.size;
    return GLESC_OK;
}

/* Every tensor the model uses, in the order of the upload. */
static glesc_status plan_all(loader *ld)
{
    glesc_model *m = ld->m;
    const llm_hparams *hp = &m->hp;
    glesc_status st;
    if ((st = plan_item(ld, "token_embd.weight", false, &m->tok_embd)) ||
        (st = plan_item(ld, "output_norm.weight", true, &m->output_norm)) ||
        (st = plan_item(ld, "output.weight", false, &m->output)) ||
        (st = plan_item(ld, "rope_freqs.weight", true, &m->rope_freqs)))
        return st;
    if (hp->arch == LLM_ARCH_PHI3 &&
        ((st = plan_item(ld, "rope_factors_long.weight", true, &m->rope_long)) ||
         (st = plan_item(ld, "rope_factors_short.weight", true, &m->rope_short))))
        return st;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        llm_layer *L = &m->layers[l];
        static const struct {
            const char *suffix;
            bool vector;
            size_t off;
        } parts[] = {
            {"attn_norm.weight", true, offsetof(llm_layer, attn_norm)},
            {"attn_q.weight", false, offsetof(llm_layer, wq)},
            {"attn_k.weight", false, offsetof(llm_layer, wk)},
            {"attn_v.weight", false, offsetof(llm_layer, wv)},
            {"attn_qkv.weight", false, offsetof(llm_layer, wqkv)},
            {"attn_q.bias", true, offsetof(llm_layer, bq)},
            {"attn_k.bias", true, offsetof(llm_layer, bk)},
            {"attn_v.bias", true, offsetof(llm_layer, bv)},
            {"attn_q_norm.weight", true, offsetof(llm_layer, q_norm)},
            {"attn_k_norm.weight", true, offsetof(llm_layer, k_norm)},
            {"attn_output.weight", false, offsetof(llm_layer, wo)},
            {"ffn_norm.weight", true, offsetof(llm_layer, ffn_norm)},
            {"ffn_gate.weight", false, offsetof(llm_layer, w_gate)},
            {"ffn_up.weight", false, offsetof(llm_layer, w_up)},
            {"ffn_down.weight", false, offsetof(llm_layer, w_down)},
            {"post_attention_norm.weight", true, offsetof(llm_layer, post_attn_norm)},
            {"post_ffw_norm.weight", true, offsetof(llm_layer, post_ffn_norm)},
        };
        for (size_t p = 0; p < CORE_ARRAY_LEN(parts); p++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, parts[p].suffix);
            bool is_bias = strstr(parts[p].suffix, ".bias") != NULL;
            bool is_qk_norm =
                strstr(parts[p].suffix, "_q_norm") || strstr(parts[p].suffix, "_k_norm");
            bool is_post_norm = !strncmp(parts[p].suffix, "post_", 5);
            bool is_qkv = strstr(parts[p].suffix, "attn_qkv") != NULL;
            bool is_split_qkv = !strcmp(parts[p].suffix, "attn_q.weight") ||
                                !strcmp(parts[p].suffix, "attn_k.weight") ||
                                !strcmp(parts[p].suffix, "attn_v.weight");
            bool is_gate = strstr(parts[p].suffix, "ffn_gate") != NULL;
            /* Only what the architecture uses: a stray bias in a llama file
             * is ignored as llama.cpp ignores it. */
            if ((is_bias && !hp->qkv_bias) || (is_qk_norm && !hp->qk_norm) ||
                (is_post_norm && !hp->post_norms) || (is_qkv && !hp->fused_qkv) ||
                (is_split_qkv && hp->fused_qkv) || (is_gate && hp->fused_up))
                continue;
            if ((st = plan_item(ld, name, parts[p].vector,
                                (glesc_tensor **)((char *)L + parts[p].off))))
                return st;
        }
    }
    return GLESC_OK;
}

/* Allocates item it's tensor on the GPU (nothing written yet). */
static glesc_status create_item(loader *ld, load_item *it)
{
    glesc_model *m = ld->m;
    const glesc_gguf_tensor_info *t = &it->info;
    glesc_tensor *w;
    if (it->vector) {
        w = glesc_weight_new(m->ctx, GLESC_DTYPE_F32, 1, (int64_t[]){t->ne[0]});
        if (!w)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: tensor '%s': %s", ld->path,
                                it->name, glesc_context_errmsg(m->ctx));
    } else {
        w = glesc_weight_new(m->ctx, t->type, 2, (int64_t[]){t->ne[0], t->ne[1]});
        if (!w) {
            bool plain = t->type == GLESC_DTYPE_F32 || t->type == GLESC_DTYPE_F16 ||
                         t->type == GLESC_DTYPE_BF16;
            return core_err_set(NULL, plain ? GLESC_ERROR_OUT_OF_MEMORY : GLESC_ERROR_UNSUPPORTED,
                                "%s: tensor '%s' (%s, [%lld, %lld]): %s%s", ld->path, it->name,
                                glesc_dtype_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
                                plain ? ""
                                      : "weights of this type cannot be computed on the GPU "
                                        "by this build yet: ",
                                glesc_context_errmsg(m->ctx));
        }
    }
    glesc_tensor_set_name(w, it->name);
    *it->slot = w;
    m->n_tensors++;
    m->weight_bytes += it->vector ? (uint64_t)t->ne[0] * 4 : t->size;
    return GLESC_OK;
}

/* glesc_weights_done_fn: tensor i is on the GPU. */
static bool item_done(void *user, int i)
{
    loader *ld = user;
    ld->done += ld->items[i].info.size;
    if (ld->opts && ld->opts->progress &&
        ld->opts->progress(ld->opts->progress_user, ld->done, ld->total))
        ld->cancelled = true;
    return ld->cancelled;
}

/* Creates every tensor, then fills them all at once (glesc_weights_write:
 * the file read with pread on all cores, straight into GPU memory). */
static glesc_status upload_all(loader *ld)
{
    glesc_model *m = ld->m;
    glesc_status st = plan_all(ld);
    for (int i = 0; i < ld->n_items && st == GLESC_OK; i++)
        st = create_item(ld, &ld->items[i]);
    if (st != GLESC_OK)
        return st;
    glesc_weight_source *src = core_calloc((size_t)ld->n_items + 1, sizeof *src);
    if (!src)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: weights", ld->path);
    for (int i = 0; i < ld->n_items; i++) {
        load_item *it = &ld->items[i];
        src[i] = (glesc_weight_source){*it->slot, it->vector ? read_vector : read_matrix, it};
    }
    /* done 0 first: a caller sees the load start before any byte is read */
    if (ld->opts && ld->opts->progress && ld->opts->progress(ld->opts->progress_user, 0, ld->total))
        ld->cancelled = true;
    else
        st = glesc_weights_write(m->ctx, src, ld->n_items, item_done, ld);
    core_free(src);
    if (ld->cancelled)
        return core_err_set(NULL, GLESC_ERROR_CANCELLED,
                            "%s: loading cancelled by the progress callback after %llu of %llu "
                            "bytes",
                            ld->path, (unsigned long long)ld->done, (unsigned long long)ld->total);
    if (st != GLESC_OK) {
        /* a source's message names the file already */
        const char *msg = glesc_context_errmsg(m->ctx);
        if (strncmp(msg, ld->path, strlen(ld->path)) == 0)
            return core_err_set(NULL, st, "%s", msg);
        return core_err_set(NULL, st, "%s: uploading the weights: %s", ld->path, msg);
    }
    return GLESC_OK;
}

static char *gguf_strdup(const glesc_gguf *f, const char *key)
{
    const char *s;
    size_t n;
    if (glesc_gguf_get_str(f, key, &s, &n) != GLESC_OK)
        return NULL;
    return core_strndup(s, n);
}

/* Loads the model of an open reader; path names it in messages. */
static glesc_status load_gguf(glesc_context *ctx, const glesc_gguf *f, const char *path,
                              const glesc_model_options *opts, glesc_model **out)
{
    glesc_status st;
    glesc_stats before;
    glesc_context_stats(ctx, &before);
    glesc_model *m = core_calloc(1, sizeof *m);
    if (!m) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: model", path);
        goto fail;
    }
    m->ctx = ctx;
    if ((st = llm_hparams_load(f, path, &m->hp)) != GLESC_OK)
        goto fail;
    if (m->hp.rope_scaling == LLM_ROPE_SCALING_LLAMA3 &&
        glesc_gguf_find_tensor(f, "rope_freqs.weight") < 0) {
        st = core_err_set(NULL, GLESC_ERROR_FORMAT,
                          "%s: rope scaling 'llama3' needs the frequency factors "
                          "'rope_freqs.weight', which the file does not have",
                          path);
        goto fail;
    }
    if ((st = llm_tensors_check(f, path, &m->hp)) != GLESC_OK)
        goto fail;
    if ((st = glesc_tokenizer_load(f, &m->tok)) != GLESC_OK) {
        /* The tokenizer's own messages name the key; those of the GGUF
         * getters it calls start with the file already. */
        if (strncmp(glesc_last_errmsg(), path, strlen(path)) != 0)
            core_err_prefix(NULL, "%s", path);
        goto fail;
    }
    if (glesc_tokenizer_n_vocab(m->tok) > m->hp.n_vocab) {
        st = core_err_set(NULL, GLESC_ERROR_FORMAT,
                          "%s: the tokenizer has %d tokens but token_embd.weight only %lld rows",
                          path, (int)glesc_tokenizer_n_vocab(m->tok), (long long)m->hp.n_vocab);
        goto fail;
    }
    m->chat_template = gguf_strdup(f, "tokenizer.chat_template");
    m->name = gguf_strdup(f, "general.name");
    if (!m->name) {
        const char *slash = strrchr(path, '/');
        m->name = core_strdup(slash ? slash + 1 : path);
    }
    m->layers = core_calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->name || !m->layers) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: model", path);
        goto fail;
    }
    glesc_gguf_tensor_info q;
    glesc_gguf_tensor(f,
                      glesc_gguf_find_tensor(f, m->hp.fused_qkv ? "blk.0.attn_qkv.weight"
                                                                : "blk.0.attn_q.weight"),
                      &q);
    m->weight_type = q.type;
    loader ld = {.m = m, .f = f, .path = path, .opts = opts};
    st = upload_all(&ld);
    core_free(ld.items);
    if (st != GLESC_OK)
        goto fail;
    /* The pool's live bytes grew by exactly the weights' buffers: nothing
     * else runs on the context during the load. */
    glesc_stats after;
    glesc_context_stats(ctx, &after);
    m->gpu_bytes = after.pool_live_bytes - before.pool_live_bytes;
    *out = m;
    return GLESC_OK;
fail:
    glesc_model_destroy(m);
    return st;
}

GLESC_API void glesc_model_options_init(glesc_model_options *opts)
{
    if (opts)
        memset(opts, 0, sizeof *opts);
}

/* The checks every entry point makes before it has a reader. */
static glesc_status load_args(const char *fn, glesc_context *ctx, const void *src,
                              glesc_model **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "%s: NULL out", fn);
    *out = NULL;
    if (!ctx || !src)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "%s: NULL context or source", fn);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_model_load(glesc_context *ctx, const char *path,
                                        const glesc_model_options *opts, glesc_model **out)
{
    glesc_status st = load_args("glesc_model_load", ctx, path, out);
    if (st != GLESC_OK)
        return st;
    glesc_gguf *f = NULL;
    if ((st = glesc_gguf_open(path, &f)) != GLESC_OK)
        return st; /* the reader's message names the file and offset */
    st = load_gguf(ctx, f, path, opts, out);
    glesc_gguf_close(f);
    return st;
}

GLESC_API glesc_status glesc_model_load_gguf(glesc_context *ctx, const glesc_gguf *f,
                                             const char *name, const glesc_model_options *opts,
                                             glesc_model **out)
{
    glesc_status st = load_args("glesc_model_load_gguf", ctx, f, out);
    if (st != GLESC_OK)
        return st;
    return load_gguf(ctx, f, name ? name : "(gguf)", opts, out);
}

GLESC_API glesc_status glesc_model_load_memory(glesc_context *ctx, const void *data, size_t size,
                                               const char *name, const glesc_model_options *opts,
                                               glesc_model **out)
{
    glesc_status st = load_args("glesc_model_load_memory", ctx, data, out);
    if (st != GLESC_OK)
        return st;
    if (!name)
        name = "(memory)";
    glesc_gguf *f = NULL;
    if ((st = glesc_gguf_open_memory(data, size, name, &f)) != GLESC_OK)
        return st;
    st = load_gguf(ctx, f, name, opts, out);
    glesc_gguf_close(f);
    return st;
}

GLESC_API glesc_status glesc_model_load_fd(glesc_context *ctx, int fd, uint64_t offset,
                                           uint64_t size, const char *name,
                                           const glesc_model_options *opts, glesc_model **out)
{
    char fd_name[64];
    snprintf(fd_name, sizeof fd_name, "fd %d at offset %llu", fd, (unsigned long long)offset);
    if (!name)
        name = fd_name;
    glesc_status st = load_args("glesc_model_load_fd", ctx, name, out);
    if (st != GLESC_OK)
        return st;
    llm_fd_map map;
    if ((st = llm_fd_map_open(fd, offset, size, name, &map)) != GLESC_OK)
        return st;
    glesc_gguf *f = NULL;
    if ((st = glesc_gguf_open_memory(map.data, map.size, name, &f)) == GLESC_OK) {
        /* Mapped: the upload reads the tensors from fd with pread, so a
         * file truncated while it loads is an error, not a SIGBUS. */
        if (map.base)
            gguf_reader_pread_from(f, fd, offset);
        st = load_gguf(ctx, f, name, opts, out);
    }
    glesc_gguf_close(f);
    llm_fd_map_close(&map);
    return st;
}

GLESC_API void glesc_model_destroy(glesc_model *m)
{
    if (!m)
        return;
    if (m->layers) {
        for (int64_t l = 0; l < m->hp.n_layer; l++) {
            llm_layer *L = &m->layers[l];
            glesc_tensor *ts[] = {L->attn_norm,    L->wq,     L->wk,     L->wv,
                                  L->wqkv,         L->bq,     L->bk,     L->bv,
                                  L->q_norm,       L->k_norm, L->wo,     L->ffn_norm,
                                  L->w_gate,       L->w_up,   L->w_down, L->post_attn_norm,
                                  L->post_ffn_norm};
            for (size_t i = 0; i < CORE_ARRAY_LEN(ts); i++)
                glesc_weight_free(ts[i]);
        }
        core_free(m->layers);
    }
    glesc_weight_free(m->tok_embd);
    glesc_weight_free(m->output_norm);
    glesc_weight_free(m->output);
    glesc_weight_free(m->rope_freqs);
    glesc_weight_free(m->rope_long);
    glesc_weight_free(m->rope_short);
    glesc_tokenizer_destroy(m->tok);
    core_free(m->name);
    core_free(m->chat_template);
    core_free(m);
}

GLESC_API const glesc_tokenizer *glesc_model_tokenizer(const glesc_model *m)
{
    return m ? m->tok : NULL;
}

GLESC_API void glesc_model_get_info(const glesc_model *m, glesc_model_info *out)
{
    memset(out, 0, sizeof *out);
    if (!m)
        return;
    const llm_hparams *hp = &m->hp;
    out->arch = hp->arch_name;
    out->name = m->name;
    out->chat_template = m->chat_template;
    out->n_vocab = hp->n_vocab;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->n_ff = hp->n_ff;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->head_dim = hp->head_dim;
    out->n_ctx_train = hp->n_ctx_train;
    out->weight_type = m->weight_type;
    out->weight_bytes = m->weight_bytes;
    out->n_tensors = m->n_tensors;
    out->gpu_bytes = m->gpu_bytes;
}

/* ---- Sessions ---- */

GLESC_API glesc_status glesc_session_create(glesc_model *m, const glesc_session_options *opts,
                                            glesc_session **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_session_create: NULL out");
    *out = NULL;
    if (!m)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_session_create: NULL model");
    glesc_session_options o = {0};
    if (opts)
        o = *opts;
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
    if (o.kv_type != GLESC_DTYPE_F32 && o.kv_type != GLESC_DTYPE_F16)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "session: KV cache type %s is not supported (f32, f16)",
                            glesc_dtype_name(o.kv_type) ? glesc_dtype_name(o.kv_type) : "?");
    int64_t kv_dim = hp->n_head_kv * hp->head_dim;
    uint64_t es = o.kv_type == GLESC_DTYPE_F32 ? 4 : 2;
    uint64_t bytes = (uint64_t)kv_dim * (uint64_t)o.n_ctx * es;
    uint64_t limit = glesc_context_caps(m->ctx)->max_storage_block_size;
    if (bytes > limit)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "session: one layer's KV cache for %d positions takes %llu bytes, more "
                            "than the device's storage-block limit of %llu bytes: use a smaller "
                            "context%s",
                            (int)o.n_ctx, (unsigned long long)bytes, (unsigned long long)limit,
                            o.kv_type == GLESC_DTYPE_F32 ? " or an f16 cache" : "");

    glesc_status st = GLESC_OK;
    glesc_session *s = core_calloc(1, sizeof *s);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "session");
    s->m = m;
    s->greedy_next = -1;
    s->kv_type = o.kv_type;
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
    if (o.timing &&
        (st = glesc_graph_set_options(s->g, &(glesc_graph_options){.timing = true})) != GLESC_OK) {
        st = ctx_fail(m->ctx, st, "session: timing");
        goto fail;
    }
    if ((st = glesc_readback_create(m->ctx, &s->logits_rb)) != GLESC_OK)
        goto fail;
    glesc_stats before, after;
    glesc_context_stats(m->ctx, &before);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        int64_t shape[2] = {kv_dim, o.n_ctx};
        s->k_cache[l] = glesc_weight_new(m->ctx, o.kv_type, 2, shape);
        s->v_cache[l] = glesc_weight_new(m->ctx, o.kv_type, 2, shape);
        if (!s->k_cache[l] || !s->v_cache[l]) {
            st = ctx_fail(m->ctx, GLESC_ERROR_OUT_OF_MEMORY, "session: KV cache");
            goto fail;
        }
    }
    glesc_context_stats(m->ctx, &after);
    s->kv_bytes = after.pool_live_bytes - before.pool_live_bytes;
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
        return ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "eval: the inputs");
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
        return ctx_fail(ctx, st, "eval: inputs");
    int32_t *pos = s->in_scratch;
    for (int32_t i = 0; i < n; i++)
        pos[i] = s->n_past + i;
    if ((st = glesc_tensor_write(s->in_ids[slot], ids, (size_t)n * 4)) != GLESC_OK ||
        (st = glesc_tensor_write(s->in_pos[slot], pos, (size_t)n * 4)) != GLESC_OK)
        return ctx_fail(ctx, st, "eval: inputs");
    if (!y && !(y = llm_forward(s, s->in_ids[slot], s->in_pos[slot], n, all)))
        return ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT, "eval: building the step's graph");
    uint64_t t1 = core_time_ns();
    if ((st = glesc_graph_compute(g, &y, 1)) != GLESC_OK)
        return ctx_fail(ctx, st, "eval");
    /* the last row goes to the host through a copy and its fence; without
     * logits, a copy of the ids marks where this batch ends (in_wait) */
    bool row = logits && !all;
    if (row)
        st = glesc_readback_start(s->logits_rb, y);
    else if (!logits && (st = glesc_readback_start(s->in_rb[slot], s->in_ids[slot])) == GLESC_OK)
        s->in_fenced[slot] = true;
    if (st != GLESC_OK)
        return ctx_fail(ctx, st, "eval");
    uint64_t t2 = core_time_ns();
    s->last.build_ns += t1 - t0;
    s->last.submit_ns += t2 - t1;
    s->n_past += n;
    glesc_compute_stats cs;
    glesc_graph_stats(g, &cs);
    s->last.n_tokens = n;
    s->last.kernels = cs.kernels;
    s->last.dispatches = cs.dispatches;
    s->last.plan_reused = cs.plan_reused;
    s->last.glsl_built = cs.glsl_built;
    s->last.programs_compiled = cs.programs_compiled;
    s->total_dispatches += (uint64_t)cs.dispatches;
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
    if (!logits)
        return GLESC_OK;
    size_t rows = all ? (size_t)n : 1;
    size_t n_vocab = (size_t)s->m->hp.n_vocab;
    uint64_t t3 = core_time_ns();
    st = row ? glesc_readback_finish(s->logits_rb, logits, n_vocab * sizeof *logits)
             : glesc_tensor_read_f32(y, logits, rows * n_vocab);
    if (st != GLESC_OK)
        return ctx_fail(ctx, st, "eval: reading the logits");
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

static glesc_status greedy_setup(glesc_session *s);

/* Plans and compiles (compute_prepare, nothing runs) the graph of a batch
 * of n tokens after n_past cached positions; greedy: a decode step with the
 * arg max on the GPU (glesc_session_eval_greedy's graph). */
static glesc_status precompile_one(glesc_session *s, int32_t n_past, int32_t n, bool greedy)
{
    glesc_context *ctx = s->m->ctx;
    glesc_graph *g = s->g;
    int slot = s->in_slot;
    glesc_status st = greedy ? greedy_setup(s) : in_wait(s, slot);
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
        return ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT, "precompile: building a step's graph");
    st = compute_prepare(g, y);
    compute_state *cs = compute_state_get(ctx);
    if (cs)
        compute_prepared_drop(cs); /* compiled, never to run */
    glesc_graph_reset(g);
    if (st != GLESC_OK)
        return ctx_fail(ctx, st, "precompile");
    return GLESC_OK;
}

GLESC_API glesc_status glesc_session_precompile(glesc_session *s)
{
    core_err_reset(NULL);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_precompile: NULL session");
    s->pre_y = NULL; /* a decode step recorded ahead is built again */
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
        st = precompile_one(s, 0, n, false);
        if (st == GLESC_OK && n < s->n_ctx)
            st = precompile_one(s, CORE_MIN(1, s->n_ctx - n), n, false);
    }
    if (st == GLESC_OK && s->n_ctx > 1)
        st = precompile_one(s, 1, 1, true);
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

/* ---- Pipelined greedy decoding ---- */

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

/* The slots and readbacks, on first use. */
static glesc_status greedy_setup(glesc_session *s)
{
    glesc_context *ctx = s->m->ctx;
    for (int i = 0; i < 2; i++) {
        if (!s->next_id[i] &&
            !(s->next_id[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){1})))
            return ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "greedy eval: the token slots");
        if (!s->pos[i] && !(s->pos[i] = glesc_weight_new(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){1})))
            return ctx_fail(ctx, GLESC_ERROR_OUT_OF_MEMORY, "greedy eval: the positions");
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
    glesc_status st = greedy_setup(s);
    if (st != GLESC_OK)
        return st;
    glesc_context *ctx = s->m->ctx;
    glesc_tensor *in = s->next_id[s->next_slot], *out = s->next_id[1 - s->next_slot];
    /* a given token goes where the eval before wrote its arg max: wait for
     * that eval first (its token is kept for glesc_session_greedy_id) */
    for (int i = 0; id >= 0 && i < s->n_pend; i++)
        greedy_wait(s, (s->pend_head + i) % 2);
    if (id >= 0 && (st = glesc_tensor_write(in, &id, sizeof id)) != GLESC_OK)
        return ctx_fail(ctx, st, "greedy eval: the token");
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
        return ctx_fail(ctx, st, "greedy eval: the position");
    /* the arg max of the logits into the other slot: folded into the
     * output head's kernel (the logits never reach memory) */
    glesc_tensor *y = llm_forward(s, in, pos_t, 1, false);
    y = glesc_cpy(g, glesc_reduce(g, GLESC_OP_ARGMAX, y, 0), out);
    if (!y)
        return ctx_fail(ctx, GLESC_ERROR_INVALID_ARGUMENT,
                        "greedy eval: building the step's graph");
    int slot = (s->pend_head + s->n_pend) % 2;
    uint64_t t_submit = core_time_ns();
    if ((st = glesc_graph_compute(g, &y, 1)) != GLESC_OK ||
        (st = glesc_readback_start(s->pend[slot].rb, out)) != GLESC_OK)
        return ctx_fail(ctx, st, "greedy eval");
    s->pend[slot].pos = pos;
    s->pend[slot].token = id;
    s->pend[slot].done = false;
    s->n_pend++;
    s->n_past++;
    s->next_slot ^= 1;
    s->chain = true;
    s->has_logits = false;
    s->greedy_next = -1;
    glesc_compute_stats cs;
    glesc_graph_stats(g, &cs);
    s->last.n_tokens = 1;
    s->last.kernels = cs.kernels;
    s->last.dispatches = cs.dispatches;
    s->last.plan_reused = cs.plan_reused;
    s->last.glsl_built = cs.glsl_built;
    s->last.programs_compiled = cs.programs_compiled;
    s->total_dispatches += (uint64_t)cs.dispatches;
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
        return ctx_fail(s->m->ctx, st, "reading a greedy eval's token");
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

GLESC_API const float *glesc_session_logits(const glesc_session *s)
{
    return s && s->has_logits ? s->logits : NULL;
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
