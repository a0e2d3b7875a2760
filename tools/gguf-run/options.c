/*
 * options.c — gguf-run's command line: the usage text, the flags (values
 * checked through tools/common/args.h), llama.cpp's escape processing for
 * -e and the --prompt-ids list.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "gguf-run/gguf-run.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gguf-run [-m FILE] [options]\n"
            "\n"
            "Runs a GGUF language model (llama, qwen2, qwen3, gemma2, gemma3, phi3; f32, f16,\n"
            "bf16 or quantized weights) on the GPU through OpenGL ES compute. Without -m: a\n"
            "demo on a random-weight model written on the fly.\n"
            "\n"
            "Model and prompt:\n"
            "  -m, --model FILE       GGUF model\n"
            "  -p, --prompt TEXT      the prompt, verbatim\n"
            "  -f, --file FILE        read the prompt from FILE, byte for byte\n"
            "  -e, --escape           process \\n \\t \\r \\\\ \\\" \\' \\xNN in the prompt\n"
            "  --prompt-ids LIST      the prompt as token ids, e.g. 1,403,407 (no BOS added)\n"
            "  --no-bos               do not add BOS/EOS where the vocabulary asks for them\n"
            "  --parse-special        turn control tokens written in the prompt into ids\n"
            "  --no-display-prompt    do not echo the prompt before the generated text\n"
            "  --tokenize             print the prompt's token ids and exit (no GPU needed)\n"
            "  --prompt-cache FILE    the session's state after the prompt, saved to FILE;\n"
            "                         a later run whose prompt starts with the same tokens\n"
            "                         loads it and evaluates only the rest (a chat: its\n"
            "                         system message)\n"
            "  --prompt-cache-ro      load --prompt-cache's file but do not write it\n"
            "  --precompile           compile every kernel the model needs (every prompt\n"
            "                         length, decode) into the program cache and exit: a\n"
            "                         device's first boot, so later runs start warm\n"
            "\n"
            "Generation:\n"
            "  -n, --n-predict N      tokens to generate (-1: until EOS or the context is\n"
            "                         full, the default; 0: only evaluate the prompt)\n"
            "  -c, --ctx-size N       context length (0: the model's, at most 4096)\n"
            "  --temp T               temperature (0.8; 0 = greedy)\n"
            "  --top-k N              top-k (40; 0 = off)\n"
            "  --top-p P              top-p (0.95; 1 = off)\n"
            "  --min-p P              min-p (0.05; 0 = off)\n"
            "  --repeat-penalty F     repetition penalty (1.0 = off)\n"
            "  --repeat-last-n N      tokens the penalty looks back at (64)\n"
            "  --typical P            locally typical sampling (1.0 = off)\n"
            "  --logit-bias T(+|-)B   add B to token T's logit (e.g. 15043+1, 2-inf);\n"
            "                         repeat for more tokens\n"
            "  -s, --seed N           random seed (default: from the clock)\n"
            "  --ignore-eos           keep generating after an end-of-generation token\n"
            "  --grammar TEXT         constrain the output to a GBNF grammar (llama.cpp's\n"
            "                         format, start rule root; docs/sampling.md)\n"
            "  --grammar-file FILE    the same, from a file\n"
            "  -j, --json-schema TEXT constrain the output to JSON valid for a JSON schema\n"
            "                         (a subset: docs/sampling.md)\n"
            "  --json-schema-file FILE the same, from a file\n"
            "  --kv-type T            KV cache type of keys and values: f16 (default),\n"
            "                         f32, q8_0, q4_0\n"
            "  -ctk, --cache-type-k T, -ctv, --cache-type-v T\n"
            "                         the keys' or the values' type alone (as llama.cpp)\n"
            "\n");
    fprintf(out,
            "Chat:\n"
            "  -i, --interactive, --chat\n"
            "                         multi-turn chat on stdin with the model's template\n"
            "                         (-p/-f: the first message; -n: tokens per reply)\n"
            "  --system TEXT          system message for the chat\n"
            "  --chat-template NAME   llama.cpp's names: chatml, llama2, llama2-sys, llama3,\n"
            "                         mistral-v1, mistral-v3, mistral-v7, gemma, phi3,\n"
            "                         zephyr, vicuna, deepseek2, ... (default: detected from\n"
            "                         the model's tokenizer.chat_template, else chatml)\n"
            "\n"
            "Output:\n"
            "  --json                 one JSON object on stdout: prompt_ids, generated_ids\n"
            "                         (with the end-of-generation id that stopped it),\n"
            "                         text (the continuation), stop, timings\n"
            "  --logits-out FILE      raw little-endian float32 logits, n_vocab per row:\n"
            "                         every prompt position, then each generated token's\n"
            "                         row (the one it was sampled from)\n"
            "  -v, --verbose          model, device and per-step details on stderr\n"
            "\n"
            "GPU:\n"
            "  --platform NAME        auto, gbm, device, surfaceless (or GLESC_PLATFORM)\n"
            "  --device DEV           render node path or EGL device index (or GLESC_DEVICE)\n"
            "  --cache-dir DIR        program binary cache (\"off\" disables)\n"
            "  --limits SPEC          run within a smaller device's limits (or GLESC_LIMITS):\n"
            "                         mali, adreno, v3d, portable, and/or blocks=N,\n"
            "                         invocations=N, shared=BYTES, ssbo=BYTES, subgroups=0\n"
            "  -h, --help             this text\n");
}

/* llama.cpp's process_escapes, in place: \n \r \t \' \" \\ \xNN; any other
 * escape stays as written. Returns the new length. */
