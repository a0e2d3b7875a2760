/*
 * exec.c — the executor primitive: host<->buffer copies, dispatches with
 * barriers placed only where a dependency needs one, fences, GPU timers.
 *
 * Barrier placement. Shader writes to storage buffers are incoherent: a later
 * dispatch sees them only after glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT),
 * and host copies/maps only after GL_BUFFER_UPDATE_BARRIER_BIT. The context
 * counts barriers in two epochs; each buffer remembers in which epoch it was
 * last written or read by a shader. A dispatch needs a storage barrier when
 * it reads a buffer written in the current epoch (read after write), or
 * writes one read or written in it (write after read/write). A host copy
 * needs an update barrier when the buffer was written since the last one.
 *
 * Host writes. GL promises that a buffer update (glBufferSubData) issued
 * after a dispatch does not change what that dispatch reads, but NVIDIA's
 * driver (580, H200) lets the update land while an earlier dispatch that
 * reads the same memory is still running: a prompt in several batches
 * (each batch's parameter blocks and inputs written while the previous
 * batch runs) gave logits off by up to 0.9 there, exact with a glFinish
 * after every dispatch, still wrong with a full glMemoryBarrier before
 * every dispatch (llvmpipe runs each dispatch as it is issued and never
 * shows it). So every host write to memory a dispatch used goes through
 * gl_host_write_guard: dispatches are numbered (ctx->dispatches), a buffer
 * and a parameter block remember the last dispatch that used them, a
 * completed wait records how many dispatches had been issued
 * (ctx->synced), and a write to memory used after that waits for the GPU
 * first. A decode step reads its logits back, so its writes find the GPU
 * idle and never wait; a prompt in batches writes a batch's inputs into
 * tensors the batch before the last one read, after waiting for that
 * batch's fence alone (llm/session.c), so batches chain without a wait. A
 * pipelined greedy step (the next one queued before the last one's token
 * is read) never waits either: a readback's fence counts the dispatches
 * before it as done (gl_sync_wait), the step writes only memory the step
 * still running does not use, and a kernel recorded again writes its
 * parameter blocks into a second region (compute/exec.c).
 *
 * Flushes. A driver may keep submitted commands on the host until a flush or
 * a wait: a decode step's ~100 dispatches would then reach the GPU only when
 * the host asks for the logits, and the GPU idles while the host builds and
 * records the step. After a host wait the executor flushes after the 1st
 * dispatch, then after 2, 4, ... up to flush_max dispatches, so the GPU
 * starts at once and the host keeps ahead of it with few flushes
 * (GLESC_FLUSH_EVERY sets flush_max, default 16; 0 turns this off).
 * GLESC_BARRIERS=all|none (a measurement aid) sets the storage barriers'
 * bits to all of them, or leaves the barriers out (wrong results).
 */
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

static void storage_barrier(glesc_context *ctx)
{
    if (ctx->barrier_bits) /* 0: GLESC_BARRIERS=none, a measurement */
        glMemoryBarrier(ctx->barrier_bits);
    ctx->ssbo_epoch++;
    ctx->barriers++;
}

static void update_barrier_if_written(glesc_context *ctx, gl_buffer *buf)
{
    if (buf->write_update_epoch == ctx->update_epoch) {
        glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
        ctx->update_epoch++;
        ctx->barriers++;
    }
}

static void flush_reset(glesc_context *ctx)
{
    ctx->since_flush = 0;
    ctx->flush_at = 1;
}

static void flush_paced(glesc_context *ctx)
{
    if (!ctx->flush_max || ++ctx->since_flush < ctx->flush_at)
        return;
    glFlush();
    ctx->since_flush = 0;
    ctx->flush_at = ctx->flush_at * 2 < ctx->flush_max ? ctx->flush_at * 2 : ctx->flush_max;
}

