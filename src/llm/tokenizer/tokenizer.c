/*
 * tokenizer.c — the tokenizer object: created empty for a vocabulary size,
 * filled token by token and merge by merge (load.c drives this
 * from a GGUF file), finished by finish.c; its getters and its
 * destruction. Encoding is in partition.c (special tokens) with
 * spm.c and bpe.c, decoding in decode.c.
 *
 * The behaviour mirrors llama.cpp's llama-vocab.cpp so that ids match its
 * test vectors. Where we differ it is said at the spot.
 */
#include <stdio.h>
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

/* ---- Construction ---- */

glesc_status tok_create(glesc_tokenizer_kind kind, const char *pre, size_t pre_len,
                        uint32_t n_tokens, glesc_tokenizer **out)
{
    *out = NULL;
    if (n_tokens == 0 || n_tokens > INT32_MAX / 2)
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "tokenizer.ggml.tokens: %u tokens", n_tokens);
    const tok_pre_def *pd = NULL;
    if (kind == GLESC_TOKENIZER_BPE) {
        if (!pre || pre_len == 0) {
            /* llama.cpp warns ("GENERATION QUALITY WILL BE DEGRADED") and
             * uses the default regexes. */
            core_log(CORE_LOG_WARN, "tokenizer.ggml.pre is missing: using 'default'");
            pre = "default";
            pre_len = 7;
        }
        pd = tok_pre_find(pre, pre_len);
        if (!pd)
            return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                                "tokenizer.ggml.pre: unknown pre-tokenizer '%.*s'", (int)pre_len,
                                pre);
    }
    glesc_tokenizer *t = core_calloc(1, sizeof *t);
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->kind = kind;
    t->pre = pd;
    t->n_tokens = n_tokens;
    tok_strtab_init(&t->strs);
    t->info = core_calloc(n_tokens, sizeof *t->info);
    if (!t->info) {
        core_free(t);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    t->eot = t->eom = t->sep = t->pad = -1;
    t->nl = -1;
    if (kind == GLESC_TOKENIZER_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_eos = false;
        t->add_space_prefix = true;
        t->clean_spaces = false;
    } else {
        t->bos = 11;
        t->eos = 11;
        t->unk = -1;
        t->add_bos = pd->add_bos;
        t->add_eos = false;
        t->add_space_prefix = false;
        t->clean_spaces = pd->clean_spaces;
        t->ignore_merges = pd->ignore_merges;
    }
    *out = t;
    return GLESC_OK;
}

glesc_status tok_set_token(glesc_tokenizer *t, uint32_t id, const char *text, size_t len,
                           float score, int type)
{
    if (id != t->strs.n || id >= t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "tokenizer.ggml.tokens entry %u: set out of order", id);
    char empty[32];
    if (len == 0) {
        /* llama.cpp renames empty tokens so that the table stays one-to-one. */
        int n = snprintf(empty, sizeof empty, "[EMPTY_%u]", id);
        text = empty;
        len = (size_t)n;
    }
    bool added = false;
    int32_t got = tok_strtab_intern(&t->strs, text, len, &added);
    if (got < 0)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "tokenizer.ggml.tokens entry %u: out of memory", id);
    if (!added)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "tokenizer.ggml.tokens entry %u: duplicate of entry %d ('%.*s')", id,
                            got, (int)CORE_MIN(len, 64), text);
    tok_info *ti = &t->info[id];
    ti->score = score;
    ti->type = (uint8_t)(type >= 0 && type <= 255 ? type : 0);
    switch (type) {
    case GLESC_TOKEN_TYPE_NORMAL:
        ti->attr = TOK_ATTR_NORMAL;
        break;
    case GLESC_TOKEN_TYPE_UNKNOWN:
        ti->attr = TOK_ATTR_UNKNOWN;
        break;
    case GLESC_TOKEN_TYPE_CONTROL:
        ti->attr = TOK_ATTR_CONTROL;
        break;
    case GLESC_TOKEN_TYPE_USER_DEFINED:
        ti->attr = TOK_ATTR_USER_DEFINED;
        break;
    case GLESC_TOKEN_TYPE_UNUSED:
        ti->attr = TOK_ATTR_UNUSED;
        break;
    case GLESC_TOKEN_TYPE_BYTE:
        ti->attr = TOK_ATTR_BYTE;
        break;
    default:
        ti->attr = 0; /* undefined: renders as nothing, like llama.cpp */
        break;
    }
    return GLESC_OK;
}

/* Makes merge_result hold rank. */
static bool merge_result_grow(glesc_tokenizer *t, uint32_t rank)
{
    if (rank < t->merge_result_cap)
        return true;
    if (rank >= INT32_MAX)
        return false;
    uint32_t cap = t->merge_result_cap ? t->merge_result_cap : 4096;
    while (cap <= rank)
        cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
    int32_t *v = core_realloc(t->merge_result, (size_t)cap * sizeof *v);
    if (!v)
        return false;
    t->merge_result = v;
    t->merge_result_cap = cap;
    return true;
}

