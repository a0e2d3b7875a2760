/*
 * test_sampler.c — sampling: greedy ties, the repetition penalty's
 * arithmetic, each filter's effect on the drawn distribution (against
 * frequencies computed by hand), determinism for a seed, the seeded
 * stream itself, and parameters refused one by one (top_p 0 is accepted);
 * composed chains stage by stage against a plain reference (logit bias,
 * top-k, top-p, min-p, typical, temperature), their refusals.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "glesc_llm.h"

static glesc_sampler *make(float temp, int top_k, float top_p, float min_p, float pen,
                           int32_t n_vocab)
{
    glesc_sampler_params p;
    glesc_sampler_params_init(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = pen;
    p.seed = 42;
    glesc_sampler *s;
    cr_assert_eq(glesc_sampler_create(&p, n_vocab, &s), GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

Test(sampler, greedy_ties_go_to_lowest_id)
{
    float l[5] = {1, 3, 2, 3, -1};
    glesc_sampler *s = make(0, 40, 1, 0, 1, 5);
    cr_assert_eq(glesc_sampler_sample(s, l), 1);
    glesc_sampler_destroy(s);
}

/* Greedy sampling is one argmax pass; it must pick what the candidate
 * paths rank first (the top-k heap, and the full sort without top-k), with
 * a top-p so small that only the first candidate is left: the highest
 * logit, ties to the lowest id. Rows with many ties and a penalty. */
Test(sampler, greedy_equals_the_heap_path)
{
    enum { N = 3000 };
    static float l[N];
    uint32_t seed = 7;
    glesc_sampler *greedy = make(0, 40, 1, 0, 1.3f, N);
    glesc_sampler *top1 = make(0.8f, 1, 1, 0, 1.3f, N);
    glesc_sampler *heap = make(1.0f, 40, 1e-9f, 0, 1.3f, N);
    glesc_sampler *sorted = make(1.0f, 0, 1e-9f, 0, 1.3f, N);
    glesc_sampler *all[] = {greedy, top1, heap, sorted};
    for (int row = 0; row < 200; row++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1664525u + 1013904223u;
            l[i] = (float)(seed >> 26) * 0.25f - 4.0f; /* 64 values: ties everywhere */
        }
        int32_t want = glesc_sampler_sample(greedy, l);
        cr_assert_eq(glesc_sampler_sample(top1, l), want, "row %d: top-k 1", row);
        cr_assert_eq(glesc_sampler_sample(heap, l), want, "row %d: top-k heap", row);
        cr_assert_eq(glesc_sampler_sample(sorted, l), want, "row %d: full sort", row);
        for (int q = 0; q < 4; q++) /* the penalty now lowers the winner */
            glesc_sampler_accept(all[q], want);
    }
    for (int q = 0; q < 4; q++)
        glesc_sampler_destroy(all[q]);
}

Test(sampler, repetition_penalty)
{
    float l[3] = {2.0f, -1.0f, 1.9f};
    glesc_sampler *s = make(0, 40, 1, 0, 2.0f, 3);
    cr_assert_eq(glesc_sampler_sample(s, l), 0);
    glesc_sampler_accept(s, 0); /* 2.0 -> 1.0: id 2 (1.9) wins */
    glesc_sampler_accept(s, 0); /* a repeat counts once */
    cr_assert_eq(glesc_sampler_sample(s, l), 2);
    glesc_sampler_accept(s, 1); /* negative logits are multiplied: -1 -> -2 */
    glesc_sampler_accept(s, 2); /* 1.9 -> 0.95 */
    cr_assert_eq(glesc_sampler_sample(s, l), 0, "1.0 beats 0.95 and -2");
    glesc_sampler_reset(s);
    cr_assert_eq(glesc_sampler_sample(s, l), 0);
    glesc_sampler_destroy(s);
}

/* Draws n samples and returns the frequency of each of the 3 ids. */
static void frequencies(glesc_sampler *s, const float *l, double f[3])
{
    int n = 200000, c[3] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t = glesc_sampler_sample(s, l);
        cr_assert(t >= 0 && t < 3);
        c[t]++;
    }
    for (int i = 0; i < 3; i++)
        f[i] = (double)c[i] / n;
}

