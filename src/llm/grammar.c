/*
 * grammar.c — running a parsed GBNF grammar (grammar.h): llama.cpp's
 * pushdown automaton over code points. A state is a set of stacks (deduped
 * by a hash of their contents); a code point moves every stack whose top
 * character set matches it one element on, and "advancing" expands rule
 * references at the top until each stack shows a character set or is
 * empty. Tokens are checked against a state through gvocab, which decodes
 * every token's text to code points once, when the sampler is made.
 *
 * Filtering many tokens shares work the way llama.cpp's does: which stacks
 * follow a matched character depends on the stack, not on the character,
 * so the tokens are walked a code point at a time together, each stack's
 * successors computed once for all the tokens that matched it. A token
 * that ends inside a UTF-8 sequence is allowed when some character that
 * sequence could become matches; the state then carries the open sequence.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "llm/grammar.h"

/* A set of stacks, back to back in pool. */
typedef struct sset {
    uint32_t *pool;
    size_t len, cap;
    uint32_t *off, *cnt;
    uint64_t *hash;
    uint32_t n, cap_n;
    uint32_t *tab; /* open addressing over hash: stack index or UINT32_MAX */
    uint32_t tab_cap;
    bool failed; /* out of memory or past a limit: the set is unusable */
} sset;

typedef struct upart {
    uint32_t val; /* the bits so far */
    uint32_t rem; /* continuation bytes still expected (0: none open) */
    uint32_t min; /* the least code point of the sequence's length (overlong below) */
} upart;

struct gmatch {
    const llm_grammar *g;
    sset cur, a, b, work; /* the state; scratch for a token's steps; advance's */
    upart part;
};

/* TOK_CONT: not UTF-8 on its own (continuation bytes): only after a
 * token that left a sequence open. */
enum { TOK_TEXT = 0, TOK_NEVER = 1, TOK_EOG = 2, TOK_CONT = 3 };

struct gvocab {
    int32_t n;
    uint32_t *cp_off; /* [n + 1] into cps */
    uint32_t *cps;
    upart *tail;        /* the open sequence a token ends in */
    uint8_t *kind;      /* TOK_* */
    uint32_t *byte_off; /* [n + 1] into bytes: the pieces, for an open state */
    char *bytes;
};

static void sset_free(sset *s)
{
    core_free(s->pool);
    core_free(s->off);
    core_free(s->cnt);
    core_free(s->hash);
    core_free(s->tab);
    memset(s, 0, sizeof *s);
}

static void sset_clear(sset *s)
{
    if (s->tab && s->n)
        memset(s->tab, 0xFF, s->tab_cap * sizeof *s->tab);
    s->len = 0;
    s->n = 0;
    s->failed = false;
}

/* The table's slot for a stack d[0..n) of hash h: its index, or the empty
 * slot where it goes. */
static uint32_t *tab_slot(const sset *s, const uint32_t *d, uint32_t n, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & (s->tab_cap - 1);; i = (i + 1) & (s->tab_cap - 1)) {
        uint32_t k = s->tab[i];
        if (k == UINT32_MAX ||
            (s->hash[k] == h && s->cnt[k] == n && !memcmp(s->pool + s->off[k], d, n * sizeof *d)))
            return &s->tab[i];
    }
}

/* A table twice the stacks' number (from 16 stacks on; below, a scan). */
static bool tab_grow(sset *s)
{
    uint32_t cap = s->tab_cap ? 2 * s->tab_cap : 64;
    uint32_t *t = core_malloc(cap * sizeof *t);
    if (!t)
        return false;
    core_free(s->tab);
    s->tab = t;
    s->tab_cap = cap;
    memset(t, 0xFF, cap * sizeof *t);
    for (uint32_t k = 0; k < s->n; k++)
        *tab_slot(s, s->pool + s->off[k], s->cnt[k], s->hash[k]) = k;
    return true;
}

