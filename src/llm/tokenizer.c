/*
 * tokenizer.c — the tokenizer object: its string table, construction (driven
 * by tokenizer_load.c), the special-token partition that runs before the
 * SentencePiece or BPE encoder, pieces, detokenization and the streaming
 * decoder.
 *
 * The behaviour mirrors llama.cpp's llama-vocab.cpp (tokenizer_st_partition,
 * tokenize, token_to_piece, detokenize) so that ids match its test vectors.
 * Where we differ it is said at the spot.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/llm.h"

/* ---- String table ---- */

void tok_strtab_init(tok_strtab *t)
{
    memset(t, 0, sizeof *t);
}

void tok_strtab_free(tok_strtab *t)
{
    core_free(t->arena);
    core_free(t->off);
    core_free(t->len);
    core_map_free(&t->map);
    tok_strtab_init(t);
}

static uint64_t str_hash(const char *s, size_t n)
{
    return core_hash64_bytes(n ? s : "", n);
}

static inline int32_t strtab_lookup(const tok_strtab *t, const char *s, size_t n, uint64_t h)
{
    core_map_probe p = core_map_probe_start(&t->map, h);
    uint32_t id;
    while (core_map_probe_next(&t->map, &p, &id))
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0)
            return (int32_t)id;
    return -1;
}

int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n)
{
    return strtab_lookup(t, s, n, str_hash(s, n));
}

int32_t tok_strtab_intern(tok_strtab *t, const char *s, size_t n, bool *added)
{
    uint64_t h = str_hash(s, n);
    int32_t found = strtab_lookup(t, s, n, h);
    if (found >= 0) {
        if (added)
            *added = false;
        return found;
    }
    if (n > UINT32_MAX || t->n >= INT32_MAX - 1)
        return -1;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        uint32_t *off = core_realloc(t->off, (size_t)cap * sizeof *off);
        if (!off)
            return -1;
        t->off = off;
        uint32_t *len = core_realloc(t->len, (size_t)cap * sizeof *len);
        if (!len)
            return -1;
        t->len = len;
        t->cap = cap;
    }
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 65536;
        while (cap < t->arena_len + n)
            cap *= 2;
        if (cap > UINT32_MAX)
            return -1;
        char *a = core_realloc(t->arena, cap);
        if (!a)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    uint32_t id = t->n;
    if (!core_map_add(&t->map, h, id))
        return -1;
    if (n)
        memcpy(t->arena + t->arena_len, s, n);
    t->n++;
    t->off[id] = (uint32_t)t->arena_len;
    t->len[id] = (uint32_t)n;
    t->arena_len += n;
    if (added)
        *added = true;
    return (int32_t)id;
}

void tok_ids_push(tok_ids *a, int32_t id)
{
    if (a->oom)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = core_realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
}

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

/* DeepSeek's special texts use U+FF5C (fullwidth bar). */
#define FW_BAR "\xef\xbd\x9c"
#define DS_EOS "<" FW_BAR "end" TOK_SP_MARK "of" TOK_SP_MARK "sentence" FW_BAR ">"
#define DS_FIM_BEGIN "<" FW_BAR "fim" TOK_SP_MARK "begin" FW_BAR ">"
#define DS_FIM_HOLE "<" FW_BAR "fim" TOK_SP_MARK "hole" FW_BAR ">"
#define DS_FIM_END "<" FW_BAR "fim" TOK_SP_MARK "end" FW_BAR ">"

/* Texts llama.cpp recognises as end-of-turn / end-of-generation / FIM
 * tokens; a match that is not a control token becomes one. */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",      "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   DS_EOS,          "<end_of_utterance>", NULL};
static const char *const eog_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>",
                                        DS_EOS,
                                        "[e~[",
                                        NULL};
static const char *const fim_texts[] = {
    /* prefix */
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", DS_FIM_BEGIN, "<PRE>", TOK_SP_MARK "<PRE>",
    "<|code_prefix|>", "<|prefix|>",
    /* suffix */
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", DS_FIM_HOLE, "<SUF>", TOK_SP_MARK "<SUF>",
    "<|code_suffix|>", "<|suffix|>",
    /* middle */
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", DS_FIM_END, "<MID>", TOK_SP_MARK "<MID>",
    "<|code_middle|>", "<|middle|>", NULL};
