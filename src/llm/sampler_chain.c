/*
 * sampler_chain.c — the sampler's stages run over one logits row
 * (sampler.h). The candidates stay the whole row, read in place, until a
 * stage needs them as a list: top-k selects its k with a heap, the
 * probability filters sort, a greedy pick is one pass. Bias and penalty
 * change a copy of the row (or the list, when it exists). Probabilities
 * are exp((l - l_max) / div), div the product of the temperatures so far
 * (llama.cpp's temperature, which divides the logits, gives the same).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "llm/sampler.h"

typedef struct run {
    glesc_sampler *s;
    const float *l; /* the row while n < 0 */
    int32_t n;      /* candidates in s->cands; -1: the whole row */
    bool sorted;    /* cands best first */
    double div;
} run;

/* Orders candidates best first: higher logit, then lower id. */
static int cand_cmp(const void *a, const void *b)
{
    const smp_cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool worse(const smp_cand *a, const smp_cand *b)
{
    return cand_cmp(a, b) > 0;
}

/* Min-heap on "goodness": the root is the worst of the k kept. */
static void heap_down(smp_cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m]))
            m = l;
        if (r < n && worse(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        smp_cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The best k of the row into cands[0..k), sorted best first. */
static void select_top(run *r, int32_t k)
{
    glesc_sampler *s = r->s;
    smp_cand *c = s->cands;
    const float *l = r->l;
    if (k >= s->n_vocab) {
        for (int32_t i = 0; i < s->n_vocab; i++)
            c[i] = (smp_cand){i, l[i]};
        qsort(c, (size_t)s->n_vocab, sizeof *c, cand_cmp);
        k = s->n_vocab;
    } else {
        for (int32_t i = 0; i < k; i++)
            c[i] = (smp_cand){i, l[i]};
        for (int32_t i = k / 2 - 1; i >= 0; i--)
            heap_down(c, k, i);
        for (int32_t i = k; i < s->n_vocab; i++) {
            smp_cand x = {i, l[i]};
            if (worse(&c[0], &x)) {
                c[0] = x;
                heap_down(c, k, 0);
            }
        }
        qsort(c, (size_t)k, sizeof *c, cand_cmp);
    }
    r->n = k;
    r->sorted = true;
}

static void ensure_sorted(run *r)
{
    if (r->n < 0)
        select_top(r, r->s->n_vocab);
    else if (!r->sorted)
        qsort(r->s->cands, (size_t)r->n, sizeof *r->s->cands, cand_cmp);
    r->sorted = true;
}

/* The row as a copy the stage may change. */
static float *writable_row(run *r)
{
    if (r->l != r->s->row) {
        memcpy(r->s->row, r->l, (size_t)r->s->n_vocab * sizeof *r->s->row);
        r->l = r->s->row;
    }
    return r->s->row;
}

/* Adds d to token t's logit, in the row or in the list. */
static void bump(run *r, int32_t t, float d, bool mul)
{
    float *x = NULL;
    if (r->n < 0) {
        x = &writable_row(r)[t];
    } else {
        for (int32_t i = 0; i < r->n && !x; i++)
            if (r->s->cands[i].id == t)
                x = &r->s->cands[i].logit;
        r->sorted = false;
    }
    if (!x)
        return;
    if (mul) /* llama.cpp's penalty: divide when positive, multiply when not */
        *x = *x > 0 ? *x / d : *x * d;
    else
        *x += d;
}

static void apply_bias(run *r)
{
    for (size_t i = 0; i < r->s->n_bias; i++)
        bump(r, r->s->bias[i].token, r->s->bias[i].bias, false);
}

/* Each distinct recent token's logit, once. */
static void apply_penalty(run *r)
{
    glesc_sampler *s = r->s;
    if (s->penalty == 1.0f)
        return;
    for (int32_t i = 0; i < s->n_history; i++) {
        int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab)
            continue;
        bool seen = false;
        for (int32_t j = 0; j < i && !seen; j++)
            seen = s->history[j] == t;
        if (!seen)
            bump(r, t, s->penalty, true);
    }
}

static double weight(const run *r, int32_t i)
{
    return exp(((double)r->s->cands[i].logit - r->s->cands[0].logit) / r->div);
}

static void top_p(run *r, float p)
{
    ensure_sorted(r);
    double sum = 0, cum = 0;
    for (int32_t i = 0; i < r->n; i++)
        sum += weight(r, i);
    for (int32_t i = 0; i < r->n; i++) {
        cum += weight(r, i) / sum;
        if (cum >= p) {
            r->n = i + 1;
            break;
        }
    }
}

static void min_p(run *r, float p)
{
    ensure_sorted(r);
    /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + div * log(min_p) */
    double cut = (double)r->s->cands[0].logit + r->div * log((double)p);
    int32_t m = 1;
    while (m < r->n && r->s->cands[m].logit >= cut)
        m++;
    r->n = m;
}

typedef struct shifted {
    double score, p;
    smp_cand c;
} shifted;

static int shifted_cmp(const void *a, const void *b)
{
    const shifted *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return x->c.id < y->c.id ? -1 : x->c.id > y->c.id;
}

/* llama.cpp's locally typical sampling: the tokens whose surprise is
 * closest to the entropy, until their mass reaches p. */
static void typical(run *r, float p)
{
    ensure_sorted(r);
    if (p >= 1.0f || r->n <= 1)
        return;
    shifted *sh = core_malloc((size_t)r->n * sizeof *sh);
    if (!sh)
        return; /* out of memory: the stage keeps everything */
    double sum = 0, ent = 0;
    for (int32_t i = 0; i < r->n; i++)
        sum += weight(r, i);
    for (int32_t i = 0; i < r->n; i++) {
        double q = weight(r, i) / sum;
        sh[i] = (shifted){0, q, r->s->cands[i]};
        ent -= q > 0 ? q * log(q) : 0;
    }
    for (int32_t i = 0; i < r->n; i++)
        sh[i].score = sh[i].p > 0 ? fabs(-log(sh[i].p) - ent) : INFINITY;
    qsort(sh, (size_t)r->n, sizeof *sh, shifted_cmp);
    double cum = 0;
    int32_t keep = r->n;
    for (int32_t i = 0; i < r->n; i++) {
        cum += sh[i].p;
        if (cum > p) {
            keep = i + 1;
            break;
        }
    }
    for (int32_t i = 0; i < keep; i++)
        r->s->cands[i] = sh[i].c;
    r->n = keep;
    r->sorted = false;
    core_free(sh);
}

/* The highest logit's id, ties to the lowest. */
static int32_t pick_max(run *r)
{
    if (r->n < 0) {
        const float *l = r->l;
        int32_t best = 0;
        for (int32_t i = 1; i < r->s->n_vocab; i++)
            if (l[i] > l[best])
                best = i;
        return best;
    }
    int32_t best = 0;
    for (int32_t i = 1; i < r->n; i++)
        if (worse(&r->s->cands[best], &r->s->cands[i]))
            best = i;
    return r->s->cands[best].id;
}

static int32_t draw(run *r)
{
    ensure_sorted(r); /* the order the draw walks (as before chains) */
    double total = 0;
    for (int32_t i = 0; i < r->n; i++)
        total += weight(r, i);
    double x = core_rng_uniform(&r->s->rng) * total, acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < r->n; i++) {
        double w = weight(r, i);
        acc += w;
        if (x < acc)
            return r->s->cands[i].id;
        if (w > 0)
            last = i;
    }
    return r->s->cands[last].id; /* rounding: the last that could be drawn */
}