static glesc_status check_range(glesc_context *ctx, const char *what, gl_buffer *buf,
                                uint64_t offset, uint64_t size)
{
    if (!buf || offset > buf->size || size > buf->size - offset)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s: range [%llu, +%llu) outside the buffer of %llu bytes", what,
                            (unsigned long long)offset, (unsigned long long)size,
                            (unsigned long long)(buf ? buf->size : 0));
    return GLESC_OK;
}

glesc_status gl_buffer_upload(glesc_context *ctx, gl_buffer *buf, uint64_t offset, const void *data,
                              uint64_t size)
{
    glesc_status st = check_range(ctx, "buffer upload", buf, offset, size);
    if (st != GLESC_OK || size == 0)
        return st;
    if ((st = gl_host_write_guard(ctx, buf->last_use, "buffer upload")) != GLESC_OK)
        return st;
    update_barrier_if_written(ctx, buf);
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf->id);
    glBufferSubData(GL_COPY_WRITE_BUFFER, (GLintptr)offset, (GLsizeiptr)size, data);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    buf->defined = true;
    return gl_check(ctx, "glBufferSubData (upload)");
}

glesc_status gl_buffer_clear(glesc_context *ctx, gl_buffer *buf, uint64_t offset, uint64_t size)
{
    glesc_status st = check_range(ctx, "buffer clear", buf, offset, size);
    if (st != GLESC_OK || size == 0)
        return st;
    /* GLES has no glClearBufferSubData: upload zeros in bounded pieces. */
    static const unsigned char zeros[65536];
    for (uint64_t done = 0; done < size && st == GLESC_OK;) {
        uint64_t n = CORE_MIN(size - done, (uint64_t)sizeof zeros);
        st = gl_buffer_upload(ctx, buf, offset + done, zeros, n);
        done += n;
    }
    return st;
}

glesc_status gl_sync_fence(glesc_context *ctx, GLsync *out, uint64_t *issued)
{
    *issued = ctx->dispatches;
    *out = glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
    if (*out)
        return GLESC_OK;
    glesc_status st = gl_check(ctx, "glFenceSync");
    return st != GLESC_OK ? st : core_err_set(&ctx->err, GLESC_ERROR_GL, "glFenceSync: no sync");
}

static glesc_status wait_fence(glesc_context *ctx, uint64_t timeout_ns)
{
    uint64_t issued;
    GLsync sync;
    glesc_status st = gl_sync_fence(ctx, &sync, &issued);
    if (st != GLESC_OK)
        return st;
    st = gl_sync_wait(ctx, sync, issued, timeout_ns);
    glDeleteSync(sync);
    return st;
}

glesc_status gl_sync_wait(glesc_context *ctx, GLsync sync, uint64_t issued, uint64_t timeout_ns)
{
    uint64_t start = core_time_ns();
    glesc_status st = GLESC_OK;
    for (;;) {
        GLenum r = glClientWaitSync(sync, GL_SYNC_FLUSH_COMMANDS_BIT, 100000000ull);
        if (r == GL_ALREADY_SIGNALED || r == GL_CONDITION_SATISFIED)
            break;
        if (r == GL_WAIT_FAILED) {
            st = gl_check(ctx, "glClientWaitSync");
            if (st == GLESC_OK)
                st = core_err_set(&ctx->err, GLESC_ERROR_GL, "glClientWaitSync failed");
            break;
        }
        if (core_time_ns() - start > timeout_ns) {
            st = core_err_set(&ctx->err, GLESC_ERROR_TIMEOUT,
                              "the GPU did not finish within %.1f s", (double)timeout_ns / 1e9);
            break;
        }
    }
    flush_reset(ctx);
    if (st == GLESC_OK && issued > ctx->synced)
        ctx->synced = issued;
    /* The work finished (a lost context signals its fences too): was it reset? */
    if (st == GLESC_OK)
        st = gl_reset_check(ctx, "waiting for the GPU");
    return st;
}

glesc_status gl_finish(glesc_context *ctx, uint64_t timeout_ns)
{
    return wait_fence(ctx, timeout_ns);
}

