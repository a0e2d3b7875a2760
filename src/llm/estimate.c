/*
 * estimate.c — glesc_model_estimate: the memory a model and one session of
 * it will take, from a GGUF file's metadata and tensor table alone.
 *
 * GPU bytes are the engine's own answer for each tensor
 * (glesc_weight_gpu_bytes: block types repacked to whole 32-bit words,
 * split into row chunks beyond the storage-block limit, each buffer at its
 * exact size). The tests compare the weights and the KV cache with what a
 * load and a session then take, byte for byte.
 *
 * The activations of a step are bounded from the graph of forward.c: every
 * intermediate tensor of one layer, the step's inputs and its output head,
 * each in its own pool buffer (the plan releases a layer's buffers to the
 * pool, which hands them to the next layer). Host bytes are bounded from
 * the tokenizer's sizes (tokens, their text, merges) and the model's tensor
 * records.
 */
#include <string.h>

#include "llm/runtime.h"
#include "llm/tokenizer/tokenizer.h"

/* GPU bytes of a persistent tensor [ne0, ne1] of type t on ctx. */
static uint64_t gpu_bytes(const glesc_context *ctx, glesc_dtype t, int64_t ne0, int64_t ne1)
{
    return glesc_weight_gpu_bytes(ctx, t, 2, (int64_t[]){ne0, ne1});
}

/* At most what an activation of that size takes: its pool buffer is
 * rounded up to a size class, at most 25% more (and at least 256 bytes). */
static uint64_t act_bytes(const glesc_context *ctx, glesc_dtype t, int64_t ne0, int64_t ne1)
{
    uint64_t b = gpu_bytes(ctx, t, ne0, ne1);
    return CORE_MAX(b + b / 4, 256);
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

/* Adds the string s[0..len) to seen (by its 64-bit hash) when it is new,
 * counting it. false on out-of-memory. */
static bool see(core_map *seen, const char *s, size_t len, uint64_t *count, uint64_t *bytes)
{
    uint64_t h = core_hash64_bytes(s, len);
    uint32_t v;
    if (core_map_get(seen, h, &v))
        return true;
    (*count)++;
    *bytes += len;
    return core_map_add(seen, h, 0);
}

/* The strings BPE merges add to the tokenizer's string table: each merge
 * "left right" interns its halves and their concatenation (tok_add_merge),
 * which in real vocabularies are tokens already. Counted exactly (strings
 * told apart by 64-bit hashes); where the scratch set cannot be had, the
 * bound of three new strings per merge. */
static void merge_strings(const glesc_gguf *f, uint64_t n, uint64_t n_merges, uint64_t merge_text,
                          uint64_t *count, uint64_t *bytes)
{
    *count = 3 * n_merges;
    *bytes = 2 * merge_text;
    if (!n_merges || n + 3 * n_merges > ((uint64_t)1 << 29))
        return;
    core_map seen;
    core_map_init(&seen);
    uint64_t c = 0, b = 0, tok_c = 0, tok_b = 0;
    bool ok = true;
    for (uint64_t k = 0; k < n && ok; k++) {
        const char *s;
        size_t len;
        if (glesc_gguf_get_arr_str(f, "tokenizer.ggml.tokens", k, &s, &len) == GLESC_OK)
            ok = see(&seen, s, len, &tok_c, &tok_b);
    }
    char stack[512];
    for (uint64_t k = 0; k < n_merges && ok; k++) {
        const char *s;
        size_t len;
        if (glesc_gguf_get_arr_str(f, "tokenizer.ggml.merges", k, &s, &len) != GLESC_OK)
            continue;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue; /* the load refuses it */
        size_t nl = (size_t)(sp - s), nr = len - nl - 1;
        char *cat = nl + nr <= sizeof stack ? stack : core_malloc(nl + nr);
        if (!cat) {
            ok = false;
            break;
        }
        memcpy(cat, s, nl);
        memcpy(cat + nl, sp + 1, nr);
        ok = see(&seen, s, nl, &c, &b) && see(&seen, sp + 1, nr, &c, &b) &&
             see(&seen, cat, nl + nr, &c, &b);
        if (cat != stack)
            core_free(cat);
    }
    core_map_free(&seen);
    if (ok) {
        *count = c;
        *bytes = b;
    }
}

/* Host bytes the tokenizer keeps, bounded from the growth of its
 * containers (tokenizer/tokenizer.c, tokenizer/strtab.c) rather than their exact
 * types: arrays that double (so at most twice what they hold, from a first
 * size), hash maps of 16-byte slots at most half full (so at most four
 * slots per entry). Strings are the token texts and what merges add; per
 * token a record, a piece offset, the piece and an end-of-generation flag;
 * per merge a map entry and a result id; the special-token lists; for BPE
 * an allowance for the compiled pre-tokenizer regexes (pcre2 sizes them).
 * The tests hold this against what real vocabularies take. */
uint64_t llm_tokenizer_host_bytes(const glesc_gguf *f)
{
    uint64_t n, text, n_merges, merge_text, new_strings, new_bytes;
    string_array(f, "tokenizer.ggml.tokens", &n, &text);
    string_array(f, "tokenizer.ggml.merges", &n_merges, &merge_text);
    merge_strings(f, n, n_merges, merge_text, &new_strings, &new_bytes);
    uint64_t n_special = n; /* unless the token types say fewer */
    glesc_gguf_type et;
    uint64_t nt;
    const void *types;
    if (glesc_gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &nt, &types) == GLESC_OK &&
        et == GLESC_GGUF_INT32 && nt == n) {
        n_special = 0;
        for (uint64_t k = 0; k < n; k++) {
            int32_t t = (int32_t)core_le32((const uint8_t *)types + 4 * k);
            n_special += t == GLESC_TOKEN_TYPE_UNKNOWN || t == GLESC_TOKEN_TYPE_CONTROL ||
                         t == GLESC_TOKEN_TYPE_USER_DEFINED;
        }
    }
    uint64_t strings = n + new_strings, arena = text + new_bytes;
    uint64_t bytes = sizeof(glesc_tokenizer);
    bytes += 2 * arena + 65536;              /* the string arena */
    bytes += 2 * 2 * 4 * strings + 8192;     /* offsets and lengths */
    bytes += 4 * 16 * strings + 32768;       /* the string map */
    bytes += n * (sizeof(tok_info) + 4 + 1); /* records, piece offsets, flags */
    bytes += 2 * text + 128;                 /* pieces */
    if (n_merges) {
        bytes += 4 * 16 * n_merges + 65536; /* the merge map */
        bytes += 2 * 4 * n_merges + 16384;  /* merge results by rank */
        bytes += 256 * 1024;                /* the pre-tokenizer's regexes */
    }
    bytes += 3 * 4 * n_special; /* specials, their per-byte lists */
    return bytes;
}

