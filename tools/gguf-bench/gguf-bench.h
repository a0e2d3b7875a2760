/*
 * gguf-bench.h — what the files of gguf-bench share (see main.c for what
 * it measures). The files, by job: options.c (usage, flags, the context
 * options), run.c (a model's metadata, the timed runs and the per-kernel
 * profile of each test), output.c (the tables and the --json object),
 * ttft.c (time to first token, in fresh processes), main.c (the tests of
 * each model, in order).
 */
#ifndef GLESC_TOOLS_GGUF_BENCH_H
#define GLESC_TOOLS_GGUF_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common/args.h"
#include "glesc_llm.h"

#define MAX_LIST 16
#define MAX_MODELS 32

/* Kernel kinds, by the first op of a kernel's name ("matmul+add" is a
 * matmul: gemv in a decode step, gemm in a prompt batch). */
enum kind { K_MATMUL, K_ATTENTION, K_NORM, K_ROPE, K_ROWS, K_SOFTMAX, K_REDUCE, K_ELTWISE, K_N };
/* The kind of a kernel by its name (run.c); the kind's name in a test:
 * matmuls are GEMVs in decode steps (output.c). */
enum kind kind_of(const char *name);
const char *kind_name(int k, bool tg);

typedef struct options {
    const char *models[MAX_MODELS];
    int n_models;
    int p[MAX_LIST], n[MAX_LIST], d[MAX_LIST];
    int n_p, n_n, n_d;
    glesc_dtype kv[MAX_LIST]; /* --kv-type, -ctk: the keys' (and values') types */
    int n_kv;
    glesc_dtype kv_v; /* -ctv: the values' type, where kv_v_set */
    bool kv_v_set;
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
    bool greedy;          /* tg as pipelined greedy decoding */
    glesc_dtype kv, kv_v; /* the keys' and the values' cache types */
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
typedef struct ttft_result {
    const char *file;
    const model_meta *meta;
    int n_prompt;
    int phase;
    uint64_t context_ns, load_ns, prompt_ns, decode_ns;
    unsigned long long compiled, disk_hits, disk_writes, disk_rejects;
} ttft_result;

static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- options.c ---- */
/* The command line into *o; 0, or 2 after a message (--help exits). */
int parse_args(int argc, char **argv, options *o);
/* Sets the context options from the command line; 2 after a message. */
int context_options(const options *o, glesc_context_options *co);

/* ---- run.c ---- */
/* The run's context, for its memory counters (glesc_context_memory). */
extern glesc_context *bench_ctx;
/* What the GGUF file at path says about the model; 1 after a message. */
int read_meta(const char *path, model_meta *mm);
/* n random token ids below n_vocab from the stream rng. */
void fill_ids(int32_t *ids, int n, int64_t n_vocab, uint64_t *rng);
/* Runs test r (its repetitions, then its profile); 1 after a message. */
int run_test(glesc_model *m, const options *o, result *r, uint64_t *rng);

/* ---- output.c ---- */
void table_header(void);
void table_row(const options *o, const result *r);
/* What bounds each test: dispatches, GPU time by kernel kind, bandwidth. */
void detail_table(const result *res, int n, const glesc_roofline *roof);
/* The loads and the GPU memory each test held at its peak. */
void memory_table(const model_meta *meta, const options *o, const result *res, int n);
/* "key": "v" (null for NULL), with ", " after it when comma. */
/* The result's cache types as the tables and JSON name them: "q8_0", or
 * "q8_0/f16" (keys/values) where they differ. */
const char *kv_name(const result *r, char buf[32]);
void json_kv_str(FILE *out, const char *key, const char *v, bool comma);
void print_json(FILE *out, const options *o, const glesc_caps *c, const glesc_roofline *roof,
                const result *res, int n, const ttft_result *tt, int n_tt);

/* ---- ttft.c ---- */
/* --ttft-child: one cold or warm start, its figures on stdout. */
int ttft_child(const options *o, const glesc_context_options *co);
/* The three runs of one model into r[0 .. TTFT_N); 1 after a message. */
int ttft_measure(const options *o, const char *model, const model_meta *meta, ttft_result *r);
void ttft_table(const ttft_result *t, int n);
/* The "ttft" member of the --json object (after a comma). */
void ttft_json(FILE *out, const ttft_result *t, int n);

#endif
