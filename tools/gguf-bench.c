/*
 * gguf-bench — llama-bench's figures for glesc, on the public API: prompt
 * processing (ppP: P tokens in one eval, the last logits row read back) and
 * text generation (tgN: N evals of one token, each reading its logits) at a
 * depth of D tokens already in the KV cache (a prompt evaluated first, not
 * timed), repeated -r times after an untimed warm-up repetition; tokens are
 * random ids, as llama-bench's. Results: a markdown table in llama-bench's
 * layout (model, size, params, backend, kv, test, t/s ± stddev over the
 * repetitions) and, per test, what bounds it: GPU dispatches per step, GPU
 * time per kernel kind (gemv, gemm, attention, norm, rope, rows, eltwise,
 * ...) from one extra step of a session created with timing (timer queries
 * would slow the timed runs), and for tg the effective weight bandwidth
 * (weight bytes a decode step reads × tokens per second) as a fraction of
 * two rooflines measured in the same run (glesc_context_roofline: a copy
 * kernel and a read-only one). --json prints all of it as one JSON object.
 * --portable runs the fallback path a small GPU gets: no subgroups, 128
 * invocations per workgroup, 16 KiB shared memory, 128 MiB storage blocks.
 * --greedy adds, after the tg tests, "tgN greedy" for each: N steps of
 * greedy decoding as glesc_generate runs it, pipelined through the public
 * API (glesc_session_eval_greedy: each step's token is the arg max the GPU
 * took, read while the next step runs; no logits read back).
 * --ttft P measures the time to the first tokens (a P-token prompt's eval,
 * then the first decode step) in fresh processes of itself: cold (empty
 * program caches, glesc's and the driver's), warm (the caches the cold run
 * left), and with only glesc's cache warm (see "Time to first token").
 *
 * usage: gguf-bench -m FILE [-m FILE ...] [-p 512] [-n 128] [-d 0] [-r 3] [options]
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/file.h"
#include "common/json.h"
#include "common/rng.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"

#define MAX_LIST 16
#define MAX_MODELS 32

/* Kernel kinds, by the first op of a kernel's name ("matmul+add" is a
 * matmul: gemv in a decode step, gemm in a prompt batch). */
enum kind { K_MATMUL, K_ATTENTION, K_NORM, K_ROPE, K_ROWS, K_SOFTMAX, K_REDUCE, K_ELTWISE, K_N };
static const char *const kind_names[K_N] = {"matmul", "attention", "norm",   "rope",
                                            "rows",   "softmax",   "reduce", "eltwise"};

static enum kind kind_of(const char *name)
{
    static const struct {
        const char *op;
        enum kind k;
    } ops[] = {
        {"matmul", K_MATMUL},     {"attention", K_ATTENTION},
        {"rms_norm", K_NORM},     {"layer_norm", K_NORM},
        {"rope", K_ROPE},         {"get_rows", K_ROWS},
        {"set_rows", K_ROWS},     {"cpy", K_ROWS},
        {"concat", K_ROWS},       {"softmax", K_SOFTMAX},
        {"sum", K_REDUCE},        {"mean", K_REDUCE},
        {"reduce_max", K_REDUCE}, {"reduce_min", K_REDUCE},
        {"argmax", K_REDUCE},
    };
    size_t len = strcspn(name, "+");
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strlen(ops[i].op) == len && !strncmp(name, ops[i].op, len))
            return ops[i].k;
    return K_ELTWISE;
}

/* The kind's name in a test: matmuls are GEMVs in decode steps. */
static const char *kind_name(int k, bool tg)
{
    return k == K_MATMUL ? (tg ? "gemv" : "gemm") : kind_names[k];
}

typedef struct options {
    const char *models[MAX_MODELS];
    int n_models;
    int p[MAX_LIST], n[MAX_LIST], d[MAX_LIST];
    int n_p, n_n, n_d;
    glesc_dtype kv[MAX_LIST];
    int n_kv;
    int reps, n_batch;
    long roofline_mib;
    int ttft;        /* --ttft: the prompt's tokens (0: no measurement) */
    bool ttft_child; /* --ttft-child: one measurement, printed for the parent */
    bool json, portable, profile, warmup, verbose, greedy, kernels;
    uint64_t seed;
    const char *platform, *device, *cache_dir, *json_file;
} options;

/* What the GGUF file says about the model (llama-bench's columns). */
typedef struct model_meta {
    char arch[64], ftype[48], desc[160];
    uint64_t size, params;
    uint64_t weight_bytes; /* read by one decode step: all but token_embd's other rows */
    /* the load: glesc_model_load's wall time, the weights' GPU bytes, the
     * process's resident memory right after it */
    double load_s;
    uint64_t gpu_weight_bytes, rss_after_load;
} model_meta;

typedef struct kind_time {
    uint64_t gpu_ns;
    int kernels, dispatches;
} kind_time;

typedef struct result {
    const char *file;
    const model_meta *meta;
    int n_prompt, n_gen, n_depth, n_batch;
    bool greedy; /* tg as pipelined greedy decoding */
    glesc_dtype kv;
    char test[48];
    int reps;
    uint64_t *ns; /* per repetition */
    double avg_ts, stddev_ts, avg_ns, stddev_ns;
    int dispatches, kernels; /* per step (a decode step, or the prompt's last batch) */
    double barriers;         /* storage barriers per step of the timed runs */
    bool profiled;
    int profile_steps;
    kind_time kinds[K_N]; /* per step, averaged over profile_steps */
    uint64_t gpu_ns;      /* per step */
    /* host time per step of the timed runs (glesc_eval_stats): building the
     * graph, submitting it, reading the logits back (waiting included) */
    double build_ns, submit_ns, read_ns;
    /* GPU memory at its peak during the test (its session and timed runs):
     * held = weights + kv + activations + slack (the pool's cached buffers
     * and size-class rounding) */
    uint64_t mem_held, mem_weights, mem_kv, mem_act, mem_slack;
} result;

/* Time to first token (see its section below). */
enum { TTFT_COLD, TTFT_WARM, TTFT_GLESC_ONLY, TTFT_N };
static const char *const ttft_phase_names[TTFT_N] = {"cold", "warm", "warm glesc, cold driver"};
/* the driver cache subfolder each phase uses */
static const char *const ttft_driver_dirs[TTFT_N] = {"driver", "driver", "driver-empty"};

typedef struct ttft_result {
    const char *file;
    const model_meta *meta;
    int n_prompt;
    int phase;
    uint64_t context_ns, load_ns, prompt_ns, decode_ns;
    unsigned long long compiled, disk_hits, disk_writes, disk_rejects;
} ttft_result;

