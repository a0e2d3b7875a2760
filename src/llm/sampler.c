/*
 * sampler.c — logits to a token id: repetition penalty, top-k, top-p, min-p,
 * temperature and a seeded draw, in llama.cpp's order. The only CPU math of
 * a decode step besides tokenization, so it avoids sorting the whole
 * vocabulary when top-k bounds the candidates (a heap keeps the k best),
 * and greedy sampling (temperature 0 or top-k 1) is one argmax pass.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "glesc_llm.h"
#include "llm/runtime.h"

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct glesc_sampler {
    glesc_sampler_params p;
    int32_t n_vocab;
    cand *cands;      /* n_vocab scratch */
    float *penalized; /* n_vocab scratch, used when the penalty is on */
    int32_t *history; /* ring of the last repeat_last_n accepted tokens */
    int32_t n_history, history_pos;
    core_rng rng;
};

GLESC_API void glesc_sampler_reset(glesc_sampler *s)
{
    core_rng_seed(&s->rng, s->p.seed);
    s->n_history = s->history_pos = 0;
}

GLESC_API void glesc_sampler_copy(glesc_sampler *dst, const glesc_sampler *src)
{
    if (!dst || !src || dst == src)
        return;
    llm_sampler_restore(dst, &src->rng);
    for (int32_t i = 0; i < src->n_history; i++)
        glesc_sampler_accept(dst, llm_sampler_history_at(src, i));
}

int32_t llm_sampler_n_history(const glesc_sampler *s)
{
    return s->n_history;
}

int32_t llm_sampler_history_at(const glesc_sampler *s, int32_t i)
{
    /* the ring's oldest entry is at history_pos once it is full, else at 0 */
    int32_t first = s->n_history < s->p.repeat_last_n ? 0 : s->history_pos;
    return s->history[(first + i) % s->p.repeat_last_n];
}

const core_rng *llm_sampler_rng(const glesc_sampler *s)
{
    return &s->rng;
}

void llm_sampler_restore(glesc_sampler *s, const core_rng *rng)
{
    s->rng = *rng;
    s->n_history = s->history_pos = 0;
}

GLESC_API glesc_status glesc_sampler_create(const glesc_sampler_params *p, int32_t n_vocab,
                                            glesc_sampler **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: out is NULL");
    *out = NULL;
    glesc_sampler_params params; /* p NULL: llama.cpp's defaults, as other options */
    glesc_sampler_params_init(&params);
    glesc_status st = p ? core_struct_read(NULL, &params, sizeof params, p, "sampler") : GLESC_OK;
    if (st != GLESC_OK)
        return st;
    p = &params;
    if (n_vocab <= 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: n_vocab %d",
                            (int)n_vocab);
    /* One message per parameter, naming the bad one; the ranges are
     * llama.cpp's (top_p 0 keeps the most likely token, 1 or more is off;
     * min_p 0 or less is off; temperature 0 or less is greedy). */
    if (!isfinite(p->temperature))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: temperature %g is not a finite number", p->temperature);
    if (!(p->top_p >= 0.0f))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: top_p %g must be at least 0 (0 keeps only the most likely "
                            "token, 1 turns it off)",
                            p->top_p);
    if (!(p->min_p < 1.0f))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: min_p %g must be below 1 (0 turns it off)", p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: repeat_penalty %g must be a finite number above 0 (1 turns "
                            "it off)",
                            p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: repeat_last_n %d must not be negative",
                            (int)p->repeat_last_n);
    glesc_sampler *s = core_calloc(1, sizeof *s);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cands = core_calloc((size_t)n_vocab, sizeof *s->cands);
    s->penalized = core_calloc((size_t)n_vocab, sizeof *s->penalized);
    s->history = core_calloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1), sizeof(int32_t));
    if (!s->cands || !s->penalized || !s->history) {
        glesc_sampler_destroy(s);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler of %d tokens", (int)n_vocab);
    }
    glesc_sampler_reset(s);
    *out = s;
    return GLESC_OK;
}

GLESC_API void glesc_sampler_destroy(glesc_sampler *s)
{
    if (!s)
        return;
    core_free(s->cands);
    core_free(s->penalized);
    core_free(s->history);
    core_free(s);
}

