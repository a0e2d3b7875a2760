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
 * one: fuse nodes into kernels (kernels_fuse), note when each buffer is last
 * used, generate every kernel's GLSL (kernels_gen) and compile them in one
 * batch → run the kernels: the same generators run again in "bind" mode,
 * which emits no text and only collects buffers, sizes and strides as
 * uniforms for gl_dispatch. The plan records what bind mode made (per
 * kernel: its dispatches, with buffers named by order index) and replays it
 * on later computes; a kernel's generator runs again only when a size it
 * can depend on has changed (replay.c).
 */
#ifndef GLESC_COMPUTE_H
#define GLESC_COMPUTE_H

#include <stdio.h>

#include "kernels/kernels.h"

/* One recorded dispatch of a kernel (see replay.c). */
typedef struct compute_rec_disp {
    int n_bind;
    int32_t bind_node[KB_MAX_BIND];  /* order index of the bound owner; -1: the scratch */
    uint64_t scratch_bytes;          /* the scratch buffer it needs (kb_scratch) */
    int32_t bind_chunk[KB_MAX_BIND]; /* which of its chunks */
    uint32_t write_mask;             /* bit i: binding i is written */
    int param0, n_param;             /* its uniforms: the record's params[param0 ..) */
    uint64_t block;                  /* ... as a block at this offset of the plan's params_buf */
    uint32_t groups[3];
} compute_rec_disp;

/* A kernel's dispatches as its generator made them in bind mode, with
 * buffers named by order index (each compute has its own buffers) and the
 * sizes they were made for (sig: SIG_WORDS values per node of the plan
 * kernel's sig_nodes). Valid while every size it depends on is the same. */
typedef struct compute_record {
    bool valid;
    int64_t *sig;
    compute_rec_disp *disp;
    int n_disp, cap_disp;
    gl_param *params;
    int n_params, cap_params;
    /* its region of the plan's params_buf: [block0, block0 + block_cap),
     * and the last dispatch that read it (gl_host_write_guard); a second
     * region (alt_*, alt_cap 0: none yet) takes the blocks when the first
     * may still be read (a kernel recorded again every step, the next step
     * queued before the last one ran: pipelined greedy decoding) */
    uint64_t block0, block_cap, block_use;
    uint64_t alt0, alt_cap, alt_use;
    /* the kernel's bindings (for the statistics) */
    int n_kbind;
    int32_t kbind_node[KB_MAX_BIND];
    uint32_t kbind_write_mask;
} compute_record;

typedef struct compute_kernel {
    int anchor, partner, out;                                  /* order indices, -1 for none */
    int sib[KERNELS_MAX_SIB], sib_out[KERNELS_MAX_SIB], n_sib; /* a grouped matmul's others */
    int reduce;                                                /* a folded reduction, or -1 */
    char *name;                                                /* "rms_norm+mul" */
    char *glsl;             /* the generated source (kept for docs and verification) */
    const gl_program *prog; /* owned by the program cache */
    /* The nodes whose sizes the kernel's bindings and uniforms may depend
     * on (order indices into the plan's sig_nodes): its own nodes, their
     * sources, and the owners of both. */
    int sig_start, sig_count;
    compute_record rec;
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
    int *sig_nodes; /* kernel k's: sig_nodes[kernels[k].sig_start ..] */
    /* The kernels' parameter blocks (a uniform buffer), written when a
     * kernel records and bound on every replay; params_used bytes taken. */
    GLuint params_buf;
    uint64_t params_size, params_used;
    bool built; /* programs exist */
    char *all_glsl;
    compute_plan *next; /* the cache's list, most recently used first */
};