static bool sset_reserve(sset *s, size_t words)
{
    if (s->n == s->cap_n) {
        uint32_t cap = s->cap_n ? 2 * s->cap_n : 16;
        uint32_t *off = core_realloc(s->off, cap * sizeof *off);
        if (off)
            s->off = off;
        uint32_t *cnt = core_realloc(s->cnt, cap * sizeof *cnt);
        if (cnt)
            s->cnt = cnt;
        uint64_t *h = core_realloc(s->hash, cap * sizeof *h);
        if (h)
            s->hash = h;
        if (!off || !cnt || !h)
            return false;
        s->cap_n = cap;
    }
    if (!s->pool || s->len + words > s->cap) { /* the pool exists even for empty stacks */
        size_t cap = CORE_MAX(2 * s->cap, s->len + words + 64);
        uint32_t *pool = core_realloc(s->pool, cap * sizeof *pool);
        if (!pool)
            return false;
        s->pool = pool;
        s->cap = cap;
    }
    return true;
}

/* Appends base[0..nb) then x1, x2 (each UINT32_MAX: left out); dedupe
 * when dedupe is set. False when the set failed. */
static bool sset_add(sset *s, const uint32_t *base, uint32_t nb, uint32_t x1, uint32_t x2,
                     bool dedupe)
{
    if (s->failed)
        return false;
    uint32_t n = nb + (x1 != UINT32_MAX) + (x2 != UINT32_MAX);
    uintptr_t b = (uintptr_t)base, p0 = (uintptr_t)s->pool;
    size_t boff = s->pool && b >= p0 && b < p0 + s->cap * sizeof *s->pool
                      ? (size_t)(b - p0) / sizeof *s->pool
                      : SIZE_MAX;
    if (n > GRAMMAR_MAX_DEPTH || s->n >= GRAMMAR_MAX_STACKS ||
        s->len + n > GRAMMAR_MAX_STATE_WORDS || !sset_reserve(s, n)) {
        s->failed = true;
        return false;
    }
    uint32_t *d = s->pool + s->len;
    if (boff != SIZE_MAX)
        base = s->pool + boff; /* the reserve may have moved the pool */
    if (nb)
        memmove(d, base, nb * sizeof *d); /* base may lie in the pool itself */
    uint32_t k = nb;
    if (x1 != UINT32_MAX)
        d[k++] = x1;
    if (x2 != UINT32_MAX)
        d[k++] = x2;
    uint64_t h = dedupe ? core_hash64_bytes(d, n * sizeof *d) : 0;
    uint32_t *slot = NULL;
    if (dedupe && s->n >= 16 && 2 * (s->n + 1) > s->tab_cap && !tab_grow(s)) {
        s->failed = true;
        return false;
    }
    if (dedupe && s->tab) {
        if (*(slot = tab_slot(s, d, n, h)) != UINT32_MAX)
            return true;
        *slot = s->n;
    }
    for (uint32_t i = 0; dedupe && !s->tab && i < s->n; i++)
        if (s->hash[i] == h && s->cnt[i] == n && !memcmp(s->pool + s->off[i], d, n * sizeof *d))
            return true;
    s->off[s->n] = (uint32_t)s->len;
    s->cnt[s->n] = n;
    s->hash[s->n++] = h;
    s->len += n;
    return true;
}

static bool sset_copy(sset *dst, const sset *src)
{
    sset_clear(dst);
    for (uint32_t i = 0; i < src->n; i++)
        if (!sset_add(dst, src->pool + src->off[i], src->cnt[i], UINT32_MAX, UINT32_MAX, false))
            return false;
    if (src->n)
        memcpy(dst->hash, src->hash, src->n * sizeof *dst->hash);
    return true;
}

static bool is_end(const llm_grammar *g, uint32_t pos)
{
    return g->elems[pos].type == GEL_END || g->elems[pos].type == GEL_ALT;
}

