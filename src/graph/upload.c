/*
 * upload.c — filling persistent tensors from the host at the speed of
 * memory (glesc_weights_write, and glesc_tensor_write of a persistent
 * tensor): a model's weights go from the file to the GPU in one pass.
 *
 * Each tensor's buffers (its row chunks) are cut into pieces of about a MiB
 * (whole rows for block types). Worker threads take the pieces in order;
 * each reads its piece through the source (a pread of the file, a memcpy
 * from memory) and repacks block types straight into the destination, or
 * reads plain types straight into it. The destination is, by the upload
 * path (gl.h): the tensor's buffer itself, mapped (map); a slot of a
 * persistently mapped staging buffer that the GPU then copies (staging); a
 * slot of host memory given to glBufferSubData (subdata). GL calls happen
 * only on the calling thread, which has the context: it maps the buffers
 * ahead of the workers (giving those of graph_weight_new_unbacked their
 * memory first, so the driver's allocation, which llvmpipe spends
 * zero-filling, overlaps the workers filling the buffers before), copies
 * or uploads filled slots, unmaps finished buffers, and reports the
 * tensors done in order. Workers never run more than a window of bytes
 * ahead of the first piece not yet on its way to the GPU, which bounds the
 * buffers mapped (or the host memory) in flight; the next tensors' reading
 * and repacking overlaps the current one's upload.
 *
 * Without workers (small writes, or a machine with one core) the calling
 * thread does the pieces itself, in the same loop.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "quant/quant.h"

#define PIECE_BYTES (1u << 20)  /* GPU bytes a piece aims at */
#define WINDOW_MIN (64u << 20)  /* bytes workers may run ahead of what is done */
#define MAX_WORKERS 16          /* beyond this the copies are memory-bound */
#define INLINE_BYTES (4u << 20) /* below: no threads */
/* File bytes read into a worker's scratch at once before they are
 * repacked: small enough to stay in a core's L2 while it is repacked */
#define SCRATCH_BYTES (256u << 10)

typedef struct up_piece {
    int src, chunk;
    uint64_t host_off, host_len; /* of the source's contents */
    uint64_t gpu_off, gpu_len;   /* in the chunk's buffer (gpu_len ≥ host_len: padding) */
    int64_t rows;                /* block types: rows of the piece (else 0) */
    uint64_t pos;                /* GPU bytes of every piece before it */
} up_piece;

typedef struct up_chunk {
    gl_buffer *buf;
    int src, n_pieces, n_done;
    uint64_t pos; /* of its first piece */
    void *ptr;    /* map path: mapped */
    bool closed;  /* every piece is on its way to the GPU (unmapped, copied) */
} up_chunk;

typedef enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_FILLED, SLOT_COPIED } slot_state;
typedef struct up_slot {
    char *mem;
    uint64_t off; /* staging: in the staging buffer */
    int piece;
    slot_state state;
    GLsync fence; /* staging: after its copy */
} up_slot;

typedef struct up {
    glesc_context *ctx;
    const glesc_weight_source *src;
    int n_src;
    glesc_weights_done_fn done;
    void *done_user;
    gl_upload_path path;
    up_piece *pieces;
    up_chunk *chunks;
    up_slot *slots;
    int n_pieces, n_chunks, n_slots;
    uint64_t slot_bytes, scratch_bytes, window;
    char *slot_mem; /* subdata: the slots' host memory */
    gl_staging staging;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, gl_cv;
    int next_piece, next_map, n_reported;
    bool *piece_ok;    /* on its way to the GPU */
    int first_undone;  /* pieces before it are all ok */
    uint64_t pos_done; /* GPU bytes before that piece: the window starts there */
    int busy;          /* workers inside a piece */
    bool stop;
    glesc_status st;
    char msg[512];
    /* ns: workers reading, repacking; the GL thread giving buffers their
     * data stores (gl_buffer_back), in other GL calls */
    uint64_t ns_read, ns_pack, ns_back, ns_gl;
} up;

/* Records the first failure and stops everyone. Under the lock. */
static void fail(up *u, glesc_status st, const char *fmt, ...) CORE_PRINTF(3, 4);
static void fail(up *u, glesc_status st, const char *fmt, ...)
{
    if (u->st == GLESC_OK) {
        u->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->msg, sizeof u->msg, fmt, ap);
        va_end(ap);
    }
    u->stop = true;
    pthread_cond_broadcast(&u->work_cv);
    pthread_cond_broadcast(&u->gl_cv);
}