/* The run's context, for its memory counters (glesc_context_memory). */
static glesc_context *bench_ctx;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gguf-bench -m FILE [-m FILE ...] [options]\n"
            "llama-bench's tests on glesc: ppP (a P-token prompt) and tgN (N decode steps),\n"
            "each at depth D (tokens already in the KV cache), t/s ± stddev over repetitions.\n"
            "Lists are comma-separated; every combination runs.\n"
            "  -m, --model FILE      a GGUF model (repeatable)\n"
            "  -p, --n-prompt LIST   prompt lengths (default 512; 0: none)\n"
            "  -n, --n-gen LIST      generated tokens (default 128; 0: none)\n"
            "  -d, --n-depth LIST    tokens in the cache before each test (default 0)\n"
            "  -r, --repetitions N   timed repetitions (default 3)\n"
            "  -b, --batch-size N    most tokens per graph (default 512)\n"
            "  --kv-type LIST        KV cache type: f32 (default), f16\n"
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

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->p[0] = 512;
    o->n[0] = 128;
    o->n_p = o->n_n = o->n_d = o->n_kv = 1;
    o->kv[0] = GLESC_DTYPE_F32;
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
        bool flag = true;
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
            flag = false;
        if (flag)
            continue;
        static const char *const valued[] = {
            "-m",
            "--model",
            "-p",
            "--n-prompt",
            "-n",
            "--n-gen",
            "-d",
            "--n-depth",
            "--kv-type",
            "-r",
            "--repetitions",
            "-b",
            "--batch-size",
            "--roofline-mib",
            "--seed",
            "--platform",
            "--device",
            "--json-file",
            "--ttft",
            "--barriers",
            "--cache-dir",
        };
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known |= !strcmp(a, valued[k]);
        if (!known) {
            fprintf(stderr, "gguf-bench: %s '%s' (gguf-bench --help)\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gguf-bench: %s needs a value (gguf-bench --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
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
        } else if (!strcmp(a, "--kv-type")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->n_kv = 0;
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (strcmp(tok, "f32") && strcmp(tok, "f16")) {
                    fprintf(stderr, "gguf-bench: --kv-type: '%s' is not f32 or f16\n", tok);
                    return 2;
                }
                if (o->n_kv == MAX_LIST) {
                    fprintf(stderr, "gguf-bench: --kv-type: more than %d values\n", MAX_LIST);
                    return 2;
                }
                o->kv[o->n_kv++] = !strcmp(tok, "f16") ? GLESC_DTYPE_F16 : GLESC_DTYPE_F32;
            }
            if (!o->n_kv) {
                fprintf(stderr, "gguf-bench: --kv-type: no value\n");
                return 2;
            }
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
            o->cache_dir = v; /* --cache-dir, the last of `valued` */
        }
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

/* llama.cpp's names of general.file_type (llama_model_ftype_name). */
static const char *ftype_name(uint32_t id)
{
    static const char *const names[] = {
        [0] = "all F32",        [1] = "F16",
        [2] = "Q4_0",           [3] = "Q4_1",
        [7] = "Q8_0",           [8] = "Q5_0",
        [9] = "Q5_1",           [10] = "Q2_K - Medium",
        [11] = "Q3_K - Small",  [12] = "Q3_K - Medium",
        [13] = "Q3_K - Large",  [14] = "Q4_K - Small",
        [15] = "Q4_K - Medium", [16] = "Q5_K - Small",
        [17] = "Q5_K - Medium", [18] = "Q6_K",
        [32] = "BF16",
    };
    return id < sizeof names / sizeof names[0] && names[id] ? names[id] : NULL;
}

static int read_meta(const char *path, model_meta *mm)
{
    memset(mm, 0, sizeof *mm);
    glesc_gguf *f;
    if (glesc_gguf_open(path, &f) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    const char *s;
    size_t len;
    if (glesc_gguf_get_str(f, "general.architecture", &s, &len) == GLESC_OK)
        snprintf(mm->arch, sizeof mm->arch, "%.*s", (int)len, s);
    int count[GLESC_DTYPE_COUNT_] = {0};
    uint64_t embd = 0, embd_row = 0;
    bool has_output = false;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info ti;
        if (glesc_gguf_tensor(f, i, &ti) != GLESC_OK)
            continue;
        mm->size += ti.size;
        mm->params += (uint64_t)(ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3]);
        if (ti.n_dims >= 2)
            count[ti.type]++;
        if (!strcmp(ti.name, "token_embd.weight")) {
            embd = ti.size;
            embd_row = glesc_dtype_row_bytes(ti.type, ti.ne[0]);
        }
        has_output |= !strcmp(ti.name, "output.weight");
    }
    /* A decode step reads every weight once, except the embedding table:
     * one row of it, unless the head is tied to it and reads it whole. */
    mm->weight_bytes = mm->size - (has_output ? embd - embd_row : 0);
    uint32_t ft;
    const char *fn = NULL;
    if (glesc_gguf_get_u32(f, "general.file_type", &ft) == GLESC_OK)
        fn = ftype_name(ft);
    if (fn) {
        snprintf(mm->ftype, sizeof mm->ftype, "%s", fn);
    } else { /* llama.cpp guesses from the most common matrix type too */
        int best = 0;
        for (int t = 1; t < GLESC_DTYPE_COUNT_; t++)
            if (count[t] > count[best])
                best = t;
        const char *tn = glesc_dtype_name((glesc_dtype)best);
        snprintf(mm->ftype, sizeof mm->ftype, "%s (guessed)", tn ? tn : "?");
        for (char *c = mm->ftype; *c && *c != ' '; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    }
    glesc_gguf_close(f);
    char sz[32];
    double p = (double)mm->params;
    if (p >= 1e9)
        snprintf(sz, sizeof sz, "%.0fB", p * 1e-9);
    else if (p >= 1e8)
        snprintf(sz, sizeof sz, "%.1fB", p * 1e-9);
    else
        snprintf(sz, sizeof sz, "%.0fM", p * 1e-6);
    snprintf(mm->desc, sizeof mm->desc, "%s %s %s", mm->arch, sz, mm->ftype);
    return 0;
}

static void fill_ids(int32_t *ids, int n, int64_t n_vocab, uint64_t *rng)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(tool_rng_next(rng) % (uint64_t)n_vocab);
}

/* Adds the last eval's host times to h (build, submit, read). */
static void add_host(const glesc_session *s, uint64_t h[3])
{
    glesc_eval_stats es;
    glesc_session_last_stats(s, &es);
    h[0] += es.build_ns;
    h[1] += es.submit_ns;
    h[2] += es.read_ns;
}