/* The element after the character set at pos. */
static uint32_t char_end(const llm_grammar *g, uint32_t pos)
{
    do
        pos++;
    while (g->elems[pos].type == GEL_CHAR_ALT || g->elems[pos].type == GEL_CHAR_RNG_UPPER);
    return pos;
}

static bool match_char(const llm_grammar *g, uint32_t pos, uint32_t cp)
{
    const gelem *e = g->elems + pos;
    if (e->type == GEL_CHAR_ANY)
        return true;
    bool positive = e->type == GEL_CHAR, found = false;
    do {
        if (e[1].type == GEL_CHAR_RNG_UPPER) {
            found = found || (e->value <= cp && cp <= e[1].value);
            e += 2;
        } else {
            found = found || e->value == cp;
            e++;
        }
    } while (e->type == GEL_CHAR_ALT);
    return found == positive;
}

/* Could a character that begins with the open sequence p match the set? */
static bool match_partial(const llm_grammar *g, uint32_t pos, upart p)
{
    const gelem *e = g->elems + pos;
    if (e->type == GEL_CHAR_ANY)
        return true;
    uint32_t lo = p.val << (6 * p.rem), hi = lo | ((1u << (6 * p.rem)) - 1);
    lo = CORE_MAX(lo, p.min);
    hi = CORE_MIN(hi, 0x10FFFFu);
    if (lo > hi)
        return false;
    bool positive = e->type == GEL_CHAR;
    do {
        uint32_t a = e->value, b = e[1].type == GEL_CHAR_RNG_UPPER ? e[1].value : a;
        e += e[1].type == GEL_CHAR_RNG_UPPER ? 2 : 1;
        if (positive && a <= hi && lo <= b)
            return true;
        if (!positive && a <= lo && hi <= b)
            return false; /* every completion is excluded */
    } while (e->type == GEL_CHAR_ALT);
    return !positive;
}

/* Expands the stack base[0..nb) + x1 + x2 into out until each top is a
 * character set or the stack is empty. False when a limit was hit. */
static bool advance(const llm_grammar *g, sset *out, sset *work, const uint32_t *base, uint32_t nb,
                    uint32_t x1, uint32_t x2)
{
    sset_clear(work);
    if (!sset_add(work, base, nb, x1, x2, false))
        return false;
    for (uint32_t expansions = 0; work->n;) {
        uint32_t i = --work->n, n = work->cnt[i];
        const uint32_t *s = work->pool + work->off[i];
        work->len = work->off[i];
        if (n == 0 || g->elems[s[n - 1]].type != GEL_RULE_REF) {
            if (!sset_add(out, s, n, UINT32_MAX, UINT32_MAX, true))
                return false;
            continue;
        }
        if (++expansions > GRAMMAR_MAX_EXPAND)
            return false;
        uint32_t pos = s[n - 1], sub = g->rule_start[g->elems[pos].value];
        uint32_t after = is_end(g, pos + 1) ? UINT32_MAX : pos + 1;
        /* s stays readable: the adds below write at or after work->len,
         * which is s itself, so the first add moves s onto itself and later
         * ones copy from that copy */
        uint32_t from = work->off[i];
        for (;;) {
            if (!sset_add(work, work->pool + from, n - 1, after, is_end(g, sub) ? UINT32_MAX : sub,
                          false))
                return false;
            from = work->off[work->n - 1];
            while (!is_end(g, sub))
                sub++;
            if (g->elems[sub].type != GEL_ALT)
                break;
            sub++;
        }
    }
    return !out->failed;
}

/* to = the stacks of from after code point cp. */
static bool step(const llm_grammar *g, const sset *from, sset *to, sset *work, uint32_t cp)
{
    sset_clear(to);
    for (uint32_t i = 0; i < from->n; i++) {
        uint32_t n = from->cnt[i];
        const uint32_t *s = from->pool + from->off[i];
        if (n == 0 || !match_char(g, s[n - 1], cp))
            continue;
        uint32_t next = char_end(g, s[n - 1]);
        if (!advance(g, to, work, s, n - 1, is_end(g, next) ? UINT32_MAX : next, UINT32_MAX))
            return false;
    }
    return to->n > 0;
}

