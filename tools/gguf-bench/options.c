/*
 * options.c — gguf-bench's command line: usage, flags and lists of values,
 * and the context options they give.
 */
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "gguf-bench/gguf-bench.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gguf-bench -m FILE [-m FILE ...] [options]\n"
            "llama-bench's tests on glesc: ppP (a P-token prompt) and tgN (N decode steps),\n"
            "each at depth D (tokens already in the KV cache), t/s ± stddev over repetitions.\n"
            "Lists are comma-separated; every combination runs. Architectures: llama,\n"
            "qwen2, qwen3, gemma2, gemma3, phi3.\n"
            "  -m, --model FILE      a GGUF model (repeatable)\n"
            "  -p, --n-prompt LIST   prompt lengths (default 512; 0: none)\n"
            "  -n, --n-gen LIST      generated tokens (default 128; 0: none)\n"
            "  -d, --n-depth LIST    tokens in the cache before each test (default 0)\n"
            "  -r, --repetitions N   timed repetitions (default 3)\n"
            "  -b, --batch-size N    most tokens per graph (default 512)\n"
            "  --kv-type LIST        KV cache types of keys and values: f16 (default), f32,\n"
            "                        q8_0, q4_0 (-ctk LIST: the same)\n"
            "  -ctv T                the values' type where it differs from the keys'\n"
            "  --portable            the fallback path: no subgroups, 128 invocations, 16 KiB\n"
            "                        shared memory, 128 MiB storage blocks\n"
            "  --greedy              also 'tgN greedy' per tgN: N pipelined greedy steps (the\n"
            "                        GPU picks each token, read while the next step runs)\n"
            "  --roofline-mib N      buffer of the roofline kernels (default 256; 0: skip them)\n"
            "  --no-profile          no per-kernel GPU times (the extra timed step)\n"
            "  --kernels             the profiled step's kernels on stderr, one a line:\n"
            "                        index, name, dispatches, GPU microseconds\n"
            "  --no-warmup           no untimed repetition first\n"
            "  --ttft P              time to first token: a P-token prompt and the first\n"
            "                        decode step in fresh processes of gguf-bench, with\n"
            "                        cold, then warm program caches (glesc's and the\n"
            "                        driver's, in a temporary directory), and the ratio\n"
            "  --seed N              the random token ids (default 1)\n"
            "  --barriers MODE       the storage barriers between dependent dispatches, a\n"
            "                        measurement aid: storage (default), all (every bit),\n"
            "                        none (no barrier: wrong results, their cost timed)\n"
            "  --json                one JSON object on stdout instead of the tables\n"
            "  --json-file FILE      the JSON object into FILE as well (with the tables)\n"
            "  --platform P, --device D, --cache-dir DIR|off   as gguf-run's\n"
            "  -v                    progress on stderr\n");
}

/* "512,1024" into out[] (each in lo..hi); the count, or -1 after a message. */
static int parse_list(const char *flag, const char *v, long lo, long hi, int *out)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long x;
        if (n == MAX_LIST) {
            fprintf(stderr, "gguf-bench: %s: more than %d values\n", flag, MAX_LIST);
            return -1;
        }
        if (tool_parse_long("gguf-bench", flag, tok, lo, hi, &x))
            return -1;
        out[n++] = (int)x;
    }
    if (!n)
        fprintf(stderr, "gguf-bench: %s: no value in '%s'\n", flag, v);
    return n ? n : -1;
}

/* The flags without a value: true when a is one (set in *o). */
static bool parse_flag(options *o, const char *a)
{
    if (!strcmp(a, "--json"))
        o->json = true;
    else if (!strcmp(a, "--portable"))
        o->portable = true;
    else if (!strcmp(a, "--greedy"))
        o->greedy = true;
    else if (!strcmp(a, "--no-profile"))
        o->profile = false;
    else if (!strcmp(a, "--kernels"))
        o->kernels = true;
    else if (!strcmp(a, "--no-warmup"))
        o->warmup = false;
    else if (!strcmp(a, "-v"))
        o->verbose = true;
    else if (!strcmp(a, "--ttft-child"))
        o->ttft_child = true;
    else
        return false;
    return true;
}

/* Is a an option that takes a value? */
static bool takes_value(const char *a)
{
    static const char *const valued[] = {
        "-m",       "--model",       "-p",           "--n-prompt",     "-n",          "--n-gen",
        "-d",       "--n-depth",     "--kv-type",    "-ctk",           "-ctv",        "-r",
        "-b",       "--repetitions", "--batch-size", "--roofline-mib", "--seed",      "--platform",
        "--device", "--json-file",   "--ttft",       "--barriers",     "--cache-dir",
    };
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
        if (!strcmp(a, valued[k]))
            return true;
    return false;
}