static const char *src_name(const up *u, int i, char *buf, size_t size)
{
    const glesc_tensor *t = u->src[i].tensor;
    if (t->name)
        snprintf(buf, size, "'%s'", t->name);
    else
        snprintf(buf, size, "%d of %d", i, u->n_src);
    return buf;
}

/* ---- Planning ---- */

/* Whether t's file bytes are repacked on the way (through a scratch), or
 * read straight into GPU-visible memory. */
static bool repacked(glesc_dtype t)
{
    return graph_dtype_quant(t) && !quant_gpu_same_as_file(t);
}

static glesc_status plan(up *u)
{
    glesc_context *ctx = u->ctx;
    int np = 0, nc = 0;
    for (int i = 0; i < u->n_src; i++) {
        const glesc_tensor *t = u->src[i].tensor;
        const graph_storage *s = &t->st;
        nc += s->n_chunks;
        uint64_t per =
            graph_dtype_quant(t->dtype)
                ? (uint64_t)CORE_MAX((int64_t)1, PIECE_BYTES / (int64_t)s->row_bytes) * s->row_bytes
                : PIECE_BYTES;
        for (int c = 0; c < s->n_chunks; c++)
            np += (int)((s->chunks[c]->requested + per - 1) / per);
    }
    u->pieces = core_calloc((size_t)np + 1, sizeof *u->pieces);
    u->piece_ok = core_calloc((size_t)np + 1, sizeof *u->piece_ok);
    u->chunks = core_calloc((size_t)nc + 1, sizeof *u->chunks);
    if (!u->pieces || !u->piece_ok || !u->chunks)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_weights_write");
    uint64_t pos = 0;
    for (int i = 0; i < u->n_src; i++) {
        const glesc_tensor *t = u->src[i].tensor;
        const graph_storage *s = &t->st;
        bool quant = graph_dtype_quant(t->dtype);
        uint64_t frow = quant ? glesc_dtype_row_bytes(t->dtype, t->ne[0]) : s->row_bytes;
        uint64_t host_total = graph_host_nbytes(t);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        for (int c = 0; c < s->n_chunks; c++) {
            up_chunk *ch = &u->chunks[u->n_chunks];
            ch->buf = s->chunks[c];
            ch->src = i;
            ch->pos = pos;
            /* a chunk holds chunk_rows whole rows; host and GPU offsets of
             * its first row */
            int64_t r0 = (int64_t)c * s->chunk_rows;
            int64_t r1 = s->n_chunks > 1 ? CORE_MIN(rows, r0 + s->chunk_rows) : rows;
            uint64_t host0 = (uint64_t)r0 * frow;
            uint64_t host1 = s->n_chunks > 1 ? (uint64_t)r1 * frow : host_total;
            uint64_t gpu_len = ch->buf->requested; /* whole words */
            if (quant) {
                int64_t step = CORE_MAX((int64_t)1, PIECE_BYTES / (int64_t)s->row_bytes);
                for (int64_t r = r0; r < r1; r += step) {
                    up_piece *p = &u->pieces[u->n_pieces++];
                    p->src = i;
                    p->chunk = u->n_chunks;
                    p->rows = CORE_MIN(step, r1 - r);
                    p->host_off = (uint64_t)r * frow;
                    p->host_len = (uint64_t)p->rows * frow;
                    p->gpu_off = (uint64_t)(r - r0) * s->row_bytes;
                    p->gpu_len = (uint64_t)p->rows * s->row_bytes;
                    p->pos = pos;
                    pos += p->gpu_len;
                    ch->n_pieces++;
                    if (repacked(t->dtype))
                        u->scratch_bytes = CORE_MAX(
                            u->scratch_bytes, CORE_MIN(p->host_len, CORE_MAX(SCRATCH_BYTES, frow)));
                    u->slot_bytes = CORE_MAX(u->slot_bytes, p->gpu_len);
                }
            } else {
                for (uint64_t off = 0; off < gpu_len; off += PIECE_BYTES) {
                    up_piece *p = &u->pieces[u->n_pieces++];
                    p->src = i;
                    p->chunk = u->n_chunks;
                    p->gpu_off = off;
                    p->gpu_len = CORE_MIN((uint64_t)PIECE_BYTES, gpu_len - off);
                    p->host_off = host0 + off;
                    p->host_len =
                        host0 + off >= host1 ? 0 : CORE_MIN(p->gpu_len, host1 - (host0 + off));
                    p->pos = pos;
                    pos += p->gpu_len;
                    ch->n_pieces++;
                    u->slot_bytes = CORE_MAX(u->slot_bytes, p->gpu_len);
                }
            }
            u->n_chunks++;
        }
    }
    return GLESC_OK;
}