glesc_status gl_host_write_guard(glesc_context *ctx, uint64_t last_use, const char *what)
{
    if (last_use <= ctx->synced)
        return GLESC_OK;
    ctx->write_waits++;
    glesc_status st = wait_fence(ctx, 120ull * 1000000000ull);
    if (st != GLESC_OK)
        core_err_prefix(&ctx->err, "%s", what);
    return st;
}

static glesc_status map_copy(glesc_context *ctx, gl_buffer *buf, uint64_t offset, void *dst,
                             uint64_t size);

glesc_status gl_buffer_download(glesc_context *ctx, gl_buffer *buf, uint64_t offset, void *dst,
                                uint64_t size)
{
    glesc_status st = check_range(ctx, "buffer download", buf, offset, size);
    if (st != GLESC_OK || size == 0)
        return st;
    update_barrier_if_written(ctx, buf);
    if ((st = wait_fence(ctx, 120ull * 1000000000ull)) != GLESC_OK)
        return st;
    return map_copy(ctx, buf, offset, dst, size);
}

glesc_status gl_buffer_download_after(glesc_context *ctx, GLsync sync, uint64_t issued,
                                      gl_buffer *buf, uint64_t offset, void *dst, uint64_t size)
{
    glesc_status st = check_range(ctx, "buffer download", buf, offset, size);
    if (st == GLESC_OK)
        st = gl_sync_wait(ctx, sync, issued, 120ull * 1000000000ull);
    if (st != GLESC_OK || size == 0)
        return st;
    return map_copy(ctx, buf, offset, dst, size);
}

glesc_status gl_buffer_copy(glesc_context *ctx, gl_buffer *src, uint64_t src_offset, gl_buffer *dst,
                            uint64_t dst_offset, uint64_t size)
{
    glesc_status st = check_range(ctx, "buffer copy (source)", src, src_offset, size);
    if (st == GLESC_OK)
        st = check_range(ctx, "buffer copy (destination)", dst, dst_offset, size);
    if (st != GLESC_OK || size == 0)
        return st;
    update_barrier_if_written(ctx, src);
    update_barrier_if_written(ctx, dst);
    glBindBuffer(GL_COPY_READ_BUFFER, src->id);
    glBindBuffer(GL_COPY_WRITE_BUFFER, dst->id);
    glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, (GLintptr)src_offset,
                        (GLintptr)dst_offset, (GLsizeiptr)size);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    dst->defined = true;
    return gl_check(ctx, "glCopyBufferSubData");
}

/* Maps [offset, +size) of buf for reading and copies it to dst (the GPU's
 * writes to it are complete). */
static glesc_status map_copy(glesc_context *ctx, gl_buffer *buf, uint64_t offset, void *dst,
                             uint64_t size)
{
    glesc_status st;
    glBindBuffer(GL_COPY_READ_BUFFER, buf->id);
    const void *p =
        glMapBufferRange(GL_COPY_READ_BUFFER, (GLintptr)offset, (GLsizeiptr)size, GL_MAP_READ_BIT);
    if (!p) {
        glBindBuffer(GL_COPY_READ_BUFFER, 0);
        st = gl_check(ctx, "glMapBufferRange (download)");
        return st != GLESC_OK ? st
                              : core_err_set(&ctx->err, GLESC_ERROR_GL,
                                             "glMapBufferRange (download) returned NULL");
    }
    memcpy(dst, p, (size_t)size);
    GLboolean ok = glUnmapBuffer(GL_COPY_READ_BUFFER);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    if (!ok)
        return core_err_set(&ctx->err, GLESC_ERROR_GL,
                            "glUnmapBuffer: the buffer's contents were lost while mapped");
    return gl_check(ctx, "download");
}

/* ---- Bulk uploads ---- */

