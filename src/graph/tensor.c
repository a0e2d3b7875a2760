/*
 * tensor.c — tensors: creation (graph inputs, persistent tensors), the
 * public accessors, and their memory: one pool buffer, or row chunks when a
 * persistent tensor is larger than the device's storage-block limit (only
 * whole rows go in a chunk, so a kernel that works row by row can run once
 * per chunk). Host reads and writes go through graph_storage_read/write,
 * which walk the chunks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "quant/quant.h"

size_t graph_dtype_size(glesc_dtype t)
{
    switch (t) {
    case GLESC_DTYPE_F32:
    case GLESC_DTYPE_I32:
        return 4;
    case GLESC_DTYPE_F16:
    case GLESC_DTYPE_BF16:
        return 2;
    default:
        return 0;
    }
}

bool graph_dtype_ok(glesc_dtype t)
{
    return graph_dtype_size(t) != 0;
}

bool graph_dtype_quant(glesc_dtype t)
{
    const quant_type_info *q = quant_type(t);
    return !graph_dtype_ok(t) && q && q->is_quantized && quant_gpu_snippet(t) != NULL;
}

bool graph_kv_quant(glesc_dtype t)
{
    return t == GLESC_DTYPE_Q8_0 || t == GLESC_DTYPE_Q4_0;
}

/* An owner's strides (and those of a node aliasing it whole: set_rows) are
 * its dense shape's; a view's are file bytes of whole blocks (graph.h),
 * dimension 0 always one element a step. */
int64_t graph_quant_elem_stride(const glesc_tensor *t, int d)
{
    const quant_type_info *q = quant_type(t->dtype);
    if (graph_op(t->op)->kind != GRAPH_KIND_VIEW) {
        int64_t s = 1;
        for (int i = 0; i < d; i++)
            s *= t->ne[i];
        return s;
    }
    return d == 0 ? 1 : t->nb[d] / q->block_bytes * q->block_size;
}

int64_t graph_quant_elem_offs(const glesc_tensor *t)
{
    const quant_type_info *q = quant_type(t->dtype);
    return (int64_t)t->offs / q->block_bytes * q->block_size;
}

uint64_t graph_row_bytes(glesc_dtype t, int64_t ne0)
{
    if (graph_dtype_quant(t))
        return quant_gpu_row_bytes(t, ne0);
    return (uint64_t)ne0 * graph_dtype_size(t);
}