/* "f32,q8_0" into o->kv; 2 after a message. */
static int parse_kv_types(options *o, const char *v)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    o->n_kv = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        glesc_dtype t;
        if (!tool_parse_kv_type(tok, &t)) {
            fprintf(stderr, "gguf-bench: --kv-type: '%s' is not f32, f16, q8_0 or q4_0\n", tok);
            return 2;
        }
        if (o->n_kv == MAX_LIST) {
            fprintf(stderr, "gguf-bench: --kv-type: more than %d values\n", MAX_LIST);
            return 2;
        }
        o->kv[o->n_kv++] = t;
    }
    if (!o->n_kv) {
        fprintf(stderr, "gguf-bench: --kv-type: no value\n");
        return 2;
    }
    return 0;
}

/* Option a (one that takes_value) with its value v into *o; 2 after a
 * message. */
static int parse_value(options *o, const char *a, const char *v)
{
    long x;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (o->n_models == MAX_MODELS) {
            fprintf(stderr, "gguf-bench: more than %d models\n", MAX_MODELS);
            return 2;
        }
        o->models[o->n_models++] = v;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
        if ((o->n_p = parse_list(a, v, 0, 1 << 20, o->p)) < 0)
            return 2;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
        if ((o->n_n = parse_list(a, v, 0, 1 << 20, o->n)) < 0)
            return 2;
    } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
        if ((o->n_d = parse_list(a, v, 0, 1 << 20, o->d)) < 0)
            return 2;
    } else if (!strcmp(a, "--kv-type") || !strcmp(a, "-ctk")) {
        return parse_kv_types(o, v);
    } else if (!strcmp(a, "-ctv")) {
        if (!tool_parse_kv_type(v, &o->kv_v)) {
            fprintf(stderr, "gguf-bench: -ctv: '%s' is not f32, f16, q8_0 or q4_0\n", v);
            return 2;
        }
        o->kv_v_set = true;
    } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
        if (tool_parse_long("gguf-bench", a, v, 1, 1000, &x))
            return 2;
        o->reps = (int)x;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
        if (tool_parse_long("gguf-bench", a, v, 1, 1 << 16, &x))
            return 2;
        o->n_batch = (int)x;
    } else if (!strcmp(a, "--roofline-mib")) {
        if (tool_parse_long("gguf-bench", a, v, 0, 1 << 16, &o->roofline_mib))
            return 2;
    } else if (!strcmp(a, "--seed")) {
        if (tool_parse_long("gguf-bench", a, v, 0, 0x7fffffffL, &x))
            return 2;
        o->seed = (uint64_t)x;
    } else if (!strcmp(a, "--platform")) {
        o->platform = v;
    } else if (!strcmp(a, "--device")) {
        o->device = v;
    } else if (!strcmp(a, "--json-file")) {
        o->json_file = v;
    } else if (!strcmp(a, "--ttft")) {
        if (tool_parse_long("gguf-bench", a, v, 1, 1 << 20, &x))
            return 2;
        o->ttft = (int)x;
    } else if (!strcmp(a, "--barriers")) {
        if (strcmp(v, "storage") && strcmp(v, "all") && strcmp(v, "none")) {
            fprintf(stderr, "gguf-bench: --barriers: '%s' is not storage, all or none\n", v);
            return 2;
        }
        setenv("GLESC_BARRIERS", v, 1); /* read when the context is created */
    } else {
        o->cache_dir = v; /* --cache-dir, the last of takes_value's */
    }
    return 0;
}

int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->p[0] = 512;
    o->n[0] = 128;
    o->n_p = o->n_n = o->n_d = o->n_kv = 1;
    o->kv[0] = GLESC_DTYPE_F16;
    o->reps = 3;
    o->n_batch = 512;
    o->roofline_mib = 256;
    o->profile = o->warmup = true;
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (parse_flag(o, a))
            continue;
        if (!takes_value(a)) {
            fprintf(stderr, "gguf-bench: %s '%s' (gguf-bench --help)\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gguf-bench: %s needs a value (gguf-bench --help)\n", a);
            return 2;
        }
        int rc = parse_value(o, a, argv[++i]);
        if (rc)
            return rc;
    }
    if (!o->n_models) {
        fprintf(stderr, "gguf-bench: no model (-m FILE; gguf-bench --help)\n");
        return 2;
    }
    if (o->kernels && !o->profile) {
        fprintf(stderr, "gguf-bench: --kernels lists the profiled step's kernels: not with "
                        "--no-profile\n");
        return 2;
    }
    return 0;
}

/* Sets the context options from the command line; 2 after a message. */
int context_options(const options *o, glesc_context_options *co)
{
    memset(co, 0, sizeof *co);
    if (o->platform && !tool_parse_platform(o->platform, &co->platform)) {
        fprintf(stderr, "gguf-bench: --platform: '%s' is not auto, gbm, device, surfaceless\n",
                o->platform);
        return 2;
    }
    co->device = o->device;
    co->cache_dir = o->cache_dir;
    if (o->portable)
        glesc_context_options_limits(co, "portable");
    return 0;
}
