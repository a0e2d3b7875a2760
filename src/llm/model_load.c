/*
 * model_load.c — models (glesc_llm.h): loading a GGUF model onto the GPU,
 * from a path, a reader, memory or a descriptor range (fd_map.c), and the
 * model object itself.
 *
 * Loading validates everything before the first byte goes to the GPU
 * (model.c: architecture, hyperparameters, every tensor's name and shape),
 * then creates every tensor as glesc_weight_new would (matrices in their
 * own type, so a block-quantized type works as soon as the graph layer
 * accepts it, and is refused with the tensor named until then; norm vectors
 * as f32), but without memory yet (graph_weight_new_unbacked: each buffer
 * gets it just ahead of the threads that fill it, so a driver that
 * zero-fills new buffers, as llvmpipe does, does so while the buffers
 * before are filled, not all before the first byte is read), and fills
 * them all in one glesc_weights_write: worker threads read the
 * file's bytes with glesc_gguf_tensor_read (pread, not through the mapping:
 * a model file truncated or rewritten while it loads is then an error
 * naming it, not a SIGBUS) and repack them straight into GPU memory, while
 * this thread keeps the GL work and reports progress tensor by tensor.
 */
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "graph/graph.h"
#include "llm/runtime.h"
#include "quant/quant.h"

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
        w = graph_weight_new_unbacked(m->ctx, GLESC_DTYPE_F32, 1, (int64_t[]){t->ne[0]});
        if (!w)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: tensor '%s': %s", ld->path,
                                it->name, glesc_context_errmsg(m->ctx));
    } else {
        w = graph_weight_new_unbacked(m->ctx, t->type, 2, (int64_t[]){t->ne[0], t->ne[1]});
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

/* Creates every tensor (no memory yet), then fills them all at once
 * (glesc_weights_write: the buffers allocated on the way, the file read
 * with pread on all cores, straight into GPU memory). */
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
    glesc_model_options o;
    glesc_status st = core_struct_read(NULL, &o, sizeof o, opts, "glesc_model_load");
    if (st != GLESC_OK)
        return st;
    uint64_t live0 = llm_pool_live_bytes(ctx);
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
    if ((st = llm_model_hash(f, path, &m->hash)) != GLESC_OK)
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
    loader ld = {.m = m, .f = f, .path = path, .opts = &o};
    st = upload_all(&ld);
    core_free(ld.items);
    if (st != GLESC_OK)
        goto fail;
    /* The pool's live bytes grew by exactly the weights' buffers: nothing
     * else runs on the context during the load. */
    m->gpu_bytes = llm_pool_live_bytes(ctx) - live0;
    *out = m;
    return GLESC_OK;
fail:
    glesc_model_destroy(m);
    return st;
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