int64_t graph_nelements(const glesc_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

uint64_t graph_nbytes(const glesc_tensor *t)
{
    return graph_row_bytes(t->dtype, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

uint64_t graph_host_nbytes(const glesc_tensor *t)
{
    if (graph_dtype_quant(t->dtype))
        return glesc_dtype_row_bytes(t->dtype, t->ne[0]) *
               (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    return graph_nbytes(t);
}

void graph_set_contiguous(glesc_tensor *t)
{
    if (graph_dtype_quant(t->dtype)) {
        t->nb[0] = quant_type(t->dtype)->block_bytes; /* a file block; GPU rows are nb[1] */
        t->nb[1] = (int64_t)graph_row_bytes(t->dtype, t->ne[0]);
    } else {
        t->nb[0] = (int64_t)graph_dtype_size(t->dtype);
        t->nb[1] = t->nb[0] * t->ne[0];
    }
    for (int d = 2; d < 4; d++)
        t->nb[d] = t->nb[d - 1] * t->ne[d - 1];
    t->offs = 0;
}

bool graph_is_contiguous(const glesc_tensor *t)
{
    if (graph_dtype_quant(t->dtype)) {
        /* no views of quantized tensors exist: a quantized tensor is a whole owner */
        return t->owner == t;
    }
    int64_t expect = (int64_t)graph_dtype_size(t->dtype);
    for (int d = 0; d < 4; d++) {
        if (t->ne[d] != 1 && t->nb[d] != expect)
            return false;
        expect *= t->ne[d];
    }
    return true;
}

bool graph_same_shape(const glesc_tensor *a, const glesc_tensor *b)
{
    return a->ne[0] == b->ne[0] && a->ne[1] == b->ne[1] && a->ne[2] == b->ne[2] &&
           a->ne[3] == b->ne[3];
}

const char *graph_shape_str(const glesc_tensor *t, char *buf, size_t size)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    int nd = t->ndim < 1 ? 1 : t->ndim;
    for (int d = 0; d < nd && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

static glesc_tensor *tensor_alloc(glesc_context *ctx)
{
    glesc_tensor *t = core_calloc(1, sizeof *t);
    if (!t) {
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "tensor: out of memory");
        return NULL;
    }
    t->ctx = ctx;
    t->owner = t;
    t->order = -1;
    t->kernel = -1;
    t->ne[0] = t->ne[1] = t->ne[2] = t->ne[3] = 1;
    t->ndim = 1;
    return t;
}

glesc_tensor *graph_tensor_alloc(glesc_graph *g)
{
    glesc_tensor *t = tensor_alloc(g->ctx);
    if (!t)
        return NULL;
    t->g = g;
    t->next = g->tensors;
    g->tensors = t;
    g->gen = graph_gen_next();
    return t;
}

/* Writes the zeros a new persistent tensor is due (see glesc_weight_new). */
static glesc_status zeros_now(glesc_tensor *t, const char *call)
{
    glesc_context *ctx = t->ctx;
    glesc_status st = gl_context_bind(ctx, call);
    for (int c = 0; c < t->st.n_chunks && st == GLESC_OK; c++)
        st = gl_buffer_clear(ctx, t->st.chunks[c], 0, t->st.chunks[c]->size);
    if (st != GLESC_OK)
        return st;
    t->zeros_due = false;
    return GLESC_OK;
}

void graph_tensor_filled(glesc_tensor *t)
{
    t->zeros_due = false;
    t->written = true;
    t->live = true;
}

glesc_status graph_hold(glesc_graph *g, glesc_tensor *t)
{
    for (int i = 0; i < g->n_persist; i++)
        if (g->persist[i] == t)
            return GLESC_OK;
    glesc_status st;
    if (t->zeros_due && (st = zeros_now(t, "a graph using a new persistent tensor")) != GLESC_OK)
        return st;
    if (g->n_persist == g->cap_persist) {
        int cap = g->cap_persist ? 2 * g->cap_persist : 16;
        glesc_tensor **p = core_realloc(g->persist, (size_t)cap * sizeof *p);
        if (!p)
            return core_err_set(&g->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph: out of memory");
        g->persist = p;
        g->cap_persist = cap;
    }
    g->persist[g->n_persist++] = t;
    t->refs++;
    return GLESC_OK;
}

static glesc_status check_shape(core_err *err, const char *fn, glesc_dtype dt, int ndim,
                                const int64_t *shape, bool weight)
{
    if (!graph_dtype_ok(dt) && !(weight && graph_dtype_quant(dt)))
        return core_err_set(
            err, GLESC_ERROR_TYPE,
            weight ? "%s: type %s is not a tensor type (f32, f16, bf16, i32, or a "
                     "block type with a GPU layout: q4_0, q4_1, q5_0, q5_1, q8_0, "
                     "q8_1, q2_k .. q6_k, iq4_nl, iq4_xs, mxfp4)"
                   : "%s: type %s is not a tensor type for graph inputs (f32, f16, bf16, i32; "
                     "quantized types are weights: glesc_weight_new)",
            fn, glesc_dtype_name(dt) ? glesc_dtype_name(dt) : "(unknown)");
    if (ndim < 1 || ndim > 4 || !shape)
        return core_err_set(err, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s: ndim %d is not 1..4 (or no shape)", fn, ndim);
    if (graph_dtype_quant(dt) && shape[0] % quant_gpu_block_elems(dt)) {
        sbuf sh;
        sbuf_init(&sh);
        for (int d = 0; d < ndim; d++)
            sbuf_appendf(&sh, "%s%lld", d ? ", " : "", (long long)shape[d]);
        glesc_status st = core_err_set(
            err, GLESC_ERROR_SHAPE,
            "%s: %s tensor [%s]: the row length %lld is not a multiple of %s's block of %d", fn,
            glesc_dtype_name(dt), sbuf_str(&sh) ? sbuf_str(&sh) : "?", (long long)shape[0],
            glesc_dtype_name(dt), quant_gpu_block_elems(dt));
        sbuf_free(&sh);
        return st;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > ((int64_t)1 << 40) / n)
            return core_err_set(err, GLESC_ERROR_SHAPE,
                                "%s: dimension %d has size %lld (must be 1 .. 2^40 in all)", fn, d,
                                (long long)shape[d]);
        n *= shape[d];
    }
    return GLESC_OK;
}

static void set_shape(glesc_tensor *t, glesc_dtype dt, int ndim, const int64_t *shape)
{
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < ndim ? shape[d] : 1;
    graph_set_contiguous(t);
}

GLESC_API glesc_tensor *glesc_tensor_new(glesc_graph *g, glesc_dtype dt, int ndim,
                                         const int64_t *shape)
{
    if (!g)
        return NULL;
    if (check_shape(&g->ctx->err, "glesc_tensor_new", dt, ndim, shape, false) != GLESC_OK)
        return NULL;
    glesc_tensor *t = graph_tensor_alloc(g);
    if (!t)
        return NULL;
    set_shape(t, dt, ndim, shape);
    return t;
}

static glesc_status storage_alloc(glesc_tensor *o, gl_usage usage, bool allow_chunks, bool backed);

/* glesc_weight_new, its buffers backed or not (gl_pool_acquire_unbacked). */
static glesc_tensor *weight_new(glesc_context *ctx, glesc_dtype dt, int ndim, const int64_t *shape,
                                bool backed)
{
    if (!ctx)
        return NULL;
    if (check_shape(&ctx->err, "glesc_weight_new", dt, ndim, shape, true) != GLESC_OK ||
        gl_context_bind(ctx, "glesc_weight_new") != GLESC_OK)
        return NULL;
    glesc_tensor *t = tensor_alloc(ctx);
    if (!t)
        return NULL;
    set_shape(t, dt, ndim, shape);
    t->persistent = true;
    t->refs = 1;
    glesc_status st = storage_alloc(t, GL_USAGE_WEIGHTS, true, backed);
    /* Zeros, so a cache read before it is written reads defined values; but
     * only once something reads it (graph_hold, a read): a weight written
     * from the host first is written once. */
    t->zeros_due = true;
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "glesc_weight_new");
        graph_storage_free(t);
        core_free(t);
        return NULL;
    }
    t->written = true;
    t->live = true;
    return t;
}

GLESC_API glesc_tensor *glesc_weight_new(glesc_context *ctx, glesc_dtype dt, int ndim,
                                         const int64_t *shape)
{
    return weight_new(ctx, dt, ndim, shape, true);
}

glesc_tensor *graph_weight_new_unbacked(glesc_context *ctx, glesc_dtype dt, int ndim,
                                        const int64_t *shape)
{
    return weight_new(ctx, dt, ndim, shape, false);
}

GLESC_API uint64_t glesc_weight_gpu_bytes(const glesc_context *ctx, glesc_dtype dt, int ndim,
                                          const int64_t *shape)
{
    core_err err = {0};
    glesc_status st = check_shape(&err, "glesc_weight_gpu_bytes", dt, ndim, shape, true);
    core_err_clear(&err);
    if (st != GLESC_OK)
        return 0;
    glesc_tensor t = {0};
    set_shape(&t, dt, ndim, shape);
    /* As graph_storage_alloc splits it (persistent buffers are not rounded
     * to a size class). */
    uint64_t limit = ctx ? ctx->caps.max_storage_block_size : UINT64_MAX;
    uint64_t bytes = (graph_nbytes(&t) + 3) & ~(uint64_t)3;
    uint64_t row_bytes = (uint64_t)t.nb[1], rows = (uint64_t)(t.ne[1] * t.ne[2] * t.ne[3]);
    uint64_t chunk_rows = rows;
    if (bytes > limit) {
        if (row_bytes > limit || row_bytes % 4)
            return 0;
        chunk_rows = limit / row_bytes;
    }
    uint64_t total = 0;
    for (uint64_t done = 0; done < rows; done += chunk_rows) {
        uint64_t sz = bytes > limit ? CORE_MIN(chunk_rows, rows - done) * row_bytes : bytes;
        total += sz;
    }
    return total;
}

void graph_free_tensor(glesc_tensor *t)
{
    if (t->owner == t)
        graph_storage_free(t);
    core_free(t->name);
    core_free(t);
}

GLESC_API void glesc_weight_free(glesc_tensor *t)
{
    if (!t || !t->persistent)
        return;
    if (--t->refs <= 0) {
        gl_context_bind_for_free(t->ctx, "glesc_weight_free");
        graph_free_tensor(t);
    }
}

/* ---- storage ---- */

glesc_status graph_storage_alloc(glesc_tensor *o, gl_usage usage, bool allow_chunks)
{
    return storage_alloc(o, usage, allow_chunks, true);
}

static glesc_status storage_alloc(glesc_tensor *o, gl_usage usage, bool allow_chunks, bool backed)
{
    glesc_context *ctx = o->ctx;
    graph_storage *s = &o->st;
    uint64_t bytes = graph_nbytes(o);
    bytes = (bytes + 3) & ~(uint64_t)3; /* shaders address 32-bit words */
    uint64_t limit = ctx->caps.max_storage_block_size;
    uint64_t row_bytes = (uint64_t)o->nb[1];
    int64_t rows = o->ne[1] * o->ne[2] * o->ne[3];
    int n_chunks = 1;
    int64_t chunk_rows = rows;
    if (bytes > limit) {
        char sh[64];
        if (!allow_chunks)
            return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                                "tensor %s %s of %llu bytes exceeds the device's storage-block "
                                "limit of %llu bytes (only persistent tensors are split)",
                                graph_shape_str(o, sh, sizeof sh), glesc_dtype_name(o->dtype),
                                (unsigned long long)bytes, (unsigned long long)limit);
        /* Whole rows per chunk; rows start word-aligned so kernels can index
         * each chunk from 0. */
        if (row_bytes > limit || row_bytes % 4)
            return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                                "tensor %s %s: a row of %llu bytes cannot be split into chunks "
                                "of at most %llu bytes (rows must fit and be a multiple of 4 "
                                "bytes)",
                                graph_shape_str(o, sh, sizeof sh), glesc_dtype_name(o->dtype),
                                (unsigned long long)row_bytes, (unsigned long long)limit);
        chunk_rows = (int64_t)(limit / row_bytes);
        n_chunks = (int)((rows + chunk_rows - 1) / chunk_rows);
    }
    s->chunks = core_calloc((size_t)n_chunks, sizeof *s->chunks);
    if (!s->chunks)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "tensor storage");
    s->n_chunks = n_chunks;
    s->chunk_rows = chunk_rows;
    s->row_bytes = row_bytes;
    s->bytes = bytes;
    for (int c = 0; c < n_chunks; c++) {
        uint64_t sz = bytes;
        if (n_chunks > 1) {
            int64_t r = CORE_MIN(chunk_rows, rows - (int64_t)c * chunk_rows);
            sz = (uint64_t)r * row_bytes;
        }
        glesc_status st = backed ? gl_pool_acquire(ctx, sz, usage, &s->chunks[c])
                                 : gl_pool_acquire_unbacked(ctx, sz, &s->chunks[c]);
        if (st != GLESC_OK) {
            graph_storage_free(o);
            return st;
        }
    }
    return GLESC_OK;
}