/* One repetition: the depth (not timed), then the test; *ns its time, h
 * its host times summed (add_host) and h[3] the storage barriers issued. */
static glesc_status run_once(glesc_session *s, const result *r, int64_t n_vocab, int32_t *ids,
                             float *logits, uint64_t *rng, uint64_t *ns, uint64_t h[4])
{
    glesc_stats c0, c1;
    glesc_status st = glesc_session_truncate(s, 0);
    if (st == GLESC_OK && r->n_depth) {
        fill_ids(ids, r->n_depth, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_depth, 0, logits);
    }
    if (st != GLESC_OK)
        return st;
    glesc_context_stats(bench_ctx, &c0);
    uint64_t t0 = now_ns();
    if (r->n_prompt) {
        fill_ids(ids, r->n_prompt, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_prompt, 0, logits);
        add_host(s, h);
    } else if (r->greedy) {
        /* a random first token, then each step's input is the previous
         * one's arg max on the GPU: step i+1 is queued before step i's
         * token is read (the read's wait counts as the host's read time) */
        fill_ids(ids, 1, n_vocab, rng);
        st = glesc_session_eval_greedy(s, ids[0]);
        add_host(s, h);
        for (int i = 1; i <= r->n_gen && st == GLESC_OK; i++) {
            if (i < r->n_gen &&
                (st = glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS)) == GLESC_OK)
                add_host(s, h);
            uint64_t tr = now_ns();
            if (st == GLESC_OK)
                st = glesc_session_greedy_id(s, &ids[i % r->n_gen]);
            h[2] += now_ns() - tr;
        }
    } else {
        for (int i = 0; i < r->n_gen && st == GLESC_OK; i++) {
            fill_ids(ids, 1, n_vocab, rng);
            st = glesc_session_eval(s, ids, 1, 0, logits);
            add_host(s, h);
        }
    }
    *ns = now_ns() - t0;
    glesc_context_stats(bench_ctx, &c1);
    h[3] += c1.barriers - c0.barriers;
    return st;
}

/* Per-kernel GPU times of one step like the test's (a decode step, or a
 * batch of the prompt) on a session created with timing: the depth, then
 * (tg) a decode step to warm up and PROFILE_STEPS measured ones; list: the
 * first measured step's kernels on stderr. */
#define PROFILE_STEPS 4
static glesc_status profile(glesc_model *m, const glesc_session_options *so, result *r,
                            int64_t n_vocab, int32_t *ids, float *logits, uint64_t *rng, bool list)
{
    glesc_session_options o = *so;
    o.timing = true;
    o.n_ctx += PROFILE_STEPS + 1;
    glesc_session *s;
    glesc_status st = glesc_session_create(m, &o, &s);
    if (st != GLESC_OK)
        return st;
    if (r->n_depth) {
        fill_ids(ids, r->n_depth, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_depth, 0, logits);
    }
    int steps = r->n_prompt ? 1 : PROFILE_STEPS;
    int n = r->n_prompt ? (r->n_prompt < o.n_batch ? r->n_prompt : o.n_batch) : 1;
    if (st == GLESC_OK && !r->n_prompt) { /* a first decode step */
        fill_ids(ids, 1, n_vocab, rng);
        st = r->greedy ? glesc_session_eval_greedy(s, ids[0])
                       : glesc_session_eval(s, ids, 1, 0, logits);
    }
    for (int i = 0; i < steps && st == GLESC_OK; i++) {
        fill_ids(ids, n, n_vocab, rng);
        if (r->greedy && (st = glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS)) == GLESC_OK)
            st = glesc_session_greedy_id(s, &ids[0]);
        else if (!r->greedy)
            st = glesc_session_eval(s, ids, (size_t)n, 0, logits);
        if (st != GLESC_OK)
            break;
        const glesc_kernel_time *kt;
        int nk = glesc_session_kernel_times(s, &kt);
        for (int k = 0; k < nk; k++) {
            if (list && i == 0)
                fprintf(stderr, "gguf-bench: %s %s kernel %4d %-40s %3d %10.1f us\n", r->meta->desc,
                        r->test, k, kt[k].name, kt[k].dispatches, (double)kt[k].gpu_ns / 1e3);
            kind_time *t = &r->kinds[kind_of(kt[k].name)];
            t->gpu_ns += kt[k].gpu_ns;
            t->kernels++;
            t->dispatches += kt[k].dispatches;
            r->gpu_ns += kt[k].gpu_ns;
        }
    }
    if (st == GLESC_OK) {
        for (int k = 0; k < K_N; k++) {
            r->kinds[k].gpu_ns /= (uint64_t)steps;
            r->kinds[k].kernels /= steps;
            r->kinds[k].dispatches /= steps;
        }
        r->gpu_ns /= (uint64_t)steps;
        r->profiled = true;
        r->profile_steps = steps;
    }
    glesc_session_destroy(s);
    return st;
}