size_t process_escapes(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            s[o++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n':
            s[o++] = '\n';
            break;
        case 'r':
            s[o++] = '\r';
            break;
        case 't':
            s[o++] = '\t';
            break;
        case '\'':
            s[o++] = '\'';
            break;
        case '"':
            s[o++] = '"';
            break;
        case '\\':
            s[o++] = '\\';
            break;
        case 'x': {
            const char *hexd = "0123456789abcdefABCDEF";
            if (i + 2 < n && s[i + 1] && s[i + 2] && strchr(hexd, s[i + 1]) &&
                strchr(hexd, s[i + 2])) {
                char hex[3] = {s[i + 1], s[i + 2], 0};
                s[o++] = (char)strtol(hex, NULL, 16);
                i += 2;
            } else { /* not a valid \xNN: kept as written */
                s[o++] = '\\';
                s[o++] = c;
            }
            break;
        }
        default:
            s[o++] = '\\';
            s[o++] = c;
        }
    }
    return o;
}

/* "1,403, 407" → ids; NULL (message printed) on a bad list. */
int32_t *parse_ids(const char *s, size_t *n_out)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = s;
    while (ids) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "gguf-run: --prompt-ids: bad id at '%s'\n", p);
            free(ids);
            return NULL;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni)
                free(ids);
            ids = ni;
            if (!ids)
                break;
        }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "gguf-run: --prompt-ids: expected ',' at '%s'\n", p);
            free(ids);
            return NULL;
        }
    }
    if (ids && n == 0) {
        fprintf(stderr, "gguf-run: --prompt-ids: no ids\n");
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* A flag without a value into *o; false when a is none. */
static bool parse_flag(options *o, const char *a)
{
    if (!strcmp(a, "-e") || !strcmp(a, "--escape"))
        o->escape = 1;
    else if (!strcmp(a, "--tokenize"))
        o->tokenize = 1;
    else if (!strcmp(a, "--prompt-cache-ro"))
        o->prompt_cache_ro = 1;
    else if (!strcmp(a, "--precompile"))
        o->precompile = 1;
    else if (!strcmp(a, "--no-bos"))
        o->no_bos = 1;
    else if (!strcmp(a, "--parse-special"))
        o->parse_special = 1;
    else if (!strcmp(a, "--no-display-prompt"))
        o->no_display_prompt = 1;
    else if (!strcmp(a, "--ignore-eos"))
        o->ignore_eos = 1;
    else if (!strcmp(a, "-i") || !strcmp(a, "--interactive") || !strcmp(a, "--chat") ||
             !strcmp(a, "-cnv") || !strcmp(a, "--conversation"))
        o->chat = 1;
    else if (!strcmp(a, "--json"))
        o->json = 1;
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
        o->verbose++;
    else
        return false;
    return true;
}

/* a is an option that takes a value (parse_value's). */
static bool takes_value(const char *a)
{
    static const char *const valued[] = {
        "-m",
        "--model",
        "-p",
        "--prompt",
        "-f",
        "--file",
        "--prompt-ids",
        "-n",
        "--n-predict",
        "-c",
        "--ctx-size",
        "--temp",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--repeat-last-n",
        "--typical",
        "--logit-bias",
        "--grammar",
        "--grammar-file",
        "-j",
        "--json-schema",
        "--json-schema-file",
        "-s",
        "--seed",
        "--system",
        "-sys",
        "--chat-template",
        "--kv-type",
        "-ctk",
        "--cache-type-k",
        "-ctv",
        "--cache-type-v",
        "--logits-out",
        "--prompt-cache",
        "--platform",
        "--device",
        "--cache-dir",
        "--limits",
    };
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
        if (!strcmp(a, valued[k]))
            return true;
    return false;
}

/* Option a (one that takes_value) with its value v into *o; 2 after a
 * message. */
static int parse_value(options *o, const char *a, const char *v)
{
    long x;
#define IS(s) (!strcmp(a, s))
    if (IS("-m") || IS("--model")) {
        o->model = v;
    } else if (IS("-p") || IS("--prompt")) {
        o->prompt = v;
    } else if (IS("-f") || IS("--file")) {
        o->prompt_file = v;
    } else if (IS("--prompt-ids")) {
        o->prompt_ids = v;
    } else if (IS("-n") || IS("--n-predict")) {
        if (tool_parse_long("gguf-run", a, v, -1, INT32_MAX, &o->n_predict))
            return 2;
    } else if (IS("-c") || IS("--ctx-size")) {
        if (tool_parse_long("gguf-run", a, v, 0, INT32_MAX, &o->n_ctx))
            return 2;
    } else if (IS("--temp")) {
        if (tool_parse_float("gguf-run", a, v, &o->sp.temperature))
            return 2;
    } else if (IS("--top-k")) {
        if (tool_parse_long("gguf-run", a, v, 0, INT32_MAX, &x))
            return 2;
        o->sp.top_k = (int32_t)x;
    } else if (IS("--top-p")) {
        if (tool_parse_float("gguf-run", a, v, &o->sp.top_p))
            return 2;
    } else if (IS("--min-p")) {
        if (tool_parse_float("gguf-run", a, v, &o->sp.min_p))
            return 2;
    } else if (IS("--repeat-penalty")) {
        if (tool_parse_float("gguf-run", a, v, &o->sp.repeat_penalty))
            return 2;
    } else if (IS("--repeat-last-n")) {
        if (tool_parse_long("gguf-run", a, v, 0, 1 << 20, &x))
            return 2;
        o->sp.repeat_last_n = (int32_t)x;
    } else if (IS("--typical")) {
        if (tool_parse_float("gguf-run", a, v, &o->typical))
            return 2;
    } else if (IS("--logit-bias")) {
        return sampling_parse_bias(o, v);
    } else if (IS("--grammar")) {
        o->grammar = v;
    } else if (IS("--grammar-file")) {
        o->grammar_file = v;
    } else if (IS("-j") || IS("--json-schema")) {
        o->json_schema = v;
    } else if (IS("--json-schema-file")) {
        o->json_schema_file = v;
    } else if (IS("-s") || IS("--seed")) {
        char *end;
        errno = 0;
        unsigned long long sv = strtoull(v, &end, 10);
        if (errno || end == v || *end || *v == '-') {
            fprintf(stderr, "gguf-run: %s: '%s' is not a non-negative integer\n", a, v);
            return 2;
        }
        o->sp.seed = sv;
        o->seed_given = 1;
    } else if (IS("--system") || IS("-sys")) {
        o->system = v;
    } else if (IS("--chat-template")) {
        o->chat_template = v;
    } else if (IS("--kv-type") || IS("-ctk") || IS("--cache-type-k") || IS("-ctv") ||
               IS("--cache-type-v")) {
        glesc_dtype t;
        if (!tool_parse_kv_type(v, &t)) {
            fprintf(stderr, "gguf-run: %s: '%s' is not f32, f16, q8_0 or q4_0\n", a, v);
            return 2;
        }
        bool values = IS("-ctv") || IS("--cache-type-v");
        if (!values)
            o->kv_type = tool_kv_option(t);
        if (values || IS("--kv-type"))
            o->kv_type_v = tool_kv_option(t);
    } else if (IS("--logits-out")) {
        o->logits_out = v;
    } else if (IS("--prompt-cache")) {
        o->prompt_cache = v;
    } else if (IS("--platform")) {
        o->platform = v;
    } else if (IS("--device")) {
        o->device = v;
    } else if (IS("--cache-dir")) {
        o->cache_dir = v;
    } else {
        o->limits = v; /* --limits, the last of takes_value's */
    }
#undef IS
    return 0;
}

/* After the flags: a seed from the clock unless one was given, and the
 * combinations refused; -1 to go on, 2 after a message. */
static int options_check(options *o)
{
    if (!o->seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->sp.seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    if ((o->prompt != NULL) + (o->prompt_file != NULL) + (o->prompt_ids != NULL) > 1) {
        fprintf(stderr, "gguf-run: give at most one of -p, -f and --prompt-ids\n");
        return 2;
    }
    if (o->chat && (o->json || o->logits_out || o->prompt_ids)) {
        fprintf(stderr, "gguf-run: --chat does not combine with --json, --logits-out or "
                        "--prompt-ids\n");
        return 2;
    }
    if (o->prompt_cache && o->logits_out) {
        /* the cached positions' rows are not in the state */
        fprintf(stderr, "gguf-run: --prompt-cache does not combine with --logits-out\n");
        return 2;
    }
    if (o->prompt_cache_ro && !o->prompt_cache) {
        fprintf(stderr, "gguf-run: --prompt-cache-ro needs --prompt-cache FILE\n");
        return 2;
    }
    if (!(o->typical > 0.0f && o->typical <= 1.0f)) {
        fprintf(stderr, "gguf-run: --typical %g must be in (0, 1] (1 = off)\n", o->typical);
        return 2;
    }
    return sampling_prepare(o);
}

int options_parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->typical = 1.0f;
    glesc_sampler_params_init(&o->sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (parse_flag(o, a))
            continue;
        if (!takes_value(a)) {
            fprintf(stderr, "gguf-run: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gguf-run: %s needs a value (see --help)\n", a);
            return 2;
        }
        int rc = parse_value(o, a, argv[++i]);
        if (rc)
            return rc;
    }
    return options_check(o);
}