void graph_storage_free(glesc_tensor *o)
{
    graph_storage *s = &o->st;
    for (int c = 0; c < s->n_chunks; c++)
        gl_pool_release(o->ctx, s->chunks[c]);
    core_free(s->chunks);
    memset(s, 0, sizeof *s);
    o->live = false;
}

/* Calls fn on each (chunk, offset in chunk, length) piece of [off, off+size). */
static glesc_status storage_walk(glesc_tensor *o, uint64_t off, uint64_t size, bool write,
                                 void *host, const void *chost)
{
    graph_storage *s = &o->st;
    if (!s->n_chunks)
        return core_err_set(&o->ctx->err, GLESC_ERROR_STATE, "tensor has no memory");
    uint64_t chunk_bytes = s->n_chunks > 1 ? (uint64_t)s->chunk_rows * s->row_bytes : s->bytes;
    uint64_t done = 0;
    while (done < size) {
        uint64_t pos = off + done;
        int c = (int)(pos / chunk_bytes);
        if (c >= s->n_chunks)
            return core_err_set(&o->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                                "tensor access at byte %llu beyond its memory",
                                (unsigned long long)pos);
        uint64_t in = pos - (uint64_t)c * chunk_bytes;
        uint64_t n = CORE_MIN(size - done, chunk_bytes - in);
        glesc_status st =
            write ? gl_buffer_upload(o->ctx, s->chunks[c], in, (const char *)chost + done, n)
                  : gl_buffer_download(o->ctx, s->chunks[c], in, (char *)host + done, n);
        if (st != GLESC_OK)
            return st;
        done += n;
    }
    return GLESC_OK;
}

