/*
 * sampler.c — logits to a token id through a chain of stages: logit bias,
 * repetition penalty, top-k, top-p, min-p, typical, temperature, and a
 * final pick (a seeded draw or the arg max); a grammar constrains the
 * chain's result (sampler_grammar.c). glesc_sampler_create builds
 * llama.cpp's default order from glesc_sampler_params; the add functions
 * compose any other.
 *
 * The stages work on candidates (id, logit). Until a stage needs them the
 * candidates are the whole row, never copied: top-k keeps the k best with
 * a heap instead of sorting the vocabulary, and a greedy pick is one arg
 * max pass. Temperature does not rewrite logits: it scales the divisor
 * every later probability uses, exp((l - l_max) / div), so the default
 * chain computes exactly what the sampler did before chains.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "llm/sampler.h"

GLESC_API void glesc_sampler_reset(glesc_sampler *s)
{
    if (!s)
        return;
    core_rng_seed(&s->rng, s->seed);
    s->n_history = s->history_pos = 0;
    smp_grammar_reset(s);
}

GLESC_API void glesc_sampler_copy(glesc_sampler *dst, const glesc_sampler *src)
{
    if (!dst || !src || dst == src)
        return;
    llm_sampler_restore(dst, &src->rng);
    for (int32_t i = 0; i < src->n_history; i++)
        llm_sampler_record(dst, llm_sampler_history_at(src, i));
    smp_grammar_copy(dst, src);
}

int32_t llm_sampler_n_history(const glesc_sampler *s)
{
    return s->n_history;
}

int32_t llm_sampler_history_at(const glesc_sampler *s, int32_t i)
{
    /* the ring's oldest entry is at history_pos once it is full, else at 0 */
    int32_t first = s->n_history < s->last_n ? 0 : s->history_pos;
    return s->history[(first + i) % s->last_n];
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

static glesc_status check_params(const glesc_sampler_params *p)
{
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
    return GLESC_OK;
}

GLESC_API glesc_status glesc_sampler_chain_create(int32_t n_vocab, uint64_t seed,
                                                  glesc_sampler **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: n_vocab %d",
                            (int)n_vocab);
    glesc_sampler *s = core_calloc(1, sizeof *s);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler");
    s->n_vocab = n_vocab;
    s->seed = seed;
    s->penalty = 1.0f;
    s->cands = core_calloc((size_t)n_vocab, sizeof *s->cands);
    s->row = core_calloc((size_t)n_vocab, sizeof *s->row);
    if (!s->cands || !s->row) {
        glesc_sampler_destroy(s);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler of %d tokens", (int)n_vocab);
    }
    glesc_sampler_reset(s);
    *out = s;
    return GLESC_OK;
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
    st = check_params(p);
    glesc_sampler *s = NULL;
    if (st == GLESC_OK)
        st = glesc_sampler_chain_create(n_vocab, p->seed, &s);
    /* llama.cpp's order; greedy (temperature <= 0) skips the filters, which
     * all keep the arg max */
    if (st == GLESC_OK && p->n_logit_bias)
        st = glesc_sampler_add_logit_bias(s, p->logit_bias, p->n_logit_bias);
    if (st == GLESC_OK)
        st = glesc_sampler_add_penalty(s, p->repeat_penalty, p->repeat_last_n);
    if (st == GLESC_OK && p->temperature <= 0.0f) {
        st = glesc_sampler_add_greedy(s);
    } else if (st == GLESC_OK) {
        if (p->top_k > 0)
            st = glesc_sampler_add_top_k(s, p->top_k);
        if (st == GLESC_OK && p->typical_p > 0.0f && p->typical_p < 1.0f)
            st = glesc_sampler_add_typical(s, p->typical_p);
        if (st == GLESC_OK && p->top_p < 1.0f)
            st = glesc_sampler_add_top_p(s, p->top_p);
        if (st == GLESC_OK && p->min_p > 0.0f)
            st = glesc_sampler_add_min_p(s, p->min_p);
        if (st == GLESC_OK)
            st = glesc_sampler_add_temperature(s, p->temperature);
        if (st == GLESC_OK)
            st = glesc_sampler_add_dist(s);
    }
    if (st != GLESC_OK) {
        glesc_sampler_destroy(s);
        return st;
    }
    *out = s;
    return GLESC_OK;
}

GLESC_API void glesc_sampler_destroy(glesc_sampler *s)
{
    if (!s)
        return;
    smp_grammar_free(s);
    core_free(s->cands);
    core_free(s->row);
    core_free(s->history);
    core_free(s->bias);
    core_free(s);
}

/* Appends a stage; the message names it when the chain cannot take it. */
static glesc_status add_stage(glesc_sampler *s, int kind, int32_t k, float f, const char *name)
{
    core_err_reset(NULL);
    if (!s)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: NULL sampler");
    if (s->n_stages && (s->stages[s->n_stages - 1].kind == SMP_DIST ||
                        s->stages[s->n_stages - 1].kind == SMP_GREEDY))
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "sampler: %s after the final pick (greedy or dist ends a chain)", name);
    if (s->n_stages == SMP_MAX_STAGES)
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "sampler: %s: a chain holds %d stages", name,
                            SMP_MAX_STAGES);
    s->stages[s->n_stages++] = (smp_stage){kind, k, f};
    return GLESC_OK;
}