gl_upload_path gl_upload_path_get(const glesc_context *ctx)
{
    const char *e = getenv("GLESC_UPLOAD");
    if (e && !strcmp(e, "subdata"))
        return GL_UPLOAD_SUBDATA;
    if (e && !strcmp(e, "map"))
        return GL_UPLOAD_MAP;
    if (ctx->caps.has_buffer_storage && ((e && !strcmp(e, "staging")) || !ctx->caps.software))
        return GL_UPLOAD_STAGING;
    return GL_UPLOAD_MAP;
}

const char *gl_upload_path_name(gl_upload_path p)
{
    static const char *const names[] = {"map", "staging", "subdata"};
    return (unsigned)p < CORE_ARRAY_LEN(names) ? names[p] : "?";
}

glesc_status gl_buffer_map_write(glesc_context *ctx, gl_buffer *buf, void **out)
{
    *out = NULL;
    glesc_status gst = gl_host_write_guard(ctx, buf->last_use, "buffer map");
    if (gst != GLESC_OK)
        return gst;
    update_barrier_if_written(ctx, buf);
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf->id);
    void *p = glMapBufferRange(GL_COPY_WRITE_BUFFER, 0, (GLsizeiptr)buf->size,
                               GL_MAP_WRITE_BIT | GL_MAP_INVALIDATE_BUFFER_BIT);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    if (!p) {
        glesc_status st = gl_check(ctx, "glMapBufferRange (upload)");
        return st != GLESC_OK
                   ? st
                   : core_err_set(&ctx->err, GLESC_ERROR_GL,
                                  "glMapBufferRange (upload) of %llu bytes returned NULL",
                                  (unsigned long long)buf->size);
    }
    *out = p;
    return GLESC_OK;
}

glesc_status gl_buffer_unmap(glesc_context *ctx, gl_buffer *buf)
{
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf->id);
    GLboolean ok = glUnmapBuffer(GL_COPY_WRITE_BUFFER);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    glesc_status st = gl_check(ctx, "glUnmapBuffer (upload)");
    if (st == GLESC_OK && !ok)
        st = core_err_set(&ctx->err, GLESC_ERROR_GL,
                          "glUnmapBuffer: the buffer's contents were lost while mapped");
    buf->defined = true;
    return st;
}

glesc_status gl_staging_create(glesc_context *ctx, uint64_t size, gl_staging *out)
{
    memset(out, 0, sizeof *out);
    if (!ctx->fn.BufferStorageEXT)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "staging buffer: the driver lacks GL_EXT_buffer_storage");
    const GLbitfield flags = GL_MAP_WRITE_BIT | GL_MAP_PERSISTENT_BIT_EXT | GL_MAP_COHERENT_BIT_EXT;
    glGenBuffers(1, &out->id);
    glBindBuffer(GL_COPY_READ_BUFFER, out->id);
    ctx->fn.BufferStorageEXT(GL_COPY_READ_BUFFER, (GLsizeiptr)size, NULL,
                             flags | GL_CLIENT_STORAGE_BIT_EXT);
    out->ptr = glMapBufferRange(GL_COPY_READ_BUFFER, 0, (GLsizeiptr)size, flags);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    glesc_status st = gl_check(ctx, "glBufferStorageEXT (staging)");
    if (st == GLESC_OK && !out->ptr)
        st = core_err_set(&ctx->err, GLESC_ERROR_GL, "mapping a staging buffer returned NULL");
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "a staging buffer of %llu bytes", (unsigned long long)size);
        gl_staging_destroy(ctx, out);
        return st;
    }
    out->size = size;
    return GLESC_OK;
}

void gl_staging_destroy(glesc_context *ctx, gl_staging *s)
{
    if (s->id) {
        /* a persistent mapping ends with the buffer */
        gl_bound_forget(ctx, s->id);
        glDeleteBuffers(1, &s->id);
    }
    memset(s, 0, sizeof *s);
}