glesc_status graph_storage_read(glesc_tensor *o, uint64_t offset, void *dst, uint64_t size)
{
    return storage_walk(o, offset, size, false, dst, NULL);
}

glesc_status graph_storage_write(glesc_tensor *o, uint64_t offset, const void *src, uint64_t size)
{
    return storage_walk(o, offset, size, true, NULL, src);
}

/* ---- host access ---- */

/* Rows per staging step of a quantized download: about 4 MiB. */
static int64_t quant_step_rows(const glesc_tensor *t)
{
    return CORE_MAX((int64_t)1, (int64_t)((4u << 20) / graph_row_bytes(t->dtype, t->ne[0])));
}

/* Quantized rows back to the file layout (as_f32: dequantized on the CPU). */
static glesc_status quant_read(glesc_tensor *t, void *dst, bool as_f32)
{
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3], step = quant_step_rows(t);
    uint64_t frow = glesc_dtype_row_bytes(t->dtype, t->ne[0]);
    uint64_t grow = graph_row_bytes(t->dtype, t->ne[0]);
    int64_t m = CORE_MIN(step, rows);
    uint32_t *tmp = core_malloc((size_t)(m * grow));
    void *file = as_f32 ? core_malloc((size_t)(m * frow)) : NULL;
    if (!tmp || (as_f32 && !file)) {
        core_free(tmp);
        core_free(file);
        return core_err_set(&t->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_tensor_read");
    }
    glesc_status st = GLESC_OK;
    for (int64_t r = 0; r < rows && st == GLESC_OK; r += step) {
        int64_t n = CORE_MIN(step, rows - r);
        st = graph_storage_read(t, (uint64_t)r * grow, tmp, (uint64_t)n * grow);
        if (st != GLESC_OK)
            break;
        void *out = as_f32 ? file : (char *)dst + r * frow;
        st = quant_gpu_unpack(t->dtype, tmp, t->ne[0], n, out);
        if (st == GLESC_OK && as_f32)
            st = quant_dequantize(t->dtype, file, (float *)dst + r * t->ne[0], n * t->ne[0]);
        if (st != GLESC_OK)
            st = core_err_set(&t->ctx->err, st, "glesc_tensor_read: %s rows cannot be %s",
                              glesc_dtype_name(t->dtype), as_f32 ? "dequantized" : "unpacked");
    }
    core_free(tmp);
    core_free(file);
    return st;
}