Test(sampler, filters_shape_the_distribution)
{
    const float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    double f[3];
    struct {
        float temp, top_p, min_p;
        int top_k;
        double want[3];
    } cases[] = {
        {1.0f, 1.0f, 0.0f, 0, {0.5, 0.3, 0.2}},                 /* plain softmax */
        {1.0f, 1.0f, 0.0f, 2, {0.625, 0.375, 0}},               /* top-k 2 renormalizes */
        {1.0f, 0.6f, 0.0f, 0, {0.625, 0.375, 0}},               /* top-p 0.6 keeps 0.5 + 0.3 */
        {1.0f, 1.0f, 0.5f, 0, {0.625, 0.375, 0}},               /* min-p: 0.2 < 0.5 * 0.5 */
        {0.5f, 1.0f, 0.0f, 0, {25 / 38.0, 9 / 38.0, 4 / 38.0}}, /* p^2, renormalized */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glesc_sampler *s =
            make(cases[i].temp, cases[i].top_k, cases[i].top_p, cases[i].min_p, 1, 3);
        frequencies(s, l, f);
        double worst = 0;
        for (int k = 0; k < 3; k++)
            worst = fmax(worst, fabs(f[k] - cases[i].want[k]));
        cr_log_info("case %zu: %.4f %.4f %.4f (want %.4f %.4f %.4f), worst %.4f", i, f[0], f[1],
                    f[2], cases[i].want[0], cases[i].want[1], cases[i].want[2], worst);
        cr_expect_leq(worst, 0.006, "case %zu off by %g", i, worst);
        glesc_sampler_destroy(s);
    }
}

Test(sampler, deterministic_for_a_seed)
{
    float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = sinf((float)i);
    glesc_sampler *a = make(1.0f, 0, 1.0f, 0, 1, 100), *b = make(1.0f, 0, 1.0f, 0, 1, 100);
    int same = 0;
    for (int i = 0; i < 1000; i++)
        same += glesc_sampler_sample(a, l) == glesc_sampler_sample(b, l);
    cr_assert_eq(same, 1000);
    glesc_sampler_destroy(a);
    glesc_sampler_destroy(b);
}

/* The seeded stream is pinned: with four equal candidates a draw is the top
 * two bits of the next xoshiro256** output (seeded by splitmix64(42)), so
 * a changed generator or a changed use of it shows here. */
Test(sampler, seeded_stream_is_pinned)
{
    static const int32_t want[16] = {0, 1, 2, 3, 3, 3, 2, 3, 3, 2, 2, 1, 3, 1, 2, 3};
    float l[4] = {0, 0, 0, 0};
    glesc_sampler *s = make(1.0f, 0, 1.0f, 0, 1, 4);
    for (int i = 0; i < 16; i++)
        cr_expect_eq(glesc_sampler_sample(s, l), want[i], "draw %d", i);
    glesc_sampler_reset(s);
    cr_expect_eq(glesc_sampler_sample(s, l), want[0], "after reset");
    glesc_sampler_destroy(s);
}

/* Each bad parameter is refused with a message naming it alone. */
Test(sampler, bad_parameters)
{
    static const struct {
        const char *name;
        float temperature, top_p, min_p, repeat_penalty;
        int32_t repeat_last_n;
    } cases[] = {
        {"temperature", NAN, 0.95f, 0.05f, 1, 64},
        {"top_p", 0.8f, -0.5f, 0.05f, 1, 64},
        {"top_p", 0.8f, NAN, 0.05f, 1, 64},
        {"min_p", 0.8f, 0.95f, 1.0f, 1, 64},
        {"repeat_penalty", 0.8f, 0.95f, 0.05f, 0, 64},
        {"repeat_last_n", 0.8f, 0.95f, 0.05f, 1, -1},
    };
    static const char *const names[] = {"temperature", "top_p", "min_p", "repeat_penalty",
                                        "repeat_last_n"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glesc_sampler_params p;
        glesc_sampler_params_init(&p);
        p.temperature = cases[i].temperature;
        p.top_p = cases[i].top_p;
        p.min_p = cases[i].min_p;
        p.repeat_penalty = cases[i].repeat_penalty;
        p.repeat_last_n = cases[i].repeat_last_n;
        glesc_sampler *s = (glesc_sampler *)1;
        cr_assert_eq(glesc_sampler_create(&p, 10, &s), GLESC_ERROR_INVALID_ARGUMENT, "%s",
                     cases[i].name);
        cr_assert_null(s);
        const char *msg = glesc_last_errmsg();
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            bool named = strstr(msg, names[k]) != NULL;
            /* "repeat_penalty" and "repeat_last_n" do not contain each other */
            cr_expect_eq(named, strcmp(names[k], cases[i].name) == 0, "case %zu (%s): %s", i,
                         cases[i].name, msg);
        }
    }
}