glesc_status gl_staging_copy(glesc_context *ctx, gl_staging *s, uint64_t offset, gl_buffer *buf,
                             uint64_t dst_offset, uint64_t size)
{
    glesc_status st = check_range(ctx, "staging copy", buf, dst_offset, size);
    if (st != GLESC_OK || size == 0)
        return st;
    /* a copy command, but one the driver may run beside an earlier
     * dispatch's reads as it does host updates ("Host writes") */
    if ((st = gl_host_write_guard(ctx, buf->last_use, "staging copy")) != GLESC_OK)
        return st;
    update_barrier_if_written(ctx, buf);
    glBindBuffer(GL_COPY_READ_BUFFER, s->id);
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf->id);
    glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, (GLintptr)offset,
                        (GLintptr)dst_offset, (GLsizeiptr)size);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    buf->defined = true;
    return gl_check(ctx, "glCopyBufferSubData (staging)");
}

glesc_status gl_read_staging_create(glesc_context *ctx, uint64_t size, gl_staging *out)
{
    memset(out, 0, sizeof *out);
    if (!ctx->fn.BufferStorageEXT)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "read staging buffer: the driver lacks GL_EXT_buffer_storage");
    const GLbitfield flags = GL_MAP_READ_BIT | GL_MAP_PERSISTENT_BIT_EXT | GL_MAP_COHERENT_BIT_EXT;
    glGenBuffers(1, &out->id);
    glBindBuffer(GL_COPY_WRITE_BUFFER, out->id);
    ctx->fn.BufferStorageEXT(GL_COPY_WRITE_BUFFER, (GLsizeiptr)size, NULL,
                             flags | GL_CLIENT_STORAGE_BIT_EXT);
    out->ptr = glMapBufferRange(GL_COPY_WRITE_BUFFER, 0, (GLsizeiptr)size, flags);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    glesc_status st = gl_check(ctx, "glBufferStorageEXT (read staging)");
    if (st == GLESC_OK && !out->ptr)
        st = core_err_set(&ctx->err, GLESC_ERROR_GL, "mapping a read staging buffer returned NULL");
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "a read staging buffer of %llu bytes", (unsigned long long)size);
        gl_staging_destroy(ctx, out);
        return st;
    }
    out->size = size;
    return GLESC_OK;
}

glesc_status gl_copy_to_staging(glesc_context *ctx, gl_buffer *buf, uint64_t offset, gl_staging *s,
                                uint64_t dst_offset, uint64_t size)
{
    glesc_status st = check_range(ctx, "copy to staging", buf, offset, size);
    if (st == GLESC_OK && (dst_offset > s->size || size > s->size - dst_offset))
        st = core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                          "copy to staging: %llu bytes at %llu do not fit %llu",
                          (unsigned long long)size, (unsigned long long)dst_offset,
                          (unsigned long long)s->size);
    if (st != GLESC_OK || size == 0)
        return st;
    update_barrier_if_written(ctx, buf);
    glBindBuffer(GL_COPY_READ_BUFFER, buf->id);
    glBindBuffer(GL_COPY_WRITE_BUFFER, s->id);
    glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, (GLintptr)offset,
                        (GLintptr)dst_offset, (GLsizeiptr)size);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    return gl_check(ctx, "glCopyBufferSubData (to staging)");
}

GLsync gl_fence_insert(glesc_context *ctx)
{
    GLsync f = glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
    if (!f) {
        glesc_status st = gl_check(ctx, "glFenceSync");
        if (st == GLESC_OK)
            core_err_set(&ctx->err, GLESC_ERROR_GL, "glFenceSync: no sync");
    }
    return f;
}

glesc_status gl_fence_wait(glesc_context *ctx, GLsync fence, uint64_t timeout_ns, bool *done)
{
    GLenum r = glClientWaitSync(fence, GL_SYNC_FLUSH_COMMANDS_BIT, timeout_ns);
    *done = r == GL_ALREADY_SIGNALED || r == GL_CONDITION_SATISFIED;
    if (r != GL_WAIT_FAILED)
        return GLESC_OK;
    glesc_status st = gl_check(ctx, "glClientWaitSync");
    return st != GLESC_OK ? st : core_err_set(&ctx->err, GLESC_ERROR_GL, "glClientWaitSync failed");
}

