/*
 * kernels.h — the kernels layer: code generation from the IR (src/graph/).
 * Its own codegen row per op (codegen.c: expression or generator, variant),
 * the kernel generators, one per op family, the weight loaders (wload.c),
 * and the builder they all write through (kb). It generates and binds; the
 * compute layer above decides what runs and dispatches it.
 *
 * Two modes, one code path. A generator runs once in build mode (kb.k is an
 * emit_kernel) to produce GLSL, and again for every compute in bind mode
 * (kb.k is NULL): the kb_line calls then emit nothing, but every
 * kb_param_* / kb_binding / kb_dispatch call records the value for this
 * compute's tensors. Because both modes take the same path, the uniforms and
 * bindings a program was built with are exactly the ones bound later; the
 * rule that keeps this true: a generator may branch only on what the
 * structure hash covers (ops, types, integer params, which dimensions are 1,
 * which shapes are equal, the op's variant (kernels_variant) and the graph
 * options), never on a size. Sizes, strides and offsets go into uniforms.
 *
 * Fusion, which nodes one kernel computes, is decided here too (fuse.c,
 * kernels_fuse), from what each generator can absorb (the capabilities of
 * its codegen row): the graph layer below says only what an op means.
 *
 * Fusion reaches a generator through kb_expr: the value of any tensor at
 * given coordinates. For a member of the kernel (an elementwise node fused
 * into it) it emits the node's expression, recursively; for the anchor (in an
 * epilogue) it returns the variable holding the anchor's value; for anything
 * else it emits a strided load. A generator therefore reads its inputs with
 * kb_expr (prologue for free) and stores its result with kb_store_out
 * (epilogue for free).
 */
#ifndef GLESC_KERNELS_H
#define GLESC_KERNELS_H

#include "emit/emit.h"
#include "graph/graph.h"

/* ---- Fusion (fuse.c): which nodes one kernel computes ---- */
#define KERNELS_MAX_SIB 3 /* a grouped matmul: the anchor and up to 3 siblings */

typedef struct kernels_kernel {
    glesc_tensor *anchor;  /* ANCHOR node, or NULL for a pure elementwise kernel */
    glesc_tensor *partner; /* second matmul sharing the anchor's activation, or NULL */
    glesc_tensor *out;     /* the node the kernel stores */
    /* A grouped matmul: more matmuls of the anchor's activation, each with
     * its own weight, epilogue and stored node sib_out[i]; workgroups pick
     * one by output row range. */
    glesc_tensor *sib[KERNELS_MAX_SIB], *sib_out[KERNELS_MAX_SIB];
    int n_sib;
    /* A reduction folded into the anchor's epilogue (an arg max over the
     * rows of a matrix-vector product), or NULL: the anchor's result is
     * not stored, the reduction's is (out: the reduction after its own
     * epilogue). */
    glesc_tensor *reduce;
    int id;
    int bindings; /* the fusion pass's count of the buffers it binds (an estimate) */
} kernels_kernel;

/* kernels_fuse's fusion flags: KERNELS_FUSE_ON, the fusions it leaves out
 * for matmuls of more than one column (prefill's GEMMs; tuning): the
 * gate/up pair, q/k/v grouping, a row norm folded in, prologues,
 * epilogues; and KERNELS_FUSE_GEMM_NORM, a row norm folded into GEMMs
 * (kernels_matmul_gemv false under the threshold KERNELS_FUSE_GEMV_MAX_M
 * gives) too (left out by default: the norm's own kernel and the GEMMs on
 * its result took less time, H200 and llvmpipe; docs/graph.md). */
enum {
    KERNELS_FUSE_ON = 1,
    KERNELS_FUSE_SKIP_PAIR = 2,
    KERNELS_FUSE_SKIP_GROUP = 4,
    KERNELS_FUSE_SKIP_NORM = 8,
    KERNELS_FUSE_SKIP_PROLOGUE = 16,
    KERNELS_FUSE_SKIP_EPILOGUE = 32,
    KERNELS_FUSE_GEMM_NORM = 64,
    /* the gate/up pair left out of one-column GEMVs (decode) whose weight
     * type's paired kernel does not fit the class's registers
     * (kernels_gemv_pair_lean false): the class's decode_pair_split */
    KERNELS_FUSE_SPLIT_DECODE_PAIR = 128,
};
/* The GEMV threshold in the flags (bits 8..11; 0: GRAPH_GEMV_MAX_M): a
 * matmul of more columns is a GEMM, into which a norm is not folded. */
