/*
 * spm.c — SentencePiece ("llama") encoding of one text fragment,
 * as llama.cpp's llm_tokenizer_spm does it: start from UTF-8 characters,
 * repeatedly merge the adjacent pair whose concatenation is the token with
 * the highest score (ties: leftmost), then emit each symbol's token, or its
 * bytes as <0xNN> tokens when it is not one.
 *
 * Cost: every merge pushes at most two pairs, so a fragment of n characters
 * takes O(n log n) — 100,000 identical characters included.
 */
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

typedef struct spm_sym {
    uint32_t start, n; /* bytes of the text */
    int32_t prev, next;
    int32_t id; /* the token a merge made, SPM_ID_UNKNOWN before one */
} spm_sym;

enum { SPM_ID_UNKNOWN = -2 };

typedef struct spm_bigram {
    float score;
    int32_t left, right;
    int32_t id; /* the token of the pair's text, whose length is the pair's size */
} spm_bigram;

/* Max-heap order: higher score first, then the leftmost pair. */
static bool bigram_before(const spm_bigram *a, const spm_bigram *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    return a->left < b->left;
}

typedef struct spm_heap {
    spm_bigram *v;
    size_t n, cap;
    bool oom;
} spm_heap;

static void heap_push(spm_heap *h, spm_bigram x)
{
    if (h->oom)
        return;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        spm_bigram *v = core_realloc(h->v, cap * sizeof *v);
        if (!v) {
            h->oom = true;
            return;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&x, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

static spm_bigram heap_pop(spm_heap *h)
{
    spm_bigram top = h->v[0];
    spm_bigram x = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &x))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n)
        h->v[i] = x;
    return top;
}

static int32_t find_token(const glesc_tokenizer *t, const char *s, size_t n)
{
    int32_t id = tok_strtab_find(&t->strs, s, n);
    return id >= 0 && (uint32_t)id < t->n_tokens ? id : -1;
}

static void try_add(const glesc_tokenizer *t, const char *text, const spm_sym *syms, int32_t l,
                    int32_t r, spm_heap *h)
{
    if (l < 0 || r < 0)
        return;
    uint32_t size = syms[l].n + syms[r].n;
    int32_t id = find_token(t, text + syms[l].start, size);
    if (id < 0)
        return;
    heap_push(h, (spm_bigram){t->info[id].score, l, r, id});
}

/* One segment: merges, then tokens or byte fallback. syms and h are
 * scratch owned by the caller. */
static bool encode_segment(const glesc_tokenizer *t, const char *text, size_t len, spm_sym *syms,
                           spm_heap *h, tok_ids *out)
{
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t k = CORE_MIN(tok_utf8_len((unsigned char)text[off]), len - off);
        syms[n] = (spm_sym){(uint32_t)off, (uint32_t)k, n - 1, off + k == len ? -1 : n + 1,
                            SPM_ID_UNKNOWN};
        n++;
        off += k;
    }
    h->n = 0;
    for (int32_t i = 1; i < n; i++)
        try_add(t, text, syms, i - 1, i, h);
    while (h->n && !h->oom) {
        spm_bigram b = heap_pop(h);
        spm_sym *l = &syms[b.left], *r = &syms[b.right];
        /* Skip pairs one of whose symbols has changed since. */
        if (l->n == 0 || r->n == 0 || l->n + r->n != t->strs.len[b.id])
            continue;
        l->n += r->n;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            syms[r->next].prev = b.left;
        try_add(t, text, syms, l->prev, b.left, h);
        try_add(t, text, syms, b.left, l->next, h);
    }
    if (h->oom)
        return false;
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        const char *s = text + syms[i].start;
        uint32_t k = syms[i].n;
        /* A merged symbol is the token its merge found; no need to look its
         * text up again. */
        int32_t id = syms[i].id != SPM_ID_UNKNOWN ? syms[i].id : find_token(t, s, k);
        if (id >= 0) {
            tok_ids_push(out, id);
            continue;
        }
        /* Byte fallback. A vocabulary without byte tokens (TinyStories-656K)
         * gets the unknown token for the whole character instead; llama.cpp
         * throws there. */
        bool all = true;
        for (uint32_t j = 0; j < k; j++)
            if (t->byte_tok[(unsigned char)s[j]] < 0)
                all = false;
        if (all) {
            for (uint32_t j = 0; j < k; j++)
                tok_ids_push(out, t->byte_tok[(unsigned char)s[j]]);
        } else if (t->unk >= 0) {
            tok_ids_push(out, t->unk);
        }
    }
    return !out->oom;
}

static bool is_space_mark(const char *s, size_t n)
{
    return n == 3 && memcmp(s, TOK_SP_MARK, 3) == 0;
}

bool tok_spm_encode(const glesc_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    if (len == 0)
        return true;
    if (len > INT32_MAX)
        return false;
    /* When no token holds "▁" after anything but "▁" (t->spm_split), no
     * merge can cross the start of a "▁" run, so the text splits there into
     * words that merge independently: the same result, with small heaps. The
     * split points are symbol starts of the whole text, so the lenient UTF-8
     * grouping is unchanged. */
    size_t max_seg = len;
    if (t->spm_split) {
        max_seg = 0;
        size_t seg = 0, prev_off = 0, prev_k = 0;
        for (size_t off = 0; off < len;) {
            size_t k = CORE_MIN(tok_utf8_len((unsigned char)text[off]), len - off);
            if (off > seg && is_space_mark(text + off, k) &&
                !is_space_mark(text + prev_off, prev_k)) {
                max_seg = CORE_MAX(max_seg, off - seg);
                seg = off;
            }
            prev_off = off;
            prev_k = k;
            off += k;
        }
        max_seg = CORE_MAX(max_seg, len - seg);
    }
    spm_sym *syms = core_malloc(max_seg * sizeof *syms);
    if (!syms)
        return false;
    spm_heap h = {0};
    bool ok = true;
    if (!t->spm_split) {
        ok = encode_segment(t, text, len, syms, &h, out);
    } else {
        size_t seg = 0, prev_off = 0, prev_k = 0;
        for (size_t off = 0; ok && off < len;) {
            size_t k = CORE_MIN(tok_utf8_len((unsigned char)text[off]), len - off);
            if (off > seg && is_space_mark(text + off, k) &&
                !is_space_mark(text + prev_off, prev_k)) {
                ok = encode_segment(t, text + seg, off - seg, syms, &h, out);
                seg = off;
            }
            prev_off = off;
            prev_k = k;
            off += k;
        }
        if (ok)
            ok = encode_segment(t, text + seg, len - seg, syms, &h, out);
    }
    core_free(h.v);
    core_free(syms);
    return ok;
}