int32_t smp_run(glesc_sampler *s, const float *logits, bool mask)
{
    run r = {.s = s, .l = logits, .n = -1, .div = 1.0};
    if (mask)
        smp_grammar_mask(s, writable_row(&r));
    for (int i = 0; i < s->n_stages; i++) {
        const smp_stage *st = &s->stages[i];
        switch (st->kind) {
        case SMP_BIAS:
            apply_bias(&r);
            break;
        case SMP_PENALTY:
            apply_penalty(&r);
            break;
        case SMP_TOP_K:
            if (r.n < 0) {
                select_top(&r, CORE_MIN(st->k, s->n_vocab));
            } else {
                ensure_sorted(&r);
                r.n = CORE_MIN(r.n, st->k);
            }
            break;
        case SMP_TOP_P:
            top_p(&r, st->f);
            break;
        case SMP_MIN_P:
            min_p(&r, st->f);
            break;
        case SMP_TYPICAL:
            typical(&r, st->f);
            break;
        case SMP_TEMP:
            if (st->f > 0.0f) {
                r.div *= st->f;
            } else if (r.n < 0) { /* llama.cpp: temperature <= 0 keeps only the best */
                select_top(&r, 1);
            } else {
                ensure_sorted(&r);
                r.n = 1;
            }
            break;
        case SMP_GREEDY:
            return pick_max(&r);
        default:
            return draw(&r);
        }
    }
    return draw(&r);
}