#define KERNELS_FUSE_GEMV_MAX_M(m) ((unsigned)(m) << 8)
/* The KERNELS_FUSE_SKIP_ bits for the narrow GEMM only (bits 13..17): a
 * matmul that is a GEMM of at most KERNELS_GEMM_SMALL_M columns, or one
 * column on the batch kernels (graph_batch_kernels). */
#define KERNELS_FUSE_NARROW_SKIPS(s) ((unsigned)(s) << 12)
/* The KERNELS_FUSE_SKIP_ bits named in a comma list (pair, group, norm,
 * prologue, epilogue; NULL: none). */
unsigned kernels_fuse_skips(const char *list);

/* Assigns every ELTWISE/ANCHOR node of order[0..n) to a kernel (t->kernel)
 * and fills kernels[] (at most n) in execution order (each at its first
 * stored node; every kernel reads only what earlier kernels store);
 * *n_kernels. Without KERNELS_FUSE_ON in fusion, one kernel per node.
 * max_bindings bounds a fused kernel (reads and writes, as this pass counts
 * them); budget (NULL: none), per order index, bounds every fused kernel
 * holding that node: the planner lowers it where a generator bound more
 * than the pass counted (compute/plan.c). */
void kernels_fuse(glesc_tensor **order, int n, unsigned fusion, int max_bindings, const int *budget,
                  kernels_kernel *kernels, int *n_kernels);
/* After kernels_fuse (or a plan's kernels applied): is t a gather no kernel
 * computes, which every kernel reading it computes where it reads it? Its
 * kernel is -1 and it has no memory; its sources are leaves. */
bool kernels_gather_inline(const glesc_tensor *t);

/* ---- GEMV or GEMM: the one place that decides ----
 * A matmul of m activation columns runs the GEMV when m <= gemv_max_m (the
 * graph options'; 0: GRAPH_GEMV_MAX_M) and a batch's kernels are not asked
 * for (graph_batch_kernels), else the GEMM. The op's variant
 * (codegen.c), its generator (matmul.c), fusion (a norm folds into a GEMV
 * only) and compute (whether a graph needs the device's threshold) all
 * ask here. */
int kernels_gemv_max_m(int gemv_max_m); /* gemv_max_m, or GRAPH_GEMV_MAX_M for 0 */
bool kernels_matmul_gemv(const glesc_tensor *mm, int gemv_max_m);
/* Does a GEMV pair (gate/up: two weights of w's type, one kernel) of w's
 * type fit Mali's 32 registers with the quarter units (2 threads)? Where
 * not, a class with decode_pair_split runs decode's gate and up apart. */
bool kernels_gemv_pair_lean(const glesc_tensor *w);

/* Storage buffers one kernel may bind (min with the device's
 * GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS, which GLES guarantees only 4 of):
 * a grouped q/k/v matmul with biases and its folded norm needs 11. */
#define KB_MAX_BIND 16
#define KB_MAX_PARAM 160
/* Distinct tensors fusion lets one kernel load besides what its generator
 * reads itself (fuse.c counts them; each costs five uniforms), and the
 * tensors a kernel loads through kb_expr/kb_load in all: those and up to 8
 * of the generator's own inputs. */
#define KB_MAX_FUSED_LOADS 16
#define KB_MAX_LEAF (KB_MAX_FUSED_LOADS + 8)
#define KB_MAX_MEMO 64

#define KB_MAX_RW 4     /* fused row writes (set_rows members) per kernel */
#define KB_MAX_GATHER 4 /* gathers computed where they are read, per kernel */

typedef struct kb_dispatch {
    gl_binding bind[KB_MAX_BIND];
    int n_bind;
    gl_param param[KB_MAX_PARAM];
    int n_param;
    uint32_t groups[3];
    /* binding bind[scratch_bind] is the executor's scratch buffer of at
     * least scratch_bytes (kb_scratch; its buf is NULL here); -1: none */
    int scratch_bind;
    uint64_t scratch_bytes;
} kb_dispatch;

