/*
 * finish.c — the second half of building a tokenizer, once every
 * token and merge is in (tok_finish): llama.cpp's detection of control and
 * end-of-generation tokens by their text, the list of special tokens the
 * partition looks for, per-model attributes, byte tokens, the pieces each
 * token renders as, the BPE pre-tokenizer and the newline token.
 */
#include <ctype.h>
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

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

/* The byte a byte token stands for ("<0x0A>" → 10), or -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = core_hex_digit(s[3]), lo = core_hex_digit(s[4]);
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

/* Control-looking tokens by text (llama.cpp's auto-detection): end of turn,
 * end of message, FIM, and the end-of-generation set. */
static glesc_status mark_special_texts(glesc_tokenizer *t)
{
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
    t->eog = core_calloc(t->n_tokens, 1);
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
    return GLESC_OK;
}

/* Tokens the partition looks for (control, user-defined, unknown), longest
 * first. */
static glesc_status collect_specials(glesc_tokenizer *t)
{
    const unsigned special = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN;
    uint32_t ns = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++)
        if (t->info[id].attr & special)
            ns++;
    if (!ns)
        return GLESC_OK;
    t->specials = core_malloc(ns * sizeof *t->specials);
    int32_t *tmp = core_malloc(ns * sizeof *tmp);
    if (!t->specials || !tmp) {
        core_free(tmp);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (uint32_t id = 0; id < t->n_tokens; id++)
        if (t->info[id].attr & special)
            t->specials[t->n_specials++] = (int32_t)id;
    sort_specials(t, t->specials, tmp, ns);
    core_free(tmp);
    return GLESC_OK;
}

/* llama.cpp's per-model attributes: Phi-3 eats whitespace right of its
 * special tokens (except <unk>, <s>, <|endoftext|>). */
static void apply_model_attributes(glesc_tokenizer *t, const char *model_name,
                                   size_t model_name_len)
{
    if (!model_name || !(ascii_lower_contains(model_name, model_name_len, "phi-3") ||
                         ascii_lower_contains(model_name, model_name_len, "phi3")))
        return;
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

/* The token of each byte: SPM's "<0xNN>" (or the one-byte string), BPE's
 * gpt-2 character. */
static void find_byte_tokens(glesc_tokenizer *t)
{
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
        t->byte_tok[b] = id >= 0 && (uint32_t)id < t->n_tokens ? id : -1;
    }
}

/* SPM word splitting is exact when no token has "▁" after anything but
 * "▁" (true of Llama-2's vocabulary, false of TinyStories-656K's
 * multi-word pieces). */
static bool spm_words_split(const glesc_tokenizer *t)
{
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        size_t len;
        const char *s = tok_strtab_str(&t->strs, (int32_t)id, &len);
        for (size_t k = 1; k + 3 <= len; k++) {
            if (memcmp(s + k, TOK_SP_MARK, 3) != 0)
                continue;
            if (k < 3 || memcmp(s + k - 3, TOK_SP_MARK, 3) != 0)
                return false;
        }
    }
    return true;
}

/* Newline token: SPM's "<0x0A>", else the first id of "\n". */
static void find_newline(glesc_tokenizer *t)
{
    if (t->kind == GLESC_TOKENIZER_SPM) {
        t->nl = t->byte_tok['\n'] >= 0 ? t->byte_tok['\n'] : t->pad;
        return;
    }
    int32_t ids[8];
    size_t got = 0;
    glesc_status st = glesc_tokenize(t, "\n", 1, 0, ids, CORE_ARRAY_LEN(ids), &got);
    t->nl = st == GLESC_OK && got > 0 ? ids[0] : t->pad;
}

glesc_status tok_finish(glesc_tokenizer *t, const char *model_name, size_t model_name_len)
{
    if (t->strs.n < t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "tokenizer: %u of %u tokens set",
                            t->strs.n, t->n_tokens);
    glesc_status st = mark_special_texts(t);
    if (st == GLESC_OK)
        st = collect_specials(t);
    if (st != GLESC_OK)
        return st;
    apply_model_attributes(t, model_name, model_name_len);
    /* Without parse_special, llama.cpp still splits on user-defined tokens,
     * but not on those that are also control (a FIM or end-of-turn text). */
    if (!index_build(t, 0, TOK_ATTR_USER_DEFINED, TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN) ||
        !index_build(t, 1, TOK_ATTR_USER_DEFINED | TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN, 0))
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    find_byte_tokens(t);
    t->spm_split = t->kind == GLESC_TOKENIZER_SPM && spm_words_split(t);
    st = build_pieces(t);
    if (st == GLESC_OK && t->kind == GLESC_TOKENIZER_BPE)
        st = tok_bpe_compile(t);
    if (st != GLESC_OK)
        return st;
    find_newline(t);
    return GLESC_OK;
}