static int run_test(glesc_model *m, const options *o, result *r, uint64_t *rng)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int len = r->n_depth + (r->n_prompt > r->n_gen ? r->n_prompt : r->n_gen);
    glesc_session_options so = {.n_ctx = len, .kv_type = r->kv, .n_batch = r->n_batch};
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    float *logits = malloc((size_t)mi.n_vocab * sizeof *logits);
    r->ns = calloc((size_t)r->reps, sizeof *r->ns);
    glesc_session *s = NULL;
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    glesc_context_memory_reset_peak(bench_ctx);
    if (ids && logits && r->ns)
        st = glesc_session_create(m, &so, &s);
    uint64_t ns, host[4] = {0, 0, 0, 0};
    if (st == GLESC_OK && o->warmup)
        st = run_once(s, r, mi.n_vocab, ids, logits, rng, &ns, (uint64_t[4]){0, 0, 0, 0});
    for (int i = 0; i < r->reps && st == GLESC_OK; i++)
        st = run_once(s, r, mi.n_vocab, ids, logits, rng, &r->ns[i], host);
    if (st == GLESC_OK) {
        glesc_memory_stats ms;
        glesc_context_memory(bench_ctx, &ms);
        glesc_model_info mi2;
        glesc_model_get_info(m, &mi2);
        r->mem_held = ms.peak_total_bytes;
        r->mem_weights = mi2.gpu_bytes;
        r->mem_kv = ms.peak_persistent_bytes - mi2.gpu_bytes;
        r->mem_act = ms.max_activation_requested_bytes;
        r->mem_slack = ms.peak_total_bytes - ms.peak_persistent_bytes - r->mem_act;
    }
    if (st == GLESC_OK) {
        double steps = (double)r->reps * (r->n_prompt ? 1 : r->n_gen);
        r->build_ns = (double)host[0] / steps;
        r->submit_ns = (double)host[1] / steps;
        r->read_ns = (double)host[2] / steps;
        r->barriers = (double)host[3] / steps;
        glesc_eval_stats es;
        glesc_session_last_stats(s, &es);
        r->dispatches = es.dispatches;
        r->kernels = es.kernels;
        int tokens = r->n_prompt ? r->n_prompt : r->n_gen;
        double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
        for (int i = 0; i < r->reps; i++) {
            double ts = (double)tokens / ((double)r->ns[i] * 1e-9);
            sum += ts;
            sum2 += ts * ts;
            nsum += (double)r->ns[i];
            nsum2 += (double)r->ns[i] * (double)r->ns[i];
        }
        double n = r->reps;
        r->avg_ts = sum / n;
        r->avg_ns = nsum / n;
        r->stddev_ts = n > 1 ? sqrt(fmax(0, (sum2 - sum * sum / n) / (n - 1))) : 0;
        r->stddev_ns = n > 1 ? sqrt(fmax(0, (nsum2 - nsum * nsum / n) / (n - 1))) : 0;
    }
    glesc_session_destroy(s);
    if (st == GLESC_OK && o->profile)
        st = profile(m, &so, r, mi.n_vocab, ids, logits, rng, o->kernels);
    free(ids);
    free(logits);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-bench: %s: %s: %s\n", r->file, r->test, glesc_last_errmsg());
        return 1;
    }
    return 0;
}

/* ---- Output ---- */

static void fmt_size(char *buf, size_t cap, uint64_t bytes)
{
    if (bytes >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", (double)bytes / (1ull << 30));
    else
        snprintf(buf, cap, "%.2f MiB", (double)bytes / (1ull << 20));
}

static void fmt_params(char *buf, size_t cap, uint64_t n)
{
    if (n >= 1000000000u)
        snprintf(buf, cap, "%.2f B", (double)n * 1e-9);
    else
        snprintf(buf, cap, "%.2f M", (double)n * 1e-6);
}

/* Weight bytes per second of a tg test, in GB/s (0 for pp). */
static double weight_gbps(const result *r)
{
    return r->n_gen ? (double)r->meta->weight_bytes * r->avg_ts * 1e-9 : 0;
}

static const char *backend(const options *o)
{
    return o->portable ? "GLES portable" : "GLES";
}

static void table_header(void)
{
    printf("| %-30s | %10s | %10s | %-13s | %3s | %15s | %20s |\n", "model", "size", "params",
           "backend", "kv", "test", "t/s");
    printf("| %.30s | %.9s: | %.9s: | %.13s | %.3s | %.14s: | %.19s: |\n",
           "------------------------------", "----------", "----------", "-------------", "---",
           "---------------", "--------------------");
}

static void table_row(const options *o, const result *r)
{
    char sz[32], pr[32], ts[48];
    fmt_size(sz, sizeof sz, r->meta->size);
    fmt_params(pr, sizeof pr, r->meta->params);
    snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->stddev_ts);
    /* "±" is two bytes in one column */
    printf("| %-30s | %10s | %10s | %-13s | %3s | %15s | %21s |\n", r->meta->desc, sz, pr,
           backend(o), glesc_dtype_name(r->kv), r->test, ts);
    fflush(stdout);
}

/* What bounds each test: dispatches, GPU time by kernel kind, bandwidth. */
static void detail_table(const result *res, int n, const glesc_roofline *roof)
{
    bool used[K_N] = {false};
    bool any_profile = false, any_tg = false;
    for (int i = 0; i < n; i++) {
        any_profile |= res[i].profiled;
        any_tg |= res[i].n_gen > 0;
        for (int k = 0; k < K_N; k++)
            used[k] |= res[i].kinds[k].kernels > 0;
    }
    printf("\n| %-30s | %15s | disp/step | barr/step | GPU ms/step | GPU/wall | host ms b/s/r | "
           "weights "
           "GB/s | of copy | of read |",
           "model", "test");
    for (int k = 0; k < K_N; k++)
        if (used[k])
            printf(" %15s |", k == K_MATMUL ? "gemv/gemm ms" : kind_names[k]);
    printf("\n| %.30s | %.14s: | --------: | --------: | ----------: | -------: | ------------: | "
           "-----------: | ------: | ------: |",
           "------------------------------", "---------------");
    for (int k = 0; k < K_N; k++)
        if (used[k])
            printf(" --------------: |");
    printf("\n");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        double step_ns = r->n_gen ? r->avg_ns / r->n_gen : r->avg_ns;
        double gbps = weight_gbps(r);
        char gpu[32] = "-", busy[32] = "-", wb[32] = "-", oc[32] = "-", orr[32] = "-";
        if (r->profiled) {
            snprintf(gpu, sizeof gpu, "%.3f", (double)r->gpu_ns * 1e-6);
            /* a decode step's wall time (tg) or the prompt's (pp: the
             * profile times one batch; compare per batch) */
            int batches = r->n_prompt ? (r->n_prompt + r->n_batch - 1) / r->n_batch : 1;
            snprintf(busy, sizeof busy, "%.0f%%",
                     100.0 * (double)r->gpu_ns * batches / fmax(step_ns, 1));
        }
        if (r->n_gen) {
            snprintf(wb, sizeof wb, gbps >= 10 ? "%.1f" : "%.3f", gbps);
            if (roof && roof->copy_gbps > 0) {
                snprintf(oc, sizeof oc, "%.0f%%", 100.0 * gbps / roof->copy_gbps);
                snprintf(orr, sizeof orr, "%.0f%%", 100.0 * gbps / roof->read_gbps);
            }
        }
        char host[48];
        snprintf(host, sizeof host, "%.2f/%.2f/%.2f", r->build_ns * 1e-6, r->submit_ns * 1e-6,
                 r->read_ns * 1e-6);
        printf("| %-30s | %15s | %9d | %9.1f | %11s | %8s | %13s | %12s | %7s | %7s |",
               r->meta->desc, r->test, r->dispatches, r->barriers, gpu, busy, host, wb, oc, orr);
        for (int k = 0; k < K_N; k++) {
            if (!used[k])
                continue;
            char cell[48] = "-";
            if (r->profiled && r->kinds[k].kernels)
                snprintf(cell, sizeof cell, "%.3f (%.0f%%)", (double)r->kinds[k].gpu_ns * 1e-6,
                         100.0 * (double)r->kinds[k].gpu_ns / fmax((double)r->gpu_ns, 1));
            printf(" %15s |", cell);
        }
        printf("\n");
    }
    if (any_profile)
        printf("\nGPU ms/step: per decode step (tg) or per prompt batch (pp), the sum of its "
               "kernels' GPU times (each with its dispatch and barrier latency) in one extra "
               "step timed kernel by kernel; GPU/wall: that sum over the timed runs' wall time "
               "per step (near or above 100%%: the GPU never waits for the CPU).\n");
    printf("host ms b/s/r: per step (tg) or prompt (pp) of the timed runs, the host's time "
           "building the graph / submitting it (glesc_graph_compute) / reading the logits "
           "back, waiting for the GPU included (glesc_eval_stats).\n");
    if (any_tg)
        printf("weights GB/s: weight bytes a decode step reads × tg's tokens per second.\n");
}