typedef struct kb {
    glesc_context *ctx;
    const kernels_kernel *gk;
    emit_kernel *k;  /* build mode; NULL in bind mode */
    glesc_status st; /* first failure (sticky); message in ctx->err */
    int max_bind;
    const glesc_graph_options *opts; /* effective options of the compute (may be NULL) */
    /* storage bindings of the kernel: owner tensor and chunk */
    struct {
        glesc_tensor *owner; /* NULL: the scratch buffer */
        int chunk;
        bool write;
        bool rw;  /* a fused row write's destination: read and written */
        int elem; /* emit_elem of the declaration */
    } bind[KB_MAX_BIND];
    int n_bind;
    bool over_bind; /* it failed needing more than max_bind bindings */
    /* fused row writes: set_rows members (kb_row_writes_begin) */
    struct {
        const glesc_tensor *w; /* the set_rows node */
        int binding, idx_leaf;
    } rw[KB_MAX_RW];
    int n_rw;
    /* loads of the memory the row writes write read it as it is (the
     * kernel's later dispatch, after one that wrote the rows) */
    bool rw_read_memory;
    /* such loads outside the rows written take this GLSL value instead of
     * reading the memory (the generator loaded it before; NULL: read) */
    const char *rw_else;
    /* written for registers over instructions (Mali's decode attention,
     * devclass.c's decode_lean): the row lookup (rw<w>_find) finds the
     * first row index and whether the rows are consecutive itself where it
     * is called, instead of main() holding them in globals across the
     * whole kernel (a cached load and a loop over the rows written each
     * call: a decode step's one row, none); a NeoX rope's rotation index by
     * a select, not a remainder by a uniform (an integer division) */
    bool lean;
    /* integer divisions by uniforms only where the structure needs them
     * (V3D's decode attention, devclass.c's decode_few_div: V3D divides in
     * software, several temporaries each): a folded reshape's coordinates
     * in its source's dimensions of 1 are zero and its last other one is
     * not reduced (a valid flat index is below the product); with a fused
     * write of one row (the set_rows source's ne[1] is 1: a decode step)
     * an element read is in it by a subtraction from the row's start, not
     * by its row's division and rw<w>_find, and the write loop's element
     * is its column */
    bool few_div;
    int scratch_bind; /* -1: none */
    uint64_t scratch_bytes;
    /* gathers computed where they are read (kernels_expr_gather): each one's
     * loader and uniforms are declared once, numbered here */
    const glesc_tensor *gather[KB_MAX_GATHER];
    int n_gather;
    gl_param param[KB_MAX_PARAM];
    int n_param;
    /* tensors loaded through kb_expr/kb_load: their binding and first param */
    struct {
        const glesc_tensor *t;
        int binding, param;
    } leaf[KB_MAX_LEAF];
    int n_leaf;
    /* values already computed in the current kb_expr call */
    struct {
        const glesc_tensor *t;
        char coords[96];
        char var[16];
    } memo[KB_MAX_MEMO];
    int n_memo, depth;
    const char *anchor_var, *partner_var;   /* epilogue: the anchors' values */
    const glesc_tensor *cur_anchor;         /* whose value anchor_var holds */
    bool out_declared[1 + KERNELS_MAX_SIB]; /* the stores' uniforms */
    /* reduction prologue (deferred): the variable holding the folded
     * norm's input at the coordinates of the last kb_expr that reached it */
    char norm_in[16];
    int norm_evals; /* how often the current kb_expr reached the norm */
    bool norm_eps_declared;
    int n_var, n_fparam;
    /* dispatches recorded in bind mode */
    kb_dispatch *disp;
    int n_disp, cap_disp;
} kb;

/* Sets up b for kernel gk; k NULL = bind mode. */
void kb_init(kb *b, glesc_context *ctx, const kernels_kernel *gk, emit_kernel *k, int max_bind);
void kb_free(kb *b);
/* Records a failure (first one wins) and returns it. */
glesc_status kb_fail(kb *b, glesc_status st, const char *fmt, ...) CORE_PRINTF(3, 4);

/* A statement of main() (build mode only). */
void kb_line(kb *b, const char *fmt, ...) CORE_PRINTF(2, 3);
/* A fresh variable name "v12" written into buf; returns buf. Generators
 * name their own variables otherwise (never v<number>). */
const char *kb_var(kb *b, char buf[16]);