/* ---- Pieces (any thread, without the lock) ---- */

/* Reads bytes [off, off + len) of source i into dst; on failure the
 * message in msg: the source's own (it names what it reads), else one
 * naming the tensor. */
static glesc_status read_range(up *u, int i, uint64_t off, void *dst, uint64_t len, char *msg,
                               size_t msg_size)
{
    const glesc_weight_source *s = &u->src[i];
    core_err_reset(NULL);
    glesc_status st = s->read(s->user, off, dst, (size_t)len);
    if (st == GLESC_OK)
        return GLESC_OK;
    char nm[160];
    if (*glesc_last_errmsg())
        snprintf(msg, msg_size, "%s", glesc_last_errmsg());
    else
        snprintf(msg, msg_size, "tensor %s: reading bytes %llu..%llu failed (%s)",
                 src_name(u, i, nm, sizeof nm), (unsigned long long)off,
                 (unsigned long long)(off + len), glesc_status_name(st));
    return st;
}

/* Reads and repacks piece p into dst; scratch holds a block type's file
 * bytes. On failure returns the status with the message in msg: the
 * source's own (it names what it reads), else one naming the tensor. */
static glesc_status run_piece(up *u, int p, char *dst, char *scratch, char *msg, size_t msg_size,
                              uint64_t *ns_read, uint64_t *ns_pack)
{
    const up_piece *pc = &u->pieces[p];
    const glesc_weight_source *s = &u->src[pc->src];
    const glesc_tensor *t = s->tensor;
    char nm[160];
    if (repacked(t->dtype)) {
        /* a few rows at a time through the scratch, which stays in cache */
        uint64_t frow = pc->host_len / (uint64_t)pc->rows;
        uint64_t grow = pc->gpu_len / (uint64_t)pc->rows;
        int64_t step = (int64_t)CORE_MAX((uint64_t)1, SCRATCH_BYTES / frow);
        for (int64_t r = 0; r < pc->rows; r += step) {
            int64_t n = CORE_MIN(step, pc->rows - r);
            uint64_t off = pc->host_off + (uint64_t)r * frow;
            uint64_t t0 = core_time_ns();
            glesc_status st =
                read_range(u, pc->src, off, scratch, (uint64_t)n * frow, msg, msg_size);
            uint64_t t1 = core_time_ns();
            *ns_read += t1 - t0;
            if (st != GLESC_OK)
                return st;
            st = quant_gpu_repack(t->dtype, scratch, t->ne[0], n,
                                  (uint32_t *)(void *)(dst + (uint64_t)r * grow));
            *ns_pack += core_time_ns() - t1;
            if (st != GLESC_OK) {
                snprintf(msg, msg_size, "tensor %s: %s rows cannot be repacked",
                         src_name(u, pc->src, nm, sizeof nm), glesc_dtype_name(t->dtype));
                return st;
            }
        }
        return GLESC_OK;
    }
    /* plain types and blocks the GPU keeps as they are: straight into dst */
    uint64_t t0 = core_time_ns();
    glesc_status st = pc->host_len
                          ? read_range(u, pc->src, pc->host_off, dst, pc->host_len, msg, msg_size)
                          : GLESC_OK;
    uint64_t t1 = core_time_ns();
    *ns_read += t1 - t0;
    if (st != GLESC_OK)
        return st;
    if (pc->gpu_len > pc->host_len)
        memset(dst + pc->host_len, 0, (size_t)(pc->gpu_len - pc->host_len));
    *ns_pack += core_time_ns() - t1;
    return GLESC_OK;
}

/* ---- Scheduling (under the lock) ---- */

/* The next piece, when a worker may take it now: inside the window, its
 * buffer mapped (map) or a slot free (staging, subdata). */