/* FIM pad / repo / file separator: control tokens that also end generation. */
static const char *const fim_eog_texts[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "[PAD]",        "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>", NULL};

static int32_t find_cstr(const glesc_tokenizer *t, const char *s)
{
    int32_t id = tok_strtab_find(&t->strs, s, strlen(s));
    return id >= 0 && (uint32_t)id < t->n_tokens ? id : -1;
}

static void mark_control(glesc_tokenizer *t, int32_t id)
{
    t->info[id].attr |= TOK_ATTR_CONTROL;
}

static int cmp_special(const void *a, const void *b, void *ctx);

/* qsort has no context argument in C11: sort specials with a small merge
 * sort instead (stable, so equal lengths keep id order). */
static void sort_specials(glesc_tokenizer *t, int32_t *v, int32_t *tmp, uint32_t n)
{
    if (n < 2)
        return;
    uint32_t h = n / 2;
    sort_specials(t, v, tmp, h);
    sort_specials(t, v + h, tmp, n - h);
    uint32_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_special(&v[j], &v[i], t) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const glesc_tokenizer *t = ctx;
    uint32_t la = t->strs.len[*(const int32_t *)a], lb = t->strs.len[*(const int32_t *)b];
    return la > lb ? -1 : la < lb ? 1 : 0;
}

static bool ascii_lower_contains(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && tolower((unsigned char)s[i + k]) == needle[k])
            k++;
        if (k == m)
            return true;
    }
    return false;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte a byte token stands for ("<0x0A>" → 10), or -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static glesc_status build_pieces(glesc_tokenizer *t)
{
    sbuf b;
    sbuf_init(&b);
    t->piece_off = core_calloc((size_t)t->n_tokens + 1, sizeof *t->piece_off);
    if (!t->piece_off)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        t->piece_off[id] = (uint32_t)b.len;
        size_t n;
        const char *s = tok_strtab_str(&t->strs, (int32_t)id, &n);
        uint8_t attr = t->info[id].attr;
        if (attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
            sbuf_appendn(&b, s, n);
        } else if (attr & TOK_ATTR_NORMAL) {
            if (t->kind == GLESC_TOKENIZER_SPM) {
                /* "▁" (U+2581) stands for a space. */
                for (size_t i = 0; i < n; i++) {
                    if (i + 3 <= n && memcmp(s + i, TOK_SP_MARK, 3) == 0) {
                        sbuf_appendc(&b, ' ');
                        i += 2;
                    } else {
                        sbuf_appendc(&b, s[i]);
                    }
                }
            } else {
                /* Map each character back through gpt-2's byte table. A
                 * character outside the table is kept as its UTF-8 (llama.cpp
                 * writes "[UNK_BYTE_0x..]" there). */
                for (size_t i = 0; i < n;) {
                    size_t k = CORE_MIN(tok_utf8_len((unsigned char)s[i]), n - i);
                    uint32_t cp = (unsigned char)s[i];
                    if (k == 2)
                        cp = ((cp & 0x1fu) << 6) | ((unsigned char)s[i + 1] & 0x3fu);
                    int byte = k <= 2 ? tok_cp_to_byte(cp) : -1;
                    if (byte >= 0)
                        sbuf_appendc(&b, (char)byte);
                    else
                        sbuf_appendn(&b, s + i, k);
                    i += k;
                }
            }
        } else if (attr & TOK_ATTR_BYTE) {
            int v = byte_token_value(s, n);
            if (v >= 0)
                sbuf_appendc(&b, (char)v);
        }
        if (b.len > UINT32_MAX / 2)
            b.oom = true;
    }
    t->piece_off[t->n_tokens] = (uint32_t)b.len;
    if (b.oom) {
        sbuf_free(&b);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    t->pieces = b.len ? sbuf_take(&b) : NULL;
    sbuf_free(&b);
    return GLESC_OK;
}

/* Builds t->sp_start[w] / t->sp_list[w]: per first byte, the specials whose
 * attributes meet mask, in priority order. */