/* Uniforms: declared in build mode, recorded in both; return the index. */
int kb_param_u(kb *b, const char *name, uint64_t v); /* fails when v > UINT32_MAX */
int kb_param_i(kb *b, const char *name, int64_t v);
int kb_param_f(kb *b, const char *name, float v);
/* Overwrites a recorded value (between dispatches of one kernel). */
void kb_param_set_u(kb *b, int idx, uint64_t v);

/* Binds owner's memory (chunk); returns its binding index "t<i>". Bindings
 * are shared by tensors with the same owner. */
int kb_binding(kb *b, glesc_tensor *owner, int chunk, bool write);
/* The same, read-only, declared as a uvec4 array (16-byte loads). */
int kb_binding_uvec4(kb *b, glesc_tensor *owner, int chunk);
void kb_binding_set_chunk(kb *b, int idx, int chunk);
/* Records a dispatch of the current bindings and params (bind mode). */
void kb_dispatch_groups(kb *b, uint32_t gx, uint32_t gy, uint32_t gz);
/* A one-dimensional workgroup size: the largest power of two within want
 * and the device's invocation and x-size limits (GLES 3.1 guarantees 128). */
int kb_workgroup(const kb *b, int want);
/* Records a dispatch of total workgroups spread over x and y (the device
 * caps x at 65535); kernels read their index with KB_GROUP_INDEX. */
