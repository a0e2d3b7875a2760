/*
 * sampler.h — the sampler's object, private to llm: sampler.c (the object,
 * the chain's stages as added, accepting tokens), sampler_chain.c (running
 * the stages over a logits row) and sampler_grammar.c (the grammar stage).
 */
#ifndef GLESC_LLM_SAMPLER_H
#define GLESC_LLM_SAMPLER_H

#include "llm/runtime.h"

enum {
    SMP_BIAS,
    SMP_PENALTY,
    SMP_TOP_K,
    SMP_TOP_P,
    SMP_MIN_P,
    SMP_TYPICAL,
    SMP_TEMP,
    SMP_DIST,   /* final: a draw from the softmax */
    SMP_GREEDY, /* final: the arg max, ties to the lowest id */
};
#define SMP_MAX_STAGES 16

typedef struct smp_stage {
    int kind;
    int32_t k; /* top-k's k, the penalty's last_n */
    float f;   /* top_p, min_p, typical's p, temperature, the penalty */
} smp_stage;

typedef struct smp_cand {
    int32_t id;
    float logit;
} smp_cand;

typedef struct smp_grammar smp_grammar;

struct glesc_sampler {
    int32_t n_vocab;
    uint64_t seed;
    smp_stage stages[SMP_MAX_STAGES];
    int n_stages;
    glesc_logit_bias *bias; /* the logit bias stage's list */
    size_t n_bias;
    float penalty; /* the penalty stage's (1: none) */
    int32_t last_n;
    smp_cand *cands;  /* n_vocab scratch */
    float *row;       /* n_vocab scratch: the row once a stage changes it */
    int32_t *history; /* ring of the last last_n accepted tokens */
    int32_t n_history, history_pos;
    core_rng rng;
    smp_grammar *grammar; /* NULL: none */
};

/* sampler_chain.c: runs the stages over logits; with mask, the grammar's
 * rejected tokens are out before the first stage. */
int32_t smp_run(glesc_sampler *s, const float *logits, bool mask);

/* sampler_grammar.c */
int32_t smp_grammar_sample(glesc_sampler *s, const float *logits);
/* Sets the rejected tokens' logits in row (n_vocab) to -infinity; returns
 * how many are left. */
size_t smp_grammar_mask(glesc_sampler *s, float *row);
void smp_grammar_accept(glesc_sampler *s, int32_t token);
void smp_grammar_reset(glesc_sampler *s);
void smp_grammar_copy(glesc_sampler *dst, const glesc_sampler *src);
void smp_grammar_free(glesc_sampler *s);

#endif