static bool take(up *u, int *piece, int *slot)
{
    if (u->stop || u->next_piece >= u->n_pieces)
        return false;
    const up_piece *pc = &u->pieces[u->next_piece];
    if (pc->pos >= u->pos_done + u->window && pc->pos > u->pos_done)
        return false;
    *slot = -1;
    if (u->path == GL_UPLOAD_MAP) {
        if (!u->chunks[pc->chunk].ptr)
            return false;
    } else {
        for (int i = 0; i < u->n_slots && *slot < 0; i++)
            if (u->slots[i].state == SLOT_FREE)
                *slot = i;
        if (*slot < 0)
            return false;
        u->slots[*slot].state = SLOT_FILLING;
        u->slots[*slot].piece = u->next_piece;
    }
    *piece = u->next_piece++;
    u->busy++;
    return true;
}

/* Piece p is on its way to the GPU: the window moves on. */
static void piece_ok(up *u, int p)
{
    u->chunks[u->pieces[p].chunk].n_done++;
    u->piece_ok[p] = true;
    while (u->first_undone < u->n_pieces && u->piece_ok[u->first_undone])
        u->first_undone++;
    u->pos_done = u->first_undone < u->n_pieces ? u->pieces[u->first_undone].pos : UINT64_MAX / 2;
    pthread_cond_broadcast(&u->work_cv);
}

static void piece_done(up *u, int piece, int slot, glesc_status st, const char *msg)
{
    u->busy--;
    if (st != GLESC_OK) {
        fail(u, st, "%s", msg);
    } else if (slot >= 0) {
        u->slots[slot].state = SLOT_FILLED;
    } else {
        piece_ok(u, piece);
    }
    pthread_cond_signal(&u->gl_cv);
}

static char *piece_dst(up *u, int piece, int slot)
{
    if (slot >= 0)
        return u->slots[slot].mem;
    const up_piece *pc = &u->pieces[piece];
    return (char *)u->chunks[pc->chunk].ptr + pc->gpu_off;
}

typedef struct worker {
    up *u;
    pthread_t th;
    char *scratch;
    uint64_t ns_read, ns_pack;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    up *u = w->u;
    char msg[512];
    pthread_mutex_lock(&u->mu);
    for (;;) {
        int piece, slot;
        if (!take(u, &piece, &slot)) {
            if (u->stop || u->next_piece >= u->n_pieces)
                break;
            pthread_cond_wait(&u->work_cv, &u->mu);
            continue;
        }
        char *dst = piece_dst(u, piece, slot);
        pthread_mutex_unlock(&u->mu);
        glesc_status st =
            run_piece(u, piece, dst, w->scratch, msg, sizeof msg, &w->ns_read, &w->ns_pack);
        pthread_mutex_lock(&u->mu);
        piece_done(u, piece, slot, st, msg);
    }
    pthread_mutex_unlock(&u->mu);
    core_err_clear(NULL); /* a source's message on this thread was copied */
    return NULL;
}

/* ---- The GL thread ---- */

/* One round of GL work; true when it did something. Called with the lock,
 * which it drops around GL calls. */