/* Decodes s[0..n) after the open sequence *p: code points to cps (room for
 * n), the count to *ncp, the sequence left open to *p. False on invalid
 * UTF-8. */
static bool utf8_decode(const uint8_t *s, size_t n, upart *p, uint32_t *cps, uint32_t *ncp)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (p->rem) {
            if ((c & 0xC0) != 0x80)
                return false;
            p->val = p->val << 6 | (c & 0x3Fu);
            /* an overlong form, a surrogate or beyond U+10FFFF: invalid
             * as soon as the bits so far show it */
            uint32_t lo = p->val << (6 * (p->rem - 1)), hi = lo | ((1u << (6 * (p->rem - 1))) - 1);
            if (hi < p->min || lo > 0x10FFFF || (lo >= 0xD800 && hi <= 0xDFFF))
                return false;
            if (--p->rem == 0) {
                if (p->val >= 0xD800 && p->val <= 0xDFFF)
                    return false;
                cps[k++] = p->val;
            }
            continue;
        }
        if (c < 0x80) {
            cps[k++] = c;
        } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
            *p = (upart){c & 0x1Fu, 1, 0x80};
        } else if ((c & 0xF0) == 0xE0) {
            *p = (upart){c & 0x0Fu, 2, 0x800};
        } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
            *p = (upart){c & 0x07u, 3, 0x10000};
        } else {
            return false;
        }
    }
    *ncp = k;
    return true;
}

glesc_status gmatch_create(const llm_grammar *g, gmatch **out)
{
    *out = NULL;
    gmatch *m = core_calloc(1, sizeof *m);
    if (!m)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar state");
    m->g = g;
    gmatch_reset(m);
    if (m->cur.failed) {
        gmatch_destroy(m);
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "grammar: the start rule '%s' expands past the limits (%u stacks, "
                            "%u expansions)",
                            g->names[g->root], GRAMMAR_MAX_STACKS, GRAMMAR_MAX_EXPAND);
    }
    *out = m;
    return GLESC_OK;
}

void gmatch_destroy(gmatch *m)
{
    if (!m)
        return;
    sset_free(&m->cur);
    sset_free(&m->a);
    sset_free(&m->b);
    sset_free(&m->work);
    core_free(m);
}

void gmatch_reset(gmatch *m)
{
    const llm_grammar *g = m->g;
    sset_clear(&m->cur);
    m->part = (upart){0, 0, 0};
    for (uint32_t a = g->rule_start[g->root];; a++) {
        if (!advance(g, &m->cur, &m->work, NULL, 0, is_end(g, a) ? UINT32_MAX : a, UINT32_MAX)) {
            m->cur.failed = true;
            return;
        }
        while (!is_end(g, a))
            a++;
        if (g->elems[a].type != GEL_ALT)
            break;
    }
}

glesc_status gmatch_copy(gmatch *dst, const gmatch *src)
{
    if (!sset_copy(&dst->cur, &src->cur))
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar state copy");
    dst->part = src->part;
    return GLESC_OK;
}

/* Advances state st (m->a or m->b) by s[0..n) after the open sequence *p;
 * the result is in *st (a pointer to m->a or m->b). */
static bool feed(gmatch *m, sset **st, const char *s, size_t n, upart *p)
{
    uint32_t cp[64];
    sset *a = *st, *b = a == &m->a ? &m->b : &m->a;
    for (size_t i = 0; i < n; i += 64) {
        uint32_t k;
        if (!utf8_decode((const uint8_t *)s + i, CORE_MIN(64, n - i), p, cp, &k))
            return false;
        for (uint32_t j = 0; j < k; j++) {
            if (!step(m->g, a, b, &m->work, cp[j]))
                return false;
            sset *t = a;
            a = b;
            b = t;
        }
    }
    *st = a;
    if (!p->rem)
        return true;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->cnt[i] && match_partial(m->g, a->pool[a->off[i] + a->cnt[i] - 1], *p))
            return true;
    return false;
}