static double mib(uint64_t b)
{
    return (double)b / (1 << 20);
}

/* The loads and the GPU memory each test held at its peak. */
static void memory_table(const model_meta *meta, const options *o, const result *res, int n)
{
    printf("\n| %-30s | %7s | %9s | %11s | %12s |\n", "model", "load s", "file GB/s", "weights MiB",
           "host RSS MiB");
    printf("| %.30s | ------: | --------: | ----------: | -----------: |\n",
           "------------------------------");
    for (int i = 0; i < o->n_models; i++)
        if (meta[i].load_s > 0)
            printf("| %-30s | %7.3f | %9.2f | %11.1f | %12.1f |\n", meta[i].desc, meta[i].load_s,
                   (double)meta[i].size / meta[i].load_s * 1e-9, mib(meta[i].gpu_weight_bytes),
                   mib(meta[i].rss_after_load));
    if (n) {
        printf("\n| %-30s | %15s | %12s | %11s | %8s | %15s | %14s | %11s |\n", "model", "test",
               "GPU MiB held", "weights MiB", "KV MiB", "activations MiB", "pool slack MiB",
               "held/(W+KV)");
        printf("| %.30s | %.14s: | -----------: | ----------: | -------: | --------------: | "
               "-------------: | ----------: |\n",
               "------------------------------", "---------------");
    }
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        printf("| %-30s | %15s | %12.1f | %11.1f | %8.1f | %15.1f | %14.1f | %11.3f |\n",
               r->meta->desc, r->test, mib(r->mem_held), mib(r->mem_weights), mib(r->mem_kv),
               mib(r->mem_act), mib(r->mem_slack),
               (double)r->mem_held / fmax(1, (double)(r->mem_weights + r->mem_kv)));
    }
    printf("\nload s: glesc_model_load's wall time; host RSS: the process's resident memory "
           "right after it. GPU MiB held: the most GPU buffer memory held at once during a "
           "test's session and timed runs (glesc_context_memory), split into the weights, the "
           "KV cache, activations and kernel scratch, and pool slack (released buffers kept for "
           "reuse, size-class rounding).\n");
}

static void json_kv_str(FILE *out, const char *key, const char *v, bool comma)
{
    fprintf(out, "\"%s\": ", key);
    if (v)
        tool_json_string(out, v, strlen(v));
    else
        fprintf(out, "null");
    if (comma)
        fprintf(out, ", ");
}

static void ttft_json(FILE *out, const ttft_result *t, int n);

static void print_json(FILE *out, const options *o, const glesc_caps *c, const glesc_roofline *roof,
                       const result *res, int n, const ttft_result *tt, int n_tt)
{
    fprintf(out, "{");
    json_kv_str(out, "glesc_version", glesc_version(), true);
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    json_kv_str(out, "date", date, true);
    fprintf(out, "\"device\": {");
    json_kv_str(out, "vendor", c->vendor, true);
    json_kv_str(out, "renderer", c->renderer, true);
    json_kv_str(out, "device_class", c->device_class, true);
    json_kv_str(out, "gl_version", c->version, true);
    json_kv_str(out, "platform", glesc_platform_name(c->platform), true);
    json_kv_str(out, "backend", backend(o), true);
    fprintf(out,
            "\"portable\": %s, \"subgroups\": %s, \"subgroup_size\": %d, "
            "\"max_compute_invocations\": %d, \"max_compute_shared_memory\": %d, "
            "\"max_storage_block_size\": %llu}, ",
            o->portable ? "true" : "false", c->has_subgroup ? "true" : "false", c->subgroup_size,
            c->max_compute_invocations, c->max_compute_shared_memory,
            (unsigned long long)c->max_storage_block_size);
    if (roof && roof->bytes)
        fprintf(out,
                "\"roofline\": {\"bytes\": %llu, \"local_size\": %d, \"copy_gbps\": %.3f, "
                "\"read_gbps\": %.6g, \"copy_ns\": %llu, \"read_ns\": %llu}, ",
                (unsigned long long)roof->bytes, roof->local_size, roof->copy_gbps, roof->read_gbps,
                (unsigned long long)roof->copy_ns, (unsigned long long)roof->read_ns);
    else
        fprintf(out, "\"roofline\": null, ");
    fprintf(out, "\"results\": [");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        fprintf(out, "%s\n  {", i ? "," : "");
        json_kv_str(out, "model_filename", r->file, true);
        json_kv_str(out, "model_desc", r->meta->desc, true);
        json_kv_str(out, "model_type", r->meta->ftype, true);
        json_kv_str(out, "arch", r->meta->arch, true);
        fprintf(
            out,
            "\"model_size\": %llu, \"model_n_params\": %llu, \"weight_bytes_per_token\": %llu, ",
            (unsigned long long)r->meta->size, (unsigned long long)r->meta->params,
            (unsigned long long)r->meta->weight_bytes);
        fprintf(out,
                "\"load_s\": %.4f, \"host_rss_after_load\": %llu, \"gpu_memory\": {\"held\": "
                "%llu, \"weights\": %llu, \"kv_cache\": %llu, \"activations\": %llu, "
                "\"pool_slack\": %llu}, ",
                r->meta->load_s, (unsigned long long)r->meta->rss_after_load,
                (unsigned long long)r->mem_held, (unsigned long long)r->mem_weights,
                (unsigned long long)r->mem_kv, (unsigned long long)r->mem_act,
                (unsigned long long)r->mem_slack);
        json_kv_str(out, "backend", backend(o), true);
        json_kv_str(out, "test", r->test, true);
        json_kv_str(out, "kv_type", glesc_dtype_name(r->kv), true);
        fprintf(out,
                "\"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_batch\": %d, \"reps\": %d, "
                "\"greedy\": %s, ",
                r->n_prompt, r->n_gen, r->n_depth, r->n_batch, r->reps,
                r->greedy ? "true" : "false");
        int tokens = r->n_prompt ? r->n_prompt : r->n_gen;
        fprintf(out, "\"samples_ns\": [");
        for (int k = 0; k < r->reps; k++)
            fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)r->ns[k]);
        fprintf(out, "], \"samples_ts\": [");
        for (int k = 0; k < r->reps; k++)
            fprintf(out, "%s%.3f", k ? ", " : "", (double)tokens / ((double)r->ns[k] * 1e-9));
        fprintf(out,
                "], \"avg_ns\": %.0f, \"stddev_ns\": %.0f, \"avg_ts\": %.3f, \"stddev_ts\": %.3f, ",
                r->avg_ns, r->stddev_ns, r->avg_ts, r->stddev_ts);
        fprintf(out, "\"host_ns_per_step\": {\"build\": %.0f, \"submit\": %.0f, \"read\": %.0f}, ",
                r->build_ns, r->submit_ns, r->read_ns);
        fprintf(out,
                "\"dispatches_per_step\": %d, \"kernels_per_step\": %d, \"barriers_per_step\": "
                "%.1f, ",
                r->dispatches, r->kernels, r->barriers);
        if (r->n_gen) {
            double gbps = weight_gbps(r);
            fprintf(out, "\"weight_gbps\": %.6g, ", gbps);
            if (roof && roof->bytes)
                fprintf(out, "\"weight_bw_of_copy\": %.4f, \"weight_bw_of_read\": %.4f, ",
                        gbps / roof->copy_gbps, gbps / roof->read_gbps);
            else
                fprintf(out, "\"weight_bw_of_copy\": null, \"weight_bw_of_read\": null, ");
        } else {
            fprintf(out, "\"weight_gbps\": null, \"weight_bw_of_copy\": null, "
                         "\"weight_bw_of_read\": null, ");
        }
        if (!r->profiled) {
            fprintf(out, "\"profile\": null}");
            continue;
        }
        fprintf(out, "\"profile\": {\"steps\": %d, \"gpu_ns_per_step\": %llu, \"kinds\": {",
                r->profile_steps, (unsigned long long)r->gpu_ns);
        bool first = true;
        for (int k = 0; k < K_N; k++) {
            if (!r->kinds[k].kernels)
                continue;
            fprintf(out, "%s\"%s\": {\"gpu_ns\": %llu, \"kernels\": %d, \"dispatches\": %d}",
                    first ? "" : ", ", kind_name(k, r->n_gen > 0),
                    (unsigned long long)r->kinds[k].gpu_ns, r->kinds[k].kernels,
                    r->kinds[k].dispatches);
            first = false;
        }
        fprintf(out, "}}}");
    }
    fprintf(out, "\n]");
    if (n_tt)
        ttft_json(out, tt, n_tt);
    fprintf(out, "}\n");
}