void gl_fence_delete(GLsync fence)
{
    if (fence)
        glDeleteSync(fence);
}

/* ---- Parameter blocks ---- */

uint64_t gl_param_block_size(int n_params)
{
    /* std140: 4-byte scalars back to back; the block rounds up to a vec4 */
    return ((uint64_t)n_params * 4 + 15) & ~(uint64_t)15;
}

uint64_t gl_param_block_stride(const glesc_context *ctx, int n_params)
{
    uint64_t a = (uint64_t)ctx->caps.uniform_buffer_offset_alignment;
    return (gl_param_block_size(n_params) + a - 1) / a * a;
}

void gl_param_block_pack(const gl_param *params, int n_params, void *out)
{
    uint32_t *w = out;
    for (int i = 0; i < n_params; i++)
        memcpy(&w[i], &params[i].v, 4); /* int, uint and float are all 32 bits */
    for (uint64_t i = (uint64_t)n_params; i < gl_param_block_size(n_params) / 4; i++)
        w[i] = 0;
}

glesc_status gl_param_buffer_create(glesc_context *ctx, uint64_t size, GLuint *out)
{
    *out = 0;
    glGenBuffers(1, out);
    glBindBuffer(GL_COPY_WRITE_BUFFER, *out);
    glBufferData(GL_COPY_WRITE_BUFFER, (GLsizeiptr)size, NULL, GL_DYNAMIC_DRAW);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    glesc_status st = gl_check(ctx, "glBufferData (parameter blocks)");
    if (st != GLESC_OK) {
        gl_param_buffer_destroy(ctx, *out);
        *out = 0;
        core_err_prefix(&ctx->err, "a uniform buffer of %llu bytes", (unsigned long long)size);
    }
    return st;
}

void gl_param_buffer_destroy(glesc_context *ctx, GLuint buf)
{
    if (!buf)
        return;
    gl_bound_forget(ctx, buf);
    glDeleteBuffers(1, &buf);
}

glesc_status gl_param_buffer_write(glesc_context *ctx, GLuint buf, uint64_t offset,
                                   const void *data, uint64_t size)
{
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf);
    glBufferSubData(GL_COPY_WRITE_BUFFER, (GLintptr)offset, (GLsizeiptr)size, data);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    return ctx->debug ? gl_check(ctx, "glBufferSubData (parameter blocks)") : GLESC_OK;
}

glesc_status gl_param_buffer_copy(glesc_context *ctx, GLuint from, GLuint to, uint64_t size)
{
    glBindBuffer(GL_COPY_READ_BUFFER, from);
    glBindBuffer(GL_COPY_WRITE_BUFFER, to);
    glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, 0, 0, (GLsizeiptr)size);
    glBindBuffer(GL_COPY_READ_BUFFER, 0);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    return gl_check(ctx, "glCopyBufferSubData (parameter blocks)");
}

/* ---- State cache ----
 * A decode step dispatches the same few programs with the same buffers over
 * and over; GL validates every bind again. The context remembers what the
 * executor bound last (program, storage ranges, parameter block) and skips
 * a bind that would change nothing. Only the executor binds these points,
 * so the cache stays true as long as a deleted buffer is forgotten
 * (gl_bound_forget: deleting unbinds it, and GL may hand its name to the
 * next buffer) and, on a context adopted from an application, everything
 * is forgotten whenever the application may have run GL code (each glesc
 * call's entry, the abort callback: gl_bound_reset). A program stays
 * current while it is deleted, so its name cannot come back while the
 * cache holds it. */

void gl_bound_forget(glesc_context *ctx, GLuint buf)
{
    for (int i = 0; i < GL_BOUND_SSBOS; i++)
        if (ctx->bound.ssbo[i].buf == buf)
            ctx->bound.ssbo[i] = (gl_bound){0, 0, 0};
    if (ctx->bound.params.buf == buf)
        ctx->bound.params = (gl_bound){0, 0, 0};
}