bool gmatch_accept_bytes(gmatch *m, const char *s, size_t n)
{
    upart p = m->part;
    sset *st = &m->a;
    if (!sset_copy(&m->a, &m->cur) || !feed(m, &st, s, n, &p))
        return false;
    sset t = m->cur; /* the result becomes the state, the old state scratch */
    m->cur = *st;
    *st = t;
    m->part = p;
    return true;
}

bool gmatch_can_end(const gmatch *m)
{
    if (m->part.rem)
        return false;
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (m->cur.cnt[i] == 0)
            return true;
    return false;
}

bool llm_grammar_accepts(const llm_grammar *g, const char *s, size_t n)
{
    gmatch *m;
    if (gmatch_create(g, &m) != GLESC_OK)
        return false;
    bool ok = gmatch_accept_bytes(m, s, n) && gmatch_can_end(m);
    gmatch_destroy(m);
    return ok;
}

void gvocab_destroy(gvocab *v)
{
    if (!v)
        return;
    core_free(v->cp_off);
    core_free(v->cps);
    core_free(v->tail);
    core_free(v->kind);
    core_free(v->byte_off);
    core_free(v->bytes);
    core_free(v);
}

glesc_status gvocab_create(const glesc_tokenizer *tok, gvocab **out)
{
    *out = NULL;
    int32_t n = glesc_tokenizer_n_vocab(tok);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *piece;
        size_t len;
        if (glesc_token_to_piece(tok, i, 0, &piece, &len) == GLESC_OK)
            total += len;
    }
    if (total > UINT32_MAX)
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "grammar: %zu bytes of token text", total);
    gvocab *v = core_calloc(1, sizeof *v);
    if (!v)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar vocabulary");
    v->n = n;
    v->cp_off = core_calloc((size_t)n + 1, sizeof *v->cp_off);
    v->byte_off = core_calloc((size_t)n + 1, sizeof *v->byte_off);
    v->cps = core_calloc(total + 1, sizeof *v->cps);
    v->bytes = core_malloc(total + 1);
    v->tail = core_calloc((size_t)n + 1, sizeof *v->tail);
    v->kind = core_calloc((size_t)n + 1, 1);
    if (!v->cp_off || !v->byte_off || !v->cps || !v->bytes || !v->tail || !v->kind) {
        gvocab_destroy(v);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar vocabulary of %d tokens",
                            (int)n);
    }
    uint32_t ncp = 0, nb = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *piece = "";
        size_t len = 0;
        glesc_token_to_piece(tok, i, 0, &piece, &len);
        memcpy(v->bytes + nb, piece, len);
        v->byte_off[i] = nb;
        v->cp_off[i] = ncp;
        nb += (uint32_t)len;
        upart p = {0, 0, 0};
        uint32_t k = 0;
        if (glesc_tokenizer_is_eog(tok, i))
            v->kind[i] = TOK_EOG;
        else if (len == 0)
            v->kind[i] = TOK_NEVER; /* renders as nothing */
        else if (!utf8_decode((const uint8_t *)piece, len, &p, v->cps + ncp, &k))
            v->kind[i] = TOK_CONT;
        v->tail[i] = p;
        ncp += v->kind[i] == TOK_TEXT ? k : 0;
    }
    v->cp_off[n] = ncp;
    v->byte_off[n] = nb;
    *out = v;
    return GLESC_OK;
}

/* A token being filtered: its code points and the sequence it leaves open. */
typedef struct fcand {
    uint32_t idx; /* into ids / ok */
    uint32_t n;
    const uint32_t *cp;
    upart tail;
} fcand;

/* Marks ok for the candidates c[0..k) that stack s[0..ns) takes, from
 * code point d of each on. */