static bool gl_round(up *u)
{
    glesc_context *ctx = u->ctx;
    bool did = false;
    /* map ahead of the workers, inside the window */
    while (u->path == GL_UPLOAD_MAP && !u->stop && u->next_map < u->n_chunks &&
           (u->chunks[u->next_map].pos < u->pos_done + u->window ||
            u->chunks[u->next_map].pos == u->pos_done)) {
        up_chunk *ch = &u->chunks[u->next_map++];
        pthread_mutex_unlock(&u->mu);
        uint64_t t0 = core_time_ns();
        void *ptr = NULL;
        glesc_status st = gl_buffer_back(ctx, ch->buf);
        uint64_t t1 = core_time_ns();
        if (st == GLESC_OK)
            st = gl_buffer_map_write(ctx, ch->buf, &ptr);
        u->ns_back += t1 - t0;
        u->ns_gl += core_time_ns() - t1;
        pthread_mutex_lock(&u->mu);
        if (st != GLESC_OK) {
            char nm[160];
            fail(u, st, "tensor %s: %s", src_name(u, ch->src, nm, sizeof nm),
                 glesc_context_errmsg(ctx));
        } else {
            ch->ptr = ptr;
            pthread_cond_broadcast(&u->work_cv);
        }
        did = true;
    }
    /* filled slots go to the GPU */
    for (int i = 0; i < u->n_slots && !u->stop; i++) {
        up_slot *sl = &u->slots[i];
        if (sl->state != SLOT_FILLED)
            continue;
        const up_piece *pc = &u->pieces[sl->piece];
        up_chunk *ch = &u->chunks[pc->chunk];
        pthread_mutex_unlock(&u->mu);
        uint64_t t0 = core_time_ns();
        glesc_status st;
        if (u->path == GL_UPLOAD_STAGING) {
            st = gl_staging_copy(ctx, &u->staging, sl->off, ch->buf, pc->gpu_off, pc->gpu_len);
            if (st == GLESC_OK && !(sl->fence = gl_fence_insert(ctx)))
                st = ctx->err.status;
        } else {
            st = gl_buffer_upload(ctx, ch->buf, pc->gpu_off, sl->mem, pc->gpu_len);
        }
        u->ns_gl += core_time_ns() - t0;
        pthread_mutex_lock(&u->mu);
        if (st != GLESC_OK) {
            char nm[160];
            fail(u, st, "tensor %s: %s", src_name(u, ch->src, nm, sizeof nm),
                 glesc_context_errmsg(ctx));
            break;
        }
        sl->state = u->path == GL_UPLOAD_STAGING ? SLOT_COPIED : SLOT_FREE;
        piece_ok(u, sl->piece);
        did = true;
    }
    /* staging slots whose copies finished are free again */
    for (int i = 0; i < u->n_slots; i++) {
        up_slot *sl = &u->slots[i];
        if (sl->state != SLOT_COPIED)
            continue;
        bool signalled = false;
        pthread_mutex_unlock(&u->mu);
        glesc_status st = gl_fence_wait(ctx, sl->fence, 0, &signalled);
        pthread_mutex_lock(&u->mu);
        if (st != GLESC_OK) {
            fail(u, st, "staging: %s", glesc_context_errmsg(ctx));
            break;
        }
        if (signalled) {
            gl_fence_delete(sl->fence);
            sl->fence = NULL;
            sl->state = SLOT_FREE;
            pthread_cond_broadcast(&u->work_cv);
            did = true;
        }
    }
    /* finished buffers: unmapped (map) or closed */
    for (int c = 0; c < u->n_chunks && !u->stop; c++) {
        up_chunk *ch = &u->chunks[c];
        if (ch->closed || ch->n_done < ch->n_pieces)
            continue;
        if (ch->ptr) {
            pthread_mutex_unlock(&u->mu);
            uint64_t t0 = core_time_ns();
            glesc_status st = gl_buffer_unmap(ctx, ch->buf);
            u->ns_gl += core_time_ns() - t0;
            pthread_mutex_lock(&u->mu);
            ch->ptr = NULL;
            if (st != GLESC_OK) {
                char nm[160];
                fail(u, st, "tensor %s: %s", src_name(u, ch->src, nm, sizeof nm),
                     glesc_context_errmsg(ctx));
                break;
            }
        }
        ch->closed = true;
        did = true;
    }
    return did;
}

/* Reports the sources whose buffers are all closed, in order. */
static bool report(up *u, int *chunk_cursor)
{
    bool did = false;
    while (!u->stop && u->n_reported < u->n_src) {
        int i = u->n_reported, c = *chunk_cursor;
        int end = c;
        while (end < u->n_chunks && u->chunks[end].src == i)
            end++;
        for (int k = c; k < end; k++)
            if (!u->chunks[k].closed)
                return did;
        *chunk_cursor = end;
        u->n_reported++;
        graph_tensor_filled(u->src[i].tensor);
        did = true;
        if (u->done) {
            pthread_mutex_unlock(&u->mu);
            bool cancel = u->done(u->done_user, i);
            pthread_mutex_lock(&u->mu);
            if (cancel) {
                char nm[160];
                fail(u, GLESC_ERROR_CANCELLED, "cancelled by the callback after tensor %s",
                     src_name(u, i, nm, sizeof nm));
            }
        }
    }
    return did;
}

/* Waits for the oldest staging copy when workers need a slot and none is
 * free or about to be. Called with the lock. */