static bool index_build(glesc_tokenizer *t, int w, unsigned mask, unsigned exclude)
{
    uint32_t count[256] = {0};
    uint32_t total = 0;
    for (uint32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        if (!(t->info[id].attr & mask) || (t->info[id].attr & exclude) || t->strs.len[id] == 0)
            continue;
        count[(unsigned char)t->strs.arena[t->strs.off[id]]]++;
        total++;
    }
    t->sp_start[w][0] = 0;
    for (int b = 0; b < 256; b++)
        t->sp_start[w][b + 1] = t->sp_start[w][b] + count[b];
    if (total == 0)
        return true;
    t->sp_list[w] = core_malloc(total * sizeof *t->sp_list[w]);
    if (!t->sp_list[w])
        return false;
    uint32_t fill[256];
    memcpy(fill, t->sp_start[w], sizeof fill);
    for (uint32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        if (!(t->info[id].attr & mask) || (t->info[id].attr & exclude) || t->strs.len[id] == 0)
            continue;
        t->sp_list[w][fill[(unsigned char)t->strs.arena[t->strs.off[id]]]++] = i;
    }
    return true;
}

glesc_status tok_finish(glesc_tokenizer *t, const char *model_name, size_t model_name_len)
{
    uint32_t n = t->n_tokens;
    if (t->strs.n < n)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "tokenizer: %u of %u tokens set",
                            t->strs.n, n);
    /* Control-looking tokens by text (llama.cpp's auto-detection). */
    for (const char *const *p = eot_texts; *p; p++) {
        int32_t id = find_cstr(t, *p);
        if (id >= 0) {
            if (t->eot < 0)
                t->eot = id;
            mark_control(t, id);
        }
    }
    int32_t eom = find_cstr(t, "<|eom_id|>");
    if (eom >= 0) {
        if (t->eom < 0)
            t->eom = eom;
        mark_control(t, eom);
    }
    for (const char *const *p = fim_texts; *p; p++) {
        int32_t id = find_cstr(t, *p);
        if (id >= 0)
            mark_control(t, id);
    }
    t->eog = core_calloc(n, 1);
    if (!t->eog)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (const char *const *p = fim_eog_texts; *p; p++) {
        int32_t id = find_cstr(t, *p);
        if (id >= 0) {
            mark_control(t, id);
            t->eog[id] = 1;
        }
    }
    for (const char *const *p = eog_texts; *p; p++) {
        int32_t id = find_cstr(t, *p);
        if (id >= 0) {
            mark_control(t, id);
            t->eog[id] = 1;
        }
    }
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;

    /* Tokens the partition looks for, longest first. */
    uint32_t ns = 0;
    for (uint32_t id = 0; id < n; id++)
        if (t->info[id].attr & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            ns++;
    if (ns) {
        t->specials = core_malloc(ns * sizeof *t->specials);
        int32_t *tmp = core_malloc(ns * sizeof *tmp);
        if (!t->specials || !tmp) {
            core_free(tmp);
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
        }
        for (uint32_t id = 0; id < n; id++)
            if (t->info[id].attr & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
                t->specials[t->n_specials++] = (int32_t)id;
        sort_specials(t, t->specials, tmp, ns);
        core_free(tmp);
    }

    /* llama.cpp's per-model attributes: Phi-3 eats whitespace right of its
     * special tokens (except <unk>, <s>, <|endoftext|>). */
    if (model_name && (ascii_lower_contains(model_name, model_name_len, "phi-3") ||
                       ascii_lower_contains(model_name, model_name_len, "phi3"))) {
        for (uint32_t i = 0; i < t->n_specials; i++)
            t->info[t->specials[i]].attr |= TOK_ATTR_RSTRIP;
        int32_t id = find_cstr(t, "</s>");
        if (id >= 0)
            t->info[id].attr |= TOK_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < CORE_ARRAY_LEN(keep); i++)
            if ((id = find_cstr(t, keep[i])) >= 0)
                t->info[id].attr &= (uint8_t)~TOK_ATTR_RSTRIP;
    }

    /* Without parse_special, llama.cpp still splits on user-defined tokens,
     * but not on those that are also control (a FIM or end-of-turn text). */
    if (!index_build(t, 0, TOK_ATTR_USER_DEFINED, TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN) ||
        !index_build(t, 1, TOK_ATTR_USER_DEFINED | TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN, 0))
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");

    /* Byte tokens. */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id = -1;
        if (t->kind == GLESC_TOKENIZER_SPM) {
            static const char hex[] = "0123456789ABCDEF";
            char s[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
            id = tok_strtab_find(&t->strs, s, 6);
            if (id < 0) {
                buf[0] = (char)b;
                id = tok_strtab_find(&t->strs, buf, 1);
            }
        } else {
            size_t k = tok_byte_to_utf8((uint8_t)b, buf);
            id = tok_strtab_find(&t->strs, buf, k);
        }
        t->byte_tok[b] = id >= 0 && (uint32_t)id < n ? id : -1;
    }

    /* SPM word splitting is exact when no token has "▁" after anything but
     * "▁" (true of Llama-2's vocabulary, false of TinyStories-656K's
     * multi-word pieces). */
    if (t->kind == GLESC_TOKENIZER_SPM) {
        t->spm_split = true;
        for (uint32_t id = 0; id < n && t->spm_split; id++) {
            size_t len;
            const char *s = tok_strtab_str(&t->strs, (int32_t)id, &len);
            for (size_t k = 1; k + 3 <= len; k++) {
                if (memcmp(s + k, TOK_SP_MARK, 3) != 0)
                    continue;
                if (k < 3 || memcmp(s + k - 3, TOK_SP_MARK, 3) != 0) {
                    t->spm_split = false;
                    break;
                }
            }
        }
    }

    glesc_status st = build_pieces(t);
    if (st)
        return st;
    if (t->kind == GLESC_TOKENIZER_BPE) {
        st = tok_bpe_compile(t);
        if (st)
            return st;
    }

    /* Newline token: SPM's "<0x0A>", else the first id of "\n". */
    if (t->kind == GLESC_TOKENIZER_SPM) {
        t->nl = t->byte_tok['\n'] >= 0 ? t->byte_tok['\n'] : t->pad;
    } else {
        int32_t ids[8];
        size_t got = 0;
        st = glesc_tokenize(t, "\n", 1, 0, ids, CORE_ARRAY_LEN(ids), &got);
        t->nl = st == GLESC_OK && got > 0 ? ids[0] : t->pad;
    }
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

/* ---- Special-token partition ----
 * llama.cpp takes the special tokens longest first and, for each, splits
 * every raw fragment at its leftmost non-overlapping occurrences. Looping
 * over thousands of user-defined tokens (deepseek-llm has 2398) that way
 * costs tokens × text length, so we find all occurrences in one pass with a
 * byte trie, then replay llama.cpp's order on that list: an occurrence is
 * taken when no byte of it is already taken, in (priority, position) order.
 * The result is the same fragment list. */

typedef struct occ {
    uint32_t prio; /* index in t->specials */
    uint32_t pos;
} occ;

static int occ_cmp(const void *a, const void *b)
{
    const occ *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

enum { MARK_RAW = 0, MARK_TOKEN = 1, MARK_INSIDE = 2, MARK_STRIPPED = 3 };

/* Emits the ids of text[0..len) with flags into out. */
static bool tokenize_text(const glesc_tokenizer *t, const char *text, size_t len, unsigned flags,
                          tok_ids *out)
{
    bool ok = false;
    uint8_t *mark = NULL;
    int32_t *tok_at = NULL;
    occ *occs = NULL;
    size_t n_occ = 0, cap_occ = 0;
    sbuf esc;
    sbuf_init(&esc);
    bool add_special = (flags & GLESC_TOKENIZE_ADD_SPECIAL) != 0;

    if (len > UINT32_MAX - 16)
        goto done;

    /* 1. Occurrences of the specials that take part. */
    int w = (flags & GLESC_TOKENIZE_PARSE_SPECIAL) ? 1 : 0;
    const uint32_t *ix_start = t->sp_start[w], *ix_list = t->sp_list[w];
    if (len && ix_list) {
        for (size_t p = 0; p < len; p++) {
            unsigned char c = (unsigned char)text[p];
            for (uint32_t k = ix_start[c]; k < ix_start[c + 1]; k++) {
                int32_t id = t->specials[ix_list[k]];
                size_t sl;
                const char *s = tok_strtab_str(&t->strs, id, &sl);
                if (sl > len - p || memcmp(text + p, s, sl) != 0)
                    continue;
                if (n_occ == cap_occ) {
                    size_t cap = cap_occ ? cap_occ * 2 : 64;
                    occ *o = core_realloc(occs, cap * sizeof *o);
                    if (!o)
                        goto done;
                    occs = o;
                    cap_occ = cap;
                }
                occs[n_occ++] = (occ){ix_list[k], (uint32_t)p};
            }
        }
    }

    /* 2. Replay llama.cpp's order. mark[] says what each byte became. */
    if (n_occ) {
        mark = core_calloc(len, 1);
        tok_at = core_malloc(len * sizeof *tok_at);
        if (!mark || !tok_at)
            goto done;
        qsort(occs, n_occ, sizeof *occs, occ_cmp);
        uint32_t cur_prio = UINT32_MAX;
        size_t last_end = 0;
        for (size_t i = 0; i < n_occ; i++) {
            int32_t id = t->specials[occs[i].prio];
            size_t p = occs[i].pos, sl = t->strs.len[id];
            if (occs[i].prio != cur_prio) {
                cur_prio = occs[i].prio;
                last_end = 0;
            }
            if (p < last_end)
                continue; /* overlaps the previous match of the same token */
            bool free_span = true;
            for (size_t k = p; k < p + sl; k++)
                if (mark[k] != MARK_RAW) {
                    free_span = false;
                    break;
                }
            if (!free_span)
                continue;
            mark[p] = MARK_TOKEN;
            tok_at[p] = id;
            for (size_t k = p + 1; k < p + sl; k++)
                mark[k] = MARK_INSIDE;
            last_end = p + sl;
            uint8_t attr = t->info[id].attr;
            if (attr & TOK_ATTR_LSTRIP) {
                size_t k = p;
                while (k > 0 && mark[k - 1] == MARK_RAW && isspace((unsigned char)text[k - 1]))
                    mark[--k] = MARK_STRIPPED;
            }
            if (attr & TOK_ATTR_RSTRIP) {
                size_t k = p + sl;
                while (k < len && mark[k] == MARK_RAW && isspace((unsigned char)text[k]))
                    mark[k++] = MARK_STRIPPED;
                last_end = k;
            }
        }
    }

    /* 3. Encode the fragments in order. */
    if (add_special && t->add_bos && t->bos >= 0)
        tok_ids_push(out, t->bos);
    bool prev_special = true; /* SPM: a space prefix at the start and after specials */
    size_t p = 0;
    while (p < len) {
        if (mark && mark[p] != MARK_RAW) {
            if (mark[p] == MARK_TOKEN) {
                tok_ids_push(out, tok_at[p]);
                prev_special = true;
            }
            p++;
            continue;
        }
        size_t q = p + 1;
        while (q < len && (!mark || mark[q] == MARK_RAW))
            q++;
        if (t->kind == GLESC_TOKENIZER_SPM) {
            sbuf_reset(&esc);
            if (t->add_space_prefix && prev_special)
                sbuf_append(&esc, TOK_SP_MARK);
            size_t r = p;
            while (r < q) {
                const char *sp = memchr(text + r, ' ', q - r);
                size_t e = sp ? (size_t)(sp - text) : q;
                sbuf_appendn(&esc, text + r, e - r);
                if (sp) {
                    sbuf_append(&esc, TOK_SP_MARK);
                    e++;
                }
                r = e;
            }
            if (esc.oom || !tok_spm_encode(t, esc.data, esc.len, out))
                goto done;
        } else {
            if (!tok_bpe_encode(t, text + p, q - p, out))
                goto done;
        }
        prev_special = false;
        p = q;
    }
    if (add_special && t->add_eos && t->eos >= 0)
        tok_ids_push(out, t->eos);
    ok = !out->oom;
done:
    sbuf_free(&esc);
    core_free(occs);
    core_free(mark);
    core_free(tok_at);
    return ok;
}

GLESC_API glesc_status glesc_tokenize_alloc(const glesc_tokenizer *t, const char *text, size_t len,
                                            unsigned flags, int32_t **ids_out, size_t *n_out)
{
    *ids_out = NULL;
    *n_out = 0;
    if (!t || (!text && len))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_tokenize: NULL tokenizer or text");
    tok_ids out = {0};
    if (!tokenize_text(t, text, len, flags, &out)) {
        core_free(out.v);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "tokenize: out of memory on %zu bytes of text", len);
    }
    if (out.n == 0) {
        core_free(out.v);
        out.v = NULL;
    }
    *ids_out = out.v;
    *n_out = out.n;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_tokenize(const glesc_tokenizer *t, const char *text, size_t len,
                                      unsigned flags, int32_t *ids, size_t cap, size_t *n_out)
{
    int32_t *v = NULL;
    size_t n = 0;
    *n_out = 0;
    if (!ids && cap)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_tokenize: ids is NULL");
    glesc_status st = glesc_tokenize_alloc(t, text, len, flags, &v, &n);
    if (st)
        return st;
    *n_out = n;
    if (n > cap) {
        core_free(v);
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "tokenize: %zu tokens do not fit in a buffer of %zu", n, cap);
    }
    if (n)
        memcpy(ids, v, n * sizeof *ids);
    core_free(v);
    return GLESC_OK;
}

GLESC_API void glesc_tokens_free(int32_t *ids)
{
    core_free(ids);
}

/* ---- Pieces and detokenization ---- */

static bool piece_rendered(const glesc_tokenizer *t, int32_t id, unsigned flags)
{
    return (flags & GLESC_DETOKENIZE_SPECIAL) ||
           !(t->info[id].attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL));
}