void gl_bound_reset(glesc_context *ctx)
{
    memset(&ctx->bound, 0, sizeof ctx->bound);
}

static void bind_range(GLenum target, GLuint index, gl_bound *cache, GLuint buf, uint64_t offset,
                       uint64_t size)
{
    if (cache && cache->buf == buf && cache->offset == offset && cache->size == size)
        return;
    glBindBufferRange(target, index, buf, (GLintptr)offset, (GLsizeiptr)size);
    if (cache)
        *cache = (gl_bound){buf, offset, size};
}

glesc_status gl_dispatch_block(glesc_context *ctx, const gl_program *prog,
                               const gl_binding *bindings, int n_bindings, GLuint buf,
                               uint64_t offset, uint64_t size, const uint32_t groups[3])
{
    const glesc_caps *c = &ctx->caps;
    if (n_bindings > c->max_compute_storage_blocks)
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "dispatch binds %d storage buffers; the device allows %d", n_bindings,
                            c->max_compute_storage_blocks);
    for (int i = 0; i < 3; i++)
        if (groups[i] > (uint32_t)c->max_workgroup_count[i])
            return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                                "dispatch of %u workgroups in dimension %d exceeds the device's "
                                "%d",
                                groups[i], i, c->max_workgroup_count[i]);
    if (!groups[0] || !groups[1] || !groups[2])
        return GLESC_OK;

    bool need_barrier = false;
    for (int i = 0; i < n_bindings; i++) {
        const gl_binding *b = &bindings[i];
        uint64_t bsize = b->size ? b->size : b->buf->size - b->offset;
        glesc_status st = check_range(ctx, "storage binding", b->buf, b->offset, bsize);
        if (st != GLESC_OK)
            return st;
        if (b->offset % (uint64_t)c->storage_buffer_offset_alignment)
            return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                                "storage binding %d: offset %llu is not a multiple of the "
                                "device's alignment %d",
                                i, (unsigned long long)b->offset,
                                c->storage_buffer_offset_alignment);
        if (b->buf->write_ssbo_epoch == ctx->ssbo_epoch)
            need_barrier = true; /* RAW or WAW */
        if (b->write && b->buf->read_ssbo_epoch == ctx->ssbo_epoch)
            need_barrier = true; /* WAR */
    }
    if (need_barrier)
        storage_barrier(ctx);

    if (ctx->bound.program != prog->id) {
        glUseProgram(prog->id);
        ctx->bound.program = prog->id;
    }
    for (int i = 0; i < n_bindings; i++) {
        const gl_binding *b = &bindings[i];
        uint64_t bsize = b->size ? b->size : b->buf->size - b->offset;
        bind_range(GL_SHADER_STORAGE_BUFFER, (GLuint)i,
                   i < GL_BOUND_SSBOS ? &ctx->bound.ssbo[i] : NULL, b->buf->id, b->offset, bsize);
    }
    if (buf)
        bind_range(GL_UNIFORM_BUFFER, 0, &ctx->bound.params, buf, offset, size);
    glDispatchCompute(groups[0], groups[1], groups[2]);
    ctx->dispatches++;
    flush_paced(ctx);
    for (int i = 0; i < n_bindings; i++) {
        gl_buffer *bb = bindings[i].buf;
        bb->last_use = ctx->dispatches;
        if (bindings[i].write) {
            bb->write_ssbo_epoch = ctx->ssbo_epoch;
            bb->write_update_epoch = ctx->update_epoch;
            bb->defined = true;
        } else {
            bb->read_ssbo_epoch = ctx->ssbo_epoch;
        }
    }
    if (ctx->debug)
        return gl_check(ctx, "glDispatchCompute");
    return GLESC_OK;
}

#define PARAM_RING_SIZE (64u << 10)
#define PARAM_MAX_WORDS 1024 /* GLES guarantees uniform blocks of 16 KiB */