/* top_p 0 keeps only the most likely token, as in llama.cpp (whose top-p
 * stops at the first token whose cumulative probability reaches p). */
Test(sampler, top_p_zero_keeps_the_top_token)
{
    float l[6] = {0.5f, 2.0f, 1.9f, 1.8f, -1.0f, 0.0f};
    glesc_sampler *s = make(1.5f, 0, 0.0f, 0.0f, 1, 6);
    for (int i = 0; i < 64; i++)
        cr_expect_eq(glesc_sampler_sample(s, l), 1, "draw %d", i);
    glesc_sampler_destroy(s);
}

/* ---- Chains: each stage against a plain reference ---- */

enum { RV = 12, DRAWS = 40000 };

/* The reference: probabilities over RV tokens, 0 for those a stage drops. */
typedef struct ref {
    double l[RV]; /* logits as the stages change them (temperature divides) */
    bool keep[RV];
} ref;

static void ref_probs(const ref *r, double *p)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < RV; i++)
        if (r->keep[i] && r->l[i] > mx)
            mx = r->l[i];
    for (int i = 0; i < RV; i++)
        sum += p[i] = r->keep[i] ? exp(r->l[i] - mx) : 0;
    for (int i = 0; i < RV; i++)
        p[i] /= sum;
}

/* The kept ids ordered by probability, most likely first. */
static int ref_order(const ref *r, int *ids)
{
    int n = 0;
    for (int i = 0; i < RV; i++)
        if (r->keep[i])
            ids[n++] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && r->l[ids[j]] > r->l[ids[j - 1]]; j--) {
            int t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    return n;
}

static void ref_top_k(ref *r, int k)
{
    int ids[RV], n = ref_order(r, ids);
    for (int i = k; i < n; i++)
        r->keep[ids[i]] = false;
}

static void ref_top_p(ref *r, double p)
{
    double q[RV], cum = 0;
    int ids[RV], n = ref_order(r, ids);
    ref_probs(r, q);
    for (int i = 0; i < n; i++) {
        cum += q[ids[i]];
        if (cum >= p) {
            for (int j = i + 1; j < n; j++)
                r->keep[ids[j]] = false;
            return;
        }
    }
}

static void ref_min_p(ref *r, double p)
{
    double q[RV], mx = 0;
    ref_probs(r, q);
    for (int i = 0; i < RV; i++)
        mx = fmax(mx, q[i]);
    for (int i = 0; i < RV; i++)
        if (q[i] < p * mx)
            r->keep[i] = false;
}

/* llama.cpp's typical: by |surprise - entropy|, until the mass passes p. */
static void ref_typical(ref *r, double p)
{
    double q[RV], ent = 0, score[RV];
    ref_probs(r, q);
    for (int i = 0; i < RV; i++)
        ent -= q[i] > 0 ? q[i] * log(q[i]) : 0;
    int ids[RV], n = 0;
    for (int i = 0; i < RV; i++)
        if (r->keep[i]) {
            score[i] = fabs(-log(q[i]) - ent);
            ids[n++] = i;
        }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && score[ids[j]] < score[ids[j - 1]]; j--) {
            int t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += q[ids[i]];
        if (cum > p) {
            for (int j = i + 1; j < n; j++)
                r->keep[ids[j]] = false;
            return;
        }
    }
}

