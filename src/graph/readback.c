/*
 * readback.c — glesc_readback: small results read without waiting for the
 * work submitted after them. A readback owns a host-readable pool buffer
 * (GL_USAGE_READBACK) and a fence: starting it copies the tensor's bytes
 * into that buffer on the GPU (after the shader writes before it) and
 * places the fence behind the copy; finishing it waits for that fence only
 * and maps the buffer, which no later work touches, so a pipeline can queue
 * the next step before it reads this one's result.
 *
 * Where the driver has GL_EXT_buffer_storage the buffer is a persistently
 * mapped, coherent one in host memory instead (gl_read_staging_create):
 * finishing then waits for the fence and copies from the mapping, with no
 * map or unmap call (a map of a buffer the GPU wrote may copy it first and
 * wait once more). GLESC_READBACK=map keeps the pool buffer and the map.
 */
#include <string.h>

#include "graph/graph.h"

struct glesc_readback {
    glesc_context *ctx;
    gl_buffer *buf;     /* the map path's */
    gl_staging staging; /* the persistent path's (id 0: none yet) */
    bool on_staging;    /* the queued copy went to staging */
    GLsync fence;       /* behind the queued copy; 0: none queued */
    uint64_t issued;    /* dispatches issued before the fence */
    uint64_t size;
};

GLESC_API glesc_status glesc_readback_create(glesc_context *ctx, glesc_readback **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_readback_create: NULL out");
    *out = NULL;
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_readback_create: NULL context");
    glesc_readback *rb = core_calloc(1, sizeof *rb);
    if (!rb)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "glesc_readback_create");
    rb->ctx = ctx;
    *out = rb;
    return GLESC_OK;
}

static void drop_fence(glesc_readback *rb)
{
    if (rb->fence)
        glDeleteSync(rb->fence);
    rb->fence = 0;
}

GLESC_API void glesc_readback_destroy(glesc_readback *rb)
{
    if (!rb)
        return;
    if (rb->buf || rb->fence || rb->staging.id) {
        gl_context_bind_for_free(rb->ctx, "glesc_readback_destroy");
        drop_fence(rb);
        gl_pool_release(rb->ctx, rb->buf);
        gl_staging_destroy(rb->ctx, &rb->staging);
    }
    core_free(rb);
}

/* Copies go to a persistently mapped buffer where the driver offers one
 * (and GLESC_READBACK is not "map"). */
static bool persistent(const glesc_context *ctx)
{
    const char *e = core_env("GLESC_READBACK");
    return ctx->caps.has_buffer_storage && !(e && !strcmp(e, "map"));
}

GLESC_API glesc_status glesc_readback_start(glesc_readback *rb, glesc_tensor *t)
{
    if (!rb || !t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_readback_start: NULL readback or tensor");
    glesc_context *ctx = rb->ctx;
    core_err_reset(&ctx->err);
    if (t->ctx != ctx)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_readback_start: the tensor belongs to another context");
    glesc_tensor *o = t->owner;
    if (!graph_dtype_ok(t->dtype) || !graph_is_contiguous(t))
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "glesc_readback_start: a %s tensor %s: only contiguous f32, f16, "
                            "bf16 or i32 tensors",
                            glesc_dtype_name(t->dtype), GRAPH_SH(t));
    if (!o->live || o->st.n_chunks != 1)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "glesc_readback_start: the tensor (%s) holds no values in one "
                            "storage block: read inputs, persistent tensors and outputs of the "
                            "last compute",
                            glesc_op_name(t->op));
    glesc_status st = gl_context_bind(ctx, "glesc_readback_start");
    if (st != GLESC_OK)
        return st;
    uint64_t size = graph_nbytes(t);
    drop_fence(rb);
    rb->on_staging = persistent(ctx);
    if (rb->on_staging) {
        if (rb->staging.id && rb->staging.size < size)
            gl_staging_destroy(ctx, &rb->staging);
        if (!rb->staging.id &&
            (st = gl_read_staging_create(ctx, gl_pool_size_class(size), &rb->staging)) != GLESC_OK)
            return st;
        st = gl_copy_to_staging(ctx, o->st.chunks[0], t->offs, &rb->staging, 0, size);
    } else {
        if (rb->buf && rb->buf->size < size) {
            gl_pool_release(ctx, rb->buf);
            rb->buf = NULL;
        }
        if (!rb->buf && (st = gl_pool_acquire(ctx, size, GL_USAGE_READBACK, &rb->buf)) != GLESC_OK)
            return st;
        st = gl_buffer_copy(ctx, o->st.chunks[0], t->offs, rb->buf, 0, size);
    }
    if (st != GLESC_OK || (st = gl_sync_fence(ctx, &rb->fence, &rb->issued)) != GLESC_OK) {
        rb->fence = 0;
        return st;
    }
    /* the copy and its fence go to the GPU now: a wait for this fence
     * alone never waits for work queued behind it to be flushed */
    glFlush();
    rb->size = size;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_readback_finish(glesc_readback *rb, void *dst, size_t size)
{
    if (!rb || !dst)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_readback_finish: NULL readback or destination");
    glesc_context *ctx = rb->ctx;
    core_err_reset(&ctx->err);
    if (!rb->fence)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "glesc_readback_finish: no copy is queued (glesc_readback_start)");
    if (size != rb->size)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_readback_finish: %zu bytes asked, the copy holds %llu", size,
                            (unsigned long long)rb->size);
    glesc_status st = gl_context_bind(ctx, "glesc_readback_finish");
    if (st != GLESC_OK)
        return st;
    if (rb->on_staging) {
        st = gl_sync_wait(ctx, rb->fence, rb->issued, 120ull * 1000000000ull);
        if (st == GLESC_OK)
            memcpy(dst, rb->staging.ptr, size);
    } else {
        st = gl_buffer_download_after(ctx, rb->fence, rb->issued, rb->buf, 0, dst, size);
    }
    drop_fence(rb);
    return st;
}