static bool wait_for_slot(up *u)
{
    int oldest = -1;
    for (int i = 0; i < u->n_slots; i++) {
        if (u->slots[i].state == SLOT_FREE || u->slots[i].state == SLOT_FILLED)
            return false;
        if (u->slots[i].state == SLOT_COPIED && oldest < 0)
            oldest = i;
    }
    if (oldest < 0)
        return false;
    GLsync f = u->slots[oldest].fence;
    bool signalled;
    pthread_mutex_unlock(&u->mu);
    glesc_status st = gl_fence_wait(u->ctx, f, 1000000, &signalled);
    pthread_mutex_lock(&u->mu);
    if (st != GLESC_OK)
        fail(u, st, "staging: %s", glesc_context_errmsg(u->ctx));
    return true;
}

static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_WORKERS ? MAX_WORKERS : (int)n;
}

static glesc_status setup_slots(up *u, int n_workers)
{
    glesc_context *ctx = u->ctx;
    if (u->path == GL_UPLOAD_MAP)
        return GLESC_OK;
    u->n_slots = 2 * CORE_MAX(n_workers, 1);
    u->slots = core_calloc((size_t)u->n_slots, sizeof *u->slots);
    if (!u->slots)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_weights_write: slots");
    uint64_t stride = (u->slot_bytes + 255) & ~(uint64_t)255;
    char *base;
    if (u->path == GL_UPLOAD_STAGING) {
        glesc_status st = gl_staging_create(ctx, stride * (uint64_t)u->n_slots, &u->staging);
        if (st != GLESC_OK)
            return st;
        base = u->staging.ptr;
    } else {
        base = u->slot_mem = core_malloc((size_t)(stride * (uint64_t)u->n_slots));
        if (!base)
            return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY,
                                "glesc_weights_write: %d slots of %llu bytes", u->n_slots,
                                (unsigned long long)stride);
    }
    for (int i = 0; i < u->n_slots; i++) {
        u->slots[i].off = stride * (uint64_t)i;
        u->slots[i].mem = base + u->slots[i].off;
    }
    return GLESC_OK;
}

static glesc_status check_sources(glesc_context *ctx, const glesc_weight_source *src, int n)
{
    if (n < 0 || (n > 0 && !src))
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_weights_write: %d sources at %p", n, (const void *)src);
    for (int i = 0; i < n; i++) {
        const glesc_tensor *t = src[i].tensor;
        if (!t || !src[i].read || !t->persistent || t->ctx != ctx || !t->st.n_chunks)
            return core_err_set(
                &ctx->err, GLESC_ERROR_INVALID_ARGUMENT, "glesc_weights_write: source %d: %s", i,
                !t || !src[i].read                  ? "no tensor or no read function"
                : !t->persistent || !t->st.n_chunks ? "not a persistent tensor (glesc_weight_new)"
                                                    : "a tensor of another context");
    }
    return GLESC_OK;
}