/* Draws DRAWS tokens from s and compares their frequencies with r's. */
static void expect_distribution(glesc_sampler *s, const float *l, const ref *r, const char *what)
{
    double want[RV];
    int got[RV] = {0};
    ref_probs(r, want);
    for (int i = 0; i < DRAWS; i++) {
        int32_t id = glesc_sampler_sample(s, l);
        cr_assert(id >= 0 && id < RV);
        got[id]++;
    }
    for (int i = 0; i < RV; i++) {
        cr_expect(want[i] > 0 || got[i] == 0, "%s: token %d dropped, drawn %d times", what, i,
                  got[i]);
        cr_expect(fabs((double)got[i] / DRAWS - want[i]) < 0.012, "%s: token %d: %.4f, want %.4f",
                  what, i, (double)got[i] / DRAWS, want[i]);
    }
}

Test(sampler, chain_stages_match_a_reference)
{
    const float l[RV] = {1.0f, 2.5f, 0.3f, 2.4f, -1.0f, 1.7f, 0.9f, 2.0f, -0.5f, 1.1f, 0.0f, 1.6f};
    const glesc_logit_bias bias[] = {{0, 1.2f}, {1, -INFINITY}, {10, 2.0f}};
    for (int c = 0; c < 7; c++) {
        ref r;
        for (int i = 0; i < RV; i++) {
            r.l[i] = l[i];
            r.keep[i] = true;
        }
        glesc_sampler *s;
        cr_assert_eq(glesc_sampler_chain_create(RV, 100 + (uint64_t)c, &s), GLESC_OK);
        const char *what = "";
        switch (c) {
        case 0:
            what = "logit bias, top-k 5";
            cr_assert_eq(glesc_sampler_add_logit_bias(s, bias, 3), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_top_k(s, 5), GLESC_OK);
            for (size_t b = 0; b < 3; b++)
                r.l[bias[b].token] += bias[b].bias;
            r.keep[1] = false;
            ref_top_k(&r, 5);
            break;
        case 1:
            what = "top-p 0.8";
            cr_assert_eq(glesc_sampler_add_top_p(s, 0.8f), GLESC_OK);
            ref_top_p(&r, 0.8);
            break;
        case 2:
            what = "min-p 0.3";
            cr_assert_eq(glesc_sampler_add_min_p(s, 0.3f), GLESC_OK);
            ref_min_p(&r, 0.3);
            break;
        case 3:
            what = "typical 0.5";
            cr_assert_eq(glesc_sampler_add_typical(s, 0.5f), GLESC_OK);
            ref_typical(&r, 0.5);
            break;
        case 4:
            what = "temperature 0.5";
            cr_assert_eq(glesc_sampler_add_temperature(s, 0.5f), GLESC_OK);
            for (int i = 0; i < RV; i++)
                r.l[i] /= 0.5;
            break;
        case 5: /* temperature first changes what top-p sees */
            what = "temperature 2.5, top-p 0.7, min-p 0.4";
            cr_assert_eq(glesc_sampler_add_temperature(s, 2.5f), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_top_p(s, 0.7f), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_min_p(s, 0.4f), GLESC_OK);
            for (int i = 0; i < RV; i++)
                r.l[i] /= 2.5;
            ref_top_p(&r, 0.7);
            ref_min_p(&r, 0.4);
            break;
        default:
            what = "top-k 8, typical 0.9, temperature 1.5";
            cr_assert_eq(glesc_sampler_add_top_k(s, 8), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_typical(s, 0.9f), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_temperature(s, 1.5f), GLESC_OK);
            ref_top_k(&r, 8);
            ref_typical(&r, 0.9);
            for (int i = 0; i < RV; i++)
                r.l[i] /= 1.5;
            break;
        }
        cr_assert_eq(glesc_sampler_add_dist(s), GLESC_OK);
        expect_distribution(s, l, &r, what);
        glesc_sampler_destroy(s);
    }
}

