/*
 * graph.h — the graph layer, glesc's IR: tensors (type, shape, byte
 * strides, views, storage split into row chunks), the lazy op graph, the op
 * table's semantic rows (what each op means: arity, kind, shape rule, CPU
 * reference, fusion capabilities), the compute order, the fusion pass and
 * the CPU evaluator. No code generation: src/kernels/ reads this IR to
 * write GLSL, and src/compute/ plans and runs it (glesc_graph_compute).
 * Nothing here includes a layer above (kernels, compute).
 */
#ifndef GLESC_GRAPH_H
#define GLESC_GRAPH_H

#include "gl/gl.h"

#define GRAPH_MAX_SRC 5
#define GRAPH_MAX_IP 16 /* integer op parameters: part of the structure hash */
#define GRAPH_MAX_FP 4  /* float op parameters: uniforms, free to change */

/* Memory of a storage owner: one buffer, or row chunks when the tensor is
 * larger than the device's storage-block limit. A row is nb[1] bytes; chunk
 * c holds rows [c·chunk_rows, (c+1)·chunk_rows). */
typedef struct graph_storage {
    gl_buffer **chunks; /* n_chunks buffers; NULL while not allocated */
    int n_chunks;
    int64_t chunk_rows;
    uint64_t row_bytes;
    uint64_t bytes; /* all chunks together */
} graph_storage;

struct glesc_tensor {
    glesc_context *ctx;
    glesc_graph *g; /* NULL for persistent tensors */
    glesc_op op;
    glesc_dtype dtype;
    int ndim;      /* 1..4; for printing shapes and for results' ndim */
    int64_t ne[4]; /* elements per dimension, ne[0] fastest */
    int64_t nb[4]; /* byte strides into the owner's memory */
    uint64_t offs; /* byte offset into the owner's memory */
    glesc_tensor *src[GRAPH_MAX_SRC];
    int n_src;
    /* Whose memory holds the elements: itself for leaves and op results,
     * the source's owner for views, the destination's owner for in-place
     * ops (set_rows, cpy). */
    glesc_tensor *owner;
    int32_t ip[GRAPH_MAX_IP];
    float fp[GRAPH_MAX_FP];
    graph_storage st; /* on owners */
    bool persistent;
    bool written; /* leaves: data has been written (inputs must be before compute) */
    /* persistent: the contents are zeros that are not in memory yet
     * (glesc_weight_new writes them when the tensor is first used or read,
     * unless a write from the host came first) */
    bool zeros_due;
    int refs; /* persistent: the caller's + one per graph using it */
    char *name;
    glesc_tensor *next; /* the graph's list of its tensors */
    /* planning scratch, valid during a compute */
    int order;       /* position in the compute order; -1 when not needed */
    int n_consumers; /* distinct needed nodes using it as a source */
    int kernel;      /* the kernel computing it; -1 for leaves and views */
    int last_use;    /* owners: index of the last kernel touching the memory */
    bool is_output;
    bool live; /* owners: memory holds current values */
    /* a matmul or attention that takes the batch's kernels whatever its
     * width (graph_batch_kernels) */
    bool batch_kernel;
};

struct glesc_graph {
    glesc_context *ctx;
    glesc_graph_options opts;
    glesc_tensor *tensors;  /* every tensor created in g, newest first */
    uint64_t gen;           /* graph_gen_next() at its creation and each change of its tensors or
                               options: a compute prepared ahead (compute/exec.c) checks it */
    glesc_tensor **persist; /* persistent tensors g holds a reference to */
    int n_persist, cap_persist;
    /* results of the last compute */
    glesc_tensor **kept; /* owners whose memory holds outputs */
    int n_kept, cap_kept;
    glesc_compute_stats stats;
    glesc_kernel_time *ktimes;
    int n_ktimes;
    const char *last_glsl;
    /* computes take the class's narrow-GEMM skips (graph_narrow_skips) */
    bool narrow_skips;
};

/* A value never handed out before (process-wide, any thread). */
uint64_t graph_gen_next(void);

/* ---- Tensors (tensor.c) ---- */
size_t graph_dtype_size(glesc_dtype t); /* bytes per element of f32/f16/bf16/i32, else 0 */
bool graph_dtype_ok(glesc_dtype t);     /* an element type (f32, f16, bf16, i32) */
/* A ggml block type with a GPU layout (q4_0 .. mxfp4): persistent tensors
 * only, read by matmul (as the weight) and get_rows (as the table). On the
 * GPU a row is its blocks repacked (quant_gpu_repack: grouped fields,
 * aligned quants), so nb[1] is the GPU bytes of a row; nb[0] is a file
 * block's bytes (not an address step on the GPU). */
bool graph_dtype_quant(glesc_dtype t);
/* The block types a KV cache may hold (q8_0, q4_0). Besides being weights,
 * tensors of these types may be viewed (glesc_view, glesc_permute keeping
 * dimension 0: whole blocks along it), written by set_rows (each row
 * quantized as ggml's CPU quantizers do) and read element by element by
 * attention (k, v), rope, cont and cast, whose loads decode the block of
 * the element (kb_expr.c). A view's strides and offset are in the file's
 * bytes (ggml's row-size convention: nb[d] = glesc_dtype_row_bytes(t, n)
 * for n elements, whole blocks), never the GPU's. */