glesc_status graph_weights_write(glesc_context *ctx, const glesc_weight_source *src, int n,
                                 glesc_weights_done_fn done, void *user)
{
    glesc_status st = check_sources(ctx, src, n);
    if (st != GLESC_OK || n == 0)
        return st;
    up u = {.ctx = ctx, .src = src, .n_src = n, .done = done, .done_user = user};
    u.path = gl_upload_path_get(ctx);
    if ((st = plan(&u)) != GLESC_OK)
        goto out_free;
    uint64_t total =
        u.n_pieces ? u.pieces[u.n_pieces - 1].pos + u.pieces[u.n_pieces - 1].gpu_len : 0;
    int n_workers = total < INLINE_BYTES ? 0 : CORE_MIN(cpu_count(), u.n_pieces);
    u.window = CORE_MAX((uint64_t)WINDOW_MIN, 4ull * (uint64_t)n_workers * PIECE_BYTES);
    if ((st = setup_slots(&u, n_workers)) != GLESC_OK)
        goto out_free;
    /* The map path gives each buffer its data store just before it maps it
     * (gl_round), the others all of them now: a copy into a buffer needs
     * its store, and their drivers' allocations are cheap. */
    for (int c = 0; c < u.n_chunks && u.path != GL_UPLOAD_MAP; c++)
        if ((st = gl_buffer_back(ctx, u.chunks[c].buf)) != GLESC_OK) {
            char nm[160];
            core_err_prefix(&ctx->err, "tensor %s", src_name(&u, u.chunks[c].src, nm, sizeof nm));
            goto out_free;
        }
    worker *w = core_calloc((size_t)n_workers + 1, sizeof *w);
    char *inline_scratch = u.scratch_bytes ? core_malloc((size_t)u.scratch_bytes) : NULL;
    if (!w || (u.scratch_bytes && !inline_scratch)) {
        core_free(w);
        core_free(inline_scratch);
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_weights_write: workers");
        goto out_free;
    }
    pthread_mutex_init(&u.mu, NULL);
    pthread_cond_init(&u.work_cv, NULL);
    pthread_cond_init(&u.gl_cv, NULL);
    uint64_t t_start = core_time_ns();
    int started = 0;
    for (int i = 0; i < n_workers; i++) {
        w[i].u = &u;
        if (u.scratch_bytes && !(w[i].scratch = core_malloc((size_t)u.scratch_bytes)))
            break;
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
            core_free(w[i].scratch);
            w[i].scratch = NULL;
            break;
        }
        started++;
    }
    /* fewer workers than asked (no memory, no threads): the others and
     * this thread do the work */
    uint64_t ns_read = 0, ns_pack = 0;
    char msg[512];
    int chunk_cursor = 0;
    pthread_mutex_lock(&u.mu);
    for (;;) {
        bool did = gl_round(&u);
        did |= report(&u, &chunk_cursor);
        if (u.n_reported == u.n_src || (u.stop && u.busy == 0))
            break;
        int piece, slot;
        if (started == 0 && take(&u, &piece, &slot)) {
            char *dst = piece_dst(&u, piece, slot);
            pthread_mutex_unlock(&u.mu);
            glesc_status pst =
                run_piece(&u, piece, dst, inline_scratch, msg, sizeof msg, &ns_read, &ns_pack);
            pthread_mutex_lock(&u.mu);
            piece_done(&u, piece, slot, pst, msg);
            continue;
        }
        if (did)
            continue;
        if (u.path == GL_UPLOAD_STAGING && wait_for_slot(&u))
            continue;
        pthread_cond_wait(&u.gl_cv, &u.mu);
    }
    u.stop = true;
    pthread_cond_broadcast(&u.work_cv);
    pthread_mutex_unlock(&u.mu);
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].th, NULL);
        ns_read += w[i].ns_read;
        ns_pack += w[i].ns_pack;
    }
    for (int i = 0; i < n_workers; i++)
        core_free(w[i].scratch);
    core_free(w);
    core_free(inline_scratch);
    pthread_cond_destroy(&u.gl_cv);
    pthread_cond_destroy(&u.work_cv);
    pthread_mutex_destroy(&u.mu);
    /* buffers still mapped after a failure */
    for (int c = 0; c < u.n_chunks; c++)
        if (u.chunks[c].ptr)
            gl_buffer_unmap(ctx, u.chunks[c].buf);
    st = u.st;
    if (st != GLESC_OK) {
        core_err_set(&ctx->err, st, "%s", u.msg);
    } else if (total >= INLINE_BYTES) {
        uint64_t ns = core_time_ns() - t_start;
        core_log(CORE_LOG_INFO,
                 "uploaded %d tensors, %.1f MiB in %.3f s (%.2f GB/s; path %s, %d workers: "
                 "reading %.3f s, repacking %.3f s; GL calls %.3f s, of which allocating "
                 "%.3f s)",
                 n, (double)total / (1 << 20), (double)ns * 1e-9,
                 (double)total / (double)(ns ? ns : 1), gl_upload_path_name(u.path), started,
                 (double)ns_read * 1e-9, (double)ns_pack * 1e-9,
                 (double)(u.ns_gl + u.ns_back) * 1e-9, (double)u.ns_back * 1e-9);
    }
out_free:
    for (int i = 0; i < u.n_slots; i++)
        gl_fence_delete(u.slots[i].fence);
    gl_staging_destroy(ctx, &u.staging);
    core_free(u.slot_mem);
    core_free(u.slots);
    core_free(u.pieces);
    core_free(u.piece_ok);
    core_free(u.chunks);
    return st;
}

GLESC_API glesc_status glesc_weights_write(glesc_context *ctx, const glesc_weight_source *src,
                                           int n, glesc_weights_done_fn done, void *user)
{
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_weights_write: NULL context");
    core_err_reset(&ctx->err);
    glesc_status st = gl_context_bind(ctx, "glesc_weights_write");
    if (st != GLESC_OK)
        return st;
    return graph_weights_write(ctx, src, n, done, user);
}