/* A glesc_weight_source over the caller's memory. */
static glesc_status mem_read(void *user, uint64_t offset, void *dst, size_t size)
{
    memcpy(dst, (const char *)user + offset, size);
    return GLESC_OK;
}

static bool is_leaf(const glesc_tensor *t)
{
    return t->op == GLESC_OP_NONE;
}

/* Persistent tensors of plain types up to this size are written with one
 * buffer update (glesc_tensor_write). */
#define SMALL_WRITE_BYTES (64u << 10)

GLESC_API glesc_status glesc_tensor_write(glesc_tensor *t, const void *src, size_t size)
{
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_tensor_write: NULL tensor");
    glesc_context *ctx = t->ctx;
    core_err_reset(&ctx->err);
    if (!is_leaf(t))
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "glesc_tensor_write: only inputs and persistent tensors can be "
                            "written (this is a %s node)",
                            glesc_op_name(t->op));
    if (size != graph_host_nbytes(t) || !src)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_tensor_write: %zu bytes given, the tensor%s%s holds %llu%s",
                            size, t->name ? " " : "", t->name ? t->name : "",
                            (unsigned long long)graph_host_nbytes(t),
                            graph_dtype_quant(t->dtype) ? " (file layout)" : "");
    glesc_status st = gl_context_bind(ctx, "glesc_tensor_write");
    if (st != GLESC_OK)
        return st;
    if (t->persistent && !graph_dtype_quant(t->dtype) && size <= SMALL_WRITE_BYTES &&
        t->st.n_chunks == 1) {
        /* a few values (a step's token ids and positions): straight into
         * the buffer, through the host-write guard, without the bulk
         * upload's staging buffer, slots and threads */
        if ((st = graph_storage_write(t, 0, src, size)) == GLESC_OK)
            graph_tensor_filled(t);
        return st;
    }
    if (t->persistent) {
        /* repacked and uploaded in pieces, on all cores where it is large */
        glesc_weight_source ws = {t, mem_read, (void *)(uintptr_t)src};
        if ((st = graph_weights_write(ctx, &ws, 1, NULL, NULL)) != GLESC_OK)
            core_err_prefix(&ctx->err, "glesc_tensor_write");
        return st;
    }
    if (!t->st.n_chunks && (st = graph_storage_alloc(t, GL_USAGE_ACTIVATIONS, false)) != GLESC_OK)
        return st;
    if ((st = graph_storage_write(t, 0, src, size)) != GLESC_OK)
        return st;
    t->written = true;
    t->live = true;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_tensor_write_f32(glesc_tensor *t, const float *src, size_t n)
{
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_tensor_write_f32: NULL");
    core_err_reset(&t->ctx->err);
    if (n != (size_t)graph_nelements(t) || !src)
        return core_err_set(&t->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_tensor_write_f32: %zu elements given, the tensor holds %lld", n,
                            (long long)graph_nelements(t));
    size_t es = graph_dtype_size(t->dtype);
    if (t->dtype == GLESC_DTYPE_F32)
        return glesc_tensor_write(t, src, n * 4);
    if (graph_dtype_quant(t->dtype)) {
        /* quantized with the CPU reference quantizer, then written as a file would be */
        size_t fb = (size_t)graph_host_nbytes(t);
        void *q = core_malloc(fb);
        if (!q)
            return core_err_set(&t->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_tensor_write_f32");
        glesc_status st = quant_quantize(t->dtype, src, q, (int64_t)n);
        if (st != GLESC_OK)
            st = core_err_set(&t->ctx->err, st, "glesc_tensor_write_f32: %s: %s",
                              glesc_dtype_name(t->dtype), glesc_last_errmsg());
        else
            st = glesc_tensor_write(t, q, fb);
        core_free(q);
        return st;
    }
    void *tmp = core_malloc(n * es + 1);
    if (!tmp)
        return core_err_set(&t->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_tensor_write_f32");
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == GLESC_DTYPE_F16)
            ((uint16_t *)tmp)[i] = quant_f32_to_f16(src[i]);
        else if (t->dtype == GLESC_DTYPE_BF16)
            ((uint16_t *)tmp)[i] = quant_f32_to_bf16(src[i]);
        else
            ((int32_t *)tmp)[i] = (int32_t)src[i];
    }
    glesc_status st = glesc_tensor_write(t, tmp, n * es);
    core_free(tmp);
    return st;
}

