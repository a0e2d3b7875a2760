/*
 * partition.c — text to token ids (glesc_tokenize): the text is
 * split at the special tokens that take part, as llama.cpp's
 * tokenizer_st_partition does, and each fragment in between goes to the
 * SentencePiece or BPE encoder.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

/* ---- Special-token partition ----
 * llama.cpp takes the special tokens longest first and, for each, splits
 * every raw fragment at its leftmost non-overlapping occurrences. Looping
 * over thousands of user-defined tokens (deepseek-llm has 2398) that way
 * costs tokens × text length, so we find all occurrences in one pass through
 * an index of the specials by first byte, then replay llama.cpp's order on
 * that list: an occurrence is taken when no byte of it is already taken, in
 * (priority, position) order. The result is the same fragment list. */

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

/* One text being partitioned. */
typedef struct partition {
    const glesc_tokenizer *t;
    const char *text;
    size_t len;
    occ *occs; /* occurrences of the specials that take part */
    size_t n_occ, cap_occ;
    uint8_t *mark;   /* per byte: MARK_*, NULL when no special occurs */
    int32_t *tok_at; /* the token where mark is MARK_TOKEN */
} partition;

/* Step 1: every occurrence of a special that takes part (w: which index,
 * see tok_finish), found through the index by first byte. */
static bool find_occurrences(partition *pt, int w)
{
    const glesc_tokenizer *t = pt->t;
    const uint32_t *ix_start = t->sp_start[w], *ix_list = t->sp_list[w];
    if (!pt->len || !ix_list)
        return true;
    for (size_t p = 0; p < pt->len; p++) {
        unsigned char c = (unsigned char)pt->text[p];
        for (uint32_t k = ix_start[c]; k < ix_start[c + 1]; k++) {
            int32_t id = t->specials[ix_list[k]];
            size_t sl;
            const char *s = tok_strtab_str(&t->strs, id, &sl);
            if (sl > pt->len - p || memcmp(pt->text + p, s, sl) != 0)
                continue;
            if (pt->n_occ == pt->cap_occ) {
                size_t cap = pt->cap_occ ? pt->cap_occ * 2 : 64;
                occ *o = core_realloc(pt->occs, cap * sizeof *o);
                if (!o)
                    return false;
                pt->occs = o;
                pt->cap_occ = cap;
            }
            pt->occs[pt->n_occ++] = (occ){ix_list[k], (uint32_t)p};
        }
    }
    return true;
}

/* Step 2: replay llama.cpp's order on the occurrences; mark[] says what
 * each byte became (lstrip/rstrip attributes eat the whitespace beside). */
static bool take_occurrences(partition *pt)
{
    const glesc_tokenizer *t = pt->t;
    const char *text = pt->text;
    size_t len = pt->len;
    if (!pt->n_occ)
        return true;
    uint8_t *mark = pt->mark = core_calloc(len, 1);
    int32_t *tok_at = pt->tok_at = core_malloc(len * sizeof *tok_at);
    if (!mark || !tok_at)
        return false;
    qsort(pt->occs, pt->n_occ, sizeof *pt->occs, occ_cmp);
    uint32_t cur_prio = UINT32_MAX;
    size_t last_end = 0;
    for (size_t i = 0; i < pt->n_occ; i++) {
        const occ *o = &pt->occs[i];
        int32_t id = t->specials[o->prio];
        size_t p = o->pos, sl = t->strs.len[id];
        if (o->prio != cur_prio) {
            cur_prio = o->prio;
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
    return true;
}

/* SentencePiece on one raw fragment: spaces become "▁", with a space
 * prefix where add_space_prefix asks for one. esc is scratch. */
static bool encode_spm_fragment(const glesc_tokenizer *t, const char *text, size_t p, size_t q,
                                bool prefix, sbuf *esc, tok_ids *out)
{
    sbuf_reset(esc);
    if (prefix)
        sbuf_append(esc, TOK_SP_MARK);
    size_t r = p;
    while (r < q) {
        const char *sp = memchr(text + r, ' ', q - r);
        size_t e = sp ? (size_t)(sp - text) : q;
        sbuf_appendn(esc, text + r, e - r);
        if (sp) {
            sbuf_append(esc, TOK_SP_MARK);
            e++;
        }
        r = e;
    }
    return !esc->oom && tok_spm_encode(t, esc->data, esc->len, out);
}

/* Step 3: the ids in order: BOS, the taken specials and the encoded raw
 * fragments between them, EOS. */
static bool encode_fragments(const partition *pt, bool add_special, tok_ids *out)
{
    const glesc_tokenizer *t = pt->t;
    const uint8_t *mark = pt->mark;
    sbuf esc;
    sbuf_init(&esc);
    bool ok = false;
    if (add_special && t->add_bos && t->bos >= 0)
        tok_ids_push(out, t->bos);
    bool prev_special = true; /* SPM: a space prefix at the start and after specials */
    size_t p = 0;
    while (p < pt->len) {
        if (mark && mark[p] != MARK_RAW) {
            if (mark[p] == MARK_TOKEN) {
                tok_ids_push(out, pt->tok_at[p]);
                prev_special = true;
            }
            p++;
            continue;
        }
        size_t q = p + 1;
        while (q < pt->len && (!mark || mark[q] == MARK_RAW))
            q++;
        bool fragment_ok = t->kind == GLESC_TOKENIZER_SPM
                               ? encode_spm_fragment(t, pt->text, p, q,
                                                     t->add_space_prefix && prev_special, &esc, out)
                               : tok_bpe_encode(t, pt->text + p, q - p, out);
        if (!fragment_ok)
            goto done;
        prev_special = false;
        p = q;
    }
    if (add_special && t->add_eos && t->eos >= 0)
        tok_ids_push(out, t->eos);
    ok = !out->oom;
done:
    sbuf_free(&esc);
    return ok;
}

/* Emits the ids of text[0..len) with flags into out. */
static bool tokenize_text(const glesc_tokenizer *t, const char *text, size_t len, unsigned flags,
                          tok_ids *out)
{
    if (len > UINT32_MAX - 16)
        return false;
    partition pt = {.t = t, .text = text, .len = len};
    int w = (flags & GLESC_TOKENIZE_PARSE_SPECIAL) ? 1 : 0;
    bool ok = find_occurrences(&pt, w) && take_occurrences(&pt) &&
              encode_fragments(&pt, (flags & GLESC_TOKENIZE_ADD_SPECIAL) != 0, out);
    core_free(pt.occs);
    core_free(pt.mark);
    core_free(pt.tok_at);
    return ok;
}

GLESC_API glesc_status glesc_tokenize_alloc(const glesc_tokenizer *t, const char *text, size_t len,
                                            unsigned flags, int32_t **ids_out, size_t *n_out)
{
    core_err_reset(NULL);
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
    core_err_reset(NULL);
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