GLESC_API glesc_status glesc_sampler_add_logit_bias(glesc_sampler *s, const glesc_logit_bias *bias,
                                                    size_t n)
{
    if (s && s->bias)
        return core_err_set(NULL, GLESC_ERROR_STATE, "sampler: a chain has one logit bias stage");
    for (size_t i = 0; s && i < n; i++)
        if (bias[i].token < 0 || bias[i].token >= s->n_vocab || isnan(bias[i].bias))
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "sampler: logit bias %zu: token %d (the vocabulary has %d) bias %g",
                                i, (int)bias[i].token, (int)s->n_vocab, bias[i].bias);
    glesc_status st = add_stage(s, SMP_BIAS, 0, 0, "logit bias");
    if (st != GLESC_OK || n == 0)
        return st;
    if (!(s->bias = core_malloc(n * sizeof *s->bias))) {
        s->n_stages--;
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler: %zu logit biases", n);
    }
    memcpy(s->bias, bias, n * sizeof *bias);
    s->n_bias = n;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_sampler_add_penalty(glesc_sampler *s, float repeat_penalty,
                                                 int32_t last_n)
{
    if (!(repeat_penalty > 0.0f) || !isfinite(repeat_penalty) || last_n < 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: repeat_penalty %g must be a finite number above 0 (1 turns "
                            "it off), repeat_last_n %d not negative",
                            repeat_penalty, (int)last_n);
    if (s && s->history)
        return core_err_set(NULL, GLESC_ERROR_STATE, "sampler: a chain has one penalty stage");
    glesc_status st = add_stage(s, SMP_PENALTY, last_n, repeat_penalty, "penalty");
    if (st != GLESC_OK)
        return st;
    if (!(s->history = core_calloc((size_t)(last_n ? last_n : 1), sizeof(int32_t)))) {
        s->n_stages--;
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "sampler: history of %d", (int)last_n);
    }
    s->penalty = repeat_penalty;
    s->last_n = last_n;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_sampler_add_top_k(glesc_sampler *s, int32_t k)
{
    if (k <= 0)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "sampler: top_k %d must be above 0",
                            (int)k);
    return add_stage(s, SMP_TOP_K, k, 0, "top-k");
}

GLESC_API glesc_status glesc_sampler_add_top_p(glesc_sampler *s, float p)
{
    if (!(p >= 0.0f) || !(p <= 1.0f))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: top_p %g must be in [0, 1] (0 keeps only the most likely "
                            "token)",
                            p);
    return add_stage(s, SMP_TOP_P, 0, p, "top-p");
}

GLESC_API glesc_status glesc_sampler_add_min_p(glesc_sampler *s, float p)
{
    if (!(p >= 0.0f) || !(p < 1.0f))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: min_p %g must be in [0, 1)", p);
    return add_stage(s, SMP_MIN_P, 0, p, "min-p");
}

GLESC_API glesc_status glesc_sampler_add_typical(glesc_sampler *s, float p)
{
    if (!(p > 0.0f) || !(p <= 1.0f))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: typical p %g must be in (0, 1]", p);
    return add_stage(s, SMP_TYPICAL, 0, p, "typical");
}

GLESC_API glesc_status glesc_sampler_add_temperature(glesc_sampler *s, float t)
{
    if (!isfinite(t))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "sampler: temperature %g is not a finite number", t);
    return add_stage(s, SMP_TEMP, 0, t, "temperature");
}

GLESC_API glesc_status glesc_sampler_add_dist(glesc_sampler *s)
{
    return add_stage(s, SMP_DIST, 0, 0, "dist");
}

GLESC_API glesc_status glesc_sampler_add_greedy(glesc_sampler *s)
{
    return add_stage(s, SMP_GREEDY, 0, 0, "greedy");
}

void llm_sampler_record(glesc_sampler *s, int32_t token)
{
    if (s->last_n <= 0)
        return;
    s->history[s->history_pos] = token;
    s->history_pos = (s->history_pos + 1) % s->last_n;
    if (s->n_history < s->last_n)
        s->n_history++;
}

GLESC_API void glesc_sampler_accept_prompt(glesc_sampler *s, int32_t token)
{
    if (s)
        llm_sampler_record(s, token);
}

GLESC_API void glesc_sampler_accept(glesc_sampler *s, int32_t token)
{
    if (!s)
        return;
    llm_sampler_record(s, token);
    smp_grammar_accept(s, token);
}

static int final_kind(const glesc_sampler *s)
{
    int k = s->n_stages ? s->stages[s->n_stages - 1].kind : SMP_DIST;
    return k == SMP_GREEDY ? SMP_GREEDY : SMP_DIST;
}

bool llm_sampler_is_greedy(const glesc_sampler *s)
{
    if (s->grammar)
        return false;
    for (int i = 0; i < s->n_stages; i++) {
        const smp_stage *st = &s->stages[i];
        /* these may move the arg max; top-k, top-p, min-p and temperature
         * keep it */
        if ((st->kind == SMP_BIAS && s->n_bias) ||
            (st->kind == SMP_PENALTY && s->penalty != 1.0f && s->last_n > 0) ||
            (st->kind == SMP_TYPICAL && st->f < 1.0f))
            return false;
        /* these keep nothing else */
        if ((st->kind == SMP_TOP_K && st->k == 1) || (st->kind == SMP_TEMP && st->f <= 0.0f) ||
            st->kind == SMP_GREEDY)
            return true;
    }
    return false;
}

void llm_sampler_skip(glesc_sampler *s)
{
    if (final_kind(s) == SMP_DIST)
        core_rng_uniform(&s->rng); /* the draw glesc_sampler_sample makes */
}

GLESC_API int32_t glesc_sampler_sample(glesc_sampler *s, const float *logits)
{
    if (!s->grammar)
        return smp_run(s, logits, false);
    return smp_grammar_sample(s, logits);
}
