/*
 * estimate.c — glesc_model_estimate: the memory a model and one session of
 * it will take, from a GGUF file's metadata and tensor table alone.
 *
 * GPU bytes follow the allocation path exactly: a persistent tensor's bytes
 * are its GPU rows (graph_row_bytes: block types repacked to whole 32-bit
 * words) rounded to a word, split into chunks of whole rows beyond the
 * storage-block limit (graph_storage_alloc), and every buffer is rounded up
 * to the pool's size class (gl_pool_acquire). The tests compare the weights
 * and the KV cache with what a load and a session then take, byte for byte,
 * so a change to either path shows up there.
 *
 * The activations of a step are bounded from the graph of forward.c: every
 * intermediate tensor of one layer, the step's inputs and its output head,
 * each in its own pool buffer (the plan releases a layer's buffers to the
 * pool, which hands them to the next layer). Host bytes are bounded from
 * the tokenizer's sizes (tokens, their text, merges) and the model's tensor
 * records.
 */
#include <string.h>

#include "gl/gl.h"
#include "graph/graph.h"
#include "llm/llm.h"
#include "llm/runtime.h"

/* GPU bytes of a persistent tensor [ne0, ne1] of type t (as
 * graph_storage_alloc and gl_pool_acquire allocate it); 0 when it cannot be
 * split to fit the limit. */
static uint64_t tensor_gpu_bytes(glesc_dtype t, int64_t ne0, int64_t ne1, uint64_t limit)
{
    uint64_t row = graph_row_bytes(t, ne0);
    uint64_t bytes = (row * (uint64_t)ne1 + 3) & ~(uint64_t)3;
    if (bytes <= limit) {
        uint64_t cls = gl_pool_size_class(bytes);
        return cls > limit ? limit : cls;
    }
    if (row > limit || row % 4)
        return 0;
    uint64_t chunk_rows = limit / row, total = 0;
    for (uint64_t done = 0; done < (uint64_t)ne1; done += chunk_rows) {
        uint64_t sz = CORE_MIN(chunk_rows, (uint64_t)ne1 - done) * row;
        uint64_t cls = gl_pool_size_class(sz);
        total += cls > limit ? limit : cls;
    }
    return total;
}

/* A pool buffer of n f32 (or i32) elements. */
static uint64_t act_bytes(int64_t n)
{
    return gl_pool_size_class((uint64_t)n * 4);
}

/* The capacity a buffer that starts at start and doubles reaches for need. */
static uint64_t doubled(uint64_t need, uint64_t start)
{
    uint64_t c = start;
    while (c < need)
        c *= 2;
    return c;
}

/* Count and total bytes of the string array key (0, 0 when absent). */
static void string_array(const glesc_gguf *f, const char *key, uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    int64_t i = glesc_gguf_find_key(f, key);
    if (i < 0 || glesc_gguf_arr_type(f, i) != GLESC_GGUF_STRING)
        return;
    *n = glesc_gguf_arr_n(f, i);
    for (uint64_t k = 0; k < *n; k++) {
        const char *s;
        size_t len;
        if (glesc_gguf_get_arr_str(f, key, k, &s, &len) == GLESC_OK)
            *bytes += len;
    }
}

/* Host bytes the tokenizer keeps, following its containers' growth
 * (tokenizer.c): the string table (token texts and, for BPE, each merge's
 * halves and result: at most three new strings of at most twice the merge's
 * bytes), its open-addressing slots (load factor at most a half), per-token
 * records and pieces, the merge table, the special-token lists, and for BPE
 * the compiled pre-tokenizer regexes (an allowance: pcre2 sizes them). */
uint64_t llm_tokenizer_host_bytes(const glesc_gguf *f)
{
    uint64_t n, text, n_merges, merge_text;
    string_array(f, "tokenizer.ggml.tokens", &n, &text);
    string_array(f, "tokenizer.ggml.merges", &n_merges, &merge_text);
    uint64_t n_special = n; /* unless the token types say fewer */
    glesc_gguf_type et;
    uint64_t nt;
    const void *types;
    if (glesc_gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &nt, &types) == GLESC_OK &&
        et == GLESC_GGUF_INT32 && nt == n) {
        n_special = 0;
        for (uint64_t k = 0; k < n; k++) {
            int32_t t;
            memcpy(&t, (const char *)types + 4 * k, 4); /* little-endian hosts */
            n_special += t == GLESC_TOKEN_TYPE_UNKNOWN || t == GLESC_TOKEN_TYPE_CONTROL ||
                         t == GLESC_TOKEN_TYPE_USER_DEFINED;
        }
    }
    uint64_t strings = n + 3 * n_merges, arena = text + 2 * merge_text;
    uint64_t bytes = sizeof(glesc_tokenizer);
    bytes += doubled(arena, 65536);
    bytes += 2 * doubled(strings, 1024) * sizeof(uint32_t);
    bytes += doubled(2 * strings + 2, 2048) * sizeof(uint32_t);
    bytes += n * sizeof(tok_info) + (n + 1) * sizeof(uint32_t) + n; /* info, piece_off, eog */
    bytes += doubled(text + 1, 64);                                 /* pieces */
    if (n_merges)
        bytes += doubled(2 * n_merges + 2, 4096) * sizeof(tok_merge_slot);
    bytes += 3 * n_special * sizeof(int32_t); /* specials, their per-byte lists */
    if (n_merges)
        bytes += 256 * 1024;
    /* Slack for what the tokenizer adds around these (small lists, the
     * decoder's tables): a sixteenth. */
    return bytes + bytes / 16 + 4096;
}

