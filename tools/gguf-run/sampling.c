/*
 * sampling.c — gguf-run's sampler: glesc_sampler_create's chain from the
 * sampling flags (logit bias and typical sampling included), and the
 * grammar of --grammar, --grammar-file, -j/--json-schema or
 * --json-schema-file, read and checked with the other flags so that a bad
 * grammar fails before the model loads.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "gguf-run/gguf-run.h"

#define GRAMMAR_FILE_MAX ((size_t)1 << 20)

int sampling_parse_bias(options *o, const char *v)
{
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    const char *b = end;
    if (errno || end == v || id < 0 || id > INT32_MAX || (*b != '+' && *b != '-')) {
        fprintf(stderr,
                "gguf-run: --logit-bias: '%s' is not TOKEN+BIAS or TOKEN-BIAS (e.g. "
                "15043+1, 2-inf)\n",
                v);
        return 2;
    }
    float bias;
    if (!strcmp(b + 1, "inf")) {
        bias = *b == '-' ? -INFINITY : INFINITY;
    } else {
        errno = 0;
        bias = strtof(b, &end);
        if (errno || end == b || *end || !isfinite(bias)) {
            fprintf(stderr, "gguf-run: --logit-bias: '%s': the bias is not a number\n", v);
            return 2;
        }
    }
    glesc_logit_bias *nb = realloc(o->bias, (o->n_bias + 1) * sizeof *nb);
    if (!nb) {
        fprintf(stderr, "gguf-run: out of memory\n");
        return 2;
    }
    o->bias = nb;
    o->bias[o->n_bias++] = (glesc_logit_bias){(int32_t)id, bias};
    return 0;
}

/* The text of a grammar or schema option: the value, or the file it names. */
static char *option_text(const char *flag, const char *value, bool file)
{
    if (!file) {
        char *t = strdup(value);
        if (!t)
            fprintf(stderr, "gguf-run: out of memory\n");
        return t;
    }
    size_t len;
    char *t = tool_read_file(value, GRAMMAR_FILE_MAX, &len);
    if (!t)
        fprintf(stderr, "gguf-run: %s: cannot read %s: %s\n", flag, value,
                errno == EFBIG ? "larger than 1 MiB" : strerror(errno));
    return t;
}

int sampling_prepare(options *o)
{
    const char *flag = NULL, *value = NULL;
    bool file = false, schema = false;
    int given = 0;
    if (o->grammar)
        given++, flag = "--grammar", value = o->grammar;
    if (o->grammar_file)
        given++, flag = "--grammar-file", value = o->grammar_file, file = true;
    if (o->json_schema)
        given++, flag = "--json-schema", value = o->json_schema, schema = true;
    if (o->json_schema_file)
        given++, flag = "--json-schema-file", value = o->json_schema_file, schema = file = true;
    if (given > 1) {
        fprintf(stderr, "gguf-run: give at most one of --grammar, --grammar-file, --json-schema "
                        "and --json-schema-file\n");
        return 2;
    }
    if (!given)
        return -1;
    char *text = option_text(flag, value, file);
    if (!text)
        return 2;
    if (schema) {
        char *gbnf = NULL;
        glesc_status st = glesc_json_schema_to_grammar(text, strlen(text), &gbnf);
        free(text);
        if (st != GLESC_OK) {
            fprintf(stderr, "gguf-run: %s: %s\n", flag, glesc_last_errmsg());
            return 2;
        }
        text = strdup(gbnf);
        glesc_text_free(gbnf);
        if (!text) {
            fprintf(stderr, "gguf-run: out of memory\n");
            return 2;
        }
    } else if (glesc_grammar_check(text, NULL) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s%s%s: %s\n", flag, file ? " " : "", file ? value : "",
                glesc_last_errmsg());
        free(text);
        return 2;
    }
    o->grammar_text = text;
    return -1;
}

int sampling_create(run *r)
{
    const options *o = r->o;
    glesc_sampler_params sp = o->sp;
    sp.typical_p = o->typical;
    sp.logit_bias = o->bias;
    sp.n_logit_bias = o->n_bias;
    glesc_status st = glesc_sampler_create(&sp, r->n_vocab_tok, &r->smp);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 2;
    }
    if (o->grammar_text &&
        glesc_sampler_add_grammar(r->smp, r->tok, o->grammar_text, NULL) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    return 0;
}