static void filter_stack(gmatch *m, const uint32_t *s, uint32_t ns, const fcand *c, size_t k,
                         uint32_t d, bool *ok)
{
    const llm_grammar *g = m->g;
    fcand *next = NULL;
    size_t kn = 0;
    uint32_t top = ns ? s[ns - 1] : 0;
    for (size_t i = 0; i < k; i++) {
        if (ok[c[i].idx])
            continue;
        if (d == c[i].n) {
            ok[c[i].idx] = c[i].tail.rem == 0 || (ns && match_partial(g, top, c[i].tail));
        } else if (ns && match_char(g, top, c[i].cp[d])) {
            if (!next && !(next = core_malloc((k - i) * sizeof *next)))
                return; /* out of memory: these stay rejected */
            next[kn++] = c[i];
        }
    }
    if (!kn)
        return;
    sset succ = {0};
    uint32_t after = char_end(g, top);
    if (advance(g, &succ, &m->work, s, ns - 1, is_end(g, after) ? UINT32_MAX : after, UINT32_MAX))
        for (uint32_t j = 0; j < succ.n; j++)
            filter_stack(m, succ.pool + succ.off[j], succ.cnt[j], next, kn, d + 1, ok);
    sset_free(&succ);
    core_free(next);
}

void gmatch_filter(gmatch *m, const gvocab *v, const int32_t *ids, size_t n, bool *ok)
{
    bool can_end = gmatch_can_end(m);
    fcand *c = core_malloc((n ? n : 1) * sizeof *c);
    uint32_t *open = NULL; /* code points decoded after an open sequence */
    if (m->part.rem)
        open = core_malloc(((size_t)v->byte_off[v->n] + 1) * sizeof *open);
    size_t k = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        ok[i] = false;
        if (id < 0 || id >= v->n || v->kind[id] == TOK_NEVER || !c ||
            (v->kind[id] == TOK_CONT && !m->part.rem))
            continue;
        if (v->kind[id] == TOK_EOG) {
            ok[i] = can_end;
            continue;
        }
        fcand f = {(uint32_t)i, v->cp_off[id + 1] - v->cp_off[id], v->cps + v->cp_off[id],
                   v->tail[id]};
        if (m->part.rem) {
            upart p = m->part;
            uint32_t nb = v->byte_off[id + 1] - v->byte_off[id], got;
            if (!open || !utf8_decode((const uint8_t *)v->bytes + v->byte_off[id], nb, &p,
                                      open + used, &got))
                continue;
            f = (fcand){(uint32_t)i, got, open + used, p};
            used += got;
        }
        c[k++] = f;
    }
    for (uint32_t j = 0; j < m->cur.n && k; j++) {
        const uint32_t *s = m->cur.pool + m->cur.off[j];
        uint32_t ns = m->cur.cnt[j];
        if (m->part.rem && !(ns && match_partial(m->g, s[ns - 1], m->part)))
            continue;
        filter_stack(m, s, ns, c, k, 0, ok);
    }
    core_free(open);
    core_free(c);
}

bool gmatch_accept_token(gmatch *m, const gvocab *v, int32_t id)
{
    if (id < 0 || id >= v->n || v->kind[id] == TOK_NEVER)
        return false;
    if (v->kind[id] == TOK_EOG)
        return gmatch_can_end(m);
    return gmatch_accept_bytes(m, v->bytes + v->byte_off[id],
                               v->byte_off[id + 1] - v->byte_off[id]);
}

uint64_t gmatch_hash(const gmatch *m)
{
    uint64_t h = core_hash64_bytes(m->cur.pool, m->cur.len * sizeof *m->cur.pool);
    h ^= core_hash64_bytes(m->cur.cnt, m->cur.n * sizeof *m->cur.cnt) * 0x9E3779B97F4A7C15ull;
    return h ^ ((uint64_t)m->part.val << 8 | m->part.rem) * 0xC2B2AE3D27D4EB4Full;
}
