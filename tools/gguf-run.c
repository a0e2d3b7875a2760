/*
 * gguf-run.c — runs a GGUF language model. First version: only
 * --tokenize, which prints the prompt's token ids and needs no GPU (it works
 * on vocab-only files). Generation comes with the runtime (issue 6); its
 * flags are recognised and refused with a clear message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gguf-run -m FILE --tokenize [--no-bos] [--parse-special] (-p TEXT | -f FILE)\n"
            "\n"
            "  -m, --model FILE     GGUF model (a vocab-only file is enough for --tokenize)\n"
            "  --tokenize           print the prompt's token ids, space-separated, on one line\n"
            "  --no-bos             do not add BOS/EOS where the vocabulary asks for them\n"
            "  --parse-special      turn control tokens written in the text (\"<s>\") into ids\n"
            "  -p, --prompt TEXT    the prompt, used verbatim (no escapes, no trimming)\n"
            "  -f, --file FILE      read the prompt from FILE, byte for byte\n"
            "  -h, --help           this text\n"
            "\n"
            "Generation (-n, --temp, --top-k, --top-p, --seed, -c, --chat, ...) is not\n"
            "implemented yet: the runtime comes with issue 6.\n");
}

/* Flags of the coming runtime: accepted by name, refused for now. The
 * second column says whether the flag takes a value. */
static const struct {
    const char *name;
    int takes_value;
} later_flags[] = {
    {"-n", 1},
    {"--n-predict", 1},
    {"-c", 1},
    {"--ctx-size", 1},
    {"--temp", 1},
    {"--top-k", 1},
    {"--top-p", 1},
    {"--min-p", 1},
    {"--seed", 1},
    {"-s", 1},
    {"--repeat-penalty", 1},
    {"-t", 1},
    {"--threads", 1},
    {"--chat", 0},
    {"-i", 0},
    {"--interactive", 0},
    {"--system", 1},
    {"--greedy", 0},
    {"--verbose-prompt", 0},
    {"--bench", 0},
};

static int not_yet(const char *what)
{
    fprintf(stderr, "gguf-run: %s: not implemented yet: the runtime comes with issue 6\n", what);
    return 2;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return NULL;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *prompt_file = NULL;
    int tokenize = 0, no_bos = 0, parse_special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_next = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!has_next)
                goto missing;
            model = argv[++i];
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!has_next)
                goto missing;
            prompt = argv[++i];
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!has_next)
                goto missing;
            prompt_file = argv[++i];
        } else if (!strcmp(a, "--tokenize")) {
            tokenize = 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = 1;
        } else {
            for (size_t k = 0; k < sizeof later_flags / sizeof later_flags[0]; k++)
                if (!strcmp(a, later_flags[k].name))
                    return not_yet(a);
            fprintf(stderr, "gguf-run: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "gguf-run: %s needs a value (see --help)\n", a);
        return 2;
    }
    if (!model) {
        fprintf(stderr, "gguf-run: no model: give -m FILE (see --help)\n");
        return 2;
    }
    if (!tokenize)
        return not_yet("generation");
    if (!!prompt == !!prompt_file) {
        fprintf(stderr, "gguf-run: --tokenize needs exactly one of -p TEXT and -f FILE\n");
        return 2;
    }

    char *text = NULL;
    size_t len;
    if (prompt_file) {
        text = read_file(prompt_file, &len);
        if (!text) {
            fprintf(stderr, "gguf-run: cannot read %s\n", prompt_file);
            return 1;
        }
    } else {
        len = strlen(prompt);
    }

    int rc = 1;
    glesc_gguf *f = NULL;
    glesc_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (glesc_gguf_open(model, &f) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        goto done;
    }
    if (glesc_tokenizer_load(f, &tok) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s: %s\n", model, glesc_last_errmsg());
        goto done;
    }
    unsigned flags = (no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL) |
                     (parse_special ? GLESC_TOKENIZE_PARSE_SPECIAL : 0);
    if (glesc_tokenize_alloc(tok, text ? text : prompt, len, flags, &ids, &n) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    rc = fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
done:
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(tok);
    glesc_gguf_close(f);
    free(text);
    return rc;
}