bool graph_kv_quant(glesc_dtype t);
/* For a tensor of a block type (an owner or a view of one): the element
 * offset and the element stride of dimension d in its owner, counted as a
 * dense array of the owner's shape. */
int64_t graph_quant_elem_offs(const glesc_tensor *t);
int64_t graph_quant_elem_stride(const glesc_tensor *t, int d);
/* GPU bytes of a row of ne0 elements (ne0 a multiple of the block for
 * quantized types). */
uint64_t graph_row_bytes(glesc_dtype t, int64_t ne0);
int64_t graph_nelements(const glesc_tensor *t);
uint64_t graph_nbytes(const glesc_tensor *t); /* contiguous size on the GPU */
/* Contiguous size on the host, as glesc_tensor_read/_write take it: the file
 * (GGUF) layout for quantized types, else graph_nbytes. */
uint64_t graph_host_nbytes(const glesc_tensor *t);
void graph_set_contiguous(glesc_tensor *t); /* nb from ne and dtype, offs 0 */
bool graph_is_contiguous(const glesc_tensor *t);
bool graph_same_shape(const glesc_tensor *a, const glesc_tensor *b);
/* "[4, 3]" into buf (at least 64 bytes). */
const char *graph_shape_str(const glesc_tensor *t, char *buf, size_t size);
/* A new tensor of g (op NONE, no sources); NULL on OOM with ctx's error set. */
glesc_tensor *graph_tensor_alloc(glesc_graph *g);
/* A view node of x (op: RESHAPE, PERMUTE, VIEW, BROADCAST): x's owner,
 * dtype and offset, shape and strides left to the caller (views.c); NULL
 * with ctx's error set where x cannot be viewed (quantized) or on OOM. */
glesc_tensor *graph_view_node(glesc_graph *g, glesc_op op, glesc_tensor *x);
/* Makes g hold a reference to persistent t (once). */
glesc_status graph_hold(glesc_graph *g, glesc_tensor *t);
/* Allocates an owner's memory (chunked when allowed and needed). */
glesc_status graph_storage_alloc(glesc_tensor *owner, gl_usage usage, bool allow_chunks);
void graph_storage_free(glesc_tensor *owner);
/* Reads/writes [offset, offset+size) of an owner's memory across chunks. */
glesc_status graph_storage_read(glesc_tensor *owner, uint64_t offset, void *dst, uint64_t size);
glesc_status graph_storage_write(glesc_tensor *owner, uint64_t offset, const void *src,
                                 uint64_t size);
/* A persistent tensor's memory was filled from the host (upload.c): its
 * contents are defined, no zeros are due. */
void graph_tensor_filled(glesc_tensor *t);
/* glesc_weight_new whose buffers get their data store only as
 * graph_weights_write fills them (gl_pool_acquire_unbacked): for a loader
 * that writes every such tensor with graph_weights_write before anything
 * else uses it (freeing it is fine), so that the driver's allocation of
 * one buffer overlaps the filling of the one before. */
glesc_tensor *graph_weight_new_unbacked(glesc_context *ctx, glesc_dtype dt, int ndim,
                                        const int64_t *shape);
/* glesc_weights_write with the context bound and the message reset: the
 * persistent tensors of src filled on all cores (upload.c); tensors of
 * graph_weight_new_unbacked get their buffers' data stores on the way. */
glesc_status graph_weights_write(glesc_context *ctx, const glesc_weight_source *src, int n,
                                 glesc_weights_done_fn done, void *user);
/* The tensor's elements as floats in contiguous order (n = nelements). */
glesc_status graph_tensor_gather_f32(glesc_tensor *t, float *dst);
void graph_free_tensor(glesc_tensor *t);

/* ---- The op table (ops.c) ---- */
typedef enum graph_kind {
    GRAPH_KIND_LEAF,
    GRAPH_KIND_VIEW,    /* no kernel; shares its source's memory */
    GRAPH_KIND_ELTWISE, /* an expression of its sources at the same coordinates: fuses */
    GRAPH_KIND_ANCHOR,  /* its own kernel generator; may take prologue/epilogue */
} graph_kind;