/* ---- Time to first token ----
 * --ttft P: each measurement is a fresh process of this program
 * (/proc/self/exe --ttft-child ...) that creates a context, loads the
 * model, creates a session, evaluates a P-token prompt of random ids (the
 * first token's logits) and one decode step of its greedy token, and prints
 * the times and the program cache's counters on one line for the parent.
 * The program caches live in a temporary directory: glesc's (--cache-dir)
 * and the driver's own (Mesa: MESA_SHADER_CACHE_DIR, NVIDIA:
 * __GL_SHADER_DISK_CACHE_PATH), so "cold" starts from nothing even on a
 * machine that ran the same kernels before. Three runs: cold (both empty),
 * warm (both as the cold run left them: a user's second start), and glesc's
 * cache warm with an empty driver cache (what glesc's binaries alone give).
 * TTFT is the prompt plus the first decode step; context creation and the
 * load are shown beside it, not in it. */

#define TTFT_LINE "gguf-bench-ttft"

/* Sets the context options from the command line; 2 after a message. */
static int context_options(const options *o, glesc_context_options *co)
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

/* --ttft-child: one cold or warm start, its figures on stdout. */
static int ttft_child(const options *o, const glesc_context_options *co)
{
    uint64_t t0 = now_ns();
    glesc_context *ctx = NULL;
    glesc_model *m = NULL;
    glesc_session *s = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    if (glesc_context_create(co, &ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    uint64_t t1 = now_ns();
    glesc_status st = glesc_model_load(ctx, o->models[0], NULL, &m);
    glesc_model_info mi = {0};
    if (st == GLESC_OK) {
        glesc_model_get_info(m, &mi);
        glesc_session_options so = {
            .n_ctx = o->ttft + 1, .kv_type = o->kv[0], .n_batch = o->n_batch};
        st = glesc_session_create(m, &so, &s);
    }
    ids = malloc((size_t)o->ttft * sizeof *ids);
    logits = malloc((size_t)(mi.n_vocab > 0 ? mi.n_vocab : 1) * sizeof *logits);
    if (st == GLESC_OK && (!ids || !logits))
        st = GLESC_ERROR_OUT_OF_MEMORY;
    uint64_t t2 = now_ns(), t3 = t2, t4 = t2;
    if (st == GLESC_OK) {
        uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
        fill_ids(ids, o->ttft, mi.n_vocab, &rng);
        st = glesc_session_eval(s, ids, (size_t)o->ttft, 0, logits);
        t3 = now_ns();
    }
    if (st == GLESC_OK) {
        int32_t next = 0; /* the greedy first token */
        for (int64_t v = 1; v < mi.n_vocab; v++)
            if (logits[v] > logits[next])
                next = (int32_t)v;
        st = glesc_session_eval(s, &next, 1, 0, logits);
        t4 = now_ns();
    }
    int rc = 0;
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-bench: --ttft %s: %s\n", o->models[0],
                m ? glesc_context_errmsg(ctx) : glesc_last_errmsg());
        rc = 1;
    } else {
        glesc_stats gs;
        glesc_context_stats(ctx, &gs);
        printf(TTFT_LINE " %llu %llu %llu %llu %llu %llu %llu %llu\n",
               (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
               (unsigned long long)(t3 - t2), (unsigned long long)(t4 - t3),
               (unsigned long long)gs.programs_compiled, (unsigned long long)gs.program_disk_hits,
               (unsigned long long)gs.program_disk_writes,
               (unsigned long long)gs.program_disk_rejects);
    }
    free(ids);
    free(logits);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_context_destroy(ctx);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Runs one --ttft-child for model and phase with the caches under dir;
 * 0 and *r filled, or 1 after a message. */
static int ttft_spawn(const options *o, const char *model, const char *dir, int phase,
                      ttft_result *r)
{
    char glesc_dir[4200], driver_dir[4200], p[32], b[32], seed[32];
    snprintf(glesc_dir, sizeof glesc_dir, "%s/glesc", dir);
    snprintf(driver_dir, sizeof driver_dir, "%s/%s", dir, ttft_driver_dirs[phase]);
    snprintf(p, sizeof p, "%d", o->ttft);
    snprintf(b, sizeof b, "%d", o->n_batch);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    if (mkdir(driver_dir, 0700) && errno != EEXIST) {
        fprintf(stderr, "gguf-bench: --ttft: cannot create %s: %s\n", driver_dir, strerror(errno));
        return 1;
    }
    const char *argv[24] = {"gguf-bench",  "--ttft-child",
                            "-m",          model,
                            "--ttft",      p,
                            "-b",          b,
                            "--kv-type",   glesc_dtype_name(o->kv[0]),
                            "--seed",      seed,
                            "--cache-dir", glesc_dir};
    int n = 14;
    if (o->portable)
        argv[n++] = "--portable";
    if (o->platform) {
        argv[n++] = "--platform";
        argv[n++] = o->platform;
    }
    if (o->device) {
        argv[n++] = "--device";
        argv[n++] = o->device;
    }
    int fds[2];
    if (pipe(fds)) {
        fprintf(stderr, "gguf-bench: --ttft: pipe: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gguf-bench: --ttft: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return 1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("MESA_SHADER_CACHE_DIR", driver_dir, 1);
        setenv("__GL_SHADER_DISK_CACHE_PATH", driver_dir, 1);
        execv("/proc/self/exe", (char *const *)argv);
        fprintf(stderr, "gguf-bench: --ttft: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[1024];
    size_t len = 0;
    ssize_t k;
    while ((k = read(fds[0], out + len, sizeof out - 1 - len)) > 0 || (k < 0 && errno == EINTR))
        len += k > 0 ? (size_t)k : 0;
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    memset(r, 0, sizeof *r);
    r->file = model;
    r->n_prompt = o->ttft;
    r->phase = phase;
    unsigned long long ns[4];
    const char *line = strstr(out, TTFT_LINE " ");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line ||
        sscanf(line + strlen(TTFT_LINE), "%llu %llu %llu %llu %llu %llu %llu %llu", &ns[0], &ns[1],
               &ns[2], &ns[3], &r->compiled, &r->disk_hits, &r->disk_writes,
               &r->disk_rejects) != 8) {
        fprintf(stderr, "gguf-bench: --ttft: the %s run of %s failed (status %d)\n",
                ttft_phase_names[phase], model, status);
        return 1;
    }
    r->context_ns = ns[0];
    r->load_ns = ns[1];
    r->prompt_ns = ns[2];
    r->decode_ns = ns[3];
    return 0;
}

/* The three runs of one model into r[0 .. TTFT_N), in a temporary
 * directory removed afterwards. */
static int ttft_measure(const options *o, const char *model, const model_meta *meta, ttft_result *r)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gguf-bench-ttft-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gguf-bench: --ttft: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = 0;
    for (int ph = 0; ph < TTFT_N && !rc; ph++) {
        if (o->verbose)
            fprintf(stderr, "gguf-bench: %s ttft, %s\n", meta->desc, ttft_phase_names[ph]);
        rc = ttft_spawn(o, model, dir, ph, &r[ph]);
        r[ph].meta = meta;
    }
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static double ms(uint64_t ns)
{
    return (double)ns * 1e-6;
}

static uint64_t ttft_ns(const ttft_result *r)
{
    return r->prompt_ns + r->decode_ns;
}

static void ttft_table(const ttft_result *t, int n)
{
    printf("\n| %-30s | %-23s | context ms | load ms | prompt ms (n) | 1st decode ms | TTFT ms | "
           "of cold | compiled | disk hits |\n",
           "model", "ttft start");
    printf("| %.30s | %.23s | ---------: | ------: | ------------: | ------------: | ------: | "
           "------: | -------: | --------: |\n",
           "------------------------------", "-----------------------");
    for (int i = 0; i < n; i++) {
        const ttft_result *r = &t[i], *cold = &t[i - r->phase];
        char prompt[32];
        snprintf(prompt, sizeof prompt, "%.1f (%d)", ms(r->prompt_ns), r->n_prompt);
        printf("| %-30s | %-23s | %10.1f | %7.1f | %13s | %13.1f | %7.1f | %6.0f%% | %8llu | %9llu "
               "|\n",
               r->meta->desc, ttft_phase_names[r->phase], ms(r->context_ns), ms(r->load_ns), prompt,
               ms(r->decode_ns), ms(ttft_ns(r)),
               100.0 * (double)ttft_ns(r) / fmax((double)ttft_ns(cold), 1), r->compiled,
               r->disk_hits);
    }
    printf("\nTTFT: the prompt's eval (its token count in parentheses) and the first decode "
           "step, in fresh processes (context creation and the load beside it, not in it); "
           "cold: empty program caches (glesc's and the driver's), warm: as the cold run left "
           "them; of cold: TTFT over the cold TTFT.\n");
    for (int i = 0; i < n; i++)
        if (t[i].phase != TTFT_COLD && t[i].compiled)
            printf("note: the %s start of %s compiled %llu programs the cold one had cached.\n",
                   ttft_phase_names[t[i].phase], t[i].file, t[i].compiled);
}

static void ttft_json(FILE *out, const ttft_result *t, int n)
{
    fprintf(out, ", \"ttft\": [");
    for (int i = 0; i < n; i++) {
        const ttft_result *r = &t[i], *cold = &t[i - r->phase];
        fprintf(out, "%s\n  {", i ? "," : "");
        json_kv_str(out, "model_filename", r->file, true);
        json_kv_str(out, "model_desc", r->meta->desc, true);
        json_kv_str(out, "start", ttft_phase_names[r->phase], true);
        fprintf(out,
                "\"n_prompt\": %d, \"context_ns\": %llu, \"load_ns\": %llu, \"prompt_ns\": %llu, "
                "\"decode_ns\": %llu, \"ttft_ns\": %llu, \"of_cold\": %.4f, "
                "\"programs_compiled\": %llu, \"program_disk_hits\": %llu, "
                "\"program_disk_writes\": %llu, \"program_disk_rejects\": %llu}",
                r->n_prompt, (unsigned long long)r->context_ns, (unsigned long long)r->load_ns,
                (unsigned long long)r->prompt_ns, (unsigned long long)r->decode_ns,
                (unsigned long long)ttft_ns(r), (double)ttft_ns(r) / fmax((double)ttft_ns(cold), 1),
                r->compiled, r->disk_hits, r->disk_writes, r->disk_rejects);
    }
    fprintf(out, "\n]");
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    glesc_context_options co;
    if ((rc = context_options(&o, &co)) != 0)
        return rc;
    if (o.ttft_child)
        return ttft_child(&o, &co);
    glesc_context *ctx;
    if (glesc_context_create(&co, &ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    bench_ctx = ctx;
    const glesc_caps *caps = glesc_context_caps(ctx);
    int n_tests = o.n_p + o.n_n * (o.greedy ? 2 : 1); /* --greedy: each tg twice */
    int max_results = o.n_models * o.n_kv * n_tests * o.n_d;
    result *res = calloc((size_t)max_results, sizeof *res);
    model_meta *meta = calloc((size_t)o.n_models, sizeof *meta);
    rc = res && meta ? 0 : 1;
    /* every file's header first: a wrong path fails before any measuring */
    for (int mi = 0; mi < o.n_models && !rc; mi++)
        rc = read_meta(o.models[mi], &meta[mi]);
    glesc_roofline roof = {0};
    if (!rc && o.roofline_mib > 0) {
        if (o.verbose)
            fprintf(stderr, "gguf-bench: rooflines over %ld MiB\n", o.roofline_mib);
        if (glesc_context_roofline(ctx, (uint64_t)o.roofline_mib << 20, 0, &roof) != GLESC_OK) {
            fprintf(stderr, "gguf-bench: %s\n", glesc_context_errmsg(ctx));
            rc = 1;
        }
    }
    int n_res = 0;
    uint64_t rng = o.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    bool tests = false; /* -p 0 -n 0 (e.g. with --ttft): no test table */
    for (int t = 0; t < o.n_p + o.n_n; t++)
        tests |= (t < o.n_p ? o.p[t] : o.n[t - o.n_p]) > 0;
    if (!o.json && !rc && tests)
        table_header();
    for (int mi = 0; mi < o.n_models && !rc; mi++) {
        glesc_model *m;
        double t0 = now_s();
        if (glesc_model_load(ctx, o.models[mi], NULL, &m) != GLESC_OK) {
            fprintf(stderr, "gguf-bench: %s\n", glesc_last_errmsg());
            rc = 1;
            break;
        }
        meta[mi].load_s = now_s() - t0;
        meta[mi].rss_after_load = tool_rss_bytes();
        glesc_model_info lmi;
        glesc_model_get_info(m, &lmi);
        meta[mi].gpu_weight_bytes = lmi.gpu_bytes;
        if (o.verbose)
            fprintf(stderr, "gguf-bench: %s loaded in %.1f s\n", o.models[mi], now_s() - t0);
        for (int kv = 0; kv < o.n_kv && !rc; kv++)
            for (int t = 0; t < n_tests && !rc; t++)
                for (int d = 0; d < o.n_d && !rc; d++) {
                    int pp = t < o.n_p ? o.p[t] : 0, tg = t < o.n_p ? 0 : o.n[(t - o.n_p) % o.n_n];
                    if (!pp && !tg)
                        continue;
                    result *r = &res[n_res];
                    r->file = o.models[mi];
                    r->meta = &meta[mi];
                    r->n_prompt = pp;
                    r->n_gen = tg;
                    r->n_depth = o.d[d];
                    r->n_batch = o.n_batch;
                    r->kv = o.kv[kv];
                    r->reps = o.reps;
                    r->greedy = t >= o.n_p + o.n_n;
                    int w =
                        snprintf(r->test, sizeof r->test, "%s%d", pp ? "pp" : "tg", pp ? pp : tg);
                    if (r->greedy)
                        w += snprintf(r->test + w, sizeof r->test - (size_t)w, " greedy");
                    if (r->n_depth)
                        snprintf(r->test + w, sizeof r->test - (size_t)w, " @ d%d", r->n_depth);
                    if (o.verbose)
                        fprintf(stderr, "gguf-bench: %s %s\n", meta[mi].desc, r->test);
                    if ((rc = run_test(m, &o, r, &rng)) != 0)
                        break;
                    n_res++;
                    if (!o.json)
                        table_row(&o, r);
                }
        glesc_model_destroy(m);
    }
    ttft_result *tt = o.ttft ? calloc((size_t)o.n_models * TTFT_N, sizeof *tt) : NULL;
    int n_tt = 0;
    if (!rc && o.ttft && !tt)
        rc = 1;
    for (int mi = 0; mi < o.n_models && o.ttft && !rc; mi++)
        if ((rc = ttft_measure(&o, o.models[mi], &meta[mi], tt + n_tt)) == 0)
            n_tt += TTFT_N;
    if (!rc && o.json_file) {
        FILE *jf = fopen(o.json_file, "w");
        if (jf) {
            print_json(jf, &o, caps, o.roofline_mib > 0 ? &roof : NULL, res, n_res, tt, n_tt);
            rc = ferror(jf) | (fclose(jf) != 0);
        }
        if (!jf || rc) {
            fprintf(stderr, "gguf-bench: cannot write %s: %s\n", o.json_file, strerror(errno));
            rc = 1;
        }
    }
    if (!rc && o.json) {
        print_json(stdout, &o, caps, o.roofline_mib > 0 ? &roof : NULL, res, n_res, tt, n_tt);
    } else if (!rc) {
        if (tests)
            detail_table(res, n_res, o.roofline_mib > 0 ? &roof : NULL);
        memory_table(meta, &o, res, n_res);
        if (n_tt)
            ttft_table(tt, n_tt);
        if (o.roofline_mib > 0)
            printf("rooflines (%llu MiB, %d invocations): copy %.1f GB/s (read + write), read-only "
                   "%.1f GB/s.\n",
                   (unsigned long long)(roof.bytes >> 20), roof.local_size, roof.copy_gbps,
                   roof.read_gbps);
        printf("glesc %s on %s (%s)%s.\n", glesc_version(), caps->renderer, caps->version,
               o.portable ? ", portable path" : "");
    }
    for (int i = 0; i < n_res; i++)
        free(res[i].ns);
    if (res && n_res < max_results)
        free(res[n_res].ns);
    free(res);
    free(meta);
    free(tt);
    glesc_context_destroy(ctx);
    return rc;
}
