/*
 * readback.c — glesc_readback: small results read without waiting for the
 * work submitted after them. A readback owns a host-readable pool buffer
 * (GL_USAGE_READBACK) and a fence: starting it copies the tensor's bytes
 * into that buffer on the GPU (after the shader writes before it) and
 * places the fence behind the copy; finishing it waits for that fence only
 * and maps the buffer, which no later work touches, so a pipeline can queue
 * the next step before it reads this one's result.
 */
#include <string.h>

#include "graph/graph.h"

struct glesc_readback {
    glesc_context *ctx;
    gl_buffer *buf;
    GLsync fence;    /* behind the queued copy; 0: none queued */
    uint64_t issued; /* dispatches issued before the fence */
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
    if (rb->buf || rb->fence) {
        gl_context_bind_for_free(rb->ctx, "glesc_readback_destroy");
        drop_fence(rb);
        gl_pool_release(rb->ctx, rb->buf);
    }
    core_free(rb);
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
    if (rb->buf && rb->buf->size < size) {
        gl_pool_release(ctx, rb->buf);
        rb->buf = NULL;
    }
    if (!rb->buf && (st = gl_pool_acquire(ctx, size, GL_USAGE_READBACK, &rb->buf)) != GLESC_OK)
        return st;
    if ((st = gl_buffer_copy(ctx, o->st.chunks[0], t->offs, rb->buf, 0, size)) != GLESC_OK ||
        (st = gl_sync_fence(ctx, &rb->fence, &rb->issued)) != GLESC_OK) {
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
    st = gl_buffer_download_after(ctx, rb->fence, rb->issued, rb->buf, 0, dst, size);
    drop_fence(rb);
    return st;
}