glesc_status gl_dispatch(glesc_context *ctx, const gl_program *prog, const gl_binding *bindings,
                         int n_bindings, const gl_param *params, int n_params,
                         const uint32_t groups[3])
{
    if (n_params <= 0)
        return gl_dispatch_block(ctx, prog, bindings, n_bindings, 0, 0, 0, groups);
    uint32_t words[PARAM_MAX_WORDS];
    uint64_t size = gl_param_block_size(n_params), stride = gl_param_block_stride(ctx, n_params);
    if (size > sizeof words)
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "dispatch with %d parameters (at most %d)", n_params, PARAM_MAX_WORDS);
    if (!ctx->param_ring) {
        glesc_status st = gl_param_buffer_create(ctx, PARAM_RING_SIZE, &ctx->param_ring);
        if (st != GLESC_OK)
            return st;
        ctx->param_ring_size = PARAM_RING_SIZE;
    }
    /* Wrapping around overwrites blocks that dispatches since the last
     * wait may still read ("Host writes"): wait for those first. */
    if (ctx->param_ring_pos + stride > ctx->param_ring_size) {
        glesc_status st = gl_host_write_guard(ctx, ctx->param_ring_use, "parameter ring");
        if (st != GLESC_OK)
            return st;
        ctx->param_ring_pos = 0;
    }
    uint64_t off = ctx->param_ring_pos;
    ctx->param_ring_pos += stride;
    gl_param_block_pack(params, n_params, words);
    glesc_status st = gl_param_buffer_write(ctx, ctx->param_ring, off, words, size);
    if (st == GLESC_OK)
        st = gl_dispatch_block(ctx, prog, bindings, n_bindings, ctx->param_ring, off, size, groups);
    ctx->param_ring_use = ctx->dispatches;
    return st;
}

/* ---- timers ---- */

glesc_status gl_timer_begin(glesc_context *ctx, gl_timer *t)
{
    memset(t, 0, sizeof *t);
    t->gpu = ctx->caps.has_timer_query && !ctx->timer_cpu;
    t->running = true;
    if (t->gpu) {
        GLint disjoint;
        glGetIntegerv(GL_GPU_DISJOINT_EXT, &disjoint); /* reading clears the flag */
        ctx->fn.GenQueriesEXT(1, &t->query);
        ctx->fn.BeginQueryEXT(GL_TIME_ELAPSED_EXT, t->query);
        return gl_check(ctx, "glBeginQueryEXT(GL_TIME_ELAPSED_EXT)");
    }
    glFinish();
    t->cpu_start = core_time_ns();
    return GLESC_OK;
}

glesc_status gl_timer_end(glesc_context *ctx, gl_timer *t)
{
    if (!t->running)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE, "timer was not started");
    t->running = false;
    if (t->gpu) {
        ctx->fn.EndQueryEXT(GL_TIME_ELAPSED_EXT);
        return gl_check(ctx, "glEndQueryEXT");
    }
    glFinish();
    t->cpu_ns = core_time_ns() - t->cpu_start;
    return GLESC_OK;
}

glesc_status gl_timer_result(glesc_context *ctx, gl_timer *t, uint64_t *ns)
{
    if (!t->gpu) {
        *ns = t->cpu_ns;
        return GLESC_OK;
    }
    GLuint64 v = 0;
    ctx->fn.GetQueryObjectui64vEXT(t->query, GL_QUERY_RESULT_EXT, &v);
    GLint disjoint = 0;
    glGetIntegerv(GL_GPU_DISJOINT_EXT, &disjoint);
    *ns = (uint64_t)v;
    if (disjoint)
        return core_err_set(&ctx->err, GLESC_ERROR_GL,
                            "GPU timer: a disjoint event (clock change, context switch) made the "
                            "measurement invalid");
    return gl_check(ctx, "glGetQueryObjectui64vEXT");
}

void gl_timer_release(glesc_context *ctx, gl_timer *t)
{
    if (t->gpu && t->query)
        ctx->fn.DeleteQueriesEXT(1, &t->query);
    t->query = 0;
}