GLESC_API glesc_status glesc_model_estimate(const glesc_context *ctx, const glesc_gguf *f,
                                            const glesc_session_options *opts,
                                            glesc_model_memory *out)
{
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_model_estimate: NULL out");
    memset(out, 0, sizeof *out);
    if (!f)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_model_estimate: NULL file");
    const char *name = "(gguf)";
    llm_hparams hp;
    glesc_status st = llm_hparams_load(f, name, &hp);
    if (st != GLESC_OK || (st = llm_tensors_check(f, name, &hp)) != GLESC_OK)
        return st;
    glesc_session_options o = {0};
    if (opts)
        o = *opts;
    if (o.n_ctx < 0 || o.n_batch < 0 ||
        (o.kv_type != GLESC_DTYPE_F32 && o.kv_type != GLESC_DTYPE_F16))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_model_estimate: session options n_ctx %d, n_batch %d, KV type "
                            "%s (n_ctx and n_batch must not be negative, the type f32 or f16)",
                            (int)o.n_ctx, (int)o.n_batch,
                            glesc_dtype_name(o.kv_type) ? glesc_dtype_name(o.kv_type) : "?");
    /* The session's defaults (glesc_session_create). */
    if (o.n_ctx == 0)
        o.n_ctx = (int32_t)CORE_MIN(hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096, 4096);
    if (o.n_batch == 0)
        o.n_batch = 256;
    o.n_batch = CORE_MIN(o.n_batch, o.n_ctx);
    uint64_t limit = ctx ? glesc_context_caps(ctx)->max_storage_block_size : UINT64_MAX;

    int n_req;
    llm_tensor_req *req = llm_tensor_reqs(&hp, &n_req);
    if (!req)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "glesc_model_estimate");
    int n_tensors = 0;
    for (int r = 0; r < n_req; r++) {
        int64_t ti = glesc_gguf_find_tensor(f, req[r].name);
        if (ti < 0)
            continue; /* an optional tensor the file does not have */
        glesc_gguf_tensor_info t;
        glesc_gguf_tensor(f, ti, &t);
        bool vector = req[r].n_dims == 1; /* uploaded as f32 */
        uint64_t b = vector ? tensor_gpu_bytes(GLESC_DTYPE_F32, t.ne[0], 1, limit)
                            : tensor_gpu_bytes(t.type, t.ne[0], t.ne[1], limit);
        if (b == 0) {
            st = core_err_set(NULL, GLESC_ERROR_LIMIT,
                              "%s: tensor '%s' (%s, [%lld, %lld]): a row does not fit the "
                              "device's storage-block limit of %llu bytes",
                              name, req[r].name, glesc_dtype_name(t.type), (long long)t.ne[0],
                              (long long)t.ne[1], (unsigned long long)limit);
            break;
        }
        out->weight_bytes += b;
        n_tensors++;
    }
    core_free(req);
    if (st != GLESC_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }

    int64_t kv_dim = hp.n_head_kv * hp.head_dim;
    out->kv_bytes = 2 * (uint64_t)hp.n_layer * tensor_gpu_bytes(o.kv_type, kv_dim, o.n_ctx, limit);

    /* One step of n tokens: the inputs (ids, positions), the residual and
     * the norms [n_embd, n] (four live across a layer), q and the attention
     * output [n_head·head_dim, n], k and v [kv_dim, n], gate and up
     * [n_ff, n], and the head's norm and logits (every row, the most a step
     * reads back). */
    int64_t n = o.n_batch, q_dim = hp.n_head * hp.head_dim;
    out->scratch_bytes = 2 * act_bytes(n) + 5 * act_bytes(hp.n_embd * n) +
                         2 * act_bytes(q_dim * n) + 2 * act_bytes(kv_dim * n) +
                         2 * act_bytes(hp.n_ff * n) + act_bytes(hp.n_vocab * n);
    out->gpu_bytes = out->weight_bytes + out->kv_bytes + out->scratch_bytes;

    /* Host: the tokenizer, the model and its tensor records (each with one
     * pool buffer record, its chunks list and its name), the session's
     * cache records, graph and logits row. */
    uint64_t per_tensor = sizeof(glesc_tensor) + sizeof(gl_buffer) + 2 * sizeof(void *) + 64;
    out->host_bytes = llm_tokenizer_host_bytes(f) + sizeof(glesc_model) +
                      (uint64_t)hp.n_layer * sizeof(llm_layer) + (uint64_t)n_tensors * per_tensor +
                      4096 /* name, template, slack */ + sizeof(glesc_session) +
                      2 * (uint64_t)hp.n_layer * per_tensor + (uint64_t)hp.n_vocab * sizeof(float) +
                      64 * 1024 /* the graph */;
    size_t tmpl_len = 0;
    const char *tmpl;
    if (glesc_gguf_get_str(f, "tokenizer.chat_template", &tmpl, &tmpl_len) == GLESC_OK)
        out->host_bytes += tmpl_len + 1;
    return GLESC_OK;
}