GLESC_API glesc_status glesc_model_estimate(const glesc_context *ctx, const glesc_gguf *f,
                                            const glesc_session_options *opts,
                                            glesc_model_memory *out)
{
    core_err_reset(NULL);
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
    glesc_session_options o;
    if ((st = core_struct_read(NULL, &o, sizeof o, opts, "glesc_model_estimate")) != GLESC_OK)
        return st;
    if (o.n_ctx < 0 || o.n_batch < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_model_estimate: session options n_ctx %d and n_batch %d must "
                            "not be negative",
                            (int)o.n_ctx, (int)o.n_batch);
    glesc_dtype kt, vt;
    if ((st = llm_kv_types(&o, &hp, "glesc_model_estimate", &kt, &vt)) != GLESC_OK)
        return st;
    /* The session's defaults (glesc_session_create). */
    if (o.n_ctx == 0)
        o.n_ctx = (int32_t)CORE_MIN(hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096, 4096);
    if (o.n_batch == 0)
        o.n_batch = 512;
    o.n_batch = CORE_MIN(o.n_batch, o.n_ctx);

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
        uint64_t b = vector ? gpu_bytes(ctx, GLESC_DTYPE_F32, t.ne[0], 1)
                            : gpu_bytes(ctx, t.type, t.ne[0], t.ne[1]);
        if (b == 0) {
            st = core_err_set(NULL, GLESC_ERROR_LIMIT,
                              "%s: tensor '%s' (%s, [%lld, %lld]) cannot be stored on this "
                              "device: a row exceeds its storage-block limit",
                              name, req[r].name, glesc_dtype_name(t.type), (long long)t.ne[0],
                              (long long)t.ne[1]);
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
    out->kv_bytes = (uint64_t)hp.n_layer *
                    (gpu_bytes(ctx, kt, kv_dim, o.n_ctx) + gpu_bytes(ctx, vt, kv_dim, o.n_ctx));

    /* One step of n tokens: the inputs (ids, positions), the residual and
     * the norms [n_embd, n] (four live across a layer), q and the attention
     * output [n_head·head_dim, n], k and v [kv_dim, n], gate and up
     * [n_ff, n], and the head's norm and logits (every row, the most a step
     * reads back). */
    int64_t n = o.n_batch, q_dim = hp.n_head * hp.head_dim;
    const glesc_dtype t = GLESC_DTYPE_F32;
    out->scratch_bytes = 2 * act_bytes(ctx, t, n, 1) + 5 * act_bytes(ctx, t, hp.n_embd, n) +
                         2 * act_bytes(ctx, t, q_dim, n) + 2 * act_bytes(ctx, t, kv_dim, n) +
                         2 * act_bytes(ctx, t, hp.n_ff, n) + act_bytes(ctx, t, hp.n_vocab, n);
    out->gpu_bytes = out->weight_bytes + out->kv_bytes + out->scratch_bytes;

    /* Host: the tokenizer, the model and its tensor records (an allowance
     * of 1 KiB each for the tensor, its pool buffer records and its name),
     * the session's cache records, graph and logits row. */
    uint64_t per_tensor = 1024;
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