glesc_status tok_add_merge(glesc_tokenizer *t, uint32_t rank, const char *text, size_t len)
{
    /* "left right": split at the first space after the first byte (a half may
     * itself start with a space in vocabularies that keep raw spaces). */
    const char *sp = len > 1 ? memchr(text + 1, ' ', len - 1) : NULL;
    if (!sp)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "tokenizer.ggml.merges entry %u: no space separating the two halves "
                            "in '%.*s'",
                            rank, (int)CORE_MIN(len, 64), text);
    size_t nl = (size_t)(sp - text), nr = len - nl - 1;
    char stack[256];
    char *cat = nl + nr <= sizeof stack ? stack : core_malloc(nl + nr);
    if (!cat)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "tokenizer.ggml.merges entry %u: out of memory", rank);
    memcpy(cat, text, nl);
    memcpy(cat + nl, sp + 1, nr);
    int32_t l = tok_strtab_intern(&t->strs, text, nl, NULL);
    int32_t r = l >= 0 ? tok_strtab_intern(&t->strs, sp + 1, nr, NULL) : -1;
    int32_t res = r >= 0 ? tok_strtab_intern(&t->strs, cat, nl + nr, NULL) : -1;
    if (cat != stack)
        core_free(cat);
    if (res < 0)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "tokenizer.ggml.merges entry %u: out of memory", rank);
    uint64_t key = tok_merge_key(l, r);
    uint32_t seen;
    if (core_map_get(&t->merges, key, &seen))
        return GLESC_OK; /* a repeated pair keeps its first (best) rank */
    if (!merge_result_grow(t, rank) || !core_map_add(&t->merges, key, rank))
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "tokenizer.ggml.merges entry %u: out of memory", rank);
    t->merge_result[rank] = res;
    return GLESC_OK;
}

GLESC_API void glesc_tokenizer_destroy(glesc_tokenizer *t)
{
    if (!t)
        return;
    tok_bpe_release(t);
    tok_strtab_free(&t->strs);
    core_free(t->info);
    core_free(t->pieces);
    core_free(t->piece_off);
    core_map_free(&t->merges);
    core_free(t->merge_result);
    core_free(t->specials);
    core_free(t->sp_list[0]);
    core_free(t->sp_list[1]);
    core_free(t->eog);
    core_free(t);
}

/* ---- Getters ---- */

GLESC_API glesc_tokenizer_kind glesc_tokenizer_get_kind(const glesc_tokenizer *t)
{
    return t->kind;
}

GLESC_API const char *glesc_tokenizer_pre_name(const glesc_tokenizer *t)
{
    return t->kind == GLESC_TOKENIZER_SPM ? "spm" : t->pre->name;
}

GLESC_API int32_t glesc_tokenizer_n_vocab(const glesc_tokenizer *t)
{
    return (int32_t)t->n_tokens;
}

GLESC_API int32_t glesc_tokenizer_bos(const glesc_tokenizer *t)
{
    return t->bos;
}

GLESC_API int32_t glesc_tokenizer_eos(const glesc_tokenizer *t)
{
    return t->eos;
}

GLESC_API int32_t glesc_tokenizer_eot(const glesc_tokenizer *t)
{
    return t->eot;
}

GLESC_API int32_t glesc_tokenizer_unk(const glesc_tokenizer *t)
{
    return t->unk;
}

GLESC_API int32_t glesc_tokenizer_pad(const glesc_tokenizer *t)
{
    return t->pad;
}

GLESC_API int32_t glesc_tokenizer_nl(const glesc_tokenizer *t)
{
    return t->nl;
}

GLESC_API bool glesc_tokenizer_adds_bos(const glesc_tokenizer *t)
{
    return t->add_bos;
}

GLESC_API bool glesc_tokenizer_adds_eos(const glesc_tokenizer *t)
{
    return t->add_eos;
}

GLESC_API bool glesc_tokenizer_is_eog(const glesc_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_tokens && t->eog[id];
}

GLESC_API glesc_token_type glesc_tokenizer_token_type(const glesc_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return GLESC_TOKEN_TYPE_UNDEFINED;
    return (glesc_token_type)t->info[id].type;
}

GLESC_API const char *glesc_tokenizer_token_text(const glesc_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens) {
        if (len)
            *len = 0;
        return NULL;
    }
    size_t n;
    const char *s = tok_strtab_str(&t->strs, id, &n);
    if (len)
        *len = n;
    return s;
}

GLESC_API int32_t glesc_tokenizer_find(const glesc_tokenizer *t, const char *text, size_t len)
{
    int32_t id = tok_strtab_find(&t->strs, len ? text : "", len);
    return id >= 0 && (uint32_t)id < t->n_tokens ? id : -1;
}