GLESC_API glesc_status glesc_token_to_piece(const glesc_tokenizer *t, int32_t id, unsigned flags,
                                            const char **piece, size_t *len)
{
    *piece = "";
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "token id %d is out of range (vocabulary of %u)", id, t->n_tokens);
    if (!piece_rendered(t, id, flags))
        return GLESC_OK;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    if (*len)
        *piece = t->pieces + t->piece_off[id];
    return GLESC_OK;
}

/* The leading-space rule shared by detokenize and the decoder: with
 * add_space_prefix, the first piece of a sequence loses one leading space,
 * the space that tokenizing added. A BOS that renders as nothing is skipped
 * over; one rendered as "<s>" counts as the first piece (llama.cpp then
 * keeps the space: "<s> Hello"). */
typedef struct lead_state {
    bool active; /* still looking for the first text piece */
} lead_state;

static void piece_for_stream(const glesc_tokenizer *t, int32_t id, unsigned flags, lead_state *ls,
                             const char **s, size_t *n)
{
    glesc_token_to_piece(t, id, flags, s, n);
    if (!ls->active)
        return;
    if (id == t->bos && t->bos >= 0 && *n == 0)
        return; /* an unrendered BOS keeps the rule armed for the next piece */
    ls->active = false;
    if (*n && (*s)[0] == ' ') {
        (*s)++;
        (*n)--;
    }
}

