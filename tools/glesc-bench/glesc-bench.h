/*
 * glesc-bench.h — what the files of glesc-bench share (see main.c for what
 * it measures). The files, by job: options.c (the flags, the weight types
 * and the shapes), timing.c (dispatches timed together or alone, the GPU
 * kept warm, the graph's GEMV and GEMM), roofline.c (the copy and read-only
 * kernels, the weights' pool, the FMA peak), tables.c (the --gemm and
 * --attn tables), main.c (the device, the rooflines and the GEMV table).
 */
#ifndef GLESC_TOOLS_GLESC_BENCH_H
#define GLESC_TOOLS_GLESC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/compute.h"
#include "quant/quant.h"

/* The weight types of --types (options.c). */
#define N_TYPES 16
extern const glesc_dtype all_types[N_TYPES];

/* The most weights of one fused shape (parse_shape). */
#define MAX_MEMB 4

/* The command line (options.c). */
typedef struct options {
    int iters, gemm_m, warm_ms, attn_n[8], n_attn, heads[3];
    bool portable;
    uint64_t copy_mib;
    const char *shapes_arg;
    bool types[N_TYPES];
} options;

/* Fills *o from argv; 0, or 2 (the exit status) after a message. */
int parse_args(int argc, char **argv, options *o);
/* options.c: one shape of --shapes; all of them against the selected types. */
bool parse_shape(const char *s, int n[MAX_MEMB], int *nn, int *K, bool *pair, bool *norm,
                 bool *res);
int check_shapes(const char *arg, const bool sel[N_TYPES], bool fused);

/* Prints what failed with the context's message and destroys the context;
 * returns 1, the exit status (main.c). */
int fail(glesc_context *ctx, const char *what);

/* Keeps the GPU busy for ms milliseconds (a kernel over the whole roofline
 * buffer, again and again) right before a timing: a GPU's clocks fall while
 * the host prepares the next weights (an H200's SM clock was seen at idle
 * speed, and a kernel timed alone then ran 2-4 times slower), and a decode
 * step's back-to-back dispatches keep them up. (The idea is branch gemvq's.) */
typedef struct warmer {
    glesc_context *ctx;
    const gl_program *p;
    const gl_binding *b;
    gl_param prm[2];
    uint32_t g[3];
    int ms;
} warmer;
int warm_gpu(warmer *w);

/* timing.c (each commented there). */
int time_dispatch(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb,
                  gl_param *prm, int np, const uint32_t g[3], int iters, int cycle, int cycle_param,
                  uint32_t cycle_step, double *sec);
int time_each(glesc_context *ctx, const gl_program *p, const gl_binding *b, int nb, gl_param *prm,
              int np, const uint32_t g[3], int iters, int cycle, int cycle_param,
              uint32_t cycle_step, double *sec);
void fill_uniform(float *x, size_t n);
int time_graph(glesc_context *ctx, glesc_dtype t, const int *N, int nn, bool pair, bool norm,
               bool res, int K, int M, const void *pool, size_t pool_bytes, const float *x,
               int copies, int iters, int warm_ms, double *sec, char *how, size_t size);
int time_gemv(glesc_context *ctx, glesc_dtype t, int N, int K, const void *pool, size_t pool_bytes,
              const float *x, int copies, int iters, warmer *wm, double *sec, double *setup,
              char *how, size_t size);

/* roofline.c (each commented there). */
char *copy_glsl(void);
char *reduce_glsl(void);
void grid_of(uint64_t n4, uint32_t g[3]);
void *weight_pool(glesc_dtype t, int N, int K, float **pool, size_t *pool_bytes);
double fma_peak(glesc_context *ctx);

/* tables.c (each commented there); both destroy the context. */
int gemm_table(glesc_context *ctx, const bool types[N_TYPES], const char *shapes_arg, int M,
               int iters, int warm_ms, double peak);
int attn_table(glesc_context *ctx, const int *lens, int nn, int n_head, int n_head_kv, int d,
               int iters, int warm_ms, double peak);

#endif
