/*
 * compute.h — the compute layer: runs graphs (glesc_graph_compute). It sits
 * above the IR (src/graph/) and code generation (src/kernels/) and owns
 * what ties them to a device: plans (what a compute of one graph structure
 * runs: kernels with their programs, buffer lifetimes) cached on the
 * context by a hash of the structure (plan.c), the executor (exec.c), and
 * the device profile, thresholds measured on the device (profile.c).
 *
 * How a compute goes (exec.c): order the nodes the outputs need (DFS,
 * sources first) → hash the structure (ops, types, shape pattern, codegen
 * variants, not the sizes) → take the cached plan of that hash, or build
 * one: fuse nodes into kernels (graph_fuse), note when each buffer is last
 * used, generate every kernel's GLSL (kernels_gen) and compile them in one
 * batch → run the kernels: the same generators run again in "bind" mode,
 * which emits no text and only collects buffers, sizes and strides as
 * uniforms for gl_dispatch.
 */
#ifndef GLESC_COMPUTE_H
#define GLESC_COMPUTE_H

#include <stdio.h>

#include "kernels/kernels.h"

typedef struct compute_kernel {
    int anchor, partner, out;                              /* order indices, -1 for none */
    int sib[GRAPH_MAX_SIB], sib_out[GRAPH_MAX_SIB], n_sib; /* a grouped matmul's others */
    char *name;                                            /* "rms_norm+mul" */
    char *glsl;             /* the generated source (kept for docs and verification) */
    const gl_program *prog; /* owned by the program cache */
} compute_kernel;

typedef struct compute_plan compute_plan;
struct compute_plan {
    core_hash128 key;
    int n_nodes;
    int *node_kernel; /* per order index: its kernel or -1 */
    bool *keep;       /* per order index: an owner whose memory outlives the compute */
    /* owners whose memory can go back to the pool after kernel k:
     * rel_nodes[rel_start[k] .. rel_start[k+1]) (order indices) */
    int *rel_start, *rel_nodes;
    compute_kernel *kernels;
    int n_kernels;
    bool built; /* programs exist */
    char *all_glsl;
    compute_plan *next; /* the cache's list, most recently used first */
};

/* ---- The device profile (profile.c) ---- */
typedef enum compute_profile_source {
    COMPUTE_PROFILE_ENV,      /* GLESC_GEMV_MAX_M */
    COMPUTE_PROFILE_LOADED,   /* the disk cache's entry for this glesc and device */
    COMPUTE_PROFILE_MEASURED, /* measured by this context (and stored) */
    COMPUTE_PROFILE_FALLBACK, /* the measurement failed (logged): a default */
} compute_profile_source;

typedef struct compute_profile {
    /* The largest activation width m (1..8) for which the GEMV kernel beats
     * the tiled GEMM on this device. */
    int gemv_max_m;
    compute_profile_source source;
} compute_profile;

/* The context's profile: taken (from the environment, the disk cache, or a
 * measurement) on the first call, the same afterwards. Never measures from
 * inside a compute: glesc_graph_compute asks for it on entry. NULL only on
 * out-of-memory (message set). */
const compute_profile *compute_profile_get(glesc_context *ctx);
/* Measures the profile now (a few small matmuls: milliseconds on GPUs, a
 * quarter second on llvmpipe), dispatching its kernels directly. On failure
 * ctx's message says what failed; compute_profile_get logs it and falls
 * back. */
glesc_status compute_profile_measure(glesc_context *ctx, compute_profile *out);
/* The profile's key in the disk cache: "glesc-profile" ‖ glesc version ‖
 * GL vendor ‖ renderer ‖ GL version ‖ format, NUL-separated (*len bytes;
 * core_free it). NULL on out-of-memory. */
char *compute_profile_key(const glesc_context *ctx, size_t *len);

/* The context's compute state: the plan cache, the trace file and the
 * device profile (created on first use, freed with the context). */
typedef struct compute_state {
    compute_plan *plans;
    int n_plans;
    FILE *trace; /* GLESC_TRACE */
    bool trace_tried, trace_any;
    uint64_t trace_t0;
    compute_profile profile; /* valid when profiled */
    bool profiled;
    gl_buffer *scratch; /* kernels' scratch (kb_scratch): counters at zero between dispatches */
} compute_state;

/* The context's state, created on first use; NULL on out-of-memory. */
compute_state *compute_state_get(glesc_context *ctx);

/* ---- Executor pieces (exec.c), also used by the profile ---- */
/* Storage bindings a kernel may use on this context's device. */
int compute_max_bindings(const glesc_context *ctx);
/* Generates kernel gk's GLSL (kernels_gen in build mode) into *out
 * (core_free it); the message names the kernel on failure. */
glesc_status compute_kernel_glsl(glesc_context *ctx, const graph_kernel *gk, const char *name,
                                 int max_bind, const glesc_graph_options *opts, char **out);
/* Fills in the scratch buffer of dispatch d (kb_scratch) if it has one:
 * the context's, grown (zero-filled) to d->scratch_bytes where needed. */
glesc_status compute_scratch_bind(glesc_context *ctx, kb_dispatch *d);
/* Runs kernel gk's generator in bind mode on b (kb_free it in any case): its
 * dispatches, with this compute's buffers and uniforms, are in b->disp. */
glesc_status compute_kernel_bind(glesc_context *ctx, const graph_kernel *gk, int max_bind,
                                 const glesc_graph_options *opts, kb *b);

/* Hash of the structure of ord for options o (see the rule in kernels.h);
 * plan.c says what it covers. */
core_hash128 compute_plan_key(const graph_order_t *ord, const glesc_graph_options *o, bool fusion,
                              int max_bindings);
compute_plan *compute_plan_find(glesc_context *ctx, core_hash128 key);
/* Fuses ord and plans lifetimes; the plan joins the cache (programs not yet
 * built). NULL on out-of-memory (message set). */
compute_plan *compute_plan_create(glesc_context *ctx, core_hash128 key, const graph_order_t *ord,
                                  bool fusion, int max_bindings);
/* Sets every node's kernel from the plan. */
void compute_plan_apply(const compute_plan *p, const graph_order_t *ord);
/* The kernel descriptor of kernel k for ord's nodes. */
graph_kernel compute_plan_kernel(const compute_plan *p, const graph_order_t *ord, int k);

#endif /* GLESC_COMPUTE_H */