/* llama.cpp's clean_spaces passes: " ?" " !" " ." " ," lose their space,
 * " ' " becomes "'", and " 's" " 'm" " 're" " 've" lose their space. */
static size_t clean_spaces(char *text, size_t total)
{
    if (total == 0)
        return 0;
    size_t n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            n--;
        text[n++] = x;
    }
    total = n;
    n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < total && text[i - 1] == ' ' && text[i + 1] == ' ') {
            n--;
            text[++i] = '\0';
        }
        text[n++] = x;
    }
    total = n;
    n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm')
                n--;
            else if (i + 2 < total) {
                char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                    n--;
            }
        }
        text[n++] = x;
    }
    return n;
}

GLESC_API glesc_status glesc_detokenize(const glesc_tokenizer *t, const int32_t *ids, size_t n,
                                        unsigned flags, char **text_out, size_t *len_out)
{
    *text_out = NULL;
    *len_out = 0;
    if (!ids && n)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_detokenize: ids is NULL");
    sbuf b;
    sbuf_init(&b);
    lead_state ls = {t->add_space_prefix && !(flags & GLESC_DETOKENIZE_KEEP_LEADING_SPACE)};
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_tokens) {
            sbuf_free(&b);
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "detokenize: id %d at position %zu is out of range (vocabulary "
                                "of %u)",
                                ids[i], i, t->n_tokens);
        }
        const char *s;
        size_t k;
        piece_for_stream(t, ids[i], flags, &ls, &s, &k);
        sbuf_appendn(&b, s, k);
    }
    size_t len = b.len;
    sbuf_appendc(&b, '\0'); /* makes sure there is a buffer, even for "" */
    if (b.oom) {
        sbuf_free(&b);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "detokenize: out of memory");
    }
    if (t->clean_spaces && !(flags & GLESC_DETOKENIZE_NO_CLEANUP))
        len = clean_spaces(b.data, len);
    b.data[len] = '\0';
    *len_out = len;
    *text_out = b.data; /* ownership passes to the caller */
    return GLESC_OK;
}