static float elem_f32(glesc_dtype dt, const unsigned char *p)
{
    switch (dt) {
    case GLESC_DTYPE_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case GLESC_DTYPE_I32: {
        int32_t i;
        memcpy(&i, p, 4);
        return (float)i;
    }
    case GLESC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return quant_f16_to_f32(h);
    }
    case GLESC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return quant_bf16_to_f32(h);
    }
    default:
        return 0;
    }
}

/* Reads t's elements in contiguous order as raw bytes (as_f32: converted). */
static glesc_status tensor_gather(glesc_tensor *t, void *dst, bool as_f32)
{
    glesc_context *ctx = t->ctx;
    glesc_status bst = gl_context_bind(ctx, as_f32 ? "glesc_tensor_read_f32" : "glesc_tensor_read");
    if (bst != GLESC_OK)
        return bst;
    glesc_tensor *o = t->owner;
    glesc_status st;
    if (o->zeros_due && (st = zeros_now(o, "glesc_tensor_read")) != GLESC_OK)
        return st;
    if (!o->live || !o->st.n_chunks)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "glesc_tensor_read: the tensor (%s) holds no values: read inputs, "
                            "persistent tensors and outputs of the last compute",
                            glesc_op_name(t->op));
    if (graph_dtype_quant(t->dtype))
        return quant_read(t, dst, as_f32);
    size_t es = graph_dtype_size(t->dtype);
    int64_t n = graph_nelements(t);
    /* The byte range the view touches (strides may be zero, never negative). */
    uint64_t lo = t->offs, hi = t->offs + es;
    for (int d = 0; d < 4; d++)
        hi += (uint64_t)(t->ne[d] - 1) * (uint64_t)t->nb[d];
    /* contiguous and already in the asked form (raw bytes, or f32 as f32):
     * one read of exactly its range, no staging copy, no conversion */
    if (graph_is_contiguous(t) && (!as_f32 || t->dtype == GLESC_DTYPE_F32))
        return graph_storage_read(o, lo, dst, (uint64_t)n * es);
    unsigned char *raw = core_malloc((size_t)(hi - lo));
    if (!raw)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_tensor_read");
    st = graph_storage_read(o, lo, raw, hi - lo);
    if (st == GLESC_OK) {
        int64_t i = 0;
        for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < t->ne[0]; i0++, i++) {
                        const unsigned char *p =
                            raw + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
                        if (as_f32)
                            ((float *)dst)[i] = elem_f32(t->dtype, p);
                        else
                            memcpy((char *)dst + (size_t)i * es, p, es);
                    }
    }
    core_free(raw);
    return st;
}

