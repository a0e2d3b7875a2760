/*
 * plan.h — plans: what a compute of one graph structure runs (kernels with
 * their programs, buffer lifetimes), cached on the context by a hash of the
 * structure (plan.c); and the executor's entry (exec.c).
 */
#ifndef GLESC_GRAPH_PLAN_H
#define GLESC_GRAPH_PLAN_H

#include <stdio.h>

#include "graph/order.h"

typedef struct plan_kernel {
    int anchor, partner, out; /* order indices, -1 for none */
    char *name;               /* "rms_norm+mul" */
    char *glsl;               /* the generated source (kept for docs and verification) */
    const gl_program *prog;   /* owned by the program cache */
} plan_kernel;

struct graph_plan {
    core_hash128 key;
    int n_nodes;
    int *node_kernel; /* per order index: its kernel or -1 */
    bool *keep;       /* per order index: an owner whose memory outlives the compute */
    /* owners whose memory can go back to the pool after kernel k:
     * rel_nodes[rel_start[k] .. rel_start[k+1]) (order indices) */
    int *rel_start, *rel_nodes;
    plan_kernel *kernels;
    int n_kernels;
    bool built; /* programs exist */
    char *all_glsl;
    graph_plan *next; /* the cache's list, most recently used first */
};

struct graph_ctx_state {
    graph_plan *plans;
    int n_plans;
    FILE *trace; /* GLESC_TRACE */
    bool trace_tried, trace_any;
    uint64_t trace_t0;
    int gemv_max_m; /* measured GEMV/GEMM threshold (tune.c); 0 = not yet */
};

/* The largest activation width m for which the GEMV kernel beats the tiled
 * GEMM on this device: GLESC_GEMV_MAX_M if set, else a value remembered in
 * the program cache directory for this renderer, else measured now (a few
 * small products, milliseconds on real GPUs) and remembered. 1..8. */
int graph_tune_gemv_max_m(glesc_context *ctx);

/* Hash of the structure of ord for options o (see the rule in kernels.h). */
core_hash128 graph_plan_key(const graph_order_t *ord, const glesc_graph_options *o, bool fusion,
                            int max_bindings);
graph_plan *graph_plan_find(glesc_context *ctx, core_hash128 key);
/* Fuses ord and plans lifetimes; the plan joins the cache (programs not yet
 * built). NULL on out-of-memory (message set). */
graph_plan *graph_plan_create(glesc_context *ctx, core_hash128 key, const graph_order_t *ord,
                              bool fusion, int max_bindings);
/* Sets every node's kernel from the plan. */
void graph_plan_apply(const graph_plan *p, const graph_order_t *ord);
/* The kernel descriptor of kernel k for ord's nodes. */
graph_kernel graph_plan_kernel(const graph_plan *p, const graph_order_t *ord, int k);

#endif /* GLESC_GRAPH_PLAN_H */
