/*
 * grammar-bench.c — what a grammar costs per sampled token: the default
 * chain over random logits rows (a random-weight model's, sigma 3) of a
 * real vocabulary, with and without a grammar, timing sample + accept. The
 * grammar is a JSON schema's (the default: an object of strings, numbers,
 * a list and an enum) or a GBNF file; when it is complete (EOS) the sampler
 * restarts, so every step is a grammar step. Prints the mean, median, p90,
 * p99 and max per token (the thread's CPU time) and the time to build the
 * grammar stage.
 *
 *   grammar-bench [-n TOKENS] [-s SEED] [-g FILE.gbnf | -j SCHEMA] VOCAB.gguf
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/file.h"
#include "glesc.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"

static const char *default_schema =
    "{\"type\": \"object\", \"properties\": {"
    " \"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
    " \"score\": {\"type\": \"number\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": "
    "\"string\"}, \"maxItems\": 4},"
    " \"role\": {\"enum\": [\"admin\", \"user\", \"guest\"]}, \"ok\": {\"type\": \"boolean\"}},"
    " \"required\": [\"name\", \"age\", \"role\"]}";

/* The thread's CPU time: on a shared machine, time the thread waited for
 * a core does not count. */
static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A random-weight model's logits: normal, sigma 3 (Box-Muller on an LCG). */
static void fill(float *l, int32_t n, uint64_t *state)
{
    for (int32_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            *state = *state * 6364136223846793005ull + 1442695040888963407ull;
            u[k] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0;
        }
        double r = sqrt(-2 * log(u[0])) * 3;
        l[i] = (float)(r * cos(6.283185307179586 * u[1]));
        if (i + 1 < n)
            l[i + 1] = (float)(r * sin(6.283185307179586 * u[1]));
    }
}

/* Times n steps of s; per-step microseconds into t (n). */
static void steps(glesc_sampler *s, const glesc_tokenizer *tok, int n, uint64_t seed, double *t,
                  int *restarts)
{
    int32_t V = glesc_tokenizer_n_vocab(tok);
    float *l = malloc((size_t)V * sizeof *l);
    uint64_t st = seed;
    *restarts = 0;
    for (int i = 0; i < n; i++) {
        fill(l, V, &st);
        double t0 = now_us();
        int32_t id = glesc_sampler_sample(s, l);
        glesc_sampler_accept(s, id);
        t[i] = now_us() - t0;
        if (glesc_tokenizer_is_eog(tok, id)) {
            glesc_sampler_reset(s);
            ++*restarts;
        }
    }
    free(l);
}

static void report(const char *what, double *t, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    printf("  %-12s mean %7.1f us  median %7.1f  p90 %7.1f  p99 %7.1f  max %8.1f\n", what, sum / n,
           t[n / 2], t[n * 9 / 10], t[n * 99 / 100], t[n - 1]);
}

int main(int argc, char **argv)
{
    int n = 2000;
    uint64_t seed = 1;
    const char *gfile = NULL, *schema = default_schema, *vocab = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc)
            gfile = argv[++i];
        else if (!strcmp(argv[i], "-j") && i + 1 < argc)
            schema = argv[++i];
        else if (argv[i][0] != '-' && !vocab)
            vocab = argv[i];
        else {
            fprintf(stderr, "usage: grammar-bench [-n TOKENS] [-s SEED] [-g FILE.gbnf | -j "
                            "SCHEMA] VOCAB.gguf\n");
            return 2;
        }
    }
    if (!vocab || n <= 0) {
        fprintf(stderr, "grammar-bench: give a vocabulary (a GGUF file with tokenizer keys)\n");
        return 2;
    }
    glesc_gguf *f;
    glesc_tokenizer *tok;
    if (glesc_gguf_open(vocab, &f) != GLESC_OK || glesc_tokenizer_load(f, &tok) != GLESC_OK) {
        fprintf(stderr, "grammar-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    glesc_gguf_close(f);
    char *gbnf = NULL;
    size_t len;
    if (gfile && !(gbnf = tool_read_file(gfile, 1 << 20, &len))) {
        fprintf(stderr, "grammar-bench: cannot read %s\n", gfile);
        return 1;
    }
    if (!gfile && glesc_json_schema_to_grammar(schema, strlen(schema), &gbnf) != GLESC_OK) {
        fprintf(stderr, "grammar-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    int32_t V = glesc_tokenizer_n_vocab(tok);
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    sp.seed = seed;
    glesc_sampler *plain, *gram;
    double t0 = 0, build = 0;
    if (glesc_sampler_create(&sp, V, &plain) != GLESC_OK ||
        glesc_sampler_create(&sp, V, &gram) != GLESC_OK ||
        ((t0 = now_us()), glesc_sampler_add_grammar(gram, tok, gbnf, NULL)) != GLESC_OK) {
        fprintf(stderr, "grammar-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    build = now_us() - t0;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    int ra, rb;
    steps(plain, tok, n, seed, a, &ra);
    steps(gram, tok, n, seed, b, &rb);
    printf("grammar-bench: %s, %d tokens; %s; %d steps, seed %llu; the grammar completed %d "
           "times\n",
           vocab, (int)V, gfile ? gfile : "the JSON schema's grammar", n, (unsigned long long)seed,
           rb);
    printf("  grammar stage built in %.1f ms\n", build / 1000);
    double ma = 0, mb = 0;
    for (int i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
    }
    report("no grammar", a, n);
    report("grammar", b, n);
    printf("  overhead per token: %.1f us (mean)\n", (mb - ma) / n);
    free(a);
    free(b);
    glesc_sampler_destroy(plain);
    glesc_sampler_destroy(gram);
    if (gfile)
        free(gbnf);
    else
        glesc_text_free(gbnf);
    glesc_tokenizer_destroy(tok);
    return 0;
}
