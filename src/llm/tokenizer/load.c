/*
 * load.c — builds a tokenizer from a GGUF file's tokenizer.ggml.*
 * keys, with llama.cpp's defaults for whatever is absent (llama_vocab::load).
 * Every error names the key and, for arrays, the entry.
 */
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

/* 1 present (value in *out), 0 absent, or a negative status. */
static int opt_u32(const glesc_gguf *f, const char *key, uint32_t *out)
{
    if (glesc_gguf_find_key(f, key) < 0)
        return 0;
    glesc_status st = glesc_gguf_get_u32(f, key, out);
    return st == GLESC_OK ? 1 : (int)st;
}

static int opt_bool(const glesc_gguf *f, const char *key, bool *out)
{
    if (glesc_gguf_find_key(f, key) < 0)
        return 0;
    glesc_status st = glesc_gguf_get_bool(f, key, out);
    return st == GLESC_OK ? 1 : (int)st;
}

/* A special id key: out-of-range values keep the default (llama.cpp warns). */
static glesc_status special_id(const glesc_gguf *f, const char *key, uint32_t n, int32_t *id)
{
    if (*id >= 0 && (uint32_t)*id >= n)
        *id = -1;
    uint32_t v;
    int r = opt_u32(f, key, &v);
    if (r < 0)
        return (glesc_status)r;
    if (r == 1) {
        if (v < n)
            *id = (int32_t)v;
        else if (v != UINT32_MAX)
            core_log(CORE_LOG_WARN, "%s = %u is outside the vocabulary of %u: using %d", key, v, n,
                     *id);
    }
    return GLESC_OK;
}

/* A key that must be an array of elem (or of one of two element types). */
static glesc_status check_array(const glesc_gguf *f, const char *key, glesc_gguf_type a,
                                glesc_gguf_type b, int64_t *idx)
{
    *idx = glesc_gguf_find_key(f, key);
    if (*idx < 0)
        return GLESC_ERROR_NOT_FOUND;
    glesc_gguf_type kt = glesc_gguf_kv_type(f, *idx);
    glesc_gguf_type et = glesc_gguf_arr_type(f, *idx);
    if (kt != GLESC_GGUF_ARRAY || (et != a && et != b))
        return core_err_set(NULL, GLESC_ERROR_TYPE, "%s: expected an array of %s, found %s%s%s",
                            key, glesc_gguf_type_name(a),
                            kt == GLESC_GGUF_ARRAY ? "an array of " : "",
                            glesc_gguf_type_name(kt == GLESC_GGUF_ARRAY ? et : kt),
                            kt == GLESC_GGUF_ARRAY ? "" : " value");
    return GLESC_OK;
}

/* An optional per-token array (element type a or b, at least n entries):
 * its element type and data, or *data NULL when the key is absent. */
static glesc_status per_token(const glesc_gguf *f, const char *key, glesc_gguf_type a,
                              glesc_gguf_type b, uint32_t n, glesc_gguf_type *type,
                              const unsigned char **data)
{
    *data = NULL;
    int64_t idx;
    glesc_status st = check_array(f, key, a, b, &idx);
    if (st == GLESC_ERROR_NOT_FOUND)
        return GLESC_OK;
    if (st)
        return st;
    uint64_t count;
    const void *d;
    st = glesc_gguf_get_arr(f, key, type, &count, &d);
    if (st)
        return st;
    if (count < n)
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "%s: %llu entries for %u tokens", key,
                            (unsigned long long)count, n);
    *data = d;
    return GLESC_OK;
}

/* tokenizer.ggml.model as a kind, and tokenizer.ggml.pre (NULL: absent). */
static glesc_status read_kind(const glesc_gguf *f, glesc_tokenizer_kind *kind, const char **pre,
                              size_t *pre_len)
{
    const char *model;
    size_t model_len;
    if (glesc_gguf_find_key(f, "tokenizer.ggml.model") < 0)
        return core_err_set(NULL, GLESC_ERROR_NOT_FOUND,
                            "tokenizer.ggml.model: missing (the file has no tokenizer)");
    glesc_status st = glesc_gguf_get_str(f, "tokenizer.ggml.model", &model, &model_len);
    if (st)
        return st;
    if (model_len == 5 && memcmp(model, "llama", 5) == 0)
        *kind = GLESC_TOKENIZER_SPM;
    else if (model_len == 4 && memcmp(model, "gpt2", 4) == 0)
        *kind = GLESC_TOKENIZER_BPE;
    else
        return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                            "tokenizer.ggml.model: '%.*s' is not supported (llama, gpt2)",
                            (int)CORE_MIN(model_len, 64), model);
    *pre = NULL;
    *pre_len = 0;
    if (glesc_gguf_find_key(f, "tokenizer.ggml.pre") >= 0)
        return glesc_gguf_get_str(f, "tokenizer.ggml.pre", pre, pre_len);
    return GLESC_OK;
}

/* The entry count *n of a required array of strings, min..max (unit: what
 * an entry is, in the message); missing: what the message adds when the
 * key is absent. */
static glesc_status string_array_n(const glesc_gguf *f, const char *key, const char *missing,
                                   uint64_t min, uint64_t max, const char *unit, uint64_t *n)
{
    int64_t idx;
    glesc_status st = check_array(f, key, GLESC_GGUF_STRING, GLESC_GGUF_STRING, &idx);
    if (st == GLESC_ERROR_NOT_FOUND)
        return core_err_set(NULL, st, "%s: missing%s", key, missing);
    if (st)
        return st;
    *n = glesc_gguf_arr_n(f, idx);
    if (*n < min || *n > max)
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "%s: %llu %s", key, (unsigned long long)*n,
                            unit);
    return GLESC_OK;
}