GLESC_API void glesc_text_free(char *text)
{
    core_free(text);
}

/* ---- Streaming decoder ---- */

struct glesc_decoder {
    const glesc_tokenizer *tok;
    unsigned flags;
    lead_state lead;
    sbuf buf;  /* held bytes + the new piece */
    char *out; /* what the last call returned */
    size_t out_cap;
};

GLESC_API glesc_status glesc_decoder_create(const glesc_tokenizer *t, unsigned flags,
                                            glesc_decoder **out)
{
    *out = NULL;
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "decoder: NULL tokenizer");
    glesc_decoder *d = core_calloc(1, sizeof *d);
    if (!d)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
    d->tok = t;
    d->flags = flags;
    sbuf_init(&d->buf);
    glesc_decoder_reset(d);
    *out = d;
    return GLESC_OK;
}

GLESC_API void glesc_decoder_destroy(glesc_decoder *d)
{
    if (!d)
        return;
    sbuf_free(&d->buf);
    core_free(d->out);
    core_free(d);
}

GLESC_API void glesc_decoder_reset(glesc_decoder *d)
{
    sbuf_reset(&d->buf);
    d->lead.active = d->tok->add_space_prefix && !(d->flags & GLESC_DETOKENIZE_KEEP_LEADING_SPACE);
}

