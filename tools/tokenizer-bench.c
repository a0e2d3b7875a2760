/*
 * tokenizer-bench.c — tokenizer throughput: MB/s of glesc_tokenize per
 * vocabulary, on English-like text it generates (deterministic) or on a file.
 *
 *   tokenizer-bench [-f TEXT] [-s MB] [-r RUNS] MODEL.gguf...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/file.h"
#include "common/rng.h"
#include "glesc.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sentences of common English words, with capitals, commas, quotes,
 * numbers, apostrophes and paragraph breaks. */
static char *english(size_t size)
{
    static const char *const words[] = {
        "the",        "a",           "and",         "of",           "to",      "in",
        "was",        "she",         "he",          "little",       "big",     "dog",
        "cat",        "girl",        "boy",         "ran",          "saw",     "said",
        "time",       "day",         "house",       "tree",         "happy",   "sad",
        "friend",     "mom",         "play",        "with",         "park",    "ball",
        "because",    "wanted",      "could",       "would",        "there",   "their",
        "about",      "under",       "after",       "before",       "garden",  "water",
        "light",      "story",       "people",      "it's",         "didn't",  "they're",
        "know",       "think",       "world",       "through",      "between", "important",
        "government", "information", "development", "understanding"};
    const size_t nw = sizeof words / sizeof words[0];
    char *buf = malloc(size + 64);
    if (!buf)
        return NULL;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    size_t o = 0;
    int in_sentence = 0, sentence_words = 0;
    while (o < size) {
        const char *w = words[tool_rng_next(&rng) % nw];
        size_t k = strlen(w);
        if (in_sentence)
            buf[o++] = ' ';
        if (!in_sentence) {
            buf[o++] = (char)(w[0] >= 'a' && w[0] <= 'z' ? w[0] - 32 : w[0]);
            memcpy(buf + o, w + 1, k - 1);
            o += k - 1;
        } else if (tool_rng_next(&rng) % 40 == 0) {
            o += (size_t)snprintf(buf + o, 32, "%u", (unsigned)(tool_rng_next(&rng) % 10000));
        } else {
            memcpy(buf + o, w, k);
            o += k;
        }
        in_sentence = 1;
        sentence_words++;
        if (sentence_words > 4 && tool_rng_next(&rng) % 8 == 0) {
            char p = ",.!?"[tool_rng_next(&rng) % 4 == 0 ? 0 : 1 + tool_rng_next(&rng) % 3];
            buf[o++] = p;
            if (p != ',') {
                /* End of sentence: a space, or now and then a paragraph. */
                uint64_t r = tool_rng_next(&rng) % 8;
                if (r == 0) {
                    buf[o++] = '\n';
                    buf[o++] = '\n';
                } else {
                    buf[o++] = r == 1 ? '\n' : ' ';
                }
                in_sentence = 0;
                sentence_words = 0;
            }
        }
    }
    buf[size] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    double mb = 1.0;
    int runs = 5;
    int first_model = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-f") && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            mb = atof(argv[++i]);
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            first_model = argc;
            break;
        } else {
            first_model = i;
            break;
        }
    }
    if (first_model >= argc || mb <= 0 || runs < 1) {
        fprintf(stderr, "usage: tokenizer-bench [-f TEXT] [-s MB] [-r RUNS] MODEL.gguf...\n"
                        "  -f TEXT  tokenize this file (default: generated English-like text)\n"
                        "  -s MB    size of the generated text (default 1)\n"
                        "  -r RUNS  runs per vocabulary; the best is reported (default 5)\n");
        return 2;
    }
    size_t len = 0;
    char *text = file ? tool_read_file(file, SIZE_MAX, &len) : english(len = (size_t)(mb * 1e6));
    if (!text) {
        fprintf(stderr, "tokenizer-bench: cannot %s %s\n", file ? "read" : "generate",
                file ? file : "text");
        return 1;
    }
    printf("text: %s, %.2f MB\n", file ? file : "generated English", (double)len / 1e6);
    printf("%-44s %-4s %-15s %9s %9s %9s\n", "vocabulary", "kind", "pre", "tokens", "best ms",
           "MB/s");
    int rc = 0;
    for (int i = first_model; i < argc; i++) {
        glesc_gguf *f = NULL;
        glesc_tokenizer *t = NULL;
        if (glesc_gguf_open(argv[i], &f) != GLESC_OK || glesc_tokenizer_load(f, &t) != GLESC_OK) {
            fprintf(stderr, "tokenizer-bench: %s: %s\n", argv[i], glesc_last_errmsg());
            glesc_gguf_close(f);
            rc = 1;
            continue;
        }
        double best = 1e30;
        size_t n = 0;
        for (int r = 0; r < runs; r++) {
            int32_t *ids = NULL;
            double t0 = now_s();
            if (glesc_tokenize_alloc(t, text, len, 0, &ids, &n) != GLESC_OK) {
                fprintf(stderr, "tokenizer-bench: %s\n", glesc_last_errmsg());
                rc = 1;
                break;
            }
            double dt = now_s() - t0;
            glesc_tokens_free(ids);
            if (dt < best)
                best = dt;
        }
        const char *name = strrchr(argv[i], '/');
        printf("%-44s %-4s %-15s %9zu %9.1f %9.2f\n", name ? name + 1 : argv[i],
               glesc_tokenizer_get_kind(t) == GLESC_TOKENIZER_SPM ? "SPM" : "BPE",
               glesc_tokenizer_pre_name(t), n, best * 1e3, (double)len / 1e6 / best);
        glesc_tokenizer_destroy(t);
        glesc_gguf_close(f);
    }
    free(text);
    return rc;
}