GLESC_API void glesc_sampler_accept(glesc_sampler *s, int32_t token)
{
    if (s->p.repeat_last_n <= 0)
        return;
    s->history[s->history_pos] = token;
    s->history_pos = (s->history_pos + 1) % s->p.repeat_last_n;
    if (s->n_history < s->p.repeat_last_n)
        s->n_history++;
}

/* llama.cpp's penalty: each distinct recent token's logit is divided by the
 * penalty when positive, multiplied when negative. */
static const float *apply_penalty(glesc_sampler *s, const float *logits)
{
    if (s->p.repeat_penalty == 1.0f || s->n_history == 0)
        return logits;
    memcpy(s->penalized, logits, (size_t)s->n_vocab * sizeof *logits);
    for (int32_t i = 0; i < s->n_history; i++) {
        int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab)
            continue;
        bool seen = false;
        for (int32_t j = 0; j < i && !seen; j++)
            seen = s->history[j] == t;
        if (seen)
            continue;
        float *l = &s->penalized[t];
        *l = *l > 0 ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
    }
    return s->penalized;
}

/* Orders candidates best first: higher logit, then lower id. */
static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool worse(const cand *a, const cand *b)
{
    return cand_cmp(a, b) > 0;
}

/* Min-heap on "goodness": the root is the worst of the k kept. */
static void heap_down(cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m]))
            m = l;
        if (r < n && worse(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The best k candidates of logits into s->cands[0..k), sorted best first. */
static int32_t select_top(glesc_sampler *s, const float *logits, int32_t k)
{
    cand *c = s->cands;
    if (k >= s->n_vocab) {
        for (int32_t i = 0; i < s->n_vocab; i++)
            c[i] = (cand){i, logits[i]};
        qsort(c, (size_t)s->n_vocab, sizeof *c, cand_cmp);
        return s->n_vocab;
    }
    for (int32_t i = 0; i < k; i++)
        c[i] = (cand){i, logits[i]};
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        heap_down(c, k, i);
    for (int32_t i = k; i < s->n_vocab; i++) {
        cand x = {i, logits[i]};
        if (worse(&c[0], &x)) {
            c[0] = x;
            heap_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
    return k;
}

/* The highest logit's id, ties to the lowest: one pass, no candidates. */
static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = 0;
    float v = l[0];
    for (int32_t i = 1; i < n; i++)
        if (l[i] > v) {
            v = l[i];
            best = i;
        }
    return best;
}

bool llm_sampler_is_greedy(const glesc_sampler *s)
{
    bool penalty = s->p.repeat_penalty != 1.0f && s->p.repeat_last_n > 0;
    return (s->p.temperature <= 0.0f || s->p.top_k == 1) && !penalty;
}

void llm_sampler_skip(glesc_sampler *s)
{
    if (s->p.temperature > 0.0f && s->p.top_k == 1)
        core_rng_uniform(&s->rng); /* the draw glesc_sampler_sample makes */
}

GLESC_API int32_t glesc_sampler_sample(glesc_sampler *s, const float *logits)
{
    const float *l = apply_penalty(s, logits);
    if (s->p.temperature <= 0.0f)
        return argmax(l, s->n_vocab);
    if (s->p.top_k == 1) {
        /* greedy as well; the draw the chain below would make still
         * happens, so the random stream does not depend on this shortcut */
        core_rng_uniform(&s->rng);
        return argmax(l, s->n_vocab);
    }
    int32_t k = s->p.top_k > 0 ? CORE_MIN(s->p.top_k, s->n_vocab) : s->n_vocab;
    int32_t n = select_top(s, l, k);
    cand *c = s->cands;
    /* Probabilities at temperature 1 decide top-p and min-p (llama.cpp
     * applies temperature last). */
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)c[i].logit - c[0].logit);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - c[0].logit) / sum;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        double cut = (double)c[0].logit + log((double)s->p.min_p);
        int32_t m = 1;
        while (m < n && c[m].logit >= cut)
            m++;
        n = m;
    }
    double total = 0;
    for (int32_t i = 0; i < n; i++)
        total += exp(((double)c[i].logit - c[0].logit) / s->p.temperature);
    double r = core_rng_uniform(&s->rng) * total, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp(((double)c[i].logit - c[0].logit) / s->p.temperature);
        if (r < acc)
            return c[i].id;
    }
    return c[n - 1].id;
}