/* How many bytes at the end of s[0..n) are the start of an incomplete but so
 * far valid UTF-8 sequence (0 when the end is complete or can never be). */
static size_t utf8_incomplete_tail(const unsigned char *s, size_t n)
{
    size_t back = 0;
    while (back < 3 && back < n && (s[n - 1 - back] & 0xc0) == 0x80)
        back++;
    if (back == n)
        return 0;
    unsigned char lead = s[n - 1 - back];
    size_t need;
    if (lead >= 0xc2 && lead <= 0xdf)
        need = 2;
    else if (lead >= 0xe0 && lead <= 0xef)
        need = 3;
    else if (lead >= 0xf0 && lead <= 0xf4)
        need = 4;
    else
        return 0;
    if (back + 1 >= need)
        return 0; /* complete (or over-long run of continuations: pass it on) */
    if (back >= 1) {
        /* The second byte's range for E0/ED/F0/F4 (overlongs, surrogates). */
        unsigned char c1 = s[n - back];
        if ((lead == 0xe0 && c1 < 0xa0) || (lead == 0xed && c1 > 0x9f) ||
            (lead == 0xf0 && c1 < 0x90) || (lead == 0xf4 && c1 > 0x8f))
            return 0;
    }
    return back + 1;
}

static glesc_status decoder_emit(glesc_decoder *d, size_t n, const char **text, size_t *len)
{
    if (n > d->out_cap) {
        char *o = core_realloc(d->out, n);
        if (!o)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
        d->out = o;
        d->out_cap = n;
    }
    if (n)
        memcpy(d->out, d->buf.data, n);
    size_t rest = d->buf.len - n;
    if (n)
        memmove(d->buf.data, d->buf.data + n, rest);
    d->buf.len = rest;
    *text = n ? d->out : "";
    *len = n;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_decoder_feed(glesc_decoder *d, int32_t id, const char **text,
                                          size_t *len)
{
    *text = "";
    *len = 0;
    const glesc_tokenizer *t = d->tok;
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "decoder: id %d is out of range (vocabulary of %u)", id, t->n_tokens);
    const char *s;
    size_t k;
    piece_for_stream(t, id, d->flags, &d->lead, &s, &k);
    sbuf_appendn(&d->buf, s, k);
    if (d->buf.oom)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
    size_t hold = utf8_incomplete_tail((const unsigned char *)d->buf.data, d->buf.len);
    return decoder_emit(d, d->buf.len - hold, text, len);
}

GLESC_API glesc_status glesc_decoder_flush(glesc_decoder *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    return decoder_emit(d, d->buf.len, text, len);
}