/* Each token's text, score (scores: f32 or i32 per token, or NULL) and
 * type (types: i32 per token, or NULL) into t. */
static glesc_status read_tokens(const glesc_gguf *f, glesc_tokenizer *t, uint32_t n,
                                glesc_gguf_type score_type, const unsigned char *scores,
                                const unsigned char *types)
{
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        glesc_status st = glesc_gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len);
        if (st)
            return st;
        float score = 0.0f;
        if (scores) {
            /* Packed little-endian, possibly unaligned. */
            if (score_type == GLESC_GGUF_FLOAT32) {
                memcpy(&score, scores + (size_t)i * 4, 4);
            } else {
                int32_t v;
                memcpy(&v, scores + (size_t)i * 4, 4);
                score = (float)v;
            }
        }
        int32_t type = GLESC_TOKEN_TYPE_NORMAL;
        if (types)
            memcpy(&type, types + (size_t)i * 4, 4);
        st = tok_set_token(t, i, s, len, score, type);
        if (st)
            return st;
    }
    return GLESC_OK;
}

/* tokenizer.ggml.merges (required for a gpt2 tokenizer) into t. */
static glesc_status read_merges(const glesc_gguf *f, glesc_tokenizer *t)
{
    uint64_t nm = 0;
    glesc_status st =
        string_array_n(f, "tokenizer.ggml.merges", " (a gpt2 tokenizer needs its merges)", 0,
                       INT32_MAX, "entries", &nm);
    if (st)
        return st;
    for (uint64_t i = 0; i < nm; i++) {
        const char *s;
        size_t len;
        st = glesc_gguf_get_arr_str(f, "tokenizer.ggml.merges", i, &s, &len);
        if (st)
            return st;
        st = tok_add_merge(t, (uint32_t)i, s, len);
        if (st)
            return st;
    }
    return GLESC_OK;
}

/* The add_* flags and the special ids (n tokens) into t, where the file
 * has them; a flag that adds a token without an id is an error. */
static glesc_status read_specials(const glesc_gguf *f, glesc_tokenizer *t, uint32_t n)
{
    struct {
        const char *key;
        bool *flag;
    } flags[] = {
        {"tokenizer.ggml.add_space_prefix", &t->add_space_prefix},
        {"tokenizer.ggml.add_bos_token", &t->add_bos},
        {"tokenizer.ggml.add_eos_token", &t->add_eos},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(flags); i++) {
        bool b;
        int r = opt_bool(f, flags[i].key, &b);
        if (r < 0)
            return (glesc_status)r;
        if (r == 1)
            *flags[i].flag = b;
    }
    struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},
        {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},
        {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk},
        {"tokenizer.ggml.seperator_token_id", &t->sep}, /* sic: the key's spelling */
        {"tokenizer.ggml.padding_token_id", &t->pad},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(ids); i++) {
        glesc_status st = special_id(f, ids[i].key, n, ids[i].id);
        if (st)
            return st;
    }
    if (t->add_bos && t->bos < 0)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "tokenizer.ggml.add_bos_token is true, but "
                            "tokenizer.ggml.bos_token_id is not set");
    if (t->add_eos && t->eos < 0)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "tokenizer.ggml.add_eos_token is true, but "
                            "tokenizer.ggml.eos_token_id is not set");
    return GLESC_OK;
}

GLESC_API glesc_status glesc_tokenizer_load(const glesc_gguf *f, glesc_tokenizer **out)
{
    core_err_reset(NULL);
    glesc_tokenizer *t = NULL;
    *out = NULL;
    if (!f)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "tokenizer: NULL file");
    glesc_tokenizer_kind kind = GLESC_TOKENIZER_SPM;
    const char *pre = NULL;
    size_t pre_len = 0;
    uint64_t n64 = 0;
    glesc_status st = read_kind(f, &kind, &pre, &pre_len);
    if (!st)
        st = string_array_n(f, "tokenizer.ggml.tokens", "", 1, INT32_MAX / 2, "tokens", &n64);
    if (st)
        return st;
    uint32_t n = (uint32_t)n64;

    glesc_gguf_type score_type = GLESC_GGUF_FLOAT32, type_type;
    const unsigned char *scores, *types;
    st = per_token(f, "tokenizer.ggml.scores", GLESC_GGUF_FLOAT32, GLESC_GGUF_INT32, n, &score_type,
                   &scores);
    if (!st)
        st = per_token(f, "tokenizer.ggml.token_type", GLESC_GGUF_INT32, GLESC_GGUF_INT32, n,
                       &type_type, &types);
    if (st)
        return st;
    st = tok_create(kind, pre, pre_len, n, &t);
    if (st)
        return st;
    st = read_tokens(f, t, n, score_type, scores, types);
    if (!st && kind == GLESC_TOKENIZER_BPE)
        st = read_merges(f, t);
    if (!st)
        st = read_specials(f, t, n);
    if (st)
        goto fail;

    const char *name = NULL;
    size_t name_len = 0;
    if (glesc_gguf_find_key(f, "general.name") >= 0 &&
        glesc_gguf_get_str(f, "general.name", &name, &name_len) != GLESC_OK)
        name = NULL;
    st = tok_finish(t, name, name_len);
    if (st)
        goto fail;
    *out = t;
    return GLESC_OK;
fail:
    glesc_tokenizer_destroy(t);
    return st;
}