typedef struct graph_op_info {
    const char *name;
    int arity; /* sources; optional ones (a mask) may be NULL */
    graph_kind kind;
    /* Shape rule: validates sources and parameters, sets dtype, ndim, ne
     * (and nb/offs/owner for views and in-place ops). On error sets ctx's
     * message "glesc_<op>: ..." naming the shapes and returns its status. */
    glesc_status (*shape)(glesc_tensor *t);
    /* CPU reference: sources as contiguous floats of their shapes, result as
     * contiguous floats of t's shape. NULL for views (gathers). */
    void (*cpu)(const glesc_tensor *t, float *dst, const float *const *src);
    /* Scalar references for the elementwise rows (double precision). */
    double (*f1)(double x, const float *fp);
    double (*f2)(double a, double b);
    bool inplace; /* writes into source 0 (set_rows) or 1 (cpy) */
    /* Reads its sources at other coordinates than its own (rope's partner
     * element, concat's halves): it cannot be in an anchor's epilogue,
     * where the anchor's value exists only at the anchor's coordinates. */
    bool remaps;
    /* A row gather (get_rows): its value at given coordinates is a row of
     * its table (source 0) chosen by its indices (source 1), so a reading
     * kernel may compute it itself (kernels/fuse.c, inline_gathers;
     * kernels_expr_gather). */
    bool gather;
} graph_op_info;

const graph_op_info *graph_op(glesc_op op);
/* Sets ctx's error to "glesc_<t's op>: <fmt>" and returns st (shape rules,
 * view builders). */
glesc_status graph_op_fail(const glesc_tensor *t, glesc_status st, const char *fmt, ...)
    CORE_PRINTF(3, 4);
/* t's shape "[4, 3]" in a buffer that lives to the end of the enclosing
 * block: for messages. */
#define GRAPH_SH(t) graph_shape_str((t), (char[64]){0}, 64)

/* ---- Convolutions (conv.c) ----
 * A convolution's sizes and parameters (ip: strides H, W; pads H begin, W
 * begin, H end, W end; dilations H | W << 16; group | 1-D << 24), the same
 * for its 1-D form (x [W, C, N], w [kW, C / group, C_out], result [OW,
 * C_out, N]: h = kh = oh = 1) and its 2-D one (x [W, H, C, N], w [kW, kH,
 * C / group, C_out], result [OW, OH, C_out, N]). The result's sizes are
 * read from t (valid once its shape rule ran). */
typedef struct graph_conv_dims {
    int64_t w, h, c, n, kw, kh, cg, ow, oh, co;
    int sh, sw, ph, pw, dh, dw, group;
    bool one_d;
} graph_conv_dims;
void graph_conv_dims_of(const glesc_tensor *t, graph_conv_dims *d);
#define GRAPH_CONV_1D (1 << 24)

/* ---- Node creation (builders.c, views.c) ---- */
/* Creates a node of op with sources and params, runs the shape rule; NULL on
 * error (message set) or when a source is NULL (message kept). */
glesc_tensor *graph_node(glesc_graph *g, glesc_op op, glesc_tensor *const *src, int n_src,
                         const int32_t *ip, int n_ip, const float *fp, int n_fp);
/* Checks source i of a new op node: of g's graph and context (g then holds a
 * persistent one), and quantized only as matmul's W or get_rows' table
 * (source 0). Sets the message on failure. */
glesc_status graph_check_source(glesc_graph *g, glesc_op op, int i, glesc_tensor *s);
/* Unlinks and frees t, g's newest tensor (a node whose shape rule failed). */
void graph_drop_newest(glesc_graph *g, glesc_tensor *t);
/* Every matmul and attention recorded on g so far takes the kernels of a
 * batch (the GEMM, prefill attention) whatever its width: their programs
 * serve every width up to a batch's, so a one-token step can run on those
 * a prompt compiled (kernels_matmul_gemv, attention's is_prefill). */
void graph_batch_kernels(glesc_graph *g);
/* g's computes leave out of the narrow GEMM (and of one column on the
 * batch kernels) the fusions the device class names (kernels_class's
 * fuse_skip_narrow, GLESC_FUSE_SKIP_NARROW): programs that compile faster,
 * for a session's prompts (src/llm/session.c). */
void graph_narrow_skips(glesc_graph *g, bool on);

/* ---- CPU reference evaluation (cpu.c) ----
 * Evaluates outs with the op table's CPU references (leaves read from their
 * GPU memory; nothing on the GPU changes). results[i] gets malloc'ed
 * contiguous floats of outs[i] (free() them). For tests and debugging. */
glesc_status graph_cpu_eval(glesc_graph *g, glesc_tensor *const *outs, int n, float **results);

/* The most columns a matmul computes with the GEMV: the bound of
 * glesc_graph_options' gemv_max_m (glesc_graph_set_options checks it) and
 * the threshold where that is 0 (kernels_matmul_gemv, the one place that
 * decides GEMV or GEMM). */
#define GRAPH_GEMV_MAX_M 8

/* ---- The compute order (graph.c) ----
 * Shared by the CPU evaluator and compute's executor. */
typedef struct graph_order_t {
    glesc_tensor **nodes; /* sources before consumers; nodes[i]->order == i */
    int n;
} graph_order_t;

/* Orders what outs[0..n) need (every tensor reached, leaves included). */
glesc_status graph_order(glesc_graph *g, glesc_tensor *const *outs, int n, graph_order_t *o);
void graph_order_free(graph_order_t *o);
/* Gives back the memory of the last compute's outputs. */
void graph_release_kept(glesc_graph *g);

#endif /* GLESC_GRAPH_H */