Test(sampler, chain_refusals_and_greedy)
{
    glesc_sampler *s;
    cr_assert_eq(glesc_sampler_chain_create(RV, 1, &s), GLESC_OK);
    cr_expect_eq(glesc_sampler_add_top_k(s, 0), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "top_k"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_sampler_add_top_p(s, 1.5f), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_sampler_add_min_p(s, 1.0f), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_sampler_add_typical(s, 0.0f), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_sampler_add_temperature(s, NAN), GLESC_ERROR_INVALID_ARGUMENT);
    const glesc_logit_bias out_of_range = {RV, 1.0f};
    cr_expect_eq(glesc_sampler_add_logit_bias(s, &out_of_range, 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "token 12"), "%s", glesc_last_errmsg());
    /* a bias that moves the arg max, then greedy */
    const glesc_logit_bias up = {4, 10.0f};
    cr_assert_eq(glesc_sampler_add_logit_bias(s, &up, 1), GLESC_OK);
    cr_expect_eq(glesc_sampler_add_logit_bias(s, &up, 1), GLESC_ERROR_STATE);
    cr_assert_eq(glesc_sampler_add_greedy(s), GLESC_OK);
    cr_expect_eq(glesc_sampler_add_top_k(s, 3), GLESC_ERROR_STATE, "nothing after the final pick");
    const float l[RV] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0};
    cr_expect_eq(glesc_sampler_sample(s, l), 4);
    glesc_sampler_destroy(s);
    /* temperature 0 in a chain keeps only the best: every draw is it */
    cr_assert_eq(glesc_sampler_chain_create(RV, 1, &s), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_temperature(s, 0.0f), GLESC_OK);
    for (int i = 0; i < 20; i++)
        cr_expect_eq(glesc_sampler_sample(s, l), 10);
    glesc_sampler_destroy(s);
}

/* glesc_llm.h's option structs follow glesc.h's rule: an inline _init that
 * sets the defaults and struct_size, and the library reads only struct_size
 * bytes (0: this header's layout; too small to hold itself: refused). */
Test(sampler, option_structs_carry_their_size)
{
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    cr_assert_eq(sp.struct_size, sizeof sp);
    cr_assert_float_eq(sp.temperature, 0.8f, 0);
    cr_assert_eq(sp.top_k, 40);
    cr_assert_eq(sp.repeat_last_n, 64);
    glesc_model_options mo;
    glesc_model_options_init(&mo);
    cr_assert_eq(mo.struct_size, sizeof mo);
    cr_assert_null(mo.progress);
    glesc_session_options so;
    glesc_session_options_init(&so);
    cr_assert_eq(so.struct_size, sizeof so);
    cr_assert_eq(so.n_ctx, 0);
    glesc_generate_params gp;
    glesc_generate_params_init(&gp);
    cr_assert_eq(gp.struct_size, sizeof gp);
    cr_assert_eq(gp.n_predict, -1);
    cr_assert_eq(gp.detokenize_flags, GLESC_DETOKENIZE_KEEP_LEADING_SPACE);
    glesc_chat_options co;
    glesc_chat_options_init(&co);
    cr_assert_eq(co.struct_size, sizeof co);
    cr_assert_eq(co.context_policy, GLESC_CHAT_CONTEXT_SHIFT);

    /* A caller compiled before seed existed: what lies beyond is not read
     * (the seed is 0, the default). */
    unsigned char buf[sizeof(glesc_sampler_params) + 64];
    memset(buf, 0xa5, sizeof buf);
    glesc_sampler_params *old = (glesc_sampler_params *)(void *)buf;
    glesc_sampler_params_init(old);
    old->struct_size = (uint32_t)offsetof(glesc_sampler_params, seed);
    memset(&old->seed, 0xa5, sizeof old->seed);
    glesc_sampler *s = NULL;
    cr_assert_eq(glesc_sampler_create(old, 8, &s), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_sampler *s0 = NULL;
    sp.seed = 0;
    cr_assert_eq(glesc_sampler_create(&sp, 8, &s0), GLESC_OK);
    float logits[8] = {1, 2, 3, 4, 4, 3, 2, 1};
    for (int i = 0; i < 16; i++)
        cr_assert_eq(glesc_sampler_sample(s, logits), glesc_sampler_sample(s0, logits));
    glesc_sampler_destroy(s);
    glesc_sampler_destroy(s0);

    sp.struct_size = 2;
    cr_assert_eq(glesc_sampler_create(&sp, 8, &s), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "struct_size 2"), "%s", glesc_last_errmsg());
    cr_assert_null(s);
}