void kb_dispatch_1d(kb *b, uint64_t total);
/* The largest power of two <= v (1 for v < 2). */
static inline int kernels_pow2_floor(int v)
{
    int p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

/* A tuning variable "key=v,key=v" (v an integer, e.g. GLESC_GEMM): stores
 * the value of each of keys[0..n) it names into vals[i] (left alone where
 * absent); stops at the first malformed pair or value below min. */
void kernels_env_ints(const char *name, const char *const *keys, int *vals, int n, int min);

#define KB_GROUP_INDEX "(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x)"

/* Value (float) of t at coordinates c[0..3] (GLSL uint expressions): the
 * name of a variable of the current block, written into out (returned).
 * See the header comment. */
const char *kb_expr(kb *b, const glesc_tensor *t, const char *const c[4], char out[16]);
/* A GLSL int expression: t's element at c (t an i32 leaf, not fused). */
const char *kb_load_int(kb *b, const glesc_tensor *t, const char *const c[4], char buf[16]);
/* Sets up t's (a leaf's) binding and offset/stride uniforms "l<i>_o",
 * "l<i>_s0".. once per kernel; returns i (kb_expr.c; the row writes' index
 * tensors are leaves too). */
int kb_leaf(kb *b, const glesc_tensor *t);
/* Appends "(<prefix>_o + c0 * <prefix>_s0 + ...)" to out, leaving out
 * literal-zero coordinates: an element's index from the uniforms. */
void kb_index_expr(sbuf *out, const char *prefix, const char *const c[4]);
/* Stores value at coordinates c of the kernel's out node (into its owner's
 * memory, with its strides; f16/bf16 through atomics so neighbours in one
 * word do not race). With anchor_var set, value is the anchor's and the
 * epilogue (the fused consumers up to out) is applied first. */
void kb_store_out(kb *b, const char *const c[4], const char *anchor_value,
                  const char *partner_value);
/* The same for sibling i of a grouped matmul (gk->sib[i]'s value, stored
 * into gk->sib_out[i] after its own epilogue). */
void kb_store_sib(kb *b, int i, const char *const c[4], const char *value);
/* A reduction folded into the anchor's epilogue (gk->reduce, fuse.c: an
 * arg max over a GEMV's rows). kb_reduce_input: the value the reduction
 * reads at c (its source: the anchor's value through the epilogue up to
 * it), given the anchor's values. kb_store_reduced: stores the reduction's
 * value at c of the kernel's out, after the reduction's own epilogue (a
 * cpy into a persistent tensor). */
const char *kb_reduce_input(kb *b, const char *const c[4], const char *anchor_value,
                            const char *partner_value, char out[16]);
void kb_store_reduced(kb *b, const char *const c[4], const char *value);
/* Splits a flat index variable into coordinates of shape ne (uniform names
 * prefix0..3), declaring uint variables name0..name3. */
void kb_coords_from_flat(kb *b, const char *flat, const glesc_tensor *shape_of, const char *prefix,
                         const char *name);
/* Fused row writes (fuse.c: a set_rows whose result only this kernel's
 * anchor reads, through views, e.g. new keys and values into a KV cache
 * written by the attention that reads the cache). kb_row_writes_begin,
 * called first in main(), binds each destination for reading and writing
 * and finds whether the row indices are consecutive. From then on a load
 * of that memory through kb_expr looks its row up among the rows written:
 * a written row's value is computed from the set_rows source (in
 * registers), any other row is read from memory, so no invocation ever
 * reads a row another one writes. kb_row_writes_store emits the writes:
 * the source's elements id, id + stride, ... (GLSL uint expressions; the
 * generator makes them cover the whole source once per dispatch). A
 * generator may instead write the rows in a dispatch of their own and read
 * the memory in the next one (rw_read_memory: the executor's barrier
 * between them makes the writes visible), where reads of new rows are
 * many (prefill). */
void kb_row_writes_begin(kb *b);
void kb_row_writes_store(kb *b, const char *id, const char *stride);

/* A coherent uint buffer for work across workgroups (a last-workgroup
 * combine): the executor supplies one per context, zero-filled when it
 * grows. Its first KB_SCRATCH_COUNTERS words are counters, zero between
 * dispatches (a kernel that counts in one puts it back to zero); the words
 * after them are free space for the dispatch. bytes: how much of it this
 * dispatch uses, counters included (0: bound but not touched, so the
 * executor need not grow it). Returns its binding index ("t<i>"). */
#define KB_SCRATCH_COUNTERS 1024
int kb_scratch(kb *b, uint64_t bytes);

/* Is t computed inside this kernel (a fused member, not the anchors)? */
bool kb_is_member(const kb *b, const glesc_tensor *t);

/* Reduction prologue: a row norm (rms_norm) folded into the loading of
 * source src (fuse.c). kb_row_norm returns that norm member, or NULL.
 * Where the anchor's op table row says norm_deferred (matmul), kb_expr
 * evaluates the norm as its input, unscaled, and leaves the variable
 * holding that input in b->norm_in: the generator sums its squares over
 * the row (its own k loop reads all of it) and scales its result with
 * kb_row_norm_scale. */
const glesc_tensor *kb_row_norm(const kb *b, const glesc_tensor *src);
/* `float var = inversesqrt(sq / float(len) + eps);` with the norm's eps a
 * uniform (declared once per kernel). */
void kb_row_norm_scale(kb *b, const glesc_tensor *norm, const char *var, const char *sq,
                       const char *len);

/* ---- The codegen table (codegen.c) ----
 * How each op's code is made, and what its kernel can absorb; graph's
 * table (graph_op) holds what the op means. Elementwise rows: a GLSL
 * expression template ("$0"/"$1" the sources' values, "$p0".. the float
 * params) read by kernels_expr_template, or an expression writer of their
 * own. Anchor rows: the kernel generator (build and bind modes), a variant
 * where the code depends on shapes, and the fusion capabilities: what
 * the generator computes besides its own op (fuse.c merges by them). */
typedef struct kernels_codegen {
    const char *glsl;
    void (*expr)(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
    glesc_status (*gen)(kb *b);
    /* Shape-dependent code choices: an input of the structure hash
     * (compute's plan key), so a generator may branch on it. NULL: none. */
    uint32_t (*variant)(const glesc_tensor *t, const glesc_graph_options *o);
    /* Fusion capabilities (fuse.c). */
    unsigned prologue; /* bit i: source i may be an elementwise chain computed in place */
    bool epilogue;     /* consumers may be computed on the result before it is stored */
    /* A row norm (rms_norm): its value is its input times a scale that
     * depends only on the row (1/rms along dimension 0). An anchor that
     * takes a norm prologue may fold it, with its epilogue, into the
     * loading of its source and compute the row's sum of squares itself
     * (a reduction prologue, fuse.c). */
    bool row_scale;
    /* bit i: source i may be the output of a folded row norm. */
    unsigned norm_prologue;
    /* The anchor is linear in that source along the norm's row and applies
     * the scale to its own result (matmul: W·(x∘g·s) = s·(W·(x∘g)), the
     * squares summed in its own k loop): the path from the norm to the
     * source must be linear in the norm. Without it the norm's scale is
     * computed where its value is loaded (a loop over the row). */
    bool norm_deferred;
    /* bit i: source i may be (a view of) the result of a set_rows whose
     * write this anchor's kernel then does itself (fuse.c: a KV-cache write
     * inside the attention that reads the cache). */
    unsigned row_write_prologue;
    /* Storage buffers the anchor's kernel binds besides tensors (attention:
     * the scratch of its split combine). */
    int extra_bindings;
    /* A reduction (argmax) that may run as the epilogue of the kernel
     * computing its source, when that kernel's anchor takes one
     * (takes_reduce) and the reduction is along dimension 0 of a single
     * column: the anchor reduces its values as it would store them and
     * the kernel's last workgroup combines the workgroups' parts (fuse.c,
     * fold_reductions). */
    bool reduce_epilogue;
    bool takes_reduce;
} kernels_codegen;

const kernels_codegen *kernels_op(glesc_op op);
/* Runs b's kernel generator: its anchor's, or the elementwise one. */
glesc_status kernels_gen(kb *b);
/* t's variant under options o (0 for ops without one). */
uint32_t kernels_variant(const glesc_tensor *t, const glesc_graph_options *o);

/* ---- Generators (one per op family) ---- */
glesc_status kernels_gen_eltwise(kb *b); /* pure elementwise kernels (no anchor) */
glesc_status kernels_gen_reduce(kb *b);
glesc_status kernels_gen_norm(kb *b);
glesc_status kernels_gen_softmax(kb *b);
glesc_status kernels_gen_matmul(kb *b);
/* A GEMM of at most this many columns takes narrower tiles (the variant's
 * bit 18). */
#define KERNELS_GEMM_SMALL_M 64
/* Does the GEMV of matmul node mm read its weight through the fast units
 * (kernels_wload_units, and x not in the weight's memory)? */
bool kernels_matmul_units(const glesc_tensor *mm);
glesc_status kernels_gen_get_rows(kb *b);
glesc_status kernels_gen_set_rows(kb *b);
/* A KV cache's block type (q8_0, q4_0) on the GPU (kb_expr.c): qw words of
 * quants a block, gw words a full group of 8 blocks. */
void kernels_kvq_layout(glesc_dtype t, uint32_t *qw, uint32_t *gw);
glesc_status kernels_gen_attention(kb *b);
/* vision: pooling and shape (pool.c, reduce.c) */
glesc_status kernels_gen_pool(kb *b);
glesc_status kernels_gen_conv_transpose(kb *b);
glesc_status kernels_gen_log_softmax(kb *b);
/* Attention's code choices from its shapes (the op's variant): decode's
 * query heads per workgroup, keys per tile, output accumulators per
 * invocation; prefill's heads per workgroup and head sizes. */
uint32_t kernels_attention_variant(const glesc_tensor *t);
/* The cache length (keys) from which a decode step's attention takes its
 * other variant (tiles through registers: the class's decode_regs_from),
 * so a session compiles it ahead of that depth; 0: one variant at every
 * depth. */
int64_t kernels_attention_regs_from(glesc_context *ctx);
/* The convolution (conv.c): its blocking from the shapes (the op's
 * variant: kernel size, channel blocks, tile shape). */
glesc_status kernels_gen_conv(kb *b);
uint32_t kernels_conv_variant(const glesc_tensor *t);

/* A gather no kernel computes (kernels_gather_inline: get_rows of a table by
 * indices, both leaves) at c, computed here: the index loaded, the table's
 * element read through its type's loader (0 for an index outside the
 * table, as get_rows' kernel gives). Writes `float out = ...;` (rows.c). */
void kernels_expr_gather(kb *b, const glesc_tensor *t, const char *const c[4], char out[16]);

/* Expression helpers of the elementwise rows. */
void kernels_expr_template(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_rope(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_concat(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_cast(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_batch_norm(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
/* shape.c: pad, slice (a negative step), gather along one dimension */
void kernels_expr_pad(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_slice(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);
void kernels_expr_gather_axis(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out);

/* ---- Weight loaders (wload.c) ----
 * How a matmul or get_rows kernel reads its weight: per weight type GLSL
 * functions over the weight's binding BUF (see wload.c): the element
 * loader `float NAME(uint row_byte, uint k)` and the 32-element units the
 * GEMV and the GEMM read (NAME_wunit, NAME_wunit_x; glsl/quant/common.glsl). row_byte is the
 * row's first byte in the binding (GPU rows of the block types: see
 * quant_gpu_repack); the block types also need the row's length, a GLSL
 * expression ne0 (e.g. a uniform's name). Which types have a loader is
 * quant_gpu_readable's answer. */
enum {
    KERNELS_WLOAD_ELEM = 1u << 0,
    KERNELS_WLOAD_UNIT = 1u << 2,
    /* with UNIT: the binding is a uvec4 array and the units are the fast
     * ones (only where kernels_wload_units says so) */
    KERNELS_WLOAD_UVEC4 = 1u << 3,
    /* with UVEC4, where the type has them: the split units NAME_wraw and
     * NAME_wdec (the GEMV's raw=1, the GEMM's late decode), and the half
     * units NAME_whalf (the GEMM where two invocations stage a row); a
     * kernel asks for them only where it calls them */
    KERNELS_WLOAD_RAW = 1u << 4,
    KERNELS_WLOAD_HALF = 1u << 5,
    /* with RAW: the block types' half decode NAME_wdech (the GEMM where two
     * invocations stage a row) */
    KERNELS_WLOAD_DEC_HALF = 1u << 6,
    /* with UNIT, every type: the GEMV's half units (its class's half):
     * `void NAME_wuhalf(uint row_byte, uvec4 at, uint u, uint h, out vec4
     * q[4], out vec2 ab)`, run h of unit u (its elements at NAME_wunit_x's
     * component h) with its scale and offset */
    KERNELS_WLOAD_UHALF = 1u << 7,
    /* with UNIT and UVEC4, where kernels_wload_uquad says so, or UNIT alone
     * (block types: the snippet's dq4_q and dq4_ab, or dq4): the GEMV's
     * quarter units (its class's quad), `void NAME_wuq(uint row_byte,
     * uvec4 at, uint u, uint h, uint j, out vec4 q)`, vec4 j of run h's
     * quants, and `vec2 NAME_wuab(uint row_byte, uvec4 at, uint u, uint
     * h)`, the run's scale and offset */
    KERNELS_WLOAD_UQUAD = 1u << 8,
    /* with UVEC4: the binding is a uint array all the same (QW one word a
     * load, QW4 four): the quarter units' */
    KERNELS_WLOAD_WORDS = 1u << 9,
};
/* Do w's units also come a vec4 at a time (NAME_wuq, NAME_wuab: the
 * GEMV's quarter units)? Block types whose snippet has unit_q4 and
 * unit_ab, and f32/f16/bf16 with the fast units (their snippet's pq4). */
bool kernels_wload_uquad(const glesc_tensor *w);
/* Does w have the fast units (its binding then is a uvec4 array)?
 * The block types whose snippet has a unit decoder, and f32/f16/bf16
 * whose rows start on 16 bytes and hold a multiple of 32 elements. */
bool kernels_wload_units(const glesc_tensor *w);
/* Do w's units also come split into loads and decode (NAME_wraw,
 * NAME_wdec: the GEMV's pipelined units, the GEMM's late decode)? Units
 * whose snippet has unit_raw (praw). */
bool kernels_wload_raw(const glesc_tensor *w);
/* Do w's units also come by halves (NAME_whalf: the GEMM's invocations
 * that stage half a row's unit)? The plain types' units (phalf). */
bool kernels_wload_half(const glesc_tensor *w);
/* Do w's split units also decode by halves (NAME_wdech)? Block types whose
 * snippet has unit_dec_half. */
bool kernels_wload_dec_half(const glesc_tensor *w);
/* Declares the loaders `what` (KERNELS_WLOAD_* bits) named fn of weight w
 * for binding buf in b (a uvec4 array with KERNELS_WLOAD_UVEC4, else
 * uint); fails (kb_fail) for a type quant_gpu_readable refuses, or
 * KERNELS_WLOAD_UVEC4 where kernels_wload_units(w) does not hold. */
void kernels_wload_emit(kb *b, const glesc_tensor *w, const char *fn, const char *buf,
                        unsigned what, const char *ne0);

/* A device class's kernel configurations (devclass.c), before the caps
 * clamp them and the tuning variables override them. */
typedef struct kernels_class {
    struct {
        int wg, team; /* invocations; a row team's (no subgroups) */
        int nr1, nrm; /* rows a team: one column, more columns */
        int unroll_q; /* units in flight a lane, block types (plain: 1) */
        int fill;     /* vec4 of x a lane loads at once */
        int xs;       /* x elements a slice at most (shared memory, hence occupancy) */
        int cols;     /* columns a pass for more than one (gemv.glsl's MCOLS) */
        int groups;   /* workgroups a dispatch at most (0: one per block) */
        bool half;    /* units decoded and multiplied a run (16 elements) at a time */
        bool quad;    /* with half: a vec4 (4 elements) at a time, where the weight
                         type's loaders allow (kernels_wload_uquad) */
    } gemv;
    struct {
        int bn, bm, tn, tm; /* the tile where it fits (0: the largest the caps allow) */
        int slots;          /* workgroups the device runs at once (the split of K) */
        bool loop;          /* a step's multiply-adds as a loop, not written out */
        bool loop_narrow;   /* the same for the narrow GEMM only (short prompts) */
        bool pad;           /* padded staged rows where they fit (else swizzled) */
        bool no_prefetch;   /* a step's loads after the last step's multiply-adds, not
                               in flight during them (fewer registers) */
        bool x_first;       /* with no_prefetch: a step's x fetched before its weights
                               are decoded, not after (gemm_loop.glsl) */
    } gemm;
    struct {
        int wg, target;       /* decode: invocations, workgroups its split aims at */
        int pf_wg, pf_target; /* prefill: the same */
        int pf_r, pf_bk;      /* prefill: rows (query, head) a workgroup and keys a tile
                                 at most (0: the largest, attention.c's ATTN_PF_R and
                                 ATTN_PF_BK; the shared memory may shrink both) */
        int pf_out;           /* prefill: output vec4 an invocation at most (TRO x TD4,
                                 live across the key tiles): fewer rows a workgroup
                                 where a long head has more (0: no cap) */
        int decode_max_q;     /* the decode kernel up to this many queries (0, 1: one) */
        int decode_cu;        /* decode: splits a round of the combine reads (0: ATTN_CU) */
        int decode_co;        /* decode: outputs a pass of the combine takes an invocation
                                 (0: all of its outputs, one pass) */
        int decode_regs_from; /* decode: the keys (the cache's length) from which the
                                 key and value tiles go through registers
                                 (attn_decode.glsl's ATTN_REGS; 0: never) */
        int decode_acc;       /* decode: output accumulators an invocation keeps in registers
                                 across the key tiles at most; more stay in shared memory
                                 between tiles (attn_decode.glsl's ATTN_OS; 0: no limit) */
        int decode_roll;      /* decode: the per-head loops over a key tile (its running
                                 maximum and sum) bounded by a uniform where a tile has at
                                 most this many keys, so the compiler keeps them loops
                                 (attn_decode.glsl's ATTN_ROLL; 0: never) */
        bool decode_lean;     /* decode: written for registers (kb's lean), the fused
                                 KV-cache writes after the attention, not before it */
        bool decode_few_div;  /* decode: integer divisions by uniforms only where the
                                 structure needs them (kb's few_div) */
        bool pf_roll;         /* prefill: the scores' loop over the head's vec4s
                                 bounded by a uniform, so the compiler keeps it a loop
                                 (attn_prefill.glsl's ATTN_ROLL) */
    } attn;
    int gemv_max_m; /* GEMV up to this many columns; 0: the device profile measures it */
    /* fusions left out of matmuls of more than one column where
     * GLESC_FUSE_SKIP does not name them (KERNELS_FUSE_SKIP_* bits) */
    unsigned fuse_skip;
    /* and of the narrow GEMM only, where GLESC_FUSE_SKIP_NARROW does not
     * name them (KERNELS_FUSE_NARROW_SKIPS) */
    unsigned fuse_skip_narrow;
    /* decode's gate and up as two GEMVs where the weight type's pair does
     * not fit (KERNELS_FUSE_SPLIT_DECODE_PAIR, kernels_gemv_pair_lean) */
    bool decode_pair_split;
} kernels_class;

const kernels_class *kernels_class_of(const glesc_context *ctx);

#endif /* GLESC_KERNELS_H */
