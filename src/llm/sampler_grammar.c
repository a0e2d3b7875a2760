/*
 * sampler_grammar.c — the grammar stage of a sampler: a GBNF grammar
 * (grammar.h) that every sampled token must continue. It constrains the
 * whole chain: the chain samples as usual and only its pick is checked
 * (one token against the state: the common case, cheap); when the grammar
 * rejects it, the random stream is rewound and the chain runs again over
 * the row with every rejected token removed first (llama.cpp's
 * common_sampler does the same). That full check is cached per grammar
 * state (a few recent states' allowed-token bitsets), so the states a
 * grammar keeps coming back to (inside a string, between values) are
 * filtered once.
 *
 * Accepted tokens advance the state; the tokens accepted since the last
 * reset are kept, so a saved session's state (state.c) and a copy can
 * replay them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "llm/grammar.h"
#include "llm/sampler.h"

#define GCACHE 8

struct smp_grammar {
    llm_grammar *g;
    gmatch *m;
    gvocab *v;
    char *text, *root; /* what it was built from: copies compare them */
    int32_t eos;       /* picked when the grammar allows nothing (-1: none) */
    int32_t *ids;      /* 0..n_vocab-1, for full filtering */
    bool *ok;          /* n_vocab */
    int32_t *toks;     /* accepted since the last reset */
    size_t n_toks, cap_toks;
    struct {
        uint64_t key;
        uint64_t *bits; /* allowed tokens; NULL: empty slot */
        uint32_t used;
    } cache[GCACHE];
    uint32_t clock;
};

void smp_grammar_free(glesc_sampler *s)
{
    smp_grammar *gr = s->grammar;
    if (!gr)
        return;
    gmatch_destroy(gr->m);
    gvocab_destroy(gr->v);
    llm_grammar_destroy(gr->g);
    core_free(gr->text);
    core_free(gr->root);
    core_free(gr->ids);
    core_free(gr->ok);
    core_free(gr->toks);
    for (int i = 0; i < GCACHE; i++)
        core_free(gr->cache[i].bits);
    core_free(gr);
    s->grammar = NULL;
}