/* ---- The device profile (profile.c) ---- */
typedef enum compute_profile_source {
    COMPUTE_PROFILE_ENV,      /* GLESC_GEMV_MAX_M */
    COMPUTE_PROFILE_CLASS,    /* the device class's (kernels_class.gemv_max_m) */
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
/* A compute prepared ahead (compute_prepare): the graph ordered and its plan
 * found (or made and built), to run at the next glesc_graph_compute of the
 * same graph and output when nothing changed in between. */
typedef struct compute_prepared {
    bool valid;
    glesc_graph *g;
    const glesc_tensor *out;
    uint64_t gen, computes;     /* g->gen and compute_state.computes when prepared */
    glesc_graph_options g_opts; /* g->opts when prepared */
    glesc_graph_options opts;   /* with the GEMV threshold filled in */
    graph_order_t ord;
    struct compute_plan *p;
    bool reused;    /* the plan existed and was built */
    int glsl_built; /* kernels whose GLSL was generated */
    int compiled;   /* programs compiled for its plan */
    uint64_t t0;    /* core_time_ns() after the device profile (0: it failed) */
} compute_prepared;

typedef struct compute_state {
    compute_plan *plans;
    int n_plans;
    FILE *trace; /* GLESC_TRACE */
    bool trace_tried, trace_any;
    uint64_t trace_t0;
    compute_profile profile; /* valid when profiled */
    bool profiled;
    gl_buffer *scratch;    /* kernels' scratch (kb_scratch): counters at zero between dispatches */
    uint64_t computes;     /* glesc_graph_compute calls and plan drops: what a prepared compute may
                              not see between its preparation and its run */
    compute_prepared prep; /* compute_prepare's (valid: it may still run) */
} compute_state;

/* Orders g for output out and finds (or makes and builds) its plan now, so
 * that the next glesc_graph_compute(g, &out, 1) only runs it: a decode step
 * prepares the next one while the GPU runs. Dropped when anything in
 * between computes, drops plans or changes g's tensors or options. */
glesc_status compute_prepare(glesc_graph *g, glesc_tensor *out);
/* Drops the prepared compute, if any. */
void compute_prepared_drop(compute_state *s);
/* Orders g for output out, plans it and starts compiling the programs its
 * plan lacks, without waiting (where the driver compiles in the background:
 * compute_background_compiles; elsewhere it only plans); nothing runs. A
 * later compute of the same structure takes the programs, waiting for any
 * still compiling. */
glesc_status compute_start(glesc_graph *g, glesc_tensor *out);
/* Whether compute_start's compiles run in the background here. */
bool compute_background_compiles(const glesc_context *ctx);
/* Whether every compile compute_start began is done (those done are
 * recorded); never waits. */
bool compute_background_done(glesc_context *ctx);

/* The context's state, created on first use; NULL on out-of-memory. */
compute_state *compute_state_get(glesc_context *ctx);
/* Forgets every plan: the next compute of any structure plans, generates
 * its GLSL and binds its kernels again (programs stay in the program
 * cache). A graph's last GLSL (glesc_graph_last_glsl) is gone until its
 * next compute. For tests and benchmarks. */
void compute_plans_drop(glesc_context *ctx);

/* ---- Executor pieces (exec.c), also used by the profile ---- */
/* Storage bindings a kernel may use on this context's device. */
int compute_max_bindings(const glesc_context *ctx);
/* Generates kernel gk's GLSL (kernels_gen in build mode) into *out
 * (core_free it); the message names the kernel on failure. *n_bind (when
 * not NULL): the storage buffers it binds, max_bind + 1 where it needs more
 * than max_bind. */
glesc_status compute_kernel_glsl(glesc_context *ctx, const kernels_kernel *gk, const char *name,
                                 int max_bind, const glesc_graph_options *opts, char **out,
                                 int *n_bind);
/* The context's scratch buffer (kb_scratch) of at least bytes, grown
 * (zero-filled) where needed; *out NULL and the message set on failure. */
glesc_status compute_scratch(glesc_context *ctx, uint64_t bytes, gl_buffer **out);
/* Runs kernel gk's generator in bind mode on b (kb_free it in any case): its
 * dispatches, with this compute's buffers and uniforms, are in b->disp. */
glesc_status compute_kernel_bind(glesc_context *ctx, const kernels_kernel *gk, int max_bind,
                                 const glesc_graph_options *opts, kb *b);

/* ---- Kernel records (replay.c) ---- */
/* Are kernel k's sizes in ord those its record was made for? */
bool compute_record_matches(const compute_plan *p, int k, const graph_order_t *ord);
/* Records what kernel k's generator made in bind mode (b): its dispatches
 * with bindings by order index, its parameter blocks written into the
 * plan's uniform buffer, and the sizes they were made for. */
glesc_status compute_record_make(glesc_context *ctx, compute_plan *p, int k,
                                 const graph_order_t *ord, const kb *b);
/* GLESC_PLAN_VERIFY=1: the record replayed for kernel k equals what its
 * generator makes now (b); an error naming the difference otherwise. */
glesc_status compute_record_verify(glesc_context *ctx, const compute_plan *p, int k,
                                   const graph_order_t *ord, const kb *b);
/* Dispatches kernel k's record with this compute's buffers. */
glesc_status compute_record_dispatch(glesc_context *ctx, compute_plan *p, int k,
                                     const graph_order_t *ord);

/* The multiply-add rate a plain GLES kernel reaches on this device
 * (roofline.c: `chains` independent chains of vec4 multiply-adds per
 * invocation, fp32 or with f16 the float16_t arithmetic of ctx->f16_ext,
 * nothing read, the caps' workgroup size), in GFLOP/s (a multiply-add is
 * two), the median of iters runs (0: 5) long enough to dwarf a launch. A
 * GEMM's efficiency is set against the best of several chain counts
 * (glesc-bench). */
glesc_status compute_roofline_fma(glesc_context *ctx, int iters, int chains, bool f16,
                                  double *gflops);

/* Hash of the structure of ord for options o (see the rule in kernels.h);
 * plan.c says what it covers. */
core_hash128 compute_plan_key(const graph_order_t *ord, const glesc_graph_options *o,
                              unsigned fusion, int max_bindings);
compute_plan *compute_plan_find(glesc_context *ctx, core_hash128 key);
/* Fuses ord so that every kernel's generator stays within max_bindings
 * (each kernel's GLSL generated for opts, kept in the plan), and plans
 * lifetimes; the plan joins the cache (programs not yet built). NULL on
 * failure (message set: out of memory, or a generator's error). */
compute_plan *compute_plan_create(glesc_context *ctx, core_hash128 key, const graph_order_t *ord,
                                  unsigned fusion, int max_bindings,
                                  const glesc_graph_options *opts);
/* Sets every node's kernel from the plan. */
void compute_plan_apply(const compute_plan *p, const graph_order_t *ord);
/* The kernel descriptor of kernel k for ord's nodes. */
kernels_kernel compute_plan_kernel(const compute_plan *p, const graph_order_t *ord, int k);

#endif /* GLESC_COMPUTE_H */