glesc_status graph_tensor_gather_f32(glesc_tensor *t, float *dst)
{
    return tensor_gather(t, dst, true);
}

GLESC_API glesc_status glesc_tensor_read(glesc_tensor *t, void *dst, size_t size)
{
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_tensor_read: NULL tensor");
    core_err_reset(&t->ctx->err);
    if (size != graph_host_nbytes(t) || !dst)
        return core_err_set(&t->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_tensor_read: %zu bytes asked, the tensor holds %llu%s", size,
                            (unsigned long long)graph_host_nbytes(t),
                            graph_dtype_quant(t->dtype) ? " (file layout)" : "");
    return tensor_gather(t, dst, false);
}

GLESC_API glesc_status glesc_tensor_read_f32(glesc_tensor *t, float *dst, size_t n)
{
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_tensor_read_f32: NULL");
    core_err_reset(&t->ctx->err);
    if (n != (size_t)graph_nelements(t) || !dst)
        return core_err_set(&t->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_tensor_read_f32: %zu elements asked, the tensor holds %lld", n,
                            (long long)graph_nelements(t));
    return tensor_gather(t, dst, true);
}

GLESC_API glesc_dtype glesc_tensor_dtype(const glesc_tensor *t)
{
    return t->dtype;
}

GLESC_API int glesc_tensor_ndim(const glesc_tensor *t)
{
    return t->ndim;
}

GLESC_API int64_t glesc_tensor_dim(const glesc_tensor *t, int d)
{
    return d >= 0 && d < 4 ? t->ne[d] : 1;
}

GLESC_API int64_t glesc_tensor_nelements(const glesc_tensor *t)
{
    return graph_nelements(t);
}

GLESC_API glesc_op glesc_tensor_op(const glesc_tensor *t)
{
    return t->op;
}

GLESC_API void glesc_tensor_set_name(glesc_tensor *t, const char *name)
{
    if (!t)
        return;
    core_free(t->name);
    t->name = name ? core_strdup(name) : NULL;
}