GLESC_API glesc_status glesc_sampler_add_grammar(glesc_sampler *s, const glesc_tokenizer *tok,
                                                 const char *gbnf, const char *root)
{
    core_err_reset(NULL);
    if (!s || !tok || !gbnf)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: add_grammar needs a sampler, a tokenizer and the text");
    if (s->grammar)
        return core_err_set(NULL, GLESC_ERROR_STATE, "sampler: a chain has one grammar");
    if (!root)
        root = "root";
    smp_grammar *gr = core_calloc(1, sizeof *gr);
    if (!gr)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler: grammar");
    s->grammar = gr;
    glesc_status st = llm_grammar_parse(gbnf, strlen(gbnf), root, &gr->g);
    if (st == GLESC_OK)
        st = gmatch_create(gr->g, &gr->m);
    if (st == GLESC_OK)
        st = gvocab_create(tok, &gr->v);
    if (st == GLESC_OK) {
        gr->text = core_strdup(gbnf);
        gr->root = core_strdup(root);
        gr->ids = core_calloc((size_t)s->n_vocab, sizeof *gr->ids);
        gr->ok = core_calloc((size_t)s->n_vocab, sizeof *gr->ok);
        if (!gr->text || !gr->root || !gr->ids || !gr->ok)
            st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler: grammar");
    }
    if (st != GLESC_OK) {
        smp_grammar_free(s);
        return st;
    }
    for (int32_t i = 0; i < s->n_vocab; i++)
        gr->ids[i] = i;
    gr->eos = glesc_tokenizer_eos(tok);
    if (gr->eos >= s->n_vocab)
        gr->eos = -1;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_sampler_add_json_schema(glesc_sampler *s, const glesc_tokenizer *tok,
                                                     const char *schema)
{
    core_err_reset(NULL);
    if (!schema)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: schema is NULL");
    char *gbnf = NULL;
    glesc_status st = glesc_json_schema_to_grammar(schema, strlen(schema), &gbnf);
    if (st == GLESC_OK) {
        st = glesc_sampler_add_grammar(s, tok, gbnf, "root");
        if (st != GLESC_OK)
            core_err_prefix(NULL, "the grammar of the JSON schema");
    }
    glesc_text_free(gbnf);
    return st;
}

/* ok[i] for every token of the vocabulary in the current state, from the
 * cache when this state was filtered lately. */
static void filter_all(glesc_sampler *s)
{
    smp_grammar *gr = s->grammar;
    uint64_t key = gmatch_hash(gr->m);
    size_t words = ((size_t)s->n_vocab + 63) / 64;
    int slot = 0;
    for (int i = 0; i < GCACHE; i++) {
        if (gr->cache[i].bits && gr->cache[i].key == key) {
            gr->cache[i].used = ++gr->clock;
            for (int32_t t = 0; t < s->n_vocab; t++)
                gr->ok[t] = gr->cache[i].bits[t / 64] >> (t % 64) & 1;
            return;
        }
        if (gr->cache[i].used < gr->cache[slot].used)
            slot = i;
    }
    gmatch_filter(gr->m, gr->v, gr->ids, (size_t)s->n_vocab, gr->ok);
    if (!gr->cache[slot].bits && !(gr->cache[slot].bits = core_malloc(words * 8)))
        return;
    uint64_t *bits = gr->cache[slot].bits;
    memset(bits, 0, words * 8);
    for (int32_t t = 0; t < s->n_vocab; t++)
        bits[t / 64] |= (uint64_t)gr->ok[t] << (t % 64);
    gr->cache[slot].key = key;
    gr->cache[slot].used = ++gr->clock;
}

size_t smp_grammar_mask(glesc_sampler *s, float *row)
{
    filter_all(s);
    size_t left = 0;
    for (int32_t t = 0; t < s->n_vocab; t++) {
        if (!s->grammar->ok[t])
            row[t] = -INFINITY;
        else
            left++;
    }
    return left;
}

int32_t smp_grammar_sample(glesc_sampler *s, const float *logits)
{
    smp_grammar *gr = s->grammar;
    core_rng rng = s->rng;
    int32_t id = smp_run(s, logits, false);
    bool ok = false;
    gmatch_filter(gr->m, gr->v, &id, 1, &ok);
    if (ok)
        return id;
    s->rng = rng; /* the pick is rejected: again, over the allowed tokens */
    filter_all(s);
    bool any = false;
    for (int32_t t = 0; t < s->n_vocab && !any; t++)
        any = gr->ok[t];
    if (!any) { /* a dead end (the grammar allows no token of this vocabulary) */
        smp_run(s, logits, false);
        return gr->eos >= 0 ? gr->eos : id;
    }
    return smp_run(s, logits, true);
}

void smp_grammar_accept(glesc_sampler *s, int32_t token)
{
    smp_grammar *gr = s->grammar;
    if (!gr || !gmatch_accept_token(gr->m, gr->v, token))
        return; /* a token the grammar refuses leaves its state as it was */
    if (gr->n_toks == gr->cap_toks) {
        size_t cap = gr->cap_toks ? 2 * gr->cap_toks : 64;
        int32_t *t = core_realloc(gr->toks, cap * sizeof *t);
        if (!t)
            return; /* the state still advanced; only a saved state misses it */
        gr->toks = t;
        gr->cap_toks = cap;
    }
    gr->toks[gr->n_toks++] = token;
}

void smp_grammar_reset(glesc_sampler *s)
{
    if (!s->grammar)
        return;
    gmatch_reset(s->grammar->m);
    s->grammar->n_toks = 0;
}

void llm_sampler_grammar_restart(glesc_sampler *s)
{
    smp_grammar_reset(s);
}

/* Replays toks[0..n) from the start; false (and the grammar at its start)
 * when one is refused. */
static bool replay(glesc_sampler *s, const int32_t *toks, size_t n)
{
    smp_grammar_reset(s);
    for (size_t i = 0; i < n; i++) {
        size_t before = s->grammar->n_toks;
        smp_grammar_accept(s, toks[i]);
        if (s->grammar->n_toks == before) {
            smp_grammar_reset(s);
            return false;
        }
    }
    return true;
}

void smp_grammar_copy(glesc_sampler *dst, const glesc_sampler *src)
{
    smp_grammar *d = dst->grammar, *g = src->grammar;
    if (!d)
        return;
    if (!g || strcmp(d->text, g->text) || strcmp(d->root, g->root) ||
        gmatch_copy(d->m, g->m) != GLESC_OK) {
        replay(dst, g ? g->toks : NULL, g ? g->n_toks : 0);
        return;
    }
    if (d->cap_toks < g->n_toks) {
        int32_t *t = core_realloc(d->toks, (g->n_toks ? g->n_toks : 1) * sizeof *t);
        if (!t) {
            replay(dst, NULL, 0);
            return;
        }
        d->toks = t;
        d->cap_toks = g->n_toks;
    }
    if (g->n_toks)
        memcpy(d->toks, g->toks, g->n_toks * sizeof *d->toks);
    d->n_toks = g->n_toks;
}

bool llm_sampler_has_grammar(const glesc_sampler *s)
{
    return s->grammar != NULL;
}

size_t llm_sampler_grammar_n(const glesc_sampler *s)
{
    return s->grammar ? s->grammar->n_toks : 0;
}

const int32_t *llm_sampler_grammar_tokens(const glesc_sampler *s)
{
    return s->grammar ? s->grammar->toks : NULL;
}

bool llm_sampler_grammar_replays(glesc_sampler *s, const int32_t *toks, size_t n)
{
    if (!s->grammar)
        return true;
    gmatch *m = NULL;
    if (gmatch_create(s->grammar->g, &m) != GLESC_OK)
        return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = gmatch_accept_token(m, s->grammar->v, toks[i]);
    gmatch_destroy(m);
    return ok;
}

void llm_sampler_grammar_replay(glesc_sampler *s, const int32_t *toks, size_t n)
{
    if (s->grammar)
        replay(s, toks, n);
}

GLESC_API glesc_status glesc_grammar_check(const char *gbnf, const char *root)
{
    core_err_reset(NULL);
    if (!gbnf)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "grammar: text is NULL");
    llm_grammar *g = NULL;
    gmatch *m = NULL;
    glesc_status st = llm_grammar_parse(gbnf, strlen(gbnf), root, &g);
    if (st == GLESC_OK)
        st = gmatch_create(g, &m);
    gmatch_destroy(m);
    llm_grammar_destroy(g);
    return st;
}
